//! The `Forward` resource: a public raw-TCP endpoint for a channel, reaching the app's `SVC_FORWARD_PORT` (7000)
//! from the addresses in its allowlist.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::cel;

/// `SVC_FORWARD_PORT`: the container port a Forward reaches, fixed by the hosting API.
pub const FORWARD_PORT: u16 = 7000;
/// The name of that port on the app container and on the channel's Service (where the edge finds the pods).
pub const FORWARD_PORT_NAME: &str = "forward";

/// Most CIDRs an allowlist may hold.
pub const MAX_ALLOW_CIDRS: usize = 16;

/// A public raw-TCP endpoint for a channel.
#[derive(CustomResource, KubeSchema, Debug, Clone, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "slipway.dev",
    version = "v1alpha1",
    kind = "Forward",
    namespaced,
    status = "ForwardStatus",
    shortname = "sfwd",
    category = "slipway",
    doc = "A public raw-TCP endpoint reaching a channel's forward port (7000) from an allowlist of networks.",
    printcolumn(
        name = "Channel",
        type_ = "string",
        json_path = ".spec.channel",
        description = "The Channel exposed"
    ),
    printcolumn(
        name = "Host",
        type_ = "string",
        json_path = ".status.host",
        description = "Public address"
    ),
    printcolumn(
        name = "Port",
        type_ = "integer",
        json_path = ".status.port",
        description = "Public port"
    ),
    printcolumn(
        name = "Active",
        type_ = "boolean",
        json_path = ".status.active",
        description = "Whether the endpoint serves"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ForwardSpec {
    /// Name of the Channel resource (<app>.<channel>, same namespace) to expose. Cannot be changed.
    #[schemars(length(max = 81))]
    #[x_kube(validation = cel::immutable("channel"))]
    pub channel: String,

    /// Networks allowed to connect, as CIDRs (for example 203.0.113.0/24 or 2001:db8::/32); at most 16.
    #[schemars(length(max = 64))]
    #[x_kube(validation = cel::max_cidrs(MAX_ALLOW_CIDRS))]
    pub allow_cidrs: Vec<Cidr>,
}

/// One CIDR of an allowlist, as written (validated by [`crate::names::Cidr`] where it is used).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Cidr(pub String);

impl schemars::JsonSchema for Cidr {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Cidr".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "maxLength": crate::names::CIDR_MAX_LEN,
            "x-kubernetes-validations": [cel::cidr()],
        })
    }
}

/// Observed state of a Forward.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ForwardStatus {
    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// Public host of the endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,

    /// Public port of the endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,

    /// False when the allocation exists but does not serve (app toggle or plan gate off).
    #[serde(default)]
    pub active: bool,

    /// Latest observations of the endpoint, one per type.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = kube::core::ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
}
