//! Bytes the edge sent per account, by calendar month and by day (UTC), added up from the edges' reports. The month
//! is what `GET /me/usage` reports; the days are its recent history, kept for [`DAYS_KEPT`] days.

use chrono::NaiveDate;
use sqlx::PgPool;

/// Days of history an account keeps; older days are dropped as its reports arrive.
pub const DAYS_KEPT: i32 = 90;

/// Adds `bytes` to each owner's current month and current day, in one statement: a report counts in both or in
/// neither. An owner named twice counts once with the sum.
pub async fn add(db: &PgPool, bytes: &[(String, i64)]) -> sqlx::Result<()> {
    let (owners, amounts): (Vec<&str>, Vec<i64>) =
        bytes.iter().map(|(o, b)| (o.as_str(), *b)).unzip();
    sqlx::query(
        "WITH reported AS ( \
             SELECT owner, sum(bytes)::bigint AS bytes, (now() AT TIME ZONE 'UTC')::date AS day \
             FROM unnest($1::text[], $2::bigint[]) AS r(owner, bytes) GROUP BY owner \
         ), months AS ( \
             INSERT INTO bandwidth_usage (owner, month, bytes) \
             SELECT owner, date_trunc('month', day)::date, bytes FROM reported \
             ON CONFLICT (owner, month) DO UPDATE SET bytes = bandwidth_usage.bytes + EXCLUDED.bytes \
         ), expired AS ( \
             DELETE FROM bandwidth_days AS d USING reported AS r \
             WHERE d.owner = r.owner AND d.day <= r.day - $3::int \
         ) \
         INSERT INTO bandwidth_days (owner, day, bytes) SELECT owner, day, bytes FROM reported \
         ON CONFLICT (owner, day) DO UPDATE SET bytes = bandwidth_days.bytes + EXCLUDED.bytes",
    )
    .bind(owners)
    .bind(amounts)
    .bind(DAYS_KEPT)
    .execute(db)
    .await?;
    Ok(())
}

/// Bytes sent for `owner` this calendar month.
pub async fn this_month(db: &PgPool, owner: &str) -> sqlx::Result<i64> {
    sqlx::query_scalar(
        "SELECT coalesce(sum(bytes), 0)::bigint FROM bandwidth_usage \
         WHERE owner = $1 AND month = date_trunc('month', now() AT TIME ZONE 'UTC')::date",
    )
    .bind(owner)
    .fetch_one(db)
    .await
}

/// Bytes sent for `owner` on each of the last `count` days (at most [`DAYS_KEPT`]), oldest first and today last;
/// a day with nothing sent is 0.
pub async fn last_days(
    db: &PgPool,
    owner: &str,
    count: i32,
) -> sqlx::Result<Vec<(NaiveDate, i64)>> {
    sqlx::query_as(
        "SELECT s.at::date, coalesce(b.bytes, 0)::bigint \
         FROM generate_series((now() AT TIME ZONE 'UTC')::date - ($2::int - 1), \
                              (now() AT TIME ZONE 'UTC')::date, interval '1 day') AS s(at) \
         LEFT JOIN bandwidth_days AS b ON b.owner = $1 AND b.day = s.at::date \
         ORDER BY s.at",
    )
    .bind(owner)
    .bind(count.clamp(1, DAYS_KEPT))
    .fetch_all(db)
    .await
}
