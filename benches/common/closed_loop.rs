//! Closed-loop HTTP load for the benchmarks: `concurrency` clients each send a request as soon as their last one is
//! answered, for a fixed time, and every latency is kept for percentiles. Shared by the benchmarks that measure an
//! API route (`get_apps`, `scale`). Included with `#[path]`.

// Each benchmark that includes this module uses part of it.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;

/// A pooled HTTP/1.1 client without a body.
pub type HttpClient = Client<HttpConnector, Empty<Bytes>>;

/// A new pooled client.
pub fn client() -> HttpClient {
    Client::builder(hyper_util::rt::TokioExecutor::new()).build_http()
}

/// `GET uri` with `Authorization: auth`.
pub fn get(uri: &hyper::Uri, auth: &str) -> Result<hyper::Request<Empty<Bytes>>> {
    Ok(hyper::Request::get(uri.clone())
        .header("authorization", auth)
        .body(Empty::new())?)
}

/// Runs `concurrency` request loops of `GET uri` for `duration`, each answer read to its end and required to be 200;
/// returns every request's latency and the time taken.
pub async fn load(
    client: &HttpClient,
    uri: &hyper::Uri,
    auth: &str,
    concurrency: usize,
    duration: Duration,
) -> Result<(Vec<Duration>, Duration)> {
    load_spread(
        client,
        std::slice::from_ref(uri),
        auth,
        concurrency,
        duration,
    )
    .await
}

/// [`load`] spread over `uris` (the same route on several replicas): loop `i` asks `uris[i % uris.len()]`.
pub async fn load_spread(
    client: &HttpClient,
    uris: &[hyper::Uri],
    auth: &str,
    concurrency: usize,
    duration: Duration,
) -> Result<(Vec<Duration>, Duration)> {
    anyhow::ensure!(!uris.is_empty(), "no address to load");
    let started = Instant::now();
    let mut workers = Vec::new();
    for i in 0..concurrency {
        let (client, uri, auth) = (
            client.clone(),
            uris[i % uris.len()].clone(),
            auth.to_owned(),
        );
        workers.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            while started.elapsed() < duration {
                let t = Instant::now();
                let res = client.request(get(&uri, &auth)?).await?;
                anyhow::ensure!(res.status() == 200, "GET {uri} answered {}", res.status());
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

/// Percentiles of a set of latencies.
#[derive(Debug, Default)]
pub struct Percentiles(Vec<Duration>);

impl Percentiles {
    /// Sorts `latencies`.
    pub fn new(mut latencies: Vec<Duration>) -> Self {
        latencies.sort_unstable();
        Self(latencies)
    }

    /// The latencies, sorted.
    pub fn into_inner(self) -> Vec<Duration> {
        self.0
    }

    /// How many there are.
    pub fn count(&self) -> usize {
        self.0.len()
    }

    /// The `p`-quantile (0.5 for the median), in milliseconds; 0 when there are none.
    pub fn ms(&self, p: f64) -> f64 {
        if self.0.is_empty() {
            return 0.0;
        }
        let i = ((self.0.len() as f64 * p) as usize).min(self.0.len() - 1);
        self.0[i].as_secs_f64() * 1e3
    }

    /// The largest, in milliseconds.
    pub fn max_ms(&self) -> Result<f64> {
        Ok(self.0.last().context("no samples")?.as_secs_f64() * 1e3)
    }
}
