//! `/apps/{app_id}/tree`, `/blob` and `/changeset`: read an app's repository at a branch or commit, and commit to
//! it without a git client. Reads use gix in-process; a changeset is one real commit published with a
//! compare-and-swap of the branch (see `git::changeset`), so it mixes freely with pushes.

use std::collections::BTreeMap;

use axum::extract::{DefaultBodyLimit, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use slipway_crds::names::BranchName;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::extract::{Json, Path, Query};
use slipway_auth::scopes;
use slipway_core::access::{self, Action, VisibleApp};
use slipway_core::caller::Caller;
use slipway_core::error::{ApiError, ErrorEnvelope};
use slipway_core::state::AppState;
use slipway_git_store::Writing;
use slipway_repository::changeset::{self, Changeset, ChangesetError, Identity, RefWrite};
use slipway_repository::patch::Edit;
use slipway_repository::paths::RepoPath;
use slipway_repository::store::{self, FileKind};

/// Largest changeset body: whole files travel in it.
pub const CHANGESET_BODY_LIMIT: usize = 32 * 1024 * 1024;

/// The routes of this module.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(get_tree))
        .routes(routes!(get_blob))
        .merge(
            OpenApiRouter::new()
                .routes(routes!(post_changeset))
                .layer(DefaultBodyLimit::max(CHANGESET_BODY_LIMIT)),
        )
}

/// Query of the tree route.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct TreeQuery {
    /// Branch name (bare or `refs/heads/...`) or 40-hex commit; default `master`.
    #[serde(rename = "ref")]
    pub reference: Option<String>,
}

/// Query of the blob route.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct BlobQuery {
    /// Branch name or 40-hex commit; default `master`.
    #[serde(rename = "ref")]
    pub reference: Option<String>,
    /// Repository-relative path of the file (required).
    pub path: Option<String>,
}

/// One file of a tree.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TreeEntry {
    /// Repository-relative path.
    pub path: String,
    /// `file`, `executable`, `symlink` or `submodule`.
    pub kind: FileKind,
    /// Size in bytes (0 for a submodule).
    pub size: u64,
}

/// `GET /apps/{app_id}/tree` response.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TreeView {
    /// The ref as asked.
    #[serde(rename = "ref")]
    pub reference: String,
    /// The commit it resolved to.
    pub sha: String,
    /// Every file, sorted by path.
    pub files: Vec<TreeEntry>,
}

/// `POST /apps/{app_id}/changeset` request.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct ChangesetRequest {
    /// Branch to commit on; default `master`.
    #[serde(rename = "ref")]
    pub reference: Option<String>,
    /// Commit message; must not be empty.
    pub message: String,
    /// Path to new whole content, or null to delete the file.
    pub changes: Option<BTreeMap<String, Option<String>>>,
    /// Path to a list of exact-string replacements in an existing file.
    pub edits: Option<BTreeMap<String, Vec<Edit>>>,
    /// Path to hunk text (`@@` or `@@ <anchor>` headers, no line numbers) for an existing file.
    pub patches: Option<BTreeMap<String, String>>,
}

/// `POST /apps/{app_id}/changeset` response.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ChangesetResponse {
    /// The new commit.
    pub sha: String,
}

/// Runs blocking repository work off the async runtime.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> anyhow::Result<T> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::Internal(e.into()))?
        .map_err(ApiError::Internal)
}

/// The full commit id `rev` (a commit id, `HEAD`, a branch name bare or as `refs/heads/...`) names in the app's
/// repository now; `None` when it names no commit.
pub async fn resolve_commit(
    state: &AppState,
    app: &VisibleApp,
    rev: String,
) -> Result<Option<String>, ApiError> {
    let path = app.ready_repo(state).await?;
    blocking(move || Ok(store::resolve(&store::open(&path)?, &rev)?.map(|id| id.to_string()))).await
}

async fn app_and_repo(
    state: &AppState,
    caller: &Caller,
    app_id: Uuid,
    action: Action,
) -> Result<(VisibleApp, std::path::PathBuf), ApiError> {
    caller.require_scope(scopes::REPO)?;
    let app = access::authorize(state, caller, app_id, action).await?;
    let path = app.ready_repo(state).await?;
    Ok((app, path))
}

fn missing_ref(reference: &str) -> ApiError {
    ApiError::Missing(
        "not_found",
        format!("ref {reference} not found (an empty repository has no commits yet)"),
    )
}

/// List every file of a branch or commit, with sizes.
#[utoipa::path(get, path = "/apps/{app_id}/tree", tag = "repository", security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id"), TreeQuery),
    responses((status = 200, body = TreeView), (status = 401, body = ErrorEnvelope), (status = 403, body = ErrorEnvelope),
              (status = 404, body = ErrorEnvelope, description = "app or ref not found; an empty repository has no ref")))]
async fn get_tree(
    State(state): State<AppState>,
    caller: Caller,
    Path(app_id): Path<Uuid>,
    Query(query): Query<TreeQuery>,
) -> Result<Json<TreeView>, ApiError> {
    let (_, path) = app_and_repo(&state, &caller, app_id, Action::Read).await?;
    let reference = query.reference.unwrap_or_else(|| "master".into());
    let wanted = reference.clone();
    let listed = blocking(move || {
        let repo = store::open(&path)?;
        match store::resolve(&repo, &wanted)? {
            Some(commit) => Ok(Some((commit, store::list_files(&repo, commit)?))),
            None => Ok(None),
        }
    })
    .await?;
    let (commit, files) = listed.ok_or_else(|| missing_ref(&reference))?;
    Ok(Json(TreeView {
        reference,
        sha: commit.to_string(),
        files: files
            .into_iter()
            .map(|f| TreeEntry {
                path: f.path,
                kind: f.kind,
                size: f.size,
            })
            .collect(),
    }))
}

/// Read one file of a branch or commit as raw bytes.
#[utoipa::path(get, path = "/apps/{app_id}/blob", tag = "repository", security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id"), BlobQuery),
    responses((status = 200, content_type = "application/octet-stream", body = Vec<u8>),
              (status = 400, body = ErrorEnvelope), (status = 401, body = ErrorEnvelope), (status = 403, body = ErrorEnvelope),
              (status = 404, body = ErrorEnvelope, description = "app, ref or file not found")))]
async fn get_blob(
    State(state): State<AppState>,
    caller: Caller,
    Path(app_id): Path<Uuid>,
    Query(query): Query<BlobQuery>,
) -> Result<Response, ApiError> {
    let (_, path) = app_and_repo(&state, &caller, app_id, Action::Read).await?;
    let file = query
        .path
        .as_deref()
        .ok_or_else(|| ApiError::bad_request("the path query parameter is required"))?;
    let file = RepoPath::parse(file).map_err(ApiError::bad_request)?;
    let reference = query.reference.unwrap_or_else(|| "master".into());
    let (wanted, wanted_file) = (reference.clone(), file.clone());
    let found = blocking(move || {
        let repo = store::open(&path)?;
        match store::resolve(&repo, &wanted)? {
            Some(commit) => Ok(Some(store::read_file(&repo, commit, wanted_file.as_str())?)),
            None => Ok(None),
        }
    })
    .await?;
    let data = found
        .ok_or_else(|| missing_ref(&reference))?
        .ok_or_else(|| {
            ApiError::Missing("not_found", format!("file {file} not found at {reference}"))
        })?;
    Ok(([(header::CONTENT_TYPE, "application/octet-stream")], data).into_response())
}

/// Commit whole-file changes, edits and hunks as one commit on top of a branch.
#[utoipa::path(post, path = "/apps/{app_id}/changeset", tag = "repository", security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id")), request_body = ChangesetRequest,
    responses((status = 200, body = ChangesetResponse),
              (status = 400, body = ErrorEnvelope, description = "invalid path or branch, empty message, a path in two fields, or an edit or hunk that did not resolve; nothing is written"),
              (status = 401, body = ErrorEnvelope), (status = 403, body = ErrorEnvelope), (status = 404, body = ErrorEnvelope),
              (status = 409, body = ErrorEnvelope, description = "the branch moved under the changeset so it no longer applies, or the app mirrors an external repository"),
              (status = 503, body = ErrorEnvelope, description = "service_unavailable: the object storage that keeps the repository is unavailable; nothing is written, retry after Retry-After")))]
async fn post_changeset(
    State(state): State<AppState>,
    caller: Caller,
    Path(app_id): Path<Uuid>,
    Json(req): Json<ChangesetRequest>,
) -> Result<Json<ChangesetResponse>, ApiError> {
    let (app, path) = app_and_repo(&state, &caller, app_id, Action::Write).await?;
    if let Some(reason) = slipway_git::mirror::commits_refused(&state, app.id).await? {
        return Err(ApiError::Conflict(reason));
    }
    let changeset = validate(req)?;
    let who = Identity {
        name: caller.username.clone(),
        email: format!("{}@{}", caller.username, state.names().git_host),
    };
    let lock = state.commit_lock(&path);
    let _queued = lock.lock().await;
    let writer = state
        .repos()
        .writer(app.id, &caller.username, Writing::Update)
        .await;
    let repos = state.repos().clone();
    let runtime = tokio::runtime::Handle::current();
    let committed = tokio::task::spawn_blocking(move || {
        if writer.config.is_empty() {
            return changeset::commit(&path, &changeset, &who, &RefWrite::InProcess);
        }
        // A refusal for want of storage is no conflict to retry on: the caller is told to come back later.
        let resync = || match writer.storage_unavailable() {
            Some(outage) => Err(outage),
            None => runtime.block_on(repos.ready(app.repo())).map(|_| ()),
        };
        let write = RefWrite::Git {
            config: &writer.config,
            env: &writer.env,
            resync: &resync,
        };
        changeset::commit(&path, &changeset, &who, &write)
    })
    .await
    .map_err(|e| ApiError::Internal(e.into()))?;
    match committed {
        Ok(sha) => Ok(Json(ChangesetResponse {
            sha: sha.to_string(),
        })),
        Err(ChangesetError::Invalid(m)) => Err(ApiError::BadRequest(m)),
        Err(ChangesetError::Conflict(m)) => Err(ApiError::Conflict(m)),
        Err(ChangesetError::Internal(e)) => Err(ApiError::Internal(e)),
    }
}

/// The request's own rules, checked before the repository is touched.
pub fn validate(req: ChangesetRequest) -> Result<Changeset, ApiError> {
    if req.message.trim().is_empty() {
        return Err(ApiError::bad_request("message must not be empty"));
    }
    let reference = req.reference.unwrap_or_else(|| "master".into());
    let branch = BranchName::from_ref(&reference)
        .map_err(|e| ApiError::bad_request(format!("ref {reference:?}: {}", e.0)))?;
    let (changes, edits, patches) = (
        req.changes.unwrap_or_default(),
        req.edits.unwrap_or_default(),
        req.patches.unwrap_or_default(),
    );
    if changes.is_empty() && edits.is_empty() && patches.is_empty() {
        return Err(ApiError::bad_request(
            "a changeset needs at least one path in changes, edits or patches",
        ));
    }
    let mut seen: BTreeMap<String, &'static str> = BTreeMap::new();
    let all = changes
        .keys()
        .map(|p| (p, "changes"))
        .chain(edits.keys().map(|p| (p, "edits")))
        .chain(patches.keys().map(|p| (p, "patches")));
    for (path, field) in all {
        RepoPath::parse(path).map_err(ApiError::bad_request)?;
        if let Some(first) = seen.insert(path.clone(), field) {
            return Err(ApiError::bad_request(format!(
                "path {path:?} is in both {first} and {field}; a path belongs to exactly one of them"
            )));
        }
    }
    for (path, list) in &edits {
        if list.is_empty() {
            return Err(ApiError::bad_request(format!(
                "{path}: edits lists no edit"
            )));
        }
    }
    let parse = |p: String| RepoPath::parse(&p).map_err(ApiError::bad_request);
    Ok(Changeset {
        branch,
        message: req.message,
        changes: changes
            .into_iter()
            .map(|(p, c)| Ok((parse(p)?, c)))
            .collect::<Result<_, ApiError>>()?,
        edits: edits
            .into_iter()
            .map(|(p, e)| Ok((parse(p)?, e)))
            .collect::<Result<_, ApiError>>()?,
        patches: patches
            .into_iter()
            .map(|(p, h)| Ok((parse(p)?, h)))
            .collect::<Result<_, ApiError>>()?,
    })
}
