//! `/apps/{app_id}/env`: environment variables and secrets, app defaults and channel overrides; and the env a
//! deploy received. Values are sealed before they are stored; lists never show a secret; reveal is a protected
//! action whose audit row is written before the value leaves.

use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use slipway_crds::Template;
use slipway_crds::names::EnvKey;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::extract::{Json, Path, Query};
use slipway_auth::scopes;
use slipway_core::access::{self, Action, VisibleApp};
use slipway_core::caller::Caller;
use slipway_core::error::{ApiError, ErrorEnvelope};
use slipway_core::state::AppState;
use slipway_store::env::snapshot::{self, SnapshotView};
use slipway_store::env::{self, EnvSources, Kind, Scope, resolve::Entry, store};

/// The routes of this module.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_env, set_env))
        .routes(routes!(delete_env))
        .routes(routes!(reveal_env))
        .routes(routes!(deploy_env))
}

/// `POST /apps/{app_id}/env` request.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct SetEnv {
    /// `^[A-Z_][A-Z0-9_]*$`, not a reserved key.
    pub key: String,
    /// At most 16 KiB of UTF-8.
    pub value: String,
    /// `env` or `secret`; omitted keeps an existing key's kind, a new key is `env`.
    pub kind: Option<String>,
    /// Set for a per-channel override; omitted for the app default.
    pub channel_id: Option<Uuid>,
}

/// The optional channel of env routes.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ChannelParam {
    /// A channel of this app: its override (set, delete), its resolved view (list, reveal).
    pub channel_id: Option<Uuid>,
}

/// An env entry as lists show it.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct EnvEntry {
    /// Name.
    pub key: String,
    /// `env` or `secret`.
    pub kind: Kind,
    /// `app` or `channel`.
    pub scope: Scope,
    /// The channel of an override; null for an app default.
    pub channel_id: Option<Uuid>,
    /// Last change.
    pub updated_at: DateTime<Utc>,
    /// The value for `env`; always null for `secret`.
    pub value: Option<String>,
}

/// `GET /apps/{app_id}/env` response.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct EnvList {
    /// Raw rows, or the resolved view of one channel.
    pub env: Vec<EnvEntry>,
}

/// `GET /apps/{app_id}/env/{key}/value` response.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Revealed {
    /// Name.
    pub key: String,
    /// `env` or `secret`.
    pub kind: Kind,
    /// Where the value comes from.
    pub scope: Scope,
    /// The value.
    pub value: String,
}

impl From<Entry> for EnvEntry {
    fn from(e: Entry) -> Self {
        let value = (e.kind == Kind::Env).then_some(e.value);
        EnvEntry {
            key: e.key,
            kind: e.kind,
            scope: e.scope,
            channel_id: e.channel_id,
            updated_at: e.updated_at,
            value,
        }
    }
}

/// The channel `id` of the app, as (uid, its `spec.envSecret`); 404 when it is not a channel of this app.
fn channel(
    state: &AppState,
    app: &VisibleApp,
    id: Uuid,
) -> Result<(Uuid, Option<String>), ApiError> {
    let channel = access::channel_of(state, app, id)?;
    Ok((id, channel.spec.env_secret.clone()))
}

async fn resolved(
    state: &AppState,
    app: &VisibleApp,
    channel: Option<(Uuid, Option<String>)>,
) -> Result<Vec<Entry>, ApiError> {
    let sources = EnvSources {
        app_id: app.id,
        namespace: &app.namespace,
        app_secret: app.app.spec.env_secret.as_deref(),
        channel: channel
            .as_ref()
            .map(|(id, secret)| (*id, secret.as_deref())),
    };
    let (entries, _warnings) =
        env::resolve_sources(state.db(), state.kube(), state.keyring(), &sources).await?;
    Ok(entries)
}

/// Set a variable or secret, as the app default or a channel override. Takes effect at the next deploy.
#[utoipa::path(post, path = "/apps/{app_id}/env", tag = "env", security(("bearer" = [])), request_body = SetEnv,
    params(("app_id" = Uuid, Path, description = "App id")),
    responses((status = 204), (status = 400, body = ErrorEnvelope), (status = 401, body = ErrorEnvelope),
              (status = 403, body = ErrorEnvelope), (status = 404, body = ErrorEnvelope)))]
async fn set_env(
    State(state): State<AppState>,
    caller: Caller,
    Path(app_id): Path<Uuid>,
    Json(req): Json<SetEnv>,
) -> Result<StatusCode, ApiError> {
    caller.require_scope(scopes::DEPLOY)?;
    let app = access::authorize(&state, &caller, app_id, Action::Write).await?;
    let key: EnvKey = req.key.parse().map_err(ApiError::bad_request)?;
    if req.value.len() > env::MAX_VALUE_BYTES {
        return Err(ApiError::bad_request(format!(
            "the value of {key} is {} bytes; values are at most 16 KiB (16384 bytes) of UTF-8",
            req.value.len()
        )));
    }
    let kind = match req.kind.as_deref() {
        None => None,
        Some(k) => Some(
            Kind::parse(k).ok_or_else(|| ApiError::bad_request("kind must be env or secret"))?,
        ),
    };
    let channel_id = match req.channel_id {
        Some(id) => Some(channel(&state, &app, id)?.0),
        None => None,
    };
    store::put(
        state.db(),
        state.keyring(),
        app.id,
        channel_id,
        &key,
        &req.value,
        kind,
    )
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// List variables: without `channel_id` the raw rows (app defaults and every override); with it, the resolved view
/// of that channel (overrides win; `scope` says which).
#[utoipa::path(get, path = "/apps/{app_id}/env", tag = "env", security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id"), ChannelParam),
    responses((status = 200, body = EnvList), (status = 401, body = ErrorEnvelope), (status = 403, body = ErrorEnvelope),
              (status = 404, body = ErrorEnvelope)))]
async fn list_env(
    State(state): State<AppState>,
    caller: Caller,
    Path(app_id): Path<Uuid>,
    Query(q): Query<ChannelParam>,
) -> Result<Json<EnvList>, ApiError> {
    caller.require_scope(scopes::DEPLOY)?;
    let app = access::authorize(&state, &caller, app_id, Action::Read).await?;
    let env = match q.channel_id {
        Some(id) => {
            let channel = channel(&state, &app, id)?;
            resolved(&state, &app, Some(channel))
                .await?
                .into_iter()
                .map(EnvEntry::from)
                .collect()
        }
        None => {
            let mut entries = Vec::new();
            for row in store::rows(state.db(), app.id).await? {
                let value = match row.kind {
                    Kind::Env => Some(row.open(state.keyring(), app.id)?),
                    Kind::Secret => None,
                };
                let scope = if row.channel_id.is_some() {
                    Scope::Channel
                } else {
                    Scope::App
                };
                entries.push(EnvEntry {
                    key: row.key,
                    kind: row.kind,
                    scope,
                    channel_id: row.channel_id,
                    updated_at: row.updated_at,
                    value,
                });
            }
            entries
        }
    };
    Ok(Json(EnvList { env }))
}

/// Delete the app default of `key`, or with `channel_id` only that channel's override.
#[utoipa::path(delete, path = "/apps/{app_id}/env/{key}", tag = "env", security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id"), ("key" = String, Path, description = "Variable name"), ChannelParam),
    responses((status = 204), (status = 401, body = ErrorEnvelope), (status = 403, body = ErrorEnvelope),
              (status = 404, body = ErrorEnvelope)))]
async fn delete_env(
    State(state): State<AppState>,
    caller: Caller,
    Path((app_id, key)): Path<(Uuid, String)>,
    Query(q): Query<ChannelParam>,
) -> Result<StatusCode, ApiError> {
    caller.require_scope(scopes::DEPLOY)?;
    let app = access::authorize(&state, &caller, app_id, Action::Write).await?;
    let channel_id = match q.channel_id {
        Some(id) => Some(channel(&state, &app, id)?.0),
        None => None,
    };
    // Deleting what is not there leaves the app as asked: no variable of that name at that scope.
    store::delete(state.db(), app.id, channel_id, &key).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Reveal one value. With `channel_id`: the channel's override, else the app default; without: the app default.
/// A protected action; the `env.reveal` audit event is recorded before the value is returned.
#[utoipa::path(get, path = "/apps/{app_id}/env/{key}/value", tag = "env", security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id"), ("key" = String, Path, description = "Variable name"), ChannelParam),
    responses((status = 200, body = Revealed), (status = 401, body = ErrorEnvelope), (status = 403, body = ErrorEnvelope),
              (status = 404, body = ErrorEnvelope)))]
async fn reveal_env(
    State(state): State<AppState>,
    caller: Caller,
    Path((app_id, key)): Path<(Uuid, String)>,
    Query(q): Query<ChannelParam>,
) -> Result<Json<Revealed>, ApiError> {
    caller.require_scope(scopes::DEPLOY)?;
    let app = access::authorize(&state, &caller, app_id, Action::RevealSecret).await?;
    let channel = match q.channel_id {
        Some(id) => Some(channel(&state, &app, id)?),
        None => None,
    };
    access::require_protected(&state, &caller, &app, "revealing a secret value").await?;
    let channel_id = channel.as_ref().map(|(id, _)| *id);
    let entry = resolved(&state, &app, channel)
        .await?
        .into_iter()
        .find(|e| e.key == key)
        .ok_or(ApiError::NotFound("variable"))?;
    let detail = serde_json::json!({"key": entry.key, "kind": entry.kind, "scope": entry.scope, "channel_id": channel_id});
    slipway_store::db::audit::record(state.db(), &caller, Some(app.id), "env.reveal", detail)
        .await?;
    Ok(Json(Revealed {
        key: entry.key,
        kind: entry.kind,
        scope: entry.scope,
        value: entry.value,
    }))
}

/// The env a deploy received: secret values null, system-injected keys by name only. A static deploy runs no
/// container and answers an empty snapshot.
#[utoipa::path(get, path = "/apps/{app_id}/channels/{channel_id}/deploys/{deploy_id}/env", tag = "env", security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id"), ("channel_id" = Uuid, Path, description = "Channel id"),
           ("deploy_id" = Uuid, Path, description = "Deploy id")),
    responses((status = 200, body = SnapshotView), (status = 401, body = ErrorEnvelope), (status = 403, body = ErrorEnvelope),
              (status = 404, body = ErrorEnvelope)))]
async fn deploy_env(
    State(state): State<AppState>,
    caller: Caller,
    Path((app_id, channel_id, deploy_id)): Path<(Uuid, Uuid, Uuid)>,
) -> Result<Json<SnapshotView>, ApiError> {
    caller.require_scope(scopes::DEPLOY)?;
    let app = access::authorize(&state, &caller, app_id, Action::Read).await?;
    let channel = access::channel_of(&state, &app, channel_id)?;
    // A deploy pruned from its channel's history is gone, though the sweep may not have forgotten its row yet.
    if !state.cache().holds_deploy(&deploy_id.to_string()) {
        return Err(ApiError::NotFound("deploy env snapshot"));
    }
    if let Some(view) = snapshot::view(state.db(), state.keyring(), deploy_id, channel_id).await? {
        return Ok(Json(view));
    }
    // A static deploy starts no container, so it ran with no environment: its snapshot is empty, not missing.
    if app.app.spec.template == Template::Static {
        super::deploys::deploy_of(&state, &app.namespace, &channel, &deploy_id.to_string())?;
        return Ok(Json(SnapshotView {
            deploy_id,
            env: Vec::new(),
            system_keys: Vec::new(),
        }));
    }
    Err(ApiError::NotFound("deploy env snapshot"))
}
