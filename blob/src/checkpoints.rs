//! Object-store checkpoints: a marker per checkpoint (`blob_snapshots`) with the version of every object that
//! was current when it was taken (`blob_snapshot_objects`, the marker's *manifest*). Restore and download read the
//! manifest, not timestamps, so neither depends on the backend's clock or the precision of `LastModified`.
//!
//! Markers are taken with the SQL snapshot of the same checkpoint (the API's checkpoint jobs) and pruned by the same
//! plan windows; after that, every non-current version that no retained manifest lists is removed, so a bucket's
//! history is as long as its checkpoints need and no longer.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use slipway_crds::plans::Plan;
use sqlx::PgPool;
use uuid::Uuid;

use super::bucket::{Bucket, Version};
use slipway_store::db::checkpoints::{Occasion, occasion_row, retention_expired};

/// A row of `blob_snapshots`.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Marker {
    /// The marker's id.
    pub id: Uuid,
    /// Its channel.
    pub channel_id: Uuid,
    /// That channel's app.
    pub app_id: Uuid,
    /// `pre_deploy` or `nightly`.
    pub kind: String,
    /// The deploy a `pre_deploy` marker was taken for.
    pub deploy_id: Option<Uuid>,
    /// The SQL snapshot of the same checkpoint.
    pub pg_snapshot_id: Option<Uuid>,
    /// The instant its listing began.
    pub snapshot_ts: DateTime<Utc>,
    /// Objects in its manifest.
    pub object_count: i64,
    /// Their bytes.
    pub total_bytes: i64,
    /// When it was recorded.
    pub created_at: DateTime<Utc>,
}

/// One object of a manifest.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Entry {
    /// The key.
    pub key: String,
    /// The version current at the checkpoint.
    pub version_id: String,
    /// Its bytes.
    pub size_bytes: i64,
    /// Its ETag.
    pub etag: Option<String>,
    /// When that version was written.
    pub last_modified: Option<DateTime<Utc>>,
}

/// A bucket's state at one instant, before it is recorded.
#[derive(Debug, Clone)]
pub struct Listing {
    /// When the listing began.
    pub taken_at: DateTime<Utc>,
    /// The current version of every key that has one (a key whose newest entry is a delete marker is absent).
    pub entries: Vec<Entry>,
}

/// The current objects of a version listing, by key.
pub fn current_entries(versions: &[Version]) -> Vec<Entry> {
    let mut entries: Vec<Entry> = versions
        .iter()
        .filter(|v| v.is_latest && !v.delete_marker)
        .map(|v| Entry {
            key: v.key.clone(),
            version_id: v.version_id.clone(),
            size_bytes: v.size,
            etag: v.etag.clone(),
            last_modified: v.last_modified,
        })
        .collect();
    // One entry per key: should a listing call two versions of a key current, the newest is.
    entries.sort_by(|a, b| {
        a.key
            .cmp(&b.key)
            .then(b.last_modified.cmp(&a.last_modified))
    });
    entries.dedup_by(|later, kept| later.key == kept.key);
    entries
}

/// Lists the bucket now.
pub async fn list_now(bucket: &Bucket) -> anyhow::Result<Listing> {
    let taken_at = Utc::now();
    let versions = bucket.versions().await?;
    Ok(Listing {
        taken_at,
        entries: current_entries(&versions),
    })
}

/// The channel's markers, newest first.
pub async fn list(db: &PgPool, channel_id: Uuid) -> sqlx::Result<Vec<Marker>> {
    sqlx::query_as(
        "SELECT * FROM blob_snapshots WHERE channel_id = $1 ORDER BY created_at DESC, id",
    )
    .bind(channel_id)
    .fetch_all(db)
    .await
}

/// The channel's marker aligned with SQL snapshot `pg_snapshot_id`.
pub async fn aligned_with(
    db: &PgPool,
    channel_id: Uuid,
    pg_snapshot_id: Uuid,
) -> sqlx::Result<Option<Marker>> {
    sqlx::query_as("SELECT * FROM blob_snapshots WHERE channel_id = $1 AND pg_snapshot_id = $2")
        .bind(channel_id)
        .bind(pg_snapshot_id)
        .fetch_optional(db)
        .await
}

/// The marker this occasion already has: the deploy's, or today's nightly.
pub async fn existing(
    db: &PgPool,
    channel_id: Uuid,
    occasion: &Occasion,
) -> sqlx::Result<Option<Marker>> {
    occasion_row("blob_snapshots", db, channel_id, occasion).await
}

/// The manifest of a marker, by key.
pub async fn manifest(db: &PgPool, marker_id: Uuid) -> sqlx::Result<Vec<Entry>> {
    sqlx::query_as(
        "SELECT key, version_id, size_bytes, etag, last_modified FROM blob_snapshot_objects \
         WHERE snapshot_id = $1 ORDER BY key",
    )
    .bind(marker_id)
    .fetch_all(db)
    .await
}

/// At most `limit` entries of a marker's manifest after key `after` (from the first without it), by key: a reader
/// of a manifest of any size holds one page at a time.
pub async fn manifest_page(
    db: &PgPool,
    marker_id: Uuid,
    after: Option<&str>,
    limit: i64,
) -> sqlx::Result<Vec<Entry>> {
    sqlx::query_as(
        "SELECT key, version_id, size_bytes, etag, last_modified FROM blob_snapshot_objects \
         WHERE snapshot_id = $1 AND ($2::text IS NULL OR key > $2) ORDER BY key LIMIT $3",
    )
    .bind(marker_id)
    .bind(after)
    .bind(limit)
    .fetch_all(db)
    .await
}

/// What a marker is recorded for.
#[derive(Debug, Clone, Copy)]
pub struct Owner {
    /// The channel.
    pub channel_id: Uuid,
    /// Its app.
    pub app_id: Uuid,
}

/// Rows of a manifest written per statement.
const BATCH: usize = 5000;

/// Records a marker of `listing` with its manifest in one transaction, unless the occasion already has one (a
/// concurrent call won); the occasion's marker either way.
pub async fn record(
    db: &PgPool,
    owner: Owner,
    occasion: &Occasion,
    listing: &Listing,
    pg_snapshot_id: Option<Uuid>,
) -> anyhow::Result<Marker> {
    let mut tx = db.begin().await?;
    let total: i64 = listing.entries.iter().map(|e| e.size_bytes).sum();
    let inserted: Option<Marker> = sqlx::query_as(
        "INSERT INTO blob_snapshots (id, channel_id, app_id, kind, deploy_id, pg_snapshot_id, snapshot_ts, \
         object_count, total_bytes) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT DO NOTHING RETURNING *",
    )
    .bind(Uuid::new_v4())
    .bind(owner.channel_id)
    .bind(owner.app_id)
    .bind(occasion.kind.as_str())
    .bind(occasion.deploy_id)
    .bind(pg_snapshot_id)
    .bind(listing.taken_at)
    .bind(i64::try_from(listing.entries.len()).unwrap_or(i64::MAX))
    .bind(total)
    .fetch_optional(&mut *tx)
    .await?;
    let Some(marker) = inserted else {
        drop(tx);
        return existing(db, owner.channel_id, occasion)
            .await?
            .ok_or_else(|| anyhow::anyhow!("the marker of channel {} vanished", owner.channel_id));
    };
    for chunk in listing.entries.chunks(BATCH) {
        let keys: Vec<&str> = chunk.iter().map(|e| e.key.as_str()).collect();
        let versions: Vec<&str> = chunk.iter().map(|e| e.version_id.as_str()).collect();
        let sizes: Vec<i64> = chunk.iter().map(|e| e.size_bytes).collect();
        let etags: Vec<Option<&str>> = chunk.iter().map(|e| e.etag.as_deref()).collect();
        let times: Vec<Option<DateTime<Utc>>> = chunk.iter().map(|e| e.last_modified).collect();
        sqlx::query(
            "INSERT INTO blob_snapshot_objects (snapshot_id, key, version_id, size_bytes, etag, last_modified) \
             SELECT $1, * FROM UNNEST($2::text[], $3::text[], $4::bigint[], $5::text[], $6::timestamptz[])",
        )
        .bind(marker.id)
        .bind(&keys)
        .bind(&versions)
        .bind(&sizes)
        .bind(&etags)
        .bind(&times)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    tracing::info!(channel_id = %owner.channel_id, kind = occasion.kind.as_str(), objects = listing.entries.len(),
        "object-store marker taken");
    Ok(marker)
}

/// Removes the markers `plan` no longer keeps (the windows of SQL snapshots); how many.
pub async fn prune_markers(db: &PgPool, channel_id: Uuid, plan: &Plan) -> sqlx::Result<u64> {
    let expired: Vec<Uuid> = retention_expired("blob_snapshots", db, channel_id, plan).await?;
    let done = sqlx::query("DELETE FROM blob_snapshots WHERE id = ANY($1)")
        .bind(&expired)
        .execute(db)
        .await?;
    Ok(done.rows_affected())
}

/// The versions of `versions` to remove: not current, and listed by no retained manifest (`needed`).
pub fn unneeded<'a>(
    versions: &'a [Version],
    needed: &HashSet<(String, String)>,
) -> Vec<&'a Version> {
    versions
        .iter()
        .filter(|v| !v.is_latest && !needed.contains(&(v.key.clone(), v.version_id.clone())))
        .collect()
}

/// Removes every version of the bucket that is neither current nor listed by a retained marker; how many. A
/// version that became non-current after the listing is left for the next pass.
pub async fn prune_versions(
    db: &PgPool,
    bucket: &Bucket,
    channel_id: Uuid,
) -> anyhow::Result<usize> {
    let needed: HashSet<(String, String)> = sqlx::query_as::<_, (String, String)>(
        "SELECT DISTINCT o.key, o.version_id FROM blob_snapshot_objects o \
         JOIN blob_snapshots s ON s.id = o.snapshot_id WHERE s.channel_id = $1",
    )
    .bind(channel_id)
    .fetch_all(db)
    .await?
    .into_iter()
    .collect();
    let versions = bucket.versions().await?;
    let doomed = unneeded(&versions, &needed);
    for version in &doomed {
        bucket
            .remove_version(&version.key, &version.version_id)
            .await?;
    }
    if !doomed.is_empty() {
        tracing::info!(%channel_id, removed = doomed.len(), "object versions no checkpoint needs removed");
    }
    Ok(doomed.len())
}

/// Forgets every marker of a channel (its bucket is gone).
pub async fn forget_channel(db: &PgPool, channel_id: Uuid) -> sqlx::Result<()> {
    sqlx::query("DELETE FROM blob_snapshots WHERE channel_id = $1")
        .bind(channel_id)
        .execute(db)
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::bucket::tests::version;

    #[test]
    fn a_manifest_holds_each_key_s_current_object_and_not_its_deleted_keys() {
        let versions = [
            version("b", "b2", true, false),
            version("b", "b1", false, false),
            version("a", "a1", true, false),
            version("gone", "m1", true, true),
            version("gone", "g1", false, false),
        ];
        let keys: Vec<(String, String)> = current_entries(&versions)
            .into_iter()
            .map(|e| (e.key, e.version_id))
            .collect();
        assert_eq!(keys, [("a".into(), "a1".into()), ("b".into(), "b2".into())]);
    }

    #[test]
    fn a_manifest_holds_one_entry_per_key_however_the_listing_repeats_it() {
        let mut older = version("a", "a1", true, false);
        older.last_modified = Some(DateTime::from_timestamp(1_000, 0).unwrap());
        let mut newer = version("a", "a2", true, false);
        newer.last_modified = Some(DateTime::from_timestamp(2_000, 0).unwrap());
        let versions = [older, newer.clone(), newer];
        let keys: Vec<(String, String)> = current_entries(&versions)
            .into_iter()
            .map(|e| (e.key, e.version_id))
            .collect();
        assert_eq!(keys, [("a".into(), "a2".into())]);
    }

    #[test]
    fn pruning_keeps_current_versions_and_those_a_manifest_lists() {
        let versions = [
            version("a", "a3", true, false),
            version("a", "a2", false, false),
            version("a", "a1", false, false),
            version("gone", "m1", true, true),
            version("gone", "g1", false, false),
            version("old", "m0", false, true),
        ];
        let needed: HashSet<(String, String)> = [("a".to_owned(), "a1".to_owned())].into();
        let doomed: Vec<&str> = unneeded(&versions, &needed)
            .iter()
            .map(|v| v.version_id.as_str())
            .collect();
        assert_eq!(doomed, ["a2", "g1", "m0"]);
    }
}
