//! The gateway's Prometheus metrics, on its admin port's `/metrics`: requests by S3 operation and status, their
//! durations, and the bytes they carried each way.
//!
//! s3s resolves a request's operation inside its service. Its access check ([`NamesOperations`]) is the one hook
//! that sees the name, so it writes it into a slot the [front](super::front) put in the request's extensions, and
//! the front counts the answer under it. Requests the plain-HTTP path forwards skip that check, and are named from
//! their method ([`forwarded_operation`]); a request refused before its operation was known (a bad signature, an
//! unknown key) counts as `unresolved`. Operations and statuses are finite sets, and no label names a bucket or a
//! key, so the series stay bounded whatever the tenants send.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use http::{HeaderMap, Method, StatusCode, Uri};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};
use s3s::access::{S3Access, S3AccessContext};
use s3s::{S3Result, s3_error};

/// Where the access check writes the operation a request resolved to.
#[derive(Debug, Clone, Default)]
pub struct OperationSlot(Arc<OnceLock<String>>);

impl OperationSlot {
    /// The operation written, if any.
    pub fn get(&self) -> Option<&str> {
        self.0.get().map(String::as_str)
    }
}

/// s3s's access check (a signature is required, as s3s's own default) that also names the request's operation in
/// its [`OperationSlot`].
pub struct NamesOperations;

#[async_trait::async_trait]
impl S3Access for NamesOperations {
    async fn check(&self, cx: &mut S3AccessContext<'_>) -> S3Result<()> {
        let operation = cx.s3_op().name().to_owned();
        if let Some(slot) = cx.extensions_mut().get::<OperationSlot>() {
            let _ = slot.0.set(operation);
        }
        match cx.credentials() {
            Some(_) => Ok(()),
            None => Err(s3_error!(AccessDenied, "Signature is required")),
        }
    }
}

/// The operation of a request the plain-HTTP path forwards (it does not pass the access check).
pub fn forwarded_operation(
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
) -> Option<&'static str> {
    if !super::passthrough::forwards(method, uri, headers) {
        return None;
    }
    let part = uri
        .query()
        .is_some_and(|q| q.split('&').any(|pair| pair.starts_with("partNumber=")));
    Some(match *method {
        Method::GET => "GetObject",
        Method::HEAD => "HeadObject",
        Method::DELETE => "DeleteObject",
        Method::PUT if part => "UploadPart",
        _ => "PutObject",
    })
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    operation: String,
    status: u16,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OperationLabels {
    operation: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BytesLabels {
    operation: String,
    direction: &'static str,
}

/// The gateway's counts; clones share them.
#[derive(Debug, Clone)]
pub struct GatewayMetrics {
    requests: Family<RequestLabels, Counter>,
    duration: Family<OperationLabels, Histogram>,
    bytes: Family<BytesLabels, Counter>,
}

impl Default for GatewayMetrics {
    fn default() -> Self {
        Self {
            requests: Family::default(),
            // 1 ms to about 33 s: a small read to a large part's upload.
            duration: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.001, 2.0, 16))
            }),
            bytes: Family::default(),
        }
    }
}

/// What the front knows of one answered request.
pub struct Answered<'a> {
    /// The operation (`unresolved` when none was known).
    pub operation: &'a str,
    /// The answer's status.
    pub status: StatusCode,
    /// Time to the answer's head.
    pub took: Duration,
    /// The request body's declared length, if any.
    pub bytes_in: Option<u64>,
    /// The answer body's declared length, if any.
    pub bytes_out: Option<u64>,
}

impl GatewayMetrics {
    /// Registers the families (clones share their values) in `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "slipway_s3_requests",
            "S3 requests answered, by operation and HTTP status",
            self.requests.clone(),
        );
        registry.register_with_unit(
            "slipway_s3_request_duration",
            "Time from an S3 request to its answer's head, by operation",
            Unit::Seconds,
            self.duration.clone(),
        );
        registry.register_with_unit(
            "slipway_s3",
            "Body bytes of S3 requests (in) and answers (out) of declared length, by operation",
            Unit::Bytes,
            self.bytes.clone(),
        );
    }

    /// Counts one answered request.
    pub fn observe(&self, answered: &Answered<'_>) {
        let operation = answered.operation.to_owned();
        self.requests
            .get_or_create(&RequestLabels {
                operation: operation.clone(),
                status: answered.status.as_u16(),
            })
            .inc();
        self.duration
            .get_or_create(&OperationLabels {
                operation: operation.clone(),
            })
            .observe(answered.took.as_secs_f64());
        for (direction, bytes) in [("in", answered.bytes_in), ("out", answered.bytes_out)] {
            if let Some(bytes) = bytes.filter(|b| *b > 0) {
                self.bytes
                    .get_or_create(&BytesLabels {
                        operation: operation.clone(),
                        direction,
                    })
                    .inc_by(bytes);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forwarded_requests_are_named_from_their_method() {
        let named = |method: Method, uri: &str| {
            forwarded_operation(&method, &uri.parse().unwrap(), &HeaderMap::new())
        };
        assert_eq!(named(Method::GET, "/b/k"), Some("GetObject"));
        assert_eq!(named(Method::HEAD, "/b/k"), Some("HeadObject"));
        assert_eq!(named(Method::PUT, "/b/k"), Some("PutObject"));
        assert_eq!(
            named(Method::PUT, "/b/k?partNumber=2&uploadId=u"),
            Some("UploadPart")
        );
        assert_eq!(named(Method::DELETE, "/b/k"), Some("DeleteObject"));
        assert_eq!(named(Method::GET, "/b?list-type=2"), None, "a bucket call");
    }

    #[test]
    fn answers_are_counted_by_operation_status_and_direction() {
        let metrics = GatewayMetrics::default();
        let answered = |operation, status, bytes_in, bytes_out| Answered {
            operation,
            status,
            took: Duration::from_millis(3),
            bytes_in,
            bytes_out,
        };
        metrics.observe(&answered("PutObject", StatusCode::OK, Some(100), Some(0)));
        metrics.observe(&answered("PutObject", StatusCode::OK, Some(50), None));
        metrics.observe(&answered(
            "GetObject",
            StatusCode::NOT_FOUND,
            None,
            Some(200),
        ));
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry).unwrap();
        for line in [
            r#"slipway_s3_requests_total{operation="PutObject",status="200"} 2"#,
            r#"slipway_s3_requests_total{operation="GetObject",status="404"} 1"#,
            r#"slipway_s3_bytes_total{operation="PutObject",direction="in"} 150"#,
            r#"slipway_s3_bytes_total{operation="GetObject",direction="out"} 200"#,
            r#"slipway_s3_request_duration_seconds_count{operation="PutObject"} 2"#,
        ] {
            assert!(out.contains(line), "{line} missing from:\n{out}");
        }
        assert!(!out.contains(r#"operation="PutObject",direction="out""#));
    }
}
