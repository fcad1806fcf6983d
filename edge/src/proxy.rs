//! Proxying a request to a dynamic channel's endpoint: path and query exactly as sent, the client's `Host`, the
//! platform's `X-Forwarded-*` headers in place of any the client sent, every inbound `X-Svc-*` header dropped (the
//! platform alone speaks those), hop-by-hop headers removed, an app's `Set-Cookie` of the platform's reserved
//! cookie names (`__Host-svc_*`, end-user sign-in's) dropped, and upgrades (WebSocket) joined end to end.
//! Connections to endpoints are kept alive in a pool; connecting and waiting for the response head have
//! timeouts, a streaming body has none.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use http::header::{CONNECTION, HOST, UPGRADE};
use http::{HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode, Uri};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};

use super::EdgeBody;

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
    /// Connecting failed or the connection broke before the response head.
    #[error("upstream {0}: {1}")]
    Upstream(SocketAddr, String),
    /// No response head within the timeout.
    #[error("upstream {0} did not answer within {1:?}")]
    Timeout(SocketAddr, Duration),
}

/// The pooled HTTP/1.1 client to endpoints.
pub struct Proxy {
    client: Client<HttpConnector, Incoming>,
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

    /// Sends `req` to `upstream` and returns its response (a `101` is joined to the client's connection).
    pub async fn forward(
        &self,
        mut req: Request<Incoming>,
        upstream: SocketAddr,
        origin: Origin<'_>,
    ) -> Result<Response<EdgeBody>, ProxyError> {
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
        parts.uri = Uri::builder()
            .scheme("http")
            .authority(upstream.to_string())
            .path_and_query(path)
            .build()
            .map_err(|e| ProxyError::Upstream(upstream, e.to_string()))?;
        parts.version = http::Version::HTTP_11;
        prepare_request_headers(&mut parts.headers, origin, host, upgrade.as_ref());
        let sent = self.client.request(Request::from_parts(parts, body));
        let mut res = match tokio::time::timeout(self.response_timeout, sent).await {
            Ok(Ok(res)) => res,
            Ok(Err(e)) => return Err(ProxyError::Upstream(upstream, error_chain(&e))),
            Err(_) => return Err(ProxyError::Timeout(upstream, self.response_timeout)),
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
            return Ok(Response::from_parts(parts, super::empty()));
        }
        remove_hop_by_hop(res.headers_mut());
        drop_reserved_cookies(res.headers_mut());
        Ok(res.map(super::upstream))
    }
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
