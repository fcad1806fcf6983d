//! The API's views as the pages' unit tests build them.

use slipway_rest::views::{AppView, ChannelView, PendingDeployView};

/// App `web` (id `a1`) of `ann`, seen in `role`, with no channels; external SQL access on, the rest off.
pub fn app(role: &str) -> AppView {
    AppView {
        id: "a1".into(),
        name: "web".into(),
        repo_url: String::new(),
        template: "app".into(),
        created_at: None,
        external_db_access_enabled: true,
        external_blob_access_enabled: false,
        port_forwarding_enabled: false,
        port_forwarding_available: false,
        agent_protected_actions_enabled: None,
        agent_protected_actions_effective: false,
        channels: vec![],
        owner_username: "ann".into(),
        role: role.into(),
    }
}

/// Channel `name` (id `c1`) in `status`, with a deploy in flight in `pending` when given.
pub fn channel(name: &str, status: &str, pending: Option<&str>) -> ChannelView {
    ChannelView {
        id: "c1".into(),
        name: name.into(),
        hostname: String::new(),
        git_ref_binding: "branch:master".into(),
        current_sha: None,
        status: status.into(),
        pending_deploy: pending.map(|status| PendingDeployView {
            deploy_id: "d1".into(),
            sha: None,
            status: status.into(),
            stage: status.into(),
        }),
    }
}
