//! The listener's TLS: rustls with the ring provider and ALPN `postgresql` (what libpq 17 and later offer, and
//! require with `sslnegotiation=direct`). The certificate is a PEM pair from files (a Secret's volume), reread when
//! it changes, or, without files, a self-signed one made at start: `sslmode=require` encrypts without verifying,
//! so that is enough for it; `verify-full` clients need the real pair.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use rustls::ServerConfig;
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use slipway_http::tls::{ReloadingCert, TlsFiles};

/// How often the certificate files are checked for a new pair.
const RELOAD_INTERVAL: Duration = Duration::from_secs(60);

/// The TLS configuration: the pair in `files`, or a self-signed certificate for `names` when there are none.
pub fn server_config(
    files: Option<(PathBuf, PathBuf)>,
    names: &[String],
) -> anyhow::Result<Arc<ServerConfig>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_no_client_auth();
    let mut config = match files {
        Some((cert, key)) => {
            let resolver = ReloadingCert::load(TlsFiles { cert, key }, RELOAD_INTERVAL, provider)
                .context("load the SQL listener's certificate")?;
            builder.with_cert_resolver(Arc::new(resolver))
        }
        None => {
            let made = rcgen::generate_simple_self_signed(names.to_vec())
                .context("make a self-signed certificate")?;
            let key =
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(made.signing_key.serialize_der()));
            tracing::info!(
                ?names,
                "the SQL listener serves a self-signed certificate (give --sql-tls-cert for verify-full clients)"
            );
            builder
                .with_single_cert(vec![made.cert.der().clone()], key)
                .context("use the self-signed certificate")?
        }
    };
    config.alpn_protocols = vec![b"postgresql".to_vec()];
    Ok(Arc::new(config))
}
