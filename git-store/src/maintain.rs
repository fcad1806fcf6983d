//! The maintenance of repositories kept in object storage, run once cluster-wide per repository by whichever
//! replica claims it first (`git_maintenance::claim`):
//!
//! - **Compaction.** Every published update adds a pack, and a cache syncs by downloading the packs it lacks, so a
//!   busy repository gathers many. Past [`Policy::compact_at`] live packs they are folded into one holding every
//!   object of every one of them (nothing is pruned: an object a replica's stale cache still reaches stays), and
//!   the old packs are retired. The refs do not move, so the version stays and caches take the new pack when they
//!   next sync.
//! - **Removal.** Retired packs leave the bucket [`Policy::grace`] later, when no sync can still be reading a
//!   snapshot that named them; so do copies no row names (an update that was refused after its upload), once they
//!   are older than the grace.
//!
//! Apart from that, each replica removes its caches of repositories that are no longer kept here
//! ([`crate::Repos::sweep_caches`]), and the bucket's objects of repositories the database no longer knows, which
//! a deleted app leaves when removing them failed ([`remove_gone_repositories`]), once they are older than the
//! grace, and aborts the multipart uploads a stopped replica left, once they are older than
//! [`Policy::upload_grace`].

use std::path::Path;
use std::time::{Duration, SystemTime};

use anyhow::{Context, ensure};
use slipway_store::db::git_maintenance;
use slipway_store::db::git_refs::{self, PackRow};
use uuid::Uuid;

use crate::ObjectStorage;
use crate::bucket::{EXTENSIONS, PackBucket};

/// When and how repositories are maintained.
#[derive(Debug, Clone)]
pub struct Policy {
    /// How long after a repository was maintained it is due again.
    pub every: Duration,
    /// How many live packs make a compaction worth it.
    pub compact_at: usize,
    /// How long a retired or orphaned copy stays in the bucket.
    pub grace: Duration,
    /// How long an unfinished multipart upload may run before it is taken as left by a stopped replica and aborted:
    /// far longer than any upload takes, so that a slow one is never cut off.
    pub upload_grace: Duration,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            every: Duration::from_secs(20 * 3600),
            compact_at: 8,
            grace: Duration::from_secs(3600),
            upload_grace: Duration::from_secs(24 * 3600),
        }
    }
}

/// What one maintenance did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Maintained {
    /// How many packs were folded into one (0: no compaction).
    pub packs_folded: usize,
    /// How many retired packs left the bucket.
    pub retired_removed: usize,
    /// How many orphaned objects left the bucket.
    pub orphans_removed: usize,
}

/// Maintains the repository `id` of `app`, whose maintenance this replica claimed.
pub(crate) async fn run(
    storage: &ObjectStorage,
    app: Uuid,
    id: Uuid,
    policy: &Policy,
) -> anyhow::Result<Maintained> {
    let packs_folded = compact(storage, app, id, policy).await?;
    let retired = git_maintenance::take_retired(&storage.db, id, policy.grace).await?;
    storage.bucket.remove(id, &retired).await?;
    let orphans_removed = remove_orphans(storage, id, policy.grace).await?;
    Ok(Maintained {
        packs_folded,
        retired_removed: retired.len(),
        orphans_removed,
    })
}

/// Folds the live packs of `app`'s repository into one when there are at least `policy.compact_at`; how many were
/// folded.
async fn compact(
    storage: &ObjectStorage,
    app: Uuid,
    id: Uuid,
    policy: &Policy,
) -> anyhow::Result<usize> {
    let path = storage.cache_path(app);
    if !crate::cache::sync(storage, app, &path).await? {
        return Ok(0);
    }
    let scratch = storage
        .cache
        .join(".maintenance")
        .join(Uuid::new_v4().to_string());
    let result = async {
        let lock = storage.cache_lock(&path);
        let held = lock.write().await;
        let Some(snapshot) = git_refs::snapshot(&storage.db, app).await? else {
            return Ok(0);
        };
        if snapshot.packs.len() < policy.compact_at {
            return Ok(0);
        }
        crate::cache::fetch_packs(storage, &snapshot, &path).await?;
        crate::git_init(&scratch).await?;
        let from = path.join("objects/pack");
        let into = scratch.join("objects/pack");
        for pack in &snapshot.packs {
            for extension in EXTENSIONS {
                let file = format!("{}.{extension}", pack.name);
                tokio::fs::hard_link(from.join(&file), into.join(&file))
                    .await
                    .with_context(|| format!("link {file}"))?;
            }
        }
        // The links keep the packs' bytes even if a sync prunes the cache's copies meanwhile.
        drop(held);
        let out = scratch.join("out");
        tokio::fs::create_dir_all(&out).await?;
        let folded = fold(&scratch, &out).await?;
        let upload = storage.bucket.upload(id, &out, &folded.name).await?;
        let folded = PackRow {
            upload: Some(upload),
            ..folded
        };
        let replaced: Vec<String> = snapshot.packs.iter().map(|p| p.name.clone()).collect();
        if !git_maintenance::compact(&storage.db, id, &replaced, &folded).await? {
            storage.bucket.remove(id, std::slice::from_ref(&folded)).await?;
            return Ok(0);
        }
        let _held = lock.write().await;
        for extension in EXTENSIONS {
            let file = format!("{}.{extension}", folded.name);
            match tokio::fs::hard_link(out.join(&file), from.join(&file)).await {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e).with_context(|| format!("link {file} into the cache")),
            }
        }
        crate::cache::keep(&from, &folded.name).await?;
        if let Some(now) = git_refs::snapshot(&storage.db, app).await? {
            crate::cache::prune_packs(&path, &now.packs).await?;
        }
        tracing::info!(%app, folded = replaced.len(), pack = %folded.name, bytes = folded.bytes, "compacted a repository's packs");
        anyhow::Ok(replaced.len())
    }
    .await;
    let _ = tokio::fs::remove_dir_all(&scratch).await;
    result
}

/// Packs every object of the repository at `scratch` into one pack in `out`.
async fn fold(scratch: &Path, out: &Path) -> anyhow::Result<PackRow> {
    let list = crate::git(scratch)
        .args([
            "cat-file",
            "--batch-all-objects",
            "--batch-check=%(objectname)",
        ])
        .output()
        .await
        .context("run git cat-file")?;
    ensure!(
        list.status.success(),
        "git cat-file: {}",
        String::from_utf8_lossy(&list.stderr).trim()
    );
    crate::pack::write(
        crate::git(scratch),
        &["--quiet", "--delta-base-offset"],
        list.stdout,
        out,
    )
    .await?
    .context("the repository holds no object")
}

/// Removes the objects of repository `id` no pack row names, written more than `grace` ago; how many went.
async fn remove_orphans(
    storage: &ObjectStorage,
    id: Uuid,
    grace: Duration,
) -> anyhow::Result<usize> {
    let named: std::collections::HashSet<String> = git_maintenance::pack_rows(&storage.db, id)
        .await?
        .iter()
        .flat_map(|p| PackBucket::pack_keys(id, p))
        .collect();
    let before = ago(grace);
    let orphans: Vec<String> = storage
        .bucket
        .list(id)
        .await?
        .into_iter()
        .filter(|(key, written)| !named.contains(key) && *written <= before)
        .map(|(key, _)| key)
        .collect();
    storage.bucket.remove_keys(&orphans).await?;
    Ok(orphans.len())
}

/// The time `grace` ago (the epoch if the clock is nearer it than that): what is older may go.
pub(crate) fn ago(grace: Duration) -> SystemTime {
    SystemTime::now()
        .checked_sub(grace)
        .unwrap_or(SystemTime::UNIX_EPOCH)
}

/// Removes the objects of repositories the database does not know, written more than `grace` ago; how many went.
pub(crate) async fn remove_gone_repositories(
    storage: &ObjectStorage,
    grace: Duration,
) -> anyhow::Result<usize> {
    let before = ago(grace);
    let mut by_repo: std::collections::HashMap<Uuid, Vec<(String, SystemTime)>> =
        std::collections::HashMap::new();
    for (key, written) in storage.bucket.list_all().await? {
        if let Some(repo) = PackBucket::repo_of(&key) {
            by_repo.entry(repo).or_default().push((key, written));
        }
    }
    let ids: Vec<Uuid> = by_repo.keys().copied().collect();
    let known = git_maintenance::known(&storage.db, &ids).await?;
    let gone: Vec<String> = by_repo
        .into_iter()
        .filter(|(repo, _)| !known.contains(repo))
        .flat_map(|(_, objects)| objects)
        .filter(|(_, written)| *written <= before)
        .map(|(key, _)| key)
        .collect();
    storage.bucket.remove_keys(&gone).await?;
    Ok(gone.len())
}
