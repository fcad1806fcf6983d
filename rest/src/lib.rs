//! The REST API of the hosting platform (`slipway api`): an axum router built from one router per resource,
//! testable without a socket, with its OpenAPI document generated from the same handlers.

pub mod activity;
pub mod app_health;
pub mod apps;
pub mod blob;
pub mod blob_snapshots;
pub mod channels;
pub mod code;
pub mod deploys;
pub mod domain_release;
pub mod domains;
pub mod downloads;
pub mod email;
pub mod env;
pub mod exports;
pub mod extract;
pub mod feedback;
pub mod forwards;
pub mod in_process;
pub mod internal;
pub mod members;
pub mod mirror;
pub mod notes;
pub mod oauth;
pub mod paging;
pub mod plans;
pub mod postgres;
pub mod registrations;
pub mod registry;
pub mod repo;
pub mod request_rules;
pub mod rewind;
pub mod runtime_log;
pub mod snapshots;
pub mod ssh_keys;
pub mod stats;
pub mod svc_auth_doc;
pub mod tokens;
pub mod views;

use std::time::Duration;

use axum::extract::{DefaultBodyLimit, MatchedPath, Request};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::trace::TraceLayer;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa_axum::router::OpenApiRouter;

use slipway_core::error::ApiError;
use slipway_core::state::AppState;

/// Largest request body accepted (JSON routes).
pub const BODY_LIMIT: usize = 1024 * 1024;
/// Longest a request may take, but for [`UNBOUNDED_ROUTES`].
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// Routes that wait for a job of the platform ([`slipway_jobs`]), which runs for as long as its data takes and
/// outlives the request: they answer its outcome whenever it comes, not cut at [`REQUEST_TIMEOUT`].
pub const UNBOUNDED_ROUTES: &[&str] = &[
    "/apps/{app_id}/channels/{channel_id}/postgres/restore",
    "/apps/{app_id}/channels/{channel_id}/blob/restore",
    // A mirror's sync, and the fetch a deploy of a mirrored app starts with: each attempt of a sync is bounded by
    // the sync's own limit, but it may first queue behind the app's other syncs. The deploy route's other steps
    // are short: the repository and the cluster's API.
    "/apps/{app_id}/github/sync",
    "/apps/{app_id}/channels/{channel_id}/deploy",
];

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

/// The routes and their OpenAPI document. `beside` documents what the binary mounts beside these routes (the MCP
/// endpoint), before the notes that hold for every route are added.
pub fn openapi_router(
    beside: impl FnOnce(&mut utoipa::openapi::OpenApi),
) -> (Router<AppState>, utoipa::openapi::OpenApi) {
    use utoipa::OpenApi;
    let (routes, mut doc) = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .merge(apps::routes())
        .merge(channels::routes())
        .merge(env::routes())
        .merge(tokens::routes())
        .merge(plans::routes())
        .merge(registrations::routes())
        .merge(email::routes())
        .merge(stats::routes())
        .merge(activity::routes())
        .merge(feedback::routes())
        .merge(notes::routes())
        .merge(app_health::routes())
        .merge(repo::routes())
        .merge(code::routes())
        .merge(deploys::routes())
        .merge(runtime_log::routes())
        .merge(rewind::routes())
        .merge(domains::routes())
        .merge(forwards::routes())
        .merge(ssh_keys::routes())
        .merge(blob::routes())
        .merge(blob_snapshots::routes())
        .merge(postgres::routes())
        .merge(snapshots::routes())
        .merge(exports::routes())
        .merge(oauth::routes())
        .merge(members::routes())
        .merge(mirror::routes())
        .merge(registry::routes())
        .split_for_parts();
    beside(&mut doc);
    document_request_budget(&mut doc);
    request_rules::document(&mut doc);
    svc_auth_doc::document(&mut doc);
    (routes, doc)
}

/// Every route that takes a bearer token can answer 429 `too_many_requests` (the token's request budget, see
/// [`slipway_auth::rate`]); the document says so once here rather than on each handler.
fn document_request_budget(doc: &mut utoipa::openapi::OpenApi) {
    use utoipa::openapi::{Content, HeaderBuilder, ObjectBuilder, Ref, ResponseBuilder, Type};
    let answer = ResponseBuilder::new()
        .description("the token's request budget is spent; retry after Retry-After seconds")
        .header(
            "Retry-After",
            HeaderBuilder::new()
                .schema(Some(ObjectBuilder::new().schema_type(Type::Integer)))
                .description(Some("whole seconds until the next request fits"))
                .build(),
        )
        .content(
            "application/json",
            Content::new(Some(Ref::from_schema_name("ErrorEnvelope"))),
        )
        .build();
    for item in doc.paths.paths.values_mut() {
        let operations = [
            &mut item.get,
            &mut item.put,
            &mut item.post,
            &mut item.delete,
            &mut item.patch,
        ];
        for operation in operations.into_iter().flatten() {
            if operation.security.as_ref().is_some_and(|s| !s.is_empty()) {
                operation
                    .responses
                    .responses
                    .insert("429".to_owned(), answer.clone().into());
            }
        }
    }
}

/// The REST routes with `/openapi.json` (their document, `beside` adding what is mounted beside them), `/healthz`,
/// and the layers every request passes (body limit, timeout, a span, the envelope's 404 and 405), state applied.
/// The binary composes it with git's smart HTTP and the MCP endpoint (`crate::routes`); the internal routes are
/// served by [`internal_router`] on a listener of their own.
pub fn router(state: AppState, beside: impl FnOnce(&mut utoipa::openapi::OpenApi)) -> Router {
    let (routes, doc) = openapi_router(beside);
    let doc = std::sync::Arc::new(doc);
    let routes = routes
        .route(
            "/openapi.json",
            get(move || std::future::ready(Json(doc.as_ref().clone()))),
        )
        .route("/healthz", get(|| std::future::ready("ok")));
    with_layers(routes).with_state(state)
}

/// The internal listener's router: the `/internal/v1` routes the operator, the edge and build pods call,
/// `/healthz`, and `/metrics` (the external SQL listener's), with the same layers as the public routes.
pub fn internal_router(state: AppState) -> Router {
    let routes = internal::routes()
        .route("/healthz", get(|| std::future::ready("ok")))
        .route("/metrics", get(metrics));
    guarded(with_layers(routes).with_state(state))
}

/// The API process's Prometheus metrics.
async fn metrics(
    axum::extract::State(state): axum::extract::State<AppState>,
) -> impl axum::response::IntoResponse {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            slipway_http::OPENMETRICS_CONTENT_TYPE,
        )],
        slipway_core::metrics::encode(&state),
    )
}

/// The matched route of a request, for spans (never the raw path, which holds ids).
pub fn route_of(req: &Request) -> &str {
    req.extensions()
        .get::<MatchedPath>()
        .map(MatchedPath::as_str)
        .unwrap_or("unmatched")
}

/// The envelope's 404 and 405, the body limit, the timeout and a span per request.
fn with_layers(routes: Router<AppState>) -> Router<AppState> {
    routes
        .fallback(|| std::future::ready(ApiError::NotFound("route")))
        .method_not_allowed_fallback(|| std::future::ready(ApiError::MethodNotAllowed))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(axum::middleware::from_fn(bounded))
        .layer(TraceLayer::new_for_http().make_span_with(|req: &Request| {
            tracing::info_span!(
                "request",
                request_id = slipway_http::request_id::current().unwrap_or_default(),
                method = %req.method(),
                route = route_of(req)
            )
        }))
}

/// Cuts a request at [`REQUEST_TIMEOUT`] (503 `service_unavailable`), unless its route is one of
/// [`UNBOUNDED_ROUTES`].
async fn bounded(req: Request, next: axum::middleware::Next) -> Response {
    if UNBOUNDED_ROUTES.contains(&route_of(&req)) {
        return next.run(req).await;
    }
    tokio::time::timeout(REQUEST_TIMEOUT, next.run(req))
        .await
        .unwrap_or_else(|_| {
            ApiError::Unavailable(format!(
                "the request took longer than {} s; try again",
                REQUEST_TIMEOUT.as_secs()
            ))
            .into_response()
        })
}

/// The outermost layers of every route: each request is handled under an id of its own, answered in `x-request-id`
/// and in error bodies and carried by its log lines ([`slipway_http::request_id`]), and a handler that panics
/// answers [`panic_response`] instead of dropping the connection.
pub fn guarded(router: Router) -> Router {
    router
        .layer(CatchPanicLayer::custom(panic_response))
        .layer(axum::middleware::from_fn(slipway_http::request_id::assign))
}

/// What a handler that panicked answers: 500 `internal_error` in the envelope, like any internal fault, with the
/// panic's message logged rather than sent. The connection stays up and the client gets an answer.
pub fn panic_response(panic: Box<dyn std::any::Any + Send + 'static>) -> Response {
    let message = panic
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| panic.downcast_ref::<&str>().copied())
        .unwrap_or("(no message)");
    ApiError::Internal(anyhow::anyhow!("a handler panicked: {message}")).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::ServiceExt;

    #[tokio::test]
    async fn a_panicking_handler_answers_500_in_the_envelope() {
        let app = guarded(Router::new().route(
            "/boom",
            get(|| async {
                if true {
                    panic!("secret detail");
                }
            }),
        ));
        let req = axum::http::Request::get("/boom")
            .body(axum::body::Body::empty())
            .unwrap();
        let res = app.oneshot(req).await.unwrap();
        assert_eq!(res.status(), axum::http::StatusCode::INTERNAL_SERVER_ERROR);
        let id = res.headers()[slipway_http::request_id::HEADER]
            .to_str()
            .unwrap()
            .to_owned();
        let body = axum::body::to_bytes(res.into_body(), 1024).await.unwrap();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            body,
            serde_json::json!({"error": {
                "code": "internal_error", "message": "internal error", "request_id": id,
            }}),
            "the answer names the request, whose log lines carry the panic"
        );
    }
}
