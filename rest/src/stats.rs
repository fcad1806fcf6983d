//! `GET /api/user/stats`: counts and one row per site (channel) over every app the caller can see, shared ones
//! included, and what the caller's own running containers hold of the cluster (their plan's memory and CPU per
//! container). Read from the resource cache: no database scan, no metrics server.

use axum::extract::State;
use kube::ResourceExt;
use serde::Serialize;
use slipway_crds::app::Template;
use slipway_crds::channel::ChannelPhase;
use slipway_crds::plans::Plan;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::extract::Json;
use slipway_auth::scopes;
use slipway_core::access::{self, Role};
use slipway_core::caller::Caller;
use slipway_core::error::{ApiError, ErrorEnvelope};
use slipway_core::state::AppState;

/// The routes of this module.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(user_stats))
}

/// `GET /api/user/stats` response.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct UserStats {
    /// Apps the caller can see.
    pub apps: AppCounts,
    /// Their channels, by phase.
    pub channels: ChannelCounts,
    /// One row per channel of those apps, by app then channel name.
    pub sites: Vec<Site>,
    /// What the caller's own apps' running containers hold.
    pub resources: Resources,
}

/// App counts.
#[derive(Debug, Default, Serialize, utoipa::ToSchema)]
pub struct AppCounts {
    /// All apps the caller can see.
    pub total: usize,
    /// Apps the caller owns.
    pub owned: usize,
    /// Apps shared with the caller.
    pub shared: usize,
}

/// Channel counts by phase.
#[derive(Debug, Default, Serialize, utoipa::ToSchema)]
pub struct ChannelCounts {
    /// All channels.
    pub total: usize,
    /// Serving a deploy.
    pub running: usize,
    /// Not deployed yet.
    pub provisioning: usize,
    /// Provisioning failed.
    pub failed: usize,
}

/// One channel.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Site {
    /// The app's id.
    pub app_id: Uuid,
    /// The app's name.
    pub app_name: String,
    /// The app's owner.
    pub owner: String,
    /// The caller's role on it.
    pub role: String,
    /// `static`, `app` or `docker`.
    pub template: String,
    /// The channel's id.
    pub channel_id: Option<Uuid>,
    /// The channel's name.
    pub channel: String,
    /// Its hostname.
    pub hostname: Option<String>,
    /// `provisioning`, `running` or `failed`.
    pub status: String,
    /// The commit it serves.
    pub current_sha: Option<String>,
}

/// The caller's own running containers and what their plan gives each.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Resources {
    /// The caller's plan.
    pub plan: String,
    /// Running `app` and `docker` channels of the caller's own apps (one container each; static sites run none).
    pub running_containers: usize,
    /// Memory limit of each, in MiB.
    pub memory_limit_mb_per_container: u32,
    /// Memory they hold together, in MiB.
    pub memory_mb: u64,
    /// CPU they are guaranteed together, in cores.
    pub cpu_soft_cores: f64,
    /// CPU each may burst to, in cores.
    pub cpu_burst_cores_per_container: f64,
}

/// Counts and sites over every app the caller can see, and the caller's own containers' memory and CPU.
#[utoipa::path(get, path = "/api/user/stats", tag = "plans", security(("bearer" = [])),
    responses((status = 200, body = UserStats), (status = 401, body = ErrorEnvelope),
              (status = 403, body = ErrorEnvelope, description = "scope_denied (stats:read)")))]
async fn user_stats(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<UserStats>, ApiError> {
    caller.require_scope(scopes::STATS_READ)?;
    let plan = Plan::by_tier(&caller.plan)
        .ok_or_else(|| anyhow::anyhow!("unknown plan {}", caller.plan))?;
    let mut apps = AppCounts::default();
    let mut channels = ChannelCounts::default();
    let mut sites = Vec::new();
    let mut running_containers = 0;
    for app in access::visible_apps(&state, &caller).await? {
        apps.total += 1;
        if app.role == Role::Owner {
            apps.owned += 1;
        } else {
            apps.shared += 1;
        }
        let template = app.app.spec.template;
        let mut of_app = state.cache().channels_of(&app.namespace, app.name.as_str());
        of_app.sort_by(|a, b| a.channel_name().cmp(b.channel_name()));
        for channel in of_app {
            let status = channel.status.clone().unwrap_or_default();
            channels.total += 1;
            let phase = status.derived_phase();
            match phase {
                ChannelPhase::Running => channels.running += 1,
                ChannelPhase::Provisioning => channels.provisioning += 1,
                ChannelPhase::Failed => channels.failed += 1,
            }
            if app.role == Role::Owner
                && template != Template::Static
                && phase == ChannelPhase::Running
            {
                running_containers += 1;
            }
            sites.push(Site {
                app_id: app.id,
                app_name: app.name.to_string(),
                owner: app.owner.to_string(),
                role: app.role.as_str().to_owned(),
                template: template.as_str().to_owned(),
                channel_id: channel.uid().and_then(|u| u.parse().ok()),
                channel: channel.channel_name().to_owned(),
                hostname: status.hostname.clone(),
                status: phase.as_str().to_owned(),
                current_sha: status.current_sha.clone(),
            });
        }
    }
    Ok(Json(UserStats {
        apps,
        channels,
        sites,
        resources: Resources {
            plan: plan.tier.to_owned(),
            running_containers,
            memory_limit_mb_per_container: plan.mem_limit_mb,
            memory_mb: u64::from(plan.mem_limit_mb) * running_containers as u64,
            cpu_soft_cores: plan.cpu_soft_cores * running_containers as f64,
            cpu_burst_cores_per_container: plan.cpu_burst,
        },
    }))
}
