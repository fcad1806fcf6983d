//! `/apps/{app_id}/channels`: list, create, read and delete an app's channels. A channel is a `Channel` resource
//! named `<app>.<channel>`, owned by its App; deleting one detaches its custom domains before it answers.

use axum::extract::State;
use axum::http::StatusCode;
use kube::Api;
use kube::api::DeleteParams;
use serde::Deserialize;
use slipway_crds::Channel;
use slipway_crds::names::{ChannelName, GitRefBinding};
use slipway_crds::plans::Plan;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::apps::check_new_channel;
use super::domain_release::{self, Holder};
use super::extract::{Json, Path};
use super::views::ChannelView;
use slipway_auth::scopes;
use slipway_core::access::{self, Action};
use slipway_core::caller::Caller;
use slipway_core::channels::create as create_channel_resource;
use slipway_core::claims;
use slipway_core::error::{ApiError, ErrorEnvelope};
use slipway_core::state::AppState;

/// The routes of this module.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_channels, create_channel))
        .routes(routes!(get_channel, delete_channel))
}

/// `POST /apps/{app_id}/channels` request.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct CreateChannel {
    /// DNS label, at most 40 characters; not `prod`.
    pub name: String,
    /// `branch:<name>`; one channel per branch.
    pub git_ref_binding: String,
}

/// List an app's channels.
#[utoipa::path(get, path = "/apps/{app_id}/channels", tag = "channels", security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id")),
    responses((status = 200, body = Vec<ChannelView>), (status = 401, body = ErrorEnvelope), (status = 404, body = ErrorEnvelope)))]
async fn list_channels(
    State(state): State<AppState>,
    caller: Caller,
    Path(app_id): Path<Uuid>,
) -> Result<Json<Vec<ChannelView>>, ApiError> {
    let app = access::authorize(&state, &caller, app_id, Action::Read).await?;
    Ok(Json(
        app.channels(&state)
            .iter()
            .map(|c| ChannelView::build(&state, &app, c))
            .collect(),
    ))
}

/// Create a channel bound to one branch.
#[utoipa::path(post, path = "/apps/{app_id}/channels", tag = "channels", security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id")), request_body = CreateChannel,
    responses((status = 200, body = ChannelView), (status = 400, body = ErrorEnvelope), (status = 401, body = ErrorEnvelope),
              (status = 403, body = ErrorEnvelope), (status = 404, body = ErrorEnvelope)))]
async fn create_channel(
    State(state): State<AppState>,
    caller: Caller,
    Path(app_id): Path<Uuid>,
    Json(req): Json<CreateChannel>,
) -> Result<Json<ChannelView>, ApiError> {
    caller.require_scope(scopes::CHANNEL)?;
    let app = access::authorize(&state, &caller, app_id, Action::ManageChannels).await?;
    let name: ChannelName = req.name.parse()?;
    if name.is_prod() {
        return Err(ApiError::bad_request(
            "prod is reserved: every app is created with its prod channel",
        ));
    }
    let binding: GitRefBinding = req.git_ref_binding.parse()?;
    let owner = slipway_store::db::users::by_username(state.db(), app.owner.as_str())
        .await?
        .ok_or_else(|| anyhow::anyhow!("owner {} has no account", app.owner))?;
    let plan =
        Plan::by_tier(&owner.plan).ok_or_else(|| anyhow::anyhow!("unknown plan {}", owner.plan))?;
    check_new_channel(
        &state,
        &app.namespace,
        &app.name,
        &name,
        &binding,
        &app.owner,
        plan,
    )?;
    let new = claims::NewChannel {
        owner_id: owner.id,
        owner: &app.owner,
        namespace: &app.namespace,
        app: &app.name,
        channel: &name,
        plan,
    };
    claims::claim(&state, &new).await?;
    let created = create_channel_resource(&state, &app.app, &name, &binding).await;
    if created.is_err() {
        claims::release(&state, &app.namespace, &app.name, &name).await?;
    }
    let channel = created?;
    let channel = state
        .cache()
        .channel_appeared(channel.metadata.uid.as_deref().unwrap_or_default())
        .await?;
    Ok(Json(ChannelView::build(&state, &app, &channel)))
}

/// Read one channel.
#[utoipa::path(get, path = "/apps/{app_id}/channels/{channel_id}", tag = "channels", security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id"), ("channel_id" = Uuid, Path, description = "Channel id")),
    responses((status = 200, body = ChannelView), (status = 401, body = ErrorEnvelope), (status = 404, body = ErrorEnvelope)))]
async fn get_channel(
    State(state): State<AppState>,
    caller: Caller,
    Path((app_id, channel_id)): Path<(Uuid, Uuid)>,
) -> Result<Json<ChannelView>, ApiError> {
    let app = access::authorize(&state, &caller, app_id, Action::Read).await?;
    let channel = access::channel_of(&state, &app, channel_id)?;
    Ok(Json(ChannelView::build(&state, &app, &channel)))
}

/// Delete a channel (never prod): its workload and routes go with it, and its custom domains are free at once.
#[utoipa::path(delete, path = "/apps/{app_id}/channels/{channel_id}", tag = "channels", security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id"), ("channel_id" = Uuid, Path, description = "Channel id")),
    responses((status = 204), (status = 400, body = ErrorEnvelope), (status = 401, body = ErrorEnvelope),
              (status = 403, body = ErrorEnvelope), (status = 404, body = ErrorEnvelope)))]
async fn delete_channel(
    State(state): State<AppState>,
    caller: Caller,
    Path((app_id, channel_id)): Path<(Uuid, Uuid)>,
) -> Result<StatusCode, ApiError> {
    caller.require_scope(scopes::CHANNEL)?;
    let app = access::authorize(&state, &caller, app_id, Action::ManageChannels).await?;
    let channel = access::channel_of(&state, &app, channel_id)?;
    let resource_name = channel.metadata.name.clone().unwrap_or_default();
    if resource_name.ends_with(".prod") {
        return Err(ApiError::bad_request(
            "the prod channel cannot be deleted; delete the app instead",
        ));
    }
    let channels: Api<Channel> = Api::namespaced(state.kube().clone(), &app.namespace);
    match channels
        .delete(&resource_name, &DeleteParams::background())
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => return Err(e.into()),
    }
    domain_release::detach_all(&state, &app.namespace, Holder::Channel(&resource_name)).await?;
    let (_, channel_name) = slipway_crds::names::parse_channel_resource_name(&resource_name)?;
    claims::release(&state, &app.namespace, &app.name, &channel_name).await?;
    slipway_store::env::store::delete_channel(state.db(), app_id, channel_id).await?;
    state.cache().channel_gone(&channel_id.to_string()).await?;
    // After the channel left the cache, so the log archive can no longer record a generation of it.
    slipway_store::db::runtime_logs::remove_channel(state.db(), channel_id).await?;
    Ok(StatusCode::NO_CONTENT)
}
