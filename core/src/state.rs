//! What every handler shares: the platform database, the kube client, the resource cache, the repositories, the
//! platform's public names, what the internal listener checks its callers against, how mirrors sync, and the open
//! external SQL sessions.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use kube::Client;
use sqlx::PgPool;

use super::internal_access::InternalAccess;
use crate::platform::cache::Cache;
use crate::registration::budget::HourlyBudget;
use slipway_auth::rate::{Budget, TokenLimiter};
use slipway_git_store::Repos;
use slipway_mirror_fetch::{MirrorConfig, Mirrors};
use slipway_store::env::crypto::Keyring;

/// The platform's public names, from which URLs and hostnames are formed.
#[derive(Debug, Clone)]
pub struct PublicNames {
    /// Domain of channel hostnames ({app_domain}).
    pub app_domain: String,
    /// Host of the git transports ({git_host}).
    pub git_host: String,
    /// The addresses the edge answers on: a custom apex domain's A records (`a_values`).
    pub edge_addresses: Vec<String>,
    /// Where clients reach external SQL access (HOST:PORT); `None` when it is not served.
    pub sql_address: Option<String>,
}

impl PublicNames {
    /// HTTPS clone URL of an app's repository.
    pub fn repo_url(&self, owner: &str, app: &str) -> String {
        format!("https://{}/{owner}/{app}.git", self.git_host)
    }
}

/// What one caller may use of the API (`slipway api` flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Request budget per token; `None` is unlimited.
    pub rate: Option<Budget>,
    /// Largest pack one git push may send, in bytes.
    pub git_max_push_bytes: u64,
    /// Whether code, SQL snapshots and bucket checkpoints may be downloaded (off: 403 download_disabled).
    pub downloads: bool,
    /// What one bucket checkpoint download may hold.
    pub blob_download: BlobDownloadLimits,
    /// Whether registration is open, and its budgets.
    pub registration: crate::registration::budget::RegistrationLimits,
}

/// What one bucket checkpoint download may hold; past any of these the route answers 409 `conflict` (the files
/// are read with an S3 client instead). The download streams a page of the manifest and one object at a time, so
/// these bound how long one response runs, not memory: the defaults admit a whole indie-plan bucket (50 GiB).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlobDownloadLimits {
    /// Oldest checkpoint, in days.
    pub max_age_days: u32,
    /// Most objects.
    pub max_files: u64,
    /// Most bytes (before compression).
    pub max_bytes: u64,
}

impl Default for BlobDownloadLimits {
    fn default() -> Self {
        Self {
            max_age_days: 30,
            max_files: 1_000_000,
            max_bytes: 50 << 30,
        }
    }
}

impl Limits {
    /// Default largest push: 1 GiB.
    pub const DEFAULT_GIT_MAX_PUSH_BYTES: u64 = 1 << 30;
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            rate: Some(Budget::DEFAULT),
            git_max_push_bytes: Self::DEFAULT_GIT_MAX_PUSH_BYTES,
            downloads: true,
            blob_download: BlobDownloadLimits::default(),
            registration: Default::default(),
        }
    }
}

/// OAuth clients one source address may register in an hour.
pub const OAUTH_REGISTRATIONS_PER_SOURCE_PER_HOUR: u32 = 60;

/// OAuth sign-ins one source address may start in an hour (each keeps a row for a day, unauthenticated).
pub const OAUTH_AUTHORIZATIONS_PER_SOURCE_PER_HOUR: u32 = 120;

/// The parts that turn optional features on, each given at start or absent for the process's life: a route whose
/// part is absent answers as its doc says (most 503, the registry token route and OAuth 404).
#[derive(Clone, Default)]
pub struct Features {
    /// Where object storage's gateway is reached (the bucket routes).
    pub blob_access: Option<slipway_blob::access::BlobAccess>,
    /// The data server channel databases live on (the database routes).
    pub data_server: Option<Arc<slipway_backends::data_server::DataServer>>,
    /// Where SQL snapshot files go (checkpoints, restores, exports).
    pub snapshot_archive: Option<slipway_postgres::archive::Archive>,
    /// The cluster registry's token issuer (the registry token route).
    pub registry_tokens: Option<slipway_internal::registry_token::RegistryTokens>,
    /// The mail relay verification codes go out through.
    pub mailer: Option<crate::registration::mailer::Mailer>,
    /// Where runtime-log commands run.
    pub log_sandbox: Option<crate::log_sandbox::Sandbox>,
    /// The MCP server's authorization server for people.
    pub oauth: Option<Arc<crate::oauth::OAuthServer>>,
    /// Where the API and its console are reached from outside.
    pub public_urls: crate::public_urls::PublicUrls,
}

/// Shared state of the API; cheap to clone.
#[derive(Clone)]
pub struct AppState {
    inner: Arc<Inner>,
    repos: Arc<Repos>,
    guard: Arc<Guard>,
    features: Arc<Features>,
    mirrors: Arc<Mirrors>,
    jobs: Arc<slipway_jobs::Runner>,
}

/// What spending from a shared budget gives: `Ok(Err(wait))` when it is spent, with how long until the next fits;
/// `Err` when the platform database could not be asked.
pub type Spent = sqlx::Result<Result<(), std::time::Duration>>;

/// The limits in force and the buckets they fill: per token in this process, the rest shared by every replica.
struct Guard {
    limits: Limits,
    limiter: TokenLimiter,
    /// The hourly budgets every replica shares (`slipway_store::db::rate_buckets`).
    registrations: HourlyBudget,
    /// Verification codes each address may be sent in an hour.
    mail_recipients: HourlyBudget,
    /// SSH logins each key may make in an hour.
    logins: HourlyBudget,
    /// OAuth clients each source address may register in an hour.
    oauth_registrations: HourlyBudget,
    /// OAuth sign-ins each source address may start in an hour.
    oauth_authorizations: HourlyBudget,
}

impl Guard {
    fn new(limits: Limits) -> Self {
        Self {
            limiter: TokenLimiter::new(limits.rate),
            registrations: HourlyBudget::new(
                "registration",
                limits.registration.per_source_per_hour,
            ),
            mail_recipients: HourlyBudget::new(
                "mail-recipient",
                crate::registration::codes::PER_ADDRESS_PER_HOUR,
            ),
            logins: HourlyBudget::new("ssh-login", crate::registration::LOGINS_PER_KEY_PER_HOUR),
            oauth_registrations: HourlyBudget::new(
                "oauth-registration",
                OAUTH_REGISTRATIONS_PER_SOURCE_PER_HOUR,
            ),
            oauth_authorizations: HourlyBudget::new(
                "oauth-authorization",
                OAUTH_AUTHORIZATIONS_PER_SOURCE_PER_HOUR,
            ),
            limits,
        }
    }
}

struct Inner {
    commit_locks: std::sync::Mutex<HashMap<PathBuf, Arc<tokio::sync::Mutex<()>>>>,
    db: PgPool,
    kube: Client,
    cache: Cache,
    names: PublicNames,
    keyring: Keyring,
    internal: InternalAccess,
    sql_sessions: Arc<crate::sql_sessions::Sessions>,
    tokens: Arc<slipway_auth::token_cache::TokenCache>,
    token_uses: slipway_auth::uses::Uses,
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
        internal: InternalAccess,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                commit_locks: Default::default(),
                tokens: slipway_auth::token_cache::TokenCache::listening_to(db.clone()),
                db,
                kube,
                cache,
                names,
                keyring,
                internal,
                sql_sessions: Arc::default(),
                token_uses: Default::default(),
            }),
            repos: Arc::new(repos),
            guard: Arc::new(Guard::new(Limits::default())),
            features: Arc::default(),
            mirrors: Arc::new(Mirrors::default()),
            jobs: Arc::new(slipway_jobs::Runner::new(slipway_jobs::Timing::default())),
        }
    }

    /// The same state with a job runner of this timing (before its loop starts: `slipway_api::job_kinds::run`).
    pub fn with_job_timing(mut self, timing: slipway_jobs::Timing) -> Self {
        self.jobs = Arc::new(slipway_jobs::Runner::new(timing));
        self
    }

    /// This process's job runner.
    pub fn jobs(&self) -> &Arc<slipway_jobs::Runner> {
        &self.jobs
    }

    /// Tokens read from the platform database, kept in memory (revocations and account changes clear it).
    pub fn tokens(&self) -> &slipway_auth::token_cache::TokenCache {
        &self.inner.tokens
    }

    /// When tokens were last used.
    pub fn token_uses(&self) -> &slipway_auth::uses::Uses {
        &self.inner.token_uses
    }

    /// The same state with other mirror settings.
    pub fn with_mirrors(mut self, config: MirrorConfig) -> Self {
        self.mirrors = Arc::new(Mirrors::new(config));
        self
    }

    /// The mirror settings.
    pub fn mirrors(&self) -> &Mirrors {
        &self.mirrors
    }

    /// The same state with its repositories kept elsewhere.
    pub fn with_repos(mut self, repos: Repos) -> Self {
        self.repos = Arc::new(repos);
        self
    }

    /// The same state under other limits (fresh buckets).
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.guard = Arc::new(Guard::new(limits));
        self
    }

    /// The same state with these features on (and the others off).
    pub fn with_features(mut self, features: Features) -> Self {
        self.features = Arc::new(features);
        self
    }

    /// The features this state was built with.
    pub fn features(&self) -> &Features {
        &self.features
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.guard.limits
    }

    /// Takes one request from `token`'s budget; `Err` says how long until the next fits.
    pub fn spend_request(&self, token: uuid::Uuid) -> Result<(), std::time::Duration> {
        self.guard.limiter.check(token)
    }

    /// Takes one registration from `source`'s hourly budget; `Ok(Err(wait))` says how long until the next fits.
    pub async fn spend_registration(&self, source: std::net::IpAddr) -> Spent {
        self.guard.registrations.spend_from(self.db(), source).await
    }

    /// Takes one code from the hourly budget of the address `to`; `Ok(Err(wait))` says how long until the next
    /// fits.
    pub async fn spend_mail_to(&self, to: &str) -> Spent {
        self.guard.mail_recipients.spend(self.db(), to).await
    }

    /// Takes one OAuth client registration from `source`'s hourly budget; `Ok(Err(wait))` says how long until
    /// the next fits.
    pub async fn spend_oauth_registration(&self, source: std::net::IpAddr) -> Spent {
        self.guard
            .oauth_registrations
            .spend_from(self.db(), source)
            .await
    }

    /// Takes one OAuth sign-in from `source`'s hourly budget; `Ok(Err(wait))` says how long until the next fits.
    pub async fn spend_oauth_authorization(&self, source: std::net::IpAddr) -> Spent {
        self.guard
            .oauth_authorizations
            .spend_from(self.db(), source)
            .await
    }

    /// The MCP server's authorization server; `None` without a public URL (its routes answer 404).
    pub fn oauth(&self) -> Option<Arc<crate::oauth::OAuthServer>> {
        self.features.oauth.clone()
    }

    /// Where the API and its console are reached from outside (unknown ones are `None`).
    pub fn public_urls(&self) -> crate::public_urls::PublicUrls {
        self.features.public_urls.clone()
    }

    /// Takes one SSH login from the hourly budget of the key `fingerprint`; `Ok(Err(wait))` says how long until
    /// the next fits.
    pub async fn spend_login(&self, fingerprint: &str) -> Spent {
        self.guard.logins.spend(self.db(), fingerprint).await
    }

    /// The mail relay; `None` when none is configured (email verification answers 503).
    pub fn mailer(&self) -> Option<&crate::registration::mailer::Mailer> {
        self.features.mailer.as_ref()
    }

    /// Where runtime-log commands run; `None` when no sandbox is configured (a command answers 503).
    pub fn log_sandbox(&self) -> Option<&crate::log_sandbox::Sandbox> {
        self.features.log_sandbox.as_ref()
    }

    /// How object storage is reached; `None` when the platform runs without it (its routes answer 503).
    pub fn blob_access(&self) -> Option<&slipway_blob::access::BlobAccess> {
        self.features.blob_access.as_ref()
    }

    /// The registry's token issuer; `None` when the registry does not take slipway's tokens (the route is absent).
    pub fn registry_tokens(&self) -> Option<&slipway_internal::registry_token::RegistryTokens> {
        self.features.registry_tokens.as_ref()
    }

    /// The data server; `None` when the platform runs without one (the database routes answer 503).
    pub fn data_server(&self) -> Option<&slipway_backends::data_server::DataServer> {
        self.features.data_server.as_deref()
    }

    /// Where snapshot files go; `None` when the platform has no object storage (no snapshots are taken).
    pub fn snapshot_archive(&self) -> Option<&slipway_postgres::archive::Archive> {
        self.features.snapshot_archive.as_ref()
    }

    /// The open external SQL sessions (empty unless `--sql-listen` serves them).
    pub fn sql_sessions(&self) -> &Arc<crate::sql_sessions::Sessions> {
        &self.inner.sql_sessions
    }

    /// The keys env values are sealed with.
    pub fn keyring(&self) -> &Keyring {
        &self.inner.keyring
    }

    /// What the internal routes check their callers against.
    pub fn internal(&self) -> &InternalAccess {
        &self.inner.internal
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
        &self.repos
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
