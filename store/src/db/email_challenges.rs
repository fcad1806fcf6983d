//! Email challenges: one open challenge per account, its code kept only as a keyed hash. Each step runs in one
//! transaction with the account's row locked, so two requests of one account cannot both pass the spacing check,
//! and a wrong code is counted exactly once.

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, Postgres, Transaction};
use uuid::Uuid;

/// A row of `email_challenges`.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Challenge {
    /// The account.
    pub user_id: Uuid,
    /// The address the code was sent to (lowercase).
    pub email: String,
    /// HMAC of the code.
    pub code_hash: Vec<u8>,
    /// When the code was sent.
    pub sent_at: DateTime<Utc>,
    /// When the code stops working.
    pub expires_at: DateTime<Utc>,
    /// Wrong codes tried so far.
    pub wrong_codes: i32,
}

/// Locks the account's row for the rest of `tx`; returns its verified address, if any. `None` when there is no
/// such account.
pub async fn lock_account(
    tx: &mut Transaction<'_, Postgres>,
    user: Uuid,
) -> sqlx::Result<Option<Option<String>>> {
    let row: Option<(Option<String>,)> =
        sqlx::query_as("SELECT email FROM users WHERE id = $1 FOR UPDATE")
            .bind(user)
            .fetch_optional(&mut **tx)
            .await?;
    Ok(row.map(|(email,)| email))
}

/// The account's open challenge.
pub async fn of_user(conn: &mut PgConnection, user: Uuid) -> sqlx::Result<Option<Challenge>> {
    sqlx::query_as("SELECT * FROM email_challenges WHERE user_id = $1")
        .bind(user)
        .fetch_optional(conn)
        .await
}

/// Puts a new challenge in place of any earlier one (its wrong codes forgotten).
pub async fn replace(conn: &mut PgConnection, c: &Challenge) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO email_challenges (user_id, email, code_hash, sent_at, expires_at, wrong_codes)
         VALUES ($1, $2, $3, $4, $5, 0)
         ON CONFLICT (user_id) DO UPDATE SET email = $2, code_hash = $3, sent_at = $4, expires_at = $5,
             wrong_codes = 0",
    )
    .bind(c.user_id)
    .bind(&c.email)
    .bind(&c.code_hash)
    .bind(c.sent_at)
    .bind(c.expires_at)
    .execute(conn)
    .await?;
    Ok(())
}

/// Counts one wrong code; returns the new count.
pub async fn count_wrong(conn: &mut PgConnection, user: Uuid) -> sqlx::Result<i32> {
    let (n,): (i32,) = sqlx::query_as(
        "UPDATE email_challenges SET wrong_codes = wrong_codes + 1 WHERE user_id = $1 RETURNING wrong_codes",
    )
    .bind(user)
    .fetch_one(conn)
    .await?;
    Ok(n)
}

/// Removes the account's challenge.
pub async fn clear(conn: &mut PgConnection, user: Uuid) -> sqlx::Result<()> {
    sqlx::query("DELETE FROM email_challenges WHERE user_id = $1")
        .bind(user)
        .execute(conn)
        .await?;
    Ok(())
}

/// Whether another account has verified `email`.
pub async fn verified_elsewhere(
    conn: &mut PgConnection,
    user: Uuid,
    email: &str,
) -> sqlx::Result<bool> {
    let (taken,): (bool,) =
        sqlx::query_as("SELECT EXISTS (SELECT 1 FROM users WHERE email = $1 AND id <> $2)")
            .bind(email)
            .bind(user)
            .fetch_one(conn)
            .await?;
    Ok(taken)
}

/// Marks `email` verified on the account and moves `from` plan to `to`; returns the plan the account is on now.
pub async fn verify(
    conn: &mut PgConnection,
    user: Uuid,
    email: &str,
    from: &str,
    to: &str,
) -> sqlx::Result<String> {
    let (plan,): (String,) = sqlx::query_as(
        "UPDATE users SET email = $2, email_verified_at = now(),
             plan = CASE WHEN plan = $3 THEN $4 ELSE plan END
         WHERE id = $1 RETURNING plan",
    )
    .bind(user)
    .bind(email)
    .bind(from)
    .bind(to)
    .fetch_one(conn)
    .await?;
    Ok(plan)
}

/// Removes the account's challenge if it is still the one whose code hashes to `code_hash` (a mail that could not be
/// sent takes back only its own challenge).
pub async fn withdraw(db: &sqlx::PgPool, user: Uuid, code_hash: &[u8]) -> sqlx::Result<()> {
    sqlx::query("DELETE FROM email_challenges WHERE user_id = $1 AND code_hash = $2")
        .bind(user)
        .bind(code_hash)
        .execute(db)
        .await?;
    Ok(())
}
