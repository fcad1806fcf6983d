//! Which apps a caller can see, and with what role. An app the caller cannot see is answered exactly like one that
//! does not exist: 404 `not_found`.

use std::sync::Arc;

use slipway_crds::labels;
use slipway_crds::names::{AppName, Username};
use slipway_crds::{App, Channel};
use uuid::Uuid;

use super::error::ApiError;
use super::state::AppState;
use crate::auth::Caller;

/// The caller's role on an app.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Owns the app.
    Owner,
    /// May administer it (sync a mirror, ...).
    Admin,
    /// May use it.
    Member,
}

impl Role {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Owner => "owner",
            Role::Admin => "admin",
            Role::Member => "member",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s {
            "admin" => Some(Role::Admin),
            "member" => Some(Role::Member),
            _ => None,
        }
    }
}

/// An app the caller can see.
#[derive(Debug, Clone)]
pub struct VisibleApp {
    /// The resource.
    pub app: Arc<App>,
    /// Its id (the resource's uid).
    pub id: Uuid,
    /// Its name.
    pub name: AppName,
    /// Its owner.
    pub owner: Username,
    /// The namespace it lives in.
    pub namespace: String,
    /// The caller's role.
    pub role: Role,
}

impl VisibleApp {
    /// The app as seen with `role`; `None` when the resource lacks a uid, a valid name or owner.
    pub fn from_resource(app: Arc<App>, role: Role) -> Option<Self> {
        let id = app.metadata.uid.as_deref()?.parse().ok()?;
        let name = app.metadata.name.as_deref()?.parse().ok()?;
        let owner = app.spec.owner.parse().ok()?;
        let namespace = app.metadata.namespace.clone()?;
        Some(Self {
            app,
            id,
            name,
            owner,
            namespace,
            role,
        })
    }

    /// The app's channels, prod first.
    pub fn channels(&self, state: &AppState) -> Vec<Arc<Channel>> {
        state
            .cache()
            .channels_of(&self.namespace, self.name.as_str())
    }

    /// 403 `permission_denied` unless the caller's role is one of `roles`.
    pub fn require_role(&self, roles: &[Role], action: &str) -> Result<(), ApiError> {
        if roles.contains(&self.role) {
            Ok(())
        } else {
            Err(ApiError::PermissionDenied(format!(
                "your role on this app ({}) does not permit {action}",
                self.role.as_str()
            )))
        }
    }
}

/// The caller's own namespace.
pub fn own_namespace(caller: &Caller) -> Result<String, ApiError> {
    let username: Username = caller.username.parse().map_err(|_| {
        ApiError::Internal(anyhow::anyhow!(
            "stored username {} is invalid",
            caller.username
        ))
    })?;
    Ok(labels::user_namespace(&username))
}

/// Every app the caller can see: the apps they own, then the apps shared with them.
pub async fn visible_apps(state: &AppState, caller: &Caller) -> Result<Vec<VisibleApp>, ApiError> {
    let own_ns = own_namespace(caller)?;
    let mut apps: Vec<VisibleApp> = state
        .cache()
        .apps_in(&own_ns)
        .into_iter()
        .filter(|a| a.spec.owner == caller.username)
        .filter_map(|a| VisibleApp::from_resource(a, Role::Owner))
        .collect();
    for (app_id, role) in crate::db::members::apps_of(state.db(), caller.user_id).await? {
        let shared = state.cache().app_by_uid(&app_id.to_string());
        if let (Some(app), Some(role)) = (shared, Role::parse(&role)) {
            apps.extend(VisibleApp::from_resource(app, role));
        }
    }
    apps.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(apps)
}

/// The app `id` if the caller can see it; 404 otherwise.
pub async fn visible_app(
    state: &AppState,
    caller: &Caller,
    id: Uuid,
) -> Result<VisibleApp, ApiError> {
    visible_app_to(state, caller.user_id, &caller.username, id).await
}

/// The app `id` if the account `user_id` (named `username`) can see it; 404 otherwise. The git transports use it
/// for callers known by an SSH key rather than a token.
pub async fn visible_app_to(
    state: &AppState,
    user_id: Uuid,
    username: &str,
    id: Uuid,
) -> Result<VisibleApp, ApiError> {
    let not_found = || ApiError::NotFound("app");
    let app = state
        .cache()
        .app_by_uid(&id.to_string())
        .ok_or_else(not_found)?;
    let own_namespace = username
        .parse::<Username>()
        .map(|u| labels::user_namespace(&u))
        .map_err(|_| {
            ApiError::Internal(anyhow::anyhow!("stored username {username} is invalid"))
        })?;
    if app.spec.owner == username
        && app.metadata.namespace.as_deref() == Some(own_namespace.as_str())
    {
        return VisibleApp::from_resource(app, Role::Owner).ok_or_else(not_found);
    }
    let role = crate::db::members::apps_of(state.db(), user_id)
        .await?
        .into_iter()
        .find(|(app_id, _)| *app_id == id)
        .and_then(|(_, role)| Role::parse(&role))
        .ok_or_else(not_found)?;
    VisibleApp::from_resource(app, role).ok_or_else(not_found)
}

/// The channel `id` of a visible app; 404 when the app has no such channel.
pub fn channel_of(state: &AppState, app: &VisibleApp, id: Uuid) -> Result<Arc<Channel>, ApiError> {
    let id = id.to_string();
    app.channels(state)
        .into_iter()
        .find(|c| c.metadata.uid.as_deref() == Some(id.as_str()))
        .ok_or(ApiError::NotFound("channel"))
}
