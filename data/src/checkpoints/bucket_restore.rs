//! A bucket restore, run as a job ([`slipway_jobs`]): `POST …/blob/restore` records it and waits for it. A bucket
//! of tens of thousands of objects takes minutes of server-side copies; inside a request it was cut by the
//! request's timeout half-way, its journal entry never written. As a job it runs to its end on whichever API
//! replica claims it, and a replica that dies mid-way leaves it to another, which plans again from the bucket as it
//! is and makes only the writes still missing ([`slipway_blob::restore`] copies forward and removes nothing, so a
//! restore stopped half-way is finished by running it again).
//!
//! It runs in the channel's job scope and under the channel's checkpoint lock ([`super::exclusively`]), so no
//! prune removes a version it is about to copy. Its progress counts the bytes of the checkpoint's objects written
//! back; its journal entry (with what it copied and hid, or where it stopped) is written by the job.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use slipway_blob::checkpoints as markers;
use slipway_core::error::pool_exhausted;
use slipway_core::state::AppState;
use slipway_jobs::{Job, JobError, Kind, NewJob, Progress};
use slipway_store::db::audit::{self, Actor};

/// What the job needs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Params {
    /// The channel's app.
    pub app_id: Uuid,
    /// The channel.
    pub channel_id: Uuid,
    /// The checkpoint (its SQL snapshot's id) whose marker the bucket goes back to.
    pub snapshot_id: Uuid,
    /// Who asked, for the journal.
    pub actor: Actor,
}

/// The job of `params`, in the channel's scope.
pub fn job(params: &Params) -> NewJob {
    NewJob::for_channel(
        Kind::BucketRestore,
        params.app_id,
        params.channel_id,
        serde_json::json!(params),
    )
}

/// The job's work: the bucket copied forward to the checkpoint's marker; the journal entry either way.
pub async fn perform(state: &AppState, job: &Job, progress: &Progress) -> Result<Value, JobError> {
    let params: Params = serde_json::from_value(job.params.0.clone())
        .map_err(|e| JobError::Failed(format!("the restore's parameters are unreadable: {e}")))?;
    let Some(access) = state.blob_access() else {
        return Err(JobError::Failed(
            "object storage is not configured on this platform".into(),
        ));
    };
    let db = state.db();
    let store = slipway_blob::store::by_channel(db, params.channel_id)
        .await
        .map_err(|e| busy_or(e.into()))?
        .ok_or_else(|| JobError::Failed("the channel's bucket is not recorded".into()))?;
    let bucket = access
        .bucket(state.keyring(), &store)
        .map_err(|e| JobError::Failed(format!("the channel's bucket cannot be reached: {e}")))?;
    let restore = super::exclusively(db, params.channel_id, async {
        let Some(marker) = markers::aligned_with(db, params.channel_id, params.snapshot_id).await?
        else {
            return Ok(None);
        };
        let manifest = markers::manifest(db, marker.id).await?;
        let total: i64 = manifest.iter().map(|e| e.size_bytes).sum();
        progress.set_total(u64::try_from(total).unwrap_or(0));
        progress.set_done(0);
        let restored = slipway_blob::restore::restore(&bucket, &manifest, progress).await;
        sqlx::Result::Ok(Some((marker, restored)))
    });
    let outcome = match Box::pin(restore).await {
        Ok(Ok(outcome)) => outcome,
        Ok(Err(e)) | Err(e) => return Err(busy_or(e.into())),
    };
    let Some((marker, restored)) = outcome else {
        return Err(JobError::Failed(
            "the checkpoint is gone (pruned before the restore began); no version was changed"
                .into(),
        ));
    };
    let (copied, hidden, stopped) = match &restored {
        Ok(r) => (r.copied, r.hidden, None),
        Err(e) => (e.done, 0, Some(e.to_string())),
    };
    let detail = serde_json::json!({
        "channel_id": params.channel_id, "snapshot_id": params.snapshot_id, "marker_id": marker.id,
        "copied": copied, "hidden": hidden, "stopped": stopped,
    });
    if let Err(e) = audit::record(
        db,
        params.actor,
        Some(params.app_id),
        "blob.restore",
        detail,
    )
    .await
    {
        tracing::warn!(channel_id = %params.channel_id, error = %e, "a bucket restore's journal entry was not written");
    }
    match restored {
        Ok(r) => Ok(serde_json::json!({"copied": r.copied, "hidden": r.hidden})),
        // Decided, not failed: asking again would be refused the same way.
        Err(e) if e.cause.is::<slipway_blob::restore::VersionsGone>() => {
            Ok(serde_json::json!({"refused": e.cause.to_string()}))
        }
        Err(e) => {
            tracing::warn!(channel_id = %params.channel_id, marker_id = %marker.id, error = %e.cause, "bucket restore stopped");
            Err(JobError::Failed(format!(
                "the restore stopped: {e}; no version was removed, and asking again finishes it"
            )))
        }
    }
}

/// The job's error for `e`: put back for a busy platform, else failed, its words (which can name the database's
/// internals) kept in the log.
fn busy_or(e: anyhow::Error) -> JobError {
    if pool_exhausted(&e) {
        return JobError::Busy(e);
    }
    tracing::warn!(error = %e, "a bucket restore could not use the platform database");
    JobError::Failed(
        "the platform database could not be used; no version was changed, and asking again finishes it".into(),
    )
}
