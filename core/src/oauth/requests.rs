//! Authorization requests in flight (`oauth_requests`), one row from the client's redirect to the code's
//! redemption: opened when the person is sent upstream, signed in when they come back (their account), given a
//! code when they allow the client, and spent when the code is redeemed. Every step is a guarded update, so no step
//! runs twice or out of order; secrets (the upstream state, the browser cookie, the code) are kept as SHA-256.

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

/// A request as the steps read it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Request {
    /// Its id (the consent form names it).
    pub id: Uuid,
    /// The client.
    pub client_id: String,
    /// The redirect URI it named (one the client registered).
    pub redirect_uri: String,
    /// The client's `state`, given back with the answer.
    pub client_state: String,
    /// The PKCE challenge (S256).
    pub code_challenge: String,
    /// The scopes asked for.
    pub scopes: Vec<String>,
    /// The upstream leg's PKCE verifier.
    pub upstream_verifier: String,
    /// The upstream leg's nonce.
    pub upstream_nonce: String,
    /// The account, once signed in.
    pub user_id: Option<Uuid>,
    /// When the code stops working.
    pub code_expires_at: Option<DateTime<Utc>>,
    /// When the code was redeemed.
    pub code_used_at: Option<DateTime<Utc>>,
    /// The token the code bought.
    pub token_id: Option<Uuid>,
    /// When the request stops working.
    pub expires_at: DateTime<Utc>,
}

/// What opening a request records.
pub struct NewRequest<'a> {
    /// The client.
    pub client_id: &'a str,
    /// Its redirect URI.
    pub redirect_uri: &'a str,
    /// Its state.
    pub client_state: &'a str,
    /// Its PKCE challenge.
    pub code_challenge: &'a str,
    /// The scopes.
    pub scopes: &'a [String],
    /// SHA-256 of the state sent upstream.
    pub upstream_state_hash: [u8; 32],
    /// The upstream leg's verifier.
    pub upstream_verifier: &'a str,
    /// The upstream leg's nonce.
    pub upstream_nonce: &'a str,
    /// SHA-256 of the browser cookie's secret.
    pub browser_hash: [u8; 32],
    /// When it stops working.
    pub expires_at: DateTime<Utc>,
}

/// Opens a request (and forgets those long expired).
pub async fn open(db: &PgPool, new: &NewRequest<'_>) -> sqlx::Result<Uuid> {
    sqlx::query("DELETE FROM oauth_requests WHERE expires_at < now() - interval '1 day'")
        .execute(db)
        .await?;
    let id = Uuid::new_v4();
    sqlx::query(
        "INSERT INTO oauth_requests (id, client_id, redirect_uri, client_state, code_challenge, scopes,
             upstream_state_hash, upstream_verifier, upstream_nonce, browser_hash, expires_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
    )
    .bind(id)
    .bind(new.client_id)
    .bind(new.redirect_uri)
    .bind(new.client_state)
    .bind(new.code_challenge)
    .bind(new.scopes)
    .bind(&new.upstream_state_hash[..])
    .bind(new.upstream_verifier)
    .bind(new.upstream_nonce)
    .bind(&new.browser_hash[..])
    .bind(new.expires_at)
    .execute(db)
    .await?;
    Ok(id)
}

/// The live request the upstream's callback names by its state, in the browser that started it, not yet signed in.
pub async fn awaiting_sign_in(
    db: &PgPool,
    upstream_state_hash: &[u8; 32],
    browser_hash: &[u8; 32],
) -> sqlx::Result<Option<Request>> {
    sqlx::query_as(
        "SELECT * FROM oauth_requests WHERE upstream_state_hash = $1 AND browser_hash = $2
           AND user_id IS NULL AND expires_at > now()",
    )
    .bind(&upstream_state_hash[..])
    .bind(&browser_hash[..])
    .fetch_optional(db)
    .await
}

/// Records who signed in; false when another step got there first.
pub async fn signed_in(db: &PgPool, id: Uuid, user: Uuid) -> sqlx::Result<bool> {
    let done = sqlx::query(
        "UPDATE oauth_requests SET user_id = $2 WHERE id = $1 AND user_id IS NULL AND expires_at > now()",
    )
    .bind(id)
    .bind(user)
    .execute(db)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// The live request `id` in the browser that started it, signed in and waiting for the person's answer.
pub async fn awaiting_consent(
    db: &PgPool,
    id: Uuid,
    browser_hash: &[u8; 32],
) -> sqlx::Result<Option<Request>> {
    sqlx::query_as(
        "SELECT * FROM oauth_requests WHERE id = $1 AND browser_hash = $2
           AND user_id IS NOT NULL AND code_hash IS NULL AND expires_at > now()",
    )
    .bind(id)
    .bind(&browser_hash[..])
    .fetch_optional(db)
    .await
}

/// Gives the request its code; false when it already has one.
pub async fn issue_code(
    db: &PgPool,
    id: Uuid,
    code_hash: &[u8; 32],
    code_expires_at: DateTime<Utc>,
) -> sqlx::Result<bool> {
    let done = sqlx::query(
        "UPDATE oauth_requests SET code_hash = $2, code_expires_at = $3
         WHERE id = $1 AND code_hash IS NULL AND user_id IS NOT NULL",
    )
    .bind(id)
    .bind(&code_hash[..])
    .bind(code_expires_at)
    .execute(db)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Forgets a request (the person said no).
pub async fn forget(db: &PgPool, id: Uuid) -> sqlx::Result<()> {
    sqlx::query("DELETE FROM oauth_requests WHERE id = $1")
        .bind(id)
        .execute(db)
        .await?;
    Ok(())
}

/// The request holding the code whose SHA-256 is `code_hash`, used or not.
pub async fn by_code(db: &PgPool, code_hash: &[u8; 32]) -> sqlx::Result<Option<Request>> {
    sqlx::query_as("SELECT * FROM oauth_requests WHERE code_hash = $1")
        .bind(&code_hash[..])
        .fetch_optional(db)
        .await
}

/// Spends the code of request `id`; false when it was spent already (by a concurrent redemption).
pub async fn spend_code(db: &PgPool, id: Uuid) -> sqlx::Result<bool> {
    let done = sqlx::query(
        "UPDATE oauth_requests SET code_used_at = now() WHERE id = $1 AND code_used_at IS NULL",
    )
    .bind(id)
    .execute(db)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Records the token the code bought, and that its client was used (so it is kept).
pub async fn bought(db: &PgPool, id: Uuid, token: Uuid) -> sqlx::Result<()> {
    sqlx::query(
        "WITH request AS (UPDATE oauth_requests SET token_id = $2 WHERE id = $1 RETURNING client_id)
         UPDATE oauth_clients SET used_at = now() WHERE client_id IN (SELECT client_id FROM request)",
    )
    .bind(id)
        .bind(token)
        .execute(db)
        .await?;
    Ok(())
}
