//! The chart's alerts on the installed platform (see `platform.rs`), each shown firing when its condition is made
//! true on the cluster. A real Prometheus (`hack/prometheus.sh`, started by `hack/test.sh e2e` before this module)
//! scrapes the components through scrape jobs generated from the chart's rendered PodMonitors and evaluates the
//! chart's rendered PrometheusRule, with each alert's `for` and window cut to seconds
//! (`hack/monitoring/e2e-values.yaml`). Each test breaks one thing the way it breaks in production, waits until
//! Prometheus's `/api/v1/alerts` lists the alert as firing, and mends what it broke:
//! - the data server shut down: SlipwayBackendUnreachable for the data server;
//! - the object store's backend scaled to zero, then a deploy, whose pre-deploy checkpoint cannot be stored:
//!   SlipwayBackendUnreachable for the object store and SlipwayCheckpointFailures;
//! - the api scaled to zero, then a Deploy written with kubectl, which cannot be resolved: SlipwayComponentDown for
//!   the api and SlipwayReconcileErrors for Deploys; the Deploy goes through once the api is back;
//! - a lock on the platform database's tokens table under a burst of requests: SlipwayDatabasePoolExhausted;
//! - a channel whose pods are scaled to zero while it is asked for: SlipwayEdge5xx;
//! - the deploy deadline lowered to a minute (`helm upgrade`) under a build that takes two: SlipwayDeployStuck;
//! - a custom domain's certificate from the ACME CA, which issues them for 10 days: SlipwayCertificateExpiringSoon.
//!
//! A test that takes a shared part away runs alone among the tests that use it; the others run beside each other.
//! The parts are the path every request takes (the api, its database, the object store) and the channels' data
//! server, which the static sites and the pool test do not use: the data server's test runs beside theirs. `hack/test.sh` runs this file first, on the fresh install and while the cluster
//! tier runs: it spends most of its time waiting for alert windows, and nothing else touches the release meanwhile.

#![allow(clippy::unwrap_used)]

use crate::support;

use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection};
use support::git::{Workspace, http_remote};
use support::https::TestDns;
use support::platform::{Account, Installed, VERSION_SERVER, hack, kubectl, until};
use tokio::sync::Notify;

/// The path every test's requests take: the api, the platform database behind it, and the object store the
/// deploys, checkpoints and static sites write to. Taken before `DATA_SERVER` by a test that holds both.
static REQUEST_PATH: SharedParts = SharedParts::new();
/// The channels' data server: used by the tests whose apps have a database (every template but `static`).
static DATA_SERVER: SharedParts = SharedParts::new();

/// Who holds a shared part of the platform: tests using it, side by side, or one test that takes it away.
///
/// Unlike a fair `RwLock`, a test waiting to take the part away holds back no test that only uses it: the tests
/// using it all run together first, and the ones that take it away then run one at a time. Behind a fair lock's
/// queued writer, the using tests that started after it ran only once it was done.
struct SharedParts {
    holders: Mutex<Holders>,
    released: Notify,
}

/// The tests holding a shared part now.
struct Holders {
    using: usize,
    taken_away: bool,
}

impl SharedParts {
    const fn new() -> Self {
        Self {
            holders: Mutex::new(Holders {
                using: 0,
                taken_away: false,
            }),
            released: Notify::const_new(),
        }
    }

    /// Waits until no test has a part taken away; the parts, used until the guard drops.
    async fn use_beside_others(&'static self) -> PartsHeld {
        self.wait_for(|holders| {
            (!holders.taken_away).then(|| {
                holders.using += 1;
                PartsHeld {
                    parts: self,
                    took: false,
                }
            })
        })
        .await
    }

    /// Waits until no test uses the parts or has one taken away; the parts, alone, until the guard drops.
    async fn take_alone(&'static self) -> PartsHeld {
        self.wait_for(|holders| {
            (holders.using == 0 && !holders.taken_away).then(|| {
                holders.taken_away = true;
                PartsHeld {
                    parts: self,
                    took: true,
                }
            })
        })
        .await
    }

    async fn wait_for(&self, mut held: impl FnMut(&mut Holders) -> Option<PartsHeld>) -> PartsHeld {
        loop {
            // Created before the check, so a release between the check and the wait still wakes it.
            let released = self.released.notified();
            if let Some(guard) = held(&mut self.holders.lock().unwrap()) {
                return guard;
            }
            released.await;
        }
    }
}

/// The platform's shared parts, held by one test.
struct PartsHeld {
    parts: &'static SharedParts,
    took: bool,
}

impl Drop for PartsHeld {
    fn drop(&mut self) {
        {
            let mut holders = self.parts.holders.lock().unwrap();
            if self.took {
                holders.taken_away = false;
            } else {
                holders.using -= 1;
            }
        }
        self.parts.released.notify_waiters();
    }
}
/// How long an alert may take to fire once its condition holds: a scrape and an evaluation every 5 s, a `for` of
/// 10 s at most, and a busy 2-core machine.
const FIRES_WITHIN: Duration = Duration::from_secs(180);
/// How long the components may take to come back.
const BACK_WITHIN: Duration = Duration::from_secs(300);

/// The Prometheus `hack/prometheus.sh` runs.
struct Prometheus {
    url: String,
    http: reqwest::Client,
}

impl Prometheus {
    fn from_env() -> Result<Self> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        Ok(Self {
            url: std::env::var("SLIPWAY_TEST_PROMETHEUS_URL").context(
                "SLIPWAY_TEST_PROMETHEUS_URL is not set: run under `hack/test.sh e2e`, which starts \
                 hack/prometheus.sh",
            )?,
            http: reqwest::Client::new(),
        })
    }

    async fn get(&self, path: &str) -> Result<Value> {
        let body: Value = self
            .http
            .get(format!("{}{path}", self.url))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        anyhow::ensure!(body["status"] == "success", "{path}: {body}");
        Ok(body["data"].clone())
    }

    /// The alerts pending or firing now.
    async fn alerts(&self) -> Result<Vec<Value>> {
        Ok(self.get("/api/v1/alerts").await?["alerts"]
            .as_array()
            .cloned()
            .unwrap_or_default())
    }

    /// The values of an instant query's series.
    async fn query(&self, query: &str) -> Result<Vec<f64>> {
        let data = self
            .get(&format!("/api/v1/query?query={}", urlencoding(query)))
            .await?;
        Ok(data["result"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .filter_map(|s| s["value"][1].as_str()?.parse().ok())
            .collect())
    }

    /// Waits until `alert` fires with `labels` among its labels; the alert. On timeout, says what was active and
    /// how the rule was last evaluated.
    async fn firing(&self, alert: &str, labels: &[(&str, &str)]) -> Result<Value> {
        let started = Instant::now();
        loop {
            if let Some(found) = self
                .alerts()
                .await?
                .into_iter()
                .find(|a| a["state"] == "firing" && matches(a, alert, labels))
            {
                println!(
                    "{alert} {labels:?} firing after {:.0} s: {}",
                    started.elapsed().as_secs_f64(),
                    found["annotations"]["description"]
                );
                return Ok(found);
            }
            if started.elapsed() > FIRES_WITHIN {
                let rules = self.get("/api/v1/rules?type=alert").await?;
                let rule = rules["groups"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
                    .find(|r| r["name"] == alert);
                bail!(
                    "{alert} {labels:?} did not fire within {FIRES_WITHIN:?}; active: {}; the rule: {}",
                    json!(self.alerts().await?),
                    rule.unwrap_or_default()
                );
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// Waits until `alert` with `labels` is neither pending nor firing.
    async fn quiet(&self, alert: &str, labels: &[(&str, &str)]) -> Result<()> {
        let started = Instant::now();
        while self
            .alerts()
            .await?
            .iter()
            .any(|a| matches(a, alert, labels))
        {
            if started.elapsed() > FIRES_WITHIN {
                bail!("{alert} {labels:?} still active after {FIRES_WITHIN:?}");
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        println!(
            "{alert} {labels:?} quiet after {:.0} s",
            started.elapsed().as_secs_f64()
        );
        Ok(())
    }
}

fn matches(alert: &Value, name: &str, labels: &[(&str, &str)]) -> bool {
    alert["labels"]["alertname"] == name
        && labels
            .iter()
            .all(|(k, v)| alert["labels"][*k].as_str() == Some(*v))
}

fn urlencoding(query: &str) -> String {
    query
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Runs `broken` (the test's steps while something is broken), then `mend`, whatever `broken` ended with; the
/// first failure.
async fn while_broken<T>(
    broken: impl Future<Output = Result<T>>,
    mend: impl Future<Output = Result<()>>,
) -> Result<T> {
    let outcome = broken.await;
    let mended = mend.await;
    let value = outcome?;
    mended.context("mending what the test broke")?;
    Ok(value)
}

/// Scales workload `kind/name` of the release's namespace to `replicas` and waits until it has that many ready
/// pods (none: until its pods are gone).
async fn scale(platform: &Installed, workload: &str, replicas: u32) -> Result<()> {
    let ns = platform.namespace.as_str();
    kubectl(&[
        "-n",
        ns,
        "scale",
        workload,
        &format!("--replicas={replicas}"),
    ])
    .await?;
    if replicas > 0 {
        kubectl(&["-n", ns, "rollout", "status", workload, "--timeout=300s"]).await?;
        return Ok(());
    }
    let selector = kubectl(&[
        "-n",
        ns,
        "get",
        workload,
        "-o",
        "jsonpath={.spec.selector.matchLabels}",
    ])
    .await?;
    let labels: serde_json::Map<String, Value> = serde_json::from_str(&selector)?;
    let selector = labels
        .iter()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
        .collect::<Vec<_>>()
        .join(",");
    until(
        BACK_WITHIN,
        &format!("{workload}'s pods gone"),
        async || {
            let pods = kubectl(&["-n", ns, "get", "pods", "-l", &selector, "-o", "name"]).await?;
            Ok(pods.trim().is_empty().then_some(()))
        },
    )
    .await
}

/// Pushes a static site as app `name` of `account`; the commit.
async fn push_site(
    platform: &Installed,
    account: &Account,
    ws: &Workspace,
    name: &str,
) -> Result<String> {
    ws.git(".", &["init", "-q", "-b", "master", name]).await?;
    ws.write(&format!("{name}/index.html"), "<h1>watched</h1>\n")?;
    let remote = http_remote(&platform.api, &account.token, &account.username, name);
    ws.commit_and_push(name, "site", &remote).await
}

#[tokio::test]
async fn a_test_waiting_to_take_a_part_away_holds_back_no_test_using_them() {
    use futures::FutureExt;
    let parts: &'static SharedParts = Box::leak(Box::new(SharedParts::new()));
    let first = parts.use_beside_others().await;
    let taker = tokio::spawn(async move {
        let _alone = parts.take_alone().await;
    });
    tokio::task::yield_now().await;
    let second = parts
        .use_beside_others()
        .now_or_never()
        .expect("a test using the parts waited behind one waiting to take them away");
    tokio::task::yield_now().await;
    assert!(!taker.is_finished(), "a part was taken away while in use");
    drop((first, second));
    taker.await.unwrap();
    let alone = parts
        .take_alone()
        .now_or_never()
        .expect("nobody holds them");
    assert!(parts.use_beside_others().now_or_never().is_none());
    assert!(parts.take_alone().now_or_never().is_none());
    drop(alone);
    assert!(parts.use_beside_others().now_or_never().is_some());
}

#[tokio::test]
async fn the_data_server_shut_down_fires_backend_unreachable() -> Result<()> {
    let prometheus = Prometheus::from_env()?;
    let _data_server_away = DATA_SERVER.take_alone().await;
    let labels = [("backend", "data_server")];
    // The operator's probe sees it answer first.
    let up = until(FIRES_WITHIN, "the data server probed", async || {
        let up = prometheus
            .query(r#"slipway_backend_up{backend="data_server"}"#)
            .await?;
        Ok((!up.is_empty()).then_some(up))
    })
    .await?;
    assert!(up.iter().all(|v| *v == 1.0), "{up:?}");
    prometheus
        .quiet("SlipwayBackendUnreachable", &labels)
        .await?;

    while_broken(
        async {
            hack("data-server.sh", &["halt"]).await?;
            prometheus
                .firing("SlipwayBackendUnreachable", &labels)
                .await
        },
        hack("data-server.sh", &["resume"]),
    )
    .await?;
    prometheus
        .quiet("SlipwayBackendUnreachable", &labels)
        .await?;
    Ok(())
}

#[tokio::test]
async fn the_object_store_down_fires_backend_unreachable_and_checkpoint_failures() -> Result<()> {
    let platform = Installed::from_env()?;
    let prometheus = Prometheus::from_env()?;
    let _object_store_away = REQUEST_PATH.take_alone().await;
    let _data_server = DATA_SERVER.use_beside_others().await;
    let ivy = platform.account("ivy").await?;
    let (app, channel) = platform.create_app(&ivy, "kept", "app").await?;
    let postgres = format!("/apps/{app}/channels/{channel}/postgres");
    until(BACK_WITHIN, "the channel's database ready", async || {
        let status = platform
            .call("GET", &postgres, &ivy, None)
            .await?
            .expect(200);
        Ok((status["status"] == "ready").then_some(()))
    })
    .await?;
    let ws = Workspace::new()?;
    let sha = platform.push_version_server(&ivy, &ws, "kept").await?;
    let labels = [("backend", "object_store")];
    let backend = format!("statefulset/{}-s3-backend", platform.release);
    prometheus.quiet("SlipwayCheckpointFailures", &[]).await?;
    let log = while_broken(
        async {
            scale(&platform, &backend, 0).await?;
            prometheus
                .firing("SlipwayBackendUnreachable", &labels)
                .await?;
            // A deploy's checkpoint dumps the database into the object store, which is not there: the
            // checkpoint fails, and so does the deploy, before its container could migrate data nobody kept.
            let (_, log) = platform.deploy(&ivy, &app, &channel, &sha).await?;
            prometheus
                .firing("SlipwayCheckpointFailures", &[("kind", "checkpoint")])
                .await?;
            Ok(log)
        },
        scale(&platform, &backend, 1),
    )
    .await?;
    assert_eq!(log["status"], "failed", "{log}");
    let text = log["log"].as_str().unwrap_or_default().to_owned();
    assert!(text.contains("[snapshot] failed"), "{text}");
    prometheus
        .quiet("SlipwayBackendUnreachable", &labels)
        .await?;
    Ok(())
}

#[tokio::test]
async fn the_api_down_fires_component_down_and_reconcile_errors() -> Result<()> {
    let platform = Installed::from_env()?;
    let prometheus = Prometheus::from_env()?;
    let _api_away = REQUEST_PATH.take_alone().await;
    let kai = platform.account("kai").await?;
    platform.create_app(&kai, "declared", "static").await?;
    let ws = Workspace::new()?;
    let sha = push_site(&platform, &kai, &ws, "declared").await?;
    let channel: Value = serde_json::from_str(
        &kubectl(&[
            "-n",
            &kai.namespace,
            "get",
            "channels.slipway.dev",
            "-o",
            "json",
        ])
        .await?,
    )?;
    let channel_name = channel["items"][0]["metadata"]["name"]
        .as_str()
        .context("the app's Channel")?
        .to_owned();
    let api = format!("deployment/{}-api", platform.release);
    let job = format!("{}-api", platform.release);
    let deploy_name = format!("{channel_name}-kubectl-1");
    prometheus
        .quiet("SlipwayComponentDown", &[("job", &job)])
        .await?;
    prometheus
        .quiet("SlipwayReconcileErrors", &[("kind", "Deploy")])
        .await?;
    // The alert weighs failed reconciles against all of them over its window (a minute here): the earlier tests'
    // deploys and an operator's start reconcile every Deploy, so the window is let go quiet first.
    until(
        BACK_WITHIN,
        "no Deploy reconciled for a window",
        async || {
            let runs = prometheus
                .query(r#"sum(increase(slipway_reconcile_runs_total{kind="Deploy"}[1m]))"#)
                .await?;
            Ok(runs.iter().all(|n| *n == 0.0).then_some(()))
        },
    )
    .await?;
    while_broken(
        async {
            scale(&platform, &api, 0).await?;
            prometheus
                .firing("SlipwayComponentDown", &[("job", &job)])
                .await?;
            // Written the GitOps way while the api is away: the operator cannot resolve its branch.
            let manifest = json!({
                "apiVersion": "slipway.dev/v1alpha1",
                "kind": "Deploy",
                "metadata": {"name": deploy_name, "namespace": kai.namespace},
                "spec": {"channel": channel_name, "ref": "master"},
            });
            let file = ws.path("deploy.json");
            std::fs::write(&file, manifest.to_string())?;
            kubectl(&["apply", "-f", file.to_str().unwrap()]).await?;
            prometheus
                .firing("SlipwayReconcileErrors", &[("kind", "Deploy")])
                .await
        },
        scale(&platform, &api, 1),
    )
    .await?;
    // Back, the api answers the operator and the Deploy goes live with the pushed commit.
    let resolved = until(BACK_WITHIN, "the kubectl Deploy live", async || {
        let deploy: Value = serde_json::from_str(
            &kubectl(&[
                "-n",
                &kai.namespace,
                "get",
                "deploys.slipway.dev",
                &deploy_name,
                "-o",
                "json",
            ])
            .await?,
        )?;
        Ok(match deploy["status"]["phase"].as_str() {
            Some("success") => Some(deploy["status"]["resolvedSha"].clone()),
            Some("failed") => bail!("the Deploy failed: {}", deploy["status"]),
            _ => None,
        })
    })
    .await?;
    assert_eq!(resolved, sha.as_str());
    prometheus
        .quiet("SlipwayComponentDown", &[("job", &job)])
        .await?;
    Ok(())
}

#[tokio::test]
async fn a_locked_platform_table_under_a_burst_fires_database_pool_exhausted() -> Result<()> {
    let platform = Arc::new(Installed::from_env()?);
    let prometheus = Prometheus::from_env()?;
    let _pool_taken = REQUEST_PATH.take_alone().await;
    let lee = platform.account("lee").await?;
    let url = std::env::var("SLIPWAY_PLATFORM_DATABASE_URL")
        .context("SLIPWAY_PLATFORM_DATABASE_URL: run under `hack/test.sh e2e`")?;
    let mut admin = PgConnection::connect_with(&PgConnectOptions::from_str(&url)?).await?;
    // The token is known to the api (and in its cache) before the table is locked.
    platform
        .call("GET", "/tokens", &lee, None)
        .await?
        .expect(200);
    // Prometheus has a sample of the api's timeout counter from before the burst: `increase()` sees no rise in a
    // series whose first sample already counts the timeouts (the module's Prometheus has just started, and the
    // api's pod may be new).
    until(FIRES_WITHIN, "the api's pool counter scraped", async || {
        let scraped = prometheus
            .query("slipway_db_pool_acquire_timeouts_total")
            .await?;
        Ok((!scraped.is_empty()).then_some(()))
    })
    .await?;

    // A long transaction holds the table every token listing reads, as a stuck migration or a runaway report
    // would: each listing holds a pooled connection while it waits, and the requests past the pool's size wait
    // for a connection until they are answered 503.
    sqlx::raw_sql("BEGIN; LOCK TABLE tokens IN ACCESS EXCLUSIVE MODE")
        .execute(&mut admin)
        .await?;
    let answers = Arc::new(Mutex::new(Vec::new()));
    let busy = Arc::new(AtomicUsize::new(0));
    let mut burst = Vec::new();
    for _ in 0..40 {
        let (platform, token, answers, busy) = (
            platform.clone(),
            lee.token.clone(),
            answers.clone(),
            busy.clone(),
        );
        burst.push(tokio::spawn(async move {
            let url = format!("{}/tokens", platform.api);
            let answer = platform
                .request("GET", &url, None, Some(&token), None)
                .await;
            if let Ok(a) = &answer
                && a.status == 503
            {
                busy.fetch_add(1, Ordering::Relaxed);
            }
            answers.lock().unwrap().push(
                answer
                    .map(|a| (a.status, a.json()))
                    .map_err(|e| format!("{e:#}")),
            );
        }));
    }
    let first_busy = until(
        Duration::from_secs(60),
        "a request answered 503",
        async || Ok((busy.load(Ordering::Relaxed) > 0).then_some(())),
    )
    .await;
    sqlx::raw_sql("ROLLBACK").execute(&mut admin).await?;
    for request in burst {
        request.await?;
    }
    first_busy?;
    let answers = answers.lock().unwrap().clone();
    let mut refused = 0;
    for answer in &answers {
        match answer {
            Ok((200, _)) => {}
            Ok((503, body)) => {
                refused += 1;
                assert!(body["error"]["code"].is_string(), "{body}");
            }
            other => bail!("a listing answered {other:?}"),
        }
    }
    println!(
        "{refused} of {} listings answered 503 while the table was locked",
        answers.len()
    );
    prometheus
        .firing(
            "SlipwayDatabasePoolExhausted",
            &[("reason", "acquire_timeouts")],
        )
        .await?;
    Ok(())
}

#[tokio::test]
async fn a_channel_without_ready_pods_under_requests_fires_edge_5xx() -> Result<()> {
    let platform = Arc::new(Installed::from_env()?);
    let prometheus = Prometheus::from_env()?;
    let _request_path = REQUEST_PATH.use_beside_others().await;
    let _data_server = DATA_SERVER.use_beside_others().await;
    let mo = platform.account("mo").await?;
    let (app, channel) = platform.create_app(&mo, "gone", "app").await?;
    let ws = Workspace::new()?;
    let sha = platform.push_version_server(&mo, &ws, "gone").await?;
    let (_, log) = platform.deploy(&mo, &app, &channel, &sha).await?;
    assert_eq!(log["status"], "success", "{log}");
    let host = platform.prod_host(&mo, "gone");
    platform.wait_for_page(&host, "/", "version=v1").await?;
    let deployments = kubectl(&["-n", &mo.namespace, "get", "deployments", "-o", "name"]).await?;
    let workload = deployments
        .lines()
        .next()
        .context("the channel's Deployment")?
        .to_owned();

    // Visitors keep asking while the channel's pods are gone (a crash, a scale-down): the edge answers them 503.
    let stop = Arc::new(AtomicBool::new(false));
    let statuses = Arc::new(Mutex::new(std::collections::BTreeMap::new()));
    let visitors = {
        let (platform, stop, statuses, host) = (
            platform.clone(),
            stop.clone(),
            statuses.clone(),
            host.clone(),
        );
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                if let Ok(a) = platform.edge_get(&host, "/").await {
                    *statuses.lock().unwrap().entry(a.status).or_insert(0) += 1;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let ns = mo.namespace.clone();
    let fired = while_broken(
        async {
            kubectl(&["-n", &ns, "scale", &workload, "--replicas=0"]).await?;
            prometheus.firing("SlipwayEdge5xx", &[]).await
        },
        async {
            kubectl(&["-n", &ns, "scale", &workload, "--replicas=1"]).await?;
            platform.wait_for_page(&host, "/", "version=v1").await?;
            Ok(())
        },
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    visitors.await?;
    fired?;
    let statuses = statuses.lock().unwrap().clone();
    println!("the visitors' answers by status: {statuses:?}");
    assert!(statuses.get(&503).is_some_and(|n| *n > 0), "{statuses:?}");
    Ok(())
}

#[tokio::test]
async fn a_build_past_the_deploy_deadline_fires_deploy_stuck() -> Result<()> {
    let platform = Installed::from_env()?;
    let prometheus = Prometheus::from_env()?;
    let _request_path = REQUEST_PATH.use_beside_others().await;
    let _data_server = DATA_SERVER.use_beside_others().await;
    let ned = platform.account("ned").await?;
    let (app, channel) = platform.create_app(&ned, "slow", "docker").await?;
    let ws = Workspace::new()?;
    ws.git(".", &["init", "-q", "-b", "master", "slow"]).await?;
    ws.write("slow/server.py", VERSION_SERVER)?;
    ws.write("slow/VERSION", "v1\n")?;
    // A build step that takes two minutes, twice the deadline below; the account's name in it keeps BuildKit from
    // answering it from its cache.
    ws.write(
        "slow/Dockerfile",
        format!(
            "FROM python:3.13-slim\nRUN echo {} >/build-of && sleep 120\nCOPY server.py VERSION /app/\n\
             CMD [\"python3\", \"/app/server.py\"]\n",
            ned.username
        ),
    )?;
    let remote = http_remote(&platform.api, &ned.token, &ned.username, "slow");
    let sha = ws.commit_and_push("slow", "v1", &remote).await?;
    prometheus.quiet("SlipwayDeployStuck", &[]).await?;

    let log = while_broken(
        async {
            hack("install.sh", &["set", "workloads.deployDeadlineMinutes=1"]).await?;
            let id = platform.queue_deploy(&ned, &app, &channel, &sha).await?;
            prometheus.firing("SlipwayDeployStuck", &[]).await?;
            platform.finished(&ned, &app, &channel, &id).await
        },
        hack("install.sh", &["set", "workloads.deployDeadlineMinutes=60"]),
    )
    .await?;
    assert_eq!(log["status"], "success", "{log}");
    prometheus.quiet("SlipwayDeployStuck", &[]).await?;
    Ok(())
}

#[tokio::test]
async fn a_certificate_from_the_acme_ca_fires_certificate_expiring_soon() -> Result<()> {
    let platform = Installed::from_env()?;
    let prometheus = Prometheus::from_env()?;
    let dns = TestDns::at(
        std::env::var("SLIPWAY_PLATFORM_DNS_API")
            .context("SLIPWAY_PLATFORM_DNS_API: run under `hack/test.sh e2e`")?,
    );
    let _request_path = REQUEST_PATH.use_beside_others().await;
    let ola = platform.account("ola").await?;
    let (app, channel) = platform.create_app(&ola, "signed", "static").await?;
    let ws = Workspace::new()?;
    let sha = push_site(&platform, &ola, &ws, "signed").await?;
    let (_, log) = platform.deploy(&ola, &app, &channel, &sha).await?;
    assert_eq!(log["status"], "success", "{log}");
    prometheus
        .quiet("SlipwayCertificateExpiringSoon", &[])
        .await?;

    // The custom domain's records, its verification, and the certificate the operator orders for it.
    let domain = format!("shop-{}.example", ola.username);
    let verified = platform
        .add_verified_domain(&ola, &app, &channel, &domain, &dns)
        .await?;
    assert_eq!(verified["status"], "verified", "{verified}");
    let not_after = until(BACK_WITHIN, "the domain's certificate", async || {
        support::platform::domain_certificate(&ola).await
    })
    .await?;
    println!("{domain}: certificate valid until {not_after}");
    let alert = prometheus
        .firing("SlipwayCertificateExpiringSoon", &[])
        .await?;
    // The alert's value is the seconds the earliest certificate has left: the 10 days the CA gives, or less.
    let left: f64 = alert["value"].as_str().unwrap_or_default().parse()?;
    assert!(
        left > 9.0 * 86400.0 && left <= 10.0 * 86400.0,
        "{left} s left: {alert}"
    );
    Ok(())
}
