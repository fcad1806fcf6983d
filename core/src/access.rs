//! Which apps a caller can see, with what role, and what each role may do there. An app the caller cannot see is
//! answered exactly like one that does not exist: 404 `not_found`; a role that does not permit an action is 403
//! `permission_denied` (404 for the few actions whose routes the spec says answer so,
//! [`Action::hidden_below_role`]). [`Action::minimum_role`] is the one table of who may do what; every route asks
//! it.

use std::sync::Arc;

use slipway_crds::labels;
use slipway_crds::names::{AppName, Username};
use slipway_crds::{App, Channel};
use uuid::Uuid;

use super::error::ApiError;
use super::state::AppState;
use crate::caller::Caller;

/// The caller's role on an app, weakest first (so roles compare by what they may do).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// May use the app: read it, push and commit, deploy, set variables.
    Member,
    /// May also administer it: settings, channels, custom domains, secret values, mirror syncs.
    Admin,
    /// Owns the app: may also delete it, share it, and connect or disconnect a mirror.
    Owner,
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

    /// A role a membership can hold (`admin` or `member`; the owner is the App's `spec.owner`, never a membership).
    pub fn parse_membership(s: &str) -> Option<Self> {
        match s {
            "admin" => Some(Role::Admin),
            "member" => Some(Role::Member),
            _ => None,
        }
    }
}

/// What a route does to an app, as far as roles are concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Read the app and what it holds: channels, custom domains, files, logs, images, variables (secret values
    /// null), deploy env snapshots, code downloads, mirror status, the member list, object-store status, exposed
    /// raw-TCP endpoints; fetch over git.
    Read,
    /// Change code and bring it live: push, commit, deploy, set and delete variables.
    Write,
    /// Reveal a secret value.
    RevealSecret,
    /// Read a channel's object-store key pair (a secret: it opens the channel's bucket).
    ReadStoreCredentials,
    /// Download a channel's data: an SQL dump or snapshot, a bucket checkpoint (every row and object, whatever the
    /// app keeps from its members).
    DownloadData,
    /// Replace a channel's data: reset its SQL database, restore it or its bucket to a checkpoint (destructive).
    ReplaceData,
    /// Create and delete channels.
    ManageChannels,
    /// Attach, verify and detach custom domains (they change routing and certificates, like channels).
    ManageDomains,
    /// Expose a channel as a public raw-TCP endpoint, change its allowlist, or unexpose it.
    ManageForwards,
    /// Change the app's access toggles.
    ChangeSettings,
    /// Fetch from the connected external repository now.
    SyncMirror,
    /// Change the agent-access override.
    ChangeAgentAccess,
    /// Add, change and remove members.
    ManageMembers,
    /// Connect or disconnect an external repository.
    ConnectMirror,
    /// Delete the app.
    DeleteApp,
    /// Move the app to another account (console only: no route does it).
    TransferApp,
}

impl Action {
    /// The weakest role that may do it. The spec names three (connect and disconnect: owner; sync: admin; mirror
    /// status: member); the rest are this platform's choices, listed in ARCHITECTURE.md.
    pub fn minimum_role(self) -> Role {
        match self {
            Action::Read | Action::Write => Role::Member,
            Action::RevealSecret
            | Action::ReadStoreCredentials
            | Action::DownloadData
            | Action::ReplaceData
            | Action::ManageChannels
            | Action::ManageDomains
            | Action::ManageForwards
            | Action::ChangeSettings
            | Action::SyncMirror => Role::Admin,
            Action::ChangeAgentAccess
            | Action::ManageMembers
            | Action::ConnectMirror
            | Action::DeleteApp
            | Action::TransferApp => Role::Owner,
        }
    }

    /// How a refusal names it.
    fn describe(self) -> &'static str {
        match self {
            Action::Read => "reading the app",
            Action::Write => "changing code, deploys or variables",
            Action::RevealSecret => "revealing a secret value",
            Action::ReadStoreCredentials => "reading object-store credentials",
            Action::DownloadData => "downloading a channel's data",
            Action::ReplaceData => "resetting or restoring a channel's data",
            Action::ManageChannels => "creating or deleting channels",
            Action::ManageDomains => "attaching, verifying or detaching custom domains",
            Action::ManageForwards => "exposing or unexposing raw TCP endpoints",
            Action::ChangeSettings => "changing settings",
            Action::SyncMirror => "syncing the mirror",
            Action::ChangeAgentAccess => "changing agent access",
            Action::ManageMembers => "changing members",
            Action::ConnectMirror => "connecting or disconnecting a mirror",
            Action::DeleteApp => "deleting the app",
            Action::TransferApp => "transferring the app to another account",
        }
    }

    /// Whether `role` may do it.
    pub fn permitted_to(self, role: Role) -> bool {
        role >= self.minimum_role()
    }

    /// Whether a role below [`Self::minimum_role`] is answered 404 `not_found`, as if the caller could not see the
    /// app, rather than 403: the spec says so of the mirror's routes ("404 (not found or not owner)", "... or not
    /// admin").
    pub fn hidden_below_role(self) -> bool {
        matches!(self, Action::ConnectMirror | Action::SyncMirror)
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

    /// The app as its repository's owner.
    pub fn repo(&self) -> slipway_git_store::RepoOf<'_> {
        slipway_git_store::RepoOf {
            id: self.id,
            owner: &self.owner,
            name: &self.name,
        }
    }

    /// The app's repository, ready to be read and served (in object storage: this replica's cache, synced with
    /// the database). 404 when the app has none.
    pub async fn ready_repo(&self, state: &AppState) -> Result<std::path::PathBuf, ApiError> {
        match state.repos().ready(self.repo()).await {
            Ok(Some(path)) => Ok(path),
            Ok(None) => {
                tracing::warn!(app = %self.id, "app has no repository");
                Err(ApiError::NotFound("repository"))
            }
            Err(e) => Err(ApiError::Internal(e.context("open the app's repository"))),
        }
    }

    /// The app's channels, prod first.
    pub fn channels(&self, state: &AppState) -> Vec<Arc<Channel>> {
        state
            .cache()
            .channels_of(&self.namespace, self.name.as_str())
    }

    /// 403 `permission_denied` unless the caller's role permits `action`.
    pub fn require(&self, action: Action) -> Result<(), ApiError> {
        if action.permitted_to(self.role) {
            Ok(())
        } else if action.hidden_below_role() {
            Err(ApiError::NotFound("app"))
        } else {
            Err(ApiError::PermissionDenied(format!(
                "your role on this app ({}) does not permit {}; that needs {}",
                self.role.as_str(),
                action.describe(),
                action.minimum_role().as_str()
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
    for (app_id, role) in slipway_store::db::members::apps_of(state.db(), caller.user_id).await? {
        let shared = state.cache().app_by_uid(&app_id.to_string());
        if let (Some(app), Some(role)) = (shared, Role::parse_membership(&role)) {
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
    let role = slipway_store::db::members::apps_of(state.db(), user_id)
        .await?
        .into_iter()
        .find(|(app_id, _)| *app_id == id)
        .and_then(|(_, role)| Role::parse_membership(&role))
        .ok_or_else(not_found)?;
    VisibleApp::from_resource(app, role).ok_or_else(not_found)
}

/// The app `id` if the caller can see it (404 otherwise) and their role permits `action` (403 otherwise).
pub async fn authorize(
    state: &AppState,
    caller: &Caller,
    id: Uuid,
    action: Action,
) -> Result<VisibleApp, ApiError> {
    let app = visible_app(state, caller, id).await?;
    app.require(action)?;
    Ok(app)
}

/// 403 `protected_action` for an agent credential unless agent access is on for `app`: its override when set, else
/// the account default of the app's owner (who decides, whoever calls).
pub async fn require_protected(
    state: &AppState,
    caller: &Caller,
    app: &VisibleApp,
    action: &str,
) -> Result<(), ApiError> {
    if !caller.is_agent {
        return Ok(());
    }
    let owner_default = if app.owner.as_str() == caller.username {
        caller.agent_protected_actions_default
    } else {
        slipway_store::db::users::by_username(state.db(), app.owner.as_str())
            .await?
            .ok_or_else(|| {
                anyhow::anyhow!("owner {} of app {} has no account", app.owner, app.name)
            })?
            .agent_protected_actions_default
    };
    Caller {
        agent_protected_actions_default: owner_default,
        ..caller.clone()
    }
    .require_protected_action(app.app.spec.agent_protected_actions_enabled, action)
}

/// The channel `id` of a visible app; 404 when the app has no such channel.
pub fn channel_of(state: &AppState, app: &VisibleApp, id: Uuid) -> Result<Arc<Channel>, ApiError> {
    let id = id.to_string();
    app.channels(state)
        .into_iter()
        .find(|c| c.metadata.uid.as_deref() == Some(id.as_str()))
        .ok_or(ApiError::NotFound("channel"))
}
