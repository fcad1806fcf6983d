//! A serving certificate read from PEM files and reloaded when they change (the webhook's, the SQL proxy's).
//!
//! A webhook is only called over TLS, and the certificate is rotated underneath a running pod (a Secret
//! volume is updated in place, cert-manager renews). The resolver rereads the files at most once per interval, during
//! a handshake, and swaps in the new pair when they changed; a pair that does not load (half written, key and
//! certificate not matching) keeps the old one in service and is tried again at the next check.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use anyhow::Context;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// Where the serving certificate (with its chain) and its private key are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// PEM certificate chain, leaf first.
    pub cert: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// What identifies one version of the files: a hash of their bytes. Modification times alone miss a rewrite within
/// the filesystem's timestamp granularity, and the files are small.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp(u64);

impl Stamp {
    fn of(files: &TlsFiles) -> anyhow::Result<Self> {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        read(&files.cert)?.hash(&mut hasher);
        read(&files.key)?.hash(&mut hasher);
        Ok(Self(hasher.finish()))
    }
}

#[derive(Debug)]
struct Current {
    key: Arc<CertifiedKey>,
    stamp: Stamp,
    checked: Instant,
}

/// A [`ResolvesServerCert`] that serves the pair in [`TlsFiles`] and follows changes to it.
#[derive(Debug)]
pub struct ReloadingCert {
    files: TlsFiles,
    interval: Duration,
    provider: Arc<CryptoProvider>,
    current: RwLock<Current>,
}

impl ReloadingCert {
    /// Loads the pair now, failing when it cannot be used, and rechecks the files at most every `interval`.
    pub fn load(
        files: TlsFiles,
        interval: Duration,
        provider: Arc<CryptoProvider>,
    ) -> anyhow::Result<Self> {
        let stamp = Stamp::of(&files)?;
        let key = load_pair(&files, &provider)?;
        Ok(Self {
            files,
            interval,
            provider,
            current: RwLock::new(Current {
                key,
                stamp,
                checked: Instant::now(),
            }),
        })
    }

    /// The pair in service.
    pub fn current(&self) -> Arc<CertifiedKey> {
        match self.current.read() {
            Ok(c) => c.key.clone(),
            Err(poisoned) => poisoned.into_inner().key.clone(),
        }
    }

    /// Reloads the pair when the interval has passed and the files changed. Returns whether a new pair went into
    /// service.
    pub fn refresh(&self) -> bool {
        let due = match self.current.read() {
            Ok(c) => c.checked.elapsed() >= self.interval,
            Err(_) => true,
        };
        if !due {
            return false;
        }
        let mut current = match self.current.write() {
            Ok(c) => c,
            Err(poisoned) => poisoned.into_inner(),
        };
        // Another handshake may have done the check while this one waited for the lock.
        if current.checked.elapsed() < self.interval {
            return false;
        }
        current.checked = Instant::now();
        let stamp = match Stamp::of(&self.files) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(
                    error = format!("{e:#}"),
                    "cannot read the webhook certificate files; keeping the loaded pair"
                );
                return false;
            }
        };
        if stamp == current.stamp {
            return false;
        }
        match load_pair(&self.files, &self.provider) {
            Ok(key) => {
                current.key = key;
                current.stamp = stamp;
                tracing::info!(cert = %self.files.cert.display(), "reloaded the serving certificate");
                true
            }
            Err(e) => {
                tracing::warn!(
                    error = format!("{e:#}"),
                    "the changed webhook certificate does not load; keeping the loaded pair"
                );
                false
            }
        }
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.refresh();
        Some(self.current())
    }
}

fn read(path: &Path) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("read {}", path.display()))
}

/// Reads and checks one certificate/key pair.
fn load_pair(files: &TlsFiles, provider: &CryptoProvider) -> anyhow::Result<Arc<CertifiedKey>> {
    certified_key(&read(&files.cert)?, &read(&files.key)?, provider).with_context(|| {
        format!(
            "{} and {} do not make a usable pair",
            files.cert.display(),
            files.key.display()
        )
    })
}

/// A certificate chain (PEM, leaf first) and its private key (PEM: PKCS#8, PKCS#1 or SEC1) as a pair rustls serves,
/// checked to belong together.
pub fn certified_key(
    chain_pem: &[u8],
    key_pem: &[u8],
    provider: &CryptoProvider,
) -> anyhow::Result<Arc<CertifiedKey>> {
    let certs = CertificateDer::pem_slice_iter(chain_pem)
        .collect::<Result<Vec<_>, _>>()
        .context("parse the certificates")?;
    anyhow::ensure!(!certs.is_empty(), "the chain holds no certificate");
    let key = PrivateKeyDer::from_pem_slice(key_pem).context("parse the private key")?;
    Ok(Arc::new(CertifiedKey::from_der(certs, key, provider)?))
}

/// The TLS configuration of the webhook: TLS 1.2 and 1.3 with the ring provider, HTTP/1.1 only (the apiserver
/// speaks it, and it keeps HTTP/2's stream floods off an admission path), certificate from `resolver`.
pub fn server_config(
    resolver: Arc<ReloadingCert>,
    provider: Arc<CryptoProvider>,
) -> anyhow::Result<rustls::ServerConfig> {
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;
    use slipway_testkit::tls::TestPki;

    fn provider() -> Arc<CryptoProvider> {
        Arc::new(rustls::crypto::ring::default_provider())
    }

    #[test]
    fn a_changed_pair_is_served_after_the_interval() {
        let dir = slipway_testkit::tls::TempDir::new("tls-reload").unwrap();
        let pki = TestPki::new().unwrap();
        let first = pki.serving_cert(&["127.0.0.1"]).unwrap();
        let files = first.write_to(dir.path()).unwrap();
        let tls = TlsFiles {
            cert: files.0.clone(),
            key: files.1.clone(),
        };
        let resolver = ReloadingCert::load(tls, Duration::ZERO, provider()).unwrap();
        assert_eq!(resolver.current().cert[0].as_ref(), first.cert_der());
        assert!(!resolver.refresh(), "nothing changed");

        // A half-written pair (new certificate, old key) is not taken.
        let second = pki.serving_cert(&["127.0.0.1"]).unwrap();
        std::fs::write(&files.0, second.cert_pem()).unwrap();
        assert!(!resolver.refresh());
        assert_eq!(resolver.current().cert[0].as_ref(), first.cert_der());

        std::fs::write(&files.1, second.key_pem()).unwrap();
        assert!(resolver.refresh());
        assert_eq!(resolver.current().cert[0].as_ref(), second.cert_der());
    }

    #[test]
    fn unusable_files_fail_at_start() {
        let dir = slipway_testkit::tls::TempDir::new("tls-bad").unwrap();
        let cert = dir.path().join("tls.crt");
        let key = dir.path().join("tls.key");
        std::fs::write(&cert, "not pem").unwrap();
        std::fs::write(&key, "not pem").unwrap();
        let err =
            ReloadingCert::load(TlsFiles { cert, key }, Duration::ZERO, provider()).unwrap_err();
        assert!(
            format!("{err:#}").contains("holds no certificate"),
            "{err:#}"
        );
        let missing = TlsFiles {
            cert: dir.path().join("nope.crt"),
            key: dir.path().join("nope.key"),
        };
        assert!(ReloadingCert::load(missing, Duration::ZERO, provider()).is_err());
    }
}
