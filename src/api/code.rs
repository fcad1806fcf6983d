//! `GET /apps/{app_id}/channels/{channel_id}/code/download`: the files of the commit a channel serves, as a tar
//! stream (`git::archive`). Every download is recorded in the audit journal before
//! the first byte goes out.

use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::Response;
use serde::Deserialize;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::access::{self, Action};
use super::error::{ApiError, ErrorEnvelope};
use super::extract::{Path, Query};
use super::state::AppState;
use crate::auth::{Caller, scopes};
use crate::git::store;

/// The routes of this module.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(download_code))
}

/// Query of the download route.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
pub struct DownloadQuery {
    /// Serve the commit a snapshot recorded instead of the channel's current one.
    pub snapshot_id: Option<Uuid>,
}

/// Download the code of the channel's current commit (or of a snapshot's) as a tar archive.
#[utoipa::path(get, path = "/apps/{app_id}/channels/{channel_id}/code/download", tag = "channels", security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id"), ("channel_id" = Uuid, Path, description = "Channel id"), DownloadQuery),
    responses((status = 200, content_type = "application/x-tar", body = Vec<u8>, description = "tar stream, sent as an attachment"),
              (status = 401, body = ErrorEnvelope), (status = 403, body = ErrorEnvelope, description = "scope_denied"),
              (status = 404, body = ErrorEnvelope, description = "not_found (app, channel, or no deployed commit yet); snapshot_not_found")))]
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
    if let Some(snapshot) = query.snapshot_id {
        // Snapshots are recorded once channel databases and object stores exist; none can be named yet.
        return Err(ApiError::Missing(
            "snapshot_not_found",
            format!("snapshot {snapshot} not found for this channel"),
        ));
    }
    let sha = channel
        .status
        .as_ref()
        .and_then(|s| s.current_sha.clone())
        .ok_or_else(|| {
            ApiError::Missing(
                "not_found",
                format!("channel {channel_name} has not been deployed yet, so it has no current commit to download; use the tree route for a branch"),
            )
        })?;
    let repo = state.repos().path(&app.owner, &app.name);
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
            "not_found",
            format!("commit {sha} of channel {channel_name} is no longer in the repository"),
        ));
    }
    crate::db::audit::record(
        state.db(),
        &caller,
        Some(app_id),
        "code.download",
        serde_json::json!({"channel_id": channel_id, "sha": sha}),
    )
    .await?;
    let body = crate::git::archive::tar_body(&repo, &sha).map_err(ApiError::Internal)?;
    let filename = format!("{}-{channel_name}-{}.tar", app.name, &sha[..7]);
    let mut res = Response::new(body);
    let headers = res.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-tar"),
    );
    headers.insert(
        header::CONTENT_DISPOSITION,
        HeaderValue::from_str(&format!("attachment; filename=\"{filename}\""))
            .map_err(|e| ApiError::Internal(e.into()))?,
    );
    Ok(res)
}
