//! A hostile tenant on the installed platform (see `platform.rs`): tenant A runs an app whose code tries, from
//! inside its pod, what an attacker's code would: tenant B's pod and Service, both registries' catalogs, BuildKit,
//! the api's internal listener, the operator's, webhook's and edge's admin ports, the kubelet, the apiserver, the
//! platform database and the node's loopback. With the chart's isolation (NetworkPolicies the operator keeps in
//! every tenant namespace, enforced on the test node by kube-router) every attempt fails, while what an app needs
//! (DNS, its data server, the S3 gateway, the edge reaching it) still works. A RUN step of tenant A's Dockerfile
//! makes the same attempts and fails at each: build steps run on BuildKit's own bridge, which reaches nothing
//! internal. Then the same attempts run with isolation switched off (`helm upgrade --set
//! isolation.networkPolicies=false`, and `hack/node.sh build-network open` for the build step) and succeed, so the
//! suite shows the policies and the build network are what stop them; the node's loopback alone stays out of reach,
//! as no tenant pod shares the node's network. The list of attempts and their outcomes is printed (run with
//! --show-output). Two more tests hold what no network rule decides: a tenant's registry credential pulls its own
//! images and nothing else, and BuildKit answers only client certificates its CA signed.

// Fixture helpers panic on a malformed response: in a test that is the failure to report.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::time::Duration;

use anyhow::{Context, Result, bail};
use support::git::{Workspace, http_remote};
use support::platform::{Account, Installed, hack, kubectl};

/// The prober: answers what a connection or a GET from inside its pod came to.
const PROBER: &str = include_str!("../isolation/prober.py");

/// What tenant B runs: anything that answers.
const TARGET: &str = "import http.server, os
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header('Content-Length', '6'); self.end_headers(); self.wfile.write(b'target')
http.server.HTTPServer(('0.0.0.0', int(os.environ['SVC_HTTP_PORT'])), H).serve_forever()
";

/// The policy the operator keeps in every tenant namespace for every pod.
const ISOLATION_POLICY: &str = "slipway-tenant-isolation";

/// One thing tenant A's code tries.
struct Attempt {
    /// What it is after, for the printed list.
    what: &'static str,
    /// The prober's path and query.
    probe: String,
    /// The prober's argument when a build step runs it (`connect:HOST:PORT`, `get:URL`).
    step: String,
}

impl Attempt {
    fn connect(what: &'static str, to: &str) -> Self {
        Self {
            what,
            probe: format!("/connect?to={}", encoded(to)),
            step: format!("connect:{to}"),
        }
    }

    fn get(what: &'static str, url: &str) -> Self {
        Self {
            what,
            probe: format!("/get?url={}", encoded(url)),
            step: format!("get:{url}"),
        }
    }

    /// A question for the prober's own routes (`/env`, `/resolve`), which a build step does not ask.
    fn ask(what: &'static str, probe: &str) -> Self {
        Self {
            what,
            probe: probe.into(),
            step: String::new(),
        }
    }
}

/// When the suite's first step began, for the times its printed tables carry.
static STARTED: std::sync::LazyLock<std::time::Instant> =
    std::sync::LazyLock::new(std::time::Instant::now);

/// Time since the suite's first step, as the printed tables show it (where a slow run spends its time).
fn elapsed() -> String {
    format!("at {} s", STARTED.elapsed().as_secs())
}

/// `text` as a query value: every byte but letters and digits percent-encoded.
fn encoded(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// Whether a prober's answer means the attempt got through: a connection opened or an HTTP answer came back.
fn got_through(outcome: &str) -> bool {
    outcome == "open"
        || outcome
            .split(' ')
            .next()
            .is_some_and(|s| s.parse::<u16>().is_ok())
}

/// Pushes a one-file app and deploys it; returns its id once it answers through the edge.
async fn run_app(
    platform: &Installed,
    account: &Account,
    name: &str,
    code: &str,
) -> Result<String> {
    let (app, channel) = platform.create_app(account, name, "app").await?;
    let ws = Workspace::new()?;
    ws.git(".", &["init", "-q", "-b", "master", name]).await?;
    ws.write(&format!("{name}/app.py"), code)?;
    ws.write(&format!("{name}/launch.sh"), "exec python3 app.py\n")?;
    let remote = http_remote(&platform.api, &account.token, &account.username, name);
    let sha = ws.commit_and_push(name, name, &remote).await?;
    let (_, log) = platform.deploy(account, &app, &channel, &sha).await?;
    assert_eq!(log["status"], "success", "{}", log["log"]);
    platform
        .wait_for_page(&platform.prod_host(account, name), "/", "")
        .await?;
    Ok(app)
}

/// Tenant A's `docker` app whose Dockerfile runs the prober over the attempts in a RUN step.
struct BuildStep {
    app: String,
    channel: String,
    ws: Workspace,
}

impl BuildStep {
    async fn create(platform: &Installed, account: &Account) -> Result<Self> {
        let (app, channel) = platform.create_app(account, "stepper", "docker").await?;
        let ws = Workspace::new()?;
        ws.git(".", &["init", "-q", "-b", "master", "stepper"])
            .await?;
        Ok(Self { app, channel, ws })
    }

    /// The deploy's log once it holds every attempt's outcome (the build is done then; whether the app starts
    /// does not matter here), or once the deploy finished.
    async fn build_log(
        &self,
        platform: &Installed,
        account: &Account,
        id: &str,
        attempts: &[Attempt],
    ) -> Result<String> {
        let path = format!(
            "/apps/{}/channels/{}/logs?deploy={id}&max_bytes=262144",
            self.app, self.channel
        );
        let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
        loop {
            let reply = platform
                .call("GET", &path, account, None)
                .await?
                .expect(200);
            let log = reply["log"].as_str().unwrap_or_default().to_owned();
            let complete = attempts
                .iter()
                .all(|a| log.contains(&format!("probe {} => ", a.step)));
            let finished = matches!(reply["status"].as_str(), Some("success" | "failed"));
            if complete || finished || tokio::time::Instant::now() > deadline {
                return Ok(log);
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Builds and deploys a commit whose RUN step makes every attempt; returns their outcomes as the build log
    /// printed them, and prints them as a table under `label`.
    async fn attempts(
        &self,
        platform: &Installed,
        account: &Account,
        attempts: &[Attempt],
        label: &str,
    ) -> Result<Vec<String>> {
        let mut run = vec!["python3".to_owned(), "/app/prober.py".to_owned()];
        run.extend(attempts.iter().map(|a| a.step.clone()));
        // A new ENV value each time, so the RUN step is never answered from the build cache.
        let dockerfile = format!(
            "FROM python:3.13-slim\nCOPY prober.py /app/prober.py\nENV PROBE_ROUND={}\nRUN {}\nCMD [\"python3\", \"/app/prober.py\"]\n",
            uuid::Uuid::new_v4(),
            serde_json::to_string(&run)?
        );
        self.ws.write("stepper/prober.py", PROBER)?;
        self.ws.write("stepper/Dockerfile", dockerfile)?;
        self.ws.git("stepper", &["add", "."]).await?;
        self.ws
            .git("stepper", &["commit", "-q", "-m", label])
            .await?;
        let remote = http_remote(&platform.api, &account.token, &account.username, "stepper");
        self.ws
            .git("stepper", &["push", "-q", &remote, "HEAD:master"])
            .await?;
        let sha = self
            .ws
            .git("stepper", &["rev-parse", "HEAD"])
            .await?
            .trim()
            .to_owned();
        let id = platform
            .queue_deploy(account, &self.app, &self.channel, &sha)
            .await?;
        let log = self.build_log(platform, account, &id, attempts).await?;
        println!("{label} ({}):", elapsed());
        let mut outcomes = Vec::new();
        for attempt in attempts {
            let marker = format!("probe {} => ", attempt.step);
            let outcome = log
                .lines()
                .find_map(|line| line.split_once(&marker).map(|(_, o)| o.trim().to_owned()))
                .with_context(|| {
                    format!("the build log has no outcome of {}:\n{log}", attempt.step)
                })?;
            let shown: String = outcome.chars().take(100).collect();
            println!("  {:<58} {shown}", attempt.what);
            outcomes.push(outcome);
        }
        Ok(outcomes)
    }
}

/// `jsonpath` of the first pod in `namespace` matching `selector`.
async fn pod_field(namespace: &str, selector: &str, jsonpath: &str) -> Result<String> {
    let out = kubectl(&[
        "-n",
        namespace,
        "get",
        "pods",
        "-l",
        selector,
        "--field-selector=status.phase=Running",
        "-o",
        &format!("jsonpath={{.items[0]{jsonpath}}}"),
    ])
    .await?;
    if out.trim().is_empty() {
        bail!("no running pod in {namespace} matches {selector} (looking for {jsonpath})");
    }
    Ok(out.trim().to_owned())
}

/// `address:port` of a platform component's pod, the port being its container port named `port`.
async fn component(platform: &Installed, component: &str, port: &str) -> Result<String> {
    let selector = format!("app.kubernetes.io/component={component}");
    let ip = pod_field(&platform.namespace, &selector, ".status.podIP").await?;
    let port = pod_field(
        &platform.namespace,
        &selector,
        &format!(".spec.containers[0].ports[?(@.name==\"{port}\")].containerPort"),
    )
    .await?;
    Ok(format!("{ip}:{port}"))
}

/// `clusterIP:port` of a Service's first port.
async fn service(namespace: &str, name: &str) -> Result<String> {
    Ok(kubectl(&[
        "-n",
        namespace,
        "get",
        "service",
        name,
        "-o",
        "jsonpath={.spec.clusterIP}:{.spec.ports[0].port}",
    ])
    .await?
    .trim()
    .to_owned())
}

/// `host:port` of a `scheme://user:password@host:port/...` URL.
fn url_address(url: &str) -> Result<String> {
    let rest = url.split_once("://").context("a URL")?.1;
    let authority = rest.split('/').next().unwrap_or(rest);
    Ok(authority.rsplit('@').next().unwrap_or(authority).to_owned())
}

fn var(name: &str) -> Result<String> {
    std::env::var(name).with_context(|| format!("{name} is not set; run under `hack/test.sh e2e`"))
}

/// Asks the prober (through the edge) to try `attempt`; returns its outcome.
async fn probe(platform: &Installed, prober: &str, attempt: &Attempt) -> Result<String> {
    let answer = platform.edge_get(prober, &attempt.probe).await?;
    if answer.status != 200 {
        bail!(
            "the prober answered {} to {}: {}",
            answer.status,
            attempt.probe,
            answer.text()
        );
    }
    Ok(answer.text())
}

/// Every attempt's outcome, printed as a table. The attempts run at once (the prober answers each request on a
/// thread of its own): a refused one often takes the prober's whole timeout, and a round holds a dozen.
async fn run_attempts(
    platform: &Installed,
    prober: &str,
    attempts: &[Attempt],
    label: &str,
) -> Result<Vec<String>> {
    let outcomes = futures::future::try_join_all(
        attempts
            .iter()
            .map(|attempt| probe(platform, prober, attempt)),
    )
    .await?;
    println!("{label} ({}):", elapsed());
    for (attempt, outcome) in attempts.iter().zip(&outcomes) {
        let shown: String = outcome.chars().take(100).collect();
        println!("  {:<58} {}", attempt.what, shown.replace('\n', " "));
    }
    Ok(outcomes)
}

/// Switches the chart's isolation on or off (`hack/install.sh isolation`) and waits until tenant namespaces
/// show it: the isolation policy present in (or gone from) each of `namespaces`.
async fn isolation(on: bool, namespaces: &[&str]) -> Result<()> {
    hack("install.sh", &["isolation", if on { "on" } else { "off" }]).await?;
    for ns in namespaces {
        wait_for_policy(ns, on).await?;
    }
    println!(
        "isolation switched {} ({})",
        if on { "on" } else { "off" },
        elapsed()
    );
    Ok(())
}

/// Drops or restores the node's rules that keep build steps from internal addresses (`hack/node.sh build-network`).
async fn build_network(isolated: bool) -> Result<()> {
    hack(
        "node.sh",
        &["build-network", if isolated { "isolated" } else { "open" }],
    )
    .await
}

/// Waits until the isolation policy is present in `namespace` (or gone from it).
async fn wait_for_policy(namespace: &str, present: bool) -> Result<()> {
    use kube::ResourceExt;
    let policies: kube::Api<k8s_openapi::api::networking::v1::NetworkPolicy> =
        kube::Api::namespaced(slipway_testkit::client().await?, namespace);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let found: Vec<String> = policies
            .list(&Default::default())
            .await?
            .into_iter()
            .map(|p| p.name_any())
            .collect();
        if found.iter().any(|name| name == ISOLATION_POLICY) == present {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            bail!(
                "{namespace}: the isolation policy is {}present: {found:?}",
                if present { "not " } else { "" }
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Repeats the attempts until every one came to what `wanted` says (the engine applies a policy change within
/// seconds, not at once), or fails with the last outcomes.
async fn attempts_until(
    platform: &Installed,
    prober: &str,
    attempts: &[Attempt],
    label: &str,
    wanted: impl Fn(usize, &str) -> bool,
) -> Result<Vec<String>> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    loop {
        let outcomes = run_attempts(platform, prober, attempts, label).await?;
        if outcomes.iter().enumerate().all(|(i, o)| wanted(i, o)) {
            return Ok(outcomes);
        }
        if tokio::time::Instant::now() > deadline {
            let wrong: Vec<String> = outcomes
                .iter()
                .enumerate()
                .filter(|(i, o)| !wanted(*i, o))
                .map(|(i, o)| format!("{}: {o}", attempts[i].what))
                .collect();
            bail!("{label}: not as expected: {wrong:#?}");
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// The node's loopback: kube-proxy's health port, which listens on 127.0.0.1 of the node only.
fn node_loopback() -> Attempt {
    Attempt::get(
        "the node's loopback (kube-proxy's health port)",
        "http://127.0.0.1:10256/healthz",
    )
}

/// What tenant A's code tries, addressed as they are now (pods of the platform move when it is upgraded): tenant B's
/// pod by address and through its Service, then the platform's parts.
async fn attempts(platform: &Installed, bea: &Account) -> Result<Vec<Attempt>> {
    let b_app = format!("{}=target", slipway_crds::labels::APP);
    let b_pod = format!(
        "{}:{}",
        pod_field(&bea.namespace, &b_app, ".status.podIP").await?,
        pod_field(
            &bea.namespace,
            &b_app,
            ".spec.containers[0].ports[0].containerPort"
        )
        .await?
    );
    let b_service = kubectl(&[
        "-n",
        &bea.namespace,
        "get",
        "services",
        "-l",
        &b_app,
        "-o",
        "jsonpath={.items[0].spec.clusterIP}:{.items[0].spec.ports[0].port}",
    ])
    .await?;
    let registry = var("SLIPWAY_REGISTRY")?;
    let apps_registry = var("SLIPWAY_APPS_REGISTRY")?;
    let buildkit = var("SLIPWAY_BUILDKIT_ADDR")?;
    let node = var("SLIPWAY_NODE_IP")?;
    // The platform database as the api's pods reach it (hack/install.sh gives the chart its URL in a Secret).
    let database_url = kubectl(&[
        "-n",
        &platform.namespace,
        "get",
        "secret",
        "slipway-database",
        "-o",
        "jsonpath={.data.url}",
    ])
    .await?;
    let database_url = String::from_utf8(base64::Engine::decode(
        &base64::engine::general_purpose::STANDARD,
        database_url.trim(),
    )?)?;
    let platform_database = url_address(&database_url)?;
    let internal = service(
        &platform.namespace,
        &format!("{}-api-internal", platform.release),
    )
    .await?;
    Ok(vec![
        Attempt::get("tenant B's pod", &format!("http://{b_pod}/")),
        Attempt::get(
            "tenant B's Service",
            &format!("http://{}/", b_service.trim()),
        ),
        Attempt::get(
            "the apps' registry's catalog",
            &format!("http://{apps_registry}/v2/_catalog"),
        ),
        Attempt::get(
            "the image mirror's catalog",
            &format!("http://{registry}/v2/_catalog"),
        ),
        Attempt::connect("BuildKit", buildkit.trim_start_matches("tcp://")),
        Attempt::get(
            "the api's internal listener",
            &format!("http://{internal}/internal/v1/"),
        ),
        Attempt::get(
            "the operator's metrics",
            &format!(
                "http://{}/metrics",
                component(platform, "operator", "http-metrics").await?
            ),
        ),
        Attempt::connect(
            "the webhook's port",
            &component(platform, "webhook", "https").await?,
        ),
        Attempt::get(
            "the edge's admin port",
            &format!(
                "http://{}/metrics",
                component(platform, "edge", "http-metrics").await?
            ),
        ),
        Attempt::get("the kubelet", &format!("https://{node}:10250/pods")),
        Attempt::get(
            "the apiserver, anonymously",
            &format!(
                "https://{}/version",
                service("default", "kubernetes").await?
            ),
        ),
        Attempt::connect("the platform database", &platform_database),
    ])
}

#[tokio::test]
async fn a_tenant_s_pod_reaches_neither_the_platform_s_internals_nor_another_tenant() -> Result<()>
{
    std::sync::LazyLock::force(&STARTED);
    let platform = Installed::from_env()?;
    let ari = platform.account("ari").await?;
    let bea = platform.account("bea").await?;
    let target = run_app(&platform, &bea, "target", TARGET).await?;
    let prober_app = run_app(&platform, &ari, "prober", PROBER).await?;
    let prober = platform.prod_host(&ari, "prober");
    println!("both tenants' apps answer ({})", elapsed());
    wait_for_policy(&ari.namespace, true).await?;
    wait_for_policy(&bea.namespace, true).await?;

    let host = var("SLIPWAY_NODE_HOST_IP")?;
    let data_server_port = url_address(&var("SLIPWAY_PLATFORM_DATA_SERVER_URL")?)?
        .rsplit_once(':')
        .context("data server port")?
        .1
        .to_owned();
    // What an app needs keeps working under isolation: its own DNS, its data server, the S3 gateway.
    let s3 = probe(
        &platform,
        &prober,
        &Attempt::ask("S3_ENDPOINT", "/env?name=S3_ENDPOINT"),
    )
    .await?;
    let needed = [
        Attempt::ask("DNS", "/resolve?name=kubernetes.default.svc.cluster.local"),
        Attempt::connect("the data server", &format!("{host}:{data_server_port}")),
        Attempt::connect("the S3 gateway (S3_ENDPOINT)", &url_address(&s3)?),
    ];

    // Isolated: every attempt fails, every need is met.
    let mut isolated = attempts(&platform, &bea).await?;
    isolated.push(node_loopback());
    let blocked = attempts_until(&platform, &prober, &isolated, "isolation on", |_, o| {
        !got_through(o)
    })
    .await?;
    attempts_until(
        &platform,
        &prober,
        &needed,
        "isolation on, what an app needs",
        |i, o| {
            if i == 0 {
                o.parse::<std::net::Ipv4Addr>().is_ok()
            } else {
                o == "open"
            }
        },
    )
    .await?;
    assert!(
        blocked.iter().all(|o| o == "refused" || o == "timeout"),
        "{blocked:?}"
    );

    // A build step of tenant A (RUN in its Dockerfile) fails at every attempt too: build steps run in BuildKit's
    // own network, which reaches nothing internal.
    let stepper = BuildStep::create(&platform, &ari).await?;
    let mut from_step = attempts(&platform, &bea).await?;
    from_step.push(node_loopback());
    let from_build = stepper
        .attempts(&platform, &ari, &from_step, "a build step")
        .await?;
    assert!(from_build.iter().all(|o| !got_through(o)), "{from_build:?}");
    // With the build network's rules dropped, the same step reaches the platform's internals and the node (tenant
    // B's pod keeps its own policy): what stopped it was the build network.
    build_network(false).await?;
    let open_build = stepper
        .attempts(
            &platform,
            &ari,
            &attempts(&platform, &bea).await?,
            "a build step, its network open",
        )
        .await;
    build_network(true).await?;
    let open_build = open_build?;
    assert!(
        open_build[2..].iter().all(|o| got_through(o)),
        "{open_build:?}"
    );

    // A policy deleted by hand comes back (the operator follows its policies).
    kubectl(&[
        "-n",
        &ari.namespace,
        "delete",
        "networkpolicy",
        ISOLATION_POLICY,
    ])
    .await?;
    wait_for_policy(&ari.namespace, true).await?;

    // Switched off, the same attempts get through: what stopped them was the isolation. The apps' registry then
    // answers, and still refuses its catalog to a caller without a token (see the registry test below).
    isolation(false, &[&ari.namespace, &bea.namespace]).await?;
    let open = match attempts(&platform, &bea).await {
        Ok(off) => {
            attempts_until(&platform, &prober, &off, "isolation off", |_, o| {
                got_through(o)
            })
            .await
        }
        Err(e) => Err(e),
    };
    // The node's loopback stays out of reach without the policies too: a pod's 127.0.0.1 is its own network
    // namespace's (no pod of a tenant shares the node's network), so no policy is what keeps it out.
    let loopback = run_attempts(
        &platform,
        &prober,
        &[node_loopback()],
        "isolation off, the node's loopback",
    )
    .await;
    isolation(true, &[&ari.namespace, &bea.namespace]).await?;
    let open = open?;
    assert!(!got_through(&loopback?[0]), "the node's loopback");
    assert!(
        open[2].starts_with("401 "),
        "the apps' catalog: {}",
        open[2]
    );
    assert!(
        open[0].contains("target") && open[1].contains("target"),
        "{open:?}"
    );
    let again = attempts(&platform, &bea).await?;
    attempts_until(&platform, &prober, &again, "isolation on again", |_, o| {
        !got_through(o)
    })
    .await?;
    platform
        .delete_apps(&[(&ari, &prober_app), (&ari, &stepper.app), (&bea, &target)])
        .await
}

/// The image a tenant's running app was pulled as: (repository, digest) in the apps' registry.
async fn running_image(account: &Account, app: &str) -> Result<(String, String)> {
    let selector = format!("{}={app}", slipway_crds::labels::APP);
    let image = pod_field(&account.namespace, &selector, ".spec.containers[0].image").await?;
    let registry = var("SLIPWAY_APPS_REGISTRY")?;
    let (repository, digest) = image
        .strip_prefix(&format!("{registry}/"))
        .and_then(|rest| rest.split_once('@'))
        .with_context(|| format!("{image} is not an image of the apps' registry"))?;
    Ok((repository.to_owned(), digest.to_owned()))
}

/// The registry credential in a tenant's namespace (the pull Secret the operator keeps for `app`'s channel).
async fn pull_credential(account: &Account, app: &str) -> Result<(String, String)> {
    let selector = format!(
        "{}={app},{}={}",
        slipway_crds::labels::APP,
        slipway_crds::labels::COMPONENT,
        slipway_crds::labels::COMPONENT_PULL
    );
    let config = kubectl(&[
        "-n",
        &account.namespace,
        "get",
        "secrets",
        "-l",
        &selector,
        "-o",
        "jsonpath={.items[0].data.\\.dockerconfigjson}",
    ])
    .await?;
    let config: serde_json::Value = serde_json::from_slice(&base64::Engine::decode(
        &base64::engine::general_purpose::STANDARD,
        config.trim(),
    )?)?;
    let entry = &config["auths"][var("SLIPWAY_APPS_REGISTRY")?];
    Ok((
        entry["username"].as_str().context("username")?.to_owned(),
        entry["password"].as_str().context("password")?.to_owned(),
    ))
}

/// A client of the apps' registry as a node or a tenant would be one: it follows the registry's challenge to the
/// realm it names.
struct RegistryClient {
    http: reqwest::Client,
    base: String,
}

impl RegistryClient {
    fn new() -> Result<Self> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        Ok(Self {
            http: reqwest::Client::builder().no_proxy().build()?,
            base: format!("http://{}/v2", var("SLIPWAY_APPS_REGISTRY")?),
        })
    }

    /// The status of `method` on `path` with `token` (none: anonymous), and the challenge of a 401.
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        token: Option<&str>,
    ) -> Result<(u16, String)> {
        let mut request = self
            .http
            .request(method, format!("{}/{path}", self.base))
            .header(
                "accept",
                "application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json",
            );
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await?;
        let challenge = response
            .headers()
            .get("www-authenticate")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        Ok((response.status().as_u16(), challenge))
    }

    /// What the realm answers to a token request for `scope` with `credential` (status and body).
    async fn token(
        &self,
        challenge: &str,
        scope: &str,
        credential: Option<(&str, &str)>,
    ) -> Result<(u16, serde_json::Value)> {
        let param = |name: &str| -> Result<String> {
            let start = challenge
                .find(&format!("{name}=\""))
                .with_context(|| format!("no {name} in the challenge {challenge:?}"))?
                + name.len()
                + 2;
            let len = challenge[start..].find('"').context("unterminated")?;
            Ok(challenge[start..start + len].to_owned())
        };
        let query = form_urlencoded::Serializer::new(String::new())
            .append_pair("service", &param("service")?)
            .append_pair("scope", scope)
            .finish();
        let mut request = self.http.get(format!("{}?{query}", param("realm")?));
        if let Some((username, password)) = credential {
            request = request.basic_auth(username, Some(password));
        }
        let response = request.send().await?;
        let status = response.status().as_u16();
        Ok((status, response.json().await?))
    }
}

#[tokio::test]
async fn a_tenant_s_registry_credential_pulls_its_own_images_and_nothing_else() -> Result<()> {
    let platform = Installed::from_env()?;
    let cyd = platform.account("cyd").await?;
    let dov = platform.account("dov").await?;
    // Both apps run: the nodes pulled each image from the apps' registry with its channel's pull Secret.
    let mine = run_app(&platform, &cyd, "mine", TARGET).await?;
    let theirs = run_app(&platform, &dov, "theirs", TARGET).await?;
    let (own_repo, own_digest) = running_image(&cyd, "mine").await?;
    let (their_repo, their_digest) = running_image(&dov, "theirs").await?;
    let (username, password) = pull_credential(&cyd, "mine").await?;
    assert_eq!(username, own_repo, "the credential names its repository");
    let registry = RegistryClient::new()?;
    let own_manifest = format!("{own_repo}/manifests/{own_digest}");
    let their_manifest = format!("{their_repo}/manifests/{their_digest}");
    let refused = |status: u16| status == 401 || status == 403;

    // Nobody gets in without a token: not to an image, not to the catalog.
    let (status, challenge) = registry
        .call(reqwest::Method::GET, &own_manifest, None)
        .await?;
    assert_eq!(status, 401);
    assert!(
        challenge.to_ascii_lowercase().starts_with("bearer realm="),
        "{challenge}"
    );
    let (status, _) = registry
        .call(reqwest::Method::GET, "_catalog", None)
        .await?;
    assert_eq!(status, 401, "the catalog, anonymously");

    // The realm wants a credential slipway issued.
    let scope = format!("repository:{own_repo}:pull");
    let (status, body) = registry.token(&challenge, &scope, None).await?;
    assert_eq!(
        (status, &body["error"]["code"]),
        (401, &serde_json::json!("auth_required"))
    );
    let (status, body) = registry
        .token(&challenge, &scope, Some((&username, "00")))
        .await?;
    assert_eq!(
        (status, &body["error"]["code"]),
        (401, &serde_json::json!("auth_required"))
    );
    // Tenant A's password under tenant B's repository name is not B's credential.
    let (status, _) = registry
        .token(
            &challenge,
            &format!("repository:{their_repo}:pull"),
            Some((&their_repo, &password)),
        )
        .await?;
    assert_eq!(status, 401, "A's password as B's credential");

    // With it: its own image, pulled.
    let (status, body) = registry
        .token(&challenge, &scope, Some((&username, &password)))
        .await?;
    assert_eq!(status, 200, "{body}");
    let own = body["token"].as_str().context("token")?.to_owned();
    let (status, _) = registry
        .call(reqwest::Method::GET, &own_manifest, Some(&own))
        .await?;
    assert_eq!(status, 200, "A pulls its own image");

    // Everything else it asks for comes back empty: B's image, push, delete, the catalog.
    let asked = format!(
        "repository:{their_repo}:pull repository:{own_repo}:pull,push,delete registry:catalog:*"
    );
    let (status, body) = registry
        .token(&challenge, &asked, Some((&username, &password)))
        .await?;
    assert_eq!(status, 200, "{body}");
    let wide = body["token"].as_str().context("token")?.to_owned();
    let (status, _) = registry
        .call(reqwest::Method::GET, &their_manifest, Some(&wide))
        .await?;
    assert!(refused(status), "A pulling B's image: {status}");
    let (status, _) = registry
        .call(reqwest::Method::DELETE, &own_manifest, Some(&wide))
        .await?;
    assert!(refused(status), "A deleting its own image: {status}");
    let (status, _) = registry
        .call(
            reqwest::Method::POST,
            &format!("{own_repo}/blobs/uploads/"),
            Some(&wide),
        )
        .await?;
    assert!(refused(status), "A pushing: {status}");
    let (status, _) = registry
        .call(reqwest::Method::GET, "_catalog", Some(&wide))
        .await?;
    assert!(refused(status), "A reading the catalog: {status}");
    let (status, _) = registry
        .call(reqwest::Method::GET, &own_manifest, Some(&own))
        .await?;
    assert_eq!(status, 200, "the image is still there");

    platform
        .delete_apps(&[(&cyd, &mine), (&dov, &theirs)])
        .await
}

/// Whether `buildctl debug workers` gets an answer from BuildKit's TCP listener with `tls` (buildctl's flags).
async fn buildkit_answers(tls: &[String]) -> Result<bool> {
    let mut command = tokio::process::Command::new("buildctl");
    command
        .arg("--addr")
        .arg(var("SLIPWAY_BUILDKIT_ADDR")?)
        .args(tls)
        .args(["debug", "workers"])
        .env_remove("BUILDKIT_HOST")
        .kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(30), command.output())
        .await
        .context("buildctl did not finish in 30 s")??;
    Ok(output.status.success())
}

/// BuildKit's TCP listener, which build pods use, opens only to a client certificate of its CA, as the operator
/// gives each build: not to a plain connection, not to a client that only checks the server, not to a certificate
/// of another CA.
#[tokio::test]
async fn buildkit_answers_only_the_client_certificates_the_operator_signs() -> Result<()> {
    use slipway_controllers::build::buildkit_tls::BuildkitCa;
    let ca = BuildkitCa::from_env()
        .map_err(anyhow::Error::msg)?
        .context("SLIPWAY_BUILDKIT_CA_CERT_FILE is not set; run under `hack/test.sh e2e`")?;
    let dir = slipway_testkit::tls::TempDir::new("buildkit")?;
    let write = |name: &str, text: &str| -> Result<String> {
        let path = dir.path().join(name);
        std::fs::write(&path, text)?;
        Ok(path.display().to_string())
    };
    let signed = ca
        .client_certificate("build:test/attempt", Duration::from_secs(300))
        .map_err(anyhow::Error::msg)?;
    let ca_file = write("ca.crt", &signed.ca)?;
    let tls = |cert: &str, key: &str| -> Vec<String> {
        ["--tlscacert", &ca_file, "--tlscert", cert, "--tlskey", key]
            .map(str::to_owned)
            .to_vec()
    };

    // Another CA's certificate, made the same way.
    let other_key = rcgen::KeyPair::generate()?;
    let mut other = rcgen::CertificateParams::default();
    other.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    other
        .distinguished_name
        .push(rcgen::DnType::CommonName, "slipway BuildKit CA");
    let other_cert = other.self_signed(&other_key)?;
    let stranger = BuildkitCa::from_pem(&other_cert.pem(), &other_key.serialize_pem())
        .map_err(anyhow::Error::msg)?
        .client_certificate("build:test/attempt", Duration::from_secs(300))
        .map_err(anyhow::Error::msg)?;

    let plain = buildkit_answers(&[]).await?;
    let server_checked_only = buildkit_answers(&["--tlscacert".into(), ca_file.clone()]).await?;
    let strangers = buildkit_answers(&tls(
        &write("stranger.crt", &stranger.cert)?,
        &write("stranger.key", &stranger.key)?,
    ))
    .await?;
    let builds = buildkit_answers(&tls(
        &write("build.crt", &signed.cert)?,
        &write("build.key", &signed.key)?,
    ))
    .await?;
    println!(
        "BuildKit over TCP: plain {plain}, server-checked only {server_checked_only}, another CA's certificate \
         {strangers}, a build's certificate {builds}"
    );
    assert!(
        !plain && !server_checked_only && !strangers,
        "BuildKit answered a client it must not"
    );
    assert!(builds, "BuildKit refused a certificate its CA signed");
    Ok(())
}
