//! The admin endpoints every component serves on its own port: liveness, readiness and Prometheus metrics.

use std::sync::Arc;

use axum::Router;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::routing::{MethodRouter, get};
use prometheus_client::registry::Registry;

/// The content type of Prometheus metrics in the OpenMetrics text format.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// /healthz, /readyz (200 while `ready` says so, else 503) and /metrics.
pub fn admin_router(
    registry: Arc<Registry>,
    ready: impl Fn() -> bool + Clone + Send + Sync + 'static,
) -> Router {
    Router::new()
        .route("/healthz", get(|| std::future::ready("ok")))
        .route(
            "/readyz",
            get(move || {
                let ready = ready();
                async move {
                    if ready {
                        (axum::http::StatusCode::OK, "ok")
                    } else {
                        (axum::http::StatusCode::SERVICE_UNAVAILABLE, "not ready")
                    }
                }
            }),
        )
        .route("/metrics", metrics_route(registry))
}

/// `GET` of `registry`'s metrics in the OpenMetrics text format, for an admin router of its own.
pub fn metrics_route<S: Clone + Send + Sync + 'static>(registry: Arc<Registry>) -> MethodRouter<S> {
    get(move || {
        let registry = registry.clone();
        async move {
            let mut body = String::new();
            match prometheus_client::encoding::text::encode(&mut body, &registry) {
                Ok(()) => (
                    [(
                        CONTENT_TYPE,
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    )],
                    body,
                )
                    .into_response(),
                Err(_) => axum::http::StatusCode::INTERNAL_SERVER_ERROR.into_response(),
            }
        }
    })
}
