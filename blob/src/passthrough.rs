//! The hot object operations (GetObject, HeadObject, PutObject, DeleteObject) forwarded to the backend as they
//! came, without the AWS SDK. Through the SDK (s3s-aws) every request was parsed into s3s's typed input, rebuilt as an SDK call that
//! ran the SDK's orchestrator (endpoint rules, interceptors, retries, its own signing), and its answer parsed and
//! written out again: for a small object that cost several times the backend's own work. Here the request, already
//! authenticated by s3s (the channel's SigV4, header or presigned), is re-signed for the backend with the
//! platform's key pair ([`aws_sigv4`]) and sent over a pooled HTTP/1 connection, its body streamed both ways; only
//! the listed headers cross in either direction, so nothing a tenant adds reaches the backend and nothing of the
//! backend's (its bucket name included) reaches the tenant. The gateway's rules hold as on every other operation:
//! a key reaches only its own channel's bucket ([`Tenant::enter`]), a PUT reserves its bytes against the owner's
//! quota before any byte reaches the backend ([`Quota::counted`]), and deleting a version by id frees its bytes.
//! DELETEs take this path for a reason of their own too: the SDK refuses a key made only of whitespace (its
//! endpoint parameters count it as missing), which S3 and the backend take.
//!
//! Only plain requests take this path ([`forwards`]), and a part's upload (`UploadPart`): a query or header that
//! makes the request another operation (a copy, tagging, ACLs), or asks for response header overrides or a part
//! number, goes through the s3s operations and the SDK as before. Backends over HTTPS always do. An aws-chunked
//! PUT (the SDKs stream uploads so, with a signature per chunk, or over HTTPS with a trailing checksum) takes this
//! path too: s3s has checked and decoded its chunks, and the backend is sent the plain bytes, or with a trailing
//! checksum those bytes chunked again with the client's trailer ([`body_headers`], [`super::trailer`]).

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{
    PayloadChecksumKind, PercentEncodingMode, SignableBody, SignableRequest, SigningInstructions,
    SigningParams, SigningSettings, UriPathNormalizationMode, sign,
};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;
use bytes::Bytes;
use http::header::{CONTENT_ENCODING, CONTENT_LENGTH, HeaderName, HeaderValue};
use http::{HeaderMap, Method, Request, StatusCode, Uri};
use http_body_util::BodyExt;
use hyper::http::Extensions;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};
use s3s::route::S3Route;
use s3s::{Body, S3Error, S3ErrorCode, S3Request, S3Response, S3Result, s3_error};
use slipway_backends::object_store::{REGION, S3Endpoint};

use super::quota::{Quota, Settlement, Stored};
use super::tenants::{Tenant, Tenants};

/// Longest an idle connection to the backend is kept.
const IDLE: Duration = Duration::from_secs(60);
/// Most of an error answer read to find its code and message.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// What S3 leaves unescaped in a path: letters, digits, `-_.~` and the `/` between a key's parts.
const PATH: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~')
    .remove(b'/');
/// The same in a query value, where `/` is escaped too.
const QUERY_VALUE: &AsciiSet = &PATH.add(b'/');

/// Query parameters of a presigned URL, checked by s3s and not forwarded.
const PRESIGNED: [&str; 7] = [
    "X-Amz-Algorithm",
    "X-Amz-Credential",
    "X-Amz-Date",
    "X-Amz-Expires",
    "X-Amz-SignedHeaders",
    "X-Amz-Signature",
    "X-Amz-Security-Token",
];

/// Request headers forwarded on every operation of this path.
const REQUEST_HEADERS: [&str; 7] = [
    "if-match",
    "if-none-match",
    "x-amz-server-side-encryption-customer-algorithm",
    "x-amz-server-side-encryption-customer-key",
    "x-amz-server-side-encryption-customer-key-md5",
    "if-modified-since",
    "if-unmodified-since",
];
/// Request headers forwarded on reads.
const READ_HEADERS: [&str; 2] = ["range", "x-amz-checksum-mode"];
/// Request headers forwarded on writes (with `x-amz-meta-*`).
const WRITE_HEADERS: [&str; 27] = [
    "content-length",
    "content-type",
    "content-md5",
    "content-encoding",
    "content-disposition",
    "content-language",
    "cache-control",
    "expires",
    "x-amz-acl",
    "x-amz-grant-full-control",
    "x-amz-grant-read",
    "x-amz-grant-read-acp",
    "x-amz-grant-write-acp",
    "x-amz-checksum-crc32",
    "x-amz-checksum-crc32c",
    "x-amz-checksum-crc64nvme",
    "x-amz-checksum-sha1",
    "x-amz-checksum-sha256",
    "x-amz-sdk-checksum-algorithm",
    "x-amz-object-lock-legal-hold",
    "x-amz-object-lock-mode",
    "x-amz-object-lock-retain-until-date",
    "x-amz-server-side-encryption",
    "x-amz-server-side-encryption-aws-kms-key-id",
    "x-amz-storage-class",
    "x-amz-tagging",
    "x-amz-website-redirect-location",
];
/// Response headers returned to the client (with `x-amz-meta-*`): the fields of S3's GetObject, HeadObject and
/// PutObject answers.
const RESPONSE_HEADERS: [&str; 39] = [
    "accept-ranges",
    "cache-control",
    "content-disposition",
    "content-encoding",
    "content-language",
    "content-length",
    "content-range",
    "content-type",
    "etag",
    "expires",
    "last-modified",
    "x-amz-archive-status",
    "x-amz-checksum-crc32",
    "x-amz-checksum-crc32c",
    "x-amz-checksum-crc64nvme",
    "x-amz-checksum-sha1",
    "x-amz-checksum-sha256",
    "x-amz-checksum-type",
    "x-amz-delete-marker",
    "x-amz-expiration",
    "x-amz-missing-meta",
    "x-amz-mp-parts-count",
    "x-amz-object-lock-legal-hold",
    "x-amz-object-lock-mode",
    "x-amz-object-lock-retain-until-date",
    "x-amz-object-size",
    "x-amz-replication-status",
    "x-amz-request-charged",
    "x-amz-restore",
    "x-amz-server-side-encryption",
    "x-amz-server-side-encryption-aws-kms-key-id",
    "x-amz-server-side-encryption-bucket-key-enabled",
    "x-amz-server-side-encryption-context",
    "x-amz-server-side-encryption-customer-algorithm",
    "x-amz-server-side-encryption-customer-key-md5",
    "x-amz-storage-class",
    "x-amz-tagging-count",
    "x-amz-version-id",
    "x-amz-website-redirect-location",
];
const META_PREFIX: &str = "x-amz-meta-";

/// Whether a request (already authenticated) takes this path: a GET, HEAD, DELETE or PUT of an object,
/// path-style, whose query holds nothing but a version id (not on a PUT), a part's number and upload (only on a
/// PUT), the SDKs' `x-id` and a presigned URL's signature, and, for a PUT, that is not a copy.
pub fn forwards(method: &Method, uri: &Uri, headers: &HeaderMap) -> bool {
    let read = *method == Method::GET || *method == Method::HEAD;
    let versioned = read || *method == Method::DELETE;
    if !versioned && *method != Method::PUT {
        return false;
    }
    let Some((bucket, key)) = uri.path().strip_prefix('/').and_then(|p| p.split_once('/')) else {
        return false;
    };
    if bucket.is_empty() || key.is_empty() {
        return false;
    }
    let names: Vec<&str> = uri
        .query()
        .unwrap_or_default()
        .split('&')
        .map(|pair| pair.split_once('=').map_or(pair, |(name, _)| name))
        .collect();
    // A part's number must be one: anything else is the operations' to refuse.
    let part = !versioned && part_of(uri).is_some();
    let plain_query = names.iter().all(|name| {
        name.is_empty()
            || *name == "x-id"
            || (versioned && *name == "versionId")
            || (part && (*name == "partNumber" || *name == "uploadId"))
            || PRESIGNED.contains(name)
    });
    if !plain_query {
        return false;
    }
    if versioned {
        return true;
    }
    headers.get("x-amz-copy-source").is_none()
}

/// Whether a request's body came aws-chunked and s3s decoded it before this path sees it: s3s decodes a body
/// whose `x-amz-content-sha256` is one of the `STREAMING-` kinds, and no other (a `Content-Encoding: aws-chunked`
/// alone changes nothing).
fn aws_chunked(headers: &HeaderMap) -> bool {
    headers
        .get("x-amz-content-sha256")
        .is_some_and(|v| v.as_bytes().starts_with(b"STREAMING-"))
}

/// The bytes of a write's object (or part): its `Content-Length`, or for an aws-chunked body the decoded length
/// it declares (s3s holds the body to it).
fn object_bytes(headers: &HeaderMap) -> S3Result<i64> {
    let declared = aws_chunked(headers)
        .then(|| headers.get("x-amz-decoded-content-length"))
        .flatten();
    declared
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .filter(|n: &i64| *n >= 0)
        .map_or_else(|| content_length(headers), Ok)
}

/// How a write's body goes to the backend.
enum Payload {
    /// As it came (a plain body, or aws-chunked without a trailer, which s3s has decoded to plain bytes).
    Plain,
    /// Chunked again with the client's trailing checksum ([`super::trailer`]).
    Trailer {
        /// The trailer's name.
        name: &'static str,
        /// Bytes of its value.
        value_len: u64,
    },
}

/// Makes `headers` (a write's, for the backend, with `from` the client's) describe what the backend is sent of an
/// aws-chunked body s3s decoded: the plain bytes, their length and no `aws-chunked` coding; or, when the client's
/// checksum comes in a trailer, those bytes chunked again with the trailer, declared as S3 declares them.
fn body_headers(from: &HeaderMap, headers: &mut HeaderMap) -> S3Result<Payload> {
    if !aws_chunked(from) {
        return Ok(Payload::Plain);
    }
    let bytes = object_bytes(from)?;
    let mut codings: Vec<String> = headers
        .get(CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|c| !c.is_empty() && !c.eq_ignore_ascii_case("aws-chunked"))
        .map(str::to_owned)
        .collect();
    let payload = match super::trailer::declared(from.get("x-amz-trailer"))? {
        None => {
            headers.insert(CONTENT_LENGTH, HeaderValue::from(bytes));
            Payload::Plain
        }
        Some((name, value_len)) => {
            let decoded = u64::try_from(bytes).unwrap_or(0);
            codings.insert(0, "aws-chunked".to_owned());
            headers.insert(
                CONTENT_LENGTH,
                HeaderValue::from(super::trailer::encoded_len(decoded, name, value_len)),
            );
            headers.insert("x-amz-decoded-content-length", HeaderValue::from(decoded));
            headers.insert("x-amz-trailer", HeaderValue::from_static(name));
            Payload::Trailer { name, value_len }
        }
    };
    match HeaderValue::from_str(&codings.join(", ")) {
        Ok(value) if !value.is_empty() => {
            headers.insert(CONTENT_ENCODING, value);
        }
        _ => {
            headers.remove(CONTENT_ENCODING);
        }
    }
    Ok(payload)
}

/// The backend, as this path reaches it.
pub struct Passthrough {
    tenants: Arc<Tenants>,
    quota: Quota,
    base: String,
    identity: Identity,
    client: Client<HttpConnector, Body>,
}

impl Passthrough {
    /// The path to `backend` for the channels in `tenants`; `None` for a backend it cannot reach (HTTPS).
    pub fn new(backend: &S3Endpoint, tenants: Arc<Tenants>, quota: Quota) -> Option<Self> {
        let base = backend.url.trim_end_matches('/');
        let uri: Uri = base.parse().ok()?;
        if uri.scheme_str() != Some("http") || uri.authority().is_none() {
            return None;
        }
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(Duration::from_secs(5)));
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(IDLE)
            .build(connector);
        let identity = Credentials::new(
            &backend.access_key_id,
            &backend.secret_access_key,
            None,
            None,
            "slipway",
        )
        .into();
        Some(Self {
            tenants,
            quota,
            base: base.to_owned(),
            identity,
            client,
        })
    }

    /// The request for the backend: `req`'s object in `tenant`'s backend bucket, the listed headers, signed.
    fn backend_request(
        &self,
        tenant: &Tenant,
        req: &mut S3Request<Body>,
    ) -> S3Result<Request<Body>> {
        let (mut bucket, key) = object_path(&req.uri)?;
        tenant.enter(&mut bucket)?;
        let write = req.method == Method::PUT;
        let uri = if write {
            self.object_uri(&bucket, &key, None, part_of(&req.uri).as_ref())
        } else {
            self.object_uri(
                &bucket,
                &key,
                query_value(&req.uri, "versionId").as_deref(),
                None,
            )
        };
        let mut headers = HeaderMap::new();
        let listed: &[&str] = match req.method {
            Method::PUT => &WRITE_HEADERS,
            Method::DELETE => &[],
            _ => &READ_HEADERS,
        };
        for (name, value) in &req.headers {
            let name_str = name.as_str();
            if REQUEST_HEADERS.contains(&name_str)
                || listed.contains(&name_str)
                || (write && name_str.starts_with(META_PREFIX))
            {
                headers.append(name.clone(), value.clone());
            }
        }
        let payload = if write {
            body_headers(&req.headers, &mut headers)?
        } else {
            Payload::Plain
        };
        if write && !headers.contains_key(CONTENT_LENGTH) {
            return Err(s3_error!(MissingContentLength));
        }
        let signable = match (&payload, req.headers.get("x-amz-content-sha256")) {
            (Payload::Trailer { .. }, _) => SignableBody::StreamingUnsignedPayloadTrailer,
            (_, Some(hash)) if write && is_sha256(hash.as_bytes()) => {
                // The client signed its body's hash: the backend checks the body against it.
                SignableBody::Precomputed(String::from_utf8_lossy(hash.as_bytes()).into_owned())
            }
            _ if !write => SignableBody::Bytes(&[]),
            _ => SignableBody::UnsignedPayload,
        };
        let signed = self.sign(&req.method, &uri, &headers, signable)?;
        let body = std::mem::take(&mut req.input);
        let body = match payload {
            Payload::Plain => body,
            Payload::Trailer { name, value_len } => {
                let trailers = req.trailing_headers.clone();
                super::trailer::encode(body, name, value_len, move || {
                    trailers.and_then(|t| t.read(|h| h.get(name).cloned()).flatten())
                })
            }
        };
        let mut out = Request::builder()
            .method(req.method.clone())
            .uri(uri)
            .body(body)
            .map_err(|e| S3Error::with_source(S3ErrorCode::InvalidURI, Box::new(e)))?;
        *out.headers_mut() = headers;
        signed.apply_to_request_http1x(&mut out);
        Ok(out)
    }

    /// The backend's URL of `key` in `bucket` (the backend's name), of `version` or of `part` if given.
    fn object_uri(
        &self,
        bucket: &str,
        key: &str,
        version: Option<&str>,
        part: Option<&Part>,
    ) -> String {
        let mut uri = format!("{}/{bucket}/{}", self.base, utf8_percent_encode(key, PATH));
        if let Some(version) = version {
            uri.push_str("?versionId=");
            uri.extend(utf8_percent_encode(version, QUERY_VALUE));
        }
        if let Some(part) = part {
            uri.push_str(&format!("?partNumber={}&uploadId=", part.number));
            uri.extend(utf8_percent_encode(&part.upload_id, QUERY_VALUE));
        }
        uri
    }

    /// What the backend holds of `key`'s `version`, as the SDK path's `head` measures it but for any key.
    async fn stored(&self, bucket: &str, key: &str, version: &str) -> Stored {
        let uri = self.object_uri(bucket, key, Some(version), None);
        let Ok(signed) = self.sign(
            &Method::HEAD,
            &uri,
            &HeaderMap::new(),
            SignableBody::Bytes(&[]),
        ) else {
            return Stored::Bytes(0);
        };
        let Ok(mut head) = Request::builder()
            .method(Method::HEAD)
            .uri(uri)
            .body(Body::empty())
        else {
            return Stored::Bytes(0);
        };
        signed.apply_to_request_http1x(&mut head);
        match self.client.request(head).await {
            Ok(res) if res.status().is_success() => {
                Stored::Bytes(content_length(res.headers()).unwrap_or(0))
            }
            Ok(res) if res.status() == StatusCode::NOT_FOUND => Stored::Gone,
            _ => Stored::Bytes(0),
        }
    }

    /// How to sign a request of `method` to `uri` with `headers` and `payload` for the backend.
    fn sign(
        &self,
        method: &Method,
        uri: &str,
        headers: &HeaderMap,
        payload: SignableBody<'_>,
    ) -> S3Result<SigningInstructions> {
        let mut settings = SigningSettings::default();
        settings.percent_encoding_mode = PercentEncodingMode::Single;
        settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
        settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
        let params: SigningParams<'_> = v4::SigningParams::builder()
            .identity(&self.identity)
            .region(REGION)
            .name("s3")
            .time(SystemTime::now())
            .settings(settings)
            .build()
            .map_err(|e| S3Error::with_source(S3ErrorCode::InternalError, Box::new(e)))?
            .into();
        let mut pairs = Vec::with_capacity(headers.len());
        for (name, value) in headers {
            let value = value
                .to_str()
                .map_err(|_| s3_error!(InvalidArgument, "header {name} is not text"))?;
            pairs.push((name.as_str(), value));
        }
        let signable = SignableRequest::new(method.as_str(), uri, pairs.into_iter(), payload)
            .map_err(|e| S3Error::with_source(S3ErrorCode::InternalError, Box::new(e)))?;
        let (instructions, _) = sign(signable, &params)
            .map_err(|e| S3Error::with_source(S3ErrorCode::InternalError, Box::new(e)))?
            .into_parts();
        Ok(instructions)
    }

    /// Sends `req` to the backend; its answer for the client, or the backend's error.
    async fn send(&self, req: Request<Body>) -> S3Result<S3Response<Body>> {
        let res = self.client.request(req).await.map_err(|e| {
            tracing::warn!(error = %e, "the object store backend does not answer");
            let mut err = s3_error!(
                ServiceUnavailable,
                "object storage is unavailable; try again"
            );
            err.set_status_code(StatusCode::SERVICE_UNAVAILABLE);
            err
        })?;
        let (parts, body) = res.into_parts();
        if !(parts.status.is_success() || parts.status == StatusCode::NOT_MODIFIED) {
            return Err(backend_error(parts.status, body).await);
        }
        let mut out = S3Response::with_status(Body::from(body), parts.status);
        out.headers = answered_headers(&parts.headers);
        Ok(out)
    }
}

impl Passthrough {
    /// Sends a DELETE of an object: without a version it adds a marker and frees nothing; a version deleted by id
    /// frees its bytes before the answer, measured under its key's lock ([`Quota::freeing`]).
    async fn delete(
        &self,
        tenant: &Tenant,
        req: &S3Request<Body>,
        backend_req: Request<Body>,
    ) -> S3Result<S3Response<Body>> {
        let Some(version) = query_value(&req.uri, "versionId") else {
            return self.send(backend_req).await;
        };
        let (_, key) = object_path(&req.uri)?;
        self.quota
            .freeing(tenant, &[&key], async {
                let stored = self.stored(&tenant.backend_bucket, &key, &version).await;
                let res = match self.send(backend_req).await {
                    Err(e) if stored.already_deleted(&e) => {
                        let mut gone =
                            S3Response::with_status(Body::empty(), StatusCode::NO_CONTENT);
                        if let Ok(id) = HeaderValue::from_str(&version) {
                            gone.headers.insert("x-amz-version-id", id);
                        }
                        gone
                    }
                    answer => answer?,
                };
                Ok((res, Settlement::Delta(-stored.bytes())))
            })
            .await
    }
}

#[async_trait::async_trait]
impl S3Route for Passthrough {
    fn is_match(
        &self,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        _: &mut Extensions,
    ) -> bool {
        forwards(method, uri, headers)
    }

    async fn call(&self, mut req: S3Request<Body>) -> S3Result<S3Response<Body>> {
        let tenant = self.tenants.signer(req.credentials.as_ref()).await?;
        let backend_req = self.backend_request(&tenant, &mut req)?;
        match req.method {
            Method::PUT => {
                let bytes = object_bytes(&req.headers)?;
                match part_of(&req.uri) {
                    None => {
                        self.quota
                            .write(&tenant, bytes, self.send(backend_req))
                            .await
                    }
                    Some(Part { number, upload_id }) => {
                        self.quota
                            .counted(&tenant, bytes, async {
                                let res = self.send(backend_req).await?;
                                let settled = Settlement::Part {
                                    upload_id,
                                    part_number: number,
                                    bytes,
                                };
                                Ok((res, settled))
                            })
                            .await
                    }
                }
            }
            Method::DELETE => self.delete(&tenant, &req, backend_req).await,
            _ => self.send(backend_req).await,
        }
    }
}

/// A part of a multipart upload an `UploadPart` URL names.
struct Part {
    number: i32,
    upload_id: String,
}

/// The part `uri` names, if it names one.
fn part_of(uri: &Uri) -> Option<Part> {
    Some(Part {
        number: query_value(uri, "partNumber")?.parse().ok()?,
        upload_id: query_value(uri, "uploadId")?.into_owned(),
    })
}

/// The bucket and key a path-style object URL names, decoded.
fn object_path(uri: &Uri) -> S3Result<(String, String)> {
    let path = percent_decode_str(uri.path())
        .decode_utf8()
        .map_err(|_| s3_error!(InvalidURI))?;
    let (bucket, key) = path
        .strip_prefix('/')
        .and_then(|p| p.split_once('/'))
        .ok_or_else(|| s3_error!(InvalidURI))?;
    Ok((bucket.to_owned(), key.to_owned()))
}

/// The (first) value of query parameter `name`, decoded.
fn query_value<'a>(uri: &'a Uri, name: &str) -> Option<Cow<'a, str>> {
    form_urlencoded::parse(uri.query()?.as_bytes())
        .find(|(n, _)| n == name)
        .map(|(_, v)| v)
}

/// Whether `value` is a SHA-256 in hex (a signed payload), not one of SigV4's payload keywords.
fn is_sha256(value: &[u8]) -> bool {
    value.len() == 64 && value.iter().all(u8::is_ascii_hexdigit)
}

fn content_length(headers: &HeaderMap) -> S3Result<i64> {
    headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .filter(|n: &i64| *n >= 0)
        .ok_or_else(|| s3_error!(MissingContentLength))
}

/// The backend's answer headers a client may see.
fn answered_headers(from: &HeaderMap) -> HeaderMap {
    let mut headers = HeaderMap::with_capacity(from.len());
    for (name, value) in from {
        let name_str = name.as_str();
        if RESPONSE_HEADERS.contains(&name_str) || name_str.starts_with(META_PREFIX) {
            headers.append(HeaderName::clone(name), value.clone());
        }
    }
    headers
}

/// The backend's error answer as the gateway's own: its status, S3 code and message (the body's `<Code>` and
/// `<Message>`; a HEAD's answer has no body, so its code follows the status).
async fn backend_error(status: StatusCode, body: hyper::body::Incoming) -> S3Error {
    let limited = http_body_util::Limited::new(body, MAX_ERROR_BODY);
    let text = match limited.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => Bytes::new(),
    };
    let answer = ErrorAnswer::parse(&String::from_utf8_lossy(&text));
    let code = answer
        .code
        .and_then(|c| S3ErrorCode::from_bytes(c.as_bytes()))
        .unwrap_or_else(|| status_code(status));
    let mut err = match answer.message {
        Some(message) => S3Error::with_message(code, message),
        None => S3Error::new(code),
    };
    err.set_status_code(status);
    err
}

/// The fields of an S3 `<Error>` document the gateway passes on.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ErrorAnswer {
    code: Option<String>,
    message: Option<String>,
}

impl ErrorAnswer {
    /// `xml`'s code and message; nothing of a body that is not such a document.
    fn parse(xml: &str) -> Self {
        quick_xml::de::from_str(xml).unwrap_or_default()
    }
}

/// The S3 code of a bodiless error answer, as the SDK names it.
fn status_code(status: StatusCode) -> S3ErrorCode {
    let name = match status {
        StatusCode::NOT_FOUND => "NotFound",
        StatusCode::FORBIDDEN => "Forbidden",
        StatusCode::BAD_REQUEST => "BadRequest",
        StatusCode::PRECONDITION_FAILED => "PreconditionFailed",
        StatusCode::METHOD_NOT_ALLOWED => "MethodNotAllowed",
        StatusCode::RANGE_NOT_SATISFIABLE => "InvalidRange",
        _ => return S3ErrorCode::InternalError,
    };
    S3ErrorCode::from_bytes(name.as_bytes()).unwrap_or(S3ErrorCode::InternalError)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn takes(method: Method, uri: &str, headers: &[(&str, &str)]) -> bool {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.insert(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
        }
        forwards(&method, &uri.parse().unwrap(), &map)
    }

    #[test]
    fn plain_object_reads_and_writes_take_the_lean_path() {
        assert!(takes(Method::GET, "/b/k", &[]));
        assert!(takes(Method::GET, "/b/dir/k.txt?x-id=GetObject", &[]));
        assert!(takes(Method::HEAD, "/b/k?versionId=abc", &[]));
        assert!(takes(Method::DELETE, "/b/k", &[]));
        assert!(takes(
            Method::DELETE,
            "/b/%20?versionId=abc&x-id=DeleteObject",
            &[]
        ));
        assert!(takes(
            Method::GET,
            "/b/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=a&X-Amz-Date=d&X-Amz-Expires=300\
             &X-Amz-SignedHeaders=host&X-Amz-Signature=s&x-id=GetObject",
            &[("range", "bytes=0-1")]
        ));
        assert!(takes(Method::PUT, "/b/k", &[("content-length", "3")]));
        assert!(takes(
            Method::PUT,
            "/b/k?x-id=PutObject",
            &[("x-amz-content-sha256", "UNSIGNED-PAYLOAD")]
        ));
    }

    #[test]
    fn every_other_request_goes_through_the_operations() {
        // Buckets and the service.
        assert!(!takes(Method::GET, "/", &[]));
        assert!(!takes(Method::GET, "/b", &[]));
        assert!(!takes(Method::GET, "/b/", &[]));
        assert!(!takes(Method::HEAD, "/b/", &[]));
        assert!(!takes(Method::PUT, "/b", &[]));
        // Other operations on objects.
        assert!(!takes(Method::DELETE, "/b", &[]));
        assert!(!takes(Method::DELETE, "/b/k?tagging", &[]));
        assert!(!takes(Method::DELETE, "/b/k?uploadId=u", &[]));
        assert!(!takes(Method::POST, "/b?delete", &[]));
        assert!(!takes(Method::POST, "/b/k?uploads", &[]));
        assert!(!takes(Method::GET, "/b/k?tagging", &[]));
        assert!(!takes(Method::GET, "/b/k?acl", &[]));
        assert!(!takes(Method::GET, "/b/k?uploadId=u", &[]));
        assert!(!takes(Method::GET, "/b/k?attributes", &[]));
        assert!(!takes(Method::PUT, "/b/k?tagging", &[]));
        assert!(!takes(Method::PUT, "/b/k?versionId=v", &[]));
        assert!(!takes(
            Method::PUT,
            "/b/k",
            &[("x-amz-copy-source", "b/other")]
        ));
        // Reads with overrides or parts, writes with aws-chunked bodies.
        assert!(!takes(
            Method::GET,
            "/b/k?response-content-type=text/plain",
            &[]
        ));
        assert!(!takes(Method::GET, "/b/k?partNumber=1", &[]));
    }

    #[test]
    fn aws_chunked_writes_reach_the_backend_as_plain_bytes() {
        assert!(takes(
            Method::PUT,
            "/b/k",
            &[("x-amz-content-sha256", "STREAMING-UNSIGNED-PAYLOAD-TRAILER")]
        ));
        let header_map = |pairs: &[(&str, &str)]| {
            let mut map = HeaderMap::new();
            for (name, value) in pairs {
                map.insert(
                    HeaderName::from_bytes(name.as_bytes()).unwrap(),
                    value.parse().unwrap(),
                );
            }
            map
        };
        // boto3 over HTTPS: no Content-Length, a trailing checksum: chunked again, the trailer declared.
        let from = header_map(&[
            ("x-amz-content-sha256", "STREAMING-UNSIGNED-PAYLOAD-TRAILER"),
            ("content-encoding", "aws-chunked"),
            ("x-amz-decoded-content-length", "11"),
            ("x-amz-trailer", "x-amz-checksum-crc32"),
            ("x-amz-sdk-checksum-algorithm", "CRC32"),
        ]);
        let mut headers = header_map(&[
            ("content-encoding", "aws-chunked"),
            ("x-amz-sdk-checksum-algorithm", "CRC32"),
        ]);
        let payload = body_headers(&from, &mut headers).unwrap();
        assert!(matches!(
            payload,
            Payload::Trailer {
                name: "x-amz-checksum-crc32",
                value_len: 8
            }
        ));
        let encoded = crate::trailer::encoded_len(11, "x-amz-checksum-crc32", 8);
        assert_eq!(headers.get(CONTENT_LENGTH).unwrap(), &encoded.to_string());
        assert_eq!(headers.get("x-amz-decoded-content-length").unwrap(), "11");
        assert_eq!(headers.get(CONTENT_ENCODING).unwrap(), "aws-chunked");
        assert_eq!(
            headers.get("x-amz-trailer").unwrap(),
            "x-amz-checksum-crc32"
        );
        assert_eq!(object_bytes(&from).unwrap(), 11);
        // Signed chunks of a gzip file without a trailer: plain bytes, its own coding kept.
        let from = header_map(&[
            ("x-amz-content-sha256", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"),
            ("content-encoding", "aws-chunked,gzip"),
            ("x-amz-decoded-content-length", "5"),
        ]);
        let mut headers = header_map(&[
            ("content-encoding", "aws-chunked,gzip"),
            ("content-length", "5"),
        ]);
        assert!(matches!(
            body_headers(&from, &mut headers).unwrap(),
            Payload::Plain
        ));
        assert_eq!(headers.get(CONTENT_LENGTH).unwrap(), "5");
        assert_eq!(headers.get(CONTENT_ENCODING).unwrap(), "gzip");
        // A trailer S3 does not know is refused; a plain body is left as it came.
        let from = header_map(&[
            ("x-amz-content-sha256", "STREAMING-UNSIGNED-PAYLOAD-TRAILER"),
            ("x-amz-decoded-content-length", "5"),
            ("x-amz-trailer", "x-amz-meta-a"),
        ]);
        assert!(body_headers(&from, &mut HeaderMap::new()).is_err());
        let mut headers = header_map(&[("content-encoding", "gzip"), ("content-length", "5")]);
        assert!(matches!(
            body_headers(&HeaderMap::new(), &mut headers).unwrap(),
            Payload::Plain
        ));
        assert_eq!(headers.get(CONTENT_ENCODING).unwrap(), "gzip");
    }

    #[test]
    fn parts_take_the_lean_path_when_they_name_one() {
        assert!(takes(
            Method::PUT,
            "/b/k?partNumber=2&uploadId=u%2Fv&x-id=UploadPart",
            &[]
        ));
        assert!(!takes(Method::PUT, "/b/k?partNumber=two&uploadId=u", &[]));
        assert!(!takes(Method::PUT, "/b/k?uploadId=u", &[]));
        assert!(!takes(Method::GET, "/b/k?partNumber=2&uploadId=u", &[]));
        let part = part_of(&"/b/k?partNumber=2&uploadId=u%2Fv".parse().unwrap()).unwrap();
        assert_eq!((part.number, part.upload_id.as_str()), (2, "u/v"));
    }

    #[test]
    fn keys_are_escaped_as_s3_signs_them() {
        assert_eq!(
            utf8_percent_encode("dir/a b+c~d_e.f-ä?#", PATH).to_string(),
            "dir/a%20b%2Bc~d_e.f-%C3%A4%3F%23"
        );
        assert_eq!(
            utf8_percent_encode("a/b=", QUERY_VALUE).to_string(),
            "a%2Fb%3D"
        );
    }

    #[test]
    fn only_listed_headers_reach_the_client() {
        let mut from = HeaderMap::new();
        from.insert("etag", "\"e\"".parse().unwrap());
        from.insert("x-amz-version-id", "v1".parse().unwrap());
        from.insert("x-amz-meta-colour", "blue".parse().unwrap());
        from.insert("server", "VERSITYGW".parse().unwrap());
        from.insert("x-amz-request-id", "r".parse().unwrap());
        from.insert("x-amz-bucket-region", "us-east-1".parse().unwrap());
        let kept = answered_headers(&from);
        let mut names: Vec<&str> = kept.keys().map(HeaderName::as_str).collect();
        names.sort_unstable();
        assert_eq!(names, ["etag", "x-amz-meta-colour", "x-amz-version-id"]);
    }

    #[test]
    fn error_answers_keep_their_code_and_message() {
        let xml = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>NoSuchKey</Code>\
                   <Message>The key &lt;k&gt; &amp; &#233;</Message><Resource>/slipway-x/k</Resource></Error>";
        let answer = ErrorAnswer::parse(xml);
        assert_eq!(answer.code.as_deref(), Some("NoSuchKey"));
        assert_eq!(answer.message.as_deref(), Some("The key <k> & \u{e9}"));
        let bodiless = ErrorAnswer::parse("");
        assert_eq!((bodiless.code, bodiless.message), (None, None));
        let not_xml = ErrorAnswer::parse("502 Bad Gateway");
        assert_eq!((not_xml.code, not_xml.message), (None, None));
        assert_eq!(status_code(StatusCode::NOT_FOUND).as_str(), "NotFound");
        assert_eq!(
            status_code(StatusCode::BAD_GATEWAY),
            S3ErrorCode::InternalError
        );
    }
}
