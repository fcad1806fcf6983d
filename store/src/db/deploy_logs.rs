//! Deploy logs: one growing byte string per deploy, appended by the operator and read in windows by the logs
//! route. Byte offsets are what the API promises, so the log is stored as bytes, never re-encoded.

use sqlx::PgPool;
use uuid::Uuid;

/// Appends `text` to the deploy's log (creating it).
pub async fn append(db: &PgPool, deploy: Uuid, text: &[u8]) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO deploy_logs (deploy_id, content) VALUES ($1, $2)
         ON CONFLICT (deploy_id) DO UPDATE SET content = deploy_logs.content || EXCLUDED.content, updated_at = now()",
    )
    .bind(deploy)
    .bind(text)
    .execute(db)
    .await?;
    Ok(())
}

/// Total size of the deploy's log (0 when nothing was written yet).
pub async fn size(db: &PgPool, deploy: Uuid) -> sqlx::Result<u64> {
    let size: Option<i32> =
        sqlx::query_scalar("SELECT octet_length(content) FROM deploy_logs WHERE deploy_id = $1")
            .bind(deploy)
            .fetch_optional(db)
            .await?;
    Ok(size.map_or(0, |s| u64::try_from(s).unwrap_or(0)))
}

/// `len` bytes of the log from byte `offset` (fewer at the end).
pub async fn read(db: &PgPool, deploy: Uuid, offset: u64, len: u64) -> sqlx::Result<Vec<u8>> {
    // substring counts from 1; a bytea is at most 1 GiB, so both fit an int.
    let start = i32::try_from(offset).unwrap_or(i32::MAX - 1) + 1;
    let len = i32::try_from(len).unwrap_or(i32::MAX);
    let bytes: Option<Vec<u8>> = sqlx::query_scalar(
        "SELECT substring(content FROM $2 FOR $3) FROM deploy_logs WHERE deploy_id = $1",
    )
    .bind(deploy)
    .bind(start)
    .bind(len)
    .fetch_optional(db)
    .await?;
    Ok(bytes.unwrap_or_default())
}

/// Forgets the logs of deploys that no longer exist.
pub async fn delete(db: &PgPool, deploys: &[Uuid]) -> sqlx::Result<()> {
    sqlx::query("DELETE FROM deploy_logs WHERE deploy_id = ANY($1)")
        .bind(deploys)
        .execute(db)
        .await?;
    Ok(())
}
