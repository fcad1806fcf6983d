//! Who may call the internal listener: every caller presents a Kubernetes ServiceAccount token, checked with a
//! TokenReview (`slipway_internal::review`), and each route asks whether the caller's role permits its group
//! (`slipway_internal::policy`). No token or a rejected one is 401, a valid token of an identity whose role does
//! not permit the route (or that plays none) is 403; every refusal is logged with who was refused, never the
//! token.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use slipway_internal::{AuthError, Decision, Identity, Role, RouteGroup};

use slipway_core::error::ApiError;
use slipway_core::state::AppState;

/// A caller of the internal routes whose token the apiserver accepted.
#[derive(Debug, Clone)]
pub struct InternalCaller {
    /// Who it is.
    pub identity: Identity,
}

impl FromRequestParts<AppState> for InternalCaller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let token = slipway_core::caller::bearer(&parts.headers).inspect_err(|_| {
            tracing::warn!(
                caller = "anonymous",
                "internal call refused: no bearer token"
            );
        })?;
        if token.is_empty() {
            tracing::warn!(caller = "anonymous", "internal call refused: empty token");
            return Err(ApiError::TokenInvalid);
        }
        match state.internal().authenticator().authenticate(token).await {
            Ok(identity) => Ok(InternalCaller { identity }),
            Err(AuthError::Rejected { reason, claimed }) => {
                tracing::warn!(
                    caller = "unauthenticated",
                    claimed = claimed.as_deref().unwrap_or("-"),
                    reason,
                    "internal call refused: token rejected"
                );
                Err(ApiError::TokenInvalid)
            }
            Err(AuthError::Unavailable(e)) => {
                tracing::error!(
                    error = e,
                    "internal call refused: the token could not be checked"
                );
                Err(ApiError::Unavailable(
                    "the caller's token cannot be checked right now".into(),
                ))
            }
        }
    }
}

impl InternalCaller {
    /// The caller's role when it permits the routes of `group`; 403 `permission_denied` otherwise.
    pub fn require(&self, state: &AppState, group: RouteGroup) -> Result<Role, ApiError> {
        let identity = &self.identity;
        match state.internal().callers().decide(identity, group) {
            Decision::Allowed(role) => Ok(role),
            Decision::NoRole => {
                tracing::warn!(caller = %identity, group = %group, "internal call refused: the caller plays no role");
                Err(ApiError::PermissionDenied(format!(
                    "{identity} may not call the internal routes"
                )))
            }
            Decision::Denied(role) => {
                tracing::warn!(caller = %identity, role = %role, group = %group, "internal call refused: not permitted to the role");
                Err(ApiError::PermissionDenied(format!(
                    "the {role} role may not call the routes of {group}"
                )))
            }
        }
    }

    /// The caller's role when it permits the routes of `a` or of `b`; 403 otherwise (logged for `a`).
    pub fn require_either(
        &self,
        state: &AppState,
        a: RouteGroup,
        b: RouteGroup,
    ) -> Result<Role, ApiError> {
        match state.internal().callers().decide(&self.identity, b) {
            Decision::Allowed(role) => Ok(role),
            _ => self.require(state, a),
        }
    }
}
