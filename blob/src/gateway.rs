//! The S3 service tenants talk to (`slipway s3`): an [`s3s`] service that checks each request's SigV4 signature
//! (header or presigned URL) against the key pair of the channel whose access key signed it ([`super::tenants`]),
//! maps the channel's virtual bucket onto its backend bucket, and forwards to the backend: plain GETs, HEADs and
//! PUTs of objects as they came ([`super::forward`]), every other operation through s3s's typed operations and
//! the AWS SDK ([`s3s_aws::Proxy`], here). It keeps the rules of the hosting API:
//!
//! - a key reaches only its own channel's bucket: any other bucket name answers 404 `NoSuchBucket`, exactly as a
//!   bucket that does not exist;
//! - versioning stays on: a client may turn it on (a no-op) but not suspend it;
//! - every stored version counts against the owner's byte quota, and a write that would pass it answers 507
//!   before any byte reaches the backend (see [`super::quota`] and [`super::store`] for how concurrent writes are
//!   kept honest).
//!
//! Only the operations ordinary clients (aws-sdk-s3, boto3, the aws CLI, rclone) use are served; the rest answer
//! `NotImplemented`, so nothing a tenant sends reaches the backend unchecked.

use std::collections::HashMap;
use std::sync::Arc;

use s3s::dto::*;
use s3s::{S3, S3ErrorCode, S3Request, S3Response, S3Result, s3_error};

use super::quota::{Quota, Settlement, Stored};
use super::tenants::{Tenant, Tenants, no_such_bucket};

/// The gateway's S3 implementation.
pub struct Gateway {
    proxy: s3s_aws::Proxy,
    backend: aws_sdk_s3::Client,
    tenants: Arc<Tenants>,
    quota: Quota,
}

/// Size of `bytes=first-last` (a copy source range).
fn range_len(range: &str) -> Option<i64> {
    let (first, last) = range.strip_prefix("bytes=")?.split_once('-')?;
    let (first, last): (i64, i64) = (first.trim().parse().ok()?, last.trim().parse().ok()?);
    (last >= first).then_some(last - first + 1)
}

impl Gateway {
    /// A gateway forwarding to `backend` for the channels in `tenants`, counting writes in `quota`.
    pub fn new(backend: aws_sdk_s3::Client, tenants: Arc<Tenants>, quota: Quota) -> Self {
        Self {
            proxy: s3s_aws::Proxy::from(backend.clone()),
            backend,
            tenants,
            quota,
        }
    }

    /// The channel that signed `req`.
    async fn tenant<T>(&self, req: &S3Request<T>) -> S3Result<Arc<Tenant>> {
        self.tenants.signer(req.credentials.as_ref()).await
    }

    /// The tenant of `req`, with the bucket `field` picks rewritten to the backend's.
    async fn route<T>(
        &self,
        req: &mut S3Request<T>,
        field: impl FnOnce(&mut T) -> &mut String,
    ) -> S3Result<Arc<Tenant>> {
        let tenant = self.tenant(req).await?;
        tenant.enter(field(&mut req.input))?;
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
        self.head(bucket, key, version).await.bytes()
    }

    /// A HEAD of `key` (at `version`): its bytes, or that the backend answered 404.
    async fn head(&self, bucket: &str, key: &str, version: Option<&str>) -> Stored {
        let answer = self
            .backend
            .head_object()
            .bucket(bucket)
            .key(key)
            .set_version_id(version.map(str::to_owned))
            .send()
            .await;
        match answer {
            Ok(head) => Stored::Bytes(head.content_length().unwrap_or(0)),
            Err(e) if e.raw_response().map(|r| r.status().as_u16()) == Some(404) => Stored::Gone,
            Err(_) => Stored::Bytes(0),
        }
    }
}

/// The length of a write's object bytes, put into its input (`content_length`) for the backend: the
/// `Content-Length` it came with, or for an aws-chunked body sent without one (boto3 and the aws CLI over HTTPS
/// stream with `Transfer-Encoding: chunked` and a trailing checksum) the `x-amz-decoded-content-length` it
/// declares, which s3s holds the decoded body to. A write with neither is refused 411, as S3 does.
fn body_length(headers: &http::HeaderMap, content_length: &mut Option<i64>) -> S3Result<i64> {
    let declared = || {
        headers
            .get("x-amz-decoded-content-length")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<i64>().ok())
            .filter(|n| *n >= 0)
    };
    let bytes = content_length
        .or_else(declared)
        .ok_or_else(|| s3_error!(MissingContentLength))?;
    *content_length = Some(bytes);
    Ok(bytes)
}

/// Leaves out the checksum algorithm of a write whose checksum comes in the aws-chunked body's trailer
/// (`x-amz-trailer`), on this path only: s3s decodes that body and the SDK sends the backend the plain bytes, so
/// naming an algorithm with no checksum beside it would make the backend refuse the write. Such writes take the
/// lean path ([`super::forward`]), which sends the trailer on, whenever the backend is reached over HTTP; for a
/// backend over HTTPS a single PUT is stored without the client's checksum, and a part of an upload created with
/// a checksum algorithm is still refused by the backend.
fn checksum_sent_later(headers: &http::HeaderMap, algorithm: &mut Option<ChecksumAlgorithm>) {
    if headers.contains_key("x-amz-trailer") {
        *algorithm = None;
    }
}

/// The attributes a GetObjectAttributes asks for, one a name: s3s reads the `x-amz-object-attributes` header
/// (`ETag,ObjectSize`) as one value, which the SDK would send on quoted, as a single unknown name.
fn attribute_names(asked: &[ObjectAttributes]) -> Vec<ObjectAttributes> {
    asked
        .iter()
        .flat_map(|a| a.as_str().split(','))
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .map(|name| ObjectAttributes::from(name.to_owned()))
        .collect()
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
        list_object_versions(ListObjectVersionsInput) -> ListObjectVersionsOutput.name,
        create_multipart_upload(CreateMultipartUploadInput) -> CreateMultipartUploadOutput.bucket,
        list_parts(ListPartsInput) -> ListPartsOutput.bucket,
        list_multipart_uploads(ListMultipartUploadsInput) -> ListMultipartUploadsOutput.bucket,
    ],

    async fn get_object_attributes(
        &self,
        mut req: S3Request<GetObjectAttributesInput>,
    ) -> S3Result<S3Response<GetObjectAttributesOutput>> {
        self.route(&mut req, |i| &mut i.bucket).await?;
        req.input.object_attributes = attribute_names(&req.input.object_attributes);
        self.proxy.get_object_attributes(req).await
    }

    async fn list_objects(
        &self,
        mut req: S3Request<ListObjectsInput>,
    ) -> S3Result<S3Response<ListObjectsOutput>> {
        let tenant = self.route(&mut req, |i| &mut i.bucket).await?;
        let (prefix, marker) = (req.input.prefix.clone(), req.input.marker.clone());
        let mut res = self.proxy.list_objects(req).await?;
        let out = &mut res.output;
        virtual_name(&mut out.name, &tenant);
        // S3 names the prefix and marker it listed from, empty ones too; the backend may leave them out.
        out.prefix = out.prefix.take().or(prefix).or_else(|| Some(String::new()));
        out.marker = out.marker.take().or(marker).or_else(|| Some(String::new()));
        Ok(res)
    }

    async fn list_objects_v2(
        &self,
        mut req: S3Request<ListObjectsV2Input>,
    ) -> S3Result<S3Response<ListObjectsV2Output>> {
        let tenant = self.route(&mut req, |i| &mut i.bucket).await?;
        let (prefix, token) = (req.input.prefix.clone(), req.input.continuation_token.clone());
        let mut res = self.proxy.list_objects_v2(req).await?;
        let out = &mut res.output;
        virtual_name(&mut out.name, &tenant);
        // As above: the prefix always, and the continuation token the client sent, even an empty one.
        out.prefix = out.prefix.take().or(prefix).or_else(|| Some(String::new()));
        out.continuation_token = out.continuation_token.take().or(token);
        Ok(res)
    }

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
            bucket_region: Some(slipway_backends::object_store::REGION.into()),
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
        let bytes = body_length(&req.headers, &mut req.input.content_length)?;
        checksum_sent_later(&req.headers, &mut req.input.checksum_algorithm);
        self.quota
            .write(&tenant, bytes, self.proxy.put_object(req))
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
        self.quota
            .write(&tenant, bytes, self.proxy.copy_object(req))
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
        let key = req.input.key.clone();
        self.quota
            .freeing(&tenant, &[&key], async {
                let stored = self
                    .head(&tenant.backend_bucket, &key, Some(&version))
                    .await;
                let res = match self.proxy.delete_object(req).await {
                    Err(e) if stored.already_deleted(&e) => S3Response::new(DeleteObjectOutput {
                        version_id: Some(version),
                        ..Default::default()
                    }),
                    answer => answer?,
                };
                Ok((res, Settlement::Delta(-stored.bytes())))
            })
            .await
    }

    async fn delete_objects(
        &self,
        mut req: S3Request<DeleteObjectsInput>,
    ) -> S3Result<S3Response<DeleteObjectsOutput>> {
        let tenant = self.route(&mut req, |i| &mut i.bucket).await?;
        let versioned: Vec<(String, String)> = req
            .input
            .delete
            .objects
            .iter()
            .filter_map(|o| Some((o.key.clone(), o.version_id.clone()?)))
            .collect();
        if versioned.is_empty() {
            // Markers only: nothing stored goes away.
            return self.proxy.delete_objects(req).await;
        }
        let keys: Vec<&str> = versioned.iter().map(|(key, _)| key.as_str()).collect();
        self.quota
            .freeing(&tenant, &keys, async {
                let mut sizes: HashMap<&(String, String), i64> = HashMap::new();
                for object in &versioned {
                    let (key, version) = object;
                    let size = self
                        .stored_size(&tenant.backend_bucket, key, Some(version))
                        .await;
                    sizes.insert(object, size);
                }
                let res = self.proxy.delete_objects(req).await?;
                // A version the request names twice is freed once.
                let freed: i64 = res
                    .output
                    .deleted
                    .iter()
                    .flatten()
                    .filter_map(|d| {
                        let deleted = (d.key.clone()?, d.version_id.clone()?);
                        sizes.remove(&deleted)
                    })
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
        let bytes = body_length(&req.headers, &mut req.input.content_length)?;
        checksum_sent_later(&req.headers, &mut req.input.checksum_algorithm);
        let (upload_id, part_number) = (req.input.upload_id.clone(), req.input.part_number);
        self.quota.counted(&tenant, bytes, async {
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
        self.quota.counted(&tenant, bytes, async {
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
        self.quota.counted(&tenant, 0, async {
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
        self.quota.counted(&tenant, 0, async {
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
    fn a_write_is_as_long_as_its_content_length_or_its_declared_decoded_length() {
        let mut headers = http::HeaderMap::new();
        let mut length = Some(7);
        assert_eq!(body_length(&headers, &mut length).unwrap(), 7);
        let mut length = None;
        let err = body_length(&headers, &mut length).unwrap_err();
        assert_eq!(*err.code(), S3ErrorCode::MissingContentLength);
        headers.insert("x-amz-decoded-content-length", "12".parse().unwrap());
        assert_eq!(body_length(&headers, &mut length).unwrap(), 12);
        assert_eq!(length, Some(12), "the backend is sent the length");
        headers.insert("x-amz-decoded-content-length", "-1".parse().unwrap());
        assert!(body_length(&headers, &mut None).is_err());
    }

    #[test]
    fn attributes_asked_in_one_header_are_one_name_each() {
        let asked = [
            ObjectAttributes::from("ETag, ObjectSize".to_owned()),
            ObjectAttributes::from("Checksum".to_owned()),
        ];
        let names: Vec<_> = attribute_names(&asked)
            .iter()
            .map(|a| a.as_str().to_owned())
            .collect();
        assert_eq!(names, ["ETag", "ObjectSize", "Checksum"]);
    }

    #[test]
    fn copy_ranges_count_their_bytes() {
        assert_eq!(range_len("bytes=0-9"), Some(10));
        assert_eq!(range_len("bytes=5-5"), Some(1));
        assert_eq!(range_len("bytes=9-0"), None);
        assert_eq!(range_len("0-9"), None);
        assert_eq!(range_len("bytes=a-9"), None);
    }
}
