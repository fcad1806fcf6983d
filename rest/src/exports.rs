//! `/apps/{app_id}/exports`: ask for an export of an app (its repository, variable names, databases and buckets
//! as one `tar.gz`, built in the background, [`slipway_data::exports`]), read its status, and download it once ready.
//!
//! An archive holds every row and object of the app, so the routes ask what downloading a channel's data asks: the
//! `exports:read` scope and a role that may download data (admin or owner; a member is 403, a stranger 404). Asking
//! and downloading are audit-logged. A ready status hands out a download token good for that archive alone, for an
//! hour at most, and spent by its download (one download per token; reading the status again gives a new one).

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use chrono::{DateTime, Utc};
use serde::Serialize;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::downloads::{self, DownloadToken, Grant};
use super::extract::{Json, Path};
use slipway_auth::scopes;
use slipway_core::access::{self, Action, VisibleApp};
use slipway_core::caller::Caller;
use slipway_core::error::{ApiError, ErrorEnvelope};
use slipway_core::state::AppState;
use slipway_data::exports::store::{self, Export, Queued};
use slipway_postgres::archive::Archive;

/// The routes of this module.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create_export))
        .routes(routes!(get_export))
        .routes(routes!(download_export))
}

/// An export's status.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ExportStatus {
    /// The export's id.
    pub export_id: Uuid,
    /// The exported app.
    pub app_id: Uuid,
    /// `queued`, `running`, `ready`, `failed` or `expired`.
    pub status: String,
    /// Why it failed or expired; null otherwise.
    pub reason: Option<String>,
    /// When it was asked for.
    pub created_at: DateTime<Utc>,
    /// When its build began.
    pub started_at: Option<DateTime<Utc>>,
    /// When it became ready or failed.
    pub finished_at: Option<DateTime<Utc>>,
    /// The archive's bytes, once ready.
    pub size_bytes: Option<i64>,
    /// When a ready archive is deleted.
    pub expires_at: Option<DateTime<Utc>>,
    /// While ready: a token that downloads this archive once (shown once); null otherwise.
    pub download: Option<DownloadToken>,
}

impl ExportStatus {
    fn of(export: Export, download: Option<DownloadToken>) -> Self {
        let expired =
            export.status == "ready" && export.expires_at.is_some_and(|at| at <= Utc::now());
        Self {
            export_id: export.id,
            app_id: export.app_id,
            status: if expired {
                "expired".to_owned()
            } else {
                export.status
            },
            reason: if expired {
                Some("the archive has expired; start a new export".to_owned())
            } else {
                export.reason
            },
            created_at: export.created_at,
            started_at: export.started_at,
            finished_at: export.finished_at,
            size_bytes: export.size_bytes,
            expires_at: export.expires_at,
            download,
        }
    }
}

/// Path of an export's download.
fn download_path(app_id: Uuid, export_id: Uuid) -> String {
    format!("/apps/{app_id}/exports/{export_id}/download")
}

/// The checks of every export route: the caller's role (404 for a stranger, 403 for a member), the scope, downloads
/// on, and an archive to keep exports in (503 without object storage).
async fn exportable(
    state: &AppState,
    caller: &Caller,
    app_id: Uuid,
) -> Result<(VisibleApp, Archive), ApiError> {
    let app = access::authorize(state, caller, app_id, Action::DownloadData).await?;
    caller.require_scope(scopes::EXPORTS_READ)?;
    downloads::require_enabled(state, "exports")?;
    let archive = state.snapshot_archive().cloned().ok_or_else(|| {
        ApiError::Unavailable(
            "exports need object storage, which this platform does not have".into(),
        )
    })?;
    Ok((app, archive))
}

/// The export `export_id` of the app, after failing it if its process stopped; 404 `not_found` otherwise.
async fn export_of(state: &AppState, app_id: Uuid, export_id: Uuid) -> Result<Export, ApiError> {
    slipway_data::exports::abandon_stale(state, Some(app_id))
        .await
        .map_err(ApiError::Internal)?;
    store::by_id(state.db(), app_id, export_id)
        .await?
        .ok_or(ApiError::NotFound("export"))
}

/// Ask for an export of the app: its repository (a git bundle), each channel's variable names (never values), each
/// channel's database (`pg_dump -Fc`) and bucket (current objects), as one `tar.gz` built in the background. Poll
/// its status until it is `ready`; the archive is kept for 24 hours. Audit-logged.
#[utoipa::path(post, path = "/apps/{app_id}/exports", tag = "exports", security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id")),
    responses((status = 202, body = ExportStatus, description = "queued"), (status = 401, body = ErrorEnvelope),
              (status = 403, body = ErrorEnvelope, description = "scope_denied (exports:read); permission_denied (a member); download_disabled"),
              (status = 404, body = ErrorEnvelope),
              (status = 409, body = ErrorEnvelope, description = "conflict: an export of the app is in flight (the message names it)"),
              (status = 503, body = ErrorEnvelope, description = "service_unavailable: no object storage")))]
async fn create_export(
    State(state): State<AppState>,
    caller: Caller,
    Path(app_id): Path<Uuid>,
) -> Result<(StatusCode, Json<ExportStatus>), ApiError> {
    let (app, archive) = exportable(&state, &caller, app_id).await?;
    slipway_data::exports::abandon_stale(&state, Some(app_id))
        .await
        .map_err(ApiError::Internal)?;
    let export = match store::queue(state.db(), app_id, caller.user_id).await? {
        Queued::New(export) => export,
        Queued::InFlight(id) => {
            return Err(ApiError::Conflict(format!(
                "export {id} of this app is still in flight; read its status, and ask again once it is finished"
            )));
        }
    };
    slipway_store::db::audit::record(
        state.db(),
        &caller,
        Some(app_id),
        "export.create",
        serde_json::json!({"export_id": export.id}),
    )
    .await?;
    slipway_data::exports::spawn(state.clone(), archive, app, export.id);
    Ok((StatusCode::ACCEPTED, Json(ExportStatus::of(export, None))))
}

/// Read an export's status. While it is `ready`, the answer carries a token that downloads the archive once (a
/// new one on every read; each lives an hour at most, or until the caller's token expires).
#[utoipa::path(get, path = "/apps/{app_id}/exports/{export_id}", tag = "exports", security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id"), ("export_id" = Uuid, Path, description = "Export id")),
    responses((status = 200, body = ExportStatus), (status = 401, body = ErrorEnvelope), (status = 403, body = ErrorEnvelope),
              (status = 404, body = ErrorEnvelope), (status = 503, body = ErrorEnvelope)))]
async fn get_export(
    State(state): State<AppState>,
    caller: Caller,
    Path((app_id, export_id)): Path<(Uuid, Uuid)>,
) -> Result<Json<ExportStatus>, ApiError> {
    let (app, _) = exportable(&state, &caller, app_id).await?;
    let export = export_of(&state, app_id, export_id).await?;
    let mut status = ExportStatus::of(export, None);
    if status.status == "ready" {
        let mut token = downloads::mint(
            &state,
            Grant {
                app_id: app.id,
                scope: scopes::EXPORTS_READ,
                path: download_path(app_id, export_id),
                label: format!("download of export {export_id}"),
                audit_action: "export.download_token",
                audit_details: serde_json::json!({"export_id": export_id}),
                caller: &caller,
            },
        )
        .await?;
        // Never past the archive's own end.
        if let Some(end) = status.expires_at {
            token.expires_at = token.expires_at.min(end);
        }
        status.download = Some(token);
    }
    Ok(Json(status))
}

/// Download a ready export's `tar.gz`; audit-logged. A download token (from the status) is spent by it.
#[utoipa::path(get, path = "/apps/{app_id}/exports/{export_id}/download", tag = "exports", security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id"), ("export_id" = Uuid, Path, description = "Export id")),
    responses((status = 200, description = "the archive", content_type = "application/gzip", body = Vec<u8>),
              (status = 401, body = ErrorEnvelope), (status = 403, body = ErrorEnvelope), (status = 404, body = ErrorEnvelope),
              (status = 409, body = ErrorEnvelope, description = "conflict: the export is not ready (queued, running, failed or expired)"),
              (status = 503, body = ErrorEnvelope)))]
async fn download_export(
    State(state): State<AppState>,
    caller: Caller,
    Path((app_id, export_id)): Path<(Uuid, Uuid)>,
) -> Result<Response, ApiError> {
    let (_, archive) = exportable(&state, &caller, app_id).await?;
    let export = export_of(&state, app_id, export_id).await?;
    let size = export.size_bytes;
    let status = ExportStatus::of(export.clone(), None);
    let key = match (status.status.as_str(), &export.object_key) {
        ("ready", Some(key)) => key.clone(),
        (other, _) => {
            return Err(ApiError::Conflict(format!(
                "export {export_id} is {other}, not ready{}",
                status.reason.map(|r| format!(": {r}")).unwrap_or_default()
            )));
        }
    };
    if caller.only_path.is_some() {
        // A download token is good for one download: spent before the archive is opened, by one update that
        // revokes it only while it is live, so of two requests at once exactly one goes on.
        let spent =
            slipway_store::db::tokens::revoke(state.db(), caller.user_id, caller.token_id).await?;
        state.tokens().forget_all();
        if !spent {
            return Err(ApiError::TokenRevoked);
        }
    }
    let body = archive.download(&key).await.map_err(|e| {
        tracing::warn!(%export_id, error = %e, "export archive unreadable");
        ApiError::Unavailable("the archive cannot be read right now; try again".into())
    })?;
    slipway_store::db::audit::record(
        state.db(),
        &caller,
        Some(app_id),
        "export.download",
        serde_json::json!({"export_id": export_id}),
    )
    .await?;
    let filename = key.rsplit('/').next().unwrap_or("export.tar.gz").to_owned();
    let mut res = downloads::attachment(
        axum::body::Body::from_stream(body),
        "application/gzip",
        &filename,
    )?;
    if let Some(size) = size {
        res.headers_mut()
            .insert(header::CONTENT_LENGTH, HeaderValue::from(size));
    }
    Ok(res)
}
