//! The build Job of a deploy and how to read its state. The Job is the build's record: it is created suspended
//! (queued), resumed when a build slot is free, and carries in annotations what was already written to the
//! deploy log and, once finished, the outcome. Pure functions, tested without a cluster.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::ResourceExt;
use serde_json::json;
use slipway_crds::labels;

use crate::error::Error;

/// Label on every build Job (value [`BUILD_LABEL_VALUE`]), so the queue is one list call.
pub const BUILD_LABEL: &str = "slipway.dev/build";
/// Value of [`BUILD_LABEL`].
pub const BUILD_LABEL_VALUE: &str = "image";
/// Label naming the Deploy a Job builds for.
pub const DEPLOY_LABEL: &str = "slipway.dev/deploy";
/// When the build joined the queue (RFC 3339 with microseconds): the queue's order.
pub const ENQUEUED_AT: &str = "slipway.dev/enqueued-at";
/// The `[build] note:` lines of the Dockerfile, logged with the first progress line.
pub const NOTES: &str = "slipway.dev/build-notes";
/// The last progress line written to the deploy log: `queued` or `started`.
pub const LOGGED: &str = "slipway.dev/build-logged";
/// The outcome, once the output and the result lines are in the deploy log (JSON of `Recorded`).
pub const RESULT: &str = "slipway.dev/build-result";
/// Pod annotation holding the signed source URL, minted when the build leaves the queue (so it cannot expire
/// while the build waits) and read by the pod through the downward API.
pub const SOURCE_URL: &str = "slipway.dev/source-url";

/// Pod annotation holding the build's registry token (push and pull on its deploy's repository), minted with the
/// source URL when the build leaves the queue; absent when the registry takes no tokens.
pub const REGISTRY_TOKEN: &str = "slipway.dev/registry-token";

/// The Secret holding a build's BuildKit client certificate (`ca.crt`, `tls.crt`, `tls.key`), created when the
/// build leaves the queue and owned by its Job.
pub fn tls_secret_name(job_name: &str) -> String {
    format!("{job_name}-buildkit")
}

/// Where the build pod mounts [`tls_secret_name`].
const TLS_DIR: &str = "/etc/buildkit-tls";

/// How long a build may run before it fails.
pub const BUILD_TIMEOUT: Duration = Duration::from_secs(15 * 60);
/// How long a finished build Job (and its pod and certificate Secret) stays before Kubernetes deletes it. The
/// deploy records the built image within seconds of the build's end and never reads the Job again; the hour covers
/// an operator that is away meanwhile.
pub const FINISHED_JOB_TTL: Duration = Duration::from_secs(3600);
/// Name of the build container.
pub const CONTAINER: &str = "build";
/// The uid the build pod runs as.
const BUILDER_UID: i64 = 10001;

/// What the build pod runs: fetch the commit's files, build them with the node's BuildKit, push, and report the
/// pushed digest as the termination message.
const SCRIPT: &str = r#"set -eu
cd /work
mkdir -p src dockerfile
curl -fsS --retry 3 --retry-connrefused -o src.tar "$SLIPWAY_SOURCE_URL"
tar -xf src.tar -C src --no-same-owner
rm src.tar
# BuildKit keeps one synced copy of each local source for every build and tells changed files by size and
# modification time, and git archive stamps every file with the commit's time: a file of another commit with the
# same size and second would be kept. Each file gets a time made from its content instead, so a changed file
# always looks changed and an unchanged one keeps its cached layers.
find src -type f -exec sh -c 'for f do h=$(sha256sum "$f" | cut -c1-14); s=$((1000000000 + 0x$(echo "$h" | cut -c1-7))); n=$(printf %09d $((0x$(echo "$h" | cut -c8-14)))); touch -m -d "@$s.$n" "$f"; done' sh {} +
if [ -n "${SLIPWAY_REGISTRY_TOKEN:-}" ]; then
  # buildctl hands BuildKit this token for the registry (the image reference's host) when it asks for credentials.
  mkdir -p /work/.docker
  printf '{"auths":{"%s":{"registrytoken":"%s"}}}' "${SLIPWAY_IMAGE%%/*}" "$SLIPWAY_REGISTRY_TOKEN" >/work/.docker/config.json
fi
dockerfile_dir=/work/src
if [ -n "${SLIPWAY_DOCKERFILE:-}" ]; then
  printf '%s' "$SLIPWAY_DOCKERFILE" >dockerfile/Dockerfile
  dockerfile_dir=/work/dockerfile
fi
set -- --addr "$SLIPWAY_BUILDKIT_ADDR"
if [ -f /etc/buildkit-tls/tls.crt ]; then
  # BuildKit's listener takes only client certificates of its CA: this build's own, minted when it left the queue.
  set -- "$@" --tlscacert /etc/buildkit-tls/ca.crt --tlscert /etc/buildkit-tls/tls.crt --tlskey /etc/buildkit-tls/tls.key
fi
buildctl "$@" build --progress plain --frontend dockerfile.v0 \
  --local context=/work/src --local dockerfile="$dockerfile_dir" \
  --output "type=image,name=$SLIPWAY_IMAGE,push=true,registry.insecure=true" \
  --metadata-file /work/metadata.json
grep -o '"containerimage.digest": *"sha256:[0-9a-f]*"' /work/metadata.json | grep -o 'sha256:[0-9a-f]*' >/dev/termination-log
"#;

/// The name of a deploy's build Job: fixed by the deploy's uid, so a restart finds it.
pub fn job_name(deploy_uid: &str) -> String {
    format!("build-{deploy_uid}")
}

/// Everything a build Job is made of.
pub struct JobInput<'a> {
    /// The Job's name ([`job_name`]).
    pub name: String,
    /// The Deploy's namespace.
    pub namespace: &'a str,
    /// The Deploy, as the Job's controlling owner.
    pub owner: OwnerReference,
    /// App, channel and deploy names for the labels.
    pub app: &'a str,
    /// The channel name (not the resource name).
    pub channel: &'a str,
    /// The Deploy's name.
    pub deploy: &'a str,
    /// The full image reference pushed: `<registry>/<namespace>/<workload>:<sha>`.
    pub image: &'a str,
    /// The generated Dockerfile (`app`), or none to build the repository's.
    pub dockerfile: Option<&'a str>,
    /// `[build] note:` lines.
    pub notes: &'a [String],
    /// The builder image.
    pub builder_image: &'a str,
    /// BuildKit's address.
    pub buildkit_addr: &'a str,
    /// Whether BuildKit takes only client certificates (the pod then mounts [`tls_secret_name`]).
    pub buildkit_tls: bool,
    /// [`ENQUEUED_AT`].
    pub enqueued_at: String,
}

/// The build Job, created suspended.
pub fn build_job(input: &JobInput<'_>) -> Result<Job, Error> {
    let labels = json!({
        labels::APP: input.app,
        labels::CHANNEL: input.channel,
        DEPLOY_LABEL: input.deploy,
        BUILD_LABEL: BUILD_LABEL_VALUE,
        labels::MANAGED_BY: labels::MANAGER,
    });
    let mut env = vec![
        json!({"name": "SLIPWAY_SOURCE_URL", "valueFrom": {"fieldRef": {"fieldPath": format!("metadata.annotations['{SOURCE_URL}']")}}}),
        json!({"name": "SLIPWAY_REGISTRY_TOKEN", "valueFrom": {"fieldRef": {"fieldPath": format!("metadata.annotations['{REGISTRY_TOKEN}']")}}}),
        json!({"name": "SLIPWAY_BUILDKIT_ADDR", "value": input.buildkit_addr}),
        json!({"name": "SLIPWAY_IMAGE", "value": input.image}),
        json!({"name": "HOME", "value": "/work"}),
    ];
    if let Some(dockerfile) = input.dockerfile {
        env.push(json!({"name": "SLIPWAY_DOCKERFILE", "value": dockerfile}));
    }
    let mut mounts = vec![json!({"name": "work", "mountPath": "/work"})];
    let mut volumes = vec![json!({"name": "work", "emptyDir": {"sizeLimit": "2Gi"}})];
    if input.buildkit_tls {
        mounts.push(json!({"name": "buildkit-tls", "mountPath": TLS_DIR, "readOnly": true}));
        volumes.push(json!({"name": "buildkit-tls", "secret": {
            "secretName": tls_secret_name(&input.name),
            "defaultMode": 0o440,
        }}));
    }
    let job = json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": input.name,
            "namespace": input.namespace,
            "labels": labels,
            "annotations": {
                ENQUEUED_AT: input.enqueued_at,
                NOTES: input.notes.join("\n"),
            },
            "ownerReferences": [input.owner],
        },
        "spec": {
            "suspend": true,
            "backoffLimit": 0,
            "activeDeadlineSeconds": BUILD_TIMEOUT.as_secs(),
            "ttlSecondsAfterFinished": FINISHED_JOB_TTL.as_secs(),
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": false,
                    "enableServiceLinks": false,
                    "securityContext": {
                        "runAsNonRoot": true,
                        "runAsUser": BUILDER_UID,
                        "runAsGroup": BUILDER_UID,
                        // Lets the builder read its BuildKit certificate (mode 0440).
                        "fsGroup": BUILDER_UID,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [{
                        "name": CONTAINER,
                        "image": input.builder_image,
                        "command": ["/bin/sh", "-c", SCRIPT],
                        "env": env,
                        "securityContext": {
                            "allowPrivilegeEscalation": false,
                            "readOnlyRootFilesystem": true,
                            "capabilities": {"drop": ["ALL"]},
                        },
                        "resources": {
                            "requests": {"cpu": "100m", "memory": "64Mi"},
                            "limits": {"cpu": "1", "memory": "512Mi", "ephemeral-storage": "2Gi"},
                        },
                        "volumeMounts": mounts,
                    }],
                    "volumes": volumes,
                },
            },
        },
    });
    serde_json::from_value(job).map_err(|e| Error::InvalidSpec(format!("build job: {e}")))
}

/// Where a build Job is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobPhase {
    /// Suspended: waiting for a build slot.
    Waiting,
    /// Resumed and not finished.
    Running,
    /// Finished with its image pushed.
    Complete,
    /// Finished without an image; the condition's reason (e.g. `DeadlineExceeded`).
    Failed(String),
}

/// The phase of `job`.
pub fn phase(job: &Job) -> JobPhase {
    let status = job.status.as_ref();
    let condition = |kind: &str| {
        status
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == kind && c.status == "True"))
    };
    if condition("Complete").is_some() {
        JobPhase::Complete
    } else if let Some(failed) = condition("Failed") {
        JobPhase::Failed(failed.reason.clone().unwrap_or_default())
    } else if job.spec.as_ref().and_then(|s| s.suspend).unwrap_or(false) {
        JobPhase::Waiting
    } else {
        JobPhase::Running
    }
}

/// The queue's order: enqueue time, then name.
pub fn queue_key(job: &Job) -> (String, String) {
    (
        job.annotations()
            .get(ENQUEUED_AT)
            .cloned()
            .unwrap_or_default(),
        job.name_any(),
    )
}

/// Annotations of `job` as a map (empty when none).
pub fn annotation<'a>(job: &'a Job, key: &str) -> Option<&'a str> {
    job.metadata
        .annotations
        .as_ref()
        .and_then(|a: &BTreeMap<String, String>| a.get(key))
        .map(String::as_str)
        .filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input<'a>(dockerfile: Option<&'a str>, notes: &'a [String]) -> JobInput<'a> {
        JobInput {
            name: job_name("0b7c"),
            namespace: "slipway-user-alice",
            owner: OwnerReference {
                api_version: "slipway.dev/v1alpha1".into(),
                kind: "Deploy".into(),
                name: "d1".into(),
                uid: "0b7c".into(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            },
            app: "blog",
            channel: "prod",
            deploy: "d1",
            image: "10.0.0.1:5000/slipway-user-alice/blog-prod:abc",
            dockerfile,
            notes,
            builder_image: "10.0.0.1:5000/slipway/builder:v1",
            buildkit_addr: "tcp://10.0.0.1:1234",
            buildkit_tls: false,
            enqueued_at: "2026-01-01T00:00:00.000001Z".into(),
        }
    }

    #[test]
    fn a_build_job_starts_queued_bounded_and_without_credentials() {
        let job = build_job(&input(Some("FROM python:3.13-slim\n"), &[])).unwrap();
        assert_eq!(job.name_any(), "build-0b7c");
        assert_eq!(phase(&job), JobPhase::Waiting);
        let spec = job.spec.as_ref().unwrap();
        assert_eq!(spec.backoff_limit, Some(0));
        assert_eq!(spec.active_deadline_seconds, Some(900));
        let pod = spec.template.spec.as_ref().unwrap();
        assert_eq!(pod.automount_service_account_token, Some(false));
        assert_eq!(
            pod.security_context.as_ref().unwrap().run_as_non_root,
            Some(true)
        );
        let container = &pod.containers[0];
        let security = container.security_context.as_ref().unwrap();
        assert_eq!(security.allow_privilege_escalation, Some(false));
        assert_eq!(security.read_only_root_filesystem, Some(true));
        assert!(
            container
                .resources
                .as_ref()
                .unwrap()
                .limits
                .as_ref()
                .unwrap()
                .contains_key("memory")
        );
        let env: Vec<&str> = container
            .env
            .as_ref()
            .unwrap()
            .iter()
            .map(|e| e.name.as_str())
            .collect();
        assert_eq!(
            env,
            [
                "SLIPWAY_SOURCE_URL",
                "SLIPWAY_REGISTRY_TOKEN",
                "SLIPWAY_BUILDKIT_ADDR",
                "SLIPWAY_IMAGE",
                "HOME",
                "SLIPWAY_DOCKERFILE"
            ],
            "the build gets no user env and no secret (its URL and registry token come when it leaves the queue)"
        );
        let labels = job.labels();
        assert_eq!(
            labels.get(BUILD_LABEL).map(String::as_str),
            Some(BUILD_LABEL_VALUE)
        );
        assert_eq!(labels.get(DEPLOY_LABEL).map(String::as_str), Some("d1"));
        assert_eq!(job.owner_references()[0].kind, "Deploy");
    }

    fn pod_spec(input: &JobInput<'_>) -> k8s_openapi::api::core::v1::PodSpec {
        build_job(input)
            .unwrap()
            .spec
            .unwrap()
            .template
            .spec
            .unwrap()
    }

    #[test]
    fn with_buildkit_tls_only_the_pod_mounts_the_build_s_own_certificate() {
        let notes = Vec::new();
        let mut tls = input(None, &notes);
        tls.buildkit_tls = true;
        let spec = pod_spec(&tls);
        let volume = spec
            .volumes
            .unwrap()
            .into_iter()
            .find(|v| v.name == "buildkit-tls")
            .expect("the certificate volume");
        assert_eq!(
            volume.secret.unwrap().secret_name.as_deref(),
            Some(tls_secret_name(&tls.name).as_str())
        );
        assert!(
            spec.containers[0]
                .volume_mounts
                .as_ref()
                .unwrap()
                .iter()
                .any(|m| m.mount_path == TLS_DIR && m.read_only == Some(true))
        );
        assert_eq!(spec.security_context.unwrap().fs_group, Some(BUILDER_UID));
        let plain = pod_spec(&input(None, &notes));
        assert!(
            plain
                .volumes
                .unwrap()
                .iter()
                .all(|v| v.name != "buildkit-tls")
        );
    }

    #[test]
    fn the_repository_dockerfile_is_used_when_none_is_generated() {
        let notes = vec!["[build] note: a".to_owned(), "[build] note: b".to_owned()];
        let job = build_job(&input(None, &notes)).unwrap();
        let env = job.spec.unwrap().template.spec.unwrap().containers[0]
            .env
            .clone()
            .unwrap();
        assert!(env.iter().all(|e| e.name != "SLIPWAY_DOCKERFILE"));
        assert_eq!(
            job.metadata
                .annotations
                .unwrap()
                .get(NOTES)
                .map(String::as_str),
            Some("[build] note: a\n[build] note: b")
        );
    }

    #[test]
    fn phases_follow_suspension_and_conditions() {
        let mut job = build_job(&input(None, &[])).unwrap();
        job.spec.as_mut().unwrap().suspend = Some(false);
        assert_eq!(phase(&job), JobPhase::Running);
        job.status = serde_json::from_value(json!({"conditions": [
            {"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}
        ]}))
        .unwrap();
        assert_eq!(phase(&job), JobPhase::Failed("DeadlineExceeded".into()));
        job.status = serde_json::from_value(json!({"conditions": [
            {"type": "SuccessCriteriaMet", "status": "True"}, {"type": "Complete", "status": "True"}
        ]}))
        .unwrap();
        assert_eq!(phase(&job), JobPhase::Complete);
    }
}
