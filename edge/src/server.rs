//! The edge's server: accepts connections (plain HTTP/1.1, or TLS with HTTP/2 or HTTP/1.1 by ALPN), finds each
//! request's route by `Host` (or HTTP/2's `:authority`), and answers it from a static site, through the proxy, or
//! with one of the edge's own pages. Plain HTTP answers ACME HTTP-01 challenges and, when the edge serves HTTPS
//! for the host, redirects everything else there. Every request is counted in the host's metrics and, when
//! enabled, written to the access log (target `slipway::edge::access`, one structured event per request).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HOST, LOCATION};
use http::{Request, Response, StatusCode};
use hyper::body::{Body, Incoming};
use hyper::service::service_fn;
use tokio::net::TcpListener;

use super::bandwidth::Counted;
use super::metrics::{UNKNOWN_HOST, UpstreamFailure};
use super::proxy::{Origin, ProxyError};
use super::routes::{Route, Target};
use super::{Edge, EdgeBody, files, pages};

/// The path prefix the platform answers on every channel host.
const SVC_AUTH: &str = "/svc-auth";

/// Longest wait, once told to stop, for open connections to finish the requests they are in.
const DRAIN_LIMIT: Duration = Duration::from_secs(20);
/// Where ACME's HTTP-01 challenges are fetched.
const ACME_CHALLENGE: &str = "/.well-known/acme-challenge/";

/// What a listener speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// Plain HTTP/1.1.
    Http,
    /// TLS, then HTTP/2 or HTTP/1.1 as ALPN chose.
    Https,
}

impl Scheme {
    /// `http` or `https`, as `X-Forwarded-Proto` says it.
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }
}

/// Serves `listener` until `shutdown` resolves, then stops accepting and lets every open connection finish the
/// request it is in (idle keep-alive connections close at once), for at most [`DRAIN_LIMIT`].
pub async fn serve(
    edge: Arc<Edge>,
    listener: TcpListener,
    scheme: Scheme,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    slipway_http::accept_until(listener, shutdown, DRAIN_LIMIT, |stream, peer, draining| {
        let edge = edge.clone();
        async move {
            let service = service_fn({
                let edge = edge.clone();
                move |req| {
                    let edge = edge.clone();
                    async move {
                        // The bytes sent count against the host's account, as they stream.
                        let bandwidth = edge
                            .table
                            .load()
                            .get(request_host(&req))
                            .and_then(|r| r.bandwidth.clone());
                        let res = handle(&edge, req, peer, scheme).await;
                        Ok::<_, std::convert::Infallible>(
                            res.map(|body| Counted::new(body, bandwidth)),
                        )
                    }
                }
            });
            match scheme {
                Scheme::Http => slipway_http::serve_http1(stream, peer, service, draining).await,
                Scheme::Https => {
                    let handshake = super::tls::accept(
                        stream,
                        edge.tls_config.clone(),
                        &edge.certs,
                        edge.tls.issuance_wait,
                    );
                    let limit = slipway_http::HEADER_READ_TIMEOUT + edge.tls.issuance_wait;
                    let Ok(Some(tls)) = tokio::time::timeout(limit, handshake).await else {
                        return;
                    };
                    slipway_http::serve_http(
                        tls,
                        peer,
                        service,
                        draining,
                        slipway_http::HEADER_READ_TIMEOUT,
                    )
                    .await;
                }
            }
        }
    })
    .await;
    Ok(())
}

/// The host a request names: its `Host` header, else the authority of an absolute request target.
fn request_host(req: &Request<Incoming>) -> &str {
    req.headers()
        .get(HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| req.uri().authority().map(|a| a.as_str()))
        .unwrap_or("")
}

fn is_svc_auth(path: &str) -> bool {
    path.strip_prefix(SVC_AUTH)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// What plain HTTP answers before any route: an ACME HTTP-01 challenge, or the redirect to HTTPS for a host the
/// edge has a certificate for.
fn plain_http_answer(edge: &Edge, req: &Request<Incoming>) -> Option<Response<EdgeBody>> {
    let host = super::routes::normalize_host(request_host(req));
    if let Some(token) = req.uri().path().strip_prefix(ACME_CHALLENGE) {
        let res = match edge.certs.challenge(&host, token) {
            Some(answer) => Response::builder()
                .status(StatusCode::OK)
                .header(CONTENT_TYPE, "text/plain")
                .body(super::full(Bytes::from(answer))),
            None => Response::builder()
                .status(StatusCode::NOT_FOUND)
                .body(super::empty()),
        };
        return res.ok();
    }
    if !edge.tls.redirect_https || edge.certs.resolve(&host).is_none() {
        return None;
    }
    let target = req.uri().path_and_query().map_or("/", |p| p.as_str());
    Response::builder()
        .status(StatusCode::PERMANENT_REDIRECT)
        .header(LOCATION, format!("https://{host}{target}"))
        .body(super::empty())
        .ok()
}

/// Answers one request.
pub async fn handle(
    edge: &Edge,
    req: Request<Incoming>,
    peer: SocketAddr,
    scheme: Scheme,
) -> Response<EdgeBody> {
    if scheme == Scheme::Http
        && let Some(res) = plain_http_answer(edge, &req)
    {
        return res;
    }
    let started = Instant::now();
    // The edge's own id of the request: passed to the channel's process, in the access log line and answered in
    // `x-request-id` (unless the app answers one itself), so the id a visitor or an app reports finds the line.
    let request_id = slipway_http::request_id::new_id();
    let table = edge.table.load();
    if let (Some(sign_in), Some(metrics)) = (&edge.sign_in, &edge.auth_host)
        && super::routes::strip_port(request_host(&req)).eq_ignore_ascii_case(&sign_in.auth_host)
    {
        let served = |host: &str| {
            table
                .get(host)
                .filter(|r| !matches!(r.target, Target::ObjectStore(_)))
                .map(|r| r.host.clone())
        };
        let res = super::svc_auth::on_auth_host(sign_in, &edge.metrics, served, &req, scheme).await;
        metrics.record(
            res.status(),
            started.elapsed(),
            res.body().size_hint().exact(),
        );
        return with_request_id(res, &request_id);
    }
    let route = table.get(request_host(&req)).cloned();
    let log = edge.access_log.then(|| {
        (
            req.method().clone(),
            req.uri().clone(),
            request_host(&req).to_owned(),
        )
    });
    let Answered {
        res,
        upstream,
        failure,
    } = match &route {
        None => Answered::page(pages::unknown_host()),
        Some(route) => answer(edge, route, req, peer, scheme, &request_id).await,
    };
    let elapsed = started.elapsed();
    let bytes = res.body().size_hint().exact();
    match &route {
        Some(route) => route.metrics.record(res.status(), elapsed, bytes),
        None => edge.unknown.record(res.status(), elapsed, bytes),
    }
    if let Some(failure) = failure {
        edge.metrics.upstream_failure(failure);
    }
    if let Some((method, uri, host)) = log {
        tracing::info!(
            target: "slipway::edge::access",
            host = route.as_ref().map_or(UNKNOWN_HOST, |r| r.host.as_str()),
            requested_host = %host,
            method = %method,
            path = uri.path(),
            query = uri.query().unwrap_or(""),
            status = res.status().as_u16(),
            bytes,
            micros = elapsed.as_micros() as u64,
            client = %peer.ip(),
            upstream = upstream.map(|u| u.to_string()),
            request_id = %request_id,
        );
    }
    with_request_id(res, &request_id)
}

/// `res` with the edge's id of the request in `x-request-id`, unless it answers one of its own (an app's).
fn with_request_id(mut res: Response<EdgeBody>, request_id: &str) -> Response<EdgeBody> {
    if let Ok(id) = http::HeaderValue::from_str(request_id) {
        res.headers_mut()
            .entry(slipway_http::request_id::HEADER)
            .or_insert(id);
    }
    res
}

/// How the edge answered a request: the response, the upstream it went to, and why the edge answered with a 5xx of
/// its own, if it did.
struct Answered {
    res: Response<EdgeBody>,
    upstream: Option<SocketAddr>,
    failure: Option<UpstreamFailure>,
}

impl Answered {
    /// A page or response of the edge's own that no upstream was asked for.
    fn page(res: Response<EdgeBody>) -> Self {
        Self {
            res,
            upstream: None,
            failure: None,
        }
    }

    /// The edge's own 5xx `res`, answered because of `failure`.
    fn failed(res: Response<EdgeBody>, failure: UpstreamFailure) -> Self {
        Self {
            res,
            upstream: None,
            failure: Some(failure),
        }
    }
}

async fn answer(
    edge: &Edge,
    route: &Route,
    req: Request<Incoming>,
    peer: SocketAddr,
    scheme: Scheme,
    request_id: &str,
) -> Answered {
    let target = &route.target;
    if !matches!(target, Target::ObjectStore(_)) && is_svc_auth(req.uri().path()) {
        let res = match &edge.sign_in {
            Some(sign_in) => {
                super::svc_auth::on_channel_host(sign_in, &edge.metrics, &route.host, &req, scheme)
                    .await
            }
            None => pages::svc_auth(),
        };
        return Answered::page(res);
    }
    match target {
        Target::Static(key) => {
            let site = match edge.sites.get(key).await {
                Ok(site) => site,
                Err(e) => {
                    // The load logged why, once; the access log has each 503.
                    tracing::debug!(app_id = %key.app_id, sha = %key.sha, error = %e, "static site unavailable");
                    return Answered::failed(
                        pages::unavailable(),
                        UpstreamFailure::StaticUnavailable,
                    );
                }
            };
            let res = files::respond(
                &site,
                req.method(),
                req.uri().path(),
                req.uri().query(),
                req.headers(),
            )
            .await;
            Answered::page(res)
        }
        Target::Proxy(upstreams) | Target::ObjectStore(upstreams) => {
            let origin = Origin {
                client_ip: peer.ip(),
                scheme: scheme.as_str(),
                request_id,
            };
            // The route's endpoints as the table holds them now, for a request every endpoint has refused.
            let endpoints_now = || match edge.table.load().get(&route.host).map(|r| &r.target) {
                Some(Target::Proxy(now) | Target::ObjectStore(now)) => now.addrs().to_vec(),
                _ => Vec::new(),
            };
            let (answer, upstream) = edge
                .proxy
                .forward(req, upstreams, endpoints_now, origin)
                .await;
            let (res, failure) = match answer {
                Ok(res) => (res, None),
                Err(ProxyError::NoEndpoint) => {
                    return Answered::failed(pages::unavailable(), UpstreamFailure::NoEndpoint);
                }
                Err(e @ ProxyError::Timeout(..)) => {
                    tracing::warn!(error = %e, "upstream timeout");
                    (pages::gateway_timeout(), Some(UpstreamFailure::Timeout))
                }
                Err(e) => {
                    tracing::warn!(error = %e, "upstream failed");
                    (pages::bad_gateway(), Some(UpstreamFailure::Refused))
                }
            };
            Answered {
                res,
                upstream,
                failure,
            }
        }
        Target::NotDeployed => Answered::page(pages::not_deployed()),
        Target::NoEndpoints => Answered::failed(pages::unavailable(), UpstreamFailure::NoEndpoint),
        Target::ReadyFile => Answered::failed(pages::ready_file(), UpstreamFailure::NoHttp),
    }
}
