//! An in-memory cache of Apps, Channels, Deploys, Domains and Forwards, kept current by reflectors, so reads never list the apiserver. Writes
//! go to the apiserver and then wait until the cache has seen them, so a client reads its own writes.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use futures::StreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use slipway_crds::{App, Channel, Deploy, Domain, Forward};
use tokio::task::JoinHandle;

/// How long a write waits for the cache to see it.
const READ_YOUR_WRITES: Duration = Duration::from_secs(10);

/// Cached Apps, Channels, Deploys, Domains and Forwards of every namespace. Objects being deleted are left out of every
/// answer.
#[derive(Clone)]
pub struct Cache {
    apps: Store<App>,
    channels: Store<Channel>,
    deploys: Store<Deploy>,
    domains: Store<Domain>,
    forwards: Store<Forward>,
}

fn live<K: kube::Resource>(o: &Arc<K>) -> bool {
    o.meta().deletion_timestamp.is_none()
}

impl Cache {
    /// Starts the reflectors and waits until each has listed everything once.
    pub async fn start(client: Client) -> anyhow::Result<(Self, Vec<JoinHandle<()>>)> {
        let (apps, app_task) = reflect::<App>(client.clone());
        let (channels, channel_task) = reflect::<Channel>(client.clone());
        let (deploys, deploy_task) = reflect::<Deploy>(client.clone());
        let (domains, domain_task) = reflect::<Domain>(client.clone());
        let (forwards, forward_task) = reflect::<Forward>(client);
        let ready = async {
            apps.wait_until_ready().await?;
            channels.wait_until_ready().await?;
            deploys.wait_until_ready().await?;
            domains.wait_until_ready().await?;
            forwards.wait_until_ready().await
        };
        tokio::time::timeout(Duration::from_secs(60), ready)
            .await
            .context("the App, Channel, Deploy, Domain and Forward caches did not sync within 60s; are the slipway CRDs installed?")?
            .context("cache writer dropped")?;
        Ok((
            Self {
                apps,
                channels,
                deploys,
                domains,
                forwards,
            },
            vec![
                app_task,
                channel_task,
                deploy_task,
                domain_task,
                forward_task,
            ],
        ))
    }

    /// Every live Domain, in every namespace.
    pub fn domains(&self) -> Vec<Arc<Domain>> {
        self.domains.state().into_iter().filter(live).collect()
    }

    /// Domains of the Channel resource `channel` in `namespace`, oldest first.
    pub fn domains_of(&self, namespace: &str, channel: &str) -> Vec<Arc<Domain>> {
        let mut domains: Vec<_> = self
            .domains()
            .into_iter()
            .filter(|d| d.namespace().as_deref() == Some(namespace) && d.spec.channel == channel)
            .collect();
        domains.sort_by_key(|d| (d.metadata.creation_timestamp.clone(), d.name_any()));
        domains
    }

    /// Waits until the cached Domain with `uid` satisfies `ready` (and is live).
    pub async fn domain_where(
        &self,
        uid: &str,
        ready: impl Fn(&Domain) -> bool,
    ) -> anyhow::Result<Arc<Domain>> {
        poll(|| {
            self.domains
                .find(|d| d.metadata.uid.as_deref() == Some(uid))
                .filter(|d| live(d) && ready(d))
        })
        .await
        .context("the domain did not reach the cache in the state waited for")
    }

    /// Waits until no live Domain has `uid`.
    pub async fn domain_gone(&self, uid: &str) -> anyhow::Result<()> {
        let gone = || {
            self.domains
                .find(|d| d.metadata.uid.as_deref() == Some(uid))
                .filter(live)
                .is_none()
        };
        poll(|| gone().then_some(()))
            .await
            .context("the detached domain stayed in the cache")
    }

    /// The live Forward of the Channel resource `channel` in `namespace` (named after it), if it is exposed.
    pub fn forward_of(&self, namespace: &str, channel: &str) -> Option<Arc<Forward>> {
        self.forwards
            .find(|f| f.namespace().as_deref() == Some(namespace) && f.spec.channel == channel)
            .filter(live)
    }

    /// Waits until no live Forward of `namespace` is named `name`.
    pub async fn forward_gone(&self, namespace: &str, name: &str) -> anyhow::Result<()> {
        let gone = || {
            self.forwards
                .find(|f| f.namespace().as_deref() == Some(namespace) && f.name_any() == name)
                .filter(live)
                .is_none()
        };
        poll(|| gone().then_some(()))
            .await
            .context("the unexposed forward stayed in the cache")
    }

    /// Deploys of the Channel resource `channel` in `namespace`, newest first.
    pub fn deploys_of(&self, namespace: &str, channel: &str) -> Vec<Arc<Deploy>> {
        let mut deploys: Vec<_> = self
            .deploys
            .state()
            .into_iter()
            .filter(|d| {
                live(d) && d.namespace().as_deref() == Some(namespace) && d.spec.channel == channel
            })
            .collect();
        deploys.sort_by(|a, b| {
            let key = |d: &Deploy| (d.metadata.creation_timestamp.clone(), d.name_any());
            key(b).cmp(&key(a))
        });
        deploys
    }

    /// Waits until the cache holds a Deploy with `uid`.
    pub async fn deploy_appeared(&self, uid: &str) -> anyhow::Result<Arc<Deploy>> {
        poll(|| {
            self.deploys
                .find(|d| d.metadata.uid.as_deref() == Some(uid))
                .filter(live)
        })
        .await
        .context("the new deploy did not reach the cache")
    }

    /// Apps in `namespace`.
    pub fn apps_in(&self, namespace: &str) -> Vec<Arc<App>> {
        self.apps
            .state()
            .into_iter()
            .filter(|a| live(a) && a.namespace().as_deref() == Some(namespace))
            .collect()
    }

    /// Every live App.
    pub fn apps(&self) -> Vec<Arc<App>> {
        self.apps.state().into_iter().filter(live).collect()
    }

    /// The App with this uid.
    pub fn app_by_uid(&self, uid: &str) -> Option<Arc<App>> {
        self.apps
            .find(|a| a.metadata.uid.as_deref() == Some(uid))
            .filter(live)
    }

    /// Channels of the app `app` in `namespace`, prod first, then by name.
    pub fn channels_of(&self, namespace: &str, app: &str) -> Vec<Arc<Channel>> {
        let mut channels: Vec<_> = self
            .channels
            .state()
            .into_iter()
            .filter(|c| live(c) && c.namespace().as_deref() == Some(namespace) && c.spec.app == app)
            .collect();
        channels.sort_by_key(|c| (!c.name_any().ends_with(".prod"), c.name_any()));
        channels
    }

    /// Channels in `namespace`: every channel of one account.
    pub fn channels_in(&self, namespace: &str) -> Vec<Arc<Channel>> {
        self.channels
            .state()
            .into_iter()
            .filter(|c| live(c) && c.namespace().as_deref() == Some(namespace))
            .collect()
    }

    /// Every live Channel.
    pub fn channels(&self) -> Vec<Arc<Channel>> {
        self.channels.state().into_iter().filter(live).collect()
    }

    /// Waits until the cache holds an App with `uid`.
    pub async fn app_appeared(&self, uid: &str) -> anyhow::Result<Arc<App>> {
        poll(|| self.app_by_uid(uid))
            .await
            .context("the new app did not reach the cache")
    }

    /// Waits until the cached App with `uid` is at `generation` or later.
    pub async fn app_at_generation(&self, uid: &str, generation: i64) -> anyhow::Result<Arc<App>> {
        poll(|| {
            self.app_by_uid(uid)
                .filter(|a| a.metadata.generation.unwrap_or_default() >= generation)
        })
        .await
        .context("the changed app did not reach the cache")
    }

    /// Waits until the cache holds a Channel with `uid`.
    pub async fn channel_appeared(&self, uid: &str) -> anyhow::Result<Arc<Channel>> {
        poll(|| {
            self.channels
                .find(|c| c.metadata.uid.as_deref() == Some(uid))
                .filter(live)
        })
        .await
        .context("the new channel did not reach the cache")
    }

    /// Waits until no live App has `uid`.
    pub async fn app_gone(&self, uid: &str) -> anyhow::Result<()> {
        poll(|| self.app_by_uid(uid).is_none().then_some(()))
            .await
            .context("the deleted app stayed in the cache")
    }

    /// Waits until no live Channel has `uid`.
    pub async fn channel_gone(&self, uid: &str) -> anyhow::Result<()> {
        let gone = || {
            self.channels
                .find(|c| c.metadata.uid.as_deref() == Some(uid))
                .filter(live)
                .is_none()
        };
        poll(|| gone().then_some(()))
            .await
            .context("the deleted channel stayed in the cache")
    }
}

async fn poll<T>(probe: impl FnMut() -> Option<T>) -> anyhow::Result<T> {
    poll_for(READ_YOUR_WRITES, probe).await
}

/// Polls `probe` until it answers or `limit` has passed.
pub async fn poll_for<T>(
    limit: Duration,
    mut probe: impl FnMut() -> Option<T>,
) -> anyhow::Result<T> {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(found) = probe() {
            return Ok(found);
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "timed out after {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn reflect<K>(client: Client) -> (Store<K>, JoinHandle<()>)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store();
    let stream = reflector(
        writer,
        watcher(Api::<K>::all(client), watcher::Config::default()).default_backoff(),
    );
    let task = tokio::spawn(async move {
        stream
            .touched_objects()
            .for_each(|event| async move {
                if let Err(e) = event {
                    tracing::warn!(error = %e, kind = K::kind(&()).as_ref(), "watch error; retrying");
                }
            })
            .await;
    });
    (reader, task)
}

use kube::runtime::reflector::reflector;
