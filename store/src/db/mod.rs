//! The platform database (Postgres through sqlx): users, tokens, memberships, git mirrors, the audit journal,
//! deploy logs, bandwidth, object stores, and what registration and email verification keep. Cluster state (apps, channels, deploys) is not here; it lives in the
//! custom resources.

pub mod audit;
pub mod bandwidth;
pub mod checkpoints;
pub mod claims;
pub mod console_codes;
pub mod deploy_logs;
pub mod domain_claims;
pub mod email_challenges;
pub mod git_maintenance;
pub mod git_refs;
pub mod members;
pub mod mirrors;
pub mod notes;
pub mod notices;
pub mod rate_buckets;
pub mod registrations;
pub mod runtime_logs;
pub mod sql_cancel_keys;
pub mod ssh_keys;
pub mod tokens;
pub mod users;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context;
use sqlx::postgres::{PgPool, PgPoolOptions};

/// Connects and brings the schema up to date.
pub async fn connect(url: &str) -> anyhow::Result<PgPool> {
    let pool = PgPoolOptions::new()
        .max_connections(16)
        .acquire_timeout(Duration::from_secs(5))
        .connect(url)
        .await
        .context("connect to the platform database")?;
    migrate(&pool).await?;
    Ok(pool)
}

/// Waits for a pooled connection that timed out in this process. Counted where the timeout is met (the error
/// answer of a request, a job put back), which has no handle on anything shared; read by `/metrics`.
static POOL_TIMEOUTS: AtomicU64 = AtomicU64::new(0);

/// Counts one wait for a pooled connection that timed out (`sqlx::Error::PoolTimedOut`).
pub fn count_pool_timeout() {
    POOL_TIMEOUTS.fetch_add(1, Ordering::Relaxed);
}

/// The waits for a pooled connection that timed out in this process so far.
pub fn pool_timeouts() -> u64 {
    POOL_TIMEOUTS.load(Ordering::Relaxed)
}

/// A connection of its own to the platform database, outside `pool` but with its settings, for a session-level
/// advisory lock held across long work (a `pg_dump`, an upload, a whole nightly pass). Held from the pool, such a lock
/// took a connection for minutes, and the work under it took another: a handful of checkpoints at once left ordinary
/// requests nothing to run on (`pool timed out`), and waiters on a busy channel's lock held pooled connections while
/// they waited. Dropping it closes the session, which releases its locks.
pub async fn lock_connection(pool: &PgPool) -> sqlx::Result<sqlx::PgConnection> {
    use sqlx::Connection;
    sqlx::PgConnection::connect_with(&pool.connect_options()).await
}

/// Takes the transaction-scoped lock on a channel's data records (its `channel_databases` and `blob_stores` rows),
/// held until `tx` ends. Whoever creates such a record for a channel, or moves records between channels, takes it
/// first: a row that does not exist yet cannot be locked with `FOR UPDATE`, and a transfer that swapped records
/// while the operator recorded the new channel's bucket met that row half-way through its swap (a duplicate key).
pub async fn lock_channel_records(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    channel_id: uuid::Uuid,
) -> sqlx::Result<()> {
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1::text, $2))")
        .bind(channel_id)
        .bind(CHANNEL_RECORDS_SEED)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// The hash seed that keeps [`lock_channel_records`]' keys apart from other per-channel advisory locks.
const CHANNEL_RECORDS_SEED: i64 = 0x7265_6373;

/// The platform database's migrations (`migrations/`), embedded in the binary.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations");

/// Applies the migrations under `migrations/` that have not run yet.
pub async fn migrate(pool: &PgPool) -> anyhow::Result<()> {
    MIGRATOR
        .run(pool)
        .await
        .context("migrate the platform database")
}
