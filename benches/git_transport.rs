//! Git over slipway's smart HTTP against plain `git http-backend` on the same machine in the same run: push and
//! clone of a repository of incompressible files (1000 MiB by default, under the platform's 1 GiB push limit), with
//! MB/s for each and the ratio, then the same through two api replicas that keep repositories in object storage
//! (push, a clone from a warm cache, a clone from an empty one). Beside those: the publish's own upload of the same
//! pack to the same store, which with `git http-backend`'s push is the floor of a push that uploads after receiving;
//! a compaction of the whole repository against `git repack -a -d`; and the latency of a 10-file changeset. Needs
//! the control plane and Postgres (`make bench` starts them). The peak RSS printed is this process's, which serves slipway's API and the CGI
//! bridge (git's own processes are outside it on both sides).
//!
//! `git http-backend` is served by a minimal streaming CGI bridge in this file, so both sides stream through one
//! HTTP server implementation and the difference is slipway's own work (auth, lookups, process plumbing).
//! Environment: `SLIPWAY_BENCH_MB` (repository size), `SLIPWAY_BENCH_ROUNDS` (rounds per transport, best kept; 4 by
//! default: on a 2-core machine with one disk a gigabyte push or clone varies by up to 30% from one round to the
//! next, on either side, and runs that kept the best of 2 put the warm clone's ratio anywhere from 0.77 to 0.98).
//!
//! Each publish to object storage logs its phases to stderr (`RUST_LOG` picks other logs). Every timed operation
//! starts after `sync`, with no writeback of the one before it pending (`settle_disk`). Prints figures; it asserts
//! nothing about time.

#[path = "../tests/support/mod.rs"]
mod support;

#[path = "common/rss.rs"]
mod rss;
use rss::peak_rss_mib;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::Response;
use futures::TryStreamExt;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio_util::io::{ReaderStream, StreamReader};

const FILE_MB: usize = 4;

#[tokio::main]
async fn main() -> Result<()> {
    // Each publish's phases (precheck, packing the rest, upload, commit) from its log line, beside the figures.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "slipway_git_store::publish=info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let total_mb: usize = env_or("SLIPWAY_BENCH_MB", 1000);
    let rounds: usize = env_or("SLIPWAY_BENCH_ROUNDS", 4);
    let api = support::TestApi::start().await?;
    let user = api.user("bench", "pro").await?;
    let ws = support::git::Workspace::new()?;

    eprintln!("writing {total_mb} MiB of incompressible files and committing them...");
    ws.git(".", &["init", "-q", "--initial-branch=master", "src"])
        .await?;
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    for i in 0..total_mb.div_ceil(FILE_MB) {
        let mut data = vec![0u8; FILE_MB * 1024 * 1024];
        for chunk in data.chunks_mut(8) {
            // xorshift64*: fast and incompressible enough for zlib.
            seed ^= seed >> 12;
            seed ^= seed << 25;
            seed ^= seed >> 27;
            let v = seed.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
        ws.write(&format!("src/data/file-{i:03}.bin"), &data)?;
    }
    ws.git("src", &["add", "-A"]).await?;
    ws.git("src", &["commit", "-qm", "big"]).await?;
    // Pack once so every push sends the same pack-objects work (reuse of already-deflated objects).
    ws.git("src", &["gc", "-q"]).await?;
    let size = dir_size(&ws.path("src/.git/objects"))?;
    eprintln!("repository: {:.1} MiB packed", size as f64 / 1048576.0);

    let slipway_base = api.serve().await?;
    let native_root = ws.path("native");
    std::fs::create_dir_all(&native_root)?;
    let native_base = serve_http_backend(native_root.clone()).await?;

    let mut best = [[f64::MAX; 2]; 2]; // [slipway, native][push, clone]
    for round in 0..rounds {
        for (side, name) in [(0usize, "slipway"), (1usize, "native")] {
            let app = format!("big{round}");
            let remote = if side == 0 {
                api.create_app(&user, &app, "static").await;
                support::git::http_remote(&slipway_base, &user.token, &user.username, &app)
            } else {
                let repo = native_root.join(format!("{app}.git"));
                let out = std::process::Command::new("git")
                    .args(["init", "-q", "--bare", "--initial-branch=master"])
                    .arg(&repo)
                    .output()?;
                anyhow::ensure!(out.status.success(), "git init");
                format!("{native_base}/{app}.git")
            };
            settle_disk().await?;
            let t = Instant::now();
            ws.git("src", &["push", "-q", &remote, "HEAD:master"])
                .await?;
            let push = t.elapsed().as_secs_f64();
            let target = format!("clone-{name}-{round}");
            settle_disk().await?;
            let t = Instant::now();
            ws.git(".", &["clone", "-q", "--bare", &remote, &target])
                .await?;
            let clone = t.elapsed().as_secs_f64();
            std::fs::remove_dir_all(ws.path(&target))?;
            eprintln!("round {round} {name}: push {push:.2}s, clone {clone:.2}s");
            best[side][0] = best[side][0].min(push);
            best[side][1] = best[side][1].min(clone);
        }
    }
    let mb = size as f64 / 1e6;
    for (op, i) in [("push", 0), ("clone", 1)] {
        let (ours, native) = (mb / best[0][i], mb / best[1][i]);
        println!(
            "git {op} over HTTP ({mb:.0} MB, best of {rounds}): slipway {ours:.1} MB/s, git http-backend {native:.1} MB/s, ratio {:.2}; peak RSS {:.0} MiB",
            ours / native,
            peak_rss_mib()
        );
    }

    // The same repository through two api replicas keeping repositories in object storage (a real versitygw on
    // this machine): pushed through A, cloned through A (its cache warm) and through B (its cache empty, every
    // pack from the bucket).
    let s3 = slipway_testkit::s3::TestS3::start().await?;
    let endpoint = support::s3_calls::root(&s3);
    let replica = async |name: &str| -> Result<Replica> {
        let state = api.replica_state().await?;
        let repos = slipway_git_store::Repos::in_object_store(
            ws.path(&format!("cache-{name}")),
            state.db().clone(),
            &endpoint,
            "slipway-git",
            Path::new(env!("CARGO_BIN_EXE_slipway")),
        )
        .await?;
        let router = slipway_api::routes::public(state.with_repos(repos.clone()));
        let base = support::serve_router(router.clone()).await?;
        Ok(Replica {
            router,
            base,
            repos,
        })
    };
    let replicas = [replica("a").await?, replica("b").await?];
    let mut objects = [f64::MAX; 3]; // push, warm clone, cold clone
    let mut last_app = None;
    for round in 0..rounds {
        let app = format!("obj{round}");
        let created = support::call_on(
            &replicas[0].router,
            axum::http::Method::POST,
            "/apps",
            Some(&user.token),
            Some(json!({"name": app, "template": "static"})),
        )
        .await;
        anyhow::ensure!(created.status == 200, "create {app}: {}", created.body);
        let via = |i: usize| {
            support::git::http_remote(&replicas[i].base, &user.token, &user.username, &app)
        };
        settle_disk().await?;
        let t = Instant::now();
        ws.git("src", &["push", "-q", &via(0), "HEAD:master"])
            .await?;
        let push = t.elapsed().as_secs_f64();
        let mut clones = [0.0; 2];
        for (i, clone) in clones.iter_mut().enumerate() {
            let target = format!("clone-objects-{round}-{i}");
            settle_disk().await?;
            let t = Instant::now();
            ws.git(".", &["clone", "-q", "--bare", &via(i), &target])
                .await?;
            *clone = t.elapsed().as_secs_f64();
            std::fs::remove_dir_all(ws.path(&target))?;
        }
        eprintln!(
            "round {round} object storage: push {push:.2}s, warm clone {:.2}s, cold clone {:.2}s",
            clones[0], clones[1]
        );
        objects[0] = objects[0].min(push);
        objects[1] = objects[1].min(clones[0]);
        objects[2] = objects[2].min(clones[1]);
        last_app = Some((app, created.body["id"].as_str().context("app id")?.parse()?));
    }
    for (op, ours, native) in [
        ("push", objects[0], best[1][0]),
        ("clone, cache warm", objects[1], best[1][1]),
        ("clone, cache cold", objects[2], best[1][1]),
    ] {
        println!(
            "git {op} through two replicas, repositories in object storage ({mb:.0} MB, best of {rounds}): {:.1} MB/s, git http-backend {:.1} MB/s, ratio {:.2}",
            mb / ours,
            mb / native,
            native / ours
        );
    }

    // The floor of a push that uploads its pack after receiving it: git http-backend's push plus the publish's own
    // upload call (no git, no database) of the same pack to the same store.
    let floor_bucket =
        slipway_git_store::bucket::PackBucket::open(&endpoint, "slipway-git-floor").await?;
    let pack_dir = ws.path("src/.git/objects/pack");
    let pack = std::fs::read_dir(&pack_dir)?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .find_map(|f| f.strip_suffix(".pack").map(str::to_owned))
        .context("no pack in the source repository")?;
    let mut upload = f64::MAX;
    for _ in 0..rounds {
        settle_disk().await?;
        let t = Instant::now();
        floor_bucket
            .upload(uuid::Uuid::new_v4(), &pack_dir, &pack)
            .await?;
        upload = upload.min(t.elapsed().as_secs_f64());
    }
    let floor = best[1][0] + upload;
    println!(
        "upload of the pushed pack to the same store (best of {rounds}): {upload:.2}s, {:.1} MB/s; git http-backend's push plus that upload: {floor:.2}s, ratio {:.2} (a push that uploads after receiving can reach no more)",
        mb / upload,
        best[1][0] / floor
    );

    if let Some((app, app_id)) = last_app {
        let fresh = replica("c").await?;
        let remote =
            |base: &str| support::git::http_remote(base, &user.token, &user.username, &app);
        let native_app = format!("big{}", rounds - 1);
        compaction(
            &ws,
            [
                remote(&replicas[0].base),
                format!("{native_base}/{native_app}.git"),
            ],
            &native_root.join(format!("{native_app}.git")),
            &replicas[0],
            app_id,
            &remote(&fresh.base),
            mb,
        )
        .await?;
    }

    // Changeset latency: 10 files per commit on top of the big repository's history.
    let app = api.create_app(&user, "edits", "static").await;
    let url = format!("/apps/{}/changeset", app["id"].as_str().context("app id")?);
    let mut latencies = Vec::new();
    for i in 0..40 {
        let changes: serde_json::Map<String, serde_json::Value> = (0..10)
            .map(|f| {
                (
                    format!("src/file-{f}.txt"),
                    json!(format!("revision {i} of file {f}\n").repeat(50)),
                )
            })
            .collect();
        let t = Instant::now();
        api.post(
            &url,
            &user,
            json!({"message": format!("change {i}"), "changes": changes}),
        )
        .await
        .expect(200, None);
        if i >= 5 {
            latencies.push(t.elapsed());
        }
    }
    latencies.sort_unstable();
    let pct = |p: f64| latencies[((latencies.len() as f64 * p) as usize).min(latencies.len() - 1)];
    println!(
        "changeset of 10 files: p50 {:.1} ms, p99 {:.1} ms ({} commits)",
        ms(pct(0.5)),
        ms(pct(0.99)),
        latencies.len()
    );
    Ok(())
}

/// An api replica that keeps repositories in object storage: its router, its address, its repositories.
struct Replica {
    router: axum::Router,
    base: String,
    repos: slipway_git_store::Repos,
}

/// Compaction at the repository's full size: one small commit on top of the big one makes a second pack, then the
/// repository's maintenance folds both into one (the whole gigabyte rewritten from the cache and uploaded), against
/// `git repack -a -d` of the same repository pushed to `git http-backend`. A replica with an empty cache then clones
/// it (`fresh_remote`), and its head must be the source's.
async fn compaction(
    ws: &support::git::Workspace,
    remotes: [String; 2],
    native_repo: &Path,
    a: &Replica,
    app_id: uuid::Uuid,
    fresh_remote: &str,
    mb: f64,
) -> Result<()> {
    ws.write("src/small.txt", b"one more commit\n")?;
    ws.git("src", &["add", "-A"]).await?;
    ws.git("src", &["commit", "-qm", "small"]).await?;
    let head = ws.git("src", &["rev-parse", "HEAD"]).await?;
    for remote in &remotes {
        ws.git("src", &["push", "-q", remote, "HEAD:master"])
            .await?;
    }
    let policy = slipway_git_store::maintain::Policy {
        every: Duration::ZERO,
        compact_at: 2,
        ..Default::default()
    };
    settle_disk().await?;
    let t = Instant::now();
    let done = a
        .repos
        .maintain(app_id, &policy)
        .await?
        .context("the repository's maintenance was not claimed")?;
    let ours = t.elapsed().as_secs_f64();
    anyhow::ensure!(
        done.packs_folded == 2,
        "folded {} packs, not 2",
        done.packs_folded
    );
    settle_disk().await?;
    let t = Instant::now();
    let out = tokio::process::Command::new("git")
        .args(["repack", "-a", "-d", "-q"])
        .current_dir(native_repo)
        .output()
        .await?;
    anyhow::ensure!(
        out.status.success(),
        "git repack: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let native = t.elapsed().as_secs_f64();
    settle_disk().await?;
    let t = Instant::now();
    ws.git(
        ".",
        &["clone", "-q", "--bare", fresh_remote, "clone-compacted"],
    )
    .await?;
    let clone = t.elapsed().as_secs_f64();
    let cloned = ws.git("clone-compacted", &["rev-parse", "HEAD"]).await?;
    anyhow::ensure!(
        cloned == head,
        "the compacted repository's head is {cloned}, not {head}"
    );
    std::fs::remove_dir_all(ws.path("clone-compacted"))?;
    println!(
        "compaction of the repository in object storage ({mb:.0} MB, 2 packs into 1, uploaded): {ours:.2}s, git repack -a -d {native:.2}s, ratio {:.2}; then a clone from an empty cache {clone:.2}s, its head the pushed one",
        native / ours
    );
    Ok(())
}

/// Writes every dirty page out before a timed operation, so that it does not pay for the writeback of the one
/// before it: on a small machine the gigabyte a push or clone leaves in the page cache is flushed in bursts that
/// otherwise land, at random, inside whichever side is timed next.
async fn settle_disk() -> Result<()> {
    let status = tokio::process::Command::new("sync").status().await?;
    anyhow::ensure!(status.success(), "sync: {status}");
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn dir_size(dir: &Path) -> Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        total += if meta.is_dir() {
            dir_size(&entry.path())?
        } else {
            meta.len()
        };
    }
    Ok(total)
}

/// Serves every repository under `root` with `git http-backend` through a streaming CGI bridge; returns the base
/// URL. Pushes are allowed (REMOTE_USER is set).
async fn serve_http_backend(root: PathBuf) -> Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let app = axum::Router::new().fallback(cgi).with_state(root);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(format!("http://{addr}"))
}

async fn cgi(State(root): State<PathBuf>, req: Request) -> Response {
    match run_cgi(root, req).await {
        Ok(res) => res,
        Err(e) => {
            eprintln!("cgi: {e:#}");
            let mut res = Response::new(Body::from("cgi failed"));
            *res.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
            res
        }
    }
}

async fn run_cgi(root: PathBuf, req: Request) -> Result<Response> {
    let (parts, body) = req.into_parts();
    let header = |name: &str| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let mut cmd = tokio::process::Command::new("git");
    cmd.arg("http-backend")
        .env("GIT_PROJECT_ROOT", &root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("REMOTE_USER", "bench")
        .env("REMOTE_ADDR", "127.0.0.1")
        .env("REQUEST_METHOD", parts.method.as_str())
        .env("PATH_INFO", parts.uri.path())
        .env("QUERY_STRING", parts.uri.query().unwrap_or_default())
        .env("CONTENT_TYPE", header("content-type"))
        .env("HTTP_CONTENT_ENCODING", header("content-encoding"))
        .env("GIT_PROTOCOL", header("git-protocol"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    let length = header("content-length");
    if !length.is_empty() {
        cmd.env("CONTENT_LENGTH", length);
    }
    let mut child = cmd.spawn()?;
    let (Some(mut stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        bail!("no pipes");
    };
    tokio::spawn(async move {
        let mut reader = StreamReader::new(body.into_data_stream().map_err(std::io::Error::other));
        let _ = tokio::io::copy_buf(&mut reader, &mut stdin).await;
    });
    tokio::spawn(async move {
        let _ = child.wait().await;
    });
    let mut stdout = BufReader::with_capacity(64 * 1024, stdout);
    let mut res = Response::new(Body::empty());
    loop {
        let mut line = String::new();
        if stdout.read_line(&mut line).await? == 0 {
            bail!("http-backend ended before its headers");
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (name, value) = line.split_once(':').context("CGI header")?;
        let value = value.trim();
        if name.eq_ignore_ascii_case("status") {
            let code: u16 = value.split(' ').next().unwrap_or("200").parse()?;
            *res.status_mut() = StatusCode::from_u16(code)?;
        } else {
            res.headers_mut().append(
                HeaderName::from_bytes(name.as_bytes())?,
                HeaderValue::from_str(value)?,
            );
        }
    }
    let _ = stdout.fill_buf().await;
    *res.body_mut() = Body::from_stream(ReaderStream::with_capacity(
        stdout.take(u64::MAX),
        64 * 1024,
    ));
    Ok(res)
}
