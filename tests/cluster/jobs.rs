//! Jobs against the real platform database: runners claim with a lease, one job of a scope runs at a time across
//! runners, and a runner that stops mid-job (its loop dropped, as when its process dies) leaves the job to another
//! runner, which takes it over or, with no attempt left, fails it. The work is the test's own; the rows, the claims
//! and the leases are the platform's.

// Fixture helpers panic on a malformed response: in a test that is the failure to report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Result;
use futures::future::BoxFuture;
use serde_json::{Value, json};
use slipway_jobs::runner::wait_at_most;
use slipway_jobs::store::{self, Admission, Enqueued};
use slipway_jobs::{Job, JobError, Kind, NewJob, Progress, Runner, Timing, Work, state};
use sqlx::PgPool;
use tokio::task::JoinHandle;
use uuid::Uuid;

const WITHIN: Duration = Duration::from_secs(30);

/// Short leases, so that a takeover happens within a test.
const QUICK: Timing = Timing {
    lease: Duration::from_secs(1),
    heartbeat: Duration::from_millis(200),
    poll: Duration::from_millis(200),
    answer_within: Duration::from_millis(500),
};

/// The test's work: on a job's first attempt it reports 40 of 100 bytes and, when `hang_first` is set, never ends
/// (its process is about to die); otherwise it runs `pause` and succeeds. It counts the attempts it saw and how
/// many jobs of each scope ran at once.
#[derive(Default)]
struct TestWork {
    hang_first: bool,
    pause: Duration,
    started: AtomicU32,
    running: Mutex<HashMap<String, u32>>,
    most_per_scope: AtomicU32,
    most_in_all: AtomicU32,
}

impl Work for TestWork {
    fn perform<'a>(
        &'a self,
        job: &'a Job,
        progress: &'a Progress,
    ) -> BoxFuture<'a, Result<Value, JobError>> {
        Box::pin(async move {
            self.started.fetch_add(1, Ordering::SeqCst);
            if self.hang_first && job.attempts == 1 {
                progress.set_total(100);
                progress.set_done(40);
                return futures::future::pending().await;
            }
            {
                let mut running = self.running.lock().unwrap();
                let here = running.entry(job.scope.clone()).or_default();
                *here += 1;
                self.most_per_scope.fetch_max(*here, Ordering::SeqCst);
                let in_all = running.values().sum();
                self.most_in_all.fetch_max(in_all, Ordering::SeqCst);
            }
            tokio::time::sleep(self.pause).await;
            *self.running.lock().unwrap().get_mut(&job.scope).unwrap() -= 1;
            Ok(json!({ "attempt": job.attempts }))
        })
    }
}

async fn database() -> Result<(slipway_testkit::postgres::TestDatabase, PgPool)> {
    let db = support::migrated_database().await?;
    let pool = slipway_store::db::connect(db.url()).await?;
    Ok((db, pool))
}

fn start(db: &PgPool, work: &Arc<TestWork>) -> (Arc<Runner>, JoinHandle<()>) {
    let runner = Arc::new(Runner::new(QUICK));
    let task = tokio::spawn(runner.clone().run(db.clone(), work.clone()));
    (runner, task)
}

async fn queue(db: &PgPool, scope: &str, max_attempts: i32) -> Job {
    let mut new = NewJob::new(Kind::Checkpoint, scope.to_owned());
    new.max_attempts = max_attempts;
    match store::enqueue(db, &new, Admission::Queue).await.unwrap() {
        Enqueued::New(job) => job,
        other => panic!("expected a new job, got {other:?}"),
    }
}

/// Waits until the job runs under `runner` with its first heartbeat's progress recorded.
async fn until_running_under(db: &PgPool, id: Uuid, runner: &Runner) -> Job {
    let deadline = tokio::time::Instant::now() + WITHIN;
    loop {
        let job = store::by_id(db, id).await.unwrap().unwrap();
        if job.state == state::RUNNING
            && job.runner.as_deref() == Some(runner.id())
            && job.bytes_done == 40
        {
            return job;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the job never ran under {}: {job:?}",
            runner.id()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Stops a runner as its process dying would: its loop and the jobs it runs are dropped, nothing is recorded.
async fn kill(task: JoinHandle<()>) {
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
}

#[tokio::test]
async fn a_job_whose_runner_stops_is_taken_over_by_another_and_finished() -> Result<()> {
    let (_db, db) = database().await?;
    let work = Arc::new(TestWork {
        hang_first: true,
        ..Default::default()
    });
    let (first, first_task) = start(&db, &work);
    let job = queue(&db, "channel:takeover", 3).await;
    first.wake();
    let running = until_running_under(&db, job.id, &first).await;
    assert_eq!(
        running.bytes_total,
        Some(100),
        "the heartbeat records progress"
    );
    kill(first_task).await;

    let (second, _second_task) = start(&db, &work);
    let done = wait_at_most(&db, job.id, Some(WITHIN)).await?.unwrap();
    assert_eq!(done.state, state::SUCCEEDED, "{done:?}");
    assert_eq!(done.runner.as_deref(), Some(second.id()));
    assert_eq!(done.attempts, 2, "the takeover is the second attempt");
    assert_eq!(done.result.unwrap().0, json!({ "attempt": 2 }));
    assert_eq!(work.started.load(Ordering::SeqCst), 2);
    let succeeded = r#"slipway_jobs_total{kind="checkpoint",outcome="succeeded"} 1"#;
    let (first, second) = (metrics_of(&first), metrics_of(&second));
    assert!(second.contains(succeeded), "{second}");
    assert!(
        first.contains(r#"slipway_jobs_total{kind="checkpoint",outcome="succeeded"} 0"#)
            && !first.contains("slipway_job_duration_seconds_count{"),
        "a runner that died recorded nothing: {first}"
    );
    Ok(())
}

/// What `runner` counted, as `/metrics` shows it.
fn metrics_of(runner: &Runner) -> String {
    let mut registry = prometheus_client::registry::Registry::default();
    runner.metrics().register(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    text
}

#[tokio::test]
async fn a_job_out_of_attempts_whose_runner_stops_fails_without_running_again() -> Result<()> {
    let (_db, db) = database().await?;
    let work = Arc::new(TestWork {
        hang_first: true,
        ..Default::default()
    });
    let (first, first_task) = start(&db, &work);
    let job = queue(&db, "channel:given-up", 1).await;
    first.wake();
    until_running_under(&db, job.id, &first).await;
    kill(first_task).await;

    let (_second, _second_task) = start(&db, &work);
    let done = wait_at_most(&db, job.id, Some(WITHIN)).await?.unwrap();
    assert_eq!(done.state, state::FAILED, "{done:?}");
    let error = done.error.unwrap();
    assert!(error.contains("interrupted 1 times"), "{error}");
    assert_eq!(
        work.started.load(Ordering::SeqCst),
        1,
        "the work was not started again"
    );
    Ok(())
}

#[tokio::test]
async fn a_scope_runs_one_job_at_a_time_across_runners_and_scopes_run_side_by_side() -> Result<()> {
    let (_db, db) = database().await?;
    let work = Arc::new(TestWork {
        pause: Duration::from_millis(300),
        ..Default::default()
    });
    let mut jobs = Vec::new();
    for _ in 0..3 {
        jobs.push(queue(&db, "channel:one", 3).await);
    }
    jobs.push(queue(&db, "channel:two", 3).await);
    let (_a, _a_task) = start(&db, &work);
    let (_b, _b_task) = start(&db, &work);
    let mut finished = Vec::new();
    for job in &jobs {
        let done = wait_at_most(&db, job.id, Some(WITHIN)).await?.unwrap();
        assert_eq!(done.state, state::SUCCEEDED, "{done:?}");
        finished.push(done);
    }
    assert_eq!(work.most_per_scope.load(Ordering::SeqCst), 1);
    assert_eq!(
        work.most_in_all.load(Ordering::SeqCst),
        2,
        "the other scope's job ran beside the first"
    );
    let ends: Vec<_> = finished[..3].iter().map(|j| j.finished_at).collect();
    assert!(
        ends.windows(2).all(|w| w[0] <= w[1]),
        "a scope's jobs ran in order: {ends:?}"
    );
    Ok(())
}

#[tokio::test]
async fn an_exclusive_job_is_refused_while_its_scope_has_one_and_a_subject_is_asked_once()
-> Result<()> {
    let (_db, db) = database().await?;
    let first = queue(&db, "channel:busy", 3).await;
    let second = NewJob::new(Kind::Checkpoint, "channel:busy".to_owned());
    match store::enqueue(&db, &second, Admission::Exclusive).await? {
        Enqueued::Busy(job) => assert_eq!(job.id, first.id),
        other => panic!("expected the scope to be busy, got {other:?}"),
    }
    let mut for_deploy = NewJob::new(Kind::Checkpoint, "channel:other".to_owned());
    for_deploy.subject = Some("deploy:1".to_owned());
    let Enqueued::New(asked) = store::enqueue(&db, &for_deploy, Admission::Queue).await? else {
        panic!("the first ask made no job");
    };
    match store::enqueue(&db, &for_deploy, Admission::Queue).await? {
        Enqueued::Existing(job) => assert_eq!(job.id, asked.id),
        other => panic!("expected the subject's job, got {other:?}"),
    }
    Ok(())
}

#[tokio::test]
async fn an_exclusive_job_waits_behind_the_nightly_checkpoint_and_runs_after_it() -> Result<()> {
    let (_db, db) = database().await?;
    let nightly = NewJob::new(Kind::NightlyCheckpoint, "channel:night".to_owned());
    let Enqueued::New(nightly) = store::enqueue(&db, &nightly, Admission::Queue).await? else {
        panic!("the nightly made no job");
    };
    let running = store::claim(&db, "runner-a", QUICK.lease).await?.unwrap();
    assert_eq!(running.id, nightly.id);
    // A restore asked now is not refused: it waits, queued, until the nightly has finished.
    let restore = NewJob::new(Kind::SqlRestore, "channel:night".to_owned());
    let Enqueued::New(restore) = store::enqueue(&db, &restore, Admission::Exclusive).await? else {
        panic!("a restore during the nightly was refused");
    };
    assert!(
        store::claim(&db, "runner-b", QUICK.lease).await?.is_none(),
        "nothing else of the scope runs beside the nightly"
    );
    assert!(store::succeed(&db, nightly.id, "runner-a", 0, &json!({})).await?);
    let next = store::claim(&db, "runner-b", QUICK.lease).await?.unwrap();
    assert_eq!(next.id, restore.id);
    // While the restore runs, another exclusive ask is refused, as a deploy's checkpoint would be.
    let again = NewJob::new(Kind::SqlRestore, "channel:night".to_owned());
    match store::enqueue(&db, &again, Admission::Exclusive).await? {
        Enqueued::Busy(job) => assert_eq!(job.id, restore.id),
        other => panic!("expected the scope to be busy, got {other:?}"),
    }
    Ok(())
}

#[tokio::test]
async fn a_runner_leaves_a_kind_it_does_not_know_to_a_newer_version() -> Result<()> {
    let (_db, pool) = database().await?;
    // A job a newer version of the platform queued, of a kind this one has never heard of.
    let newer: Uuid = sqlx::query_scalar(
        "INSERT INTO jobs (id, kind, scope, params, state, max_attempts) \
         VALUES (gen_random_uuid(), 'from_a_newer_version', 'channel:newer', 'null', 'queued', 3) RETURNING id",
    )
    .fetch_one(&pool)
    .await?;
    assert!(store::claim(&pool, "older", QUICK.lease).await?.is_none());
    let known = queue(&pool, "channel:known", 3).await;
    let claimed = store::claim(&pool, "older", QUICK.lease).await?.unwrap();
    assert_eq!(claimed.id, known.id);
    let left = store::by_id(&pool, newer).await?.unwrap();
    assert_eq!((left.state.as_str(), left.attempts), (state::QUEUED, 0));
    Ok(())
}
