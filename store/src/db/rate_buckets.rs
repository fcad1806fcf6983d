//! Budgets shared by every API replica: a GCRA bucket per scope and key in the platform database, so that a limit
//! such as "5 registrations an hour from one address" holds however many replicas the requests are spread over,
//! and across restarts. Each spend is one statement on the database's clock.
//!
//! A bucket of `n` a `period` is its theoretical arrival time `tat`: every spend moves it `period / n` on from
//! `max(tat, now)`, and a spend is refused when that would put it more than `period` ahead of now. So `n` may come
//! at once, and then one every `period / n`, as `governor`'s per-process buckets behave. Budgets hit on every
//! request (a token's request rate) stay in process: a database write per request would cost more than it guards.

use std::time::Duration;

use sqlx::PgPool;

/// Takes one from the bucket `key` of `scope`, which holds `n` per `period`. `Ok(Err(wait))` is a spent budget
/// and how long until the next one fits.
pub async fn spend(
    db: &PgPool,
    scope: &str,
    key: &str,
    n: u32,
    period: Duration,
) -> sqlx::Result<Result<(), Duration>> {
    let period_secs = period.as_secs_f64();
    let step_secs = period_secs / f64::from(n.max(1));
    // One statement: the spend, and for a refused one the bucket as it stood, from which the wait follows (the
    // next spend fits once now has come within `period` of `tat + step`).
    let (spent, wait): (bool, Option<f64>) = sqlx::query_as(
        "WITH spent AS ( \
             INSERT INTO rate_buckets AS b (scope, key, tat) \
             VALUES ($1, $2, now() + make_interval(secs => $3)) \
             ON CONFLICT (scope, key) DO UPDATE \
                 SET tat = greatest(b.tat, now()) + make_interval(secs => $3) \
                 WHERE greatest(b.tat, now()) + make_interval(secs => $3) \
                       <= now() + make_interval(secs => $4) \
             RETURNING 1 \
         ) \
         SELECT EXISTS (SELECT 1 FROM spent), \
                (SELECT extract(epoch FROM tat + make_interval(secs => $3) - make_interval(secs => $4) - now()) \
                 FROM rate_buckets WHERE scope = $1 AND key = $2)::float8",
    )
    .bind(scope)
    .bind(key)
    .bind(step_secs)
    .bind(period_secs)
    .fetch_one(db)
    .await?;
    if spent {
        return Ok(Ok(()));
    }
    Ok(Err(Duration::from_secs_f64(
        wait.unwrap_or(0.0).clamp(0.001, period_secs),
    )))
}

/// Deletes the buckets that are full again (the same as no row); returns how many.
pub async fn forget_full(db: &PgPool) -> sqlx::Result<u64> {
    Ok(sqlx::query("DELETE FROM rate_buckets WHERE tat < now()")
        .execute(db)
        .await?
        .rows_affected())
}
