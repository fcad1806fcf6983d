//! `POST /apps/{app_id}/channels/{channel_id}/runtime/log`: a channel's container output, kept per container
//! generation by the operator's archive, with an optional command run on it in a network-less sandbox
//! ([`slipway_data::runtime_logs`]).

use axum::extract::State;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::extract::{Json, Path};
use slipway_auth::scopes;
use slipway_core::access::{self, Action};
use slipway_core::caller::Caller;
use slipway_core::error::{ApiError, ErrorEnvelope};
use slipway_core::state::AppState;
use slipway_data::runtime_logs::{self, RuntimeLog, RuntimeLogRequest};

/// The routes of this module.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(runtime_log))
}

/// Read a channel's runtime log: the container generation's status facts, and with `command` that command's output
/// run on `app.log` in a network-less sandbox (30 s limit, 256 KiB output cap). An account may have 2 commands
/// running at once; a third answers 429 with Retry-After.
#[utoipa::path(post, path = "/apps/{app_id}/channels/{channel_id}/runtime/log", tag = "deploys", security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id"), ("channel_id" = Uuid, Path, description = "Channel id")),
    request_body = RuntimeLogRequest,
    responses((status = 200, body = RuntimeLog),
              (status = 400, body = ErrorEnvelope, description = "command longer than 4096 characters, or a malformed body"),
              (status = 401, body = ErrorEnvelope), (status = 403, body = ErrorEnvelope),
              (status = 404, body = ErrorEnvelope, description = "app or channel not found, or nothing readable yet (no such container generation)"),
              (status = 503, body = ErrorEnvelope, description = "service_unavailable: no sandbox could run the command (busy, not started, or its isolation not proven); retry later")))]
async fn runtime_log(
    State(state): State<AppState>,
    caller: Caller,
    Path((app_id, channel_id)): Path<(Uuid, Uuid)>,
    Json(request): Json<RuntimeLogRequest>,
) -> Result<Json<RuntimeLog>, ApiError> {
    caller.require_scope(scopes::DEPLOY)?;
    let app = access::authorize(&state, &caller, app_id, Action::Read).await?;
    access::channel_of(&state, &app, channel_id)?;
    Ok(Json(
        runtime_logs::read(&state, caller.user_id, channel_id, request).await?,
    ))
}
