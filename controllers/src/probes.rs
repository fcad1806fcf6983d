//! Asks the backends the operator provisions on, every [`EVERY`], whether they answer, for the
//! `slipway_backend_up` gauge: the data server (channel databases) and the object store (channel buckets). A
//! backend that does not answer stops every provisioning and checkpoint long before a reconcile error says why;
//! the gauge lets an alert say it at once. The leader probes, as it is the one that provisions; the other replicas
//! have no such series.

use std::time::Duration;

use crate::context::Context;
use crate::metrics::Backend;

/// How often the backends are asked.
pub const EVERY: Duration = Duration::from_secs(30);
/// Longest a probe may take before its backend counts as down.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// Probes the configured backends for as long as it is polled.
pub async fn run(ctx: &Context) {
    if ctx.postgres.is_none() && ctx.blob.is_none() {
        return std::future::pending().await;
    }
    let mut every = tokio::time::interval(EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        if let Some(postgres) = &ctx.postgres {
            let query = sqlx::query("SELECT 1").execute(postgres.server.pool());
            let up = matches!(tokio::time::timeout(TIMEOUT, query).await, Ok(Ok(_)));
            record(ctx, Backend::DataServer, up);
        }
        if let Some(blob) = &ctx.blob {
            // A name no channel's bucket has (a uid is 36 characters): a 404 is the answer expected.
            let bucket = format!("{}probe", blob.bucket_prefix);
            let answered = tokio::time::timeout(TIMEOUT, blob.backend.answers(&bucket)).await;
            let up = matches!(answered, Ok(Ok(())));
            record(ctx, Backend::ObjectStore, up);
        }
    }
}

fn record(ctx: &Context, backend: Backend, up: bool) {
    if ctx.metrics.set_backend_up(backend, up) != Some(up) {
        if up {
            tracing::info!(backend = backend.label(), "the backend answers");
        } else {
            tracing::warn!(backend = backend.label(), "the backend does not answer");
        }
    }
}
