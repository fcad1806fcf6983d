//! A verified domain's certificate as cluster objects: the `kubernetes.io/tls` Secret it lives in (cert-manager's
//! layout, so tools that read those Secrets read ours), when it is due for renewal (two thirds into its validity,
//! cert-manager's default), and how long to wait after a failed issuance.

use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde_json::json;
use sha2::{Digest, Sha256};
use slipway_crds::labels;

use slipway_crds::labels::{ALT_NAMES, CERTIFICATE as CERTIFICATE_LABEL, CERTIFICATE_DOMAIN};
/// On a certificate Secret: the Domain (`<namespace>/<name>`) it belongs to.
pub const DOMAIN_ANNOTATION: &str = "slipway.dev/domain";
/// On a certificate Secret: the value of the Domain's renew-requested annotation its issuance answered.
pub const RENEW_REQUEST_ANNOTATION: &str = "slipway.dev/renew-request";
/// First wait after a failed issuance; it doubles with each failure in a row.
pub const FIRST_BACKOFF: Duration = Duration::from_secs(60);
/// Longest wait between attempts. Let's Encrypt allows 5 failed validations per name and hour, so a domain that
/// keeps failing settles at one attempt an hour.
pub const MAX_BACKOFF: Duration = Duration::from_secs(3600);

/// The Secret name of `domain`'s certificate: `tls-<domain>`, or `tls-<hash>` when that would be too long for an
/// object name.
pub fn secret_name(domain: &str) -> String {
    let readable = format!("tls-{domain}");
    if readable.len() <= 253 {
        return readable;
    }
    let digest = Sha256::digest(domain.as_bytes());
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!("tls-{hex}")
}

/// A certificate as issued: the chain (leaf first) and the private key, both PEM.
#[derive(Debug, Clone)]
pub struct Issued {
    /// The chain, leaf first.
    pub chain_pem: String,
    /// The leaf's private key.
    pub key_pem: String,
}

/// Validity of a certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Validity {
    /// Not valid before.
    pub not_before: Timestamp,
    /// Not valid after.
    pub not_after: Timestamp,
}

impl Validity {
    /// The validity of the first certificate in `chain_pem`.
    pub fn of_chain(chain_pem: &str) -> Result<Self, String> {
        let (_, pem) = x509_parser::pem::parse_x509_pem(chain_pem.as_bytes())
            .map_err(|e| format!("the issued chain is not PEM: {e}"))?;
        let cert = pem
            .parse_x509()
            .map_err(|e| format!("the issued certificate does not parse: {e}"))?;
        let time = |t: x509_parser::time::ASN1Time| {
            Timestamp::from_second(t.timestamp()).map_err(|e| e.to_string())
        };
        Ok(Self {
            not_before: time(cert.validity().not_before)?,
            not_after: time(cert.validity().not_after)?,
        })
    }

    /// When to renew: two thirds into the validity.
    pub fn renew_at(&self) -> Timestamp {
        let life = self.not_after.duration_since(self.not_before);
        self.not_before
            .checked_add(life * 2 / 3)
            .unwrap_or(self.not_after)
    }
}

/// Reading a stored certificate Secret.
pub trait StoredCertificate {
    /// The validity of the certificate it holds, if it holds one that parses.
    fn validity(&self) -> Option<Validity>;
}

impl StoredCertificate for Secret {
    fn validity(&self) -> Option<Validity> {
        let chain = self.data.as_ref()?.get("tls.crt")?;
        Validity::of_chain(std::str::from_utf8(&chain.0).ok()?).ok()
    }
}

/// How long to wait after `failures` failed issuances in a row (at least one).
pub fn backoff(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    FIRST_BACKOFF
        .saturating_mul(1 << doublings)
        .min(MAX_BACKOFF)
}

/// `at` plus `wait`.
pub fn after(at: Timestamp, wait: Duration) -> Timestamp {
    SignedDuration::try_from(wait)
        .ok()
        .and_then(|d| at.checked_add(d).ok())
        .unwrap_or(at)
}

/// The Secret holding `issued` for `domain`, in cert-manager's layout: `type: kubernetes.io/tls`, keys `tls.crt`
/// (leaf and chain) and `tls.key`, cert-manager's annotations naming the names it covers and its issuer, and the
/// label it carries on Secrets it manages; plus slipway's own label and the Domain it belongs to. The keys go in
/// `data` (not `stringData`, which is write-only and which server-side apply does not carry into `data` on a change).
pub fn secret(
    namespace: &str,
    domain: &str,
    owner: &str,
    issuer: &str,
    renew_request: Option<&str>,
    issued: &Issued,
) -> Result<Secret, serde_json::Error> {
    let mut secret: Secret = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {
            "name": secret_name(domain),
            "namespace": namespace,
            "labels": {
                CERTIFICATE_LABEL: CERTIFICATE_DOMAIN,
                "controller.cert-manager.io/fao": "true",
                labels::MANAGED_BY: labels::MANAGER,
            },
            "annotations": {
                "cert-manager.io/certificate-name": secret_name(domain),
                "cert-manager.io/common-name": domain,
                ALT_NAMES: domain,
                "cert-manager.io/ip-sans": "",
                "cert-manager.io/uri-sans": "",
                "cert-manager.io/issuer-name": issuer,
                "cert-manager.io/issuer-kind": "ACME",
                "cert-manager.io/issuer-group": slipway_crds::GROUP,
                DOMAIN_ANNOTATION: owner,
            },
        },
    }))?;
    if let Some(request) = renew_request {
        secret
            .metadata
            .annotations
            .get_or_insert_default()
            .insert(RENEW_REQUEST_ANNOTATION.to_owned(), request.to_owned());
    }
    secret.data = Some(
        [
            (
                "tls.crt".to_owned(),
                ByteString(issued.chain_pem.clone().into_bytes()),
            ),
            (
                "tls.key".to_owned(),
                ByteString(issued.key_pem.clone().into_bytes()),
            ),
        ]
        .into(),
    );
    Ok(secret)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renewal_is_due_two_thirds_into_the_validity() {
        let v = Validity {
            not_before: Timestamp::from_second(0).unwrap(),
            not_after: Timestamp::from_second(90 * 86_400).unwrap(),
        };
        assert_eq!(v.renew_at(), Timestamp::from_second(60 * 86_400).unwrap());
    }

    #[test]
    fn failures_back_off_doubling_up_to_an_hour() {
        let waits: Vec<u64> = (1..=8).map(|n| backoff(n).as_secs()).collect();
        assert_eq!(waits, [60, 120, 240, 480, 960, 1920, 3600, 3600]);
        assert_eq!(backoff(u32::MAX), MAX_BACKOFF);
    }

    #[test]
    fn the_secret_has_cert_managers_layout() {
        let issued = Issued {
            chain_pem: "CHAIN".into(),
            key_pem: "KEY".into(),
        };
        let s = secret(
            "slipway-system",
            "shop.example",
            "ns/shop.example",
            "acme",
            Some("r1"),
            &issued,
        )
        .unwrap();
        assert_eq!(s.type_.as_deref(), Some("kubernetes.io/tls"));
        assert_eq!(s.metadata.name.as_deref(), Some("tls-shop.example"));
        let data = s.data.unwrap();
        assert_eq!(
            (&data["tls.crt"].0[..], &data["tls.key"].0[..]),
            (&b"CHAIN"[..], &b"KEY"[..])
        );
        let annotations = s.metadata.annotations.unwrap();
        assert_eq!(annotations[ALT_NAMES], "shop.example");
        assert_eq!(annotations[RENEW_REQUEST_ANNOTATION], "r1");
        assert_eq!(annotations["cert-manager.io/common-name"], "shop.example");
        assert_eq!(s.metadata.labels.unwrap()[CERTIFICATE_LABEL], "domain");
        let long = format!("{}.example", "a".repeat(245));
        assert_eq!(secret_name(&long).len(), 36);
    }

    #[test]
    fn a_real_chain_gives_its_validity() {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["shop.example".into()]).unwrap();
        params.not_before = rcgen::date_time_ymd(2026, 1, 1);
        params.not_after = rcgen::date_time_ymd(2026, 4, 1);
        let pem = params.self_signed(&key).unwrap().pem();
        let v = Validity::of_chain(&pem).unwrap();
        assert_eq!(v.not_before.to_string(), "2026-01-01T00:00:00Z");
        assert_eq!(v.not_after.to_string(), "2026-04-01T00:00:00Z");
        assert!(Validity::of_chain("not pem").is_err());
    }
}
