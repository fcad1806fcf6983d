//! The edge's HTTPS: rustls with the ring provider, HTTP/2 and HTTP/1.1 offered by ALPN, and the certificate
//! chosen by SNI from [`super::certs`]. The ClientHello is read first ([`LazyConfigAcceptor`]), so a handshake for a
//! verified domain whose certificate is being issued can wait for it, and one for any other unknown name is
//! dropped before a certificate is looked for twice.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use rustls::ServerConfig;
use rustls::server::Acceptor;
use tokio::net::TcpStream;
use tokio_rustls::LazyConfigAcceptor;
use tokio_rustls::server::TlsStream;

use super::certs::{Certificates, Resolver};

/// The TLS configuration of the HTTPS listener.
pub fn server_config(certs: Arc<Certificates>) -> anyhow::Result<Arc<ServerConfig>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(Resolver(certs)));
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Completes the TLS handshake on `stream`, or `None` when the client names no servable host (or goes away).
/// A verified domain without its certificate yet waits up to `wait` for it.
pub async fn accept(
    stream: TcpStream,
    config: Arc<ServerConfig>,
    certs: &Certificates,
    wait: Duration,
) -> Option<TlsStream<TcpStream>> {
    let start = LazyConfigAcceptor::new(Acceptor::default(), stream)
        .await
        .ok()?;
    let name = start.client_hello().server_name()?.to_owned();
    if certs.wait_for(&name, wait).await.is_none() {
        tracing::debug!(sni = %name, "no certificate for this name; handshake dropped");
        return None;
    }
    start.into_stream(config).await.ok()
}
