//! `/internal/v1`: what the operator and the edge need from the API server, which owns the git store and the
//! platform database. Served only on the internal listener (`--internal-listen`), never on the public one, and
//! absent from the OpenAPI document. Every call carries the caller's ServiceAccount token and each route checks
//! that the caller's role permits it ([`guard`]); a build pod, which holds no token, fetches its sources through an
//! archive URL the API signed for one commit (`slipway_internal::source_url`).

pub mod blob;
pub mod guard;
pub mod postgres;
pub mod runtime_logs;
pub mod usage;

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use axum::routing::{get, post, put};
use serde::Deserialize;
use slipway_crds::{Channel, Template};
use slipway_internal::RouteGroup;
use slipway_internal::protocol::{
    CommitResponse, EnvRequest, EnvResponse, SourceUrlRequest, SourceUrlResponse,
};
use slipway_internal::source_url::unix_now;
use uuid::Uuid;

use self::guard::InternalCaller;
use super::extract::{Json, Path, Query};
use slipway_core::access::{self, Role, VisibleApp};
use slipway_core::error::ApiError;
use slipway_core::state::AppState;
use slipway_store::env::{self, EnvSources};

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
        .route("/internal/v1/apps/{app_id}/source-urls", post(source_url))
        .route("/internal/v1/deploys/{deploy_id}/env", put(deploy_env))
        .route(
            "/internal/v1/deploys/{deploy_id}/log",
            post(append_log).layer(axum::extract::DefaultBodyLimit::max(LOG_CHUNK_LIMIT)),
        )
        .merge(blob::routes())
        .merge(postgres::routes())
        .merge(usage::routes())
        .merge(runtime_logs::routes())
}

/// The app with `app_id`, for a caller that names only apps it has seen: the operator, and the pods it starts. A
/// miss first waits for this replica's cache to see the app (read-your-writes' wait): another replica, or the
/// operator's own watch, may have seen a new app a moment before this one, and a 404 would make the operator record
/// the channel's database or bucket as failed until its next sweep.
pub(super) async fn app_by_id(state: &AppState, app_id: Uuid) -> Result<VisibleApp, ApiError> {
    let app = state
        .cache()
        .app_appeared(&app_id.to_string())
        .await
        .map_err(|_| ApiError::NotFound("app"))?;
    VisibleApp::from_resource(app, Role::Owner).ok_or(ApiError::NotFound("app"))
}

/// The channel `channel_id` of `app`, after waiting as [`app_by_id`] does for this replica's cache to see it.
pub(super) async fn channel_by_id(
    state: &AppState,
    app: &VisibleApp,
    channel_id: Uuid,
) -> Result<Arc<Channel>, ApiError> {
    // Whether it appeared or not, only a channel of `app` is answered.
    let _ = state
        .cache()
        .channel_appeared(&channel_id.to_string())
        .await;
    access::channel_of(state, app, channel_id)
}

/// The app with `app_id` as this replica's cache holds it now, for a report that may name an app already gone.
pub(super) fn app_in_cache(state: &AppState, app_id: Uuid) -> Result<VisibleApp, ApiError> {
    let app = state
        .cache()
        .app_by_uid(&app_id.to_string())
        .ok_or(ApiError::NotFound("app"))?;
    VisibleApp::from_resource(app, Role::Owner).ok_or(ApiError::NotFound("app"))
}

/// `GET /internal/v1/apps/{app_id}/commits/{rev}`: the commit a sha, branch or `refs/heads/...` names now.
async fn resolve_commit(
    State(state): State<AppState>,
    caller: InternalCaller,
    Path((app_id, rev)): Path<(Uuid, String)>,
) -> Result<Json<CommitResponse>, ApiError> {
    caller.require(&state, RouteGroup::Commits)?;
    let app = app_by_id(&state, app_id).await?;
    let sha = crate::repo::resolve_commit(&state, &app, rev.clone())
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

/// `GET /internal/v1/apps/{app_id}/archive/{sha}`: the commit's files as a tar stream, for a caller whose role
/// permits the app's kind of archive (a static app's files are a site, any other app's are source code), or for a
/// URL signed by [`source_url`].
async fn archive(
    State(state): State<AppState>,
    Path((app_id, sha)): Path<(Uuid, String)>,
    Query(signed): Query<Signed>,
    mut parts: Parts,
) -> Result<Response, ApiError> {
    let caller = match (signed.expires, signed.signature.as_deref()) {
        (Some(expires), Some(signature)) => {
            let key = state.internal().source_key();
            if !key.verify(&app_id.to_string(), &sha, expires, signature, unix_now()) {
                tracing::warn!(caller = "signed URL", %app_id, sha, expires, "internal call refused: bad or expired signature");
                return Err(ApiError::TokenInvalid);
            }
            None
        }
        _ => {
            let caller = InternalCaller::from_request_parts(&mut parts, &state).await?;
            // Before anything is looked up, so a caller no archive is open to learns nothing about what exists.
            caller.require_either(&state, RouteGroup::SourceArchives, RouteGroup::SiteArchives)?;
            Some(caller)
        }
    };
    if sha.parse::<slipway_crds::names::CommitSha>().is_err() {
        return Err(ApiError::BadRequest(
            slipway_crds::names::messages::SHA.into(),
        ));
    }
    let app = app_by_id(&state, app_id).await?;
    if let Some(caller) = caller {
        let group = if app.app.spec.template == Template::Static {
            RouteGroup::SiteArchives
        } else {
            RouteGroup::SourceArchives
        };
        caller.require(&state, group)?;
    }
    commit_exists(&state, &app, &sha).await?;
    let repo = app.ready_repo(&state).await?;
    let mut res = Response::new(
        slipway_repository::archive::tar_body(&repo, &sha).map_err(ApiError::Internal)?,
    );
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-tar"),
    );
    Ok(res)
}

/// 404 unless `sha` is a commit of the app's repository.
async fn commit_exists(state: &AppState, app: &VisibleApp, sha: &str) -> Result<(), ApiError> {
    match crate::repo::resolve_commit(state, app, sha.to_owned()).await? {
        Some(_) => Ok(()),
        None => Err(ApiError::Missing(
            "not_found",
            format!("commit {sha} is not in app {}'s repository", app.name),
        )),
    }
}

/// `POST /internal/v1/apps/{app_id}/source-urls`: the path and query of an archive URL that opens one commit of
/// the app without a token for an hour, for the pod that builds it.
async fn source_url(
    State(state): State<AppState>,
    caller: InternalCaller,
    Path(app_id): Path<Uuid>,
    Json(request): Json<SourceUrlRequest>,
) -> Result<Json<SourceUrlResponse>, ApiError> {
    caller.require(&state, RouteGroup::SourceUrls)?;
    let sha: slipway_crds::names::CommitSha = request.sha.parse()?;
    let app = app_by_id(&state, app_id).await?;
    commit_exists(&state, &app, sha.as_str()).await?;
    Ok(Json(state.internal().source_key().signed_path(
        &app_id.to_string(),
        sha.as_str(),
        unix_now(),
    )))
}

/// `PUT /internal/v1/deploys/{deploy_id}/env`: records the deploy's env snapshot on first call and answers the
/// values it runs with, the same on every later call.
async fn deploy_env(
    State(state): State<AppState>,
    caller: InternalCaller,
    Path(deploy_id): Path<Uuid>,
    Json(request): Json<EnvRequest>,
) -> Result<Json<EnvResponse>, ApiError> {
    caller.require(&state, RouteGroup::Env)?;
    let bad = |what: &str| ApiError::BadRequest(format!("{what} is not a uuid"));
    let app_id: Uuid = request.app_id.parse().map_err(|_| bad("app_id"))?;
    let channel_id: Uuid = request.channel_id.parse().map_err(|_| bad("channel_id"))?;
    let ring = state.keyring();
    if let Some(values) = env::snapshot::values(state.db(), ring, deploy_id).await? {
        return Ok(Json(EnvResponse {
            env: values.into_iter().collect(),
        }));
    }
    let app = app_by_id(&state, app_id).await?;
    let channel = channel_by_id(&state, &app, channel_id).await?;
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
    caller: InternalCaller,
    Path(deploy_id): Path<Uuid>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    caller.require(&state, RouteGroup::Logs)?;
    slipway_store::db::deploy_logs::append(state.db(), deploy_id, &body).await?;
    Ok(StatusCode::NO_CONTENT)
}
