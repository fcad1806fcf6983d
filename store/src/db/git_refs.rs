//! The refs of repositories kept in object storage, and the packs that hold their objects. A ref update is
//! published with one compare-and-swap per ref under the repository row's lock ([`publish`]), so of two racing
//! pushes through two API replicas exactly one moves the ref, and the other is refused as git refuses a stale push.
//! Every replica reads [`version`] before it serves a repository and syncs its cache from [`snapshot`] when the
//! number moved.

use std::collections::BTreeMap;

use sqlx::{PgPool, Row};
use uuid::Uuid;

/// One ref update: `old` is what the writer saw (`None`: the ref must not exist), `new` what it wants (`None`:
/// delete it). Object ids are 40 lowercase hex digits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefUpdate {
    /// Full ref name, `refs/heads/master`.
    pub name: String,
    /// The value the writer expects.
    pub old: Option<String>,
    /// The value to store.
    pub new: Option<String>,
}

/// A pack to make live with the update.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackRow {
    /// `pack-<sha>`.
    pub name: String,
    /// Size of the `.pack` file.
    pub bytes: i64,
    /// The upload that put this copy in the bucket, part of its key; `None` for a pack uploaded before uploads
    /// were told apart.
    pub upload: Option<Uuid>,
    /// The size of each chunk but the last when the `.pack` file was sent as it was received, one object per chunk;
    /// `None` when it is one object.
    pub chunk_bytes: Option<i64>,
}

/// Everything a cache needs to match a repository at one version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The repository's id: its name in the bucket.
    pub id: Uuid,
    /// The repository's version.
    pub version: i64,
    /// What `HEAD` points at.
    pub head: String,
    /// Every ref with its object id, sorted by name.
    pub refs: Vec<(String, String)>,
    /// Every live pack.
    pub packs: Vec<PackRow>,
}

/// Why [`publish`] moved nothing.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// A ref is no longer what the writer saw: someone else updated it first.
    #[error("{name} moved: expected {}, found {}", show(.expected), show(.found))]
    Stale {
        /// The ref.
        name: String,
        /// What the writer saw.
        expected: Option<String>,
        /// What it is now.
        found: Option<String>,
    },
    /// The refs after the update would break one of git's rules; the message says which.
    #[error("{0}")]
    Refused(String),
    /// The repository is not kept here (its app is gone).
    #[error("no such repository")]
    Missing,
    /// The database failed.
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

fn show(oid: &Option<String>) -> &str {
    oid.as_deref().unwrap_or("no ref")
}

/// Creates the row of `app`'s empty repository; one that exists already is kept (app uids are never reused).
pub async fn create(db: &PgPool, app: Uuid) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO git_repos (id, app_id) VALUES ($1, $2) ON CONFLICT (app_id) DO NOTHING",
    )
    .bind(Uuid::new_v4())
    .bind(app)
    .execute(db)
    .await?;
    Ok(())
}

/// Forgets `app`'s repository with its refs, packs and log; returns its id (its name in the bucket), `None` when
/// there is none.
pub async fn delete(db: &PgPool, app: Uuid) -> sqlx::Result<Option<Uuid>> {
    sqlx::query_scalar("DELETE FROM git_repos WHERE app_id = $1 RETURNING id")
        .bind(app)
        .fetch_optional(db)
        .await
}

/// Hands `from`'s repository to the app `to` (a transfer makes a new app); false when `from` has none.
pub async fn hand_over(db: &PgPool, from: Uuid, to: Uuid) -> sqlx::Result<bool> {
    Ok(
        sqlx::query("UPDATE git_repos SET app_id = $2 WHERE app_id = $1")
            .bind(from)
            .bind(to)
            .execute(db)
            .await?
            .rows_affected()
            == 1,
    )
}

/// The repository's version, `None` when it is not kept here. One primary-key read on the primary: every request
/// that serves a repository asks it, so a replica never answers from a cache older than a write it did not see.
pub async fn version(db: &PgPool, app: Uuid) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar("SELECT version FROM git_repos WHERE app_id = $1")
        .bind(app)
        .fetch_optional(db)
        .await
}

/// The id (the name in the bucket) of `app`'s repository, `None` when it is not kept here.
pub async fn id(db: &PgPool, app: Uuid) -> sqlx::Result<Option<Uuid>> {
    sqlx::query_scalar("SELECT id FROM git_repos WHERE app_id = $1")
        .bind(app)
        .fetch_optional(db)
        .await
}

/// Points `app`'s `HEAD` at `head` (a full ref name); a change moves the version, so every cache takes it. False
/// when the app has no repository.
pub async fn set_head(db: &PgPool, app: Uuid, head: &str) -> sqlx::Result<bool> {
    let mut tx = db.begin().await?;
    let Some(current) =
        sqlx::query_scalar::<_, String>("SELECT head FROM git_repos WHERE app_id = $1 FOR UPDATE")
            .bind(app)
            .fetch_optional(&mut *tx)
            .await?
    else {
        return Ok(false);
    };
    if current != head {
        sqlx::query("UPDATE git_repos SET head = $2, version = version + 1 WHERE app_id = $1")
            .bind(app)
            .bind(head)
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(true)
}

/// The repository's refs and packs at one version, read in one snapshot.
pub async fn snapshot(db: &PgPool, app: Uuid) -> sqlx::Result<Option<Snapshot>> {
    let mut tx = db.begin().await?;
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        .execute(&mut *tx)
        .await?;
    let Some(row) = sqlx::query("SELECT id, version, head FROM git_repos WHERE app_id = $1")
        .bind(app)
        .fetch_optional(&mut *tx)
        .await?
    else {
        return Ok(None);
    };
    let id: Uuid = row.get("id");
    let refs = sqlx::query_as("SELECT name, oid FROM git_refs WHERE repo_id = $1 ORDER BY name")
        .bind(id)
        .fetch_all(&mut *tx)
        .await?;
    let packs = sqlx::query(
        "SELECT name, bytes, upload, chunk_bytes FROM git_packs WHERE repo_id = $1 AND retired_at IS NULL ORDER BY name",
    )
    .bind(id)
    .fetch_all(&mut *tx)
    .await?
    .into_iter()
    .map(pack_row)
    .collect();
    tx.commit().await?;
    Ok(Some(Snapshot {
        id,
        version: row.get("version"),
        head: row.get("head"),
        refs,
        packs,
    }))
}

/// How [`publish`] checks each update against the stored refs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// A push: every ref must still be what the pusher saw, and the branch `HEAD` names may not be deleted (git's
    /// `receive.denyDeleteCurrent`).
    Push,
    /// A ref update of the platform's own (a changeset): every ref must still be what the writer saw.
    Update,
    /// A mirror's sync: the refs move whatever they were, and one already as wanted is left out.
    Force,
}

/// Applies `updates` and makes `packs` live, all or nothing. Under the repository row's lock every ref must still
/// be what its update expects (as `check` says), and the refs must be ones git can write in one transaction: no
/// ref is both a file and a directory (`refs/heads/a` beside `refs/heads/a/b`), after the update or, for a ref it
/// creates, before it. Then the refs move, the version goes up
/// by one and the log records each update with `actor`. When nothing is left to do the version stays. Returns the
/// version after.
pub async fn publish(
    db: &PgPool,
    app: Uuid,
    updates: &[RefUpdate],
    packs: &[PackRow],
    actor: &str,
    check: Check,
) -> Result<i64, PublishError> {
    let mut tx = db.begin().await?;
    let (id, current, head): (Uuid, i64, String) =
        sqlx::query_as("SELECT id, version, head FROM git_repos WHERE app_id = $1 FOR UPDATE")
            .bind(app)
            .fetch_optional(&mut *tx)
            .await?
            .ok_or(PublishError::Missing)?;
    let refs = all_refs(&mut tx, id).await?;
    let moved = plan(refs, &head, updates, check)?;
    if moved.is_empty() && packs.is_empty() {
        return Ok(current);
    }
    let version = current + 1;
    let (names, olds, news): (Vec<&str>, Vec<Option<&str>>, Vec<Option<&str>>) = moved
        .iter()
        .map(|(u, found)| (u.name.as_str(), found.as_deref(), u.new.as_deref()))
        .collect();
    sqlx::query("DELETE FROM git_refs WHERE repo_id = $1 AND name = ANY($2)")
        .bind(id)
        .bind(&names)
        .execute(&mut *tx)
        .await?;
    sqlx::query(
        "INSERT INTO git_refs (repo_id, name, oid)
         SELECT $1, name, oid FROM UNNEST($2::text[], $3::text[]) AS u(name, oid) WHERE oid IS NOT NULL",
    )
    .bind(id)
    .bind(&names)
    .bind(&news)
    .execute(&mut *tx)
    .await?;
    sqlx::query(
        "INSERT INTO git_ref_log (repo_id, version, name, old, new, actor)
         SELECT $1, $2, name, old, new, $6 FROM UNNEST($3::text[], $4::text[], $5::text[]) AS u(name, old, new)",
    )
    .bind(id)
    .bind(version)
    .bind(&names)
    .bind(&olds)
    .bind(&news)
    .bind(actor)
    .execute(&mut *tx)
    .await?;
    insert_packs(&mut tx, id, packs).await?;
    sqlx::query("UPDATE git_repos SET version = $2 WHERE id = $1")
        .bind(id)
        .bind(version)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(version)
}

/// A pack read from a `name, bytes, upload, chunk_bytes` row.
pub(crate) fn pack_row(row: sqlx::postgres::PgRow) -> PackRow {
    PackRow {
        name: row.get("name"),
        bytes: row.get("bytes"),
        upload: row.get("upload"),
        chunk_bytes: row.get("chunk_bytes"),
    }
}

/// Makes `packs` live in repository `id`. A pack already live keeps its copy in the bucket (the new upload is an
/// orphan the maintenance removes); a retired one comes back with the new copy, since the old one may be on its
/// way out of the bucket.
pub(crate) async fn insert_packs(
    tx: &mut sqlx::PgConnection,
    id: Uuid,
    packs: &[PackRow],
) -> sqlx::Result<()> {
    if packs.is_empty() {
        return Ok(());
    }
    let names: Vec<&str> = packs.iter().map(|p| p.name.as_str()).collect();
    let bytes: Vec<i64> = packs.iter().map(|p| p.bytes).collect();
    let uploads: Vec<Option<Uuid>> = packs.iter().map(|p| p.upload).collect();
    let chunks: Vec<Option<i64>> = packs.iter().map(|p| p.chunk_bytes).collect();
    // A pack's copy is its upload and the chunk size together: they change as one.
    sqlx::query(
        "INSERT INTO git_packs (repo_id, name, bytes, upload, chunk_bytes)
         SELECT $1, name, bytes, upload, chunk_bytes
         FROM UNNEST($2::text[], $3::bigint[], $4::uuid[], $5::bigint[]) AS u(name, bytes, upload, chunk_bytes)
         ON CONFLICT (repo_id, name) DO UPDATE SET
             upload = CASE WHEN git_packs.retired_at IS NULL THEN git_packs.upload ELSE EXCLUDED.upload END,
             chunk_bytes = CASE WHEN git_packs.retired_at IS NULL THEN git_packs.chunk_bytes ELSE EXCLUDED.chunk_bytes END,
             retired_at = NULL",
    )
    .bind(id)
    .bind(&names)
    .bind(&bytes)
    .bind(&uploads)
    .bind(&chunks)
    .execute(tx)
    .await?;
    Ok(())
}

/// Checks `updates` as [`publish`] will, without its lock and writing nothing: a writer asks before it packs and
/// uploads anything, so that an update refused anyway (a stale push, most often) leaves no copy in the bucket.
/// `publish` checks again; an update that passes here may still be refused there. Returns the repository's id (its
/// name in the bucket).
pub async fn precheck(
    db: &PgPool,
    app: Uuid,
    updates: &[RefUpdate],
    check: Check,
) -> Result<Uuid, PublishError> {
    let mut conn = db.acquire().await?;
    let (id, head): (Uuid, String) =
        sqlx::query_as("SELECT id, head FROM git_repos WHERE app_id = $1")
            .bind(app)
            .fetch_optional(&mut *conn)
            .await?
            .ok_or(PublishError::Missing)?;
    let refs = all_refs(&mut conn, id).await?;
    plan(refs, &head, updates, check).map(|_| id)
}

async fn all_refs(
    conn: &mut sqlx::PgConnection,
    id: Uuid,
) -> sqlx::Result<BTreeMap<String, String>> {
    Ok(
        sqlx::query_as("SELECT name, oid FROM git_refs WHERE repo_id = $1")
            .bind(id)
            .fetch_all(conn)
            .await?
            .into_iter()
            .collect(),
    )
}

/// What `updates` move, each with the value it found in `refs` (the repository's refs, `HEAD` naming `head`), or
/// why they are refused: a ref no longer what its writer saw (as `check` says), the current branch deleted by a
/// push, a ref updated twice, or refs git could not write in one transaction (no ref both a file and a directory,
/// after the update or, for a ref it creates, before it). A forced update that finds the ref as wanted is left
/// out.
fn plan<'u>(
    mut refs: BTreeMap<String, String>,
    head: &str,
    updates: &'u [RefUpdate],
    check: Check,
) -> Result<Vec<(&'u RefUpdate, Option<String>)>, PublishError> {
    let before: BTreeMap<String, ()> = refs.keys().map(|name| (name.clone(), ())).collect();
    let mut moved: Vec<(&RefUpdate, Option<String>)> = Vec::new();
    for update in updates {
        if moved.iter().any(|(u, _)| u.name == update.name) {
            return Err(PublishError::Refused(format!(
                "{} is updated twice in one transaction",
                update.name
            )));
        }
        let found = refs.get(&update.name).cloned();
        if check != Check::Force && found != update.old {
            return Err(PublishError::Stale {
                name: update.name.clone(),
                expected: update.old.clone(),
                found,
            });
        }
        if found == update.new {
            continue;
        }
        if check == Check::Push && update.new.is_none() && update.name == head {
            return Err(PublishError::Refused(format!(
                "refusing to delete the current branch: {}",
                update.name
            )));
        }
        match &update.new {
            Some(oid) => refs.insert(update.name.clone(), oid.clone()),
            None => refs.remove(&update.name),
        };
        moved.push((update, found));
    }
    for (update, found) in &moved {
        let created = found.is_none() && update.new.is_some();
        let clash = dir_file_clash(&refs, &update.name).or_else(|| {
            created
                .then(|| dir_file_clash(&before, &update.name))
                .flatten()
        });
        if update.new.is_some()
            && let Some(other) = clash
        {
            return Err(PublishError::Refused(format!(
                "cannot create {}: {other} exists, and a ref cannot be both a file and a directory",
                update.name
            )));
        }
    }
    Ok(moved)
}

/// A ref of `refs` that `name` cannot stand beside, because one would be the other's directory: `refs/heads/a`
/// for `refs/heads/a/b`, or `refs/heads/a/b` for `refs/heads/a`. git keeps refs as files, so it can write
/// neither pair.
pub fn dir_file_clash<'a, V>(refs: &'a BTreeMap<String, V>, name: &str) -> Option<&'a str> {
    let mut parents = name.match_indices('/').map(|(at, _)| &name[..at]);
    if let Some(parent) = parents.find_map(|p| refs.get_key_value(p)) {
        return Some(parent.0);
    }
    let below = format!("{name}/");
    refs.range(below.clone()..)
        .next()
        .map(|(k, _)| k.as_str())
        .filter(|k| k.starts_with(&below))
}

/// One entry of a repository's ref log.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct LoggedUpdate {
    /// The version the update made.
    pub version: i64,
    /// The ref.
    pub name: String,
    /// What it was.
    pub old: Option<String>,
    /// What it became.
    pub new: Option<String>,
    /// Who moved it.
    pub actor: String,
}

/// The ref log of a repository, oldest first.
pub async fn log(db: &PgPool, app: Uuid) -> sqlx::Result<Vec<LoggedUpdate>> {
    sqlx::query_as(
        "SELECT l.version, l.name, l.old, l.new, l.actor FROM git_ref_log l
         JOIN git_repos r ON r.id = l.repo_id WHERE r.app_id = $1
         ORDER BY l.version, l.name",
    )
    .bind(app)
    .fetch_all(db)
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ref_clashes_with_its_directories_and_what_is_below_it() {
        let refs: BTreeMap<String, ()> = ["refs/heads/a", "refs/heads/b/c", "refs/heads/bc"]
            .into_iter()
            .map(|n| (n.to_owned(), ()))
            .collect();
        assert_eq!(
            dir_file_clash(&refs, "refs/heads/a/x"),
            Some("refs/heads/a")
        );
        assert_eq!(
            dir_file_clash(&refs, "refs/heads/a/x/y"),
            Some("refs/heads/a")
        );
        assert_eq!(
            dir_file_clash(&refs, "refs/heads/b"),
            Some("refs/heads/b/c")
        );
        assert_eq!(dir_file_clash(&refs, "refs/heads/b/d"), None);
        assert_eq!(dir_file_clash(&refs, "refs/heads/ab"), None);
        assert_eq!(dir_file_clash(&refs, "refs/heads/a"), None);
        assert_eq!(
            dir_file_clash(&refs, "refs/heads/bc/d"),
            Some("refs/heads/bc")
        );
    }
}
