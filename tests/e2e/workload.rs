//! The run step of deploys on the local node, driven as the Deploy reconciler drives it (`advance` until the
//! version is ready or failed, then `promote` until the route has moved, or `discard`), in namespaces held to the
//! `restricted` Pod Security level like users' namespaces. One image (a Python server on the python:3.13-slim stand-in, built by BuildKit)
//! behaves as the deploy's env says: it answers HTTP with what it sees (its env, its uid), accepts connections but
//! never answers, only creates the ready file, or crashes.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Secret, Service};
use kube::api::{Api, DeleteParams, ListParams, PostParams, WatchEvent, WatchParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use slipway_controllers::workload::{self, Release, Rollout, Switch};
use slipway_controllers::{Context, OperatorConfig};
use slipway_crds::plans::Plan;
use slipway_crds::{App, Channel, Deploy, ReadyBy};
use slipway_testkit::node::{BUSYBOX, build_and_push, registry, run_restricted_pod};
use slipway_testkit::{TestNamespace, wait_until};
use tokio::sync::OnceCell;

const SHA: &str = "0123456789abcdef0123456789abcdef01234567";
/// Bounds the reconcile loop well past the readiness window, so a hang fails instead of blocking the run.
const ROLLOUT_BOUND: Duration = Duration::from_secs(240);
const POD_TIMEOUT: Duration = Duration::from_secs(120);
/// The readiness window of these rollouts: a version that never passes fails after this instead of the hosting
/// API's 2 minutes (which the shipped operator keeps, and a unit test holds). Their small-plan pods fit the node
/// beside each other, so they start well within it. The crashing process's rollout and the deploys of other tests
/// keep the full window: its third exit comes about 35 s into the kubelet's back-off on an idle node, later on a
/// busy one, and their pods can wait for CPU behind each other's.
const READINESS_WINDOW: Duration = Duration::from_secs(60);

const SERVER: &str = r#"import http.server, json, os, pathlib, socket, sys, time

mode = os.environ.get("MODE", "http")
port = int(os.environ["SVC_HTTP_PORT"])
if mode == "crash":
    print("starting up")
    print("fatal: no configuration found", file=sys.stderr)
    sys.exit(3)
if mode == "file":
    pathlib.Path(os.environ["SVC_READY_FILE"]).touch()
    while True:
        time.sleep(3600)
if mode == "silent":
    # Takes connections and never answers them.
    s = socket.socket()
    s.bind(("0.0.0.0", port))
    s.listen(64)
    held = []
    while True:
        held.append(s.accept())


class Echo(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"env": dict(os.environ), "uid": os.getuid(), "gid": os.getgid(), "pid": os.getpid()}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


http.server.HTTPServer(("0.0.0.0", port), Echo).serve_forever()
"#;

static IMAGE: OnceCell<String> = OnceCell::const_new();

/// The test server's image, built once per test binary. It runs as root unless told otherwise (no `USER`), as
/// many `docker` template images do; the platform runs it as uid 10001 anyway.
async fn image() -> Result<&'static str> {
    let image = IMAGE
        .get_or_try_init(|| async {
            let context = std::env::temp_dir().join(format!(
                "slipway-e2e-workload-{}",
                uuid::Uuid::new_v4().simple()
            ));
            std::fs::create_dir_all(&context)?;
            std::fs::write(
                context.join("Dockerfile"),
                "FROM python:3.13-slim\nCOPY server.py /srv/server.py\nCMD [\"python3\", \"-u\", \"/srv/server.py\"]\n",
            )?;
            std::fs::write(context.join("server.py"), SERVER)?;
            let image = format!("{}/e2e/workload-server:v1", registry()?);
            let built = build_and_push(&context, &image).await;
            std::fs::remove_dir_all(&context).ok();
            built.map(|()| image)
        })
        .await?;
    Ok(image)
}

/// What a test runs in: a restricted namespace and a reconciler context for it.
struct Tenant {
    client: Client,
    ns: TestNamespace,
    ctx: Context,
}

impl Tenant {
    async fn new(prefix: &str) -> Result<Self> {
        Self::with_readiness_window(prefix, READINESS_WINDOW).await
    }

    async fn with_readiness_window(prefix: &str, readiness_window: Duration) -> Result<Self> {
        let client = slipway_testkit::client().await?;
        slipway_testkit::ensure_crds(&client).await?;
        let ns = TestNamespace::create_with_labels(
            &client,
            prefix,
            &[("pod-security.kubernetes.io/enforce", "restricted")],
        )
        .await?;
        let var = |name: &str| {
            std::env::var(name)
                .with_context(|| format!("{name} is not set; run under hack/test.sh e2e"))
        };
        let config = OperatorConfig {
            app_domain: "apps.slipway.test".into(),
            namespace: Some(ns.name().into()),
            internal: slipway_internal::InternalEndpoint {
                url: "http://127.0.0.1:9".into(),
                token: slipway_internal::TokenSource::fixed("unused-by-these-tests"),
            },
            pod_internal_url: "http://127.0.0.1:9".into(),
            registry: registry()?,
            bases_registry: None,
            buildkit_addr: var("SLIPWAY_BUILDKIT_ADDR")?,
            buildkit_ca: slipway_controllers::build::buildkit_tls::BuildkitCa::from_env()
                .map_err(anyhow::Error::msg)?,
            probe_image: var("SLIPWAY_PROBE_IMAGE")?,
            builder_image: var("SLIPWAY_BUILDER_IMAGE")?,
            tenant_grants: Vec::new(),
            tenant_network_policies: None,
            readiness_window,
            deploy_deadline: slipway_controllers::deploy::DEPLOY_DEADLINE,
            cpu_request_percent: slipway_testkit::node::cpu_request_percent()?,
            app_disruption_budgets: true,
            domains: Default::default(),
        };
        let mut metrics_registry = prometheus_client::registry::Registry::default();
        let metrics = slipway_controllers::metrics::Metrics::register(&mut metrics_registry);
        let ctx = Context::new(client.clone(), config, metrics);
        Ok(Self { client, ns, ctx })
    }

    fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), self.ns.name())
    }

    /// An app of the `docker` template owned by alice, with its prod channel.
    async fn app(&self, name: &str) -> Result<(App, Channel)> {
        let app: App = serde_json::from_value(json!({
            "apiVersion": "slipway.dev/v1alpha1", "kind": "App", "metadata": {"name": name},
            "spec": {"owner": "alice", "template": "docker"}
        }))?;
        let app = self
            .api::<App>()
            .create(&PostParams::default(), &app)
            .await?;
        let channel: Channel = serde_json::from_value(json!({
            "apiVersion": "slipway.dev/v1alpha1", "kind": "Channel", "metadata": {"name": format!("{name}.prod")},
            "spec": {"app": name, "gitRefBinding": "branch:master"}
        }))?;
        let channel = self
            .api::<Channel>()
            .create(&PostParams::default(), &channel)
            .await?;
        Ok((app, channel))
    }

    async fn deploy(&self, channel: &Channel) -> Result<Deploy> {
        let deploy: Deploy = serde_json::from_value(json!({
            "apiVersion": "slipway.dev/v1alpha1", "kind": "Deploy",
            "metadata": {"generateName": format!("{}-", channel.spec.app)},
            "spec": {"channel": channel.name_any(), "sha": SHA}
        }))?;
        Ok(self
            .api::<Deploy>()
            .create(&PostParams::default(), &deploy)
            .await?)
    }

    /// Calls `advance` as a reconciler would until the version is ready or failed.
    async fn roll_out(&self, release: &Release<'_>) -> Result<Rollout> {
        let started = tokio::time::Instant::now();
        loop {
            match workload::advance(&self.ctx, release).await? {
                Rollout::Starting if started.elapsed() < ROLLOUT_BOUND => {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                Rollout::Starting => bail!("still starting after {ROLLOUT_BOUND:?}"),
                done => return Ok(done),
            }
        }
    }

    /// Calls `promote` as a reconciler would until the switch is done. While it answers that the route is still
    /// moving, the channel's versions that served before (`before`) keep their Deployments: the Service's
    /// endpoints may still send them requests. The number of calls it took.
    async fn promote(&self, release: &Release<'_>, before: &[&Deploy]) -> Result<usize> {
        let started = tokio::time::Instant::now();
        let mut calls = 1;
        while workload::promote(&self.ctx, release).await? == Switch::Moving {
            for deploy in before {
                let names = workload::Names::of(deploy)?;
                ensure!(
                    self.exists::<Deployment>(&names.deployment).await?,
                    "{} was stopped while the route could still reach it",
                    names.deployment
                );
            }
            ensure!(
                started.elapsed() < ROLLOUT_BOUND,
                "the route did not move within {ROLLOUT_BOUND:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
            calls += 1;
        }
        Ok(calls)
    }

    /// GET / of the channel's Service by its cluster DNS name from a pod; the body, or the client's error
    /// output. (`timeout` rather than `wget -T`, which crashes the busybox stand-in's static wget.)
    async fn get_through_service(&self, channel: &Channel, pod: &str) -> Result<String> {
        let host = format!(
            "{}.{}.svc.cluster.local",
            slipway_crds::names::workload_name(&channel.name_any()),
            self.ns.name()
        );
        run_restricted_pod(
            &self.client,
            self.ns.name(),
            pod,
            BUSYBOX,
            &[
                "sh",
                "-c",
                &format!("timeout 10 wget -q -O - http://{host}/ 2>&1 || true"),
            ],
            POD_TIMEOUT,
        )
        .await
    }

    /// The exit code the app container of `deploy`'s pod ends with, from a watch begun now: the kubelet writes a
    /// pod's final status just before it deletes it, so the deletion carries how the process ended.
    async fn app_exit_code_when_gone(
        &self,
        deploy: &Deploy,
    ) -> Result<tokio::task::JoinHandle<Result<i32>>> {
        let selector = format!("slipway.dev/deploy={}", deploy.uid().unwrap_or_default());
        let mut events = self
            .api::<Pod>()
            .watch(&WatchParams::default().labels(&selector), "0")
            .await?
            .boxed();
        Ok(tokio::spawn(async move {
            let exit_code = |pod: &Pod| {
                let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
                let app = statuses
                    .iter()
                    .find(|s| s.name == workload::APP_CONTAINER)?;
                Some(app.state.as_ref()?.terminated.as_ref()?.exit_code)
            };
            let mut last = None;
            while let Some(event) = events.try_next().await? {
                match event {
                    WatchEvent::Added(pod) | WatchEvent::Modified(pod) => {
                        last = exit_code(&pod).or(last);
                    }
                    WatchEvent::Deleted(pod) => {
                        return exit_code(&pod)
                            .or(last)
                            .context("the pod went without a terminated app container");
                    }
                    WatchEvent::Bookmark(_) => {}
                    WatchEvent::Error(e) => bail!("watching {selector}: {e}"),
                }
            }
            bail!("the watch on {selector} ended before the pod went")
        }))
    }

    async fn exists<K>(&self, name: &str) -> Result<bool>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
        <K as kube::Resource>::DynamicType: Default,
    {
        Ok(self
            .api::<K>()
            .get_opt(name)
            .await?
            .is_some_and(|o| o.meta().deletion_timestamp.is_none()))
    }
}

fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn starter() -> &'static Plan {
    slipway_crds::plans::PLANS
        .iter()
        .find(|p| p.tier == "starter")
        .unwrap_or(&slipway_crds::plans::PLANS[0])
}

fn release<'a>(
    deploy: &'a Deploy,
    app: &'a App,
    channel: &'a Channel,
    image: &'a str,
    env: &'a BTreeMap<String, String>,
) -> Release<'a> {
    Release {
        deploy,
        app,
        channel,
        sha: SHA,
        image,
        env,
        plan: starter(),
        cpu_request_percent: slipway_controllers::workload::FULL_CPU_REQUEST_PERCENT,
    }
}

fn short_id(deploy: &Deploy) -> String {
    deploy.uid().unwrap_or_default()[..8].to_owned()
}

#[tokio::test]
async fn an_http_app_goes_live_and_a_version_that_never_answers_fails_while_it_keeps_serving()
-> Result<()> {
    let t = Tenant::new("e2e-workload-http").await?;
    let image = image().await?;
    let (app, channel) = t.app("web").await?;

    // The first version answers HTTP and goes live through the channel's Service.
    let first = t.deploy(&channel).await?;
    let first_env = env(&[("GREETING", "hello"), ("VERSION", "one"), ("PORT", "1234")]);
    let first_release = release(&first, &app, &channel, image, &first_env);
    assert_eq!(
        t.roll_out(&first_release).await?,
        Rollout::Ready(ReadyBy::Http)
    );
    t.promote(&first_release, &[]).await?;
    assert_eq!(
        workload::promote(&t.ctx, &first_release).await?,
        Switch::Done,
        "promote stays idempotent once done"
    );
    assert_eq!(
        workload::advance(&t.ctx, &first_release).await?,
        Rollout::Ready(ReadyBy::Http),
        "advance stays idempotent once ready"
    );

    let body = t.get_through_service(&channel, "get-first").await?;
    let seen: Value =
        serde_json::from_str(body.trim()).with_context(|| format!("JSON from the app: {body}"))?;
    let seen_env = &seen["env"];
    assert_eq!(seen_env["GREETING"], "hello");
    assert_eq!(seen_env["VERSION"], "one");
    assert_eq!(seen_env["SVC_HTTP_PORT"], "8080");
    assert_eq!(
        seen_env["PORT"], "8080",
        "the system value wins over the user's"
    );
    assert_eq!(seen_env["SVC_FORWARD_PORT"], "7000");
    assert_eq!(
        seen_env["SVC_READY_FILE"],
        format!("/tmp/.svc-ready-{}", short_id(&first))
    );
    assert!(seen_env.get("SVC_USER").is_none() && seen_env.get("SVC_SHA").is_none());
    assert_eq!(
        (seen["uid"].clone(), seen["gid"].clone()),
        (json!(10001), json!(10001))
    );
    assert_ne!(
        seen["pid"],
        json!(1),
        "the sandbox is PID 1, not the app: the kernel ignores a signal PID 1 has no handler for"
    );

    // SVC_USER and SVC_SHA are labels of the running pod.
    let pods = t
        .api::<Pod>()
        .list(&ListParams::default().labels(&format!(
            "slipway.dev/deploy={}",
            first.uid().unwrap_or_default()
        )))
        .await?;
    let labels = pods
        .items
        .first()
        .context("the first version's pod")?
        .labels();
    assert_eq!(
        labels.get("slipway.dev/user").map(String::as_str),
        Some("alice")
    );
    assert_eq!(labels.get("slipway.dev/sha").map(String::as_str), Some(SHA));

    // The second version takes connections and never answers: it fails when the window closes, naming both
    // checks, and the first version keeps answering.
    let second = t.deploy(&channel).await?;
    let second_env = env(&[("MODE", "silent"), ("VERSION", "two")]);
    let second_release = release(&second, &app, &channel, image, &second_env);
    let outcome = t.roll_out(&second_release).await?;
    assert_eq!(
        outcome,
        Rollout::Failed(format!(
            "readiness: GET / on port 8080 never answered 2xx and /tmp/.svc-ready-{} was not created within {}s",
            short_id(&second),
            READINESS_WINDOW.as_secs()
        ))
    );
    let body = t.get_through_service(&channel, "get-after-failure").await?;
    assert!(
        body.contains("\"VERSION\": \"one\""),
        "the first version serves: {body}"
    );

    let second_names = workload::Names::of(&second)?;
    assert!(t.exists::<Deployment>(&second_names.deployment).await?);
    workload::discard(&t.ctx, &second).await?;
    workload::discard(&t.ctx, &second).await?;
    assert!(!t.exists::<Deployment>(&second_names.deployment).await?);
    assert!(!t.exists::<Secret>(&second_names.env_secret).await?);
    let first_names = workload::Names::of(&first)?;
    assert!(
        t.exists::<Deployment>(&first_names.deployment).await?,
        "discard leaves the live version"
    );
    let body = t.get_through_service(&channel, "get-after-discard").await?;
    assert!(
        body.contains("\"VERSION\": \"one\""),
        "the first version serves: {body}"
    );
    Ok(())
}

#[tokio::test]
async fn a_ready_file_app_passes_by_file_replaces_the_old_version_and_goes_with_its_channel()
-> Result<()> {
    let t = Tenant::new("e2e-workload-file").await?;
    let image = image().await?;
    let (app, channel) = t.app("worker").await?;

    let first = t.deploy(&channel).await?;
    let http_env = env(&[]);
    let first_release = release(&first, &app, &channel, image, &http_env);
    assert_eq!(
        t.roll_out(&first_release).await?,
        Rollout::Ready(ReadyBy::Http)
    );
    t.promote(&first_release, &[]).await?;
    let first_stopped = t.app_exit_code_when_gone(&first).await?;

    let second = t.deploy(&channel).await?;
    let file_env = env(&[("MODE", "file")]);
    let second_release = release(&second, &app, &channel, image, &file_env);
    assert_eq!(
        t.roll_out(&second_release).await?,
        Rollout::Ready(ReadyBy::File)
    );
    let calls = t.promote(&second_release, &[&first]).await?;
    println!("the route moved to the second version after {calls} calls of promote");

    // The Service follows the new version; once its endpoints did, the old version's Deployment and env Secret
    // went.
    let names = workload::Names::of(&second)?;
    let service = t.api::<Service>().get(&names.service).await?;
    let selector = service.spec.and_then(|s| s.selector).unwrap_or_default();
    assert_eq!(
        selector.get("slipway.dev/deploy"),
        second.uid().as_ref(),
        "the route points at the new version"
    );
    let old = workload::Names::of(&first)?;
    assert!(!t.exists::<Deployment>(&old.deployment).await?);
    assert!(!t.exists::<Secret>(&old.env_secret).await?);
    assert!(t.exists::<Deployment>(&names.deployment).await?);
    // The replaced version's process (a Python server with no handler of its own) was stopped by the SIGTERM after
    // the drain, not killed when the grace period ran out.
    let exit_code = tokio::time::timeout(POD_TIMEOUT, first_stopped)
        .await
        .context("the first version's pod goes")???;
    assert_eq!(
        exit_code, 143,
        "128 + SIGTERM (137 would be SIGKILL at the end of the grace period)"
    );

    // Deleting the channel stops what it runs (garbage collection through owner references).
    t.api::<Channel>()
        .delete(&channel.name_any(), &DeleteParams::background())
        .await?;
    let deployments = t.api::<Deployment>();
    let services = t.api::<Service>();
    wait_until(POD_TIMEOUT, || {
        let (deployments, services) = (deployments.clone(), services.clone());
        let (deployment, service) = (names.deployment.clone(), names.service.clone());
        async move {
            Ok(deployments.get_opt(&deployment).await?.is_none()
                && services.get_opt(&service).await?.is_none())
        }
    })
    .await
    .context("the channel's Deployment and Service are collected with it")?;
    Ok(())
}

#[tokio::test]
async fn a_process_that_keeps_crashing_fails_early_with_its_last_output() -> Result<()> {
    // The shipped window: the third exit ends the rollout well before it closes, and a node slow to schedule or
    // start the pod (the kubelet's back-off counts from each exit) must not close it first.
    let t = Tenant::with_readiness_window(
        "e2e-workload-crash",
        slipway_controllers::workload::READINESS_WINDOW,
    )
    .await?;
    let image = image().await?;
    let (app, channel) = t.app("broken").await?;
    let deploy = t.deploy(&channel).await?;
    let crash_env = env(&[("MODE", "crash")]);
    let outcome = t
        .roll_out(&release(&deploy, &app, &channel, image, &crash_env))
        .await?;
    let Rollout::Failed(message) = outcome else {
        bail!("a crashing process cannot pass readiness: {outcome:?}");
    };
    ensure!(
        message.starts_with("readiness: the process exited ")
            && message.contains("times before passing (last: exit code 3); last output: ")
            && message.contains("fatal: no configuration found"),
        "unexpected message: {message}"
    );
    Ok(())
}
