//! `GET /apps` for a user with 100 apps among other users' apps, served from the reflector cache over a real
//! socket: latency percentiles of one client alone (what a person waits) and, at a fixed concurrency, requests per
//! second and the latency under that load. Needs the control plane and Postgres (`make bench` starts them).
//!
//! Prints one line of figures; it asserts nothing about time.

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

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
    let unlimited = slipway::api::state::Limits {
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

    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let uri: hyper::Uri = format!("http://{addr}/apps").parse()?;
    let auth = format!("Bearer {}", user.token);
    let check = client.request(request(&uri, &auth)?).await?;
    anyhow::ensure!(
        check.status() == 200,
        "GET /apps answered {}",
        check.status()
    );
    let body = check.into_body().collect().await?.to_bytes();
    let listed: serde_json::Value = serde_json::from_slice(&body)?;
    anyhow::ensure!(
        listed["apps"].as_array().map(Vec::len) == Some(APPS),
        "expected {APPS} apps"
    );
    eprintln!("response: {} bytes", body.len());

    let _ = load(&client, &uri, &auth, CONCURRENCY, WARMUP).await?;
    for concurrency in [1, CONCURRENCY] {
        let (mut latencies, elapsed) = load(&client, &uri, &auth, concurrency, MEASURE).await?;
        latencies.sort_unstable();
        let pct =
            |p: f64| latencies[((latencies.len() as f64 * p) as usize).min(latencies.len() - 1)];
        println!(
            "GET /apps ({APPS} apps of {} in the cluster, concurrency {concurrency}): {} requests in {:.1}s = {:.0} req/s; p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            APPS + NEIGHBOURS * NEIGHBOUR_APPS,
            latencies.len(),
            elapsed.as_secs_f64(),
            latencies.len() as f64 / elapsed.as_secs_f64(),
            pct(0.50).as_secs_f64() * 1e3,
            pct(0.99).as_secs_f64() * 1e3,
            latencies.last().context("no requests")?.as_secs_f64() * 1e3,
        );
    }
    Ok(())
}

fn request(uri: &hyper::Uri, auth: &str) -> Result<hyper::Request<Empty<Bytes>>> {
    Ok(hyper::Request::get(uri.clone())
        .header("authorization", auth)
        .body(Empty::new())?)
}

/// Runs `concurrency` request loops for `duration`; returns every request's latency.
async fn load(
    client: &Client<hyper_util::client::legacy::connect::HttpConnector, Empty<Bytes>>,
    uri: &hyper::Uri,
    auth: &str,
    concurrency: usize,
    duration: Duration,
) -> Result<(Vec<Duration>, Duration)> {
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..concurrency {
        let (client, uri, auth) = (client.clone(), uri.clone(), auth.to_owned());
        workers.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            while started.elapsed() < duration {
                let t = Instant::now();
                let res = client.request(request(&uri, &auth)?).await?;
                anyhow::ensure!(res.status() == 200, "GET /apps answered {}", res.status());
                res.into_body().collect().await?;
                latencies.push(t.elapsed());
            }
            Ok::<_, anyhow::Error>(latencies)
        }));
    }
    let mut all = Vec::new();
    for w in workers {
        all.extend(w.await??);
    }
    Ok((all, started.elapsed()))
}
