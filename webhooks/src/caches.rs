//! The webhook's view of the cluster: reflector caches of Apps, Channels, Domains and namespace metadata,
//! cluster-wide, so a review is answered without a round trip to the apiserver.
//!
//! Caches lag a watch event behind the apiserver. Where that would refuse a good object (an App created a moment
//! before the Channel that names it, a namespace just made, a domain another namespace detached a moment ago), what
//! the caches show is confirmed with a direct read before the object is refused. The other names and counts come
//! from the caches alone.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ListParams};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use slipway_crds::{App, Channel, Domain};
use tokio::sync::watch;
use tokio::task::AbortHandle;

use crate::lookup::{Labels, Lookup, LookupError, Readiness};

/// Reflector caches of what the validators look at, and a client to confirm a miss. Cheap to clone.
#[derive(Clone)]
pub struct Caches {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    namespaces: Store<PartialObjectMeta<Namespace>>,
    apps: Store<App>,
    channels: Store<Channel>,
    domains: Store<Domain>,
    app_domain: Option<String>,
    ready: AtomicBool,
    failed: watch::Receiver<Option<String>>,
    tasks: Vec<AbortHandle>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl std::fmt::Debug for Caches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Caches")
            .field("readiness", &self.readiness())
            .finish_non_exhaustive()
    }
}

/// Fails fast, with the command that fixes it, when the slipway CRDs are not installed: otherwise the watches would
/// retry forever and the webhook would never become ready.
pub async fn check_crds(client: &Client) -> anyhow::Result<()> {
    let apps: Api<App> = Api::all(client.clone());
    match apps.list_metadata(&ListParams::default().limit(1)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Err(anyhow::anyhow!(
            "the slipway CRDs are not installed in this cluster; install them with \
             `slipway crds | kubectl apply --server-side -f -` (or the Helm chart)"
        )),
        Err(e) => Err(anyhow::Error::new(e).context("list slipway Apps")),
    }
}

/// Drops what the rules never read, so the caches stay small.
fn trim<K: Resource>(obj: &mut K) {
    let meta = obj.meta_mut();
    meta.managed_fields = None;
    meta.annotations = None;
}

/// Drives one reflector until its watch ends (it retries with backoff, so only a bug ends it).
async fn reflect<K>(what: &'static str, api: Api<K>, writer: reflector::store::Writer<K>)
where
    K: Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    watcher(api, watcher::Config::default())
        .default_backoff()
        .modify(trim::<K>)
        .reflect(writer)
        .for_each(|event| async move {
            if let Err(e) = event {
                tracing::warn!(error = %e, cache = what, "watch failed; retrying");
            }
        })
        .await;
}

impl Caches {
    /// Starts the watches on the current runtime. They stop when the last clone is dropped.
    pub fn start(client: Client, app_domain: Option<String>) -> Self {
        let (namespaces, ns_writer) = reflector::store();
        let (apps, apps_writer) = reflector::store();
        let (channels, channels_writer) = reflector::store();
        let (domains, domains_writer) = reflector::store();

        let watches = vec![
            // Metadata only: the rules read a namespace's labels, nothing else.
            (
                "namespaces",
                tokio::spawn(reflect(
                    "namespaces",
                    Api::<PartialObjectMeta<Namespace>>::all(client.clone()),
                    ns_writer,
                )),
            ),
            (
                "apps",
                tokio::spawn(reflect("apps", Api::all(client.clone()), apps_writer)),
            ),
            (
                "channels",
                tokio::spawn(reflect(
                    "channels",
                    Api::all(client.clone()),
                    channels_writer,
                )),
            ),
            (
                "domains",
                tokio::spawn(reflect("domains", Api::all(client.clone()), domains_writer)),
            ),
        ];
        let mut tasks: Vec<AbortHandle> = watches.iter().map(|(_, t)| t.abort_handle()).collect();

        let (failed_tx, failed) = watch::channel(None);
        tasks.push(
            tokio::spawn(async move {
                let names: Vec<&str> = watches.iter().map(|(n, _)| *n).collect();
                let handles = watches.into_iter().map(|(_, t)| t);
                let (result, index, _) = futures::future::select_all(handles).await;
                let what = names.get(index).copied().unwrap_or("a cache");
                let message = match result {
                    Ok(()) => format!("the watch of {what} ended"),
                    Err(e) => format!("the watch of {what} stopped: {e}"),
                };
                tracing::error!(%message, "webhook cache failed");
                let _ = failed_tx.send(Some(message));
            })
            .abort_handle(),
        );

        let inner = Arc::new(Inner {
            client,
            namespaces,
            apps,
            channels,
            domains,
            app_domain,
            ready: AtomicBool::new(false),
            failed,
            tasks,
        });
        let weak = Arc::downgrade(&inner);
        let (ns, a, c, d) = (
            inner.namespaces.clone(),
            inner.apps.clone(),
            inner.channels.clone(),
            inner.domains.clone(),
        );
        // Not kept in `tasks`: it ends by itself once the lists are in, or when the stores' writers go away.
        tokio::spawn(async move {
            let all = futures::future::try_join4(
                ns.wait_until_ready(),
                a.wait_until_ready(),
                c.wait_until_ready(),
                d.wait_until_ready(),
            );
            if all.await.is_ok()
                && let Some(inner) = weak.upgrade()
            {
                inner.ready.store(true, Ordering::Release);
                tracing::info!("webhook caches are ready");
            }
        });
        Self { inner }
    }

    /// Waits until every cache holds its first full list, or `timeout` passes; returns the readiness then.
    pub async fn wait_until_ready(&self, timeout: Duration) -> Readiness {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let readiness = self.readiness();
            if readiness != Readiness::Starting || tokio::time::Instant::now() >= deadline {
                return readiness;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Resolves when a watch has stopped for good, with the reason.
    pub async fn failed(&self) -> String {
        let mut failed = self.inner.failed.clone();
        match failed.wait_for(Option::is_some).await {
            Ok(message) => message.clone().unwrap_or_default(),
            Err(_) => "the cache supervisor stopped".to_owned(),
        }
    }
}

fn lookup_error(what: String) -> impl FnOnce(kube::Error) -> LookupError {
    move |source| LookupError { what, source }
}

impl Lookup for Caches {
    async fn namespace_labels(&self, name: &str) -> Result<Option<Labels>, LookupError> {
        if let Some(ns) = self.inner.namespaces.get(&ObjectRef::new(name)) {
            return Ok(Some(ns.labels().clone()));
        }
        let api: Api<Namespace> = Api::all(self.inner.client.clone());
        let ns = api
            .get_metadata_opt(name)
            .await
            .map_err(lookup_error(format!("namespace {name}")))?;
        Ok(ns.map(|ns| ns.labels().clone()))
    }

    async fn app(&self, ns: &str, name: &str) -> Result<Option<Arc<App>>, LookupError> {
        if let Some(app) = self.inner.apps.get(&ObjectRef::new(name).within(ns)) {
            return Ok(Some(app));
        }
        let api: Api<App> = Api::namespaced(self.inner.client.clone(), ns);
        let app = api
            .get_opt(name)
            .await
            .map_err(lookup_error(format!("app {name} in namespace {ns}")))?;
        Ok(app.map(Arc::new))
    }

    async fn channel(&self, ns: &str, name: &str) -> Result<Option<Arc<Channel>>, LookupError> {
        if let Some(channel) = self.inner.channels.get(&ObjectRef::new(name).within(ns)) {
            return Ok(Some(channel));
        }
        let api: Api<Channel> = Api::namespaced(self.inner.client.clone(), ns);
        let channel = api
            .get_opt(name)
            .await
            .map_err(lookup_error(format!("channel {name} in namespace {ns}")))?;
        Ok(channel.map(Arc::new))
    }

    fn readiness(&self) -> Readiness {
        if let Some(message) = self.inner.failed.borrow().clone() {
            return Readiness::Failed(message);
        }
        if self.inner.ready.load(Ordering::Acquire) {
            Readiness::Ready
        } else {
            Readiness::Starting
        }
    }

    fn apps(&self) -> Vec<Arc<App>> {
        self.inner.apps.state()
    }

    fn channels(&self) -> Vec<Arc<Channel>> {
        self.inner.channels.state()
    }

    fn domains(&self) -> Vec<Arc<Domain>> {
        self.inner.domains.state()
    }

    async fn read_domains(
        &self,
        domain: &str,
        ns: &str,
        channel: &str,
    ) -> Result<Vec<Arc<Domain>>, LookupError> {
        // No resourceVersion: the apiserver answers from the latest state (a quorum read), never from a cache
        // behind it. Both are selectable fields, so each answer holds only what is asked for.
        let all: Api<Domain> = Api::all(self.inner.client.clone());
        let in_ns: Api<Domain> = Api::namespaced(self.inner.client.clone(), ns);
        let named =
            ListParams::default().fields(&slipway_crds::domain::domain_field_selector(domain));
        let on_channel = ListParams::default().fields(&format!("spec.channel={channel}"));
        let (named, on_channel) =
            futures::future::try_join(all.list(&named), in_ns.list(&on_channel))
                .await
                .map_err(lookup_error(format!(
                    "the domains of {domain} and of channel {channel}"
                )))?;
        let mut read: Vec<Arc<Domain>> = named.items.into_iter().map(Arc::new).collect();
        for d in on_channel.items {
            if !read.iter().any(|r| r.metadata.uid == d.metadata.uid) {
                read.push(Arc::new(d));
            }
        }
        Ok(read)
    }

    fn app_domain(&self) -> Option<&str> {
        self.inner.app_domain.as_deref()
    }
}
