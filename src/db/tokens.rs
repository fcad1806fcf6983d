//! Access tokens. Only the SHA-256 of a token is stored; the plaintext is shown once, when it is minted.

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

/// A row of `tokens` joined with its owner.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct TokenRow {
    /// Token id.
    pub id: Uuid,
    /// Owner's account id.
    pub user_id: Uuid,
    /// Owner's username.
    pub username: String,
    /// Owner's plan.
    pub plan: String,
    /// Owner's account default of the agent-access switch.
    pub agent_protected_actions_default: bool,
    /// Scopes the token carries.
    pub scopes: Vec<String>,
    /// Whether the holder is an agent.
    pub is_agent: bool,
    /// When it stops working; `None` never.
    pub expires_at: Option<DateTime<Utc>>,
    /// When it was revoked.
    pub revoked_at: Option<DateTime<Utc>>,
}

/// What a new token carries.
#[derive(Debug, Clone)]
pub struct NewToken<'a> {
    /// Owner.
    pub user_id: Uuid,
    /// SHA-256 of the plaintext.
    pub hash: [u8; 32],
    /// A person's note on what it is for.
    pub label: Option<&'a str>,
    /// Scopes.
    pub scopes: &'a [String],
    /// Whether the holder is an agent.
    pub is_agent: bool,
    /// Expiry; `None` never.
    pub expires_at: Option<DateTime<Utc>>,
    /// The token that minted it.
    pub parent_id: Option<Uuid>,
}

/// Stores a token and returns its id.
pub async fn insert(db: &PgPool, t: &NewToken<'_>) -> sqlx::Result<Uuid> {
    let id = Uuid::new_v4();
    sqlx::query(
        "INSERT INTO tokens (id, user_id, token_hash, label, scopes, is_agent, expires_at, parent_id)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(id)
    .bind(t.user_id)
    .bind(&t.hash[..])
    .bind(t.label)
    .bind(t.scopes)
    .bind(t.is_agent)
    .bind(t.expires_at)
    .bind(t.parent_id)
    .execute(db)
    .await?;
    Ok(id)
}

/// The token whose plaintext hashes to `hash`, with its owner.
pub async fn by_hash(db: &PgPool, hash: &[u8; 32]) -> sqlx::Result<Option<TokenRow>> {
    sqlx::query_as(
        "SELECT t.id, t.user_id, u.username, u.plan, u.agent_protected_actions_default, t.scopes, t.is_agent,
                t.expires_at, t.revoked_at
         FROM tokens t JOIN users u ON u.id = t.user_id
         WHERE t.token_hash = $1",
    )
    .bind(&hash[..])
    .fetch_optional(db)
    .await
}

/// Revokes `token` if it belongs to `user`; false when there is no such token of that user.
pub async fn revoke(db: &PgPool, user: Uuid, token: Uuid) -> sqlx::Result<bool> {
    let done = sqlx::query(
        "UPDATE tokens SET revoked_at = coalesce(revoked_at, now()) WHERE id = $1 AND user_id = $2 AND revoked_at IS NULL",
    )
    .bind(token)
    .bind(user)
    .execute(db)
    .await?;
    Ok(done.rows_affected() == 1)
}
