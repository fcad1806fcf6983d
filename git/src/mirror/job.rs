//! A mirror sync as a job ([`slipway_jobs`]): `POST …/github/sync` and the fetch a deploy of a mirrored app starts
//! with each record one and wait for it. A first fetch of a repository of hundreds of megabytes takes longer than
//! a request may last; run by the request, it was cut by the request's timeout, queued behind a lock that only
//! its own process knew, and lost with that process. As a job, the syncs of one app run one at a time in the
//! app's scope (`mirror:<app id>`) whichever replica claims them, a replica that dies mid-fetch leaves the sync to
//! another (a fetch is safe to run again), and the sync's own time limit ([`slipway_mirror_fetch::MirrorConfig::timeout`]) still
//! bounds each attempt.
//!
//! A sync that fails (the server unreachable, the key refused) is an outcome, recorded on the mirror's row as
//! before, not a failed job; a job fails only when its work could not run at all.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use slipway_core::access::{Role, VisibleApp};
use slipway_core::error::{ApiError, pool_exhausted};
use slipway_core::state::AppState;
use slipway_jobs::store::Admission;
use slipway_jobs::{self, Job, JobError, Kind, NewJob, Progress};
use slipway_store::db::mirrors::{self, Mirror};

/// What the job needs: the app, and which connection of it (a mirror disconnected and connected again is another).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Params {
    /// The app.
    pub app_id: Uuid,
    /// When the mirror it syncs was connected.
    pub connected_at: chrono::DateTime<chrono::Utc>,
}

/// Syncs `mirror` of `app` as a job, behind any sync of the app already asked for, and waits for it for as long
/// as it takes; the mirror's row after it (`None` when the app was disconnected meanwhile).
pub async fn sync_and_wait(
    state: &AppState,
    app: &VisibleApp,
    mirror: &Mirror,
) -> Result<Option<Mirror>, ApiError> {
    let params = Params {
        app_id: app.id,
        connected_at: mirror.connected_at,
    };
    let new = NewJob {
        app_id: Some(app.id),
        params: serde_json::json!(params),
        ..NewJob::new(Kind::MirrorSync, slipway_jobs::scope::mirror(app.id))
    };
    // Queued behind the app's other syncs: never refused.
    let job = slipway_jobs::runner::ask_and_wait(state.db(), state.jobs(), &new, Admission::Queue)
        .await?
        .ok()
        .flatten()
        .ok_or_else(|| ApiError::Internal(anyhow::anyhow!("the sync's job row vanished")))?;
    if job.state == slipway_jobs::state::FAILED {
        return Err(ApiError::Unavailable(format!(
            "the sync could not run: {}; try again",
            job.error.unwrap_or_default()
        )));
    }
    Ok(mirrors::get(state.db(), app.id).await?)
}

/// The job's work: one sync of the app's mirror, if it is still the connection the job was asked for, within the
/// sync's time limit, its outcome recorded on the row.
pub async fn perform(state: &AppState, job: &Job, _progress: &Progress) -> Result<Value, JobError> {
    let params: Params = serde_json::from_value(job.params.0.clone())
        .map_err(|e| JobError::Failed(format!("the sync's parameters are unreadable: {e}")))?;
    let busy_or = |e: sqlx::Error| {
        let e = anyhow::Error::from(e);
        if pool_exhausted(&e) {
            return JobError::Busy(e);
        }
        // Its words can name the database's internals: the log has them, the caller does not.
        tracing::warn!(error = %e, "a mirror sync could not use the platform database");
        JobError::Failed("the platform database could not be used".into())
    };
    let mirror = mirrors::get(state.db(), params.app_id)
        .await
        .map_err(busy_or)?;
    let Some(mirror) = mirror.filter(|m| m.connected_at == params.connected_at) else {
        return Ok(serde_json::json!({"synced": false, "why": "disconnected"}));
    };
    let Some(app) = state
        .cache()
        .app_by_uid(&params.app_id.to_string())
        .and_then(|app| VisibleApp::from_resource(app, Role::Owner))
    else {
        return Ok(serde_json::json!({"synced": false, "why": "the app is gone"}));
    };
    let repo = match app.ready_repo(state).await {
        Ok(repo) => repo,
        Err(ApiError::NotFound(_)) => {
            return Ok(serde_json::json!({"synced": false, "why": "the app has no repository"}));
        }
        Err(e) => {
            tracing::warn!(app = %app.id, error = %e, "a mirror sync could not open the repository");
            return Err(JobError::Failed(
                "the repository could not be opened".into(),
            ));
        }
    };
    let timeout = state.mirrors().config().timeout;
    let outcome = match tokio::time::timeout(
        timeout,
        Box::pin(super::service::sync_once(state, &mirror, &repo)),
    )
    .await
    {
        Ok(outcome) => outcome,
        Err(_) => Err(format!(
            "the sync did not finish within {} s",
            timeout.as_secs()
        )),
    };
    if let Err(e) = &outcome {
        tracing::info!(app = %mirror.app_id, error = %e, "mirror sync failed");
    }
    let recorded = outcome.as_ref().map_err(String::as_str);
    mirrors::record_sync(state.db(), mirror.app_id, mirror.connected_at, recorded)
        .await
        .map_err(busy_or)?;
    Ok(serde_json::json!({"synced": outcome.is_ok()}))
}
