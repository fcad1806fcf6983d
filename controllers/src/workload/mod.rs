//! The run step of a deploy of an `app` or `docker` channel, blue/green per deploy. Each deploy gets its own
//! immutable env Secret and its own Deployment (`<channel workload>-<first 8 hex of the deploy id>`) next to the
//! version that serves; the channel's Service selects pods by deploy, so the route moves to the new version only
//! when [`promote`] is called after [`advance`] reported it ready, and the old version is told to stop only once
//! the Service's endpoints no longer reach it; a version that never gets ready is [`discard`]ed without the serving
//! one noticing. Each Deployment has a PodDisruptionBudget that keeps a node drain from taking its one pod down
//! ([`crate::evacuate`] moves it first). Everything is owned by the Channel, so deleting a channel or
//! its app stops its workloads through garbage collection.
//!
//! No state is kept in memory: every call reads the cluster, so a restarted operator carries on where it was.

mod objects;
mod probe;
mod readiness;
mod route;

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, LogParams, Patch, PatchParams, PostParams};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use slipway_crds::{App, Channel, Deploy, ReadyBy, labels, plans::Plan};

use crate::context::{Context, FIELD_MANAGER};
use crate::deletion::delete_if_present;
use crate::error::Error;

pub use objects::{
    APP_CONTAINER, APP_UID, FORWARD_PORT, FULL_CPU_REQUEST_PERCENT, HTTP_PORT, Names,
    app_resources, disruption_budget, tmp_volume,
};
pub use probe::CONTAINER as READINESS_CONTAINER;
pub use readiness::WINDOW as READINESS_WINDOW;

/// What a deploy brings live: the resources it concerns and what it runs.
pub struct Release<'a> {
    /// The deploy; its uid is the deploy id, its namespace the owner's.
    pub deploy: &'a Deploy,
    /// The app: its owner (`SVC_USER`) and template (`app` or `docker`).
    pub app: &'a App,
    /// The channel deployed to; its Service is named after it.
    pub channel: &'a Channel,
    /// The commit (`SVC_SHA`).
    pub sha: &'a str,
    /// Pullable reference (by digest) of the built image in the cluster's registry.
    pub image: &'a str,
    /// The deploy's user environment (the values of its env snapshot).
    pub env: &'a BTreeMap<String, String>,
    /// The owner's plan: memory limit and CPU share of the container.
    pub plan: &'static Plan,
    /// How much of the plan's CPU share the pod requests ([`crate::OperatorConfig::cpu_request_percent`]).
    pub cpu_request_percent: u8,
}

/// Keys the platform injects (recorded by name in the deploy's env snapshot); they win over user keys.
pub const SYSTEM_ENV_KEYS: [&str; 4] = [
    "SVC_HTTP_PORT",
    "PORT",
    "SVC_FORWARD_PORT",
    "SVC_READY_FILE",
];

/// Where a deploy's new version stands.
#[derive(Debug, Clone, PartialEq)]
pub enum Rollout {
    /// Starting; call again.
    Starting,
    /// Passed readiness, by this check; ready to [`promote`].
    Ready(ReadyBy),
    /// Will not get ready; the message says why in one line. [`discard`] it.
    Failed(String),
}

/// Ensures this deploy's env Secret and Deployment exist (owned by the Channel) and reports readiness. Idempotent
/// and restart-safe. Fails once the readiness window (from the Deployment's creation) passes, with a message
/// naming the checks that timed out, or earlier when the process keeps crashing, quoting its last output.
pub async fn advance(ctx: &Context, release: &Release<'_>) -> Result<Rollout, Error> {
    let names = Names::of(release.deploy)?;
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &names.namespace);
    if let Some(tokens) = &ctx.registry_tokens {
        // Applied on every pass, so a new signing key reaches the credential.
        let repository = crate::build::repository(release.channel)?;
        let secret = objects::pull_secret(
            release,
            &names,
            &ctx.config.registry,
            &repository,
            &tokens.pull_password(&repository),
        )?;
        secrets
            .patch(
                &names.pull_secret,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&secret),
            )
            .await?;
    }
    let deployment = objects::deployment(
        release,
        &names,
        &ctx.config.probe_image,
        ctx.registry_tokens.is_some(),
    )?;
    create_if_missing(&secrets, &objects::env_secret(release, &names)?).await?;
    let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), &names.namespace);
    let deployment = create_if_missing(&deployments, &deployment).await?;
    if ctx.config.app_disruption_budgets && ctx.config.namespace.is_none() {
        let budgets: Api<PodDisruptionBudget> =
            Api::namespaced(ctx.client.clone(), &names.namespace);
        create_if_missing(&budgets, &objects::disruption_budget(&deployment)?).await?;
    }
    let created = deployment
        .metadata
        .creation_timestamp
        .as_ref()
        .ok_or(Error::Incomplete("creationTimestamp"))?;
    let window = ctx.config.readiness_window;
    let deadline = readiness::deadline(created.0, window);

    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &names.namespace);
    let selector = format!("{}={}", labels::DEPLOY, names.deploy_uid);
    let listed = pods.list(&ListParams::default().labels(&selector)).await?;
    let past_deadline = Timestamp::now() >= deadline;
    Ok(match readiness::observe(&listed.items, deadline) {
        readiness::Observation::Passed { pod } => {
            let log = container_log(&pods, &pod, probe::CONTAINER).await?;
            match probe::passed_by(&log) {
                Some(by) => Rollout::Ready(by),
                // The sidecar prints before it marks itself ready, so this is a log not readable yet.
                None if !past_deadline => Rollout::Starting,
                None => Rollout::Failed(
                    "readiness: the pod passed but the readiness sidecar's log does not say how"
                        .to_owned(),
                ),
            }
        }
        readiness::Observation::Crashing {
            pod,
            restarts,
            last_exit,
        } => {
            // The container is not running, so its log is that of the run that ended last.
            let output = container_log(&pods, &pod, objects::APP_CONTAINER).await?;
            Rollout::Failed(readiness::crashed_message(restarts, &last_exit, &output))
        }
        readiness::Observation::Waiting { detail } if past_deadline => Rollout::Failed(
            readiness::timed_out_message(&names.ready_file, detail.as_deref(), window),
        ),
        readiness::Observation::Waiting { .. } => Rollout::Starting,
    })
}

/// Where a [`promote`] stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Switch {
    /// The Service selects the new pods, but its EndpointSlices may still send requests to an old version, which
    /// keeps running; call again (the slices' change wakes the deploy).
    Moving,
    /// The route reaches only the new version, and the old versions are told to stop (each drains first).
    Done,
}

/// Points the channel's Service at this deploy's pods; once its EndpointSlices route only to them (see
/// [`route`]), removes the channel's other Deployments and env Secrets. Idempotent: call until [`Switch::Done`].
pub async fn promote(ctx: &Context, release: &Release<'_>) -> Result<Switch, Error> {
    let names = Names::of(release.deploy)?;
    let service = objects::service(release, &names)?;
    let services: Api<Service> = Api::namespaced(ctx.client.clone(), &names.namespace);
    services
        .patch(
            &names.service,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&service),
        )
        .await?;
    if !route::serves_only(ctx, &names).await? {
        return Ok(Switch::Moving);
    }
    let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), &names.namespace);
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(ctx.client.clone(), &names.namespace);
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &names.namespace);
    let run = objects::superseded_selector(release.channel, &names, labels::COMPONENT_RUN);
    let env = objects::superseded_selector(release.channel, &names, labels::COMPONENT_ENV);
    delete_matching(&deployments, &run).await?;
    delete_matching(&budgets, &run).await?;
    delete_matching(&secrets, &env).await?;
    Ok(Switch::Done)
}

/// Removes this deploy's Deployment and env Secret (a failed deploy); the serving version is untouched.
/// Idempotent.
pub async fn discard(ctx: &Context, deploy: &Deploy) -> Result<(), Error> {
    let names = Names::of(deploy)?;
    let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), &names.namespace);
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(ctx.client.clone(), &names.namespace);
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &names.namespace);
    delete_if_present(&deployments, &names.deployment).await?;
    delete_if_present(&budgets, &names.deployment).await?;
    delete_if_present(&secrets, &names.env_secret).await?;
    Ok(())
}

/// Creates `object` unless an object of its name exists; returns what the cluster holds. Existing objects are
/// left as they are: a deploy's Secret is immutable and its Deployment never changes.
pub(crate) async fn create_if_missing<K>(api: &Api<K>, object: &K) -> Result<K, Error>
where
    K: Resource + Clone + DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let name = object.meta().name.clone().unwrap_or_default();
    if let Some(existing) = api.get_opt(&name).await? {
        return Ok(existing);
    }
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PostParams::default()
    };
    match api.create(&params, object).await {
        Ok(created) => Ok(created),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(api.get(&name).await?),
        Err(e) => Err(e.into()),
    }
}

/// Deletes every object matching the label `selector`.
async fn delete_matching<K>(api: &Api<K>, selector: &str) -> Result<(), Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let listed = api
        .list_metadata(&ListParams::default().labels(selector))
        .await?;
    for object in listed.items {
        if let Some(name) = object.metadata.name.as_deref() {
            delete_if_present(api, name).await?;
        }
    }
    Ok(())
}

/// The end of the log of one container of a pod (its current run, or the last one when it is not running);
/// empty when there is none yet.
async fn container_log(pods: &Api<Pod>, pod: &str, container: &str) -> Result<String, Error> {
    let params = LogParams {
        container: Some(container.to_owned()),
        tail_lines: Some(readiness::QUOTED_LINES * 4),
        ..LogParams::default()
    };
    match pods.logs(pod, &params).await {
        Ok(log) => Ok(log),
        // No log yet (container not started, or no previous run): nothing to read, not an error.
        Err(kube::Error::Api(s)) if s.code == 400 || s.code == 404 => Ok(String::new()),
        Err(e) => Err(e.into()),
    }
}
