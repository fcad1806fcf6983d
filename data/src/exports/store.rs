//! The `exports` rows: an export's status and where its archive is. Every move is a guarded update (queued to
//! running, running to ready or failed, ready to expired), so a process that lost track of an export (its row was
//! failed as abandoned, or its app deleted) can never move it again.

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

/// How long an export in flight may go without its process's heartbeat before it is failed as abandoned.
pub const ABANDONED_AFTER_SECS: i32 = 90;

/// A row of `exports`.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Export {
    /// Its id.
    pub id: Uuid,
    /// The exported app.
    pub app_id: Uuid,
    /// `queued`, `running`, `ready`, `failed` or `expired`.
    pub status: String,
    /// Why it failed or expired.
    pub reason: Option<String>,
    /// The archive's key, while ready.
    pub object_key: Option<String>,
    /// The archive's bytes, once ready.
    pub size_bytes: Option<i64>,
    /// When it was asked for.
    pub created_at: DateTime<Utc>,
    /// When its build began.
    pub started_at: Option<DateTime<Utc>>,
    /// When it became ready or failed.
    pub finished_at: Option<DateTime<Utc>>,
    /// When a ready archive is deleted.
    pub expires_at: Option<DateTime<Utc>>,
}

/// What asking for an export came to.
#[derive(Debug)]
pub enum Queued {
    /// A new export, queued.
    New(Export),
    /// The app has one in flight already: its id.
    InFlight(Uuid),
}

/// Fails the exports in flight (of `app`, or of every app) whose heartbeat stopped; their ids and apps.
pub async fn abandon_stale(db: &PgPool, app: Option<Uuid>) -> sqlx::Result<Vec<(Uuid, Uuid)>> {
    sqlx::query_as(
        "UPDATE exports SET status = 'failed', finished_at = now(),
             reason = 'the export was interrupted (the process building it stopped); start a new one'
         WHERE status IN ('queued', 'running') AND ($1::uuid IS NULL OR app_id = $1)
           AND heartbeat_at < now() - make_interval(secs => $2)
         RETURNING id, app_id",
    )
    .bind(app)
    .bind(ABANDONED_AFTER_SECS)
    .fetch_all(db)
    .await
}

/// Queues an export of `app` asked for by `user`, unless one is in flight.
pub async fn queue(db: &PgPool, app: Uuid, user: Uuid) -> sqlx::Result<Queued> {
    let inserted: Option<Export> = sqlx::query_as(
        "INSERT INTO exports (id, app_id, requested_by, status) VALUES ($1, $2, $3, 'queued')
         ON CONFLICT (app_id) WHERE status IN ('queued', 'running') DO NOTHING RETURNING *",
    )
    .bind(Uuid::new_v4())
    .bind(app)
    .bind(user)
    .fetch_optional(db)
    .await?;
    if let Some(export) = inserted {
        return Ok(Queued::New(export));
    }
    let in_flight: Option<Uuid> = sqlx::query_scalar(
        "SELECT id FROM exports WHERE app_id = $1 AND status IN ('queued', 'running')",
    )
    .bind(app)
    .fetch_optional(db)
    .await?;
    // Finished between the two statements: the caller may simply ask again.
    Ok(Queued::InFlight(in_flight.unwrap_or_default()))
}

/// The export `id` of `app`.
pub async fn by_id(db: &PgPool, app: Uuid, id: Uuid) -> sqlx::Result<Option<Export>> {
    sqlx::query_as("SELECT * FROM exports WHERE app_id = $1 AND id = $2")
        .bind(app)
        .bind(id)
        .fetch_optional(db)
        .await
}

/// The building process is alive; false once the export is no longer in flight.
pub async fn heartbeat(db: &PgPool, id: Uuid) -> sqlx::Result<bool> {
    let done = sqlx::query(
        "UPDATE exports SET heartbeat_at = now() WHERE id = $1 AND status IN ('queued', 'running')",
    )
    .bind(id)
    .execute(db)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Queued to running; false when it is no longer queued.
pub async fn start(db: &PgPool, id: Uuid) -> sqlx::Result<bool> {
    let done = sqlx::query(
        "UPDATE exports SET status = 'running', started_at = now(), heartbeat_at = now()
         WHERE id = $1 AND status = 'queued'",
    )
    .bind(id)
    .execute(db)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Running to ready with its archive; false when it is no longer running (the archive is then nobody's).
pub async fn ready(
    db: &PgPool,
    id: Uuid,
    key: &str,
    size: u64,
    expires_at: DateTime<Utc>,
) -> sqlx::Result<bool> {
    let done = sqlx::query(
        "UPDATE exports SET status = 'ready', object_key = $2, size_bytes = $3, finished_at = now(), expires_at = $4
         WHERE id = $1 AND status = 'running'",
    )
    .bind(id)
    .bind(key)
    .bind(i64::try_from(size).unwrap_or(i64::MAX))
    .bind(expires_at)
    .execute(db)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// In flight to failed, with the reason.
pub async fn fail(db: &PgPool, id: Uuid, reason: &str) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE exports SET status = 'failed', reason = $2, finished_at = now()
         WHERE id = $1 AND status IN ('queued', 'running')",
    )
    .bind(id)
    .bind(reason)
    .execute(db)
    .await?;
    Ok(())
}

/// Ready exports past their expiry (their archive is to be deleted): ids and apps.
pub async fn due(db: &PgPool) -> sqlx::Result<Vec<(Uuid, Uuid)>> {
    sqlx::query_as("SELECT id, app_id FROM exports WHERE status = 'ready' AND expires_at <= now()")
        .fetch_all(db)
        .await
}

/// Ready to expired (its archive deleted).
pub async fn expire(db: &PgPool, id: Uuid) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE exports SET status = 'expired', object_key = NULL,
             reason = 'the archive expired at ' || to_char(expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')
                      || '; start a new export'
         WHERE id = $1 AND status = 'ready'",
    )
    .bind(id)
    .execute(db)
    .await?;
    Ok(())
}

/// Forgets every export of `app` (the app is gone).
pub async fn remove_app(db: &PgPool, app: Uuid) -> sqlx::Result<()> {
    sqlx::query("DELETE FROM exports WHERE app_id = $1")
        .bind(app)
        .execute(db)
        .await?;
    Ok(())
}
