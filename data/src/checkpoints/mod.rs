//! A checkpoint is one instant for a channel's three legs: its SQL database (a `pg_dump` snapshot), its bucket
//! (a marker listing the version of every object, [`slipway_blob::checkpoints`]) and its code (the commit the SQL
//! row records). One is taken before every non-static deploy's new container starts and one nightly.
//!
//! The bucket is listed first, then the dump starts, moments apart; the marker records the SQL snapshot's id
//! (`pg_snapshot_id`), which makes the SQL row's `aligned_blob` true. A leg that cannot be taken (no ready
//! database, no ready bucket, a listing that failed) leaves the other unaligned, which is a state and not a
//! fault; only a failed dump fails the checkpoint, since a deploy must not run a container that may migrate data
//! nobody kept. After each checkpoint the channel's SQL snapshots, markers and object versions are pruned to the
//! owner's plan, under a per-channel lock ([`exclusively`]) that restores take too, so neither a checkpoint being
//! taken nor a restore under way loses a version to a concurrent prune.
//!
//! Taking a checkpoint before a deploy ([`pre_deploy`]) or nightly ([`nightly`]) and restoring either leg
//! ([`sql_restore`], [`bucket_restore`]) run as jobs of the platform ([`slipway_jobs`]) in the channel's scope: they last as long as
//! the data takes, not as long as a request may, and one runs at a time per channel.

use slipway_crds::Channel;
use slipway_crds::conditions;
use slipway_crds::plans::Plan;
use sqlx::PgPool;
use uuid::Uuid;

pub mod bucket_restore;
pub mod nightly;
pub mod pre_deploy;
pub mod sql_restore;

use slipway_blob::bucket::Bucket;
use slipway_blob::checkpoints::{self as markers, Marker, Owner};
use slipway_core::state::AppState;
use slipway_jobs::Progress;
use slipway_postgres::snapshots::{self, Occasion, Parts, Snapshot};
use slipway_postgres::store::Record;

/// The SQL leg: where to dump, and which database.
pub struct SqlLeg<'a> {
    /// The data server, the archive and the platform database.
    pub parts: Parts<'a>,
    /// The channel's database.
    pub record: &'a Record,
}

/// The bucket leg: the channel's bucket through the gateway.
pub struct BlobLeg {
    /// The bucket.
    pub bucket: Bucket,
    /// Its channel and app.
    pub owner: Owner,
}

/// What a checkpoint holds.
#[derive(Debug, Default)]
pub struct Checkpoint {
    /// The SQL snapshot, when the database was ready.
    pub sql: Option<Snapshot>,
    /// The object-store marker, when the bucket was ready and could be listed.
    pub marker: Option<Marker>,
}

/// The bucket leg of `channel`, when object storage is configured and its bucket is ready. A store that cannot be
/// read is logged and leaves the checkpoint without a bucket leg, like a bucket not ready.
pub async fn blob_leg(state: &AppState, channel: &Channel, channel_id: Uuid) -> Option<BlobLeg> {
    match try_blob_leg(state, channel, channel_id).await {
        Ok(leg) => leg,
        Err(e) => {
            tracing::warn!(%channel_id, error = %e, "the channel's store cannot be read; the checkpoint has no bucket leg");
            None
        }
    }
}

async fn try_blob_leg(
    state: &AppState,
    channel: &Channel,
    channel_id: Uuid,
) -> anyhow::Result<Option<BlobLeg>> {
    let Some(access) = state.blob_access() else {
        return Ok(None);
    };
    if !channel.condition_is_true(conditions::OBJECT_STORE_READY) {
        return Ok(None);
    }
    let Some(store) = slipway_blob::store::by_channel(state.db(), channel_id).await? else {
        return Ok(None);
    };
    Ok(Some(BlobLeg {
        bucket: access.bucket(state.keyring(), &store)?,
        owner: Owner {
            channel_id,
            app_id: store.app_id,
        },
    }))
}

/// Takes the occasion's checkpoint of the legs given (a leg the occasion already has is not taken again), then
/// prunes the channel to `plan`. The dump's progress goes into `progress`.
pub async fn take(
    db: &PgPool,
    channel_id: Uuid,
    legs: Legs<'_>,
    occasion: &Occasion,
    plan: &Plan,
    progress: &Progress,
) -> anyhow::Result<Checkpoint> {
    exclusively(
        db,
        channel_id,
        take_locked(db, channel_id, legs, occasion, plan, progress),
    )
    .await?
}

/// The legs a checkpoint takes.
pub struct Legs<'a> {
    /// The SQL leg, when the channel's database can be dumped.
    pub sql: Option<SqlLeg<'a>>,
    /// The bucket leg, when the channel's bucket is ready.
    pub blob: Option<BlobLeg>,
}

/// Runs `work` holding the channel's checkpoint lock (a Postgres advisory lock): checkpoints, prunes and restores
/// of one channel never overlap, across API replicas too. The lock lives on a connection of its own, outside the
/// pool ([`slipway_store::db::lock_connection`]), so neither the work's length nor a wait for the lock takes a pooled
/// connection from the requests; at most [`AT_ONCE`] run at once per process, and the others wait without a
/// connection. The connection is closed when `work` is dropped half-way (a request that timed out), so the lock
/// never outlives it.
pub async fn exclusively<T>(
    db: &PgPool,
    channel_id: Uuid,
    work: impl std::future::Future<Output = T>,
) -> sqlx::Result<T> {
    // SLOTS is never closed, so this never fails.
    let _slot = SLOTS.acquire().await.map_err(|_| sqlx::Error::PoolClosed)?;
    let mut lock = slipway_store::db::lock_connection(db).await?;
    let advisory = |function: &'static str| {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {function}($1, hashtext($2))"
        )))
        .bind(LOCK_SPACE)
        .bind(channel_id.to_string())
    };
    advisory("pg_advisory_lock").execute(&mut lock).await?;
    let done = work.await;
    advisory("pg_advisory_unlock").execute(&mut lock).await?;
    sqlx::Connection::close(lock).await?;
    Ok(done)
}

/// Checkpoints, prunes and restores one API process runs at once: each holds a connection of its own and runs a
/// `pg_dump` or a restore.
const AT_ONCE: usize = 8;

static SLOTS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(AT_ONCE);

/// Longest a checkpoint waits for its bucket's listing before going on without the bucket leg.
const LISTING_LIMIT: std::time::Duration = std::time::Duration::from_secs(300);

/// The first key of the per-channel advisory locks checkpoints take.
const LOCK_SPACE: i32 = 0x636b_7074;

async fn take_locked(
    db: &PgPool,
    channel_id: Uuid,
    Legs { sql, blob }: Legs<'_>,
    occasion: &Occasion,
    plan: &Plan,
    progress: &Progress,
) -> anyhow::Result<Checkpoint> {
    let mut checkpoint = Checkpoint {
        marker: markers::existing(db, channel_id, occasion).await?,
        sql: None,
    };
    let listing = match (&blob, &checkpoint.marker) {
        (Some(leg), None) => {
            match tokio::time::timeout(LISTING_LIMIT, markers::list_now(&leg.bucket))
                .await
                .unwrap_or_else(|_| {
                    Err(anyhow::anyhow!(
                        "the listing took longer than {LISTING_LIMIT:?}"
                    ))
                }) {
                Ok(listing) => Some(listing),
                Err(e) => {
                    tracing::warn!(%channel_id, error = %e, "the bucket could not be listed; the checkpoint has no object-store leg");
                    None
                }
            }
        }
        _ => None,
    };
    if let Some(leg) = &sql {
        checkpoint.sql = Some(snapshots::take(leg.parts, leg.record, occasion, progress).await?);
    }
    if let (Some(listing), Some(leg)) = (&listing, &blob) {
        let pg_snapshot_id = checkpoint.sql.as_ref().map(|s| s.id);
        checkpoint.marker =
            Some(markers::record(db, leg.owner, occasion, listing, pg_snapshot_id).await?);
    }
    if let Err(e) = prune(db, channel_id, sql.as_ref(), blob.as_ref(), plan).await {
        tracing::warn!(%channel_id, error = %e, "pruning after a checkpoint failed; retried after the next");
    }
    Ok(checkpoint)
}

/// Prunes the channel's SQL snapshots and markers to `plan`, then the object versions no retained marker lists.
async fn prune(
    db: &PgPool,
    channel_id: Uuid,
    sql: Option<&SqlLeg<'_>>,
    blob: Option<&BlobLeg>,
    plan: &Plan,
) -> anyhow::Result<()> {
    if let Some(leg) = sql {
        snapshots::prune(leg.parts, channel_id, plan).await?;
    }
    markers::prune_markers(db, channel_id, plan).await?;
    if let Some(leg) = blob {
        markers::prune_versions(db, &leg.bucket, channel_id).await?;
    }
    Ok(())
}

/// The plan of the account `owner`, which bounds how many checkpoints its channels keep.
pub async fn owner_plan(db: &PgPool, owner: &str) -> anyhow::Result<&'static Plan> {
    let user = slipway_store::db::users::by_username(db, owner)
        .await?
        .ok_or_else(|| anyhow::anyhow!("owner {owner} has no account"))?;
    Plan::by_tier(&user.plan).ok_or_else(|| anyhow::anyhow!("unknown plan {}", user.plan))
}
