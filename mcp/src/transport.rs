//! What the MCP endpoint checks of a request around the bearer check ([`super::routes`]) and before the transport
//! (`rmcp`) reads it: the browser origin first, then the JSON-RPC framing of the body. A refusal is a JSON-RPC
//! error (a client SDK reads its code and message, and the session goes on) where the transport would answer in
//! plain text: a body over the limit, a body that is not JSON (-32700) or not a JSON-RPC message (-32600), a
//! browser page of another origin (403).

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use rmcp::model::{ClientJsonRpcMessage, ErrorCode, ErrorData, RequestId};
use serde_json::json;

use slipway_core::state::AppState;

/// Largest request body: a changeset as large as the REST changeset route takes, in its JSON-RPC envelope.
pub const BODY_LIMIT: usize = slipway_rest::repo::CHANGESET_BODY_LIMIT + ENVELOPE_BYTES;

/// Room for the JSON-RPC envelope and the tool's other arguments around a changeset.
const ENVELOPE_BYTES: usize = 64 * 1024;

/// 403 unless a request's `Origin`, when it has one, is the platform's own (its public URL, its console, or
/// loopback): the streamable HTTP transport's rule against DNS rebinding. Agents send no `Origin`.
pub async fn require_own_origin(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let foreign = request
        .headers()
        .get(header::ORIGIN)
        .map(|origin| String::from_utf8_lossy(origin.as_bytes()).into_owned())
        .filter(|origin| !state.public_urls().owns(origin));
    match foreign {
        None => next.run(request).await,
        Some(origin) => rpc_error(
            StatusCode::FORBIDDEN,
            None,
            ErrorCode::INVALID_REQUEST,
            format!("the Origin {origin} is not one of this API's origins"),
        ),
    }
}

/// A POST's body read up to [`BODY_LIMIT`] and passed on when it is one JSON-RPC message; otherwise the JSON-RPC
/// error for it.
pub async fn require_jsonrpc(request: Request, next: Next) -> Response {
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let bytes = match read_body(body).await {
        Ok(bytes) => bytes,
        Err(refusal) => return refusal,
    };
    if let Err(e) = serde_json::from_slice::<ClientJsonRpcMessage>(&bytes) {
        return match serde_json::from_slice::<serde_json::Value>(&bytes) {
            Err(_) => rpc_error(
                StatusCode::BAD_REQUEST,
                None,
                ErrorCode::PARSE_ERROR,
                format!("the request body is not JSON: {e}"),
            ),
            Ok(value) => rpc_error(
                StatusCode::BAD_REQUEST,
                serde_json::from_value(value["id"].clone()).ok(),
                ErrorCode::INVALID_REQUEST,
                format!("the request body is not a JSON-RPC 2.0 message of MCP: {e}"),
            ),
        };
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// The body, when it is at most [`BODY_LIMIT`] bytes.
async fn read_body(body: Body) -> Result<Bytes, Response> {
    match Limited::new(body, BODY_LIMIT).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => Err(rpc_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            None,
            ErrorCode::INVALID_REQUEST,
            format!("the request is over {BODY_LIMIT} bytes, the most this endpoint reads"),
        )),
        Err(e) => Err(rpc_error(
            StatusCode::BAD_REQUEST,
            None,
            ErrorCode::INVALID_REQUEST,
            format!("the request body could not be read: {e}"),
        )),
    }
}

/// A JSON-RPC error answer with HTTP `status`; `id` is null when the request's is unknown (JSON-RPC 2.0 requires
/// the member, and client SDKs read an error without it as no answer at all).
fn rpc_error(
    status: StatusCode,
    id: Option<RequestId>,
    code: ErrorCode,
    message: String,
) -> Response {
    let error = json!({"jsonrpc": "2.0", "id": id, "error": ErrorData::new(code, message, None)});
    (status, axum::Json(error)).into_response()
}
