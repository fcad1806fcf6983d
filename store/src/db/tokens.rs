//! Access tokens. Only the SHA-256 of a token is stored; the plaintext is shown once, when it is minted.
//!
//! Tokens minted by a token (`POST /tokens`, `POST /credentials`) name it as their parent, and a token works only
//! while no token up its chain is revoked: revoking one revokes what was minted from it, at once. The revocation
//! marks the whole chain below it, and the lookup checks the chain above, so a token minted in the instant the
//! revocation ran is caught too.

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
    /// The one request path it is good for (a download token); `None`: every route its scopes allow.
    pub only_path: Option<String>,
    /// The one endpoint it is good at (`mcp`: a token of the MCP server's OAuth sign-in); `None`: every route.
    pub audience: Option<String>,
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
    /// The one request path it is good for; `None`: every route its scopes allow.
    pub only_path: Option<&'a str>,
    /// The one endpoint it is good at ([`MCP_AUDIENCE`]); `None`: every route its scopes allow.
    pub audience: Option<&'a str>,
}

/// The audience of tokens good at the MCP endpoint only.
pub const MCP_AUDIENCE: &str = "mcp";

/// Stores a token and returns its id.
pub async fn insert(db: &PgPool, t: &NewToken<'_>) -> sqlx::Result<Uuid> {
    insert_on(&mut *db.acquire().await?, t, None).await
}

/// Stores a token on `conn` (a transaction's, say) with where it came from (`registration`, `ssh_login`; `None`
/// for the others) and returns its id.
pub async fn insert_on(
    conn: &mut sqlx::PgConnection,
    t: &NewToken<'_>,
    origin: Option<&str>,
) -> sqlx::Result<Uuid> {
    let id = Uuid::new_v4();
    sqlx::query(
        "INSERT INTO tokens (id, user_id, token_hash, label, scopes, is_agent, expires_at, parent_id, only_path, origin,
                             audience)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
    )
    .bind(id)
    .bind(t.user_id)
    .bind(&t.hash[..])
    .bind(t.label)
    .bind(t.scopes)
    .bind(t.is_agent)
    .bind(t.expires_at)
    .bind(t.parent_id)
    .bind(t.only_path)
    .bind(origin)
    .bind(t.audience)
    .execute(conn)
    .await?;
    Ok(id)
}

/// The token whose plaintext hashes to `hash`, with its owner. `revoked_at` is the earliest revocation on its chain
/// (the token itself or any token it was minted from).
pub async fn by_hash(db: &PgPool, hash: &[u8; 32]) -> sqlx::Result<Option<TokenRow>> {
    sqlx::query_as(
        "WITH RECURSIVE chain AS (
             SELECT id, parent_id, revoked_at, 0 AS depth FROM tokens WHERE token_hash = $1
             UNION ALL
             SELECT p.id, p.parent_id, p.revoked_at, c.depth + 1
             FROM tokens p JOIN chain c ON p.id = c.parent_id
             WHERE c.depth < 64
         )
         SELECT t.id, t.user_id, u.username, u.plan, u.agent_protected_actions_default, t.scopes, t.is_agent,
                t.expires_at, (SELECT min(revoked_at) FROM chain) AS revoked_at, t.only_path, t.audience
         FROM tokens t JOIN users u ON u.id = t.user_id
         WHERE t.token_hash = $1",
    )
    .bind(&hash[..])
    .fetch_optional(db)
    .await
}

/// Revokes `token` if it belongs to `user`, and every token minted from it down the chain; false when there is no
/// such token of that user that is still live.
pub async fn revoke(db: &PgPool, user: Uuid, token: Uuid) -> sqlx::Result<bool> {
    let (revoked,): (bool,) = sqlx::query_as(
        "WITH RECURSIVE below AS (
             SELECT id FROM tokens WHERE id = $1 AND user_id = $2 AND revoked_at IS NULL
             UNION
             SELECT t.id FROM tokens t JOIN below b ON t.parent_id = b.id
         ),
         done AS (
             UPDATE tokens SET revoked_at = now()
             WHERE id IN (SELECT id FROM below) AND revoked_at IS NULL
             RETURNING id
         )
         SELECT EXISTS (SELECT 1 FROM done WHERE id = $1)",
    )
    .bind(token)
    .bind(user)
    .fetch_one(db)
    .await?;
    Ok(revoked)
}

/// Of `ids`, the tokens that still work: not expired, and no token up their chain revoked. A token that is gone
/// (its account was deleted) is not among them. One query for all of them, however many.
pub async fn live_among(db: &PgPool, ids: &[Uuid]) -> sqlx::Result<Vec<Uuid>> {
    sqlx::query_scalar(
        "WITH RECURSIVE chain AS (
             SELECT id AS start, parent_id, revoked_at, 0 AS depth FROM tokens WHERE id = ANY($1)
             UNION ALL
             SELECT c.start, p.parent_id, p.revoked_at, c.depth + 1
             FROM tokens p JOIN chain c ON p.id = c.parent_id
             WHERE c.depth < 64
         )
         SELECT t.id FROM tokens t
         WHERE t.id = ANY($1) AND (t.expires_at IS NULL OR t.expires_at > now())
           AND NOT EXISTS (SELECT 1 FROM chain c WHERE c.start = t.id AND c.revoked_at IS NOT NULL)",
    )
    .bind(ids)
    .fetch_all(db)
    .await
}

/// A live token of an account as its owner sees it: never the plaintext nor its hash.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct TokenListing {
    /// Token id.
    pub id: Uuid,
    /// The note given at creation.
    pub label: Option<String>,
    /// Scopes.
    pub scopes: Vec<String>,
    /// Where it came from: `registration`, `ssh_login`, `console_session`, `console`; `None` for a token minted by
    /// a token or by the admin command.
    pub origin: Option<String>,
    /// Whether it is good for one download only.
    pub download_only: bool,
    /// When it was minted.
    pub created_at: DateTime<Utc>,
    /// When it stops working; `None` never.
    pub expires_at: Option<DateTime<Utc>>,
    /// When it was last used (to the minute); `None` never.
    pub last_used_at: Option<DateTime<Utc>>,
}

/// The account's tokens that still work (not expired, no token up their chain revoked), newest first.
pub async fn live_of_user(db: &PgPool, user: Uuid) -> sqlx::Result<Vec<TokenListing>> {
    let ids: Vec<Uuid> = sqlx::query_scalar(
        "SELECT id FROM tokens WHERE user_id = $1 AND revoked_at IS NULL
           AND (expires_at IS NULL OR expires_at > now())",
    )
    .bind(user)
    .fetch_all(db)
    .await?;
    let live = live_among(db, &ids).await?;
    sqlx::query_as(
        "SELECT t.id, t.label, t.scopes, t.origin, t.only_path IS NOT NULL AS download_only, t.created_at,
                t.expires_at, u.last_used_at
         FROM tokens t LEFT JOIN token_uses u ON u.token_id = t.id
         WHERE t.id = ANY($1)
         ORDER BY t.created_at DESC, t.id",
    )
    .bind(&live)
    .fetch_all(db)
    .await
}

/// Records that `token` was used now.
pub async fn record_use(db: &PgPool, token: Uuid) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO token_uses (token_id, last_used_at) VALUES ($1, now())
         ON CONFLICT (token_id) DO UPDATE SET last_used_at = now()",
    )
    .bind(token)
    .execute(db)
    .await?;
    Ok(())
}
