//! `GET /apps/{app_id}/health` and `GET /apps/{app_id}/stats`: what an app's channels are doing now, and what its
//! deploys have done. Read from the resource cache (channels and the deploy history kept) and the runtime-log
//! archive (each channel's newest container generation); no metrics server. The spec names the MCP tools
//! (`get_app_health`, `get_app_stats`) and shows no route; these are those routes.

use std::sync::Arc;

use axum::extract::State;
use chrono::{DateTime, Utc};
use kube::ResourceExt;
use serde::{Deserialize, Serialize};
use slipway_crds::deploy::DeployPhase;
use slipway_crds::{Channel, Deploy, Template};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::extract::{Json, Path};
use super::views::{ChannelView, PendingDeployView, deploy_phase_name};
use slipway_auth::scopes;
use slipway_core::access::{self, Action, VisibleApp};
use slipway_core::caller::Caller;
use slipway_core::error::{ApiError, ErrorEnvelope};
use slipway_core::state::AppState;
use slipway_store::db::runtime_logs::Generation;

/// The routes of this module.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(app_health))
        .routes(routes!(app_stats))
}

/// A channel's newest container generation.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ContainerState {
    /// Its generation number (the runtime log's `container_index`).
    pub container_index: i32,
    /// `running`, `waiting` or `exited`.
    pub status: String,
    /// The exit code, once it exited.
    pub exit_code: Option<i32>,
    /// Killed for passing its memory limit.
    pub oom_killed: bool,
    /// How many times its pod restarted it before this generation.
    pub restart_count: i32,
    /// When it started.
    pub started_at: Option<DateTime<Utc>>,
    /// When it ended.
    pub finished_at: Option<DateTime<Utc>>,
}

impl From<&Generation> for ContainerState {
    fn from(g: &Generation) -> Self {
        ContainerState {
            container_index: g.container_index,
            status: g.status.clone(),
            exit_code: g.exit_code,
            oom_killed: g.oom_killed,
            restart_count: g.restart_count,
            started_at: g.started_at,
            finished_at: g.finished_at,
        }
    }
}

/// A finished deploy.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FinishedDeploy {
    /// The deploy's id.
    pub deploy_id: String,
    /// `success` or `failed`.
    pub status: String,
    /// The commit it deployed.
    pub sha: Option<String>,
    /// When it finished.
    pub finished_at: Option<String>,
}

/// One channel's health.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ChannelHealth {
    /// The channel's id.
    pub channel_id: String,
    /// Its name.
    pub channel: String,
    /// `provisioning`, `running` or `failed`.
    pub status: String,
    /// The commit it serves.
    pub current_sha: Option<String>,
    /// The deploy in flight, if any.
    pub pending_deploy: Option<PendingDeployView>,
    /// The newest finished deploy.
    pub last_deploy: Option<FinishedDeploy>,
    /// Its newest container (null for static channels, and until the first one is recorded).
    pub container: Option<ContainerState>,
    /// Whether it serves: running, with its container up.
    pub healthy: bool,
    /// Why not, or what deserves a look.
    pub notes: Vec<String>,
}

/// `GET /apps/{app_id}/health` response.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AppHealth {
    /// The app's id.
    pub app_id: Uuid,
    /// Its name.
    pub app_name: String,
    /// Every channel healthy.
    pub healthy: bool,
    /// Prod first.
    pub channels: Vec<ChannelHealth>,
}

/// Deploys by outcome.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct DeployCounts {
    /// Every deploy kept.
    pub total: usize,
    /// Waiting.
    pub queued: usize,
    /// Building or rolling out.
    pub running: usize,
    /// Went live.
    pub success: usize,
    /// Did not.
    pub failed: usize,
}

impl DeployCounts {
    fn add(&mut self, phase: DeployPhase) {
        self.total += 1;
        match phase {
            DeployPhase::Queued => self.queued += 1,
            DeployPhase::Running => self.running += 1,
            DeployPhase::Success => self.success += 1,
            DeployPhase::Failed => self.failed += 1,
        }
    }

    fn merge(&mut self, other: &DeployCounts) {
        self.total += other.total;
        self.queued += other.queued;
        self.running += other.running;
        self.success += other.success;
        self.failed += other.failed;
    }
}

/// One channel's deploy statistics.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ChannelStats {
    /// The channel's id.
    pub channel_id: String,
    /// Its name.
    pub channel: String,
    /// Its deploys kept, by outcome.
    pub deploys: DeployCounts,
    /// When a deploy last went live.
    pub last_success_at: Option<String>,
    /// Median time from leaving the queue to finishing, over its finished deploys.
    pub median_deploy_seconds: Option<f64>,
}

/// `GET /apps/{app_id}/stats` response.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AppStats {
    /// The app's id.
    pub app_id: Uuid,
    /// Its name.
    pub app_name: String,
    /// `static`, `app` or `docker`.
    pub template: String,
    /// Deploys of every channel, by outcome.
    pub deploys: DeployCounts,
    /// Prod first.
    pub channels: Vec<ChannelStats>,
}

fn phase_of(deploy: &Deploy) -> DeployPhase {
    deploy.status.as_ref().map(|s| s.phase).unwrap_or_default()
}

fn newest_finished(deploys: &[Arc<Deploy>]) -> Option<FinishedDeploy> {
    deploys
        .iter()
        .filter(|d| !phase_of(d).in_flight())
        .max_by_key(|d| d.status.as_ref().and_then(|s| s.finished_at.clone()))
        .map(|d| FinishedDeploy {
            deploy_id: d.metadata.uid.clone().unwrap_or_default(),
            status: deploy_phase_name(phase_of(d)).to_owned(),
            sha: d.known_sha(),
            finished_at: d
                .status
                .as_ref()
                .and_then(|s| s.finished_at.as_ref())
                .map(|t| t.0.to_string()),
        })
}

/// Whether a channel serves, and what to say about it.
fn judge(
    status: &str,
    is_static: bool,
    last_deploy: Option<&FinishedDeploy>,
    container: Option<&ContainerState>,
) -> (bool, Vec<String>) {
    let mut notes = Vec::new();
    let mut healthy = match status {
        "running" => true,
        "provisioning" => {
            notes.push("not deployed yet".to_owned());
            false
        }
        _ => {
            notes.push("the channel failed to provision".to_owned());
            false
        }
    };
    if last_deploy.is_some_and(|d| d.status == "failed") {
        notes.push("the last deploy failed; the version before it keeps serving".to_owned());
    }
    if !is_static {
        match container {
            None if healthy => notes.push("no container recorded yet".to_owned()),
            None => {}
            Some(c) if c.oom_killed => {
                healthy = false;
                notes.push("the container was killed for passing its memory limit".to_owned());
            }
            Some(c) if c.status == "exited" => {
                healthy = false;
                let code = c.exit_code.map_or("unknown".to_owned(), |c| c.to_string());
                notes.push(format!("the container exited with code {code}"));
            }
            Some(c) if c.status == "waiting" => {
                healthy = false;
                notes.push("the container is waiting to start (crashing or pulling)".to_owned());
            }
            Some(_) => {}
        }
        if let Some(c) = container.filter(|c| c.restart_count > 0) {
            notes.push(format!("restarted {} times", c.restart_count));
        }
    }
    (healthy, notes)
}

async fn channel_health(
    state: &AppState,
    app: &VisibleApp,
    channel: &Channel,
) -> Result<ChannelHealth, ApiError> {
    let view = ChannelView::build(state, app, channel);
    let deploys = state
        .cache()
        .deploys_of(&app.namespace, &channel.name_any());
    let last_deploy = newest_finished(&deploys);
    let is_static = app.app.spec.template == Template::Static;
    let container = match view.id.parse::<Uuid>() {
        Ok(id) if !is_static => slipway_store::db::runtime_logs::newest(state.db(), id)
            .await?
            .as_ref()
            .map(ContainerState::from),
        _ => None,
    };
    let (healthy, notes) = judge(
        &view.status,
        is_static,
        last_deploy.as_ref(),
        container.as_ref(),
    );
    Ok(ChannelHealth {
        channel_id: view.id,
        channel: view.name,
        status: view.status,
        current_sha: view.current_sha,
        pending_deploy: view.pending_deploy,
        last_deploy,
        container,
        healthy,
        notes,
    })
}

/// Whether each channel of the app serves now: its status, the deploy in flight and the last finished, and its
/// newest container (any member; `stats:read`).
#[utoipa::path(get, path = "/apps/{app_id}/health", tag = "apps", security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id")),
    responses((status = 200, body = AppHealth), (status = 401, body = ErrorEnvelope),
              (status = 403, body = ErrorEnvelope, description = "scope_denied (stats:read)"), (status = 404, body = ErrorEnvelope)))]
async fn app_health(
    State(state): State<AppState>,
    caller: Caller,
    Path(app_id): Path<Uuid>,
) -> Result<Json<AppHealth>, ApiError> {
    caller.require_scope(scopes::STATS_READ)?;
    let app = access::authorize(&state, &caller, app_id, Action::Read).await?;
    let mut channels = Vec::new();
    for channel in app.channels(&state) {
        channels.push(channel_health(&state, &app, &channel).await?);
    }
    Ok(Json(AppHealth {
        app_id: app.id,
        app_name: app.name.to_string(),
        healthy: channels.iter().all(|c| c.healthy),
        channels,
    }))
}

fn median(mut values: Vec<f64>) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    Some(if values.len().is_multiple_of(2) {
        f64::midpoint(values[middle - 1], values[middle])
    } else {
        values[middle]
    })
}

fn channel_stats(state: &AppState, app: &VisibleApp, channel: &Channel) -> ChannelStats {
    let deploys = state
        .cache()
        .deploys_of(&app.namespace, &channel.name_any());
    let mut counts = DeployCounts::default();
    let mut durations = Vec::new();
    for deploy in &deploys {
        counts.add(phase_of(deploy));
        if let Some((Some(start), Some(end))) = deploy
            .status
            .as_ref()
            .map(|s| (s.started_at.as_ref(), s.finished_at.as_ref()))
        {
            durations.push(end.0.duration_since(start.0).as_secs_f64());
        }
    }
    let last_success_at = deploys
        .iter()
        .filter(|d| phase_of(d) == DeployPhase::Success)
        .filter_map(|d| d.status.as_ref().and_then(|s| s.finished_at.clone()))
        .max()
        .map(|t| t.0.to_string());
    ChannelStats {
        channel_id: channel.metadata.uid.clone().unwrap_or_default(),
        channel: channel.channel_name().to_owned(),
        deploys: counts,
        last_success_at,
        median_deploy_seconds: median(durations),
    }
}

/// The app's deploys by outcome, per channel and in all, with the median deploy time (any member; `stats:read`).
/// Counted over the deploy history the platform keeps.
#[utoipa::path(get, path = "/apps/{app_id}/stats", tag = "apps", security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id")),
    responses((status = 200, body = AppStats), (status = 401, body = ErrorEnvelope),
              (status = 403, body = ErrorEnvelope, description = "scope_denied (stats:read)"), (status = 404, body = ErrorEnvelope)))]
async fn app_stats(
    State(state): State<AppState>,
    caller: Caller,
    Path(app_id): Path<Uuid>,
) -> Result<Json<AppStats>, ApiError> {
    caller.require_scope(scopes::STATS_READ)?;
    let app = access::authorize(&state, &caller, app_id, Action::Read).await?;
    let channels: Vec<ChannelStats> = app
        .channels(&state)
        .iter()
        .map(|c| channel_stats(&state, &app, c))
        .collect();
    let mut deploys = DeployCounts::default();
    for channel in &channels {
        deploys.merge(&channel.deploys);
    }
    Ok(Json(AppStats {
        app_id: app.id,
        app_name: app.name.to_string(),
        template: app.app.spec.template.as_str().to_owned(),
        deploys,
        channels,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container(status: &str, exit_code: Option<i32>, oom: bool, restarts: i32) -> ContainerState {
        ContainerState {
            container_index: 0,
            status: status.to_owned(),
            exit_code,
            oom_killed: oom,
            restart_count: restarts,
            started_at: None,
            finished_at: None,
        }
    }

    #[test]
    fn a_running_channel_is_healthy_while_its_container_runs() {
        assert_eq!(judge("running", true, None, None), (true, vec![]));
        let up = container("running", None, false, 0);
        assert_eq!(judge("running", false, None, Some(&up)), (true, vec![]));
        let restarted = container("running", None, false, 2);
        let (healthy, notes) = judge("running", false, None, Some(&restarted));
        assert!(healthy);
        assert_eq!(notes, ["restarted 2 times"]);
    }

    #[test]
    fn an_exited_or_killed_container_or_an_undeployed_channel_is_not() {
        let exited = container("exited", Some(3), false, 0);
        let (healthy, notes) = judge("running", false, None, Some(&exited));
        assert!(!healthy);
        assert_eq!(notes, ["the container exited with code 3"]);
        let killed = container("exited", Some(137), true, 1);
        let (healthy, notes) = judge("running", false, None, Some(&killed));
        assert!(!healthy);
        assert!(notes[0].contains("memory limit"), "{notes:?}");
        assert!(!judge("provisioning", true, None, None).0);
        assert!(!judge("failed", false, None, None).0);
    }

    #[test]
    fn a_failed_last_deploy_is_noted_while_the_old_version_serves() {
        let failed = FinishedDeploy {
            deploy_id: "d".into(),
            status: "failed".into(),
            sha: None,
            finished_at: None,
        };
        let (healthy, notes) = judge("running", true, Some(&failed), None);
        assert!(healthy);
        assert!(notes[0].contains("last deploy failed"), "{notes:?}");
    }

    #[test]
    fn the_median_of_an_even_count_is_the_middle_pair_s_mean() {
        assert_eq!(median(vec![]), None);
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), Some(2.5));
    }
}
