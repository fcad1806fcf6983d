//! Rows of the platform database whose deploy, app or domain is gone. A Deploy pruned from its channel's history, or
//! an app deleted with kubectl rather than through the API, leaves rows behind that nothing reads again: deploy
//! logs and env snapshots, and an app's env variables, members, mirror, notes, feedback and runtime logs. Every hour
//! (the first time at start) each API process forgets them, judging by its cache of the cluster (which holds every
//! namespace):
//!
//! - a deploy's rows go once the cluster no longer holds the Deploy and they were last written more than [`GRACE`]
//!   ago (the operator can write a deploy's first log line before this process's cache has seen the Deploy);
//! - an app's rows go once two sweeps in a row, an hour apart, found the app missing (some of them carry no
//!   time, and an app being created is in the cluster long before the next sweep);
//! - a domain claim goes once it has lapsed: settled and without its Domain (see
//!   [`slipway_store::db::domain_claims::forget_lapsed`]), such as the claims older versions left behind when they deleted
//!   a channel or an app;
//! - a shared budget's bucket goes once it is full again, when it is the same as no row;
//! - an SQL session's cancel key goes after 30 days, when a crashed replica never said the session ended.
//!
//! Deleting an app through the API forgets its rows at once ([`forget_app`]); the sweep is for the rest.

use std::collections::HashSet;
use std::time::Duration;

use sqlx::PgPool;
use uuid::Uuid;

use crate::platform::cache::Cache;

/// How old a deploy's rows must be before a missing Deploy makes them go.
pub const GRACE: Duration = Duration::from_secs(3600);
/// How often the sweep runs.
const EVERY: Duration = Duration::from_secs(3600);

/// What one sweep forgot.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Swept {
    /// Deploys whose log or env snapshot was forgotten.
    pub deploys: usize,
    /// Apps whose rows were forgotten.
    pub apps: usize,
    /// Domain claims forgotten.
    pub domain_claims: u64,
    /// Shared budgets that were full again ([`slipway_store::db::rate_buckets::forget_full`]).
    pub rate_buckets: u64,
    /// Cancel keys of SQL sessions a crashed replica never ended ([`slipway_store::db::sql_cancel_keys`]).
    pub sql_cancel_keys: u64,
}

/// Sweeps one process's view; remembers the apps found missing last time.
pub struct Sweeper {
    db: PgPool,
    cache: Cache,
    missing_last_time: HashSet<Uuid>,
}

impl Sweeper {
    /// A sweeper over `db`, judging by `cache`.
    pub fn new(db: PgPool, cache: Cache) -> Self {
        Self {
            db,
            cache,
            missing_last_time: HashSet::new(),
        }
    }

    /// Runs a sweep every hour, for good.
    pub async fn every_hour(mut self) {
        let mut every = tokio::time::interval(EVERY);
        loop {
            every.tick().await;
            match self.sweep(GRACE).await {
                Ok(swept) if swept == Swept::default() => {}
                Ok(swept) => tracing::info!(
                    deploys = swept.deploys,
                    apps = swept.apps,
                    domain_claims = swept.domain_claims,
                    rate_buckets = swept.rate_buckets,
                    sql_cancel_keys = swept.sql_cancel_keys,
                    "rows of deploys, apps and domains that are gone forgotten"
                ),
                Err(e) => {
                    tracing::warn!(error = %e, "sweeping rows of deploys, apps and domains that are gone failed")
                }
            }
        }
    }

    /// One sweep; `grace` is how old a deploy's rows must be ([`GRACE`] but in tests).
    pub async fn sweep(&mut self, grace: Duration) -> sqlx::Result<Swept> {
        let grace_secs = f64::from(u32::try_from(grace.as_secs()).unwrap_or(u32::MAX));
        let candidates: Vec<Uuid> = sqlx::query_scalar(
            "SELECT deploy_id FROM deploy_logs WHERE updated_at < now() - make_interval(secs => $1)
             UNION SELECT deploy_id FROM deploy_env_snapshots WHERE created_at < now() - make_interval(secs => $1)",
        )
        .bind(grace_secs)
        .fetch_all(&self.db)
        .await?;
        let gone: Vec<Uuid> = candidates
            .into_iter()
            .filter(|id| !self.cache.holds_deploy(&id.to_string()))
            .collect();
        if !gone.is_empty() {
            let mut tx = self.db.begin().await?;
            sqlx::query("DELETE FROM deploy_logs WHERE deploy_id = ANY($1)")
                .bind(&gone)
                .execute(&mut *tx)
                .await?;
            sqlx::query("DELETE FROM deploy_env_snapshots WHERE deploy_id = ANY($1)")
                .bind(&gone)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
        }

        let with_rows: Vec<Uuid> = sqlx::query_scalar(
            "SELECT app_id FROM env_vars UNION SELECT app_id FROM app_members UNION SELECT app_id FROM git_mirrors
             UNION SELECT app_id FROM note_threads UNION SELECT app_id FROM feedback WHERE app_id IS NOT NULL
             UNION SELECT app_id FROM runtime_containers UNION SELECT app_id FROM deploy_env_snapshots",
        )
        .fetch_all(&self.db)
        .await?;
        let missing: HashSet<Uuid> = with_rows
            .into_iter()
            .filter(|id| !self.cache.holds_app(&id.to_string()))
            .collect();
        let confirmed: Vec<Uuid> = missing
            .intersection(&self.missing_last_time)
            .copied()
            .collect();
        for app in &confirmed {
            forget_app(&self.db, *app).await?;
        }
        self.missing_last_time = missing
            .into_iter()
            .filter(|id| !confirmed.contains(id))
            .collect();
        let domain_claims =
            slipway_store::db::domain_claims::forget_lapsed(&self.db, &self.cache).await?;
        let rate_buckets = slipway_store::db::rate_buckets::forget_full(&self.db).await?;
        let sql_cancel_keys = slipway_store::db::sql_cancel_keys::forget_stale(&self.db).await?;
        Ok(Swept {
            deploys: gone.len(),
            apps: confirmed.len(),
            domain_claims,
            rate_buckets,
            sql_cancel_keys,
        })
    }
}

/// Forgets every row of the app `app` that lives as long as the app: env variables, members, mirror, notes and
/// feedback on it, runtime logs and env snapshots. Its deploys' logs follow at the next sweep. Call it once the
/// app has left the cache, so the runtime-log archive can no longer record a generation of it.
pub async fn forget_app(db: &PgPool, app: Uuid) -> sqlx::Result<()> {
    slipway_store::db::members::remove_app(db, app).await?;
    slipway_store::db::mirrors::remove(db, app).await?;
    slipway_store::db::notes::remove_app(db, app).await?;
    slipway_store::env::store::delete_app(db, app).await?;
    slipway_store::env::snapshot::delete_app(db, app).await?;
    slipway_store::db::runtime_logs::remove_app(db, app).await?;
    Ok(())
}
