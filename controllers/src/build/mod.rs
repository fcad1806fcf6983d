//! The image build step of `app` and `docker` deploys. The Deploy reconciler calls [`advance`] every few seconds
//! while a deploy runs; each call moves the build one step and says where it is:
//!
//! 1. No build Job yet: the commit's root files are read through the API server ([`sources`]), the build is
//!    planned or refused ([`dockerfile`]), and the Job is created suspended ([`job`]): the build is queued.
//! 2. Queued: at most `Context::max_builds` Jobs run cluster-wide, in the order they were queued. When a slot
//!    is free the Job is resumed with a freshly signed source URL and, where the installation has them, a registry
//!    token for its repository and a BuildKit client certificate ([`buildkit_tls`]), all minted then and good for
//!    this build only; its pod fetches the files, builds them with the node's BuildKit and pushes
//!    `<registry>/<namespace>/<workload>:<sha>`.
//! 3. Finished ([`outcome`]): the pod's output and the `[build]` result lines go to the deploy log, sizes are read
//!    from the registry and the charged size is held against the plan's cap ([`image`], [`registry`]); the outcome
//!    is recorded on the Job, so later calls answer from it and the log gets every line once.
//!
//! Each log write is followed by an annotation saying it happened; only a crash between the two can repeat a
//! line. Build output lives in the deploy log, so it outlives the build pod.

pub mod buildkit_tls;
pub mod dockerfile;
pub mod image;
pub mod job;
mod outcome;
pub mod registry;
pub mod sources;

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Resource, ResourceExt};
use serde::{Deserialize, Serialize};
use serde_json::json;
use slipway_crds::names;
use slipway_crds::{App, Channel, Deploy, DeployImage};

use crate::context::{Context, FIELD_MANAGER};
use crate::error::Error;
use job::JobPhase;
use registry::Registry;
use slipway_internal::CallError;
use slipway_internal::registry_token::Access;

/// How long a build's registry token and BuildKit certificate outlive the build's time limit (the pod's start and
/// the final push).
const CREDENTIAL_SLACK: std::time::Duration = std::time::Duration::from_secs(300);

/// Builds that may run at once, cluster-wide, unless the operator is told otherwise (`--max-builds`). Builds
/// running side by side do not see each other's files: BuildKit syncs a build's local sources (`context`,
/// `dockerfile`) into a copy it holds locked until the sync is committed, so a concurrent build syncs into a copy
/// of its own; a later build reuses a copy and brings it to exactly its own tree (the build pod stamps files with
/// content-derived times, see `job::SCRIPT`). A channel's own deploys still run one at a time.
pub const DEFAULT_MAX_BUILDS: u16 = 2;
/// Deploy annotation recording a build refused before it was queued (its `[build]` line), so a repeated call
/// answers without logging again.
pub const REFUSED: &str = "slipway.dev/build-refused";
/// Serialises slot grants within the operator (reconciles of different deploys run concurrently; only the
/// leader reconciles, so this is the whole cluster).
static SLOTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// What the build step is asked to build.
pub struct BuildRequest<'a> {
    /// The deploy: its namespace, its uid (the deploy id of the log), the owner of the build Job.
    pub deploy: &'a Deploy,
    /// The app (template `app` or `docker`); its uid is the app id.
    pub app: &'a App,
    /// The channel, whose workload name is the image repository.
    pub channel: &'a Channel,
    /// The resolved 40-hex commit.
    pub sha: &'a str,
    /// The owner's plan cap on the charged image size.
    pub image_cap_bytes: u64,
}

/// Where a build is.
#[derive(Debug, Clone, PartialEq)]
pub enum BuildState {
    /// Waiting for a build slot; 1 is next.
    Queued {
        /// Place in the queue.
        position: usize,
    },
    /// The build pod is running.
    Building,
    /// Pushed, sized and within the cap.
    Built(DeployImage),
    /// Did not produce a usable image: one line for the Deploy's status message (details are in the log).
    Failed(String),
}

/// The outcome recorded on a finished build Job, in its [`job::RESULT`] annotation: what a later reconcile (of
/// this operator or the next) reads instead of the Job's pods, which are gone by then.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Recorded {
    /// Pushed, sized and within the cap.
    Built(DeployImage),
    /// No usable image, for this reason.
    Failed(String),
}

impl From<Recorded> for BuildState {
    fn from(recorded: Recorded) -> Self {
        match recorded {
            Recorded::Built(image) => BuildState::Built(image),
            Recorded::Failed(message) => BuildState::Failed(message),
        }
    }
}

/// The registry repository of a channel's images: `<namespace>/<workload name>`.
pub fn repository(channel: &Channel) -> Result<String, Error> {
    let namespace = channel.namespace().ok_or(Error::Incomplete("namespace"))?;
    Ok(format!(
        "{namespace}/{}",
        names::workload_name(&channel.name_any())
    ))
}

/// Moves the build of `req` one step and reports where it is. Idempotent and restart-safe: creates the build Job
/// when missing, otherwise reads it.
pub async fn advance(ctx: &Context, req: &BuildRequest<'_>) -> Result<BuildState, Error> {
    let namespace = req
        .deploy
        .namespace()
        .ok_or(Error::Incomplete("namespace"))?;
    let deploy_uid = req.deploy.uid().ok_or(Error::Incomplete("uid"))?;
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &namespace);
    let job = match jobs.get_opt(&job::job_name(&deploy_uid)).await? {
        Some(job) => job,
        None => match enqueue(ctx, req, &jobs).await? {
            Ok(job) => job,
            Err(refused) => return Ok(refused),
        },
    };
    if let Some(recorded) = job::annotation(&job, job::RESULT) {
        let recorded: Recorded = serde_json::from_str(recorded)
            .map_err(|e| Error::InvalidSpec(format!("unreadable build record: {e}")))?;
        return Ok(recorded.into());
    }
    let log = DeployLog {
        ctx,
        deploy_uid: &deploy_uid,
        jobs: &jobs,
    };
    match job::phase(&job) {
        JobPhase::Waiting => wait_or_start(ctx, req, &log, &job).await,
        JobPhase::Running => {
            // A restart between resuming the Job and logging it.
            log.progress(
                &job,
                "started",
                format!("[build] {}", start_line(req, &job, ctx)),
            )
            .await?;
            Ok(BuildState::Building)
        }
        JobPhase::Complete => outcome::finish(ctx, req, &log, &job, Ok(())).await,
        JobPhase::Failed(reason) => outcome::finish(ctx, req, &log, &job, Err(reason)).await,
    }
}

/// Plans the build and creates its Job (suspended); `Err(state)` when the build is refused.
async fn enqueue(
    ctx: &Context,
    req: &BuildRequest<'_>,
    jobs: &Api<Job>,
) -> Result<Result<Job, BuildState>, Error> {
    let namespace = req
        .deploy
        .namespace()
        .ok_or(Error::Incomplete("namespace"))?;
    let deploys: Api<Deploy> = Api::namespaced(ctx.client.clone(), &namespace);
    let deploy = deploys.get(&req.deploy.name_any()).await?;
    if let Some(line) = deploy.annotations().get(REFUSED) {
        return Ok(Err(BuildState::Failed(failure_message(line))));
    }
    let app_id = req.app.uid().ok_or(Error::Incomplete("uid"))?;
    let plan = match sources::fetch(&ctx.internal, &app_id, req.sha).await {
        Ok(sources) => dockerfile::plan(req.app.spec.template, &sources),
        Err(CallError::NotFound(message)) => Err(format!(
            "[build] the files of commit {} cannot be read: {message}",
            req.sha
        )),
        Err(e) => return Err(e.into()),
    };
    let plan = match plan {
        Ok(plan) => plan,
        Err(line) => {
            let deploy_uid = req.deploy.uid().ok_or(Error::Incomplete("uid"))?;
            ctx.internal
                .append_log(&deploy_uid, &format!("{line}\n"))
                .await?;
            let patch = json!({"metadata": {"annotations": {REFUSED: line}}});
            deploys
                .patch(&deploy.name_any(), &patch_params(), &Patch::Merge(&patch))
                .await?;
            return Ok(Err(BuildState::Failed(failure_message(&line))));
        }
    };
    let (_, channel) = names::parse_channel_resource_name(&req.channel.name_any())
        .map_err(|e| Error::InvalidSpec(e.0.into()))?;
    let image = image_ref(ctx, req)?;
    let enqueued_at = format!("{:020}", Timestamp::now().as_microsecond());
    let job = job::build_job(&job::JobInput {
        name: job::job_name(&req.deploy.uid().ok_or(Error::Incomplete("uid"))?),
        namespace: &namespace,
        owner: req
            .deploy
            .controller_owner_ref(&())
            .ok_or(Error::Incomplete("uid"))?,
        app: &req.app.name_any(),
        channel: channel.as_str(),
        deploy: &req.deploy.name_any(),
        image: &image,
        dockerfile: plan.generated_dockerfile.as_deref(),
        notes: &plan.notes,
        builder_image: &ctx.config.builder_image,
        buildkit_addr: &ctx.config.buildkit_addr,
        buildkit_tls: ctx.config.buildkit_ca.is_some(),
        enqueued_at,
    })?;
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    match jobs.create(&params, &job).await {
        Ok(job) => Ok(Ok(job)),
        // Another call created it first.
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(Ok(jobs.get(&job.name_any()).await?)),
        Err(e) => Err(e.into()),
    }
}

/// Starts a queued build when a slot is free, otherwise reports its place.
async fn wait_or_start(
    ctx: &Context,
    req: &BuildRequest<'_>,
    log: &DeployLog<'_>,
    this: &Job,
) -> Result<BuildState, Error> {
    let _slots = SLOTS.lock().await;
    let all: Api<Job> = match &ctx.config.namespace {
        Some(ns) => Api::namespaced(ctx.client.clone(), ns),
        None => Api::all(ctx.client.clone()),
    };
    let selector = format!("{}={}", job::BUILD_LABEL, job::BUILD_LABEL_VALUE);
    let listed = all.list(&ListParams::default().labels(&selector)).await?;
    let running = listed
        .items
        .iter()
        .filter(|j| job::phase(j) == JobPhase::Running)
        .count();
    let mut waiting: Vec<&Job> = listed
        .items
        .iter()
        .filter(|j| job::phase(j) == JobPhase::Waiting)
        .collect();
    waiting.sort_by_key(|j| job::queue_key(j));
    let mut position = 1;
    for other in waiting {
        if other.uid() == this.uid() {
            break;
        }
        if still_wanted(ctx, other).await? {
            position += 1;
        }
    }
    if running + position > ctx.max_builds {
        let line = format!(
            "[build] queued: position {position} ({running} build{} running)",
            if running == 1 { "" } else { "s" }
        );
        log.progress(this, "queued", line).await?;
        return Ok(BuildState::Queued { position });
    }
    let app_id = req.app.uid().ok_or(Error::Incomplete("uid"))?;
    let signed = ctx.internal.source_url(&app_id, req.sha).await?;
    let url = format!(
        "{}{}",
        ctx.config.pod_internal_url.trim_end_matches('/'),
        signed.path
    );
    // A suspended Job that never ran may change its pod template's annotations: the URL (and the registry token)
    // are minted now, so they cannot expire while the build waits.
    let mut annotations = json!({job::SOURCE_URL: url});
    if let Some(tokens) = &ctx.registry_tokens {
        let token = tokens.mint(
            &build_subject(this),
            &[Access::repository(
                &repository(req.channel)?,
                &["pull", "push"],
            )],
            job::BUILD_TIMEOUT + CREDENTIAL_SLACK,
        );
        annotations[job::REGISTRY_TOKEN] = json!(token);
    }
    if let Some(ca) = &ctx.config.buildkit_ca {
        give_buildkit_certificate(ctx, this, ca).await?;
    }
    let patch = json!({
        "spec": {"suspend": false, "template": {"metadata": {"annotations": annotations}}}
    });
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &this.namespace().unwrap_or_default());
    let started = jobs
        .patch(&this.name_any(), &patch_params(), &Patch::Merge(&patch))
        .await?;
    let line = format!(
        "[build] queue position {position}: {}",
        start_line(req, &started, ctx)
    );
    log.progress(&started, "started", line).await?;
    Ok(BuildState::Building)
}

/// Who a build's credentials name: `build:<namespace>/<job>`.
fn build_subject(job: &Job) -> String {
    format!(
        "build:{}/{}",
        job.namespace().unwrap_or_default(),
        job.name_any()
    )
}

/// Puts a client certificate for BuildKit, valid as long as the build may run, in the Secret the Job's pod mounts
/// (owned by the Job). A Secret already there is replaced: the build is about to start, and its certificate with it.
async fn give_buildkit_certificate(
    ctx: &Context,
    job: &Job,
    ca: &buildkit_tls::BuildkitCa,
) -> Result<(), Error> {
    let namespace = job.namespace().unwrap_or_default();
    let certificate = ca
        .client_certificate(&build_subject(job), job::BUILD_TIMEOUT + CREDENTIAL_SLACK)
        .map_err(Error::InvalidSpec)?;
    let owner = job
        .controller_owner_ref(&())
        .ok_or(Error::Incomplete("uid"))?;
    let secret = json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": job::tls_secret_name(&job.name_any()),
            "namespace": namespace,
            "labels": {slipway_crds::labels::MANAGED_BY: slipway_crds::labels::MANAGER},
            "ownerReferences": [owner],
        },
        "type": "Opaque",
        "stringData": {"ca.crt": certificate.ca, "tls.crt": certificate.cert, "tls.key": certificate.key},
    });
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(ctx.client.clone(), &namespace);
    secrets
        .patch(
            &job::tls_secret_name(&job.name_any()),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&secret),
        )
        .await?;
    Ok(())
}

/// Whether a queued Job's deploy still wants it; a Job whose deploy finished or is gone is removed from the queue.
async fn still_wanted(ctx: &Context, job: &Job) -> Result<bool, Error> {
    let namespace = job.namespace().unwrap_or_default();
    let owner = job
        .owner_references()
        .iter()
        .find(|o| o.kind == "Deploy")
        .map(|o| (o.name.clone(), o.uid.clone()));
    let deploys: Api<Deploy> = Api::namespaced(ctx.client.clone(), &namespace);
    let wanted = match owner {
        Some((name, uid)) => deploys.get_opt(&name).await?.is_some_and(|d| {
            d.uid().as_deref() == Some(uid.as_str())
                && d.status.as_ref().is_none_or(|s| s.phase.in_flight())
        }),
        None => false,
    };
    if !wanted {
        let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &namespace);
        crate::deletion::delete_if_present(&jobs, &job.name_any()).await?;
    }
    Ok(wanted)
}

/// `<registry>/<namespace>/<workload>:<sha>`.
fn image_ref(ctx: &Context, req: &BuildRequest<'_>) -> Result<String, Error> {
    Ok(format!(
        "{}/{}:{}",
        ctx.config.registry,
        repository(req.channel)?,
        req.sha
    ))
}

/// What is logged when a build leaves the queue: the image and the wait.
fn start_line(req: &BuildRequest<'_>, job: &Job, ctx: &Context) -> String {
    let image = image_ref(ctx, req).unwrap_or_default();
    let waited = job::annotation(job, job::ENQUEUED_AT)
        .and_then(|t| t.parse::<i64>().ok())
        .map(|queued| {
            let micros = Timestamp::now().as_microsecond().saturating_sub(queued);
            Duration::from_micros(u64::try_from(micros).unwrap_or(0))
        })
        .unwrap_or_default();
    format!(
        "building {image} (waited {} for a build slot)",
        human_duration(waited)
    )
}

/// `45s`, `2m 05s`.
pub fn human_duration(d: Duration) -> String {
    let secs = d.as_secs();
    if secs < 60 {
        format!("{secs}s")
    } else {
        format!("{}m {:02}s", secs / 60, secs % 60)
    }
}

/// The status message for a refusal line: the line without its `[build] ` tag.
fn failure_message(line: &str) -> String {
    line.strip_prefix("[build] ").unwrap_or(line).to_owned()
}

/// How the build step writes: as the operator's field manager.
fn patch_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    }
}

/// The deploy log, and the marks on the build Job that say what is already in it.
struct DeployLog<'a> {
    ctx: &'a Context,
    deploy_uid: &'a str,
    jobs: &'a Api<Job>,
}

impl DeployLog<'_> {
    async fn append(&self, text: &str) -> Result<(), Error> {
        self.ctx.internal.append_log(self.deploy_uid, text).await?;
        Ok(())
    }

    /// Logs the progress line of `stage` (`queued`, then `started`) unless it is already in the log; the
    /// Dockerfile's notes go with the first.
    async fn progress(&self, job: &Job, stage: &str, line: String) -> Result<(), Error> {
        let logged = job::annotation(job, job::LOGGED);
        if logged == Some(stage) || (stage == "queued" && logged == Some("started")) {
            return Ok(());
        }
        let mut text = String::new();
        if logged.is_none()
            && let Some(notes) = job::annotation(job, job::NOTES)
        {
            text.push_str(notes);
            text.push('\n');
        }
        text.push_str(&line);
        text.push('\n');
        self.append(&text).await?;
        let patch = json!({"metadata": {"annotations": {job::LOGGED: stage}}});
        self.jobs
            .patch(&job.name_any(), &patch_params(), &Patch::Merge(&patch))
            .await?;
        Ok(())
    }
}

/// Deletes every image of the channel's repository from the registry (the channel or its app is gone). The
/// registry frees the layers at its next garbage collection.
pub async fn remove_images(ctx: &Context, channel: &Channel) -> Result<(), Error> {
    let registry = Registry::of(ctx);
    let repository = repository(channel)?;
    for tag in registry.tags(&repository).await? {
        if let Some(digest) = registry.digest(&repository, &tag).await? {
            registry.delete(&repository, &digest).await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_in_seconds_then_minutes() {
        assert_eq!(human_duration(Duration::from_millis(400)), "0s");
        assert_eq!(human_duration(Duration::from_secs(45)), "45s");
        assert_eq!(human_duration(Duration::from_secs(125)), "2m 05s");
    }

    #[test]
    fn a_refusal_line_becomes_the_status_message_without_its_tag() {
        assert_eq!(
            failure_message("[build] launch.sh is missing at the repository root: x"),
            "launch.sh is missing at the repository root: x"
        );
    }

    #[test]
    fn outcomes_round_trip_through_the_job_annotation() {
        let recorded = Recorded::Failed("too big".into());
        let text = serde_json::to_string(&recorded).unwrap();
        assert_eq!(text, r#"{"failed":"too big"}"#);
        let back: Recorded = serde_json::from_str(&text).unwrap();
        assert_eq!(BuildState::from(back), BuildState::Failed("too big".into()));
    }
}
