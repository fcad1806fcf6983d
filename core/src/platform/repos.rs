//! The bare git repository of each app, at `<root>/<owner>/<app>.git`, created with the real `git` program so its
//! layout is exactly what git's own transports expect.

use std::path::{Path, PathBuf};

use anyhow::{Context, ensure};
use slipway_crds::names::{AppName, Username};

/// Where the repositories live.
#[derive(Debug, Clone)]
pub struct Repos {
    root: PathBuf,
}

impl Repos {
    /// Repositories under `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The repository of `owner`'s `app`.
    pub fn path(&self, owner: &Username, app: &AppName) -> PathBuf {
        self.root.join(owner.as_str()).join(format!("{app}.git"))
    }

    /// Creates an empty bare repository whose default branch is `master`. An existing one is replaced: a
    /// repository left by an app that no longer exists must not leak into a new app of the same name.
    pub async fn create(&self, owner: &Username, app: &AppName) -> anyhow::Result<PathBuf> {
        let path = self.path(owner, app);
        remove_dir_if_present(&path).await?;
        if let Some(parent) = path.parent() {
            tokio::fs::create_dir_all(parent)
                .await
                .with_context(|| format!("create {}", parent.display()))?;
        }
        let out = tokio::process::Command::new("git")
            .args(["init", "--quiet", "--bare", "--initial-branch=master"])
            .arg(&path)
            .output()
            .await
            .context("run git init (is git installed?)")?;
        ensure!(
            out.status.success(),
            "git init failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(path)
    }

    /// Removes the repository; a missing one is fine.
    pub async fn delete(&self, owner: &Username, app: &AppName) -> anyhow::Result<()> {
        remove_dir_if_present(&self.path(owner, app)).await
    }
}

async fn remove_dir_if_present(path: &Path) -> anyhow::Result<()> {
    match tokio::fs::remove_dir_all(path).await {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("remove {}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn repositories_are_bare_on_master_and_removable() {
        let dir = std::env::temp_dir().join(format!("slipway-repos-{}", uuid::Uuid::new_v4()));
        let repos = Repos::new(&dir);
        let (owner, app) = ("alice".parse().unwrap(), "blog".parse().unwrap());
        let path = repos.create(&owner, &app).await.unwrap();
        assert_eq!(path, dir.join("alice/blog.git"));
        let head = std::fs::read_to_string(path.join("HEAD")).unwrap();
        assert_eq!(head.trim(), "ref: refs/heads/master");
        assert!(path.join("objects").is_dir());
        repos.delete(&owner, &app).await.unwrap();
        assert!(!path.exists());
        repos.delete(&owner, &app).await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }
}
