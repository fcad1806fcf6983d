//! The work of each kind of job ([`slipway_jobs`]), for the API's runner: what a claimed job of a kind does, with
//! the API's parts.

use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::Value;

use slipway_core::state::AppState;
use slipway_jobs::{Job, JobError, Kind, Progress, Work};

/// Each kind's work with the API's parts.
struct Kinds(AppState);

impl Work for Kinds {
    fn perform<'a>(
        &'a self,
        job: &'a Job,
        progress: &'a Progress,
    ) -> BoxFuture<'a, Result<Value, JobError>> {
        match job.kind() {
            Some(Kind::Checkpoint) => Box::pin(slipway_data::checkpoints::pre_deploy::perform(
                &self.0, job, progress,
            )),
            Some(Kind::NightlyCheckpoint) => Box::pin(slipway_data::checkpoints::nightly::perform(
                &self.0, job, progress,
            )),
            Some(Kind::SqlRestore) => Box::pin(slipway_data::checkpoints::sql_restore::perform(
                &self.0, job, progress,
            )),
            Some(Kind::BucketRestore) => Box::pin(
                slipway_data::checkpoints::bucket_restore::perform(&self.0, job, progress),
            ),
            Some(Kind::MirrorSync) => {
                Box::pin(slipway_git::mirror::job::perform(&self.0, job, progress))
            }
            None => Box::pin(std::future::ready(Err(JobError::Failed(format!(
                "this version of the platform does not know jobs of kind {}",
                job.kind
            ))))),
        }
    }
}

/// Runs the jobs of this process for as long as it is polled ([`slipway_jobs::Runner::run`]).
pub async fn run(state: AppState) {
    let runner = state.jobs().clone();
    let db = state.db().clone();
    runner.run(db, Arc::new(Kinds(state))).await;
}
