//! The API process's Prometheus metrics, served on the internal listener's `/metrics`: the external SQL sessions,
//! the jobs this process ran (checkpoints, restores, mirror syncs), the platform database pool and the token
//! cache. Gauges of the pool are read at scrape time, so nothing has to keep them current. No label names a
//! channel, an app or a user: the series stay as few at 10,000 channels as at one.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::Registry;

use super::state::AppState;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ConnectionState {
    state: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LookupResult {
    result: &'static str,
}

/// Every metric of the process, in the OpenMetrics text format.
pub fn encode(state: &AppState) -> String {
    let mut registry = Registry::default();
    state.jobs().metrics().register(&mut registry);
    register_pool(&mut registry, state.db());
    register_token_cache(&mut registry, state.tokens().lookups());
    let mut out = String::new();
    let encoded = encode_registry(&mut out, state.sql_sessions().registry())
        .and_then(|()| encode_registry(&mut out, &registry))
        .and_then(|()| encode_eof(&mut out));
    if let Err(e) = encoded {
        tracing::warn!(error = %e, "encoding the metrics failed");
    }
    out
}

/// The pool's connections now, its ceiling, and the waits for a connection that timed out (each answered 503,
/// or a job put back).
fn register_pool(registry: &mut Registry, db: &sqlx::PgPool) {
    let connections = Family::<ConnectionState, Gauge>::default();
    let idle = i64::try_from(db.num_idle()).unwrap_or(i64::MAX);
    let open = i64::from(db.size());
    connections
        .get_or_create(&ConnectionState { state: "idle" })
        .set(idle);
    connections
        .get_or_create(&ConnectionState { state: "in_use" })
        .set((open - idle).max(0));
    registry.register(
        "slipway_db_pool_connections",
        "Connections of the platform database pool, by state (in_use, idle)",
        connections,
    );
    registry.register(
        "slipway_db_pool_max_connections",
        "Most connections the platform database pool opens",
        ConstGauge::new(i64::from(db.options().get_max_connections())),
    );
    registry.register(
        "slipway_db_pool_acquire_timeouts",
        "Waits for a pooled connection that timed out (the request answered 503 service_unavailable, or the job \
         was put back)",
        ConstCounter::new(slipway_store::db::pool_timeouts()),
    );
}

/// How the token cache answered (a hit saves a database round trip on a request). A fresh counter per scrape, set
/// once to the count so far: the text is the same as a long-lived counter's.
fn register_token_cache(registry: &mut Registry, lookups: slipway_store::db::notices::Lookups) {
    let by_result = Family::<LookupResult, Counter>::default();
    by_result
        .get_or_create(&LookupResult { result: "hit" })
        .inc_by(lookups.hits);
    by_result
        .get_or_create(&LookupResult { result: "miss" })
        .inc_by(lookups.misses);
    registry.register(
        "slipway_token_cache_lookups",
        "Token reads by result: hit (from memory) or miss (from the platform database)",
        by_result,
    );
}
