//! The REST API of the hosting platform (`slipway api`): an axum router built from one router per resource,
//! testable without a socket, with its OpenAPI document generated from the same handlers.

pub mod access;
pub mod apps;
pub mod channels;
pub mod code;
pub mod deploys;
pub mod domains;
pub mod env;
pub mod error;
pub mod extract;
pub mod internal;
pub mod plans;
pub mod repo;
pub mod ssh_keys;
pub mod state;
pub mod tokens;
pub mod views;

use std::time::Duration;

use axum::extract::{DefaultBodyLimit, MatchedPath, Request};
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::TraceLayer;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa_axum::router::OpenApiRouter;

use self::error::ApiError;
use self::state::AppState;

/// Largest request body accepted (JSON routes).
pub const BODY_LIMIT: usize = 1024 * 1024;
/// Longest a request may take.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// The OpenAPI document's fixed parts.
#[derive(utoipa::OpenApi)]
#[openapi(
    info(title = "slipway hosting API", version = "1.3.0", description = "Apps, channels, deploys, tokens and more."),
    modifiers(&BearerAuth)
)]
struct ApiDoc;

struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("svc_...")
                    .build(),
            ),
        );
    }
}

/// The routes and their OpenAPI document.
pub fn openapi_router() -> (Router<AppState>, utoipa::openapi::OpenApi) {
    use utoipa::OpenApi;
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .merge(apps::routes())
        .merge(channels::routes())
        .merge(env::routes())
        .merge(tokens::routes())
        .merge(plans::routes())
        .merge(repo::routes())
        .merge(code::routes())
        .merge(deploys::routes())
        .merge(domains::routes())
        .merge(ssh_keys::routes())
        .split_for_parts()
}

/// The OpenAPI document of the REST API.
pub fn openapi() -> utoipa::openapi::OpenApi {
    openapi_router().1
}

/// The whole API as a router: every route, `/openapi.json`, `/healthz`, the layers every request passes, and git's
/// smart HTTP routes (`/<owner>/<app>.git/...`), which stream without the JSON routes' body limit and timeout.
pub fn router(state: AppState) -> Router {
    let (routes, doc) = openapi_router();
    let doc = std::sync::Arc::new(doc);
    routes
        .route(
            "/openapi.json",
            get(move || std::future::ready(Json(doc.as_ref().clone()))),
        )
        .route("/healthz", get(|| std::future::ready("ok")))
        .merge(internal::routes())
        .fallback(|| std::future::ready(ApiError::NotFound("route")))
        .method_not_allowed_fallback(|| std::future::ready(ApiError::MethodNotAllowed))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::SERVICE_UNAVAILABLE,
            REQUEST_TIMEOUT,
        ))
        .layer(TraceLayer::new_for_http().make_span_with(|req: &Request| {
            let route = req
                .extensions()
                .get::<MatchedPath>()
                .map(MatchedPath::as_str)
                .unwrap_or("unmatched");
            tracing::info_span!("request", method = %req.method(), route)
        }))
        .merge(
            crate::git::http::routes().layer(TraceLayer::new_for_http().make_span_with(
                |req: &Request| {
                    let route = req
                        .extensions()
                        .get::<MatchedPath>()
                        .map(MatchedPath::as_str)
                        .unwrap_or("unmatched");
                    tracing::info_span!("git", method = %req.method(), route)
                },
            )),
        )
        .with_state(state)
}
