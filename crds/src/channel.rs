//! The `Channel` resource: a deployable environment of an app, bound to one git branch, with its own hostname.
//! It is named `<app>.<channel>` so the apiserver itself keeps channel names unique per app.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::cel;
use crate::deploy::DeployPhase;

/// A deployable environment of an app. The resource name is `<app>.<channel>`; `<app>.prod` is created with the
/// app and follows `branch:master`.
#[derive(CustomResource, KubeSchema, Debug, Clone, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "slipway.dev",
    version = "v1alpha1",
    kind = "Channel",
    namespaced,
    status = "ChannelStatus",
    shortname = "sch",
    category = "slipway",
    doc = "A deployable environment of an app, bound to one git branch, with its own hostname.",
    printcolumn(name = "App", type_ = "string", json_path = ".spec.app", description = "The app this channel belongs to"),
    printcolumn(name = "Branch", type_ = "string", json_path = ".spec.gitRefBinding", description = "The git branch the channel follows"),
    printcolumn(name = "Status", type_ = "string", json_path = ".status.phase", description = "provisioning, running or failed"),
    printcolumn(name = "Sha", type_ = "string", json_path = ".status.currentSha", description = "The commit currently deployed"),
    printcolumn(name = "Hostname", type_ = "string", json_path = ".status.hostname", description = "Where the channel is served"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    validation = cel::channel_name_has_app_prefix(),
    validation = cel::channel_name(),
    validation = cel::prod_channel_binding(),
)]
#[serde(rename_all = "camelCase")]
pub struct ChannelSpec {
    /// Name of the App (in the same namespace) this channel belongs to. Cannot be changed.
    #[schemars(length(max = 40))]
    #[x_kube(validation = cel::app_reference(), validation = cel::immutable("app"))]
    pub app: String,

    /// The git branch the channel follows, as branch:<name>. One channel per branch; branch:* is not accepted.
    #[schemars(length(max = 207))]
    #[x_kube(validation = cel::binding_not_wildcard(), validation = cel::binding_format())]
    pub git_ref_binding: String,

    /// Name of a Secret in this namespace whose keys override the app's environment on this channel, as secrets.
    /// Values set through the API for the same key win. Takes effect at the next deploy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub env_secret: Option<String>,
}

impl Channel {
    /// The channel's name within its app: the part of the resource name `<app>.<channel>` after the dot.
    pub fn channel_name(&self) -> &str {
        self.metadata
            .name
            .as_deref()
            .and_then(|n| n.split_once('.'))
            .map_or("", |(_, c)| c)
    }

    /// Whether the condition of type `type_` is `True` (e.g. [`crate::conditions::DATABASE_READY`]).
    pub fn condition_is_true(&self, type_: &str) -> bool {
        self.status.as_ref().and_then(|s| s.condition_status(type_)) == Some("True")
    }
}

/// Lifecycle of a channel.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum ChannelPhase {
    /// Created; stays here until its first deploy succeeds.
    #[default]
    Provisioning,
    /// A deploy succeeded and the channel serves it.
    Running,
    /// Provisioning failed (for example the SQL database could not be created).
    Failed,
}

impl ChannelPhase {
    /// The phase as the resource and the API spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Provisioning => "provisioning",
            Self::Running => "running",
            Self::Failed => "failed",
        }
    }
}

/// Which readiness check a version of a dynamic channel passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ReadyBy {
    /// The process answered `GET /` with a 2xx on `$SVC_HTTP_PORT`.
    Http,
    /// The process created the file named by `$SVC_READY_FILE`; it serves no HTTP, so its hostname answers 502.
    File,
}

/// The newest queued or running deploy of a channel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PendingDeploy {
    /// Id of the deploy (the Deploy resource's uid).
    pub deploy_id: String,
    /// Name of the Deploy resource.
    pub deploy_name: String,
    /// The commit being deployed, once resolved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha: Option<String>,
    /// queued or running.
    pub status: DeployPhase,
}

/// Observed state of a Channel.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChannelStatus {
    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// provisioning, running or failed.
    #[serde(default)]
    pub phase: ChannelPhase,

    /// The channel's hostname: <app>-<owner>.<app domain> for prod, <channel>-<app>-<owner>.<app domain> otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,

    /// The 40-hex commit currently deployed; unset before the first successful deploy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 40))]
    #[x_kube(validation = cel::sha())]
    pub current_sha: Option<String>,

    /// The newest queued or running deploy; unset when nothing is in flight. An old currentSha beside a pending
    /// deploy means the deploy has not finished, not that it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_deploy: Option<PendingDeploy>,

    /// How the deployed version passed readiness: http (it answers GET /) or file (it created the ready file; the
    /// edge then answers 502 on its hostname). Unset for static channels and before the first deploy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_by: Option<ReadyBy>,

    /// Latest observations of the channel's state, one per type (Ready, Accepted).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = kube::core::ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
}

impl ChannelStatus {
    /// The status (`True`, `False` or `Unknown`) of the condition of type `type_`; `None` while it is not set.
    pub fn condition_status(&self, type_: &str) -> Option<&str> {
        self.conditions
            .iter()
            .find(|c| c.type_ == type_)
            .map(|c| c.status.as_str())
    }

    /// The phase the status's own facts give: running once a deploy has gone live (`currentSha`); before that,
    /// failed while the database cannot be made (`DatabaseReady` is `False`), else provisioning. A channel that
    /// went live stays running when its database later fails: it still serves its version.
    ///
    /// The channel reconciler writes `phase` from this and is its only writer; readers that must not lag a go-live
    /// by one reconcile (the API) call it themselves.
    pub fn derived_phase(&self) -> ChannelPhase {
        let database_failed =
            self.condition_status(crate::conditions::DATABASE_READY) == Some("False");
        if self.current_sha.is_some() {
            ChannelPhase::Running
        } else if database_failed {
            ChannelPhase::Failed
        } else {
            ChannelPhase::Provisioning
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    use super::{ChannelPhase, ChannelStatus};
    use crate::conditions::{DATABASE_READY, condition};

    fn status(current_sha: Option<&str>, database_ready: Option<bool>) -> ChannelStatus {
        let conditions = database_ready
            .map(|ready| {
                condition(
                    DATABASE_READY,
                    ready,
                    "Test",
                    "",
                    None,
                    Time(Timestamp::UNIX_EPOCH),
                )
            })
            .into_iter()
            .collect();
        ChannelStatus {
            current_sha: current_sha.map(str::to_owned),
            conditions,
            ..ChannelStatus::default()
        }
    }

    #[test]
    fn the_phase_follows_the_live_commit_and_the_database() {
        let sha = Some("0123456789abcdef0123456789abcdef01234567");
        for (current_sha, database_ready, phase) in [
            (None, None, ChannelPhase::Provisioning),
            (None, Some(true), ChannelPhase::Provisioning),
            (None, Some(false), ChannelPhase::Failed),
            (sha, None, ChannelPhase::Running),
            (sha, Some(true), ChannelPhase::Running),
            // A live channel whose database fails later still serves its version.
            (sha, Some(false), ChannelPhase::Running),
        ] {
            assert_eq!(
                status(current_sha, database_ready).derived_phase(),
                phase,
                "currentSha {current_sha:?}, DatabaseReady {database_ready:?}"
            );
        }
    }

    #[test]
    fn a_phase_is_spelled_as_its_serde_name() {
        for phase in [
            ChannelPhase::Provisioning,
            ChannelPhase::Running,
            ChannelPhase::Failed,
        ] {
            assert_eq!(serde_json::to_value(phase).unwrap(), phase.as_str());
        }
    }
}
