//! The `Domain` resource: a customer-owned hostname attached to a channel, verified by DNS and served with a
//! certificate from ACME once verified.
//!
//! The REST API creates one per attach (named after the domain, owned by its Channel, so it goes with the channel
//! and its app); a Domain written with kubectl works the same (the operator adopts it). The
//! operator writes everything under `status`: the DNS records to create (the verification token among them, which
//! only the platform sets), the outcome of each check, and the certificate's state. Two annotations ask it for
//! work: [`VERIFY_ANNOTATION`] (a check now) and [`RENEW_ANNOTATION`] (a new certificate now).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::cel;

/// A custom hostname attached to a channel.
#[derive(CustomResource, KubeSchema, Debug, Clone, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "slipway.dev",
    version = "v1alpha1",
    kind = "Domain",
    namespaced,
    status = "DomainStatus",
    shortname = "sdom",
    category = "slipway",
    doc = "A customer-owned hostname attached to a channel, verified through DNS and served over HTTPS.",
    selectable = ".spec.channel",
    selectable = ".spec.domain",
    printcolumn(
        name = "Domain",
        type_ = "string",
        json_path = ".spec.domain",
        description = "The attached hostname"
    ),
    printcolumn(
        name = "Channel",
        type_ = "string",
        json_path = ".spec.channel",
        description = "The Channel it serves"
    ),
    printcolumn(
        name = "Status",
        type_ = "string",
        json_path = ".status.phase",
        description = "pending or verified"
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = ".status.reason",
        description = "Last verification failure"
    ),
    printcolumn(
        name = "Certificate",
        type_ = "date",
        json_path = ".status.certificate.notAfter",
        description = "When the served certificate expires"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct DomainSpec {
    /// Name of the Channel resource (<app>.<channel>, same namespace) the domain serves.
    #[schemars(length(max = 81))]
    #[x_kube(validation = cel::immutable("channel"))]
    pub channel: String,

    /// The hostname, IDNA-encoded, lowercase, without a trailing dot. Cannot be changed; attach a new Domain instead.
    #[schemars(length(max = 253))]
    #[x_kube(validation = cel::domain(), validation = cel::immutable("domain"))]
    pub domain: String,
}

/// Set (to any new value, such as a timestamp) to ask for a verification check now; the operator records the value
/// it answered in `status.verifyRequest`.
pub const VERIFY_ANNOTATION: &str = "slipway.dev/verify-requested";
/// Set (to any new value) to ask for a new certificate now, before renewal is due; the operator records the value
/// it answered in `status.certificate.renewRequest`.
pub const RENEW_ANNOTATION: &str = "slipway.dev/renew-requested";
/// The field selector of the Domains whose `spec.domain` is `domain` (a selectable field): one consistent read
/// finds every Domain of a name, in every namespace, whatever the resources are called.
pub fn domain_field_selector(domain: &str) -> String {
    format!("spec.domain={domain}")
}

/// Prefix of every verification token (the TXT record's value).
pub const TOKEN_PREFIX: &str = "svc-verify-";
/// The host of the TXT record is this label under the domain.
pub const TXT_LABEL: &str = "_svc";

/// The verification token of the Domain with this uid: [`TOKEN_PREFIX`] and the first 128 bits of the SHA-256 of
/// the uid. The apiserver draws each uid at random when the object is created, so a token cannot be known before
/// its Domain exists, every attach gets a new one, and the API and the operator derive the same one without
/// sharing a secret or racing to write it. A user cannot choose it either: it is not a spec field.
pub fn verification_token(uid: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(format!("slipway domain verification {uid}").as_bytes());
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!("{TOKEN_PREFIX}{hex}")
}

/// The records a customer creates for `domain` (canonical form) of the Domain with `uid`, whose channel's hostname
/// is `cname_target` and whose edge answers on `a_values`.
pub fn dns_records(domain: &str, uid: &str, cname_target: &str, a_values: &[String]) -> DnsRecords {
    DnsRecords {
        txt_host: format!("{TXT_LABEL}.{domain}"),
        txt_value: verification_token(uid),
        cname_target: cname_target.to_owned(),
        a_values: a_values.to_vec(),
    }
}

/// Verification state of a domain.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum DomainPhase {
    /// Attached; waiting for a passing TXT and routing check.
    #[default]
    Pending,
    /// Verified; the route and certificate are live.
    Verified,
}

/// Why the last verification failed (a closed set).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DomainReason {
    /// The TXT host does not exist.
    TxtNxdomain,
    /// The TXT record exists but carries another token.
    TxtTokenMismatch,
    /// The TXT lookup failed (transient).
    TxtLookupFailed,
    /// The domain does not point at the platform.
    DnsNotPointing,
    /// The domain does not exist.
    DomainNxdomain,
    /// The routing lookup failed (transient).
    DnsLookupFailed,
    /// The platform's own address is not known (transient).
    PlatformIpUnknown,
}

impl DomainReason {
    /// Whether this failure says the domain is not (or no longer) set up, which moves a verified domain back to
    /// pending; the others are lookups that could not be made, which change nothing.
    pub fn is_definitive(self) -> bool {
        matches!(
            self,
            Self::TxtNxdomain
                | Self::TxtTokenMismatch
                | Self::DnsNotPointing
                | Self::DomainNxdomain
        )
    }

    /// The API's name of the reason.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::TxtNxdomain => "txt_nxdomain",
            Self::TxtTokenMismatch => "txt_token_mismatch",
            Self::TxtLookupFailed => "txt_lookup_failed",
            Self::DnsNotPointing => "dns_not_pointing",
            Self::DomainNxdomain => "domain_nxdomain",
            Self::DnsLookupFailed => "dns_lookup_failed",
            Self::PlatformIpUnknown => "platform_ip_unknown",
        }
    }

    /// The reason as a condition reason (UpperCamelCase).
    pub fn condition_reason(self) -> &'static str {
        match self {
            Self::TxtNxdomain => "TxtNxdomain",
            Self::TxtTokenMismatch => "TxtTokenMismatch",
            Self::TxtLookupFailed => "TxtLookupFailed",
            Self::DnsNotPointing => "DnsNotPointing",
            Self::DomainNxdomain => "DomainNxdomain",
            Self::DnsLookupFailed => "DnsLookupFailed",
            Self::PlatformIpUnknown => "PlatformIpUnknown",
        }
    }
}

/// The DNS records the customer creates to verify and route the domain.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DnsRecords {
    /// Host of the TXT record: _svc.<domain>.
    pub txt_host: String,
    /// Value of the TXT record; begins with svc-verify-.
    pub txt_value: String,
    /// Target of a CNAME record for subdomains.
    pub cname_target: String,
    /// Addresses for A records at an apex domain.
    #[serde(default)]
    pub a_values: Vec<String>,
}

/// Observed state of a Domain.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct DomainStatus {
    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// pending or verified.
    #[serde(default)]
    pub phase: DomainPhase,

    /// The last verification failure; unset when the last check passed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<DomainReason>,

    /// The DNS records to create.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns_records: Option<DnsRecords>,

    /// When the domain was last verified.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verified_at: Option<Time>,

    /// When the DNS records were last checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checked_at: Option<Time>,

    /// Checks of a pending domain that failed in a row (they space out the automatic checks).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failed_checks: u32,

    /// The value of the verify-requested annotation the last check answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify_request: Option<String>,

    /// The domain's certificate, once issuance has started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate: Option<CertificateStatus>,

    /// Latest observations of the domain, one per type.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = kube::core::ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// The certificate of a verified domain, issued by ACME and kept in a `kubernetes.io/tls` Secret in the platform's
/// namespace.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CertificateStatus {
    /// The Secret (in the platform's certificate namespace) that holds the certificate and key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_name: Option<String>,
    /// Start of the served certificate's validity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before: Option<Time>,
    /// End of the served certificate's validity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_after: Option<Time>,
    /// When it will be renewed: two thirds into its validity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renew_at: Option<Time>,
    /// Issuance attempts that failed in a row.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failures: u32,
    /// Why the last attempt failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failure: Option<String>,
    /// When the next attempt may start, after a failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_attempt_at: Option<Time>,
    /// The value of the renew-requested annotation the last issuance answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renew_request: Option<String>,
    /// The HTTP-01 challenge being validated: every edge replica answers it on port 80.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http01: Option<Http01Challenge>,
}

/// An ACME HTTP-01 challenge: `GET /.well-known/acme-challenge/<token>` on the domain answers the key
/// authorization.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Http01Challenge {
    /// The challenge token (the last path segment).
    pub token: String,
    /// The body to answer.
    pub key_authorization: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_is_derived_from_the_uid_alone() {
        let a = verification_token("8d1c3c1e-0000-4000-8000-000000000001");
        assert_eq!(
            a,
            verification_token("8d1c3c1e-0000-4000-8000-000000000001")
        );
        assert_ne!(
            a,
            verification_token("8d1c3c1e-0000-4000-8000-000000000002")
        );
        assert!(a.starts_with("svc-verify-"));
        assert_eq!(a.len(), "svc-verify-".len() + 32);
        let records = dns_records(
            "shop.example",
            "u",
            "blog-alice.apps.test",
            &["192.0.2.7".into()],
        );
        assert_eq!(records.txt_host, "_svc.shop.example");
        assert_eq!(records.cname_target, "blog-alice.apps.test");
    }

    #[test]
    fn only_setup_failures_are_definitive() {
        use DomainReason::*;
        for r in [
            TxtNxdomain,
            TxtTokenMismatch,
            DnsNotPointing,
            DomainNxdomain,
        ] {
            assert!(r.is_definitive(), "{r:?}");
        }
        for r in [TxtLookupFailed, DnsLookupFailed, PlatformIpUnknown] {
            assert!(!r.is_definitive(), "{r:?}");
        }
        assert_eq!(
            serde_json::to_value(TxtNxdomain).unwrap(),
            TxtNxdomain.as_str()
        );
    }
}
