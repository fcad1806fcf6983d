//! A replica's cache of one repository kept in object storage: a bare repository at `<cache>/<app uid>.git` that
//! matches the platform database at some version. Before a repository is served, [`sync`] reads the version (one
//! primary-key read); when the cache was synced at another one, it downloads the live packs it lacks, moves its
//! refs to the database's with one `git update-ref` transaction and records the version. Every pack the database
//! names is kept (`.keep`) so that the cache's own `git gc` never folds it away; the cache can be deleted at any time
//! and is rebuilt on the next request.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, ensure};
use slipway_store::db::git_refs::{self, PackRow, Snapshot};
use tokio::io::AsyncWriteExt;
use uuid::Uuid;

use crate::ObjectStorage;

/// The file that records which app and version the cache matches.
const MARKER: &str = "slipway-synced";

/// How often a ref update that meets a lock (a changeset on this replica holds it) is tried.
const ATTEMPTS: u32 = 8;

/// How long a sync waits for the pushes and mirror syncs on this replica that hold the cache's lock.
pub(crate) const LOCK_WAIT: Duration = Duration::from_secs(60);

/// Brings the cache of `app`'s repository at `path` up to the database's version; false when the app has no
/// repository.
pub async fn sync(storage: &ObjectStorage, app: Uuid, path: &Path) -> anyhow::Result<bool> {
    let Some(version) = git_refs::version(&storage.db, app).await? else {
        return Ok(false);
    };
    if marker(path).await == Some((app, version)) {
        return Ok(true);
    }
    let lock = storage.cache_lock(path);
    let Ok(_held) = tokio::time::timeout(LOCK_WAIT, lock.write()).await else {
        anyhow::bail!(
            "the repository's cache is busy with a push on this replica for over {}s; try again",
            LOCK_WAIT.as_secs()
        );
    };
    if marker(path).await == Some((app, version)) {
        return Ok(true);
    }
    let Some(snapshot) = git_refs::snapshot(&storage.db, app).await? else {
        return Ok(false);
    };
    let started = std::time::Instant::now();
    if marker(path).await.map(|(a, _)| a) != Some(app) {
        init(path).await?;
    }
    let mut fetched = fetch_packs(storage, &snapshot, path).await?;
    if let Err(e) = move_refs(&snapshot, path).await {
        // Whatever wedged the cache's refs goes with the cache: it is made again from the bucket.
        tracing::warn!(%app, error = format!("{e:#}"), "the cache's refs could not be moved; making the cache again");
        init(path).await?;
        fetched = fetch_packs(storage, &snapshot, path).await?;
        move_refs(&snapshot, path).await?;
    }
    let pruned = prune_packs(path, &snapshot.packs).await?;
    write_marker(path, app, snapshot.version).await?;
    tracing::debug!(
        %app,
        version = snapshot.version,
        packs_fetched = fetched,
        packs_pruned = pruned,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "synced a repository cache"
    );
    Ok(true)
}

async fn marker(path: &Path) -> Option<(Uuid, i64)> {
    let text = tokio::fs::read_to_string(path.join(MARKER)).await.ok()?;
    let (app, version) = text.trim().split_once(' ')?;
    Some((app.parse().ok()?, version.parse().ok()?))
}

async fn write_marker(path: &Path, app: Uuid, version: i64) -> anyhow::Result<()> {
    let partial = path.join(format!("{MARKER}.{}", Uuid::new_v4()));
    tokio::fs::write(&partial, format!("{app} {version}\n")).await?;
    tokio::fs::rename(&partial, path.join(MARKER)).await?;
    Ok(())
}

/// An empty bare repository at `path`, replacing whatever was there (a cache of an app that no longer exists).
async fn init(path: &Path) -> anyhow::Result<()> {
    match tokio::fs::remove_dir_all(path).await {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("remove {}", path.display())),
    }
    crate::git_init(path).await
}

/// Downloads the live packs the cache lacks and keeps every live pack; returns how many were downloaded.
pub(crate) async fn fetch_packs(
    storage: &ObjectStorage,
    snapshot: &Snapshot,
    path: &Path,
) -> anyhow::Result<usize> {
    let dir = path.join("objects/pack");
    tokio::fs::create_dir_all(&dir).await?;
    let mut fetched = 0;
    for pack in &snapshot.packs {
        if !tokio::fs::try_exists(dir.join(format!("{}.idx", pack.name))).await? {
            storage.bucket.download(snapshot.id, &dir, pack).await?;
            fetched += 1;
        }
        keep(&dir, &pack.name).await?;
    }
    Ok(fetched)
}

/// Removes what git processes killed with this replica's last process left in the caches under `cache`: a push's
/// quarantine (`objects/tmp_objdir-*`, as large as the push) and half-written packs and downloads
/// (`objects/pack/tmp_*`). None of them is ever read again; none is being written before this process serves.
/// Returns how many went.
pub(crate) async fn clear_leftovers(cache: &Path) -> anyhow::Result<usize> {
    let mut cleared = 0;
    let mut repos = tokio::fs::read_dir(cache).await?;
    while let Some(repo) = repos.next_entry().await? {
        if !repo.file_name().to_string_lossy().ends_with(".git") {
            continue;
        }
        let objects = repo.path().join("objects");
        for (dir, prefix) in [
            (objects.clone(), "tmp_objdir-"),
            (objects.join("pack"), "tmp_"),
        ] {
            let mut entries = match tokio::fs::read_dir(&dir).await {
                Ok(entries) => entries,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e).with_context(|| format!("read {}", dir.display())),
            };
            while let Some(entry) = entries.next_entry().await? {
                if !entry.file_name().to_string_lossy().starts_with(prefix) {
                    continue;
                }
                let path = entry.path();
                let removed = if entry.file_type().await?.is_dir() {
                    tokio::fs::remove_dir_all(&path).await
                } else {
                    tokio::fs::remove_file(&path).await
                };
                removed.with_context(|| format!("remove {}", path.display()))?;
                cleared += 1;
            }
        }
    }
    Ok(cleared)
}

/// Marks a pack as one `git gc` must leave alone.
pub(crate) async fn keep(dir: &Path, pack: &str) -> anyhow::Result<()> {
    let keep = dir.join(format!("{pack}.keep"));
    if !tokio::fs::try_exists(&keep).await? {
        tokio::fs::File::create(&keep)
            .await?
            .write_all(b"published\n")
            .await?;
    }
    Ok(())
}

/// The two transactions of a sync.
#[derive(Clone, Copy)]
enum Phase {
    /// Deleting the refs the snapshot no longer has.
    Delete,
    /// Creating and moving the rest.
    Write,
}

impl Phase {
    /// The `update-ref -z --stdin` script of this phase (every field ends in a NUL, so no name is read as two);
    /// empty when there is nothing to do.
    fn script(self, local: &BTreeMap<String, String>, wanted: &BTreeMap<&str, &str>) -> Vec<u8> {
        let mut script = Vec::new();
        let mut command = |words: &[&str]| {
            script.extend_from_slice(words[0].as_bytes());
            script.push(b' ');
            for word in &words[1..] {
                script.extend_from_slice(word.as_bytes());
                script.push(0);
            }
        };
        match self {
            Phase::Delete => {
                for (name, have) in local {
                    if !wanted.contains_key(name.as_str()) {
                        command(&["delete", name, have]);
                    }
                }
            }
            Phase::Write => {
                for (name, oid) in wanted {
                    match local.get(*name) {
                        Some(have) if have == oid => {}
                        Some(have) => command(&["update", name, oid, have]),
                        None => command(&["create", name, oid]),
                    }
                }
            }
        }
        script
    }
}

/// The cache's refs under `refs/`, by name.
pub(crate) async fn local_refs(path: &Path) -> anyhow::Result<BTreeMap<String, String>> {
    let out = crate::git(path)
        .args(["for-each-ref", "--format=%(objectname) %(refname)", "refs/"])
        .output()
        .await?;
    ensure!(
        out.status.success(),
        "git for-each-ref: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(oid, name)| (name.to_owned(), oid.to_owned()))
        .collect())
}

/// Removes the cache's packs that are not among the repository's `live` ones: the packs a compaction folded into
/// one, and those of updates that were refused. Every object a ref reaches is in a live pack, and the caller holds
/// the cache's lock alone, so no push is between publishing a pack and its ref. A git reading one of them keeps
/// its open file, and looks again among the packs for what it has not read yet. Returns how many went.
pub(crate) async fn prune_packs(path: &Path, live: &[PackRow]) -> anyhow::Result<usize> {
    let dir = path.join("objects/pack");
    let live: std::collections::HashSet<&str> = live.iter().map(|p| p.name.as_str()).collect();
    let mut entries = tokio::fs::read_dir(&dir).await?;
    let mut pruned = 0;
    let mut gone = Vec::new();
    while let Some(entry) = entries.next_entry().await? {
        let file = entry.file_name().to_string_lossy().into_owned();
        let Some(pack) = file.strip_suffix(".idx") else {
            continue;
        };
        if pack.starts_with("pack-") && !live.contains(pack) {
            gone.push(pack.to_owned());
        }
    }
    for pack in gone {
        // The `.idx` goes first: without it git no longer sees the pack.
        for extension in ["idx", "pack", "rev", "bitmap", "keep", "promisor", "mtimes"] {
            match tokio::fs::remove_file(dir.join(format!("{pack}.{extension}"))).await {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e).with_context(|| format!("remove {pack}.{extension}")),
            }
        }
        pruned += 1;
    }
    Ok(pruned)
}

/// The refs of the snapshot git can write, by name. A ref git cannot name, or one that would be a directory of
/// another (a repository published before those rules were checked), is left out with a warning rather than
/// failing every sync of the repository.
fn writable_refs(snapshot: &Snapshot) -> BTreeMap<&str, &str> {
    let mut wanted: BTreeMap<String, &str> = BTreeMap::new();
    for (name, oid) in &snapshot.refs {
        if !crate::is_ref_name(name) {
            tracing::warn!(repo = %snapshot.id, name, "a published ref has a name git cannot write; left out of the cache");
        } else if let Some(other) = git_refs::dir_file_clash(&wanted, name) {
            tracing::warn!(repo = %snapshot.id, name, other, "a published ref clashes with another; left out of the cache");
        } else {
            wanted.insert(name.clone(), oid);
        }
    }
    snapshot
        .refs
        .iter()
        .filter(|(name, _)| wanted.contains_key(name))
        .map(|(n, o)| (n.as_str(), o.as_str()))
        .collect()
}

/// Moves the cache's refs and `HEAD` to the snapshot's: the refs that are gone in one transaction, then the ones
/// that differ in another (git cannot create `a/b` in the transaction that deletes `a`), each checked against the
/// value just read and tried again when a writer on this replica holds one of their locks.
async fn move_refs(snapshot: &Snapshot, path: &Path) -> anyhow::Result<()> {
    let wanted = writable_refs(snapshot);
    for phase in [Phase::Delete, Phase::Write] {
        let mut attempt = 0;
        loop {
            let local = local_refs(path).await?;
            let script = phase.script(&local, &wanted);
            if script.is_empty() {
                break;
            }
            let mut child = crate::git(path)
                .args(["update-ref", "-z", "--stdin"])
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()?;
            if let Some(mut stdin) = child.stdin.take() {
                stdin.write_all(&script).await?;
            }
            let out = child.wait_with_output().await?;
            if out.status.success() {
                break;
            }
            attempt += 1;
            ensure!(
                attempt < ATTEMPTS,
                "update the cache's refs: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
            tokio::time::sleep(Duration::from_millis(50 * u64::from(attempt))).await;
        }
    }
    let head = crate::git(path)
        .args(["symbolic-ref", "HEAD"])
        .output()
        .await?;
    if String::from_utf8_lossy(&head.stdout).trim() != snapshot.head {
        let out = crate::git(path)
            .args(["symbolic-ref", "HEAD", &snapshot.head])
            .output()
            .await?;
        ensure!(
            out.status.success(),
            "git symbolic-ref: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn leftovers_of_killed_git_processes_go_and_nothing_else_does() {
        let cache = std::env::temp_dir().join(format!("slipway-cache-{}", Uuid::new_v4()));
        let repo = cache.join(format!("{}.git", Uuid::new_v4()));
        let pack = repo.join("objects/pack");
        let quarantine = repo.join("objects/tmp_objdir-incoming-Ab12/pack");
        std::fs::create_dir_all(&quarantine).unwrap();
        std::fs::create_dir_all(&pack).unwrap();
        std::fs::write(quarantine.join("pack-1.pack"), "received").unwrap();
        for file in [
            "tmp_pack_x1",
            "tmp_pack-2.idx.1234",
            "pack-3.pack",
            "pack-3.idx",
            "pack-3.keep",
        ] {
            std::fs::write(pack.join(file), file).unwrap();
        }
        std::fs::create_dir_all(repo.join("objects/ab")).unwrap();
        std::fs::create_dir_all(cache.join(".hooks/tmp_objdir-not-a-repo")).unwrap();

        assert_eq!(clear_leftovers(&cache).await.unwrap(), 3);
        assert!(!repo.join("objects/tmp_objdir-incoming-Ab12").exists());
        let mut kept: Vec<String> = std::fs::read_dir(&pack)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        kept.sort();
        assert_eq!(kept, ["pack-3.idx", "pack-3.keep", "pack-3.pack"]);
        assert!(repo.join("objects/ab").exists());
        assert!(cache.join(".hooks/tmp_objdir-not-a-repo").exists());
        assert_eq!(clear_leftovers(&cache).await.unwrap(), 0);
        std::fs::remove_dir_all(&cache).unwrap();
    }
}
