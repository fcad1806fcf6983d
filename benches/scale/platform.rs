//! The platform as it runs in a cluster, minus the node: the webhook, the API, the operator and the edge as four
//! processes of the `slipway` binary this bench was built with (the release profile), each with its own memory to
//! read, against the bench's control plane and a fresh platform database. Static channels run no pod, so nothing
//! here needs a node; the addresses of builds lead nowhere.
//!
//! `SLIPWAY_BENCH_BINARY` names another `slipway` binary to run instead (a build of an earlier commit, to compare
//! two builds under the same bench).
//!
//! As `hack/platform.sh` does, the operator and the edge call the API's internal listener with real tokens of
//! their ServiceAccounts, and the webhook is registered with the apiserver by URL on loopback.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::networking::v1::IngressClass;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use slipway_crds::Deploy;
use slipway_testkit::postgres::TestDatabase;
use slipway_testkit::tls::{TempDir, TestPki};
use tokio::process::{Child, Command};

/// The platform's domain of channel hostnames.
pub const APP_DOMAIN: &str = "apps.slipway.bench";
/// Where the operator and the edge live, with their ServiceAccounts.
const SYSTEM_NAMESPACE: &str = "slipway-system";
/// The registration's and the webhook's name.
const WEBHOOK: &str = "validate.slipway.dev";
/// How long a component may take to answer its health check after it starts, on a loaded machine.
const START_WITHIN: Duration = Duration::from_secs(120);

/// One running component.
struct Process {
    name: &'static str,
    child: Child,
    pid: u32,
    log: PathBuf,
}

/// A component's memory, from `/proc/<pid>/status`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Memory {
    /// Resident set size now (VmRSS), KiB.
    pub rss_kib: u64,
    /// The highest it has been (VmHWM), KiB.
    pub peak_kib: u64,
}

/// The four components, running.
pub struct Platform {
    /// The public API's base URL.
    pub api_url: String,
    /// The edge's base URL.
    pub edge_url: String,
    /// The platform database's URL.
    pub db_url: String,
    processes: Vec<Process>,
    dir: TempDir,
    _db: TestDatabase,
}

/// The components' logs outlive the run: they are copied to `$SLIPWAY_RUN/scale-logs` (the last run's only) before
/// the temporary directory goes, so a call that failed can be looked into afterwards.
impl Drop for Platform {
    fn drop(&mut self) {
        let Some(run) = std::env::var_os("SLIPWAY_RUN") else {
            return;
        };
        let kept = Path::new(&run).join("scale-logs");
        if std::fs::create_dir_all(&kept).is_err() {
            return;
        }
        for p in &self.processes {
            let _ = std::fs::copy(&p.log, kept.join(format!("{}.log", p.name)));
        }
        eprintln!("[scale] the components' logs: {}", kept.display());
    }
}

impl Platform {
    /// Starts the webhook (and registers it), the API, the operator and the edge, in that order, each once the one
    /// before answers.
    pub async fn start(kube: &kube::Client) -> Result<Self> {
        slipway_testkit::ensure_crds(kube).await?;
        let db = TestDatabase::create().await?;
        let dir = TempDir::new("scale")?;
        let mut platform = Self {
            api_url: String::new(),
            edge_url: String::new(),
            db_url: db.url().to_owned(),
            processes: Vec::new(),
            dir,
            _db: db,
        };
        let (operator_token, edge_token) = internal_tokens(kube, platform.dir.path()).await?;

        let pki = TestPki::new()?;
        let (cert, key) = pki
            .serving_cert(&["127.0.0.1"])?
            .write_to(platform.dir.path())?;
        let webhook_port = free_port()?;
        platform.spawn(
            "webhook",
            &[
                "webhook",
                "--listen",
                &format!("127.0.0.1:{webhook_port}"),
                "--tls-cert",
                path(&cert)?,
                "--tls-key",
                path(&key)?,
                "--app-domain",
                APP_DOMAIN,
            ],
        )?;
        register_webhook(kube, webhook_port, pki.ca_pem()).await?;
        platform.wait_for_webhook(kube).await?;

        let (api_port, internal_port) = (free_port()?, free_port()?);
        let keys = platform.dir.path().join("env-keys");
        std::fs::write(
            &keys,
            slipway_store::env::crypto::Keyring::generate_line("bench"),
        )?;
        let source_key = platform.dir.path().join("build-source-key");
        std::fs::write(
            &source_key,
            format!(
                "{}{}",
                uuid::Uuid::new_v4().simple(),
                uuid::Uuid::new_v4().simple()
            ),
        )?;
        let repos = platform.dir.path().join("repos");
        let db_url = platform.db_url.clone();
        platform.spawn(
            "api",
            &[
                "api",
                "--listen",
                &format!("127.0.0.1:{api_port}"),
                "--database-url",
                &db_url,
                "--app-domain",
                APP_DOMAIN,
                "--git-host",
                "git.slipway.bench",
                "--repos-dir",
                path(&repos)?,
                "--env-keys-file",
                path(&keys)?,
                "--internal-listen",
                &format!("127.0.0.1:{internal_port}"),
                "--internal-caller",
                &format!("operator={SYSTEM_NAMESPACE}/slipway-operator"),
                "--internal-caller",
                &format!("edge={SYSTEM_NAMESPACE}/slipway-edge"),
                "--build-source-key-file",
                path(&source_key)?,
                // The bench's clients send far more than a person's budget.
                "--rate-limit-per-minute",
                "0",
            ],
        )?;
        platform.api_url = format!("http://127.0.0.1:{api_port}");
        platform
            .wait_for("api", &format!("{}/healthz", platform.api_url))
            .await?;
        let internal_url = format!("http://127.0.0.1:{internal_port}");

        let operator_admin = free_port()?;
        platform.spawn(
            "operator",
            &[
                "operator",
                "--app-domain",
                APP_DOMAIN,
                "--admin-port",
                &operator_admin.to_string(),
                "--internal-url",
                &internal_url,
                "--internal-token-file",
                path(&operator_token)?,
                "--registry",
                "127.0.0.1:9",
                "--buildkit-addr",
                "tcp://127.0.0.1:9",
                "--builder-image",
                "127.0.0.1:9/unused",
                "--probe-image",
                "127.0.0.1:9/unused",
            ],
        )?;
        platform
            .wait_for(
                "operator",
                &format!("http://127.0.0.1:{operator_admin}/readyz"),
            )
            .await?;

        Api::<IngressClass>::all(kube.clone())
            .patch(
                "slipway",
                &PatchParams::apply("slipway-bench").force(),
                &Patch::Apply(json!({
                    "apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
                    "metadata": {"name": "slipway"}, "spec": {"controller": "slipway.dev/edge"},
                })),
            )
            .await
            .context("create the IngressClass slipway")?;
        let (edge_port, edge_admin) = (free_port()?, free_port()?);
        platform.spawn(
            "edge",
            &[
                "edge",
                "--listen",
                &format!("127.0.0.1:{edge_port}"),
                "--admin-port",
                &edge_admin.to_string(),
                "--internal-url",
                &internal_url,
                "--internal-token-file",
                path(&edge_token)?,
                "--access-log",
                "false",
            ],
        )?;
        platform.edge_url = format!("http://127.0.0.1:{edge_port}");
        platform
            .wait_for("edge", &format!("http://127.0.0.1:{edge_admin}/readyz"))
            .await?;
        Ok(platform)
    }

    /// The memory of each component, by name, in the order they started.
    pub fn memory(&self) -> Result<Vec<(&'static str, Memory)>> {
        self.processes
            .iter()
            .map(|p| Ok((p.name, memory_of(p.pid)?)))
            .collect()
    }

    /// The process ids, by name (for a profiler).
    pub fn pids(&self) -> Vec<(&'static str, u32)> {
        self.processes.iter().map(|p| (p.name, p.pid)).collect()
    }

    /// Fails, with the end of its log, if a component has exited.
    pub fn check_running(&mut self) -> Result<()> {
        for p in &mut self.processes {
            if let Some(status) = p.child.try_wait()? {
                bail!(
                    "the {} exited ({status}); the end of its log:\n{}",
                    p.name,
                    log_tail(&p.log)
                );
            }
        }
        Ok(())
    }

    fn spawn(&mut self, name: &'static str, args: &[&str]) -> Result<()> {
        let log = self.dir.path().join(format!("{name}.log"));
        let out = std::fs::File::create(&log)?;
        let binary = std::env::var_os("SLIPWAY_BENCH_BINARY")
            .unwrap_or_else(|| env!("CARGO_BIN_EXE_slipway").into());
        let mut command = Command::new(binary);
        // As the image runs every component (see the Dockerfile), unless the bench is told otherwise.
        if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
            command.env("MALLOC_ARENA_MAX", "2");
        }
        let child = command
            .args(args)
            .env("KUBECONFIG", slipway_testkit::kubeconfig_path())
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("start slipway {name}"))?;
        let pid = child.id().context("a started process has a pid")?;
        self.processes.push(Process {
            name,
            child,
            pid,
            log,
        });
        Ok(())
    }

    /// Waits until `url` answers 2xx.
    async fn wait_for(&mut self, name: &str, url: &str) -> Result<()> {
        let client = reqwest::Client::new();
        let deadline = tokio::time::Instant::now() + START_WITHIN;
        loop {
            self.check_running()?;
            if let Ok(res) = client.get(url).timeout(Duration::from_secs(2)).send().await
                && res.status().is_success()
            {
                return Ok(());
            }
            if tokio::time::Instant::now() > deadline {
                bail!("the {name} did not answer {url} within {START_WITHIN:?}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits until the apiserver calls the webhook: a Deploy naming no channel is refused in its words.
    async fn wait_for_webhook(&mut self, kube: &kube::Client) -> Result<()> {
        let probe: Deploy = serde_json::from_value(json!({
            "apiVersion": "slipway.dev/v1alpha1", "kind": "Deploy",
            "metadata": {"name": "probe"}, "spec": {"channel": "probe.prod", "sha": "master"}
        }))?;
        let api: Api<Deploy> = Api::namespaced(kube.clone(), SYSTEM_NAMESPACE);
        let dry_run = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        let deadline = tokio::time::Instant::now() + START_WITHIN;
        loop {
            self.check_running()?;
            match api.create(&dry_run, &probe).await {
                Err(kube::Error::Api(s)) if s.message.contains(WEBHOOK) => return Ok(()),
                _ if tokio::time::Instant::now() > deadline => {
                    bail!("the apiserver did not call the webhook within {START_WITHIN:?}")
                }
                _ => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }
}

/// Creates the operator's and the edge's ServiceAccounts and writes a token of each (for the internal listener's
/// audience) to a file; returns the two files.
async fn internal_tokens(kube: &kube::Client, dir: &Path) -> Result<(PathBuf, PathBuf)> {
    Api::<Namespace>::all(kube.clone())
        .patch(
            SYSTEM_NAMESPACE,
            &PatchParams::apply("slipway-bench"),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SYSTEM_NAMESPACE}})),
        )
        .await?;
    let mut files = Vec::new();
    for name in ["slipway-operator", "slipway-edge"] {
        let token = slipway_testkit::service_accounts::token_for(
            kube,
            SYSTEM_NAMESPACE,
            name,
            slipway_internal::review::DEFAULT_AUDIENCE,
        )
        .await?;
        let file = dir.join(format!("{name}-token"));
        std::fs::write(&file, token)?;
        files.push(file);
    }
    let edge = files.pop().context("two tokens")?;
    let operator = files.pop().context("two tokens")?;
    Ok((operator, edge))
}

/// Points the apiserver at the webhook on loopback for the five kinds, as the chart's registration does.
async fn register_webhook(kube: &kube::Client, port: u16, ca_pem: &str) -> Result<()> {
    let mut config: ValidatingWebhookConfiguration = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "slipway-bench"},
        "webhooks": [{
            "name": WEBHOOK,
            "clientConfig": {"url": format!("https://127.0.0.1:{port}/validate")},
            "rules": [{
                "apiGroups": ["slipway.dev"], "apiVersions": ["v1alpha1"],
                "operations": ["CREATE", "UPDATE"],
                "resources": ["apps", "channels", "deploys", "domains", "forwards"],
                "scope": "Namespaced",
            }],
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 10,
        }],
    }))?;
    for hook in config.webhooks.iter_mut().flatten() {
        hook.client_config.ca_bundle = Some(ByteString(ca_pem.as_bytes().to_vec()));
    }
    Api::<ValidatingWebhookConfiguration>::all(kube.clone())
        .patch(
            "slipway-bench",
            &PatchParams::apply("slipway-bench").force(),
            &Patch::Apply(&config),
        )
        .await
        .context("register the webhook")?;
    Ok(())
}

/// A port nothing listens on now (the component binds it a moment later).
fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

fn path(p: &Path) -> Result<&str> {
    p.to_str().context("a temporary path is UTF-8")
}

fn memory_of(pid: u32) -> Result<Memory> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("read the memory of process {pid}"))?;
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    Ok(Memory {
        rss_kib: field("VmRSS:"),
        peak_kib: field("VmHWM:"),
    })
}

fn log_tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}
