//! The audit journal: one row per audit-logged action, written before the action's result is returned.

use sqlx::PgPool;
use uuid::Uuid;

use crate::auth::Caller;

/// Records `action` by `caller`, optionally on an app, with details.
pub async fn record(
    db: &PgPool,
    caller: &Caller,
    app: Option<Uuid>,
    action: &str,
    detail: serde_json::Value,
) -> sqlx::Result<()> {
    sqlx::query("INSERT INTO audit_events (user_id, token_id, app_id, action, detail) VALUES ($1, $2, $3, $4, $5)")
        .bind(caller.user_id)
        .bind(caller.token_id)
        .bind(app)
        .bind(action)
        .bind(detail)
        .execute(db)
        .await?;
    Ok(())
}
