//! The `App` resource: one hosted application, its template and its access toggles. It lives in its owner's
//! namespace and is named by the app name; its channels are `Channel` resources that reference it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::cel;

/// How an app is built and served.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Template {
    /// The committed files are served from the repository root by the edge; no pod, no database.
    #[default]
    Static,
    /// A per-deploy image on the Node 22 / Python 3.13 runtime; `launch.sh` starts the process.
    App,
    /// The repository's `Dockerfile` is built on every deploy and run with its own entrypoint.
    Docker,
}

impl Template {
    /// The wire name of the template.
    pub fn as_str(self) -> &'static str {
        match self {
            Template::Static => "static",
            Template::App => "app",
            Template::Docker => "docker",
        }
    }
}

impl std::str::FromStr for Template {
    type Err = crate::names::InvalidName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "static" => Ok(Template::Static),
            "app" => Ok(Template::App),
            "docker" => Ok(Template::Docker),
            _ => Err(crate::names::InvalidName(
                "template must be one of static, app, docker",
            )),
        }
    }
}

/// An application hosted by slipway. The resource name is the app name (a DNS label of at most 40 characters that
/// does not start with git, api, www, admin, preview or staging).
#[derive(CustomResource, KubeSchema, Debug, Clone, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "slipway.dev",
    version = "v1alpha1",
    kind = "App",
    namespaced,
    status = "AppStatus",
    shortname = "sapp",
    category = "slipway",
    doc = "An application hosted by slipway: one git repository and one or more channels.",
    printcolumn(name = "Template", type_ = "string", json_path = ".spec.template", description = "How the app is built and served"),
    printcolumn(name = "Owner", type_ = "string", json_path = ".spec.owner", description = "Username of the app owner"),
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status", description = "Whether the app's resources are in place"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    validation = cel::app_name(),
    validation = cel::app_name_not_reserved(),
)]
#[serde(rename_all = "camelCase")]
pub struct AppSpec {
    /// How the app is built and served: static (default), app or docker. Cannot be changed after creation.
    #[serde(default)]
    #[x_kube(validation = cel::immutable("template"))]
    pub template: Template,

    /// Username of the app owner. The owner's namespace holds the app; the username is part of every channel
    /// hostname. Cannot be changed here (ownership transfer is a console action).
    #[schemars(length(max = 40))]
    #[x_kube(validation = cel::username(), validation = cel::immutable("owner"))]
    pub owner: String,

    /// Opt-in for connecting to the channels' SQL databases from outside the cluster.
    #[serde(default)]
    pub external_db_access_enabled: bool,

    /// Opt-in for reaching the channels' object-store buckets from outside the cluster.
    #[serde(default)]
    pub external_blob_access_enabled: bool,

    /// App toggle for public raw-TCP endpoints (Forward resources); the owner's plan must include port forwarding.
    #[serde(default)]
    pub port_forwarding_enabled: bool,

    /// Per-app override of the agent-access switch for protected actions. Unset inherits the owner's account
    /// default; true lets agent credentials perform protected actions on this app, false forbids it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_protected_actions_enabled: Option<bool>,

    /// Name of a Secret in this namespace whose keys are the app's default environment, as secrets (for apps
    /// managed with kubectl or GitOps). Values set through the API for the same key win. Takes effect at the next
    /// deploy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub env_secret: Option<String>,
}

/// Observed state of an App.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppStatus {
    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// HTTPS clone URL of the app's git repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo_url: Option<String>,

    /// Latest observations of the app's state, one per type (Ready, Accepted).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = kube::core::ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
}
