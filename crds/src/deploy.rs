//! The `Deploy` resource: one request to bring a commit live on a channel. Its spec never changes; the deploy
//! reconciler moves its status from queued through running to success or failed.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::cel;

/// A request to build and bring a commit live on a channel. At least one of sha and ref is set; sha wins. A
/// rewind (rewindOf and image set) runs an earlier deploy's image again instead of building.
#[derive(CustomResource, KubeSchema, Debug, Clone, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "slipway.dev",
    version = "v1alpha1",
    kind = "Deploy",
    namespaced,
    status = "DeployStatus",
    // Not `deploy`: kubectl takes an exact singular over a short name, and `kubectl get deploy` must stay
    // Deployments for everyone who runs a cluster.
    singular = "slipwaydeploy",
    plural = "deploys",
    shortname = "sdep",
    category = "slipway",
    doc = "A request to build and bring one commit live on a channel.",
    selectable = ".spec.channel",
    printcolumn(
        name = "Channel",
        type_ = "string",
        json_path = ".spec.channel",
        description = "The Channel deployed to"
    ),
    printcolumn(
        name = "Status",
        type_ = "string",
        json_path = ".status.phase",
        description = "queued, running, success or failed"
    ),
    printcolumn(
        name = "Sha",
        type_ = "string",
        json_path = ".status.resolvedSha",
        description = "The commit the request resolved to"
    ),
    printcolumn(name = "Started", type_ = "date", json_path = ".status.startedAt"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = cel::immutable("a Deploy's spec"),
    validation = kube::core::Rule::new("has(self.sha) || has(self.ref)").message("a deploy needs sha or ref"),
    validation = cel::rewind_pair(),
    validation = cel::rewind_sha(),
)]
pub struct DeploySpec {
    /// Name of the Channel resource (<app>.<channel>, same namespace) to deploy to.
    #[schemars(length(max = 81))]
    pub channel: String,

    /// A 40-character hex commit id, or a branch name resolved to its head when the deploy starts. Wins over ref.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 200))]
    #[x_kube(validation = cel::sha_or_branch())]
    pub sha: Option<String>,

    /// A branch name (bare or refs/heads/<name>) resolved to its head when the deploy starts. Ignored when sha is set.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "ref")]
    #[schemars(length(max = 211))]
    #[x_kube(validation = cel::branch_ref())]
    pub git_ref: Option<String>,

    /// Makes this deploy a rewind: the name of an earlier Deploy of the same channel that succeeded, whose image
    /// runs again with the channel's current environment, without a build. Needs image (that Deploy's
    /// status.image.reference) and sha (its full commit id). The deploy fails when the named Deploy is missing,
    /// did not succeed, or recorded another image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub rewind_of: Option<String>,

    /// With rewindOf: the image to run, by digest (<registry>/<repository>@sha256:<64 hex digits>), exactly as the
    /// rewound Deploy recorded it in status.image.reference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512))]
    #[x_kube(validation = cel::image_by_digest())]
    pub image: Option<String>,
}

impl Deploy {
    /// The commit this deploy brings live, as far as it is known: the resolved sha once the deploy started, else a
    /// spec.sha that already is a full commit id (the API writes one; a branch name is resolved at start).
    pub fn known_sha(&self) -> Option<String> {
        self.status
            .as_ref()
            .and_then(|s| s.resolved_sha.clone())
            .or_else(|| {
                self.spec
                    .sha
                    .clone()
                    .filter(|sha| sha.parse::<crate::names::CommitSha>().is_ok())
            })
    }

    /// What the deploy is doing, in one word: its phase, with `running` told apart as `building` (an app or
    /// docker deploy whose image is not built yet) and `releasing` (the pre-deploy snapshot, the rollout and the
    /// readiness check; a static deploy and a rewind have nothing to build).
    pub fn stage(&self, template: crate::app::Template) -> &'static str {
        let status = self.status.as_ref();
        match status.map(|s| s.phase).unwrap_or_default() {
            DeployPhase::Queued => "queued",
            DeployPhase::Running
                if template != crate::app::Template::Static
                    && status.and_then(|s| s.image.as_ref()).is_none()
                    && self.spec.image.is_none() =>
            {
                "building"
            }
            DeployPhase::Running => "releasing",
            DeployPhase::Success => "success",
            DeployPhase::Failed => "failed",
        }
    }
}

/// Lifecycle of a deploy.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum DeployPhase {
    /// Accepted, waiting for an earlier deploy of the same channel or for the builder.
    #[default]
    Queued,
    /// Building or rolling out.
    Running,
    /// Live: passed readiness and the route points at it.
    Success,
    /// Did not go live; the previous version keeps serving.
    Failed,
}

impl DeployPhase {
    /// Whether the deploy is still in flight.
    pub fn in_flight(self) -> bool {
        matches!(self, DeployPhase::Queued | DeployPhase::Running)
    }
}

/// The image a deploy built, as pushed to the cluster's registry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeployImage {
    /// Pullable reference, by digest: `<registry>/<repository>@sha256:...`.
    pub reference: String,
    /// The tag pushed (the commit sha).
    pub tag: String,
    /// Total size of the image's layers and config, in bytes.
    pub size_bytes: u64,
    /// Size counted against the plan's cap (the final stage's warm-base layers excluded); unset when not computed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub charged_size_bytes: Option<u64>,
    /// The warm base the final stage was recognised as, e.g. node:22-slim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matched_base: Option<String>,
    /// When the image was built.
    pub created: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
}

/// Observed state of a Deploy.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeployStatus {
    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// queued, running, success or failed.
    #[serde(default)]
    pub phase: DeployPhase,

    /// The commit sha or ref resolved to when the deploy started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 40))]
    #[x_kube(validation = cel::sha())]
    pub resolved_sha: Option<String>,

    /// When the deploy left the queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,

    /// When the deploy reached success or failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Time>,

    /// The image built for the deploy (app and docker templates).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<DeployImage>,

    /// Which readiness check the new version passed (app and docker templates).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_by: Option<crate::channel::ReadyBy>,

    /// Why the deploy failed, in one line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,

    /// Latest observations of the deploy, one per type.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = kube::core::ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::Template;

    fn deploy(spec: serde_json::Value, status: serde_json::Value) -> Deploy {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "slipway.dev/v1alpha1",
            "kind": "Deploy",
            "metadata": {"name": "d"},
            "spec": spec,
            "status": status,
        }))
        .unwrap_or_else(|e| panic!("a Deploy: {e}"))
    }

    #[test]
    fn a_running_deploy_builds_until_its_image_is_recorded_then_releases() {
        let spec = serde_json::json!({"channel": "web.prod", "sha": "a".repeat(40)});
        let running = serde_json::json!({"phase": "running"});
        assert_eq!(
            deploy(spec.clone(), running.clone()).stage(Template::App),
            "building"
        );
        assert_eq!(
            deploy(spec.clone(), running.clone()).stage(Template::Static),
            "releasing"
        );
        let built = serde_json::json!({"phase": "running", "image": {
            "reference": format!("r/x@sha256:{}", "0".repeat(64)), "tag": "a", "sizeBytes": 1,
            "created": "2026-01-01T00:00:00Z"}});
        assert_eq!(
            deploy(spec.clone(), built).stage(Template::Docker),
            "releasing"
        );
        let rewind = serde_json::json!({"channel": "web.prod", "sha": "a".repeat(40),
            "rewindOf": "d0", "image": format!("r/x@sha256:{}", "0".repeat(64))});
        assert_eq!(deploy(rewind, running).stage(Template::App), "releasing");
        for phase in ["queued", "success", "failed"] {
            assert_eq!(
                deploy(spec.clone(), serde_json::json!({ "phase": phase })).stage(Template::App),
                phase
            );
        }
    }
}
