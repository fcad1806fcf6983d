//! TLS for tests of servers the apiserver calls: a throwaway CA, serving certificates it signs, and a minimal
//! HTTPS client that trusts only that CA (so a test sees exactly what the apiserver would).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A certificate authority made for one test.
pub struct TestPki {
    ca_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl TestPki {
    /// A new CA.
    pub fn new() -> Result<Self> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "slipway test CA");
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate()?;
        let ca_pem = params.self_signed(&key)?.pem();
        Ok(Self {
            ca_pem,
            issuer: Issuer::new(params, key),
        })
    }

    /// The CA certificate, PEM (what a `caBundle` holds).
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// A serving certificate for `names` (IP addresses become IP SANs, anything else DNS SANs).
    pub fn serving_cert(&self, names: &[&str]) -> Result<ServingCert> {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names.clone())?;
        params.distinguished_name.push(
            DnType::CommonName,
            names.first().cloned().unwrap_or_default(),
        );
        params.use_authority_key_identifier_extension = true;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(ServingCert {
            cert_pem: cert.pem(),
            cert_der: cert.der().to_vec(),
            key_pem: key.serialize_pem(),
        })
    }
}

/// A serving certificate and its key.
pub struct ServingCert {
    cert_pem: String,
    cert_der: Vec<u8>,
    key_pem: String,
}

impl ServingCert {
    /// The certificate, PEM.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The certificate, DER.
    pub fn cert_der(&self) -> &[u8] {
        &self.cert_der
    }

    /// The private key, PEM (PKCS#8).
    pub fn key_pem(&self) -> &str {
        &self.key_pem
    }

    /// Writes `tls.crt` and `tls.key` into `dir` (as a Secret volume would hold them); returns their paths.
    pub fn write_to(&self, dir: &Path) -> Result<(PathBuf, PathBuf)> {
        let cert = dir.join("tls.crt");
        let key = dir.join("tls.key");
        std::fs::write(&cert, &self.cert_pem)
            .with_context(|| format!("write {}", cert.display()))?;
        std::fs::write(&key, &self.key_pem).with_context(|| format!("write {}", key.display()))?;
        Ok((cert, key))
    }
}

/// A directory removed when dropped.
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// A fresh directory `slipway-<prefix>-<random>` under the system's temporary directory.
    pub fn new(prefix: &str) -> Result<Self> {
        let suffix = uuid::Uuid::new_v4().simple().to_string();
        let path = std::env::temp_dir().join(format!("slipway-{prefix}-{}", &suffix[..12]));
        std::fs::create_dir_all(&path).with_context(|| format!("create {}", path.display()))?;
        Ok(Self { path })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// An HTTP response as a test reads it.
#[derive(Debug)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// The body.
    pub body: Vec<u8>,
    /// The certificate the server presented.
    pub server_cert: Vec<u8>,
}

/// Sends one HTTP/1.1 request over TLS to `addr`, trusting only `ca_pem`, and reads the whole response (the request
/// asks the server to close the connection).
pub async fn https_request(
    addr: SocketAddr,
    ca_pem: &str,
    method: &str,
    path: &str,
    body: &[u8],
) -> Result<Response> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::pem::PemObject::pem_slice_iter(ca_pem.as_bytes()) {
        let cert: CertificateDer<'static> = cert.context("parse the CA")?;
        roots.add(cert)?;
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .with_context(|| format!("connect to {addr}"))?;
    let mut tls = connector
        .connect(ServerName::IpAddress(addr.ip().into()), tcp)
        .await
        .context("TLS handshake")?;
    let server_cert = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.to_vec())
        .unwrap_or_default();

    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    tls.write_all(head.as_bytes()).await?;
    tls.write_all(body).await?;
    tls.flush().await?;
    let mut raw = Vec::new();
    tls.read_to_end(&mut raw)
        .await
        .context("read the response")?;

    let Some(split) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
        bail!(
            "no complete response head in {:?}",
            String::from_utf8_lossy(&raw)
        );
    };
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("no status in {head:?}"))?;
    let mut body = raw[split + 4..].to_vec();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body = dechunk(&body)?;
    }
    Ok(Response {
        status,
        body,
        server_cert,
    })
}

fn dechunk(mut raw: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = raw
            .windows(2)
            .position(|w| w == b"\r\n")
            .context("truncated chunk")?;
        let size = usize::from_str_radix(String::from_utf8_lossy(&raw[..line_end]).trim(), 16)?;
        raw = &raw[line_end + 2..];
        if size == 0 {
            return Ok(out);
        }
        out.extend_from_slice(raw.get(..size).context("truncated chunk")?);
        raw = raw.get(size + 2..).context("truncated chunk")?;
    }
}

/// A fresh 2048-bit RSA private key in PEM, made by openssl the way a platform operator makes one: PKCS#8
/// (`BEGIN PRIVATE KEY`), or PKCS#1 (`BEGIN RSA PRIVATE KEY`, what Helm's `genPrivateKey` gives) when
/// `traditional`. rcgen's ring backend cannot generate RSA keys.
pub fn rsa_key_pem(traditional: bool) -> Result<Vec<u8>> {
    let args: &[&str] = if traditional {
        &["genrsa", "-traditional", "2048"]
    } else {
        &[
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
        ]
    };
    let out = std::process::Command::new("openssl")
        .args(args)
        .output()
        .context("run openssl")?;
    if !out.status.success() {
        bail!("openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(out.stdout)
}
