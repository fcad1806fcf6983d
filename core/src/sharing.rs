//! Sharing an app: the owner adds people by username as `admin` or `member`, changes their role, and removes them.
//! What each role may do is decided in one place, [`crate::access::Action`]; this module keeps the list.
//! Routes and MCP tools call these functions after checking the caller's role.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::access::{Role, VisibleApp};
use crate::error::ApiError;
use crate::state::AppState;
use slipway_store::db::members;

/// A person with a role on an app.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MemberView {
    /// Their username.
    pub username: String,
    /// `owner`, `admin` or `member`.
    pub role: String,
    /// Since when (the app's creation for its owner).
    pub created_at: Option<DateTime<Utc>>,
}

/// `GET /apps/{app_id}/members` response.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MemberList {
    /// The owner first, then the members in the order they were added.
    pub members: Vec<MemberView>,
}

/// Everyone with a role on `app`.
pub async fn list(state: &AppState, app: &VisibleApp) -> Result<MemberList, ApiError> {
    let owner = MemberView {
        username: app.owner.to_string(),
        role: Role::Owner.as_str().to_owned(),
        created_at: app
            .app
            .metadata
            .creation_timestamp
            .as_ref()
            .and_then(|t| DateTime::from_timestamp(t.0.as_second(), 0)),
    };
    let rest = members::of_app(state.db(), app.id)
        .await?
        .into_iter()
        .map(view);
    Ok(MemberList {
        members: std::iter::once(owner).chain(rest).collect(),
    })
}

fn view(m: members::Member) -> MemberView {
    MemberView {
        username: m.username,
        role: m.role,
        created_at: Some(m.created_at),
    }
}

/// Gives `username` the role `role` (`admin` or `member`) on `app`, adding them if they are not a member yet.
pub async fn put(
    state: &AppState,
    app: &VisibleApp,
    username: &str,
    role: &str,
) -> Result<MemberView, ApiError> {
    let role = Role::parse_membership(role).ok_or_else(|| {
        ApiError::bad_request(format!("role must be admin or member, not {role:?}"))
    })?;
    if username == app.owner.as_str() {
        return Err(ApiError::bad_request(format!(
            "{username} owns this app; ownership is not a membership"
        )));
    }
    let user = account(state, username).await?;
    Ok(view(
        members::put(state.db(), app.id, user.id, role.as_str()).await?,
    ))
}

/// Removes `username` from `app`; 404 when they are not a member.
pub async fn remove(state: &AppState, app: &VisibleApp, username: &str) -> Result<(), ApiError> {
    let user = account(state, username).await?;
    if members::remove(state.db(), app.id, user.id).await? {
        Ok(())
    } else {
        Err(ApiError::Missing(
            "not_found",
            format!("{username} is not a member of this app"),
        ))
    }
}

async fn account(
    state: &AppState,
    username: &str,
) -> Result<slipway_store::db::users::User, ApiError> {
    slipway_store::db::users::by_username(state.db(), username)
        .await?
        .ok_or_else(|| ApiError::Missing("not_found", format!("no account is named {username:?}")))
}
