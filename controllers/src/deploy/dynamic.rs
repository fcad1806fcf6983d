//! The running phase of an app or docker deploy: build the commit's image, start the new version beside the old
//! one, wait for readiness, then switch the channel's Service to it (live once its endpoints hold only the new
//! pods), or discard it and keep the old version.
//! Each call reads where the deploy is from the cluster's objects and moves it one step, so a restarted operator
//! resumes where the last one stopped.

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use slipway_crds::labels;
use slipway_crds::plans::Plan;

use super::{POLL, SETTLE, Scene, fail, go_live, patch_deploy_status};
use crate::build::{self, BuildRequest, BuildState};
use crate::context::Context;
use crate::error::Error;
use crate::workload::{self, Release, Rollout, SYSTEM_ENV_KEYS, Switch};
use slipway_internal::protocol::{EnvRequest, PreDeploySnapshot, PreDeploySnapshotRequest};

/// Moves a running app or docker deploy of `sha` one step.
pub(super) async fn advance(ctx: &Context, scene: &Scene, sha: &str) -> Result<Action, Error> {
    let deploy = scene.deploy.as_ref();
    let namespace = deploy.namespace().ok_or(Error::Incomplete("namespace"))?;
    let plan = owner_plan(ctx, &namespace).await?;
    let image = match deploy.status.as_ref().and_then(|s| s.image.clone()) {
        Some(image) => image,
        None => {
            let request = BuildRequest {
                deploy,
                app: &scene.app,
                channel: &scene.channel,
                sha,
                image_cap_bytes: u64::try_from(plan.image_size_bytes).unwrap_or(u64::MAX),
            };
            match build::advance(ctx, &request).await? {
                // A queued build waits for another build to finish, which wakes only that build's deploy.
                BuildState::Queued { .. } => return Ok(Action::requeue(POLL)),
                // The build Job's change wakes the deploy ([`super::triggers`]).
                BuildState::Building => return Ok(Action::requeue(SETTLE)),
                BuildState::Failed(reason) => {
                    fail(ctx, deploy, &reason).await?;
                    return Ok(Action::await_change());
                }
                BuildState::Built(image) => {
                    let mut status = deploy.status.clone().unwrap_or_default();
                    status.image = Some(image.clone());
                    patch_deploy_status(ctx, deploy, &status).await?;
                    image
                }
            }
        }
    };
    // The store's and the database's keys are system keys: injected at run time, recorded in the snapshot by
    // name only.
    let blob_keys = ctx
        .blob
        .as_ref()
        .map_or(&[][..], |_| &crate::blob::ENV_KEYS[..]);
    let database_keys = ctx
        .postgres
        .as_ref()
        .map_or(&[][..], |_| &crate::postgres::ENV_KEYS[..]);
    let mut env = ctx
        .internal
        .deploy_env(
            &deploy.uid().ok_or(Error::Incomplete("uid"))?,
            &EnvRequest {
                app_id: scene.app.uid().ok_or(Error::Incomplete("uid"))?,
                channel_id: scene.channel.uid().ok_or(Error::Incomplete("uid"))?,
                system_keys: SYSTEM_ENV_KEYS
                    .iter()
                    .chain(blob_keys)
                    .chain(database_keys)
                    .map(|k| (*k).to_owned())
                    .collect(),
            },
        )
        .await?;
    if let Some(settings) = &ctx.blob {
        env.extend(crate::blob::container_env(ctx, settings, &scene.channel).await?);
    }
    if let Some(settings) = &ctx.postgres {
        env.extend(crate::postgres::container_env(ctx, settings, &scene.channel).await?);
    }
    if ctx.postgres.is_some() || ctx.blob.is_some() {
        match pre_deploy_snapshot(ctx, scene).await? {
            Checkpoint::Done => {}
            Checkpoint::Failed(reason) => {
                fail(ctx, deploy, &reason).await?;
                return Ok(Action::await_change());
            }
            Checkpoint::Running(progress) => {
                let started = deploy.status.as_ref().and_then(|s| s.started_at.as_ref());
                let deadline = ctx.config.deploy_deadline;
                if past_deadline(started.map(|t| t.0), Timestamp::now(), deadline) {
                    let uid = deploy.uid().ok_or(Error::Incomplete("uid"))?;
                    ctx.internal.cancel_pre_deploy_snapshot(&uid).await?;
                    let reason = format!(
                        "the deploy passed its deadline of {} waiting for the pre-deploy checkpoint, \
                         which got to {progress}",
                        build::human_duration(deadline)
                    );
                    fail(ctx, deploy, &reason).await?;
                    return Ok(Action::await_change());
                }
                // The checkpoint is the API's job, which sends no event: look again shortly.
                return Ok(Action::requeue(POLL));
            }
        }
    }
    let release = Release {
        deploy,
        app: &scene.app,
        channel: &scene.channel,
        sha,
        image: &image.reference,
        env: &env,
        plan,
        cpu_request_percent: ctx.config.cpu_request_percent,
    };
    match workload::advance(ctx, &release).await? {
        // The new pods' changes wake the deploy; the deadline is looked at without one.
        Rollout::Starting => Ok(Action::requeue(SETTLE)),
        Rollout::Ready(ready_by) => {
            if workload::promote(ctx, &release).await? == Switch::Moving {
                // The Service selects the new pods; its EndpointSlices' change wakes the deploy.
                return Ok(Action::requeue(SETTLE));
            }
            go_live(ctx, scene, sha, Some(ready_by)).await?;
            Ok(Action::await_change())
        }
        Rollout::Failed(reason) => {
            workload::discard(ctx, deploy).await?;
            fail(ctx, deploy, &reason).await?;
            Ok(Action::await_change())
        }
    }
}

/// How long after it started a deploy may still wait for its pre-deploy checkpoint unless the operator is told
/// otherwise (`--deploy-deadline-minutes`); past it the deploy fails, saying what it waited for, and the channel's
/// next deploy can run.
pub const DEPLOY_DEADLINE: std::time::Duration = std::time::Duration::from_secs(60 * 60);

/// Where a deploy's pre-deploy checkpoint is.
enum Checkpoint {
    /// Taken, or nothing to take: the deploy goes on.
    Done,
    /// Still running, this far: the deploy waits.
    Running(String),
    /// The dump failed, for this reason: the deploy must not start a container that may migrate data nobody kept.
    Failed(String),
}

/// Starts (or asks after) the deploy's `pre_deploy` checkpoint of the channel's database and bucket, which the API
/// server takes as a job before the new container starts; where it is.
async fn pre_deploy_snapshot(ctx: &Context, scene: &Scene) -> Result<Checkpoint, Error> {
    let deploy = scene.deploy.as_ref();
    let request = PreDeploySnapshotRequest {
        app_id: scene.app.uid().ok_or(Error::Incomplete("uid"))?,
        channel_id: scene.channel.uid().ok_or(Error::Incomplete("uid"))?,
        git_sha: scene
            .channel
            .status
            .as_ref()
            .and_then(|s| s.current_sha.clone()),
    };
    let uid = deploy.uid().ok_or(Error::Incomplete("uid"))?;
    Ok(
        match ctx.internal.pre_deploy_snapshot(&uid, &request).await? {
            PreDeploySnapshot::Taken { .. } | PreDeploySnapshot::Skipped { .. } => Checkpoint::Done,
            PreDeploySnapshot::Running { progress } => Checkpoint::Running(progress),
            PreDeploySnapshot::Failed { reason } => Checkpoint::Failed(reason),
        },
    )
}

/// Whether a deploy that started at `started` (unknown: not yet) has passed `deadline` at `now`.
fn past_deadline(
    started: Option<Timestamp>,
    now: Timestamp,
    deadline: std::time::Duration,
) -> bool {
    started.is_some_and(|started| {
        std::time::Duration::try_from(now.duration_since(started))
            .is_ok_and(|waited| waited > deadline)
    })
}

/// The plan of the account that owns `namespace` (its `slipway.dev/plan` label).
pub async fn owner_plan(ctx: &Context, namespace: &str) -> Result<&'static Plan, Error> {
    let namespaces: Api<Namespace> = Api::all(ctx.client.clone());
    let tier = namespaces
        .get(namespace)
        .await?
        .labels()
        .get(labels::PLAN)
        .cloned()
        .unwrap_or_default();
    Plan::by_tier(&tier).ok_or_else(|| {
        Error::InvalidSpec(format!(
            "namespace {namespace} names no known plan in its {} label",
            labels::PLAN
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deploy_passes_its_deadline_only_once_it_has_waited_longer() {
        let started: Timestamp = "2026-12-02T03:00:00Z".parse().unwrap();
        let hour = std::time::Duration::from_secs(3600);
        let at = |s: &str| s.parse::<Timestamp>().unwrap();
        assert!(!past_deadline(
            Some(started),
            at("2026-12-02T03:59:59Z"),
            hour
        ));
        assert!(!past_deadline(
            Some(started),
            at("2026-12-02T04:00:00Z"),
            hour
        ));
        assert!(past_deadline(
            Some(started),
            at("2026-12-02T04:00:01Z"),
            hour
        ));
        assert!(
            !past_deadline(None, at("2026-12-03T00:00:00Z"), hour),
            "not started"
        );
        assert!(
            !past_deadline(Some(started), at("2026-12-02T02:00:00Z"), hour),
            "a clock behind the start is no wait"
        );
    }
}
