//! Feedback: `POST/GET /feedback` (to the platform's operators; each person reads back their own) and
//! `POST/GET /apps/{app_id}/feedback` (about one app; its members read it). The spec names the MCP tools
//! (`submit_feedback`, `list_feedback`, `add_app_feedback`, `list_app_feedback`) and shows no route; these are them.

use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::extract::{Json, Path, Query};
use super::paging::{self, PageQuery, next_cursor};
use slipway_auth::scopes;
use slipway_core::access::{self, Action};
use slipway_core::caller::Caller;
use slipway_core::error::{ApiError, ErrorEnvelope};
use slipway_core::state::AppState;
use slipway_store::db::notes::{self, Feedback};

/// Longest feedback message, in characters.
pub const MAX_MESSAGE: usize = 4000;

/// The routes of this module.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(submit_feedback, list_feedback))
        .routes(routes!(add_app_feedback, list_app_feedback))
}

/// A feedback request.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct NewFeedback {
    /// What to say, 1 to 4000 characters.
    pub message: String,
}

/// A feedback message.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct FeedbackView {
    /// Its id.
    pub id: i64,
    /// Who wrote it; null once their account is gone.
    pub author: Option<String>,
    /// The text.
    pub message: String,
    /// When.
    pub created_at: DateTime<Utc>,
}

impl From<Feedback> for FeedbackView {
    fn from(f: Feedback) -> Self {
        FeedbackView {
            id: f.id,
            author: f.author,
            message: f.message,
            created_at: f.created_at,
        }
    }
}

/// A page of feedback.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct FeedbackPage {
    /// Newest first.
    pub feedback: Vec<FeedbackView>,
    /// Pass as `cursor` for the next page; null on the last.
    pub next_cursor: Option<String>,
}

fn page(rows: Vec<Feedback>, limit: i64) -> FeedbackPage {
    let next_cursor = next_cursor(rows.len(), limit, rows.last().map(|f| f.id));
    FeedbackPage {
        feedback: rows.into_iter().map(FeedbackView::from).collect(),
        next_cursor,
    }
}

/// Send feedback to the platform's operators.
#[utoipa::path(post, path = "/feedback", tag = "feedback", security(("bearer" = [])), request_body = NewFeedback,
    responses((status = 201, body = FeedbackView), (status = 400, body = ErrorEnvelope), (status = 401, body = ErrorEnvelope)))]
async fn submit_feedback(
    State(state): State<AppState>,
    caller: Caller,
    Json(req): Json<NewFeedback>,
) -> Result<(StatusCode, Json<FeedbackView>), ApiError> {
    let message = paging::text("message", &req.message, MAX_MESSAGE)?;
    let added = notes::add_feedback(state.db(), caller.user_id, None, message).await?;
    Ok((StatusCode::CREATED, Json(added.into())))
}

/// The feedback you sent to the platform, newest first.
#[utoipa::path(get, path = "/feedback", tag = "feedback", security(("bearer" = [])), params(PageQuery),
    responses((status = 200, body = FeedbackPage), (status = 400, body = ErrorEnvelope), (status = 401, body = ErrorEnvelope)))]
async fn list_feedback(
    State(state): State<AppState>,
    caller: Caller,
    Query(query): Query<PageQuery>,
) -> Result<Json<FeedbackPage>, ApiError> {
    let limit = query.limit()?;
    let rows = notes::platform_feedback(state.db(), caller.user_id, query.after()?, limit).await?;
    Ok(Json(page(rows, limit)))
}

/// Leave feedback on an app for its members (any member; `repo:*`).
#[utoipa::path(post, path = "/apps/{app_id}/feedback", tag = "feedback", security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id")), request_body = NewFeedback,
    responses((status = 201, body = FeedbackView), (status = 400, body = ErrorEnvelope), (status = 401, body = ErrorEnvelope),
              (status = 403, body = ErrorEnvelope), (status = 404, body = ErrorEnvelope)))]
async fn add_app_feedback(
    State(state): State<AppState>,
    caller: Caller,
    Path(app_id): Path<Uuid>,
    Json(req): Json<NewFeedback>,
) -> Result<(StatusCode, Json<FeedbackView>), ApiError> {
    caller.require_scope(scopes::REPO)?;
    let app = access::authorize(&state, &caller, app_id, Action::Write).await?;
    let message = paging::text("message", &req.message, MAX_MESSAGE)?;
    let added = notes::add_feedback(state.db(), caller.user_id, Some(app.id), message).await?;
    Ok((StatusCode::CREATED, Json(added.into())))
}

/// The feedback left on an app, newest first (any member).
#[utoipa::path(get, path = "/apps/{app_id}/feedback", tag = "feedback", security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id"), PageQuery),
    responses((status = 200, body = FeedbackPage), (status = 400, body = ErrorEnvelope), (status = 401, body = ErrorEnvelope),
              (status = 404, body = ErrorEnvelope)))]
async fn list_app_feedback(
    State(state): State<AppState>,
    caller: Caller,
    Path(app_id): Path<Uuid>,
    Query(query): Query<PageQuery>,
) -> Result<Json<FeedbackPage>, ApiError> {
    let app = access::authorize(&state, &caller, app_id, Action::Read).await?;
    let limit = query.limit()?;
    let rows = notes::app_feedback(state.db(), app.id, query.after()?, limit).await?;
    Ok(Json(page(rows, limit)))
}
