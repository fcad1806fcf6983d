//! The MCP server at `{mcp_url}` (`/mcp` on the API's listener): the platform's operations as tools for agents,
//! over MCP's streamable HTTP transport (`rmcp`), stateless so that any API replica answers any request.
//!
//! A tool is a thin translation ([`tools`]): it resolves `app_name` and `channel` to ids ([`address`]) and calls
//! the REST route in-process through the same router, with the caller's own bearer ([`slipway_rest::in_process`]). Scopes, protected
//! actions, roles, 404-not-403, request budgets and the error envelope therefore hold unchanged, and a tool cannot
//! do what its route would refuse.
//!
//! Every request carries `Authorization: Bearer svc_...` (a registered agent's token, any token of the account,
//! or one from the OAuth sign-in for people, [`slipway_core::oauth`]), checked before the transport sees the request;
//! without a good one the answer is 401 with `WWW-Authenticate: Bearer`, naming the protected-resource metadata
//! when OAuth is on. Against DNS rebinding the endpoint checks a request's `Origin` (the transport's rule: the
//! API's public URL, its console, or loopback; agents send none), not its `Host`: the API answers on several names
//! (node ports, Service DNS, a public host). A malformed request is answered with a JSON-RPC error
//! ([`transport`]), an argument a tool does not take with a tool error ([`arguments`]), and a route's message in
//! the words of tools ([`wording`]).

pub mod address;
pub mod arguments;
pub mod doc;
mod server;
pub mod tools;
pub mod transport;
pub mod wording;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use slipway_core::state::AppState;

pub use self::server::{Server, result_of};

/// Path of the MCP endpoint on the API's listener.
pub use slipway_auth::MCP_PATH as PATH;

/// The MCP endpoint, its tools calling `api` (the REST router, layers and state applied).
pub fn routes(api: Router, state: AppState) -> Router {
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_max_request_body_bytes(transport::BODY_LIMIT)
        .disable_allowed_hosts();
    let handler_state = state.clone();
    let service: StreamableHttpService<Server, LocalSessionManager> = StreamableHttpService::new(
        move || Ok(Server::new(api.clone(), handler_state.clone())),
        Default::default(),
        config,
    );
    Router::new()
        .route_service(PATH, service)
        .layer(middleware::from_fn(transport::require_jsonrpc))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            require_bearer,
        ))
        .layer(middleware::from_fn_with_state(
            state,
            transport::require_own_origin,
        ))
}

/// 401 (with `WWW-Authenticate`) unless the request carries a live token; 429 past the token's budget.
async fn require_bearer(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let checked = match slipway_core::caller::bearer(request.headers()) {
        Ok(token) => slipway_core::caller::authenticate_mcp(&state, token)
            .await
            .map(drop),
        Err(refusal) => Err(refusal),
    };
    match checked {
        Ok(()) => next.run(request).await,
        Err(refusal) => {
            let mut response = refusal.into_response();
            if response.status() == StatusCode::UNAUTHORIZED {
                let challenge = match state.oauth() {
                    Some(server) => HeaderValue::from_str(&server.challenge())
                        .unwrap_or_else(|_| HeaderValue::from_static(r#"Bearer realm="slipway""#)),
                    None => HeaderValue::from_static(r#"Bearer realm="slipway""#),
                };
                response
                    .headers_mut()
                    .insert(header::WWW_AUTHENTICATE, challenge);
            }
            response
        }
    }
}
