use serde_json::{Value, json};

use super::*;

fn at(s: &str) -> Timestamp {
    s.parse().expect("timestamp")
}

fn pod(status: Value) -> Pod {
    serde_json::from_value(json!({"metadata": {"name": "web-1"}, "status": status})).expect("pod")
}

fn ready_at(time: &str) -> Value {
    json!({"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": time}]})
}

const CREATED: &str = "2026-01-01T00:00:00Z";

#[test]
fn the_window_is_120_seconds_from_creation() {
    assert_eq!(deadline(at(CREATED), WINDOW), at("2026-01-01T00:02:00Z"));
}

#[test]
fn a_pod_ready_within_the_window_passed_even_when_seen_late() {
    let deadline = deadline(at(CREATED), WINDOW);
    let seen = observe(&[pod(ready_at("2026-01-01T00:01:59Z"))], deadline);
    assert_eq!(
        seen,
        Observation::Passed {
            pod: "web-1".into()
        }
    );
    let late = observe(&[pod(ready_at("2026-01-01T00:02:01Z"))], deadline);
    assert_eq!(late, Observation::Waiting { detail: None });
}

#[test]
fn a_pod_being_deleted_does_not_count() {
    let mut p = pod(ready_at("2026-01-01T00:00:10Z"));
    p.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at(
        "2026-01-01T00:00:20Z",
    )));
    assert_eq!(
        observe(&[p], deadline(at(CREATED), WINDOW)),
        Observation::Waiting { detail: None }
    );
}

#[test]
fn a_process_that_keeps_exiting_is_crashing() {
    let status = |restarts: i32, state: Value| {
        json!({"containerStatuses": [{
            "name": "app", "image": "x", "imageID": "", "ready": false, "restartCount": restarts,
            "state": state,
            "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}
        }]})
    };
    let backing_off = json!({"waiting": {"reason": "CrashLoopBackOff"}});
    let deadline = deadline(at(CREATED), WINDOW);
    assert_eq!(
        observe(&[pod(status(3, backing_off.clone()))], deadline),
        Observation::Crashing {
            pod: "web-1".into(),
            restarts: 3,
            last_exit: "OOMKilled (exit code 137)".into()
        }
    );
    assert!(matches!(
        observe(&[pod(status(2, backing_off))], deadline),
        Observation::Waiting { .. }
    ));
    assert!(matches!(
        observe(
            &[pod(status(5, json!({"running": {"startedAt": CREATED}})))],
            deadline
        ),
        Observation::Waiting { .. }
    ));
}

#[test]
fn what_holds_a_pod_up_is_reported() {
    let pulling = pod(json!({"containerStatuses": [
        {"name": "app", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
         "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}}},
    ]}));
    assert_eq!(
        observe(&[pulling], deadline(at(CREATED), WINDOW)),
        Observation::Waiting {
            detail: Some(
                "container app is waiting: ImagePullBackOff Back-off pulling image".into()
            )
        }
    );
    let creating = pod(json!({"containerStatuses": [
        {"name": "app", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
         "state": {"waiting": {"reason": "ContainerCreating"}}},
    ]}));
    assert_eq!(
        observe(&[creating], deadline(at(CREATED), WINDOW)),
        Observation::Waiting { detail: None }
    );
    let unscheduled = pod(json!({"conditions": [
        {"type": "PodScheduled", "status": "False", "message": "0/1 nodes are available: Insufficient memory."}
    ]}));
    assert_eq!(
        observe(&[unscheduled], deadline(at(CREATED), WINDOW)),
        Observation::Waiting {
            detail: Some(
                "the pod is not scheduled: 0/1 nodes are available: Insufficient memory.".into()
            )
        }
    );
}

#[test]
fn the_timeout_message_names_both_checks() {
    assert_eq!(
        timed_out_message("/tmp/.svc-ready-1a2b3c4d", None, WINDOW),
        "readiness: GET / on port 8080 never answered 2xx and /tmp/.svc-ready-1a2b3c4d was not created within 120s"
    );
    assert!(
        timed_out_message(
            "/tmp/.svc-ready-1a2b3c4d",
            Some("the pod is not scheduled: x"),
            WINDOW
        )
        .ends_with("within 120s; the pod is not scheduled: x")
    );
}

#[test]
fn the_crash_message_quotes_the_last_lines_in_one_line() {
    let output = "one\ntwo\n\nthree\nfour\nfive\nsix\n";
    assert_eq!(
        crashed_message(3, "exit code 1", output),
        "readiness: the process exited 3 times before passing (last: exit code 1); last output: \
         two | three | four | five | six"
    );
    assert_eq!(
        crashed_message(4, "exit code 0", ""),
        "readiness: the process exited 4 times before passing (last: exit code 0); it printed nothing"
    );
    let long = "x".repeat(2000);
    let message = crashed_message(3, "exit code 1", &long);
    assert!(message.ends_with('…') && message.len() < 800 && !message.contains('\n'));
}
