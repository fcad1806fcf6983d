//! Test support for tests that talk to a real Kubernetes control plane.
//!
//! `hack/control-plane.sh start` (run by `make test`) starts etcd, kube-apiserver, kube-controller-manager and
//! kube-scheduler on loopback once per test run; this crate gives each test a [`kube::Client`] for it and a fresh
//! namespace that is deleted when the test ends, pass or fail, so tests run in parallel without seeing each other.
//! With `SLIPWAY_TEST_KEEP_NAMESPACES` set, as the cluster tier sets it for a control plane it throws away after the
//! run, the namespaces stay ([`namespaces_outlive_tests`]).
//!
//! The control plane is found through `SLIPWAY_KUBECONFIG`, else at the script's default kubeconfig path. When it
//! cannot be reached the test fails loudly with the command that starts it: a cluster test is never skipped.
//!
//! [`service_accounts`] mints real ServiceAccount tokens (TokenRequest) for tests of token-authenticated callers.
//!
//! [`node`] adds what end-to-end tests on the local single-node cluster need (`hack/node.sh`): running pods,
//! waiting for Deployments, building images with BuildKit into the node's registry.

pub mod node;

pub mod postgres;

pub mod s3;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use tokio::sync::OnceCell;

pub mod namespaces;
pub mod service_accounts;
pub mod tls;

/// The directory of the package under test, where its tests find the checkout's files (scripts, examples, the
/// Python clients) at run time. Cargo sets `CARGO_MANIFEST_DIR` when it runs a test; that value, unlike the path
/// compiled into the binary, is this checkout's even when the binary was built from another checkout sharing the
/// target directory (cargo reuses a workspace crate's build across checkouts whose sources are not newer). Run
/// directly, a test binary falls back to its working directory, which cargo also sets to the package's.
pub fn package_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::current_dir().ok())
        .unwrap_or_else(|| PathBuf::from("."))
}

/// Label on every namespace a test creates.
pub const TEST_NAMESPACE_LABEL: &str = "slipway.dev/test";

/// Where the control plane's admin kubeconfig is.
pub fn kubeconfig_path() -> PathBuf {
    if let Some(p) = std::env::var_os("SLIPWAY_KUBECONFIG") {
        return PathBuf::from(p);
    }
    let cache = std::env::var_os("SLIPWAY_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let base = std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| {
                    PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache")
                });
            base.join("slipway")
        });
    std::env::var_os("SLIPWAY_RUN")
        .map(PathBuf::from)
        .unwrap_or_else(|| cache.join("run"))
        .join("control-plane/admin.kubeconfig")
}

/// The kubectl binary built for the control plane (on PATH when run through `make test`).
pub fn kubectl() -> PathBuf {
    std::env::var_os("SLIPWAY_KUBECTL")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("kubectl"))
}

/// The control plane's client settings from its kubeconfig (a test that routes its client elsewhere changes them).
pub async fn config() -> Result<Config> {
    // ring and aws-lc are both compiled into the test binaries (the S3 client brings aws-lc), so rustls cannot
    // pick a process provider by itself; the platform uses ring, as `slipway`'s main does.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let path = kubeconfig_path();
    let kubeconfig = Kubeconfig::read_from(&path).with_context(|| {
        format!(
            "no control plane kubeconfig at {} — start one with `hack/control-plane.sh start` (make test does)",
            path.display()
        )
    })?;
    Ok(Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?)
}

/// A client for the test control plane.
pub async fn client() -> Result<Client> {
    let path = kubeconfig_path();
    let client = Client::try_from(config().await?)?;
    client.apiserver_version().await.with_context(|| {
        format!(
            "the control plane of {} does not answer — is `hack/control-plane.sh start` running?",
            path.display()
        )
    })?;
    Ok(client)
}

static CRDS: OnceCell<()> = OnceCell::const_new();

/// Installs the generated CRDs with server-side apply and waits until each is Established. Runs once per test
/// binary; concurrent callers wait for the first.
pub async fn ensure_crds(client: &Client) -> Result<()> {
    CRDS.get_or_try_init(|| install_crds(client.clone()))
        .await
        .map(|_| ())
}

async fn install_crds(client: Client) -> Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client);
    let params = PatchParams::apply("slipway-tests").force();
    for crd in slipway_crds::crds() {
        let name = crd.metadata.name.clone().context("CRD without a name")?;
        api.patch(&name, &params, &Patch::Apply(&crd))
            .await
            .with_context(|| format!("apply CRD {name}"))?;
    }
    for crd in slipway_crds::crds() {
        let name = crd.metadata.name.clone().context("CRD without a name")?;
        wait_until(Duration::from_secs(30), || {
            let api = api.clone();
            let name = name.clone();
            async move {
                let crd = api.get(&name).await?;
                Ok(crd
                    .status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True"))
            }
        })
        .await
        .with_context(|| format!("CRD {name} did not become Established"))?;
    }
    Ok(())
}

/// Polls `check` every 100 ms until it returns true or `timeout` passes.
pub async fn wait_until<F, Fut>(timeout: Duration, mut check: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<bool>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if check().await? {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            bail!("condition not met within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Whether a test leaves its namespaces behind instead of deleting them: set `SLIPWAY_TEST_KEEP_NAMESPACES` for a
/// control plane that is thrown away after the run and runs no pods. Deleting a namespace makes the namespace
/// controller list and empty every namespaced resource type in it: for the cluster tier's four hundred namespaces
/// that was some 34,000 of its 47,000 apiserver requests, and a fifth of its time on two cores, for nothing the
/// tests look at.
pub fn namespaces_outlive_tests() -> bool {
    std::env::var_os("SLIPWAY_TEST_KEEP_NAMESPACES").is_some()
}

/// A namespace of one test, deleted when dropped (unless [`namespaces_outlive_tests`]).
pub struct TestNamespace {
    name: String,
}

impl TestNamespace {
    /// Creates a fresh namespace `t-<prefix>-<random>`.
    pub async fn create(client: &Client, prefix: &str) -> Result<Self> {
        let suffix = uuid::Uuid::new_v4().simple().to_string();
        let name = format!(
            "t-{}-{}",
            prefix.chars().take(40).collect::<String>(),
            &suffix[..8]
        );
        let ns: Namespace = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": {TEST_NAMESPACE_LABEL: "true"}}
        }))?;
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await?;
        Ok(Self { name })
    }

    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for TestNamespace {
    /// Deletes the namespace from a thread of its own with a client of its own: the test's runtime may be the one
    /// dropping us, and a kube client is bound to the runtime that made it.
    fn drop(&mut self) {
        let name = std::mem::take(&mut self.name);
        if namespaces_outlive_tests() {
            return;
        }
        let deleted = std::thread::spawn(move || -> Result<()> {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(async {
                let client = client().await?;
                Api::<Namespace>::all(client)
                    .delete(&name, &DeleteParams::background())
                    .await?;
                Ok(())
            })
        })
        .join();
        if let Ok(Err(e)) | Err(e) =
            deleted.map_err(|_| anyhow::anyhow!("namespace cleanup panicked"))
        {
            eprintln!("warning: could not delete test namespace: {e:#}");
        }
    }
}

/// A client, the CRDs installed, and a fresh namespace: what most cluster tests start with.
pub async fn setup(prefix: &str) -> Result<(Client, TestNamespace)> {
    let client = client().await?;
    ensure_crds(&client).await?;
    let ns = TestNamespace::create(&client, prefix).await?;
    Ok((client, ns))
}
