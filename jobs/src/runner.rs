//! The runner of one API process: it claims jobs as they are asked for (a wake-up) and on a timer (jobs queued
//! behind their scope, left by a process that died, queued while this one was full), keeps each claimed job's lease
//! with a heartbeat, and records how each ended. The work runs in a task of the runner's loop, never in the request
//! that asked for it; stopping the loop stops its jobs as a process that dies does, and leaves their rows to be
//! taken over.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::Value;
use sqlx::PgPool;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use uuid::Uuid;

use super::metrics::{JobMetrics, Outcome};
use super::{Job, store};

/// How long leases last and how often the runner looks.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// How long a claim holds without a heartbeat: a process silent this long is taken for dead.
    pub lease: Duration,
    /// How often a running job's lease is renewed (well inside `lease`, so a slow write or two does not lose it).
    pub heartbeat: Duration,
    /// How often the runner looks for jobs it was not woken for.
    pub poll: Duration,
    /// How long a route that starts a job waits for it inside one request before answering that it runs.
    pub answer_within: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            lease: Duration::from_secs(30),
            heartbeat: Duration::from_secs(5),
            poll: Duration::from_secs(5),
            answer_within: Duration::from_secs(20),
        }
    }
}

/// Jobs one process runs at once (each may hold a `pg_dump` and a connection of its own).
pub const AT_ONCE: usize = 6;
/// How long finished jobs are kept.
pub const KEEP_FINISHED: Duration = Duration::from_secs(30 * 24 * 3600);
/// How long a job put back because the platform was busy waits before it is claimed again.
const BUSY_RETRY: Duration = Duration::from_secs(5);

/// Why a job's work did not succeed.
#[derive(Debug)]
pub enum JobError {
    /// The work failed; the job fails with these words for the person who asked.
    Failed(String),
    /// The platform was busy (no database connection to be had), not the work: the job is put back in the queue.
    Busy(anyhow::Error),
}

/// What the runner runs: each kind's work, given the job's row and where to count its progress. The work must be
/// safe to start again from its row (a takeover does) and leave the data unchanged when it is dropped half-way.
pub trait Work: Send + Sync + 'static {
    /// Does `job`'s work; its result, recorded on the row.
    fn perform<'a>(
        &'a self,
        job: &'a Job,
        progress: &'a Progress,
    ) -> BoxFuture<'a, Result<Value, JobError>>;
}

/// The runner of this process.
#[derive(Debug)]
pub struct Runner {
    /// Its name on the rows it claims: the pod's name and a random part (a restarted pod is a new runner).
    id: String,
    timing: Timing,
    wake: Notify,
    metrics: JobMetrics,
}

impl Runner {
    /// A runner named after this process.
    pub fn new(timing: Timing) -> Self {
        let host = std::env::var("POD_NAME")
            .or_else(|_| std::env::var("HOSTNAME"))
            .unwrap_or_else(|_| "slipway".to_owned());
        Self {
            id: format!("{host}/{}", &Uuid::new_v4().simple().to_string()[..8]),
            timing,
            wake: Notify::new(),
            metrics: JobMetrics::default(),
        }
    }

    /// Its name on the rows it claims.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// What it counts of the jobs it ran.
    pub fn metrics(&self) -> &JobMetrics {
        &self.metrics
    }

    /// Its timing.
    pub fn timing(&self) -> Timing {
        self.timing
    }

    /// Tells the loop a job was just queued, so that it claims it now rather than at its next poll.
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// Claims and runs jobs for as long as it is polled: at once, when woken, and every [`Timing::poll`]. Also
    /// fails the jobs interrupted too often and forgets old finished ones. Dropping it drops the jobs it runs,
    /// unrecorded, as a process that dies would: their leases lapse and another runner takes them over.
    pub async fn run(self: Arc<Self>, db: PgPool, work: Arc<dyn Work>) {
        let mut running = JoinSet::new();
        let mut last_forget = None::<tokio::time::Instant>;
        loop {
            if let Err(e) = self.claim_while_free(&db, &work, &mut running).await {
                tracing::warn!(error = %e, "polling for jobs failed; trying again");
            }
            if last_forget.is_none_or(|at| at.elapsed() > Duration::from_secs(3600)) {
                last_forget = Some(tokio::time::Instant::now());
                match store::forget_finished(&db, KEEP_FINISHED).await {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(forgotten = n, "old finished jobs forgotten"),
                    Err(e) => tracing::warn!(error = %e, "could not forget old jobs"),
                }
            }
            tokio::select! {
                () = self.wake.notified() => {}
                () = tokio::time::sleep(self.timing.poll) => {}
                Some(_) = running.join_next(), if !running.is_empty() => {}
            }
        }
    }

    /// Fails the jobs out of attempts, then claims jobs while this process has room, each run in a task of
    /// `running`.
    async fn claim_while_free(
        self: &Arc<Self>,
        db: &PgPool,
        work: &Arc<dyn Work>,
        running: &mut JoinSet<()>,
    ) -> sqlx::Result<()> {
        for job in store::fail_exhausted(db).await? {
            tracing::warn!(job_id = %job.id, kind = %job.kind, attempts = job.attempts, "job given up after its processes stopped");
        }
        while running.len() < AT_ONCE {
            let Some(job) = store::claim(db, &self.id, self.timing.lease).await? else {
                break;
            };
            let (runner, db, work) = (self.clone(), db.clone(), work.clone());
            running.spawn(async move { runner.run_one(&db, work.as_ref(), job).await });
        }
        Ok(())
    }

    /// Runs a claimed job to its end: the kind's work beside the heartbeat; whichever ends first decides. A
    /// heartbeat that finds the job no longer ours, or that cannot reach the database for a whole lease (another
    /// runner may have taken it by then), stops the work: dropping it kills its programs and closes its
    /// connections.
    async fn run_one(&self, db: &PgPool, work: &dyn Work, job: Job) {
        if job.attempts > 1 {
            tracing::warn!(job_id = %job.id, kind = %job.kind, attempt = job.attempts, "taking over a job whose process stopped");
        }
        let progress = Progress::default();
        let started = tokio::time::Instant::now();
        let observe = |outcome| {
            self.metrics
                .observe(job.kind(), outcome, started.elapsed(), progress.done());
        };
        let outcome = tokio::select! {
            outcome = work.perform(&job, &progress) => outcome,
            () = self.keep_lease(db, &job, &progress) => {
                tracing::warn!(job_id = %job.id, kind = %job.kind, "the job is no longer this process's; its work stopped");
                observe(Outcome::Lost);
                return;
            }
        };
        observe(match &outcome {
            Ok(_) => Outcome::Succeeded,
            Err(JobError::Failed(_)) => Outcome::Failed,
            Err(JobError::Busy(_)) => Outcome::Busy,
        });
        let recorded = match &outcome {
            Ok(result) => store::succeed(db, job.id, &self.id, progress.done(), result).await,
            Err(JobError::Failed(reason)) => {
                tracing::info!(job_id = %job.id, kind = %job.kind, %reason, "job failed");
                store::fail(db, job.id, &self.id, reason).await
            }
            Err(JobError::Busy(e)) => {
                slipway_store::db::count_pool_timeout();
                tracing::info!(job_id = %job.id, kind = %job.kind, error = %e, "the platform was busy; the job waits a moment");
                let released = store::release(db, job.id, &self.id, BUSY_RETRY).await;
                self.wake();
                released
            }
        };
        match recorded {
            Ok(true) => {}
            Ok(false) => {
                tracing::warn!(job_id = %job.id, kind = %job.kind, "the job was taken over or cancelled before its outcome was recorded")
            }
            Err(e) => {
                tracing::warn!(job_id = %job.id, error = %e, "could not record a job's outcome; it is taken over once its lease lapses")
            }
        }
    }

    /// Renews the job's lease every [`Timing::heartbeat`] with its progress; returns when the job is lost.
    async fn keep_lease(&self, db: &PgPool, job: &Job, progress: &Progress) {
        let mut last_renewed = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(self.timing.heartbeat).await;
            let renewed = store::heartbeat(
                db,
                job.id,
                &self.id,
                self.timing.lease,
                progress.done(),
                progress.total(),
            )
            .await;
            match renewed {
                Ok(true) => last_renewed = tokio::time::Instant::now(),
                Ok(false) => return,
                Err(e) => {
                    tracing::warn!(job_id = %job.id, error = %e, "could not renew a job's lease");
                    if last_renewed.elapsed() >= self.timing.lease {
                        return;
                    }
                }
            }
        }
    }
}

/// Bytes a job has done and in all, which its heartbeat records.
#[derive(Debug)]
pub struct Progress {
    done: AtomicU64,
    total: AtomicU64,
}

/// `total` while the size is unknown.
const UNKNOWN: u64 = u64::MAX;

impl Default for Progress {
    fn default() -> Self {
        Self {
            done: AtomicU64::new(0),
            total: AtomicU64::new(UNKNOWN),
        }
    }
}

impl Progress {
    /// Adds `bytes` done.
    pub fn add(&self, bytes: u64) {
        self.done.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Sets the bytes done.
    pub fn set_done(&self, bytes: u64) {
        self.done.store(bytes, Ordering::Relaxed);
    }

    /// Sets the bytes in all.
    pub fn set_total(&self, bytes: u64) {
        self.total.store(bytes.min(UNKNOWN - 1), Ordering::Relaxed);
    }

    /// Bytes done.
    pub fn done(&self) -> u64 {
        self.done.load(Ordering::Relaxed)
    }

    /// Bytes in all, once known.
    pub fn total(&self) -> Option<u64> {
        Some(self.total.load(Ordering::Relaxed)).filter(|t| *t != UNKNOWN)
    }
}

/// Waits until job `id` has finished, for at most `limit` (`None`: for as long as it takes), reading its row (so
/// it does not matter which process runs it); the job as it is then, `None` when the row is gone.
pub async fn wait_at_most(
    db: &PgPool,
    id: Uuid,
    limit: Option<Duration>,
) -> sqlx::Result<Option<Job>> {
    let started = tokio::time::Instant::now();
    let mut pause = Duration::from_millis(50);
    loop {
        let Some(job) = store::by_id(db, id).await? else {
            return Ok(None);
        };
        if job.is_finished() || limit.is_some_and(|limit| started.elapsed() >= limit) {
            return Ok(Some(job));
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(1));
    }
}

/// Asks for `new` as `admission` allows ([`store::enqueue`]), wakes `runner` to claim it, and waits for it to
/// finish for as long as it takes (the row is read, so any process may run it, and a caller that goes away stops
/// nothing): the job as it ended (`None` when its row is gone), or `Err` with the scope's unfinished job when an
/// exclusive ask is refused.
pub async fn ask_and_wait(
    db: &PgPool,
    runner: &Runner,
    new: &super::NewJob,
    admission: store::Admission,
) -> sqlx::Result<Result<Option<Job>, Job>> {
    let job = match store::enqueue(db, new, admission).await? {
        store::Enqueued::New(job) | store::Enqueued::Existing(job) => job,
        store::Enqueued::Busy(job) if admission == store::Admission::Queue => job,
        store::Enqueued::Busy(job) => return Ok(Err(job)),
    };
    runner.wake();
    Ok(Ok(wait_at_most(db, job.id, None).await?))
}
