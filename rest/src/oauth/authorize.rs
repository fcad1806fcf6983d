//! The authorization endpoint and what follows it in the browser: the upstream provider's callback and the consent
//! form. Their errors are answered here until the client and its redirect URI are known to be good, and sent back
//! to that redirect after.

use std::collections::HashMap;

use axum::extract::{RawForm, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::Utc;
use slipway_identity::upstream::Pending;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::super::registrations::Source;
use super::server;
use slipway_auth::{scopes, token};
use slipway_core::error::{ApiError, ErrorEnvelope};
use slipway_core::oauth::clients;
use slipway_core::oauth::requests::{self, NewRequest};
use slipway_core::oauth::{
    BROWSER_COOKIE, CODE_LIFETIME, OAuthError, OAuthServer, PREFIX, REQUEST_LIFETIME, no_store,
    pkce, redirect_with,
};
use slipway_core::state::AppState;

/// The routes of this module.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(authorize))
        .routes(routes!(callback))
        .routes(routes!(consent))
}

/// The query's parameters; a parameter given twice counts as malformed (RFC 6749 3.1).
fn parameters(raw: Option<&str>) -> Result<HashMap<String, String>, String> {
    let mut all = HashMap::new();
    for (key, value) in form_urlencoded::parse(raw.unwrap_or_default().as_bytes()) {
        if all.insert(key.to_string(), value.to_string()).is_some() {
            return Err(format!("{key} is given more than once"));
        }
    }
    Ok(all)
}

/// An authorization error sent back to the client's redirect, with its state.
fn back(redirect_uri: &str, state: Option<&str>, error: &str, description: &str) -> Response {
    let mut pairs = vec![("error", error), ("error_description", description)];
    if let Some(state) = state {
        pairs.push(("state", state));
    }
    Redirect::to(&redirect_with(redirect_uri, &pairs)).into_response()
}

/// The scopes asked for: a space-separated subset of the nine default scopes; none asked is all nine.
fn scopes_of(scope: Option<&str>) -> Result<Vec<String>, String> {
    let asked: Vec<&str> = scope.unwrap_or_default().split_whitespace().collect();
    if asked.is_empty() {
        return Ok(scopes::default_scopes());
    }
    if let Some(unknown) = asked.iter().find(|s| !scopes::DEFAULT.contains(s)) {
        return Err(format!("{unknown} is not a scope this server grants"));
    }
    // In the defaults' order, each once.
    Ok(scopes::DEFAULT
        .iter()
        .filter(|s| asked.contains(s))
        .map(|s| (*s).to_owned())
        .collect())
}

/// A random secret, base64url.
fn secret() -> String {
    URL_SAFE_NO_PAD.encode(rand::random::<[u8; 32]>())
}

/// The browser cookie's value, if the request carries it.
fn browser_secret(headers: &HeaderMap) -> Option<String> {
    slipway_http::cookies::read(headers, BROWSER_COOKIE)
}

/// The `Set-Cookie` that binds a request to this browser (or, with `None`, forgets it).
fn browser_cookie(server: &OAuthServer, value: Option<&str>) -> HeaderValue {
    let secure = if server.secure() { "; Secure" } else { "" };
    let cookie = match value {
        Some(value) => format!(
            "{BROWSER_COOKIE}={value}; Path={PREFIX}; HttpOnly; SameSite=Lax; Max-Age={}{secure}",
            REQUEST_LIFETIME.as_secs()
        ),
        None => {
            format!("{BROWSER_COOKIE}=; Path={PREFIX}; HttpOnly; SameSite=Lax; Max-Age=0{secure}")
        }
    };
    HeaderValue::from_str(&cookie).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// Start an authorization (authorization code with PKCE, S256 only): `response_type=code`, `client_id`,
/// `redirect_uri` (exactly one the client registered), `state`, `code_challenge`, `code_challenge_method=S256`,
/// optional `scope` and `resource` ({mcp_url}). Sends the person to the upstream identity provider. Every error is
/// answered here (400 with the RFC 6749 error code), never sent to the redirect URI: with open client registration,
/// redirecting before the person signs in would make this origin an open redirector. Each source address may start
/// 120 sign-ins an hour (429).
#[utoipa::path(get, path = "/oauth/authorize", tag = "oauth",
    responses((status = 302, description = "to the upstream provider"),
              (status = 400, description = "invalid_client, invalid_request, unsupported_response_type, invalid_target, invalid_scope or temporarily_unavailable", body = Object),
              (status = 404, body = ErrorEnvelope), (status = 429, body = ErrorEnvelope)))]
async fn authorize(
    State(state): State<AppState>,
    Source(source): Source,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let server = server(&state)?;
    // Anyone may start a sign-in, and each keeps a row for a day: a budget per source (IPv6 by its /48).
    state
        .spend_oauth_authorization(source)
        .await?
        .map_err(|wait| {
            ApiError::Throttled("this address started many sign-ins this hour".into(), wait)
        })?;
    let params = match parameters(query.as_deref()) {
        Ok(p) => p,
        Err(e) => return Ok(OAuthError::bad("invalid_request", e).into_response()),
    };
    let param = |name: &str| {
        params
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    };
    // The client and its redirect URI first: until both are good, nothing is sent anywhere.
    let Some(client_id) = param("client_id") else {
        return Ok(OAuthError::bad("invalid_request", "client_id is required").into_response());
    };
    let Some(client) = clients::by_id(state.db(), client_id).await? else {
        return Ok(OAuthError::bad(
            "invalid_client",
            format!("no client {client_id} is registered"),
        )
        .into_response());
    };
    let redirect_uri = match param("redirect_uri") {
        Some(uri) if client.redirect_uris.iter().any(|r| r == uri) => uri.to_owned(),
        _ => {
            return Ok(OAuthError::bad(
                "invalid_request",
                "redirect_uri must be exactly one of the redirect URIs the client registered",
            )
            .into_response());
        }
    };
    let client_state = param("state");
    // Answered here too, never sent to the redirect URI: registration is open, so a redirect before the person has
    // signed in would make this origin a redirector to any registered address (RFC 9700 4.11.2).
    let refuse = |error: &'static str, description: &str| {
        Ok(OAuthError::bad(error, description.to_owned()).into_response())
    };
    let Some(client_state) = client_state.filter(|s| s.len() <= 1024) else {
        return refuse(
            "invalid_request",
            "state is required (at most 1024 characters)",
        );
    };
    if param("response_type") != Some("code") {
        return refuse("unsupported_response_type", "response_type must be code");
    }
    if param("code_challenge_method") != Some("S256") {
        return refuse(
            "invalid_request",
            "PKCE is required with code_challenge_method S256",
        );
    }
    let Some(challenge) = param("code_challenge").filter(|c| pkce::is_challenge(c)) else {
        return refuse(
            "invalid_request",
            "code_challenge must be an S256 challenge (43 base64url characters)",
        );
    };
    if let Some(resource) = param("resource")
        && resource != server.mcp_url
    {
        return refuse(
            "invalid_target",
            &format!("the only resource here is {}", server.mcp_url),
        );
    }
    let scopes = match scopes_of(param("scope")) {
        Ok(scopes) => scopes,
        Err(e) => return refuse("invalid_scope", &e),
    };
    let Some(upstream) = &server.upstream else {
        return refuse(
            "temporarily_unavailable",
            "no identity provider is configured for signing in",
        );
    };
    let (upstream_url, pending) = match upstream.start().await {
        Ok(started) => started,
        Err(e) => {
            tracing::warn!(error = %e, "the upstream provider cannot start a sign-in");
            return refuse(
                "temporarily_unavailable",
                "the identity provider cannot be reached; try again",
            );
        }
    };
    let browser = secret();
    requests::open(
        state.db(),
        &NewRequest {
            client_id: &client.client_id,
            redirect_uri: &redirect_uri,
            client_state,
            code_challenge: challenge,
            scopes: &scopes,
            upstream_state_hash: token::hash(&pending.csrf),
            upstream_verifier: &pending.verifier,
            upstream_nonce: &pending.nonce,
            browser_hash: token::hash(&browser),
            expires_at: Utc::now() + REQUEST_LIFETIME,
        },
    )
    .await?;
    let mut res = Redirect::to(&upstream_url).into_response();
    res.headers_mut()
        .insert(header::SET_COOKIE, browser_cookie(&server, Some(&browser)));
    no_store(&mut res);
    Ok(res)
}

/// A page of ours that says why a step cannot go on (no client to send it to).
fn stop(description: &str) -> Response {
    OAuthError::bad("invalid_request", description).into_response()
}

/// Where the upstream provider returns the person (`code` and `state`, or `error`): the person is signed in and
/// mapped to their account by their verified address, then asked on the consent page.
#[utoipa::path(get, path = "/oauth/callback", tag = "oauth",
    responses((status = 200, description = "the consent page", content_type = "text/html"),
              (status = 302, description = "back to the client with access_denied (no account) or an error"),
              (status = 400, description = "invalid_request: no such sign-in in this browser, or it expired", body = Object),
              (status = 404, body = ErrorEnvelope)))]
async fn callback(
    State(state): State<AppState>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let server = server(&state)?;
    let params = parameters(query.as_deref()).unwrap_or_default();
    let (Some(upstream_state), Some(browser)) = (params.get("state"), browser_secret(&headers))
    else {
        return Ok(stop("this sign-in was not started in this browser"));
    };
    let Some(request) = requests::awaiting_sign_in(
        state.db(),
        &token::hash(upstream_state),
        &token::hash(&browser),
    )
    .await?
    else {
        return Ok(stop(
            "no sign-in of this browser is waiting for the provider (it expired, or was used)",
        ));
    };
    let give_up = |error: &str, description: &str| {
        Ok(back(
            &request.redirect_uri,
            Some(&request.client_state),
            error,
            description,
        ))
    };
    if let Some(error) = params.get("error") {
        tracing::info!(%error, "the upstream provider refused a sign-in");
        return give_up("access_denied", "the identity provider did not sign you in");
    }
    let (Some(code), Some(upstream)) = (params.get("code"), &server.upstream) else {
        return give_up("access_denied", "the identity provider sent no code");
    };
    let pending = Pending {
        csrf: upstream_state.clone(),
        verifier: request.upstream_verifier.clone(),
        nonce: request.upstream_nonce.clone(),
    };
    let person = match upstream.finish(pending, code).await {
        Ok(person) => person,
        Err(e) => {
            tracing::warn!(error = ?e, "an upstream sign-in did not verify");
            return give_up(
                "server_error",
                "the identity provider's answer could not be verified",
            );
        }
    };
    let account = match slipway_core::people::account_of(state.db(), &person).await? {
        Ok(account) => account,
        Err(refusal) => return give_up("access_denied", &refusal.to_string()),
    };
    if !requests::signed_in(state.db(), request.id, account.id).await? {
        return Ok(stop("this sign-in has already been answered"));
    }
    let Some(client) = clients::by_id(state.db(), &request.client_id).await? else {
        return Ok(stop("the client is no longer registered"));
    };
    let page = slipway_core::oauth::consent::page(
        &client,
        &request.redirect_uri,
        &account.username,
        &request.scopes,
        &request.id.to_string(),
        &format!("{PREFIX}/consent"),
    );
    let mut res = Html(page).into_response();
    no_store(&mut res);
    let headers = res.headers_mut();
    // The answer must be the person's own click, never a framed one.
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        // No form-action: browsers apply it to the redirect that follows the form's POST, and that goes to the
        // client's own redirect URI. The page's one form posts to a fixed path of ours.
        HeaderValue::from_static("default-src 'none'; frame-ancestors 'none'; base-uri 'none'"),
    );
    Ok(res)
}

/// The person's answer on the consent page (`request`, `decision` = `allow` or `deny`): a code (60 s, single use)
/// or `access_denied`, sent to the client's redirect URI with its state.
#[utoipa::path(post, path = "/oauth/consent", tag = "oauth",
    request_body(content = String, content_type = "application/x-www-form-urlencoded"),
    responses((status = 302, description = "back to the client with a code or access_denied"),
              (status = 400, description = "invalid_request: no such consent in this browser", body = Object),
              (status = 404, body = ErrorEnvelope)))]
async fn consent(
    State(state): State<AppState>,
    headers: HeaderMap,
    RawForm(form): RawForm,
) -> Result<Response, ApiError> {
    let server = server(&state)?;
    let fields: HashMap<String, String> = form_urlencoded::parse(&form).into_owned().collect();
    let id = fields.get("request").and_then(|r| r.parse().ok());
    let (Some(id), Some(browser)) = (id, browser_secret(&headers)) else {
        return Ok(stop("this consent was not asked in this browser"));
    };
    let Some(request) = requests::awaiting_consent(state.db(), id, &token::hash(&browser)).await?
    else {
        return Ok(stop(
            "no consent of this browser is waiting (it expired, or was answered)",
        ));
    };
    let mut res = if fields.get("decision").map(String::as_str) == Some("allow") {
        let code = secret();
        if !requests::issue_code(
            state.db(),
            id,
            &token::hash(&code),
            Utc::now() + CODE_LIFETIME,
        )
        .await?
        {
            return Ok(stop("this consent has already been answered"));
        }
        Redirect::to(&redirect_with(
            &request.redirect_uri,
            &[("code", &code), ("state", &request.client_state)],
        ))
        .into_response()
    } else {
        requests::forget(state.db(), id).await?;
        back(
            &request.redirect_uri,
            Some(&request.client_state),
            "access_denied",
            "the person refused",
        )
    };
    res.headers_mut()
        .insert(header::SET_COOKIE, browser_cookie(&server, None));
    no_store(&mut res);
    Ok(res)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_are_a_subset_of_the_defaults() {
        assert_eq!(scopes_of(None).unwrap(), scopes::default_scopes());
        assert_eq!(scopes_of(Some("  ")).unwrap(), scopes::default_scopes());
        assert_eq!(
            scopes_of(Some("stats:read repo:* repo:*")).unwrap(),
            ["repo:*", "stats:read"]
        );
        assert!(scopes_of(Some("repo:* email:bind")).is_err());
    }

    #[test]
    fn a_parameter_given_twice_is_malformed() {
        assert!(parameters(Some("a=1&b=2")).is_ok());
        assert!(parameters(Some("a=1&a=2")).is_err());
        assert!(parameters(None).unwrap().is_empty());
    }

    #[test]
    fn the_browser_cookie_is_found_among_others() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("x=1; slipway_oauth=abc; y=2"),
        );
        assert_eq!(browser_secret(&headers).as_deref(), Some("abc"));
        assert_eq!(browser_secret(&HeaderMap::new()), None);
    }
}
