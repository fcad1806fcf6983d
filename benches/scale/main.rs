//! The platform at 10,000 channels: the webhook, the API, the operator and the edge run as processes of the release
//! binary (`platform`) on a control plane and Postgres of the bench's own; 1,000 accounts get 10,000 static
//! channels through the REST API; then static deploys churn on 300 channels while the bench measures.
//!
//! It prints, phase by phase with each phase's duration:
//! - each component's memory (VmRSS, and VmHWM, its peak) at start, at 10,000 channels settled, and under churn,
//!   and operator + API + edge together against the 512 MiB target;
//! - the time from a change to its reconcile, seen from outside the platform by the bench's own watches
//!   (`observe`): a channel created through the API (from the call's start) until its status shows
//!   `observedGeneration` equal to its generation, during the bulk creation (a backlog) and one at a time under
//!   churn; and a static deploy, from the deploy call's start until the Deploy's phase is `success`;
//! - `GET /apps` for an account with 100 apps: one client alone and 16 at once, before and during the churn, with
//!   requests per second.
//!
//! Needs the control plane and Postgres (`hack/bench.sh scale` starts them). It asserts nothing about time.

#[path = "../common/closed_loop.rs"]
mod closed_loop;

mod client;
mod observe;
mod platform;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use futures::{StreamExt, TryStreamExt};
use serde_json::json;

use client::{Rest, User, create_user, field};
use closed_loop::{Percentiles, load};
use observe::{Observer, channel_key};
use platform::Platform;

/// Accounts, among them [`BIG`] and the [`PROBES`] accounts.
const USERS: usize = 1000;
/// The account with 100 apps (one channel each) whose `GET /apps` is measured (plan `pro`: 100 channels).
const BIG_APPS: usize = 100;
/// Accounts (plan `pro`) with one app at first, where channels are created one at a time under churn.
const PROBES: usize = 10;
/// Channels created on each probe account under churn, one every [`PROBE_EVERY`].
const PROBE_CHANNELS: usize = 20;
const PROBE_EVERY: Duration = Duration::from_millis(250);
/// Every other account (plan `builder`, 10 channels): two apps of five channels (prod and four branches).
const APPS_PER_USER: usize = 2;
const CHANNELS_PER_APP: usize = 5;
/// Requests in flight while the channels are created.
const CREATORS: usize = 16;
/// Channels whose static deploys churn, and how many deploys run at once.
const CHURN_CHANNELS: usize = 300;
const CHURN_WORKERS: usize = 8;
/// A deploy not seen finished by then counts as lost.
const DEPLOY_WITHIN: Duration = Duration::from_secs(120);
/// How long the 10,000 channels may take to be reconciled after the last is created.
const SETTLE_WITHIN: Duration = Duration::from_secs(900);
const GET_APPS_CONCURRENCY: usize = 16;
const MEASURE: Duration = Duration::from_secs(10);

#[tokio::main]
async fn main() -> Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let started = Instant::now();
    let kube = slipway_testkit::client().await?;
    let observer = Observer::start(&kube);
    let mut phases = Phases::new();

    let mut platform = Platform::start(&kube).await?;
    phases.end("start the webhook, API, operator and edge");
    for (name, pid) in platform.pids() {
        eprintln!("[scale] {name}: pid {pid}");
    }
    let mut memory = vec![("started, no channels", platform.memory()?)];

    let db = slipway_store::db::connect(&platform.db_url).await?;
    let rest = Rest::new(&platform.api_url)?;
    let users = create_users(&db, &kube).await?;
    phases.end(&format!("create {USERS} accounts"));

    let bulk = create_channels(&rest, &users).await?;
    platform.check_running()?;
    phases.end(&format!(
        "create {} channels ({} apps) through the API",
        bulk.started.len(),
        bulk.apps
    ));

    settle(&observer, &bulk.started).await?;
    let bulk_reconcile = reconcile_times(&observer, &bulk.started);
    phases.end("wait until every channel is reconciled");
    memory.push(("10,000 channels, settled", platform.memory()?));

    let big = &users.big;
    let get_apps = GetApps::new(&platform.api_url, big)?;
    let quiet = get_apps.measure().await?;
    phases.end("GET /apps alone");

    let targets = churn_targets(&rest, &users.others[..CHURN_CHANNELS], &bulk.prod).await?;
    phases.end(&format!(
        "commit two versions on each of {CHURN_CHANNELS} channels"
    ));

    let churn = Churn::start(rest.clone(), observer.clone(), targets);
    let probes = tokio::spawn(create_probes(
        rest.clone(),
        users.probes.clone(),
        bulk.probe_apps.clone(),
    ));
    let busy = get_apps.measure().await?;
    let probe_started = probes.await??;
    memory.push(("10,000 channels, under churn", platform.memory()?));
    let deploys = churn.stop().await?;
    platform.check_running()?;
    phases.end(&format!(
        "churn: static deploys on {CHURN_CHANNELS} channels, {CHURN_WORKERS} at once, and {} channels created one by one",
        probe_started.len()
    ));
    settle(&observer, &probe_started).await?;
    let probe_reconcile = reconcile_times(&observer, &probe_started);
    let served = edge_serves(&rest, &platform, &deploys).await;
    platform.check_running()?;

    println!();
    println!(
        "scale: {} accounts, {} channels in {} apps (+{} created under churn); each phase:",
        USERS,
        bulk.started.len(),
        bulk.apps,
        probe_started.len()
    );
    phases.print();
    println!("memory (VmRSS now / VmHWM peak):");
    for (when, components) in &memory {
        print_memory(when, components);
    }
    println!("reconcile (a change until the bench's own watch sees it done):");
    print_latency(
        "  channel created during the bulk creation (a backlog of up to 16 at a time), call start until status.observedGeneration = generation",
        &bulk_reconcile,
    );
    print_latency(
        &format!(
            "  channel created under churn, one every {} ms, call start until status.observedGeneration = generation",
            PROBE_EVERY.as_millis()
        ),
        &probe_reconcile,
    );
    print_latency(
        "  static deploy under churn, deploy call start until the Deploy's phase is success",
        &deploys.reconcile,
    );
    println!(
        "  deploys: {} succeeded, {} failed, {} not seen finished within {:?} ({:.1} deploys/s)",
        deploys.reconcile.count(),
        deploys.failed,
        deploys.lost,
        DEPLOY_WITHIN,
        deploys.reconcile.count() as f64 / deploys.elapsed.as_secs_f64()
    );
    println!("API calls:");
    print_latency("  POST /apps (and its prod channel)", &bulk.app_calls);
    print_latency("  POST /apps/{id}/channels", &bulk.channel_calls);
    print_latency("  POST .../deploy under churn", &deploys.calls);
    println!("GET /apps ({BIG_APPS} apps):");
    quiet.print("no other load");
    busy.print("under churn");
    println!("edge: {served}");
    println!("total {:.0}s", started.elapsed().as_secs_f64());
    Ok(())
}

/// Each phase's name and duration, as it ends.
struct Phases {
    done: Vec<(String, Duration)>,
    last: Instant,
}

impl Phases {
    fn new() -> Self {
        Self {
            done: Vec::new(),
            last: Instant::now(),
        }
    }

    fn end(&mut self, name: &str) {
        let took = self.last.elapsed();
        self.last = Instant::now();
        eprintln!("[scale] {name}: {:.1}s", took.as_secs_f64());
        self.done.push((name.to_owned(), took));
    }

    fn print(&self) {
        for (name, took) in &self.done {
            println!("  {:>7.1}s  {name}", took.as_secs_f64());
        }
    }
}

fn print_memory(when: &str, components: &[(&str, platform::Memory)]) {
    let mib = |kib: u64| kib as f64 / 1024.0;
    let parts: Vec<String> = components
        .iter()
        .map(|(name, m)| format!("{name} {:.0}/{:.0} MiB", mib(m.rss_kib), mib(m.peak_kib)))
        .collect();
    let serving: u64 = components
        .iter()
        .filter(|(name, _)| matches!(*name, "operator" | "api" | "edge"))
        .map(|(_, m)| m.rss_kib)
        .sum();
    println!(
        "  {when}: {}; operator + api + edge {:.0} MiB (target 512 MiB)",
        parts.join(", "),
        mib(serving)
    );
}

fn print_latency(what: &str, p: &Percentiles) {
    println!(
        "{what}: n={}, p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        p.count(),
        p.ms(0.50),
        p.ms(0.99),
        p.max_ms().unwrap_or(0.0)
    );
}

/// The accounts by role.
struct Users {
    big: User,
    probes: Vec<User>,
    others: Vec<User>,
}

async fn create_users(db: &sqlx::PgPool, kube: &kube::Client) -> Result<Users> {
    let plan = |i: usize| if i <= PROBES { "pro" } else { "builder" };
    let made: Vec<(usize, User)> = futures::stream::iter(0..USERS)
        .map(|i| async move {
            let user = create_user(db, kube, &format!("u{i:04}"), plan(i)).await?;
            Ok::<_, anyhow::Error>((i, user))
        })
        .buffer_unordered(CREATORS)
        .try_collect()
        .await?;
    let mut made: Vec<User> = {
        let mut made = made;
        made.sort_by_key(|(i, _)| *i);
        made.into_iter().map(|(_, u)| u).collect()
    };
    let others = made.split_off(PROBES + 1);
    let probes = made.split_off(1);
    let big = made.pop().context("the big account")?;
    Ok(Users {
        big,
        probes,
        others,
    })
}

/// What the bulk creation made and how long its calls took.
#[derive(Default)]
struct Bulk {
    /// Channel key -> when its creating call started.
    started: HashMap<String, Instant>,
    apps: usize,
    app_calls: Percentiles,
    channel_calls: Percentiles,
    /// Username -> (app id, prod channel id) of its first app.
    prod: HashMap<String, (String, String)>,
    /// The probe accounts' apps, by username.
    probe_apps: HashMap<String, String>,
}

/// Progress of the bulk creation, printed every 1,000 channels.
struct Progress {
    total: usize,
    done: AtomicUsize,
    window: Mutex<(Instant, Vec<Duration>)>,
    started: Instant,
}

impl Progress {
    fn channel_made(&self, call: Duration) {
        let mut window = self.window.lock().unwrap_or_else(|e| e.into_inner());
        window.1.push(call);
        let done = self.done.fetch_add(1, Ordering::Relaxed) + 1;
        if done.is_multiple_of(1000) || done == self.total {
            let calls = Percentiles::new(std::mem::take(&mut window.1));
            eprintln!(
                "[scale] channels {done}/{}: {:.0}s in all, the last {} in {:.1}s, their calls p50 {:.0} ms p99 {:.0} ms",
                self.total,
                self.started.elapsed().as_secs_f64(),
                calls.count(),
                window.0.elapsed().as_secs_f64(),
                calls.ms(0.5),
                calls.ms(0.99)
            );
            window.0 = Instant::now();
        }
    }
}

/// One account's apps: (name, channels besides prod).
fn apps_of(index: usize) -> Vec<(String, usize)> {
    match index {
        0 => (0..BIG_APPS).map(|i| (format!("site{i:03}"), 0)).collect(),
        i if i <= PROBES => vec![("probe".to_owned(), 0)],
        _ => ["alpha", "beta"]
            .iter()
            .take(APPS_PER_USER)
            .map(|a| ((*a).to_owned(), CHANNELS_PER_APP - 1))
            .collect(),
    }
}

async fn create_channels(rest: &Rest, users: &Users) -> Result<Bulk> {
    let all: Vec<(usize, &User)> = std::iter::once(&users.big)
        .chain(&users.probes)
        .chain(&users.others)
        .enumerate()
        .collect();
    let total: usize = all
        .iter()
        .map(|(i, _)| {
            apps_of(*i)
                .iter()
                .map(|(_, extra)| 1 + extra)
                .sum::<usize>()
        })
        .sum();
    let progress = Progress {
        total,
        done: AtomicUsize::new(0),
        window: Mutex::new((Instant::now(), Vec::new())),
        started: Instant::now(),
    };
    eprintln!("[scale] creating {total} channels, {CREATORS} calls at a time");
    let progress = &progress;
    let per_user: Vec<AccountMade> =
        futures::stream::iter(all)
            .map(|(i, user)| async move {
                create_account_channels(rest, user, &apps_of(i), progress).await
            })
            .buffer_unordered(CREATORS)
            .try_collect()
            .await?;
    let mut bulk = Bulk::default();
    let (mut app_calls, mut channel_calls) = (Vec::new(), Vec::new());
    for made in per_user {
        bulk.started.extend(made.started);
        bulk.apps += made.app_calls.len();
        app_calls.extend(made.app_calls);
        channel_calls.extend(made.channel_calls);
        if let Some(first) = made.first_prod {
            bulk.prod.insert(made.username.clone(), first.clone());
            bulk.probe_apps.insert(made.username, first.0);
        }
    }
    bulk.app_calls = Percentiles::new(app_calls);
    bulk.channel_calls = Percentiles::new(channel_calls);
    Ok(bulk)
}

struct AccountMade {
    username: String,
    started: Vec<(String, Instant)>,
    app_calls: Vec<Duration>,
    channel_calls: Vec<Duration>,
    first_prod: Option<(String, String)>,
}

async fn create_account_channels(
    rest: &Rest,
    user: &User,
    apps: &[(String, usize)],
    progress: &Progress,
) -> Result<AccountMade> {
    let mut made = AccountMade {
        username: user.username.clone(),
        started: Vec::new(),
        app_calls: Vec::new(),
        channel_calls: Vec::new(),
        first_prod: None,
    };
    for (app, extra) in apps {
        let t = Instant::now();
        made.started
            .push((channel_key(&user.namespace, &format!("{app}.prod")), t));
        let view = rest
            .post(user, "/apps", json!({"name": app, "template": "static"}))
            .await?;
        made.app_calls.push(t.elapsed());
        progress.channel_made(t.elapsed());
        let app_id = field(&view, "/id")?.to_owned();
        if made.first_prod.is_none() {
            made.first_prod = Some((app_id.clone(), field(&view, "/channels/0/id")?.to_owned()));
        }
        for c in 1..=*extra {
            let name = format!("c{c}");
            let t = Instant::now();
            made.started
                .push((channel_key(&user.namespace, &format!("{app}.{name}")), t));
            rest.post(
                user,
                &format!("/apps/{app_id}/channels"),
                json!({"name": name, "git_ref_binding": format!("branch:{name}")}),
            )
            .await?;
            made.channel_calls.push(t.elapsed());
            progress.channel_made(t.elapsed());
        }
    }
    Ok(made)
}

/// Waits until every channel of `started` has been seen reconciled, printing progress.
async fn settle(observer: &Observer, started: &HashMap<String, Instant>) -> Result<()> {
    let deadline = Instant::now() + SETTLE_WITHIN;
    let mut last_print = Instant::now();
    loop {
        let waiting = started
            .keys()
            .filter(|k| observer.reconciled(k).is_none())
            .count();
        if waiting == 0 {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{waiting} channels were not reconciled within {SETTLE_WITHIN:?}"
        );
        if last_print.elapsed() > Duration::from_secs(10) {
            eprintln!(
                "[scale] {waiting} of {} channels not reconciled yet",
                started.len()
            );
            last_print = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn reconcile_times(observer: &Observer, started: &HashMap<String, Instant>) -> Percentiles {
    Percentiles::new(
        started
            .iter()
            .filter_map(|(key, t)| Some(observer.reconciled(key)?.saturating_duration_since(*t)))
            .collect(),
    )
}

/// `GET /apps` of one account over a real socket.
struct GetApps {
    client: closed_loop::HttpClient,
    uri: hyper::Uri,
    auth: String,
}

/// `GET /apps` alone and at a concurrency.
struct GetAppsFigures(Vec<(usize, Percentiles, Duration)>);

impl GetApps {
    fn new(api_url: &str, user: &User) -> Result<Self> {
        Ok(Self {
            client: closed_loop::client(),
            uri: format!("{api_url}/apps").parse()?,
            auth: format!("Bearer {}", user.token),
        })
    }

    async fn measure(&self) -> Result<GetAppsFigures> {
        let _ = load(
            &self.client,
            &self.uri,
            &self.auth,
            GET_APPS_CONCURRENCY,
            Duration::from_secs(2),
        )
        .await?;
        let mut figures = Vec::new();
        for concurrency in [1, GET_APPS_CONCURRENCY] {
            let (latencies, elapsed) =
                load(&self.client, &self.uri, &self.auth, concurrency, MEASURE).await?;
            figures.push((concurrency, Percentiles::new(latencies), elapsed));
        }
        Ok(GetAppsFigures(figures))
    }
}

impl GetAppsFigures {
    fn print(&self, when: &str) {
        for (concurrency, p, elapsed) in &self.0 {
            println!(
                "  {when}, concurrency {concurrency}: {:.0} req/s; p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
                p.count() as f64 / elapsed.as_secs_f64(),
                p.ms(0.50),
                p.ms(0.99),
                p.max_ms().unwrap_or(0.0)
            );
        }
    }
}

/// A channel whose static deploys churn between two commits.
#[derive(Clone)]
struct Target {
    user: User,
    app_id: String,
    channel_id: String,
    shas: [String; 2],
}

async fn churn_targets(
    rest: &Rest,
    users: &[User],
    prod: &HashMap<String, (String, String)>,
) -> Result<Vec<Target>> {
    futures::stream::iter(users)
        .map(|user| async move {
            let (app_id, channel_id) = prod
                .get(&user.username)
                .with_context(|| format!("no app of {}", user.username))?
                .clone();
            let mut shas = Vec::new();
            for version in 1..=2 {
                let commit = rest
                    .post(
                        user,
                        &format!("/apps/{app_id}/changeset"),
                        json!({"message": format!("version {version}"), "changes": {
                            "index.html": format!("<h1>{} version {version}</h1>\n", user.username),
                            "style.css": format!("h1 {{ color: #{version}{version}{version}; }}\n"),
                        }}),
                    )
                    .await?;
                shas.push(field(&commit, "/sha")?.to_owned());
            }
            let shas: [String; 2] = shas
                .try_into()
                .map_err(|_| anyhow::anyhow!("two commits"))?;
            Ok::<_, anyhow::Error>(Target {
                user: user.clone(),
                app_id,
                channel_id,
                shas,
            })
        })
        .buffer_unordered(CREATORS)
        .try_collect()
        .await
}

/// Static deploys, [`CHURN_WORKERS`] at a time, each one waited for before its worker starts the next.
struct Churn {
    stop: Arc<AtomicBool>,
    started: Instant,
    workers: Vec<tokio::task::JoinHandle<Result<Deploys>>>,
}

/// What the churn saw.
#[derive(Default)]
struct Deploys {
    reconcile: Percentiles,
    calls: Percentiles,
    failed: usize,
    lost: usize,
    elapsed: Duration,
    /// A channel deployed, with the sha it serves now.
    last: Option<(Target, String)>,
}

impl Churn {
    fn start(rest: Rest, observer: Observer, targets: Vec<Target>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let next = Arc::new(AtomicUsize::new(0));
        let targets = Arc::new(targets);
        let workers = (0..CHURN_WORKERS)
            .map(|_| {
                let (rest, observer, targets, next, stop) = (
                    rest.clone(),
                    observer.clone(),
                    targets.clone(),
                    next.clone(),
                    stop.clone(),
                );
                tokio::spawn(async move {
                    let (mut reconcile, mut calls) = (Vec::new(), Vec::new());
                    let (mut failed, mut lost, mut last) = (0, 0, None);
                    while !stop.load(Ordering::Relaxed) {
                        let n = next.fetch_add(1, Ordering::Relaxed);
                        let target = &targets[n % targets.len()];
                        let sha = &target.shas[(n / targets.len()) % 2];
                        let t = Instant::now();
                        let answer = rest
                            .post(
                                &target.user,
                                &format!(
                                    "/apps/{}/channels/{}/deploy",
                                    target.app_id, target.channel_id
                                ),
                                json!({"sha": sha}),
                            )
                            .await?;
                        calls.push(t.elapsed());
                        let id = field(&answer, "/deploy_id")?;
                        match observer.finished(id, DEPLOY_WITHIN).await {
                            Some((at, true)) => {
                                reconcile.push(at.saturating_duration_since(t));
                                last = Some((target.clone(), sha.clone()));
                            }
                            Some((_, false)) => failed += 1,
                            None => lost += 1,
                        }
                    }
                    Ok(Deploys {
                        reconcile: Percentiles::new(reconcile),
                        calls: Percentiles::new(calls),
                        failed,
                        lost,
                        elapsed: Duration::ZERO,
                        last,
                    })
                })
            })
            .collect();
        Self {
            stop,
            started: Instant::now(),
            workers,
        }
    }

    /// Stops starting deploys, waits for those in flight, and adds up what the workers saw.
    async fn stop(self) -> Result<Deploys> {
        self.stop.store(true, Ordering::Relaxed);
        let (mut reconcile, mut calls) = (Vec::new(), Vec::new());
        let mut all = Deploys::default();
        for worker in self.workers {
            let d = worker.await??;
            reconcile.extend(d.reconcile.into_inner());
            calls.extend(d.calls.into_inner());
            all.failed += d.failed;
            all.lost += d.lost;
            all.last = all.last.or(d.last);
        }
        all.elapsed = self.started.elapsed();
        all.reconcile = Percentiles::new(reconcile);
        all.calls = Percentiles::new(calls);
        Ok(all)
    }
}

/// Creates [`PROBE_CHANNELS`] channels on each probe account's app, one call every [`PROBE_EVERY`], across the
/// accounts in turn; returns when each call started.
async fn create_probes(
    rest: Rest,
    probes: Vec<User>,
    apps: HashMap<String, String>,
) -> Result<HashMap<String, Instant>> {
    let mut started = HashMap::new();
    let mut tick = tokio::time::interval(PROBE_EVERY);
    for c in 1..=PROBE_CHANNELS {
        for user in &probes {
            tick.tick().await;
            let app_id = apps.get(&user.username).context("a probe app")?;
            let name = format!("p{c}");
            let t = Instant::now();
            rest.post(
                user,
                &format!("/apps/{app_id}/channels"),
                json!({"name": name, "git_ref_binding": format!("branch:{name}")}),
            )
            .await?;
            started.insert(channel_key(&user.namespace, &format!("probe.{name}")), t);
        }
    }
    Ok(started)
}

/// Whether the edge serves the last churned channel's current version (a check that it keeps up at this scale).
async fn edge_serves(rest: &Rest, platform: &Platform, deploys: &Deploys) -> String {
    let Some((target, sha)) = &deploys.last else {
        return "no deploy succeeded".into();
    };
    let version = if sha == &target.shas[0] { 1 } else { 2 };
    let host = format!("alpha-{}.{}", target.user.username, platform::APP_DOMAIN);
    let want = format!("{} version {version}", target.user.username);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let t = Instant::now();
        match rest
            .get_host(&format!("{}/", platform.edge_url), &host)
            .await
        {
            Ok((200, body)) if body.contains(&want) => {
                return format!(
                    "{host} answers version {version} ({:.1} ms)",
                    t.elapsed().as_secs_f64() * 1e3
                );
            }
            Ok((status, _)) if Instant::now() > deadline => {
                return format!(
                    "{host} still answers {status} without version {version} after 30s"
                );
            }
            Err(e) if Instant::now() > deadline => return format!("{host}: {e:#}"),
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}
