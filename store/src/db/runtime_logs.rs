//! Runtime logs: the container generations of each channel and their output, appended by the operator's log
//! archive and read by the runtime-log route.
//!
//! Bounded per channel (the numbers are documented in ARCHITECTURE.md): the newest [`CHANNEL_BYTES`] of output
//! across the newest [`CHANNEL_GENERATIONS`] generations, and a generation is forgotten [`RETENTION_DAYS`] after its
//! container ended. Output is trimmed from the oldest chunk on, so a long-lived container keeps its latest lines.

use chrono::{DateTime, Utc};
use sqlx::{PgPool, Postgres, Transaction};
use uuid::Uuid;

/// Output kept per channel, all generations together.
pub const CHANNEL_BYTES: i64 = 10 * 1024 * 1024;
/// Generations kept per channel.
pub const CHANNEL_GENERATIONS: i32 = 50;
/// Days a generation is kept after its container ended.
pub const RETENTION_DAYS: i32 = 7;

/// What trimming brings a channel down to once it passes [`CHANNEL_BYTES`], so the next appends do not trim again
/// at once.
const TRIM_TO: i64 = CHANNEL_BYTES / 4 * 3;

/// The facts of one container generation, as its pod last reported them.
#[derive(Debug, Clone)]
pub struct Facts {
    /// The channel's app.
    pub app_id: Uuid,
    /// The channel.
    pub channel_id: Uuid,
    /// The runtime's id of the instance.
    pub container_id: String,
    /// The pod it runs (ran) in.
    pub pod_name: String,
    /// The deploy whose pod it is.
    pub deploy_id: Option<Uuid>,
    /// Whether it is running.
    pub running: bool,
    /// `running`, `waiting` or `exited`.
    pub status: String,
    /// The process's exit code, once it ended.
    pub exit_code: Option<i32>,
    /// Whether the kernel killed it for passing its memory limit.
    pub oom_killed: bool,
    /// When it started.
    pub started_at: Option<DateTime<Utc>>,
    /// When it ended.
    pub finished_at: Option<DateTime<Utc>>,
}

/// A row of `runtime_containers`.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Generation {
    /// Row id (the chunks' key).
    pub id: i64,
    /// Per-channel generation number.
    pub container_index: i32,
    /// The runtime's id of the instance.
    pub container_id: String,
    /// The pod it runs (ran) in.
    pub pod_name: String,
    /// Whether it is running.
    pub running: bool,
    /// `running`, `waiting` or `exited`.
    pub status: String,
    /// The process's exit code.
    pub exit_code: Option<i32>,
    /// Killed for passing its memory limit.
    pub oom_killed: bool,
    /// How many generations ran in the same pod before this one: the pod's restart count when it started.
    pub restart_count: i32,
    /// When it started.
    pub started_at: Option<DateTime<Utc>>,
    /// When it ended.
    pub finished_at: Option<DateTime<Utc>>,
    /// Bytes of output kept.
    pub log_bytes: i64,
    /// Timestamp of the last line kept.
    pub last_timestamp: Option<String>,
}

/// Records a generation or updates its facts; answers the row. A generation that ended stays ended (a late report
/// of it running changes nothing), and a new one is numbered after the channel's newest, under a per-channel lock;
/// its restart count is one more than the pod's generation before it (0 for a pod's first).
pub async fn upsert(db: &PgPool, facts: &Facts) -> sqlx::Result<Generation> {
    let mut tx = db.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1::text, 22))")
        .bind(facts.channel_id)
        .execute(&mut *tx)
        .await?;
    let written: Option<Generation> = sqlx::query_as(
        "INSERT INTO runtime_containers (app_id, channel_id, container_index, container_id, pod_name, deploy_id,
             running, status, exit_code, oom_killed, restart_count, started_at, finished_at)
         SELECT $1, $2, COALESCE(MAX(container_index) + 1, 0), $3, $4, $5, $6, $7, $8, $9,
             COALESCE((SELECT restart_count + 1 FROM runtime_containers
                       WHERE channel_id = $2 AND pod_name = $4 ORDER BY container_index DESC LIMIT 1), 0),
             $10, $11
         FROM runtime_containers WHERE channel_id = $2
         ON CONFLICT (container_id) DO UPDATE SET running = EXCLUDED.running, status = EXCLUDED.status,
             exit_code = EXCLUDED.exit_code, oom_killed = EXCLUDED.oom_killed,
             started_at = COALESCE(runtime_containers.started_at, EXCLUDED.started_at),
             finished_at = EXCLUDED.finished_at
         WHERE runtime_containers.finished_at IS NULL
         RETURNING *",
    )
    .bind(facts.app_id)
    .bind(facts.channel_id)
    .bind(&facts.container_id)
    .bind(&facts.pod_name)
    .bind(facts.deploy_id)
    .bind(facts.running)
    .bind(&facts.status)
    .bind(facts.exit_code)
    .bind(facts.oom_killed)
    .bind(facts.started_at)
    .bind(facts.finished_at)
    .fetch_optional(&mut *tx)
    .await?;
    let row = match written {
        Some(row) => row,
        // It ended before: left as it was.
        None => {
            sqlx::query_as("SELECT * FROM runtime_containers WHERE container_id = $1")
                .bind(&facts.container_id)
                .fetch_one(&mut *tx)
                .await?
        }
    };
    // The oldest generations beyond the count go, output and all.
    sqlx::query("DELETE FROM runtime_containers WHERE channel_id = $1 AND container_index <= $2")
        .bind(facts.channel_id)
        .bind(row.container_index - CHANNEL_GENERATIONS)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(row)
}

/// Appends whole lines of output to the generation `container_id`, the last of them stamped `last_timestamp`, and
/// trims the channel back under its cap. `None` when no such generation is recorded. A batch whose last line is not
/// newer than what is recorded is a repeat (an append whose answer was lost) and is dropped. Appends of one channel
/// take its lock in turn: two generations draining at once (the one before a restart and the one after) trim the
/// same rows.
pub async fn append(
    db: &PgPool,
    container_id: &str,
    content: &[u8],
    last_timestamp: &str,
) -> sqlx::Result<Option<()>> {
    let mut tx = db.begin().await?;
    let Some(channel) = sqlx::query_scalar::<_, Uuid>(
        "SELECT channel_id FROM runtime_containers WHERE container_id = $1",
    )
    .bind(container_id)
    .fetch_optional(&mut *tx)
    .await?
    else {
        return Ok(None);
    };
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1::text, 22))")
        .bind(channel)
        .execute(&mut *tx)
        .await?;
    let row: Option<(i64, Option<String>)> = sqlx::query_as(
        "SELECT id, last_timestamp FROM runtime_containers WHERE container_id = $1 FOR UPDATE",
    )
    .bind(container_id)
    .fetch_optional(&mut *tx)
    .await?;
    let Some((id, recorded)) = row else {
        return Ok(None);
    };
    if recorded.is_some_and(|r| !is_later(last_timestamp, &r)) {
        return Ok(Some(()));
    }
    sqlx::query(
        "UPDATE runtime_containers SET log_bytes = log_bytes + $2, last_timestamp = $3 WHERE id = $1",
    )
    .bind(id)
    .bind(i64::try_from(content.len()).unwrap_or(i64::MAX))
    .bind(last_timestamp)
    .execute(&mut *tx)
    .await?;
    sqlx::query("INSERT INTO runtime_log_chunks (container, content) VALUES ($1, $2)")
        .bind(id)
        .bind(content)
        .execute(&mut *tx)
        .await?;
    let total: Option<i64> = sqlx::query_scalar(
        "SELECT SUM(log_bytes)::bigint FROM runtime_containers WHERE channel_id = $1",
    )
    .bind(channel)
    .fetch_one(&mut *tx)
    .await?;
    if total.unwrap_or(0) > CHANNEL_BYTES {
        trim(&mut tx, channel).await?;
    }
    tx.commit().await?;
    Ok(Some(()))
}

/// Whether RFC 3339 timestamp `a` is after `b` (an unreadable one is taken as later: nothing is dropped for it).
fn is_later(a: &str, b: &str) -> bool {
    match (
        DateTime::parse_from_rfc3339(a),
        DateTime::parse_from_rfc3339(b),
    ) {
        (Ok(a), Ok(b)) => a > b,
        _ => true,
    }
}

/// Deletes the channel's oldest chunks until at most [`TRIM_TO`] bytes remain, and keeps each generation's count
/// true.
async fn trim(tx: &mut Transaction<'_, Postgres>, channel: Uuid) -> sqlx::Result<()> {
    sqlx::query(
        "WITH ordered AS (
             SELECT c.container, c.seq,
                 SUM(octet_length(c.content)) OVER (ORDER BY c.seq DESC) AS newer
             FROM runtime_log_chunks c JOIN runtime_containers r ON r.id = c.container
             WHERE r.channel_id = $1),
         gone AS (
             DELETE FROM runtime_log_chunks d USING ordered o
             WHERE d.container = o.container AND d.seq = o.seq AND o.newer > $2
             RETURNING d.container, octet_length(d.content) AS bytes),
         per AS (SELECT container, SUM(bytes) AS bytes FROM gone GROUP BY container)
         UPDATE runtime_containers r SET log_bytes = r.log_bytes - per.bytes FROM per WHERE r.id = per.container",
    )
    .bind(channel)
    .bind(TRIM_TO)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// The channel's generations, oldest first.
pub async fn generations(db: &PgPool, channel: Uuid) -> sqlx::Result<Vec<Generation>> {
    sqlx::query_as(
        "SELECT * FROM runtime_containers WHERE channel_id = $1 ORDER BY container_index",
    )
    .bind(channel)
    .fetch_all(db)
    .await
}

/// The channel's newest generation, if any.
pub async fn newest(db: &PgPool, channel: Uuid) -> sqlx::Result<Option<Generation>> {
    sqlx::query_as(
        "SELECT * FROM runtime_containers WHERE channel_id = $1 ORDER BY container_index DESC LIMIT 1",
    )
    .bind(channel)
    .fetch_optional(db)
    .await
}

/// The output kept of one generation, whole.
pub async fn output(db: &PgPool, generation: i64) -> sqlx::Result<Vec<u8>> {
    let bytes: Option<Vec<u8>> = sqlx::query_scalar(
        "SELECT string_agg(content, ''::bytea ORDER BY seq) FROM runtime_log_chunks WHERE container = $1",
    )
    .bind(generation)
    .fetch_one(db)
    .await?;
    Ok(bytes.unwrap_or_default())
}

/// Records as ended every generation still running whose instance is not in `live` (every instance a full list of
/// the app pods shows); answers how many.
pub async fn settle(db: &PgPool, live: &[String]) -> sqlx::Result<u64> {
    let done = sqlx::query(
        "UPDATE runtime_containers SET running = false, status = 'exited', finished_at = now()
         WHERE finished_at IS NULL AND NOT (container_id = ANY($1))",
    )
    .bind(live)
    .execute(db)
    .await?;
    Ok(done.rows_affected())
}

/// Forgets generations whose container ended more than [`RETENTION_DAYS`] ago; answers how many.
pub async fn prune(db: &PgPool) -> sqlx::Result<u64> {
    let done = sqlx::query(
        "DELETE FROM runtime_containers WHERE finished_at < now() - make_interval(days => $1)",
    )
    .bind(RETENTION_DAYS)
    .execute(db)
    .await?;
    Ok(done.rows_affected())
}

/// Forgets everything of a deleted app.
pub async fn remove_app(db: &PgPool, app: Uuid) -> sqlx::Result<()> {
    sqlx::query("DELETE FROM runtime_containers WHERE app_id = $1")
        .bind(app)
        .execute(db)
        .await?;
    Ok(())
}

/// Forgets everything of a deleted channel.
pub async fn remove_channel(db: &PgPool, channel: Uuid) -> sqlx::Result<()> {
    sqlx::query("DELETE FROM runtime_containers WHERE channel_id = $1")
        .bind(channel)
        .execute(db)
        .await?;
    Ok(())
}
