//! What every handler shares: the platform database, the kube client, the resource cache, the repositories and
//! the platform's public names.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use kube::Client;
use sqlx::PgPool;

use crate::env::crypto::Keyring;
use crate::platform::cache::Cache;
use crate::platform::repos::Repos;

/// The platform's public names, from which URLs and hostnames are formed.
#[derive(Debug, Clone)]
pub struct PublicNames {
    /// Domain of channel hostnames ({app_domain}).
    pub app_domain: String,
    /// Host of the git transports ({git_host}).
    pub git_host: String,
    /// The addresses the edge answers on: a custom apex domain's A records (`a_values`).
    pub edge_addresses: Vec<String>,
}

impl PublicNames {
    /// HTTPS clone URL of an app's repository.
    pub fn repo_url(&self, owner: &str, app: &str) -> String {
        format!("https://{}/{owner}/{app}.git", self.git_host)
    }
}

/// Shared state of the API; cheap to clone.
#[derive(Clone)]
pub struct AppState {
    inner: Arc<Inner>,
}

struct Inner {
    commit_locks: std::sync::Mutex<HashMap<PathBuf, Arc<tokio::sync::Mutex<()>>>>,
    db: PgPool,
    kube: Client,
    cache: Cache,
    repos: Repos,
    names: PublicNames,
    keyring: Keyring,
    internal_token: String,
}

impl AppState {
    /// Bundles the parts.
    pub fn new(
        db: PgPool,
        kube: Client,
        cache: Cache,
        repos: Repos,
        names: PublicNames,
        keyring: Keyring,
        internal_token: String,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                commit_locks: Default::default(),
                db,
                kube,
                cache,
                repos,
                names,
                keyring,
                internal_token,
            }),
        }
    }

    /// The keys env values are sealed with.
    pub fn keyring(&self) -> &Keyring {
        &self.inner.keyring
    }

    /// The token of the `/internal/v1` routes, shared with the operator and the edge.
    pub fn internal_token(&self) -> &str {
        &self.inner.internal_token
    }

    /// The platform database.
    pub fn db(&self) -> &PgPool {
        &self.inner.db
    }

    /// The kube client.
    pub fn kube(&self) -> &Client {
        &self.inner.kube
    }

    /// Cached Apps and Channels.
    pub fn cache(&self) -> &Cache {
        &self.inner.cache
    }

    /// The git repositories.
    pub fn repos(&self) -> &Repos {
        &self.inner.repos
    }

    /// Public names.
    pub fn names(&self) -> &PublicNames {
        &self.inner.names
    }

    /// The lock that serializes this process's changesets on one repository, so they queue instead of racing
    /// (pushes and other replicas are still handled by the ref's compare-and-swap).
    pub fn commit_lock(&self, repo: &std::path::Path) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self
            .inner
            .commit_locks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if locks.len() > 4096 {
            locks.retain(|_, lock| Arc::strong_count(lock) > 1);
        }
        locks.entry(repo.to_path_buf()).or_default().clone()
    }
}
