//! Bytes the edge sent per account and calendar month (UTC), added up from the edges' reports.

use sqlx::PgPool;

/// Adds `bytes` to each owner's current month.
pub async fn add(db: &PgPool, bytes: &[(String, i64)]) -> sqlx::Result<()> {
    let (owners, amounts): (Vec<&str>, Vec<i64>) =
        bytes.iter().map(|(o, b)| (o.as_str(), *b)).unzip();
    sqlx::query(
        "INSERT INTO bandwidth_usage (owner, month, bytes) \
         SELECT owner, date_trunc('month', now() AT TIME ZONE 'UTC')::date, bytes \
         FROM unnest($1::text[], $2::bigint[]) AS r(owner, bytes) \
         ON CONFLICT (owner, month) DO UPDATE SET bytes = bandwidth_usage.bytes + EXCLUDED.bytes",
    )
    .bind(owners)
    .bind(amounts)
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
