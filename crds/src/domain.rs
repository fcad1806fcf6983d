//! The `Domain` resource: a customer-owned hostname attached to a channel, verified by DNS and served with a
//! certificate from ACME once verified.

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

    /// Latest observations of the domain, one per type.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = kube::core::ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
}
