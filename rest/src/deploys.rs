//! Deploys and their logs: `POST .../deploy` writes a `Deploy` resource (the Deploy reconciler takes it from
//! queued to success or failed), `GET .../logs` reads the deploy's log in byte windows, and `GET .../images` lists
//! the images a channel's deploys built.

use std::sync::Arc;

use axum::extract::State;
use kube::ResourceExt;
use serde::{Deserialize, Serialize};
use slipway_crds::names::{BranchName, CommitSha, messages};
use slipway_crds::{Channel, Deploy, DeploySpec, Template, plans::Plan};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::extract::{Json, Path, Query};
use super::views::deploy_phase_name;
use slipway_auth::scopes;
use slipway_core::access::{self, Action, VisibleApp};
use slipway_core::caller::Caller;
use slipway_core::deploys::create as create_deploy;
use slipway_core::error::{ApiError, ErrorEnvelope};
use slipway_core::state::AppState;

/// Largest log window a client may ask for.
pub const MAX_WINDOW: u64 = 262_144;
/// Window size when the client names none.
pub const DEFAULT_WINDOW: u64 = 16_384;

/// The routes of this module.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(deploy))
        .routes(routes!(deploy_log))
        .routes(routes!(deploy_history))
        .routes(routes!(images))
}

/// `POST .../deploy` request: at least one of `sha` and `ref`; `sha` wins.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
pub struct DeployRequest {
    /// A 40-character hex commit, or a branch name resolved to its head by this call.
    pub sha: Option<String>,
    /// A branch name (bare or `refs/heads/<name>`), resolved to its head by this call. Ignored with `sha`.
    #[serde(rename = "ref")]
    pub git_ref: Option<String>,
}

/// Deploy trigger response.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DeployTriggered {
    /// The deploy's id.
    pub deploy_id: String,
    /// The channel deployed to.
    pub channel_id: String,
    /// Always `queued`.
    pub status: String,
}

/// What a deploy request asks for, checked: `(sha, ref)` as the Deploy spec holds them.
pub fn checked_request(req: DeployRequest) -> Result<(Option<String>, Option<String>), ApiError> {
    match (req.sha, req.git_ref) {
        (Some(sha), _) => {
            let valid = sha.parse::<CommitSha>().is_ok() || BranchName::from_ref(&sha).is_ok();
            if !valid {
                return Err(ApiError::bad_request(messages::DEPLOY_SHA));
            }
            Ok((Some(sha), None))
        }
        (None, Some(git_ref)) => {
            BranchName::from_ref(&git_ref)?;
            Ok((None, Some(git_ref)))
        }
        (None, None) => Err(ApiError::bad_request(
            "a deploy needs sha (a commit or branch) or ref (a branch)",
        )),
    }
}

/// Deploy a commit to a channel: builds (app and docker) and brings it live after readiness. A branch is resolved
/// to its head by this call, so the deploy brings that commit live whatever is pushed before it starts.
#[utoipa::path(post, path = "/apps/{app_id}/channels/{channel_id}/deploy", tag = "deploys", security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id"), ("channel_id" = Uuid, Path, description = "Channel id")),
    request_body = DeployRequest,
    responses((status = 200, body = DeployTriggered), (status = 400, body = ErrorEnvelope, description = "invalid sha, or neither sha nor ref"),
              (status = 401, body = ErrorEnvelope), (status = 403, body = ErrorEnvelope), (status = 404, body = ErrorEnvelope),
              (status = 409, body = ErrorEnvelope, description = "a git-mirrored app whose pre-deploy fetch failed; the message carries the sync error")))]
async fn deploy(
    State(state): State<AppState>,
    caller: Caller,
    Path((app_id, channel_id)): Path<(Uuid, Uuid)>,
    Json(req): Json<DeployRequest>,
) -> Result<Json<DeployTriggered>, ApiError> {
    let (app, channel) = deploy_target(&state, &caller, app_id, channel_id).await?;
    let (sha, git_ref) = checked_request(req)?;
    slipway_git::mirror::service::fetch_before_deploy(&state, &app).await?;
    let (sha, git_ref) = pinned(&state, &app, sha, git_ref).await?;
    let spec = DeploySpec {
        channel: channel.name_any(),
        sha,
        git_ref,
        rewind_of: None,
        image: None,
    };
    let deploy_id = create_deploy(&state, &app, &channel, spec).await?;
    Ok(Json(DeployTriggered {
        deploy_id,
        channel_id: channel_id.to_string(),
        status: "queued".to_owned(),
    }))
}

/// The app and channel a call that deploys (deploy, rewind) writes to, checked alike: the `deploy:*` scope, a role
/// that may write (an app the caller has no role on is 404, as a missing one), and a channel of that app.
pub(super) async fn deploy_target(
    state: &AppState,
    caller: &Caller,
    app_id: Uuid,
    channel_id: Uuid,
) -> Result<(VisibleApp, Arc<Channel>), ApiError> {
    caller.require_scope(scopes::DEPLOY)?;
    let app = access::authorize(state, caller, app_id, Action::Write).await?;
    let channel = access::channel_of(state, &app, channel_id)?;
    Ok((app, channel))
}

/// A checked request's `(sha, ref)` pinned to the full commit id it names now, so the Deploy is written with the
/// commit a client can see in `pending_deploy` from the first answer on. A name that resolves to no commit is
/// written as asked: the deploy then fails when it starts, with the reason in its log and status (the route has no
/// error row for it; the outcome is read from the deploy).
async fn pinned(
    state: &AppState,
    app: &VisibleApp,
    sha: Option<String>,
    git_ref: Option<String>,
) -> Result<(Option<String>, Option<String>), ApiError> {
    let Some(rev) = sha.clone().or_else(|| git_ref.clone()) else {
        return Ok((sha, git_ref));
    };
    Ok(match super::repo::resolve_commit(state, app, rev).await? {
        Some(commit) => (Some(commit), None),
        None => (sha, git_ref),
    })
}

/// Query of the logs route.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct LogQuery {
    /// The deploy whose log is read.
    pub deploy: Option<String>,
    /// Byte offset to read from, exactly; without it the last `max_bytes` are read, starting on a whole line.
    pub offset: Option<u64>,
    /// Window size, 1 to 262144 (default 16384).
    pub max_bytes: Option<u64>,
}

/// Deploy log response.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DeployLog {
    /// The deploy.
    pub deploy_id: String,
    /// The commit deployed (as requested until it is resolved).
    pub git_sha: String,
    /// For a rewind, the id of the earlier deploy whose image it runs again; null for a deploy that builds.
    pub rewound_from: Option<String>,
    /// queued, running, success or failed.
    pub status: String,
    /// The status in finer words: queued, building (an app or docker deploy's image), releasing (the pre-deploy
    /// snapshot, the rollout and the readiness check), success or failed.
    pub stage: String,
    /// When the deploy started (its creation while queued).
    pub started_at: String,
    /// When it finished; null until then.
    pub finished_at: Option<String>,
    /// Total size of the log.
    pub log_bytes: u64,
    /// Where the window starts.
    pub offset: u64,
    /// Bytes in the window before UTF-8 decoding.
    pub window_bytes: u64,
    /// The window.
    pub log: String,
}

/// Where a log window starts and how long it is, before line snapping.
#[derive(Debug, PartialEq)]
pub struct Window {
    /// First byte.
    pub start: u64,
    /// Length.
    pub len: u64,
    /// Whether the start should move past the first newline (tail reads that begin mid-log).
    pub snap: bool,
}

/// The window the log-window rules give for a log of `total` bytes.
pub fn window(total: u64, offset: Option<u64>, max_bytes: u64) -> Result<Window, ApiError> {
    match offset {
        Some(offset) if offset > total => Err(ApiError::BadRequest(format!(
            "offset {offset} is past the end of the log ({total} bytes)"
        ))),
        Some(offset) => Ok(Window {
            start: offset,
            len: max_bytes.min(total - offset),
            snap: false,
        }),
        None => {
            let start = total.saturating_sub(max_bytes);
            Ok(Window {
                start,
                len: total - start,
                snap: start > 0,
            })
        }
    }
}

/// How many leading bytes of a tail window to drop so it starts on a whole line: none when the byte before it
/// ended a line, else up to and including the first newline (none when the window holds no newline).
pub fn snap_to_line(previous: Option<u8>, window: &[u8]) -> usize {
    if previous == Some(b'\n') {
        return 0;
    }
    memchr::memchr(b'\n', window).map_or(0, |i| i + 1)
}

fn time_string(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> String {
    t.0.to_string()
}

/// Read a deploy's log in byte windows.
#[utoipa::path(get, path = "/apps/{app_id}/channels/{channel_id}/logs", tag = "deploys", security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id"), ("channel_id" = Uuid, Path, description = "Channel id"), LogQuery),
    responses((status = 200, body = DeployLog), (status = 400, body = ErrorEnvelope), (status = 401, body = ErrorEnvelope),
              (status = 403, body = ErrorEnvelope), (status = 404, body = ErrorEnvelope, description = "deploy not found under this app and channel")))]
async fn deploy_log(
    State(state): State<AppState>,
    caller: Caller,
    Path((app_id, channel_id)): Path<(Uuid, Uuid)>,
    Query(query): Query<LogQuery>,
) -> Result<Json<DeployLog>, ApiError> {
    caller.require_scope(scopes::DEPLOY)?;
    let app = access::authorize(&state, &caller, app_id, Action::Read).await?;
    let channel = access::channel_of(&state, &app, channel_id)?;
    let deploy_id = query.deploy.as_deref().ok_or_else(|| {
        ApiError::bad_request("the deploy query parameter (a deploy id) is required")
    })?;
    let max_bytes = query.max_bytes.unwrap_or(DEFAULT_WINDOW);
    if !(1..=MAX_WINDOW).contains(&max_bytes) {
        return Err(ApiError::bad_request(format!(
            "max_bytes must be between 1 and {MAX_WINDOW}"
        )));
    }
    let deploy = deploy_of(&state, &app.namespace, &channel, deploy_id)?;
    let id: Uuid = deploy_id
        .parse()
        .map_err(|_| ApiError::NotFound("deploy"))?;
    let total = slipway_store::db::deploy_logs::size(state.db(), id).await?;
    let w = window(total, query.offset, max_bytes)?;
    let (start, bytes) = if w.snap {
        // One byte more in front tells whether the window already starts on a line.
        let read =
            slipway_store::db::deploy_logs::read(state.db(), id, w.start - 1, w.len + 1).await?;
        let (previous, rest) = read
            .split_first()
            .map_or((None, &[][..]), |(p, r)| (Some(*p), r));
        let skip = snap_to_line(previous, rest);
        (w.start + skip as u64, rest[skip..].to_vec())
    } else {
        (
            w.start,
            slipway_store::db::deploy_logs::read(state.db(), id, w.start, w.len).await?,
        )
    };
    let status = deploy.status.clone().unwrap_or_default();
    Ok(Json(DeployLog {
        deploy_id: deploy_id.to_owned(),
        git_sha: status
            .resolved_sha
            .clone()
            .or_else(|| deploy.spec.sha.clone())
            .or_else(|| deploy.spec.git_ref.clone())
            .unwrap_or_default(),
        rewound_from: rewound_from(&state, &app.namespace, &channel, &deploy),
        status: deploy_phase_name(status.phase).to_owned(),
        stage: deploy.stage(app.app.spec.template).to_owned(),
        started_at: status
            .started_at
            .as_ref()
            .or(deploy.metadata.creation_timestamp.as_ref())
            .map(time_string)
            .unwrap_or_default(),
        finished_at: status.finished_at.as_ref().map(time_string),
        log_bytes: total,
        offset: start,
        window_bytes: bytes.len() as u64,
        log: String::from_utf8_lossy(&bytes).into_owned(),
    }))
}

/// One deploy in a channel's history.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DeployEntry {
    /// The deploy's id (read its log with `GET .../logs?deploy=<id>`).
    pub deploy_id: String,
    /// The commit deployed (as requested until it is resolved).
    pub git_sha: String,
    /// queued, running, success or failed.
    pub status: String,
    /// The status in finer words: queued, building (an app or docker deploy's image), releasing (the pre-deploy
    /// snapshot, the rollout and the readiness check), success or failed.
    pub stage: String,
    /// For a rewind, the id of the earlier deploy whose image it runs again; null for a deploy that builds.
    pub rewound_from: Option<String>,
    /// When it was requested.
    pub created_at: Option<String>,
    /// When it started; null while queued.
    pub started_at: Option<String>,
    /// When it finished; null until then.
    pub finished_at: Option<String>,
    /// The reason a deploy failed, when it states one.
    pub message: Option<String>,
}

/// `GET .../deploys` response.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DeployHistory {
    /// The channel's deploys, newest first.
    pub deploys: Vec<DeployEntry>,
}

/// A channel's deploys, newest first: the history kept (a deploy goes with its channel).
#[utoipa::path(get, path = "/apps/{app_id}/channels/{channel_id}/deploys", tag = "deploys", security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id"), ("channel_id" = Uuid, Path, description = "Channel id")),
    responses((status = 200, body = DeployHistory), (status = 401, body = ErrorEnvelope), (status = 403, body = ErrorEnvelope),
              (status = 404, body = ErrorEnvelope)))]
async fn deploy_history(
    State(state): State<AppState>,
    caller: Caller,
    Path((app_id, channel_id)): Path<(Uuid, Uuid)>,
) -> Result<Json<DeployHistory>, ApiError> {
    caller.require_scope(scopes::DEPLOY)?;
    let app = access::authorize(&state, &caller, app_id, Action::Read).await?;
    let channel = access::channel_of(&state, &app, channel_id)?;
    let deploys = state
        .cache()
        .deploys_of(&app.namespace, &channel.name_any())
        .into_iter()
        .map(|deploy| {
            let status = deploy.status.clone().unwrap_or_default();
            DeployEntry {
                deploy_id: deploy.metadata.uid.clone().unwrap_or_default(),
                git_sha: status
                    .resolved_sha
                    .clone()
                    .or_else(|| deploy.spec.sha.clone())
                    .or_else(|| deploy.spec.git_ref.clone())
                    .unwrap_or_default(),
                status: deploy_phase_name(status.phase).to_owned(),
                stage: deploy.stage(app.app.spec.template).to_owned(),
                rewound_from: rewound_from(&state, &app.namespace, &channel, &deploy),
                created_at: deploy.metadata.creation_timestamp.as_ref().map(time_string),
                started_at: status.started_at.as_ref().map(time_string),
                finished_at: status.finished_at.as_ref().map(time_string),
                message: status.message.clone(),
            }
        })
        .collect();
    Ok(Json(DeployHistory { deploys }))
}

/// The id of the deploy a rewind runs the image of (`spec.rewindOf` names it), null for a deploy that builds; its
/// name when that Deploy is gone.
pub fn rewound_from(
    state: &AppState,
    namespace: &str,
    channel: &Channel,
    deploy: &Deploy,
) -> Option<String> {
    let name = deploy.spec.rewind_of.as_deref()?;
    let id = state
        .cache()
        .deploys_of(namespace, &channel.name_any())
        .into_iter()
        .find(|d| d.name_any() == name)
        .and_then(|d| d.metadata.uid.clone());
    Some(id.unwrap_or_else(|| name.to_owned()))
}

/// The deploy `id` of `channel`; 404 when the channel has no such deploy.
pub(super) fn deploy_of(
    state: &AppState,
    namespace: &str,
    channel: &Channel,
    id: &str,
) -> Result<std::sync::Arc<Deploy>, ApiError> {
    state
        .cache()
        .deploys_of(namespace, &channel.name_any())
        .into_iter()
        .find(|d| d.metadata.uid.as_deref() == Some(id))
        .ok_or_else(|| {
            ApiError::Missing(
                "not_found",
                format!("deploy {id} not found on this channel"),
            )
        })
}

/// One image of the inventory.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ImageView {
    /// Tag (the commit sha).
    pub tag: String,
    /// The commit.
    pub sha: String,
    /// Total size in bytes.
    pub size_bytes: u64,
    /// Size counted against the cap; null when not computed.
    pub charged_size_bytes: Option<u64>,
    /// The recognised warm base, if any.
    pub matched_base: Option<String>,
    /// Unix seconds.
    pub created: i64,
    /// Whether this is the channel's deployed sha.
    pub current: bool,
}

/// Image inventory.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ImageInventory {
    /// Newest first.
    pub images: Vec<ImageView>,
    /// The plan's cap on charged size.
    pub image_cap_bytes: i64,
}

/// The images a channel's deploys built, newest first; empty for static apps.
#[utoipa::path(get, path = "/apps/{app_id}/channels/{channel_id}/images", tag = "deploys", security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id"), ("channel_id" = Uuid, Path, description = "Channel id")),
    responses((status = 200, body = ImageInventory), (status = 401, body = ErrorEnvelope), (status = 403, body = ErrorEnvelope),
              (status = 404, body = ErrorEnvelope)))]
async fn images(
    State(state): State<AppState>,
    caller: Caller,
    Path((app_id, channel_id)): Path<(Uuid, Uuid)>,
) -> Result<Json<ImageInventory>, ApiError> {
    caller.require_scope(scopes::DEPLOY)?;
    let app = access::authorize(&state, &caller, app_id, Action::Read).await?;
    let channel = access::channel_of(&state, &app, channel_id)?;
    let owner = slipway_store::db::users::by_username(state.db(), app.owner.as_str())
        .await?
        .ok_or_else(|| anyhow::anyhow!("owner {} has no account", app.owner))?;
    let plan = Plan::by_tier(&owner.plan)
        .ok_or_else(|| anyhow::anyhow!("owner {} is on unknown plan {}", app.owner, owner.plan))?;
    let current = channel.status.as_ref().and_then(|s| s.current_sha.clone());
    let mut images: Vec<ImageView> = Vec::new();
    if app.app.spec.template != Template::Static {
        for deploy in state
            .cache()
            .deploys_of(&app.namespace, &channel.name_any())
        {
            let Some(image) = deploy.status.as_ref().and_then(|s| s.image.clone()) else {
                continue;
            };
            if images.iter().any(|i| i.tag == image.tag) {
                continue;
            }
            images.push(ImageView {
                current: current.as_deref() == Some(image.tag.as_str()),
                sha: image.tag.clone(),
                tag: image.tag,
                size_bytes: image.size_bytes,
                charged_size_bytes: image.charged_size_bytes,
                matched_base: image.matched_base,
                created: image.created.0.as_second(),
            });
        }
    }
    Ok(Json(ImageInventory {
        images,
        image_cap_bytes: plan.image_size_bytes,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tail_read_starts_on_a_whole_line() {
        let w = window(100, None, 10).unwrap();
        assert_eq!(
            w,
            Window {
                start: 90,
                len: 10,
                snap: true
            }
        );
        assert_eq!(snap_to_line(Some(b'x'), b"ab\ncd\n"), 3);
        assert_eq!(
            snap_to_line(Some(b'\n'), b"ab\ncd\n"),
            0,
            "already on a line start"
        );
        assert_eq!(
            snap_to_line(Some(b'x'), b"abcd"),
            0,
            "no newline: kept whole"
        );
    }

    #[test]
    fn a_short_log_is_read_whole_without_snapping() {
        assert_eq!(
            window(5, None, 16).unwrap(),
            Window {
                start: 0,
                len: 5,
                snap: false
            }
        );
        assert_eq!(
            window(0, None, 16).unwrap(),
            Window {
                start: 0,
                len: 0,
                snap: false
            }
        );
    }

    #[test]
    fn an_explicit_offset_is_byte_exact_and_bounded() {
        assert_eq!(
            window(100, Some(95), 10).unwrap(),
            Window {
                start: 95,
                len: 5,
                snap: false
            }
        );
        assert_eq!(
            window(100, Some(100), 10).unwrap(),
            Window {
                start: 100,
                len: 0,
                snap: false
            }
        );
        assert!(window(100, Some(101), 10).is_err());
    }

    #[test]
    fn a_request_needs_sha_or_ref_and_sha_wins() {
        let req = |sha: Option<&str>, r: Option<&str>| DeployRequest {
            sha: sha.map(str::to_owned),
            git_ref: r.map(str::to_owned),
        };
        assert!(checked_request(req(None, None)).is_err());
        assert!(checked_request(req(Some("not a sha!"), None)).is_err());
        assert!(checked_request(req(None, Some("..bad"))).is_err());
        let sha = "0123456789abcdef0123456789abcdef01234567";
        assert_eq!(
            checked_request(req(Some(sha), Some("ignored..bad"))).unwrap(),
            (Some(sha.to_owned()), None)
        );
        assert_eq!(
            checked_request(req(Some("master"), None)).unwrap(),
            (Some("master".to_owned()), None)
        );
        assert_eq!(
            checked_request(req(None, Some("refs/heads/next"))).unwrap(),
            (None, Some("refs/heads/next".to_owned()))
        );
    }
}
