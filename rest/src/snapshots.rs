//! A channel's SQL snapshots: the list, a download (a custom-format dump `pg_restore` reads), a short-lived token
//! that downloads one snapshot, and a restore in place. The files live in the snapshot archive (the object
//! store's system bucket); the rows in the platform database ([`slipway_postgres::snapshots`]).

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use chrono::{DateTime, Utc};
use kube::Api;
use kube::api::ListParams;
use serde::{Deserialize, Serialize};
use slipway_crds::Deploy;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::downloads::{self, DownloadToken, Grant};
use super::extract::{Json, Path};
use super::postgres::{DatabaseStatus, status_of};
use slipway_auth::scopes;
use slipway_core::access::{self, Action, VisibleApp};
use slipway_core::caller::Caller;
use slipway_core::channel_database::{configured, database_channel, ready_record, unavailable};
use slipway_core::error::{ApiError, ErrorEnvelope};
use slipway_core::state::AppState;
use slipway_jobs::{self, store::Admission};
use slipway_postgres::archive::Archive;
use slipway_postgres::snapshots::{self, Snapshot};

/// The scope a snapshot download needs.
pub const DOWNLOAD_SCOPE: &str = "snapshots:read";
/// The app variable that allows restoring prod.
pub const ALLOW_PROD_RESTORE: &str = "SVC_ALLOW_PROD_RESTORE";

/// The routes of this module.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_snapshots))
        .routes(routes!(download_snapshot))
        .routes(routes!(download_token))
        .routes(routes!(restore_snapshot))
}

/// An SQL snapshot row.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SnapshotRow {
    /// The snapshot's id.
    pub snapshot_id: Uuid,
    /// The deploy a `pre_deploy` snapshot was taken for; null on a nightly row.
    pub deploy_id: Option<Uuid>,
    /// `pre_deploy` or `nightly`.
    pub kind: String,
    /// The commit that ran when it was taken (on `pre_deploy`, the one before the deploy); null when none had.
    pub git_sha: Option<String>,
    /// When it was taken.
    pub created_at: DateTime<Utc>,
    /// Size of its dump file; null on a row with no file.
    pub size_bytes: Option<i64>,
    /// Whether an object-store marker of the same checkpoint exists (its bucket can be restored and downloaded
    /// with this id).
    pub aligned_blob: bool,
    /// Whether a restore can reach it (its file is stored).
    pub recoverable: Option<bool>,
}

impl From<Snapshot> for SnapshotRow {
    fn from(s: Snapshot) -> Self {
        Self {
            snapshot_id: s.id,
            deploy_id: s.deploy_id,
            kind: s.kind,
            git_sha: s.git_sha,
            created_at: s.created_at,
            size_bytes: s.size_bytes,
            aligned_blob: s.aligned_blob,
            recoverable: Some(s.object_key.is_some()),
        }
    }
}

/// Body of a restore.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct RestoreRequest {
    /// Must equal the channel's current `db_name`.
    pub confirm_db_name: String,
    /// The snapshot to restore.
    pub snapshot_id: Uuid,
}

/// The archive, or 503 `postgres_unavailable` (snapshots need object storage).
fn archive(state: &AppState) -> Result<&Archive, ApiError> {
    state.snapshot_archive().ok_or_else(|| {
        ApiError::PostgresUnavailable("no snapshot store is configured on this platform".into())
    })
}

/// A snapshot of the channel, or 404 `snapshot_not_found`.
async fn snapshot_of(state: &AppState, channel_id: Uuid, id: Uuid) -> Result<Snapshot, ApiError> {
    snapshots::by_id(state.db(), channel_id, id)
        .await?
        .ok_or_else(|| {
            ApiError::Missing(
                "snapshot_not_found",
                format!("the channel has no snapshot {id}"),
            )
        })
}

/// Path of a snapshot's download route.
fn download_path(app_id: Uuid, channel_id: Uuid, snapshot_id: Uuid) -> String {
    format!("/apps/{app_id}/channels/{channel_id}/postgres/snapshots/{snapshot_id}/download")
}

/// The checks of both download routes: the scope, downloads on, the caller's role, the snapshot.
async fn downloadable(
    state: &AppState,
    caller: &Caller,
    (app_id, channel_id, snapshot_id): (Uuid, Uuid, Uuid),
) -> Result<(VisibleApp, Snapshot), ApiError> {
    let app = access::authorize(state, caller, app_id, Action::DownloadData).await?;
    caller.require_scope(DOWNLOAD_SCOPE)?;
    downloads::require_enabled(state, "SQL snapshots")?;
    database_channel(state, &app, channel_id)?;
    let snapshot = snapshot_of(state, channel_id, snapshot_id).await?;
    Ok((app, snapshot))
}

/// List a channel's SQL snapshots, newest first.
#[utoipa::path(get, path = "/apps/{app_id}/channels/{channel_id}/postgres/snapshots", tag = "postgres", security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id"), ("channel_id" = Uuid, Path, description = "Channel id")),
    responses((status = 200, body = Vec<SnapshotRow>), (status = 401, body = ErrorEnvelope), (status = 404, body = ErrorEnvelope)))]
async fn list_snapshots(
    State(state): State<AppState>,
    caller: Caller,
    Path((app_id, channel_id)): Path<(Uuid, Uuid)>,
) -> Result<Json<Vec<SnapshotRow>>, ApiError> {
    let app = access::authorize(&state, &caller, app_id, Action::Read).await?;
    database_channel(&state, &app, channel_id)?;
    let rows = snapshots::list(state.db(), channel_id).await?;
    Ok(Json(rows.into_iter().map(SnapshotRow::from).collect()))
}

/// Download an SQL snapshot: a complete custom-format dump (`pg_restore` reads it), streamed; audit-logged.
#[utoipa::path(get, path = "/apps/{app_id}/channels/{channel_id}/postgres/snapshots/{snapshot_id}/download", tag = "postgres",
    security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id"), ("channel_id" = Uuid, Path, description = "Channel id"),
           ("snapshot_id" = Uuid, Path, description = "Snapshot id")),
    responses((status = 200, description = "the dump", content_type = "application/octet-stream", body = Vec<u8>),
              (status = 401, body = ErrorEnvelope), (status = 403, body = ErrorEnvelope), (status = 404, body = ErrorEnvelope),
              (status = 503, body = ErrorEnvelope)))]
async fn download_snapshot(
    State(state): State<AppState>,
    caller: Caller,
    Path(ids): Path<(Uuid, Uuid, Uuid)>,
) -> Result<axum::response::Response, ApiError> {
    let (app, snapshot) = downloadable(&state, &caller, ids).await?;
    let key = snapshot.object_key.as_deref().ok_or_else(|| {
        ApiError::Missing(
            "snapshot_not_found",
            "the snapshot has no stored file".into(),
        )
    })?;
    let body = archive(&state)?.download(key).await.map_err(unavailable)?;
    slipway_store::db::audit::record(
        state.db(),
        &caller,
        Some(app.id),
        "postgres.snapshot.download",
        serde_json::json!({"channel_id": snapshot.channel_id, "snapshot_id": snapshot.id}),
    )
    .await?;
    let filename = format!(
        "{}-{}-{}.dump",
        app.name,
        snapshot.kind,
        snapshot.created_at.format("%Y%m%dT%H%M%SZ")
    );
    let mut res = downloads::attachment(
        axum::body::Body::from_stream(body),
        "application/octet-stream",
        &filename,
    )?;
    if let Some(size) = snapshot.size_bytes {
        res.headers_mut()
            .insert(header::CONTENT_LENGTH, HeaderValue::from(size));
    }
    Ok(res)
}

/// Mint a token that downloads this one SQL snapshot: good for an hour (or until the caller's token expires, if
/// sooner) and for nothing else; the plaintext is shown once.
#[utoipa::path(post, path = "/apps/{app_id}/channels/{channel_id}/postgres/snapshots/{snapshot_id}/download-token", tag = "postgres",
    security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id"), ("channel_id" = Uuid, Path, description = "Channel id"),
           ("snapshot_id" = Uuid, Path, description = "Snapshot id")),
    responses((status = 201, body = DownloadToken), (status = 401, body = ErrorEnvelope), (status = 403, body = ErrorEnvelope),
              (status = 404, body = ErrorEnvelope)))]
async fn download_token(
    State(state): State<AppState>,
    caller: Caller,
    Path(ids): Path<(Uuid, Uuid, Uuid)>,
) -> Result<(StatusCode, Json<DownloadToken>), ApiError> {
    let (app_id, channel_id, snapshot_id) = ids;
    let (app, snapshot) = downloadable(&state, &caller, ids).await?;
    let token = downloads::mint(
        &state,
        Grant {
            app_id: app.id,
            scope: DOWNLOAD_SCOPE,
            path: download_path(app_id, channel_id, snapshot_id),
            label: format!("download of SQL snapshot {snapshot_id}"),
            audit_action: "postgres.snapshot.download_token",
            audit_details: serde_json::json!({"channel_id": snapshot.channel_id, "snapshot_id": snapshot.id}),
            caller: &caller,
        },
    )
    .await?;
    Ok((StatusCode::CREATED, Json(token)))
}

/// 409 `channel_busy` while a deploy of the channel is queued or running (read from the cluster, not a cache:
/// a deploy created a moment ago counts).
pub(super) async fn require_idle(
    state: &AppState,
    app: &VisibleApp,
    channel: &slipway_crds::Channel,
) -> Result<(), ApiError> {
    let deploys: Api<Deploy> = Api::namespaced(state.kube().clone(), &app.namespace);
    let name = kube::ResourceExt::name_any(channel);
    let busy = deploys
        .list(&ListParams::default())
        .await
        .map_err(|e| ApiError::Internal(e.into()))?
        .items
        .iter()
        .any(|d| {
            d.spec.channel == name
                && d.metadata.deletion_timestamp.is_none()
                && d.status.as_ref().is_none_or(|s| s.phase.in_flight())
        });
    if busy {
        return Err(ApiError::ChannelBusy(
            "a deploy of this channel is queued or running; restore once it has finished".into(),
        ));
    }
    Ok(())
}

/// Runs restore `job` in its channel's scope and waits for it, for as long as it takes: the job as it ended. 409
/// `channel_busy` while another of the channel's checkpoints or restores is unfinished.
pub(super) async fn restore_as_job(
    state: &AppState,
    job: &slipway_jobs::NewJob,
) -> Result<slipway_jobs::Job, ApiError> {
    slipway_jobs::runner::ask_and_wait(state.db(), state.jobs(), job, Admission::Exclusive)
        .await?
        .map_err(|_| {
            ApiError::ChannelBusy(
                "a checkpoint or restore of this channel is running; restore once it has finished"
                    .into(),
            )
        })?
        .ok_or_else(|| ApiError::Internal(anyhow::anyhow!("the restore's job row vanished")))
}

/// 403 `prod_restore_blocked` for prod unless the app (or its prod channel) sets `SVC_ALLOW_PROD_RESTORE=1`.
pub(super) async fn require_restorable(
    state: &AppState,
    app: &VisibleApp,
    channel: &slipway_crds::Channel,
    channel_id: Uuid,
) -> Result<(), ApiError> {
    if channel.channel_name() != "prod" {
        return Ok(());
    }
    let rows = slipway_store::env::store::rows(state.db(), app.id)
        .await
        .map_err(ApiError::Internal)?;
    let setting = rows
        .iter()
        .filter(|r| r.key == ALLOW_PROD_RESTORE)
        .find(|r| r.channel_id == Some(channel_id))
        .or_else(|| {
            rows.iter()
                .find(|r| r.key == ALLOW_PROD_RESTORE && r.channel_id.is_none())
        });
    let allowed = match setting {
        Some(row) => {
            row.open(state.keyring(), app.id)
                .map_err(ApiError::Internal)?
                == "1"
        }
        None => false,
    };
    if allowed {
        Ok(())
    } else {
        Err(ApiError::ProdRestoreBlocked(format!(
            "restoring prod replaces live data; set {ALLOW_PROD_RESTORE}=1 on the app to allow it"
        )))
    }
}

/// Restore an SQL snapshot in place: the channel's data is replaced in one transaction (a failed restore changes
/// nothing), `DATABASE_URL` keeps working, no snapshot of the replaced data is taken and code is not restored;
/// audit-logged. The restore runs as a job of the platform: the call waits for it for as long as it takes (no
/// request timeout applies), and a client that goes away does not stop it. A second restore, or one while the
/// channel's checkpoint runs, answers 409 `channel_busy`.
#[utoipa::path(post, path = "/apps/{app_id}/channels/{channel_id}/postgres/restore", tag = "postgres", security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id"), ("channel_id" = Uuid, Path, description = "Channel id")),
    request_body = RestoreRequest,
    responses((status = 200, body = DatabaseStatus), (status = 400, body = ErrorEnvelope), (status = 401, body = ErrorEnvelope),
              (status = 403, body = ErrorEnvelope, description = "scope_denied (db:*: the spec states no scope for this route; replacing a database is a db:* act), permission_denied or prod_restore_blocked"),
              (status = 404, body = ErrorEnvelope, description = "not_found, snapshot_not_found"),
              (status = 409, body = ErrorEnvelope, description = "channel_busy: a deploy of the channel is in flight, or its checkpoint or another restore runs"),
              (status = 503, body = ErrorEnvelope, description = "postgres_unavailable: the restore did not complete and the database is unchanged")))]
async fn restore_snapshot(
    State(state): State<AppState>,
    caller: Caller,
    Path((app_id, channel_id)): Path<(Uuid, Uuid)>,
    Json(request): Json<RestoreRequest>,
) -> Result<Json<DatabaseStatus>, ApiError> {
    caller.require_scope(scopes::DB)?;
    let app = access::authorize(&state, &caller, app_id, Action::ReplaceData).await?;
    let channel = database_channel(&state, &app, channel_id)?;
    configured(&state)?;
    archive(&state)?;
    let record = ready_record(&channel, channel_id, &state).await?;
    super::postgres::confirm(&request.confirm_db_name, &record)?;
    require_restorable(&state, &app, &channel, channel_id).await?;
    snapshot_of(&state, channel_id, request.snapshot_id).await?;
    require_idle(&state, &app, &channel).await?;
    let params = slipway_data::checkpoints::sql_restore::Params {
        app_id,
        channel_id,
        snapshot_id: request.snapshot_id,
        db_name: record.db_name.clone(),
        actor: slipway_store::db::audit::Actor::from(&caller),
    };
    let job = restore_as_job(
        &state,
        &slipway_data::checkpoints::sql_restore::job(&params),
    )
    .await?;
    if job.state != slipway_jobs::state::SUCCEEDED {
        snapshot_of(&state, channel_id, request.snapshot_id).await?;
        return Err(ApiError::PostgresUnavailable(job.error.unwrap_or_else(
            || "the restore did not complete; the database is unchanged".into(),
        )));
    }
    Ok(Json(status_of(&state, &app, &channel, channel_id).await?))
}
