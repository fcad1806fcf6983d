//! Extractors whose rejections speak the API's envelope instead of the framework's plain text: a malformed body,
//! a wrong content type, a field of the wrong type or an oversized body is 400 `bad_request`; a path id that is
//! not a UUID names nothing that exists, so it is 404 `not_found`. A number with a zero fraction is the integer it
//! equals, as JSON and the OpenAPI document's schemas read it.

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use slipway_core::error::ApiError;

/// A JSON body.
#[derive(Debug, Clone, Copy, Default)]
pub struct Json<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for Json<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match axum::Json::<serde_json::Value>::from_request(req, state).await {
            Ok(axum::Json(value)) => typed(value).map(Json),
            Err(rejection) => Err(json_rejection(rejection)),
        }
    }
}

/// `value` as a `T`, its integral numbers read as integers first.
fn typed<T: DeserializeOwned>(mut value: serde_json::Value) -> Result<T, ApiError> {
    integral_as_integers(&mut value);
    // The path names the field at fault (`changes.x: invalid type...`), as the framework's own extractor does.
    serde_path_to_error::deserialize(value).map_err(|e| {
        ApiError::bad_request(format!(
            "Failed to deserialize the JSON body into the target type: {e}"
        ))
    })
}

/// Numbers written with a zero fraction (`1.0`, `-1e0`) made integers. JSON does not tell `1.0` from `1`, and the
/// OpenAPI document's `integer` (JSON Schema's) allows either, so a client that writes the one the document allows
/// is not refused for it; a float field reads an integer as well.
fn integral_as_integers(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Number(n) if !n.is_i64() && !n.is_u64() => {
            if let Some(f) = n.as_f64()
                && f.fract() == 0.0
                && f >= i64::MIN as f64
                && f < i64::MAX as f64
            {
                *n = serde_json::Number::from(f as i64);
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(integral_as_integers),
        serde_json::Value::Object(fields) => fields.values_mut().for_each(integral_as_integers),
        _ => {}
    }
}

impl<T: serde::Serialize> axum::response::IntoResponse for Json<T> {
    fn into_response(self) -> axum::response::Response {
        axum::Json(self.0).into_response()
    }
}

/// An optional JSON body: an empty body is `None`, anything else must be valid JSON of `T`.
#[derive(Debug, Clone, Default)]
pub struct OptionalJson<T>(pub Option<T>);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for OptionalJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = axum::body::Bytes::from_request(req, state)
            .await
            .map_err(|e| ApiError::bad_request(e.body_text()))?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(OptionalJson(None));
        }
        let value: serde_json::Value = serde_json::from_slice(&bytes)
            .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))?;
        // `null` is the JSON for "nothing", as an empty body is.
        if value.is_null() {
            return Ok(OptionalJson(None));
        }
        typed(value).map(|v| OptionalJson(Some(v)))
    }
}

fn json_rejection(rejection: JsonRejection) -> ApiError {
    match rejection {
        JsonRejection::MissingJsonContentType(_) => {
            ApiError::bad_request("the body must be JSON, sent with Content-Type: application/json")
        }
        JsonRejection::BytesRejection(e) => {
            ApiError::bad_request(format!("could not read the body: {}", e.body_text()))
        }
        other => ApiError::bad_request(other.body_text()),
    }
}

/// Query parameters.
#[derive(Debug, Clone, Copy, Default)]
pub struct Query<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for Query<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|q| Query(q.0))
            .map_err(|e: QueryRejection| ApiError::bad_request(e.body_text()))
    }
}

/// Path parameters; ids that do not parse answer 404, as an id that does not exist would.
#[derive(Debug, Clone, Copy, Default)]
pub struct Path<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for Path<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|p| Path(p.0))
            .map_err(|_| ApiError::NotFound("resource"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(Debug, serde::Deserialize, PartialEq)]
    struct Vote {
        value: i64,
        weight: Option<f64>,
    }

    #[test]
    fn a_number_with_a_zero_fraction_is_the_integer_it_equals() {
        let vote: Vote =
            typed(json!({"value": -1.0, "weight": 2})).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            vote,
            Vote {
                value: -1,
                weight: Some(2.0)
            }
        );
        let nested = {
            let mut v = json!({"a": [1.0, 2.5, {"b": 3e0}]});
            integral_as_integers(&mut v);
            v
        };
        assert_eq!(nested, json!({"a": [1, 2.5, {"b": 3}]}));
        assert!(
            typed::<Vote>(json!({"value": 1.5})).is_err(),
            "a fraction stays a float"
        );
        let refusal = typed::<Vote>(json!({"value": "one"})).unwrap_err();
        assert!(
            refusal.to_string().contains("value:"),
            "the refusal names the field: {refusal}"
        );
    }
}
