//! An SQL restore in place, run as a job ([`slipway_jobs`]): `POST …/postgres/restore` records it and waits for it,
//! and the job, not the request, holds the restore. A 5 GB snapshot takes minutes to apply; inside a request it
//! was cut by the request's timeout and rolled back, and a client that went away took it down with it. As a job
//! it runs to its end on whichever API replica claims it; a replica that dies mid-way leaves the transaction open,
//! the data server rolls it back (the data is all old), and another replica applies the snapshot again from the
//! start (then all new), or fails the job once its attempts are spent, the data unchanged. A replica that dies
//! after the restore committed but before the job recorded it is not mistaken for one that died mid-way: the
//! restore's transaction id is handed over with the job before `COMMIT`, and the next attempt asks the data server
//! whether that transaction committed; if it did, the snapshot is not applied again over what the app wrote since.
//!
//! It runs in the channel's job scope, so no checkpoint of the channel's overlaps it, and under the channel's
//! checkpoint lock ([`super::exclusively`]), so no prune removes the file it reads. The journal entry
//! is written by the job once the data is replaced, so it is there whether or not the caller stayed to hear it.

use bytes::Bytes;
use futures::{Stream, StreamExt};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use slipway_core::error::pool_exhausted;
use slipway_core::state::AppState;
use slipway_jobs::{Job, JobError, Kind, NewJob, Progress};
use slipway_postgres::restore::RestoreFailed;
use slipway_store::db::audit::{self, Actor};

/// What the job needs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Params {
    /// The channel's app.
    pub app_id: Uuid,
    /// The channel.
    pub channel_id: Uuid,
    /// The snapshot to put back.
    pub snapshot_id: Uuid,
    /// The database the caller confirmed; a channel whose database is another by the time the job runs is left
    /// alone.
    pub db_name: String,
    /// Who asked, for the journal.
    pub actor: Actor,
}

/// The job of `params`, in the channel's scope.
pub fn job(params: &Params) -> NewJob {
    NewJob::for_channel(
        Kind::SqlRestore,
        params.app_id,
        params.channel_id,
        serde_json::json!(params),
    )
}

/// The handover field naming the restore's transaction on the data server, recorded before its `COMMIT`.
const TRANSACTION: &str = "transaction";

/// Why the job could not apply the snapshot, for the caller; the data is unchanged in every case.
fn failed(summary: &str) -> JobError {
    JobError::Failed(format!(
        "the restore did not complete ({summary}); the database is unchanged"
    ))
}

/// The job's work: the snapshot's file streamed out of the archive into the channel's database in one
/// transaction, its bytes counted as progress; the journal entry once it is applied.
pub async fn perform(state: &AppState, job: &Job, progress: &Progress) -> Result<Value, JobError> {
    let params: Params = serde_json::from_value(job.params.0.clone())
        .map_err(|e| JobError::Failed(format!("the restore's parameters are unreadable: {e}")))?;
    let (Some(server), Some(archive)) = (state.data_server(), state.snapshot_archive()) else {
        return Err(failed(
            "this platform has no data server or snapshot store configured",
        ));
    };
    let db = state.db();
    let record = slipway_postgres::store::by_channel(db, params.channel_id)
        .await
        .map_err(|e| busy_or(e.into()))?;
    let Some(record) = record.filter(|r| r.db_name == params.db_name) else {
        return Err(failed(
            "the channel's database is no longer the one confirmed",
        ));
    };
    let restore = super::exclusively(db, params.channel_id, async {
        let snapshot =
            slipway_postgres::snapshots::by_id(db, params.channel_id, params.snapshot_id).await?;
        let Some(key) = snapshot.and_then(|s| {
            if let Some(size) = s.size_bytes.and_then(|n| u64::try_from(n).ok()) {
                progress.set_total(size);
            }
            s.object_key
        }) else {
            return Ok(Err(failed("the snapshot is gone")));
        };
        if let Some(transaction) = job.handover_field(TRANSACTION).and_then(Value::as_str)
            && slipway_postgres::restore::committed(server, transaction).await?
        {
            tracing::info!(job_id = %job.id, channel_id = %params.channel_id, transaction, "an earlier attempt's restore had committed; not applying it again");
            progress.set_done(progress.total().unwrap_or(0));
            return anyhow::Ok(Ok(()));
        }
        progress.set_done(0);
        let file = counted(archive.download(&key).await?, progress);
        let runner = job.runner.as_deref().unwrap_or_default();
        let hand_over = |transaction: String| async move {
            let handover = serde_json::json!({ TRANSACTION: transaction });
            let ours = slipway_jobs::store::hand_over(db, job.id, runner, &handover).await?;
            anyhow::ensure!(ours, "the restore's job was taken over or cancelled");
            Ok(())
        };
        slipway_postgres::restore::restore(server, &record.names(), file, hand_over).await?;
        anyhow::Ok(Ok(()))
    });
    // Boxed: a restore's futures nest deep, and a task's stack is small.
    match Box::pin(restore).await {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(refused))) => return Err(refused),
        Ok(Err(e)) => return Err(busy_or(e)),
        Err(e) => return Err(busy_or(e.into())),
    }
    let detail = serde_json::json!({
        "channel_id": params.channel_id,
        "db_name": params.db_name,
        "snapshot_id": params.snapshot_id,
    });
    if let Err(e) = audit::record(
        db,
        params.actor,
        Some(params.app_id),
        "postgres.restore",
        detail,
    )
    .await
    {
        // The data is replaced: failing the job now would tell the caller otherwise.
        tracing::warn!(channel_id = %params.channel_id, error = %e, "a restore's journal entry was not written");
    }
    Ok(serde_json::json!({"snapshot_id": params.snapshot_id}))
}

/// `file`'s chunks, each added to `progress` as it passes.
fn counted<'a>(
    file: impl Stream<Item = std::io::Result<Bytes>> + Send + 'a,
    progress: &'a Progress,
) -> impl Stream<Item = std::io::Result<Bytes>> + Send + 'a {
    file.map(move |chunk| {
        if let Ok(chunk) = &chunk {
            progress.add(chunk.len() as u64);
        }
        chunk
    })
}

/// The job's error for `e`: put back for a busy platform (no database connection to be had), else failed, with
/// the programs' own words (which can quote the dump's rows and the server's internals) kept in the log.
fn busy_or(e: anyhow::Error) -> JobError {
    if pool_exhausted(&e) {
        return JobError::Busy(e);
    }
    let restore = e.downcast_ref::<RestoreFailed>();
    tracing::warn!(error = %e, detail = restore.map(|f| f.detail.as_str()), "restore failed");
    failed(restore.map_or(
        "the data server or the snapshot store could not be used",
        |f| f.summary,
    ))
}
