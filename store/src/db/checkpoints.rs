//! The rows a channel's checkpoints leave, shared by both of its legs: SQL snapshots (`postgres_snapshots`) and
//! object-store markers (`blob_snapshots`) are taken once per occasion and kept by the same plan windows, so both
//! tables are read here the same way.

use slipway_crds::plans::Plan;
use sqlx::PgPool;
use uuid::Uuid;

/// Why a checkpoint was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Before a deploy's new container started.
    PreDeploy,
    /// Once a day.
    Nightly,
}

impl Kind {
    /// The name rows and the API use.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::PreDeploy => "pre_deploy",
            Kind::Nightly => "nightly",
        }
    }
}

/// What a checkpoint is taken for.
#[derive(Debug, Clone)]
pub struct Occasion {
    /// Why.
    pub kind: Kind,
    /// The deploy, for `pre_deploy`.
    pub deploy_id: Option<Uuid>,
    /// The commit running now.
    pub git_sha: Option<String>,
}

/// The row of `table` this occasion already has: the deploy's, or today's nightly. SQL snapshots and object-store
/// markers (`table`: `postgres_snapshots` or `blob_snapshots`) are taken once per occasion alike.
pub async fn occasion_row<T>(
    table: &'static str,
    db: &PgPool,
    channel_id: Uuid,
    occasion: &Occasion,
) -> sqlx::Result<Option<T>>
where
    T: for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow> + Send + Unpin,
{
    match (occasion.kind, occasion.deploy_id) {
        (Kind::PreDeploy, Some(deploy_id)) => {
            let query = format!("SELECT * FROM {table} WHERE deploy_id = $1");
            sqlx::query_as(sqlx::AssertSqlSafe(query))
                .bind(deploy_id)
                .fetch_optional(db)
                .await
        }
        (Kind::PreDeploy, None) => Ok(None),
        (Kind::Nightly, _) => {
            let query = format!(
                "SELECT * FROM {table} WHERE channel_id = $1 AND kind = 'nightly' \
                 AND taken_on = (now() AT TIME ZONE 'UTC')::date"
            );
            sqlx::query_as(sqlx::AssertSqlSafe(query))
                .bind(channel_id)
                .fetch_optional(db)
                .await
        }
    }
}

/// The ids of `table`'s rows of a channel its plan no longer keeps: `pre_deploy` past the newest
/// `deploy_snapshot_keep`, `nightly` older than `snapshot_retention_days` except the newest. SQL snapshots and
/// object-store markers (`table`: `postgres_snapshots` or `blob_snapshots`) are kept by these same windows.
pub async fn retention_expired(
    table: &'static str,
    db: &PgPool,
    channel_id: Uuid,
    plan: &Plan,
) -> sqlx::Result<Vec<Uuid>> {
    let query = format!(
        "(SELECT id FROM {table} WHERE channel_id = $1 AND kind = 'pre_deploy' \
           ORDER BY created_at DESC, id OFFSET $2) \
         UNION ALL \
         (SELECT id FROM {table} WHERE channel_id = $1 AND kind = 'nightly' \
           AND created_at < now() - make_interval(days => $3) \
           AND id <> (SELECT id FROM {table} WHERE channel_id = $1 AND kind = 'nightly' \
                      ORDER BY created_at DESC, id LIMIT 1))"
    );
    sqlx::query_scalar(sqlx::AssertSqlSafe(query))
        .bind(channel_id)
        .bind(i64::from(plan.deploy_snapshot_keep))
        .bind(i32::try_from(plan.snapshot_retention_days).unwrap_or(i32::MAX))
        .fetch_all(db)
        .await
}
