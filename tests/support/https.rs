//! HTTPS and custom domains for tests: a client making one request over TLS to an address, with the SNI and `Host`
//! a test chooses, trusting only the roots it is given, over HTTP/2 or HTTP/1.1 as ALPN settles; the DNS test
//! server's HTTP API; the operator's domain settings against Pebble; and an edge serving HTTP and HTTPS.

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

/// A client configuration trusting only the PEM roots in `roots_pem`, offering `alpn`, without session resumption.
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
    // Every request makes a full handshake, so the certificate read is the one served now (a resumed session
    // would report the one of its first handshake).
    config.resumption = rustls::client::Resumption::disabled();
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
        let api = std::env::var("SLIPWAY_TEST_DNS_API")
            .context("SLIPWAY_TEST_DNS_API is not set: start hack/pebble.sh (hack/test.sh does)")?;
        Ok(Self::at(api))
    }

    /// The server whose HTTP API is at `api` (`http://host:port`).
    pub fn at(api: String) -> Self {
        let _ = rustls::crypto::ring::default_provider().install_default();
        Self {
            api,
            http: reqwest::Client::new(),
        }
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
    let management = std::env::var("SLIPWAY_TEST_ACME_MANAGEMENT")
        .context("SLIPWAY_TEST_ACME_MANAGEMENT is not set: start hack/pebble.sh")?;
    acme_root_at(&management, &std::env::var("SLIPWAY_TEST_ACME_ROOT_CA")?).await
}

/// [`acme_root`] of the Pebble whose management port is at `management`, its listener's CA in the PEM file
/// `listener_ca`.
pub async fn acme_root_at(management: &str, listener_ca: &str) -> Result<String> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let listener_ca = std::fs::read(listener_ca)?;
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

fn pebble_var(name: &str) -> Result<String> {
    std::env::var(name).with_context(|| format!("{name} is not set: start hack/pebble.sh"))
}

/// Custom-domain settings of an operator scoped to `namespace` (certificates kept there too): the test DNS as
/// resolver, [`super::EDGE_ADDRESS`] as the edge's address, and Pebble as the CA when `acme`.
pub fn domains_config(
    namespace: &str,
    acme: bool,
) -> Result<slipway_controllers::domain::DomainsConfig> {
    let acme = match acme {
        true => Some(slipway_controllers::domain::acme::AcmeConfig {
            directory_url: pebble_var("SLIPWAY_TEST_ACME_DIRECTORY")?,
            email: None,
            root_ca: Some(pebble_var("SLIPWAY_TEST_ACME_ROOT_CA")?.into()),
            challenge_grace: std::time::Duration::from_secs(1),
        }),
        false => None,
    };
    Ok(slipway_controllers::domain::DomainsConfig {
        resolver: Some(pebble_var("SLIPWAY_TEST_DNS_SERVER")?.parse()?),
        edge_addresses: vec![super::EDGE_ADDRESS.into()],
        certificate_namespace: Some(namespace.into()),
        acme,
    })
}

/// Sign-in for a test edge, made once its HTTPS port is known (the auth URL names it).
pub type SignInFor<'a> = Box<dyn FnOnce(u16) -> Result<Arc<slipway_identity::SignIn>> + Send + 'a>;

/// How a test edge runs.
pub struct EdgeOptions<'a> {
    /// The wildcard certificate's Secret (in the namespace).
    pub wildcard_secret: &'a str,
    /// Log every request.
    pub access_log: bool,
    /// Redirect plain HTTP to HTTPS.
    pub redirect_https: bool,
    /// Serve plain HTTP on the port Pebble validates HTTP-01 on (one edge at a time can); false: on a free port.
    pub acme_http: bool,
    /// End-user sign-in; `None`: off.
    pub sign_in: Option<SignInFor<'a>>,
}

/// A test edge's addresses and its metrics.
pub struct StartedEdge {
    pub http: SocketAddr,
    pub https: SocketAddr,
    pub registry: prometheus_client::registry::Registry,
}

/// An edge for `namespace` in this process: plain HTTP on [`super::EDGE_ADDRESS`] (at the port Pebble validates
/// HTTP-01 on, with `acme_http`), and HTTPS on a free port there; certificates from `namespace`.
pub async fn start_edge(
    api: &super::TestApi,
    namespace: &str,
    options: EdgeOptions<'_>,
) -> Result<StartedEdge> {
    use slipway_edge::server::Scheme;
    let https = tokio::net::TcpListener::bind((super::EDGE_ADDRESS, 0)).await?;
    let sign_in = match options.sign_in {
        Some(make) => Some(make(https.local_addr()?.port())?),
        None => None,
    };
    let config = slipway_edge::EdgeConfig {
        sign_in,
        tls: slipway_edge::TlsSettings {
            sources: slipway_edge::watch::CertificateSources {
                namespace: Some(namespace.into()),
                wildcard_secret: Some(options.wildcard_secret.into()),
                app_domain: Some(super::APP_DOMAIN.into()),
            },
            redirect_https: options.redirect_https,
            issuance_wait: std::time::Duration::from_secs(10),
        },
        ..api.edge_config(namespace, options.access_log).await?
    };
    let mut registry = prometheus_client::registry::Registry::default();
    let (edge, _tasks) = slipway_edge::Edge::start(api.kube.clone(), config, &mut registry).await?;
    let http_port: u16 = match options.acme_http {
        true => pebble_var("SLIPWAY_TEST_ACME_HTTP_PORT")?.parse()?,
        false => 0,
    };
    let http = tokio::net::TcpListener::bind((super::EDGE_ADDRESS, http_port))
        .await
        .context("bind the HTTP-01 port (is another run going on?)")?;
    let (http_addr, https_addr) = (http.local_addr()?, https.local_addr()?);
    for (listener, scheme) in [(http, Scheme::Http), (https, Scheme::Https)] {
        tokio::spawn(slipway_edge::server::serve(
            edge.clone(),
            listener,
            scheme,
            std::future::pending(),
        ));
    }
    Ok(StartedEdge {
        http: http_addr,
        https: https_addr,
        registry,
    })
}
