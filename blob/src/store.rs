//! The `blob_stores` rows and the usage counted in them: one store per channel with its sealed key pair, and the
//! bytes it holds. Writes through the gateway reserve their bytes first ([`reserve`]), against the owner's quota
//! and atomically with every other write of the same owner, then settle their real size when the backend
//! answered (a plain write's settlement may come after its answer, in a batch: [`settle_many`]; its reservation
//! counts meanwhile). Small writes take from a lease instead ([`lease`]: a slice of the quota reserved at once for
//! a channel's writes, [`settle_leases`] moving what they stored out of it). A periodic recount ([`set_recounted`])
//! corrects what a crash or a foreign write left behind, and replaces the reservations of writes that never
//! settled.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

use super::keys::{self, KeyPair};
use slipway_store::env::crypto::{Keyring, Sealed};

/// A row of `blob_stores`.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Store {
    /// The channel's id.
    pub channel_id: Uuid,
    /// Its app's id.
    pub app_id: Uuid,
    /// Username of the app's owner.
    pub owner: String,
    /// The bucket name clients use.
    pub virtual_bucket: String,
    /// The bucket on the backend.
    pub backend_bucket: String,
    /// The channel's access key id.
    pub access_key_id: String,
    /// Keyring entry that sealed the secret.
    pub key_id: String,
    /// The sealed secret key.
    pub sealed_secret: Vec<u8>,
    /// Bytes stored (every version, and unfinished uploads' parts).
    pub usage_bytes: i64,
    /// Moves with every change of `usage_bytes`.
    pub usage_epoch: i64,
    /// When the store was recorded.
    pub created_at: DateTime<Utc>,
}

impl Store {
    /// Opens the secret key.
    pub fn secret(&self, ring: &Keyring) -> anyhow::Result<String> {
        let sealed = Sealed {
            key_id: self.key_id.clone(),
            bytes: self.sealed_secret.clone(),
        };
        let plain = ring.open(&sealed, &keys::aad(self.channel_id, &self.access_key_id))?;
        Ok(String::from_utf8(plain)?)
    }
}

/// What a new store is made of.
#[derive(Debug)]
pub struct NewStore<'a> {
    /// The channel's id.
    pub channel_id: Uuid,
    /// Its app's id.
    pub app_id: Uuid,
    /// Username of the app's owner.
    pub owner: &'a str,
    /// The bucket name clients use.
    pub virtual_bucket: &'a str,
    /// The bucket on the backend.
    pub backend_bucket: &'a str,
}

/// Records the channel's store with a fresh key pair, unless it has one; answers the stored row either way.
/// Under the channel's record lock ([`slipway_store::db::lock_channel_records`]), which a transfer's swap of records holds.
pub async fn ensure(db: &PgPool, ring: &Keyring, new: &NewStore<'_>) -> anyhow::Result<Store> {
    // Most calls find the record made: one query, no lock.
    if let Some(store) = by_channel(db, new.channel_id).await? {
        return Ok(store);
    }
    let mut tx = db.begin().await?;
    slipway_store::db::lock_channel_records(&mut tx, new.channel_id).await?;
    if let Some(store) = by_channel(&mut *tx, new.channel_id).await? {
        return Ok(store);
    }
    let KeyPair {
        access_key_id,
        secret_access_key,
    } = keys::generate();
    let sealed = ring.seal(
        secret_access_key.as_bytes(),
        &keys::aad(new.channel_id, &access_key_id),
    )?;
    let store: Store = sqlx::query_as(
        "INSERT INTO blob_stores (channel_id, app_id, owner, virtual_bucket, backend_bucket, access_key_id, key_id, \
         sealed_secret) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING *",
    )
    .bind(new.channel_id)
    .bind(new.app_id)
    .bind(new.owner)
    .bind(new.virtual_bucket)
    .bind(new.backend_bucket)
    .bind(&access_key_id)
    .bind(&sealed.key_id)
    .bind(&sealed.bytes)
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(store)
}

/// Seals every store's secret key again with the keyring's first key (after a rotation); how many it resealed.
pub async fn reseal_all(db: &PgPool, ring: &Keyring) -> anyhow::Result<u64> {
    let mut tx = db.begin().await?;
    let stale: Vec<Store> =
        sqlx::query_as("SELECT * FROM blob_stores WHERE key_id <> $1 FOR UPDATE")
            .bind(ring.active_id())
            .fetch_all(&mut *tx)
            .await?;
    for store in &stale {
        let aad = keys::aad(store.channel_id, &store.access_key_id);
        let sealed = ring.seal(store.secret(ring)?.as_bytes(), &aad)?;
        sqlx::query("UPDATE blob_stores SET key_id = $1, sealed_secret = $2 WHERE channel_id = $3")
            .bind(&sealed.key_id)
            .bind(&sealed.bytes)
            .bind(store.channel_id)
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(stale.len() as u64)
}

/// The store of a channel.
pub async fn by_channel(
    db: impl sqlx::PgExecutor<'_>,
    channel_id: Uuid,
) -> sqlx::Result<Option<Store>> {
    sqlx::query_as("SELECT * FROM blob_stores WHERE channel_id = $1")
        .bind(channel_id)
        .fetch_optional(db)
        .await
}

/// The store an access key belongs to, with its owner's plan tier.
pub async fn by_access_key(
    db: &PgPool,
    access_key_id: &str,
) -> sqlx::Result<Option<(Store, Option<String>)>> {
    #[derive(sqlx::FromRow)]
    struct Row {
        #[sqlx(flatten)]
        store: Store,
        plan: Option<String>,
    }
    let row: Option<Row> = sqlx::query_as(
        "SELECT s.*, u.plan FROM blob_stores s LEFT JOIN users u ON u.username = s.owner WHERE s.access_key_id = $1",
    )
    .bind(access_key_id)
    .fetch_optional(db)
    .await?;
    Ok(row.map(|r| (r.store, r.plan)))
}

/// Stores not recounted within `every`, and stores holding an expired reservation (a write that never settled,
/// which counts until a recount replaces it), the longest waiting first.
pub async fn due_for_recount(db: &PgPool, every: Duration) -> sqlx::Result<Vec<Store>> {
    sqlx::query_as(
        "SELECT * FROM blob_stores s WHERE recounted_at IS NULL OR recounted_at < now() - $1 \
         OR EXISTS (SELECT 1 FROM blob_pending p WHERE p.channel_id = s.channel_id AND p.expires_at <= now()) \
         ORDER BY recounted_at NULLS FIRST LIMIT 1000",
    )
    .bind(every)
    .fetch_all(db)
    .await
}

/// Forgets a channel's store; whether there was one.
pub async fn delete(db: &PgPool, channel_id: Uuid) -> sqlx::Result<bool> {
    let done = sqlx::query("DELETE FROM blob_stores WHERE channel_id = $1")
        .bind(channel_id)
        .execute(db)
        .await?;
    Ok(done.rows_affected() > 0)
}

/// An owner's bytes as the API reports them (see [`counted_bytes`]) and number of stores.
pub async fn owner_usage(db: &PgPool, owner: &str) -> sqlx::Result<(i64, i64)> {
    sqlx::query_as(
        "SELECT coalesce((SELECT sum(usage_bytes) FROM blob_stores WHERE owner = $1), 0)::bigint \
         + coalesce((SELECT sum(bytes) FROM blob_pending WHERE owner = $1 AND NOT leased), 0)::bigint, \
         (SELECT count(*) FROM blob_stores WHERE owner = $1)",
    )
    .bind(owner)
    .fetch_one(db)
    .await
}

/// The bytes of a channel's store as the API reports them: what is stored (`usage_bytes`) and what its writes
/// have reserved and not yet settled, so a write that answered its client is counted whether its settlement
/// ([`settle_many`]) has run yet or not. A write that took from a lease is counted once its settlement
/// ([`settle_leases`]) has run, moments after its answer; what a lease holds beyond its writes counts against the
/// quota (see [`lease`]) but is not usage.
pub async fn counted_bytes(db: &PgPool, channel_id: Uuid) -> sqlx::Result<i64> {
    sqlx::query_scalar(
        "SELECT coalesce((SELECT usage_bytes FROM blob_stores WHERE channel_id = $1), 0)::bigint \
         + coalesce((SELECT sum(bytes) FROM blob_pending WHERE channel_id = $1 AND NOT leased), 0)::bigint",
    )
    .bind(channel_id)
    .fetch_one(db)
    .await
}

/// The answer of [`reserve`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reserved {
    /// The bytes are reserved under the given id.
    Ok,
    /// They would pass the owner's quota; nothing was reserved.
    OverQuota,
    /// The store is gone.
    Gone,
}

/// How long a reservation stands for a write in flight. A recount waits for the writes in flight of its store;
/// once a reservation is older than this its write is taken to have ended without settling (a gateway that
/// stopped), and it counts until the next recount replaces it with what the backend holds.
pub const RESERVATION_TTL: Duration = Duration::from_secs(3600);

/// Reserves `bytes` for a write to the channel's store under `id`, refused past `byte_limit` (-1: unlimited).
pub async fn reserve(
    db: &PgPool,
    id: Uuid,
    channel_id: Uuid,
    bytes: i64,
    byte_limit: i64,
) -> sqlx::Result<Reserved> {
    let answer: String = sqlx::query_scalar("SELECT blob_reserve($1, $2, $3, $4, $5)")
        .bind(id)
        .bind(channel_id)
        .bind(bytes)
        .bind(byte_limit)
        .bind(RESERVATION_TTL)
        .fetch_one(db)
        .await?;
    Ok(match answer.as_str() {
        "ok" => Reserved::Ok,
        "quota" => Reserved::OverQuota,
        _ => Reserved::Gone,
    })
}

/// The answer of [`lease`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leased {
    /// This many bytes are reserved for the lease.
    Granted(i64),
    /// The owner is too near the quota for a lease; nothing was reserved.
    Refused,
    /// The store is gone.
    Gone,
}

/// Reserves a lease `id` of up to `want` bytes for the channel's writes, at most an eighth of what is left of the
/// owner's quota (`byte_limit`, -1: unlimited), and none when that is less than `smallest`. Writes take from it in
/// the gateway's memory; [`settle_leases`] moves what they stored into the usage and ends the lease.
pub async fn lease(
    db: &PgPool,
    id: Uuid,
    channel_id: Uuid,
    want: i64,
    smallest: i64,
    byte_limit: i64,
) -> sqlx::Result<Leased> {
    let granted: i64 = sqlx::query_scalar("SELECT blob_lease($1, $2, $3, $4, $5, $6)")
        .bind(id)
        .bind(channel_id)
        .bind(want)
        .bind(smallest)
        .bind(byte_limit)
        .bind(RESERVATION_TTL)
        .fetch_one(db)
        .await?;
    Ok(match granted {
        ..0 => Leased::Gone,
        0 => Leased::Refused,
        bytes => Leased::Granted(bytes),
    })
}

/// Counts what the writes of leases stored: each of `stored` gives a lease ([`Settled::id`]) and the running total
/// of bytes its writes stored ([`Settled::bytes`]); what is new of that total moves out of the lease and into its
/// store's usage. Then ends the leases `ended` (what is left of them stops counting). One transaction; applied
/// again, it moves nothing more. A lease that is gone already (replaced by a recount after it expired) or was
/// moved to another channel moves nothing.
pub async fn settle_leases(db: &PgPool, stored: &[Settled], ended: &[Uuid]) -> sqlx::Result<()> {
    let leases: Vec<Uuid> = stored.iter().map(|w| w.id).collect();
    let channels: Vec<Uuid> = stored.iter().map(|w| w.channel_id).collect();
    let totals: Vec<i64> = stored.iter().map(|w| w.bytes).collect();
    let mut tx = db.begin().await?;
    if !stored.is_empty() {
        sqlx::query(
            "WITH totals AS (SELECT id, channel_id, max(stored)::bigint AS stored \
             FROM unnest($1::uuid[], $2::uuid[], $3::bigint[]) AS t(id, channel_id, stored) GROUP BY id, channel_id), \
             new AS (SELECT p.id, t.channel_id, t.stored - p.settled_bytes AS bytes FROM blob_pending p \
                     JOIN totals t ON p.id = t.id AND p.channel_id = t.channel_id \
                     WHERE p.leased AND t.stored > p.settled_bytes FOR UPDATE OF p), \
             moved AS (UPDATE blob_pending p SET bytes = greatest(p.bytes - n.bytes, 0), \
                       settled_bytes = p.settled_bytes + n.bytes FROM new n WHERE p.id = n.id \
                       RETURNING n.channel_id, n.bytes), \
             per_store AS (SELECT channel_id, sum(bytes)::bigint AS bytes FROM moved GROUP BY channel_id) \
             UPDATE blob_stores s SET usage_bytes = greatest(s.usage_bytes + per_store.bytes, 0), \
             usage_epoch = s.usage_epoch + 1 FROM per_store WHERE s.channel_id = per_store.channel_id",
        )
        .bind(&leases)
        .bind(&channels)
        .bind(&totals)
        .execute(&mut *tx)
        .await?;
    }
    if !ended.is_empty() {
        sqlx::query("DELETE FROM blob_pending WHERE id = ANY($1) AND leased")
            .bind(ended)
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await
}

/// Stripes a channel's keys are locked in for deletes of versions ([`lock_keys`]): a delete waits only for the
/// deletes of keys in the same stripe, and a request locks at most this many, however many keys it names.
pub const KEY_STRIPES: i32 = 64;

/// Seed of the key locks' hash (apart from other advisory locks on the same text).
const KEY_LOCK_SEED: i64 = 0x6b65_7973;

/// A transaction on `db` holding the locks of `keys` of `channel_id` (one per key stripe) until it ends: commit it
/// when the work they guard is done; dropped, it rolls back and they are released too. Every caller takes its
/// stripes in ascending order, so two callers never wait for each other in a circle.
pub async fn lock_keys<'c>(
    db: &PgPool,
    channel_id: Uuid,
    keys: &[&str],
) -> sqlx::Result<sqlx::Transaction<'c, sqlx::Postgres>> {
    let mut tx = db.begin().await?;
    sqlx::query(
        "SELECT count(pg_advisory_xact_lock(hashtextextended($1 || '/' || stripe::text, $2))) \
         FROM (SELECT DISTINCT abs(hashtext(k) % $3) AS stripe FROM unnest($4::text[]) AS k ORDER BY stripe) AS s",
    )
    .bind(channel_id.to_string())
    .bind(KEY_LOCK_SEED)
    .bind(KEY_STRIPES)
    .bind(keys)
    .execute(&mut *tx)
    .await?;
    Ok(tx)
}

/// Ends reservation `id` of a write that did not happen.
pub async fn release(db: &PgPool, id: Uuid) -> sqlx::Result<()> {
    sqlx::query("DELETE FROM blob_pending WHERE id = $1")
        .bind(id)
        .execute(db)
        .await?;
    Ok(())
}

/// Ends reservation `id` and moves the store's usage by `delta` bytes.
pub async fn settle(db: &PgPool, id: Uuid, channel_id: Uuid, delta: i64) -> sqlx::Result<()> {
    sqlx::query(
        "WITH done AS (DELETE FROM blob_pending WHERE id = $1) \
         UPDATE blob_stores SET usage_bytes = greatest(usage_bytes + $3, 0), usage_epoch = usage_epoch + 1 \
         WHERE channel_id = $2",
    )
    .bind(id)
    .bind(channel_id)
    .bind(delta)
    .execute(db)
    .await?;
    Ok(())
}

/// A write that reached the backend and moves its reservation's bytes into its store's usage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settled {
    /// The reservation.
    pub id: Uuid,
    /// Its store.
    pub channel_id: Uuid,
    /// The bytes it stored (what it reserved).
    pub bytes: i64,
}

/// Ends the reservations of `writes` and moves their bytes into their stores' usage, in one statement. A
/// reservation that is gone already (settled before, or replaced by a recount after it expired) moves nothing, so a
/// batch may be applied again after an error.
pub async fn settle_many(db: &PgPool, writes: &[Settled]) -> sqlx::Result<()> {
    let ids: Vec<Uuid> = writes.iter().map(|w| w.id).collect();
    let channels: Vec<Uuid> = writes.iter().map(|w| w.channel_id).collect();
    let bytes: Vec<i64> = writes.iter().map(|w| w.bytes).collect();
    sqlx::query(
        "WITH batch AS (SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::bigint[]) AS b(id, channel_id, bytes)), \
         done AS (DELETE FROM blob_pending p USING batch b WHERE p.id = b.id RETURNING b.channel_id, b.bytes), \
         moved AS (SELECT channel_id, sum(bytes)::bigint AS bytes FROM done GROUP BY channel_id) \
         UPDATE blob_stores s SET usage_bytes = greatest(s.usage_bytes + moved.bytes, 0), \
         usage_epoch = s.usage_epoch + 1 FROM moved WHERE s.channel_id = moved.channel_id",
    )
    .bind(&ids)
    .bind(&channels)
    .bind(&bytes)
    .execute(db)
    .await?;
    Ok(())
}

/// Ends reservation `id` of an uploaded part: the part (replacing one of the same number) counts in usage.
pub async fn settle_part(
    db: &PgPool,
    id: Uuid,
    channel_id: Uuid,
    upload_id: &str,
    part_number: i32,
    bytes: i64,
) -> sqlx::Result<()> {
    sqlx::query(
        "WITH done AS (DELETE FROM blob_pending WHERE id = $1), \
         old AS (SELECT bytes FROM blob_parts WHERE channel_id = $2 AND upload_id = $3 AND part_number = $4), \
         part AS (INSERT INTO blob_parts (channel_id, upload_id, part_number, bytes) VALUES ($2, $3, $4, $5) \
                  ON CONFLICT (channel_id, upload_id, part_number) DO UPDATE SET bytes = EXCLUDED.bytes) \
         UPDATE blob_stores SET usage_bytes = greatest(usage_bytes + $5 - coalesce((SELECT bytes FROM old), 0), 0), \
         usage_epoch = usage_epoch + 1 WHERE channel_id = $2",
    )
    .bind(id)
    .bind(channel_id)
    .bind(upload_id)
    .bind(part_number)
    .bind(bytes)
    .execute(db)
    .await?;
    Ok(())
}

/// Ends reservation `id` of a completed (`object_bytes` stored) or aborted (`Some(0)`) upload: its parts stop
/// counting and the object counts instead. `None` keeps the parts' total as the object's size (when it could
/// not be read back).
pub async fn settle_upload(
    db: &PgPool,
    id: Uuid,
    channel_id: Uuid,
    upload_id: &str,
    object_bytes: Option<i64>,
) -> sqlx::Result<()> {
    sqlx::query(
        "WITH done AS (DELETE FROM blob_pending WHERE id = $1), \
         parts AS (DELETE FROM blob_parts WHERE channel_id = $2 AND upload_id = $3 RETURNING bytes), \
         total AS (SELECT coalesce(sum(bytes), 0)::bigint AS bytes FROM parts) \
         UPDATE blob_stores SET usage_bytes = greatest(usage_bytes + coalesce($4, (SELECT bytes FROM total)) \
         - (SELECT bytes FROM total), 0), usage_epoch = usage_epoch + 1 WHERE channel_id = $2",
    )
    .bind(id)
    .bind(channel_id)
    .bind(upload_id)
    .bind(object_bytes)
    .execute(db)
    .await?;
    Ok(())
}

/// Sets a store's usage to what a recount listed (`listed` object bytes plus its unfinished uploads' parts),
/// unless a write settled since `epoch` was read or one is in flight: then the count may be stale and the next
/// round tries again. The store's expired reservations (writes that never settled: what they stored is in the
/// listing) end in the same statement. Whether it was set.
pub async fn set_recounted(
    db: &PgPool,
    channel_id: Uuid,
    listed: i64,
    epoch: i64,
) -> sqlx::Result<bool> {
    let set: Option<Uuid> = sqlx::query_scalar(
        "WITH set AS (UPDATE blob_stores \
         SET usage_bytes = $2 + coalesce((SELECT sum(bytes) FROM blob_parts WHERE channel_id = $1), 0), \
         usage_epoch = usage_epoch + 1, recounted_at = now() \
         WHERE channel_id = $1 AND usage_epoch = $3 \
         AND NOT EXISTS (SELECT 1 FROM blob_pending WHERE channel_id = $1 AND expires_at > now()) \
         RETURNING channel_id), \
         expired AS (DELETE FROM blob_pending WHERE channel_id IN (SELECT channel_id FROM set) AND expires_at <= now()) \
         SELECT channel_id FROM set",
    )
    .bind(channel_id)
    .bind(listed)
    .bind(epoch)
    .fetch_optional(db)
    .await?;
    Ok(set.is_some())
}
