//! What a Channel reconcile reads besides the channel (its App, its custom Domains, the Ingress it wrote), and what
//! a Deploy reconcile reads besides the deploy (its Channel, its App, the channel's other Deploys), from the stores
//! of the watches that wake them instead of a request to the apiserver each time.
//!
//! At 10,000 channels every channel is reconciled a few times as it comes up (its finalizers, its deploys, its
//! Ingress coming back); a GET of the App, a LIST of the channel's Domains and an Ingress apply each time would be
//! most of the operator's requests, on an apiserver that is the busiest process of a small cluster. A store is
//! updated before the watch that fills it wakes a controller, so a reconcile started by an App, Domain or Ingress
//! change reads that change. Apps, Channels, Deploys and Domains are the shared stores of [`crate::reflectors`].
//!
//! A deploy in flight is looked at every few seconds; with a GET of its Channel and its App and a LIST of its
//! channel's Deploys each time, 100 deploys in flight cost 150 requests a second. What a reconcile writes and then
//! reads back (the channel's `pendingDeploy`, [`crate::deploy`]) and what deletes images (history pruning) still
//! read the apiserver: a store has not seen a reconcile's own write, nor a Deploy created a moment ago.
//!
//! Where a cache cannot answer, the request is made as before: an App missing from the cache may be newer than
//! it (a channel created just after its App), and the caches are empty until their first listing, which a
//! reconcile waits for only briefly. Reconcilers called without running the controllers (tests) have no caches.
//!
//! Every controller's own store is built here too ([`controller`]), without the objects' managed fields.

use std::time::Duration;

use k8s_openapi::api::networking::v1::Ingress;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher;
use kube::runtime::{WatchStreamExt, reflector::store::Writer};
use kube::{Api, ResourceExt};
use slipway_crds::{App, Channel, Deploy, Domain, DomainPhase};

use crate::context::Context;
use crate::error::Error;

/// Longest a reconcile waits for a cache's first listing before asking the apiserver instead.
const FIRST_LISTING: Duration = Duration::from_secs(5);

/// The Channel and Deploy controllers' caches.
pub struct Caches {
    apps: Store<App>,
    channels: Store<Channel>,
    deploys: Store<Deploy>,
    domains: Store<Domain>,
    ingresses: Store<Ingress>,
}

/// The shared stores the caches read ([`crate::reflectors`]).
pub struct SharedStores {
    /// Every App.
    pub apps: Store<App>,
    /// Every Channel.
    pub channels: Store<Channel>,
    /// Every Deploy.
    pub deploys: Store<Deploy>,
    /// Every Domain.
    pub domains: Store<Domain>,
}

impl Caches {
    /// Caches reading the shared stores, and an Ingress cache of their own with the writer that fills it.
    pub fn new(shared: SharedStores) -> (Self, Writer<Ingress>) {
        let (ingresses, ingress_writer) = reflector::store();
        (
            Self {
                apps: shared.apps,
                channels: shared.channels,
                deploys: shared.deploys,
                domains: shared.domains,
                ingresses,
            },
            ingress_writer,
        )
    }
}

/// The watch stream of `api`, keeping `writer`'s cache of the objects as `trim` leaves them, as changed objects
/// for a controller's triggers.
pub fn cached<K>(
    api: Api<K>,
    writer: Writer<K>,
    trim: fn(&mut K),
) -> impl futures::Stream<Item = Result<K, watcher::Error>> + Send + 'static
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    watcher(api, watcher::Config::default())
        .default_backoff()
        .modify(trim)
        .reflect(writer)
        .touched_objects()
}

/// Drops what no reconcile reads of an App or a Domain: the bulk of an object written with server-side apply.
pub fn trim_managed_fields<K: kube::Resource>(object: &mut K) {
    object.meta_mut().managed_fields = None;
}

/// Keeps of an Ingress only what [`ingress_is_current`] compares (10,000 channels have as many Ingresses).
pub fn trim_ingress(ingress: &mut Ingress) {
    let meta = &mut ingress.metadata;
    meta.managed_fields = None;
    meta.annotations = None;
    meta.creation_timestamp = None;
    ingress.status = None;
}

/// A controller of the objects of `api`, keeping them in its store as [`trim_managed_fields`] leaves them (the
/// operator holds every Channel and Deploy of the platform; their managed fields are much of their size).
pub fn controller<K>(api: Api<K>) -> Controller<K>
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
    let objects = watcher(api, watcher::Config::default())
        .default_backoff()
        .modify(trim_managed_fields::<K>)
        .reflect(writer)
        .applied_objects();
    Controller::for_stream(objects, reader)
}

/// Whether `store` has had its first listing, waiting for it at most [`FIRST_LISTING`].
async fn listed<K>(store: &Store<K>) -> bool
where
    K: kube::Resource<DynamicType = ()> + Clone + 'static,
{
    tokio::time::timeout(FIRST_LISTING, store.wait_until_ready())
        .await
        .is_ok_and(|ready| ready.is_ok())
}

/// The channel's App, from the cache when it has it.
pub async fn app(ctx: &Context, channel: &Channel) -> Result<Option<App>, Error> {
    let namespace = channel.namespace().ok_or(Error::Incomplete("namespace"))?;
    if let Some(caches) = ctx.caches.get() {
        let key = ObjectRef::new(&channel.spec.app).within(&namespace);
        if let Some(app) = caches.apps.get(&key) {
            return Ok(Some(app.as_ref().clone()));
        }
    }
    let apps: Api<App> = Api::namespaced(ctx.client.clone(), &namespace);
    Ok(apps.get_opt(&channel.spec.app).await?)
}

/// The Channel `name` of `namespace`, from the cache when it has it (a channel missing from it may be newer).
pub async fn channel(ctx: &Context, namespace: &str, name: &str) -> Result<Option<Channel>, Error> {
    if let Some(caches) = ctx.caches.get()
        && let Some(channel) = caches.channels.get(&ObjectRef::new(name).within(namespace))
    {
        return Ok(Some(channel.as_ref().clone()));
    }
    let channels: Api<Channel> = Api::namespaced(ctx.client.clone(), namespace);
    Ok(channels.get_opt(name).await?)
}

/// The Deploys of the Channel resource `channel` of `namespace`, from the cache once it has listed them; else the
/// apiserver selects them (`spec.channel` is a selectable field), so a read is of the channel's deploys and not of
/// its namespace's.
pub async fn deploys_of(
    ctx: &Context,
    namespace: &str,
    channel: &str,
) -> Result<Vec<Deploy>, Error> {
    match ctx.caches.get() {
        Some(caches) if listed(&caches.deploys).await => Ok(caches
            .deploys
            .state()
            .into_iter()
            .filter(|d| d.namespace().as_deref() == Some(namespace) && d.spec.channel == channel)
            .map(|d| d.as_ref().clone())
            .collect()),
        _ => listed_deploys_of(ctx, namespace, channel).await,
    }
}

/// The Deploys of the Channel resource `channel` of `namespace` as the apiserver has them now.
pub async fn listed_deploys_of(
    ctx: &Context,
    namespace: &str,
    channel: &str,
) -> Result<Vec<Deploy>, Error> {
    let deploys: Api<Deploy> = Api::namespaced(ctx.client.clone(), namespace);
    let selected = kube::api::ListParams::default().fields(&format!("spec.channel={channel}"));
    Ok(deploys.list(&selected).await?.items)
}

/// The verified custom domains of `channel`, sorted.
pub async fn verified_domains(ctx: &Context, channel: &Channel) -> Result<Vec<String>, Error> {
    let namespace = channel.namespace().ok_or(Error::Incomplete("namespace"))?;
    let name = channel.name_any();
    let domains: Vec<Domain> = match ctx.caches.get() {
        Some(caches) if listed(&caches.domains).await => caches
            .domains
            .state()
            .into_iter()
            .filter(|d| d.namespace().as_deref() == Some(namespace.as_str()))
            .filter(|d| d.spec.channel == name)
            .map(|d| d.as_ref().clone())
            .collect(),
        // The apiserver selects the channel's Domains (`spec.channel` is a selectable field).
        _ => {
            let api: Api<Domain> = Api::namespaced(ctx.client.clone(), &namespace);
            let selected = kube::api::ListParams::default().fields(&format!("spec.channel={name}"));
            api.list(&selected).await?.items
        }
    };
    let mut hosts: Vec<String> = domains
        .into_iter()
        .filter(|d| {
            d.spec.channel == name
                && d.metadata.deletion_timestamp.is_none()
                && d.status.as_ref().map(|s| s.phase) == Some(DomainPhase::Verified)
        })
        .map(|d| d.spec.domain)
        .collect();
    hosts.sort();
    hosts.dedup();
    Ok(hosts)
}

/// Whether the cached Ingress of `wanted`'s name already has everything `wanted` sets: the class, the rules, the
/// labels and the owner. `false` when unknown, so the Ingress is applied.
pub async fn ingress_is_current(ctx: &Context, wanted: &Ingress) -> bool {
    let Some(caches) = ctx.caches.get() else {
        return false;
    };
    if !listed(&caches.ingresses).await {
        return false;
    }
    let (Some(name), Some(namespace)) = (&wanted.metadata.name, &wanted.metadata.namespace) else {
        return false;
    };
    caches
        .ingresses
        .get(&ObjectRef::new(name).within(namespace))
        .is_some_and(|current| holds(&current, wanted))
}

/// Whether `current` has every field `wanted` sets (what server-side apply of `wanted` would leave unchanged).
fn holds(current: &Ingress, wanted: &Ingress) -> bool {
    let spec = |i: &Ingress| {
        i.spec
            .as_ref()
            .map(|s| (s.ingress_class_name.clone(), s.rules.clone()))
    };
    let labels_held = wanted
        .labels()
        .iter()
        .all(|(k, v)| current.labels().get(k) == Some(v));
    let owners_held = wanted
        .owner_references()
        .iter()
        .all(|o| current.owner_references().contains(o));
    current.metadata.deletion_timestamp.is_none()
        && spec(current) == spec(wanted)
        && labels_held
        && owners_held
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ingress(yaml: &str) -> Ingress {
        serde_yaml::from_str(yaml).unwrap()
    }

    const WANTED: &str = "
metadata:
  name: blog.next
  namespace: slipway-user-alice
  labels: {slipway.dev/app: blog}
  ownerReferences: [{apiVersion: slipway.dev/v1alpha1, kind: Channel, name: blog.next, uid: u1, controller: true}]
spec:
  ingressClassName: slipway
  rules: [{host: next-blog-alice.apps.test}]
";

    #[test]
    fn an_ingress_with_more_than_is_wanted_holds_it() {
        let wanted = ingress(WANTED);
        let mut current = wanted.clone();
        current.labels_mut().insert("team".into(), "web".into());
        current.metadata.resource_version = Some("42".into());
        assert!(holds(&current, &wanted));
    }

    #[test]
    fn a_changed_rule_label_or_owner_does_not() {
        let wanted = ingress(WANTED);
        let mut moved = wanted.clone();
        moved.spec.as_mut().unwrap().rules.as_mut().unwrap()[0].host = Some("x.apps.test".into());
        let mut relabelled = wanted.clone();
        relabelled
            .labels_mut()
            .insert("slipway.dev/app".into(), "shop".into());
        let mut orphaned = wanted.clone();
        orphaned.metadata.owner_references = None;
        let mut going = wanted.clone();
        going.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        for current in [moved, relabelled, orphaned, going] {
            assert!(!holds(&current, &wanted));
        }
    }
}
