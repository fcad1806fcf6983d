//! Support for end-to-end tests against the local node that `hack/node.sh start` runs (the `e2e` tier of
//! `make test` starts it): running pods and reading their output, waiting for Deployments, and building images
//! with the node's BuildKit into its registry.
//!
//! The node is found through the variables `hack/node.sh env` prints: `SLIPWAY_REGISTRY` (host:port of the
//! registry, plain HTTP) and `BUILDKIT_HOST` (buildkitd's socket). When they are missing the test fails with the
//! command that starts the node: an end-to-end test is never skipped.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kube::Client;
use kube::api::{Api, LogParams, PostParams};
use serde_json::json;

/// The busybox tool image the node's registry serves (Debian's busybox-static, see `hack/build-images.sh`).
pub const BUSYBOX: &str = "busybox:1.35.0";

fn node_var(name: &str) -> Result<String> {
    std::env::var(name).with_context(|| {
        format!("{name} is not set — start the node with `hack/node.sh start` and `eval \"$(hack/node.sh env)\"` (make test does)")
    })
}

/// The node's registry as host:port; images pushed there are pulled by the cluster under that name.
pub fn registry() -> Result<String> {
    node_var("SLIPWAY_REGISTRY")
}

/// How much of their plan's CPU share the node's apps request (`hack/node.sh env` says, for the operator's
/// `--cpu-request-percent`): an operator a test runs against the node uses the same as the installed platform.
pub fn cpu_request_percent() -> Result<u8> {
    let value = node_var("SLIPWAY_CPU_REQUEST_PERCENT")?;
    value
        .parse()
        .with_context(|| format!("SLIPWAY_CPU_REQUEST_PERCENT={value:?} is not a percentage"))
}

/// Builds the Dockerfile in `context` with the node's BuildKit and pushes the image to the node's registry as
/// `image` (a full reference under [`registry`]). Build output goes to stderr; a failed build is an error.
pub async fn build_and_push(context: &Path, image: &str) -> Result<()> {
    let addr = node_var("BUILDKIT_HOST")?;
    let dir = context
        .to_str()
        .context("build context path is not UTF-8")?;
    let out = tokio::process::Command::new("buildctl")
        .args(["--addr", &addr, "build", "--frontend", "dockerfile.v0"])
        .args(["--local", &format!("context={dir}")])
        .args(["--local", &format!("dockerfile={dir}")])
        .args([
            "--output",
            &format!("type=image,name={image},push=true,registry.insecure=true"),
        ])
        .output()
        .await
        .context("run buildctl (make test puts BuildKit's bin directory on PATH)")?;
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    if !out.status.success() {
        bail!("buildctl build of {image} failed ({})", out.status);
    }
    Ok(())
}

/// Runs a pod with one container to completion and returns its output. Fails with the output when the
/// container exits non-zero or the pod does not finish within `timeout`.
pub async fn run_pod(
    client: &Client,
    ns: &str,
    name: &str,
    image: &str,
    command: &[&str],
    timeout: Duration,
) -> Result<String> {
    let container = json!({"name": "main", "image": image, "command": command});
    run_pod_of(client, ns, name, container, timeout).await
}

/// [`run_pod`] as uid 10001 with no privileges, as namespaces held to the `restricted` Pod Security level admit.
pub async fn run_restricted_pod(
    client: &Client,
    ns: &str,
    name: &str,
    image: &str,
    command: &[&str],
    timeout: Duration,
) -> Result<String> {
    let container = json!({
        "name": "main", "image": image, "command": command,
        "securityContext": {
            "runAsNonRoot": true, "runAsUser": 10001, "allowPrivilegeEscalation": false,
            "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}
        }
    });
    run_pod_of(client, ns, name, container, timeout).await
}

async fn run_pod_of(
    client: &Client,
    ns: &str,
    name: &str,
    container: serde_json::Value,
    timeout: Duration,
) -> Result<String> {
    // Admission refuses pods until the namespace's default ServiceAccount exists, a moment after the namespace.
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    crate::wait_until(Duration::from_secs(30), || {
        let accounts = accounts.clone();
        async move { Ok(accounts.get_opt("default").await?.is_some()) }
    })
    .await
    .with_context(|| format!("namespace {ns} got no default ServiceAccount"))?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "containers": [container]
        }
    }))?;
    pods.create(&PostParams::default(), &pod).await?;
    let finished = crate::wait_until(timeout, || {
        let pods = pods.clone();
        async move {
            Ok(matches!(
                pod_phase(&pods, name).await?.as_str(),
                "Succeeded" | "Failed"
            ))
        }
    })
    .await;
    let phase = pod_phase(&pods, name).await?;
    let logs = pods
        .logs(name, &LogParams::default())
        .await
        .unwrap_or_default();
    if let Err(e) = finished {
        bail!(
            "pod {ns}/{name} did not finish (phase {phase:?}): {e}\n{}\noutput:\n{logs}",
            describe_pod(client, ns, name).await
        );
    }
    if phase != "Succeeded" {
        bail!("pod {ns}/{name} failed; output:\n{logs}");
    }
    Ok(logs)
}

async fn pod_phase(pods: &Api<Pod>, name: &str) -> Result<String> {
    let pod = pods.get(name).await?;
    Ok(pod.status.and_then(|s| s.phase).unwrap_or_default())
}

/// Waits until the Deployment reports the Available condition for its current generation.
pub async fn wait_for_deployment_available(
    client: &Client,
    ns: &str,
    name: &str,
    timeout: Duration,
) -> Result<Deployment> {
    let api: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let result = crate::wait_until(timeout, || {
        let api = api.clone();
        async move { Ok(deployment_available(&api.get(name).await?)) }
    })
    .await;
    if let Err(e) = result {
        let pods = pods_summary(client, ns).await;
        bail!("deployment {ns}/{name} did not become Available: {e}\n{pods}");
    }
    Ok(api.get(name).await?)
}

fn deployment_available(d: &Deployment) -> bool {
    let Some(status) = &d.status else {
        return false;
    };
    status.observed_generation >= d.metadata.generation
        && status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Available" && c.status == "True")
}

/// One line per pod of the namespace with its phase and container states, for failure messages.
async fn pods_summary(client: &Client, ns: &str) -> String {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    match pods.list(&Default::default()).await {
        Ok(list) => list
            .items
            .iter()
            .map(|p| {
                let status = p.status.as_ref();
                format!(
                    "pod {}: phase {:?}, containers {:?}",
                    p.metadata.name.as_deref().unwrap_or("?"),
                    status.and_then(|s| s.phase.clone()),
                    status.and_then(|s| s.container_statuses.clone()),
                )
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Err(e) => format!("(could not list pods: {e})"),
    }
}

async fn describe_pod(client: &Client, ns: &str, name: &str) -> String {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    match pods.get(name).await {
        Ok(p) => format!("status: {:?}", p.status),
        Err(e) => format!("(could not read pod: {e})"),
    }
}
