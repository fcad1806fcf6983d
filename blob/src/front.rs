//! What every request to the gateway gets around s3s, as S3 gives it and s3s does not:
//!
//! - a request id of the gateway's own, in the `x-amz-request-id` header of every answer and in the `<RequestId>`
//!   of every error document, so a client (boto3 reads both) can quote one id for a failed request, and on every
//!   log line of the request; the backend's ids, which the SDK path passes on, are replaced;
//! - the refusal of a presigned URL valid for more than a week: SigV4 caps `X-Amz-Expires` at 604800 seconds and
//!   S3 answers a longer one 400 `AuthorizationQueryParametersError`, where s3s would take it;
//! - a bare ETag in a `GetObjectAttributes` answer: s3s writes every XML ETag in quotes, and that answer is the one
//!   place S3 writes it without them (clients compare it with the checksum they computed, unquoted);
//! - the count of every answer by operation and status ([`super::metrics`]).

use bytes::Bytes;
use futures::future::BoxFuture;
use http::header::{CONTENT_LENGTH, CONTENT_TYPE, HeaderValue};
use http::{Request, Response, Uri};
use hyper::body::Incoming;
use s3s::service::S3Service;
use s3s::{Body, HttpError, S3Error, S3ErrorCode};
use std::time::Instant;

use super::metrics::{Answered, GatewayMetrics, OperationSlot, forwarded_operation};

/// Longest validity of a presigned URL SigV4 allows, in seconds (seven days).
pub const MAX_PRESIGNED_EXPIRES: u64 = 604_800;

/// The gateway's S3 service behind its front: request ids, the presigned URLs refused before s3s, and the counts.
#[derive(Clone)]
pub struct Front {
    service: S3Service,
    metrics: GatewayMetrics,
}

impl Front {
    /// `service` behind the front, counted in `metrics`.
    pub fn new(service: S3Service, metrics: GatewayMetrics) -> Self {
        Self { service, metrics }
    }

    /// Its counts.
    pub fn metrics(&self) -> &GatewayMetrics {
        &self.metrics
    }
}

impl hyper::service::Service<Request<Incoming>> for Front {
    type Response = Response<Body>;
    type Error = HttpError;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn call(&self, mut req: Request<Incoming>) -> Self::Future {
        let (service, metrics) = (self.service.clone(), self.metrics.clone());
        Box::pin(async move {
            let started = Instant::now();
            let id = slipway_http::request_id::new_id();
            let attributes = asks_attributes(&req);
            let forwarded = forwarded_operation(req.method(), req.uri(), req.headers());
            let bytes_in = content_length(req.headers());
            let slot = OperationSlot::default();
            req.extensions_mut().insert(slot.clone());
            let mut res = match refusal(req.uri()) {
                Some(err) => err
                    .to_http_response()
                    .map_err(|e| HttpError::new(Box::new(e)))?,
                None => {
                    // s3s's and the gateway's log lines of the request carry the id its answer gives.
                    let span = tracing::info_span!("s3", request_id = %id, method = %req.method());
                    tracing::Instrument::instrument(service.call(req.map(Body::from)), span).await?
                }
            };
            metrics.observe(&Answered {
                operation: slot.get().or(forwarded).unwrap_or("unresolved"),
                status: res.status(),
                took: started.elapsed(),
                bytes_in,
                bytes_out: content_length(res.headers()),
            });
            stamp(&mut res, &id);
            if attributes {
                unquote_etag(&mut res);
            }
            Ok(res)
        })
    }
}

/// The body length a message's `Content-Length` declares.
fn content_length(headers: &http::HeaderMap) -> Option<u64> {
    headers.get(CONTENT_LENGTH)?.to_str().ok()?.parse().ok()
}

/// The error a request's URL is refused with before its signature is checked, if any.
fn refusal(uri: &Uri) -> Option<S3Error> {
    let query = uri.query()?;
    let (_, expires) =
        form_urlencoded::parse(query.as_bytes()).find(|(name, _)| name == "X-Amz-Expires")?;
    let seconds: u64 = expires.parse().ok()?;
    (seconds > MAX_PRESIGNED_EXPIRES).then(|| {
        S3Error::with_message(
            S3ErrorCode::AuthorizationQueryParametersError,
            format!("X-Amz-Expires must be less than a week (in seconds) that is {MAX_PRESIGNED_EXPIRES}"),
        )
    })
}

/// Whether `req` is a `GetObjectAttributes` call (`GET /bucket/key?attributes`).
fn asks_attributes<B>(req: &Request<B>) -> bool {
    req.method() == http::Method::GET
        && req.uri().query().is_some_and(|q| {
            q.split('&')
                .any(|pair| pair == "attributes" || pair.starts_with("attributes="))
        })
}

/// Takes the quotes off the `<ETag>` of a successful `GetObjectAttributes` answer.
fn unquote_etag(res: &mut Response<Body>) {
    if !res.status().is_success() {
        return;
    }
    let Some(document) = res.body().bytes() else {
        return;
    };
    if let Some(bare) = with_bare_etag(&document) {
        res.headers_mut().remove(CONTENT_LENGTH);
        *res.body_mut() = Body::from(bare);
    }
}

/// `document` with its `<ETag>"v"</ETag>` written `<ETag>v</ETag>`; `None` when it has no quoted ETag.
fn with_bare_etag(document: &[u8]) -> Option<Bytes> {
    let text = std::str::from_utf8(document).ok()?;
    let start = text.find("<ETag>")? + "<ETag>".len();
    let len = text[start..].find("</ETag>")?;
    let etag = &text[start..start + len];
    let bare = etag.strip_prefix('"')?.strip_suffix('"')?;
    Some(Bytes::from(format!(
        "{}{bare}{}",
        &text[..start],
        &text[start + len..]
    )))
}

/// Puts `id` on `res`: its `x-amz-request-id` header, and the `<RequestId>` of its error document if it is one.
fn stamp(res: &mut Response<Body>, id: &str) {
    if let Ok(value) = HeaderValue::from_str(id) {
        res.headers_mut().insert("x-amz-request-id", value);
    }
    let xml = res
        .headers()
        .get(CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().ends_with(b"xml"));
    if !(res.status().is_client_error() || res.status().is_server_error()) || !xml {
        return;
    }
    let Some(document) = res.body().bytes() else {
        return;
    };
    if let Some(stamped) = with_request_id(&document, id) {
        res.headers_mut().remove(CONTENT_LENGTH);
        *res.body_mut() = Body::from(stamped);
    }
}

/// The error document `document` with `id` as its `<RequestId>` (one it had replaced); `None` for a body that is
/// not an S3 `<Error>` document.
fn with_request_id(document: &[u8], id: &str) -> Option<Bytes> {
    let text = std::str::from_utf8(document).ok()?;
    let end = text.rfind("</Error>")?;
    let (mut head, tail) = (text[..end].to_owned(), &text[end..]);
    if let Some(start) = head.find("<RequestId>")
        && let Some(len) = head[start..].find("</RequestId>")
    {
        head.replace_range(start..start + len + "</RequestId>".len(), "");
    }
    Some(Bytes::from(format!(
        "{head}<RequestId>{id}</RequestId>{tail}"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_documents_carry_the_request_id_once() {
        let plain =
            b"<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>NoSuchKey</Code></Error>";
        assert_eq!(
            with_request_id(plain, "AB12").unwrap(),
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>NoSuchKey</Code>\
             <RequestId>AB12</RequestId></Error>"
        );
        let backends = b"<Error><Code>NoSuchKey</Code><RequestId>backend</RequestId><Message>m</Message></Error>";
        assert_eq!(
            with_request_id(backends, "AB12").unwrap(),
            "<Error><Code>NoSuchKey</Code><Message>m</Message><RequestId>AB12</RequestId></Error>"
        );
        assert!(with_request_id(b"<ListBucketResult/>", "AB12").is_none());
        assert!(with_request_id(&[0xff, 0xfe], "AB12").is_none());
    }

    #[test]
    fn presigned_urls_valid_for_over_a_week_are_refused() {
        let refused = |q: &str| refusal(&format!("/b/k?{q}").parse().unwrap());
        let err = refused("X-Amz-Expires=604801&X-Amz-Signature=s").unwrap();
        assert_eq!(*err.code(), S3ErrorCode::AuthorizationQueryParametersError);
        assert!(refused("X-Amz-Expires=604800").is_none());
        assert!(refused("X-Amz-Expires=60").is_none());
        assert!(refused("versionId=1").is_none());
        assert!(refusal(&"/b/k".parse().unwrap()).is_none());
    }

    #[test]
    fn attribute_answers_carry_a_bare_etag() {
        let quoted = b"<GetObjectAttributesResponse><ETag>\"abc\"</ETag><ObjectSize>3</ObjectSize>\
                       </GetObjectAttributesResponse>";
        assert_eq!(
            with_bare_etag(quoted).unwrap(),
            "<GetObjectAttributesResponse><ETag>abc</ETag><ObjectSize>3</ObjectSize>\
             </GetObjectAttributesResponse>"
        );
        assert!(
            with_bare_etag(
                b"<GetObjectAttributesResponse><ETag>abc</ETag></GetObjectAttributesResponse>"
            )
            .is_none()
        );
        assert!(with_bare_etag(b"<GetObjectAttributesResponse/>").is_none());
        let asks = |uri: &str| asks_attributes(&Request::get(uri).body(()).unwrap());
        assert!(asks("/b/k?attributes"));
        assert!(asks("/b/k?versionId=1&attributes="));
        assert!(!asks("/b/k?attributesx"));
        assert!(!asks("/b/k"));
    }

    #[test]
    fn request_ids_look_like_s3s() {
        let id = slipway_http::request_id::new_id();
        assert_eq!(id.len(), 16);
        assert!(
            id.bytes()
                .all(|b| b.is_ascii_digit() || b.is_ascii_uppercase())
        );
    }
}
