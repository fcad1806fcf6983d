//! Connected git mirrors: the external repository of an app, its sealed deploy key, the pinned host key and how the
//! last sync went.

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use sqlx::types::Json;
use std::collections::BTreeMap;
use uuid::Uuid;

/// A row of `git_mirrors`.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Mirror {
    /// The app.
    pub app_id: Uuid,
    /// The external repository's SSH URL, as the owner gave it.
    pub remote_url: String,
    /// The deploy key's OpenSSH public line.
    pub public_key: String,
    /// The keyring entry that sealed the private key.
    pub private_key_id: String,
    /// The sealed private key.
    pub private_key: Vec<u8>,
    /// The pinned host key (OpenSSH line); none before the first sync reached the server.
    pub host_key: Option<String>,
    /// When the mirror was connected.
    pub connected_at: DateTime<Utc>,
    /// When the last sync ended.
    pub last_synced_at: Option<DateTime<Utc>>,
    /// `success` or `failed`.
    pub last_sync_status: Option<String>,
    /// Why the last sync failed.
    pub last_sync_error: Option<String>,
    /// Refs after the last successful sync.
    pub last_sync_refs: Option<Json<BTreeMap<String, String>>>,
}

/// What a new connection stores.
#[derive(Debug)]
pub struct NewMirror<'a> {
    /// The app.
    pub app_id: Uuid,
    /// The external repository.
    pub remote_url: &'a str,
    /// The deploy key's public line.
    pub public_key: &'a str,
    /// The keyring entry that sealed the private key.
    pub private_key_id: &'a str,
    /// The sealed private key.
    pub private_key: &'a [u8],
}

/// The mirror of `app`, if one is connected.
pub async fn get(db: &PgPool, app: Uuid) -> sqlx::Result<Option<Mirror>> {
    sqlx::query_as("SELECT * FROM git_mirrors WHERE app_id = $1")
        .bind(app)
        .fetch_optional(db)
        .await
}

/// Whether `app` is connected to an external repository.
pub async fn connected(db: &PgPool, app: Uuid) -> sqlx::Result<bool> {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM git_mirrors WHERE app_id = $1)")
        .bind(app)
        .fetch_one(db)
        .await
}

/// Connects `new.app_id`; `None` when it already is (the existing connection is left alone).
pub async fn insert(db: &PgPool, new: &NewMirror<'_>) -> sqlx::Result<Option<Mirror>> {
    sqlx::query_as(
        "INSERT INTO git_mirrors (app_id, remote_url, public_key, private_key_id, private_key)
         VALUES ($1, $2, $3, $4, $5) ON CONFLICT (app_id) DO NOTHING RETURNING *",
    )
    .bind(new.app_id)
    .bind(new.remote_url)
    .bind(new.public_key)
    .bind(new.private_key_id)
    .bind(new.private_key)
    .fetch_optional(db)
    .await
}

/// Pins the host key of a connection made at `connected_at`, unless one is pinned already or the app was
/// disconnected (and maybe connected again) since.
pub async fn pin_host_key(
    db: &PgPool,
    app: Uuid,
    connected_at: DateTime<Utc>,
    host_key: &str,
) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE git_mirrors SET host_key = $3 WHERE app_id = $1 AND connected_at = $2 AND host_key IS NULL",
    )
    .bind(app)
    .bind(connected_at)
    .bind(host_key)
    .execute(db)
    .await?;
    Ok(())
}

/// Records how a sync of the connection made at `connected_at` ended; the refs are kept from the last success
/// when this one failed. Returns the row as it now is (`None` when the app was disconnected meanwhile).
pub async fn record_sync(
    db: &PgPool,
    app: Uuid,
    connected_at: DateTime<Utc>,
    outcome: Result<&BTreeMap<String, String>, &str>,
) -> sqlx::Result<Option<Mirror>> {
    let (status, error, refs) = match outcome {
        Ok(refs) => ("success", None, Some(Json(refs))),
        Err(e) => ("failed", Some(e), None),
    };
    sqlx::query_as(
        "UPDATE git_mirrors SET last_synced_at = now(), last_sync_status = $3, last_sync_error = $4,
             last_sync_refs = coalesce($5, last_sync_refs)
         WHERE app_id = $1 AND connected_at = $2 RETURNING *",
    )
    .bind(app)
    .bind(connected_at)
    .bind(status)
    .bind(error)
    .bind(refs)
    .fetch_optional(db)
    .await
}

/// Disconnects `app`, discarding its deploy key; false when it was not connected.
pub async fn remove(db: &PgPool, app: Uuid) -> sqlx::Result<bool> {
    let done = sqlx::query("DELETE FROM git_mirrors WHERE app_id = $1")
        .bind(app)
        .execute(db)
        .await?;
    Ok(done.rows_affected() > 0)
}

/// Every mirror whose private key another keyring entry sealed (for a key rotation), locked for update.
pub async fn sealed_with_other_keys(
    tx: &mut sqlx::PgConnection,
    active: &str,
) -> sqlx::Result<Vec<(Uuid, String, Vec<u8>)>> {
    sqlx::query_as(
        "SELECT app_id, private_key_id, private_key FROM git_mirrors WHERE private_key_id <> $1 FOR UPDATE",
    )
    .bind(active)
    .fetch_all(tx)
    .await
}

/// Stores a re-sealed private key.
pub async fn reseal(
    tx: &mut sqlx::PgConnection,
    app: Uuid,
    key_id: &str,
    sealed: &[u8],
) -> sqlx::Result<()> {
    sqlx::query("UPDATE git_mirrors SET private_key_id = $2, private_key = $3 WHERE app_id = $1")
        .bind(app)
        .bind(key_id)
        .bind(sealed)
        .execute(tx)
        .await?;
    Ok(())
}
