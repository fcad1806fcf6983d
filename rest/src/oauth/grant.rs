//! The token endpoint: a code, its PKCE verifier and its client's redirect buy a token good at the MCP endpoint only.

use std::collections::HashMap;

use axum::extract::{RawForm, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::{open_json, server};
use slipway_auth::token;
use slipway_core::error::{ApiError, ErrorEnvelope};
use slipway_core::oauth::clients::{self, Client};
use slipway_core::oauth::requests;
use slipway_core::oauth::{OAuthError, OAuthServer, TOKEN_LIFETIME, no_store, pkce};
use slipway_core::state::AppState;

/// The routes of this module.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(token_endpoint))
}

/// Redeem a code (form fields `grant_type=authorization_code`, `code`, `redirect_uri`, `client_id`,
/// `code_verifier`, optional `resource` = {mcp_url}) for a `svc_` token good at {mcp_url} only, for 30 days.
/// Refusals are RFC 6749's: 401 `invalid_client`, 400 `invalid_grant` (unknown, expired or spent code, another
/// client's, another redirect URI, a wrong verifier; a code presented twice also revokes the token it bought),
/// `invalid_target`, `unsupported_grant_type`, `invalid_request`.
#[utoipa::path(post, path = "/oauth/token", tag = "oauth",
    request_body(content = String, content_type = "application/x-www-form-urlencoded"),
    responses((status = 200, description = "{access_token, token_type: Bearer, expires_in, scope}", body = Object),
              (status = 400, description = "the RFC's error JSON", body = Object),
              (status = 401, description = "invalid_client", body = Object), (status = 404, body = ErrorEnvelope)))]
async fn token_endpoint(
    State(state): State<AppState>,
    RawForm(form): RawForm,
) -> Result<Response, ApiError> {
    let server = server(&state)?;
    let mut res = match redeem(&state, &server, &form).await {
        Ok(answer) => open_json(StatusCode::OK, answer),
        Err(refusal) => {
            let mut res = refusal.into_response();
            res.headers_mut().insert(
                header::ACCESS_CONTROL_ALLOW_ORIGIN,
                HeaderValue::from_static("*"),
            );
            res
        }
    };
    no_store(&mut res);
    Ok(res)
}

/// The token a code buys, or the RFC's refusal.
async fn redeem(
    state: &AppState,
    server: &OAuthServer,
    form: &[u8],
) -> Result<serde_json::Value, OAuthError> {
    let mut fields: HashMap<String, String> = HashMap::new();
    for (key, value) in form_urlencoded::parse(form) {
        if fields.insert(key.to_string(), value.to_string()).is_some() {
            return Err(OAuthError::bad(
                "invalid_request",
                format!("{key} is given more than once"),
            ));
        }
    }
    let field = |name: &str| {
        fields
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    };
    match field("grant_type") {
        Some("authorization_code") => {}
        Some(other) => {
            return Err(OAuthError::bad(
                "unsupported_grant_type",
                format!("{other} is not served; only authorization_code is"),
            ));
        }
        None => return Err(OAuthError::bad("invalid_request", "grant_type is required")),
    }
    let client_id =
        field("client_id").ok_or_else(|| OAuthError::invalid_client("client_id is required"))?;
    let client: Client = clients::by_id(state.db(), client_id)
        .await?
        .ok_or_else(|| {
            OAuthError::invalid_client(format!("no client {client_id} is registered"))
        })?;
    let code =
        field("code").ok_or_else(|| OAuthError::bad("invalid_request", "code is required"))?;
    let invalid_grant = |why: &str| OAuthError::bad("invalid_grant", why);
    let request = requests::by_code(state.db(), &token::hash(code))
        .await?
        .filter(|r| r.client_id == client.client_id)
        .ok_or_else(|| invalid_grant("the code is not one this server gave this client"))?;
    if request.code_used_at.is_some() {
        // Presented again: whoever holds it now may not be who redeemed it, so the token it bought goes too.
        if let (Some(token_id), Some(user_id)) = (request.token_id, request.user_id) {
            slipway_store::db::tokens::revoke(state.db(), user_id, token_id).await?;
            state.tokens().forget_all();
        }
        return Err(invalid_grant(
            "the code was already redeemed; the token it bought is revoked",
        ));
    }
    if request.code_expires_at.is_none_or(|at| at <= Utc::now()) {
        return Err(invalid_grant("the code has expired"));
    }
    if field("redirect_uri") != Some(request.redirect_uri.as_str()) {
        return Err(invalid_grant(
            "redirect_uri is not the one the authorization request named",
        ));
    }
    let verifier = field("code_verifier")
        .ok_or_else(|| OAuthError::bad("invalid_request", "code_verifier is required"))?;
    if !pkce::verifies(verifier, &request.code_challenge) {
        return Err(invalid_grant(
            "code_verifier does not match the code_challenge",
        ));
    }
    if let Some(resource) = field("resource")
        && resource != server.mcp_url
    {
        return Err(OAuthError::bad(
            "invalid_target",
            format!("the only resource here is {}", server.mcp_url),
        ));
    }
    let user_id = request
        .user_id
        .ok_or_else(|| invalid_grant("the code has no account"))?;
    if !requests::spend_code(state.db(), request.id).await? {
        return Err(invalid_grant("the code was already redeemed"));
    }
    let plaintext = token::generate();
    let expires_at = Utc::now() + TOKEN_LIFETIME;
    let label = format!(
        "MCP sign-in: {}",
        client.client_name.as_deref().unwrap_or(&client.client_id)
    );
    let minted = {
        let mut conn = state.db().acquire().await?;
        let active: Option<bool> =
            sqlx::query_scalar("SELECT deactivated_at IS NULL FROM users WHERE id = $1")
                .bind(user_id)
                .fetch_optional(&mut *conn)
                .await?;
        if active != Some(true) {
            return Err(invalid_grant("the account is deactivated"));
        }
        slipway_store::db::tokens::insert_on(
            &mut conn,
            &slipway_store::db::tokens::NewToken {
                user_id,
                hash: token::hash(&plaintext),
                label: Some(&label),
                scopes: &request.scopes,
                is_agent: false,
                expires_at: Some(expires_at),
                parent_id: None,
                only_path: None,
                audience: Some(slipway_store::db::tokens::MCP_AUDIENCE),
            },
            Some("oauth"),
        )
        .await?
    };
    requests::bought(state.db(), request.id, minted).await?;
    Ok(serde_json::json!({
        "access_token": plaintext,
        "token_type": "Bearer",
        "expires_in": TOKEN_LIFETIME.as_secs(),
        "scope": request.scopes.join(" "),
    }))
}
