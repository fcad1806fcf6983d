//! The S3 backend that holds every channel's objects (versitygw bundled; AWS, Ceph RGW or MinIO external), as the
//! platform reaches it with its own root key pair: the operator creates and removes channel buckets here, and the
//! gateway forwards tenants' requests here. Tenants never see this endpoint or its keys.

use std::time::Duration;

use aws_sdk_s3::Client;
use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::config::timeout::TimeoutConfig;
use aws_sdk_s3::config::{
    BehaviorVersion, Credentials, Region, RequestChecksumCalculation, ResponseChecksumValidation,
};
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{
    BucketVersioningStatus, Delete, ObjectIdentifier, VersioningConfiguration,
};
use bytes::Bytes;
use futures::Stream;

/// The region every bucket is in (and the one injected into containers).
pub const REGION: &str = "us-east-1";

/// An S3 endpoint and the key pair to sign with.
#[derive(Clone)]
pub struct S3Endpoint {
    /// Base URL, e.g. `http://127.0.0.1:7070` or `https://s3.amazonaws.com`.
    pub url: String,
    /// Access key id.
    pub access_key_id: String,
    /// Secret access key.
    pub secret_access_key: String,
}

impl std::fmt::Debug for S3Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Endpoint")
            .field("url", &self.url)
            .field("access_key_id", &self.access_key_id)
            .finish_non_exhaustive()
    }
}

/// A client of `endpoint`: path-style addressing (bucket names need no DNS), checksums only where an operation
/// requires them (the gateway forwards the client's own), and bounded connect and operation times when
/// `operation_timeout` is given (probes and bucket lifecycle; never for streamed object bodies).
pub fn client(endpoint: &S3Endpoint, operation_timeout: Option<Duration>) -> Client {
    let mut timeouts = TimeoutConfig::builder().connect_timeout(Duration::from_secs(5));
    if let Some(limit) = operation_timeout {
        timeouts = timeouts.operation_timeout(limit);
    }
    let config = aws_sdk_s3::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(REGION))
        .endpoint_url(endpoint.url.trim_end_matches('/'))
        .force_path_style(true)
        .credentials_provider(Credentials::new(
            &endpoint.access_key_id,
            &endpoint.secret_access_key,
            None,
            None,
            "slipway",
        ))
        .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
        .response_checksum_validation(ResponseChecksumValidation::WhenRequired)
        .timeout_config(timeouts.build())
        .build();
    Client::from_conf(config)
}

/// An object's body as the chunks its connection delivers them in. `into_async_read` behind a `ReaderStream` would
/// copy them into pieces of 4 KiB, a copy and a wake-up each: a snapshot's download ran at a third of the speed of
/// reading a file.
pub fn body_chunks(
    mut body: ByteStream,
) -> impl Stream<Item = std::io::Result<Bytes>> + Send + Unpin + 'static {
    futures::stream::poll_fn(move |cx| {
        std::pin::Pin::new(&mut body)
            .poll_next(cx)
            .map(|chunk| chunk.map(|chunk| chunk.map_err(std::io::Error::other)))
    })
}

/// What the backend answered when it refused or failed.
#[derive(Debug, thiserror::Error)]
#[error("object store: {0}")]
pub struct BackendError(pub String);

/// The backend was not reached, or failed on its side (a 5xx such as 503 `SlowDown`): a request that needed it may
/// well succeed later, so the API answers it 503 `service_unavailable` rather than 500.
#[derive(Debug, thiserror::Error)]
#[error("object store unavailable: {0}")]
pub struct Unavailable(pub String);

/// An SDK error of a request for `what` as an error to pass on: [`Unavailable`] when the backend was not reached or
/// failed on its side, else a plain error that says what the backend answered.
pub fn failure<E>(what: impl std::fmt::Display, e: &SdkError<E, HttpResponse>) -> anyhow::Error
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    let text = format!("{what}: {}", describe(e));
    if unreachable(e) {
        Unavailable(text).into()
    } else {
        anyhow::Error::msg(text)
    }
}

/// Whether the request did not reach the backend (its connection failed or timed out), timed out, or the backend
/// failed on its side. A failure that no retry mends is not: a connector misconfigured (`is_user`, a TLS setting,
/// say), or 501 and 505, which a store answers to what it does not implement.
fn unreachable<E>(e: &SdkError<E, HttpResponse>) -> bool {
    match e {
        SdkError::DispatchFailure(failure) => failure.is_io() || failure.is_timeout(),
        SdkError::TimeoutError(_) => true,
        _ => e.raw_response().is_some_and(|r| {
            let status = r.status().as_u16();
            r.status().is_server_error() && status != 501 && status != 505
        }),
    }
}

/// Describes an SDK error by its S3 code and message (or its transport failure), never with credentials.
pub fn describe<E: ProvideErrorMetadata + std::error::Error>(e: &E) -> String {
    match (e.code(), e.message()) {
        (Some(code), Some(message)) => format!("{code}: {message}"),
        (Some(code), None) => code.to_owned(),
        _ => {
            let mut text = e.to_string();
            let mut source = e.source();
            while let Some(s) = source {
                text.push_str(": ");
                text.push_str(&s.to_string());
                source = s.source();
            }
            text
        }
    }
}

/// Aborts the multipart uploads of `bucket` started before `before`: those whose process died or whose work was
/// cancelled mid-way (a clean failure aborts its own). Their parts are invisible but take space. Answers how many
/// it aborted; one another process aborted first is not counted.
pub async fn abort_uploads_before(
    client: &Client,
    bucket: &str,
    before: std::time::SystemTime,
) -> anyhow::Result<usize> {
    let mut aborted = 0;
    let (mut key_marker, mut id_marker) = (None::<String>, None::<String>);
    loop {
        let page = client
            .list_multipart_uploads()
            .bucket(bucket)
            .set_key_marker(key_marker.clone())
            .set_upload_id_marker(id_marker.clone())
            .send()
            .await
            .map_err(|e| failure(format_args!("list the unfinished uploads of {bucket}"), &e))?;
        for upload in page.uploads() {
            let started = upload
                .initiated()
                .and_then(|t| std::time::SystemTime::try_from(*t).ok());
            let (Some(key), Some(id), Some(started)) = (upload.key(), upload.upload_id(), started)
            else {
                continue;
            };
            if started > before {
                continue;
            }
            match client
                .abort_multipart_upload()
                .bucket(bucket)
                .key(key)
                .upload_id(id)
                .send()
                .await
            {
                Ok(_) => aborted += 1,
                // Another replica's sweep got there first.
                Err(e) if e.code() == Some("NoSuchUpload") => {}
                Err(e) => {
                    return Err(failure(
                        format_args!("abort the unfinished upload of {key}"),
                        &e,
                    ));
                }
            }
        }
        if !page.is_truncated().unwrap_or(false) {
            return Ok(aborted);
        }
        key_marker = page.next_key_marker().map(str::to_owned);
        id_marker = page.next_upload_id_marker().map(str::to_owned);
    }
}

/// Creates `bucket` on the backend `client` reaches, unless it exists.
pub async fn create_bucket(client: &Client, bucket: &str) -> Result<(), BackendError> {
    match client.create_bucket().bucket(bucket).send().await {
        Ok(_) => Ok(()),
        Err(e)
            if matches!(
                e.code(),
                Some("BucketAlreadyOwnedByYou" | "BucketAlreadyExists")
            ) =>
        {
            Ok(())
        }
        Err(e) => Err(BackendError(format!("create bucket: {}", describe(&e)))),
    }
}

/// The operator's view of the backend: making and removing channel buckets.
#[derive(Clone, Debug)]
pub struct Backend {
    client: Client,
}

impl Backend {
    /// A backend at `endpoint`.
    pub fn new(endpoint: &S3Endpoint) -> Self {
        Self {
            client: client(endpoint, Some(Duration::from_secs(30))),
        }
    }

    /// Creates `bucket` unless it exists, and turns versioning on (again, if someone turned it off).
    pub async fn ensure_bucket(&self, bucket: &str) -> Result<(), BackendError> {
        create_bucket(&self.client, bucket).await?;
        let enabled = self
            .client
            .get_bucket_versioning()
            .bucket(bucket)
            .send()
            .await
            .map_err(|e| BackendError(format!("read versioning: {}", describe(&e))))?
            .status()
            == Some(&BucketVersioningStatus::Enabled);
        if !enabled {
            self.client
                .put_bucket_versioning()
                .bucket(bucket)
                .versioning_configuration(
                    VersioningConfiguration::builder()
                        .status(BucketVersioningStatus::Enabled)
                        .build(),
                )
                .send()
                .await
                .map_err(|e| BackendError(format!("enable versioning: {}", describe(&e))))?;
        }
        Ok(())
    }

    /// Whether the backend answers: a HEAD of `bucket` that gets any answer short of a server error (a 404 for a
    /// bucket that is not there is an answer). A refused connection, a timeout or a 5xx is not.
    pub async fn answers(&self, bucket: &str) -> Result<(), BackendError> {
        match self.client.head_bucket().bucket(bucket).send().await {
            Ok(_) => Ok(()),
            Err(e) => match e.raw_response().map(|r| r.status().as_u16()) {
                Some(status) if status < 500 => Ok(()),
                _ => Err(BackendError(format!("head bucket: {}", describe(&e)))),
            },
        }
    }

    /// Removes `bucket` with every version, delete marker and unfinished upload in it. A bucket that is not
    /// there is already removed.
    pub async fn remove_bucket(&self, bucket: &str) -> Result<(), BackendError> {
        let gone = |e: &dyn ProvideErrorMetadata| e.code() == Some("NoSuchBucket");
        loop {
            let page = match self
                .client
                .list_object_versions()
                .bucket(bucket)
                .max_keys(1000)
                .send()
                .await
            {
                Ok(page) => page,
                Err(e) if gone(&e) => return Ok(()),
                Err(e) => return Err(BackendError(format!("list versions: {}", describe(&e)))),
            };
            let mut ids = Vec::new();
            let versions = page.versions().iter().map(|v| (v.key(), v.version_id()));
            let markers = page
                .delete_markers()
                .iter()
                .map(|m| (m.key(), m.version_id()));
            for (key, version) in versions.chain(markers) {
                if let Some(key) = key {
                    ids.push(
                        ObjectIdentifier::builder()
                            .key(key)
                            .set_version_id(version.map(str::to_owned))
                            .build()
                            .map_err(|e| BackendError(e.to_string()))?,
                    );
                }
            }
            if ids.is_empty() {
                break;
            }
            let delete = Delete::builder()
                .set_objects(Some(ids))
                .quiet(true)
                .build()
                .map_err(|e| BackendError(e.to_string()))?;
            self.client
                .delete_objects()
                .bucket(bucket)
                .delete(delete)
                .send()
                .await
                .map_err(|e| BackendError(format!("delete versions: {}", describe(&e))))?;
        }
        if let Ok(uploads) = self
            .client
            .list_multipart_uploads()
            .bucket(bucket)
            .send()
            .await
        {
            for upload in uploads.uploads() {
                if let (Some(key), Some(id)) = (upload.key(), upload.upload_id()) {
                    let _ = self
                        .client
                        .abort_multipart_upload()
                        .bucket(bucket)
                        .key(key)
                        .upload_id(id)
                        .send()
                        .await;
                }
            }
        }
        match self.client.delete_bucket().bucket(bucket).send().await {
            Ok(_) => Ok(()),
            Err(e) if gone(&e) => Ok(()),
            Err(e) => Err(BackendError(format!("delete bucket: {}", describe(&e)))),
        }
    }
}

/// Longest bucket prefix: bucket names have at most 63 characters and a uid takes 36.
pub const MAX_BUCKET_PREFIX: usize = 63 - 36;

/// Checks a bucket prefix: lowercase letters, digits and `-`, starting with a letter or digit, short enough.
pub fn valid_bucket_prefix(prefix: &str) -> bool {
    prefix.len() <= MAX_BUCKET_PREFIX
        && (prefix.is_empty()
            || prefix.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit()))
        && prefix
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// The backend bucket of the channel with `channel_uid`.
pub fn backend_bucket(prefix: &str, channel_uid: &str) -> String {
    format!("{prefix}{channel_uid}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_s3::error::{ConnectorError, ErrorMetadata};
    use aws_sdk_s3::operation::get_object::GetObjectError;
    use aws_sdk_s3::primitives::SdkBody;

    #[test]
    fn a_store_not_reached_or_failing_on_its_side_is_unavailable_and_a_refusal_is_not() {
        let answer = |status: u16, code: &str| {
            let raw = http::Response::builder()
                .status(status)
                .body(SdkBody::empty())
                .expect("a response");
            SdkError::service_error(
                GetObjectError::generic(ErrorMetadata::builder().code(code).build()),
                HttpResponse::try_from(raw).expect("a response"),
            )
        };
        let unavailable: [SdkError<GetObjectError, HttpResponse>; 4] = [
            SdkError::dispatch_failure(ConnectorError::io("connection refused".into())),
            SdkError::timeout_error("operation timed out"),
            answer(503, "SlowDown"),
            answer(500, "InternalError"),
        ];
        for e in &unavailable {
            assert!(failure("get", e).is::<Unavailable>(), "{e:?}");
        }
        let permanent: [SdkError<GetObjectError, HttpResponse>; 4] = [
            answer(403, "AccessDenied"),
            answer(404, "NoSuchKey"),
            answer(501, "NotImplemented"),
            SdkError::dispatch_failure(ConnectorError::user("invalid TLS configuration".into())),
        ];
        for e in permanent {
            let failed = failure("get", &e);
            assert!(!failed.is::<Unavailable>(), "{e:?}");
            assert!(failed.to_string().contains("get: "), "{failed}");
        }
    }

    #[test]
    fn bucket_prefixes_keep_names_valid() {
        assert!(valid_bucket_prefix("slipway-"));
        assert!(valid_bucket_prefix(""));
        assert!(!valid_bucket_prefix("-x"));
        assert!(!valid_bucket_prefix("Slipway"));
        assert!(!valid_bucket_prefix("a_b"));
        assert!(!valid_bucket_prefix(&"a".repeat(28)));
        let uid = "8d1c3c1e-0000-4000-8000-000000000001";
        assert_eq!(backend_bucket(&"a".repeat(27), uid).len(), 63);
    }
}
