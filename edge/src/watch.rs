//! Keeps the routing table current: reflectors over Ingresses, Services, EndpointSlices, Channels, Apps and Domains,
//! and a task that rebuilds the table after any of them changes (changes that arrive while it builds, or while it
//! rests after a build, are folded into the next build: see [`rest_after`]). A deploy's new commit of a channel
//! whose old one is cached is loaded in the background; when it is in, the table is built again and the host moves
//! to it (see [`super::routes::settle`]).
//!
//! The certificate table ([`super::certs`]) is kept the same way from Domains and the certificate Secrets of the
//! certificate namespace ([`start_certificates`]).

use std::collections::HashSet;
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::Ingress;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use slipway_crds::{App, Channel, Domain, Forward};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::Edge;
use super::routes::Objects;
use super::site::SiteKey;

/// How long to wait before trying a site load that failed again.
const LOAD_RETRY: Duration = super::site_cache::FAILURE_MEMORY;
/// How many times as long as a build took the builder rests before the next one.
const REST_PER_BUILD: u32 = 4;
/// The longest rest, whatever a build took.
const MAX_REST: Duration = Duration::from_secs(1);

/// The reflector caches the table is built from.
pub struct Caches {
    ingresses: Store<Ingress>,
    services: Store<Service>,
    slices: Store<EndpointSlice>,
    channels: Store<Channel>,
    apps: Store<App>,
    domains: Store<Domain>,
    /// Forwards, watched only when the edge forwards raw TCP.
    forwards: Option<Store<Forward>>,
}

impl Caches {
    /// Starts the reflectors (in `namespace`, or everywhere; Forwards when `forwards`) and waits until each has
    /// listed once. Every change wakes `changed`.
    pub async fn start(
        client: &Client,
        namespace: Option<&str>,
        forwards: bool,
        changed: &Arc<Notify>,
    ) -> anyhow::Result<(Self, Vec<JoinHandle<()>>)> {
        let mut tasks = Vec::new();
        let caches = Self {
            ingresses: reflect(api(client, namespace), all(), changed, &mut tasks),
            services: reflect(api(client, namespace), all(), changed, &mut tasks),
            slices: reflect(api(client, namespace), all(), changed, &mut tasks),
            channels: reflect(api(client, namespace), all(), changed, &mut tasks),
            apps: reflect(api(client, namespace), all(), changed, &mut tasks),
            domains: reflect(api(client, namespace), all(), changed, &mut tasks),
            forwards: forwards.then(|| reflect(api(client, namespace), all(), changed, &mut tasks)),
        };
        if let Some(forwards) = &caches.forwards {
            forwards.wait_until_ready().await.map_err(|e| {
                anyhow::anyhow!("the Forward cache stopped before it was filled: {e}")
            })?;
        }
        for (kind, ready) in [
            ("Ingress", caches.ingresses.wait_until_ready().await),
            ("Service", caches.services.wait_until_ready().await),
            ("EndpointSlice", caches.slices.wait_until_ready().await),
            ("Channel", caches.channels.wait_until_ready().await),
            ("App", caches.apps.wait_until_ready().await),
            ("Domain", caches.domains.wait_until_ready().await),
        ] {
            ready.map_err(|e| {
                anyhow::anyhow!("the {kind} cache stopped before it was filled: {e}")
            })?;
        }
        Ok((caches, tasks))
    }

    /// Every cached Forward (none when Forwards are not watched).
    pub fn forwards(&self) -> Vec<Arc<Forward>> {
        self.forwards.as_ref().map(Store::state).unwrap_or_default()
    }

    /// A snapshot of every cached object.
    pub fn objects(&self) -> Objects {
        Objects::new(
            self.ingresses.state(),
            self.channels.state(),
            self.apps.state(),
            self.services.state(),
            self.slices.state(),
        )
        .with_domains(&self.domains.state())
    }
}

fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

fn all() -> watcher::Config {
    watcher::Config::default()
}

fn reflect<K>(
    api: Api<K>,
    config: watcher::Config,
    changed: &Arc<Notify>,
    tasks: &mut Vec<JoinHandle<()>>,
) -> Store<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone,
{
    let (reader, writer) = reflector::store();
    let changed = changed.clone();
    let stream = watcher(api, config)
        .default_backoff()
        .modify(|obj| obj.meta_mut().managed_fields = None);
    tasks.push(tokio::spawn(async move {
        reflector::reflector(writer, stream)
            .for_each(|event| {
                match event {
                    Ok(_) => changed.notify_one(),
                    Err(e) => tracing::warn!(kind = %K::kind(&K::DynamicType::default()), error = %e, "watch failed; retrying"),
                }
                futures::future::ready(())
            })
            .await;
    }));
    reader
}

/// Rebuilds the table whenever `changed` is woken, and loads the deployed commits new tables ask for.
pub fn spawn_builder(edge: Arc<Edge>, caches: Caches, changed: Arc<Notify>) -> JoinHandle<()> {
    let loading: Arc<Mutex<HashSet<SiteKey>>> = Arc::default();
    tokio::spawn(async move {
        loop {
            changed.notified().await;
            let started = Instant::now();
            let objects = caches.objects();
            for key in edge.rebuild(&objects) {
                start_load(&edge, key, &loading, &changed);
            }
            edge.listen_for_forwards(&caches, &objects);
            tokio::time::sleep(rest_after(started.elapsed())).await;
        }
    })
}

/// How long the builder rests after a build that took `build`. A build reads every object, so its time grows with
/// the platform; while thousands of channels are created or deployed, changes come faster than builds, and
/// building back to back would take a whole core from the edge's requests (and, on a small node, from the
/// apiserver making those changes). Resting four times as long as the build keeps building under a fifth of a
/// core, and a change still reaches the table within five builds' time; a small table (a build of a millisecond)
/// is hardly held back at all.
fn rest_after(build: Duration) -> Duration {
    (build * REST_PER_BUILD).min(MAX_REST)
}

fn start_load(
    edge: &Arc<Edge>,
    key: SiteKey,
    loading: &Arc<Mutex<HashSet<SiteKey>>>,
    changed: &Arc<Notify>,
) {
    if !loading
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key.clone())
    {
        return;
    }
    let (edge, loading, changed) = (edge.clone(), loading.clone(), changed.clone());
    tokio::spawn(async move {
        if let Err(e) = edge.sites.preload(&key).await {
            tracing::warn!(app_id = %key.app_id, sha = %key.sha, error = %e, "could not load a static site; retrying");
            tokio::time::sleep(LOAD_RETRY).await;
        }
        loading
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&key);
        changed.notify_one();
    });
}

/// Where the edge's certificates come from.
#[derive(Debug, Clone, Default)]
pub struct CertificateSources {
    /// The certificate namespace, holding the certificate Secrets and nothing else (none are read without it).
    pub namespace: Option<String>,
    /// The Secret (in that namespace) of the platform's wildcard certificate for `*.{app_domain}`.
    pub wildcard_secret: Option<String>,
    /// The platform's domain ({app_domain}).
    pub app_domain: Option<String>,
}

/// Keeps `certs` current from the Domains (in `namespace`, or everywhere) and the certificate Secrets named by
/// `sources`; returns once each watch has listed once.
pub async fn start_certificates(
    client: &Client,
    sources: &CertificateSources,
    namespace: Option<&str>,
    certs: Arc<super::certs::Certificates>,
) -> anyhow::Result<Vec<JoinHandle<()>>> {
    let changed = Arc::new(Notify::new());
    let mut tasks = Vec::new();
    let domains: Store<Domain> = reflect(api(client, namespace), all(), &changed, &mut tasks);
    let secrets = sources.namespace.as_deref().map(|ns| {
        let labelled = watcher::Config::default().labels(&super::certs::certificate_selector());
        let secrets: Store<Secret> = reflect(
            Api::namespaced(client.clone(), ns),
            labelled,
            &changed,
            &mut tasks,
        );
        let wildcard = sources.wildcard_secret.as_ref().map(|name| {
            let by_name = watcher::Config::default().fields(&format!("metadata.name={name}"));
            reflect::<Secret>(
                Api::namespaced(client.clone(), ns),
                by_name,
                &changed,
                &mut tasks,
            )
        });
        (secrets, wildcard)
    });
    domains
        .wait_until_ready()
        .await
        .map_err(|e| anyhow::anyhow!("the Domain cache stopped before it was filled: {e}"))?;
    if let Some((secrets, wildcard)) = &secrets {
        for store in std::iter::once(secrets).chain(wildcard) {
            store.wait_until_ready().await.map_err(|e| {
                anyhow::anyhow!("the certificate Secret cache stopped before it was filled: {e}")
            })?;
        }
    }
    let provider = rustls::crypto::ring::default_provider();
    let sources = sources.clone();
    let build = move || {
        let (custom, wildcard) = match &secrets {
            Some((s, w)) => (
                s.state(),
                w.as_ref().and_then(|w| w.state().into_iter().next()),
            ),
            None => (Vec::new(), None),
        };
        super::certs::Table::build(
            &custom,
            &domains.state(),
            wildcard.as_deref(),
            sources.app_domain.as_deref(),
            &provider,
        )
    };
    certs.install(build());
    tasks.push(tokio::spawn(async move {
        loop {
            changed.notified().await;
            certs.install(build());
        }
    }));
    Ok(tasks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builder_rests_four_builds_long_and_never_more_than_a_second() {
        assert_eq!(rest_after(Duration::ZERO), Duration::ZERO);
        assert_eq!(
            rest_after(Duration::from_millis(30)),
            Duration::from_millis(120)
        );
        assert_eq!(rest_after(Duration::from_millis(900)), MAX_REST);
    }
}
