//! The open external SQL sessions of this API process, so that access ends when it is taken away: each session
//! is registered under its token and app, and is cut (both connections closed) when
//!
//! - its token is revoked, expires, or is deleted with its account: [`watch`] checks every open session's token
//!   once a second, all in one query ([`slipway_store::db::tokens::live_among`], which follows the chain of tokens a token
//!   was minted from), and at once when this process revokes a token ([`Sessions::recheck_soon`]);
//! - its app's external access toggle is turned off, the app is deleted or changes hands: the same check reads the
//!   apps from the cache, and `PATCH /apps/{id}` turning the toggle off cuts the app's sessions at once
//!   ([`Sessions::cut_app`]).
//!
//! The periodic check is what makes a change made anywhere (another API replica, `kubectl`, an admin command) end
//! sessions within about a second; the direct calls only make the common case immediate.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use sqlx::PgPool;

use crate::platform::cache::Cache;

/// How often every open session's token and app are checked.
pub const RECHECK: Duration = Duration::from_secs(1);

/// Why a session was cut (the metric label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// The token was revoked, expired or is gone.
    Token,
    /// The app's toggle is off, or the app is gone or has another owner.
    Access,
}

impl Cut {
    fn as_str(self) -> &'static str {
        match self {
            Cut::Token => "token",
            Cut::Access => "access",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: String,
}

/// What one open session is held to.
#[derive(Debug)]
struct Entry {
    token_id: Uuid,
    app_id: Uuid,
    username: String,
    cut: CancellationToken,
}

/// The registry of open sessions, with the proxy's metrics.
pub struct Sessions {
    open: std::sync::Mutex<HashMap<u64, Entry>>,
    next: AtomicU64,
    wake: tokio::sync::Notify,
    registry: Registry,
    opened: Counter,
    open_now: Gauge,
    refused: Family<ReasonLabels, Counter>,
    cuts: Family<ReasonLabels, Counter>,
}

impl Default for Sessions {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("slipway_sql_proxy");
        let (opened, open_now) = (Counter::default(), Gauge::default());
        let (refused, cuts) = (Family::default(), Family::default());
        registry.register(
            "sessions",
            "External SQL sessions opened (logged in and relaying)",
            opened.clone(),
        );
        registry.register(
            "sessions_open",
            "External SQL sessions open now",
            open_now.clone(),
        );
        registry.register(
            "logins_refused",
            "External SQL logins refused, by reason (the client is told the same for all)",
            refused.clone(),
        );
        registry.register(
            "sessions_cut",
            "Open external SQL sessions ended because access was taken away, by reason",
            cuts.clone(),
        );
        Self {
            open: Default::default(),
            next: AtomicU64::new(1),
            wake: tokio::sync::Notify::new(),
            registry,
            opened,
            open_now,
            refused,
            cuts,
        }
    }
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions")
            .field("open", &self.len())
            .finish_non_exhaustive()
    }
}

/// One registered session; dropping it unregisters it.
pub struct Session {
    id: u64,
    sessions: Arc<Sessions>,
    /// Cancelled when the session must end.
    pub cut: CancellationToken,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.sessions.lock().remove(&self.id);
        self.sessions.open_now.dec();
    }
}

impl Sessions {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Entry>> {
        self.open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Registers a session that logged in with `token_id` to a channel of `app_id` (owned by `username`).
    pub fn open(self: &Arc<Self>, token_id: Uuid, app_id: Uuid, username: &str) -> Session {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let cut = CancellationToken::new();
        self.lock().insert(
            id,
            Entry {
                token_id,
                app_id,
                username: username.to_owned(),
                cut: cut.clone(),
            },
        );
        self.opened.inc();
        self.open_now.inc();
        Session {
            id,
            sessions: self.clone(),
            cut,
        }
    }

    /// Sessions open now.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no session is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Counts a refused login.
    pub fn refused(&self, reason: &str) {
        self.refused
            .get_or_create(&ReasonLabels {
                reason: reason.to_owned(),
            })
            .inc();
    }

    fn cut_where(&self, why: Cut, mut doomed: impl FnMut(&Entry) -> bool) -> usize {
        let cut: Vec<_> = self
            .lock()
            .values()
            .filter(|e| doomed(e) && !e.cut.is_cancelled())
            .map(|e| e.cut.clone())
            .collect();
        for token in &cut {
            token.cancel();
        }
        if !cut.is_empty() {
            self.cuts
                .get_or_create(&ReasonLabels {
                    reason: why.as_str().to_owned(),
                })
                .inc_by(cut.len() as u64);
        }
        cut.len()
    }

    /// Ends every session on the channels of `app_id` (its toggle was turned off).
    pub fn cut_app(&self, app_id: Uuid) {
        let n = self.cut_where(Cut::Access, |e| e.app_id == app_id);
        if n > 0 {
            tracing::info!(%app_id, sessions = n, "external SQL access turned off; sessions cut");
        }
    }

    /// Asks [`watch`] to check the open sessions now rather than at the next tick (a token was revoked).
    pub fn recheck_soon(&self) {
        self.wake.notify_one();
    }

    /// Its metrics (the API's `/metrics` encodes them with the process's others).
    pub fn registry(&self) -> &Registry {
        &self.registry
    }
}

/// Checks the open sessions every [`RECHECK`] (and when woken) and cuts those whose access is gone, reading the
/// apps from `cache` and the tokens from `db`; runs for the life of the process.
pub async fn watch(sessions: Arc<Sessions>, cache: Cache, db: PgPool) {
    loop {
        tokio::select! {
            () = tokio::time::sleep(RECHECK) => {}
            () = sessions.wake.notified() => {}
        }
        if sessions.is_empty() {
            continue;
        }
        if let Err(e) = recheck(&cache, &db, &sessions).await {
            tracing::warn!(error = %e, "checking the open SQL sessions failed; trying again");
        }
    }
}

async fn recheck(cache: &Cache, db: &PgPool, sessions: &Sessions) -> sqlx::Result<()> {
    // The toggle and owner come from the cache: checked first, so a platform database that cannot answer never
    // keeps a session open past its app's toggle.
    let n = sessions.cut_where(Cut::Access, |e| {
        !cache
            .app_by_uid(&e.app_id.to_string())
            .is_some_and(|app| app.spec.external_db_access_enabled && app.spec.owner == e.username)
    });
    if n > 0 {
        tracing::info!(
            sessions = n,
            "external SQL access off or the app gone; SQL sessions cut"
        );
    }
    let tokens: Vec<Uuid> = {
        let open = sessions.lock();
        let unique: HashSet<Uuid> = open.values().map(|e| e.token_id).collect();
        unique.into_iter().collect()
    };
    let live: HashSet<Uuid> = slipway_store::db::tokens::live_among(db, &tokens)
        .await?
        .into_iter()
        .collect();
    let n = sessions.cut_where(Cut::Token, |e| !live.contains(&e.token_id));
    if n > 0 {
        tracing::info!(sessions = n, "tokens revoked or expired; SQL sessions cut");
    }
    Ok(())
}
