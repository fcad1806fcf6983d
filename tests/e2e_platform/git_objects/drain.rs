//! A second node joins (`hack/node.sh join 1`), and each node is drained in turn (`kubectl drain`, which evicts as
//! the PodDisruptionBudgets allow) under a stream of pushes, changesets, deploys, API reads and requests to a
//! deployed app. Every platform operation succeeds, or succeeds on one retry; every acknowledged push is on its
//! branch afterwards. The app runs one pod, and keeps answering: its budget holds the eviction until the operator
//! has moved the pod to the other node (a new pod ready first).

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::json;
use support::git::Workspace;
use support::platform::{Account, Installed, hack, kubectl, until};

/// The pause before an operation's one retry: long enough for a moved pod's replacement to be ready.
const RETRY_AFTER: Duration = Duration::from_secs(10);

/// The pause between two changesets, two API reads, two requests of the app's visitor.
const REQUEST_EVERY: Duration = Duration::from_millis(250);

/// What the app answers (every deploy is of `v1`: the changesets write another file).
const VERSION: &str = "version=v1";

const NODES: [&str; 2] = ["slipway-node", "slipway-node-1"];

/// What one kind of operation did during a drain.
#[derive(Default, Debug)]
struct Tally {
    ok: u64,
    /// Why the operations that needed their retry failed the first time.
    retried: Vec<String>,
    failed: Vec<String>,
}

impl Tally {
    /// Runs `op`, and once more after [`RETRY_AFTER`] when it fails.
    async fn run<T, F: Future<Output = Result<T>>>(
        &mut self,
        mut op: impl FnMut() -> F,
    ) -> Option<T> {
        match op().await {
            Ok(value) => {
                self.ok += 1;
                return Some(value);
            }
            Err(e) => self.retried.push(format!("{e:#}")),
        }
        tokio::time::sleep(RETRY_AFTER).await;
        match op().await {
            Ok(value) => {
                self.ok += 1;
                Some(value)
            }
            Err(e) => {
                self.failed.push(format!("{e:#}"));
                None
            }
        }
    }

    fn summary(&self, kind: &str) -> String {
        format!("{kind} {} ok ({} retried)", self.ok, self.retried.len())
    }
}

/// The app's visitor: requests that failed, and the longest run of failures.
#[derive(Default, Debug)]
struct Visits {
    ok: u64,
    failed: u64,
    longest_outage: Duration,
}

struct Setting {
    platform: Arc<Installed>,
    account: Account,
    ws: Arc<Workspace>,
    /// The moved app's remote, through the api's node port.
    remote: String,
    /// The deployed site: its id, its prod channel, its hostname.
    site: (String, String, String),
    stop: Arc<AtomicBool>,
    /// The deployed app's name, the prefix of its pods' names.
    app_name: String,
}

/// Joins a second node, drains each node in turn under load, and has the second node leave again. `ws` holds a
/// clone of the moved app at `dir`.
pub(super) async fn each_node_drained_under_load(
    account: &Account,
    ws: Arc<Workspace>,
    remote: &str,
) -> Result<()> {
    let platform = Arc::new(Installed::from_env()?);
    hack("node.sh", &["join", "1"]).await?;
    // The node ports answer on the first node's address whichever node the pods run on (with `Local` they answer
    // only where a pod of theirs runs, and a drained node runs none).
    super::set_api(
        &platform,
        account,
        &[
            "api.service.externalTrafficPolicy=Cluster",
            "edge.service.externalTrafficPolicy=Cluster",
        ],
    )
    .await?;

    // The deployed app the visitor asks, and whose master the changesets write.
    let (site_id, site_channel) = platform.create_app(account, "drained", "app").await?;
    let sha = platform
        .push_version_server(account, &ws, "drained")
        .await?;
    platform
        .deploy(account, &site_id, &site_channel, &sha)
        .await?;
    let site_host = platform.prod_host(account, "drained");
    platform.wait_for_page(&site_host, "/", VERSION).await?;

    ws.git(".", &["clone", "-q", remote, "pusher"]).await?;
    ws.git("pusher", &["checkout", "-q", "-b", "drain-pushes"])
        .await?;
    let setting = Arc::new(Setting {
        platform: platform.clone(),
        account: account.clone(),
        ws: ws.clone(),
        remote: remote.to_owned(),
        site: (site_id.clone(), site_channel, site_host),
        stop: Arc::new(AtomicBool::new(false)),
        app_name: "drained".to_owned(),
    });

    a_missing_budget_is_made_again(&setting).await?;
    cordon_moves_the_app(&setting).await?;

    let mut acknowledged = Vec::new();
    for node in NODES {
        setting.stop.store(false, Ordering::SeqCst);
        let pushes = tokio::spawn(pushes(setting.clone()));
        let changesets = tokio::spawn(stream(setting.clone(), REQUEST_EVERY, changeset));
        let deploys = tokio::spawn(stream(setting.clone(), Duration::ZERO, deploy));
        let reads = tokio::spawn(stream(setting.clone(), REQUEST_EVERY, read));
        let visits = tokio::spawn(visits(setting.clone()));
        let started = Instant::now();
        kubectl(&[
            "drain",
            node,
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            "--force",
            "--timeout=600s",
        ])
        .await
        .with_context(|| format!("draining {node}"))?;
        let drained_in = started.elapsed();
        // The app answers again on the other node.
        platform
            .wait_for_page(&setting.site.2, "/", VERSION)
            .await?;
        setting.stop.store(true, Ordering::SeqCst);
        let (pushes, acked) = pushes.await??;
        let changesets = changesets.await??;
        let deploys = deploys.await??;
        let reads = reads.await??;
        let visits = visits.await??;
        kubectl(&["uncordon", node]).await?;
        println!(
            "drained {node} in {drained_in:.0?}: {}, {}, {}, {}; the app answered {} requests, failed {}, \
             longest outage {:.1?}",
            pushes.summary("pushes"),
            changesets.summary("changesets"),
            deploys.summary("deploys"),
            reads.summary("API reads"),
            visits.ok,
            visits.failed,
            visits.longest_outage
        );
        for (kind, tally) in [
            ("push", &pushes),
            ("changeset", &changesets),
            ("deploy", &deploys),
            ("API read", &reads),
        ] {
            for reason in &tally.retried {
                println!("  a {kind} retried after: {reason}");
            }
            if !tally.failed.is_empty() || tally.ok == 0 {
                bail!(
                    "draining {node}: {kind}s failed twice in a row: {:?}",
                    tally.failed
                );
            }
        }
        assert_eq!(
            visits.failed, 0,
            "draining {node}: the app stopped answering for {:.1?}",
            visits.longest_outage
        );
        acknowledged.extend(acked);
    }

    // Every acknowledged push is on the branch.
    ws.git("pusher", &["fetch", "-q", remote, "drain-pushes"])
        .await?;
    for sha in &acknowledged {
        ws.git(
            "pusher",
            &["merge-base", "--is-ancestor", sha, "FETCH_HEAD"],
        )
        .await
        .with_context(|| format!("the acknowledged push {sha} is not on drain-pushes"))?;
    }
    println!(
        "{} acknowledged pushes, all on their branch",
        acknowledged.len()
    );

    hack("node.sh", &["leave", "1"]).await?;
    until(Duration::from_secs(60), "one node left", async || {
        let nodes = kubectl(&["get", "nodes", "-o", "name"]).await?;
        Ok((nodes.lines().count() == 1).then_some(()))
    })
    .await?;
    no_other_node_gives_the_move_up(&setting).await?;
    platform.delete_app(account, &site_id).await?;
    super::set_api(
        &platform,
        account,
        &[
            "api.service.externalTrafficPolicy=Local",
            "edge.service.externalTrafficPolicy=Local",
        ],
    )
    .await
}

/// The namespace the app's pods run in, and the names of its PodDisruptionBudgets.
async fn app_budgets(s: &Setting) -> Result<(String, String)> {
    let (_, pod) = app_pods(s)
        .await?
        .into_iter()
        .next()
        .context("the app runs no pod")?;
    let namespace = kubectl(&[
        "get",
        "pods",
        "-A",
        "--field-selector",
        &format!("metadata.name={pod}"),
        "-o",
        "jsonpath={.items[0].metadata.namespace}",
    ])
    .await?;
    let budgets = kubectl(&[
        "-n",
        &namespace,
        "get",
        "poddisruptionbudgets",
        "-o",
        "name",
    ])
    .await?;
    Ok((namespace, budgets.trim().to_owned()))
}

/// An app whose budget is missing (deployed before budgets, or while they were off) gets it from the operator's
/// pass over its namespace, which a change of the namespace starts.
async fn a_missing_budget_is_made_again(s: &Arc<Setting>) -> Result<()> {
    let (namespace, budgets) = app_budgets(s).await?;
    assert!(!budgets.is_empty(), "the deployed app has no budget");
    kubectl(&["-n", &namespace, "delete", "poddisruptionbudgets", "--all"]).await?;
    let poke = format!("slipway.dev/test-poke={}", uuid::Uuid::new_v4().simple());
    kubectl(&["annotate", "namespace", &namespace, &poke, "--overwrite"]).await?;
    let made = until(
        Duration::from_secs(120),
        "the operator making the app's budget again",
        async || {
            let (_, now) = app_budgets(s).await?;
            Ok((!now.is_empty()).then_some(now))
        },
    )
    .await?;
    assert_eq!(made, budgets, "the budget made again is not the deploy's");
    println!("deleted the app's budget: the operator's pass over its namespace made {made} again");
    Ok(())
}

/// A cordon alone, with no drain and no deploy under way, moves the app: the operator starts its new pod on the
/// other node first, records a `MovedOffNode` Event, and the app answers every request meanwhile.
async fn cordon_moves_the_app(s: &Arc<Setting>) -> Result<()> {
    let (node, _) = app_pods(s)
        .await?
        .into_iter()
        .next()
        .context("the app runs no pod")?;
    s.stop.store(false, Ordering::SeqCst);
    let visits = tokio::spawn(visits(s.clone()));
    kubectl(&["cordon", &node]).await?;
    until(
        Duration::from_secs(180),
        "the app's pod moving off the cordoned node",
        async || {
            let pods = app_pods(s).await?;
            Ok((!pods.is_empty() && pods.iter().all(|(n, _)| *n != node)).then_some(()))
        },
    )
    .await?;
    s.stop.store(true, Ordering::SeqCst);
    let visits = visits.await??;
    kubectl(&["uncordon", &node]).await?;
    let events = kubectl(&[
        "get",
        "events",
        "-A",
        "--field-selector",
        "reason=MovedOffNode",
        "-o",
        "jsonpath={range .items[*]}{.message}{\"\\n\"}{end}",
    ])
    .await?;
    let moved = format!("off node {node}, which is cordoned");
    assert!(
        events.lines().any(|l| l.contains(&moved)),
        "no MovedOffNode event for {node}: {events}"
    );
    println!(
        "cordoned {node}: the operator moved the app's pod to the other node; the app answered {} requests, \
         failed {}",
        visits.ok, visits.failed
    );
    assert_eq!(
        visits.failed, 0,
        "the app stopped answering for {:.1?}",
        visits.longest_outage
    );
    Ok(())
}

/// With one node left, a cordon cannot move the app: the operator gives the move up (a `MoveAbandoned` Event) and
/// deletes the app's budget, so that a drain would evict the pod rather than wait forever.
async fn no_other_node_gives_the_move_up(s: &Arc<Setting>) -> Result<()> {
    let (node, _) = app_pods(s)
        .await?
        .into_iter()
        .next()
        .context("the app runs no pod")?;
    let (namespace, budgets) = app_budgets(s).await?;
    assert!(!budgets.is_empty(), "the app has no PodDisruptionBudget");
    kubectl(&["cordon", &node]).await?;
    let given_up = until(
        Duration::from_secs(120),
        "the operator giving the move up",
        async || {
            let events = kubectl(&[
                "-n",
                &namespace,
                "get",
                "events",
                "--field-selector",
                "reason=MoveAbandoned",
                "-o",
                "jsonpath={range .items[*]}{.message}{\"\\n\"}{end}",
            ])
            .await?;
            Ok(events
                .lines()
                .find(|l| l.contains("no other node takes pods"))
                .map(str::to_owned))
        },
    )
    .await;
    kubectl(&["uncordon", &node]).await?;
    println!("cordoned the last node: {}", given_up?);
    assert_eq!(
        app_budgets(s).await?.1,
        "",
        "the budget outlived the abandoned move"
    );
    // Marked, so that the operator's pass over the namespace does not make the budget again.
    let marks = kubectl(&[
        "-n",
        &namespace,
        "get",
        "deployments",
        "-o",
        "jsonpath={.items[*].metadata.annotations.slipway\\.dev/no-disruption-budget}",
    ])
    .await?;
    assert!(
        marks.contains("no other node takes pods"),
        "the Deployment is not marked to keep no budget: {marks:?}"
    );
    Ok(())
}

/// The app's running pods (not terminating): (node, name).
async fn app_pods(s: &Setting) -> Result<Vec<(String, String)>> {
    let listed = kubectl(&[
        "get",
        "pods",
        "-A",
        "-l",
        "app.kubernetes.io/component=run",
        "-o",
        "jsonpath={range .items[*]}{.metadata.deletionTimestamp}|{.spec.nodeName}|{.metadata.name}{\"\\n\"}{end}",
    ])
    .await?;
    let prefix = format!("{}-", s.app_name);
    Ok(listed
        .lines()
        .filter_map(|l| {
            let mut parts = l.splitn(3, '|');
            let (deleting, node, name) = (parts.next()?, parts.next()?, parts.next()?);
            (deleting.is_empty() && name.starts_with(&prefix))
                .then(|| (node.to_owned(), name.to_owned()))
        })
        .collect())
}

/// Commits and pushes to `drain-pushes` until stopped; answers the tally and the acknowledged commits.
async fn pushes(s: Arc<Setting>) -> Result<(Tally, Vec<String>)> {
    let (mut tally, mut acked) = (Tally::default(), Vec::new());
    let mut n = 0;
    while !s.stop.load(Ordering::SeqCst) {
        n += 1;
        // Unique across drains, which each count from 1.
        let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?;
        s.ws.write("pusher/drain.txt", format!("{n} {}\n", stamp.as_nanos()))?;
        s.ws.git("pusher", &["add", "drain.txt"]).await?;
        s.ws.git("pusher", &["commit", "-qm", &format!("drain push {n}")])
            .await?;
        let shared = s.clone();
        let pushed = tally.run(move || push(shared.clone())).await;
        if pushed.is_some() {
            acked.push(
                s.ws.git("pusher", &["rev-parse", "HEAD"])
                    .await?
                    .trim()
                    .to_owned(),
            );
        }
    }
    Ok((tally, acked))
}

async fn push(s: Arc<Setting>) -> Result<()> {
    let push =
        s.ws.try_git("pusher", &["push", &s.remote, "drain-pushes"])
            .await?;
    if !push.ok {
        bail!("{}", push.stderr)
    }
    Ok(())
}

/// Runs `op` (with a count from 1) until stopped, `pause` apart, each with its one retry.
async fn stream<F: Future<Output = Result<()>>>(
    s: Arc<Setting>,
    pause: Duration,
    op: impl Fn(Arc<Setting>, u64) -> F,
) -> Result<Tally> {
    let mut tally = Tally::default();
    let mut n = 0;
    while !s.stop.load(Ordering::SeqCst) {
        n += 1;
        tally.run(|| op(s.clone(), n)).await;
        tokio::time::sleep(pause).await;
    }
    Ok(tally)
}

/// Writes the site's master through the changeset API.
async fn changeset(s: Arc<Setting>, n: u64) -> Result<()> {
    let body = json!({
        "message": format!("drain changeset {n}"),
        "changes": {"changes.txt": format!("{n}\n")},
    });
    let path = format!("/apps/{}/changeset", s.site.0);
    s.platform
        .call("POST", &path, &s.account, Some(body))
        .await?
        .ok(200)?;
    Ok(())
}

/// Deploys the site's master and waits for the deploy to end.
async fn deploy(s: Arc<Setting>, _: u64) -> Result<()> {
    let (app, channel) = (&s.site.0, &s.site.1);
    let path = format!("/apps/{app}/tree?ref=master");
    let head = s
        .platform
        .call("GET", &path, &s.account, None)
        .await?
        .ok(200)
        .context("tree")?;
    let sha = head["sha"].as_str().context("the tree's sha")?;
    let id = s
        .platform
        .queue_deploy(&s.account, app, channel, sha)
        .await?;
    let log = s.platform.finished(&s.account, app, channel, &id).await?;
    if log["status"] == "success" {
        Ok(())
    } else {
        bail!("deploy {id}: {log}")
    }
}

/// `GET /apps`.
async fn read(s: Arc<Setting>, _: u64) -> Result<()> {
    s.platform
        .call("GET", "/apps", &s.account, None)
        .await?
        .ok(200)?;
    Ok(())
}

/// Asks the site until stopped; counts the failures and the longest run of them.
async fn visits(s: Arc<Setting>) -> Result<Visits> {
    let mut visits = Visits::default();
    let mut down_since: Option<Instant> = None;
    while !s.stop.load(Ordering::SeqCst) {
        let up = s
            .platform
            .edge_get(&s.site.2, "/")
            .await
            .is_ok_and(|a| a.status == 200 && a.text().contains(VERSION));
        if up {
            visits.ok += 1;
            if let Some(since) = down_since.take() {
                visits.longest_outage = visits.longest_outage.max(since.elapsed());
            }
        } else {
            visits.failed += 1;
            down_since.get_or_insert_with(Instant::now);
        }
        tokio::time::sleep(REQUEST_EVERY).await;
    }
    Ok(visits)
}
