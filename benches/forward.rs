//! Raw TCP forwarding through the edge's forward listener against a direct connection to the same server, and
//! against nginx's TCP proxy (the `stream` module, one worker) in front of the same server in the same run: bulk
//! throughput (MiB/s one way, into a sink; the median of five rounds the three paths take in turn) and round-trip
//! latency of 64-byte messages (p50, p99), with each proxy's ratio to the direct connection and the latency it adds.
//! The listener is the edge's own (`slipway_edge::forward`), with an allowlist to check on every accept; the server
//! stands in for the channel's pod, on this machine's address.
//!
//! Everything is measured twice. First with client, proxy and server sharing this machine's cores: every byte
//! then crosses loopback twice through a proxy and once directly, all on the same CPUs, so a proxy's ratio is its
//! CPU cost beside the kernel's (about half, for any proxy). Then with the proxy on a core of its own and client
//! and server on the other (threads pinned; nginx under `taskset`), as an edge runs on its own node: the ratio then
//! says whether the proxy keeps up with what the client and server can do, which is what a forward's user sees.
//!
//! Prints one line per figure; it asserts nothing about time.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use anyhow::Result;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[path = "common/nginx.rs"]
mod nginx;
#[path = "common/rounds.rs"]
mod rounds;
use nginx::Nginx;
use rounds::median;

const BULK: usize = 512 * 1024 * 1024;
const ROUND_TRIPS: usize = 20_000;
const MESSAGE: usize = 64;
const PORT: u16 = 47_700;
/// Rounds of bulk transfers per path.
const ROUNDS: usize = 5;

/// Where the proxy runs: beside client and server, or on a core of its own.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Cores {
    Shared,
    ProxyApart,
}

impl Cores {
    fn describe(self) -> &'static str {
        match self {
            Cores::Shared => "cores shared by client, proxy and server",
            Cores::ProxyApart => "proxy on a core of its own",
        }
    }
}

/// Pins the calling thread to `cpu`.
fn pin(cpu: usize) {
    let mut set = nix::sched::CpuSet::new();
    if set.set(cpu).is_ok() {
        let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set);
    }
}

fn runtime(workers: usize, cpu: Option<usize>) -> Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.worker_threads(workers).enable_all();
    if let Some(cpu) = cpu {
        builder.on_thread_start(move || pin(cpu));
    }
    Ok(builder.build()?)
}

fn main() -> Result<()> {
    let workers = std::thread::available_parallelism().map_or(2, usize::from);
    // Client and servers here, the forward there: one runtime for all, or one pinned to each core.
    let shared = runtime(workers, None)?;
    shared.block_on(measure(Cores::Shared, shared.handle().clone()))?;
    drop(shared);
    if workers < 2 {
        println!("forward on a core of its own: not measured (one CPU)");
        return Ok(());
    }
    let proxy = runtime(1, Some(1))?;
    let client = runtime(1, Some(0))?;
    pin(0);
    client.block_on(measure(Cores::ProxyApart, proxy.handle().clone()))
}

async fn measure(cores: Cores, proxy: tokio::runtime::Handle) -> Result<()> {
    println!("{}:", cores.describe());
    let sink = serve(Sink).await?;
    let echo = serve(Echo).await?;
    let mut registry = prometheus_client::registry::Registry::default();
    let forwarder =
        slipway_edge::forward::Forwarder::new(IpAddr::V4(Ipv4Addr::LOCALHOST), &mut registry);
    let allow: Vec<ipnet::IpNet> = vec!["127.0.0.0/8".parse()?, "2001:db8::/32".parse()?];
    // The forward's listeners and sessions run on the proxy's runtime.
    let _proxy = proxy.enter();
    forwarder.apply(HashMap::from([
        (
            PORT,
            slipway_edge::forward::Entry::new(allow.clone(), vec![sink], "bench/sink".into()),
        ),
        (
            PORT + 1,
            slipway_edge::forward::Entry::new(allow, vec![echo], "bench/echo".into()),
        ),
    ]));
    let via = |port: u16| SocketAddr::from(([127, 0, 0, 1], port));
    drop(_proxy);
    let dir = std::env::temp_dir().join(format!(
        "slipway-bench-forward-{}-{}",
        std::process::id(),
        cores as u8
    ));
    let _nginx = start_nginx(&dir, PORT + 2, sink, echo, cores).await?;

    // One transfer takes a fraction of a second: the three paths take turns for several rounds, and each one's
    // median is reported.
    let mut rates = [Vec::new(), Vec::new(), Vec::new()];
    for _ in 0..ROUNDS {
        for (rate, to) in rates.iter_mut().zip([sink, via(PORT), via(PORT + 2)]) {
            rate.push(throughput(to).await?);
        }
    }
    let [direct, forwarded, nginx] = rates.map(median);
    println!(
        "forward throughput: direct {direct:.0} MiB/s, through the forward {forwarded:.0} MiB/s (ratio {:.2}x), \
         through nginx's stream proxy {nginx:.0} MiB/s (ratio {:.2}x); forward / nginx {:.2}x",
        forwarded / direct,
        nginx / direct,
        forwarded / nginx
    );

    let direct = latency(echo).await?;
    for (name, at) in [
        ("the forward", via(PORT + 1)),
        ("nginx's stream proxy", via(PORT + 3)),
    ] {
        let through = latency(at).await?;
        println!(
            "forward round trip ({MESSAGE} B): direct p50 {} us p99 {} us, through {name} p50 {} us p99 {} us, added p50 {} us p99 {} us",
            direct.0.as_micros(),
            direct.1.as_micros(),
            through.0.as_micros(),
            through.1.as_micros(),
            through.0.saturating_sub(direct.0).as_micros(),
            through.1.saturating_sub(direct.1).as_micros()
        );
    }
    Ok(())
}

/// nginx proxying TCP from 127.0.0.1:`port` to `sink` and from `port + 1` to `echo`, with one worker (the forward
/// is one process too) and its stream module (Debian's libnginx-mod-stream, from hack/install-deps.sh).
async fn start_nginx(
    dir: &std::path::Path,
    port: u16,
    sink: SocketAddr,
    echo: SocketAddr,
    cores: Cores,
) -> Result<Nginx> {
    let conf = format!(
        r#"load_module /usr/lib/nginx/modules/ngx_stream_module.so;
worker_processes 1;
events {{ worker_connections 1024; }}
stream {{
  tcp_nodelay on;
  proxy_half_close on;
  server {{ listen 127.0.0.1:{port}; proxy_pass {sink}; proxy_buffer_size 64k; }}
  server {{ listen 127.0.0.1:{}; proxy_pass {echo}; }}
}}
"#,
        port + 1
    );
    // On a core of its own, nginx runs on the forward's core.
    let prefix: &[&str] = match cores {
        Cores::Shared => &[],
        Cores::ProxyApart => &["taskset", "-c", "1"],
    };
    Nginx::start(
        dir,
        &conf,
        prefix,
        SocketAddr::from(([127, 0, 0, 1], port + 1)),
    )
    .await
}

#[derive(Clone, Copy)]
struct Sink;
#[derive(Clone, Copy)]
struct Echo;

trait Server: Copy + Send + 'static {
    fn handle(self, conn: TcpStream) -> impl std::future::Future<Output = ()> + Send;
}

impl Server for Sink {
    /// Reads everything, then answers one byte (so the client knows all arrived).
    async fn handle(self, mut conn: TcpStream) {
        let mut buf = vec![0u8; 256 * 1024];
        while let Ok(n) = conn.read(&mut buf).await {
            if n == 0 {
                let _ = conn.write_all(b"k").await;
                return;
            }
        }
    }
}

impl Server for Echo {
    async fn handle(self, mut conn: TcpStream) {
        let (mut r, mut w) = conn.split();
        let _ = tokio::io::copy(&mut r, &mut w).await;
    }
}

/// Serves on this machine's address (as a pod's is not loopback), each connection with `server`.
async fn serve(server: impl Server) -> Result<SocketAddr> {
    let probe = std::net::UdpSocket::bind("0.0.0.0:0")?;
    probe.connect("192.0.2.1:9")?;
    let listener = TcpListener::bind((probe.local_addr()?.ip(), 0)).await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            let _ = conn.set_nodelay(true);
            tokio::spawn(server.handle(conn));
        }
    });
    Ok(addr)
}

/// MiB/s of [`BULK`] bytes written to a sink at `addr`, until it confirmed having read them all.
async fn throughput(addr: SocketAddr) -> Result<f64> {
    let mut conn = TcpStream::connect(addr).await?;
    let chunk = vec![7u8; 256 * 1024];
    let started = Instant::now();
    let mut sent = 0;
    while sent < BULK {
        conn.write_all(&chunk).await?;
        sent += chunk.len();
    }
    conn.shutdown().await?;
    let mut done = [0u8; 1];
    conn.read_exact(&mut done).await?;
    Ok(sent as f64 / (1024.0 * 1024.0) / started.elapsed().as_secs_f64())
}

/// p50 and p99 of [`ROUND_TRIPS`] message round trips to an echo server at `addr`, on one connection.
async fn latency(addr: SocketAddr) -> Result<(Duration, Duration)> {
    let mut conn = TcpStream::connect(addr).await?;
    conn.set_nodelay(true)?;
    let message = [9u8; MESSAGE];
    let mut back = [0u8; MESSAGE];
    let mut times = Vec::with_capacity(ROUND_TRIPS);
    for _ in 0..ROUND_TRIPS {
        let started = Instant::now();
        conn.write_all(&message).await?;
        conn.read_exact(&mut back).await?;
        times.push(started.elapsed());
    }
    times.sort_unstable();
    Ok((times[ROUND_TRIPS / 2], times[ROUND_TRIPS * 99 / 100]))
}
