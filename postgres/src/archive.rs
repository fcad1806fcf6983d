//! Where snapshot files live: one unversioned bucket of the object-storage backend that tenants never reach (the
//! gateway serves only channel buckets, named by channel uid), `<prefix>system`, with each file at
//! `postgres/<channel id>/<snapshot id>.dump`, and app exports under `exports/` (the API's exports). Files are
//! streamed in (multipart, a few parts in memory at a time) and out; a file is complete or absent, since a
//! multipart upload shows nothing until it is completed and an abandoned one is aborted: by the upload itself when
//! it fails, else by the API servers' sweep of uploads older than a day (a process killed mid-way, a cancelled
//! checkpoint).

use std::collections::VecDeque;

use aws_sdk_s3::Client;
use aws_sdk_s3::error::ProvideErrorMetadata;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
use bytes::{Bytes, BytesMut};
use futures::{FutureExt, Stream, StreamExt};
use slipway_backends::object_store::{self, S3Endpoint};
use uuid::Uuid;

/// Size of an uploaded part (S3's minimum is 5 MiB for every part but the last).
const PART_BYTES: usize = 8 * 1024 * 1024;
/// Parts uploading at once while the next one is read.
const PARTS_IN_FLIGHT: usize = 2;

/// Size of one ranged read of a download.
const READ_BYTES: u64 = 8 * 1024 * 1024;
/// Ranged reads of a download in flight at once.
const READS_IN_FLIGHT: usize = 4;

/// The whole file's size a `Content-Range` answer names (`bytes 0-8388607/952107008`).
fn full_size(content_range: &str) -> Option<u64> {
    content_range.rsplit_once('/')?.1.parse().ok()
}

/// Every chunk of a ranged read's `body`, as the backend sent them (not copied into one buffer).
async fn chunks_of(mut body: ByteStream) -> std::io::Result<Vec<Bytes>> {
    let mut chunks = Vec::new();
    while let Some(chunk) = body.next().await {
        chunks.push(chunk.map_err(std::io::Error::other)?);
    }
    Ok(chunks)
}

/// Part uploads under way, oldest first; those left when it is dropped (an upload that failed) are cancelled.
struct InFlight(VecDeque<tokio::task::JoinHandle<Result<CompletedPart, ArchiveError>>>);

impl InFlight {
    /// Waits for the oldest part.
    async fn oldest(&mut self) -> Result<CompletedPart, ArchiveError> {
        let Some(task) = self.0.pop_front() else {
            return Err(ArchiveError("no part is uploading".into()));
        };
        task.await
            .map_err(|e| ArchiveError(format!("a part upload stopped: {e}")))?
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// The snapshot bucket.
#[derive(Clone)]
pub struct Archive {
    client: Client,
    bucket: String,
}

impl std::fmt::Debug for Archive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Archive")
            .field("bucket", &self.bucket)
            .finish_non_exhaustive()
    }
}

/// The bucket of platform files beside the channels' buckets (a uid never spells `system`).
pub fn system_bucket(prefix: &str) -> String {
    format!("{prefix}system")
}

/// The key of a snapshot's file.
pub fn object_key(channel_id: Uuid, snapshot_id: Uuid) -> String {
    format!("postgres/{channel_id}/{snapshot_id}.dump")
}

/// A failure of the archive, described.
#[derive(Debug, thiserror::Error)]
#[error("snapshot archive: {0}")]
pub struct ArchiveError(pub String);

fn failed<E: ProvideErrorMetadata + std::error::Error>(what: &str, e: &E) -> ArchiveError {
    ArchiveError(format!("{what}: {}", object_store::describe(e)))
}

impl Archive {
    /// The archive in `bucket` of the backend at `endpoint`.
    pub fn new(endpoint: &S3Endpoint, bucket: String) -> Self {
        Self {
            client: object_store::client(endpoint, None),
            bucket,
        }
    }

    /// Creates the bucket unless it exists.
    pub async fn ensure_bucket(&self) -> Result<(), ArchiveError> {
        object_store::create_bucket(&self.client, &self.bucket)
            .await
            .map_err(|e| ArchiveError(format!("the snapshot bucket: {}", e.0)))
    }

    /// Streams `body` into `key`; the bytes written. A body that ends in an error leaves nothing behind.
    pub async fn upload<S>(&self, key: &str, body: S) -> Result<u64, ArchiveError>
    where
        S: Stream<Item = std::io::Result<Bytes>> + Send,
    {
        let upload = self
            .client
            .create_multipart_upload()
            .bucket(&self.bucket)
            .key(key)
            .content_type("application/octet-stream")
            .send()
            .await
            .map_err(|e| failed("start an upload", &e))?;
        let upload_id = upload
            .upload_id()
            .ok_or_else(|| ArchiveError("the backend gave no upload id".into()))?
            .to_owned();
        match self.upload_parts(key, &upload_id, body).await {
            Ok((parts, written)) => {
                self.client
                    .complete_multipart_upload()
                    .bucket(&self.bucket)
                    .key(key)
                    .upload_id(&upload_id)
                    .multipart_upload(
                        CompletedMultipartUpload::builder()
                            .set_parts(Some(parts))
                            .build(),
                    )
                    .send()
                    .await
                    .map_err(|e| failed("complete the upload", &e))?;
                Ok(written)
            }
            Err(e) => {
                if let Err(abort) = self
                    .client
                    .abort_multipart_upload()
                    .bucket(&self.bucket)
                    .key(key)
                    .upload_id(&upload_id)
                    .send()
                    .await
                {
                    tracing::warn!(key, error = %object_store::describe(&abort), "could not abort a failed upload");
                }
                Err(e)
            }
        }
    }

    /// Uploads `body` as parts of [`PART_BYTES`], up to [`PARTS_IN_FLIGHT`] at once while the next is read (so the
    /// dump never waits for the store); the parts in order and the bytes written.
    async fn upload_parts<S>(
        &self,
        key: &str,
        upload_id: &str,
        body: S,
    ) -> Result<(Vec<CompletedPart>, u64), ArchiveError>
    where
        S: Stream<Item = std::io::Result<Bytes>> + Send,
    {
        let mut in_flight = InFlight(VecDeque::new());
        let mut body = std::pin::pin!(body);
        let mut parts = Vec::new();
        let mut buffer = BytesMut::with_capacity(PART_BYTES);
        let mut written = 0u64;
        let mut started = 0i32;
        loop {
            let chunk = body
                .next()
                .await
                .transpose()
                .map_err(|e| ArchiveError(e.to_string()))?;
            if let Some(chunk) = &chunk {
                buffer.extend_from_slice(chunk);
            }
            // Every part but the last is full; an empty dump is still one (empty) part.
            let last = chunk.is_none();
            if buffer.len() >= PART_BYTES || (last && (!buffer.is_empty() || started == 0)) {
                if in_flight.0.len() >= PARTS_IN_FLIGHT {
                    parts.push(in_flight.oldest().await?);
                }
                let part = buffer.split().freeze();
                written += part.len() as u64;
                started = started
                    .checked_add(1)
                    .ok_or_else(|| ArchiveError("too many parts".into()))?;
                let (client, bucket) = (self.client.clone(), self.bucket.clone());
                let (key, upload_id, number) = (key.to_owned(), upload_id.to_owned(), started);
                in_flight.0.push_back(tokio::spawn(async move {
                    let done = client
                        .upload_part()
                        .bucket(bucket)
                        .key(key)
                        .upload_id(upload_id)
                        .part_number(number)
                        .body(ByteStream::from(part))
                        // The request stays signed, its body not: hashing every part with SHA-256 here and again
                        // in the store took CPU from the dump it runs beside, for nothing TCP does not check.
                        .customize()
                        .disable_payload_signing()
                        .send()
                        .await
                        .map_err(|e| failed("upload a part", &e))?;
                    Ok(CompletedPart::builder()
                        .part_number(number)
                        .set_e_tag(done.e_tag().map(str::to_owned))
                        .build())
                }));
            }
            if last {
                while !in_flight.0.is_empty() {
                    parts.push(in_flight.oldest().await?);
                }
                return Ok((parts, written));
            }
        }
    }

    /// The file at `key`, streamed. It is read in ranges of [`READ_BYTES`], up to [`READS_IN_FLIGHT`] at once
    /// and passed on in order, as `aws s3 cp` reads: one GET at a time left the backend's other core idle while
    /// this side took the bytes. Every range after the first asks `If-Match` the first's ETag, so a file replaced
    /// mid-way fails the read rather than splice two files. At most [`READS_IN_FLIGHT`] ranges are held in memory,
    /// and dropping the stream (a client gone) cancels the reads in flight.
    pub async fn download(
        &self,
        key: &str,
    ) -> Result<impl Stream<Item = std::io::Result<Bytes>> + Send + Unpin + 'static, ArchiveError>
    {
        let first = match self.read(key, 0, None).await {
            Ok(first) => first,
            // An empty file has no first byte to range over.
            Err(e) if e.code() == Some("InvalidRange") => {
                let whole = self
                    .client
                    .get_object()
                    .bucket(&self.bucket)
                    .key(key)
                    .send()
                    .await
                    .map_err(|e| failed("read a snapshot", &e))?;
                return Ok(object_store::body_chunks(whole.body).left_stream());
            }
            Err(e) => return Err(failed("read a snapshot", &e)),
        };
        let size = first
            .content_range()
            .and_then(full_size)
            .or_else(|| first.content_length().and_then(|n| u64::try_from(n).ok()))
            .ok_or_else(|| ArchiveError("the backend gave no size of the file".into()))?;
        let etag = first.e_tag().map(str::to_owned);
        let (this, key) = (self.clone(), key.to_owned());
        let ranges = (READ_BYTES..size)
            .step_by(READ_BYTES as usize)
            .map(move |start| {
                let (this, key, etag) = (this.clone(), key.clone(), etag.clone());
                async move {
                    let range = this
                        .read(&key, start, etag)
                        .await
                        .map_err(|e| std::io::Error::other(failed("read a snapshot", &e)))?;
                    Ok::<_, std::io::Error>(range.body)
                }
                .boxed()
            });
        let reads = futures::stream::iter(
            std::iter::once(futures::future::ready(Ok(first.body)).boxed()).chain(ranges),
        )
        .map(|read| {
            tokio_util::task::AbortOnDropHandle::new(tokio::spawn(async move {
                chunks_of(read.await?).await
            }))
        })
        .buffered(READS_IN_FLIGHT)
        .map(|done| done.unwrap_or_else(|e| Err(std::io::Error::other(e))))
        .flat_map(|chunks| match chunks {
            Ok(chunks) => futures::stream::iter(chunks.into_iter().map(Ok)).left_stream(),
            Err(e) => futures::stream::once(futures::future::ready(Err(e))).right_stream(),
        });
        Ok(Box::pin(reads).right_stream())
    }

    /// The range of `key` of [`READ_BYTES`] from `start`, if the file's ETag is still `etag`.
    async fn read(
        &self,
        key: &str,
        start: u64,
        etag: Option<String>,
    ) -> Result<
        aws_sdk_s3::operation::get_object::GetObjectOutput,
        aws_sdk_s3::error::SdkError<aws_sdk_s3::operation::get_object::GetObjectError>,
    > {
        self.client
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .range(format!("bytes={start}-{}", start + READ_BYTES - 1))
            .set_if_match(etag)
            .send()
            .await
    }

    /// Removes every file whose key starts with `prefix` (an export's archive and its staged parts).
    pub async fn delete_prefix(&self, prefix: &str) -> Result<(), ArchiveError> {
        let mut token = None::<String>;
        loop {
            let page = self
                .client
                .list_objects_v2()
                .bucket(&self.bucket)
                .prefix(prefix)
                .set_continuation_token(token.clone())
                .send()
                .await
                .map_err(|e| failed("list files", &e))?;
            for object in page.contents() {
                if let Some(key) = object.key() {
                    self.delete(key).await?;
                }
            }
            token = page.next_continuation_token().map(str::to_owned);
            if token.is_none() {
                return Ok(());
            }
        }
    }

    /// Aborts every multipart upload started more than `older_than` ago: those of uploads whose process died or
    /// whose work was cancelled mid-way (a clean failure aborts its own). Their parts are invisible but take space.
    /// The uploads aborted.
    pub async fn abort_stale_uploads(
        &self,
        older_than: std::time::Duration,
    ) -> Result<usize, ArchiveError> {
        let before = std::time::SystemTime::now() - older_than;
        object_store::abort_uploads_before(&self.client, &self.bucket, before)
            .await
            .map_err(|e| ArchiveError(format!("{e:#}")))
    }

    /// Removes the file at `key` (gone already is fine).
    pub async fn delete(&self, key: &str) -> Result<(), ArchiveError> {
        self.client
            .delete_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .map(|_| ())
            .map_err(|e| failed("delete a snapshot", &e))
    }
}
