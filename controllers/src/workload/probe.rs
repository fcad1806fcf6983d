//! The readiness sidecar. The hosting API's readiness check passes when the process answers `GET /` with a 2xx
//! on `$SVC_HTTP_PORT` *or* creates `$SVC_READY_FILE`. A Kubernetes probe is one check, and an exec probe in the
//! user's image cannot count on a shell or an HTTP client being there, so a small container (busybox: `sh`, `nc`,
//! `timeout`) runs beside the app in its network namespace and with its `/tmp`, tries both checks four times a second,
//! and on the first that passes prints `ready: http` or `ready: file` and writes a marker its startup probe reads.
//! The pod is Ready from then on, and the operator reads which check passed from the sidecar's log.
//!
//! HTTP is tried on the pod's own address rather than on loopback, so a process listening only on 127.0.0.1
//! (unreachable through the Service) does not pass. The request is a plain `GET / HTTP/1.0` and only the status
//! line counts: redirects are not followed. Once passed the check is not repeated (it is the deploy's gate, not
//! a health check), and the startup probe stops running.

use k8s_openapi::api::core::v1::{
    Container, EnvVar, EnvVarSource, ExecAction, ObjectFieldSelector, Probe, ResourceRequirements,
    Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use slipway_crds::ReadyBy;

use super::objects::{self, HTTP_PORT, Names};

/// The sidecar's user: not the app's, so the app (whose processes it can see, see
/// [`objects::deployment`]) can neither signal it nor reach its files through `/proc`.
pub const UID: i64 = 10002;
/// Name of the sidecar container.
pub const CONTAINER: &str = "readiness";
/// The volume holding the sidecar's marker, apart from the app's `/tmp`.
const STATE_VOLUME: &str = "readiness";
/// Where the sidecar keeps its marker.
const STATE_DIR: &str = "/run/readiness";
/// Prefix of the line the sidecar prints when a check passed.
const READY_PREFIX: &str = "ready: ";

/// The sidecar's program. `POD_IP`, `SVC_HTTP_PORT` and `SVC_READY_FILE` come from its environment.
const SCRIPT: &str = r#"trap 'exit 0' TERM INT
while :; do
  status=$(printf 'GET / HTTP/1.0\r\nHost: %s:%s\r\nUser-Agent: slipway-readiness\r\n\r\n' "$POD_IP" "$SVC_HTTP_PORT" \
    | timeout 3 nc -w 2 "$POD_IP" "$SVC_HTTP_PORT" 2>/dev/null | head -n 1)
  case "$status" in
    'HTTP/1.'[01]' 2'[0-9][0-9]*) mode=http ;;
    *) if [ -e "$SVC_READY_FILE" ]; then mode=file; else sleep 0.25 & wait $!; continue; fi ;;
  esac
  echo "ready: $mode"
  echo "$mode" > /run/readiness/passed
  while :; do sleep 3600 & wait $!; done
done
"#;

/// The sidecar container of a deploy's pod.
pub fn container(image: &str, names: &Names) -> Container {
    let var = |name: &str, value: String| EnvVar {
        name: name.to_owned(),
        value: Some(value),
        value_from: None,
    };
    let pod_ip = EnvVar {
        name: "POD_IP".to_owned(),
        value: None,
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: "status.podIP".to_owned(),
                api_version: None,
            }),
            ..EnvVarSource::default()
        }),
    };
    // Ephemeral storage holds only its log lines; with a limit on every container the pod's total is bounded.
    // Each try starts a few processes, which a CPU limit of 10m (1 ms in every 100) can hold back longer than the
    // wait between tries; the limit leaves it room while it checks. It reserves 10m and is idle once passed.
    let small = |cpu: &str| {
        std::collections::BTreeMap::from([
            ("cpu".to_owned(), Quantity(cpu.to_owned())),
            ("memory".to_owned(), Quantity("16Mi".to_owned())),
            ("ephemeral-storage".to_owned(), Quantity("16Mi".to_owned())),
        ])
    };
    Container {
        name: CONTAINER.to_owned(),
        image: Some(image.to_owned()),
        image_pull_policy: Some("IfNotPresent".to_owned()),
        command: Some(vec!["sh".to_owned(), "-c".to_owned(), SCRIPT.to_owned()]),
        env: Some(vec![
            pod_ip,
            var("SVC_HTTP_PORT", HTTP_PORT.to_string()),
            var("SVC_READY_FILE", names.ready_file.clone()),
        ]),
        // A startup probe stops once it passed; the sidecar is Ready (and so the pod) from then on.
        startup_probe: Some(Probe {
            exec: Some(ExecAction {
                command: Some(vec!["cat".to_owned(), format!("{STATE_DIR}/passed")]),
            }),
            period_seconds: Some(1),
            // Well past the readiness window, after which the deploy has failed and the pod is going away.
            failure_threshold: Some(600),
            timeout_seconds: Some(1),
            ..Probe::default()
        }),
        resources: Some(ResourceRequirements {
            requests: Some(small("10m")),
            limits: Some(small("100m")),
            ..ResourceRequirements::default()
        }),
        security_context: Some(objects::restricted_container(UID)),
        volume_mounts: Some(vec![
            objects::tmp_mount(true),
            VolumeMount {
                name: STATE_VOLUME.to_owned(),
                mount_path: STATE_DIR.to_owned(),
                ..VolumeMount::default()
            },
        ]),
        ..Container::default()
    }
}

/// The sidecar's own scratch volume (the marker), so the app's `/tmp` holds only what the app put there.
pub fn state_volume() -> Volume {
    objects::empty_dir(STATE_VOLUME, objects::Medium::Memory, "1Mi")
}

/// Which check passed, from the sidecar's log; `None` while it has not said.
pub fn passed_by(log: &str) -> Option<ReadyBy> {
    log.lines()
        .rev()
        .find_map(|line| line.trim().strip_prefix(READY_PREFIX))
        .and_then(|mode| match mode {
            "http" => Some(ReadyBy::Http),
            "file" => Some(ReadyBy::File),
            _ => None,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sidecar_says_which_check_passed() {
        assert_eq!(passed_by("ready: http\n"), Some(ReadyBy::Http));
        assert_eq!(passed_by("ready: file"), Some(ReadyBy::File));
        assert_eq!(passed_by(""), None);
        assert_eq!(passed_by("ready: maybe\n"), None);
        assert_eq!(passed_by("something else\n"), None);
    }

    #[test]
    fn the_script_prints_what_passed_before_the_marker_the_probe_reads() {
        let printed = SCRIPT.find("echo \"ready: $mode\"");
        let marked = SCRIPT.find("> /run/readiness/passed");
        assert!(printed.is_some() && marked.is_some() && printed < marked);
        assert!(SCRIPT.contains(STATE_DIR));
        assert!(SCRIPT.starts_with("trap"), "stops at once on TERM");
    }
}
