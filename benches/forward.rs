//! Raw TCP forwarding through the edge's forward listener against a direct connection to the same server, and
//! against nginx's TCP proxy (the `stream` module, one worker) in front of the same server in the same run: bulk
//! throughput (MiB/s one way, into a sink) and round-trip latency of 64-byte messages (p50, p99), with each
//! proxy's ratio to the direct connection and the latency it adds. The listener is the edge's own
//! (`slipway::edge::forward`), with an allowlist to check on every accept; the server stands in for the channel's
//! pod, on this machine's address. Client, proxy and server share this machine's cores, so a proxy's ratio here
//! is its CPU cost beside the kernel's, not what a network-bound forward would see.
//!
//! Prints one line per figure; it asserts nothing about time.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use anyhow::Result;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const BULK: usize = 512 * 1024 * 1024;
const ROUND_TRIPS: usize = 20_000;
const MESSAGE: usize = 64;
const PORT: u16 = 47_700;

#[tokio::main]
async fn main() -> Result<()> {
    let sink = serve(Sink).await?;
    let echo = serve(Echo).await?;
    let mut registry = prometheus_client::registry::Registry::default();
    let forwarder =
        slipway::edge::forward::Forwarder::new(IpAddr::V4(Ipv4Addr::LOCALHOST), &mut registry);
    let allow: Vec<ipnet::IpNet> = vec!["127.0.0.0/8".parse()?, "2001:db8::/32".parse()?];
    forwarder.apply(HashMap::from([
        (
            PORT,
            slipway::edge::forward::Entry::new(allow.clone(), vec![sink], "bench/sink".into()),
        ),
        (
            PORT + 1,
            slipway::edge::forward::Entry::new(allow, vec![echo], "bench/echo".into()),
        ),
    ]));
    let via = |port: u16| SocketAddr::from(([127, 0, 0, 1], port));
    let dir = std::env::temp_dir().join(format!("slipway-bench-forward-{}", std::process::id()));
    let _nginx = start_nginx(&dir, PORT + 2, sink, echo).await?;

    let direct = throughput(sink).await?;
    let forwarded = throughput(via(PORT)).await?;
    let nginx = throughput(via(PORT + 2)).await?;
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

/// A running nginx, stopped (master and worker) and its directory removed when dropped.
struct Nginx {
    dir: std::path::PathBuf,
    _child: tokio::process::Child,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let d = self.dir.display().to_string();
        let _ = std::process::Command::new("nginx")
            .args(["-p", &d, "-c", &format!("{d}/nginx.conf"), "-s", "stop"])
            .stderr(std::process::Stdio::null())
            .status();
        // The master stops its worker and removes its pid file; only then may it be killed (a worker whose master
        // was killed keeps the ports).
        let pid_file = self.dir.join("nginx.pid");
        for _ in 0..100 {
            if !pid_file.exists() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// nginx proxying TCP from 127.0.0.1:`port` to `sink` and from `port + 1` to `echo`, with one worker (the forward
/// is one process too) and its stream module (Debian's libnginx-mod-stream, from hack/install-deps.sh).
async fn start_nginx(
    dir: &std::path::Path,
    port: u16,
    sink: SocketAddr,
    echo: SocketAddr,
) -> Result<Nginx> {
    use anyhow::Context as _;
    std::fs::create_dir_all(dir)?;
    let d = dir.display();
    let conf = format!(
        r#"load_module /usr/lib/nginx/modules/ngx_stream_module.so;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
daemon off;
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
    std::fs::write(dir.join("nginx.conf"), conf)?;
    let child = tokio::process::Command::new("nginx")
        .args(["-p", &format!("{d}"), "-c", &format!("{d}/nginx.conf")])
        .kill_on_drop(true)
        .spawn()
        .context(
            "start nginx (hack/install-deps.sh installs nginx-light and libnginx-mod-stream)",
        )?;
    let ready = SocketAddr::from(([127, 0, 0, 1], port + 1));
    let nginx = Nginx {
        dir: dir.to_owned(),
        _child: child,
    };
    for _ in 0..100 {
        if TcpStream::connect(ready).await.is_ok() {
            return Ok(nginx);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    anyhow::bail!("nginx did not listen on {ready} (see {d}/error.log)")
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
