//! What the edge benchmarks share: `wrk` runs and their summary, and small helpers. Included with `#[path]` (a
//! file under a subdirectory of `benches/` is no benchmark of its own).

// Each benchmark uses a part of it.
#![allow(dead_code)]

use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};

/// What wrk (or h2load) reported for one run.
pub struct Run {
    pub requests_per_second: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

/// Runs a load generator and returns what it printed; `hint` says how to get it when it is missing.
pub async fn run_tool(program: &str, hint: &str, args: &[&str]) -> Result<String> {
    let out = tokio::process::Command::new(program)
        .args(args)
        .output()
        .await
        .with_context(|| format!("run {program} ({hint})"))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    ensure!(
        out.status.success(),
        "{program} failed: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(text)
}

/// Runs wrk against `url` with `Host: host` and reads its summary.
pub async fn wrk(url: &str, host: &str, connections: usize, seconds: usize) -> Result<Run> {
    wrk_with(url, &["-H", &format!("Host: {host}")], connections, seconds).await
}

/// Runs wrk against `url` with `extra` arguments (headers, a Lua script) and reads its summary; any answer that
/// is not a 2xx or 3xx fails the run.
pub async fn wrk_with(
    url: &str,
    extra: &[&str],
    connections: usize,
    seconds: usize,
) -> Result<Run> {
    let threads = connections.clamp(1, 2).to_string();
    let (connections, duration) = (connections.to_string(), format!("{seconds}s"));
    let mut args = vec![
        "--latency",
        "-t",
        &threads,
        "-c",
        &connections,
        "-d",
        &duration,
    ];
    args.extend_from_slice(extra);
    args.push(url);
    let text = run_tool("wrk", "hack/install-deps.sh installs it", &args).await?;
    ensure!(!text.contains("Non-2xx"), "wrk saw errors: {text}");
    let field = |prefix: &str| {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(prefix).map(|v| v.trim().to_owned()))
            .with_context(|| format!("no '{prefix}' in wrk's output:\n{text}"))
    };
    Ok(Run {
        requests_per_second: field("Requests/sec:")?.parse()?,
        p50_ms: millis(&field("50%")?)?,
        p99_ms: millis(&field("99%")?)?,
    })
}

/// A wrk duration (`812.00us`, `1.20ms`, `2.01s`) in milliseconds.
pub fn millis(text: &str) -> Result<f64> {
    let split = text
        .find(|c: char| c.is_ascii_alphabetic())
        .with_context(|| format!("no unit in {text}"))?;
    let (value, unit) = text.split_at(split);
    let value: f64 = value.parse()?;
    Ok(match unit {
        "us" => value / 1000.0,
        "ms" => value,
        "s" => value * 1000.0,
        "m" => value * 60_000.0,
        other => bail!("unknown unit {other}"),
    })
}

/// Prints one run.
pub fn report(name: &str, run: &Run) {
    println!(
        "  {name:<18} {:>10.0} req/s   p50 {:>7.3} ms   p99 {:>7.3} ms",
        run.requests_per_second, run.p50_ms, run.p99_ms
    );
}

/// Polls `url` with `Host: host` until it answers `status`.
pub async fn wait_for(url: &str, host: &str, status: u16) -> Result<()> {
    for _ in 0..300 {
        let out = tokio::process::Command::new("curl")
            .args([
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "-H",
                &format!("Host: {host}"),
                url,
            ])
            .output()
            .await?;
        if String::from_utf8_lossy(&out.stdout) == status.to_string() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("{url} (Host {host}) never answered {status}")
}

/// A port free on 127.0.0.1 now.
pub fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// A number from the environment, else `default`.
pub fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
