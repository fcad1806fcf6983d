//! Where the apps' bare repositories are kept, and the one way every other part reaches them ([`Repos`]).
//!
//! - **On a volume** (`--git-storage volume`): `<root>/<owner>/<app>.git` on one volume that one API process
//!   mounts. git's own lock files keep ref updates atomic.
//! - **In object storage** (`--git-storage object-store`): packs in the git bucket ([`bucket`]), refs in the
//!   platform database (`slipway_store::db::git_refs`), and on every replica a disposable cache at
//!   `<cache>/<app uid>.git` that [`cache::sync`] brings to the database's version before it is served. The real
//!   `git upload-pack`, `receive-pack` and `fetch` keep serving the cache; whatever moves a ref runs with a grant
//!   ([`Writer`]) and git's `reference-transaction` hook ([`hook`]), through which [`publish`] uploads the new
//!   objects and moves the refs with one compare-and-swap per ref. A push's pack goes up while git receives it
//!   (`stream`). Any replica serves any repository, and of two racing pushes through two replicas exactly one wins.
//!   [`import`] brings a repository from a volume.

pub mod bucket;
pub mod cache;
pub mod hook;
pub mod import;
pub mod maintain;
mod pack;
pub mod publish;
mod stream;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{Context, ensure};
use slipway_backends::object_store::{self, S3Endpoint};
use slipway_crds::names::{AppName, Username};
use slipway_store::db::git_refs;
use uuid::Uuid;

use crate::bucket::PackBucket;
pub use crate::hook::Writing;
use crate::hook::{Grant, GrantKey};

/// The app a repository belongs to.
#[derive(Debug, Clone, Copy)]
pub struct RepoOf<'a> {
    /// The app's uid.
    pub id: Uuid,
    /// Its owner.
    pub owner: &'a Username,
    /// Its name.
    pub name: &'a AppName,
}

/// A push's pack is kept as it came, never exploded into loose objects (git does that below 100 objects): publishing
/// uploads a kept pack as it is, while loose objects must be deflated into a new pack first, and on a volume every
/// clone deflates them again until gc packs them. For a push of a few large files either cost seconds.
const KEEP_PUSHED_PACKS: [&str; 2] = ["-c", "transfer.unpackLimit=1"];

/// Where the repositories are kept.
#[derive(Debug, Clone)]
pub struct Repos {
    root: PathBuf,
    objects: Option<Arc<ObjectStorage>>,
}

/// What a git process that may move refs is started with: config that names the hook, and the grant it carries.
/// Empty for repositories on a volume, where git's lock files are the whole story. Keep it until the process has
/// ended: a push's and a mirror sync's hold on the cache's lock lasts as long as it.
#[derive(Debug, Clone, Default)]
pub struct Writer {
    /// `-c` options, before the git subcommand.
    pub config: Vec<String>,
    /// Environment variables.
    pub env: Vec<(&'static str, String)>,
    hold: Option<Arc<Hold>>,
}

impl Writer {
    /// Why this writer's last publish failed, when it failed because the repository's storage was unavailable (the
    /// object store not reached, or no database connection came free): git only says the update was refused, and
    /// the caller answers 503 `service_unavailable` rather than a refusal.
    pub fn storage_unavailable(&self) -> Option<anyhow::Error> {
        let outage = self.hold.as_ref()?.outage()?;
        Some(match outage {
            Outage::ObjectStore(message) => object_store::Unavailable(message).into(),
            Outage::Database => {
                anyhow::Error::from(sqlx::Error::PoolTimedOut).context("publishing a ref update")
            }
        })
    }
}

/// A writer's share of its cache's lock, while it has one. Syncs take the lock alone, so no sync runs while a
/// writer holds it:
///
/// - a push takes it when it publishes (in `pre-receive`) and keeps it until its `receive-pack` has ended, since
///   git moves the cache's refs only then, from the values the client saw: a sync in between would move them first
///   and make git refuse an update that was stored;
/// - a mirror's `fetch` (and an import) holds it throughout: what it fetched is in no live pack until it publishes,
///   and a sync would prune it.
///
/// A changeset holds none: it publishes with the ref's lock file held, which a sync's `update-ref` waits for, and
/// its objects are loose until then.
///
/// It also carries why the writer's last publish failed, when its storage was unavailable
/// ([`Writer::storage_unavailable`]).
#[derive(Debug, Default)]
pub struct Hold {
    guard: Mutex<Option<tokio::sync::OwnedRwLockReadGuard<()>>>,
    outage: Mutex<Option<Outage>>,
}

/// Storage a publish needed and could not use; the same update may well succeed later.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outage {
    /// The object store was not reached, or failed on its side.
    ObjectStore(String),
    /// No connection of the platform database's pool came free.
    Database,
}

impl Outage {
    /// The outage `e` comes from, if any.
    pub(crate) fn of(e: &anyhow::Error) -> Option<Self> {
        e.chain().find_map(|cause| {
            if let Some(unavailable) = cause.downcast_ref::<object_store::Unavailable>() {
                Some(Outage::ObjectStore(unavailable.0.clone()))
            } else if matches!(cause.downcast_ref(), Some(sqlx::Error::PoolTimedOut)) {
                Some(Outage::Database)
            } else {
                None
            }
        })
    }
}

impl Repos {
    /// Repositories on a volume, under `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            objects: None,
        }
    }

    /// Repositories in the bucket `bucket` on `endpoint` with their refs in `db`, cached under `cache`. `program`
    /// is the slipway binary git runs as its hook. Starts the hook's socket.
    pub async fn in_object_store(
        cache: impl Into<PathBuf>,
        db: sqlx::PgPool,
        endpoint: &S3Endpoint,
        bucket: &str,
        program: &Path,
    ) -> anyhow::Result<Self> {
        let cache = cache.into();
        let storage = ObjectStorage::start(&cache, db, endpoint, bucket, program).await?;
        Ok(Self {
            root: cache,
            objects: Some(storage),
        })
    }

    /// Whether repositories are kept in object storage.
    pub fn in_objects(&self) -> bool {
        self.objects.is_some()
    }

    /// The volume path of `owner`'s `app` (`<root>/<owner>/<app>.git`): where a repository on a volume lives, and
    /// where an import finds one.
    pub fn path(&self, owner: &Username, app: &AppName) -> PathBuf {
        self.root.join(owner.as_str()).join(format!("{app}.git"))
    }

    /// The repository of `app`, ready to be read and served: the volume path, or the cache synced with the
    /// database. `None` when the app has no repository.
    pub async fn ready(&self, app: RepoOf<'_>) -> anyhow::Result<Option<PathBuf>> {
        match &self.objects {
            None => {
                let path = self.path(app.owner, app.name);
                let exists = tokio::fs::try_exists(path.join("HEAD"))
                    .await
                    .unwrap_or(false);
                Ok(exists.then_some(path))
            }
            Some(storage) => {
                let path = storage.cache_path(app.id);
                Ok(cache::sync(storage, app.id, &path).await?.then_some(path))
            }
        }
    }

    /// What a git process started to move `app`'s refs for `actor` carries: `receive-pack`, `update-ref` or a
    /// mirror's `fetch`, as `writing` says. A mirror's waits for a sync of the cache in progress to end (see
    /// [`Hold`]).
    pub async fn writer(&self, app: Uuid, actor: &str, writing: Writing) -> Writer {
        let Some(storage) = &self.objects else {
            return Writer {
                config: KEEP_PUSHED_PACKS.map(str::to_owned).to_vec(),
                ..Writer::default()
            };
        };
        let id = Uuid::new_v4();
        let hold = Arc::new(Hold::default());
        storage.register(id, &hold);
        if writing == Writing::Push {
            stream::watch(storage, app, Arc::downgrade(&hold));
        }
        if writing == Writing::Mirror {
            let lock = storage.cache_lock(&storage.cache_path(app));
            hold.take(lock.read_owned().await);
        }
        let grant = Grant {
            app,
            writing,
            actor: actor.to_owned(),
            writer: id,
        };
        Writer {
            config: vec![
                "-c".into(),
                format!("core.hooksPath={}", storage.hooks.display()),
                KEEP_PUSHED_PACKS[0].into(),
                KEEP_PUSHED_PACKS[1].into(),
                // The cache's packs are the bucket's, and only maintenance folds them: no `gc --auto` after a push.
                "-c".into(),
                "receive.autogc=false".into(),
            ],
            env: vec![
                (hook::SOCKET_ENV, storage.socket.display().to_string()),
                (hook::GRANT_ENV, storage.grants.seal(&grant)),
            ],
            hold: Some(hold),
        }
    }

    /// Creates an empty repository whose default branch is `master`. On a volume an existing one is replaced: a
    /// repository left by an app that no longer exists must not leak into a new app of the same name.
    pub async fn create(&self, app: RepoOf<'_>) -> anyhow::Result<()> {
        match &self.objects {
            None => {
                let path = self.path(app.owner, app.name);
                remove_dir_if_present(&path).await?;
                git_init(&path).await
            }
            Some(storage) => Ok(git_refs::create(&storage.db, app.id).await?),
        }
    }

    /// Removes the repository; a missing one is fine.
    pub async fn delete(&self, app: RepoOf<'_>) -> anyhow::Result<()> {
        let Some(storage) = &self.objects else {
            return remove_dir_if_present(&self.path(app.owner, app.name)).await;
        };
        remove_dir_if_present(&storage.cache_path(app.id)).await?;
        if let Some(gone) = git_refs::delete(&storage.db, app.id).await? {
            // The rows are gone, so no replica serves the packs again; a failure here leaves only bytes behind.
            if let Err(e) = storage.bucket.remove_repository(gone).await {
                tracing::warn!(app = %app.id, error = format!("{e:#}"), "removing a deleted repository's packs failed");
            }
        }
        Ok(())
    }

    /// Removes this replica's cache of `app`'s repository (it comes back on the next request); nothing on a
    /// volume.
    pub async fn forget_cache(&self, app: Uuid) -> anyhow::Result<()> {
        match &self.objects {
            None => Ok(()),
            Some(storage) => remove_dir_if_present(&storage.cache_path(app)).await,
        }
    }

    /// Maintains `app`'s repository when no replica did within `policy.every` ([`maintain`]); `None` when another
    /// replica has, the app has no repository, or repositories are on a volume (where `git gc` keeps them).
    pub async fn maintain(
        &self,
        app: Uuid,
        policy: &maintain::Policy,
    ) -> anyhow::Result<Option<maintain::Maintained>> {
        let Some(storage) = &self.objects else {
            return Ok(None);
        };
        let Some(id) =
            slipway_store::db::git_maintenance::claim(&storage.db, app, policy.every).await?
        else {
            return Ok(None);
        };
        maintain::run(storage, app, id, policy).await.map(Some)
    }

    /// Removes the bucket's objects of repositories the database no longer knows, written more than `grace` ago
    /// (a deleted app's whose removal failed); how many went. Nothing on a volume.
    pub async fn remove_gone_repositories(
        &self,
        grace: std::time::Duration,
    ) -> anyhow::Result<usize> {
        match &self.objects {
            Some(storage) => maintain::remove_gone_repositories(storage, grace).await,
            None => Ok(0),
        }
    }

    /// Aborts the git bucket's multipart uploads started more than `older_than` ago, which a replica stopped
    /// mid-upload leaves; how many went. Nothing on a volume.
    pub async fn abort_unfinished_uploads(
        &self,
        older_than: std::time::Duration,
    ) -> anyhow::Result<usize> {
        let Some(storage) = &self.objects else {
            return Ok(0);
        };
        storage
            .bucket
            .abort_uploads_before(maintain::ago(older_than))
            .await
    }

    /// Removes this replica's caches of repositories that are no longer kept here (a deleted app's, or a
    /// transferred app's under its old uid); how many went. Nothing on a volume.
    pub async fn sweep_caches(&self) -> anyhow::Result<usize> {
        let Some(storage) = &self.objects else {
            return Ok(0);
        };
        let mut entries = tokio::fs::read_dir(&storage.cache).await?;
        let mut swept = 0;
        while let Some(entry) = entries.next_entry().await? {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(app) = name
                .strip_suffix(".git")
                .and_then(|u| u.parse::<Uuid>().ok())
            else {
                continue;
            };
            if git_refs::version(&storage.db, app).await?.is_none() {
                let path = storage.cache_path(app);
                let lock = storage.cache_lock(&path);
                let _held = lock.write().await;
                remove_dir_if_present(&path).await?;
                swept += 1;
            }
        }
        Ok(swept)
    }

    /// Gives `from`'s repository to `to`, the same app under its new owner.
    pub async fn hand_over(&self, from: RepoOf<'_>, to: RepoOf<'_>) -> anyhow::Result<()> {
        match &self.objects {
            None => {
                move_dir(
                    &self.path(from.owner, from.name),
                    &self.path(to.owner, to.name),
                )
                .await
            }
            Some(storage) => {
                ensure!(
                    git_refs::hand_over(&storage.db, from.id, to.id).await?,
                    "app {} has no repository",
                    from.id
                );
                remove_dir_if_present(&storage.cache_path(from.id)).await
            }
        }
    }
}

impl Hold {
    /// Keeps `guard` until the writer is dropped.
    fn take(&self, guard: tokio::sync::OwnedRwLockReadGuard<()>) {
        *self.guard.lock().unwrap_or_else(|e| e.into_inner()) = Some(guard);
    }

    /// Records that the writer's publish failed for `outage`.
    pub(crate) fn note(&self, outage: Outage) {
        *self.outage.lock().unwrap_or_else(|e| e.into_inner()) = Some(outage);
    }

    fn outage(&self) -> Option<Outage> {
        self.outage
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// How many caches' locks are kept before the unused ones are dropped.
const KEPT_LOCKS: usize = 256;

/// Repositories in object storage: the database, the bucket, this replica's cache and the hook's socket.
#[derive(Debug)]
pub struct ObjectStorage {
    db: sqlx::PgPool,
    bucket: PackBucket,
    cache: PathBuf,
    hooks: PathBuf,
    socket: PathBuf,
    grants: GrantKey,
    locks: Mutex<HashMap<PathBuf, Arc<tokio::sync::RwLock<()>>>>,
    holds: Mutex<HashMap<Uuid, std::sync::Weak<Hold>>>,
    streams: stream::Streams,
}

impl ObjectStorage {
    async fn start(
        cache: &Path,
        db: sqlx::PgPool,
        endpoint: &S3Endpoint,
        bucket: &str,
        program: &Path,
    ) -> anyhow::Result<Arc<Self>> {
        tokio::fs::create_dir_all(cache)
            .await
            .with_context(|| format!("create {}", cache.display()))?;
        let program = program.display().to_string();
        ensure!(
            !program.contains('\''),
            "the slipway binary's path holds a quote: {program}"
        );
        // What a maintenance killed half-way left (links to packs); none runs before this process starts one.
        let _ = tokio::fs::remove_dir_all(cache.join(".maintenance")).await;
        let cleared = cache::clear_leftovers(cache).await?;
        if cleared > 0 {
            tracing::info!(
                cleared,
                "removed what killed git processes left in the repository caches"
            );
        }
        let hooks = cache.join(".hooks");
        tokio::fs::create_dir_all(&hooks).await?;
        for hook in ["pre-receive", "reference-transaction"] {
            let script = hooks.join(hook);
            tokio::fs::write(
                &script,
                format!("#!/bin/sh\nexec '{program}' git-hook {hook} \"$@\"\n"),
            )
            .await?;
            use std::os::unix::fs::PermissionsExt as _;
            tokio::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).await?;
        }
        let socket = cache.join(".hook.sock");
        let _ = tokio::fs::remove_file(&socket).await;
        let listener = tokio::net::UnixListener::bind(&socket)
            .with_context(|| format!("listen on {}", socket.display()))?;
        let storage = Arc::new(Self {
            db,
            bucket: PackBucket::open(endpoint, bucket).await?,
            cache: cache.to_owned(),
            hooks,
            socket,
            grants: GrantKey::random(),
            locks: Mutex::default(),
            holds: Mutex::default(),
            streams: stream::Streams::default(),
        });
        tokio::spawn(publish::serve(storage.clone(), listener));
        Ok(storage)
    }

    fn cache_path(&self, app: Uuid) -> PathBuf {
        self.cache.join(format!("{app}.git"))
    }

    /// Keeps `hold` where a publish of the writer `id` finds it: to take a push's share of the cache's lock, and to
    /// note an outage.
    fn register(&self, id: Uuid, hold: &Arc<Hold>) {
        let mut holds = self.holds.lock().unwrap_or_else(|e| e.into_inner());
        holds.retain(|_, hold| hold.strong_count() > 0);
        holds.insert(id, Arc::downgrade(hold));
    }

    /// The hold of the writer `id`, while its process runs.
    fn hold_of(&self, id: Uuid) -> Option<Arc<Hold>> {
        let holds = self.holds.lock().unwrap_or_else(|e| e.into_inner());
        holds.get(&id).and_then(std::sync::Weak::upgrade)
    }

    /// The lock of the cache at `path`: a sync holds it alone, writers share it ([`Hold`]). Locks nobody holds are dropped
    /// once there are many.
    fn cache_lock(&self, path: &Path) -> Arc<tokio::sync::RwLock<()>> {
        let mut locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
        if locks.len() >= KEPT_LOCKS {
            locks.retain(|_, lock| Arc::strong_count(lock) > 1);
        }
        locks.entry(path.to_owned()).or_default().clone()
    }
}

/// Whether git can write a ref named `name`: one under `refs/` that passes `git check-ref-format`.
pub(crate) fn is_ref_name(name: &str) -> bool {
    name.starts_with("refs/") && gix_validate::reference::name(name.as_bytes().into()).is_ok()
}

/// `git` on the repository at `path`, ignoring the machine's global and system configuration.
fn git(path: &Path) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new("git");
    cmd.arg("--git-dir")
        .arg(path)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env_remove(hook::GRANT_ENV)
        .kill_on_drop(true);
    cmd
}

/// An empty bare repository at `path` whose default branch is `master`.
async fn git_init(path: &Path) -> anyhow::Result<()> {
    if let Some(parent) = path.parent() {
        tokio::fs::create_dir_all(parent)
            .await
            .with_context(|| format!("create {}", parent.display()))?;
    }
    let out = tokio::process::Command::new("git")
        .args(["init", "--quiet", "--bare", "--initial-branch=master"])
        .arg(path)
        .output()
        .await
        .context("run git init (is git installed?)")?;
    ensure!(
        out.status.success(),
        "git init failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

async fn remove_dir_if_present(path: &Path) -> anyhow::Result<()> {
    match tokio::fs::remove_dir_all(path).await {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("remove {}", path.display())),
    }
}

/// Moves the repository at `from` to `to`, which must not exist.
async fn move_dir(from: &Path, to: &Path) -> anyhow::Result<()> {
    if let Some(parent) = to.parent() {
        tokio::fs::create_dir_all(parent)
            .await
            .with_context(|| format!("create {}", parent.display()))?;
    }
    match tokio::fs::metadata(to).await {
        Ok(_) => anyhow::bail!("{} exists already", to.display()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("look at {}", to.display())),
    }
    tokio::fs::rename(from, to)
        .await
        .with_context(|| format!("move {} to {}", from.display(), to.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn repositories_on_a_volume_are_bare_on_master_and_removable() {
        let dir = std::env::temp_dir().join(format!("slipway-repos-{}", Uuid::new_v4()));
        let repos = Repos::new(&dir);
        let (owner, name) = ("alice".parse().unwrap(), "blog".parse().unwrap());
        let app = RepoOf {
            id: Uuid::new_v4(),
            owner: &owner,
            name: &name,
        };
        assert_eq!(repos.ready(app).await.unwrap(), None);
        repos.create(app).await.unwrap();
        let path = repos.ready(app).await.unwrap().unwrap();
        assert_eq!(path, dir.join("alice/blog.git"));
        let head = std::fs::read_to_string(path.join("HEAD")).unwrap();
        assert_eq!(head.trim(), "ref: refs/heads/master");
        assert!(path.join("objects").is_dir());
        // A push on a volume runs no hook; it only keeps its pack as it came.
        let writer = repos.writer(app.id, "alice", Writing::Push).await;
        assert_eq!(writer.config, KEEP_PUSHED_PACKS);
        assert!(writer.env.is_empty());
        repos.delete(app).await.unwrap();
        assert!(!path.exists());
        repos.delete(app).await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }
}
