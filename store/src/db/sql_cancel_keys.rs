//! The backend keys (process id and secret key) the data server gave the external SQL sessions open on every API
//! replica. A client cancels a query on a new connection, which may reach another replica than its session's; that
//! replica passes the cancel on only when the key is listed here, so the proxy cannot be used to guess the keys of
//! sessions it never opened. Only SHA-256 digests are kept: a listed key could cancel a stranger's query.

use sha2::{Digest, Sha256};
use sqlx::PgPool;

/// Days after which a row whose session never said it ended (its replica crashed) is forgotten.
pub const KEPT_DAYS: i32 = 30;

fn digest(pid: i32, key: &[u8]) -> Vec<u8> {
    let mut hash = Sha256::new();
    hash.update(pid.to_be_bytes());
    hash.update(key);
    hash.finalize().to_vec()
}

/// Lists the key of a session that has just opened.
pub async fn record(db: &PgPool, pid: i32, key: &[u8]) -> sqlx::Result<()> {
    sqlx::query("INSERT INTO sql_cancel_keys (digest) VALUES ($1) ON CONFLICT (digest) DO NOTHING")
        .bind(digest(pid, key))
        .execute(db)
        .await?;
    Ok(())
}

/// Forgets the key of a session that has ended.
pub async fn forget(db: &PgPool, pid: i32, key: &[u8]) -> sqlx::Result<()> {
    sqlx::query("DELETE FROM sql_cancel_keys WHERE digest = $1")
        .bind(digest(pid, key))
        .execute(db)
        .await?;
    Ok(())
}

/// Whether a session open on some replica has the key `(pid, key)`.
pub async fn known(db: &PgPool, pid: i32, key: &[u8]) -> sqlx::Result<bool> {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM sql_cancel_keys WHERE digest = $1)")
        .bind(digest(pid, key))
        .fetch_one(db)
        .await
}

/// Forgets the rows older than [`KEPT_DAYS`]; returns how many.
pub async fn forget_stale(db: &PgPool) -> sqlx::Result<u64> {
    Ok(sqlx::query(
        "DELETE FROM sql_cancel_keys WHERE opened_at < now() - make_interval(days => $1)",
    )
    .bind(KEPT_DAYS)
    .execute(db)
    .await?
    .rows_affected())
}
