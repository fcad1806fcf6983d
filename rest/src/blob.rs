//! Object storage of a channel: its status, its credentials (audit-logged on every call), and the caller's
//! rollup. The store's state comes from the Channel's `ObjectStoreReady` condition (the reconciler's), its usage
//! from the platform database (the gateway's count); a ready store is probed through the gateway with the
//! channel's own key pair, so a 200 means an app's S3 client would get through too.

use axum::extract::State;
use serde::{Deserialize, Serialize};
use slipway_backends::object_store::REGION;
use slipway_crds::Channel;
use slipway_crds::conditions::{self, reasons};
use slipway_crds::names::{self, ChannelName};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::extract::{Json, Path};
use slipway_auth::scopes;
use slipway_blob::access::{BlobAccess, ProbeFailure, public_endpoint};
use slipway_blob::store::{self, Store};
use slipway_core::access::{self, Action, VisibleApp};
use slipway_core::caller::Caller;
use slipway_core::error::{ApiError, ErrorEnvelope};
use slipway_core::state::AppState;

/// The routes of this module.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(get_blob))
        .routes(routes!(blob_credentials))
        .routes(routes!(my_blob_storage))
}

/// Object-store status of a channel.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BlobStatus {
    /// `provisioning` (the bucket is being made), `ready`, or `failed` (see `last_error`; retried).
    pub status: String,
    /// Why the bucket could not be made, while `failed`.
    pub last_error: Option<String>,
    /// Bytes counted against the owner's quota: every version, the parts of unfinished multipart uploads, and
    /// writes in flight.
    pub usage_bytes: i64,
    /// Whether the app's external object-store access is on (the public endpoint answers).
    pub external_enabled: bool,
    /// The bucket name clients use (the channel's hostname label).
    pub virtual_bucket: String,
    /// The channel's public endpoint, `https://<channel-hostname-label>.s3.{app_domain}`.
    pub virtual_endpoint: String,
    /// Always `us-east-1`.
    pub region: String,
}

/// Object-store credentials of a channel. The secret key appears only here.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct BlobCredentials {
    /// Access key id.
    pub access_key_id: String,
    /// Secret access key.
    pub secret_access_key: String,
    /// The public endpoint (apps in the platform get `S3_ENDPOINT`, an internal address, instead).
    pub endpoint: String,
    /// Always `us-east-1`.
    pub region: String,
    /// The bucket name.
    pub bucket: String,
}

/// The caller's object storage across their channels.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BlobStorage {
    /// Bytes counted in every store of the caller's apps (what the plan's quota counts: every version, unfinished
    /// uploads' parts, and writes in flight).
    pub blob_usage_bytes: i64,
    /// Number of stores (one per channel).
    pub store_count: i64,
}

/// What the Channel's condition says of its store: (status, last error).
fn condition_state(channel: &Channel) -> (&'static str, Option<String>) {
    let condition = channel.status.as_ref().and_then(|s| {
        s.conditions
            .iter()
            .find(|c| c.type_ == conditions::OBJECT_STORE_READY)
    });
    match condition {
        Some(c) if c.status == "True" => ("ready", None),
        Some(c) if c.reason == reasons::OBJECT_STORE_FAILED => ("failed", Some(c.message.clone())),
        _ => ("provisioning", None),
    }
}

/// The channel's hostname label (its virtual bucket).
fn host_label(app: &VisibleApp, channel: &Channel) -> Result<String, ApiError> {
    let channel_name: ChannelName = channel.channel_name().parse()?;
    Ok(names::channel_host_label(
        &app.name,
        &channel_name,
        &app.owner,
    )?)
}

pub(super) fn configured(state: &AppState) -> Result<&BlobAccess, ApiError> {
    state.blob_access().ok_or_else(|| {
        ApiError::BlobUnavailable("object storage is not configured on this platform".into())
    })
}

/// Probes a recorded store through the gateway: 503 `blob_unavailable` when nothing answers for it, whatever the
/// channel's condition says (the operator's last check may already have seen the backend go away, and an
/// unreachable backend is unavailable, not a bucket being made). A missing bucket is 503 only for a channel that
/// says its bucket is ready; otherwise the status tells why it is not.
pub(super) async fn probe(
    state: &AppState,
    blob: &BlobAccess,
    store: &Store,
    ready: bool,
) -> Result<(), ApiError> {
    match blob.probe(state.keyring(), store).await {
        Ok(()) => Ok(()),
        Err(ProbeFailure::NoBucket(_)) if !ready => Ok(()),
        Err(ProbeFailure::NoBucket(e) | ProbeFailure::Unanswered(e)) => {
            tracing::warn!(channel_id = %store.channel_id, error = %e, "object store probe failed");
            Err(ApiError::BlobUnavailable(
                "object storage cannot answer for this channel right now; try again".into(),
            ))
        }
    }
}

/// Read a channel's object-store status.
#[utoipa::path(get, path = "/apps/{app_id}/channels/{channel_id}/blob", tag = "blob", security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id"), ("channel_id" = Uuid, Path, description = "Channel id")),
    responses((status = 200, body = BlobStatus), (status = 401, body = ErrorEnvelope), (status = 404, body = ErrorEnvelope),
              (status = 503, body = ErrorEnvelope)))]
async fn get_blob(
    State(state): State<AppState>,
    caller: Caller,
    Path((app_id, channel_id)): Path<(Uuid, Uuid)>,
) -> Result<Json<BlobStatus>, ApiError> {
    let app = access::authorize(&state, &caller, app_id, Action::Read).await?;
    let channel = access::channel_of(&state, &app, channel_id)?;
    Ok(Json(status_of(&state, &app, &channel, channel_id).await?))
}

/// The channel's object-store status, its store probed.
pub(super) async fn status_of(
    state: &AppState,
    app: &VisibleApp,
    channel: &Channel,
    channel_id: Uuid,
) -> Result<BlobStatus, ApiError> {
    let blob = configured(state)?;
    let label = host_label(app, channel)?;
    let (status, last_error) = condition_state(channel);
    let stored = store::by_channel(state.db(), channel_id).await?;
    // A bucket that was made once is probed whatever the condition says: the operator's last check may already
    // have seen the backend go away, and an unreachable backend is 503, not a bucket still being made.
    let usage_bytes = match &stored {
        Some(store) => {
            probe(state, blob, store, status == "ready").await?;
            store::counted_bytes(state.db(), channel_id).await?
        }
        None => 0,
    };
    Ok(BlobStatus {
        status: status.to_owned(),
        last_error,
        usage_bytes,
        external_enabled: app.app.spec.external_blob_access_enabled,
        virtual_endpoint: public_endpoint(&label, &state.names().app_domain),
        virtual_bucket: label,
        region: REGION.to_owned(),
    })
}

/// Read a channel's object-store credentials (audit-logged on every call).
#[utoipa::path(post, path = "/apps/{app_id}/channels/{channel_id}/blob/credentials", tag = "blob", security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id"), ("channel_id" = Uuid, Path, description = "Channel id")),
    responses((status = 200, body = BlobCredentials), (status = 401, body = ErrorEnvelope), (status = 403, body = ErrorEnvelope),
              (status = 404, body = ErrorEnvelope), (status = 409, body = ErrorEnvelope), (status = 503, body = ErrorEnvelope)))]
async fn blob_credentials(
    State(state): State<AppState>,
    caller: Caller,
    Path((app_id, channel_id)): Path<(Uuid, Uuid)>,
) -> Result<Json<BlobCredentials>, ApiError> {
    caller.require_scope(scopes::BLOB)?;
    let app = access::authorize(&state, &caller, app_id, Action::ReadStoreCredentials).await?;
    let channel = access::channel_of(&state, &app, channel_id)?;
    let blob = configured(&state)?;
    let stored = store::by_channel(state.db(), channel_id).await?;
    let (status, last_error) = condition_state(&channel);
    let not_ready = || {
        ApiError::BlobNotReady(match &last_error {
            Some(e) => format!("the channel's bucket is not ready: {e}"),
            None => "the channel's bucket is still being made; try again shortly".into(),
        })
    };
    let store = stored.ok_or_else(not_ready)?;
    // As in the status route: an unreachable backend is 503 even when the condition already says so.
    probe(&state, blob, &store, status == "ready").await?;
    if status != "ready" {
        return Err(not_ready());
    }
    let secret_access_key = store.secret(state.keyring()).map_err(ApiError::Internal)?;
    slipway_store::db::audit::record(
        state.db(),
        &caller,
        Some(app_id),
        "blob.credentials",
        serde_json::json!({
            "channel_id": channel_id,
            "access_key_id": store.access_key_id,
        }),
    )
    .await?;
    Ok(Json(BlobCredentials {
        access_key_id: store.access_key_id,
        secret_access_key,
        endpoint: public_endpoint(&store.virtual_bucket, &state.names().app_domain),
        region: REGION.to_owned(),
        bucket: store.virtual_bucket,
    }))
}

/// The caller's object storage: bytes stored and number of stores.
#[utoipa::path(get, path = "/me/blob/storage", tag = "blob", security(("bearer" = [])),
    responses((status = 200, body = BlobStorage), (status = 401, body = ErrorEnvelope)))]
async fn my_blob_storage(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<BlobStorage>, ApiError> {
    let (blob_usage_bytes, store_count) = store::owner_usage(state.db(), &caller.username).await?;
    Ok(Json(BlobStorage {
        blob_usage_bytes,
        store_count,
    }))
}
