//! `/apps/{app_id}/members`: who shares an app and with what role. Every role may read the list; only the owner
//! may change it, and membership writes are protected actions. The logic is in [`slipway_core::sharing`].

use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::extract::{Json, Path};
use slipway_auth::scopes;
use slipway_core::access::{self, Action};
use slipway_core::caller::Caller;
use slipway_core::error::{ApiError, ErrorEnvelope};
use slipway_core::sharing::{self, MemberList, MemberView};
use slipway_core::state::AppState;

/// The routes of this module.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_members))
        .routes(routes!(put_member, delete_member))
}

/// `PUT /apps/{app_id}/members/{username}` request.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct PutMember {
    /// `admin` or `member`.
    pub role: String,
}

/// List the owner and the members of an app.
#[utoipa::path(get, path = "/apps/{app_id}/members", tag = "members", security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id")),
    responses((status = 200, body = MemberList), (status = 401, body = ErrorEnvelope), (status = 404, body = ErrorEnvelope)))]
async fn list_members(
    State(state): State<AppState>,
    caller: Caller,
    Path(app_id): Path<Uuid>,
) -> Result<Json<MemberList>, ApiError> {
    let app = access::authorize(&state, &caller, app_id, Action::Read).await?;
    Ok(Json(sharing::list(&state, &app).await?))
}

/// Share an app with an account, or change its role (owner only; a protected action).
#[utoipa::path(put, path = "/apps/{app_id}/members/{username}", tag = "members", security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id"), ("username" = String, Path, description = "The account to share with")),
    request_body = PutMember,
    responses((status = 200, body = MemberView), (status = 400, body = ErrorEnvelope, description = "role is not admin or member, or the account owns the app"),
              (status = 401, body = ErrorEnvelope), (status = 403, body = ErrorEnvelope, description = "scope_denied, permission_denied (not the owner) or protected_action"),
              (status = 404, body = ErrorEnvelope, description = "no such app (or not visible), or no such account")))]
async fn put_member(
    State(state): State<AppState>,
    caller: Caller,
    Path((app_id, username)): Path<(Uuid, String)>,
    Json(req): Json<PutMember>,
) -> Result<Json<MemberView>, ApiError> {
    caller.require_scope(scopes::REPO)?;
    let app = access::authorize(&state, &caller, app_id, Action::ManageMembers).await?;
    access::require_protected(&state, &caller, &app, "changing members").await?;
    Ok(Json(
        sharing::put(&state, &app, &username, &req.role).await?,
    ))
}

/// Stop sharing an app with an account (owner only; a protected action).
#[utoipa::path(delete, path = "/apps/{app_id}/members/{username}", tag = "members", security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id"), ("username" = String, Path, description = "The member to remove")),
    responses((status = 204), (status = 401, body = ErrorEnvelope), (status = 403, body = ErrorEnvelope),
              (status = 404, body = ErrorEnvelope, description = "no such app (or not visible), or not a member")))]
async fn delete_member(
    State(state): State<AppState>,
    caller: Caller,
    Path((app_id, username)): Path<(Uuid, String)>,
) -> Result<StatusCode, ApiError> {
    caller.require_scope(scopes::REPO)?;
    let app = access::authorize(&state, &caller, app_id, Action::ManageMembers).await?;
    access::require_protected(&state, &caller, &app, "changing members").await?;
    sharing::remove(&state, &app, &username).await?;
    Ok(StatusCode::NO_CONTENT)
}
