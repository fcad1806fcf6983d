//! The Deploy reconciler: takes a Deploy from queued through running to success or failed, one deploy at a time
//! per channel (a newer one waits behind the older ones), and keeps the Channel's `currentSha`, `readyBy` and
//! `pendingDeploy` truthful (the channel reconciler writes the phase that follows from them).
//!
//! Every step is derived from what the cluster holds (the Deploy's status, the build Job, the deploy's
//! Deployment), never from memory, so an operator that restarts at any point picks a deploy up where it was.
//! `currentSha` moves only when the new version is live: for a static channel that is the pointer move itself
//! (the edge serves the commit's files); for app and docker channels it happens after the build, readiness and
//! the Service switch (`dynamic`). A failed deploy leaves the serving version untouched.

pub(crate) mod dynamic;
pub use dynamic::{DEPLOY_DEADLINE, owner_plan};
pub mod history;
pub mod queue;
pub mod rewind;
pub mod triggers;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Api, ResourceExt};
use serde_json::json;
use slipway_crds::conditions::{self, reasons};
use slipway_crds::{
    App, Channel, Deploy, DeployPhase, DeployStatus, PendingDeploy, ReadyBy, Template,
};

use crate::caches;
use crate::channel::publish;
use crate::context::{Context, FIELD_MANAGER};
use crate::error::Error;
use slipway_internal::CallError;

/// How often a deploy in flight is looked at while it waits on something that sends no event.
const POLL: Duration = Duration::from_secs(2);
/// How long a deploy in flight waits for an event it expects ([`triggers`]) before looking again anyway: for
/// a deadline that passes without one, and for an event missed while a watch restarted.
const SETTLE: Duration = Duration::from_secs(5);

/// What the deploy needs from the cluster, read once per reconcile.
struct Scene {
    deploy: Arc<Deploy>,
    channel: Channel,
    app: App,
    /// Every Deploy of the channel.
    siblings: Vec<Deploy>,
}

/// Reconciles one Deploy.
pub async fn reconcile(deploy: Arc<Deploy>, ctx: Arc<Context>) -> Result<Action, Error> {
    let namespace = deploy.namespace().ok_or(Error::Incomplete("namespace"))?;
    let phase = deploy.status.as_ref().map(|s| s.phase).unwrap_or_default();
    let Some(channel) = caches::channel(&ctx, &namespace, &deploy.spec.channel).await? else {
        if phase.in_flight() {
            let reason = format!("channel {} does not exist", deploy.spec.channel);
            fail(&ctx, &deploy, &reason).await?;
        }
        return Ok(Action::await_change());
    };
    let Some(app) = caches::app(&ctx, &channel).await? else {
        if phase.in_flight() {
            fail(
                &ctx,
                &deploy,
                &format!("app {} does not exist", channel.spec.app),
            )
            .await?;
        }
        return Ok(Action::await_change());
    };
    let siblings = caches::deploys_of(&ctx, &namespace, &deploy.spec.channel).await?;
    let scene = Scene {
        deploy,
        channel,
        app,
        siblings,
    };
    let action = match phase {
        DeployPhase::Queued => start_if_first(&ctx, &scene).await?,
        DeployPhase::Running => advance(&ctx, &scene).await?,
        // A deploy that finished may push an older one out of the channel's history.
        // Pruning deletes images, so it reads the channel's deploys afresh: one the cache has not seen yet (a
        // rewind to an image about to expire) keeps its image.
        DeployPhase::Success | DeployPhase::Failed => {
            if !history::expired(&scene.siblings, Timestamp::now()).is_empty() {
                let fresh =
                    caches::listed_deploys_of(&ctx, &namespace, &scene.deploy.spec.channel).await?;
                history::prune(&ctx, &scene.channel, &fresh).await?;
            }
            Action::await_change()
        }
    };
    sync_pending(&ctx, &namespace, &scene.channel.name_any()).await?;
    Ok(action)
}

/// Starts a queued deploy when no older deploy of its channel is in flight: resolves its commit and moves it to
/// running.
async fn start_if_first(ctx: &Context, scene: &Scene) -> Result<Action, Error> {
    let deploy = &scene.deploy;
    if queue::ahead_of(&scene.siblings, deploy) > 0 {
        // The older deploy's finish triggers this one (the controller maps Deploy changes to the channel's queue).
        return Ok(Action::requeue(POLL * 5));
    }
    let template = scene.app.spec.template;
    let (sha, image, line) = if deploy.spec.rewind_of.is_some() {
        match rewind::target(deploy, &scene.siblings, template) {
            Ok(rewound) => {
                let line = format!(
                    "[deploy] rewinding to {} (image of deploy {}, no build)\n",
                    rewound.sha, rewound.from_id
                );
                (rewound.sha, Some(rewound.image), line)
            }
            Err(reason) => {
                fail(ctx, deploy, &reason).await?;
                return Ok(Action::await_change());
            }
        }
    } else {
        let Some(sha) = resolve(ctx, scene).await? else {
            return Ok(Action::await_change());
        };
        let line = format!(
            "[deploy] deploying {sha} ({} template)\n",
            template.as_str()
        );
        (sha, None, line)
    };
    log(ctx, deploy, &line).await?;
    let now = Time(Timestamp::now());
    let mut status = deploy.status.clone().unwrap_or_default();
    status.phase = DeployPhase::Running;
    status.resolved_sha = Some(sha);
    status.image = image;
    status.started_at = Some(now.clone());
    status.observed_generation = deploy.metadata.generation;
    conditions::set_condition(
        &mut status.conditions,
        conditions::condition(
            conditions::READY,
            false,
            reasons::DEPLOYING,
            "the deploy is running",
            deploy.metadata.generation,
            now,
        ),
    );
    patch_deploy_status(ctx, deploy, &status).await?;
    ctx.metrics.deploy_started(deploy);
    Ok(Action::requeue(Duration::from_millis(200)))
}

/// The commit a deploy's sha or ref names now (the API writes full commit ids; a branch written with kubectl
/// resolves here); `None` after failing a deploy whose commit does not exist.
async fn resolve(ctx: &Context, scene: &Scene) -> Result<Option<String>, Error> {
    let deploy = &scene.deploy;
    let app_id = scene.app.uid().ok_or(Error::Incomplete("uid"))?;
    let rev = deploy
        .spec
        .sha
        .as_deref()
        .or(deploy.spec.git_ref.as_deref())
        .ok_or_else(|| Error::InvalidSpec("a deploy needs sha or ref".into()))?;
    match ctx.internal.resolve(&app_id, rev).await {
        Ok(sha) => Ok(Some(sha)),
        Err(CallError::NotFound(message)) => {
            fail(ctx, deploy, &message).await?;
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}

/// Moves a running deploy on: a static one goes live at once; app and docker ones build, roll out and go live.
async fn advance(ctx: &Context, scene: &Scene) -> Result<Action, Error> {
    let deploy = &scene.deploy;
    let sha = deploy
        .status
        .as_ref()
        .and_then(|s| s.resolved_sha.clone())
        .ok_or(Error::Incomplete("status.resolvedSha"))?;
    match scene.app.spec.template {
        Template::Static => {
            go_live(ctx, scene, &sha, None).await?;
            Ok(Action::await_change())
        }
        Template::App | Template::Docker => dynamic::advance(ctx, scene, &sha).await,
    }
}

/// The new version is live: the channel serves `sha` (the Service already points at it for dynamic channels).
async fn go_live(
    ctx: &Context,
    scene: &Scene,
    sha: &str,
    ready_by: Option<ReadyBy>,
) -> Result<(), Error> {
    let channels: Api<Channel> = Api::namespaced(
        ctx.client.clone(),
        &scene.channel.namespace().unwrap_or_default(),
    );
    // The channel reconciler, woken by this write, moves the phase to running.
    let patch = json!({"status": {"currentSha": sha, "readyBy": ready_by}});
    channels
        .patch_status(
            &scene.channel.name_any(),
            &channel_params(),
            &Patch::Merge(&patch),
        )
        .await?;
    let deploy = &scene.deploy;
    log(ctx, deploy, &format!("[deploy] live: {sha}\n")).await?;
    let now = Time(Timestamp::now());
    let mut status = deploy.status.clone().unwrap_or_default();
    status.phase = DeployPhase::Success;
    status.finished_at = Some(now.clone());
    status.ready_by = ready_by;
    status.message = None;
    conditions::set_condition(
        &mut status.conditions,
        conditions::condition(
            conditions::READY,
            true,
            reasons::RECONCILED,
            "live",
            deploy.metadata.generation,
            now,
        ),
    );
    patch_deploy_status(ctx, deploy, &status).await?;
    ctx.metrics.deploy_ended(deploy, true);
    publish(
        ctx,
        deploy.as_ref(),
        EventType::Normal,
        "Deployed",
        format!("{sha} is live on {}", deploy.spec.channel),
    )
    .await;
    Ok(())
}

/// Marks the deploy failed with `reason` (also appended to its log); the serving version stays.
async fn fail(ctx: &Context, deploy: &Deploy, reason: &str) -> Result<(), Error> {
    log(ctx, deploy, &format!("[deploy] failed: {reason}\n")).await?;
    let now = Time(Timestamp::now());
    let mut status = deploy.status.clone().unwrap_or_default();
    status.phase = DeployPhase::Failed;
    status.finished_at = Some(now.clone());
    status.message = Some(reason.to_owned());
    conditions::set_condition(
        &mut status.conditions,
        conditions::condition(
            conditions::READY,
            false,
            reasons::DEPLOY_FAILED,
            reason,
            deploy.metadata.generation,
            now,
        ),
    );
    patch_deploy_status(ctx, deploy, &status).await?;
    ctx.metrics.deploy_ended(deploy, false);
    publish(
        ctx,
        deploy,
        EventType::Warning,
        reasons::DEPLOY_FAILED,
        reason.to_owned(),
    )
    .await;
    Ok(())
}

/// Appends to the deploy's log.
async fn log(ctx: &Context, deploy: &Deploy, text: &str) -> Result<(), Error> {
    let id = deploy.uid().ok_or(Error::Incomplete("uid"))?;
    ctx.internal.append_log(&id, text).await?;
    Ok(())
}

fn params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    }
}

/// The field manager of the channel status fields this reconciler writes, and no other writer touches:
/// currentSha, readyBy and pendingDeploy ([`crate::channel::STATUS_MANAGER`] writes the rest). Merge patches,
/// not server-side apply: clearing `pendingDeploy` must work on a field an older operator wrote, and an apply
/// removes only fields its own manager owns.
pub const CHANNEL_MANAGER: &str = "slipway-operator-deploy";

fn channel_params() -> PatchParams {
    PatchParams {
        field_manager: Some(CHANNEL_MANAGER.into()),
        ..Default::default()
    }
}

async fn patch_deploy_status(
    ctx: &Context,
    deploy: &Deploy,
    status: &DeployStatus,
) -> Result<(), Error> {
    let deploys: Api<Deploy> =
        Api::namespaced(ctx.client.clone(), &deploy.namespace().unwrap_or_default());
    deploys
        .patch_status(
            &deploy.name_any(),
            &params(),
            &Patch::Merge(&json!({ "status": status })),
        )
        .await?;
    Ok(())
}

/// Sets the channel `channel` of `namespace`'s `pendingDeploy` to its newest deploy in flight (re-reading the
/// deploys, which a reconcile may have moved), or clears it.
async fn sync_pending(ctx: &Context, namespace: &str, channel: &str) -> Result<(), Error> {
    let fresh = caches::listed_deploys_of(ctx, namespace, channel).await?;
    let wanted: Option<PendingDeploy> = queue::newest_in_flight(&fresh).map(|d| PendingDeploy {
        deploy_id: d.uid().unwrap_or_default(),
        deploy_name: d.name_any(),
        sha: d.known_sha(),
        status: d.status.as_ref().map(|s| s.phase).unwrap_or_default(),
    });
    let channels: Api<Channel> = Api::namespaced(ctx.client.clone(), namespace);
    let current = channels
        .get_status(channel)
        .await?
        .status
        .and_then(|s| s.pending_deploy);
    if current != wanted {
        channels
            .patch_status(
                channel,
                &channel_params(),
                &Patch::Merge(&json!({"status": {"pendingDeploy": wanted}})),
            )
            .await?;
    }
    Ok(())
}

/// Moves on a `pendingDeploy` that names a deploy no longer in flight. Each deploy's reconcile keeps the field, but
/// a deploy deleted mid-flight (with kubectl) has no reconcile left to clear it; the channel reconciler calls this
/// (a Deploy's deletion wakes it, and it looks again every few minutes for a deletion its watch missed). A read of
/// one Deploy when the channel names one; nothing otherwise.
pub async fn settle_pending(ctx: &Context, channel: &Channel) -> Result<(), Error> {
    let Some(pending) = channel
        .status
        .as_ref()
        .and_then(|s| s.pending_deploy.as_ref())
    else {
        return Ok(());
    };
    let namespace = channel.namespace().unwrap_or_default();
    let deploys: Api<Deploy> = Api::namespaced(ctx.client.clone(), &namespace);
    let still_in_flight = deploys
        .get_opt(&pending.deploy_name)
        .await?
        .is_some_and(|d| {
            d.uid().as_deref() == Some(pending.deploy_id.as_str()) && queue::in_flight(&d)
        });
    if !still_in_flight {
        sync_pending(ctx, &namespace, &channel.name_any()).await?;
    }
    Ok(())
}
