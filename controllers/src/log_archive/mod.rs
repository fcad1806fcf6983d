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
    /// Pods whose instances could not all be reported (the API was away): looked at again on the next tick.
    pending: HashMap<String, Pod>,
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
    // The pods a relist (a watch that had to start over) showed: one it did not show was deleted meanwhile.
    let mut relisted: Option<HashSet<String>> = None;
    let mut retry = tokio::time::interval(RETRY * 5);
    loop {
        tokio::select! {
            event = events.try_next() => match event {
                Ok(Some(Event::Apply(pod))) => seen(&ctx, &state, &mut followers, &pod).await,
                Ok(Some(Event::InitApply(pod))) => {
                    if let (Some(list), Some(uid)) = (relisted.as_mut(), pod.uid()) {
                        list.insert(uid);
                    }
                    seen(&ctx, &state, &mut followers, &pod).await;
                }
                Ok(Some(Event::Delete(pod))) => {
                    if let Some(uid) = pod.uid() {
                        gone(&ctx, &state, &uid, Some(&pod)).await;
                    }
                }
                Ok(Some(Event::Init)) => relisted = Some(HashSet::new()),
                Ok(Some(Event::InitDone)) => {
                    let listed = relisted.take().unwrap_or_default();
                    let known: Vec<String> = state.lock().await.instances.keys().cloned().collect();
                    for uid in known.iter().filter(|uid| !listed.contains(*uid)) {
                        gone(&ctx, &state, uid, None).await;
                    }
                    settle(&ctx, &state).await;
                }
                Ok(None) => return,
                Err(e) => tracing::warn!(error = %e, "pod watch failed; retrying"),
            },
            _ = retry.tick() => {
                let pending: Vec<Pod> = state.lock().await.pending.drain().map(|(_, pod)| pod).collect();
                for pod in pending {
                    seen(&ctx, &state, &mut followers, &pod).await;
                }
            }
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
    // Instances the pod no longer shows will not be seen again: forget them (their followers finish on their own).
    let shown: HashSet<&str> = instances.iter().map(|i| i.container_id.as_str()).collect();
    let before = guard
        .instances
        .insert(uid.clone(), instances.clone())
        .unwrap_or_default();
    for old in before
        .iter()
        .filter(|i| !shown.contains(i.container_id.as_str()))
    {
        guard.reported.remove(&old.container_id);
        guard.followed.remove(&old.container_id);
    }
    guard.pending.remove(&uid);
    drop(guard);
    for instance in instances {
        let record = match report(ctx, state, &owner, &instance).await {
            Reported::Recorded(record) => record,
            Reported::Unchanged | Reported::Forgotten => continue,
            Reported::Failed => {
                state.lock().await.pending.insert(uid.clone(), pod.clone());
                continue;
            }
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
        target.recorded_until = recorded_until;
        match outcome {
            Outcome::Forgotten => return,
            Outcome::Drained if target.previous => return,
            // A followed stream also ends cleanly when the apiserver or the kubelet goes away: only the pod says
            // whether the instance ended.
            Outcome::Drained | Outcome::Interrupted => {}
        }
        // The stream may also have broken because the instance ended and restarted: its output is then the pod's
        // previous one. A pod that is gone has nothing left to read.
        match target.pods.get_opt(&target.pod).await {
            Ok(Some(pod)) => {
                let Some(now) = instances::of_pod(&pod)
                    .into_iter()
                    .find(|i| i.container_id == target.container_id)
                else {
                    return;
                };
                if outcome == Outcome::Drained && !(now.current && now.facts.running) {
                    return;
                }
                target.previous = !now.current;
            }
            Ok(None) => return,
            Err(e) => tracing::debug!(pod = %target.pod, error = %e, "pod not readable; retrying"),
        }
        tokio::time::sleep(RETRY).await;
    }
}

/// A pod was deleted (`pod` is its last state, when the watch saw the deletion): its instances have ended,
/// whatever it showed last.
async fn gone(ctx: &Arc<Context>, state: &Arc<Mutex<State>>, uid: &str, pod: Option<&Pod>) {
    let mut guard = state.lock().await;
    let owner = guard.owners.remove(uid);
    let last = guard.instances.remove(uid).unwrap_or_default();
    guard.pending.remove(uid);
    drop(guard);
    let Some(owner) = owner else { return };
    let all: Vec<Instance> = pod
        .map(instances::of_pod)
        .unwrap_or_default()
        .into_iter()
        .chain(last)
        .collect();
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

/// After a full list: generations still recorded as running whose instances no listed pod shows ended while no
/// archive watched (their pods were deleted meanwhile). Only an archive that sees every namespace can tell.
async fn settle(ctx: &Context, state: &Mutex<State>) {
    if ctx.config.namespace.is_some() {
        return;
    }
    let container_ids = state
        .lock()
        .await
        .instances
        .values()
        .flatten()
        .map(|i| i.container_id.clone())
        .collect();
    let live = slipway_internal::protocol::RuntimeSettle { container_ids };
    if let Err(e) = ctx.internal.settle_runtime_containers(&live).await {
        tracing::warn!(error = %e, "ended generations not settled; the next relist tries again");
    }
}

/// How reporting an instance went.
enum Reported {
    /// Recorded; the generation's record.
    Recorded(slipway_internal::protocol::RuntimeContainerRecord),
    /// Reported before with the same facts, and followed.
    Unchanged,
    /// The API records no generation of it (its app or channel is gone).
    Forgotten,
    /// The API could not be reached: try again later.
    Failed,
}

/// Reports an instance's facts unless they are what was reported last.
async fn report(
    ctx: &Context,
    state: &Mutex<State>,
    owner: &Owner,
    instance: &Instance,
) -> Reported {
    let mut facts = instance.facts.clone();
    facts.app_id.clone_from(&owner.app_id);
    facts.channel_id.clone_from(&owner.channel_id);
    {
        let guard = state.lock().await;
        if guard.reported.get(&instance.container_id) == Some(&facts)
            && guard.followed.contains(&instance.container_id)
        {
            return Reported::Unchanged;
        }
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
            Reported::Recorded(record)
        }
        Err(CallError::NotFound(_)) => Reported::Forgotten,
        Err(e) => {
            tracing::warn!(pod = %facts.pod_name, error = %e, "container generation not recorded; retrying");
            Reported::Failed
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
