//! `GET /apps/{app_id}/channels/{channel_id}/code/download`: the files of the commit a channel serves (or the one
//! a snapshot recorded, the code leg of a checkpoint), as a tar stream (`git::archive`). Every download is
//! recorded in the audit journal before the first byte goes out.

use axum::extract::State;
use axum::response::Response;
use serde::Deserialize;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::downloads;
use super::extract::{Path, Query};
use slipway_auth::scopes;
use slipway_core::access::{self, Action};
use slipway_core::caller::Caller;
use slipway_core::error::{ApiError, ErrorEnvelope};
use slipway_core::state::AppState;
use slipway_repository::store;

/// The routes of this module.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(download_code))
}

/// Query of the download route.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DownloadQuery {
    /// Serve the commit a snapshot recorded instead of the channel's current one.
    pub snapshot_id: Option<Uuid>,
}

/// Download the code of the channel's current commit (or of a snapshot's) as a tar archive.
#[utoipa::path(get, path = "/apps/{app_id}/channels/{channel_id}/code/download", tag = "channels", security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id"), ("channel_id" = Uuid, Path, description = "Channel id"), DownloadQuery),
    responses((status = 200, content_type = "application/x-tar", body = Vec<u8>, description = "tar stream, sent as an attachment"),
              (status = 401, body = ErrorEnvelope), (status = 403, body = ErrorEnvelope, description = "scope_denied; download_disabled"),
              (status = 404, body = ErrorEnvelope, description = "not_found (app, channel, or no deployed commit yet); snapshot_not_found; snapshot_sha_unknown (the snapshot recorded no commit); snapshot_code_gone (its commit was force-pushed away and garbage-collected)")))]
async fn download_code(
    State(state): State<AppState>,
    caller: Caller,
    Path((app_id, channel_id)): Path<(Uuid, Uuid)>,
    Query(query): Query<DownloadQuery>,
) -> Result<Response, ApiError> {
    caller.require_scope(scopes::REPO)?;
    let app = access::authorize(&state, &caller, app_id, Action::Read).await?;
    let channel = access::channel_of(&state, &app, channel_id)?;
    let channel_name = channel.channel_name().to_owned();
    downloads::require_enabled(&state, "code")?;
    let (sha, gone_code) = match query.snapshot_id {
        Some(snapshot_id) => (
            snapshot_commit(&state, channel_id, snapshot_id).await?,
            "snapshot_code_gone",
        ),
        None => (current_commit(&channel)?, "not_found"),
    };
    let repo = app.ready_repo(&state).await?;
    let check = (repo.clone(), sha.clone());
    let present = tokio::task::spawn_blocking(move || -> anyhow::Result<bool> {
        let repo = store::open(&check.0)?;
        let id = gix::ObjectId::from_hex(check.1.as_bytes())?;
        Ok(store::commit_id(&repo, id)?.is_some())
    })
    .await
    .map_err(|e| ApiError::Internal(e.into()))??;
    if !present {
        return Err(ApiError::Missing(
            gone_code,
            format!(
                "commit {sha} of channel {channel_name} is no longer in the repository (a force-push replaced it and \
                 it was garbage-collected)"
            ),
        ));
    }
    slipway_store::db::audit::record(
        state.db(),
        &caller,
        Some(app_id),
        "code.download",
        serde_json::json!({"channel_id": channel_id, "sha": sha, "snapshot_id": query.snapshot_id}),
    )
    .await?;
    let body = slipway_repository::archive::tar_body(&repo, &sha).map_err(ApiError::Internal)?;
    let filename = format!("{}-{channel_name}-{}.tar", app.name, &sha[..7]);
    downloads::attachment(body, "application/x-tar", &filename)
}

/// The commit the channel serves: 404 `not_found` when it has never been deployed.
fn current_commit(channel: &slipway_crds::Channel) -> Result<String, ApiError> {
    channel
        .status
        .as_ref()
        .and_then(|s| s.current_sha.clone())
        .ok_or_else(|| {
            ApiError::Missing(
                "not_found",
                format!(
                    "channel {} has not been deployed yet, so it has no current commit to download; use the tree \
                     route for a branch",
                    channel.channel_name()
                ),
            )
        })
}

/// The commit snapshot `snapshot_id` of the channel recorded: 404 `snapshot_not_found` when the channel has no
/// such snapshot, `snapshot_sha_unknown` when it recorded none (the channel had not run a commit yet).
async fn snapshot_commit(
    state: &AppState,
    channel_id: Uuid,
    snapshot_id: Uuid,
) -> Result<String, ApiError> {
    let snapshot = slipway_postgres::snapshots::by_id(state.db(), channel_id, snapshot_id)
        .await?
        .ok_or_else(|| {
            ApiError::Missing(
                "snapshot_not_found",
                format!("snapshot {snapshot_id} not found for this channel"),
            )
        })?;
    snapshot.git_sha.ok_or_else(|| {
        ApiError::Missing(
            "snapshot_sha_unknown",
            format!(
                "snapshot {snapshot_id} recorded no commit (the channel had not been deployed when it was taken)"
            ),
        )
    })
}
