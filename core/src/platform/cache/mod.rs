//! An in-memory cache of Apps, Channels, Deploys, Domains and Forwards, kept current by reflectors, so reads never list the apiserver. Writes
//! go to the apiserver and then wait until the cache has seen them, so a client reads its own writes. Each kind is
//! [`index`]ed by what the API looks it up by (namespace, app, channel, uid), so a lookup costs its answer and not
//! a scan of the cluster.

mod index;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use futures::StreamExt;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use slipway_crds::{App, Channel, Deploy, Domain, Forward};
use tokio::task::JoinHandle;

use index::{Indexed, Keys};

/// How long a write waits for the cache to see it.
const READ_YOUR_WRITES: Duration = Duration::from_secs(10);

/// Cached Apps, Channels, Deploys, Domains and Forwards of every namespace. Objects being deleted are left out of every
/// answer.
#[derive(Clone)]
pub struct Cache {
    apps: Indexed<App>,
    channels: Indexed<Channel>,
    deploys: Indexed<Deploy>,
    domains: Indexed<Domain>,
    forwards: Indexed<Forward>,
}

/// The index key of the objects of `namespace`.
fn in_namespace(namespace: Option<String>) -> String {
    format!("ns/{}", namespace.unwrap_or_default())
}

/// The index key of the Channels of `app` in `namespace`.
fn of_app(namespace: &str, app: &str) -> String {
    format!("app/{namespace}/{app}")
}

/// The index key of what belongs to the Channel resource `channel` in `namespace`.
fn of_channel(namespace: &str, channel: &str) -> String {
    format!("channel/{namespace}/{channel}")
}

/// Apps are looked up by namespace.
const APP_KEYS: Keys<App> = |a| vec![in_namespace(a.namespace())];
/// Channels by namespace and by app.
const CHANNEL_KEYS: Keys<Channel> = |c| {
    let namespace = c.namespace().unwrap_or_default();
    vec![in_namespace(c.namespace()), of_app(&namespace, &c.spec.app)]
};
/// Deploys, Domains and Forwards by channel.
const DEPLOY_KEYS: Keys<Deploy> = |d| {
    vec![of_channel(
        &d.namespace().unwrap_or_default(),
        &d.spec.channel,
    )]
};
const DOMAIN_KEYS: Keys<Domain> = |d| {
    vec![of_channel(
        &d.namespace().unwrap_or_default(),
        &d.spec.channel,
    )]
};
const FORWARD_KEYS: Keys<Forward> = |f| {
    vec![of_channel(
        &f.namespace().unwrap_or_default(),
        &f.spec.channel,
    )]
};

fn live<K: kube::Resource>(o: &Arc<K>) -> bool {
    o.meta().deletion_timestamp.is_none()
}

impl Cache {
    /// Starts the reflectors and waits until each has listed everything once.
    pub async fn start(client: Client) -> anyhow::Result<(Self, Vec<JoinHandle<()>>)> {
        let (apps, app_task) = reflect(client.clone(), APP_KEYS);
        let (channels, channel_task) = reflect(client.clone(), CHANNEL_KEYS);
        let (deploys, deploy_task) = reflect(client.clone(), DEPLOY_KEYS);
        let (domains, domain_task) = reflect(client.clone(), DOMAIN_KEYS);
        let (forwards, forward_task) = reflect(client, FORWARD_KEYS);
        let ready = async {
            apps.store().wait_until_ready().await?;
            channels.store().wait_until_ready().await?;
            deploys.store().wait_until_ready().await?;
            domains.store().wait_until_ready().await?;
            forwards.store().wait_until_ready().await
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
        self.domains
            .store()
            .state()
            .into_iter()
            .filter(live)
            .collect()
    }

    /// Domains of the Channel resource `channel` in `namespace`, oldest first.
    pub fn domains_of(&self, namespace: &str, channel: &str) -> Vec<Arc<Domain>> {
        let mut domains: Vec<_> = self
            .domains
            .under(&of_channel(namespace, channel))
            .into_iter()
            .filter(live)
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
        poll(|| self.domains.by_uid(uid).filter(|d| live(d) && ready(d)))
            .await
            .context("the domain did not reach the cache in the state waited for")
    }

    /// Waits until no live Domain has `uid`.
    pub async fn domain_gone(&self, uid: &str) -> anyhow::Result<()> {
        let gone = || self.domains.by_uid(uid).filter(live).is_none();
        poll(|| gone().then_some(()))
            .await
            .context("the detached domain stayed in the cache")
    }

    /// The live Forward of the Channel resource `channel` in `namespace` (named after it), if it is exposed.
    pub fn forward_of(&self, namespace: &str, channel: &str) -> Option<Arc<Forward>> {
        self.forwards
            .under(&of_channel(namespace, channel))
            .into_iter()
            .find(live)
    }

    /// Waits until no live Forward of `namespace` is named `name`.
    pub async fn forward_gone(&self, namespace: &str, name: &str) -> anyhow::Result<()> {
        let at = ObjectRef::new(name).within(namespace);
        let gone = || self.forwards.store().get(&at).filter(live).is_none();
        poll(|| gone().then_some(()))
            .await
            .context("the unexposed forward stayed in the cache")
    }

    /// Deploys of the Channel resource `channel` in `namespace`, newest first.
    pub fn deploys_of(&self, namespace: &str, channel: &str) -> Vec<Arc<Deploy>> {
        let mut deploys: Vec<_> = self
            .deploys
            .under(&of_channel(namespace, channel))
            .into_iter()
            .filter(live)
            .collect();
        deploys.sort_by(|a, b| age_key(b).cmp(&age_key(a)));
        deploys
    }

    /// The newest Deploy of the Channel resource `channel` in `namespace` that `matches`, without ordering the
    /// others (a listing asks this of every channel it shows).
    pub fn newest_deploy_of(
        &self,
        namespace: &str,
        channel: &str,
        matches: impl Fn(&Deploy) -> bool,
    ) -> Option<Arc<Deploy>> {
        self.deploys
            .under(&of_channel(namespace, channel))
            .into_iter()
            .filter(|d| live(d) && matches(d))
            .max_by(|a, b| age_key(a).cmp(&age_key(b)))
    }

    /// Waits until the cache holds a Deploy with `uid`.
    pub async fn deploy_appeared(&self, uid: &str) -> anyhow::Result<Arc<Deploy>> {
        poll(|| self.deploys.by_uid(uid).filter(live))
            .await
            .context("the new deploy did not reach the cache")
    }

    /// Whether the cluster still holds the App `uid` (being deleted counts: it is not gone yet).
    pub fn holds_app(&self, uid: &str) -> bool {
        self.apps.by_uid(uid).is_some()
    }

    /// Whether the cluster still holds the Deploy `uid` (being deleted counts: it is not gone yet).
    pub fn holds_deploy(&self, uid: &str) -> bool {
        self.deploys.by_uid(uid).is_some()
    }

    /// Apps in `namespace`.
    pub fn apps_in(&self, namespace: &str) -> Vec<Arc<App>> {
        self.apps
            .under(&in_namespace(Some(namespace.to_owned())))
            .into_iter()
            .filter(live)
            .collect()
    }

    /// Every live App.
    pub fn apps(&self) -> Vec<Arc<App>> {
        self.apps.store().state().into_iter().filter(live).collect()
    }

    /// The App with this uid.
    pub fn app_by_uid(&self, uid: &str) -> Option<Arc<App>> {
        self.apps.by_uid(uid).filter(live)
    }

    /// Channels of the app `app` in `namespace`, prod first, then by name.
    pub fn channels_of(&self, namespace: &str, app: &str) -> Vec<Arc<Channel>> {
        let mut channels: Vec<_> = self
            .channels
            .under(&of_app(namespace, app))
            .into_iter()
            .filter(live)
            .collect();
        channels.sort_by_key(|c| (!c.name_any().ends_with(".prod"), c.name_any()));
        channels
    }

    /// Channels in `namespace`: every channel of one account.
    pub fn channels_in(&self, namespace: &str) -> Vec<Arc<Channel>> {
        self.channels
            .under(&in_namespace(Some(namespace.to_owned())))
            .into_iter()
            .filter(live)
            .collect()
    }

    /// Every live Channel.
    pub fn channels(&self) -> Vec<Arc<Channel>> {
        self.channels
            .store()
            .state()
            .into_iter()
            .filter(live)
            .collect()
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
        poll(|| self.channels.by_uid(uid).filter(live))
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
        let gone = || self.channels.by_uid(uid).filter(live).is_none();
        poll(|| gone().then_some(()))
            .await
            .context("the deleted channel stayed in the cache")
    }
}

/// The cluster a domain claim is judged against: the live Domains of each channel (one on its way out holds its
/// name no longer).
impl slipway_store::db::domain_claims::DomainCluster for Cache {
    fn domains_on(&self, namespace: &str, channel: &str) -> std::collections::BTreeSet<String> {
        self.domains_of(namespace, channel)
            .iter()
            .map(|d| d.spec.domain.clone())
            .collect()
    }
}

/// What orders Deploys by age: creation time, then name (borrowed: a listing compares many).
fn age_key(
    d: &Deploy,
) -> (
    Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    Option<&str>,
) {
    (
        d.metadata.creation_timestamp.as_ref(),
        d.metadata.name.as_deref(),
    )
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

fn reflect<K>(client: Client, keys: Keys<K>) -> (Indexed<K>, JoinHandle<()>)
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
    let (indexed, mut indexer) = Indexed::new(reader, keys);
    let events = watcher(Api::<K>::all(client), watcher::Config::default())
        .default_backoff()
        // Nothing here reads managed fields, a good part of each object's size.
        .modify(|object| object.meta_mut().managed_fields = None)
        .map(move |event| {
            if let Ok(event) = &event {
                indexer.apply(event);
            }
            event
        });
    let stream = reflector::reflector(writer, events);
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
    (indexed, task)
}
