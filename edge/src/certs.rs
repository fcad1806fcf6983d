//! Which certificate the edge serves for which name, and the ACME HTTP-01 answers it gives on port 80.
//!
//! The table is rebuilt from three watches: the platform's wildcard Secret for `*.{app_domain}` and
//! `*.s3.{app_domain}` (the channels' hostnames and their public S3 endpoints; one the platform operator provides,
//! named by `--tls-wildcard-secret`), the custom domains' certificate Secrets the operator writes (label
//! `slipway.dev/certificate=domain`), all in the certificate namespace (a namespace of their own: the edge reads no
//! other Secret), and the Domains themselves. A custom domain's certificate is served only while its Domain is
//! verified, so an SNI that is not a verified domain (nor a name under the wildcard) gets no certificate at all, and
//! nothing here ever asks for one: issuance is the operator's alone.
//!
//! A verified domain whose certificate is not out yet makes the handshake wait a little for it
//! ([`Certificates::wait_for`]) instead of failing at once: the operator starts issuing at verification.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use slipway_crds::labels::{ALT_NAMES, CERTIFICATE as CERTIFICATE_LABEL, CERTIFICATE_DOMAIN};
use slipway_crds::{Domain, DomainPhase};

/// The label selector of custom domains' certificate Secrets.
pub fn certificate_selector() -> String {
    format!("{CERTIFICATE_LABEL}={CERTIFICATE_DOMAIN}")
}

/// One immutable snapshot of what is served.
#[derive(Default)]
pub struct Table {
    /// Certificates of verified custom domains, by name.
    hosts: HashMap<String, Arc<CertifiedKey>>,
    /// Every verified custom domain, with or without a certificate yet.
    verified: HashSet<String>,
    /// The platform's domain and its wildcard certificate.
    wildcard: Option<(String, Arc<CertifiedKey>)>,
    /// HTTP-01 answers: (domain, token) → key authorization.
    challenges: HashMap<(String, String), String>,
}

impl Table {
    /// The table for these objects. `wildcard` is served for names one label under `app_domain` or under
    /// `s3.{app_domain}`. Secrets that do not load are left out (and logged).
    pub fn build(
        secrets: &[Arc<Secret>],
        domains: &[Arc<Domain>],
        wildcard: Option<&Secret>,
        app_domain: Option<&str>,
        provider: &CryptoProvider,
    ) -> Self {
        let verified: HashSet<String> = domains
            .iter()
            .filter(|d| {
                d.metadata.deletion_timestamp.is_none()
                    && d.status.as_ref().map(|s| s.phase) == Some(DomainPhase::Verified)
            })
            .map(|d| d.spec.domain.to_ascii_lowercase())
            .collect();
        let challenges = domains
            .iter()
            .filter_map(|d| {
                let c = d.status.as_ref()?.certificate.as_ref()?.http01.as_ref()?;
                Some((
                    (d.spec.domain.to_ascii_lowercase(), c.token.clone()),
                    c.key_authorization.clone(),
                ))
            })
            .collect();
        let mut hosts = HashMap::new();
        for secret in secrets {
            let names: Vec<String> = secret
                .annotations()
                .get(ALT_NAMES)
                .map(|names| {
                    names
                        .split(',')
                        .map(|n| n.trim().to_ascii_lowercase())
                        .filter(|n| verified.contains(n))
                        .collect()
                })
                .unwrap_or_default();
            if names.is_empty() {
                continue;
            }
            if let Some(key) = load(secret, provider) {
                for name in names {
                    hosts.insert(name, key.clone());
                }
            }
        }
        let wildcard = match (wildcard, app_domain) {
            (Some(secret), Some(domain)) => load(secret, provider)
                .map(|key| (domain.trim_end_matches('.').to_ascii_lowercase(), key)),
            _ => None,
        };
        Self {
            hosts,
            verified,
            wildcard,
            challenges,
        }
    }

    /// The certificate for `name` (lowercase): a verified domain's own, or the wildcard for a name one label under
    /// the platform's domain (a channel's hostname) or under its `s3.` subdomain (a channel's public S3 endpoint).
    pub fn resolve(&self, name: &str) -> Option<Arc<CertifiedKey>> {
        if let Some(key) = self.hosts.get(name) {
            return Some(key.clone());
        }
        let (domain, key) = self.wildcard.as_ref()?;
        let (label, parent) = name.split_once('.')?;
        let under = parent == domain
            || parent
                .strip_suffix(domain.as_str())
                .and_then(|p| p.strip_suffix('.'))
                == Some(super::routes::PUBLIC_S3_LABEL);
        (!label.is_empty() && under).then(|| key.clone())
    }
}

fn load(secret: &Secret, provider: &CryptoProvider) -> Option<Arc<CertifiedKey>> {
    let data = secret.data.as_ref()?;
    let (chain, key) = (data.get("tls.crt")?, data.get("tls.key")?);
    match slipway_http::tls::certified_key(&chain.0, &key.0, provider) {
        Ok(key) => Some(key),
        Err(e) => {
            tracing::warn!(secret = %secret.name_any(), error = %format!("{e:#}"), "a certificate Secret does not load");
            None
        }
    }
}

/// The served certificates, swapped whole on every change; handshakes read them without locks.
pub struct Certificates {
    table: ArcSwap<Table>,
    changed: tokio::sync::watch::Sender<u64>,
}

impl Default for Certificates {
    fn default() -> Self {
        Self {
            table: ArcSwap::from_pointee(Table::default()),
            changed: tokio::sync::watch::Sender::new(0),
        }
    }
}

impl std::fmt::Debug for Certificates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Certificates").finish_non_exhaustive()
    }
}

impl Certificates {
    /// Serves `table` from now on and wakes the handshakes waiting for a certificate.
    pub fn install(&self, table: Table) {
        self.table.store(Arc::new(table));
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// The certificate for `name` (any case).
    pub fn resolve(&self, name: &str) -> Option<Arc<CertifiedKey>> {
        self.table.load().resolve(&name.to_ascii_lowercase())
    }

    /// The key authorization answering `token` for `domain`.
    pub fn challenge(&self, domain: &str, token: &str) -> Option<String> {
        self.table
            .load()
            .challenges
            .get(&(domain.to_ascii_lowercase(), token.to_owned()))
            .cloned()
    }

    /// The certificate for `name`, waiting up to `limit` when `name` is a verified domain whose certificate is not
    /// out yet; `None` at once for any other name.
    pub async fn wait_for(&self, name: &str, limit: Duration) -> Option<Arc<CertifiedKey>> {
        let name = name.to_ascii_lowercase();
        let mut changed = self.changed.subscribe();
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let table = self.table.load();
            if let Some(key) = table.resolve(&name) {
                return Some(key);
            }
            if !table.verified.contains(&name) {
                return None;
            }
            drop(table);
            if tokio::time::timeout_at(deadline, changed.changed())
                .await
                .is_err()
            {
                return None;
            }
        }
    }
}

/// rustls' view of [`Certificates`]: the certificate by SNI, none without SNI.
#[derive(Debug)]
pub struct Resolver(pub Arc<Certificates>);

impl ResolvesServerCert for Resolver {
    fn resolve(&self, client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.0.resolve(client_hello.server_name()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use serde_json::json;

    fn provider() -> CryptoProvider {
        rustls::crypto::ring::default_provider()
    }

    fn secret(names: &[&str]) -> Arc<Secret> {
        let key = rcgen::KeyPair::generate().unwrap();
        let params =
            rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        let cert = params.self_signed(&key).unwrap();
        let mut s: Secret = serde_json::from_value(json!({"metadata": {"name": "tls-x",
            "annotations": {ALT_NAMES: names.join(",")}}}))
        .unwrap();
        s.data = Some(
            [
                ("tls.crt".to_owned(), ByteString(cert.pem().into_bytes())),
                (
                    "tls.key".to_owned(),
                    ByteString(key.serialize_pem().into_bytes()),
                ),
            ]
            .into(),
        );
        Arc::new(s)
    }

    fn domain(name: &str, phase: &str, challenge: Option<(&str, &str)>) -> Arc<Domain> {
        let mut status = json!({"phase": phase});
        if let Some((token, auth)) = challenge {
            status["certificate"] = json!({"http01": {"token": token, "keyAuthorization": auth}});
        }
        Arc::new(
            serde_json::from_value(
                json!({"apiVersion": "slipway.dev/v1alpha1", "kind": "Domain",
                "metadata": {"name": name, "namespace": "ns"},
                "spec": {"channel": "blog.prod", "domain": name}, "status": status}),
            )
            .unwrap(),
        )
    }

    #[test]
    fn only_verified_domains_and_names_under_the_wildcard_get_a_certificate() {
        let table = Table::build(
            &[secret(&["shop.example"]), secret(&["old.example"])],
            &[
                domain("shop.example", "verified", None),
                domain("old.example", "pending", None),
                domain("new.example", "verified", None),
            ],
            Some(&secret(&["*.apps.test", "*.s3.apps.test"])),
            Some("apps.test"),
            &provider(),
        );
        assert!(table.resolve("shop.example").is_some());
        assert!(table.resolve("old.example").is_none(), "pending again");
        assert!(table.resolve("new.example").is_none(), "no certificate yet");
        assert!(table.resolve("blog-alice.apps.test").is_some());
        assert!(table.resolve("a.b.apps.test").is_none(), "one label only");
        assert!(
            table.resolve("blog-alice.s3.apps.test").is_some(),
            "a public S3 endpoint"
        );
        assert!(
            table.resolve("a.b.s3.apps.test").is_none(),
            "one label only"
        );
        assert!(
            table.resolve("s3.apps.test").is_some(),
            "a channel may be called s3"
        );
        assert!(table.resolve(".s3.apps.test").is_none());
        assert!(table.resolve("blog-alice.s3x.apps.test").is_none());
        assert!(table.resolve("apps.test").is_none());
        assert!(table.resolve("www.google.com").is_none());
    }

    #[tokio::test]
    async fn a_handshake_waits_only_for_a_verified_domain() {
        let certs = Arc::new(Certificates::default());
        let domains = [domain(
            "new.example",
            "verified",
            Some(("tok", "tok.thumb")),
        )];
        certs.install(Table::build(&[], &domains, None, None, &provider()));
        assert_eq!(
            certs.challenge("New.Example", "tok").as_deref(),
            Some("tok.thumb")
        );
        assert!(certs.challenge("new.example", "other").is_none());
        let started = tokio::time::Instant::now();
        assert!(
            certs
                .wait_for("unknown.example", Duration::from_secs(5))
                .await
                .is_none()
        );
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "unknown names are refused at once"
        );
        let waiting = {
            let certs = certs.clone();
            tokio::spawn(
                async move { certs.wait_for("new.example", Duration::from_secs(30)).await },
            )
        };
        tokio::task::yield_now().await;
        certs.install(Table::build(
            &[secret(&["new.example"])],
            &domains,
            None,
            None,
            &provider(),
        ));
        assert!(waiting.await.unwrap().is_some());
    }
}
