//! What the bench sees of the operator's work from outside every slipway process: its own watches on the
//! apiserver record when each Channel first shows a status for its current generation (`status.observedGeneration`
//! equal to `metadata.generation`: reconciled) and when each Deploy reaches `success` or `failed`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::Api;
use kube::runtime::{WatchStreamExt, watcher};
use slipway_crds::deploy::DeployPhase;
use slipway_crds::{Channel, Deploy};
use tokio::task::JoinHandle;

/// The key of a channel: `<namespace>/<resource name>`.
pub fn channel_key(namespace: &str, resource: &str) -> String {
    format!("{namespace}/{resource}")
}

/// The first moments the watches saw things happen.
#[derive(Clone, Default)]
pub struct Observer {
    /// Channel key -> when its current generation was first seen reconciled.
    reconciled: Arc<Mutex<HashMap<String, Instant>>>,
    /// Deploy uid (the deploy id) -> when it was first seen finished, and whether it succeeded.
    finished: Arc<Mutex<HashMap<String, (Instant, bool)>>>,
    tasks: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl Observer {
    /// Starts both watches, cluster-wide.
    pub fn start(kube: &kube::Client) -> Self {
        let observer = Self::default();
        let reconciled = observer.reconciled.clone();
        let channels = tokio::spawn(
            watcher(
                Api::<Channel>::all(kube.clone()),
                watcher::Config::default(),
            )
            .default_backoff()
            .applied_objects()
            .for_each(move |channel| {
                if let Ok(c) = channel
                    && c.metadata.generation.is_some()
                    && c.status.as_ref().and_then(|s| s.observed_generation)
                        == c.metadata.generation
                {
                    let key = channel_key(
                        c.metadata.namespace.as_deref().unwrap_or_default(),
                        c.metadata.name.as_deref().unwrap_or_default(),
                    );
                    lock(&reconciled).entry(key).or_insert_with(Instant::now);
                }
                futures::future::ready(())
            }),
        );
        let finished = observer.finished.clone();
        let deploys = tokio::spawn(
            watcher(Api::<Deploy>::all(kube.clone()), watcher::Config::default())
                .default_backoff()
                .applied_objects()
                .for_each(move |deploy| {
                    if let Ok(d) = deploy
                        && let Some(uid) = d.metadata.uid.clone()
                    {
                        let phase = d.status.as_ref().map(|s| s.phase).unwrap_or_default();
                        if matches!(phase, DeployPhase::Success | DeployPhase::Failed) {
                            lock(&finished)
                                .entry(uid)
                                .or_insert_with(|| (Instant::now(), phase == DeployPhase::Success));
                        }
                    }
                    futures::future::ready(())
                }),
        );
        lock(&observer.tasks).extend([channels, deploys]);
        observer
    }

    /// When the channel `key` was first seen reconciled.
    pub fn reconciled(&self, key: &str) -> Option<Instant> {
        lock(&self.reconciled).get(key).copied()
    }

    /// Waits (polling this process's memory) until deploy `uid` is seen finished, for at most `within`; returns
    /// when, and whether it succeeded.
    pub async fn finished(&self, uid: &str, within: Duration) -> Option<(Instant, bool)> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(done) = lock(&self.finished).get(uid).copied() {
                return Some(done);
            }
            if Instant::now() > deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        if Arc::strong_count(&self.tasks) == 1 {
            for task in lock(&self.tasks).drain(..) {
                task.abort();
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
