//! Deploy-to-ready time on the local single-node cluster, through the REST API and the operator: from the deploy
//! call to the deploy's `success`, for a first build and for a rebuild whose `install.sh` (app) or dependency
//! layer (docker) is unchanged, for a rewind to the first build's image (no build) beside that rebuild, for two
//! channels deployed at once (when each build ran, and their overlap), and for a static site. Needs the node, Postgres and BuildKit (`make bench` starts
//! them).
//!
//! Prints figures; it asserts nothing about time.

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use serde_json::{Value, json};

const WITHIN: Duration = Duration::from_secs(900);

const SERVER: &str = r#"import os, http.server

class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = open("/app/VERSION").read().encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

http.server.HTTPServer(("0.0.0.0", int(os.environ["SVC_HTTP_PORT"])), Handler).serve_forever()
"#;

/// A dependency step that takes a moment, as a real install does.
const INSTALL: &str = "set -e\nmkdir -p /opt/deps\nfor i in $(seq 1 200); do echo \"dep $i\" > /opt/deps/$i; done\nsleep 2\n";

fn app_files(version: &str) -> Value {
    json!({
        "install.sh": INSTALL,
        "launch.sh": "exec python3 server.py\n",
        "server.py": SERVER,
        "VERSION": format!("{version}\n"),
    })
}

fn docker_files(version: &str) -> Value {
    json!({
        "Dockerfile": format!("FROM python:3.13-slim\nCOPY install.sh /tmp/install.sh\nRUN sh /tmp/install.sh\nCOPY server.py VERSION /app/\nCMD [\"python3\", \"/app/server.py\"]\n"),
        "install.sh": INSTALL,
        "server.py": SERVER,
        "VERSION": format!("{version}\n"),
    })
}

/// Waits until no pod of the namespace is terminating. A replaced version takes a while to stop and holds its CPU
/// request until then; on a small node the next step's pod would wait for that room, and the step would measure
/// the node's capacity rather than itself.
async fn settled(api: &support::TestApi, namespace: &str) -> Result<()> {
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(api.kube.clone(), namespace);
    let deadline = Instant::now() + WITHIN;
    while pods
        .list(&Default::default())
        .await?
        .items
        .iter()
        .any(|p| p.metadata.deletion_timestamp.is_some())
    {
        if Instant::now() > deadline {
            bail!("pods of {namespace} still terminating after {WITHIN:?}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok(())
}

async fn timed_deploy(
    api: &support::TestApi,
    user: &support::User,
    app: &str,
    channel: &str,
    files: Value,
) -> Result<f64> {
    let sha = api.commit(user, app, files).await;
    settled(api, &user.namespace).await?;
    let started = Instant::now();
    let id = api.deploy(user, app, channel, json!({"sha": sha})).await;
    let log = api.finished_deploy(user, app, channel, &id, WITHIN).await?;
    let elapsed = started.elapsed().as_secs_f64();
    if log["status"] != "success" {
        bail!(
            "deploy failed:\n{}",
            log["log"].as_str().unwrap_or_default()
        );
    }
    Ok(elapsed)
}

/// From the rewind call to the rewind's `success` (the channel goes back to its previous image, unbuilt).
async fn timed_rewind(
    api: &support::TestApi,
    user: &support::User,
    app: &str,
    channel: &str,
) -> Result<f64> {
    settled(api, &user.namespace).await?;
    let started = Instant::now();
    let reply = api
        .post(
            &format!("/apps/{app}/channels/{channel}/rewind"),
            user,
            Value::Null,
        )
        .await
        .expect(202, None);
    let id = reply["deploy_id"].as_str().unwrap_or_default().to_owned();
    let log = api.finished_deploy(user, app, channel, &id, WITHIN).await?;
    let elapsed = started.elapsed().as_secs_f64();
    let text = log["log"].as_str().unwrap_or_default();
    if log["status"] != "success" || text.contains("[build]") {
        bail!("the rewind failed or built:\n{text}");
    }
    Ok(elapsed)
}

/// Two channels deployed at once: when each one's build Job ran, and how long the two overlapped.
async fn overlapping_builds(api: &support::TestApi, user: &support::User) -> Result<String> {
    let mut targets = Vec::new();
    for name in ["bench-left", "bench-right"] {
        let created = api.create_app(user, name, "docker").await;
        let app = created["id"].as_str().unwrap_or_default().to_owned();
        let channel = created["channels"][0]["id"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let sha = api.commit(user, &app, docker_files(name)).await;
        targets.push((app, channel, sha));
    }
    settled(api, &user.namespace).await?;
    let started = Instant::now();
    let mut deploys = Vec::new();
    for (app, channel, sha) in &targets {
        deploys.push(api.deploy(user, app, channel, json!({"sha": sha})).await);
    }
    for ((app, channel, _), id) in targets.iter().zip(&deploys) {
        let log = api.finished_deploy(user, app, channel, id, WITHIN).await?;
        if log["status"] != "success" {
            bail!(
                "deploy failed:\n{}",
                log["log"].as_str().unwrap_or_default()
            );
        }
    }
    let both_live = started.elapsed().as_secs_f64();
    let jobs: kube::Api<k8s_openapi::api::batch::v1::Job> =
        kube::Api::namespaced(api.kube.clone(), &user.namespace);
    let mut spans = Vec::new();
    for id in &deploys {
        let job = jobs
            .get(&slipway_controllers::build::job::job_name(id))
            .await?;
        let status = job.status.unwrap_or_default();
        let (Some(start), Some(end)) = (status.start_time, status.completion_time) else {
            bail!("build of {id} has no start or completion time");
        };
        spans.push((start.0, end.0));
    }
    let seconds = |from: k8s_openapi::jiff::Timestamp, to: k8s_openapi::jiff::Timestamp| {
        (to.as_millisecond() - from.as_millisecond()) as f64 / 1000.0
    };
    let origin = spans[0].0.min(spans[1].0);
    let overlap = seconds(spans[0].0.max(spans[1].0), spans[0].1.min(spans[1].1)).max(0.0);
    Ok(format!(
        "two channels deployed at once: builds ran {:.1}s-{:.1}s and {:.1}s-{:.1}s, overlapping {overlap:.1}s; both live {both_live:.1}s after the calls",
        seconds(origin, spans[0].0),
        seconds(origin, spans[0].1),
        seconds(origin, spans[1].0),
        seconds(origin, spans[1].1),
    ))
}

#[tokio::main]
async fn main() -> Result<()> {
    let api = support::TestApi::start().await?;
    // The builder plan: its apps request half a core, which a small node schedules (a pro app requests 4).
    let user = api.user("bench", "builder").await?;
    api.start_operator(&user.namespace).await?;
    let mut lines = Vec::new();
    for (template, files) in [
        ("app", app_files as fn(&str) -> Value),
        ("docker", docker_files as fn(&str) -> Value),
    ] {
        let created = api
            .create_app(&user, &format!("bench-{template}"), template)
            .await;
        let app = created["id"].as_str().unwrap_or_default().to_owned();
        let channel = created["channels"][0]["id"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        eprintln!("{template}: first build and rollout...");
        let first = timed_deploy(&api, &user, &app, &channel, files("v1")).await?;
        eprintln!("{template}: rebuild with the dependency step unchanged...");
        let rebuild = timed_deploy(&api, &user, &app, &channel, files("v2")).await?;
        eprintln!("{template}: rewind to the first build's image...");
        let rewind = timed_rewind(&api, &user, &app, &channel).await?;
        lines.push(format!(
            "deploy to ready, {template:<6}: first build {first:6.1}s, rebuild (install unchanged) {rebuild:6.1}s"
        ));
        lines.push(format!(
            "rewind to ready, {template:<6}: {rewind:6.1}s (no build) vs rebuild {rebuild:6.1}s: {:.1}x faster, {:.1}x faster than the first build",
            rebuild / rewind,
            first / rewind
        ));
        // Its pod's CPU request goes with it: a small node schedules only so many apps of the plan.
        let deleted = api.delete(&format!("/apps/{app}"), &user).await;
        if !deleted.status.is_success() {
            bail!("delete the app bench-{template}: {}", deleted.body);
        }
    }
    eprintln!("two channels deployed at once...");
    lines.push(overlapping_builds(&api, &user).await?);
    let created = api.create_app(&user, "bench-static", "static").await;
    let app = created["id"].as_str().unwrap_or_default().to_owned();
    let channel = created["channels"][0]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let mut static_times = Vec::new();
    for i in 0..10 {
        let files = json!({"index.html": format!("<p>{i}</p>\n")});
        static_times.push(timed_deploy(&api, &user, &app, &channel, files).await?);
    }
    static_times.sort_by(f64::total_cmp);
    lines.push(format!(
        "deploy to live, static: p50 {:.0} ms over {} deploys (max {:.0} ms)",
        static_times[static_times.len() / 2] * 1000.0,
        static_times.len(),
        static_times[static_times.len() - 1] * 1000.0
    ));
    for line in lines {
        println!("{line}");
    }
    Ok(())
}
