//! The refs of repositories kept in object storage, and the packs that hold their objects. A ref update is
//! published with one compare-and-swap per ref under the repository row's lock ([`publish`]), so of two racing
//! pushes through two API replicas exactly one moves the ref, and the other is refused as git refuses a stale push.
//! Every replica reads [`version`] before it serves a repository and syncs its cache from [`snapshot`] when the
//! number moved.

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

/// A repository that has been forgotten, with what to remove from the bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forgotten {
    /// Its id.
    pub id: Uuid,
    /// Its packs.
    pub packs: Vec<String>,
}

/// Forgets `app`'s repository with its refs, packs and log; `None` when there is none.
pub async fn delete(db: &PgPool, app: Uuid) -> sqlx::Result<Option<Forgotten>> {
    let mut tx = db.begin().await?;
    let Some(id) = sqlx::query_scalar("SELECT id FROM git_repos WHERE app_id = $1 FOR UPDATE")
        .bind(app)
        .fetch_optional(&mut *tx)
        .await?
    else {
        return Ok(None);
    };
    let packs = sqlx::query_scalar("SELECT name FROM git_packs WHERE repo_id = $1")
        .bind(id)
        .fetch_all(&mut *tx)
        .await?;
    sqlx::query("DELETE FROM git_repos WHERE id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(Some(Forgotten { id, packs }))
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
    let packs = sqlx::query("SELECT name, bytes FROM git_packs WHERE repo_id = $1 ORDER BY name")
        .bind(id)
        .fetch_all(&mut *tx)
        .await?
        .into_iter()
        .map(|r| PackRow {
            name: r.get("name"),
            bytes: r.get("bytes"),
        })
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

/// Applies `updates` and makes `packs` live, all or nothing: under the repository row's lock every ref must still
/// be what its update expects (unless `force`), then the refs move, the version goes up by one and the log
/// records each update with `actor`. A forced update that finds the ref as it wants it is left out; when nothing
/// is left to do the version stays. Returns the version after.
pub async fn publish(
    db: &PgPool,
    app: Uuid,
    updates: &[RefUpdate],
    packs: &[PackRow],
    actor: &str,
    force: bool,
) -> Result<i64, PublishError> {
    let mut tx = db.begin().await?;
    let (id, version): (Uuid, i64) =
        sqlx::query_as("SELECT id, version FROM git_repos WHERE app_id = $1 FOR UPDATE")
            .bind(app)
            .fetch_optional(&mut *tx)
            .await?
            .ok_or(PublishError::Missing)?;
    let current = version;
    let version = version + 1;
    let mut moved = 0;
    for update in updates {
        let found: Option<String> =
            sqlx::query_scalar("SELECT oid FROM git_refs WHERE repo_id = $1 AND name = $2")
                .bind(id)
                .bind(&update.name)
                .fetch_optional(&mut *tx)
                .await?;
        if !force && found != update.old {
            return Err(PublishError::Stale {
                name: update.name.clone(),
                expected: update.old.clone(),
                found,
            });
        }
        if force && found == update.new {
            continue;
        }
        moved += 1;
        match &update.new {
            Some(oid) => {
                sqlx::query(
                    "INSERT INTO git_refs (repo_id, name, oid) VALUES ($1, $2, $3)
                     ON CONFLICT (repo_id, name) DO UPDATE SET oid = EXCLUDED.oid",
                )
                .bind(id)
                .bind(&update.name)
                .bind(oid)
                .execute(&mut *tx)
                .await?;
            }
            None => {
                sqlx::query("DELETE FROM git_refs WHERE repo_id = $1 AND name = $2")
                    .bind(id)
                    .bind(&update.name)
                    .execute(&mut *tx)
                    .await?;
            }
        }
        sqlx::query(
            "INSERT INTO git_ref_log (repo_id, version, name, old, new, actor)
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(id)
        .bind(version)
        .bind(&update.name)
        .bind(&found)
        .bind(&update.new)
        .bind(actor)
        .execute(&mut *tx)
        .await?;
    }
    if moved == 0 && packs.is_empty() {
        return Ok(current);
    }
    for pack in packs {
        sqlx::query(
            "INSERT INTO git_packs (repo_id, name, bytes) VALUES ($1, $2, $3)
             ON CONFLICT (repo_id, name) DO NOTHING",
        )
        .bind(id)
        .bind(&pack.name)
        .bind(pack.bytes)
        .execute(&mut *tx)
        .await?;
    }
    sqlx::query("UPDATE git_repos SET version = $2 WHERE id = $1")
        .bind(id)
        .bind(version)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(version)
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
