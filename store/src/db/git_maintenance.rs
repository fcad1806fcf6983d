//! The maintenance of repositories kept in object storage, which runs once cluster-wide per repository: a replica
//! [`claim`]s it, folds the live packs into one ([`compact`]), and later removes the packs the fold retired
//! ([`take_retired`]) and the copies no row names ([`pack_rows`] tells them apart). Objects of repositories the
//! database no longer knows ([`known`] tells them apart) go too.

use std::collections::HashSet;
use std::time::Duration;

use sqlx::PgPool;
use uuid::Uuid;

use super::git_refs::{PackRow, insert_packs, pack_row};

/// Claims the maintenance of `app`'s repository when no replica claimed it in the last `every`; returns the
/// repository's id, `None` when another replica has it or there is no repository.
pub async fn claim(db: &PgPool, app: Uuid, every: Duration) -> sqlx::Result<Option<Uuid>> {
    sqlx::query_scalar(
        "UPDATE git_repos SET maintained_at = now()
         WHERE app_id = $1 AND maintained_at <= now() - make_interval(secs => $2)
         RETURNING id",
    )
    .bind(app)
    .bind(every.as_secs_f64())
    .fetch_optional(db)
    .await
}

/// Retires the `replaced` packs of repository `id` in favour of `pack`, which holds every object they hold. False
/// when one of them is no longer live, and then nothing changes. The version stays: the refs did not move, and a
/// cache that holds the old packs holds every object.
pub async fn compact(
    db: &PgPool,
    id: Uuid,
    replaced: &[String],
    pack: &PackRow,
) -> sqlx::Result<bool> {
    let mut tx = db.begin().await?;
    sqlx::query("SELECT 1 FROM git_repos WHERE id = $1 FOR UPDATE")
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?;
    let retired = sqlx::query(
        "UPDATE git_packs SET retired_at = now()
         WHERE repo_id = $1 AND name = ANY($2) AND retired_at IS NULL",
    )
    .bind(id)
    .bind(replaced)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    if retired != replaced.len() as u64 {
        return Ok(false);
    }
    insert_packs(&mut tx, id, std::slice::from_ref(pack)).await?;
    tx.commit().await?;
    Ok(true)
}

/// Forgets the packs of repository `id` retired longer than `grace` ago, and returns them for the caller to remove
/// from the bucket. A sync reads the live packs in one snapshot and downloads them at once, so a grace of minutes
/// is ample.
pub async fn take_retired(db: &PgPool, id: Uuid, grace: Duration) -> sqlx::Result<Vec<PackRow>> {
    Ok(sqlx::query(
        "DELETE FROM git_packs
         WHERE repo_id = $1 AND retired_at < now() - make_interval(secs => $2)
         RETURNING name, bytes, upload, chunk_bytes",
    )
    .bind(id)
    .bind(grace.as_secs_f64())
    .fetch_all(db)
    .await?
    .into_iter()
    .map(pack_row)
    .collect())
}

/// Every pack row of repository `id`, live or retired: the copies in the bucket that are not orphans.
pub async fn pack_rows(db: &PgPool, id: Uuid) -> sqlx::Result<Vec<PackRow>> {
    Ok(
        sqlx::query("SELECT name, bytes, upload, chunk_bytes FROM git_packs WHERE repo_id = $1")
            .bind(id)
            .fetch_all(db)
            .await?
            .into_iter()
            .map(pack_row)
            .collect(),
    )
}

/// Which of `ids` are repositories the database knows.
pub async fn known(db: &PgPool, ids: &[Uuid]) -> sqlx::Result<HashSet<Uuid>> {
    let known: Vec<Uuid> = sqlx::query_scalar("SELECT id FROM git_repos WHERE id = ANY($1)")
        .bind(ids)
        .fetch_all(db)
        .await?;
    Ok(known.into_iter().collect())
}
