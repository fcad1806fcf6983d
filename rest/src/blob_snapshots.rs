//! A channel's bucket checkpoints: the list of its markers, the bucket as of a checkpoint as a `tar.gz` (and a
//! token that downloads just that), and a copy-forward restore. Download and restore name the checkpoint by its SQL
//! snapshot id (the id clients already hold); the marker aligned with it is the object-store leg
//! ([`slipway_blob::checkpoints`]).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::blob::{BlobStatus, configured, probe, status_of};
use super::downloads::{self, DownloadToken, Grant};
use super::extract::{Json, Path};
use super::snapshots::{require_idle, require_restorable, restore_as_job};
use slipway_auth::scopes;
use slipway_blob::bucket::Bucket;
use slipway_blob::checkpoints::{self, Marker};
use slipway_core::access::{self, Action, VisibleApp};
use slipway_core::caller::Caller;
use slipway_core::error::{ApiError, ErrorEnvelope};
use slipway_core::state::AppState;
use slipway_jobs;

/// The routes of this module.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_blob_snapshots))
        .routes(routes!(download_blob_snapshot))
        .routes(routes!(blob_download_token))
        .routes(routes!(restore_blob))
}

/// An object-store snapshot row (a checkpoint's marker).
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BlobSnapshotRow {
    /// The marker's id.
    pub snapshot_id: Uuid,
    /// The deploy a `pre_deploy` marker was taken for; null on a nightly row.
    pub deploy_id: Option<Uuid>,
    /// `pre_deploy` or `nightly`.
    pub kind: String,
    /// The checkpoint instant: objects as of then.
    pub snapshot_ts: DateTime<Utc>,
    /// When the marker was recorded.
    pub created_at: DateTime<Utc>,
    /// The SQL snapshot of the same checkpoint (the id download and restore take); null when the two did not
    /// align. It may name a row that no longer exists.
    pub pg_snapshot_id: Option<Uuid>,
    /// Objects in the checkpoint.
    pub object_count: i64,
    /// Their bytes.
    pub total_bytes: i64,
}

impl From<Marker> for BlobSnapshotRow {
    fn from(m: Marker) -> Self {
        Self {
            snapshot_id: m.id,
            deploy_id: m.deploy_id,
            kind: m.kind,
            snapshot_ts: m.snapshot_ts,
            created_at: m.created_at,
            pg_snapshot_id: m.pg_snapshot_id,
            object_count: m.object_count,
            total_bytes: m.total_bytes,
        }
    }
}

/// Body of a bucket restore.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct BlobRestoreRequest {
    /// Must equal the channel's name.
    pub confirm_channel_name: String,
    /// The SQL snapshot id of the checkpoint (its `aligned_blob` is true).
    pub snapshot_id: Uuid,
}

/// The marker of the checkpoint whose SQL snapshot is `snapshot_id`: 404 `snapshot_not_found` when the channel
/// has no such checkpoint (or it was pruned), 409 `no_aligned_blob_snapshot` when it has no object-store leg.
async fn marker_of(
    state: &AppState,
    channel_id: Uuid,
    snapshot_id: Uuid,
) -> Result<Marker, ApiError> {
    if let Some(marker) = checkpoints::aligned_with(state.db(), channel_id, snapshot_id).await? {
        return Ok(marker);
    }
    match slipway_postgres::snapshots::by_id(state.db(), channel_id, snapshot_id).await? {
        Some(_) => Err(ApiError::NoAlignedBlobSnapshot(format!(
            "checkpoint {snapshot_id} has no object-store leg (the bucket was not ready or could not be listed then)"
        ))),
        None => Err(ApiError::Missing(
            "snapshot_not_found",
            format!(
                "the channel has no checkpoint {snapshot_id} (or it is past its plan's retention)"
            ),
        )),
    }
}

/// The channel's bucket through the gateway, probed like the status route: 503 `blob_unavailable` without object
/// storage, a store, or an answer for it, before a download sends its first byte or a restore writes.
async fn bucket_of(state: &AppState, channel_id: Uuid) -> Result<Bucket, ApiError> {
    let access = configured(state)?;
    let store = slipway_blob::store::by_channel(state.db(), channel_id)
        .await?
        .ok_or_else(|| ApiError::BlobUnavailable("the channel's bucket is not recorded".into()))?;
    probe(state, access, &store, true).await?;
    access
        .bucket(state.keyring(), &store)
        .map_err(ApiError::Internal)
}

/// Path of a checkpoint's bucket download.
fn download_path(app_id: Uuid, channel_id: Uuid, snapshot_id: Uuid) -> String {
    format!("/apps/{app_id}/channels/{channel_id}/blob/snapshots/{snapshot_id}/download")
}

/// The checks both download routes make: the caller's role, the scope, downloads on, the checkpoint.
async fn downloadable(
    state: &AppState,
    caller: &Caller,
    (app_id, channel_id, snapshot_id): (Uuid, Uuid, Uuid),
) -> Result<(VisibleApp, Marker), ApiError> {
    let app = access::authorize(state, caller, app_id, Action::DownloadData).await?;
    caller.require_scope(scopes::BLOBS_READ)?;
    downloads::require_enabled(state, "bucket checkpoints")?;
    access::channel_of(state, &app, channel_id)?;
    let marker = marker_of(state, channel_id, snapshot_id).await?;
    Ok((app, marker))
}

/// 409 `conflict` when the checkpoint is past a download limit.
fn within_limits(state: &AppState, marker: &Marker) -> Result<(), ApiError> {
    let limits = state.limits().blob_download;
    let age = Utc::now() - marker.snapshot_ts;
    if age > chrono::Duration::days(i64::from(limits.max_age_days)) {
        return Err(ApiError::Conflict(format!(
            "the checkpoint is older than {} days, the download limit; read the files with an S3 client instead",
            limits.max_age_days
        )));
    }
    if u64::try_from(marker.object_count).unwrap_or(0) > limits.max_files {
        return Err(ApiError::Conflict(format!(
            "the checkpoint holds {} objects, more than the download limit of {}; read them with an S3 client instead",
            marker.object_count, limits.max_files
        )));
    }
    if u64::try_from(marker.total_bytes).unwrap_or(0) > limits.max_bytes {
        return Err(ApiError::Conflict(format!(
            "the checkpoint holds {} bytes, more than the download limit of {}; read them with an S3 client instead",
            marker.total_bytes, limits.max_bytes
        )));
    }
    Ok(())
}

/// List a channel's object-store snapshots (checkpoint markers), newest first.
#[utoipa::path(get, path = "/apps/{app_id}/channels/{channel_id}/blob/snapshots", tag = "blob", security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id"), ("channel_id" = Uuid, Path, description = "Channel id")),
    responses((status = 200, body = Vec<BlobSnapshotRow>), (status = 401, body = ErrorEnvelope), (status = 404, body = ErrorEnvelope)))]
async fn list_blob_snapshots(
    State(state): State<AppState>,
    caller: Caller,
    Path((app_id, channel_id)): Path<(Uuid, Uuid)>,
) -> Result<Json<Vec<BlobSnapshotRow>>, ApiError> {
    let app = access::authorize(&state, &caller, app_id, Action::Read).await?;
    access::channel_of(&state, &app, channel_id)?;
    let markers = checkpoints::list(state.db(), channel_id).await?;
    Ok(Json(
        markers.into_iter().map(BlobSnapshotRow::from).collect(),
    ))
}

/// Download the channel's bucket as of a checkpoint: a streamed `tar.gz` of every object current then;
/// audit-logged. `snapshot_id` is the checkpoint's SQL snapshot id.
#[utoipa::path(get, path = "/apps/{app_id}/channels/{channel_id}/blob/snapshots/{snapshot_id}/download", tag = "blob",
    security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id"), ("channel_id" = Uuid, Path, description = "Channel id"),
           ("snapshot_id" = Uuid, Path, description = "The checkpoint's SQL snapshot id")),
    responses((status = 200, description = "the objects as of the checkpoint", content_type = "application/gzip", body = Vec<u8>),
              (status = 401, body = ErrorEnvelope), (status = 403, body = ErrorEnvelope, description = "download_disabled, scope_denied"),
              (status = 404, body = ErrorEnvelope, description = "not_found, snapshot_not_found"),
              (status = 409, body = ErrorEnvelope, description = "no_aligned_blob_snapshot; conflict (past the age, file-count or byte limit)"),
              (status = 503, body = ErrorEnvelope)))]
async fn download_blob_snapshot(
    State(state): State<AppState>,
    caller: Caller,
    Path(ids): Path<(Uuid, Uuid, Uuid)>,
) -> Result<Response, ApiError> {
    let (_, channel_id, snapshot_id) = ids;
    let (app, marker) = downloadable(&state, &caller, ids).await?;
    within_limits(&state, &marker)?;
    let bucket = bucket_of(&state, channel_id).await?;
    slipway_store::db::audit::record(
        state.db(),
        &caller,
        Some(app.id),
        "blob.snapshot.download",
        serde_json::json!({"channel_id": channel_id, "snapshot_id": snapshot_id, "marker_id": marker.id}),
    )
    .await?;
    let filename = format!(
        "{}-{}-{}.tar.gz",
        bucket.name,
        marker.kind,
        marker.snapshot_ts.format("%Y%m%dT%H%M%SZ")
    );
    downloads::attachment(
        slipway_blob::tarball::tar_gz(bucket, state.db().clone(), marker.id, marker.snapshot_ts),
        "application/gzip",
        &filename,
    )
}

/// Mint a token that downloads this one bucket checkpoint: `blobs:read` only, good for an hour (or until the
/// caller's token expires, if sooner) and for nothing else; the plaintext is shown once.
#[utoipa::path(post, path = "/apps/{app_id}/channels/{channel_id}/blob/snapshots/{snapshot_id}/download-token", tag = "blob",
    security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id"), ("channel_id" = Uuid, Path, description = "Channel id"),
           ("snapshot_id" = Uuid, Path, description = "The checkpoint's SQL snapshot id")),
    responses((status = 201, body = DownloadToken), (status = 401, body = ErrorEnvelope), (status = 403, body = ErrorEnvelope),
              (status = 404, body = ErrorEnvelope), (status = 409, body = ErrorEnvelope, description = "no_aligned_blob_snapshot")))]
async fn blob_download_token(
    State(state): State<AppState>,
    caller: Caller,
    Path(ids): Path<(Uuid, Uuid, Uuid)>,
) -> Result<(StatusCode, Json<DownloadToken>), ApiError> {
    let (app_id, channel_id, snapshot_id) = ids;
    let (app, marker) = downloadable(&state, &caller, ids).await?;
    let token = downloads::mint(
        &state,
        Grant {
            app_id: app.id,
            scope: scopes::BLOBS_READ,
            path: download_path(app_id, channel_id, snapshot_id),
            label: format!("download of bucket checkpoint {snapshot_id}"),
            audit_action: "blob.snapshot.download_token",
            audit_details: serde_json::json!({"channel_id": channel_id, "snapshot_id": snapshot_id, "marker_id": marker.id}),
            caller: &caller,
        },
    )
    .await?;
    Ok((StatusCode::CREATED, Json(token)))
}

/// Restore the channel's bucket to a checkpoint by copying forward: each key's checkpoint version is written again
/// as its newest, keys made later get a delete marker, and no version is removed; audit-logged. The restore runs
/// as a job of the platform: the call waits for it for as long as it takes (no request timeout applies), and a
/// client that goes away does not stop it. A second restore, or one while the channel's checkpoint runs, answers
/// 409 `channel_busy`.
#[utoipa::path(post, path = "/apps/{app_id}/channels/{channel_id}/blob/restore", tag = "blob", security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id"), ("channel_id" = Uuid, Path, description = "Channel id")),
    request_body = BlobRestoreRequest,
    responses((status = 200, body = BlobStatus), (status = 400, body = ErrorEnvelope, description = "invalid_confirmation"),
              (status = 401, body = ErrorEnvelope), (status = 403, body = ErrorEnvelope, description = "scope_denied (blob:*: the spec states no scope for this route; rolling a bucket back is a blob:* act, so a narrow credential cannot), permission_denied or prod_restore_blocked"),
              (status = 404, body = ErrorEnvelope, description = "not_found, snapshot_not_found (also when versions the checkpoint recorded were deleted from the bucket since; nothing is changed then)"),
              (status = 409, body = ErrorEnvelope, description = "channel_busy, no_aligned_blob_snapshot"),
              (status = 503, body = ErrorEnvelope, description = "blob_unavailable (the restore stopped; asking again finishes it)")))]
async fn restore_blob(
    State(state): State<AppState>,
    caller: Caller,
    Path((app_id, channel_id)): Path<(Uuid, Uuid)>,
    Json(request): Json<BlobRestoreRequest>,
) -> Result<Json<BlobStatus>, ApiError> {
    caller.require_scope(scopes::BLOB)?;
    let app = access::authorize(&state, &caller, app_id, Action::ReplaceData).await?;
    let channel = access::channel_of(&state, &app, channel_id)?;
    if request.confirm_channel_name != channel.channel_name() {
        return Err(ApiError::InvalidConfirmation(format!(
            "confirm_channel_name must be the channel's name, {}",
            channel.channel_name()
        )));
    }
    require_restorable(&state, &app, &channel, channel_id).await?;
    marker_of(&state, channel_id, request.snapshot_id).await?;
    require_idle(&state, &app, &channel).await?;
    bucket_of(&state, channel_id).await?;
    let params = slipway_data::checkpoints::bucket_restore::Params {
        app_id,
        channel_id,
        snapshot_id: request.snapshot_id,
        actor: slipway_store::db::audit::Actor::from(&caller),
    };
    let job = restore_as_job(
        &state,
        &slipway_data::checkpoints::bucket_restore::job(&params),
    )
    .await?;
    if job.state != slipway_jobs::state::SUCCEEDED {
        marker_of(&state, channel_id, request.snapshot_id).await?;
        return Err(ApiError::BlobUnavailable(job.error.unwrap_or_else(|| {
            "the restore stopped; no version was removed, and asking again finishes it".into()
        })));
    }
    if let Some(refused) = job.result_field("refused").and_then(|r| r.as_str()) {
        return Err(ApiError::Missing("snapshot_not_found", refused.to_owned()));
    }
    Ok(Json(status_of(&state, &app, &channel, channel_id).await?))
}
