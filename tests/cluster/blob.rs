//! Object storage per channel against the real parts: the test control plane, Postgres, a versitygw backend of
//! each test's own, the platform's S3 gateway and the operator. Real S3 clients (aws-sdk-s3 here, boto3 from
//! `tests/s3/boto3_client.py`) talk to the gateway with the key pair the credentials route hands out.

// Fixture helpers panic on a malformed response: in a test that is the failure to report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::time::Duration;

use anyhow::Result;
use aws_sdk_s3::presigning::PresigningConfig;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{
    BucketVersioningStatus, CompletedMultipartUpload, CompletedPart, Delete, ObjectIdentifier,
    VersioningConfiguration,
};
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};
use slipway_crds::Channel;
use support::blob::{Keys, ObjectStore, boto3};
use support::s3_calls::failure;
use support::{TestApi, User};

const WITHIN: Duration = Duration::from_secs(60);

/// An API, an object store, an operator and a user with one app.
struct Fixture {
    api: TestApi,
    store: ObjectStore,
    user: User,
    app_id: String,
    prod_id: String,
}

async fn fixture(prefix: &str, plan: &str) -> Result<Fixture> {
    let mut api = TestApi::start().await?;
    // GET /me/usage measures the account's databases on the data server.
    support::postgres::attach(&mut api)?;
    let store = ObjectStore::start(&mut api, "127.0.0.1").await?;
    let user = api.user(prefix, plan).await?;
    let app = api.create_app(&user, "files", "static").await;
    let app_id = app["id"].as_str().unwrap().to_owned();
    let prod_id = app["channels"][0]["id"].as_str().unwrap().to_owned();
    api.start_operator_without_node_with(&user.namespace, Some(store.settings()))
        .await?;
    Ok(Fixture {
        api,
        store,
        user,
        app_id,
        prod_id,
    })
}

impl Fixture {
    fn blob_path(&self, channel_id: &str) -> String {
        format!("/apps/{}/channels/{channel_id}/blob", self.app_id)
    }

    /// Polls the status route until the channel's store is ready.
    async fn ready(&self, user: &User, channel_id: &str) -> Value {
        let deadline = tokio::time::Instant::now() + WITHIN;
        loop {
            let reply = self.api.get(&self.blob_path(channel_id), user).await;
            if reply.status == 200 && reply.body["status"] == "ready" {
                return reply.body;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the store never became ready: {} {}",
                reply.status,
                reply.body
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn keys(&self, user: &User, channel_id: &str) -> Keys {
        let body = self
            .api
            .post(
                &format!("{}/credentials", self.blob_path(channel_id)),
                user,
                json!({}),
            )
            .await
            .expect(200, None);
        Keys::from_credentials(&body)
    }

    fn client(&self, keys: &Keys) -> aws_sdk_s3::Client {
        self.store
            .client(&keys.access_key_id, &keys.secret_access_key)
    }

    /// Asserts that the usage the API reports for the channel reaches `expected`: a small write is counted moments
    /// after its answer, when its lease's settlement has run.
    async fn assert_usage(&self, channel_id: &str, expected: i64) {
        let reached = slipway_testkit::wait_until(Duration::from_secs(5), || async {
            Ok(self.usage(channel_id).await == expected)
        })
        .await;
        if reached.is_err() {
            assert_eq!(
                self.usage(channel_id).await,
                expected,
                "the usage the API reports"
            );
        }
    }

    async fn usage(&self, channel_id: &str) -> i64 {
        let status = self
            .api
            .get(&self.blob_path(channel_id), &self.user)
            .await
            .expect(200, None);
        status["usage_bytes"].as_i64().unwrap()
    }
}

async fn body_of(out: aws_sdk_s3::operation::get_object::GetObjectOutput) -> Vec<u8> {
    out.body.collect().await.unwrap().into_bytes().to_vec()
}

#[tokio::test]
async fn a_channel_gets_a_versioned_bucket_that_aws_sdk_clients_use_through_the_gateway()
-> Result<()> {
    let f = fixture("blobsdk", "basic").await?;
    let status = f.ready(&f.user, &f.prod_id).await;
    let label = format!("files-{}", f.user.username);
    assert_eq!(status["virtual_bucket"], label.as_str());
    assert_eq!(
        status["virtual_endpoint"],
        format!("https://{label}.s3.{}", support::APP_DOMAIN).as_str()
    );
    assert_eq!(status["region"], "us-east-1");
    assert_eq!(status["external_enabled"], false);
    assert_eq!(status["usage_bytes"], 0);
    assert_eq!(status["last_error"], Value::Null);

    let keys = f.keys(&f.user, &f.prod_id).await;
    assert_eq!(keys.bucket, label);
    let s3 = f.client(&keys);
    let bucket = keys.bucket.as_str();

    // Put, get, ranged get, list.
    s3.put_object()
        .bucket(bucket)
        .key("notes/a.txt")
        .body(ByteStream::from_static(b"first version"))
        .send()
        .await?;
    let v1 = s3
        .head_object()
        .bucket(bucket)
        .key("notes/a.txt")
        .send()
        .await?
        .version_id()
        .expect("versioned")
        .to_owned();
    s3.put_object()
        .bucket(bucket)
        .key("notes/a.txt")
        .body(ByteStream::from_static(b"second"))
        .send()
        .await?;
    let got = s3
        .get_object()
        .bucket(bucket)
        .key("notes/a.txt")
        .send()
        .await?;
    assert_eq!(body_of(got).await, b"second");
    let ranged = s3
        .get_object()
        .bucket(bucket)
        .key("notes/a.txt")
        .range("bytes=1-3")
        .send()
        .await?;
    assert_eq!(body_of(ranged).await, b"eco");
    let listed = s3.list_objects_v2().bucket(bucket).send().await?;
    assert_eq!(
        listed.name(),
        Some(bucket),
        "answers name the virtual bucket"
    );
    let keys_listed: Vec<&str> = listed.contents().iter().filter_map(|o| o.key()).collect();
    assert_eq!(keys_listed, ["notes/a.txt"]);

    // Both versions are listed and the first reads back by its id.
    let versions = s3.list_object_versions().bucket(bucket).send().await?;
    assert_eq!(versions.versions().len(), 2);
    let old = s3
        .get_object()
        .bucket(bucket)
        .key("notes/a.txt")
        .version_id(&v1)
        .send()
        .await?;
    assert_eq!(body_of(old).await, b"first version");

    // Usage counts every version: 13 + 6 bytes.
    f.assert_usage(&f.prod_id, 19).await;

    // Multipart: a 5 MiB part and a 1 MiB part.
    let part1 = vec![7u8; 5 * 1024 * 1024];
    let part2 = vec![9u8; 1024 * 1024];
    let upload = s3
        .create_multipart_upload()
        .bucket(bucket)
        .key("big.bin")
        .send()
        .await?;
    assert_eq!(upload.bucket(), Some(bucket));
    let upload_id = upload.upload_id().unwrap();
    let mut parts = Vec::new();
    for (n, data) in [(1, &part1), (2, &part2)] {
        let part = s3
            .upload_part()
            .bucket(bucket)
            .key("big.bin")
            .upload_id(upload_id)
            .part_number(n)
            .body(ByteStream::from(data.clone()))
            .send()
            .await?;
        parts.push(
            CompletedPart::builder()
                .part_number(n)
                .e_tag(part.e_tag().unwrap())
                .build(),
        );
    }
    s3.complete_multipart_upload()
        .bucket(bucket)
        .key("big.bin")
        .upload_id(upload_id)
        .multipart_upload(
            CompletedMultipartUpload::builder()
                .set_parts(Some(parts))
                .build(),
        )
        .send()
        .await?;
    let big = body_of(s3.get_object().bucket(bucket).key("big.bin").send().await?).await;
    assert_eq!(big.len(), part1.len() + part2.len());
    assert!(big[..part1.len()] == part1[..] && big[part1.len()..] == part2[..]);
    f.assert_usage(&f.prod_id, 19 + 6 * 1024 * 1024).await;

    // Copy, then a batch delete (markers: nothing stored goes away).
    s3.copy_object()
        .bucket(bucket)
        .key("notes/b.txt")
        .copy_source(format!("{bucket}/notes/a.txt"))
        .send()
        .await?;
    let copied = s3
        .get_object()
        .bucket(bucket)
        .key("notes/b.txt")
        .send()
        .await?;
    assert_eq!(body_of(copied).await, b"second");
    f.assert_usage(&f.prod_id, 25 + 6 * 1024 * 1024).await;
    let delete = Delete::builder()
        .objects(ObjectIdentifier::builder().key("notes/b.txt").build()?)
        .objects(ObjectIdentifier::builder().key("big.bin").build()?)
        .build()?;
    let deleted = s3
        .delete_objects()
        .bucket(bucket)
        .delete(delete)
        .send()
        .await?;
    assert_eq!(deleted.deleted().len(), 2);
    let err = s3
        .get_object()
        .bucket(bucket)
        .key("big.bin")
        .send()
        .await
        .unwrap_err();
    assert_eq!(failure(&err), (404, "NoSuchKey".into()));
    // Versions stay.
    f.assert_usage(&f.prod_id, 25 + 6 * 1024 * 1024).await;

    // Deleting a version for good frees its bytes.
    s3.delete_object()
        .bucket(bucket)
        .key("notes/a.txt")
        .version_id(&v1)
        .send()
        .await?;
    f.assert_usage(&f.prod_id, 12 + 6 * 1024 * 1024).await;

    // A presigned URL works without any other credential.
    let presigned = s3
        .get_object()
        .bucket(bucket)
        .key("notes/a.txt")
        .presigned(PresigningConfig::expires_in(Duration::from_secs(300))?)
        .await?;
    let res = reqwest::get(presigned.uri()).await?;
    assert_eq!(res.status(), 200);
    assert_eq!(res.bytes().await?.as_ref(), b"second");
    let tampered = presigned
        .uri()
        .replace("notes%2Fa.txt", "notes%2Fb.txt")
        .replace("notes/a.txt", "notes/b.txt");
    assert_eq!(
        reqwest::get(tampered).await?.status(),
        403,
        "a presigned URL names one object"
    );

    // Versioning stays on.
    let err = s3
        .put_bucket_versioning()
        .bucket(bucket)
        .versioning_configuration(
            VersioningConfiguration::builder()
                .status(BucketVersioningStatus::Suspended)
                .build(),
        )
        .send()
        .await
        .unwrap_err();
    assert_eq!(failure(&err), (403, "AccessDenied".into()));
    let versioning = s3.get_bucket_versioning().bucket(bucket).send().await?;
    assert_eq!(versioning.status(), Some(&BucketVersioningStatus::Enabled));

    // The channel's bucket is the only one there is.
    let buckets = s3.list_buckets().send().await?;
    let names: Vec<&str> = buckets.buckets().iter().filter_map(|b| b.name()).collect();
    assert_eq!(names, [bucket]);
    for other in ["other", "files-someone-else", "slipway-data"] {
        let err = s3.list_objects_v2().bucket(other).send().await.unwrap_err();
        assert_eq!(failure(&err), (404, "NoSuchBucket".into()), "{other}");
        let err = s3
            .put_object()
            .bucket(other)
            .key("x")
            .body(ByteStream::from_static(b"x"))
            .send()
            .await
            .unwrap_err();
        assert_eq!(failure(&err), (404, "NoSuchBucket".into()), "{other}");
    }
    let err = s3
        .copy_object()
        .bucket(bucket)
        .key("stolen")
        .copy_source("other/secret.txt")
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        failure(&err),
        (404, "NoSuchBucket".into()),
        "a foreign copy source"
    );

    // A wrong secret or an unknown key is refused.
    let wrong = f.store.client(
        &keys.access_key_id,
        "not-the-secret-0000000000000000000000000",
    );
    let err = wrong
        .list_objects_v2()
        .bucket(bucket)
        .send()
        .await
        .unwrap_err();
    assert_eq!(failure(&err), (403, "SignatureDoesNotMatch".into()));
    let unknown = f
        .store
        .client("SVCUNKNOWNUNKNOWNXXX", &keys.secret_access_key);
    let err = unknown
        .list_objects_v2()
        .bucket(bucket)
        .send()
        .await
        .unwrap_err();
    assert_eq!(failure(&err), (403, "InvalidAccessKeyId".into()));

    // The rollup adds up the account's stores.
    let rollup = f
        .api
        .get("/me/blob/storage", &f.user)
        .await
        .expect(200, None);
    assert_eq!(rollup["blob_usage_bytes"], 12 + 6 * 1024 * 1024);
    assert_eq!(rollup["store_count"], 1);
    Ok(())
}

#[tokio::test]
async fn boto3_works_through_the_gateway() -> Result<()> {
    let f = fixture("blobpy", "basic").await?;
    f.ready(&f.user, &f.prod_id).await;
    let keys = f.keys(&f.user, &f.prod_id).await;
    let out = boto3(&["full"], &f.store.gateway_url, None, &keys).await?;
    assert_eq!(out, "ok", "boto3 client failed");
    // hello v1 (8) + hello v2 (8) + the multipart object (12 MiB) + the copy (8): every version counts.
    f.assert_usage(&f.prod_id, 24 + 12 * 1024 * 1024).await;
    Ok(())
}

#[tokio::test]
async fn a_key_reaches_only_its_own_channels_bucket() -> Result<()> {
    let f = fixture("blobiso", "basic").await?;
    let next = f
        .api
        .post(
            &format!("/apps/{}/channels", f.app_id),
            &f.user,
            json!({"name": "next", "git_ref_binding": "branch:next"}),
        )
        .await
        .expect(200, None);
    let next_id = next["id"].as_str().unwrap().to_owned();
    f.ready(&f.user, &f.prod_id).await;
    f.ready(&f.user, &next_id).await;
    let prod = f.keys(&f.user, &f.prod_id).await;
    let staging = f.keys(&f.user, &next_id).await;
    assert_ne!(prod.access_key_id, staging.access_key_id);
    assert_ne!(prod.bucket, staging.bucket);
    f.client(&staging)
        .put_object()
        .bucket(&staging.bucket)
        .key("private.txt")
        .body(ByteStream::from_static(b"next only"))
        .send()
        .await?;
    let prod_s3 = f.client(&prod);
    let err = prod_s3
        .get_object()
        .bucket(&staging.bucket)
        .key("private.txt")
        .send()
        .await
        .unwrap_err();
    assert_eq!(failure(&err), (404, "NoSuchBucket".into()));
    let err = prod_s3
        .list_object_versions()
        .bucket(&staging.bucket)
        .send()
        .await
        .unwrap_err();
    assert_eq!(failure(&err), (404, "NoSuchBucket".into()));
    let err = prod_s3
        .copy_object()
        .bucket(&prod.bucket)
        .key("copied.txt")
        .copy_source(format!("{}/private.txt", staging.bucket))
        .send()
        .await
        .unwrap_err();
    assert_eq!(failure(&err), (404, "NoSuchBucket".into()));

    // Another user sees neither the store nor its credentials.
    let mallory = f.api.user("blobmal", "basic").await?;
    f.api
        .get(&f.blob_path(&f.prod_id), &mallory)
        .await
        .expect(404, Some("not_found"));
    f.api
        .post(
            &format!("{}/credentials", f.blob_path(&f.prod_id)),
            &mallory,
            json!({}),
        )
        .await
        .expect(404, Some("not_found"));
    let rollup = f
        .api
        .get("/me/blob/storage", &mallory)
        .await
        .expect(200, None);
    assert_eq!(rollup, json!({"blob_usage_bytes": 0, "store_count": 0}));
    Ok(())
}

#[tokio::test]
async fn credentials_need_the_blob_scope_and_every_read_is_audited() -> Result<()> {
    let f = fixture("blobaud", "basic").await?;
    f.ready(&f.user, &f.prod_id).await;
    f.keys(&f.user, &f.prod_id).await;
    f.keys(&f.user, &f.prod_id).await;
    let db = slipway_store::db::connect(f.api.db_url()).await?;
    let rows: Vec<(String, Value)> = sqlx::query_as(
        "SELECT action, detail FROM audit_events WHERE app_id = $1 AND action = 'blob.credentials' ORDER BY id",
    )
    .bind(f.app_id.parse::<uuid::Uuid>()?)
    .fetch_all(&db)
    .await?;
    assert_eq!(rows.len(), 2, "one audit row per call");
    assert_eq!(rows[0].1["channel_id"], f.prod_id.as_str());

    let narrow = f
        .api
        .token(f.user.id, &["repo:*".to_owned()], false, None)
        .await?;
    let reply = f
        .api
        .call(
            axum::http::Method::POST,
            &format!("{}/credentials", f.blob_path(&f.prod_id)),
            Some(&narrow),
            None,
        )
        .await;
    reply.expect(403, Some("scope_denied"));
    let count: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_events WHERE app_id = $1 AND action = 'blob.credentials'",
    )
    .bind(f.app_id.parse::<uuid::Uuid>()?)
    .fetch_one(&db)
    .await?;
    assert_eq!(count, 2, "a refused call reveals nothing and logs nothing");
    Ok(())
}

#[tokio::test]
async fn the_quota_answers_507_and_nothing_is_stored() -> Result<()> {
    let f = fixture("blobquota", "starter").await?;
    f.ready(&f.user, &f.prod_id).await;
    let keys = f.keys(&f.user, &f.prod_id).await;
    let s3 = f.client(&keys);
    let bucket = keys.bucket.as_str();
    let limit: i64 = 268_435_456;
    let filler = vec![1u8; usize::try_from(limit - 1024)?];
    s3.put_object()
        .bucket(bucket)
        .key("filler.bin")
        .body(ByteStream::from(filler))
        .send()
        .await?;
    f.assert_usage(&f.prod_id, limit - 1024).await;

    let err = s3
        .put_object()
        .bucket(bucket)
        .key("over.bin")
        .body(ByteStream::from(vec![2u8; 2048]))
        .send()
        .await
        .unwrap_err();
    assert_eq!(failure(&err), (507, "QuotaExceeded".into()));
    // Usage unchanged.
    f.assert_usage(&f.prod_id, limit - 1024).await;
    let err = s3
        .head_object()
        .bucket(bucket)
        .key("over.bin")
        .send()
        .await
        .unwrap_err();
    assert_eq!(failure(&err).0, 404, "nothing was stored");

    // A part over the quota is refused the same way; a copy too (it would store another version).
    let upload = s3
        .create_multipart_upload()
        .bucket(bucket)
        .key("parts.bin")
        .send()
        .await?;
    let err = s3
        .upload_part()
        .bucket(bucket)
        .key("parts.bin")
        .upload_id(upload.upload_id().unwrap())
        .part_number(1)
        .body(ByteStream::from(vec![3u8; 4096]))
        .send()
        .await
        .unwrap_err();
    assert_eq!(failure(&err), (507, "QuotaExceeded".into()));
    let err = s3
        .copy_object()
        .bucket(bucket)
        .key("filler-2.bin")
        .copy_source(format!("{bucket}/filler.bin"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(failure(&err), (507, "QuotaExceeded".into()));
    s3.abort_multipart_upload()
        .bucket(bucket)
        .key("parts.bin")
        .upload_id(upload.upload_id().unwrap())
        .send()
        .await?;
    f.assert_usage(&f.prod_id, limit - 1024).await;

    // Exactly up to the limit is allowed.
    s3.put_object()
        .bucket(bucket)
        .key("last.bin")
        .body(ByteStream::from(vec![4u8; 1024]))
        .send()
        .await?;
    f.assert_usage(&f.prod_id, limit).await;
    let rollup = f
        .api
        .get("/me/blob/storage", &f.user)
        .await
        .expect(200, None);
    assert_eq!(rollup["blob_usage_bytes"], limit);
    Ok(())
}

#[tokio::test]
async fn a_stopped_backend_answers_503_and_recovers() -> Result<()> {
    let mut f = fixture("blobdown", "basic").await?;
    f.ready(&f.user, &f.prod_id).await;
    let credentials = format!("{}/credentials", f.blob_path(&f.prod_id));
    f.store.backend.pause();
    let both_unavailable = || async {
        f.api
            .get(&f.blob_path(&f.prod_id), &f.user)
            .await
            .expect(503, Some("blob_unavailable"));
        f.api
            .post(&credentials, &f.user, json!({}))
            .await
            .expect(503, Some("blob_unavailable"));
    };
    both_unavailable().await;

    // Once the operator has also seen the backend go (a change of the channel makes it check at once), its
    // condition says the bucket is not ready; that is still an unavailable store, not one being made.
    let channels: Api<Channel> = Api::namespaced(f.api.kube.clone(), &f.user.namespace);
    let name = "files.prod";
    channels
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"test.slipway.dev/touch": "1"}}})),
        )
        .await?;
    slipway_testkit::wait_until(WITHIN, || {
        let channels = channels.clone();
        async move {
            let channel = channels.get(name).await?;
            Ok(channel
                .status
                .iter()
                .flat_map(|s| &s.conditions)
                .any(|c| c.type_ == "ObjectStoreReady" && c.status == "False"))
        }
    })
    .await?;
    both_unavailable().await;
    f.store.backend.resume().await?;
    f.ready(&f.user, &f.prod_id).await;
    f.api
        .post(&credentials, &f.user, json!({}))
        .await
        .expect(200, None);
    Ok(())
}

#[tokio::test]
async fn a_deleted_channel_takes_its_bucket_and_store_along() -> Result<()> {
    let f = fixture("blobdel", "basic").await?;
    // prod's store exists before tmp goes, so that the count at the end shows the deletion left it alone.
    f.ready(&f.user, &f.prod_id).await;
    let next = f
        .api
        .post(
            &format!("/apps/{}/channels", f.app_id),
            &f.user,
            json!({"name": "tmp", "git_ref_binding": "branch:tmp"}),
        )
        .await
        .expect(200, None);
    let next_id = next["id"].as_str().unwrap().to_owned();
    f.ready(&f.user, &next_id).await;
    let keys = f.keys(&f.user, &next_id).await;
    let s3 = f.client(&keys);
    for n in 0..3 {
        s3.put_object()
            .bucket(&keys.bucket)
            .key("a.txt")
            .body(ByteStream::from(format!("version {n}").into_bytes()))
            .send()
            .await?;
    }
    let backend_bucket = format!("slipway-{next_id}");
    f.store
        .backend_client()
        .head_bucket()
        .bucket(&backend_bucket)
        .send()
        .await?;
    f.api
        .delete(&format!("/apps/{}/channels/{next_id}", f.app_id), &f.user)
        .await
        .expect(204, None);
    let backend = f.store.backend_client();
    slipway_testkit::wait_until(WITHIN, || {
        let backend = backend.clone();
        let bucket = backend_bucket.clone();
        async move { Ok(backend.head_bucket().bucket(bucket).send().await.is_err()) }
    })
    .await?;
    let db = slipway_store::db::connect(f.api.db_url()).await?;
    slipway_testkit::wait_until(WITHIN, || {
        let db = db.clone();
        let id: uuid::Uuid = next_id.parse().unwrap();
        async move { Ok(slipway_blob::store::by_channel(&db, id).await?.is_none()) }
    })
    .await?;
    let err = s3
        .list_objects_v2()
        .bucket(&keys.bucket)
        .send()
        .await
        .unwrap_err();
    assert!(
        matches!(failure(&err).0, 403 | 404),
        "the deleted channel's bucket is gone: {:?}",
        failure(&err)
    );
    let rollup = f
        .api
        .get("/me/blob/storage", &f.user)
        .await
        .expect(200, None);
    assert_eq!(rollup["store_count"], 1, "only prod's store is left");
    Ok(())
}

/// Runs the boto3 client's probe (a put and a get) against `endpoint`, resolving `host` to loopback.
async fn boto3_probe(endpoint: &str, host: &str, keys: &Keys) -> Result<String> {
    boto3(&["probe"], endpoint, Some((host, "127.0.0.1")), keys).await
}

#[tokio::test]
async fn the_toggle_opens_and_closes_the_public_endpoint_through_the_edge() -> Result<()> {
    use slipway_edge::Edge;

    let f = fixture("blobedge", "basic").await?;
    f.ready(&f.user, &f.prod_id).await;
    let keys = f.keys(&f.user, &f.prod_id).await;
    // The edge's own role on the internal listener: it reports bandwidth with its ServiceAccount token.
    let mut config = f.api.edge_config(&f.user.namespace, false).await?;
    config.object_store = Some(f.store.gateway);
    let mut registry = prometheus_client::registry::Registry::default();
    let (edge, _tasks) = Edge::start(f.api.kube.clone(), config, &mut registry).await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(slipway_edge::server::serve(
        edge,
        listener,
        slipway_edge::server::Scheme::Http,
        std::future::pending(),
    ));
    let host = format!("{}.s3.{}", keys.bucket, support::APP_DOMAIN);
    let endpoint = format!("http://{host}:{port}");

    let closed = boto3_probe(&endpoint, &host, &keys).await?;
    assert!(closed.starts_with("error 404"), "toggle off: {closed}");

    let app_path = format!("/apps/{}", f.app_id);
    let toggle = |on: bool| {
        f.api.call(
            axum::http::Method::PATCH,
            &app_path,
            Some(&f.user.token),
            Some(json!({"external_blob_access_enabled": on})),
        )
    };
    toggle(true).await.expect(200, None);
    let status = f
        .api
        .get(&f.blob_path(&f.prod_id), &f.user)
        .await
        .expect(200, None);
    assert_eq!(status["external_enabled"], true);
    let deadline = tokio::time::Instant::now() + WITHIN;
    loop {
        let answer = boto3_probe(&endpoint, &host, &keys).await?;
        if answer == "ok" {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "toggle on: {answer}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The endpoint takes the channel's key only: another key is refused through the edge too.
    let wrong = Keys {
        access_key_id: keys.access_key_id.clone(),
        secret_access_key: "0".repeat(40),
        bucket: keys.bucket.clone(),
    };
    let refused = boto3_probe(&endpoint, &host, &wrong).await?;
    assert!(refused.starts_with("error 403"), "wrong secret: {refused}");

    toggle(false).await.expect(200, None);
    let deadline = tokio::time::Instant::now() + WITHIN;
    loop {
        let answer = boto3_probe(&endpoint, &host, &keys).await?;
        if answer.starts_with("error 404") {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "toggle off again: {answer}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // What the edge sent for the public endpoint counts in the owner's monthly bandwidth (reported every 30 s).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    loop {
        let usage = f.api.get("/me/usage", &f.user).await.expect(200, None);
        // At least the probe's GET body ("through the edge", 16 bytes) went out through the edge.
        if usage["bandwidth_month_bytes"].as_i64().unwrap_or(0) >= 16 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no bandwidth reported: {usage}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let stranger = f.api.user("blobstr", "basic").await?;
    let usage = f.api.get("/me/usage", &stranger).await.expect(200, None);
    assert_eq!(usage["bandwidth_month_bytes"], 0);
    Ok(())
}
