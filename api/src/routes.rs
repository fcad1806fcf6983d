//! Where the binary composes the API listener's routes: the REST API, git's smart HTTP beside it (streaming,
//! without the JSON routes' body limit and timeout), and the MCP endpoint, whose tools call the other two. Each of
//! them stands on `slipway_core` alone; none imports another's router.

use axum::Router;
use axum::extract::Request;
use tower_http::trace::TraceLayer;

use slipway_core::state::AppState;
use slipway_rest as api;

/// Every route of the API's public listener, each answering in the envelope when a handler panics.
pub fn public(state: AppState) -> Router {
    let rest = api::router(state.clone(), slipway_mcp::doc::document).merge(
        slipway_git::http::routes()
            .layer(TraceLayer::new_for_http().make_span_with(|req: &Request| {
                tracing::info_span!(
                    "git",
                    request_id = slipway_http::request_id::current().unwrap_or_default(),
                    method = %req.method(),
                    route = api::route_of(req)
                )
            }))
            .with_state(state.clone()),
    );
    let mcp = slipway_mcp::routes(rest.clone(), state).layer(
        TraceLayer::new_for_http().make_span_with(|req: &Request| {
            tracing::info_span!(
                "mcp",
                request_id = slipway_http::request_id::current().unwrap_or_default(),
                method = %req.method()
            )
        }),
    );
    api::guarded(rest.merge(mcp))
}

/// The OpenAPI document `/openapi.json` serves: the REST routes and the MCP endpoint.
pub fn openapi() -> utoipa::openapi::OpenApi {
    api::openapi_router(slipway_mcp::doc::document).1
}
