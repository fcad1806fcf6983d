//! How a tool reaches the platform: an in-process request to the REST router, carrying the MCP caller's own
//! `Authorization` header. Nothing here decides who may do what; the route does, exactly as for an HTTP client.

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderValue, Method, Request, StatusCode, header};
use bytes::Bytes;
use percent_encoding::{AsciiSet, CONTROLS, utf8_percent_encode};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tower::ServiceExt;

/// Largest answer a tool reads from a route (a deploy log window is at most 256 KiB; a file at most this).
const MAX_ANSWER_BYTES: usize = 8 * 1024 * 1024;

/// Characters escaped in one path segment: everything but unreserved characters (RFC 3986).
const SEGMENT: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'/')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'`')
    .add(b'{')
    .add(b'}')
    .add(b'\\')
    .add(b'^')
    .add(b'|');

/// One path segment, escaped (an env key, a domain, a user-given name).
pub fn segment(value: &str) -> String {
    utf8_percent_encode(value, SEGMENT).to_string()
}

/// `path?k=v&...` with the pairs whose value is present, form-encoded.
pub fn with_query(path: &str, pairs: &[(&str, Option<String>)]) -> String {
    let mut query = form_urlencoded::Serializer::new(String::new());
    let mut any = false;
    for (key, value) in pairs {
        if let Some(value) = value {
            query.append_pair(key, value);
            any = true;
        }
    }
    if any {
        format!("{path}?{}", query.finish())
    } else {
        path.to_owned()
    }
}

/// A refusal or failure a tool reports to its caller: the route's status and error envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// HTTP status the route answered.
    pub status: u16,
    /// The envelope's `code`.
    pub code: String,
    /// The envelope's `message`.
    pub message: String,
}

impl Failure {
    /// A refusal decided by the tool itself, before any route was called (a name that resolves to nothing).
    pub fn new(status: StatusCode, code: &str, message: impl Into<String>) -> Self {
        Failure {
            status: status.as_u16(),
            code: code.to_owned(),
            message: message.into(),
        }
    }

    /// 404 `not_found`, worded like the routes' own.
    pub fn not_found(what: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("{what} not found"),
        )
    }

    /// 400 `bad_request`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    /// What an error of the API's own answers (status, code and message, as its envelope would say them).
    pub fn of_error(error: &slipway_core::error::ApiError) -> Self {
        let (status, code) = error.status_and_code();
        if let slipway_core::error::ApiError::Internal(e) = error {
            tracing::error!(error = format!("{e:#}"), "request failed");
        }
        Self::new(status, code, error.to_string())
    }

    fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal_error", message)
    }

    /// What a non-2xx answer says, from its envelope when it has one.
    fn of_answer(status: StatusCode, body: &[u8]) -> Self {
        let envelope: Option<Value> = serde_json::from_slice(body).ok();
        let error = envelope.as_ref().and_then(|v| v.get("error"));
        let text = |key: &str| {
            error
                .and_then(|e| e.get(key))
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        Failure {
            status: status.as_u16(),
            code: text("code").unwrap_or_else(|| "http_error".to_owned()),
            message: text("message").unwrap_or_else(|| {
                status
                    .canonical_reason()
                    .unwrap_or("request failed")
                    .to_owned()
            }),
        }
    }
}

/// A route's successful answer.
#[derive(Debug)]
pub struct Answer {
    /// Its status (2xx).
    pub status: StatusCode,
    /// Its body.
    pub body: Bytes,
}

impl Answer {
    /// The body as JSON; `null` for an empty body (204).
    pub fn json(&self) -> Result<Value, Failure> {
        if self.body.is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_slice(&self.body)
            .map_err(|e| Failure::internal(format!("the route answered invalid JSON: {e}")))
    }

    /// The body as the route's own response type (its view in this crate).
    pub fn parsed<T: DeserializeOwned>(&self) -> Result<T, Failure> {
        serde_json::from_slice(&self.body)
            .map_err(|e| Failure::internal(format!("the route answered an unexpected shape: {e}")))
    }
}

/// A response's whole body, up to [`MAX_ANSWER_BYTES`].
async fn read(response: axum::response::Response) -> Result<Bytes, Failure> {
    axum::body::to_bytes(response.into_body(), MAX_ANSWER_BYTES)
        .await
        .map_err(|e| Failure::internal(format!("cannot read the route's answer: {e}")))
}

/// The REST API as one caller sees it.
#[derive(Clone)]
pub struct Rest {
    router: Router,
    authorization: Option<HeaderValue>,
}

impl Rest {
    /// Calls into `router` as the holder of `authorization` (the MCP request's header, passed on unchanged).
    pub fn new(router: Router, authorization: Option<HeaderValue>) -> Self {
        Rest {
            router,
            authorization,
        }
    }

    /// Sends one request; a non-2xx answer is a [`Failure`] carrying the route's envelope.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Answer, Failure> {
        let response = self.answered(method, path, body).await?;
        let status = response.status();
        Ok(Answer {
            status,
            body: read(response).await?,
        })
    }

    /// `GET path` answered with the route's own response, its body streamed and never held here (a download of
    /// any size); a non-2xx answer is a [`Failure`], as [`Rest::send`] gives.
    pub async fn stream(&self, path: &str) -> Result<axum::response::Response, Failure> {
        self.answered(Method::GET, path, None).await
    }

    /// The route's 2xx response, else its [`Failure`].
    async fn answered(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<axum::response::Response, Failure> {
        let response = self.call(method, path, body).await?;
        let status = response.status();
        if status.is_success() {
            Ok(response)
        } else {
            Err(Failure::of_answer(status, &read(response).await?))
        }
    }

    /// One request through the router, as this caller.
    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<axum::response::Response, Failure> {
        let mut request = Request::builder().method(method).uri(path);
        if let Some(authorization) = &self.authorization {
            request = request.header(header::AUTHORIZATION, authorization.clone());
        }
        let body = match body {
            Some(json) => {
                request = request.header(header::CONTENT_TYPE, "application/json");
                Body::from(serde_json::to_vec(json).map_err(|e| Failure::internal(e.to_string()))?)
            }
            None => Body::empty(),
        };
        let mut request = request
            .body(body)
            .map_err(|e| Failure::bad_request(format!("cannot form the request: {e}")))?;
        request
            .extensions_mut()
            .insert(slipway_core::caller::ViaMcp);
        Ok(self
            .router
            .clone()
            .oneshot(request)
            .await
            .unwrap_or_else(|never| match never {}))
    }

    /// `GET path` as JSON.
    pub async fn get(&self, path: &str) -> Result<Value, Failure> {
        self.send(Method::GET, path, None).await?.json()
    }

    /// `GET path` as the route's own response type.
    pub async fn read<T: DeserializeOwned>(&self, path: &str) -> Result<T, Failure> {
        self.send(Method::GET, path, None).await?.parsed()
    }

    /// `method path` with a JSON body, answered with JSON (`null` for 204).
    pub async fn write(&self, method: Method, path: &str, body: &Value) -> Result<Value, Failure> {
        self.send(method, path, Some(body)).await?.json()
    }

    /// `method path` with a JSON body, answered with the route's own response type.
    pub async fn write_as<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: &Value,
    ) -> Result<T, Failure> {
        self.send(method, path, Some(body)).await?.parsed()
    }

    /// `DELETE path`, answered with JSON (`null` for 204).
    pub async fn delete(&self, path: &str) -> Result<Value, Failure> {
        self.send(Method::DELETE, path, None).await?.json()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_segment_cannot_leave_its_place_in_the_path() {
        assert_eq!(segment("a/../b?x#y"), "a%2F..%2Fb%3Fx%23y");
        assert_eq!(segment("DATABASE_URL"), "DATABASE_URL");
        assert_eq!(segment("www.example.com"), "www.example.com");
    }

    #[test]
    fn absent_query_values_are_left_out() {
        assert_eq!(with_query("/p", &[("a", None)]), "/p");
        assert_eq!(
            with_query(
                "/p",
                &[
                    ("a", Some("x y&z".into())),
                    ("b", None),
                    ("c", Some("1".into()))
                ]
            ),
            "/p?a=x+y%26z&c=1"
        );
    }

    #[test]
    fn a_refusal_keeps_the_routes_envelope() {
        let body = br#"{"error":{"code":"scope_denied","message":"token lacks scope repo:*"}}"#;
        let failure = Failure::of_answer(StatusCode::FORBIDDEN, body);
        assert_eq!(failure.status, 403);
        assert_eq!(failure.code, "scope_denied");
        assert_eq!(failure.message, "token lacks scope repo:*");
        let bare = Failure::of_answer(StatusCode::BAD_GATEWAY, b"oops");
        assert_eq!(bare.code, "http_error");
        assert_eq!(bare.message, "Bad Gateway");
    }
}
