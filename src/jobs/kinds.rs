//! The work of each kind, for the API's runner: what a claimed job of a kind does, with the API's parts.

use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::Value;

use super::{Job, JobError, Kind, Progress, Work};
use crate::api::state::AppState;

/// Each kind's work with the API's parts.
struct Kinds(AppState);

impl Work for Kinds {
    fn perform<'a>(
        &'a self,
        job: &'a Job,
        progress: &'a Progress,
    ) -> BoxFuture<'a, Result<Value, JobError>> {
        Box::pin(async move {
            match job.kind() {
                Some(Kind::Checkpoint) => {
                    crate::checkpoints::pre_deploy::perform(&self.0, job, progress).await
                }
                None => Err(JobError::Failed(format!(
                    "this version of the platform does not know jobs of kind {}",
                    job.kind
                ))),
            }
        })
    }
}

/// Runs the jobs of this process for as long as it is polled ([`super::Runner::run`]).
pub async fn run(state: AppState) {
    let runner = state.jobs().clone();
    let db = state.db().clone();
    runner.run(db, Arc::new(Kinds(state))).await;
}
