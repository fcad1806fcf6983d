//! The one error type of the REST API. Every failure renders as the hosting API's envelope
//! `{"error": {"code", "message"}}`; internal details are logged, never sent.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use slipway_backends::object_store::Unavailable;
use slipway_crds::rules::{Denial, DenialKind};

/// An error a route answers with.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 400 `bad_request`.
    #[error("{0}")]
    BadRequest(String),
    /// 401 `auth_required`.
    #[error("this route needs Authorization: Bearer <token>")]
    AuthRequired,
    /// 401 `token_invalid`.
    #[error("the token is not valid or has expired")]
    TokenInvalid,
    /// 401 `auth_required` at the registry's token endpoint: no pull credential, or not one slipway made.
    #[error(
        "the registry token endpoint needs a pull credential slipway issued, as HTTP Basic auth"
    )]
    RegistryCredential,
    /// 401 `token_revoked`.
    #[error("the token has been revoked")]
    TokenRevoked,
    /// 403 `scope_denied`, naming the scope.
    #[error("this token lacks the {0} scope")]
    ScopeDenied(String),
    /// 403 `scope_denied`: the token is good for one path only, and this is not it.
    #[error("this token is good only for {0}")]
    TokenLimited(String),
    /// 403 `permission_denied`.
    #[error("{0}")]
    PermissionDenied(String),
    /// 403 `protected_action`, naming the action.
    #[error(
        "{0} is a protected action: agent credentials need agent access turned on by the app owner"
    )]
    ProtectedAction(String),
    /// 403 `plan_limit_exceeded`.
    #[error("{0}")]
    PlanLimit(String),
    /// 404 `not_found`, naming what was looked for.
    #[error("{0} not found")]
    NotFound(&'static str),
    /// 404 with a route-specific code (`snapshot_not_found`, ...) and a message.
    #[error("{1}")]
    Missing(&'static str, String),
    /// 405, in the envelope with `bad_request`.
    #[error("method not allowed on this route")]
    MethodNotAllowed,
    /// 409 `conflict`.
    #[error("{0}")]
    Conflict(String),
    /// 409 `domain_taken`.
    #[error("{0}")]
    DomainTaken(String),
    /// 400 `domain_limit_reached`.
    #[error("{0}")]
    DomainLimit(String),
    /// 400 with the code `invalid domain: <reason>`, as the hosting API names it.
    #[error("{0}")]
    InvalidDomain(slipway_crds::names::InvalidDomain),
    /// 429 `too_many_requests`: the token's request budget is spent; `Retry-After` says when the next one fits.
    #[error("this token sent more requests than its budget allows; retry in {} s", retry_after_secs(*.0))]
    TooManyRequests(std::time::Duration),
    /// 429 `too_many_requests` with its own message (a registration budget, an email window); `Retry-After` says
    /// when the next one fits.
    #[error("{}; retry in {} s", .0, retry_after_secs(*.1))]
    Throttled(String, std::time::Duration),
    /// 503 `service_unavailable`.
    #[error("{0}")]
    Unavailable(String),
    /// 409 `blob_not_ready`.
    #[error("{0}")]
    BlobNotReady(String),
    /// 503 `blob_unavailable`.
    #[error("{0}")]
    BlobUnavailable(String),
    /// 400 `invalid_confirmation`: the typed name is not the database's.
    #[error("{0}")]
    InvalidConfirmation(String),
    /// 503 `postgres_unavailable`: no data server is configured, or it could not answer (measure, reset).
    #[error("{0}")]
    PostgresUnavailable(String),
    /// 403 `prod_restore_blocked`: restoring prod needs `SVC_ALLOW_PROD_RESTORE=1` on the app.
    #[error("{0}")]
    ProdRestoreBlocked(String),
    /// 403 `download_disabled`: the platform keeps snapshot downloads off.
    #[error("{0}")]
    DownloadDisabled(String),
    /// 409 `channel_busy`: a deploy of the channel is queued or running.
    #[error("{0}")]
    ChannelBusy(String),
    /// 409 `no_aligned_blob_snapshot`: the checkpoint has no object-store leg.
    #[error("{0}")]
    NoAlignedBlobSnapshot(String),
    /// 410 `gone`: no challenge, or it expired.
    #[error("{0}")]
    Gone(String),
    /// 422 `validation_failed`: the body's fields are not the route's (unknown, missing, of the wrong type or
    /// size); each problem is listed in the envelope's `fields`.
    #[error("the request body does not have the fields this route takes: {}", describe(.0))]
    Validation(Vec<FieldProblem>),
    /// 500 `internal_error`; the cause is logged.
    #[error("internal error")]
    Internal(#[source] anyhow::Error),
}

impl ApiError {
    /// The HTTP status and the envelope's code.
    pub fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            ApiError::BadRequest(_) => (StatusCode::BAD_REQUEST, "bad_request"),
            ApiError::AuthRequired | ApiError::RegistryCredential => {
                (StatusCode::UNAUTHORIZED, "auth_required")
            }
            ApiError::TokenInvalid => (StatusCode::UNAUTHORIZED, "token_invalid"),
            ApiError::TokenRevoked => (StatusCode::UNAUTHORIZED, "token_revoked"),
            ApiError::ScopeDenied(_) | ApiError::TokenLimited(_) => {
                (StatusCode::FORBIDDEN, "scope_denied")
            }
            ApiError::PermissionDenied(_) => (StatusCode::FORBIDDEN, "permission_denied"),
            ApiError::ProtectedAction(_) => (StatusCode::FORBIDDEN, "protected_action"),
            ApiError::PlanLimit(_) => (StatusCode::FORBIDDEN, "plan_limit_exceeded"),
            ApiError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            ApiError::Missing(code, _) => (StatusCode::NOT_FOUND, code),
            ApiError::MethodNotAllowed => (StatusCode::METHOD_NOT_ALLOWED, "bad_request"),
            ApiError::Conflict(_) => (StatusCode::CONFLICT, "conflict"),
            ApiError::DomainTaken(_) => (StatusCode::CONFLICT, "domain_taken"),
            ApiError::DomainLimit(_) => (StatusCode::BAD_REQUEST, "domain_limit_reached"),
            ApiError::InvalidDomain(e) => (StatusCode::BAD_REQUEST, e.code()),
            ApiError::TooManyRequests(_) | ApiError::Throttled(..) => {
                (StatusCode::TOO_MANY_REQUESTS, "too_many_requests")
            }
            ApiError::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "service_unavailable"),
            ApiError::BlobNotReady(_) => (StatusCode::CONFLICT, "blob_not_ready"),
            ApiError::BlobUnavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "blob_unavailable"),
            ApiError::InvalidConfirmation(_) => (StatusCode::BAD_REQUEST, "invalid_confirmation"),
            ApiError::ProdRestoreBlocked(_) => (StatusCode::FORBIDDEN, "prod_restore_blocked"),
            ApiError::DownloadDisabled(_) => (StatusCode::FORBIDDEN, "download_disabled"),
            ApiError::ChannelBusy(_) => (StatusCode::CONFLICT, "channel_busy"),
            ApiError::NoAlignedBlobSnapshot(_) => {
                (StatusCode::CONFLICT, "no_aligned_blob_snapshot")
            }
            ApiError::PostgresUnavailable(_) => {
                (StatusCode::SERVICE_UNAVAILABLE, "postgres_unavailable")
            }
            ApiError::Gone(_) => (StatusCode::GONE, "gone"),
            ApiError::Validation(_) => (StatusCode::UNPROCESSABLE_ENTITY, "validation_failed"),
            ApiError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal_error"),
        }
    }

    /// A 400 from anything displayable.
    pub fn bad_request(message: impl std::fmt::Display) -> Self {
        ApiError::BadRequest(message.to_string())
    }
}

/// One field's problem in a 422 answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct FieldProblem {
    /// The body field.
    pub field: String,
    /// What is wrong with it: `unknown field`, `required`, `must be a string`, ...
    pub problem: String,
}

impl FieldProblem {
    /// A problem of `field`.
    pub fn new(field: impl Into<String>, problem: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            problem: problem.into(),
        }
    }
}

fn describe(problems: &[FieldProblem]) -> String {
    problems
        .iter()
        .map(|p| format!("{} ({})", p.field, p.problem))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whole seconds to wait, rounded up and at least one (the unit of `Retry-After`).
pub fn retry_after_secs(wait: std::time::Duration) -> u64 {
    (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1)
}

/// The error envelope.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorEnvelope {
    /// The error.
    pub error: ErrorBody,
}

/// Code and message of an error.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// Machine-readable code, e.g. `bad_request`, `not_found`, `scope_denied`.
    pub code: &'static str,
    /// What went wrong, for a person.
    pub message: String,
    /// With `validation_failed` (422) only: each field that is wrong, and how.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fields: Option<Vec<FieldProblem>>,
    /// The request's id, as its `x-request-id` header gives it: every log line of the request carries it, so an
    /// operator finds what went wrong from the id a client reports.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

/// What a request answers when every connection of the database pool stayed busy for the pool's whole acquire
/// timeout: the platform is overloaded, not broken, so 503 `service_unavailable` (retry later) and not a 500.
const BUSY: &str = "the platform is busy; try again shortly";

/// How long a client is asked to wait before it tries a request the busy platform refused again: the pool's
/// connections are held for milliseconds, so a second is enough for one to come free.
const BUSY_RETRY_AFTER_SECS: u64 = 1;

/// Whether `e` comes from waiting for a database connection in vain: the platform was busy, and the same request
/// may well succeed later.
pub fn pool_exhausted(e: &anyhow::Error) -> bool {
    e.chain()
        .any(|cause| matches!(cause.downcast_ref(), Some(sqlx::Error::PoolTimedOut)))
}

/// A failure that passes: the same request may well succeed later, so it answers 503 `service_unavailable` with a
/// `Retry-After` rather than 500.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transient {
    /// What the client is told.
    pub message: &'static str,
    /// When it may try again, in seconds.
    pub retry_after_secs: u64,
}

/// What a request answers when the object store that keeps the repositories was not reached or failed on its side.
const STORAGE_DOWN: Transient = Transient {
    message: "object storage is unavailable; try again shortly",
    retry_after_secs: 5,
};

/// Whether `e` is a failure that passes ([`Transient`]): every connection of the database pool stayed busy, or
/// object storage was not reached. Counted and logged as such.
pub fn transient(e: &anyhow::Error) -> Option<Transient> {
    if pool_exhausted(e) {
        slipway_store::db::count_pool_timeout();
        tracing::warn!(
            error = format!("{e:#}"),
            "request failed: the database pool is exhausted"
        );
        return Some(Transient {
            message: BUSY,
            retry_after_secs: BUSY_RETRY_AFTER_SECS,
        });
    }
    if e.chain().any(|cause| cause.is::<Unavailable>()) {
        tracing::warn!(
            error = format!("{e:#}"),
            "request failed: object storage is unavailable"
        );
        return Some(STORAGE_DOWN);
    }
    None
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let transient = match &self {
            ApiError::Internal(e) => {
                let transient = transient(e);
                if transient.is_none() {
                    tracing::error!(error = format!("{e:#}"), "request failed");
                }
                transient
            }
            _ => None,
        };
        let (status, code) = if transient.is_some() {
            (StatusCode::SERVICE_UNAVAILABLE, "service_unavailable")
        } else {
            self.status_and_code()
        };
        let body = ErrorEnvelope {
            error: ErrorBody {
                code,
                message: match transient {
                    Some(t) => t.message.to_owned(),
                    None => self.to_string(),
                },
                fields: match &self {
                    ApiError::Validation(problems) => Some(problems.clone()),
                    _ => None,
                },
                request_id: slipway_http::request_id::current(),
            },
        };
        let mut response = (status, Json(body)).into_response();
        let retry_after = match &self {
            ApiError::TooManyRequests(wait) | ApiError::Throttled(_, wait) => {
                Some(retry_after_secs(*wait))
            }
            _ => transient.map(|t| t.retry_after_secs),
        };
        if let Some(secs) = retry_after {
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from(secs),
            );
        }
        response
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(e: sqlx::Error) -> Self {
        ApiError::Internal(e.into())
    }
}

impl From<kube::Error> for ApiError {
    fn from(e: kube::Error) -> Self {
        ApiError::Internal(e.into())
    }
}

impl From<anyhow::Error> for ApiError {
    fn from(e: anyhow::Error) -> Self {
        ApiError::Internal(e)
    }
}

impl From<slipway_crds::names::InvalidName> for ApiError {
    fn from(e: slipway_crds::names::InvalidName) -> Self {
        ApiError::BadRequest(e.0.to_owned())
    }
}

impl From<slipway_crds::names::InvalidDomain> for ApiError {
    fn from(e: slipway_crds::names::InvalidDomain) -> Self {
        ApiError::InvalidDomain(e)
    }
}

impl From<Denial> for ApiError {
    fn from(d: Denial) -> Self {
        match d.kind {
            DenialKind::Invalid => ApiError::BadRequest(d.message),
            DenialKind::PlanLimit => ApiError::PlanLimit(d.message),
            DenialKind::Missing => ApiError::BadRequest(d.message),
            DenialKind::Taken => ApiError::DomainTaken(d.message),
            DenialKind::LimitReached => ApiError::DomainLimit(d.message),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_rounds_up_to_whole_seconds() {
        use std::time::Duration;
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1)), 1);
        assert_eq!(retry_after_secs(Duration::from_secs(1)), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1001)), 2);
    }

    /// The status and JSON body `error` answers with.
    async fn answer(error: ApiError) -> (StatusCode, serde_json::Value) {
        answer_of(error.into_response()).await
    }

    /// The status and JSON body of `response`.
    async fn answer_of(response: Response) -> (StatusCode, serde_json::Value) {
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), 1024)
            .await
            .unwrap();
        (status, serde_json::from_slice(&body).unwrap())
    }

    #[tokio::test]
    async fn a_request_that_waited_in_vain_for_a_database_connection_answers_503() {
        for error in [
            ApiError::from(sqlx::Error::PoolTimedOut),
            ApiError::Internal(
                anyhow::Error::from(sqlx::Error::PoolTimedOut).context("listing logs"),
            ),
        ] {
            let response = error.into_response();
            assert_eq!(
                response.headers().get(axum::http::header::RETRY_AFTER),
                Some(&axum::http::HeaderValue::from(BUSY_RETRY_AFTER_SECS)),
                "the client is told when to try again"
            );
            let (status, body) = answer_of(response).await;
            assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
            assert_eq!(
                body,
                serde_json::json!({"error": {"code": "service_unavailable", "message": BUSY}})
            );
        }
        let other = ApiError::from(sqlx::Error::PoolClosed).into_response();
        assert_eq!(other.status(), StatusCode::INTERNAL_SERVER_ERROR);
    }

    #[tokio::test]
    async fn a_request_that_found_object_storage_unreachable_answers_503_without_its_cause() {
        let error = anyhow::Error::from(Unavailable(
            "upload pack-1.pack: dispatch failure: http://10.0.0.9:7070".into(),
        ))
        .context("publishing a ref update");
        let response = ApiError::Internal(error).into_response();
        assert_eq!(
            response.headers().get(axum::http::header::RETRY_AFTER),
            Some(&axum::http::HeaderValue::from(
                STORAGE_DOWN.retry_after_secs
            ))
        );
        let (status, body) = answer_of(response).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            body,
            serde_json::json!({"error": {"code": "service_unavailable", "message": STORAGE_DOWN.message}})
        );
    }

    #[tokio::test]
    async fn internal_errors_do_not_leak_their_cause() {
        let (status, body) = answer(ApiError::Internal(anyhow::anyhow!("password=hunter2"))).await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(
            body,
            serde_json::json!({"error": {"code": "internal_error", "message": "internal error"}})
        );
    }
}
