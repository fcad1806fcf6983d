//! Bringing a repository from a volume (`<owner>/<app>.git`, as `--git-storage volume` keeps it) into object
//! storage: the one-time move of an installation to more than one api replica, and the way a platform backup's
//! repositories go back into an installation that keeps them in object storage. It is git's own `fetch --atomic`
//! of every ref into the repository's cache, published like a mirror's sync (one pack, the refs moved whatever they
//! were), then `HEAD`; then every ref is checked against the source. Running it again changes nothing.

use std::path::Path;

use anyhow::{Context, ensure};
use slipway_store::db::git_refs;

use crate::{ObjectStorage, RepoOf, Repos, Writing};

/// What an import did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Imported {
    /// How many refs the repository has.
    pub refs: usize,
    /// The repository's version afterwards.
    pub version: i64,
}

/// Imports the bare repository at `source` as `app`'s, making the app's repository if it has none.
pub async fn import(repos: &Repos, app: RepoOf<'_>, source: &Path) -> anyhow::Result<Imported> {
    let storage: &ObjectStorage = repos
        .objects
        .as_deref()
        .context("repositories are not kept in object storage")?;
    ensure!(
        tokio::fs::try_exists(source.join("HEAD")).await?,
        "{} is not a bare repository",
        source.display()
    );
    git_refs::create(&storage.db, app.id).await?;
    let cache = repos
        .ready(app)
        .await?
        .context("the repository vanished while it was imported")?;
    let writer = repos.writer(app.id, "import", Writing::Mirror).await;
    let out = crate::git(&cache)
        .args(&writer.config)
        .envs(writer.env.iter().map(|(k, v)| (k, v)))
        .args([
            "fetch",
            "--atomic",
            "--prune",
            "--no-write-fetch-head",
            "--quiet",
        ])
        .arg(source)
        .arg("+refs/*:refs/*")
        .output()
        .await
        .context("run git fetch")?;
    ensure!(
        out.status.success(),
        "git fetch from {}: {}",
        source.display(),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    let head = crate::git(source)
        .args(["symbolic-ref", "HEAD"])
        .output()
        .await?;
    if head.status.success() {
        git_refs::set_head(
            &storage.db,
            app.id,
            String::from_utf8_lossy(&head.stdout).trim(),
        )
        .await?;
    }
    let wanted = crate::cache::local_refs(source).await?;
    let snapshot = git_refs::snapshot(&storage.db, app.id)
        .await?
        .context("the repository vanished while it was imported")?;
    let published: std::collections::BTreeMap<String, String> = snapshot.refs.into_iter().collect();
    ensure!(
        published == wanted,
        "after the import the refs differ from {}: {} there, {} here",
        source.display(),
        wanted.len(),
        published.len()
    );
    Ok(Imported {
        refs: published.len(),
        version: snapshot.version,
    })
}
