//! `GET` and `POST /registry/token`: the token endpoint (the `realm`) of the cluster registry, which trusts
//! slipway's signing key ([`slipway_internal::registry_token`]).
//!
//! A node pulling an app's image presents the pull credential of the workload's namespace (username the
//! repository, password slipway's HMAC of it). `GET` follows Docker's token specification (Basic auth, `service`
//! and `scope` in the query); `POST` is its OAuth2 form (`grant_type=password`), which containerd tries first.
//! Either way the answer grants `pull` on that one repository, never another, never `push`, `delete` or the
//! catalog. Without a signing key configured the route does not exist (404, as any unknown route).

use axum::extract::{RawQuery, State};
use axum::http::HeaderMap;
use serde::Serialize;
use slipway_internal::registry_token::{Access, PULL_TOKEN_LIFETIME, RegistryTokens};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::extract::Json;
use slipway_core::error::{ApiError, ErrorEnvelope};
use slipway_core::state::AppState;

/// The routes of this module.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(token_get, token_post))
}

/// A registry token (both the token specification's and OAuth2's names for it).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct RegistryToken {
    /// The bearer token the registry accepts (an ES256 JWT).
    pub token: String,
    /// The same token, under OAuth2's name.
    pub access_token: String,
    /// Seconds it stays valid.
    pub expires_in: u64,
    /// When it was issued (RFC 3339).
    pub issued_at: String,
}

/// A token request, from a query string or a form body.
#[derive(Debug, Default)]
struct TokenRequest {
    service: Option<String>,
    scopes: Vec<String>,
    username: Option<String>,
    password: Option<String>,
    grant_type: Option<String>,
}

impl TokenRequest {
    /// Reads the parameters; `scope` may repeat and may hold several space-separated scopes.
    fn parse(encoded: &[u8]) -> Self {
        let mut request = Self::default();
        for (key, value) in form_urlencoded::parse(encoded) {
            match &*key {
                "service" => request.service = Some(value.into_owned()),
                "scope" => request.scopes.extend(
                    value
                        .split(' ')
                        .filter(|s| !s.is_empty())
                        .map(str::to_owned),
                ),
                "username" => request.username = Some(value.into_owned()),
                "password" => request.password = Some(value.into_owned()),
                "grant_type" => request.grant_type = Some(value.into_owned()),
                _ => {}
            }
        }
        request
    }
}

/// The token for `request` from the credential `username`/`password`.
fn issue(
    tokens: &RegistryTokens,
    request: &TokenRequest,
    credential: Option<(String, String)>,
) -> Result<RegistryToken, ApiError> {
    if let Some(service) = &request.service
        && service != tokens.service()
    {
        return Err(ApiError::bad_request(format!(
            "this endpoint issues tokens for the service {:?}, not {service:?}",
            tokens.service()
        )));
    }
    let (username, password) = credential.ok_or(ApiError::RegistryCredential)?;
    let mut requested = Vec::with_capacity(request.scopes.len());
    for scope in &request.scopes {
        requested.push(
            Access::parse_scope(scope).ok_or_else(|| {
                ApiError::bad_request(format!("{scope:?} is not a registry scope"))
            })?,
        );
    }
    let access = tokens
        .grant(&username, &password, &requested)
        .ok_or(ApiError::RegistryCredential)?;
    let token = tokens.mint(&format!("pull:{username}"), &access, PULL_TOKEN_LIFETIME);
    Ok(RegistryToken {
        access_token: token.clone(),
        token,
        expires_in: PULL_TOKEN_LIFETIME.as_secs(),
        issued_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    })
}

fn issuer(state: &AppState) -> Result<&RegistryTokens, ApiError> {
    state.registry_tokens().ok_or(ApiError::NotFound("route"))
}

/// A registry token for a pull credential, as the registry's token specification asks for it: the credential as
/// HTTP Basic auth, `service` and `scope` (repeatable) in the query.
#[utoipa::path(get, path = "/registry/token", tag = "registry",
    params(
        ("service" = Option<String>, Query, description = "The registry's service name"),
        ("scope" = Option<String>, Query, description = "`repository:<namespace>/<workload>:pull`; repeatable")),
    responses((status = 200, body = RegistryToken), (status = 400, body = ErrorEnvelope),
        (status = 401, body = ErrorEnvelope), (status = 404, body = ErrorEnvelope)))]
async fn token_get(
    State(state): State<AppState>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Result<Json<RegistryToken>, ApiError> {
    let tokens = issuer(&state)?;
    let request = TokenRequest::parse(query.unwrap_or_default().as_bytes());
    issue(
        tokens,
        &request,
        slipway_core::caller::basic_credentials(&headers),
    )
    .map(Json)
}

/// The same as an OAuth2 password grant: a form body with `grant_type=password`, `username`, `password`,
/// `service` and `scope` (space-separated).
#[utoipa::path(post, path = "/registry/token", tag = "registry",
    request_body(content_type = "application/x-www-form-urlencoded", content = String),
    responses((status = 200, body = RegistryToken), (status = 400, body = ErrorEnvelope),
        (status = 401, body = ErrorEnvelope), (status = 404, body = ErrorEnvelope)))]
async fn token_post(
    State(state): State<AppState>,
    body: axum::body::Bytes,
) -> Result<Json<RegistryToken>, ApiError> {
    let tokens = issuer(&state)?;
    let request = TokenRequest::parse(&body);
    if request.grant_type.as_deref() != Some("password") {
        return Err(ApiError::bad_request(
            "only grant_type=password is supported (with a pull credential)",
        ));
    }
    let credential = request.username.clone().zip(request.password.clone());
    issue(tokens, &request, credential).map(Json)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_repeat_and_split_on_spaces() {
        let request = TokenRequest::parse(
            b"service=reg&scope=repository%3Aa%2Fweb%3Apull&scope=repository:b/x:pull+registry:catalog:*",
        );
        assert_eq!(request.service.as_deref(), Some("reg"));
        assert_eq!(
            request.scopes,
            [
                "repository:a/web:pull",
                "repository:b/x:pull",
                "registry:catalog:*"
            ]
        );
    }
}
