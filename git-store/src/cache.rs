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
use slipway_store::db::git_refs::{self, Snapshot};
use tokio::io::AsyncWriteExt;
use uuid::Uuid;

use crate::ObjectStorage;

/// The file that records which app and version the cache matches.
const MARKER: &str = "slipway-synced";

/// How often a ref update that meets a lock (a push on this replica holds it) is tried.
const ATTEMPTS: u32 = 5;

/// Brings the cache of `app`'s repository at `path` up to the database's version; false when the app has no
/// repository.
pub async fn sync(storage: &ObjectStorage, app: Uuid, path: &Path) -> anyhow::Result<bool> {
    let Some(version) = git_refs::version(&storage.db, app).await? else {
        return Ok(false);
    };
    if marker(path).await == Some((app, version)) {
        return Ok(true);
    }
    let lock = storage.sync_lock(path);
    let _held = lock.lock().await;
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
    let fetched = fetch_packs(storage, &snapshot, path).await?;
    move_refs(&snapshot, path).await?;
    write_marker(path, app, snapshot.version).await?;
    tracing::debug!(
        %app,
        version = snapshot.version,
        packs_fetched = fetched,
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
async fn fetch_packs(
    storage: &ObjectStorage,
    snapshot: &Snapshot,
    path: &Path,
) -> anyhow::Result<usize> {
    let dir = path.join("objects/pack");
    tokio::fs::create_dir_all(&dir).await?;
    let mut fetched = 0;
    for pack in &snapshot.packs {
        if !tokio::fs::try_exists(dir.join(format!("{}.idx", pack.name))).await? {
            storage
                .bucket
                .download(snapshot.id, &dir, &pack.name)
                .await?;
            fetched += 1;
        }
        keep(&dir, &pack.name).await?;
    }
    Ok(fetched)
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

/// Moves the cache's refs and `HEAD` to the snapshot's: one transaction of the refs that differ, each checked
/// against the value just read, tried again when a push on this replica holds one of their locks.
async fn move_refs(snapshot: &Snapshot, path: &Path) -> anyhow::Result<()> {
    let wanted: BTreeMap<&str, &str> = snapshot
        .refs
        .iter()
        .map(|(n, o)| (n.as_str(), o.as_str()))
        .collect();
    let mut attempt = 0;
    loop {
        let local = local_refs(path).await?;
        let mut script = String::new();
        for (name, oid) in &wanted {
            match local.get(*name) {
                Some(have) if have == oid => {}
                Some(have) => script.push_str(&format!("update {name} {oid} {have}\n")),
                None => script.push_str(&format!("create {name} {oid}\n")),
            }
        }
        for (name, have) in &local {
            if !wanted.contains_key(name.as_str()) {
                script.push_str(&format!("delete {name} {have}\n"));
            }
        }
        if script.is_empty() {
            break;
        }
        let mut child = crate::git(path)
            .args(["update-ref", "--stdin"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin.write_all(script.as_bytes()).await?;
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
