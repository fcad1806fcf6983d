//! The audit journal: one row per audit-logged action, written before the action's result is returned.

use sqlx::PgPool;
use uuid::Uuid;

/// Records `action` by `actor` (a request's caller, or the one a job works for), optionally on an app, with
/// details.
pub async fn record(
    db: &PgPool,
    actor: impl Into<Actor>,
    app: Option<Uuid>,
    action: &str,
    detail: serde_json::Value,
) -> sqlx::Result<()> {
    let actor = actor.into();
    sqlx::query("INSERT INTO audit_events (user_id, token_id, app_id, action, detail) VALUES ($1, $2, $3, $4, $5)")
        .bind(actor.user_id)
        .bind(actor.token_id)
        .bind(app)
        .bind(action)
        .bind(detail)
        .execute(db)
        .await?;
    Ok(())
}

/// Who an entry names: the account and the token it acted with.
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub struct Actor {
    /// The account.
    pub user_id: Uuid,
    /// The token.
    pub token_id: Uuid,
}

/// One entry of an app's journal, as members read it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct JournalEntry {
    /// Its position in the journal (the cursor of the next page).
    pub id: i64,
    /// When it was recorded.
    pub at: chrono::DateTime<chrono::Utc>,
    /// Who did it; `None` once their account is gone.
    pub actor: Option<String>,
    /// What was done (`env.reveal`, `postgres.restore`, ...).
    pub action: String,
    /// Its details.
    pub detail: serde_json::Value,
}

/// Up to `limit` entries of `app`'s journal older than entry `before` (newest first).
pub async fn journal(
    db: &PgPool,
    app: Uuid,
    before: Option<i64>,
    limit: i64,
) -> sqlx::Result<Vec<JournalEntry>> {
    sqlx::query_as(
        "SELECT e.id, e.at, u.username AS actor, e.action, e.detail FROM audit_events e \
         LEFT JOIN users u ON u.id = e.user_id \
         WHERE e.app_id = $1 AND ($2::bigint IS NULL OR e.id < $2) ORDER BY e.id DESC LIMIT $3",
    )
    .bind(app)
    .bind(before)
    .bind(limit)
    .fetch_all(db)
    .await
}
