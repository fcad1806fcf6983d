//! Apps through a node drain. An app runs one pod, so a drain evicting it would take the app down for as long as a
//! new pod takes to start elsewhere. Instead, each deploy's PodDisruptionBudget ([`crate::workload`]) refuses the
//! eviction while the pod serves, and this controller, seeing the node cordoned (or tainted for removal by the
//! cluster autoscaler), rolls every app Deployment with a pod there over with a surge, as a plan change does: the
//! new pod starts on a node that takes pods, the old one stops once the new one is ready, and the drain's next
//! eviction finds it gone. While the operator is down a drain waits for it, as it waits for CloudNativePG to move
//! a primary. A move that cannot happen (no other node takes pods) or does not finish within five minutes (the new
//! pod never gets ready) is given up: the budget goes, with a Warning Event, and the drain evicts the pod.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Api, ResourceExt};

use crate::context::Context;
use crate::error::Error;

/// Field manager of the move patches (whose time [`moving_for`] reads).
const FIELD_MANAGER: &str = "slipway-operator-evacuate";

/// Field manager of the mark a given-up move leaves ([`NO_BUDGET`]), apart from the moves' so that it does not
/// restart a move's clock.
const MARK_MANAGER: &str = "slipway-operator-evacuate-mark";

/// The pod-template annotation a move sets: the node and the pod template moved off it. A new value rolls the pods
/// over.
pub const MOVED_OFF: &str = "slipway.dev/moved-off";

/// The reason of the Event a move records on the Deployment.
pub const MOVED_REASON: &str = "MovedOffNode";

/// The reason of the Warning Event recorded when a move is given up and the drain may evict the pod.
pub const ABANDONED_REASON: &str = "MoveAbandoned";

/// The taint the cluster autoscaler puts on a node it is about to remove.
const AUTOSCALER_TAINT: &str = "ToBeDeletedByClusterAutoscaler";

/// How often a cordoned node is looked at again while app pods remain on it.
const RECHECK: Duration = Duration::from_secs(10);

/// How long a move may take: past it the new pod is taken not to get ready (no node takes it, its image does not
/// pull, it crashes there), and the budget goes, so that the drain evicts the old pod rather than wait forever.
const GIVE_UP_AFTER: Duration = Duration::from_secs(300);

/// The controller over every node.
pub fn controller(client: &kube::Client) -> Controller<Node> {
    Controller::new(Api::<Node>::all(client.clone()), watcher::Config::default())
}

/// Moves the app pods off the node when it is cordoned.
/// `nodes` is the controller's own store of every node.
pub async fn reconcile(
    node: Arc<Node>,
    ctx: Arc<Context>,
    nodes: Store<Node>,
) -> Result<Action, Error> {
    if !cordoned(&node) {
        return Ok(Action::await_change());
    }
    let name = node.name_any();
    let elsewhere = nodes
        .state()
        .iter()
        .any(|n| n.name_any() != name && !cordoned(n));
    let pods: Api<Pod> = Api::all(ctx.client.clone());
    let listed = pods
        .list(
            &ListParams::default()
                .labels(&crate::deploy::triggers::run_pod_selector())
                .fields(&format!("spec.nodeName={name}")),
        )
        .await?;
    // Each Deployment once, keyed by its pods' template: two pods of one template move together.
    let mut on_node = std::collections::BTreeMap::new();
    for pod in listed
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
    {
        if let (Some(namespace), Some(deployment), Some(template)) = (
            pod.namespace(),
            deployment_of(pod),
            pod.labels().get("pod-template-hash"),
        ) {
            on_node.insert((namespace, deployment), format!("{name} {template}"));
        }
    }
    for ((namespace, deployment), moved_off) in &on_node {
        let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), namespace);
        let moved = move_one(&ctx, &deployments, deployment, moved_off, elsewhere).await;
        if let Err(e) = moved {
            // One app's trouble holds no other app's move up.
            tracing::warn!(node = %name, namespace = %namespace, deployment = %deployment, error = %e,
                "could not move an app off a cordoned node");
        }
    }
    Ok(if on_node.is_empty() {
        Action::await_change()
    } else {
        Action::requeue(RECHECK)
    })
}

/// Rolls `deployment` over with a surge, marked `moved_off` (`<node> <pod template>`), unless that move is under
/// way; gives the move up when no other node takes pods or it has taken [`GIVE_UP_AFTER`].
async fn move_one(
    ctx: &Context,
    deployments: &Api<Deployment>,
    deployment: &str,
    moved_off: &str,
    elsewhere: bool,
) -> Result<(), Error> {
    let Some(current) = deployments.get_opt(deployment).await? else {
        return Ok(());
    };
    if !elsewhere {
        return give_up(ctx, &current, "no other node takes pods").await;
    }
    if annotation(&current) == Some(moved_off) {
        if moving_for(&current).is_some_and(|d| d > GIVE_UP_AFTER) {
            let reason = format!(
                "the new pod was not ready within {} s",
                GIVE_UP_AFTER.as_secs()
            );
            return give_up(ctx, &current, &reason).await;
        }
        return Ok(());
    }
    deployments
        .patch(
            deployment,
            &PatchParams::apply(FIELD_MANAGER),
            &Patch::Strategic(move_patch(moved_off)),
        )
        .await?;
    let node = moved_off.split(' ').next().unwrap_or_default();
    tracing::info!(node, deployment, "moving an app off a cordoned node");
    crate::channel::publish(
        ctx,
        &current,
        EventType::Normal,
        MOVED_REASON,
        format!(
            "moving the app off node {node}, which is cordoned: a new pod starts elsewhere first"
        ),
    )
    .await;
    Ok(())
}

/// Removes the Deployment's budget, so that the drain evicts its pod: the app is down until the pod restarts
/// elsewhere, as without a budget.
async fn give_up(ctx: &Context, deployment: &Deployment, reason: &str) -> Result<(), Error> {
    let Some(namespace) = deployment.namespace() else {
        return Ok(());
    };
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(ctx.client.clone(), &namespace);
    if budgets.get_opt(&deployment.name_any()).await?.is_none() {
        return Ok(());
    }
    // Marked first, so that no pass making missing budgets puts it back while the drain goes on.
    let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), &namespace);
    let mark = serde_json::json!({"metadata": {"annotations": {NO_BUDGET: reason}}});
    deployments
        .patch(
            &deployment.name_any(),
            &PatchParams::apply(MARK_MANAGER),
            &Patch::Merge(mark),
        )
        .await?;
    crate::deletion::delete_if_present(&budgets, &deployment.name_any()).await?;
    tracing::warn!(deployment = %deployment.name_any(), reason, "gave up moving an app off a cordoned node");
    crate::channel::publish(
        ctx,
        deployment,
        EventType::Warning,
        ABANDONED_REASON,
        format!("not moving the app first ({reason}): a drain evicts its pod, and it is down until the pod restarts"),
    )
    .await;
    Ok(())
}

/// The Deployment annotation a given-up move leaves: the app keeps no budget until its next deploy, so that the
/// pass that makes missing budgets ([`settle_budgets`]) does not hold the drain up again.
pub const NO_BUDGET: &str = "slipway.dev/no-disruption-budget";

/// Brings the budgets of one namespace's app Deployments (`deployments`, as listed) in line with the operator's
/// setting: with budgets on, a Deployment without one gets it (an app deployed before budgets, or while they were
/// off), unless a move of it was given up; with budgets off, every app budget goes, so that nothing holds a node
/// the cluster autoscaler would remove. A budget is owned by its Deployment, so one made for a Deployment deleted
/// meanwhile is collected with it.
pub async fn settle_budgets(
    ctx: &Context,
    namespace: &str,
    deployments: &[Deployment],
) -> Result<(), Error> {
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(ctx.client.clone(), namespace);
    let selector = crate::deploy::triggers::run_pod_selector();
    let have: std::collections::BTreeSet<String> = budgets
        .list_metadata(&ListParams::default().labels(&selector))
        .await?
        .items
        .into_iter()
        .filter_map(|b| b.metadata.name)
        .collect();
    if !ctx.config.app_disruption_budgets {
        for name in &have {
            crate::deletion::delete_if_present(&budgets, name).await?;
        }
        return Ok(());
    }
    for deployment in deployments {
        let skip = have.contains(&deployment.name_any())
            || deployment.metadata.deletion_timestamp.is_some()
            || deployment.annotations().contains_key(NO_BUDGET);
        if skip {
            continue;
        }
        // Read again: a move given up since the list marks the Deployment, and its budget must stay gone.
        let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), namespace);
        let Some(current) = deployments.get_opt(&deployment.name_any()).await? else {
            continue;
        };
        if current.annotations().contains_key(NO_BUDGET) {
            continue;
        }
        let budget = crate::workload::disruption_budget(&current)?;
        crate::workload::create_if_missing(&budgets, &budget).await?;
        tracing::info!(namespace, deployment = %deployment.name_any(), "made the disruption budget a running app lacked");
    }
    Ok(())
}

/// How long ago this controller last patched the Deployment (its field manager's time).
fn moving_for(deployment: &Deployment) -> Option<Duration> {
    let entry = deployment
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .find(|f| f.manager.as_deref() == Some(FIELD_MANAGER))?;
    let since = entry.time.as_ref()?.0;
    let seconds = Timestamp::now().as_second() - since.as_second();
    u64::try_from(seconds).ok().map(Duration::from_secs)
}

/// Whether no new pod may go to the node: cordoned, or about to be removed by the cluster autoscaler.
fn cordoned(node: &Node) -> bool {
    let Some(spec) = &node.spec else {
        return false;
    };
    spec.unschedulable == Some(true)
        || spec
            .taints
            .iter()
            .flatten()
            .any(|t| t.key == AUTOSCALER_TAINT)
}

/// The Deployment a pod belongs to: its ReplicaSet's name without the pod-template hash.
fn deployment_of(pod: &Pod) -> Option<String> {
    let hash = pod.labels().get("pod-template-hash")?;
    pod.owner_references()
        .iter()
        .find(|o| o.kind == "ReplicaSet")
        .and_then(|o| o.name.strip_suffix(&format!("-{hash}")))
        .map(str::to_owned)
}

fn annotation(deployment: &Deployment) -> Option<&str> {
    deployment
        .spec
        .as_ref()?
        .template
        .metadata
        .as_ref()?
        .annotations
        .as_ref()?
        .get(MOVED_OFF)
        .map(String::as_str)
}

/// A strategic merge patch that rolls the pods over with a surge (no moment without a ready pod), marked with
/// `moved_off`.
fn move_patch(moved_off: &str) -> serde_json::Value {
    serde_json::json!({
        "spec": {
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {"metadata": {"annotations": {MOVED_OFF: moved_off}}},
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeSpec, Taint};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

    fn node(unschedulable: Option<bool>, taint: Option<&str>) -> Node {
        Node {
            spec: Some(NodeSpec {
                unschedulable,
                taints: taint.map(|key| {
                    vec![Taint {
                        key: key.to_owned(),
                        effect: "NoSchedule".to_owned(),
                        ..Taint::default()
                    }]
                }),
                ..NodeSpec::default()
            }),
            ..Node::default()
        }
    }

    #[test]
    fn a_node_is_left_when_it_takes_no_new_pods() {
        assert!(cordoned(&node(Some(true), None)));
        assert!(cordoned(&node(None, Some(AUTOSCALER_TAINT))));
        assert!(!cordoned(&node(Some(false), None)));
        assert!(!cordoned(&node(None, Some("dedicated"))));
        assert!(!cordoned(&Node::default()));
    }

    fn pod(owner: Option<(&str, &str)>, hash: Option<&str>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                labels: hash.map(|h| [("pod-template-hash".to_owned(), h.to_owned())].into()),
                owner_references: owner.map(|(kind, name)| {
                    vec![OwnerReference {
                        kind: kind.to_owned(),
                        name: name.to_owned(),
                        ..OwnerReference::default()
                    }]
                }),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        }
    }

    #[test]
    fn a_pod_names_its_deployment_through_its_replica_set() {
        let of = |owner, hash| deployment_of(&pod(owner, hash));
        assert_eq!(
            of(
                Some(("ReplicaSet", "blog-prod-1a2b3c4d-7f9c8d")),
                Some("7f9c8d")
            )
            .as_deref(),
            Some("blog-prod-1a2b3c4d")
        );
        assert_eq!(
            of(Some(("ReplicaSet", "blog-prod-x")), Some("7f9c8d")),
            None
        );
        assert_eq!(of(Some(("Job", "build-7f9c8d")), Some("7f9c8d")), None);
        assert_eq!(of(Some(("ReplicaSet", "blog-prod-7f9c8d")), None), None);
    }

    #[test]
    fn a_move_is_timed_by_this_controllers_last_patch() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, Time};
        let entry = |manager: &str, ago: i64| ManagedFieldsEntry {
            manager: Some(manager.to_owned()),
            time: Some(Time(
                Timestamp::from_second(Timestamp::now().as_second() - ago).unwrap(),
            )),
            ..ManagedFieldsEntry::default()
        };
        let deployment = |entries| Deployment {
            metadata: ObjectMeta {
                managed_fields: Some(entries),
                ..ObjectMeta::default()
            },
            ..Deployment::default()
        };
        let moving = moving_for(&deployment(vec![
            entry("kube-controller-manager", 5),
            entry(FIELD_MANAGER, 400),
        ]))
        .unwrap();
        assert!(
            moving >= Duration::from_secs(400) && moving > GIVE_UP_AFTER,
            "{moving:?}"
        );
        assert_eq!(moving_for(&deployment(vec![entry("someone", 400)])), None);
    }

    #[test]
    fn a_move_surges_and_marks_the_pod_template() {
        let patch = move_patch("node-a 7f9c8d");
        assert_eq!(
            patch["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"],
            0
        );
        assert_eq!(patch["spec"]["strategy"]["rollingUpdate"]["maxSurge"], 1);
        assert_eq!(
            patch["spec"]["template"]["metadata"]["annotations"][MOVED_OFF],
            "node-a 7f9c8d"
        );
    }
}
