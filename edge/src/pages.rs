//! What the edge itself answers: small HTML pages for hosts it does not serve and for channels that cannot answer
//! (502 for a channel that passed readiness on the ready file, 503 without a ready endpoint, 504 on an upstream
//! timeout), and the API's JSON error envelope for the platform routes on every channel host (`/svc-auth/*`).

use http::header::{CACHE_CONTROL, CONTENT_TYPE};
use http::{Response, StatusCode};

use super::EdgeBody;

/// A small HTML page with `status`, a title and one sentence. Never cached: the next deploy may change the answer.
pub fn page(status: StatusCode, title: &str, sentence: &str) -> Response<EdgeBody> {
    let html = format!(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>{code} {title}</title></head>\
         <body><h1>{code} {title}</h1><p>{sentence}</p></body></html>\n",
        code = status.as_u16()
    );
    with_body(status, "text/html; charset=utf-8", html)
}

/// An error in the hosting API's envelope, `{"error": {"code", "message"}}`.
pub fn envelope(status: StatusCode, code: &str, message: &str) -> Response<EdgeBody> {
    let body = serde_json::json!({"error": {"code": code, "message": message}}).to_string();
    with_body(status, "application/json", body)
}

fn with_body(status: StatusCode, content_type: &'static str, body: String) -> Response<EdgeBody> {
    let mut res = Response::new(super::full(body.into()));
    *res.status_mut() = status;
    let headers = res.headers_mut();
    headers.insert(CONTENT_TYPE, http::HeaderValue::from_static(content_type));
    headers.insert(CACHE_CONTROL, http::HeaderValue::from_static("no-store"));
    res
}

/// A request for a host no channel has.
pub fn unknown_host() -> Response<EdgeBody> {
    page(
        StatusCode::NOT_FOUND,
        "Not found",
        "No site is served at this address.",
    )
}

/// `/svc-auth/*` on a channel host, until end-user sign-in is served there.
pub fn svc_auth() -> Response<EdgeBody> {
    envelope(
        StatusCode::NOT_FOUND,
        "not_found",
        "end-user sign-in is not available on this host yet",
    )
}

/// A static channel that has not been deployed.
pub fn not_deployed() -> Response<EdgeBody> {
    page(
        StatusCode::NOT_FOUND,
        "Not found",
        "Nothing has been deployed to this channel yet.",
    )
}

/// A channel whose process passed readiness by creating the ready file: it serves no HTTP.
pub fn ready_file() -> Response<EdgeBody> {
    page(
        StatusCode::BAD_GATEWAY,
        "Bad gateway",
        "This channel runs a process that does not answer HTTP.",
    )
}

/// The upstream refused the connection or broke off.
pub fn bad_gateway() -> Response<EdgeBody> {
    page(
        StatusCode::BAD_GATEWAY,
        "Bad gateway",
        "The channel's process did not answer.",
    )
}

/// The upstream took too long to answer.
pub fn gateway_timeout() -> Response<EdgeBody> {
    page(
        StatusCode::GATEWAY_TIMEOUT,
        "Gateway timeout",
        "The channel's process did not answer in time.",
    )
}

/// No ready endpoint (a deploy starting, a crashed process), or the files of a static deploy cannot be had now.
pub fn unavailable() -> Response<EdgeBody> {
    page(
        StatusCode::SERVICE_UNAVAILABLE,
        "Service unavailable",
        "This channel cannot answer right now; retry in a moment.",
    )
}

/// A response that could not be built (never expected).
pub fn internal_error() -> Response<EdgeBody> {
    let mut res = Response::new(super::full(bytes::Bytes::from_static(b"internal error\n")));
    *res.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
    res
}
