//! SQL snapshots of a channel's database: `pg_dump -Fc` streamed into the [`Archive`](super::archive::Archive),
//! then a `postgres_snapshots` row. A row exists only for a complete file, so a dump that fails half-way leaves
//! neither. `pre_deploy` snapshots are taken once per deploy (before its new container starts), `nightly` ones
//! once per channel per UTC day, each as the SQL leg of a checkpoint (the API's checkpoints), after which the
//! channel's older rows are pruned to its owner's plan ([`prune`]).

use chrono::{DateTime, Utc};
use slipway_backends::data_server::{DataServer, DumpFormat};
use slipway_crds::plans::Plan;
use sqlx::PgPool;
use uuid::Uuid;

use super::archive::{self, Archive};
use super::progress::{DumpWatch, dump_session_name};
use super::store::Record;
use slipway_jobs::Progress;
pub use slipway_store::db::checkpoints::{Kind, Occasion};
use slipway_store::db::checkpoints::{occasion_row, retention_expired};

/// A row of `postgres_snapshots`.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Snapshot {
    /// The snapshot's id.
    pub id: Uuid,
    /// The channel whose database it holds.
    pub channel_id: Uuid,
    /// That channel's app.
    pub app_id: Uuid,
    /// `pre_deploy` or `nightly`.
    pub kind: String,
    /// The deploy a `pre_deploy` snapshot was taken for.
    pub deploy_id: Option<Uuid>,
    /// The commit that ran when it was taken.
    pub git_sha: Option<String>,
    /// Its file in the archive.
    pub object_key: Option<String>,
    /// Size of that file.
    pub size_bytes: Option<i64>,
    /// When it was taken.
    pub created_at: DateTime<Utc>,
    /// Whether an object-store marker of the same checkpoint exists (read by [`list`] and [`by_id`]).
    #[sqlx(default)]
    pub aligned_blob: bool,
}

/// The columns of a row with its `aligned_blob`.
const WITH_ALIGNMENT: &str = "s.*, EXISTS (SELECT 1 FROM blob_snapshots b WHERE b.pg_snapshot_id = s.id) \
                              AS aligned_blob FROM postgres_snapshots s";

/// The parts a snapshot is made with.
#[derive(Clone, Copy)]
pub struct Parts<'a> {
    /// The platform database (the rows).
    pub db: &'a PgPool,
    /// The data server (the dump).
    pub server: &'a DataServer,
    /// The archive (the file).
    pub archive: &'a Archive,
}

/// The channel's snapshots, newest first.
pub async fn list(db: &PgPool, channel_id: Uuid) -> sqlx::Result<Vec<Snapshot>> {
    let query =
        format!("SELECT {WITH_ALIGNMENT} WHERE s.channel_id = $1 ORDER BY s.created_at DESC, s.id");
    sqlx::query_as(sqlx::AssertSqlSafe(query))
        .bind(channel_id)
        .fetch_all(db)
        .await
}

/// One snapshot of the channel.
pub async fn by_id(db: &PgPool, channel_id: Uuid, id: Uuid) -> sqlx::Result<Option<Snapshot>> {
    let query = format!("SELECT {WITH_ALIGNMENT} WHERE s.channel_id = $1 AND s.id = $2");
    sqlx::query_as(sqlx::AssertSqlSafe(query))
        .bind(channel_id)
        .bind(id)
        .fetch_optional(db)
        .await
}

/// The snapshot this occasion already has: the deploy's, or today's nightly.
async fn existing(
    db: &PgPool,
    channel_id: Uuid,
    occasion: &Occasion,
) -> sqlx::Result<Option<Snapshot>> {
    occasion_row("postgres_snapshots", db, channel_id, occasion).await
}

/// Takes the occasion's snapshot of `record`'s database, unless it has one; the snapshot either way. How far the
/// dump has got goes into `progress` as it runs. Pruning is the checkpoint's (the API's checkpoints).
pub async fn take(
    parts: Parts<'_>,
    record: &Record,
    occasion: &Occasion,
    progress: &Progress,
) -> anyhow::Result<Snapshot> {
    if let Some(snapshot) = existing(parts.db, record.channel_id, occasion).await? {
        return Ok(snapshot);
    }
    let id = Uuid::new_v4();
    let key = archive::object_key(record.channel_id, id);
    let session = dump_session_name(id);
    let mut dump = parts
        .server
        .dump_command(&record.db_name, DumpFormat::Custom);
    dump.env("PGAPPNAME", &session);
    let watch = DumpWatch::start(parts.server, &record.db_name, session).await?;
    let body = super::stream::stdout_of(dump, "pg_dump")?;
    let size = watch
        .during(progress, Box::pin(parts.archive.upload(&key, body)))
        .await?;
    let inserted: Option<Snapshot> = sqlx::query_as(
        "INSERT INTO postgres_snapshots (id, channel_id, app_id, kind, deploy_id, git_sha, object_key, size_bytes) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING RETURNING *",
    )
    .bind(id)
    .bind(record.channel_id)
    .bind(record.app_id)
    .bind(occasion.kind.as_str())
    .bind(occasion.deploy_id)
    .bind(&occasion.git_sha)
    .bind(&key)
    .bind(i64::try_from(size).unwrap_or(i64::MAX))
    .fetch_optional(parts.db)
    .await?;
    match inserted {
        Some(snapshot) => {
            tracing::info!(channel_id = %record.channel_id, kind = occasion.kind.as_str(), size, "snapshot taken");
            Ok(snapshot)
        }
        // A concurrent call took this occasion's snapshot first: keep its row, drop this file.
        None => {
            parts.archive.delete(&key).await?;
            existing(parts.db, record.channel_id, occasion)
                .await?
                .ok_or_else(|| {
                    anyhow::anyhow!("the snapshot of channel {} vanished", record.channel_id)
                })
        }
    }
}

/// Removes the rows (and files) the plan no longer keeps. The caller holds the channel's checkpoint lock
/// (the API's `checkpoints::exclusively`), which restores take too, so no restore is reading a file removed here.
pub async fn prune(parts: Parts<'_>, channel_id: Uuid, plan: &Plan) -> anyhow::Result<()> {
    for id in retention_expired("postgres_snapshots", parts.db, channel_id, plan).await? {
        if let Some(snapshot) = by_id(parts.db, channel_id, id).await? {
            forget(parts.db, parts.archive, &snapshot).await?;
        }
    }
    Ok(())
}

/// Removes a snapshot's row, then its file: a row always has its whole file (a restore or download of a listed
/// snapshot never finds it half-gone). A file whose removal fails is left without a row, bytes in the archive
/// that nothing lists, rather than a row that lists nothing.
async fn forget(db: &PgPool, archive: &Archive, snapshot: &Snapshot) -> anyhow::Result<()> {
    sqlx::query("DELETE FROM postgres_snapshots WHERE id = $1")
        .bind(snapshot.id)
        .execute(db)
        .await?;
    if let Some(key) = &snapshot.object_key {
        archive.delete(key).await?;
    }
    Ok(())
}

/// Removes every snapshot of a channel (its database is gone).
pub async fn forget_channel(
    db: &PgPool,
    archive: &Archive,
    channel_id: Uuid,
) -> anyhow::Result<()> {
    for snapshot in list(db, channel_id).await? {
        forget(db, archive, &snapshot).await?;
    }
    Ok(())
}
