//! The edge at scale: many distinct static sites (1,000 by default) requested at random through one edge whose
//! memory cache holds only part of them, so the run mixes hits with loads and evictions. Prints the requests per
//! second and p50/p99 (wrk, a Lua script picking a random site and file per request), the cache's bytes against
//! its cap with its hit ratio, loads and evictions (from the edge's own `/metrics`), and the edge's resident memory
//! (now and at its peak).
//!
//! The edge runs as its own process (`slipway edge`, the binary built with the benchmark), so its RSS is its own.
//! The sites are real commits of one static app, committed through the API and fetched by the edge from the API's
//! internal archive route as in production. The channels serving them are written straight to the apiserver the
//! way the operator writes them (the Channel with its hostname and deployed commit in status, and its Ingress):
//! a thousand deploys would measure the operator, not the edge.
//!
//! Environment: `SLIPWAY_BENCH_SITES` (default 1000), `SLIPWAY_BENCH_SITE_CACHE_MIB` (the edge's memory cap,
//! default 32), `SLIPWAY_BENCH_SECONDS` (default 8), `SLIPWAY_BENCH_CONNECTIONS` (default 64). Prints figures; it
//! asserts nothing about time.

#[path = "../tests/support/mod.rs"]
mod support;
#[path = "common/wrk.rs"]
mod wrk;

use std::collections::HashMap;
use std::process::Stdio;

use anyhow::{Context, Result, ensure};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use slipway_crds::{App, Channel};
use wrk::{env_or, free_port, report, wait_for, wrk_with};

/// The files of every site (a request picks one at random).
const PATHS: [&str; 5] = ["/", "/about.html", "/style.css", "/app.js", "/vendor.js"];

#[tokio::main]
async fn main() -> Result<()> {
    let sites = env_or("SLIPWAY_BENCH_SITES", 1000);
    let cache_mib = env_or("SLIPWAY_BENCH_SITE_CACHE_MIB", 32);
    let seconds = env_or("SLIPWAY_BENCH_SECONDS", 8);
    let connections = env_or("SLIPWAY_BENCH_CONNECTIONS", 64);
    // A thousand commits in a row are far more than a person's request budget.
    let api = support::TestApi::start()
        .await?
        .with_limits(slipway_core::state::Limits {
            rate: None,
            ..Default::default()
        });
    let user = api.user("scale", "pro").await?;
    let app = api.create_app(&user, "many", "static").await;
    let app_id = app["id"].as_str().context("app id")?.to_owned();

    let started = std::time::Instant::now();
    let mut shas = Vec::with_capacity(sites);
    let mut site_bytes = 0;
    for i in 0..sites {
        let files = site_files(i);
        site_bytes = files.values().map(String::len).sum::<usize>();
        shas.push(
            api.commit(&user, &app_id, serde_json::to_value(&files)?)
                .await,
        );
    }
    let hosts = write_channels(&api, &user.namespace, &user.username, &shas).await?;
    println!(
        "\nedge at scale: {sites} static sites of {} KiB (5 files, 24 KiB of them shared by all), committed and \
         routed in {:.0} s",
        site_bytes / 1024,
        started.elapsed().as_secs_f64()
    );

    let dir = std::env::temp_dir().join(format!(
        "slipway-bench-scale-{}",
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir_all(&dir)?;
    let token = dir.join("edge-token");
    std::fs::write(&token, &api.edge_token)?;
    let (port, admin) = (free_port()?, free_port()?);
    let mut edge = tokio::process::Command::new(env!("CARGO_BIN_EXE_slipway"))
        .args(["edge", "--access-log=false", "--redirect-https=false"])
        .arg(format!("--listen=127.0.0.1:{port}"))
        .arg(format!("--admin-port={admin}"))
        .arg(format!("--internal-url={}", api.serve_internal().await?))
        .arg(format!("--internal-token-file={}", token.display()))
        .arg(format!("--namespace={}", user.namespace))
        .arg(format!("--site-cache-mib={cache_mib}"))
        .arg(format!("--site-disk-dir={}", dir.display()))
        .env("KUBECONFIG", slipway_testkit::kubeconfig_path())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .context("start slipway edge")?;
    let pid = edge.id().context("the edge's pid")?;
    let url = format!("http://127.0.0.1:{port}");
    wait_for(
        &format!("http://127.0.0.1:{admin}/readyz"),
        "localhost",
        200,
    )
    .await?;
    let idle_rss = rss(pid)?;
    // The routing table is built before the admin port opens: every host answers from the start.
    wait_for(&format!("{url}/"), &hosts[0], 200).await?;

    let script = dir.join("random.lua");
    std::fs::write(&script, lua_script(&hosts))?;
    let run = wrk_with(
        &format!("{url}/"),
        &["-s", &script.display().to_string()],
        connections,
        seconds,
    )
    .await?;
    let metrics = scrape(admin).await?;
    let metric = |name: &str| metrics.get(name).copied().unwrap_or(0.0);
    let (hits, misses) = (
        metric("slipway_edge_site_cache_hits_total{tier=\"memory\"}")
            + metric("slipway_edge_site_cache_hits_total{tier=\"disk\"}"),
        metric("slipway_edge_site_cache_misses_total"),
    );
    let (now, peak) = rss(pid)?;

    println!(
        "random site and file per request, {connections} connections, {seconds}s, memory cache cap {cache_mib} MiB"
    );
    report("slipway edge", &run);
    println!(
        "  cache (memory)     {:.1} MiB of a {:.1} MiB cap, {} sites; {:.1}% of requests hit, {} loads, {} \
         evictions, {} load failures",
        metric("slipway_edge_site_cache_bytes{tier=\"memory\"}") / MIB,
        metric("slipway_edge_site_cache_capacity_bytes{tier=\"memory\"}") / MIB,
        metric("slipway_edge_site_cache_entries{tier=\"memory\"}"),
        100.0 * hits / (hits + misses).max(1.0),
        metric("slipway_edge_site_loads_total{tier=\"memory\"}"),
        metric("slipway_edge_site_cache_evictions_total{tier=\"memory\"}"),
        ["fetch", "too_large", "archive", "disk"]
            .iter()
            .map(|r| metric(&format!(
                "slipway_edge_site_load_failures_total{{reason=\"{r}\"}}"
            )))
            .sum::<f64>(),
    );
    println!(
        "  edge RSS           {:.1} MiB idle with its routing table, {:.1} MiB after the run, {:.1} MiB at its peak",
        idle_rss.0 / MIB,
        now / MIB,
        peak / MIB
    );

    edge.kill().await.ok();
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

const MIB: f64 = 1024.0 * 1024.0;

/// The files of site `i`: a page, a second page, a stylesheet and a script of its own, and a library every site
/// ships (equal contents are held once in memory).
fn site_files(i: usize) -> std::collections::BTreeMap<String, String> {
    let own = |name: &str, len: usize| {
        let mut text = String::with_capacity(len + 64);
        let mut n = (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        while text.len() < len {
            n = n
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            text.push_str(&format!("<p>site {i} {name} {:016x}</p>\n", n >> 8));
        }
        text
    };
    [
        ("index.html".to_owned(), own("index", 8 * 1024)),
        ("about.html".to_owned(), own("about", 4 * 1024)),
        ("style.css".to_owned(), own("style", 6 * 1024)),
        ("app.js".to_owned(), own("app", 12 * 1024)),
        (
            "vendor.js".to_owned(),
            "export function shared(x) { return x * 2; }\n".repeat(24 * 1024 / 44),
        ),
    ]
    .into()
}

/// Writes one channel of the app `many` per commit, as the operator writes a deployed static channel: the
/// Channel, its status (hostname, deployed commit) and its Ingress. Returns the hostnames.
async fn write_channels(
    api: &support::TestApi,
    ns: &str,
    username: &str,
    shas: &[String],
) -> Result<Vec<String>> {
    let apps: Api<App> = Api::namespaced(api.kube.clone(), ns);
    let app = apps.get("many").await?;
    let jobs = shas.iter().enumerate().map(|(i, sha)| {
        let (kube, app) = (api.kube.clone(), app.clone());
        let host = format!("c{i}-many-{username}.{}", support::APP_DOMAIN);
        async move {
            let channels: Api<Channel> = Api::namespaced(kube.clone(), ns);
            let channel: Channel = serde_json::from_value(json!({
                "apiVersion": "slipway.dev/v1alpha1", "kind": "Channel",
                "metadata": {"name": format!("many.c{i}")},
                "spec": {"app": "many", "gitRefBinding": format!("branch:c{i}")},
            }))?;
            channels.create(&PostParams::default(), &channel).await?;
            let status = json!({"status": {"hostname": host, "currentSha": sha}});
            let channel = channels
                .patch_status(
                    &format!("many.c{i}"),
                    &PatchParams::default(),
                    &Patch::Merge(&status),
                )
                .await?;
            let ingress = slipway_controllers::ingress::build(&channel, &app, &host, &[])
                .map_err(|e| anyhow::anyhow!("the channel's Ingress: {e}"))?;
            Api::<Ingress>::namespaced(kube, ns)
                .create(&PostParams::default(), &ingress)
                .await?;
            anyhow::Ok(host)
        }
    });
    let hosts: Vec<String> = futures::stream::iter(jobs)
        .buffered(16)
        .try_collect()
        .await?;
    ensure!(hosts.len() == shas.len());
    Ok(hosts)
}

/// A wrk script that sends each request to a random host (of `hosts`) for a random file of [`PATHS`], accepting
/// brotli and gzip as browsers do.
fn lua_script(hosts: &[String]) -> String {
    let hosts: Vec<String> = hosts.iter().map(|h| format!("\"{h}\"")).collect();
    let paths: Vec<String> = PATHS.iter().map(|p| format!("\"{p}\"")).collect();
    format!(
        r#"local hosts = {{{}}}
local paths = {{{}}}
local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("id", threads)
end
function init(args)
  math.randomseed(os.time() * 100 + id)
end
function request()
  return wrk.format("GET", paths[math.random(#paths)], {{
    ["Host"] = hosts[math.random(#hosts)],
    ["Accept-Encoding"] = "br, gzip",
  }})
end
"#,
        hosts.join(","),
        paths.join(",")
    )
}

/// The edge's metrics, by series (name and labels as printed).
async fn scrape(admin: u16) -> Result<HashMap<String, f64>> {
    let text = tokio::process::Command::new("curl")
        .args(["-s", &format!("http://127.0.0.1:{admin}/metrics")])
        .output()
        .await?
        .stdout;
    Ok(String::from_utf8_lossy(&text)
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_owned(), value.parse().ok()?))
        })
        .collect())
}

/// The resident memory of process `pid` now and at its peak, in bytes (`VmRSS`, `VmHWM`).
fn rss(pid: u32) -> Result<(f64, f64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let field = |name: &str| -> Result<f64> {
        let kib: f64 = status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .with_context(|| format!("no {name} in /proc/{pid}/status"))?;
        Ok(kib * 1024.0)
    };
    Ok((field("VmRSS:")?, field("VmHWM:")?))
}
