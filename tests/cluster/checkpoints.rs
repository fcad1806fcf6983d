//! Checkpoints across a channel's database, bucket and code against the real parts: the data server (Debian's
//! PostgreSQL with pgextwlist), a versitygw backend behind the platform's S3 gateway, the snapshot archive in that
//! backend's system bucket, real git for the repository, the test control plane and the operator. Checkpoints are
//! taken the way deploys take them (the operator's internal route), then restored, downloaded and pruned through
//! the public routes; the data is written and read back with the app's own clients (sqlx with `DATABASE_URL`,
//! aws-sdk-s3 with the channel's key pair).

// Fixture helpers panic on a malformed response: in a test that is the failure to report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Result;
use aws_sdk_s3::primitives::ByteStream;
use serde_json::{Value, json};
use slipway_backends::object_store::S3Endpoint;
use slipway_internal::InternalClient;
use slipway_internal::protocol::{PreDeploySnapshot, PreDeploySnapshotRequest};
use slipway_postgres::archive::{self, Archive};
use sqlx::PgConnection;
use support::blob::{Keys, ObjectStore};
use support::git::{Workspace, http_remote};
use support::postgres::{self, execute};
use support::{TestApi, User, untar};
use uuid::Uuid;

const WITHIN: Duration = Duration::from_secs(60);

/// An API with a data server, object storage and a snapshot archive; an operator; a user with one `app` app.
struct Fixture {
    api: TestApi,
    store: ObjectStore,
    user: User,
    app_id: String,
    prod_id: String,
    /// The operator's task (a test may stop it).
    operator: tokio::task::JoinHandle<()>,
}

async fn fixture(prefix: &str, plan: &str) -> Result<Fixture> {
    fixture_configured(prefix, plan, |_| {}).await
}

/// A fixture whose API is not told of object storage yet (the operator makes the bucket all the same).
async fn unannounced_fixture(prefix: &str, plan: &str) -> Result<Fixture> {
    unannounced_fixture_configured(prefix, plan, |_| {}).await
}

/// [`fixture`] with the operator's settings changed by `configure`.
async fn fixture_configured(
    prefix: &str,
    plan: &str,
    configure: impl FnOnce(&mut slipway_controllers::OperatorConfig),
) -> Result<Fixture> {
    let mut f = unannounced_fixture_configured(prefix, plan, configure).await?;
    f.store.announce(&mut f.api);
    f.wait_until_ready(&["postgres", "blob"]).await;
    Ok(f)
}

/// [`unannounced_fixture`] with the operator's settings changed by `configure`.
async fn unannounced_fixture_configured(
    prefix: &str,
    plan: &str,
    configure: impl FnOnce(&mut slipway_controllers::OperatorConfig),
) -> Result<Fixture> {
    let mut api = TestApi::start().await?;
    postgres::attach(&mut api)?;
    let store = ObjectStore::start_unannounced(&api, "127.0.0.1").await?;
    let archive = Archive::new(
        &S3Endpoint {
            url: store.backend.url.clone(),
            access_key_id: store.backend.access_key_id.clone(),
            secret_access_key: store.backend.secret_access_key.clone(),
        },
        archive::system_bucket("slipway-"),
    );
    archive.ensure_bucket().await?;
    api.enable(|features| features.snapshot_archive = Some(archive));
    let user = api.user(prefix, plan).await?;
    let app = api.create_app(&user, "shop", "app").await;
    let app_id = app["id"].as_str().unwrap().to_owned();
    let prod_id = app["channels"][0]["id"].as_str().unwrap().to_owned();
    let operator = api
        .start_nodeless_operator_with_postgres_configured(
            &user.namespace,
            Default::default(),
            Some(store.settings()),
            postgres::settings()?,
            configure,
        )
        .await?;
    Ok(Fixture {
        api,
        store,
        user,
        app_id,
        prod_id,
        operator,
    })
}

impl Fixture {
    /// Records a finished build of `sha` on deploy `deploy_id`'s build Job, once the operator made it, as the
    /// operator records one: the deploy goes on with that image.
    async fn record_build(&self, deploy_id: &str, sha: &str) -> Result<()> {
        use slipway_controllers::build::{Recorded, job};
        let jobs: kube::Api<k8s_openapi::api::batch::v1::Job> =
            kube::Api::namespaced(self.api.kube.clone(), &self.user.namespace);
        let name = job::job_name(deploy_id);
        slipway_testkit::wait_until(WITHIN, || async {
            Ok(jobs.get_opt(&name).await?.is_some())
        })
        .await?;
        let image = slipway_crds::DeployImage {
            reference: format!(
                "127.0.0.1:9/{}/prod@sha256:{}",
                self.user.namespace,
                "0".repeat(64)
            ),
            tag: sha.to_owned(),
            size_bytes: 1,
            charged_size_bytes: None,
            matched_base: None,
            created: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::now(),
            ),
        };
        let patch = json!({"metadata": {"annotations": {
            job::RESULT: serde_json::to_string(&Recorded::Built(image))?
        }}});
        jobs.patch(
            &name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await?;
        Ok(())
    }

    /// The channel's database's name, as its status route gives it.
    async fn db_name(&self) -> String {
        self.api
            .get(&format!("{}/postgres", self.channel_path()), &self.user)
            .await
            .expect(200, None)["db_name"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    fn channel_path(&self) -> String {
        format!("/apps/{}/channels/{}", self.app_id, self.prod_id)
    }

    /// Polls the status routes of `legs` (`postgres`, `blob`) until they say ready.
    async fn wait_until_ready(&self, legs: &[&str]) {
        let deadline = tokio::time::Instant::now() + WITHIN;
        for leg in legs {
            loop {
                let reply = self
                    .api
                    .get(&format!("{}/{leg}", self.channel_path()), &self.user)
                    .await;
                if reply.status == 200 && reply.body["status"] == "ready" {
                    break;
                }
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "{leg} never became ready: {} {}",
                    reply.status,
                    reply.body
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }

    /// Takes a deploy's pre-deploy checkpoint the way the operator does; the SQL snapshot id.
    async fn checkpoint(&self, git_sha: Option<&str>) -> Result<String> {
        let base = self.api.serve_internal().await?;
        let client = InternalClient::new(self.api.operator_endpoint(&base));
        let answer = support::pre_deploy_checkpoint(
            &client,
            &Uuid::new_v4().to_string(),
            &PreDeploySnapshotRequest {
                app_id: self.app_id.clone(),
                channel_id: self.prod_id.clone(),
                git_sha: git_sha.map(str::to_owned),
            },
        )
        .await?;
        match answer {
            PreDeploySnapshot::Taken { snapshot_id } => Ok(snapshot_id),
            other => panic!("no checkpoint: {other:?}"),
        }
    }

    /// The app's own database connection (its `DATABASE_URL`).
    async fn database(&self) -> Result<PgConnection> {
        let env = postgres::variables(&self.api, &self.prod_id).await?;
        Ok(postgres::connect(&env["DATABASE_URL"]).await?)
    }

    /// The app's own S3 client (the channel's key pair, through the gateway) and its bucket.
    async fn bucket(&self) -> (aws_sdk_s3::Client, String) {
        let body = self
            .api
            .post(
                &format!("{}/blob/credentials", self.channel_path()),
                &self.user,
                json!({}),
            )
            .await
            .expect(200, None);
        let keys = Keys::from_credentials(&body);
        (
            self.store
                .client(&keys.access_key_id, &keys.secret_access_key),
            keys.bucket,
        )
    }

    /// The snapshot list of `leg` (`postgres` or `blob`), newest first.
    async fn rows(&self, leg: &str) -> Vec<Value> {
        let reply = self
            .api
            .get(
                &format!("{}/{leg}/snapshots", self.channel_path()),
                &self.user,
            )
            .await;
        reply.expect(200, None).as_array().unwrap().clone()
    }

    /// GET with `token`: status and body bytes.
    async fn fetch(&self, path: &str, token: &str) -> (u16, Vec<u8>, Option<String>) {
        let req = axum::http::Request::builder()
            .uri(path)
            .header("authorization", format!("Bearer {token}"))
            .body(axum::body::Body::empty())
            .unwrap();
        let res = tower::ServiceExt::oneshot(self.api.router.clone(), req)
            .await
            .unwrap();
        let status = res.status().as_u16();
        let content_type = res
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_owned());
        let bytes = axum::body::to_bytes(res.into_body(), usize::MAX)
            .await
            .unwrap()
            .to_vec();
        (status, bytes, content_type)
    }

    fn blob_download_path(&self, snapshot_id: &str) -> String {
        format!(
            "{}/blob/snapshots/{snapshot_id}/download",
            self.channel_path()
        )
    }

    fn code_download_path(&self, snapshot_id: &str) -> String {
        format!(
            "{}/code/download?snapshot_id={snapshot_id}",
            self.channel_path()
        )
    }

    async fn allow_prod_restore(&self) {
        self.api
            .post(
                &format!("/apps/{}/env", self.app_id),
                &self.user,
                json!({"key": "SVC_ALLOW_PROD_RESTORE", "value": "1"}),
            )
            .await
            .expect(204, None);
    }
}

async fn put(s3: &aws_sdk_s3::Client, bucket: &str, key: &str, body: &str) {
    s3.put_object()
        .bucket(bucket)
        .key(key)
        .body(ByteStream::from(body.as_bytes().to_vec()))
        .send()
        .await
        .unwrap();
}

/// Every current object's body, by key.
async fn objects(s3: &aws_sdk_s3::Client, bucket: &str) -> BTreeMap<String, String> {
    let listed = s3.list_objects_v2().bucket(bucket).send().await.unwrap();
    let mut all = BTreeMap::new();
    for object in listed.contents() {
        let key = object.key().unwrap().to_owned();
        let body = s3
            .get_object()
            .bucket(bucket)
            .key(&key)
            .send()
            .await
            .unwrap()
            .body
            .collect()
            .await
            .unwrap()
            .into_bytes();
        all.insert(key, String::from_utf8(body.to_vec()).unwrap());
    }
    all
}

/// Each key's history: its current entry first (a version's id, or `marker` for a delete marker), then the rest
/// in id order.
async fn histories(s3: &aws_sdk_s3::Client, bucket: &str) -> BTreeMap<String, Vec<String>> {
    let listed = s3
        .list_object_versions()
        .bucket(bucket)
        .send()
        .await
        .unwrap();
    let entries = listed
        .versions()
        .iter()
        .map(|v| {
            (
                v.key().unwrap().to_owned(),
                v.is_latest().unwrap(),
                v.version_id().unwrap().to_owned(),
            )
        })
        .chain(listed.delete_markers().iter().map(|m| {
            (
                m.key().unwrap().to_owned(),
                m.is_latest().unwrap(),
                format!("marker {}", m.version_id().unwrap()),
            )
        }));
    let mut all: BTreeMap<String, Vec<(bool, String)>> = BTreeMap::new();
    for (key, latest, id) in entries {
        all.entry(key).or_default().push((!latest, id));
    }
    all.into_iter()
        .map(|(key, mut history)| {
            history.sort();
            let ids = history
                .into_iter()
                .map(|(_, id)| {
                    if id.starts_with("marker ") {
                        "marker".to_owned()
                    } else {
                        id
                    }
                })
                .collect();
            (key, ids)
        })
        .collect()
}

async fn notes(conn: &mut PgConnection) -> Vec<String> {
    sqlx::query_scalar("SELECT body FROM notes ORDER BY id")
        .fetch_all(conn)
        .await
        .unwrap()
}

fn files(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[tokio::test]
async fn a_checkpoint_brings_back_the_rows_objects_and_code_of_its_instant() -> Result<()> {
    let f = fixture("ckpt", "basic").await?;
    let mut db = f.database().await?;
    let (s3, bucket) = f.bucket().await;

    // v1 is committed and deployed: its pre-deploy checkpoint records no commit (the channel never ran one).
    let v1 = f
        .api
        .commit(&f.user, &f.app_id, json!({"app.txt": "v1 code\n"}))
        .await;
    let first = f.checkpoint(None).await?;

    // v1 runs and writes rows and objects; one key is rewritten twice.
    execute(
        &mut db,
        "CREATE TABLE notes (id serial PRIMARY KEY, body text); INSERT INTO notes (body) VALUES ('kept'), ('edited in v1');",
    )
    .await?;
    for (key, body) in [
        ("keep.txt", "kept"),
        ("changed.txt", "v1"),
        ("deleted.txt", "v1"),
        ("churn.txt", "one"),
        ("churn.txt", "two"),
        ("churn.txt", "three"),
    ] {
        put(&s3, &bucket, key, body).await;
    }
    let v1_histories = histories(&s3, &bucket).await;
    let churn_before = v1_histories["churn.txt"].clone();
    assert_eq!(churn_before.len(), 3);
    // The one version of changed.txt v1 wrote: the one the checkpoint records.
    let [recorded] = &v1_histories["changed.txt"][..] else {
        panic!("changed.txt has one version: {v1_histories:?}");
    };
    let recorded = recorded.clone();

    // v2 is deployed: its checkpoint holds v1's data and v1's commit, all three legs aligned.
    let v2 = f
        .api
        .commit(&f.user, &f.app_id, json!({"app.txt": "v2 code\n"}))
        .await;
    let checkpoint = f.checkpoint(Some(&v1)).await?;
    let sql_rows = f.rows("postgres").await;
    // basic keeps the newest pre_deploy only: the first checkpoint went with its marker.
    assert_eq!(sql_rows.len(), 1, "{sql_rows:?}");
    assert_eq!(sql_rows[0]["snapshot_id"], checkpoint.as_str());
    assert_eq!(sql_rows[0]["aligned_blob"], true);
    assert_eq!(sql_rows[0]["git_sha"], v1.as_str());
    let blob_rows = f.rows("blob").await;
    assert_eq!(blob_rows.len(), 1, "{blob_rows:?}");
    assert_eq!(blob_rows[0]["kind"], "pre_deploy");
    assert_eq!(blob_rows[0]["pg_snapshot_id"], checkpoint.as_str());
    assert_eq!(blob_rows[0]["object_count"], 4);
    assert!(blob_rows[0]["snapshot_ts"].is_string());
    // The versions of churn.txt no retained checkpoint needs are pruned; its current one stays.
    let churn_after = histories(&s3, &bucket).await["churn.txt"].clone();
    assert_eq!(churn_after, churn_before[..1]);

    // v2 changes both.
    execute(
        &mut db,
        "UPDATE notes SET body = 'edited in v2' WHERE body = 'edited in v1'; INSERT INTO notes (body) VALUES ('added in v2');",
    )
    .await?;
    put(&s3, &bucket, "changed.txt", "v2").await;
    put(&s3, &bucket, "later.txt", "v2").await;
    s3.delete_object()
        .bucket(&bucket)
        .key("deleted.txt")
        .send()
        .await?;

    // The checkpoint's bucket downloads as a tar.gz of what v1 had; its code as v1's tree.
    let (status, body, content_type) = f
        .fetch(&f.blob_download_path(&checkpoint), &f.user.token)
        .await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    assert_eq!(content_type.as_deref(), Some("application/gzip"));
    let v1_objects = files(&[
        ("changed.txt", "v1"),
        ("churn.txt", "three"),
        ("deleted.txt", "v1"),
        ("keep.txt", "kept"),
    ]);
    assert_eq!(untar(&body, true), v1_objects);
    let (status, body, _) = f
        .fetch(&f.code_download_path(&checkpoint), &f.user.token)
        .await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    assert_eq!(untar(&body, false), files(&[("app.txt", "v1 code\n")]));

    // Restore both legs of the checkpoint.
    f.allow_prod_restore().await;
    let db_name = f.db_name().await;
    f.api
        .post(
            &format!("{}/postgres/restore", f.channel_path()),
            &f.user,
            json!({"confirm_db_name": db_name, "snapshot_id": checkpoint}),
        )
        .await
        .expect(200, None);
    let restored = f
        .api
        .post(
            &format!("{}/blob/restore", f.channel_path()),
            &f.user,
            json!({"confirm_channel_name": "prod", "snapshot_id": checkpoint}),
        )
        .await
        .expect(200, None);
    assert_eq!(restored["status"], "ready");

    // Exactly v1's rows and objects are back; the key made later hides behind a delete marker, and every later
    // version is still listed.
    let mut db = f.database().await?;
    assert_eq!(notes(&mut db).await, ["kept", "edited in v1"]);
    assert_eq!(objects(&s3, &bucket).await, v1_objects);
    let history = histories(&s3, &bucket).await;
    assert_eq!(history["later.txt"].len(), 2, "{history:?}");
    assert_eq!(history["later.txt"][0], "marker");
    assert_eq!(
        history["changed.txt"].len(),
        3,
        "v1, v2 and v1 again: {history:?}"
    );
    assert_eq!(
        history["deleted.txt"].len(),
        3,
        "v1, its marker, v1 again: {history:?}"
    );
    assert_eq!(
        history["keep.txt"].len(),
        1,
        "an unchanged key is not written: {history:?}"
    );

    // A second restore finds the bucket at its checkpoint and writes nothing.
    f.api
        .post(
            &format!("{}/blob/restore", f.channel_path()),
            &f.user,
            json!({"confirm_channel_name": "prod", "snapshot_id": checkpoint}),
        )
        .await
        .expect(200, None);
    assert_eq!(histories(&s3, &bucket).await, history);

    // A client changes a key and deletes the version the checkpoint recorded of it (as a purge does): that key
    // cannot come back, so the restore is refused before its first write, with the key named.
    s3.put_object()
        .bucket(&bucket)
        .key("changed.txt")
        .body(aws_sdk_s3::primitives::ByteStream::from_static(b"v3"))
        .send()
        .await?;
    s3.delete_object()
        .bucket(&bucket)
        .key("changed.txt")
        .version_id(&recorded)
        .send()
        .await?;
    let before = histories(&s3, &bucket).await;
    let refused = f
        .api
        .post(
            &format!("{}/blob/restore", f.channel_path()),
            &f.user,
            json!({"confirm_channel_name": "prod", "snapshot_id": checkpoint}),
        )
        .await
        .expect(404, Some("snapshot_not_found"));
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("\"changed.txt\"") && message.contains("nothing was changed"),
        "{message}"
    );
    assert_eq!(histories(&s3, &bucket).await, before);

    // The first checkpoint recorded no commit; a pruned one is not found.
    f.api
        .get(&f.code_download_path(&first), &f.user)
        .await
        .expect(404, Some("snapshot_not_found"));

    // v1's commit is force-pushed away and garbage-collected: its code leg is gone for good.
    let base = f.api.serve().await?;
    let ws = Workspace::new()?;
    let remote = http_remote(&base, &f.user.token, &f.user.username, "shop");
    ws.git(".", &["init", "-q", "-b", "master", "rewrite"])
        .await?;
    ws.write("rewrite/app.txt", "rewritten\n")?;
    ws.git("rewrite", &["add", "."]).await?;
    ws.git("rewrite", &["commit", "-qm", "rewrite"]).await?;
    ws.git(
        "rewrite",
        &["push", "-q", "--force", &remote, "HEAD:master"],
    )
    .await?;
    let repo = f
        .api
        .state
        .repos()
        .path(&f.user.username.parse()?, &"shop".parse()?);
    slipway_git::gc::collect(&repo, "now").await?;
    f.api
        .get(&f.code_download_path(&checkpoint), &f.user)
        .await
        .expect(404, Some("snapshot_code_gone"));
    assert_ne!(v1, v2);
    Ok(())
}

#[tokio::test]
async fn checkpoint_routes_refuse_what_the_spec_refuses() -> Result<()> {
    // A checkpoint taken while the API had no object storage has no object-store leg.
    let mut f = unannounced_fixture("ckptno", "pro").await?;
    f.wait_until_ready(&["postgres"]).await;
    let unaligned = f.checkpoint(None).await?;
    f.store.announce(&mut f.api);
    f.wait_until_ready(&["blob"]).await;
    let (s3, bucket) = f.bucket().await;
    put(&s3, &bucket, "a.txt", "a").await;
    put(&s3, &bucket, "b.txt", "b").await;
    let rows = f.rows("postgres").await;
    assert_eq!(rows[0]["snapshot_id"], unaligned.as_str());
    assert_eq!(rows[0]["aligned_blob"], false);
    assert!(f.rows("blob").await.is_empty());
    f.api
        .get(&f.blob_download_path(&unaligned), &f.user)
        .await
        .expect(409, Some("no_aligned_blob_snapshot"));
    f.api
        .post(
            &format!(
                "{}/blob/snapshots/{unaligned}/download-token",
                f.channel_path()
            ),
            &f.user,
            json!({}),
        )
        .await
        .expect(409, Some("no_aligned_blob_snapshot"));
    f.api
        .get(&f.code_download_path(&unaligned), &f.user)
        .await
        .expect(404, Some("snapshot_sha_unknown"));

    let checkpoint = f.checkpoint(None).await?;
    let restore_path = format!("{}/blob/restore", f.channel_path());
    let restore = |body: Value| f.api.post(&restore_path, &f.user, body);
    restore(json!({"confirm_channel_name": "prod", "snapshot_id": unaligned}))
        .await
        .expect(403, Some("prod_restore_blocked"));
    f.allow_prod_restore().await;
    restore(json!({"confirm_channel_name": "dev", "snapshot_id": checkpoint}))
        .await
        .expect(400, Some("invalid_confirmation"));
    restore(json!({"confirm_channel_name": "prod", "snapshot_id": Uuid::new_v4()}))
        .await
        .expect(404, Some("snapshot_not_found"));
    restore(json!({"confirm_channel_name": "prod", "snapshot_id": unaligned}))
        .await
        .expect(409, Some("no_aligned_blob_snapshot"));
    restore(json!({"confirm_channel_name": "prod"}))
        .await
        .expect(400, None);
    f.api
        .get(&f.blob_download_path(&Uuid::new_v4().to_string()), &f.user)
        .await
        .expect(404, Some("snapshot_not_found"));

    // blobs:read is needed for the download and its token; a download token opens that download only.
    let sql_only = f
        .api
        .token(f.user.id, &["snapshots:read".to_owned()], false, None)
        .await?;
    let (status, body, _) = f.fetch(&f.blob_download_path(&checkpoint), &sql_only).await;
    assert_eq!(status, 403, "{}", String::from_utf8_lossy(&body));
    let minted = f
        .api
        .post(
            &format!(
                "{}/blob/snapshots/{checkpoint}/download-token",
                f.channel_path()
            ),
            &f.user,
            json!({}),
        )
        .await
        .expect(201, None);
    assert_eq!(minted["download_url"], f.blob_download_path(&checkpoint));
    let token = minted["token"].as_str().unwrap();
    let (status, body, _) = f.fetch(&f.blob_download_path(&checkpoint), token).await;
    assert_eq!(status, 200);
    assert_eq!(untar(&body, true), files(&[("a.txt", "a"), ("b.txt", "b")]));
    let (status, _, _) = f.fetch(&format!("{}/blob", f.channel_path()), token).await;
    assert_eq!(status, 403);

    // Past a download limit: 409 conflict. Downloads off: 403 download_disabled on every download route.
    let download = f.blob_download_path(&checkpoint);
    let token_path = format!(
        "{}/blob/snapshots/{checkpoint}/download-token",
        f.channel_path()
    );
    let code = format!("{}/code/download", f.channel_path());
    let Fixture { api, user, .. } = f;
    let limited = api.with_limits(slipway_core::state::Limits {
        blob_download: slipway_core::state::BlobDownloadLimits {
            max_files: 1,
            ..Default::default()
        },
        ..Default::default()
    });
    limited
        .get(&download, &user)
        .await
        .expect(409, Some("conflict"));
    let off = limited.with_limits(slipway_core::state::Limits {
        downloads: false,
        ..Default::default()
    });
    off.get(&download, &user)
        .await
        .expect(403, Some("download_disabled"));
    off.post(&token_path, &user, json!({}))
        .await
        .expect(403, Some("download_disabled"));
    off.get(&code, &user)
        .await
        .expect(403, Some("download_disabled"));
    Ok(())
}

#[tokio::test]
async fn a_bucket_restore_waits_for_an_idle_channel_and_both_routes_for_a_reachable_store()
-> Result<()> {
    let mut f = fixture("ckptbusy", "basic").await?;
    let (s3, bucket) = f.bucket().await;
    put(&s3, &bucket, "a.txt", "a").await;
    let checkpoint = f.checkpoint(None).await?;
    f.allow_prod_restore().await;
    let restore_path = format!("{}/blob/restore", f.channel_path());
    let body = json!({"confirm_channel_name": "prod", "snapshot_id": checkpoint});

    // The backend is down: 503 blob_unavailable before a byte of the download or a write of the restore.
    f.store.backend.pause();
    f.api
        .get(&f.blob_download_path(&checkpoint), &f.user)
        .await
        .expect(503, Some("blob_unavailable"));
    f.api
        .post(&restore_path, &f.user, body.clone())
        .await
        .expect(503, Some("blob_unavailable"));
    f.store.backend.resume().await?;
    f.api
        .post(&restore_path, &f.user, body.clone())
        .await
        .expect(200, None);

    // A deploy queued on the channel: 409 channel_busy. (The operator is stopped first, so it stays queued.)
    f.operator.abort();
    let deploys: kube::Api<slipway_crds::Deploy> =
        kube::Api::namespaced(f.api.kube.clone(), &f.user.namespace);
    let channel = f
        .api
        .state
        .cache()
        .channels_in(&f.user.namespace)
        .into_iter()
        .find(|c| c.metadata.uid.as_deref() == Some(f.prod_id.as_str()))
        .unwrap();
    let queued: slipway_crds::Deploy = serde_json::from_value(json!({
        "apiVersion": "slipway.dev/v1alpha1",
        "kind": "Deploy",
        "metadata": {"name": "queued-blob-restore-test"},
        "spec": {"channel": kube::ResourceExt::name_any(channel.as_ref()), "sha": "b".repeat(40)}
    }))?;
    deploys.create(&Default::default(), &queued).await?;
    f.api
        .post(&restore_path, &f.user, body)
        .await
        .expect(409, Some("channel_busy"));
    deploys
        .delete("queued-blob-restore-test", &Default::default())
        .await?;
    Ok(())
}

/// A channel's checkpoint lock, held across a long checkpoint and waited on by others, takes nothing from the API's
/// pool: on a pool of two connections, with one checkpoint under way and three more waiting for the same channel,
/// an ordinary query still gets a connection at once. (Held from the pool, the lock and its waiters took both, and
/// the query timed out.)
#[tokio::test]
async fn checkpoint_locks_and_their_waiters_leave_the_pool_to_requests() -> Result<()> {
    let database = slipway_testkit::postgres::TestDatabase::create().await?;
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(Duration::from_secs(3))
        .connect(database.url())
        .await?;
    let channel = Uuid::new_v4();
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    let (started, under_way) = tokio::sync::oneshot::channel::<()>();
    let holder = {
        let pool = pool.clone();
        tokio::spawn(async move {
            slipway_data::checkpoints::exclusively(&pool, channel, async move {
                let _ = started.send(());
                let _ = released.await;
            })
            .await
        })
    };
    under_way.await?;
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let pool = pool.clone();
            tokio::spawn(async move {
                slipway_data::checkpoints::exclusively(&pool, channel, async {}).await
            })
        })
        .collect();
    // The waiters are at the lock once the server shows them waiting on an advisory lock.
    database
        .until_waiting_on_advisory_locks(3, Duration::from_secs(30))
        .await?;
    let answer: i32 = sqlx::query_scalar("SELECT 1").fetch_one(&pool).await?;
    assert_eq!(answer, 1);
    let _ = release.send(());
    holder.await??;
    for waiter in waiters {
        waiter.await??;
    }
    Ok(())
}

#[tokio::test]
async fn a_checkpoint_that_outlasts_a_request_runs_on_as_a_job_and_logs_its_progress() -> Result<()>
{
    let f = fixture("bigdump", "basic").await?;
    // A few hundred MB, so that the dump takes seconds: well past the test API's one-second answer.
    let mut app = f.database().await?;
    execute(
        &mut app,
        "CREATE TABLE big AS SELECT g AS id, md5(g::text) || md5((g + 1)::text) AS body \
         FROM generate_series(1, 2500000) g",
    )
    .await?;
    let base = f.api.serve_internal().await?;
    let operator = InternalClient::new(f.api.operator_endpoint(&base));
    let deploy_id = Uuid::new_v4();
    let request = PreDeploySnapshotRequest {
        app_id: f.app_id.clone(),
        channel_id: f.prod_id.clone(),
        git_sha: None,
    };
    let first = operator
        .pre_deploy_snapshot(&deploy_id.to_string(), &request)
        .await?;
    assert!(
        matches!(first, PreDeploySnapshot::Running { .. }),
        "the dump answered within a request: {first:?}"
    );
    // Nobody asks again: the job goes on by itself, and says how far it is in the deploy's log.
    let db = f.api.state.db();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    let log = loop {
        let size = slipway_store::db::deploy_logs::size(db, deploy_id).await?;
        let log = slipway_store::db::deploy_logs::read(db, deploy_id, 0, size).await?;
        let log = String::from_utf8(log)?;
        if log.contains("[snapshot] done") {
            break log;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the checkpoint never finished: {log}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    // "[snapshot] 38 MiB of 210 MiB, 2 s", with some bytes done.
    let progressed = log.lines().any(|line| {
        line.strip_prefix("[snapshot] ")
            .and_then(|rest| rest.split_once(" of "))
            .is_some_and(|(done, rest)| {
                done.ends_with("iB") && !done.starts_with("0 ") && rest.ends_with(" s")
            })
    });
    assert!(progressed, "no progress line in {log}");
    assert!(
        log.starts_with("[snapshot] taking the pre-deploy checkpoint\n"),
        "{log}"
    );
    let PreDeploySnapshot::Taken { snapshot_id } = operator
        .pre_deploy_snapshot(&deploy_id.to_string(), &request)
        .await?
    else {
        panic!("the finished checkpoint is not taken");
    };
    let rows = f.rows("postgres").await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["snapshot_id"], snapshot_id.as_str());
    Ok(())
}

#[tokio::test]
async fn a_skipped_checkpoint_says_why_in_the_deploy_log() -> Result<()> {
    // A platform without a data server, a snapshot archive or object storage: nothing to keep.
    let api = TestApi::start().await?;
    let user = api.user("skiplog", "basic").await?;
    let app = api.create_app(&user, "shop", "app").await;
    let base = api.serve_internal().await?;
    let operator = InternalClient::new(api.operator_endpoint(&base));
    let deploy_id = Uuid::new_v4();
    let answer = support::pre_deploy_checkpoint(
        &operator,
        &deploy_id.to_string(),
        &PreDeploySnapshotRequest {
            app_id: app["id"].as_str().unwrap().to_owned(),
            channel_id: app["channels"][0]["id"].as_str().unwrap().to_owned(),
            git_sha: None,
        },
    )
    .await?;
    let PreDeploySnapshot::Skipped { reason } = answer else {
        panic!("expected a skipped checkpoint, got {answer:?}");
    };
    let db = api.state.db();
    let size = slipway_store::db::deploy_logs::size(db, deploy_id).await?;
    let log =
        String::from_utf8(slipway_store::db::deploy_logs::read(db, deploy_id, 0, size).await?)?;
    assert_eq!(log, format!("[snapshot] no SQL snapshot: {reason}\n"));
    assert!(
        reason.contains("no data server or snapshot archive is configured"),
        "{reason}"
    );
    Ok(())
}

/// A deploy whose pre-deploy checkpoint cannot finish (the app holds a lock its dump waits for) fails at the
/// operator's deadline, its log saying what it waited for; the dump stops, keeps nothing, and the channel's next
/// deploy takes its checkpoint and goes on to start its version. (The build is recorded on its Job as the operator
/// records a finished one: this tier has no node to run it.)
#[tokio::test]
async fn a_deploy_past_its_deadline_fails_saying_what_it_waited_for_and_the_next_runs() -> Result<()>
{
    let deadline = Duration::from_secs(15);
    let f = fixture_configured("ckdead", "basic", |config| {
        config.deploy_deadline = deadline;
    })
    .await?;
    let mut db = f.database().await?;
    execute(
        &mut db,
        "CREATE TABLE orders (id serial PRIMARY KEY); INSERT INTO orders DEFAULT VALUES;",
    )
    .await?;
    let mut holder = f.database().await?;
    execute(
        &mut holder,
        "BEGIN; LOCK TABLE orders IN ACCESS EXCLUSIVE MODE;",
    )
    .await?;
    let sha = f
        .api
        .commit(
            &f.user,
            &f.app_id,
            json!({"launch.sh": "exec sleep infinity\n"}),
        )
        .await;

    let first = f
        .api
        .deploy(&f.user, &f.app_id, &f.prod_id, json!({"ref": "master"}))
        .await;
    f.record_build(&first, &sha).await?;
    let log = f
        .api
        .finished_deploy(&f.user, &f.app_id, &f.prod_id, &first, WITHIN + deadline)
        .await?;
    let text = log["log"].as_str().unwrap_or_default();
    assert_eq!(log["status"], "failed", "{text}");
    assert!(
        text.contains("[snapshot] taking the pre-deploy checkpoint\n"),
        "{text}"
    );
    assert!(
        text.contains(
            "[deploy] failed: the deploy passed its deadline of 15s waiting for the pre-deploy checkpoint, \
             which got to "
        ),
        "{text}"
    );
    assert!(f.rows("postgres").await.is_empty());

    // The lock goes: the cancelled dump's session ends rather than dumping for nobody, and nothing is kept.
    execute(&mut holder, "COMMIT").await?;
    let db_name = f.db_name().await;
    let server = postgres::server()?;
    slipway_testkit::wait_until(WITHIN, || async {
        let dumping: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND application_name LIKE 'slipway-dump-%'",
        )
        .bind(&db_name)
        .fetch_one(server.pool())
        .await?;
        Ok(dumping == 0)
    })
    .await?;
    assert!(f.rows("postgres").await.is_empty());

    // The next deploy (an operator with the shipped deadline, which a restart does not disturb) runs.
    f.operator.abort();
    f.api
        .start_nodeless_operator_with_postgres(
            &f.user.namespace,
            Default::default(),
            Some(f.store.settings()),
            postgres::settings()?,
        )
        .await?;
    let second = f
        .api
        .deploy(&f.user, &f.app_id, &f.prod_id, json!({"ref": "master"}))
        .await;
    f.record_build(&second, &sha).await?;
    let url = format!("{}/logs?deploy={second}&max_bytes=262144", f.channel_path());
    slipway_testkit::wait_until(WITHIN, || async {
        let log = f.api.get(&url, &f.user).await.expect(200, None);
        let text = log["log"].as_str().unwrap_or_default();
        anyhow::ensure!(log["status"] != "failed", "{text}");
        Ok(text.contains("[snapshot] done: an SQL snapshot of"))
    })
    .await?;
    let rows = f.rows("postgres").await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["kind"], "pre_deploy");
    // Past its checkpoint the deploy starts its version.
    let deployments: kube::Api<k8s_openapi::api::apps::v1::Deployment> =
        kube::Api::namespaced(f.api.kube.clone(), &f.user.namespace);
    slipway_testkit::wait_until(WITHIN, || async {
        Ok(!deployments
            .list(&Default::default())
            .await?
            .items
            .is_empty())
    })
    .await?;
    Ok(())
}
