//! Accounts.

use chrono::{DateTime, Utc};
use slipway_crds::names::Username;
use sqlx::PgPool;
use uuid::Uuid;

/// A row of `users`.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct User {
    /// Account id.
    pub id: Uuid,
    /// Username (lowercase letters and digits: it ends every channel hostname of the user's apps).
    pub username: String,
    /// Plan tier.
    pub plan: String,
    /// Account default of the agent-access switch.
    pub agent_protected_actions_default: bool,
    /// When the account was created.
    pub created_at: DateTime<Utc>,
}

/// Creates an account; `None` when the username is taken. Only a parsed [`Username`] gets in, so every way an
/// account is made follows the same rule.
pub async fn create(db: &PgPool, username: &Username, plan: &str) -> sqlx::Result<Option<User>> {
    sqlx::query_as(
        "INSERT INTO users (id, username, plan) VALUES ($1, $2, $3) ON CONFLICT (username) DO NOTHING RETURNING *",
    )
    .bind(Uuid::new_v4())
    .bind(username.as_str())
    .bind(plan)
    .fetch_optional(db)
    .await
}

/// The account named `username`.
pub async fn by_username(db: &PgPool, username: &str) -> sqlx::Result<Option<User>> {
    sqlx::query_as("SELECT * FROM users WHERE username = $1")
        .bind(username)
        .fetch_optional(db)
        .await
}

/// Whether the account has a verified email address.
pub async fn has_verified_email(db: &PgPool, user: Uuid) -> sqlx::Result<bool> {
    let (verified,): (bool,) = sqlx::query_as("SELECT email IS NOT NULL FROM users WHERE id = $1")
        .bind(user)
        .fetch_optional(db)
        .await?
        .unwrap_or((false,));
    Ok(verified)
}

/// Moves the account to `plan`; false when there is no such account.
pub async fn set_plan(db: &PgPool, username: &Username, plan: &str) -> sqlx::Result<bool> {
    let done = sqlx::query("UPDATE users SET plan = $2 WHERE username = $1")
        .bind(username.as_str())
        .bind(plan)
        .execute(db)
        .await?;
    Ok(done.rows_affected() == 1)
}

/// Sets the account's verified email address (lowercase) as the platform operator states it, without a code;
/// false when there is no such account. An address another account holds is a unique violation.
pub async fn set_verified_email(
    db: &PgPool,
    username: &Username,
    email: &str,
) -> sqlx::Result<bool> {
    let done =
        sqlx::query("UPDATE users SET email = $2, email_verified_at = now() WHERE username = $1")
            .bind(username.as_str())
            .bind(email.to_ascii_lowercase())
            .execute(db)
            .await?;
    Ok(done.rows_affected() == 1)
}

/// The account `id`'s username, plan and verified address.
pub async fn profile(
    db: &PgPool,
    id: Uuid,
) -> sqlx::Result<Option<(String, String, Option<String>)>> {
    sqlx::query_as("SELECT username, plan, email FROM users WHERE id = $1")
        .bind(id)
        .fetch_optional(db)
        .await
}
