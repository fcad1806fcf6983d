//! Apps through a node drain. An app runs one pod, so a drain evicting it would take the app down for as long as a
//! new pod takes to start elsewhere. Instead, each deploy's PodDisruptionBudget ([`crate::workload`]) refuses the
//! eviction while the pod serves, and this controller, seeing the node cordoned (or tainted for removal by the
//! cluster autoscaler), rolls every app Deployment with a pod there over with a surge, as a plan change does: the
//! new pod starts on a node that takes pods, the old one stops once the new one is ready, and the drain's next
//! eviction finds it gone. While the operator is down a drain waits for it, as it waits for CloudNativePG to move
//! a primary.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{ListParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::watcher;
use kube::{Api, ResourceExt};

use crate::context::Context;
use crate::error::Error;

/// Field manager of the move patches.
const FIELD_MANAGER: &str = "slipway-operator-evacuate";

/// The pod-template annotation a move sets: the node and the pod moved off it. A new value rolls the pods over.
pub const MOVED_OFF: &str = "slipway.dev/moved-off";

/// The reason of the Event a move records on the Deployment.
pub const MOVED_REASON: &str = "MovedOffNode";

/// The taint the cluster autoscaler puts on a node it is about to remove.
const AUTOSCALER_TAINT: &str = "ToBeDeletedByClusterAutoscaler";

/// How often a cordoned node is looked at again while app pods remain on it.
const RECHECK: Duration = Duration::from_secs(10);

/// The controller over every node.
pub fn controller(client: &kube::Client) -> Controller<Node> {
    Controller::new(Api::<Node>::all(client.clone()), watcher::Config::default())
}

/// Moves the app pods off the node when it is cordoned.
pub async fn reconcile(node: Arc<Node>, ctx: Arc<Context>) -> Result<Action, Error> {
    if !cordoned(&node) {
        return Ok(Action::await_change());
    }
    let name = node.name_any();
    let pods: Api<Pod> = Api::all(ctx.client.clone());
    let selector = crate::deploy::triggers::run_pod_selector();
    let listed = pods
        .list(
            &ListParams::default()
                .labels(&selector)
                .fields(&format!("spec.nodeName={name}")),
        )
        .await?;
    let mut remaining = 0;
    for pod in &listed.items {
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        remaining += 1;
        let (Some(namespace), Some(deployment)) = (pod.namespace(), deployment_of(pod)) else {
            continue;
        };
        let moved_off = format!("{name} {}", pod.uid().unwrap_or_default());
        let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), &namespace);
        let Some(current) = deployments.get_opt(&deployment).await? else {
            continue;
        };
        if annotation(&current) == Some(moved_off.as_str()) {
            continue;
        }
        deployments
            .patch(
                &deployment,
                &PatchParams::apply(FIELD_MANAGER),
                &Patch::Strategic(move_patch(&moved_off)),
            )
            .await?;
        tracing::info!(
            node = %name,
            namespace = %namespace,
            deployment = %deployment,
            "moving an app off a cordoned node"
        );
        crate::channel::publish(
            &ctx,
            &current,
            EventType::Normal,
            MOVED_REASON,
            format!("moving pod {} off node {name}, which is cordoned: a new pod starts elsewhere first", pod.name_any()),
        )
        .await;
    }
    Ok(if remaining > 0 {
        Action::requeue(RECHECK)
    } else {
        Action::await_change()
    })
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
    fn a_move_surges_and_marks_the_pod_template() {
        let patch = move_patch("node-a 1234");
        assert_eq!(
            patch["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"],
            0
        );
        assert_eq!(patch["spec"]["strategy"]["rollingUpdate"]["maxSurge"], 1);
        assert_eq!(
            patch["spec"]["template"]["metadata"]["annotations"][MOVED_OFF],
            "node-a 1234"
        );
    }
}
