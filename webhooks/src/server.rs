//! The HTTPS side of the webhook: the axum router (`POST /validate`, `GET /healthz`, `GET /readyz`), testable
//! without a socket, and the TLS accept loop that serves it with a reloading certificate and drains in-flight
//! requests on shutdown.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{MatchedPath, State};
use axum::http::{Request, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use kube::core::admission::AdmissionResponse;
use tokio::net::TcpListener;
use tower_http::trace::TraceLayer;
use tracing::field::Empty;

use crate::admission;
use crate::lookup::{Lookup, Readiness};
use crate::metrics::Reviews;

/// Largest review accepted. The apiserver sends the object and the old object, each at most etcd's 1.5 MiB, as
/// JSON inside the review.
pub const MAX_REVIEW_BYTES: usize = 8 * 1024 * 1024;
/// Time a client gets to finish the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Time a connection may wait for its next request's head. hyper's header read timeout also runs while a kept-alive
/// connection sits idle between requests, so it is the idle limit too, and must outlast the apiserver's own: the
/// apiserver keeps idle webhook connections for 90 seconds, and a server that closed one first could do so just as
/// the apiserver sent a review down it, which then fails with "connection reset by peer" (a POST is not retried).
const NEXT_REQUEST_TIMEOUT: Duration = Duration::from_secs(120);
/// How long the apiserver keeps an idle connection to a webhook (the `IdleConnTimeout` of Go's default transport,
/// which the apiserver's client transports keep).
const APISERVER_IDLE_TIMEOUT: Duration = Duration::from_secs(90);
const _: () = assert!(NEXT_REQUEST_TIMEOUT.as_secs() > APISERVER_IDLE_TIMEOUT.as_secs());
/// Time in-flight requests get to finish after shutdown begins.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// What the handlers share: where reviews are decided from, and their counts.
struct Shared<L> {
    lookup: Arc<L>,
    reviews: Reviews,
}

impl<L> Clone for Shared<L> {
    fn clone(&self) -> Self {
        Self {
            lookup: self.lookup.clone(),
            reviews: self.reviews.clone(),
        }
    }
}

/// The webhook's routes over `lookup`, counting the reviews they answer in `reviews`.
pub fn router<L: Lookup + 'static>(lookup: Arc<L>, reviews: Reviews) -> Router {
    Router::new()
        .route("/validate", post(validate::<L>))
        .route("/healthz", get(healthz::<L>))
        .route("/readyz", get(readyz::<L>))
        .layer(
            TraceLayer::new_for_http().make_span_with(|req: &Request<Body>| {
                // The matched route, never the raw URI: a query string is the caller's data.
                let path = req
                    .extensions()
                    .get::<MatchedPath>()
                    .map_or("unmatched", MatchedPath::as_str);
                tracing::info_span!(
                    "request",
                    method = %req.method(),
                    path,
                    uid = Empty,
                    kind = Empty,
                    operation = Empty,
                    namespace = Empty,
                    name = Empty,
                    allowed = Empty,
                )
            }),
        )
        .with_state(Shared { lookup, reviews })
}

async fn validate<L: Lookup>(State(shared): State<Shared<L>>, body: Body) -> Response {
    let started = std::time::Instant::now();
    let bytes = match axum::body::to_bytes(body, MAX_REVIEW_BYTES).await {
        Ok(b) => b,
        Err(e) => {
            let review = AdmissionResponse::invalid(format!("the review could not be read: {e}"))
                .into_review();
            return (StatusCode::BAD_REQUEST, axum::Json(review)).into_response();
        }
    };
    let (answer, subject) = admission::review(shared.lookup.as_ref(), &bytes).await;
    shared.reviews.observe(&subject, &answer, started.elapsed());
    let span = tracing::Span::current();
    span.record("uid", subject.uid.as_str());
    span.record("kind", subject.kind.as_str());
    span.record("operation", subject.operation.as_str());
    span.record("namespace", subject.namespace.as_str());
    span.record("name", subject.name.as_str());
    span.record("allowed", answer.allowed());
    if answer.allowed() {
        tracing::debug!("admitted");
    } else {
        tracing::info!(reason = answer.message(), "denied");
    }
    (answer.status, axum::Json(answer.review)).into_response()
}

async fn healthz<L: Lookup>(State(shared): State<Shared<L>>) -> Response {
    match shared.lookup.readiness() {
        Readiness::Failed(message) => (StatusCode::INTERNAL_SERVER_ERROR, message).into_response(),
        Readiness::Starting | Readiness::Ready => "ok".into_response(),
    }
}

async fn readyz<L: Lookup>(State(shared): State<Shared<L>>) -> Response {
    match shared.lookup.readiness() {
        Readiness::Ready => "ok".into_response(),
        Readiness::Starting => {
            (StatusCode::SERVICE_UNAVAILABLE, "caches are loading").into_response()
        }
        Readiness::Failed(message) => (StatusCode::SERVICE_UNAVAILABLE, message).into_response(),
    }
}

/// Serves `app` over TLS on `listener` until `shutdown` resolves, then lets in-flight requests finish.
pub async fn serve_tls(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    app: Router,
    shutdown: impl Future<Output = ()> + Send,
) -> anyhow::Result<()> {
    let limits = slipway_http::TlsServing {
        handshake: HANDSHAKE_TIMEOUT,
        header_read: NEXT_REQUEST_TIMEOUT,
        drain: DRAIN_TIMEOUT,
    };
    slipway_http::serve_router_tls(listener, tls, app, shutdown, limits).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::future::Future;

    use axum::body::to_bytes;
    use serde_json::{Value, json};
    use tower::ServiceExt;

    use super::*;
    use crate::lookup::{Labels, LookupError, Snapshot};
    use crate::validate::fixtures::cluster;

    async fn call(
        app: Router,
        method: &str,
        path: &str,
        body: impl Into<Body>,
    ) -> (StatusCode, Vec<u8>) {
        let req = Request::builder()
            .method(method)
            .uri(path)
            .body(body.into())
            .unwrap();
        let res = app.oneshot(req).await.unwrap();
        let status = res.status();
        (
            status,
            to_bytes(res.into_body(), usize::MAX)
                .await
                .unwrap()
                .to_vec(),
        )
    }

    fn review_of(body: &[u8]) -> Value {
        serde_json::from_slice(body).unwrap()
    }

    #[tokio::test]
    async fn garbage_is_answered_with_an_invalid_review() {
        let app = router(Arc::new(cluster("ns", &[])), Reviews::default());
        let (status, body) = call(app.clone(), "POST", "/validate", "garbage").await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        let review = review_of(&body);
        assert_eq!(review["kind"], "AdmissionReview");
        assert_eq!(review["response"]["allowed"], false);
        assert!(
            review["response"]["status"]["message"]
                .as_str()
                .unwrap()
                .starts_with("the body is not JSON")
        );
        // Still serving.
        assert_eq!(
            call(app, "GET", "/healthz", Body::empty()).await.0,
            StatusCode::OK
        );
    }

    #[tokio::test]
    async fn a_review_is_answered_200_and_counted() {
        let reviews = Reviews::default();
        let app = router(Arc::new(cluster("ns", &[])), reviews.clone());
        let review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": "u-2", "kind": {"group": "slipway.dev", "version": "v1alpha1", "kind": "Deploy"},
            "resource": {"group": "slipway.dev", "version": "v1alpha1", "resource": "deploys"},
            "namespace": "ns", "name": "d", "operation": "CREATE", "userInfo": {},
            "object": {"apiVersion": "slipway.dev/v1alpha1", "kind": "Deploy", "metadata": {"name": "d", "namespace": "ns"},
                       "spec": {"channel": "blog.next", "sha": "master"}}}});
        let (status, body) = call(
            app,
            "POST",
            "/validate",
            serde_json::to_vec(&review).unwrap(),
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        let review = review_of(&body);
        assert_eq!(review["response"]["uid"], "u-2");
        assert_eq!(review["response"]["allowed"], false);
        assert_eq!(
            review["response"]["status"]["message"],
            "channel blog.next does not exist in namespace ns"
        );
        assert_eq!(review["response"]["status"]["code"], 404);
        let mut registry = prometheus_client::registry::Registry::default();
        reviews.register(&mut registry);
        let mut metrics = String::new();
        prometheus_client::encoding::text::encode(&mut metrics, &registry).unwrap();
        assert!(
            metrics.contains(
                r#"slipway_webhook_admissions_total{kind="Deploy",operation="CREATE",outcome="denied"} 1"#
            ),
            "{metrics}"
        );
    }

    #[tokio::test]
    async fn an_oversized_body_is_refused() {
        let app = router(Arc::new(cluster("ns", &[])), Reviews::default());
        let (status, body) = call(app, "POST", "/validate", vec![b' '; MAX_REVIEW_BYTES + 1]).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(review_of(&body)["response"]["allowed"], false);
    }

    /// A lookup whose caches are still loading.
    struct Loading(Snapshot);

    impl Lookup for Loading {
        fn namespace_labels(
            &self,
            name: &str,
        ) -> impl Future<Output = Result<Option<Labels>, LookupError>> + Send {
            self.0.namespace_labels(name)
        }
        fn app(
            &self,
            ns: &str,
            name: &str,
        ) -> impl Future<Output = Result<Option<Arc<slipway_crds::App>>, LookupError>> + Send
        {
            self.0.app(ns, name)
        }
        fn channel(
            &self,
            ns: &str,
            name: &str,
        ) -> impl Future<Output = Result<Option<Arc<slipway_crds::Channel>>, LookupError>> + Send
        {
            self.0.channel(ns, name)
        }
        fn readiness(&self) -> Readiness {
            Readiness::Starting
        }
        fn apps(&self) -> Vec<Arc<slipway_crds::App>> {
            self.0.apps()
        }
        fn channels(&self) -> Vec<Arc<slipway_crds::Channel>> {
            self.0.channels()
        }
        fn domains(&self) -> Vec<Arc<slipway_crds::Domain>> {
            self.0.domains()
        }
        fn read_domains(
            &self,
            domain: &str,
            ns: &str,
            channel: &str,
        ) -> impl Future<Output = Result<Vec<Arc<slipway_crds::Domain>>, LookupError>> + Send
        {
            self.0.read_domains(domain, ns, channel)
        }
    }

    #[tokio::test]
    async fn readiness_follows_the_caches() {
        let ready = router(Arc::new(Snapshot::default()), Reviews::default());
        assert_eq!(
            call(ready, "GET", "/readyz", Body::empty()).await.0,
            StatusCode::OK
        );
        let loading = router(Arc::new(Loading(Snapshot::default())), Reviews::default());
        assert_eq!(
            call(loading.clone(), "GET", "/readyz", Body::empty())
                .await
                .0,
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(
            call(loading.clone(), "GET", "/healthz", Body::empty())
                .await
                .0,
            StatusCode::OK
        );
        let review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": "u-3", "kind": {"group": "slipway.dev", "version": "v1alpha1", "kind": "App"},
            "resource": {"group": "slipway.dev", "version": "v1alpha1", "resource": "apps"},
            "namespace": "ns", "name": "shop", "operation": "CREATE", "userInfo": {},
            "object": {"apiVersion": "slipway.dev/v1alpha1", "kind": "App", "metadata": {"name": "shop", "namespace": "ns"},
                       "spec": {"owner": "alice"}}}});
        let (status, body) = call(
            loading,
            "POST",
            "/validate",
            serde_json::to_vec(&review).unwrap(),
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        let review = review_of(&body);
        assert_eq!(review["response"]["allowed"], false);
        assert_eq!(review["response"]["status"]["code"], 503);
    }

    #[tokio::test]
    async fn serves_over_tls_and_follows_a_new_certificate() {
        use slipway_testkit::tls::{TempDir, TestPki, https_request};

        let dir = TempDir::new("webhook-serve").unwrap();
        let pki = TestPki::new().unwrap();
        let first = pki.serving_cert(&["127.0.0.1"]).unwrap();
        let (cert, key) = first.write_to(dir.path()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let files = slipway_http::tls::TlsFiles { cert, key };
        let resolver = Arc::new(
            slipway_http::tls::ReloadingCert::load(files, Duration::ZERO, provider.clone())
                .unwrap(),
        );
        let config = Arc::new(slipway_http::tls::server_config(resolver, provider).unwrap());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve_tls(
            listener,
            config,
            router(Arc::new(cluster("ns", &[])), Reviews::default()),
            async {
                let _ = stopped.await;
            },
        ));

        let res = https_request(addr, pki.ca_pem(), "POST", "/validate", b"{not json")
            .await
            .unwrap();
        assert_eq!(res.status, 400);
        assert_eq!(review_of(&res.body)["response"]["allowed"], false);
        assert_eq!(res.server_cert, first.cert_der());
        let res = https_request(addr, pki.ca_pem(), "GET", "/healthz", b"")
            .await
            .unwrap();
        assert_eq!((res.status, res.body.as_slice()), (200, &b"ok"[..]));

        let second = pki.serving_cert(&["127.0.0.1"]).unwrap();
        second.write_to(dir.path()).unwrap();
        let res = https_request(addr, pki.ca_pem(), "GET", "/readyz", b"")
            .await
            .unwrap();
        assert_eq!(res.status, 200);
        assert_eq!(
            res.server_cert,
            second.cert_der(),
            "the new certificate is served without a restart"
        );

        stop.send(()).unwrap();
        server.await.unwrap().unwrap();
    }
}
