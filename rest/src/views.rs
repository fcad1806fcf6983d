//! The JSON shapes of the hosting API, built from the custom resources. Field names are the spec's, exactly.

use serde::{Deserialize, Serialize};
use slipway_crds::names::{self, ChannelName};
use slipway_crds::plans::Plan;
use slipway_crds::{Channel, DeployPhase};

use slipway_core::access::VisibleApp;
use slipway_core::state::AppState;

/// An app.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AppView {
    /// Id (uuid).
    pub id: String,
    /// Name.
    pub name: String,
    /// HTTPS clone URL on the git host.
    pub repo_url: String,
    /// `static`, `app` or `docker`.
    pub template: String,
    /// Creation time (ISO 8601 UTC).
    pub created_at: Option<String>,
    /// Opt-in for external SQL access.
    pub external_db_access_enabled: bool,
    /// Opt-in for external object-store access.
    pub external_blob_access_enabled: bool,
    /// App toggle for public raw-TCP endpoints.
    pub port_forwarding_enabled: bool,
    /// Whether the owner's plan includes port forwarding.
    pub port_forwarding_available: bool,
    /// Per-app override of the agent-access switch; null inherits the owner's account default.
    pub agent_protected_actions_enabled: Option<bool>,
    /// The value that applies now.
    pub agent_protected_actions_effective: bool,
    /// Every channel of the app, prod first.
    pub channels: Vec<ChannelView>,
    /// Username of the owner.
    pub owner_username: String,
    /// The caller's role: owner, admin or member.
    pub role: String,
}

/// A channel.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ChannelView {
    /// Id (uuid).
    pub id: String,
    /// Name.
    pub name: String,
    /// Hostname.
    pub hostname: String,
    /// `branch:<name>`.
    pub git_ref_binding: String,
    /// 40-hex commit deployed; null before the first deploy.
    pub current_sha: Option<String>,
    /// `provisioning`, `running` or `failed`.
    pub status: String,
    /// Newest queued or running deploy; null when nothing is in flight.
    pub pending_deploy: Option<PendingDeployView>,
}

/// A deploy in flight.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PendingDeployView {
    /// Deploy id.
    pub deploy_id: String,
    /// Commit being deployed: known from the deploy call on (the API resolves a branch then); null only for a
    /// Deploy written with kubectl naming a branch, until it starts, or for a name that resolved to no commit.
    pub sha: Option<String>,
    /// `queued` or `running`.
    pub status: String,
    /// The status in finer words: `queued`, `building` (an app or docker deploy's image) or `releasing` (the
    /// pre-deploy snapshot, the rollout and the readiness check).
    pub stage: String,
}

/// Facts about the owner that some app fields depend on.
pub struct OwnerFacts<'a> {
    /// The owner's plan.
    pub plan: &'a Plan,
    /// The owner's account default of the agent-access switch.
    pub agent_protected_actions_default: bool,
}

/// The wire name of a deploy status.
pub fn deploy_phase_name(p: DeployPhase) -> &'static str {
    match p {
        DeployPhase::Queued => "queued",
        DeployPhase::Running => "running",
        DeployPhase::Success => "success",
        DeployPhase::Failed => "failed",
    }
}

/// The channel's newest deploy in flight, read from the Deploy cache (so a client sees the deploy it just
/// created, before any reconciler ran).
fn pending_deploy(
    state: &AppState,
    app: &VisibleApp,
    channel: &Channel,
) -> Option<PendingDeployView> {
    let (namespace, template) = (&app.namespace, app.app.spec.template);
    let name = channel.metadata.name.as_deref()?;
    state
        .cache()
        .newest_deploy_of(namespace, name, |d| {
            d.status
                .as_ref()
                .map(|s| s.phase)
                .unwrap_or_default()
                .in_flight()
        })
        .map(|d| PendingDeployView {
            deploy_id: d.metadata.uid.clone().unwrap_or_default(),
            sha: d.known_sha(),
            status: deploy_phase_name(d.status.as_ref().map(|s| s.phase).unwrap_or_default())
                .to_owned(),
            stage: d.stage(template).to_owned(),
        })
}

impl ChannelView {
    /// The view of `channel` of `app`; the hostname is derived from the names, so it is right before any
    /// reconciler has run.
    pub fn build(state: &AppState, app: &VisibleApp, channel: &Channel) -> Self {
        let name = channel.channel_name().to_owned();
        let hostname = name
            .parse::<ChannelName>()
            .ok()
            .and_then(|c| {
                names::channel_hostname(&app.name, &c, &app.owner, &state.names().app_domain).ok()
            })
            .unwrap_or_default();
        let status = channel.status.clone().unwrap_or_default();
        Self {
            id: channel.metadata.uid.clone().unwrap_or_default(),
            name,
            hostname,
            git_ref_binding: channel.spec.git_ref_binding.clone(),
            status: status.derived_phase().as_str().to_owned(),
            current_sha: status.current_sha,
            pending_deploy: pending_deploy(state, app, channel),
        }
    }
}

impl AppView {
    /// The view of a visible app with its channels.
    pub fn build(state: &AppState, app: &VisibleApp, owner: &OwnerFacts<'_>) -> Self {
        let spec = &app.app.spec;
        let channels = app
            .channels(state)
            .iter()
            .map(|c| ChannelView::build(state, app, c))
            .collect();
        Self {
            id: app.id.to_string(),
            name: app.name.to_string(),
            repo_url: state
                .names()
                .repo_url(app.owner.as_str(), app.name.as_str()),
            template: spec.template.as_str().to_owned(),
            created_at: app
                .app
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.to_string()),
            external_db_access_enabled: spec.external_db_access_enabled,
            external_blob_access_enabled: spec.external_blob_access_enabled,
            port_forwarding_enabled: spec.port_forwarding_enabled,
            port_forwarding_available: owner.plan.port_forwarding,
            agent_protected_actions_enabled: spec.agent_protected_actions_enabled,
            agent_protected_actions_effective: spec
                .agent_protected_actions_enabled
                .unwrap_or(owner.agent_protected_actions_default),
            channels,
            owner_username: app.owner.to_string(),
            role: app.role.as_str().to_owned(),
        }
    }
}
