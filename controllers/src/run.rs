//! Runs the controllers: one per kind, wired to the objects they own and reference, with metrics per reconcile
//! and error policies that back off on transient failures.

use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::ListParams;
use kube::core::{NamespaceResourceScope, PartialObjectMeta};
use kube::runtime::controller::Action;
use kube::runtime::controller::Controller;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use slipway_crds::{App, Channel, Deploy, Domain, Forward};

use crate::context::Context;
use crate::error::Error;
use crate::reflectors::Reflectors;

/// Backs off a failed object on its own ([`crate::backoff`]) and says why on it: a Warning Event whose reason is the
/// error's category, which `kubectl describe` shows beside the object.
fn error_policy<K>(obj: Arc<K>, error: &Error, ctx: Arc<Context>) -> Action
where
    K: Resource<DynamicType = ()> + Send + Sync + 'static,
{
    let kind = K::kind(&());
    let delay = ctx.backoff.failed(object_key(obj.as_ref()), error);
    tracing::warn!(%kind, name = %obj.meta().name.clone().unwrap_or_default(), category = error.category(), error = %error, retry_in = ?delay, "reconcile failed");
    let (reason, note) = (error.category(), error.to_string());
    tokio::spawn(async move {
        crate::channel::publish(&ctx, obj.as_ref(), EventType::Warning, reason, note).await;
    });
    Action::requeue(delay)
}

fn object_key<K: Resource<DynamicType = ()>>(obj: &K) -> crate::backoff::ObjectKey {
    let kind: &'static str = match K::kind(&()) {
        std::borrow::Cow::Borrowed(kind) => kind,
        std::borrow::Cow::Owned(_) => "other",
    };
    (
        kind,
        obj.meta().namespace.clone().unwrap_or_default(),
        obj.meta().name.clone().unwrap_or_default(),
    )
}

async fn timed<K, F, Fut>(
    kind: &'static str,
    obj: Arc<K>,
    ctx: Arc<Context>,
    reconcile: F,
) -> Result<Action, Error>
where
    K: Resource<DynamicType = ()>,
    F: Fn(Arc<K>, Arc<Context>) -> Fut,
    Fut: std::future::Future<Output = Result<Action, Error>>,
{
    let started = Instant::now();
    let key = object_key(obj.as_ref());
    let span = tracing::info_span!("reconcile", kind, namespace = %key.1, name = %key.2);
    let metrics = ctx.metrics.clone();
    let result = tracing::Instrument::instrument(reconcile(obj, ctx.clone()), span).await;
    metrics.observe(kind, started, &result);
    if result.is_ok() {
        ctx.backoff.succeeded(&key);
    }
    result
}

/// Runs `controller` until the process is told to stop: each reconcile timed and counted as `kind`, failures backed
/// off by [`error_policy`].
fn drive<K, F, Fut>(
    controller: Controller<K>,
    kind: &'static str,
    reconcile: F,
    ctx: &Arc<Context>,
) -> impl std::future::Future<Output = ()> + use<K, F, Fut>
where
    K: Clone
        + Resource<DynamicType = ()>
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
    F: Fn(Arc<K>, Arc<Context>) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<Action, Error>> + Send + 'static,
{
    controller
        .shutdown_on_signal()
        .run(
            move |o, c| timed(kind, o, c, reconcile.clone()),
            error_policy,
            ctx.clone(),
        )
        .for_each(|_| futures::future::ready(()))
}

/// The objects of kind `K` the operator follows: in its one namespace when it has one, else in every namespace.
pub(crate) fn scoped<K>(ctx: &Context) -> Api<K>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>,
{
    match &ctx.config.namespace {
        Some(ns) => Api::namespaced(ctx.client.clone(), ns),
        None => Api::all(ctx.client.clone()),
    }
}

/// Runs every controller until the process is told to stop. Fails fast when the CRDs are not installed.
pub async fn run(ctx: Arc<Context>) -> anyhow::Result<()> {
    require_crds(&ctx).await?;
    let mut reflectors = Reflectors::new(&ctx);
    ctx.metrics.watch_fleet(
        reflectors.deploys.store.clone(),
        reflectors.domains.store.clone(),
        ctx.config.deploy_deadline,
    );
    let controllers = {
        let channels = channel_controller(&ctx, &mut reflectors)?;
        let (apps, deploys, domains, forwards) = (
            app_controller(&ctx, &reflectors),
            deploy_controller(&ctx, &reflectors),
            domain_controller(&ctx, &reflectors),
            forward_controller(&ctx, &reflectors),
        );
        async {
            tokio::join!(
                apps,
                channels,
                deploys,
                domains,
                forwards,
                tenancy_controller(&ctx),
                plan_controller(&ctx),
                evacuate_controller(&ctx)
            )
        }
    };
    // The shared watches, the runtime log archive, the sweep of Domains and the backend probes have no shutdown of their own: they
    // stop with the controllers.
    tokio::select! {
        _ = controllers => {}
        () = reflectors.run() => {}
        () = crate::log_archive::run(ctx.clone()) => {}
        () = crate::domain::ownership::every(ctx.clone()) => {}
        () = crate::probes::run(&ctx) => {}
    }
    Ok(())
}

/// Fails, saying how to install them, unless every kind the operator reconciles is served.
async fn require_crds(ctx: &Context) -> anyhow::Result<()> {
    // One object is enough to show the kind is served (a platform holds 10,000 channels).
    let probe = ListParams::default().limit(1);
    for (kind, failed) in [
        ("App", scoped::<App>(ctx).list(&probe).await.err()),
        ("Channel", scoped::<Channel>(ctx).list(&probe).await.err()),
        ("Deploy", scoped::<Deploy>(ctx).list(&probe).await.err()),
        ("Domain", scoped::<Domain>(ctx).list(&probe).await.err()),
        ("Forward", scoped::<Forward>(ctx).list(&probe).await.err()),
    ] {
        if let Some(e) = failed {
            anyhow::bail!(
                "cannot list {kind} resources ({e}); install the CRDs first: `slipway crds | kubectl apply --server-side -f -`"
            );
        }
    }
    Ok(())
}

/// Apps: each keeps its channels.
fn app_controller(
    ctx: &Arc<Context>,
    reflectors: &Reflectors,
) -> impl std::future::Future<Output = ()> + use<> {
    let controller =
        Controller::for_shared_stream(reflectors.apps.subscribe(), reflectors.apps.store.clone())
            .owns_shared_stream(reflectors.channels.subscribe());
    drive(controller, "App", crate::app::reconcile, ctx)
}

/// Channels: woken by their App, their Domains (a verification adds its host to the channel's Ingress), the
/// Ingress they wrote, and a deploy deleted in flight. What those reconciles read besides the channel comes from
/// the same watches' stores ([`crate::caches`]), set on the context here, once (the Deploy reconciles read them
/// too), so this fails if called twice.
fn channel_controller(
    ctx: &Arc<Context>,
    reflectors: &mut Reflectors,
) -> anyhow::Result<impl std::future::Future<Output = ()> + use<>> {
    let (caches, ingress_writer) = crate::caches::Caches::new(crate::caches::SharedStores {
        apps: reflectors.apps.store.clone(),
        channels: reflectors.channels.store.clone(),
        deploys: reflectors.deploys.store.clone(),
        domains: reflectors.domains.store.clone(),
    });
    let deleted_deploys = reflectors.deleted_deploys();
    let (Ok(()), Some(deleted_deploys)) = (ctx.caches.set(caches), deleted_deploys) else {
        anyhow::bail!("the controllers of one context run once");
    };
    let channel_store = reflectors.channels.store.clone();
    let controller = Controller::for_shared_stream(
        reflectors.channels.subscribe(),
        reflectors.channels.store.clone(),
    )
    .owns_stream(crate::caches::cached(
        scoped::<Ingress>(ctx),
        ingress_writer,
        crate::caches::trim_ingress,
    ))
    .watches_shared_stream(reflectors.apps.subscribe(), move |app: Arc<App>| {
        let (ns, name) = (app.namespace(), app.name_any());
        channel_store
            .state()
            .into_iter()
            .filter(|c| c.namespace() == ns && c.spec.app == name)
            .map(|c| ObjectRef::from_obj(c.as_ref()))
            .collect::<Vec<_>>()
    })
    .watches_shared_stream(reflectors.domains.subscribe(), |domain: Arc<Domain>| {
        domain
            .namespace()
            .map(|ns| ObjectRef::<Channel>::new(&domain.spec.channel).within(&ns))
    })
    // A deploy deleted in flight leaves its channel's pendingDeploy naming it ([`crate::deploy::settle_pending`]).
    .watches_stream(deleted_deploys, |deploy: Deploy| {
        deploy
            .namespace()
            .map(|ns| ObjectRef::<Channel>::new(&deploy.spec.channel).within(&ns))
    });
    Ok(drive(controller, "Channel", crate::channel::reconcile, ctx))
}

/// Deploys. A deploy that finishes lets the next one of its channel start: its change also reconciles the
/// channel's queued deploys (and nothing else: see `deploy::queue::unblocked_by`). A deploy in flight also wakes
/// when its build Job, its new pods or its channel's EndpointSlices change: the steps of a rollout
/// ([`crate::deploy::triggers`]).
fn deploy_controller(
    ctx: &Arc<Context>,
    reflectors: &Reflectors,
) -> impl std::future::Future<Output = ()> + use<> {
    let deploy_store = reflectors.deploys.store.clone();
    let (pod_store, slice_store) = (deploy_store.clone(), deploy_store.clone());
    let builds = watcher::Config::default().labels(&format!(
        "{}={}",
        crate::build::job::BUILD_LABEL,
        crate::build::job::BUILD_LABEL_VALUE
    ));
    let run_pods = watcher::Config::default().labels(&crate::deploy::triggers::run_pod_selector());
    let controller =
        Controller::for_shared_stream(reflectors.deploys.subscribe(), deploy_store.clone())
            .watches_shared_stream(
                reflectors.deploys.subscribe(),
                move |changed: Arc<Deploy>| {
                    let all = deploy_store.state();
                    crate::deploy::queue::unblocked_by(&changed, all.iter().map(AsRef::as_ref))
                        .into_iter()
                        .map(ObjectRef::from_obj)
                        .collect::<Vec<_>>()
                },
            )
            .owns_stream(
                watcher(scoped::<PartialObjectMeta<Job>>(ctx), builds)
                    .default_backoff()
                    .touched_objects(),
            )
            .watches_stream(
                watcher(scoped::<PartialObjectMeta<Pod>>(ctx), run_pods)
                    .default_backoff()
                    .touched_objects(),
                move |pod: PartialObjectMeta<Pod>| {
                    crate::deploy::triggers::by_pod(&pod.metadata, &pod_store.state())
                },
            )
            .watches_stream(
                watcher(
                    scoped::<PartialObjectMeta<EndpointSlice>>(ctx),
                    watcher::Config::default(),
                )
                .default_backoff()
                .touched_objects(),
                move |slice: PartialObjectMeta<EndpointSlice>| {
                    crate::deploy::triggers::by_endpoint_slice(
                        &slice.metadata,
                        &slice_store.state(),
                    )
                },
            );
    drive(controller, "Deploy", crate::deploy::reconcile, ctx)
}

/// Domains: a channel that appears (or gets its hostname) lets its Domains work out their records.
fn domain_controller(
    ctx: &Arc<Context>,
    reflectors: &Reflectors,
) -> impl std::future::Future<Output = ()> + use<> {
    let domain_store = reflectors.domains.store.clone();
    let controller =
        Controller::for_shared_stream(reflectors.domains.subscribe(), domain_store.clone())
            .watches_shared_stream(
                reflectors.channels.subscribe(),
                move |channel: Arc<Channel>| {
                    let (ns, name) = (channel.namespace(), channel.name_any());
                    domain_store
                        .state()
                        .into_iter()
                        .filter(|d| d.namespace() == ns && d.spec.channel == name)
                        .map(|d| ObjectRef::from_obj(d.as_ref()))
                        .collect::<Vec<_>>()
                },
            );
    drive(controller, "Domain", crate::domain::reconcile, ctx)
}

/// Forwards: an app's toggle decides whether its channels' Forwards serve.
fn forward_controller(
    ctx: &Arc<Context>,
    reflectors: &Reflectors,
) -> impl std::future::Future<Output = ()> + use<> {
    let controller = crate::caches::controller(scoped::<Forward>(ctx));
    let forward_store = controller.store();
    let controller =
        controller.watches_shared_stream(reflectors.apps.subscribe(), move |app: Arc<App>| {
            let (ns, prefix) = (app.namespace(), format!("{}.", app.name_any()));
            forward_store
                .state()
                .into_iter()
                .filter(|f| f.namespace() == ns && f.spec.channel.starts_with(&prefix))
                .map(|f| ObjectRef::from_obj(f.as_ref()))
                .collect::<Vec<_>>()
        });
    drive(controller, "Forward", crate::forward::reconcile, ctx)
}

/// Grants and NetworkPolicies in tenant namespaces, when the operator runs with them (the chart's
/// least-privilege RBAC and tenant isolation).
async fn tenancy_controller(ctx: &Arc<Context>) {
    let keeps_nothing =
        ctx.config.tenant_grants.is_empty() && ctx.config.tenant_network_policies.is_none();
    if keeps_nothing || ctx.config.namespace.is_some() {
        return;
    }
    let controller = crate::tenancy::controller(&ctx.client);
    drive(controller, "Namespace", crate::tenancy::reconcile, ctx).await
}

/// Nodes: a cordoned node's app pods move to other nodes before a drain evicts them. Nodes are cluster-wide, so a
/// namespaced operator leaves them alone.
async fn evacuate_controller(ctx: &Arc<Context>) {
    if ctx.config.namespace.is_some() {
        return;
    }
    let controller = crate::evacuate::controller(&ctx.client);
    let nodes = controller.store();
    let reconcile = move |node, ctx| crate::evacuate::reconcile(node, ctx, nodes.clone());
    drive(controller, "Node", reconcile, ctx).await
}

/// Plans: a plan change resizes the running apps of the namespace whose plan label moved.
async fn plan_controller(ctx: &Arc<Context>) {
    let controller = crate::plan::controller(&ctx.client, ctx.config.namespace.as_deref());
    drive(controller, "Plan", crate::plan::reconcile, ctx).await
}
