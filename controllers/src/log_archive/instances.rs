//! Which instances of the app container a pod shows, and their facts: the one running (or last started) now and,
//! after a restart, the one before it. Kubernetes keeps no more than these two, so the archive reports both on
//! every change of the pod and follows each while it can.

use k8s_openapi::api::core::v1::{ContainerState, ContainerStatus, Pod};
use slipway_internal::protocol::RuntimeContainer;

use crate::workload::APP_CONTAINER;

/// The reason Kubernetes gives a container the kernel killed for passing its memory limit.
const OOM_KILLED: &str = "OOMKilled";

/// One instance of a pod's app container.
#[derive(Debug, Clone, PartialEq)]
pub struct Instance {
    /// The runtime's id, without its scheme (`containerd://`).
    pub container_id: String,
    /// Whether it is the pod's current instance (the log API reads it without `previous`).
    pub current: bool,
    /// Its facts (ids of the app and channel filled in by the caller).
    pub facts: RuntimeContainer,
}

/// The app container's instances in `pod`, the older first (the order generations are numbered in).
pub fn of_pod(pod: &Pod) -> Vec<Instance> {
    let Some(status) = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|all| all.iter().find(|c| c.name == APP_CONTAINER))
    else {
        return Vec::new();
    };
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    let deploy_id = pod
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(slipway_crds::labels::DEPLOY))
        .cloned();
    let fact = |state: &ContainerState, running_now: bool| -> RuntimeContainer {
        let mut facts = RuntimeContainer {
            app_id: String::new(),
            channel_id: String::new(),
            pod_name: pod_name.clone(),
            deploy_id: deploy_id.clone(),
            running: false,
            status: "waiting".into(),
            exit_code: None,
            oom_killed: false,
            started_at: None,
            finished_at: None,
        };
        if let Some(running) = &state.running {
            facts.running = running_now;
            facts.status = "running".into();
            facts.started_at = running.started_at.clone();
        } else if let Some(ended) = &state.terminated {
            facts.status = "exited".into();
            facts.exit_code = Some(ended.exit_code);
            facts.oom_killed = ended.reason.as_deref() == Some(OOM_KILLED);
            facts.started_at = ended.started_at.clone();
            facts.finished_at = ended.finished_at.clone();
        }
        facts
    };
    let mut instances = Vec::new();
    let previous = status
        .last_state
        .as_ref()
        .and_then(|s| s.terminated.as_ref().map(|t| (s, t)));
    if let Some((state, ended)) = previous
        && let Some(id) = ended.container_id.as_deref().map(strip_scheme)
    {
        instances.push(Instance {
            container_id: id.to_owned(),
            current: false,
            facts: fact(state, false),
        });
    }
    if let Some(current) = current_instance(status, &fact) {
        // While a crashed container waits for its restart, the current id is still the one that ended.
        instances.retain(|i| i.container_id != current.container_id);
        instances.push(current);
    }
    instances
}

fn current_instance(
    status: &ContainerStatus,
    fact: &impl Fn(&ContainerState, bool) -> RuntimeContainer,
) -> Option<Instance> {
    let id = strip_scheme(status.container_id.as_deref()?).to_owned();
    let state = status.state.as_ref()?;
    if state.waiting.is_some() {
        return None;
    }
    Some(Instance {
        container_id: id,
        current: true,
        facts: fact(state, true),
    })
}

/// The id without the runtime's scheme: `containerd://abc` is `abc`.
fn strip_scheme(id: &str) -> &str {
    id.split_once("://").map_or(id, |(_, rest)| rest)
}

/// An instance of a pod that is gone: whatever it last showed, it no longer runs.
pub fn ended_with_pod(mut instance: Instance) -> Instance {
    if instance.facts.finished_at.is_none() {
        instance.facts.running = false;
        instance.facts.status = "exited".into();
        instance.facts.finished_at = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::now(),
        ));
    }
    instance
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(app_status: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "web-prod-1234-abc", "labels": {"slipway.dev/deploy": "d-1"}},
            "status": {"containerStatuses": [
                {"name": "readiness", "image": "i", "imageID": "", "ready": true, "restartCount": 0,
                 "containerID": "containerd://probe", "state": {"running": {"startedAt": "2026-11-24T10:00:00Z"}}},
                app_status
            ]}
        }))
        .unwrap()
    }

    #[test]
    fn a_restarted_container_shows_the_ended_instance_then_the_running_one() {
        let pod = pod(json!({
            "name": "app", "image": "i", "imageID": "", "ready": true, "restartCount": 1,
            "containerID": "containerd://second",
            "state": {"running": {"startedAt": "2026-11-24T10:01:00Z"}},
            "lastState": {"terminated": {"exitCode": 3, "reason": "Error", "containerID": "containerd://first",
                "startedAt": "2026-11-24T10:00:00Z", "finishedAt": "2026-11-24T10:00:59Z"}}
        }));
        let all = of_pod(&pod);
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].container_id, "first");
        assert!(!all[0].current);
        assert_eq!(all[0].facts.exit_code, Some(3));
        assert_eq!(all[0].facts.status, "exited");
        assert!(!all[0].facts.running);
        assert!(!all[0].facts.oom_killed);
        assert_eq!(all[0].facts.deploy_id.as_deref(), Some("d-1"));
        assert_eq!(all[1].container_id, "second");
        assert!(all[1].current && all[1].facts.running);
        assert_eq!(all[1].facts.status, "running");
        assert_eq!(all[1].facts.exit_code, None);
    }

    #[test]
    fn a_crashed_container_waiting_for_its_restart_is_one_ended_instance_and_oom_is_flagged() {
        let pod = pod(json!({
            "name": "app", "image": "i", "imageID": "", "ready": false, "restartCount": 1,
            "containerID": "containerd://first",
            "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled", "containerID": "containerd://first",
                "finishedAt": "2026-11-24T10:00:59Z"}}
        }));
        let all = of_pod(&pod);
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].container_id, "first");
        assert!(all[0].facts.oom_killed);
        assert_eq!(all[0].facts.exit_code, Some(137));
    }

    #[test]
    fn a_pod_whose_app_has_not_started_shows_nothing_and_a_deleted_pods_instance_has_ended() {
        let waiting = pod(json!({
            "name": "app", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"waiting": {"reason": "ContainerCreating"}}
        }));
        assert!(of_pod(&waiting).is_empty());
        let running = pod(json!({
            "name": "app", "image": "i", "imageID": "", "ready": true, "restartCount": 0,
            "containerID": "containerd://only", "state": {"running": {"startedAt": "2026-11-24T10:00:00Z"}}
        }));
        let gone = ended_with_pod(of_pod(&running).remove(0));
        assert!(!gone.facts.running);
        assert_eq!(gone.facts.status, "exited");
        assert!(gone.facts.finished_at.is_some());
    }
}
