//! `/internal/v1/channels/{channel_id}/blob...`: what the operator needs from the platform database for a
//! channel's object storage. The API server mints and seals the key pair (the operator never holds the keyring),
//! derives the client-facing bucket name from its own view of the app and channel, and hands a deploy its key
//! pair. Open only to callers whose role permits [`RouteGroup::BlobStores`] (the operator).

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, put};
use slipway_crds::names::{self, ChannelName};
use slipway_internal::RouteGroup;
use slipway_internal::protocol::{BlobCredentials, BlobStoreRequest, BlobStoreResponse};
use uuid::Uuid;

use super::guard::InternalCaller;
use crate::extract::{Json, Path};
use slipway_blob::store::{self, NewStore};
use slipway_core::error::ApiError;
use slipway_core::state::AppState;

/// The routes of this module (state: the API's).
pub fn routes() -> Router<AppState> {
    Router::new()
        .route(
            "/internal/v1/channels/{channel_id}/blob",
            put(ensure_store).delete(delete_store),
        )
        .route(
            "/internal/v1/channels/{channel_id}/blob/credentials",
            get(credentials),
        )
}

/// `PUT /internal/v1/channels/{channel_id}/blob`: records the channel's store with a fresh key pair, or answers
/// the one recorded.
async fn ensure_store(
    State(state): State<AppState>,
    caller: InternalCaller,
    Path(channel_id): Path<Uuid>,
    Json(request): Json<BlobStoreRequest>,
) -> Result<Json<BlobStoreResponse>, ApiError> {
    caller.require(&state, RouteGroup::BlobStores)?;
    let app_id: Uuid = request
        .app_id
        .parse()
        .map_err(|_| ApiError::BadRequest("app_id is not a uuid".into()))?;
    let app = super::app_by_id(&state, app_id).await?;
    let channel = super::channel_by_id(&state, &app, channel_id).await?;
    let channel_name: ChannelName = channel.channel_name().parse()?;
    let label = names::channel_host_label(&app.name, &channel_name, &app.owner)?;
    let store = store::ensure(
        state.db(),
        state.keyring(),
        &NewStore {
            channel_id,
            app_id,
            owner: app.owner.as_str(),
            virtual_bucket: &label,
            backend_bucket: &request.backend_bucket,
        },
    )
    .await?;
    Ok(Json(BlobStoreResponse {
        backend_bucket: store.backend_bucket,
        virtual_bucket: store.virtual_bucket,
        access_key_id: store.access_key_id,
    }))
}

/// `DELETE /internal/v1/channels/{channel_id}/blob`: forgets the store and its checkpoint markers (its bucket is
/// gone); 204 either way.
async fn delete_store(
    State(state): State<AppState>,
    caller: InternalCaller,
    Path(channel_id): Path<Uuid>,
) -> Result<StatusCode, ApiError> {
    caller.require(&state, RouteGroup::BlobStores)?;
    slipway_blob::checkpoints::forget_channel(state.db(), channel_id).await?;
    store::delete(state.db(), channel_id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /internal/v1/channels/{channel_id}/blob/credentials`: the bucket and key pair a deploy's containers get.
async fn credentials(
    State(state): State<AppState>,
    caller: InternalCaller,
    Path(channel_id): Path<Uuid>,
) -> Result<Json<BlobCredentials>, ApiError> {
    caller.require(&state, RouteGroup::BlobStores)?;
    let store = store::by_channel(state.db(), channel_id)
        .await?
        .ok_or_else(|| ApiError::BlobNotReady("the channel's store is not recorded yet".into()))?;
    let secret_access_key = store.secret(state.keyring()).map_err(ApiError::Internal)?;
    Ok(Json(BlobCredentials {
        bucket: store.virtual_bucket,
        access_key_id: store.access_key_id,
        secret_access_key,
    }))
}
