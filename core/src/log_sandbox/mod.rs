//! Runs a runtime-log command in a throwaway pod with no network: the log goes in an immutable Secret (gzipped, owned
//! by the pod so both go together), the pod's entry point ([`WRAPPER`]) unpacks it as `/work/app.log` and runs the
//! command in a child that has left the pod's network for an empty namespace and dropped to an unprivileged user
//! with no capabilities, proving both before the command starts. Where the proof fails the wrapper refuses, and so
//! does the API (503): a command never runs where it could reach a network.
//!
//! The pod itself is locked down as well: no ServiceAccount token, no Service environment, no DNS, a read-only root,
//! only the capabilities the wrapper needs to isolate its child (SYS_ADMIN for the namespace, SETUID/SETGID to drop to
//! uid 65534, CHOWN for the log, KILL to end the command at its limit), small limits, and a deadline. It runs in a
//! namespace of its own, whose deny-all NetworkPolicy (from the chart) covers clusters whose network enforces
//! policies.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use futures::AsyncReadExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{DeleteParams, ListParams, LogParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde::Deserialize;
use serde_json::json;
use tokio::sync::Semaphore;

/// The entry point of the sandbox's container.
pub const WRAPPER: &str = include_str!("wrapper.py");

/// The command's time limit (the wrapper keeps it; the spec's 30 seconds).
pub const TIME_LIMIT: Duration = Duration::from_secs(30);
/// Output kept, in bytes (the spec's 256 KiB; the wrapper cuts there).
pub const OUTPUT_CAP: usize = 256 * 1024;
/// Longest a command may be, in characters.
pub const COMMAND_LIMIT: usize = 4096;

/// How long the pod may take to start its container before the host is taken for unable to answer. The queue
/// wait, this, the time limit and [`SETTLE`] stay within the API's request timeout (60 s), so an answer with
/// `timed_out` is never cut off by it.
const START_BUDGET: Duration = Duration::from_secs(15);
/// How long past the time limit the wrapper may take to report before it is taken for hung.
const SETTLE: Duration = Duration::from_secs(5);
/// Largest gzipped log a Secret takes (Secrets hold at most 1 MiB).
const PACKED_LIMIT: usize = 900 * 1024;
/// How long a waiting caller may queue for a free sandbox.
const QUEUE_WAIT: Duration = Duration::from_secs(5);
/// Sandbox pods older than this are left over from an interrupted call and deleted by [`sweep`].
const STALE_AFTER: Duration = Duration::from_secs(180);
/// The component label of sandbox pods.
const COMPONENT: &str = "log-sandbox";
/// Commands one account may have running at once: one account cannot hold every slot.
pub const PER_ACCOUNT: usize = 2;
/// Exit code of the wrapper when isolation could not be proven.
const NOT_ISOLATED: i32 = 3;

/// Where and how sandboxes run (the API's `--log-sandbox-*` flags).
#[derive(Debug, Clone)]
pub struct SandboxConfig {
    /// Namespace of the sandbox pods.
    pub namespace: String,
    /// Image: Debian with bash, coreutils, grep, sed, awk, findutils, python3 (3.8+), node and perl.
    pub image: String,
    /// RuntimeClass of the pods (a runtime handler of its own, e.g. on a node whose CNI is set up for them).
    pub runtime_class: Option<String>,
    /// Sandboxes running at once, across all callers of this API process.
    pub concurrency: usize,
}

/// Runs sandboxes. Cheap to clone: clones share the slots.
#[derive(Clone)]
pub struct Sandbox {
    config: SandboxConfig,
    kube: Client,
    slots: Arc<Semaphore>,
    shares: AccountShares,
}

/// Commands running (or queued) per account, so that one account cannot hold every slot.
#[derive(Clone, Default)]
struct AccountShares {
    running: Arc<std::sync::Mutex<std::collections::HashMap<uuid::Uuid, usize>>>,
}

impl AccountShares {
    /// Counts a command of `account` in, unless it has [`PER_ACCOUNT`] running.
    fn enter(&self, account: uuid::Uuid) -> Result<AccountSlot, SandboxError> {
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        let n = running.entry(account).or_insert(0);
        if *n >= PER_ACCOUNT {
            return Err(SandboxError::AccountBusy);
        }
        *n += 1;
        Ok(AccountSlot {
            running: self.running.clone(),
            account,
        })
    }
}

/// An account's place among the running commands, given back when dropped.
struct AccountSlot {
    running: Arc<std::sync::Mutex<std::collections::HashMap<uuid::Uuid, usize>>>,
    account: uuid::Uuid,
}

impl Drop for AccountSlot {
    fn drop(&mut self) {
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = running.get_mut(&self.account) {
            *n -= 1;
            if *n == 0 {
                running.remove(&self.account);
            }
        }
    }
}

/// What a command produced.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    /// Its combined stdout and stderr (at most [`OUTPUT_CAP`] bytes).
    pub output: Vec<u8>,
    /// Its exit code; `None` when it hit the time limit.
    pub exit_code: Option<i32>,
    /// Whether it hit the time limit.
    pub timed_out: bool,
    /// Whether its output passed the cap.
    pub truncated: bool,
    /// Size of the `app.log` it saw.
    pub log_bytes: u64,
}

/// Why no command ran.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// Every sandbox is busy.
    #[error("every log sandbox is busy; retry in a moment")]
    Busy,
    /// The account has as many commands running as it may.
    #[error(
        "{PER_ACCOUNT} runtime-log commands of this account are running; wait for one to finish"
    )]
    AccountBusy,
    /// The pod did not start in time, or could not be created.
    #[error("the log sandbox did not start: {0}")]
    NotStarted(String),
    /// The wrapper could not prove the command would have no network.
    #[error("the log sandbox could not prove it has no network, so the command was not run")]
    NotIsolated,
    /// The cluster refused a call.
    #[error("the log sandbox failed: {0}")]
    Kube(#[from] kube::Error),
    /// The log could not be read.
    #[error("the log could not be read: {0}")]
    Database(#[from] sqlx::Error),
}

/// The facts the wrapper leaves in its termination message.
#[derive(Debug, Deserialize)]
struct Facts {
    isolated: bool,
    #[serde(default)]
    exit_code: Option<i32>,
    #[serde(default)]
    timed_out: bool,
    #[serde(default)]
    truncated: bool,
    #[serde(default)]
    log_bytes: u64,
}

impl Sandbox {
    /// Sandboxes per `config`.
    pub fn new(config: SandboxConfig, kube: Client) -> Self {
        let slots = Arc::new(Semaphore::new(config.concurrency.max(1)));
        Self {
            config,
            kube,
            slots,
            shares: AccountShares::default(),
        }
    }

    /// The namespace the sandbox's pods run in.
    pub fn namespace(&self) -> &str {
        &self.config.namespace
    }

    /// Runs `command` on the output of the runtime-log generation `generation` (its newest part that fits a Secret,
    /// cut at a line). The work runs as a task of its own that holds its slot until its pod is deleted, so a
    /// caller that goes away (a client hanging up) neither leaves a pod running nor frees a slot early.
    pub async fn run(
        &self,
        account: uuid::Uuid,
        db: sqlx::PgPool,
        generation: i64,
        command: String,
    ) -> Result<Run, SandboxError> {
        let mine = self.shares.enter(account)?;
        let sandbox = self.clone();
        tokio::spawn(async move {
            let _mine = mine;
            let _slot = tokio::time::timeout(QUEUE_WAIT, sandbox.slots.clone().acquire_owned())
                .await
                .map_err(|_| SandboxError::Busy)?
                .map_err(|_| SandboxError::Busy)?;
            // Read only once a slot is held: queued callers hold no log in memory.
            let packed = pack(&slipway_store::db::runtime_logs::output(&db, generation).await?);
            let pods: Api<Pod> = Api::namespaced(sandbox.kube.clone(), &sandbox.config.namespace);
            let pod = pods
                .create(
                    &PostParams::default(),
                    &pod_spec(&sandbox.config, &command)?,
                )
                .await?;
            let name = pod.name_any();
            let result = sandbox.run_in(&pods, &pod, packed).await;
            if let Err(e) = pods.delete(&name, &DeleteParams::background()).await {
                tracing::warn!(pod = %name, error = %e, "log sandbox not deleted; the sweep will");
            }
            result
        })
        .await
        .map_err(|e| SandboxError::NotStarted(format!("the sandbox task failed: {e}")))?
    }

    async fn run_in(
        &self,
        pods: &Api<Pod>,
        pod: &Pod,
        packed: Vec<u8>,
    ) -> Result<Run, SandboxError> {
        let name = pod.name_any();
        let secrets: Api<Secret> = Api::namespaced(self.kube.clone(), &self.config.namespace);
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {
                "name": name,
                "labels": labels(),
                "ownerReferences": [{
                    "apiVersion": "v1", "kind": "Pod", "name": name,
                    "uid": pod.uid().unwrap_or_default(),
                }],
            },
            "immutable": true,
        }))
        .map_err(|e| SandboxError::NotStarted(e.to_string()))?;
        let secret = Secret {
            data: Some([("app.log.gz".to_owned(), ByteString(packed))].into()),
            ..secret
        };
        secrets.create(&PostParams::default(), &secret).await?;

        let started = tokio::time::Instant::now();
        let limit = START_BUDGET + TIME_LIMIT + SETTLE;
        let mut ran_from: Option<tokio::time::Instant> = None;
        let ended = loop {
            let now = pods.get(&name).await?;
            let state = app_state(&now);
            if let Some(ended) = state.as_ref().and_then(|s| s.terminated.clone()) {
                break Some(ended);
            }
            let running = state.as_ref().is_some_and(|s| s.running.is_some());
            if running && ran_from.is_none() {
                ran_from = Some(tokio::time::Instant::now());
            }
            match ran_from {
                None if started.elapsed() > START_BUDGET => {
                    return Err(SandboxError::NotStarted(waiting_reason(&now)));
                }
                Some(from) if from.elapsed() > TIME_LIMIT + SETTLE => break None,
                _ if started.elapsed() > limit => break None,
                _ => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        };
        let output = self.output(pods, &name).await?;
        let Some(ended) = ended else {
            // The wrapper did not finish in time (its own limit failed): what it printed is all there is.
            return Ok(Run {
                truncated: output.len() > OUTPUT_CAP,
                output: truncate(output),
                exit_code: None,
                timed_out: true,
                log_bytes: 0,
            });
        };
        let facts: Option<Facts> = ended
            .message
            .as_deref()
            .and_then(|m| serde_json::from_str(m).ok());
        match facts {
            Some(facts) if facts.isolated => Ok(Run {
                output: truncate(output),
                exit_code: facts.exit_code,
                timed_out: facts.timed_out,
                truncated: facts.truncated,
                log_bytes: facts.log_bytes,
            }),
            _ if ended.exit_code == NOT_ISOLATED => Err(SandboxError::NotIsolated),
            _ => Err(SandboxError::NotStarted(format!(
                "the sandbox's entry point ended with {} and no report",
                ended.exit_code
            ))),
        }
    }

    async fn output(&self, pods: &Api<Pod>, name: &str) -> Result<Vec<u8>, SandboxError> {
        let params = LogParams {
            limit_bytes: Some(i64::try_from(OUTPUT_CAP).unwrap_or(i64::MAX) + 1),
            ..LogParams::default()
        };
        let mut bytes = Vec::new();
        let stream = pods.log_stream(name, &params).await?;
        Box::pin(stream)
            .take(OUTPUT_CAP as u64 + 1)
            .read_to_end(&mut bytes)
            .await
            .map_err(|e| SandboxError::NotStarted(format!("reading its output: {e}")))?;
        Ok(bytes)
    }
}

/// The sandbox pod of one command (its Secret is named like it).
fn pod_spec(config: &SandboxConfig, command: &str) -> Result<Pod, SandboxError> {
    let name = format!("log-{}", uuid::Uuid::new_v4().simple());
    let pod = json!({
        "metadata": {"name": name, "labels": labels()},
        "spec": {
            "restartPolicy": "Never",
            "activeDeadlineSeconds": (START_BUDGET + TIME_LIMIT).as_secs() + 20,
            "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": false,
            "enableServiceLinks": false,
            "dnsPolicy": "None",
            "dnsConfig": {"nameservers": ["127.0.0.1"]},
            "runtimeClassName": config.runtime_class,
            "securityContext": {"runAsUser": 0, "runAsGroup": 0, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "sandbox",
                "image": config.image,
                "command": ["python3", "-I", "-c", WRAPPER, command],
                "workingDir": "/work",
                "securityContext": {
                    "allowPrivilegeEscalation": false,
                    "readOnlyRootFilesystem": true,
                    "capabilities": {"drop": ["ALL"], "add": ["SYS_ADMIN", "SETUID", "SETGID", "CHOWN", "KILL"]},
                },
                "resources": {
                    "requests": {"cpu": "100m", "memory": "64Mi"},
                    "limits": {"cpu": "1", "memory": "512Mi", "ephemeral-storage": "256Mi"},
                },
                "volumeMounts": [
                    {"name": "log", "mountPath": "/in", "readOnly": true},
                    {"name": "work", "mountPath": "/work"},
                    {"name": "tmp", "mountPath": "/tmp"},
                ],
            }],
            "volumes": [
                {"name": "log", "secret": {"secretName": name, "defaultMode": 0o400}},
                {"name": "work", "emptyDir": {"sizeLimit": "128Mi"}},
                {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}},
            ],
        },
    });
    serde_json::from_value(pod).map_err(|e| SandboxError::NotStarted(e.to_string()))
}

fn labels() -> serde_json::Value {
    json!({
        slipway_crds::labels::COMPONENT: COMPONENT,
        slipway_crds::labels::MANAGED_BY: slipway_crds::labels::MANAGER,
    })
}

fn app_state(pod: &Pod) -> Option<k8s_openapi::api::core::v1::ContainerState> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .first()?
        .state
        .clone()
}

/// Why a pod has not started its container, for the 503's message.
fn waiting_reason(pod: &Pod) -> String {
    app_state(pod)
        .and_then(|s| s.waiting)
        .map(|w| {
            format!(
                "{}{}",
                w.reason.unwrap_or_default(),
                w.message.map(|m| format!(": {m}")).unwrap_or_default()
            )
        })
        .filter(|r| !r.is_empty())
        .or_else(|| {
            pod.status
                .as_ref()
                .and_then(|s| s.phase.clone())
                .map(|p| format!("still {p}"))
        })
        .unwrap_or_else(|| "not scheduled".into())
}

fn truncate(mut output: Vec<u8>) -> Vec<u8> {
    output.truncate(OUTPUT_CAP);
    output
}

/// The gzipped log, the newest part of it when the whole does not fit a Secret (cut after a newline).
pub fn pack(log: &[u8]) -> Vec<u8> {
    let mut start = 0;
    loop {
        let packed = gzip(&log[start..]);
        if packed.len() <= PACKED_LIMIT || start == log.len() {
            return packed;
        }
        // Keep the newer half of what is left, from its first whole line.
        let half = start + (log.len() - start) / 2;
        start = log[half..]
            .iter()
            .position(|b| *b == b'\n')
            .map_or(log.len(), |p| half + p + 1);
    }
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    // Writing into a Vec cannot fail.
    let _ = encoder.write_all(bytes);
    encoder.finish().unwrap_or_default()
}

/// Deletes sandbox pods an interrupted call left behind (their Secrets go with them); runs every minute.
pub async fn sweep(kube: Client, namespace: String) {
    let pods: Api<Pod> = Api::namespaced(kube, &namespace);
    let selector = format!("{}={COMPONENT}", slipway_crds::labels::COMPONENT);
    let mut every = tokio::time::interval(Duration::from_secs(60));
    loop {
        every.tick().await;
        let Ok(list) = pods.list(&ListParams::default().labels(&selector)).await else {
            continue;
        };
        let now = k8s_openapi::jiff::Timestamp::now();
        for pod in list {
            let old = pod.metadata.creation_timestamp.as_ref().is_some_and(|t| {
                now.duration_since(t.0).as_secs()
                    > i64::try_from(STALE_AFTER.as_secs()).unwrap_or(i64::MAX)
            });
            if old {
                let _ = pods
                    .delete(&pod.name_any(), &DeleteParams::background())
                    .await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn gunzip(bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(bytes)
            .read_to_end(&mut out)
            .unwrap();
        out
    }

    #[test]
    fn an_account_runs_at_most_its_share_and_a_finished_command_gives_its_place_back() {
        let shares = AccountShares::default();
        let (alice, bob) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
        let first = shares.enter(alice).unwrap();
        let _second = shares.enter(alice).unwrap();
        assert!(matches!(
            shares.enter(alice),
            Err(SandboxError::AccountBusy)
        ));
        // Another account is not held back by alice's share.
        let _bobs = shares.enter(bob).unwrap();
        drop(first);
        assert!(shares.enter(alice).is_ok());
    }

    #[test]
    fn a_log_that_fits_is_packed_whole() {
        let log = b"2026-11-24T10:00:00Z one\n2026-11-24T10:00:01Z two\n";
        assert_eq!(gunzip(&pack(log)), log);
    }

    #[test]
    fn a_log_too_big_for_a_secret_keeps_its_newest_whole_lines() {
        // Random-looking lines compress badly, so 4 MiB of them does not fit.
        let mut log = Vec::new();
        let mut x: u64 = 7;
        let mut n = 0;
        while log.len() < 4 * 1024 * 1024 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            log.extend_from_slice(
                format!(
                    "2026-11-24T10:00:00Z line {n} {x:x}{:x}\n",
                    x.rotate_left(17)
                )
                .as_bytes(),
            );
            n += 1;
        }
        let packed = pack(&log);
        assert!(packed.len() <= PACKED_LIMIT);
        let kept = gunzip(&packed);
        assert!(log.ends_with(&kept), "the newest part is kept");
        assert!(
            kept.starts_with(b"2026-11-24T10:00:00Z line "),
            "from a whole line"
        );
        assert!(kept.len() < log.len());
    }

    /// Runs the wrapper on this machine as the pod would (root, the log in `<root>/in`), under `prefix` (a command
    /// that starts it with fewer privileges, or none); answers its exit status, stdout and termination message.
    fn wrapper(
        prefix: &[&str],
        command: &str,
    ) -> (i32, String, String, slipway_testkit::tls::TempDir) {
        use std::os::unix::fs::PermissionsExt;
        let root = slipway_testkit::tls::TempDir::new("sandbox").unwrap();
        for dir in ["in", "work", "dev"] {
            std::fs::create_dir(root.path().join(dir)).unwrap();
        }
        std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(
            root.path().join("in/app.log.gz"),
            pack(b"2026-11-24T10:00:00Z hello\n"),
        )
        .unwrap();
        let mut argv: Vec<&str> = prefix.to_vec();
        argv.extend(["python3", "-I", "-c", WRAPPER, command]);
        let out = std::process::Command::new(argv[0])
            .args(&argv[1..])
            .env("SLIPWAY_SANDBOX_ROOT", root.path())
            .output()
            .unwrap();
        let message =
            std::fs::read_to_string(root.path().join("dev/termination-log")).unwrap_or_default();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            message,
            root,
        )
    }

    #[test]
    fn the_wrapper_runs_the_command_on_app_log_without_network_privileges_or_namespaces() {
        let (code, stdout, message, _root) = wrapper(
            &[],
            "cat app.log; id -u; python3 -c 'import socket; socket.create_connection((\"192.0.2.1\", 80), 2)' 2>&1 | tail -n 1; \
             unshare -Urn true 2>/dev/null; echo \"user namespace: $?\"; grep Seccomp: /proc/self/status; exit 4",
        );
        assert_eq!(code, 0, "{stdout} {message}");
        assert_eq!(
            stdout,
            "2026-11-24T10:00:00Z hello\n65534\nOSError: [Errno 101] Network is unreachable\n\
             user namespace: 1\nSeccomp:\t2\n"
        );
        let facts: Facts = serde_json::from_str(&message).unwrap();
        assert!(facts.isolated);
        assert_eq!(facts.exit_code, Some(4));
        assert_eq!(facts.log_bytes, 27);
        assert!(!facts.timed_out && !facts.truncated);
    }

    #[test]
    fn without_the_right_to_leave_the_network_the_wrapper_refuses_and_nothing_of_the_command_runs()
    {
        let (code, stdout, message, root) = wrapper(
            &[
                "setpriv",
                "--bounding-set",
                "-sys_admin",
                "--inh-caps",
                "-sys_admin",
                "--",
            ],
            "touch ran; echo ran",
        );
        assert_eq!(code, NOT_ISOLATED, "{stdout} {message}");
        assert_eq!(stdout, "");
        let facts: Facts = serde_json::from_str(&message).unwrap();
        assert!(!facts.isolated);
        assert!(!root.path().join("work/ran").exists());
    }

    #[test]
    fn output_past_the_cap_is_cut_and_flagged() {
        let (code, stdout, message, _root) = wrapper(&[], "yes 0123456789 | head -c 300000");
        assert_eq!(code, 0);
        assert_eq!(stdout.len(), OUTPUT_CAP);
        let facts: Facts = serde_json::from_str(&message).unwrap();
        assert!(facts.truncated);
        assert_eq!(facts.exit_code, Some(0));
    }

    #[test]
    fn the_pod_has_no_token_no_dns_no_services_and_only_the_capabilities_the_wrapper_needs() {
        let sandbox = SandboxConfig {
            namespace: "sbx".into(),
            image: "img".into(),
            runtime_class: None,
            concurrency: 1,
        };
        let pod = pod_spec(&sandbox, "grep x app.log").unwrap();
        let spec = pod.spec.unwrap();
        assert_eq!(spec.automount_service_account_token, Some(false));
        assert_eq!(spec.enable_service_links, Some(false));
        assert_eq!(spec.dns_policy.as_deref(), Some("None"));
        assert_eq!(spec.host_network, None);
        let container = &spec.containers[0];
        assert_eq!(
            container.command.as_ref().unwrap().last().unwrap(),
            "grep x app.log"
        );
        let security = container.security_context.as_ref().unwrap();
        assert_eq!(security.allow_privilege_escalation, Some(false));
        assert_eq!(security.read_only_root_filesystem, Some(true));
        let caps = security.capabilities.as_ref().unwrap();
        assert_eq!(caps.drop.as_deref(), Some(&["ALL".to_owned()][..]));
        let secret = spec.volumes.unwrap()[0].secret.clone().unwrap();
        assert_eq!(secret.secret_name, pod.metadata.name);
    }
}
