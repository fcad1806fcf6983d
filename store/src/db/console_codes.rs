//! Console sign-in codes: one open code per account, kept only as a keyed hash, with its wrong guesses counted.
//! Each step runs in one transaction with the code's row locked, so a wrong guess is counted exactly once.

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, Postgres, Transaction};
use uuid::Uuid;

/// A row of `console_codes`.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Code {
    /// The account.
    pub user_id: Uuid,
    /// HMAC of the code.
    pub code_hash: Vec<u8>,
    /// When it was sent.
    pub sent_at: DateTime<Utc>,
    /// When it stops working.
    pub expires_at: DateTime<Utc>,
    /// Wrong codes tried so far.
    pub wrong_codes: i32,
}

/// The account's open code, locked for the rest of `tx`.
pub async fn lock(tx: &mut Transaction<'_, Postgres>, user: Uuid) -> sqlx::Result<Option<Code>> {
    sqlx::query_as("SELECT * FROM console_codes WHERE user_id = $1 FOR UPDATE")
        .bind(user)
        .fetch_optional(&mut **tx)
        .await
}

/// Puts a new code in place of any earlier one (its wrong guesses forgotten).
pub async fn replace(conn: &mut PgConnection, c: &Code) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO console_codes (user_id, code_hash, sent_at, expires_at, wrong_codes)
         VALUES ($1, $2, $3, $4, 0)
         ON CONFLICT (user_id) DO UPDATE SET code_hash = $2, sent_at = $3, expires_at = $4, wrong_codes = 0",
    )
    .bind(c.user_id)
    .bind(&c.code_hash)
    .bind(c.sent_at)
    .bind(c.expires_at)
    .execute(conn)
    .await?;
    Ok(())
}

/// Counts one wrong code.
pub async fn count_wrong(conn: &mut PgConnection, user: Uuid) -> sqlx::Result<i32> {
    sqlx::query_scalar(
        "UPDATE console_codes SET wrong_codes = wrong_codes + 1 WHERE user_id = $1 RETURNING wrong_codes",
    )
    .bind(user)
    .fetch_one(conn)
    .await
}

/// Removes the account's code (used, expired, or its mail never went out).
pub async fn clear(conn: &mut PgConnection, user: Uuid) -> sqlx::Result<()> {
    sqlx::query("DELETE FROM console_codes WHERE user_id = $1")
        .bind(user)
        .execute(conn)
        .await?;
    Ok(())
}
