//! `/internal/v1`: what the operator and the edge need from the API server, which owns the git store and the
//! platform database. Not part of the public API (absent from the OpenAPI document) and answered only to callers
//! holding the internal token; a build pod instead fetches its sources through an archive URL signed with that
//! token for one commit (`slipway_controllers::platform_api::sign_archive`).

use std::collections::BTreeMap;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use axum::routing::{get, post, put};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use slipway_controllers::platform_api::{self, CommitResponse, EnvRequest, EnvResponse};
use uuid::Uuid;

use super::access::{self, Role, VisibleApp};
use super::error::ApiError;
use super::extract::{Json, Path, Query};
use super::state::AppState;
use crate::env::{self, EnvSources};
use crate::git::store;

/// Largest log chunk accepted in one append.
const LOG_CHUNK_LIMIT: usize = 4 * 1024 * 1024;

/// The internal routes (state: the API's).
pub fn routes() -> Router<AppState> {
    Router::new()
        .route(
            "/internal/v1/apps/{app_id}/commits/{*rev}",
            get(resolve_commit),
        )
        .route("/internal/v1/apps/{app_id}/archive/{sha}", get(archive))
        .route("/internal/v1/deploys/{deploy_id}/env", put(deploy_env))
        .route(
            "/internal/v1/deploys/{deploy_id}/log",
            post(append_log).layer(axum::extract::DefaultBodyLimit::max(LOG_CHUNK_LIMIT)),
        )
        .merge(super::internal_blob::routes())
        .merge(super::internal_usage::routes())
}

/// A caller that presented the internal token.
pub struct Internal;

fn token_matches(given: &str, token: &str) -> bool {
    // Comparing digests keeps the comparison's time independent of where the strings differ.
    Sha256::digest(given.as_bytes()) == Sha256::digest(token.as_bytes())
}

impl FromRequestParts<AppState> for Internal {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let given = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .ok_or(ApiError::AuthRequired)?;
        if token_matches(given, state.internal_token()) {
            Ok(Internal)
        } else {
            Err(ApiError::TokenInvalid)
        }
    }
}

fn app_by_id(state: &AppState, app_id: Uuid) -> Result<VisibleApp, ApiError> {
    let app = state
        .cache()
        .app_by_uid(&app_id.to_string())
        .ok_or(ApiError::NotFound("app"))?;
    VisibleApp::from_resource(app, Role::Owner).ok_or(ApiError::NotFound("app"))
}

async fn resolve_in(
    state: &AppState,
    app: &VisibleApp,
    rev: String,
) -> Result<Option<String>, ApiError> {
    let repo = state.repos().path(&app.owner, &app.name);
    tokio::task::spawn_blocking(move || -> anyhow::Result<Option<String>> {
        let repo = store::open(&repo)?;
        Ok(store::resolve(&repo, &rev)?.map(|id| id.to_string()))
    })
    .await
    .map_err(|e| ApiError::Internal(e.into()))?
    .map_err(ApiError::Internal)
}

/// `GET /internal/v1/apps/{app_id}/commits/{rev}`: the commit a sha, branch or `refs/heads/...` names now.
async fn resolve_commit(
    State(state): State<AppState>,
    _: Internal,
    Path((app_id, rev)): Path<(Uuid, String)>,
) -> Result<Json<CommitResponse>, ApiError> {
    let app = app_by_id(&state, app_id)?;
    let sha = resolve_in(&state, &app, rev.clone())
        .await?
        .ok_or_else(|| {
            ApiError::Missing(
                "not_found",
                format!("{rev} names no commit in app {}'s repository", app.name),
            )
        })?;
    Ok(Json(CommitResponse { sha }))
}

/// Query of the archive route when it is fetched through a signed URL.
#[derive(Debug, Deserialize)]
pub struct Signed {
    expires: Option<u64>,
    signature: Option<String>,
}

/// `GET /internal/v1/apps/{app_id}/archive/{sha}`: the commit's files as a tar stream, for the internal token or a
/// signed URL.
async fn archive(
    State(state): State<AppState>,
    Path((app_id, sha)): Path<(Uuid, String)>,
    Query(signed): Query<Signed>,
    parts: Parts,
) -> Result<Response, ApiError> {
    let allowed = match (signed.expires, signed.signature.as_deref()) {
        (Some(expires), Some(signature)) => platform_api::verify_archive(
            state.internal_token(),
            &app_id.to_string(),
            &sha,
            expires,
            signature,
        ),
        _ => {
            let mut parts = parts;
            Internal::from_request_parts(&mut parts, &state)
                .await
                .is_ok()
        }
    };
    if !allowed {
        return Err(ApiError::TokenInvalid);
    }
    if sha.parse::<slipway_crds::names::CommitSha>().is_err() {
        return Err(ApiError::BadRequest(
            slipway_crds::names::messages::SHA.into(),
        ));
    }
    let app = app_by_id(&state, app_id)?;
    if resolve_in(&state, &app, sha.clone()).await?.is_none() {
        return Err(ApiError::Missing(
            "not_found",
            format!("commit {sha} is not in app {}'s repository", app.name),
        ));
    }
    let repo = state.repos().path(&app.owner, &app.name);
    let mut res =
        Response::new(crate::git::archive::tar_body(&repo, &sha).map_err(ApiError::Internal)?);
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-tar"),
    );
    Ok(res)
}

/// `PUT /internal/v1/deploys/{deploy_id}/env`: records the deploy's env snapshot on first call and answers the
/// values it runs with, the same on every later call.
async fn deploy_env(
    State(state): State<AppState>,
    _: Internal,
    Path(deploy_id): Path<Uuid>,
    Json(request): Json<EnvRequest>,
) -> Result<Json<EnvResponse>, ApiError> {
    let bad = |what: &str| ApiError::BadRequest(format!("{what} is not a uuid"));
    let app_id: Uuid = request.app_id.parse().map_err(|_| bad("app_id"))?;
    let channel_id: Uuid = request.channel_id.parse().map_err(|_| bad("channel_id"))?;
    let ring = state.keyring();
    if let Some(values) = env::snapshot::values(state.db(), ring, deploy_id).await? {
        return Ok(Json(EnvResponse {
            env: values.into_iter().collect(),
        }));
    }
    let app = app_by_id(&state, app_id)?;
    let channel = access::channel_of(&state, &app, channel_id)?;
    let namespace = app.namespace.clone();
    let sources = EnvSources {
        app_id,
        namespace: &namespace,
        app_secret: app.app.spec.env_secret.as_deref(),
        channel: Some((channel_id, channel.spec.env_secret.as_deref())),
    };
    let (entries, warnings) =
        env::resolve_sources(state.db(), state.kube(), ring, &sources).await?;
    for warning in warnings {
        tracing::warn!(%deploy_id, warning, "env Secret key left out of the deploy");
    }
    let system_keys: Vec<&str> = request.system_keys.iter().map(String::as_str).collect();
    env::snapshot::record(
        state.db(),
        ring,
        deploy_id,
        app_id,
        channel_id,
        &entries,
        &system_keys,
    )
    .await?;
    let values = env::snapshot::values(state.db(), ring, deploy_id)
        .await?
        .ok_or_else(|| ApiError::Internal(anyhow::anyhow!("snapshot of {deploy_id} vanished")))?;
    let env: BTreeMap<String, String> = values.into_iter().collect();
    Ok(Json(EnvResponse { env }))
}

/// `POST /internal/v1/deploys/{deploy_id}/log`: appends the body to the deploy's log.
async fn append_log(
    State(state): State<AppState>,
    _: Internal,
    Path(deploy_id): Path<Uuid>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    crate::db::deploy_logs::append(state.db(), deploy_id, &body).await?;
    Ok(StatusCode::NO_CONTENT)
}
