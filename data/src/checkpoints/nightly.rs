//! Nightly checkpoints, run as jobs ([`slipway_jobs`]). Every few minutes one API server (whichever holds the
//! scheduling lock) looks for ready channel databases without a `nightly` snapshot of the current UTC day and asks
//! for a `nightly_checkpoint` job for each that has none unfinished. The jobs run like a deploy's checkpoint: in
//! the channel's scope (never beside its deploy checkpoint or a restore), on whichever replica claims them, taken
//! over when their process dies, and as long as the dump takes. Each takes the SQL snapshot and, when the
//! channel's bucket is ready, its object-store marker, then prunes the channel to its owner's plan.
//!
//! A channel whose checkpoint fails (its owner's account cannot be read, the dump failed) is asked for again at
//! the next pass, up to [`TRIES_A_DAY`] failures a day, so a database that cannot be dumped is not dumped every
//! ten minutes; the other channels go on.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use slipway_crds::conditions;
use uuid::Uuid;

use super::{Checkpoint, Legs, SqlLeg};
use slipway_core::error::pool_exhausted;
use slipway_core::state::AppState;
use slipway_jobs::{Job, JobError, Kind, NewJob, Progress, runner, store};
use slipway_postgres::snapshots::{Kind as SnapshotKind, Occasion, Parts};

/// How often the API server looks for databases due a nightly snapshot.
pub const CHECK_EVERY: Duration = Duration::from_secs(600);

/// Failed nightly checkpoints of one channel in a UTC day after which the day's passes leave it alone.
pub const TRIES_A_DAY: i64 = 3;

/// The advisory lock one API server holds while it asks for the due channels' jobs, so that two replicas never ask
/// for one channel's twice.
const LOCK: i64 = 0x0073_6c69_706e_6967;

/// What the job needs: the channel and its app.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Params {
    /// The channel's app.
    pub app_id: Uuid,
    /// The channel.
    pub channel_id: Uuid,
}

/// Age past which an unfinished upload into the snapshot store is abandoned: no dump or export runs this long.
pub const STALE_UPLOAD: Duration = Duration::from_secs(24 * 3600);

/// Asks for the due channels' nightly checkpoints every [`CHECK_EVERY`], for the life of the process, and aborts
/// the snapshot store's abandoned uploads ([`STALE_UPLOAD`]).
pub async fn run(state: AppState) {
    loop {
        match schedule(&state).await {
            Ok(asked) if asked.is_empty() => {}
            Ok(asked) => tracing::info!(asked = asked.len(), "nightly checkpoints asked for"),
            Err(e) => tracing::warn!(error = %e, "the nightly pass failed"),
        }
        if let Some(archive) = state.snapshot_archive() {
            match archive.abort_stale_uploads(STALE_UPLOAD).await {
                Ok(0) => {}
                Ok(aborted) => tracing::info!(aborted, "abandoned snapshot uploads aborted"),
                Err(e) => {
                    tracing::warn!(error = %e, "the sweep of abandoned snapshot uploads failed")
                }
            }
        }
        tokio::time::sleep(CHECK_EVERY).await;
    }
}

/// One pass, waited for: asks for every due nightly checkpoint ([`schedule`]) and waits until each has run; how
/// many took an SQL snapshot.
pub async fn pass(state: &AppState) -> anyhow::Result<usize> {
    let mut taken = 0;
    for id in schedule(state).await? {
        let job = runner::wait_at_most(state.db(), id, None).await?;
        if job.is_some_and(|job| job.result_field("snapshot_id").is_some()) {
            taken += 1;
        }
    }
    Ok(taken)
}

/// Asks for a nightly checkpoint job for each ready channel database without today's nightly snapshot, a nightly
/// job unfinished, or [`TRIES_A_DAY`] failed today, unless another API server is at it; the jobs asked for.
pub async fn schedule(state: &AppState) -> anyhow::Result<Vec<Uuid>> {
    if state.data_server().is_none() || state.snapshot_archive().is_none() {
        return Ok(Vec::new());
    }
    // Held while asking: on a connection of its own, not one of the requests'.
    let mut lock = slipway_store::db::lock_connection(state.db()).await?;
    let held: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
        .bind(LOCK)
        .fetch_one(&mut lock)
        .await?;
    if !held {
        return Ok(Vec::new());
    }
    let asked = ask_for_due(state).await;
    sqlx::query("SELECT pg_advisory_unlock($1)")
        .bind(LOCK)
        .execute(&mut lock)
        .await?;
    sqlx::Connection::close(lock).await?;
    let asked = asked?;
    if !asked.is_empty() {
        state.jobs().wake();
    }
    Ok(asked)
}

async fn ask_for_due(state: &AppState) -> anyhow::Result<Vec<Uuid>> {
    let due: Vec<(Uuid, Uuid)> = sqlx::query_as(
        "SELECT d.channel_id, d.app_id FROM channel_databases d \
         WHERE NOT EXISTS (SELECT 1 FROM postgres_snapshots s WHERE s.channel_id = d.channel_id \
             AND s.kind = 'nightly' AND s.taken_on = (now() AT TIME ZONE 'UTC')::date) \
         AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.kind = $1 AND j.channel_id = d.channel_id \
             AND j.state IN ('queued', 'running')) \
         AND (SELECT count(*) FROM jobs j WHERE j.kind = $1 AND j.channel_id = d.channel_id \
             AND j.state = 'failed' AND j.created_at >= date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC') < $2 \
         ORDER BY d.created_at",
    )
    .bind(Kind::NightlyCheckpoint.as_str())
    .bind(TRIES_A_DAY)
    .fetch_all(state.db())
    .await?;
    let ready: std::collections::HashSet<String> = state
        .cache()
        .channels()
        .iter()
        .filter(|c| c.condition_is_true(conditions::DATABASE_READY))
        .filter_map(|c| c.metadata.uid.clone())
        .collect();
    let mut asked = Vec::new();
    for (channel_id, app_id) in due {
        if !ready.contains(&channel_id.to_string()) {
            continue;
        }
        let new = NewJob::for_channel(
            Kind::NightlyCheckpoint,
            app_id,
            channel_id,
            json!(Params { app_id, channel_id }),
        );
        match store::enqueue(state.db(), &new, store::Admission::Queue).await? {
            store::Enqueued::New(job)
            | store::Enqueued::Existing(job)
            | store::Enqueued::Busy(job) => {
                asked.push(job.id);
            }
        }
    }
    Ok(asked)
}

/// The job's work: the channel's nightly checkpoint; its result names the SQL snapshot, or says why there is none.
pub async fn perform(state: &AppState, job: &Job, progress: &Progress) -> Result<Value, JobError> {
    let params: Params = serde_json::from_value(job.params.0.clone()).map_err(|e| {
        JobError::Failed(format!("the checkpoint's parameters are unreadable: {e}"))
    })?;
    match Box::pin(checkpoint(state, &params, progress)).await {
        Ok(Taken::Snapshot(id)) => Ok(json!({ "snapshot_id": id })),
        Ok(Taken::Skipped(reason)) => Ok(json!({ "skipped": reason })),
        Err(e) if pool_exhausted(&e) => Err(JobError::Busy(e)),
        Err(e) => {
            tracing::warn!(channel_id = %params.channel_id, error = %e, "nightly checkpoint failed; asked for again at the next pass");
            Err(JobError::Failed(format!(
                "the nightly checkpoint failed: {e}"
            )))
        }
    }
}

/// What a nightly checkpoint came to.
enum Taken {
    /// The SQL snapshot's id.
    Snapshot(Uuid),
    /// Nothing to take, and why.
    Skipped(&'static str),
}

async fn checkpoint(
    state: &AppState,
    params: &Params,
    progress: &Progress,
) -> anyhow::Result<Taken> {
    let (Some(server), Some(archive)) = (state.data_server(), state.snapshot_archive()) else {
        return Ok(Taken::Skipped(
            "this platform keeps no SQL snapshots (no data server or snapshot archive is configured)",
        ));
    };
    let uid = params.channel_id.to_string();
    let Some(channel) = state
        .cache()
        .channels()
        .into_iter()
        .find(|c| c.metadata.uid.as_deref() == Some(uid.as_str()))
    else {
        return Ok(Taken::Skipped("the channel is gone"));
    };
    let Some(record) = slipway_postgres::store::by_channel(state.db(), params.channel_id).await?
    else {
        return Ok(Taken::Skipped("the channel has no database"));
    };
    if !channel.condition_is_true(conditions::DATABASE_READY) {
        return Ok(Taken::Skipped("the channel's database is not ready"));
    }
    let plan = super::owner_plan(state.db(), &record.owner).await?;
    let occasion = Occasion {
        kind: SnapshotKind::Nightly,
        deploy_id: None,
        git_sha: channel.status.as_ref().and_then(|s| s.current_sha.clone()),
    };
    let legs = Legs {
        sql: Some(SqlLeg {
            parts: Parts {
                db: state.db(),
                server,
                archive,
            },
            record: &record,
        }),
        blob: super::blob_leg(state, &channel, params.channel_id).await,
    };
    let taken = super::take(
        state.db(),
        params.channel_id,
        legs,
        &occasion,
        plan,
        progress,
    )
    .await?;
    Ok(match taken {
        Checkpoint { sql: Some(s), .. } => Taken::Snapshot(s.id),
        Checkpoint { sql: None, .. } => Taken::Skipped("the channel's database is not ready"),
    })
}
