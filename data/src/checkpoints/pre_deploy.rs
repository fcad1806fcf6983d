//! A deploy's `pre_deploy` checkpoint, run as a job ([`slipway_jobs`]): the operator's call starts it and answers
//! how it is, and the operator asks again until it is done. A large database dumps for minutes, longer than any
//! request may last, so the dump belongs to the job, not to the request: a request cut short, an operator that
//! restarts or an API replica that dies does not lose it (another replica takes the job over and dumps again; a
//! snapshot row is written only once its file is whole).
//!
//! The deploy's log says what the checkpoint does: why it is skipped (the channel's database not ready, no archive
//! configured), how far the dump is every few seconds (`[snapshot] 1.2 GiB of 2.5 GiB, 38 s`), and how it ended.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use slipway_crds::conditions;
use slipway_internal::protocol::PreDeploySnapshot;
use uuid::Uuid;

use super::{Checkpoint, Legs, SqlLeg};
use slipway_core::access::{self, Role, VisibleApp};
use slipway_core::error::pool_exhausted;
use slipway_core::state::AppState;
use slipway_jobs::{self, Job, JobError, Kind, NewJob, Progress, state};
use slipway_postgres::snapshots::{Kind as SnapshotKind, Occasion, Parts};

/// What the job needs: the deploy, its channel and app, and the commit running before it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Params {
    /// The deploy the checkpoint is taken for.
    pub deploy_id: Uuid,
    /// The channel's app.
    pub app_id: Uuid,
    /// The channel.
    pub channel_id: Uuid,
    /// The commit running now; `None` on a channel's first deploy.
    pub git_sha: Option<String>,
}

/// The job of `params`' deploy: one per deploy (its subject), in the channel's scope, so it never overlaps the
/// channel's other jobs.
pub fn job(params: &Params) -> NewJob {
    NewJob {
        subject: Some(subject(params.deploy_id)),
        ..NewJob::for_channel(
            Kind::Checkpoint,
            params.app_id,
            params.channel_id,
            serde_json::json!(params),
        )
    }
}

/// The subject of deploy `deploy_id`'s checkpoint job.
pub fn subject(deploy_id: Uuid) -> String {
    format!("deploy:{deploy_id}")
}

/// What the operator hears of the job as it is.
pub fn answer(job: &Job) -> PreDeploySnapshot {
    match job.state.as_str() {
        state::SUCCEEDED => job
            .result
            .as_ref()
            .and_then(|r| serde_json::from_value(r.0.clone()).ok())
            .unwrap_or_else(|| PreDeploySnapshot::Failed {
                reason: "the pre-deploy checkpoint recorded no outcome".to_owned(),
            }),
        state::FAILED => PreDeploySnapshot::Failed {
            reason: job
                .error
                .clone()
                .unwrap_or_else(|| "the pre-deploy checkpoint failed".to_owned()),
        },
        _ => PreDeploySnapshot::Running {
            progress: job.progress_line(),
        },
    }
}

/// The job's work: the deploy's checkpoint of the legs the channel has ready, with what it does in the deploy's
/// log; the operator's answer as its result. All that failed being the wait for a database connection, the job
/// waits and runs again (a busy platform is no reason to fail a deploy).
pub async fn perform(state: &AppState, job: &Job, progress: &Progress) -> Result<Value, JobError> {
    let params: Params = serde_json::from_value(job.params.0.clone()).map_err(|e| {
        JobError::Failed(format!("the checkpoint's parameters are unreadable: {e}"))
    })?;
    let log = DeployLog {
        state,
        deploy_id: params.deploy_id,
    };
    if job.attempts > 1 {
        log.line(&format!(
            "started again (attempt {}): the process taking it stopped",
            job.attempts
        ))
        .await;
    }
    // Boxed: a dump's futures nest deep, and a task's stack is small.
    let answer = match Box::pin(checkpoint(state, &params, progress, &log)).await {
        Ok(answer) => answer,
        Err(e) if pool_exhausted(&e) => return Err(JobError::Busy(e)),
        Err(e) => {
            tracing::warn!(deploy_id = %params.deploy_id, channel_id = %params.channel_id, error = %e, "pre-deploy checkpoint failed");
            let reason = format!("the pre-deploy SQL snapshot failed: {e}");
            log.line(&format!("failed: {e}")).await;
            return Err(JobError::Failed(reason));
        }
    };
    serde_json::to_value(answer).map_err(|e| JobError::Failed(e.to_string()))
}

async fn checkpoint(
    state: &AppState,
    params: &Params,
    progress: &Progress,
    log: &DeployLog<'_>,
) -> anyhow::Result<PreDeploySnapshot> {
    let Some(app) = state
        .cache()
        .app_by_uid(&params.app_id.to_string())
        .and_then(|app| VisibleApp::from_resource(app, Role::Owner))
    else {
        return Ok(skipped(log, "the app is gone".to_owned()).await);
    };
    let Ok(channel) = access::channel_of(state, &app, params.channel_id) else {
        return Ok(skipped(log, "the channel is gone".to_owned()).await);
    };
    let blob = super::blob_leg(state, &channel, params.channel_id).await;
    let record = slipway_postgres::store::by_channel(state.db(), params.channel_id).await?;
    let sql = match (state.data_server(), state.snapshot_archive(), &record) {
        (None, _, _) | (_, None, _) => Err(
            "this platform keeps no SQL snapshots (no data server or snapshot archive is configured)",
        ),
        (Some(server), Some(archive), Some(record))
            if record.app_id == params.app_id
                && channel.condition_is_true(conditions::DATABASE_READY) =>
        {
            Ok(SqlLeg {
                parts: Parts {
                    db: state.db(),
                    server,
                    archive,
                },
                record,
            })
        }
        _ => Err("the channel's database is not ready"),
    };
    let sql_skipped = sql.as_ref().err().copied();
    if let (Some(reason), None) = (sql_skipped, &blob) {
        return Ok(skipped(
            log,
            format!("{reason}; the channel has no ready bucket either"),
        )
        .await);
    }
    let plan = super::owner_plan(state.db(), app.owner.as_str()).await?;
    let occasion = Occasion {
        kind: SnapshotKind::PreDeploy,
        deploy_id: Some(params.deploy_id),
        git_sha: params.git_sha.clone(),
    };
    log.line("taking the pre-deploy checkpoint").await;
    let started = Instant::now();
    let legs = Legs {
        sql: sql.ok(),
        blob,
    };
    let take = Box::pin(super::take(
        state.db(),
        params.channel_id,
        legs,
        &occasion,
        plan,
        progress,
    ));
    let taken = log
        .progress_during(progress, started, state.jobs().timing().heartbeat, take)
        .await?;
    Ok(match taken {
        Checkpoint {
            sql: Some(snapshot),
            ..
        } => {
            let size = u64::try_from(snapshot.size_bytes.unwrap_or(0)).unwrap_or(0);
            log.line(&format!(
                "done: an SQL snapshot of {} in {} s",
                slipway_jobs::gib(size),
                started.elapsed().as_secs()
            ))
            .await;
            PreDeploySnapshot::Taken {
                snapshot_id: snapshot.id.to_string(),
            }
        }
        Checkpoint { sql: None, .. } => {
            let reason = sql_skipped.unwrap_or("the channel's database is not ready");
            skipped(log, format!("{reason}; only the bucket was checkpointed")).await
        }
    })
}

/// A checkpoint with nothing (or only the bucket) to take: the reason, in the log and the answer.
async fn skipped(log: &DeployLog<'_>, reason: String) -> PreDeploySnapshot {
    log.line(&format!("no SQL snapshot: {reason}")).await;
    PreDeploySnapshot::Skipped { reason }
}

/// The deploy's log, as the checkpoint writes it.
struct DeployLog<'a> {
    state: &'a AppState,
    deploy_id: Uuid,
}

impl DeployLog<'_> {
    /// Appends `[snapshot] <text>`; a log that cannot be written costs the line, not the checkpoint.
    async fn line(&self, text: &str) {
        let line = format!("[snapshot] {text}\n");
        if let Err(e) =
            slipway_store::db::deploy_logs::append(self.state.db(), self.deploy_id, line.as_bytes())
                .await
        {
            tracing::warn!(deploy_id = %self.deploy_id, error = %e, "could not write the deploy's log");
        }
    }

    /// Runs `work`, writing `progress` into the log every `every` meanwhile; what `work` returns.
    async fn progress_during<T>(
        &self,
        progress: &Progress,
        started: Instant,
        every: Duration,
        work: impl Future<Output = T>,
    ) -> T {
        slipway_jobs::alongside(work, async {
            loop {
                tokio::time::sleep(every).await;
                let line = slipway_jobs::progress_line(
                    progress.done(),
                    progress.total(),
                    started.elapsed(),
                );
                self.line(&line).await;
            }
        })
        .await
    }
}
