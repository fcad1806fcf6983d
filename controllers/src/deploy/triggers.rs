//! What wakes a deploy in flight besides its own changes: its build Job, its new pods and its channel's
//! EndpointSlices. Each is a step a redeploy waits on (the build finishing, the new pods passing readiness, the
//! Service's endpoints moving to them). Looking again every few seconds cost a redeploy about a second per step
//! on average; a watch event starts the next step as soon as the cluster has it.
//!
//! The watches are metadata-only (labels, owners and names are all the mapping reads) and select slipway's own
//! objects by label where the objects carry one. A pod or slice event maps only to deploys running in the
//! deploy store: finished deploys are not woken by their old version's pods going away. Mapping is pure, so it is
//! tested without a cluster.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::reflector::ObjectRef;
use slipway_crds::{Deploy, DeployPhase, labels, names};

/// The label EndpointSlices carry naming their Service.
const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// The label selector of the pods that run deploys (not build pods, which their Job reports).
pub fn run_pod_selector() -> String {
    format!(
        "{}={},{}={}",
        labels::MANAGED_BY,
        labels::MANAGER,
        labels::COMPONENT,
        labels::COMPONENT_RUN
    )
}

/// The running deploy whose pod this is (pods carry their deploy's uid).
pub fn by_pod(pod: &ObjectMeta, deploys: &[Arc<Deploy>]) -> Vec<ObjectRef<Deploy>> {
    let Some(uid) = pod.labels.as_ref().and_then(|l| l.get(labels::DEPLOY)) else {
        return Vec::new();
    };
    running_in(pod, deploys, |d| d.metadata.uid.as_ref() == Some(uid))
}

/// The running deploys of the channel whose Service this EndpointSlice belongs to: the last step of a rollout
/// waits for the Service's endpoints to hold only the new pods.
pub fn by_endpoint_slice(slice: &ObjectMeta, deploys: &[Arc<Deploy>]) -> Vec<ObjectRef<Deploy>> {
    let Some(service) = slice
        .labels
        .as_ref()
        .and_then(|l| l.get(SERVICE_NAME_LABEL))
    else {
        return Vec::new();
    };
    running_in(slice, deploys, |d| {
        names::workload_name(&d.spec.channel) == *service
    })
}

/// The deploys of `object`'s namespace that are running and match `wanted`.
fn running_in(
    object: &ObjectMeta,
    deploys: &[Arc<Deploy>],
    wanted: impl Fn(&Deploy) -> bool,
) -> Vec<ObjectRef<Deploy>> {
    deploys
        .iter()
        .filter(|d| d.metadata.namespace == object.namespace)
        .filter(|d| d.status.as_ref().map(|s| s.phase) == Some(DeployPhase::Running))
        .filter(|d| wanted(d))
        .map(|d| ObjectRef::from_obj(d.as_ref()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deploy(name: &str, uid: &str, channel: &str, phase: &str) -> Arc<Deploy> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "slipway.dev/v1alpha1", "kind": "Deploy",
                "metadata": {"name": name, "namespace": "slipway-user-alice", "uid": uid},
                "spec": {"channel": channel, "sha": "master"},
                "status": {"phase": phase},
            }))
            .unwrap(),
        )
    }

    fn meta(namespace: &str, labels: serde_json::Value) -> ObjectMeta {
        serde_json::from_value(json!({"name": "x", "namespace": namespace, "labels": labels}))
            .unwrap()
    }

    fn names(refs: Vec<ObjectRef<Deploy>>) -> Vec<String> {
        refs.into_iter().map(|r| r.name).collect()
    }

    #[test]
    fn a_pod_wakes_the_running_deploy_it_belongs_to_only() {
        let deploys = [
            deploy("old", "u-old", "blog.prod", "success"),
            deploy("new", "u-new", "blog.prod", "running"),
            deploy("other", "u-other", "blog.staging", "running"),
        ];
        let pod = |uid: &str| meta("slipway-user-alice", json!({labels::DEPLOY: uid}));
        assert_eq!(names(by_pod(&pod("u-new"), &deploys)), ["new"]);
        // The old version's pods going away wake nothing: that deploy has finished.
        assert!(by_pod(&pod("u-old"), &deploys).is_empty());
        assert!(by_pod(&meta("slipway-user-alice", json!({})), &deploys).is_empty());
        // A pod of another namespace with the same uid label is not this deploy's.
        let elsewhere = meta("slipway-user-mallory", json!({labels::DEPLOY: "u-new"}));
        assert!(by_pod(&elsewhere, &deploys).is_empty());
    }

    #[test]
    fn an_endpoint_slice_wakes_the_running_deploys_of_its_channel() {
        let deploys = [
            deploy("new", "u-new", "blog.prod", "running"),
            deploy("queued", "u-queued", "blog.prod", "queued"),
            deploy("other", "u-other", "blog.staging", "running"),
        ];
        let service = names::workload_name("blog.prod");
        let slice = meta("slipway-user-alice", json!({SERVICE_NAME_LABEL: service}));
        assert_eq!(names(by_endpoint_slice(&slice, &deploys)), ["new"]);
        let unrelated = meta(
            "slipway-user-alice",
            json!({SERVICE_NAME_LABEL: "kubernetes"}),
        );
        assert!(by_endpoint_slice(&unrelated, &deploys).is_empty());
    }
}
