//! End-user sign-in over HTTP ([`slipway_identity`] has the flow and the keys): `/svc-auth/*` on every channel host
//! and custom domain (`login`, `callback`, `logout`, `whoami`), and the auth host `{auth_url}` (`authorize`, the
//! upstream's `callback`, `jwks`, the discovery document). Nothing here gates a request: the app reads the cookie
//! and decides.
//!
//! Every cookie is `__Host-` (Secure, Path=/, no Domain), HttpOnly and SameSite=Lax, so it stays on the exact host
//! that set it and rides the top-level redirects of the flow. Errors answer the API's envelope.

use http::header::{
    ACCESS_CONTROL_ALLOW_ORIGIN, CACHE_CONTROL, CONTENT_TYPE, LOCATION, SET_COOKIE,
};
use http::{HeaderValue, Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use rand::RngExt as _;
use serde::{Deserialize, Serialize};

use super::metrics::{EdgeMetrics, SignInOutcome};
use super::server::Scheme;
use super::{EdgeBody, pages};
use slipway_identity::seal::Purpose;
use slipway_identity::upstream::Pending;
use slipway_identity::{
    FLOW_COOKIE, FLOW_LIFETIME, HANDOFF_LIFETIME, ID_COOKIE, Person, SESSION_LIFETIME,
    STATE_COOKIE, SignIn, same_host_path,
};

/// How long the JWKS and the discovery document may be cached.
const PUBLIC_CACHE: &str = "public, max-age=300";
/// Longest `state` a channel host hands the auth host (its own are 22 characters).
const MAX_STATE: usize = 64;

/// What the auth host's flow cookie holds while someone is at the upstream provider.
#[derive(Serialize, Deserialize)]
struct Flow {
    host: String,
    state: String,
    return_to: String,
    pending: Pending,
}

/// What the auth host hands the channel host: a person, for one host and one browser's sign-in.
#[derive(Serialize, Deserialize)]
struct Handoff {
    host: String,
    state: String,
    return_to: String,
    person: Person,
}

/// Answers `/svc-auth/*` on the channel host `host` (a routing table host: lowercase, no port).
pub async fn on_channel_host(
    sign_in: &SignIn,
    metrics: &EdgeMetrics,
    host: &str,
    req: &Request<Incoming>,
    scheme: Scheme,
) -> Response<EdgeBody> {
    let path = req.uri().path();
    let Some(route) = path.strip_prefix("/svc-auth/") else {
        return not_found();
    };
    if !matches!(route, "login" | "callback" | "logout" | "whoami") {
        return not_found();
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return method_not_allowed();
    }
    if route == "whoami" {
        return whoami(sign_in, host, req);
    }
    if scheme == Scheme::Http {
        return needs_https(&sign_in.origin_of(host), req);
    }
    let query = Query::of(req);
    match route {
        "login" => login(sign_in, host, &query),
        "callback" => {
            let res = channel_callback(sign_in, host, req, &query);
            // A bare request (no sign-in started in this browser) is not a refused sign-in.
            if res.status() == StatusCode::FOUND {
                metrics.sign_in(SignInOutcome::SignedIn);
            } else if cookie(req, STATE_COOKIE).is_some() {
                metrics.sign_in(SignInOutcome::Refused);
            }
            res
        }
        _ => logout(&query),
    }
}

/// Answers a request for the auth host.
pub async fn on_auth_host(
    sign_in: &SignIn,
    metrics: &EdgeMetrics,
    served: impl Fn(&str) -> Option<String>,
    req: &Request<Incoming>,
    scheme: Scheme,
) -> Response<EdgeBody> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return method_not_allowed();
    }
    let query = Query::of(req);
    let path = req.uri().path();
    if scheme == Scheme::Http && matches!(path, "/svc-auth/authorize" | "/svc-auth/callback") {
        return needs_https(&sign_in.issuer, req);
    }
    match path {
        "/svc-auth/jwks" => public_json(&sign_in.keys.jwks()),
        "/.well-known/openid-configuration" => public_json(&sign_in.discovery()),
        "/svc-auth/authorize" => authorize(sign_in, served, &query).await,
        "/svc-auth/callback" => {
            let (res, outcome) = auth_callback(sign_in, req, &query).await;
            if let Some(outcome) = outcome {
                metrics.sign_in(outcome);
            }
            res
        }
        _ => not_found(),
    }
}

/// `/svc-auth/login?return_to=`: a state cookie for this browser, then the auth host.
fn login(sign_in: &SignIn, host: &str, query: &Query) -> Response<EdgeBody> {
    let Some(return_to) = query.return_to() else {
        return bad_return_to();
    };
    if sign_in.upstream.is_none() {
        return unavailable();
    }
    let state = random_token();
    let authorize = format!(
        "{}/svc-auth/authorize?{}",
        sign_in.issuer,
        form_urlencoded::Serializer::new(String::new())
            .append_pair("host", host)
            .append_pair("state", &state)
            .append_pair("return_to", return_to)
            .finish()
    );
    redirect(
        &authorize,
        &[set_cookie(STATE_COOKIE, &state, FLOW_LIFETIME.as_secs())],
    )
}

/// `{auth_url}/svc-auth/authorize`: the flow sealed into the auth host's cookie, then the upstream provider.
async fn authorize(
    sign_in: &SignIn,
    served: impl Fn(&str) -> Option<String>,
    query: &Query,
) -> Response<EdgeBody> {
    // Exactly a host of the routing table, as it keys hosts: anything the table would read as that host after
    // dropping a port or brackets (`[a.example]@evil.example`) could send the browser elsewhere.
    let asked = query.get("host").unwrap_or_default();
    let Some(host) = served(asked).filter(|h| h == asked && !sign_in.is_auth_host(h)) else {
        return bad_request("host is not a site this platform serves");
    };
    let state = query.get("state").unwrap_or_default();
    if state.is_empty() || state.len() > MAX_STATE || !state.bytes().all(is_token_byte) {
        return bad_request("state is missing or malformed");
    }
    let Some(return_to) = query.return_to() else {
        return bad_return_to();
    };
    let Some(upstream) = &sign_in.upstream else {
        return unavailable();
    };
    let (url, pending) = match upstream.start().await {
        Ok(started) => started,
        Err(e) => {
            tracing::warn!(error = %format!("{e:#}"), "the identity provider cannot be reached");
            return unavailable();
        }
    };
    let flow = Flow {
        host,
        state: state.to_owned(),
        return_to: return_to.to_owned(),
        pending,
    };
    let sealed = sign_in.sealer.seal(Purpose::Flow, &flow, FLOW_LIFETIME);
    redirect(
        &url,
        &[set_cookie(FLOW_COOKIE, &sealed, FLOW_LIFETIME.as_secs())],
    )
}

/// `{auth_url}/svc-auth/callback` (the upstream's redirect): the person verified and handed to the channel host.
/// Also says how the step ended when it did not go on to the channel host.
async fn auth_callback(
    sign_in: &SignIn,
    req: &Request<Incoming>,
    query: &Query,
) -> (Response<EdgeBody>, Option<SignInOutcome>) {
    let refused = |message: &str| (bad_request(message), Some(SignInOutcome::Refused));
    let expired = "this sign-in has expired or was started in another browser; start again";
    let Some(sealed) = cookie(req, FLOW_COOKIE) else {
        // No sign-in was started in this browser: nothing to count.
        return (bad_request(expired), None);
    };
    let Some(flow) = sign_in.sealer.open::<Flow>(Purpose::Flow, &sealed) else {
        return refused(expired);
    };
    // The state first: only the provider's answer to this sign-in may end it, a refusal included.
    if query.get("state") != Some(flow.pending.csrf.as_str()) {
        return refused("the identity provider's answer does not belong to this sign-in");
    }
    if let Some(error) = query.get("error") {
        let message = format!("the identity provider did not sign you in: {error}");
        return (bad_request(&message), Some(SignInOutcome::ProviderRefused));
    }
    let Some(code) = query.get("code") else {
        return refused("the identity provider's answer has no code");
    };
    let Some(upstream) = &sign_in.upstream else {
        return (unavailable(), None);
    };
    let person = match upstream.finish(flow.pending, code).await {
        Ok(upstreamed) => upstreamed.person(&sign_in.subjects),
        Err(e) => {
            tracing::warn!(error = %format!("{e:#}"), "a sign-in failed at the identity provider");
            let res = pages::envelope(
                StatusCode::BAD_GATEWAY,
                "sign_in_failed",
                "the identity provider's sign-in could not be verified; start again",
            );
            return (res, Some(SignInOutcome::ProviderFailed));
        }
    };
    let handoff = Handoff {
        state: flow.state,
        return_to: flow.return_to,
        person,
        host: flow.host,
    };
    let code = sign_in
        .sealer
        .seal(Purpose::Handoff, &handoff, HANDOFF_LIFETIME);
    let back = format!(
        "{}/svc-auth/callback?{}",
        sign_in.origin_of(&handoff.host),
        form_urlencoded::Serializer::new(String::new())
            .append_pair("code", &code)
            .finish()
    );
    (redirect(&back, &[clear_cookie(FLOW_COOKIE)]), None)
}

/// `/svc-auth/callback?code=` on the channel host: the identity cookie, when the handoff is for this host and
/// this browser's sign-in.
fn channel_callback(
    sign_in: &SignIn,
    host: &str,
    req: &Request<Incoming>,
    query: &Query,
) -> Response<EdgeBody> {
    let handoff = query
        .get("code")
        .and_then(|code| sign_in.sealer.open::<Handoff>(Purpose::Handoff, code));
    let state = cookie(req, STATE_COOKIE);
    let Some(handoff) =
        handoff.filter(|h| h.host == host && Some(h.state.as_str()) == state.as_deref())
    else {
        return bad_request(
            "this sign-in has expired or was started in another browser; start again",
        );
    };
    let Some(return_to) = same_host_path(&handoff.return_to) else {
        return bad_return_to();
    };
    let token = sign_in.mint(host, handoff.person);
    redirect(
        return_to,
        &[
            set_cookie(ID_COOKIE, &token, SESSION_LIFETIME.as_secs()),
            clear_cookie(STATE_COOKIE),
        ],
    )
}

/// `/svc-auth/logout?return_to=`: the identity cookie cleared.
fn logout(query: &Query) -> Response<EdgeBody> {
    match query.return_to() {
        Some(return_to) => redirect(return_to, &[clear_cookie(ID_COOKIE)]),
        None => bad_return_to(),
    }
}

/// `/svc-auth/whoami`: the person the identity cookie names, when it passes the rules apps apply.
fn whoami(sign_in: &SignIn, host: &str, req: &Request<Incoming>) -> Response<EdgeBody> {
    let claims = cookie(req, ID_COOKIE).and_then(|token| sign_in.verify(&token, host));
    let body = match claims {
        Some(claims) => serde_json::json!({
            "logged_in": true,
            "email": claims.person.email,
            "name": claims.person.name,
            "sub": claims.person.sub,
        }),
        None => serde_json::json!({
            "logged_in": false,
            "login_url": format!("{}/svc-auth/login?return_to=%2F", sign_in.origin_of(host)),
        }),
    };
    json(StatusCode::OK, &body, "no-store")
}

/// A request's query parameters.
struct Query(Vec<(String, String)>);

impl Query {
    fn of(req: &Request<Incoming>) -> Self {
        let query = req.uri().query().unwrap_or_default();
        Self(
            form_urlencoded::parse(query.as_bytes())
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        )
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// `return_to` when it stays on the host; `/` when absent.
    fn return_to(&self) -> Option<&str> {
        match self.get("return_to") {
            None => Some("/"),
            Some(r) => same_host_path(r),
        }
    }
}

/// The value of the request's cookie `name` ([`slipway_http::cookies`]).
fn cookie(req: &Request<Incoming>, name: &str) -> Option<String> {
    slipway_http::cookies::read(req.headers(), name)
}

/// A `__Host-` cookie: Secure, Path=/, no Domain, HttpOnly, SameSite=Lax.
fn set_cookie(name: &str, value: &str, max_age: u64) -> String {
    format!("{name}={value}; Path=/; Secure; HttpOnly; SameSite=Lax; Max-Age={max_age}")
}

fn clear_cookie(name: &str) -> String {
    set_cookie(name, "", 0)
}

fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-' || b == b'_'
}

/// 128 random bits, base64url.
fn random_token() -> String {
    use base64::Engine as _;
    let bytes: [u8; 16] = rand::rng().random();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn redirect(location: &str, cookies: &[String]) -> Response<EdgeBody> {
    let mut res = Response::new(super::empty());
    *res.status_mut() = StatusCode::FOUND;
    let headers = res.headers_mut();
    match HeaderValue::try_from(location) {
        Ok(location) => headers.insert(LOCATION, location),
        Err(_) => return bad_request("the address to return to cannot be sent"),
    };
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    for cookie in cookies {
        match HeaderValue::try_from(cookie.as_str()) {
            Ok(value) => headers.append(SET_COOKIE, value),
            Err(e) => {
                tracing::error!(error = %e, "a sign-in cookie cannot be sent");
                return pages::envelope(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    "the sign-in cookie cannot be sent",
                );
            }
        };
    }
    res
}

fn json(status: StatusCode, body: &impl Serialize, cache: &'static str) -> Response<EdgeBody> {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    let mut res = Response::new(super::full(bytes.into()));
    *res.status_mut() = status;
    let headers = res.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static(cache));
    res
}

/// The JWKS and the discovery document: cacheable, and readable by any origin (browser libraries fetch them).
fn public_json(body: &impl Serialize) -> Response<EdgeBody> {
    let mut res = json(StatusCode::OK, body, PUBLIC_CACHE);
    res.headers_mut()
        .insert(ACCESS_CONTROL_ALLOW_ORIGIN, HeaderValue::from_static("*"));
    res
}

/// Sign-in over plain HTTP: its cookies are Secure, so a browser would drop them.
fn needs_https(origin: &str, req: &Request<Incoming>) -> Response<EdgeBody> {
    bad_request(&format!(
        "sign-in needs HTTPS: use {origin}{}",
        req.uri().path_and_query().map_or("", |p| p.as_str())
    ))
}

fn bad_request(message: &str) -> Response<EdgeBody> {
    pages::envelope(StatusCode::BAD_REQUEST, "bad_request", message)
}

fn bad_return_to() -> Response<EdgeBody> {
    bad_request("return_to must be a path on this host, starting with a single /")
}

fn not_found() -> Response<EdgeBody> {
    pages::envelope(StatusCode::NOT_FOUND, "not_found", "route not found")
}

fn method_not_allowed() -> Response<EdgeBody> {
    pages::envelope(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "sign-in routes answer GET",
    )
}

fn unavailable() -> Response<EdgeBody> {
    pages::envelope(
        StatusCode::SERVICE_UNAVAILABLE,
        "sign_in_unavailable",
        "sign-in is not available right now",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_are_host_only_secure_http_only_and_lax() {
        let c = set_cookie(ID_COOKIE, "v", 10);
        assert_eq!(
            c,
            "__Host-svc_id=v; Path=/; Secure; HttpOnly; SameSite=Lax; Max-Age=10"
        );
        assert!(!c.contains("Domain"));
        assert!(clear_cookie(ID_COOKIE).ends_with("Max-Age=0"));
    }

    #[test]
    fn random_tokens_are_url_safe_and_distinct() {
        let (a, b) = (random_token(), random_token());
        assert_ne!(a, b);
        assert_eq!(a.len(), 22);
        assert!(a.bytes().all(is_token_byte));
    }
}
