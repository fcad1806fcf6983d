//! External SQL access: what the proxy (`slipway api --sql-listen`, TLS to the client, plain TCP to the data server)
//! costs against a direct connection to the data server as the same channel role. Latency: `SELECT 1` round trips
//! over one connection, p50 and p99 each way and the difference the proxy adds. Throughput: `SELECT 1` queries per
//! second over a few connections at once, with the ratio. Needs the control plane, the platform Postgres and the
//! data server (`make bench` starts them).
//!
//! Prints one line per figure; it asserts nothing about time.

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::json;
use sqlx::Connection;
use sqlx::postgres::PgConnection;

const WARMUP_QUERIES: usize = 500;
const LATENCY_QUERIES: usize = 10_000;
const CONNECTIONS: usize = 4;
const THROUGHPUT_FOR: Duration = Duration::from_secs(5);

/// Round-trip times of `SELECT 1` over one connection to `url`, sorted.
async fn round_trips(url: &str) -> Result<Vec<Duration>> {
    let mut conn = PgConnection::connect(url).await?;
    for _ in 0..WARMUP_QUERIES {
        sqlx::query_scalar::<_, i32>("SELECT 1")
            .fetch_one(&mut conn)
            .await?;
    }
    let mut times = Vec::with_capacity(LATENCY_QUERIES);
    for _ in 0..LATENCY_QUERIES {
        let started = Instant::now();
        sqlx::query_scalar::<_, i32>("SELECT 1")
            .fetch_one(&mut conn)
            .await?;
        times.push(started.elapsed());
    }
    conn.close().await?;
    times.sort();
    Ok(times)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let at = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[at]
}

/// `SELECT 1` per second over [`CONNECTIONS`] connections to `url` for [`THROUGHPUT_FOR`].
async fn throughput(url: &str) -> Result<f64> {
    let mut conns = Vec::new();
    for _ in 0..CONNECTIONS {
        conns.push(PgConnection::connect(url).await?);
    }
    let until = Instant::now() + THROUGHPUT_FOR;
    let started = Instant::now();
    let workers = conns.into_iter().map(|mut conn| {
        tokio::spawn(async move {
            let mut done = 0u64;
            while Instant::now() < until {
                sqlx::query_scalar::<_, i32>("SELECT 1")
                    .fetch_one(&mut conn)
                    .await?;
                done += 1;
            }
            conn.close().await?;
            Ok::<_, sqlx::Error>(done)
        })
    });
    let mut total = 0;
    for worker in futures::future::join_all(workers).await {
        total += worker??;
    }
    Ok(total as f64 / started.elapsed().as_secs_f64())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[tokio::main]
async fn main() -> Result<()> {
    let f = support::postgres::fixture("benchsql", "pro").await?;
    f.ready(&f.prod_id).await;
    f.api
        .call(
            axum::http::Method::PATCH,
            &format!("/apps/{}", f.app_id),
            Some(&f.user.token),
            Some(json!({"external_db_access_enabled": true})),
        )
        .await
        .expect(200, None);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    let tls = slipway_data::sql_proxy::tls::server_config(None, &["localhost".to_owned()])?;
    let state = f.api.state.clone();
    tokio::spawn(async move { slipway_data::sql_proxy::serve(state, listener, tls).await });

    let env = support::postgres::variables(&f.api, &f.prod_id).await?;
    let direct = env
        .get("DATABASE_URL")
        .context("the channel's DATABASE_URL")?
        .clone();
    let proxied = format!(
        "postgresql://{}:{}@127.0.0.1:{port}/shop?sslmode=require",
        f.user.username, f.user.token
    );

    let direct_times = round_trips(&direct).await?;
    let proxied_times = round_trips(&proxied).await?;
    let (d50, d99) = (
        percentile(&direct_times, 0.50),
        percentile(&direct_times, 0.99),
    );
    let (p50, p99) = (
        percentile(&proxied_times, 0.50),
        percentile(&proxied_times, 0.99),
    );
    println!(
        "sql proxy latency (SELECT 1, {LATENCY_QUERIES} round trips): direct p50 {:.3} ms p99 {:.3} ms, through the proxy (TLS) p50 {:.3} ms p99 {:.3} ms, added p50 {:.3} ms p99 {:.3} ms",
        ms(d50),
        ms(d99),
        ms(p50),
        ms(p99),
        ms(p50.saturating_sub(d50)),
        ms(p99.saturating_sub(d99)),
    );

    let direct_qps = throughput(&direct).await?;
    let proxied_qps = throughput(&proxied).await?;
    println!(
        "sql proxy throughput (SELECT 1 over {CONNECTIONS} connections, {}s): direct {direct_qps:.0} queries/s, through the proxy {proxied_qps:.0} queries/s, ratio {:.2}x",
        THROUGHPUT_FOR.as_secs(),
        proxied_qps / direct_qps
    );
    Ok(())
}
