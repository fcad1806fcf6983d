//! The App and Channel reconcilers against the real apiserver (and kube-controller-manager's garbage collector):
//! an App written with kubectl gets its prod channel, channels report their hostname and phase, a channel without
//! its app says so in a condition and an Event, deleting an App takes its channels with it, a channel's Ingress
//! changed or deleted by hand is put back, and a reconcile that fails says why in a Warning Event named for its
//! error's category.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use slipway_controllers::metrics::Metrics;
use slipway_controllers::{Context, OperatorConfig};
use slipway_crds::{App, Channel, ChannelPhase};
use slipway_testkit::{setup, wait_until};

const APP_DOMAIN: &str = "apps.slipway.test";

/// Runs the operator scoped to `namespace` for the rest of the test.
fn start_operator(client: kube::Client, namespace: &str) -> tokio::task::JoinHandle<()> {
    let ctx = context(client, namespace);
    tokio::spawn(async move {
        if let Err(e) = slipway_controllers::run::run(ctx).await {
            panic!("operator stopped: {e:#}");
        }
    })
}

/// The operator's context scoped to `namespace`, for reconcilers called directly.
fn context(client: kube::Client, namespace: &str) -> Arc<Context> {
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = Metrics::register(&mut registry);
    let config = OperatorConfig {
        app_domain: APP_DOMAIN.into(),
        namespace: Some(namespace.into()),
        internal: slipway_internal::InternalEndpoint {
            url: "http://127.0.0.1:9".into(),
            token: slipway_internal::TokenSource::fixed("unused-by-these-tests"),
        },
        pod_internal_url: "http://127.0.0.1:9".into(),
        registry: "127.0.0.1:9".into(),
        bases_registry: None,
        buildkit_addr: "tcp://127.0.0.1:9".into(),
        buildkit_ca: None,
        probe_image: "busybox".into(),
        builder_image: "127.0.0.1:9/slipway/builder:unused".into(),
        tenant_grants: Vec::new(),
        tenant_network_policies: None,
        readiness_window: slipway_controllers::workload::READINESS_WINDOW,
        deploy_deadline: slipway_controllers::deploy::DEPLOY_DEADLINE,
        cpu_request_percent: slipway_controllers::workload::FULL_CPU_REQUEST_PERCENT,
        app_disruption_budgets: true,
        domains: Default::default(),
    };
    Arc::new(Context::new(client, config, metrics))
}

fn ready_reason(channel: &Channel) -> Option<(String, String)> {
    let c = channel
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")?;
    Some((c.status.clone(), c.reason.clone()))
}

#[tokio::test]
async fn an_app_written_with_kubectl_gets_its_prod_channel_and_statuses() -> Result<()> {
    let (client, ns) = setup("operator").await?;
    let _operator = start_operator(client.clone(), ns.name());
    let apps: Api<App> = Api::namespaced(client.clone(), ns.name());
    let channels: Api<Channel> = Api::namespaced(client.clone(), ns.name());
    let app: App =
        serde_json::from_value(json!({"apiVersion": "slipway.dev/v1alpha1", "kind": "App",
        "metadata": {"name": "blog"}, "spec": {"owner": "alice", "template": "static"}}))?;
    let app = apps.create(&PostParams::default(), &app).await?;
    let next: Channel = serde_json::from_value(
        json!({"apiVersion": "slipway.dev/v1alpha1", "kind": "Channel",
        "metadata": {"name": "blog.next"}, "spec": {"app": "blog", "gitRefBinding": "branch:next"}}),
    )?;
    channels.create(&PostParams::default(), &next).await?;

    wait_until(Duration::from_secs(30), || {
        let channels = channels.clone();
        async move {
            let Some(prod) = channels.get_opt("blog.prod").await? else {
                return Ok(false);
            };
            let next = channels.get("blog.next").await?;
            Ok([&prod, &next]
                .iter()
                .all(|c| c.status.as_ref().is_some_and(|s| s.hostname.is_some())))
        }
    })
    .await?;
    let prod = channels.get("blog.prod").await?;
    assert_eq!(prod.spec.git_ref_binding, "branch:master");
    let status = prod.status.clone().unwrap();
    assert_eq!(
        status.hostname.as_deref(),
        Some("blog-alice.apps.slipway.test")
    );
    assert_eq!(status.phase, ChannelPhase::Provisioning);
    assert_eq!(status.observed_generation, prod.metadata.generation);
    assert_eq!(
        ready_reason(&prod),
        Some(("False".into(), "Provisioning".into()))
    );
    let next = channels.get("blog.next").await?;
    assert_eq!(
        next.status.as_ref().unwrap().hostname.as_deref(),
        Some("next-blog-alice.apps.slipway.test")
    );
    // The kubectl-made channel was adopted by its App.
    let app_uid = app.metadata.uid.clone().unwrap();
    assert!(
        next.metadata
            .owner_references
            .unwrap_or_default()
            .iter()
            .any(|r| r.uid == app_uid)
    );

    wait_until(Duration::from_secs(30), || {
        let apps = apps.clone();
        async move {
            let app = apps.get("blog").await?;
            Ok(app.status.is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
            }))
        }
    })
    .await?;

    // Deleting the App takes its channels with it (garbage collection through the owner references).
    apps.delete("blog", &DeleteParams::background()).await?;
    wait_until(Duration::from_secs(30), || {
        let channels = channels.clone();
        async move {
            Ok(channels
                .list(&ListParams::default())
                .await?
                .items
                .is_empty())
        }
    })
    .await?;
    Ok(())
}

#[tokio::test]
async fn a_failing_reconcile_says_why_in_a_warning_event_named_for_its_category() -> Result<()> {
    let (client, ns) = setup("failing").await?;
    // This operator's internal API address leads nowhere: a deploy cannot resolve its commit there.
    let _operator = start_operator(client.clone(), ns.name());
    let apps: Api<App> = Api::namespaced(client.clone(), ns.name());
    let app: App =
        serde_json::from_value(json!({"apiVersion": "slipway.dev/v1alpha1", "kind": "App",
        "metadata": {"name": "site"}, "spec": {"owner": "alice", "template": "static"}}))?;
    apps.create(&PostParams::default(), &app).await?;
    let deploys: Api<slipway_crds::Deploy> = Api::namespaced(client.clone(), ns.name());
    let deploy: slipway_crds::Deploy = serde_json::from_value(
        json!({"apiVersion": "slipway.dev/v1alpha1",
        "kind": "Deploy", "metadata": {"name": "site.prod-1"}, "spec": {"channel": "site.prod", "sha": "master"}}),
    )?;
    deploys.create(&PostParams::default(), &deploy).await?;
    let events: Api<Event> = Api::namespaced(client.clone(), ns.name());
    wait_until(Duration::from_secs(60), || {
        let events = events.clone();
        async move {
            let list = events.list(&ListParams::default()).await?;
            Ok(list.items.iter().any(|e| {
                e.type_.as_deref() == Some("Warning")
                    && e.reason.as_deref() == Some("InternalApi")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("site.prod-1")
                    && e.note.as_deref().is_some_and(|n| !n.is_empty())
            }))
        }
    })
    .await?;
    Ok(())
}

#[tokio::test]
async fn a_channel_without_its_app_says_so() -> Result<()> {
    let (client, ns) = setup("orphan").await?;
    let _operator = start_operator(client.clone(), ns.name());
    let channels: Api<Channel> = Api::namespaced(client.clone(), ns.name());
    let orphan: Channel = serde_json::from_value(
        json!({"apiVersion": "slipway.dev/v1alpha1", "kind": "Channel",
        "metadata": {"name": "ghost.next"}, "spec": {"app": "ghost", "gitRefBinding": "branch:next"}}),
    )?;
    channels.create(&PostParams::default(), &orphan).await?;
    wait_until(Duration::from_secs(30), || {
        let channels = channels.clone();
        async move {
            Ok(ready_reason(&channels.get("ghost.next").await?)
                .is_some_and(|(_, r)| r == "ReferenceNotFound"))
        }
    })
    .await?;
    let events: Api<Event> = Api::namespaced(client.clone(), ns.name());
    wait_until(Duration::from_secs(30), || {
        let events = events.clone();
        async move {
            let list = events.list(&ListParams::default()).await?;
            Ok(list.items.iter().any(|e| {
                e.type_.as_deref() == Some("Warning")
                    && e.reason.as_deref() == Some("ReferenceNotFound")
                    && e.note
                        .as_deref()
                        .is_some_and(|n| n.contains("app ghost does not exist"))
            }))
        }
    })
    .await?;

    // Once the app appears, the channel is accepted (the App is watched).
    let apps: Api<App> = Api::namespaced(client, ns.name());
    let app: App =
        serde_json::from_value(json!({"apiVersion": "slipway.dev/v1alpha1", "kind": "App",
        "metadata": {"name": "ghost"}, "spec": {"owner": "casper"}}))?;
    apps.create(&PostParams::default(), &app).await?;
    wait_until(Duration::from_secs(30), || {
        let channels = channels.clone();
        async move {
            Ok(ready_reason(&channels.get("ghost.next").await?)
                .is_some_and(|(_, r)| r == "Provisioning"))
        }
    })
    .await?;
    Ok(())
}

/// The host of the first rule of `ingress`.
fn first_host(ingress: &Ingress) -> Option<String> {
    ingress.spec.as_ref()?.rules.as_ref()?.first()?.host.clone()
}

#[tokio::test]
async fn a_channel_s_ingress_changed_by_hand_is_put_back() -> Result<()> {
    let (client, ns) = setup("ingress-drift").await?;
    let _operator = start_operator(client.clone(), ns.name());
    let apps: Api<App> = Api::namespaced(client.clone(), ns.name());
    let app: App =
        serde_json::from_value(json!({"apiVersion": "slipway.dev/v1alpha1", "kind": "App",
        "metadata": {"name": "blog"}, "spec": {"owner": "alice", "template": "static"}}))?;
    apps.create(&PostParams::default(), &app).await?;
    let ingresses: Api<Ingress> = Api::namespaced(client.clone(), ns.name());
    let hostname = "blog-alice.apps.slipway.test";
    wait_until(Duration::from_secs(30), || {
        let ingresses = ingresses.clone();
        async move {
            let ingress = ingresses.get_opt("blog.prod").await?;
            Ok(ingress.as_ref().and_then(first_host).as_deref() == Some(hostname))
        }
    })
    .await?;

    // The operator keeps its copy of the Ingress from the watch that triggers it: an edit is seen, and undone.
    let patch = json!({"spec": {"rules": [{"host": "elsewhere.example", "http": {"paths": [
        {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "other", "port": {"number": 80}}}}]}}]}});
    ingresses
        .patch("blog.prod", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    wait_until(Duration::from_secs(30), || {
        let ingresses = ingresses.clone();
        async move {
            let ingress = ingresses.get("blog.prod").await?;
            let backend =
                serde_json::to_value(&ingress)?["spec"]["rules"][0]["http"]["paths"][0]["backend"]
                    .clone();
            Ok(first_host(&ingress).as_deref() == Some(hostname)
                && backend["resource"]["kind"] == "Channel")
        }
    })
    .await?;

    // So is a deleted one.
    ingresses
        .delete("blog.prod", &DeleteParams::default())
        .await?;
    wait_until(Duration::from_secs(30), || {
        let ingresses = ingresses.clone();
        async move {
            let ingress = ingresses.get_opt("blog.prod").await?;
            Ok(ingress.is_some_and(|i| {
                i.metadata.deletion_timestamp.is_none()
                    && first_host(&i).as_deref() == Some(hostname)
            }))
        }
    })
    .await?;
    Ok(())
}

#[tokio::test]
async fn a_reconcile_from_a_copy_older_than_a_go_live_writes_nothing_and_the_next_says_running()
-> Result<()> {
    let (client, ns) = setup("stale").await?;
    let ctx = context(client.clone(), ns.name());
    let apps: Api<App> = Api::namespaced(client.clone(), ns.name());
    let channels: Api<Channel> = Api::namespaced(client.clone(), ns.name());
    let app: App =
        serde_json::from_value(json!({"apiVersion": "slipway.dev/v1alpha1", "kind": "App",
        "metadata": {"name": "blog"}, "spec": {"owner": "alice", "template": "static"}}))?;
    let app = apps.create(&PostParams::default(), &app).await?;
    // Already the app's (as the reconciler leaves a channel it adopted), so nothing replaces the copy it works from.
    let channel: Channel = serde_json::from_value(json!({
        "apiVersion": "slipway.dev/v1alpha1", "kind": "Channel",
        "metadata": {"name": "blog.prod", "ownerReferences": [{"apiVersion": "slipway.dev/v1alpha1",
            "kind": "App", "name": "blog", "uid": app.metadata.uid}]},
        "spec": {"app": "blog", "gitRefBinding": "branch:master"}}))?;
    // The copy the channel reconciler is working from when the first deploy goes live.
    let stale = channels.create(&PostParams::default(), &channel).await?;
    let reconcile =
        |channel: Channel| slipway_controllers::channel::reconcile(Arc::new(channel), ctx.clone());
    let sha = "0123456789abcdef0123456789abcdef01234567";
    // What the deploy reconciler writes as a deploy goes live: the commit, under its own field manager.
    let live = channels
        .patch_status(
            "blog.prod",
            &PatchParams {
                field_manager: Some(slipway_controllers::deploy::CHANNEL_MANAGER.into()),
                ..PatchParams::default()
            },
            &Patch::Merge(json!({"status": {"currentSha": sha}})),
        )
        .await?;

    // From the stale copy, the reconciler would say "provisioning": the apiserver refuses that write.
    reconcile(stale).await.map_err(|e| anyhow::anyhow!("{e}"))?;
    let after = channels.get("blog.prod").await?;
    assert_eq!(
        after.metadata.resource_version, live.metadata.resource_version,
        "a copy older than the go-live wrote: {:?}",
        after.status
    );

    // Reconciled from what is there now, the channel is running and says it serves the deployed commit.
    reconcile(after).await.map_err(|e| anyhow::anyhow!("{e}"))?;
    let now = channels.get("blog.prod").await?;
    assert_eq!(now.status.as_ref().unwrap().phase, ChannelPhase::Running);
    assert_eq!(
        now.status.as_ref().unwrap().current_sha.as_deref(),
        Some(sha)
    );
    assert_eq!(
        ready_reason(&now),
        Some(("True".into(), "Reconciled".into()))
    );

    // Each status field has one writer, named in managedFields.
    crate::support::deploys::assert_sole_writers(
        &now,
        &[
            ("currentSha", slipway_controllers::deploy::CHANNEL_MANAGER),
            ("phase", slipway_controllers::channel::STATUS_MANAGER),
            ("conditions", slipway_controllers::channel::STATUS_MANAGER),
            ("hostname", slipway_controllers::channel::STATUS_MANAGER),
        ],
    );
    Ok(())
}

/// Two policies as an installation ships them: isolation for every pod, and more egress for build pods.
const SHIPPED_POLICIES: &str = "
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: slipway-tenant-isolation}
spec:
  podSelector: {}
  policyTypes: [Ingress, Egress]
  ingress:
    - from: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: slipway}}}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: slipway-builds}
spec:
  podSelector: {matchLabels: {slipway.dev/build: image}}
  policyTypes: [Egress]
  egress:
    - to: [{ipBlock: {cidr: 10.0.0.5/32}}]
      ports: [{protocol: TCP, port: 1234}]
";

#[tokio::test]
async fn a_tenant_namespace_keeps_exactly_the_network_policies_the_installation_ships() -> Result<()>
{
    use k8s_openapi::api::core::v1::Namespace;
    use k8s_openapi::api::networking::v1::NetworkPolicy;
    use k8s_openapi::api::rbac::v1::ClusterRole;
    use slipway_controllers::{network_policies, tenancy};

    let (client, ns) = setup("tenancy").await?;
    // The grant's ClusterRole owns what the operator keeps in tenant namespaces.
    let role_name = format!("{}-tenant", ns.name());
    let roles: Api<ClusterRole> = Api::all(client.clone());
    let role: ClusterRole = serde_json::from_value(json!({"metadata": {"name": role_name}}))?;
    let role = roles.create(&PostParams::default(), &role).await?;
    let shipped = network_policies::parse(SHIPPED_POLICIES).map_err(anyhow::Error::msg)?;
    let with_policies = |policies: Vec<NetworkPolicy>| {
        let mut ctx = context(client.clone(), ns.name());
        let config = &mut Arc::get_mut(&mut ctx).unwrap().config;
        config.tenant_grants = vec![
            format!("{role_name}={}/default", ns.name())
                .parse()
                .unwrap(),
        ];
        config.tenant_network_policies = Some(policies);
        ctx
    };
    let namespace = Arc::new(Api::<Namespace>::all(client.clone()).get(ns.name()).await?);
    let policies: Api<NetworkPolicy> = Api::namespaced(client.clone(), ns.name());
    let names = || async {
        let mut names: Vec<String> = policies
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .map(|p| p.metadata.name.unwrap_or_default())
            .collect();
        names.sort();
        anyhow::Ok(names)
    };
    // A policy of the cluster's admins, not slipway's: never touched.
    let admins: NetworkPolicy = serde_json::from_value(json!({"metadata": {"name": "admins-own"},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}}))?;
    policies.create(&PostParams::default(), &admins).await?;

    tenancy::reconcile(namespace.clone(), with_policies(shipped.clone())).await?;
    assert_eq!(
        names().await?,
        ["admins-own", "slipway-builds", "slipway-tenant-isolation"]
    );
    let isolation = policies.get("slipway-tenant-isolation").await?;
    let owner = &isolation
        .metadata
        .owner_references
        .clone()
        .unwrap_or_default()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("ClusterRole", role.metadata.uid.as_deref().unwrap())
    );
    assert_eq!(
        isolation.metadata.labels.unwrap_or_default()["app.kubernetes.io/managed-by"],
        "slipway"
    );

    // Loosened and deleted by hand: both come back as shipped.
    policies
        .patch(
            "slipway-tenant-isolation",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"ingress": [{}]}})),
        )
        .await?;
    policies
        .delete("slipway-builds", &DeleteParams::default())
        .await?;
    tenancy::reconcile(namespace.clone(), with_policies(shipped.clone())).await?;
    assert_eq!(
        names().await?,
        ["admins-own", "slipway-builds", "slipway-tenant-isolation"]
    );
    let from = policies
        .get("slipway-tenant-isolation")
        .await?
        .spec
        .unwrap()
        .ingress
        .unwrap()[0]
        .from
        .clone()
        .unwrap_or_default();
    assert_eq!(
        from.len(),
        1,
        "the ingress rule is the shipped one again: {from:?}"
    );

    // A policy the installation stops shipping goes; none shipped (isolation switched off) takes them all.
    tenancy::reconcile(namespace.clone(), with_policies(shipped[..1].to_vec())).await?;
    assert_eq!(names().await?, ["admins-own", "slipway-tenant-isolation"]);
    tenancy::reconcile(namespace, with_policies(Vec::new())).await?;
    assert_eq!(names().await?, ["admins-own"]);
    roles.delete(&role_name, &DeleteParams::default()).await?;
    Ok(())
}
