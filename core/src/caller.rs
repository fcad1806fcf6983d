//! Who is calling: bearer tokens, their scopes, and the checks every route makes (scope, protected action).
//!
//! A request carries `Authorization: Bearer svc_...`; the token's SHA-256 is looked up in the platform database.
//! The [`Caller`] extractor answers 401 `auth_required` without a bearer, 401 `token_invalid` for an unknown or
//! expired token and 401 `token_revoked` for a revoked one (or one minted from a revoked token). A token minted
//! for one path (a snapshot's download token) is refused everywhere else with 403 `scope_denied`, git and SSH
//! included; so is a token of the MCP server's OAuth sign-in ([`crate::oauth`]) anywhere but the MCP endpoint and
//! the routes its tools call in-process. Each token has a request budget (`slipway_auth::rate`); past it, 429
//! `too_many_requests`.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::error::ApiError;
use super::state::AppState;
use slipway_auth::{MCP_PATH, token};

impl From<&Caller> for slipway_store::db::audit::Actor {
    /// The account and token of `caller`.
    fn from(caller: &Caller) -> Self {
        Self {
            user_id: caller.user_id,
            token_id: caller.token_id,
        }
    }
}

/// The authenticated caller of a request.
#[derive(Debug, Clone)]
pub struct Caller {
    /// Account id.
    pub user_id: Uuid,
    /// Username.
    pub username: String,
    /// Plan tier.
    pub plan: String,
    /// The token used.
    pub token_id: Uuid,
    /// Scopes of the token.
    pub scopes: Vec<String>,
    /// Whether the token belongs to an agent.
    pub is_agent: bool,
    /// When the token expires.
    pub expires_at: Option<DateTime<Utc>>,
    /// Account default of the agent-access switch.
    pub agent_protected_actions_default: bool,
    /// The one path the token is good for (a download token); `None` for every route its scopes allow.
    pub only_path: Option<String>,
    /// The one endpoint the token is good at (`mcp`: the MCP server's OAuth sign-in); `None` for every route its
    /// scopes allow. A token it mints carries it on (`slipway_rest::tokens`).
    pub audience: Option<String>,
}

impl Caller {
    /// 403 `scope_denied` naming `scope` unless the token carries it.
    pub fn require_scope(&self, scope: &str) -> Result<(), ApiError> {
        if self.scopes.iter().any(|s| s == scope) {
            Ok(())
        } else {
            Err(ApiError::ScopeDenied(scope.to_owned()))
        }
    }

    /// 403 `protected_action` for an agent credential unless agent access is on for the app: the app's override
    /// when set, else the account default.
    pub fn require_protected_action(
        &self,
        app_override: Option<bool>,
        action: &str,
    ) -> Result<(), ApiError> {
        if self.is_agent && !app_override.unwrap_or(self.agent_protected_actions_default) {
            return Err(ApiError::ProtectedAction(action.to_owned()));
        }
        Ok(())
    }
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let place = Place::Route {
            path: parts.uri.path(),
            via_mcp: parts.extensions.get::<ViaMcp>().is_some(),
        };
        authenticate_at(state, bearer(&parts.headers)?, place).await
    }
}

/// Marks a request the MCP server's tools make in-process (a request extension, which no client can send), so a
/// token bound to the MCP endpoint is taken there.
#[derive(Debug, Clone, Copy)]
pub struct ViaMcp;

/// Where a token is presented.
#[derive(Debug, Clone, Copy)]
enum Place<'a> {
    /// A REST route at `path`, called by a client or by an MCP tool in-process.
    Route { path: &'a str, via_mcp: bool },
    /// The MCP endpoint.
    Mcp,
    /// Anywhere else: git over HTTP or SSH, the SQL listener.
    Elsewhere,
}

/// The bearer token of a request: 401 `auth_required` without one, 401 `token_invalid` when the header is not text.
pub fn bearer(headers: &axum::http::HeaderMap) -> Result<&str, ApiError> {
    let header = headers
        .get(axum::http::header::AUTHORIZATION)
        .ok_or(ApiError::AuthRequired)?;
    let value = header.to_str().map_err(|_| ApiError::TokenInvalid)?;
    let (scheme, token) = value.split_once(' ').ok_or(ApiError::AuthRequired)?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(ApiError::AuthRequired);
    }
    Ok(token.trim())
}

/// Resolves a plaintext token to its caller outside a route (git's basic auth), and spends one request of the
/// token's budget. Tokens good for one path only, or for the MCP endpoint only, are refused.
pub async fn authenticate(state: &AppState, token: &str) -> Result<Caller, ApiError> {
    authenticate_at(state, token, Place::Elsewhere).await
}

/// Resolves a plaintext token presented at the MCP endpoint, and spends one request of its budget.
pub async fn authenticate_mcp(state: &AppState, token: &str) -> Result<Caller, ApiError> {
    authenticate_at(state, token, Place::Mcp).await
}

/// Resolves a plaintext token to its caller for a request at `place`, and spends one request of its budget.
async fn authenticate_at(
    state: &AppState,
    token: &str,
    place: Place<'_>,
) -> Result<Caller, ApiError> {
    if !token::looks_like_token(token) {
        return Err(ApiError::TokenInvalid);
    }
    let row = state
        .tokens()
        .by_hash(state.db(), &token::hash(token))
        .await?
        .ok_or(ApiError::TokenInvalid)?;
    if row.revoked_at.is_some() {
        return Err(ApiError::TokenRevoked);
    }
    if row.expires_at.is_some_and(|at| at <= Utc::now()) {
        return Err(ApiError::TokenInvalid);
    }
    let path = match place {
        Place::Route { path, .. } => Some(path),
        Place::Mcp | Place::Elsewhere => None,
    };
    if let Some(only) = &row.only_path
        && path != Some(only.as_str())
    {
        return Err(ApiError::TokenLimited(format!("GET {only}")));
    }
    let at_mcp = matches!(place, Place::Mcp | Place::Route { via_mcp: true, .. });
    if row.audience.as_deref() == Some(slipway_store::db::tokens::MCP_AUDIENCE) && !at_mcp {
        return Err(ApiError::TokenLimited(format!(
            "the MCP endpoint {}",
            MCP_PATH
        )));
    }
    state
        .spend_request(row.id)
        .map_err(ApiError::TooManyRequests)?;
    state.token_uses().note(state.db(), row.id);
    Ok(Caller {
        user_id: row.user_id,
        username: row.username,
        plan: row.plan,
        token_id: row.id,
        scopes: row.scopes,
        is_agent: row.is_agent,
        expires_at: row.expires_at,
        agent_protected_actions_default: row.agent_protected_actions_default,
        only_path: row.only_path,
        audience: row.audience,
    })
}

/// The username and password of an `Authorization: Basic` header; `None` for any other header or none.
pub fn basic_credentials(headers: &axum::http::HeaderMap) -> Option<(String, String)> {
    use base64::Engine;
    let value = headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, rest) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(rest.trim())
        .ok()?;
    let (username, password) = String::from_utf8(decoded)
        .ok()?
        .split_once(':')
        .map(|(u, p)| (u.to_owned(), p.to_owned()))?;
    Some((username, password))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(is_agent: bool, default: bool) -> Caller {
        Caller {
            user_id: Uuid::nil(),
            username: "alice".into(),
            plan: "basic".into(),
            token_id: Uuid::nil(),
            scopes: vec!["repo:*".into()],
            is_agent,
            expires_at: None,
            agent_protected_actions_default: default,
            only_path: None,
            audience: None,
        }
    }

    #[test]
    fn scopes_are_named_in_the_denial() {
        assert!(caller(false, false).require_scope("repo:*").is_ok());
        let err = caller(false, false).require_scope("deploy:*").unwrap_err();
        assert!(matches!(err, ApiError::ScopeDenied(s) if s == "deploy:*"));
    }

    #[test]
    fn protected_actions_follow_the_override_then_the_account_default() {
        let person = caller(false, false);
        assert!(
            person.require_protected_action(Some(false), "x").is_ok(),
            "people are never blocked"
        );
        let agent = caller(true, false);
        assert!(agent.require_protected_action(None, "x").is_err());
        assert!(agent.require_protected_action(Some(true), "x").is_ok());
        let trusted_agent = caller(true, true);
        assert!(trusted_agent.require_protected_action(None, "x").is_ok());
        assert!(
            trusted_agent
                .require_protected_action(Some(false), "x")
                .is_err(),
            "the app override wins"
        );
    }
}
