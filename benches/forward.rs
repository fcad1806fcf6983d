//! Raw TCP forwarding through the edge's forward listener against a direct connection to the same server: bulk
//! throughput (MiB/s one way, into a sink) and round-trip latency of 64-byte messages (p50, p99), with the
//! forward's ratio and the latency it adds. The listener is the edge's own (`slipway::edge::forward`), with an
//! allowlist to check on every accept; the server stands in for the channel's pod, on this machine's address.
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

    let direct = throughput(sink).await?;
    let forwarded = throughput(via(PORT)).await?;
    println!(
        "forward throughput: direct {direct:.0} MiB/s, through the forward {forwarded:.0} MiB/s, ratio {:.2}x",
        forwarded / direct
    );

    let (direct50, direct99) = latency(echo).await?;
    let (fwd50, fwd99) = latency(via(PORT + 1)).await?;
    println!(
        "forward round trip ({MESSAGE} B): direct p50 {} us p99 {} us, through the forward p50 {} us p99 {} us, added p50 {} us p99 {} us",
        direct50.as_micros(),
        direct99.as_micros(),
        fwd50.as_micros(),
        fwd99.as_micros(),
        fwd50.saturating_sub(direct50).as_micros(),
        fwd99.saturating_sub(direct99).as_micros()
    );
    Ok(())
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
