//! An HTTPS client for tests: one request over TLS to an address, with the SNI and `Host` a test chooses, trusting
//! only the roots it is given, over HTTP/2 or HTTP/1.1 as ALPN settles; and the DNS test server's HTTP API.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, Result};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};

/// What came back.
#[derive(Debug)]
pub struct Fetched {
    pub status: u16,
    pub version: http::Version,
    pub headers: http::HeaderMap,
    pub body: Bytes,
    /// The leaf certificate the server presented (DER).
    pub leaf: Vec<u8>,
}

/// A client configuration trusting only the PEM roots in `roots_pem`, offering `alpn`.
pub fn client_config(roots_pem: &str, alpn: &[&[u8]]) -> Result<Arc<rustls::ClientConfig>> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(roots_pem.as_bytes()) {
        roots.add(cert.context("parse a root")?)?;
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(config))
}

/// `GET path` on `addr` over TLS, with `host` as SNI and `Host`/`:authority`.
pub async fn get(
    addr: SocketAddr,
    host: &str,
    config: Arc<rustls::ClientConfig>,
    path: &str,
) -> Result<Fetched> {
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let name = ServerName::try_from(host.to_owned())?;
    let tls = tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await
        .context("TLS handshake")?;
    let leaf = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.to_vec())
        .unwrap_or_default();
    let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
    let io = TokioIo::new(tls);
    let uri = format!("https://{host}{path}");
    let res = if h2 {
        let (mut sender, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), io).await?;
        tokio::spawn(conn);
        let req = http::Request::get(uri).body(Empty::<Bytes>::new())?;
        sender.send_request(req).await?
    } else {
        let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await?;
        tokio::spawn(conn);
        let req = http::Request::get(path)
            .header("host", host)
            .body(Empty::<Bytes>::new())?;
        sender.send_request(req).await?
    };
    let (parts, body) = res.into_parts();
    Ok(Fetched {
        status: parts.status.as_u16(),
        version: parts.version,
        headers: parts.headers,
        body: body.collect().await?.to_bytes(),
        leaf,
    })
}

/// The DNS test server (pebble-challtestsrv) the verification resolver asks, from `hack/pebble.sh env`.
pub struct TestDns {
    api: String,
    http: reqwest::Client,
}

impl TestDns {
    /// The server named by `SLIPWAY_TEST_DNS_API`.
    pub fn from_env() -> Result<Self> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let api = std::env::var("SLIPWAY_TEST_DNS_API")
            .context("SLIPWAY_TEST_DNS_API is not set: start hack/pebble.sh (hack/test.sh does)")?;
        Ok(Self {
            api,
            http: reqwest::Client::new(),
        })
    }

    /// Calls one of its routes (`set-txt`, `add-a`, `clear-a`, `set-cname`, `set-servfail`, ...).
    pub async fn call(&self, route: &str, body: serde_json::Value) -> Result<()> {
        let res = self
            .http
            .post(format!("{}/{route}", self.api))
            .body(body.to_string())
            .send()
            .await?;
        anyhow::ensure!(res.status().is_success(), "{route}: {}", res.status());
        Ok(())
    }

    /// Sets the TXT record at `host`.
    pub async fn txt(&self, host: &str, value: &str) -> Result<()> {
        self.call(
            "set-txt",
            serde_json::json!({"host": format!("{host}."), "value": value}),
        )
        .await
    }

    /// Sets the A records of `host`.
    pub async fn a(&self, host: &str, addresses: &[&str]) -> Result<()> {
        self.call(
            "add-a",
            serde_json::json!({"host": format!("{host}."), "addresses": addresses}),
        )
        .await
    }

    /// Makes every lookup of `host` answer SERVFAIL, or stops that.
    pub async fn servfail(&self, host: &str, on: bool) -> Result<()> {
        let route = if on { "set-servfail" } else { "clear-servfail" };
        self.call(route, serde_json::json!({"host": format!("{host}.")}))
            .await
    }
}

/// The root Pebble signs certificates under (fetched from its management port), PEM.
pub async fn acme_root() -> Result<String> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let management = std::env::var("SLIPWAY_TEST_ACME_MANAGEMENT")
        .context("SLIPWAY_TEST_ACME_MANAGEMENT is not set: start hack/pebble.sh")?;
    let listener_ca = std::fs::read(std::env::var("SLIPWAY_TEST_ACME_ROOT_CA")?)?;
    let client = reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(&listener_ca)?])
        .build()?;
    Ok(client
        .get(format!("{management}/roots/0"))
        .send()
        .await?
        .error_for_status()?
        .text()
        .await?)
}
