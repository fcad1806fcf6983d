//! `GET /apps` for a user with 100 apps among other users' apps, served from the reflector cache over a real
//! socket: latency percentiles of one client alone (what a person waits) and, at a fixed concurrency, requests per
//! second and the latency under that load; then the same load spread over two replicas (another API process's
//! state on the same database, with reflectors of its own), with the ratio to one. Needs the control plane and
//! Postgres (`make bench` starts them).
//!
//! Prints its figures; it asserts nothing about time.

#[path = "common/closed_loop.rs"]
mod closed_loop;
#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use anyhow::Result;
use closed_loop::{Percentiles, load, load_spread};
use http_body_util::BodyExt;

const APPS: usize = 100;
/// Other accounts, each with [`NEIGHBOUR_APPS`] apps: a user's listing should not cost the cluster's size.
const NEIGHBOURS: usize = 10;
const NEIGHBOUR_APPS: usize = 30;
const CONCURRENCY: usize = 16;
const WARMUP: Duration = Duration::from_secs(2);
const MEASURE: Duration = Duration::from_secs(10);

#[tokio::main]
async fn main() -> Result<()> {
    // It measures throughput, so the token gets no request budget (the default would answer 429 past 10/s).
    let unlimited = slipway_core::state::Limits {
        rate: None,
        ..Default::default()
    };
    let api = support::TestApi::start().await?.with_limits(unlimited);
    let user = api.user("bench", "pro").await?;
    eprintln!("creating {APPS} apps through the API...");
    let started = Instant::now();
    for i in 0..APPS {
        api.create_app(&user, &format!("app{i:03}"), "static").await;
    }
    eprintln!(
        "created {APPS} apps in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    for n in 0..NEIGHBOURS {
        let neighbour = api.user(&format!("n{n}"), "pro").await?;
        for i in 0..NEIGHBOUR_APPS {
            api.create_app(&neighbour, &format!("app{i:03}"), "static")
                .await;
        }
    }
    eprintln!(
        "created {} apps of {NEIGHBOURS} other users",
        NEIGHBOURS * NEIGHBOUR_APPS
    );

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let router = api.router.clone();
    tokio::spawn(async move { axum::serve(listener, router).await });

    let client = closed_loop::client();
    let uri: hyper::Uri = format!("http://{addr}/apps").parse()?;
    let auth = format!("Bearer {}", user.token);
    let bytes = check_listing(&client, &uri, &auth).await?;
    eprintln!("response: {bytes} bytes");

    let _ = load(&client, &uri, &auth, CONCURRENCY, WARMUP).await?;
    let mut one_replica = 0.0;
    for concurrency in [1, CONCURRENCY] {
        let (latencies, elapsed) = load(&client, &uri, &auth, concurrency, MEASURE).await?;
        one_replica = report("one replica", concurrency, latencies, elapsed)?;
    }

    // A second replica on the same database and cluster, with its own reflectors, the clients spread over both.
    let replica = slipway_api::routes::public(api.replica_state().await?.with_limits(unlimited));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let second: hyper::Uri = format!("http://{}/apps", listener.local_addr()?).parse()?;
    tokio::spawn(async move { axum::serve(listener, replica).await });
    check_listing(&client, &second, &auth).await?;
    let both = [uri, second];
    let _ = load_spread(&client, &both, &auth, CONCURRENCY, WARMUP).await?;
    let (latencies, elapsed) = load_spread(&client, &both, &auth, CONCURRENCY, MEASURE).await?;
    let two_replicas = report("two replicas", CONCURRENCY, latencies, elapsed)?;
    println!(
        "GET /apps, two replicas against one at concurrency {CONCURRENCY}: {two_replicas:.0} req/s against {one_replica:.0}, ratio {:.2} ({} cores here, shared by both replicas and the clients)",
        two_replicas / one_replica,
        std::thread::available_parallelism().map_or(1, usize::from),
    );
    Ok(())
}

/// Prints one line of figures for `latencies` taken over `elapsed`; returns the requests per second.
fn report(
    replicas: &str,
    concurrency: usize,
    latencies: Vec<Duration>,
    elapsed: Duration,
) -> Result<f64> {
    let latencies = Percentiles::new(latencies);
    let per_second = latencies.count() as f64 / elapsed.as_secs_f64();
    println!(
        "GET /apps ({APPS} apps of {} in the cluster, {replicas}, concurrency {concurrency}): {} requests in {:.1}s = {per_second:.0} req/s; p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        APPS + NEIGHBOURS * NEIGHBOUR_APPS,
        latencies.count(),
        elapsed.as_secs_f64(),
        latencies.ms(0.50),
        latencies.ms(0.99),
        latencies.max_ms()?,
    );
    Ok(per_second)
}

/// Checks that `GET uri` lists the user's [`APPS`] apps; returns the size of the answer.
async fn check_listing(
    client: &closed_loop::HttpClient,
    uri: &hyper::Uri,
    auth: &str,
) -> Result<usize> {
    let check = client.request(closed_loop::get(uri, auth)?).await?;
    anyhow::ensure!(
        check.status() == 200,
        "GET {uri} answered {}",
        check.status()
    );
    let body = check.into_body().collect().await?.to_bytes();
    let listed: serde_json::Value = serde_json::from_slice(&body)?;
    anyhow::ensure!(
        listed["apps"].as_array().map(Vec::len) == Some(APPS),
        "expected {APPS} apps from {uri}"
    );
    Ok(body.len())
}
