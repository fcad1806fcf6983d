//! The runtime log archive: keeps the output of every `app` and `docker` container after Kubernetes drops it.
//!
//! The kubelet keeps a container's output only while its pod exists, and only of the current and the previous
//! instance, so a redeploy, a second crash or a deleted pod loses it. The archive watches the app pods (the
//! `run` component of every deploy), records each instance of their app container as a generation of its channel
//! (with its state: running, exit code, OOM kill, times), and follows each instance's output into the platform
//! database through the API's internal routes. The runtime-log route reads it from there.
//!
//! Nothing is kept in memory that the cluster or the database does not also hold: after a restart the archive
//! reads each instance the kubelet still has from the generation's last recorded timestamp on. Output written while
//! no operator ran, by an instance whose pod was deleted in that time, is lost; so is output of an instance that
//! ended and restarted twice between two looks at its pod (the kubelet keeps only one previous instance).

mod follow;
pub mod instances;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, watcher::Config};
use kube::{Api, ResourceExt};
use slipway_crds::{App, Channel, labels};
use slipway_internal::CallError;
use slipway_internal::protocol::RuntimeContainer;
use tokio::sync::Mutex;
use tokio::task::JoinSet;

use self::follow::{Outcome, Target};
use self::instances::Instance;
use crate::context::Context;

/// How long a follower waits before it opens an interrupted stream again.
const RETRY: Duration = Duration::from_secs(2);

/// The app and channel a pod runs for.
#[derive(Debug, Clone)]
struct Owner {
    app_id: String,
    channel_id: String,
}

/// What the archive remembers between pod events.
#[derive(Default)]
struct State {
    /// Owners of the pods seen, by pod uid.
    owners: HashMap<String, Owner>,
    /// The instances last seen of each pod (by pod uid), to report their end when the pod goes.
    instances: HashMap<String, Vec<Instance>>,
    /// Facts last reported per instance, so an unchanged pod is not reported again.
    reported: HashMap<String, RuntimeContainer>,
    /// Instances being followed or drained.
    followed: HashSet<String>,
}

/// Runs the archive until the watch ends (the process stops).
pub async fn run(ctx: Arc<Context>) {
    let pods: Api<Pod> = match &ctx.config.namespace {
        Some(ns) => Api::namespaced(ctx.client.clone(), ns),
        None => Api::all(ctx.client.clone()),
    };
    let selector = format!(
        "{}={},{}={}",
        labels::COMPONENT,
        labels::COMPONENT_RUN,
        labels::MANAGED_BY,
        labels::MANAGER
    );
    let state = Arc::new(Mutex::new(State::default()));
    let mut followers = JoinSet::new();
    let mut events = watcher::watcher(pods, Config::default().labels(&selector))
        .default_backoff()
        .boxed();
    loop {
        tokio::select! {
            event = events.try_next() => match event {
                Ok(Some(Event::Apply(pod) | Event::InitApply(pod))) => {
                    seen(&ctx, &state, &mut followers, &pod).await;
                }
                Ok(Some(Event::Delete(pod))) => gone(&ctx, &state, &pod).await,
                Ok(Some(Event::Init | Event::InitDone)) => {}
                Ok(None) => return,
                Err(e) => tracing::warn!(error = %e, "pod watch failed; retrying"),
            },
            Some(done) = followers.join_next(), if !followers.is_empty() => {
                if let Err(e) = done {
                    tracing::warn!(error = %e, "a log follower panicked");
                }
            }
        }
    }
}

/// A pod appeared or changed: report its instances and follow the new ones.
async fn seen(
    ctx: &Arc<Context>,
    state: &Arc<Mutex<State>>,
    followers: &mut JoinSet<()>,
    pod: &Pod,
) {
    let Some(uid) = pod.uid() else { return };
    let Some(owner) = owner_of(ctx, state, pod, &uid).await else {
        return;
    };
    let instances = instances::of_pod(pod);
    let mut guard = state.lock().await;
    guard.instances.insert(uid, instances.clone());
    drop(guard);
    for instance in instances {
        let Some(record) = report(ctx, state, &owner, &instance).await else {
            continue;
        };
        let mut guard = state.lock().await;
        if !guard.followed.insert(instance.container_id.clone()) {
            continue;
        }
        drop(guard);
        let target = Target {
            pods: Api::namespaced(ctx.client.clone(), &pod.namespace().unwrap_or_default()),
            pod: pod.name_any(),
            container_id: instance.container_id.clone(),
            previous: !instance.current,
            recorded_until: record.last_timestamp,
        };
        followers.spawn(keep_following(ctx.clone(), target));
    }
}

/// Follows an instance until its output is all recorded (or the API forgot it).
async fn keep_following(ctx: Arc<Context>, mut target: Target) {
    loop {
        let (outcome, recorded_until) = follow::follow(&target, &ctx.internal).await;
        match outcome {
            Outcome::Drained | Outcome::Forgotten => return,
            Outcome::Interrupted => target.recorded_until = recorded_until,
        }
        tokio::time::sleep(RETRY).await;
        // The stream may have broken because the instance ended and restarted: its output is then the pod's
        // previous one. A pod that is gone has nothing left to read.
        match target.pods.get_opt(&target.pod).await {
            Ok(Some(pod)) => {
                let Some(now) = instances::of_pod(&pod)
                    .into_iter()
                    .find(|i| i.container_id == target.container_id)
                else {
                    return;
                };
                target.previous = !now.current;
            }
            Ok(None) => return,
            Err(e) => tracing::debug!(pod = %target.pod, error = %e, "pod not readable; retrying"),
        }
    }
}

/// A pod was deleted: its instances have ended (whatever it showed last).
async fn gone(ctx: &Arc<Context>, state: &Arc<Mutex<State>>, pod: &Pod) {
    let Some(uid) = pod.uid() else { return };
    let mut guard = state.lock().await;
    let owner = guard.owners.remove(&uid);
    let last = guard.instances.remove(&uid).unwrap_or_default();
    drop(guard);
    let Some(owner) = owner else { return };
    let all: Vec<Instance> = instances::of_pod(pod).into_iter().chain(last).collect();
    for instance in &all {
        let ended = instances::ended_with_pod(instance.clone());
        report(ctx, state, &owner, &ended).await;
    }
    // Their followers drain what the stream still holds on their own; nothing will look for these again.
    let mut guard = state.lock().await;
    for instance in all {
        guard.reported.remove(&instance.container_id);
        guard.followed.remove(&instance.container_id);
    }
}

/// Reports an instance's facts unless they are what was reported last; answers the generation's record.
async fn report(
    ctx: &Context,
    state: &Mutex<State>,
    owner: &Owner,
    instance: &Instance,
) -> Option<slipway_internal::protocol::RuntimeContainerRecord> {
    let mut facts = instance.facts.clone();
    facts.app_id.clone_from(&owner.app_id);
    facts.channel_id.clone_from(&owner.channel_id);
    let unchanged = state.lock().await.reported.get(&instance.container_id) == Some(&facts);
    if unchanged && state.lock().await.followed.contains(&instance.container_id) {
        return None;
    }
    match ctx
        .internal
        .runtime_container(&instance.container_id, &facts)
        .await
    {
        Ok(record) => {
            state
                .lock()
                .await
                .reported
                .insert(instance.container_id.clone(), facts);
            Some(record)
        }
        Err(CallError::NotFound(_)) => None,
        Err(e) => {
            tracing::warn!(pod = %facts.pod_name, error = %e, "container generation not recorded");
            None
        }
    }
}

/// The app and channel `pod` runs for, from its labels and the Channel and App it names (cached per pod).
async fn owner_of(ctx: &Context, state: &Mutex<State>, pod: &Pod, uid: &str) -> Option<Owner> {
    if let Some(owner) = state.lock().await.owners.get(uid) {
        return Some(owner.clone());
    }
    let namespace = pod.namespace()?;
    let app = pod.labels().get(labels::APP)?.clone();
    let channel = pod.labels().get(labels::CHANNEL)?.clone();
    let channels: Api<Channel> = Api::namespaced(ctx.client.clone(), &namespace);
    let apps: Api<App> = Api::namespaced(ctx.client.clone(), &namespace);
    let channel = channels.get_opt(&format!("{app}.{channel}")).await.ok()??;
    let app = apps.get_opt(&app).await.ok()??;
    let owner = Owner {
        app_id: app.uid()?,
        channel_id: channel.uid()?,
    };
    state
        .lock()
        .await
        .owners
        .insert(uid.to_owned(), owner.clone());
    Some(owner)
}
