//! The `jobs` rows and their guarded moves. Every move a runner makes names the runner (`runner = $me AND state =
//! 'running'`), so a runner whose job was taken over or cancelled can never move it again; the one-running-per-scope
//! index makes two claims of one scope impossible whatever the timing.

use std::time::Duration;

use serde_json::Value;
use sqlx::PgPool;
use uuid::Uuid;

use super::{Job, Kind, NewJob, state};

/// How a job is asked for when its scope or subject has one already.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Behind whatever its scope runs (it waits `queued`).
    Queue,
    /// Only when nothing of its scope is unfinished but background work (a restore while a deploy's checkpoint
    /// runs is refused; one asked while the nightly checkpoint runs waits behind it).
    Exclusive,
}

/// What asking for a job came to.
#[derive(Debug)]
pub enum Enqueued {
    /// A new job.
    New(Job),
    /// The job of the same subject.
    Existing(Job),
    /// Refused: the scope's unfinished job.
    Busy(Job),
}

/// Records `new` as `admission` allows. The scope's check and the insert run under a transaction-scoped lock on
/// the scope, so two callers cannot both find it idle.
pub async fn enqueue(db: &PgPool, new: &NewJob, admission: Admission) -> sqlx::Result<Enqueued> {
    let mut tx = locked_scope(db, &new.scope).await?;
    if let Some(subject) = &new.subject
        && let Some(job) = by_subject(&mut *tx, new.kind, subject).await?
    {
        return Ok(Enqueued::Existing(job));
    }
    if admission == Admission::Exclusive
        && let Some(job) = unfinished_in(&mut *tx, &new.scope).await?
    {
        return Ok(Enqueued::Busy(job));
    }
    let job = insert(&mut tx, new, state::QUEUED, None).await?;
    tx.commit().await?;
    Ok(Enqueued::New(job))
}

/// Records `new` as already done with `result` (work that had nothing to do, whose answer must be the same when
/// asked again): the row, and whether it is new. With a subject that has a job already, that job.
pub async fn record_done(db: &PgPool, new: &NewJob, result: Value) -> sqlx::Result<(Job, bool)> {
    let mut tx = locked_scope(db, &new.scope).await?;
    if let Some(subject) = &new.subject
        && let Some(job) = by_subject(&mut *tx, new.kind, subject).await?
    {
        return Ok((job, false));
    }
    let job = insert(&mut tx, new, state::SUCCEEDED, Some(result)).await?;
    tx.commit().await?;
    Ok((job, true))
}

/// Seed of the scope locks' hash (apart from other advisory locks on the same text).
const SCOPE_LOCK_SEED: i64 = 0x6a6f_6273;

/// A transaction holding `scope`'s lock until it ends, so that what it reads of the scope stays true until it
/// writes.
async fn locked_scope<'c>(
    db: &PgPool,
    scope: &str,
) -> sqlx::Result<sqlx::Transaction<'c, sqlx::Postgres>> {
    let mut tx = db.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, $2))")
        .bind(scope)
        .bind(SCOPE_LOCK_SEED)
        .execute(&mut *tx)
        .await?;
    Ok(tx)
}

async fn insert(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    new: &NewJob,
    initial: &str,
    result: Option<Value>,
) -> sqlx::Result<Job> {
    sqlx::query_as(
        "INSERT INTO jobs (id, kind, scope, app_id, channel_id, subject, params, state, max_attempts, result, \
         finished_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, CASE WHEN $8 = 'succeeded' THEN now() END) \
         RETURNING *",
    )
    .bind(Uuid::new_v4())
    .bind(new.kind.as_str())
    .bind(&new.scope)
    .bind(new.app_id)
    .bind(new.channel_id)
    .bind(&new.subject)
    .bind(sqlx::types::Json(&new.params))
    .bind(initial)
    .bind(new.max_attempts)
    .bind(result.map(sqlx::types::Json))
    .fetch_one(&mut **tx)
    .await
}

/// The newest job of `kind` for `subject` (failed ones included).
pub async fn by_subject(
    db: impl sqlx::PgExecutor<'_>,
    kind: Kind,
    subject: &str,
) -> sqlx::Result<Option<Job>> {
    sqlx::query_as(
        "SELECT * FROM jobs WHERE kind = $1 AND subject = $2 ORDER BY created_at DESC, id LIMIT 1",
    )
    .bind(kind.as_str())
    .bind(subject)
    .fetch_optional(db)
    .await
}

/// The unfinished job of `scope` that someone asked for ([`Kind::is_background`] ones aside) and that runs, else
/// the oldest queued, if any.
pub async fn unfinished_in(
    db: impl sqlx::PgExecutor<'_>,
    scope: &str,
) -> sqlx::Result<Option<Job>> {
    let background: Vec<&str> = Kind::ALL
        .iter()
        .filter(|k| k.is_background())
        .map(|k| k.as_str())
        .collect();
    sqlx::query_as(
        "SELECT * FROM jobs WHERE scope = $1 AND state IN ('queued', 'running') AND kind <> ALL($2) \
         ORDER BY (state = 'running') DESC, created_at, id LIMIT 1",
    )
    .bind(scope)
    .bind(&background)
    .fetch_optional(db)
    .await
}

/// The job `id`.
pub async fn by_id(db: &PgPool, id: Uuid) -> sqlx::Result<Option<Job>> {
    sqlx::query_as("SELECT * FROM jobs WHERE id = $1")
        .bind(id)
        .fetch_optional(db)
        .await
}

/// Claims one runnable job for `runner` with a lease of `lease`: the oldest queued job that is first in its scope
/// with nothing of its scope running, or a running job whose lease lapsed with attempts left (its process died: a
/// takeover, one more attempt). Only jobs of [`Kind::ALL`] are claimed: during a rolling upgrade a replica of the
/// older version leaves a kind it does not know to the newer ones. `None` when there is none, or another runner
/// claimed the scope in the same instant.
pub async fn claim(db: &PgPool, runner: &str, lease: Duration) -> sqlx::Result<Option<Job>> {
    let known: Vec<&str> = Kind::ALL.iter().map(|k| k.as_str()).collect();
    let claimed = sqlx::query_as(
        "WITH candidate AS (
             SELECT j.id FROM jobs j
             WHERE j.kind = ANY($3) AND (
                   (j.state = 'queued' AND (j.lease_until IS NULL OR j.lease_until < now())
                    AND NOT EXISTS (SELECT 1 FROM jobs r WHERE r.scope = j.scope AND r.state = 'running')
                    AND NOT EXISTS (SELECT 1 FROM jobs o WHERE o.scope = j.scope AND o.state = 'queued'
                                    AND (o.created_at, o.id) < (j.created_at, j.id)))
                OR (j.state = 'running' AND j.lease_until < now() AND j.attempts < j.max_attempts))
             ORDER BY j.created_at, j.id
             LIMIT 1
             FOR UPDATE SKIP LOCKED)
         UPDATE jobs SET state = 'running', runner = $1, attempts = jobs.attempts + 1, heartbeat_at = now(),
             lease_until = now() + make_interval(secs => $2), started_at = coalesce(jobs.started_at, now())
         FROM candidate WHERE jobs.id = candidate.id
         RETURNING jobs.*",
    )
    .bind(runner)
    .bind(lease.as_secs_f64())
    .bind(&known)
    .fetch_optional(db)
    .await;
    match claimed {
        // Another runner made a job of this scope run between our look and our move.
        Err(sqlx::Error::Database(e)) if e.is_unique_violation() => Ok(None),
        other => other,
    }
}

/// Fails the running jobs whose lease lapsed and that have no attempt left; the jobs failed.
pub async fn fail_exhausted(db: &PgPool) -> sqlx::Result<Vec<Job>> {
    sqlx::query_as(
        "UPDATE jobs SET state = 'failed', finished_at = now(), runner = NULL,
             error = format('interrupted %s times (the process running it stopped each time); given up', attempts)
         WHERE state = 'running' AND lease_until < now() AND attempts >= max_attempts
         RETURNING *",
    )
    .fetch_all(db)
    .await
}

/// Renews `runner`'s lease on job `id` and records its progress; false when the job is no longer `runner`'s
/// (taken over, cancelled, finished): its work must stop.
pub async fn heartbeat(
    db: &PgPool,
    id: Uuid,
    runner: &str,
    lease: Duration,
    done: u64,
    total: Option<u64>,
) -> sqlx::Result<bool> {
    let renewed = sqlx::query(
        "UPDATE jobs SET heartbeat_at = now(), lease_until = now() + make_interval(secs => $3),
             bytes_done = $4, bytes_total = $5
         WHERE id = $1 AND runner = $2 AND state = 'running'",
    )
    .bind(id)
    .bind(runner)
    .bind(lease.as_secs_f64())
    .bind(i64::try_from(done).unwrap_or(i64::MAX))
    .bind(total.map(|t| i64::try_from(t).unwrap_or(i64::MAX)))
    .execute(db)
    .await?;
    Ok(renewed.rows_affected() == 1)
}

/// Records `handover` on `runner`'s job `id`, for whoever takes the job over should this process die; false when it
/// was no longer `runner`'s (its work must stop).
pub async fn hand_over(
    db: &PgPool,
    id: Uuid,
    runner: &str,
    handover: &Value,
) -> sqlx::Result<bool> {
    let recorded = sqlx::query(
        "UPDATE jobs SET handover = $3 WHERE id = $1 AND runner = $2 AND state = 'running'",
    )
    .bind(id)
    .bind(runner)
    .bind(sqlx::types::Json(handover))
    .execute(db)
    .await?;
    Ok(recorded.rows_affected() == 1)
}

/// `runner`'s job `id` succeeded with `result`; false when it was no longer `runner`'s.
pub async fn succeed(
    db: &PgPool,
    id: Uuid,
    runner: &str,
    done: u64,
    result: &Value,
) -> sqlx::Result<bool> {
    let moved = sqlx::query(
        "UPDATE jobs SET state = 'succeeded', finished_at = now(), result = $3, error = NULL,
             bytes_done = greatest(bytes_done, $4), lease_until = NULL
         WHERE id = $1 AND runner = $2 AND state = 'running'",
    )
    .bind(id)
    .bind(runner)
    .bind(sqlx::types::Json(result))
    .bind(i64::try_from(done).unwrap_or(i64::MAX))
    .execute(db)
    .await?;
    Ok(moved.rows_affected() == 1)
}

/// `runner`'s job `id` failed because of `error`; false when it was no longer `runner`'s.
pub async fn fail(db: &PgPool, id: Uuid, runner: &str, error: &str) -> sqlx::Result<bool> {
    let moved = sqlx::query(
        "UPDATE jobs SET state = 'failed', finished_at = now(), error = $3, lease_until = NULL
         WHERE id = $1 AND runner = $2 AND state = 'running'",
    )
    .bind(id)
    .bind(runner)
    .bind(error)
    .execute(db)
    .await?;
    Ok(moved.rows_affected() == 1)
}

/// Puts `runner`'s job `id` back in the queue, to be claimed again no sooner than `after` (the platform was busy,
/// not the work): its attempt is not counted.
pub async fn release(db: &PgPool, id: Uuid, runner: &str, after: Duration) -> sqlx::Result<bool> {
    let moved = sqlx::query(
        "UPDATE jobs SET state = 'queued', runner = NULL, attempts = greatest(attempts - 1, 0),
             lease_until = now() + make_interval(secs => $3)
         WHERE id = $1 AND runner = $2 AND state = 'running'",
    )
    .bind(id)
    .bind(runner)
    .bind(after.as_secs_f64())
    .execute(db)
    .await?;
    Ok(moved.rows_affected() == 1)
}

/// Fails job `id` if it is unfinished, whoever runs it (its runner stops at its next heartbeat); the job as it is
/// afterwards.
pub async fn cancel(db: &PgPool, id: Uuid, reason: &str) -> sqlx::Result<Option<Job>> {
    sqlx::query(
        "UPDATE jobs SET state = 'failed', finished_at = now(), error = $2, lease_until = NULL
         WHERE id = $1 AND state IN ('queued', 'running')",
    )
    .bind(id)
    .bind(reason)
    .execute(db)
    .await?;
    by_id(db, id).await
}

/// Forgets jobs that finished before `age` ago; how many.
pub async fn forget_finished(db: &PgPool, age: Duration) -> sqlx::Result<u64> {
    let done =
        sqlx::query("DELETE FROM jobs WHERE finished_at < now() - make_interval(secs => $1)")
            .bind(age.as_secs_f64())
            .execute(db)
            .await?;
    Ok(done.rows_affected())
}
