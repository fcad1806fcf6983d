//! The S3 service tenants talk to (`slipway s3`): an [`s3s`] service that checks each request's SigV4 signature
//! (header or presigned URL) against the key pair of the channel whose access key signed it, maps the channel's
//! virtual bucket onto its backend bucket, and forwards to the backend ([`s3s_aws::Proxy`]). It keeps the rules
//! of the hosting API:
//!
//! - a key reaches only its own channel's bucket: any other bucket name answers 404 `NoSuchBucket`, exactly as a
//!   bucket that does not exist;
//! - versioning stays on: a client may turn it on (a no-op) but not suspend it;
//! - every stored version counts against the owner's byte quota, and a write that would pass it answers 507
//!   before any byte reaches the backend (see [`super::store`] for how concurrent writes are kept honest).
//!
//! Only the operations ordinary clients (aws-sdk-s3, boto3, the aws CLI, rclone) use are served; the rest answer
//! `NotImplemented`, so nothing a tenant sends reaches the backend unchecked.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::StatusCode;
use s3s::auth::{S3Auth, SecretKey};
use s3s::dto::*;
use s3s::{S3, S3Error, S3ErrorCode, S3Request, S3Response, S3Result, s3_error};
use slipway_crds::plans::Plan;
use sqlx::PgPool;
use uuid::Uuid;

use super::store::{self, Reserved};
use crate::env::crypto::Keyring;

/// How long a looked-up key pair is trusted before it is read again (a deleted channel's key stops working
/// within this time; a plan change applies within it).
pub const STORE_CACHE_TTL: Duration = Duration::from_secs(30);

/// What the gateway knows of the channel a request is signed for.
#[derive(Debug)]
pub struct Tenant {
    /// The channel's id.
    pub channel_id: Uuid,
    /// The bucket name the client uses.
    pub virtual_bucket: String,
    /// The bucket on the backend.
    pub backend_bucket: String,
    /// The owner's byte quota (-1: unlimited).
    pub byte_limit: i64,
    /// When the store was made (the bucket's creation date).
    pub created_at: chrono::DateTime<chrono::Utc>,
    secret: String,
}

/// Most lookups kept (unknown keys are cached too, so a client retrying a bad key costs one read per TTL).
const MAX_CACHED: usize = 100_000;

/// A cached lookup: when it was made and what it found.
type Cached = (Instant, Option<Arc<Tenant>>);

/// Stores by access key, read from the platform database and cached for [`STORE_CACHE_TTL`].
pub struct Tenants {
    db: PgPool,
    ring: Keyring,
    cache: Mutex<HashMap<String, Cached>>,
}

fn unavailable(e: impl std::fmt::Display) -> S3Error {
    tracing::warn!(error = %e, "platform database unavailable");
    let mut err = s3_error!(
        ServiceUnavailable,
        "object storage is unavailable; try again"
    );
    err.set_status_code(StatusCode::SERVICE_UNAVAILABLE);
    err
}

impl Tenants {
    /// Stores of `db`, whose secrets open with `ring`.
    pub fn new(db: PgPool, ring: Keyring) -> Self {
        Self {
            db,
            ring,
            cache: Mutex::default(),
        }
    }

    /// The platform database.
    pub fn db(&self) -> &PgPool {
        &self.db
    }

    /// The channel `access_key` belongs to, if any.
    pub async fn get(&self, access_key: &str) -> S3Result<Option<Arc<Tenant>>> {
        {
            let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((at, tenant)) = cache.get(access_key)
                && at.elapsed() < STORE_CACHE_TTL
            {
                return Ok(tenant.clone());
            }
        }
        let found = store::by_access_key(&self.db, access_key)
            .await
            .map_err(unavailable)?;
        let tenant = match found {
            Some((row, plan)) => {
                let secret = row.secret(&self.ring).map_err(|e| {
                    tracing::error!(channel_id = %row.channel_id, error = %e, "a store's secret does not open");
                    s3_error!(InternalError)
                })?;
                let byte_limit = plan
                    .as_deref()
                    .and_then(Plan::by_tier)
                    // An owner without an account (or an unknown plan) gets nothing more stored.
                    .map_or(0, |p| p.blob_storage_bytes);
                Some(Arc::new(Tenant {
                    channel_id: row.channel_id,
                    virtual_bucket: row.virtual_bucket,
                    backend_bucket: row.backend_bucket,
                    byte_limit,
                    created_at: row.created_at,
                    secret,
                }))
            }
            None => None,
        };
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() > MAX_CACHED {
            cache.retain(|_, (at, _)| at.elapsed() < STORE_CACHE_TTL);
            if cache.len() > MAX_CACHED {
                // A flood of made-up keys: forget them all rather than grow.
                cache.clear();
            }
        }
        cache.insert(access_key.to_owned(), (Instant::now(), tenant.clone()));
        Ok(tenant)
    }
}

/// SigV4 secrets of channels, for s3s's signature checks.
pub struct ChannelKeys(pub Arc<Tenants>);

#[async_trait::async_trait]
impl S3Auth for ChannelKeys {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        match self.0.get(access_key).await? {
            Some(tenant) => Ok(SecretKey::from(tenant.secret.as_str())),
            None => Err(s3_error!(
                InvalidAccessKeyId,
                "the access key does not name a channel's store"
            )),
        }
    }
}

/// The gateway's S3 implementation.
pub struct Gateway {
    proxy: s3s_aws::Proxy,
    backend: aws_sdk_s3::Client,
    tenants: Arc<Tenants>,
}

fn no_such_bucket(bucket: &str) -> S3Error {
    s3_error!(NoSuchBucket, "the bucket {bucket} does not exist")
}

fn over_quota(tenant: &Tenant) -> S3Error {
    let mut err = S3Error::with_message(
        S3ErrorCode::Custom("QuotaExceeded".into()),
        format!(
            "this write would pass the account's object storage quota of {} bytes (every stored version counts)",
            tenant.byte_limit
        ),
    );
    err.set_status_code(StatusCode::INSUFFICIENT_STORAGE);
    err
}

/// Size of `bytes=first-last` (a copy source range).
fn range_len(range: &str) -> Option<i64> {
    let (first, last) = range.strip_prefix("bytes=")?.split_once('-')?;
    let (first, last): (i64, i64) = (first.trim().parse().ok()?, last.trim().parse().ok()?);
    (last >= first).then_some(last - first + 1)
}

/// A write's reservation: settled with its real size when the backend accepted it, released otherwise.
struct Pending<'a> {
    db: &'a PgPool,
    id: Uuid,
    channel_id: Uuid,
}

impl Pending<'_> {
    async fn release(self) {
        if let Err(e) = store::release(self.db, self.id).await {
            tracing::warn!(error = %e, "could not release a reservation; it expires by itself");
        }
    }
}

fn settle_failed(e: sqlx::Error) {
    // The object is stored; only its count is behind, which the next recount corrects.
    tracing::warn!(error = %e, "could not count a write; the recount will");
}

impl Gateway {
    /// A gateway forwarding to `backend` for the channels in `tenants`.
    pub fn new(backend: aws_sdk_s3::Client, tenants: Arc<Tenants>) -> Self {
        Self {
            proxy: s3s_aws::Proxy::from(backend.clone()),
            backend,
            tenants,
        }
    }

    /// The channel that signed `req`.
    async fn tenant<T>(&self, req: &S3Request<T>) -> S3Result<Arc<Tenant>> {
        let credentials = req.credentials.as_ref().ok_or_else(|| {
            s3_error!(
                AccessDenied,
                "requests must be signed with the channel's key pair"
            )
        })?;
        self.tenants
            .get(&credentials.access_key)
            .await?
            .ok_or_else(|| s3_error!(InvalidAccessKeyId))
    }

    /// Checks that `bucket` is the tenant's own and names its backend bucket instead.
    fn enter(tenant: &Tenant, bucket: &mut String) -> S3Result<()> {
        if *bucket != tenant.virtual_bucket {
            return Err(no_such_bucket(bucket));
        }
        bucket.clone_from(&tenant.backend_bucket);
        Ok(())
    }

    /// The tenant of `req`, with the bucket `field` picks rewritten to the backend's.
    async fn route<T>(
        &self,
        req: &mut S3Request<T>,
        field: impl FnOnce(&mut T) -> &mut String,
    ) -> S3Result<Arc<Tenant>> {
        let tenant = self.tenant(req).await?;
        Self::enter(&tenant, field(&mut req.input))?;
        Ok(tenant)
    }

    /// The copy source as the backend names it, checked to be the tenant's own bucket.
    fn enter_source(
        tenant: &Tenant,
        source: &mut CopySource,
    ) -> S3Result<(String, Option<String>)> {
        match source {
            CopySource::Bucket {
                bucket,
                key,
                version_id,
            } => {
                if **bucket != *tenant.virtual_bucket {
                    return Err(no_such_bucket(bucket));
                }
                *bucket = tenant.backend_bucket.clone().into_boxed_str();
                Ok((key.to_string(), version_id.as_deref().map(str::to_owned)))
            }
            _ => Err(s3_error!(
                NotImplemented,
                "copy sources are buckets of this service"
            )),
        }
    }

    /// Bytes of a stored version (0 for a delete marker or when it cannot be read).
    async fn stored_size(&self, bucket: &str, key: &str, version: Option<&str>) -> i64 {
        self.backend
            .head_object()
            .bucket(bucket)
            .key(key)
            .set_version_id(version.map(str::to_owned))
            .send()
            .await
            .ok()
            .and_then(|h| h.content_length())
            .unwrap_or(0)
    }

    /// Reserves `bytes` for a write of `tenant`, or refuses it with 507.
    async fn reserve(&self, tenant: &Tenant, bytes: i64) -> S3Result<Pending<'_>> {
        let id = Uuid::new_v4();
        let db = self.tenants.db();
        match store::reserve(db, id, tenant.channel_id, bytes, tenant.byte_limit)
            .await
            .map_err(unavailable)?
        {
            Reserved::Ok => Ok(Pending {
                db,
                id,
                channel_id: tenant.channel_id,
            }),
            Reserved::OverQuota => Err(over_quota(tenant)),
            Reserved::Gone => Err(no_such_bucket(&tenant.virtual_bucket)),
        }
    }

    /// Reserves `bytes`, then forwards through `send`, which answers the output and how the stored bytes moved;
    /// the move is counted when it succeeds, the reservation released when it fails.
    async fn counted<O>(
        &self,
        tenant: &Tenant,
        bytes: i64,
        send: impl Future<Output = S3Result<(O, Settlement)>>,
    ) -> S3Result<O> {
        let pending = self.reserve(tenant, bytes).await?;
        let (db, id, channel) = (pending.db, pending.id, pending.channel_id);
        match send.await {
            Ok((out, settlement)) => {
                let settled = match settlement {
                    Settlement::Delta(delta) => store::settle(db, id, channel, delta).await,
                    Settlement::Part {
                        upload_id,
                        part_number,
                        bytes,
                    } => store::settle_part(db, id, channel, &upload_id, part_number, bytes).await,
                    Settlement::Upload {
                        upload_id,
                        object_bytes,
                    } => store::settle_upload(db, id, channel, &upload_id, object_bytes).await,
                };
                settled.unwrap_or_else(settle_failed);
                Ok(out)
            }
            Err(e) => {
                pending.release().await;
                Err(e)
            }
        }
    }
}

/// How a write that went through moves the stored bytes.
enum Settlement {
    /// By this many bytes.
    Delta(i64),
    /// A part of an upload was stored (replacing one of the same number).
    Part {
        upload_id: String,
        part_number: i32,
        bytes: i64,
    },
    /// An upload ended: completed as an object of `object_bytes` (`None`: as big as its parts), or aborted
    /// (`Some(0)`).
    Upload {
        upload_id: String,
        object_bytes: Option<i64>,
    },
}

/// Names the tenant's virtual bucket where an answer would name the backend's.
fn virtual_name(name: &mut Option<String>, tenant: &Tenant) {
    if name.is_some() {
        *name = Some(tenant.virtual_bucket.clone());
    }
}

/// The gateway's `S3` implementation: the operations that only move the bucket name (`forward`), those whose
/// answer names the bucket too (`rename`: the answer's field gets the virtual name back), and the rest written
/// out after them.
macro_rules! s3_impl {
    (
        forward: [$($fwd:ident($fin:ident) -> $fout:ident),* $(,)?],
        rename: [$($ren:ident($rin:ident) -> $rout:ident . $field:ident),* $(,)?],
        $($custom:tt)*
    ) => {
        #[async_trait::async_trait]
        impl S3 for Gateway {
            $(
                async fn $fwd(&self, mut req: S3Request<$fin>) -> S3Result<S3Response<$fout>> {
                    self.route(&mut req, |i| &mut i.bucket).await?;
                    self.proxy.$fwd(req).await
                }
            )*
            $(
                async fn $ren(&self, mut req: S3Request<$rin>) -> S3Result<S3Response<$rout>> {
                    let tenant = self.route(&mut req, |i| &mut i.bucket).await?;
                    let mut res = self.proxy.$ren(req).await?;
                    virtual_name(&mut res.output.$field, &tenant);
                    Ok(res)
                }
            )*
            $($custom)*
        }
    };
}

s3_impl! {
    forward: [
        head_bucket(HeadBucketInput) -> HeadBucketOutput,
        get_bucket_versioning(GetBucketVersioningInput) -> GetBucketVersioningOutput,
        head_object(HeadObjectInput) -> HeadObjectOutput,
        get_object(GetObjectInput) -> GetObjectOutput,
        get_object_tagging(GetObjectTaggingInput) -> GetObjectTaggingOutput,
        put_object_tagging(PutObjectTaggingInput) -> PutObjectTaggingOutput,
        delete_object_tagging(DeleteObjectTaggingInput) -> DeleteObjectTaggingOutput,
    ],
    rename: [
        list_objects(ListObjectsInput) -> ListObjectsOutput.name,
        list_objects_v2(ListObjectsV2Input) -> ListObjectsV2Output.name,
        list_object_versions(ListObjectVersionsInput) -> ListObjectVersionsOutput.name,
        create_multipart_upload(CreateMultipartUploadInput) -> CreateMultipartUploadOutput.bucket,
        list_parts(ListPartsInput) -> ListPartsOutput.bucket,
        list_multipart_uploads(ListMultipartUploadsInput) -> ListMultipartUploadsOutput.bucket,
    ],

    async fn list_buckets(
        &self,
        req: S3Request<ListBucketsInput>,
    ) -> S3Result<S3Response<ListBucketsOutput>> {
        let tenant = self.tenant(&req).await?;
        let bucket = Bucket {
            name: Some(tenant.virtual_bucket.clone()),
            creation_date: Some(Timestamp::from(std::time::SystemTime::from(
                tenant.created_at,
            ))),
            bucket_region: Some(slipway_controllers::blob::backend::REGION.into()),
        };
        Ok(S3Response::new(ListBucketsOutput {
            buckets: Some(vec![bucket]),
            ..Default::default()
        }))
    }

    async fn create_bucket(
        &self,
        req: S3Request<CreateBucketInput>,
    ) -> S3Result<S3Response<CreateBucketOutput>> {
        let tenant = self.tenant(&req).await?;
        if req.input.bucket == tenant.virtual_bucket {
            return Err(s3_error!(
                BucketAlreadyOwnedByYou,
                "the channel's bucket exists already"
            ));
        }
        Err(s3_error!(
            AccessDenied,
            "a channel has exactly one bucket, made with the channel"
        ))
    }

    async fn delete_bucket(
        &self,
        req: S3Request<DeleteBucketInput>,
    ) -> S3Result<S3Response<DeleteBucketOutput>> {
        let tenant = self.tenant(&req).await?;
        if req.input.bucket != tenant.virtual_bucket {
            return Err(no_such_bucket(&req.input.bucket));
        }
        Err(s3_error!(
            AccessDenied,
            "the channel's bucket is removed with the channel"
        ))
    }

    async fn get_bucket_location(
        &self,
        req: S3Request<GetBucketLocationInput>,
    ) -> S3Result<S3Response<GetBucketLocationOutput>> {
        let tenant = self.tenant(&req).await?;
        if req.input.bucket != tenant.virtual_bucket {
            return Err(no_such_bucket(&req.input.bucket));
        }
        // us-east-1 is the null location constraint.
        Ok(S3Response::new(GetBucketLocationOutput::default()))
    }

    async fn put_bucket_versioning(
        &self,
        req: S3Request<PutBucketVersioningInput>,
    ) -> S3Result<S3Response<PutBucketVersioningOutput>> {
        let tenant = self.tenant(&req).await?;
        if req.input.bucket != tenant.virtual_bucket {
            return Err(no_such_bucket(&req.input.bucket));
        }
        let wanted = req.input.versioning_configuration.status.as_ref();
        if wanted.is_some_and(|s| s.as_str() == BucketVersioningStatus::ENABLED) {
            // Already on: nothing to change.
            return Ok(S3Response::new(PutBucketVersioningOutput::default()));
        }
        Err(s3_error!(
            AccessDenied,
            "versioning is always on for a channel's bucket and cannot be suspended"
        ))
    }

    async fn put_object(
        &self,
        mut req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        let tenant = self.route(&mut req, |i| &mut i.bucket).await?;
        let bytes = req
            .input
            .content_length
            .ok_or_else(|| s3_error!(MissingContentLength))?;
        self.counted(&tenant, bytes, async {
            Ok((self.proxy.put_object(req).await?, Settlement::Delta(bytes)))
        })
        .await
    }

    async fn copy_object(
        &self,
        mut req: S3Request<CopyObjectInput>,
    ) -> S3Result<S3Response<CopyObjectOutput>> {
        let tenant = self.route(&mut req, |i| &mut i.bucket).await?;
        let (key, version) = Self::enter_source(&tenant, &mut req.input.copy_source)?;
        let bytes = self
            .stored_size(&tenant.backend_bucket, &key, version.as_deref())
            .await;
        self.counted(&tenant, bytes, async {
            Ok((self.proxy.copy_object(req).await?, Settlement::Delta(bytes)))
        })
        .await
    }

    async fn delete_object(
        &self,
        mut req: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        let tenant = self.route(&mut req, |i| &mut i.bucket).await?;
        let Some(version) = req.input.version_id.clone() else {
            // Without a version a delete adds a marker: nothing stored goes away.
            return self.proxy.delete_object(req).await;
        };
        let bytes = self
            .stored_size(&tenant.backend_bucket, &req.input.key, Some(&version))
            .await;
        self.counted(&tenant, 0, async {
            Ok((self.proxy.delete_object(req).await?, Settlement::Delta(-bytes)))
        })
        .await
    }

    async fn delete_objects(
        &self,
        mut req: S3Request<DeleteObjectsInput>,
    ) -> S3Result<S3Response<DeleteObjectsOutput>> {
        let tenant = self.route(&mut req, |i| &mut i.bucket).await?;
        let mut sizes: HashMap<(String, String), i64> = HashMap::new();
        for object in &req.input.delete.objects {
            if let Some(version) = &object.version_id {
                let size = self
                    .stored_size(&tenant.backend_bucket, &object.key, Some(version))
                    .await;
                sizes.insert((object.key.clone(), version.clone()), size);
            }
        }
        self.counted(&tenant, 0, async {
            let res = self.proxy.delete_objects(req).await?;
            let freed: i64 = res
                .output
                .deleted
                .iter()
                .flatten()
                .filter_map(|d| sizes.get(&(d.key.clone()?, d.version_id.clone()?)).copied())
                .sum();
            Ok((res, Settlement::Delta(-freed)))
        })
        .await
    }

    async fn upload_part(
        &self,
        mut req: S3Request<UploadPartInput>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        let tenant = self.route(&mut req, |i| &mut i.bucket).await?;
        let bytes = req
            .input
            .content_length
            .ok_or_else(|| s3_error!(MissingContentLength))?;
        let (upload_id, part_number) = (req.input.upload_id.clone(), req.input.part_number);
        self.counted(&tenant, bytes, async {
            let res = self.proxy.upload_part(req).await?;
            Ok((res, Settlement::Part { upload_id, part_number, bytes }))
        })
        .await
    }

    async fn upload_part_copy(
        &self,
        mut req: S3Request<UploadPartCopyInput>,
    ) -> S3Result<S3Response<UploadPartCopyOutput>> {
        let tenant = self.route(&mut req, |i| &mut i.bucket).await?;
        let (key, version) = Self::enter_source(&tenant, &mut req.input.copy_source)?;
        let bytes = match req.input.copy_source_range.as_deref().and_then(range_len) {
            Some(bytes) => bytes,
            None => {
                self.stored_size(&tenant.backend_bucket, &key, version.as_deref())
                    .await
            }
        };
        let (upload_id, part_number) = (req.input.upload_id.clone(), req.input.part_number);
        self.counted(&tenant, bytes, async {
            let res = self.proxy.upload_part_copy(req).await?;
            Ok((res, Settlement::Part { upload_id, part_number, bytes }))
        })
        .await
    }

    async fn complete_multipart_upload(
        &self,
        mut req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        let tenant = self.route(&mut req, |i| &mut i.bucket).await?;
        let (key, upload_id) = (req.input.key.clone(), req.input.upload_id.clone());
        self.counted(&tenant, 0, async {
            let mut res = self.proxy.complete_multipart_upload(req).await?;
            let object_bytes = self
                .backend
                .head_object()
                .bucket(&tenant.backend_bucket)
                .key(&key)
                .set_version_id(res.output.version_id.clone())
                .send()
                .await
                .ok()
                .and_then(|h| h.content_length());
            virtual_name(&mut res.output.bucket, &tenant);
            res.output.location = None;
            Ok((res, Settlement::Upload { upload_id, object_bytes }))
        })
        .await
    }

    async fn abort_multipart_upload(
        &self,
        mut req: S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        let tenant = self.route(&mut req, |i| &mut i.bucket).await?;
        let upload_id = req.input.upload_id.clone();
        // An upload the backend no longer knows is gone all the same: its parts stop counting.
        self.counted(&tenant, 0, async {
            let gone = Settlement::Upload {
                upload_id,
                object_bytes: Some(0),
            };
            match self.proxy.abort_multipart_upload(req).await {
                Ok(res) => Ok((Ok(res), gone)),
                Err(e) if *e.code() == S3ErrorCode::NoSuchUpload => Ok((Err(e), gone)),
                Err(e) => Err(e),
            }
        })
        .await?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_ranges_count_their_bytes() {
        assert_eq!(range_len("bytes=0-9"), Some(10));
        assert_eq!(range_len("bytes=5-5"), Some(1));
        assert_eq!(range_len("bytes=9-0"), None);
        assert_eq!(range_len("0-9"), None);
        assert_eq!(range_len("bytes=a-9"), None);
    }
}
