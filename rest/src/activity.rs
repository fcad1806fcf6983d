//! `GET /apps/{app_id}/activity`: the app's journal of audit-logged actions (secret reveals, SQL reset, dump and
//! restore, object-store restores and credential reads, downloads), newest first, readable by every member. The
//! spec records these events and shows no route to read them; this is that route, paged by an opaque cursor.

use axum::extract::State;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::extract::{Json, Path, Query};
use super::paging::{PageQuery, next_cursor};
use slipway_auth::scopes;
use slipway_core::access::{self, Action};
use slipway_core::caller::Caller;
use slipway_core::error::{ApiError, ErrorEnvelope};
use slipway_core::state::AppState;

/// The routes of this module.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list_activity))
}

/// One journal entry.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ActivityEvent {
    /// When it happened.
    pub at: DateTime<Utc>,
    /// Who did it; null once their account is gone.
    pub actor: Option<String>,
    /// What was done, e.g. `env.reveal`, `postgres.restore`, `blob.credentials`.
    pub action: String,
    /// Its details (the channel, snapshot or key concerned).
    #[schema(value_type = Object)]
    pub detail: serde_json::Value,
}

/// `GET /apps/{app_id}/activity` response.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ActivityPage {
    /// Newest first.
    pub events: Vec<ActivityEvent>,
    /// Pass as `cursor` for the next page; null on the last.
    pub next_cursor: Option<String>,
}

/// The app's journal of audit-logged actions, newest first (any member; `stats:read`).
#[utoipa::path(get, path = "/apps/{app_id}/activity", tag = "apps", security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id"), PageQuery),
    responses((status = 200, body = ActivityPage), (status = 400, body = ErrorEnvelope), (status = 401, body = ErrorEnvelope),
              (status = 403, body = ErrorEnvelope, description = "scope_denied (stats:read)"), (status = 404, body = ErrorEnvelope)))]
async fn list_activity(
    State(state): State<AppState>,
    caller: Caller,
    Path(app_id): Path<Uuid>,
    Query(page): Query<PageQuery>,
) -> Result<Json<ActivityPage>, ApiError> {
    caller.require_scope(scopes::STATS_READ)?;
    let app = access::authorize(&state, &caller, app_id, Action::Read).await?;
    let limit = page.limit()?;
    let rows = slipway_store::db::audit::journal(state.db(), app.id, page.after()?, limit).await?;
    let next_cursor = next_cursor(rows.len(), limit, rows.last().map(|r| r.id));
    let events = rows
        .into_iter()
        .map(|r| ActivityEvent {
            at: r.at,
            actor: r.actor,
            action: r.action,
            detail: r.detail,
        })
        .collect();
    Ok(Json(ActivityPage {
        events,
        next_cursor,
    }))
}
