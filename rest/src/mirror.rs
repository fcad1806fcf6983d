//! `/apps/{app_id}/github`: mirroring an external git repository over SSH. Connect and disconnect need the owner
//! and are protected actions; a sync needs an admin; the status (`GET /apps/{app_id}/github`) any role. The logic
//! is in [`slipway_git::mirror::service`].

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
use slipway_core::state::AppState;
use slipway_git::mirror::service::{self, Connected, MirrorStatus};

/// The routes of this module.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(mirror_status, disconnect))
        .routes(routes!(connect))
        .routes(routes!(sync))
}

/// `POST /apps/{app_id}/github/connect` request.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct ConnectRequest {
    /// SSH URL of the hosted repository: `ssh://[user@]host[:port]/path` or `[user@]host:path` (user `git` when
    /// none is given).
    pub remote_url: String,
}

/// The mirror status of an app (any role).
#[utoipa::path(get, path = "/apps/{app_id}/github", tag = "mirror", security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id")),
    responses((status = 200, body = MirrorStatus), (status = 401, body = ErrorEnvelope), (status = 404, body = ErrorEnvelope)))]
async fn mirror_status(
    State(state): State<AppState>,
    caller: Caller,
    Path(app_id): Path<Uuid>,
) -> Result<Json<MirrorStatus>, ApiError> {
    let app = access::authorize(&state, &caller, app_id, Action::Read).await?;
    Ok(Json(service::status(&state, &app).await?))
}

/// Connect an external repository: generates a read-only Ed25519 deploy key and answers its public line; fetches
/// nothing (owner only; a protected action).
#[utoipa::path(post, path = "/apps/{app_id}/github/connect", tag = "mirror", security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id")), request_body = ConnectRequest,
    responses((status = 200, body = Connected), (status = 400, body = ErrorEnvelope, description = "not an SSH URL"),
              (status = 401, body = ErrorEnvelope), (status = 403, body = ErrorEnvelope, description = "scope_denied or protected_action"),
              (status = 404, body = ErrorEnvelope, description = "no such app, or the caller is not its owner"), (status = 409, body = ErrorEnvelope, description = "already connected")))]
async fn connect(
    State(state): State<AppState>,
    caller: Caller,
    Path(app_id): Path<Uuid>,
    Json(req): Json<ConnectRequest>,
) -> Result<Json<Connected>, ApiError> {
    caller.require_scope(scopes::REPO)?;
    let app = access::authorize(&state, &caller, app_id, Action::ConnectMirror).await?;
    access::require_protected(&state, &caller, &app, "connecting a git mirror").await?;
    Ok(Json(service::connect(&state, &app, &req.remote_url).await?))
}

/// Fetch from the external repository now; answers the mirror status with the outcome (admin). The sync runs as a
/// job of the platform, behind any sync of the app already running: the call waits for it for as long as it takes
/// (each sync is bounded by the platform's sync time limit, 10 minutes by default), and a client that goes away
/// does not stop it.
#[utoipa::path(post, path = "/apps/{app_id}/github/sync", tag = "mirror", security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id")),
    responses((status = 200, body = MirrorStatus, description = "the status after the sync; a failed sync has last_sync_status failed and last_sync_error"),
              (status = 401, body = ErrorEnvelope), (status = 403, body = ErrorEnvelope),
              (status = 404, body = ErrorEnvelope, description = "no such app, none connected, or the caller is not an admin"),
              (status = 503, body = ErrorEnvelope, description = "service_unavailable: the sync could not run (its process stopped twice)")))]
async fn sync(
    State(state): State<AppState>,
    caller: Caller,
    Path(app_id): Path<Uuid>,
) -> Result<Json<MirrorStatus>, ApiError> {
    caller.require_scope(scopes::REPO)?;
    let app = access::authorize(&state, &caller, app_id, Action::SyncMirror).await?;
    Ok(Json(service::sync(&state, &app).await?))
}

/// Disconnect the external repository: the deploy key is discarded; the repository and deploys stay, and commits
/// are taken again (owner only; a protected action).
#[utoipa::path(delete, path = "/apps/{app_id}/github", tag = "mirror", security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id")),
    responses((status = 204), (status = 401, body = ErrorEnvelope), (status = 403, body = ErrorEnvelope),
              (status = 404, body = ErrorEnvelope, description = "no such app, none connected, or the caller is not its owner")))]
async fn disconnect(
    State(state): State<AppState>,
    caller: Caller,
    Path(app_id): Path<Uuid>,
) -> Result<StatusCode, ApiError> {
    caller.require_scope(scopes::REPO)?;
    let app = access::authorize(&state, &caller, app_id, Action::ConnectMirror).await?;
    access::require_protected(&state, &caller, &app, "disconnecting a git mirror").await?;
    service::disconnect(&state, &app).await?;
    Ok(StatusCode::NO_CONTENT)
}
