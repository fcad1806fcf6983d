//! Proxying a request to a dynamic channel's endpoint: path and query exactly as sent, the client's `Host`, the
//! platform's `X-Forwarded-*` headers in place of any the client sent, every inbound `X-Svc-*` header dropped (the
//! platform alone speaks those), hop-by-hop headers removed, an app's `Set-Cookie` of the platform's reserved
//! cookie names (`__Host-svc_*`, end-user sign-in's) dropped, and upgrades (WebSocket) joined end to end.
//! Connections to endpoints are kept alive in a pool; connecting and waiting for the response head have
//! timeouts, a streaming body has none.
//!
//! A request without a body whose connection cannot be made (refused, reset, timed out) is sent to the next
//! endpoint, up to [`CONNECT_ATTEMPTS`] endpoints in all, as nginx's `proxy_next_upstream error timeout` does:
//! nothing reached the app, so nothing can happen twice, whatever the method. An endpoint refuses connections in
//! the moment between its pod stopping to listen and the edge learning it is gone (a rollout, a drain), and a
//! reader should not see that moment as a 502. In the same moment a stopping app closes its idle keep-alive
//! connections, and one the edge has just sent a request down breaks before any answer: a bodiless request of an
//! idempotent method (RFC 9110 section 9.2.2: GET, HEAD, OPTIONS, TRACE, PUT, DELETE) is sent to the next endpoint
//! then too, as nginx does for those methods; any other (a POST) may have been acted on and is answered 502. A
//! request with a body is not sent again: the body has gone into the failed attempt, and buffering it for a retry
//! would hold every upload in memory.
//!
//! When every endpoint a bodiless request may go to has refused its connection, the request waits a moment and
//! asks again, with the endpoints the routing table holds by then, for up to [`CONNECT_PATIENCE`] in all. An
//! endpoint the edge believes ready refuses in two moments a reader should not see: the one between a pod
//! stopping and the edge's watch learning it (the table then names the new endpoints, or none, and a route with
//! none answers its 503 at once), and the one after a new edge pod starts while the cluster's NetworkPolicy
//! enforcement has not yet let the new pod's address through to the tenants' pods, which rejects its connections
//! for a few seconds (kube-router answers with a reset). An app that is really down answers its 502 a few seconds
//! later, as it does behind Heroku's router, which retries a refused connection for longer.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONNECTION, HOST, UPGRADE};
use http::{HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode, Uri};
use http_body_util::{Either, Empty};
use hyper::body::{Body, Incoming};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};

use super::EdgeBody;
use super::routes::Upstreams;

/// Most endpoints a bodiless request is tried on when connecting fails (or, for an idempotent method, the
/// connection breaks before an answer).
pub const CONNECT_ATTEMPTS: usize = 3;

/// Longest a bodiless request waits, in all, for an endpoint to take its connection once every endpoint has refused
/// one (see the module doc).
pub const CONNECT_PATIENCE: Duration = Duration::from_secs(5);
/// The first wait before asking the endpoints again; each wait doubles, up to [`LONGEST_CONNECT_WAIT`].
const FIRST_CONNECT_WAIT: Duration = Duration::from_millis(100);
const LONGEST_CONNECT_WAIT: Duration = Duration::from_millis(800);

/// What the edge sends an endpoint: the client's body, or nothing (a request without one, which can be sent again).
type UpstreamBody = Either<Incoming, Empty<Bytes>>;

/// Prefix of the platform's own request headers; a client cannot send them through the edge.
pub const PLATFORM_HEADER_PREFIX: &str = "x-svc-";
const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
const X_REQUEST_ID: HeaderName = HeaderName::from_static(slipway_http::request_id::HEADER);
/// Headers that describe one connection, not the message (RFC 9110 section 7.6.1), and never pass a proxy.
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "proxy-authenticate",
];

/// How long an idle pooled connection is kept: less than slipway's own servers let a connection idle
/// ([`slipway_http::HEADER_READ_TIMEOUT`]), so the edge drops a connection to the S3 gateway before the gateway
/// closes it and never sends a request down a connection the other end is closing (that request would fail with a
/// reset, and one that is not idempotent cannot be retried).
pub const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(20);
const _: () = assert!(POOL_IDLE_TIMEOUT.as_secs() < slipway_http::HEADER_READ_TIMEOUT.as_secs());

/// Limits of the proxy.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    /// Longest wait for a TCP connection to an endpoint.
    pub connect_timeout: Duration,
    /// Longest wait for the response head once the request is sent.
    pub response_timeout: Duration,
    /// How long an idle pooled connection is kept.
    pub idle_timeout: Duration,
    /// Idle connections kept per endpoint.
    pub max_idle_per_endpoint: usize,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(5),
            response_timeout: Duration::from_secs(60),
            idle_timeout: POOL_IDLE_TIMEOUT,
            max_idle_per_endpoint: 256,
        }
    }
}

/// Why a request did not get an upstream answer.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// No connection could be made (refused, reset, timed out): the request never reached the app.
    #[error("upstream {0}: {1}")]
    Connect(SocketAddr, String),
    /// Connecting failed or the connection broke before the response head.
    #[error("upstream {0}: {1}")]
    Upstream(SocketAddr, String),
    /// No response head within the timeout.
    #[error("upstream {0} did not answer within {1:?}")]
    Timeout(SocketAddr, Duration),
    /// The route has no endpoint.
    #[error("no endpoint")]
    NoEndpoint,
}

/// The pooled HTTP/1.1 client to endpoints.
pub struct Proxy {
    client: Client<HttpConnector, UpstreamBody>,
    response_timeout: Duration,
}

/// Who sent the request, for the `X-Forwarded-*` headers.
#[derive(Debug, Clone, Copy)]
pub struct Origin<'a> {
    /// The client's address.
    pub client_ip: IpAddr,
    /// `http` or `https`, as the edge received the request.
    pub scheme: &'a str,
    /// The edge's id of the request, which its access log line carries.
    pub request_id: &'a str,
}

impl Proxy {
    /// A proxy with `config`'s limits.
    pub fn new(config: &ProxyConfig) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(config.connect_timeout));
        connector.set_nodelay(true);
        connector.enforce_http(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(config.idle_timeout)
            .pool_max_idle_per_host(config.max_idle_per_endpoint)
            .pool_timer(TokioTimer::new())
            .build(connector);
        Self {
            client,
            response_timeout: config.response_timeout,
        }
    }

    /// Sends `req` to the next of `upstreams` and returns its response (a `101` is joined to the client's
    /// connection), or why none came, with the last endpoint tried. A bodiless request whose connection fails goes
    /// on to the next endpoint, and when all have refused it, to those `endpoints_now` gives a moment later (see
    /// the module doc).
    pub async fn forward(
        &self,
        mut req: Request<Incoming>,
        upstreams: &Upstreams,
        endpoints_now: impl Fn() -> Vec<SocketAddr>,
        origin: Origin<'_>,
    ) -> (Result<Response<EdgeBody>, ProxyError>, Option<SocketAddr>) {
        let Some(mut upstream) = upstreams.pick() else {
            return (Err(ProxyError::NoEndpoint), None);
        };
        let upgrade = upgrade_protocol(req.headers());
        let client_side = upgrade.is_some().then(|| hyper::upgrade::on(&mut req));
        let (mut parts, body) = req.into_parts();
        let path = parts
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_owned();
        let host = parts
            .headers
            .get(HOST)
            .cloned()
            .or_else(|| parts.uri.authority().and_then(|a| a.as_str().parse().ok()));
        parts.version = http::Version::HTTP_11;
        prepare_request_headers(&mut parts.headers, origin, host, upgrade.as_ref());
        // What a later attempt sends: the method and headers of a request without a body; one with a body goes once.
        let replay = body
            .is_end_stream()
            .then(|| (parts.method.clone(), parts.headers.clone()));
        let body = if replay.is_some() {
            Either::Right(Empty::new())
        } else {
            Either::Left(body)
        };
        let mut first = Some(Request::from_parts(parts, body));
        let idempotent = replay
            .as_ref()
            .is_some_and(|(method, _)| is_idempotent(method));
        // Endpoints tried since the last wait, the endpoints asked for after it, the next wait, and when waiting ends.
        let mut tried = 1;
        let mut asked_again: Option<Upstreams> = None;
        let mut wait = FIRST_CONNECT_WAIT;
        let patience_ends = tokio::time::Instant::now() + CONNECT_PATIENCE;
        let mut res = loop {
            let mut req = match (first.take(), &replay) {
                (Some(req), _) => req,
                (None, Some((method, headers))) => {
                    let mut again = Request::new(Either::Right(Empty::new()));
                    *again.method_mut() = method.clone();
                    *again.headers_mut() = headers.clone();
                    again
                }
                (None, None) => unreachable!("a request with a body is sent once"),
            };
            match endpoint_uri(upstream, &path) {
                Ok(uri) => *req.uri_mut() = uri,
                Err(e) => return (Err(e), Some(upstream)),
            }
            let current = asked_again.as_ref().unwrap_or(upstreams);
            let others = replay.is_some() && tried < CONNECT_ATTEMPTS.min(current.addrs().len());
            match self.send(req, upstream).await {
                Ok(res) => break res,
                Err(e @ ProxyError::Connect(..)) if others => {
                    tracing::info!(error = %e, tried, "connecting failed; trying the next endpoint");
                    tried += 1;
                    upstream = current.pick().unwrap_or(upstream);
                }
                Err(e @ ProxyError::Upstream(..)) if idempotent && others => {
                    tracing::info!(error = %e, tried, "the connection broke before an answer; trying the next endpoint");
                    tried += 1;
                    upstream = current.pick().unwrap_or(upstream);
                }
                Err(e @ ProxyError::Connect(..))
                    if replay.is_some() && tokio::time::Instant::now() + wait < patience_ends =>
                {
                    tracing::info!(error = %e, wait_ms = wait.as_millis() as u64, "every endpoint refused; asking again after a wait");
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(LONGEST_CONNECT_WAIT);
                    let now = Upstreams::new(endpoints_now());
                    let Some(next) = now.pick() else {
                        return (Err(e), Some(upstream));
                    };
                    (upstream, tried, asked_again) = (next, 1, Some(now));
                }
                Err(e) => return (Err(e), Some(upstream)),
            }
        };
        if res.status() == StatusCode::SWITCHING_PROTOCOLS
            && let Some(client_side) = client_side
        {
            let upstream_side = hyper::upgrade::on(&mut res);
            tokio::spawn(async move {
                match futures::future::try_join(client_side, upstream_side).await {
                    Ok((client_io, upstream_io)) => {
                        let (mut a, mut b) = (TokioIo::new(client_io), TokioIo::new(upstream_io));
                        if let Err(e) = tokio::io::copy_bidirectional(&mut a, &mut b).await {
                            tracing::debug!(error = %e, "upgraded connection ended");
                        }
                    }
                    Err(e) => tracing::debug!(error = %e, "upgrade failed"),
                }
            });
            let (mut parts, _) = res.into_parts();
            drop_reserved_cookies(&mut parts.headers);
            return (
                Ok(Response::from_parts(parts, super::empty())),
                Some(upstream),
            );
        }
        remove_hop_by_hop(res.headers_mut());
        drop_reserved_cookies(res.headers_mut());
        (Ok(res.map(super::upstream)), Some(upstream))
    }

    /// One attempt at `upstream`, whose address `req` already carries.
    async fn send(
        &self,
        req: Request<UpstreamBody>,
        upstream: SocketAddr,
    ) -> Result<Response<Incoming>, ProxyError> {
        match tokio::time::timeout(self.response_timeout, self.client.request(req)).await {
            Ok(Ok(res)) => Ok(res),
            Ok(Err(e)) if e.is_connect() => Err(ProxyError::Connect(upstream, error_chain(&e))),
            Ok(Err(e)) => Err(ProxyError::Upstream(upstream, error_chain(&e))),
            Err(_) => Err(ProxyError::Timeout(upstream, self.response_timeout)),
        }
    }
}

/// Whether a request of `method` means the same sent twice as once (RFC 9110 section 9.2.2).
fn is_idempotent(method: &http::Method) -> bool {
    use http::Method;
    [
        Method::GET,
        Method::HEAD,
        Method::OPTIONS,
        Method::TRACE,
        Method::PUT,
        Method::DELETE,
    ]
    .contains(method)
}

/// `path` (with its query) at `upstream`, over plain HTTP.
fn endpoint_uri(upstream: SocketAddr, path: &str) -> Result<Uri, ProxyError> {
    Uri::builder()
        .scheme("http")
        .authority(upstream.to_string())
        .path_and_query(path)
        .build()
        .map_err(|e| ProxyError::Upstream(upstream, e.to_string()))
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The protocol a request asks to upgrade to (`Connection: upgrade` with an `Upgrade` header).
pub fn upgrade_protocol(headers: &HeaderMap) -> Option<HeaderValue> {
    let asks = headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case("upgrade"));
    asks.then(|| headers.get(UPGRADE).cloned()).flatten()
}

/// Prefix of the cookie names the platform reserves (end-user sign-in's identity, state and flow cookies).
pub const RESERVED_COOKIE_PREFIX: &str = "__Host-svc_";

/// Drops every `Set-Cookie` naming a reserved cookie: only the platform sets those.
fn drop_reserved_cookies(headers: &mut HeaderMap) {
    let reserved = |value: &HeaderValue| {
        value
            .as_bytes()
            .trim_ascii_start()
            .starts_with(RESERVED_COOKIE_PREFIX.as_bytes())
    };
    if !headers
        .get_all(http::header::SET_COOKIE)
        .iter()
        .any(reserved)
    {
        return;
    }
    let kept: Vec<HeaderValue> = headers
        .get_all(http::header::SET_COOKIE)
        .iter()
        .filter(|v| !reserved(v))
        .cloned()
        .collect();
    headers.remove(http::header::SET_COOKIE);
    for value in kept {
        headers.append(http::header::SET_COOKIE, value);
    }
}

fn remove_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|t| HeaderName::from_bytes(t.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
}

/// Rewrites a request's headers for the endpoint: hop-by-hop headers and every `X-Svc-*` header removed, the
/// upgrade (if any) asked for again, `Host` kept, `X-Forwarded-For/Proto/Host` and `X-Request-ID` set by the edge
/// alone (a client's own values are not passed on: the edge is the platform's entry, and an app that logs the id
/// finds the edge's access log line of the request by it).
pub fn prepare_request_headers(
    headers: &mut HeaderMap,
    origin: Origin<'_>,
    host: Option<HeaderValue>,
    upgrade: Option<&HeaderValue>,
) {
    remove_hop_by_hop(headers);
    let platform: Vec<HeaderName> = headers
        .keys()
        .filter(|name| name.as_str().starts_with(PLATFORM_HEADER_PREFIX))
        .cloned()
        .collect();
    for name in platform {
        headers.remove(name);
    }
    if let Some(protocol) = upgrade {
        headers.insert(CONNECTION, HeaderValue::from_static("upgrade"));
        headers.insert(UPGRADE, protocol.clone());
    }
    if let Ok(ip) = HeaderValue::from_str(&origin.client_ip.to_string()) {
        headers.insert(X_FORWARDED_FOR, ip);
    }
    if let Ok(scheme) = HeaderValue::from_str(origin.scheme) {
        headers.insert(X_FORWARDED_PROTO, scheme);
    }
    headers.remove(X_REQUEST_ID);
    if let Ok(id) = HeaderValue::from_str(origin.request_id) {
        headers.insert(X_REQUEST_ID, id);
    }
    headers.remove(X_FORWARDED_HOST);
    if let Some(host) = host {
        headers.insert(X_FORWARDED_HOST, host.clone());
        headers.insert(HOST, host);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::sync::Arc;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    /// An address on `ip` nothing listens on: bound, then let go.
    async fn refusing(ip: &str) -> SocketAddr {
        let listener = TcpListener::bind((ip, 0)).await.unwrap();
        listener.local_addr().unwrap()
    }

    /// An endpoint on `ip` that answers every request `200 <its address>`, and counts the requests.
    async fn answering(ip: &str) -> (SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
        endpoint(ip, true).await
    }

    /// An endpoint on `ip` that reads each request's head and closes the connection without an answer, as a
    /// stopping app closes a keep-alive connection a request was just sent down; counts the requests.
    async fn hanging_up(ip: &str) -> (SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
        endpoint(ip, false).await
    }

    /// An endpoint on `ip` that reads each request's head, counts it, and `answers` it or hangs up.
    async fn endpoint(
        ip: &str,
        answers: bool,
    ) -> (SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
        let listener = TcpListener::bind((ip, 0)).await.unwrap();
        (listener.local_addr().unwrap(), serve(listener, answers))
    }

    /// Serves `listener` as [`endpoint`] does; the count of requests.
    fn serve(listener: TcpListener, answers: bool) -> Arc<std::sync::atomic::AtomicUsize> {
        let addr = listener.local_addr().unwrap();
        let served = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = served.clone();
        tokio::spawn(async move {
            loop {
                let (mut stream, _) = listener.accept().await.unwrap();
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).await.unwrap() == 1 {
                    head.push(byte[0]);
                }
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                if answers {
                    let body = addr.to_string();
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = stream.write_all(answer.as_bytes()).await;
                }
            }
        });
        served
    }

    /// Sends `raw` through a front server whose one service is `forward` to `upstreams`; the status line and body
    /// the client read.
    async fn through_proxy(upstreams: Vec<SocketAddr>, raw: &str) -> (String, String) {
        let later = Arc::new(Later::new(upstreams.clone()));
        through_proxy_later(upstreams, &later, raw).await
    }

    /// The endpoints a route names when the proxy asks again, and how often it asked.
    struct Later {
        endpoints: Vec<SocketAddr>,
        asked: std::sync::atomic::AtomicUsize,
    }

    impl Later {
        fn new(endpoints: Vec<SocketAddr>) -> Self {
            Self {
                endpoints,
                asked: std::sync::atomic::AtomicUsize::new(0),
            }
        }

        fn asked(&self) -> usize {
            self.asked.load(std::sync::atomic::Ordering::SeqCst)
        }
    }

    /// [`through_proxy`], the route naming `later`'s endpoints when the proxy asks again.
    async fn through_proxy_later(
        upstreams: Vec<SocketAddr>,
        later: &Arc<Later>,
        raw: &str,
    ) -> (String, String) {
        let later = later.clone();
        let proxy = Arc::new(Proxy::new(&ProxyConfig::default()));
        let upstreams = Arc::new(Upstreams::new(upstreams));
        let front = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let front_addr = front.local_addr().unwrap();
        tokio::spawn(async move {
            let (stream, _) = front.accept().await.unwrap();
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let (proxy, upstreams, later) = (proxy.clone(), upstreams.clone(), later.clone());
                async move {
                    let endpoints_now = || {
                        later
                            .asked
                            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        later.endpoints.clone()
                    };
                    let origin = Origin {
                        client_ip: "192.0.2.1".parse().unwrap(),
                        scheme: "http",
                        request_id: "r1",
                    };
                    let (answer, _) = proxy.forward(req, &upstreams, endpoints_now, origin).await;
                    Ok::<_, std::convert::Infallible>(answer.unwrap_or_else(|e| {
                        let mut res = Response::new(crate::full(Bytes::from(e.to_string())));
                        *res.status_mut() = StatusCode::BAD_GATEWAY;
                        res
                    }))
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
        let mut client = TcpStream::connect(front_addr).await.unwrap();
        client.write_all(raw.as_bytes()).await.unwrap();
        let mut answer = String::new();
        client.read_to_string(&mut answer).await.unwrap();
        let status = answer.lines().next().unwrap_or_default().to_owned();
        let body = answer
            .split("\r\n\r\n")
            .nth(1)
            .unwrap_or_default()
            .to_owned();
        (status, body)
    }

    const GET: &str = "GET /x HTTP/1.1\r\nhost: app.example\r\nconnection: close\r\n\r\n";
    const POST: &str =
        "POST /x HTTP/1.1\r\nhost: app.example\r\ncontent-length: 2\r\nconnection: close\r\n\r\nhi";

    #[tokio::test]
    async fn a_bodiless_request_refused_by_one_endpoint_is_answered_by_the_next() {
        // Endpoints are taken in address order: the refusing one (127.0.0.1) comes first.
        let gone = refusing("127.0.0.1").await;
        let (live, served) = answering("127.0.0.2").await;
        let (status, body) = through_proxy(vec![gone, live], GET).await;
        assert_eq!(status, "HTTP/1.1 200 OK");
        assert_eq!(body, live.to_string());
        assert_eq!(served.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_request_with_a_body_is_sent_once_and_its_refusal_answered() {
        let gone = refusing("127.0.0.1").await;
        let (live, served) = answering("127.0.0.2").await;
        let (status, body) = through_proxy(vec![gone, live], POST).await;
        assert_eq!(status, "HTTP/1.1 502 Bad Gateway");
        assert!(body.starts_with(&format!("upstream {gone}: ")), "{body}");
        assert_eq!(served.load(std::sync::atomic::Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn a_bodiless_request_every_endpoint_keeps_refusing_fails_once_its_patience_is_spent() {
        let (a, b) = (refusing("127.0.0.1").await, refusing("127.0.0.2").await);
        let later = Arc::new(Later::new(vec![a, b]));
        let (status, body) = through_proxy_later(vec![a, b], &later, GET).await;
        assert_eq!(status, "HTTP/1.1 502 Bad Gateway");
        assert!(
            [a, b]
                .iter()
                .any(|e| body.starts_with(&format!("upstream {e}: "))),
            "{body}"
        );
        // It kept asking for the route's endpoints while its patience lasted, not once and done.
        assert!(later.asked() >= 2, "asked again {} times", later.asked());
    }

    #[tokio::test]
    async fn a_bodiless_request_every_endpoint_refuses_goes_to_the_endpoints_the_route_names_next()
    {
        // The table moved on while the request was being refused: a new version, or a pod on another node.
        let gone = refusing("127.0.0.1").await;
        let (live, served) = answering("127.0.0.2").await;
        let later = Arc::new(Later::new(vec![live]));
        let (status, body) = through_proxy_later(vec![gone], &later, GET).await;
        assert_eq!(status, "HTTP/1.1 200 OK");
        assert_eq!(body, live.to_string());
        assert_eq!(served.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert_eq!(later.asked(), 1);
    }

    #[tokio::test]
    async fn a_bodiless_request_an_endpoint_refuses_for_a_moment_is_answered_by_it() {
        // A new edge pod the NetworkPolicy enforcement has not yet let through, as kube-router rejects it: the
        // same endpoint refuses, then takes the connection.
        let endpoint = refusing("127.0.0.1").await;
        let later = Arc::new(Later::new(vec![endpoint]));
        let opens = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(250)).await;
            serve(TcpListener::bind(endpoint).await.unwrap(), true)
        });
        let (status, body) = through_proxy_later(vec![endpoint], &later, GET).await;
        assert_eq!(status, "HTTP/1.1 200 OK");
        assert_eq!(body, endpoint.to_string());
        assert!(later.asked() >= 1);
        assert_eq!(
            opens
                .await
                .unwrap()
                .load(std::sync::atomic::Ordering::SeqCst),
            1
        );
    }

    #[tokio::test]
    async fn a_refused_request_whose_route_has_no_endpoint_left_fails_after_one_wait() {
        let gone = refusing("127.0.0.1").await;
        let later = Arc::new(Later::new(Vec::new()));
        let (status, body) = through_proxy_later(vec![gone], &later, GET).await;
        assert_eq!(status, "HTTP/1.1 502 Bad Gateway");
        assert!(body.starts_with(&format!("upstream {gone}: ")), "{body}");
        assert_eq!(later.asked(), 1);
    }

    #[tokio::test]
    async fn a_get_whose_connection_breaks_before_an_answer_is_answered_by_the_next() {
        let (closing, hung_up) = hanging_up("127.0.0.1").await;
        let (live, served) = answering("127.0.0.2").await;
        let (status, body) = through_proxy(vec![closing, live], GET).await;
        assert_eq!(status, "HTTP/1.1 200 OK");
        assert_eq!(body, live.to_string());
        assert_eq!(hung_up.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert_eq!(served.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_bodiless_post_whose_connection_breaks_is_not_sent_again() {
        // The app may have acted on it before the connection broke.
        const BODILESS_POST: &str = "POST /x HTTP/1.1\r\nhost: app.example\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
        let (closing, hung_up) = hanging_up("127.0.0.1").await;
        let (live, served) = answering("127.0.0.2").await;
        let (status, body) = through_proxy(vec![closing, live], BODILESS_POST).await;
        assert_eq!(status, "HTTP/1.1 502 Bad Gateway");
        assert!(body.starts_with(&format!("upstream {closing}: ")), "{body}");
        assert_eq!(hung_up.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert_eq!(served.load(std::sync::atomic::Ordering::SeqCst), 0);
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        map
    }

    const ORIGIN: Origin<'static> = Origin {
        client_ip: IpAddr::V4(std::net::Ipv4Addr::new(203, 0, 113, 9)),
        scheme: "http",
        request_id: "0123456789ABCDEF",
    };

    #[test]
    fn an_app_cannot_set_the_platform_s_cookies() {
        let mut headers = HeaderMap::new();
        for cookie in [
            "session=1; Path=/",
            "__Host-svc_id=forged; Path=/; Secure",
            " __Host-svc_state=x",
            "__host-svc_id=other-case-is-another-name",
        ] {
            headers.append(http::header::SET_COOKIE, HeaderValue::from_static(cookie));
        }
        drop_reserved_cookies(&mut headers);
        let left: Vec<_> = headers
            .get_all(http::header::SET_COOKIE)
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect();
        assert_eq!(
            left,
            [
                "session=1; Path=/",
                "__host-svc_id=other-case-is-another-name"
            ]
        );
    }

    #[test]
    fn platform_headers_from_clients_never_pass() {
        let mut h = headers(&[
            ("X-Svc-User", "mallory"),
            ("x-svc-email", "m@example.test"),
            ("X-SVC-Anything", "1"),
            ("x-svcnot", "kept"),
            ("accept", "*/*"),
        ]);
        prepare_request_headers(&mut h, ORIGIN, None, None);
        assert!(h.keys().all(|k| !k.as_str().starts_with("x-svc-")), "{h:?}");
        assert_eq!(h["x-svcnot"], "kept");
        assert_eq!(h["accept"], "*/*");
    }

    #[test]
    fn forwarded_headers_are_the_edges_own() {
        let host = HeaderValue::from_static("web-alice.apps.test");
        let mut h = headers(&[
            ("host", "web-alice.apps.test"),
            ("x-forwarded-for", "1.2.3.4"),
            ("x-forwarded-proto", "https"),
            ("x-forwarded-host", "evil.test"),
            ("x-request-id", "forged"),
        ]);
        prepare_request_headers(&mut h, ORIGIN, Some(host), None);
        assert_eq!(h["x-forwarded-for"], "203.0.113.9");
        assert_eq!(h["x-request-id"], "0123456789ABCDEF");
        assert_eq!(h.get_all("x-request-id").iter().count(), 1);
        assert_eq!(h["x-forwarded-proto"], "http");
        assert_eq!(h["x-forwarded-host"], "web-alice.apps.test");
        assert_eq!(h["host"], "web-alice.apps.test");
        assert_eq!(h.get_all("x-forwarded-for").iter().count(), 1);
    }

    #[test]
    fn hop_by_hop_headers_go_and_an_upgrade_is_asked_again() {
        let mut h = headers(&[
            ("connection", "keep-alive, x-private"),
            ("x-private", "secret"),
            ("keep-alive", "timeout=5"),
            ("te", "trailers"),
            ("accept", "*/*"),
        ]);
        prepare_request_headers(&mut h, ORIGIN, None, None);
        for gone in ["connection", "x-private", "keep-alive", "te"] {
            assert!(!h.contains_key(gone), "{gone}");
        }
        let mut h = headers(&[("connection", "Upgrade"), ("upgrade", "websocket")]);
        let protocol = upgrade_protocol(&h);
        assert_eq!(protocol.as_ref().unwrap(), "websocket");
        prepare_request_headers(&mut h, ORIGIN, None, protocol.as_ref());
        assert_eq!(h["connection"], "upgrade");
        assert_eq!(h["upgrade"], "websocket");
        assert!(upgrade_protocol(&headers(&[("upgrade", "websocket")])).is_none());
    }
}
