//! SSH public keys of accounts. The fingerprint is unique platform-wide: the SSH server finds the account from
//! the key alone.

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

/// A row of `ssh_keys`.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct SshKey {
    /// Key id.
    pub id: Uuid,
    /// Owner.
    pub user_id: Uuid,
    /// `ssh-ed25519 AAAA...` without comment.
    pub public_key: String,
    /// `SHA256:...`.
    pub fingerprint_sha256: String,
    /// A person's name for it.
    pub label: String,
    /// Whether it may sign in to the API (`POST /auth/ssh-key`).
    pub api_login: bool,
    /// When it was added.
    pub created_at: DateTime<Utc>,
}

/// What a new key carries.
#[derive(Debug, Clone)]
pub struct NewKey<'a> {
    /// Owner.
    pub user_id: Uuid,
    /// `ssh-ed25519 AAAA...`.
    pub public_key: &'a str,
    /// `SHA256:...`.
    pub fingerprint_sha256: &'a str,
    /// Label.
    pub label: &'a str,
    /// API login.
    pub api_login: bool,
}

/// Stores a key; `None` when the key is already registered (on any account).
pub async fn insert(db: &PgPool, k: &NewKey<'_>) -> sqlx::Result<Option<SshKey>> {
    sqlx::query_as(
        "INSERT INTO ssh_keys (id, user_id, public_key, fingerprint_sha256, label, api_login)
         VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (fingerprint_sha256) DO NOTHING RETURNING *",
    )
    .bind(Uuid::new_v4())
    .bind(k.user_id)
    .bind(k.public_key)
    .bind(k.fingerprint_sha256)
    .bind(k.label)
    .bind(k.api_login)
    .fetch_optional(db)
    .await
}

/// The keys of `user`, oldest first.
pub async fn of_user(db: &PgPool, user: Uuid) -> sqlx::Result<Vec<SshKey>> {
    sqlx::query_as("SELECT * FROM ssh_keys WHERE user_id = $1 ORDER BY created_at, id")
        .bind(user)
        .fetch_all(db)
        .await
}

/// Removes `key` if it belongs to `user`; false when there is no such key of that user.
pub async fn delete(db: &PgPool, user: Uuid, key: Uuid) -> sqlx::Result<bool> {
    let done = sqlx::query("DELETE FROM ssh_keys WHERE id = $1 AND user_id = $2")
        .bind(key)
        .bind(user)
        .execute(db)
        .await?;
    Ok(done.rows_affected() == 1)
}

/// The account a key fingerprint belongs to: (user id, username).
pub async fn owner_of(db: &PgPool, fingerprint: &str) -> sqlx::Result<Option<(Uuid, String)>> {
    sqlx::query_as(
        "SELECT u.id, u.username FROM ssh_keys k JOIN users u ON u.id = k.user_id WHERE k.fingerprint_sha256 = $1",
    )
    .bind(fingerprint)
    .fetch_optional(db)
    .await
}
