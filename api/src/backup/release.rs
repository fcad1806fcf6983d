//! One installed release as a backup and a restore see it: its api pod (to run the pod-side parts in), the names
//! of the Secrets it keeps state in, and its operator, api and edge Deployments.

use std::time::Duration;

use anyhow::{Context, bail};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{AttachParams, AttachedProcess, ListParams, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use slipway_crds::labels;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

const INSTANCE: &str = "app.kubernetes.io/instance";
const COMPONENT: &str = "app.kubernetes.io/component";

/// Bytes buffered each way on an exec stream.
const EXEC_BUFFER: usize = 1 << 20;

/// Bytes of a pod-side part's stderr kept for an error message.
const STDERR_TAIL: usize = 4096;

/// The annotation of an operator held by a restore: the replicas it had before, so that a restore cut short (its
/// process killed while it held the operator) and run again puts those back, not the 0 it finds.
const HELD_REPLICAS: &str = "slipway.dev/restore-held-replicas";

/// How long the operator's pods get to stop, and the api to come back.
const WAIT: Duration = Duration::from_secs(300);

pub struct Release {
    client: Client,
    namespace: String,
    pub name: String,
    api_pod: String,
    pub keyring_secret: String,
    pub sign_in_secret: Option<String>,
    pub certificate_namespace: Option<String>,
    operator: Option<Deployment>,
    api: Deployment,
    edge: Option<Deployment>,
}

fn component(deployments: &[Deployment], name: &str) -> Option<Deployment> {
    deployments
        .iter()
        .find(|d| {
            d.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(COMPONENT))
                .is_some_and(|c| c == name)
        })
        .cloned()
}

fn secret_volume(deployment: &Deployment, volume: &str) -> Option<String> {
    deployment
        .spec
        .as_ref()?
        .template
        .spec
        .as_ref()?
        .volumes
        .as_ref()?
        .iter()
        .find(|v| v.name == volume)?
        .secret
        .as_ref()?
        .secret_name
        .clone()
}

fn argument(deployment: &Deployment, flag: &str) -> Option<String> {
    let prefix = format!("{flag}=");
    deployment
        .spec
        .as_ref()?
        .template
        .spec
        .as_ref()?
        .containers
        .iter()
        .flat_map(|c| c.args.iter().flatten())
        .find_map(|a| a.strip_prefix(&prefix).map(str::to_owned))
}

impl Release {
    /// Finds release `name` in `namespace` and a ready api pod of it.
    pub async fn find(client: &Client, namespace: &str, name: &str) -> anyhow::Result<Self> {
        let selector = format!("{INSTANCE}={name}");
        let deployments: Vec<Deployment> = Api::<Deployment>::namespaced(client.clone(), namespace)
            .list(&ListParams::default().labels(&selector))
            .await
            .with_context(|| format!("list the Deployments of release {name} in {namespace}"))?
            .items;
        let api = component(&deployments, "api")
            .with_context(|| format!("release {name} in {namespace} has no api Deployment"))?;
        let edge = component(&deployments, "edge");
        let pods = Api::<Pod>::namespaced(client.clone(), namespace)
            .list(&ListParams::default().labels(&format!("{selector},{COMPONENT}=api")))
            .await?;
        let api_pod = pods
            .items
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .find(|p| {
                p.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            })
            .and_then(|p| p.metadata.name.clone())
            .with_context(|| format!("release {name} in {namespace} has no ready api pod"))?;
        Ok(Self {
            client: client.clone(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            api_pod,
            keyring_secret: secret_volume(&api, "env-keys")
                .context("the api Deployment mounts no env keyring")?,
            sign_in_secret: edge.as_ref().and_then(|e| secret_volume(e, "sign-in")),
            certificate_namespace: edge
                .as_ref()
                .and_then(|e| argument(e, "--certificate-namespace")),
            operator: component(&deployments, "operator"),
            api,
            edge,
        })
    }

    /// Secret `name` of the release's namespace, as a backup holds it.
    pub async fn secret(&self, name: &str) -> anyhow::Result<Value> {
        let secret = Api::<Secret>::namespaced(self.client.clone(), &self.namespace)
            .get(name)
            .await
            .with_context(|| format!("read Secret {}/{name}", self.namespace))?;
        Ok(serde_json::to_value(secret)?)
    }

    /// The certificates the operator issued and its ACME account key.
    pub async fn certificates(&self) -> anyhow::Result<Vec<Value>> {
        let Some(namespace) = &self.certificate_namespace else {
            return Ok(Vec::new());
        };
        let api = Api::<Secret>::namespaced(self.client.clone(), namespace);
        let mut secrets: Vec<Value> = api
            .list(&ListParams::default().labels(labels::CERTIFICATE))
            .await
            .with_context(|| format!("list the certificates in {namespace}"))?
            .items
            .into_iter()
            .map(serde_json::to_value)
            .collect::<Result<_, _>>()?;
        if let Some(account) = api.get_opt(labels::ACME_ACCOUNT_SECRET).await? {
            secrets.push(serde_json::to_value(account)?);
        }
        Ok(secrets)
    }

    /// The name of some App in the cluster, when there is one.
    pub async fn any_app(&self) -> anyhow::Result<Option<String>> {
        let apps = Api::<slipway_crds::app::App>::all(self.client.clone())
            .list(&ListParams::default().limit(1))
            .await?;
        Ok(apps.items.first().map(|a| {
            format!(
                "{}/{}",
                a.metadata.namespace.as_deref().unwrap_or_default(),
                a.metadata.name.as_deref().unwrap_or_default()
            )
        }))
    }

    /// Runs `slipway admin <args>` in the api pod; its stdout is written by `sink`, which returns how many bytes.
    pub async fn exec_out<F, Fut>(&self, args: &[&str], sink: F) -> anyhow::Result<u64>
    where
        F: FnOnce(Box<dyn AsyncRead + Send + Unpin>) -> Fut,
        Fut: std::future::Future<Output = anyhow::Result<u64>>,
    {
        let mut process = self.exec(args, true).await?;
        let stdout = process
            .process
            .stdout()
            .context("the exec stream has no stdout")?;
        // Held open, never written: the part stops when it ends (this process gone), see `pod::send`.
        let here = process.process.stdin();
        let written = sink(Box::new(stdout)).await;
        let finished = process.finish(args).await;
        drop(here);
        finished?;
        written
    }

    /// Runs `slipway admin <args>` in the api pod for what it says; fails when it fails.
    pub async fn exec_check(&self, args: &[&str]) -> anyhow::Result<()> {
        self.exec_in(args, tokio::io::empty()).await
    }

    /// Runs `slipway admin <args>` in the api pod with `input` on its stdin.
    pub async fn exec_in(
        &self,
        args: &[&str],
        mut input: impl AsyncRead + Unpin,
    ) -> anyhow::Result<()> {
        let mut process = self.exec(args, false).await?;
        let mut stdin = process
            .process
            .stdin()
            .context("the exec stream has no stdin")?;
        let sent = async {
            tokio::io::copy(&mut input, &mut stdin).await?;
            stdin.shutdown().await?;
            anyhow::Ok(())
        }
        .await;
        drop(stdin);
        // The part's own failure says more than a stream it stopped reading.
        process.finish(args).await?;
        sent
    }

    /// Starts `slipway admin <args>` in the api pod, its stdin always attached (see `exec_out`), its stdout when
    /// `stdout`.
    async fn exec(&self, args: &[&str], stdout: bool) -> anyhow::Result<Running> {
        let mut command = vec!["slipway", "admin"];
        command.extend_from_slice(args);
        let params = AttachParams {
            container: Some("api".to_owned()),
            stdin: true,
            stdout,
            stderr: true,
            tty: false,
            max_stdin_buf_size: Some(EXEC_BUFFER),
            max_stdout_buf_size: Some(EXEC_BUFFER),
            max_stderr_buf_size: None,
        };
        let mut process = Api::<Pod>::namespaced(self.client.clone(), &self.namespace)
            .exec(&self.api_pod, command, &params)
            .await
            .with_context(|| format!("run slipway admin {} in {}", args.join(" "), self.api_pod))?;
        let stderr = process.stderr().context("the exec stream has no stderr")?;
        let stderr = tokio::spawn(relay(stderr));
        Ok(Running { process, stderr })
    }

    /// The replicas the operator had before a restore that was cut short held it, if one did.
    pub fn held_by_a_cut_restore(&self) -> Option<i32> {
        self.operator
            .as_ref()?
            .metadata
            .annotations
            .as_ref()?
            .get(HELD_REPLICAS)?
            .parse()
            .ok()
    }

    /// Scales the operator to 0, noting its replica count on it ([`HELD_REPLICAS`]), and waits until none of its
    /// pods is left; returns that count (the one noted by a restore cut short, when there was one).
    pub async fn hold_operator(&self) -> anyhow::Result<Option<i32>> {
        let Some(operator) = &self.operator else {
            return Ok(None);
        };
        let name = operator.metadata.name.clone().unwrap_or_default();
        let replicas = self
            .held_by_a_cut_restore()
            .unwrap_or_else(|| operator.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1));
        self.scale(&name, 0, Some(replicas)).await?;
        let pods = Api::<Pod>::namespaced(self.client.clone(), &self.namespace);
        let selector = format!("{INSTANCE}={},{COMPONENT}=operator", self.name);
        let deadline = tokio::time::Instant::now() + WAIT;
        while !pods
            .list(&ListParams::default().labels(&selector))
            .await?
            .items
            .is_empty()
        {
            if tokio::time::Instant::now() > deadline {
                bail!("the operator's pods did not stop within {WAIT:?}");
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        Ok(Some(replicas))
    }

    /// Scales the operator back to `replicas`, and removes the note of them.
    pub async fn release_operator(&self, replicas: Option<i32>) -> anyhow::Result<()> {
        match (&self.operator, replicas) {
            (Some(operator), Some(replicas)) => {
                self.scale(
                    &operator.metadata.name.clone().unwrap_or_default(),
                    replicas,
                    None,
                )
                .await
            }
            _ => Ok(()),
        }
    }

    /// Scales `deployment` to `replicas`, noting `held` on it ([`HELD_REPLICAS`]) or, with `None`, removing the note.
    async fn scale(
        &self,
        deployment: &str,
        replicas: i32,
        held: Option<i32>,
    ) -> anyhow::Result<()> {
        let held = held.map(|n| n.to_string());
        Api::<Deployment>::namespaced(self.client.clone(), &self.namespace)
            .patch(
                deployment,
                &PatchParams::default(),
                &Patch::Merge(json!({
                    "metadata": { "annotations": { HELD_REPLICAS: held } },
                    "spec": { "replicas": replicas },
                })),
            )
            .await
            .with_context(|| format!("scale {deployment} to {replicas}"))?;
        Ok(())
    }

    /// Rolls the api and the edge, so they read the restored keyring, sign-in keys and host key.
    pub async fn restart(&self, at: Value) -> anyhow::Result<()> {
        let api = Api::<Deployment>::namespaced(self.client.clone(), &self.namespace);
        let patch = json!({ "spec": { "template": { "metadata": { "annotations": {
            "slipway.dev/restored-at": at
        } } } } });
        for deployment in std::iter::once(&self.api).chain(self.edge.iter()) {
            let name = deployment.metadata.name.clone().unwrap_or_default();
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .with_context(|| format!("restart {name}"))?;
        }
        Ok(())
    }

    /// Waits until every api replica is of the restarted template and ready.
    pub async fn wait_for_api(&self) -> anyhow::Result<()> {
        let api = Api::<Deployment>::namespaced(self.client.clone(), &self.namespace);
        let name = self.api.metadata.name.clone().unwrap_or_default();
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let deployment = api.get(&name).await?;
            let wanted = deployment
                .spec
                .as_ref()
                .and_then(|s| s.replicas)
                .unwrap_or(1);
            let generation = deployment.metadata.generation.unwrap_or(0);
            if let Some(status) = &deployment.status
                && status.observed_generation.unwrap_or(0) >= generation
                && status.updated_replicas.unwrap_or(0) == wanted
                && status.ready_replicas.unwrap_or(0) == wanted
                && status.replicas.unwrap_or(0) == wanted
            {
                return Ok(());
            }
            if tokio::time::Instant::now() > deadline {
                bail!("the api did not come back within {WAIT:?}");
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

struct Running {
    process: AttachedProcess,
    stderr: tokio::task::JoinHandle<String>,
}

impl Running {
    /// Waits for the pod-side command to end; its failure carries what it said on stderr.
    async fn finish(mut self, args: &[&str]) -> anyhow::Result<()> {
        let status = match self.process.take_status() {
            Some(status) => status.await,
            None => None,
        };
        let said = self.stderr.await.unwrap_or_default();
        let _ = self.process.join().await;
        match status {
            Some(status) if status.status.as_deref() == Some("Success") => Ok(()),
            Some(status) => bail!(
                "slipway admin {} failed in the api pod: {}{}",
                args.join(" "),
                status.message.unwrap_or_default(),
                if said.trim().is_empty() {
                    String::new()
                } else {
                    format!("; it said: {}", said.trim())
                }
            ),
            None => bail!(
                "slipway admin {}: the exec stream ended without an exit status",
                args.join(" ")
            ),
        }
    }
}

/// Passes what a pod-side part says on to this process's stderr as it comes, and keeps its tail.
async fn relay(mut stderr: impl AsyncRead + Unpin) -> String {
    let mut tail = Vec::new();
    let mut buffer = [0u8; 4096];
    while let Ok(n) = stderr.read(&mut buffer).await {
        if n == 0 {
            break;
        }
        // A progress line from the pod: a blocking write of a few bytes to this process's own stderr.
        let _ = std::io::Write::write_all(&mut std::io::stderr(), &buffer[..n]);
        tail.extend_from_slice(&buffer[..n]);
        if tail.len() > STDERR_TAIL {
            tail.drain(..tail.len() - STDERR_TAIL);
        }
    }
    String::from_utf8_lossy(&tail).into_owned()
}
