//! Exports: an app's repository, variable names, databases and buckets as one downloadable `tar.gz`, built in the
//! background by the API process that was asked ([`build`]) and kept in the snapshot archive's bucket under
//! `exports/<app id>/<export id>/` until it expires ([`LIFETIME`]).
//!
//! An export moves `queued` → `running` → `ready` (or `failed`, with a reason) → `expired` ([`store`]). An app has
//! at most one in flight (a unique index; the route answers 409). A process builds at most [`BUILDS_AT_ONCE`]
//! exports at a time; the others wait queued. While it lives, the process writes a heartbeat on each export it
//! holds, so an export whose process stopped (a restart, a crash) is failed as abandoned by the next reader rather
//! than left in flight for ever, and its staged parts are deleted. A sweep every few minutes deletes expired
//! archives and what abandoned exports left.

pub mod build;
pub mod store;

use std::time::Duration;

use chrono::Utc;
use tokio::sync::Semaphore;
use uuid::Uuid;

use slipway_core::access::VisibleApp;
use slipway_core::state::AppState;
use slipway_postgres::archive::Archive;

/// How long a ready archive can be downloaded.
pub const LIFETIME: chrono::Duration = chrono::Duration::hours(24);
/// Exports one API process builds at once.
pub const BUILDS_AT_ONCE: usize = 2;
/// How often a building process writes its heartbeat (well inside [`store::ABANDONED_AFTER_SECS`]).
const HEARTBEAT: Duration = Duration::from_secs(15);
/// How often expired archives and abandoned exports are cleaned up.
const SWEEP_EVERY: Duration = Duration::from_secs(300);

static BUILDS: Semaphore = Semaphore::const_new(BUILDS_AT_ONCE);

/// Where everything of one export lives in the archive's bucket.
pub fn prefix(app: Uuid, export: Uuid) -> String {
    format!("exports/{app}/{export}/")
}

/// Builds export `id` of `app` in the background: waits for a build slot, builds, records the outcome. Its
/// heartbeat runs from the start, queued included.
pub fn spawn(state: AppState, archive: Archive, app: VisibleApp, id: Uuid) {
    tokio::spawn(async move {
        let beating = tokio::spawn(heartbeat(state.clone(), id));
        let _stop_beating = AbortOnDrop(beating);
        let Ok(_slot) = BUILDS.acquire().await else {
            return;
        };
        run(&state, &archive, &app, id).await;
    });
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn heartbeat(state: AppState, id: Uuid) {
    loop {
        tokio::time::sleep(HEARTBEAT).await;
        match store::heartbeat(state.db(), id).await {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => {
                tracing::warn!(export_id = %id, error = %e, "could not write an export's heartbeat")
            }
        }
    }
}

async fn run(state: &AppState, archive: &Archive, app: &VisibleApp, id: Uuid) {
    let prefix = prefix(app.id, id);
    match store::start(state.db(), id).await {
        Ok(true) => {}
        Ok(false) => return,
        Err(e) => {
            tracing::warn!(export_id = %id, error = %e, "could not start an export");
            return;
        }
    }
    let outcome = build::build(state, archive, app, id, &prefix).await;
    let staged = format!("{prefix}parts/");
    if let Err(e) = archive.delete_prefix(&staged).await {
        tracing::warn!(export_id = %id, error = %e, "could not delete an export's staged parts");
    }
    let recorded = match outcome {
        Ok((key, size)) => {
            let expires_at = Utc::now() + LIFETIME;
            match store::ready(state.db(), id, &key, size, expires_at).await {
                Ok(true) => {
                    tracing::info!(export_id = %id, app_id = %app.id, size, "export ready");
                    Ok(())
                }
                // Failed as abandoned meanwhile, or the app was deleted: the archive is nobody's.
                Ok(false) => archive.delete_prefix(&prefix).await.map_err(Into::into),
                Err(e) => Err(e.into()),
            }
        }
        Err(failure) => {
            tracing::warn!(export_id = %id, app_id = %app.id, reason = %failure.reason, error = ?failure.cause, "export failed");
            store::fail(state.db(), id, &failure.reason)
                .await
                .map_err(anyhow::Error::from)
        }
    };
    if let Err(e) = recorded {
        tracing::warn!(export_id = %id, error = %e, "could not record an export's outcome");
    }
}

/// Fails `app`'s abandoned exports (every app's with `None`) and deletes what they staged.
pub async fn abandon_stale(state: &AppState, app: Option<Uuid>) -> anyhow::Result<()> {
    for (id, app_id) in store::abandon_stale(state.db(), app).await? {
        tracing::warn!(export_id = %id, %app_id, "export abandoned by its process");
        if let Some(archive) = state.snapshot_archive() {
            archive.delete_prefix(&prefix(app_id, id)).await?;
        }
    }
    Ok(())
}

/// Every few minutes: expired archives deleted, abandoned exports failed and cleaned up.
pub async fn sweep_every(state: AppState) {
    loop {
        tokio::time::sleep(SWEEP_EVERY).await;
        if let Err(e) = sweep(&state).await {
            tracing::warn!(error = %e, "export sweep failed; retrying later");
        }
    }
}

/// One sweep.
pub async fn sweep(state: &AppState) -> anyhow::Result<()> {
    abandon_stale(state, None).await?;
    for (id, app_id) in store::due(state.db()).await? {
        // The files first: a row marked expired is never looked at again.
        if let Some(archive) = state.snapshot_archive() {
            archive.delete_prefix(&prefix(app_id, id)).await?;
        }
        store::expire(state.db(), id).await?;
    }
    Ok(())
}

/// Deletes every export of `app` and its files (the app is gone).
pub async fn forget_app(state: &AppState, app: Uuid) -> anyhow::Result<()> {
    if let Some(archive) = state.snapshot_archive() {
        archive.delete_prefix(&format!("exports/{app}/")).await?;
    }
    store::remove_app(state.db(), app).await?;
    Ok(())
}
