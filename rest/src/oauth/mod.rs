//! The MCP server's OAuth 2.0 routes for people ([`slipway_core::oauth`] says how the flow goes and why): the
//! protected-resource and authorization-server metadata, client registration, the authorization endpoint, the
//! upstream provider's callback, the consent form and the token endpoint. Without `--public-url` they answer 404
//! like any unknown route. Their errors are the RFCs' JSON; the authorization endpoint sends them back to the
//! client's redirect once the client and its redirect URI are known to be good.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::registrations::Source;
use slipway_core::error::{ApiError, ErrorEnvelope};
use slipway_core::oauth::clients::{self, Registration};
use slipway_core::oauth::{OAuthError, OAuthServer, no_store};
use slipway_core::state::AppState;

mod authorize;
mod grant;

/// The routes of this module.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(protected_resource))
        .routes(routes!(protected_resource_of_mcp))
        .routes(routes!(authorization_server))
        .routes(routes!(register))
        .merge(authorize::routes())
        .merge(grant::routes())
}

/// The authorization server, or 404 when the API has no public URL (OAuth off).
fn server(state: &AppState) -> Result<Arc<OAuthServer>, ApiError> {
    state.oauth().ok_or(ApiError::NotFound("route"))
}

/// JSON with CORS open: metadata, registration and tokens are fetched by browser-based clients too.
fn open_json(status: StatusCode, value: serde_json::Value) -> Response {
    let mut res = (status, axum::Json(value)).into_response();
    res.headers_mut().insert(
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        HeaderValue::from_static("*"),
    );
    res
}

/// The protected resource's metadata (RFC 9728): {mcp_url}, its authorization server, scopes.
#[utoipa::path(get, path = "/.well-known/oauth-protected-resource", tag = "oauth",
    responses((status = 200, description = "RFC 9728 metadata", body = Object), (status = 404, body = ErrorEnvelope)))]
async fn protected_resource(State(state): State<AppState>) -> Result<Response, ApiError> {
    Ok(open_json(
        StatusCode::OK,
        server(&state)?.resource_metadata(),
    ))
}

/// The same metadata at RFC 9728's path-aware address for {mcp_url}.
#[utoipa::path(get, path = "/.well-known/oauth-protected-resource/mcp", tag = "oauth",
    responses((status = 200, description = "RFC 9728 metadata", body = Object), (status = 404, body = ErrorEnvelope)))]
async fn protected_resource_of_mcp(State(state): State<AppState>) -> Result<Response, ApiError> {
    protected_resource(State(state)).await
}

/// The authorization server's metadata (RFC 8414).
#[utoipa::path(get, path = "/.well-known/oauth-authorization-server", tag = "oauth",
    responses((status = 200, description = "RFC 8414 metadata", body = Object), (status = 404, body = ErrorEnvelope)))]
async fn authorization_server(State(state): State<AppState>) -> Result<Response, ApiError> {
    Ok(open_json(StatusCode::OK, server(&state)?.metadata()))
}

/// Register a client (RFC 7591): `redirect_uris` (https, or http on a loopback address), `client_name`. Public
/// clients only: the answer's `token_endpoint_auth_method` is `none`. Each source address may register 60 clients an
/// hour.
#[utoipa::path(post, path = "/oauth/register", tag = "oauth", request_body = Object,
    responses((status = 201, description = "the client", body = Object),
              (status = 400, description = "invalid_redirect_uri, invalid_client_metadata", body = Object),
              (status = 404, body = ErrorEnvelope), (status = 429, body = ErrorEnvelope)))]
async fn register(
    State(state): State<AppState>,
    Source(source): Source,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    server(&state)?;
    state
        .spend_oauth_registration(source)
        .await?
        .map_err(|wait| {
            ApiError::Throttled(
                "this address registered many OAuth clients this hour".into(),
                wait,
            )
        })?;
    let registration: Registration = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return Ok(OAuthError::bad(
                "invalid_client_metadata",
                format!("the body is not client metadata: {e}"),
            )
            .into_response());
        }
    };
    let client = match clients::validate(registration) {
        Ok(client) => client,
        Err(refusal) => return Ok(refusal.into_response()),
    };
    clients::insert(state.db(), &client).await?;
    let mut res = open_json(
        StatusCode::CREATED,
        serde_json::json!({
            "client_id": client.client_id,
            "client_id_issued_at": Utc::now().timestamp(),
            "client_name": client.client_name,
            "redirect_uris": client.redirect_uris,
            "grant_types": ["authorization_code"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
        }),
    );
    no_store(&mut res);
    Ok(res)
}
