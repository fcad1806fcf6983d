//! Exports against the real parts: the data server (Debian's PostgreSQL), a versitygw backend behind the
//! platform's S3 gateway (the channel's bucket, and the archive's bucket where exports land), real git for the
//! repository, the test control plane and the operator. An export is asked for, built in the background and
//! downloaded; its archive is read with the real tools: `git clone` of the bundle, `pg_restore --list` of the dump,
//! the bucket's objects compared with what was written. Then every refusal of the routes, an export that fails with
//! its reason, one abandoned by its process, and the two MCP tools driven by the official Python SDK.

// Fixture helpers panic on a malformed response: in a test that is the failure to report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use aws_sdk_s3::primitives::ByteStream;
use axum::http::Method;
use serde_json::{Value, json};
use slipway_backends::object_store::S3Endpoint;
use slipway_postgres::archive::{self, Archive};
use slipway_testkit::tls::TempDir;
use sqlx::{Connection, PgConnection};
use support::blob::{Keys, ObjectStore};
use support::mcp::McpClient;
use support::postgres::{self, execute};
use support::{TestApi, User, call_on};

const WITHIN: Duration = Duration::from_secs(90);

/// An API with a data server, object storage and an archive; an operator; a user with one `app` app whose prod
/// channel's database and bucket are ready.
struct Fixture {
    api: TestApi,
    store: ObjectStore,
    user: User,
    app_id: String,
    prod_id: String,
    _operator: tokio::task::JoinHandle<()>,
}

async fn fixture(prefix: &str) -> Result<Fixture> {
    let mut api = TestApi::start().await?;
    postgres::attach(&mut api)?;
    let store = ObjectStore::start(&mut api, "127.0.0.1").await?;
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
    let user = api.user(prefix, "basic").await?;
    let app = api.create_app(&user, "shop", "app").await;
    let app_id = app["id"].as_str().unwrap().to_owned();
    let prod_id = app["channels"][0]["id"].as_str().unwrap().to_owned();
    let operator = api
        .start_nodeless_operator_with_postgres(
            &user.namespace,
            Default::default(),
            Some(store.settings()),
            postgres::settings()?,
        )
        .await?;
    let f = Fixture {
        api,
        store,
        user,
        app_id,
        prod_id,
        _operator: operator,
    };
    for leg in ["postgres", "blob"] {
        f.api
            .get_until(
                &format!("{}/{leg}", f.channel_path()),
                &f.user.token,
                200,
                WITHIN,
            )
            .await?;
        let deadline = tokio::time::Instant::now() + WITHIN;
        while f
            .api
            .get(&format!("{}/{leg}", f.channel_path()), &f.user)
            .await
            .body["status"]
            != "ready"
        {
            anyhow::ensure!(tokio::time::Instant::now() < deadline, "{leg} never ready");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    Ok(f)
}

impl Fixture {
    fn channel_path(&self) -> String {
        format!("/apps/{}/channels/{}", self.app_id, self.prod_id)
    }

    fn exports(&self) -> String {
        format!("/apps/{}/exports", self.app_id)
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

    /// Asks for an export; its status.
    async fn start(&self) -> Value {
        self.api
            .post(&self.exports(), &self.user, json!({}))
            .await
            .expect(202, None)
    }

    /// Polls the export's status until it is no longer in flight.
    async fn finished(&self, export_id: &str) -> Value {
        let deadline = tokio::time::Instant::now() + WITHIN;
        loop {
            let status = self
                .api
                .get(&format!("{}/{export_id}", self.exports()), &self.user)
                .await
                .expect(200, None);
            if !matches!(status["status"].as_str(), Some("queued" | "running")) {
                return status;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the export is still {}",
                status["status"]
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// The keys the archive's bucket holds under `prefix`.
    async fn archived(&self, prefix: &str) -> Vec<String> {
        let listed = self
            .store
            .backend_client()
            .list_objects_v2()
            .bucket(archive::system_bucket("slipway-"))
            .prefix(prefix)
            .send()
            .await
            .unwrap();
        listed
            .contents()
            .iter()
            .filter_map(|o| o.key().map(str::to_owned))
            .collect()
    }
}

/// GET `path` with `token`: status and body bytes.
async fn fetch(router: &axum::Router, path: &str, token: &str) -> (u16, Vec<u8>) {
    let req = axum::http::Request::builder()
        .uri(path)
        .header("authorization", format!("Bearer {token}"))
        .body(axum::body::Body::empty())
        .unwrap();
    let res = tower::ServiceExt::oneshot(router.clone(), req)
        .await
        .unwrap();
    let status = res.status().as_u16();
    let bytes = axum::body::to_bytes(res.into_body(), usize::MAX)
        .await
        .unwrap()
        .to_vec();
    (status, bytes)
}

/// Unpacks a `tar.gz` into `dir`; the paths of its regular files.
fn unpack(gz: &[u8], dir: &Path) -> Vec<String> {
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(gz));
    archive.unpack(dir).unwrap();
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(gz));
    let mut files: Vec<String> = archive
        .entries()
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.header().entry_type() == tar::EntryType::Regular)
        .map(|e| e.path().unwrap().display().to_string())
        .collect();
    files.sort();
    files
}

/// Runs a program; its stdout, or an error with its stderr.
async fn run(program: &str, args: &[&str], cwd: &Path) -> Result<String> {
    let out = tokio::process::Command::new(program)
        .args(args)
        .current_dir(cwd)
        .output()
        .await
        .with_context(|| format!("start {program}"))?;
    anyhow::ensure!(
        out.status.success(),
        "{program} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
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

#[tokio::test]
async fn an_export_holds_the_repository_env_names_database_and_bucket() -> Result<()> {
    let f = fixture("expo").await?;
    // The repository: two commits on master, one on a branch.
    f.api
        .commit(&f.user, &f.app_id, json!({"launch.sh": "exec ./serve\n"}))
        .await;
    let head = f
        .api
        .commit(&f.user, &f.app_id, json!({"README.md": "# shop\n"}))
        .await;
    let branch = f
        .api
        .post(
            &format!("/apps/{}/changeset", f.app_id),
            &f.user,
            json!({"ref": "next", "message": "next", "changes": {"next.txt": "soon\n"}}),
        )
        .await
        .expect(200, None)["sha"]
        .as_str()
        .unwrap()
        .to_owned();
    // Variables: an app default, a secret, a channel override.
    for body in [
        json!({"key": "GREETING", "value": "hello there"}),
        json!({"key": "API_KEY", "value": "s3cret-value", "kind": "secret"}),
        json!({"key": "MODE", "value": "production-mode", "channel_id": f.prod_id}),
    ] {
        f.api
            .post(&format!("/apps/{}/env", f.app_id), &f.user, body)
            .await
            .expect(204, None);
    }
    // The database: a table with rows.
    let mut db = f.database().await?;
    execute(
        &mut db,
        "CREATE TABLE orders (id serial PRIMARY KEY, item text NOT NULL); \
         INSERT INTO orders (item) VALUES ('tea'), ('cake')",
    )
    .await?;
    // The bucket: two objects, one rewritten, one deleted.
    let (s3, bucket) = f.bucket().await;
    put(&s3, &bucket, "photos/a.txt", "first a").await;
    put(&s3, &bucket, "photos/a.txt", "second a").await;
    put(&s3, &bucket, "notes/b.txt", "b").await;
    put(&s3, &bucket, "gone.txt", "deleted later").await;
    s3.delete_object()
        .bucket(&bucket)
        .key("gone.txt")
        .send()
        .await
        .unwrap();

    let queued = f.start().await;
    assert_eq!(queued["status"], "queued");
    assert!(queued["download"].is_null());
    let export_id = queued["export_id"].as_str().unwrap().to_owned();
    let ready = f.finished(&export_id).await;
    assert_eq!(ready["status"], "ready", "{ready}");
    assert!(ready["size_bytes"].as_i64().unwrap() > 0);
    assert!(ready["expires_at"].is_string());
    let download = &ready["download"];
    let path = download["download_url"].as_str().unwrap().to_owned();
    assert_eq!(
        path,
        format!("/apps/{}/exports/{export_id}/download", f.app_id)
    );
    let token = download["token"].as_str().unwrap().to_owned();

    // The download token works once, for this archive only.
    let (status, _) = fetch(&f.api.router, "/apps", &token).await;
    assert_eq!(status, 403, "good for the download only");
    let (status, gz) = fetch(&f.api.router, &path, &token).await;
    assert_eq!(status, 200);
    assert_eq!(gz.len() as i64, ready["size_bytes"].as_i64().unwrap());
    let (status, again) = fetch(&f.api.router, &path, &token).await;
    assert_eq!(status, 401, "spent by its download");
    let again: Value = serde_json::from_slice(&again)?;
    assert_eq!(again["error"]["code"], "token_revoked");
    // Each reading of the export hands out a new token; two downloads with one at once: exactly one goes on.
    let reread = f.finished(&export_id).await;
    let token = reread["download"]["token"].as_str().unwrap().to_owned();
    let (first, second) = tokio::join!(
        fetch(&f.api.router, &path, &token),
        fetch(&f.api.router, &path, &token)
    );
    let mut statuses = [first.0, second.0];
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 401], "one download per token, even at once");

    let dir = TempDir::new("export")?;
    let files = unpack(&gz, dir.path());
    assert_eq!(
        files,
        [
            "channels/prod/bucket/notes/b.txt",
            "channels/prod/bucket/photos/a.txt",
            "channels/prod/database.dump",
            "env.json",
            "export.json",
            "repo.bundle",
        ]
    );

    // The manifest says what is where.
    let manifest: Value = serde_json::from_slice(&std::fs::read(dir.path().join("export.json"))?)?;
    assert_eq!(manifest["export_id"], export_id.as_str());
    assert_eq!(manifest["app"]["name"], "shop");
    assert_eq!(manifest["app"]["owner"], f.user.username.as_str());
    assert_eq!(manifest["repository"]["file"], "repo.bundle");
    let prod = &manifest["channels"][0];
    assert_eq!(prod["name"], "prod");
    assert_eq!(prod["database"]["file"], "channels/prod/database.dump");
    assert_eq!(prod["bucket"]["objects"], 2);

    // Env: names per channel with kind and scope, never a value.
    let env_text = std::fs::read_to_string(dir.path().join("env.json"))?;
    for value in ["hello there", "s3cret-value", "production-mode"] {
        assert!(!env_text.contains(value), "env.json holds no value");
    }
    let env: Value = serde_json::from_str(&env_text)?;
    let names = |list: &Value| -> BTreeMap<String, (String, String)> {
        list.as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["key"].as_str().unwrap().to_owned(),
                    (
                        e["kind"].as_str().unwrap().to_owned(),
                        e["scope"].as_str().unwrap().to_owned(),
                    ),
                )
            })
            .collect()
    };
    let expected = |pairs: &[(&str, &str, &str)]| -> BTreeMap<String, (String, String)> {
        pairs
            .iter()
            .map(|(k, kind, scope)| ((*k).into(), ((*kind).into(), (*scope).into())))
            .collect()
    };
    assert_eq!(
        names(&env["app"]),
        expected(&[("API_KEY", "secret", "app"), ("GREETING", "env", "app")])
    );
    assert_eq!(
        names(&env["channels"]["prod"]),
        expected(&[
            ("API_KEY", "secret", "app"),
            ("GREETING", "env", "app"),
            ("MODE", "env", "channel"),
        ])
    );

    // The bundle clones, with both branches.
    run("git", &["clone", "-q", "repo.bundle", "work"], dir.path()).await?;
    let work = dir.path().join("work");
    assert_eq!(
        run("git", &["rev-parse", "HEAD"], &work).await?.trim(),
        head
    );
    assert_eq!(std::fs::read_to_string(work.join("README.md"))?, "# shop\n");
    assert_eq!(
        run("git", &["rev-parse", "origin/next"], &work)
            .await?
            .trim(),
        branch
    );

    // The dump is one pg_restore reads, and restores into an empty database with the rows.
    let listing = run(
        "pg_restore",
        &["--list", "channels/prod/database.dump"],
        dir.path(),
    )
    .await?;
    assert!(listing.contains("TABLE public orders"), "{listing}");
    let scratch = format!(
        "export_check_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let mut admin = PgConnection::connect(&postgres::admin_url()).await?;
    execute(&mut admin, &format!("CREATE DATABASE {scratch}")).await?;
    let mut target = reqwest::Url::parse(&postgres::admin_url())?;
    target.set_path(&format!("/{scratch}"));
    run(
        "pg_restore",
        &[
            "--no-owner",
            "--no-privileges",
            "--clean",
            "--if-exists",
            "--exit-on-error",
            "--dbname",
            target.as_str(),
            "channels/prod/database.dump",
        ],
        dir.path(),
    )
    .await?;
    let mut restored = PgConnection::connect(target.as_str()).await?;
    let items: Vec<String> = sqlx::query_scalar("SELECT item FROM orders ORDER BY id")
        .fetch_all(&mut restored)
        .await?;
    assert_eq!(items, ["tea", "cake"]);
    restored.close().await?;
    execute(&mut admin, &format!("DROP DATABASE {scratch}")).await?;

    // The bucket: the current version of each object, nothing deleted.
    let read = |p: &str| std::fs::read_to_string(dir.path().join(p)).unwrap();
    assert_eq!(read("channels/prod/bucket/photos/a.txt"), "second a");
    assert_eq!(read("channels/prod/bucket/notes/b.txt"), "b");

    // Asking, each download token and the download are in the app's journal.
    let journal = f
        .api
        .get(&format!("/apps/{}/activity", f.app_id), &f.user)
        .await
        .expect(200, None);
    let actions: Vec<&str> = journal["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["action"].as_str())
        .filter(|a| a.starts_with("export."))
        .collect();
    // Newest first; the download refused at once left nothing.
    assert_eq!(
        actions,
        [
            "export.download",
            "export.download_token",
            "export.download",
            "export.download_token",
            "export.create"
        ]
    );

    // The archive goes with its app.
    let prefix = format!("exports/{}/", f.app_id);
    assert!(!f.archived(&prefix).await.is_empty());
    f.api
        .delete(&format!("/apps/{}", f.app_id), &f.user)
        .await
        .expect(204, None);
    assert_eq!(f.archived(&prefix).await, Vec::<String>::new());
    Ok(())
}

#[tokio::test]
async fn export_routes_refuse_as_the_spec_and_their_roles_say() -> Result<()> {
    let mut f = fixture("exref").await?;
    let stranger = f.api.user("exstr", "basic").await?;
    let member = f.api.user("exmem", "basic").await?;
    f.api
        .call(
            Method::PUT,
            &format!("/apps/{}/members/{}", f.app_id, member.username),
            Some(&f.user.token),
            Some(json!({"role": "member"})),
        )
        .await
        .expect(200, None);
    let without_scope: Vec<String> = slipway_auth::scopes::DEFAULT
        .iter()
        .filter(|s| **s != "exports:read")
        .map(|s| (*s).to_owned())
        .collect();
    let narrow = f.api.token(f.user.id, &without_scope, false, None).await?;

    // 401 without a token; 403 without exports:read; 404 for a stranger (as for a missing app); 403 for a member.
    f.api
        .call(Method::POST, &f.exports(), None, None)
        .await
        .expect(401, Some("auth_required"));
    f.api
        .call(Method::POST, &f.exports(), Some(&narrow), None)
        .await
        .expect(403, Some("scope_denied"));
    f.api
        .call(Method::POST, &f.exports(), Some(&stranger.token), None)
        .await
        .expect(404, Some("not_found"));
    f.api
        .call(
            Method::POST,
            &format!("/apps/{}/exports", uuid::Uuid::new_v4()),
            Some(&stranger.token),
            None,
        )
        .await
        .expect(404, Some("not_found"));
    f.api
        .call(Method::POST, &f.exports(), Some(&member.token), None)
        .await
        .expect(403, Some("permission_denied"));

    // One export in flight per app: a table lock holds pg_dump, so the first stays in flight.
    let mut db = f.database().await?;
    execute(&mut db, "CREATE TABLE held (id int)").await?;
    let mut lock = db.begin().await?;
    sqlx::query("LOCK TABLE held IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *lock)
        .await?;
    let first = f.start().await;
    let first_id = first["export_id"].as_str().unwrap().to_owned();
    let second = f
        .api
        .post(&f.exports(), &f.user, json!({}))
        .await
        .expect(409, Some("conflict"));
    assert!(
        second["error"]["message"]
            .as_str()
            .unwrap()
            .contains(&first_id),
        "the refusal names the export in flight: {second}"
    );
    let status_path = format!("{}/{first_id}", f.exports());
    for (token, status, code) in [
        (&stranger.token, 404, "not_found"),
        (&member.token, 403, "permission_denied"),
        (&narrow, 403, "scope_denied"),
    ] {
        f.api
            .call(Method::GET, &status_path, Some(token), None)
            .await
            .expect(status, Some(code));
        f.api
            .call(
                Method::GET,
                &format!("{status_path}/download"),
                Some(token),
                None,
            )
            .await
            .expect(status, Some(code));
    }
    f.api
        .get(
            &format!("{}/{}", f.exports(), uuid::Uuid::new_v4()),
            &f.user,
        )
        .await
        .expect(404, Some("not_found"));
    let in_flight = f.api.get(&status_path, &f.user).await.expect(200, None);
    assert!(in_flight["download"].is_null(), "{in_flight}");
    f.api
        .get(&format!("{status_path}/download"), &f.user)
        .await
        .expect(409, Some("conflict"));

    // Its process stops writing its heartbeat (as if it had died): the next reader fails it, and a new one may
    // start. When the old build finishes anyway, its archive is nobody's and is deleted.
    sqlx::query("UPDATE exports SET heartbeat_at = now() - interval '10 minutes' WHERE id = $1")
        .bind(uuid::Uuid::parse_str(&first_id)?)
        .execute(f.api.state.db())
        .await?;
    let abandoned = f.api.get(&status_path, &f.user).await.expect(200, None);
    assert_eq!(abandoned["status"], "failed");
    assert!(
        abandoned["reason"]
            .as_str()
            .unwrap()
            .contains("interrupted"),
        "{abandoned}"
    );
    let next = f.start().await;
    let next_id = next["export_id"].as_str().unwrap().to_owned();
    lock.commit().await?;
    assert_eq!(f.finished(&next_id).await["status"], "ready");
    let old_prefix = format!("exports/{}/{first_id}/", f.app_id);
    let deadline = tokio::time::Instant::now() + WITHIN;
    while !f.archived(&old_prefix).await.is_empty() {
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "the abandoned export's files stay"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(
        f.api.get(&status_path, &f.user).await.body["status"],
        "failed"
    );

    // Object storage down: the export fails with a reason, and frees the app for the next one.
    f.store.backend.pause();
    let failing = f.start().await;
    let failed = f.finished(failing["export_id"].as_str().unwrap()).await;
    assert_eq!(failed["status"], "failed", "{failed}");
    assert!(
        failed["reason"]
            .as_str()
            .is_some_and(|r| r.contains("object storage")),
        "{failed}"
    );
    assert!(failed["download"].is_null());
    f.store.backend.resume().await?;
    let after = f.start().await;
    assert_eq!(
        f.finished(after["export_id"].as_str().unwrap()).await["status"],
        "ready"
    );
    Ok(())
}

#[tokio::test]
async fn without_object_storage_or_with_downloads_off_no_export_starts() -> Result<()> {
    let api = TestApi::start().await?;
    let user = api.user("exoff", "basic").await?;
    let app = api.create_app(&user, "site", "static").await;
    let path = format!("/apps/{}/exports", app["id"].as_str().unwrap());
    api.post(&path, &user, json!({}))
        .await
        .expect(503, Some("service_unavailable"));
    let api = api.with_limits(slipway_core::state::Limits {
        downloads: false,
        ..Default::default()
    });
    api.post(&path, &user, json!({}))
        .await
        .expect(403, Some("download_disabled"));
    Ok(())
}

#[tokio::test]
async fn the_export_tools_start_an_export_and_hand_out_its_download() -> Result<()> {
    let mut f = fixture("exmcp").await?;
    let member = f.api.user("exmcm", "basic").await?;
    let stranger = f.api.user("exmcs", "basic").await?;
    f.api
        .call(
            Method::PUT,
            &format!("/apps/{}/members/{}", f.app_id, member.username),
            Some(&f.user.token),
            Some(json!({"role": "member"})),
        )
        .await
        .expect(200, None);
    f.api
        .commit(&f.user, &f.app_id, json!({"launch.sh": "exec ./serve\n"}))
        .await;
    let base = f.api.serve().await?;
    // Download links are on the API's public URL: here, the socket it is served on.
    let urls = slipway_core::public_urls::PublicUrls::new(Some(&base), None)?;
    f.api.enable(|features| features.public_urls = urls);
    let url = format!("{base}/mcp");
    let mut owner = McpClient::connect(&url, &f.user.token).await?;

    // A table lock holds the export's pg_dump, so it stays in flight until the lock goes.
    let mut db = f.database().await?;
    execute(&mut db, "CREATE TABLE held (id int)").await?;
    let mut lock = db.begin().await?;
    sqlx::query("LOCK TABLE held IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *lock)
        .await?;
    let started = owner
        .call("export_data", json!({"app_name": "shop"}))
        .await?
        .ok();
    assert_eq!(started["status"], "queued");
    let export_id = started["export_id"].as_str().unwrap().to_owned();
    let busy = owner
        .call("export_data", json!({"app_name": "shop"}))
        .await?;
    let route = f
        .api
        .post(&f.exports(), &f.user, json!({}))
        .await
        .expect(409, Some("conflict"));
    assert_eq!(busy.refusal(), (409, "conflict".to_owned()));
    assert_eq!(
        busy.structured["error"]["message"],
        route["error"]["message"]
    );
    lock.commit().await?;
    let deadline = tokio::time::Instant::now() + WITHIN;
    let status = loop {
        let status = owner
            .call(
                "get_export_status",
                json!({"app_name": "shop", "export_id": export_id}),
            )
            .await?
            .ok();
        if !matches!(status["status"].as_str(), Some("queued" | "running")) {
            break status;
        }
        anyhow::ensure!(tokio::time::Instant::now() < deadline, "still {status}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert_eq!(status["status"], "ready", "{status}");
    let link = &status["download"];
    let download_url = link["url"].as_str().unwrap();
    assert_eq!(
        download_url,
        format!("{base}/apps/{}/exports/{export_id}/download", f.app_id)
    );
    assert!(link["expires_at"].is_string());
    assert!(link["curl"].as_str().unwrap().contains(download_url));
    let authorization = link["headers"]["Authorization"].as_str().unwrap();
    let answer = reqwest::Client::new()
        .get(download_url)
        .header("authorization", authorization)
        .send()
        .await?;
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.headers()["content-type"], "application/gzip");
    let gz = answer.bytes().await?;
    let dir = TempDir::new("export")?;
    let files = unpack(&gz, dir.path());
    assert!(files.contains(&"repo.bundle".to_owned()), "{files:?}");
    assert!(files.contains(&"channels/prod/database.dump".to_owned()));

    // Refusals are the routes': a member's 403, a stranger's 404, a missing export's 404.
    let shared = format!("{}/shop", f.user.username);
    let mut as_member = McpClient::connect(&url, &member.token).await?;
    let refused = as_member
        .call("export_data", json!({"app_name": shared}))
        .await?;
    let route = call_on(
        &f.api.router,
        Method::POST,
        &f.exports(),
        Some(&member.token),
        None,
    )
    .await;
    assert_eq!(refused.refusal(), (403, "permission_denied".to_owned()));
    assert_eq!(route.status, 403);
    let mut as_stranger = McpClient::connect(&url, &stranger.token).await?;
    let hidden = as_stranger
        .call(
            "get_export_status",
            json!({"app_name": f.app_id, "export_id": export_id}),
        )
        .await?;
    assert_eq!(hidden.refusal(), (404, "not_found".to_owned()));
    let missing = owner
        .call(
            "get_export_status",
            json!({"app_name": "shop", "export_id": uuid::Uuid::new_v4()}),
        )
        .await?;
    assert_eq!(missing.refusal(), (404, "not_found".to_owned()));

    // Past its day the archive reads expired at once, downloads no more, and the sweep deletes its files.
    sqlx::query("UPDATE exports SET expires_at = now() - interval '1 second' WHERE id = $1")
        .bind(uuid::Uuid::parse_str(&export_id)?)
        .execute(f.api.state.db())
        .await?;
    let expired = owner
        .call(
            "get_export_status",
            json!({"app_name": "shop", "export_id": export_id}),
        )
        .await?
        .ok();
    assert_eq!(expired["status"], "expired");
    assert!(expired["download"].is_null(), "{expired}");
    f.api
        .get(&format!("{}/{export_id}/download", f.exports()), &f.user)
        .await
        .expect(409, Some("conflict"));
    let files = format!("exports/{}/{export_id}/", f.app_id);
    assert!(!f.archived(&files).await.is_empty());
    slipway_data::exports::sweep(&f.api.state).await?;
    assert_eq!(f.archived(&files).await, Vec::<String>::new());
    let row: (String, Option<String>) =
        sqlx::query_as("SELECT status, object_key FROM exports WHERE id = $1")
            .bind(uuid::Uuid::parse_str(&export_id)?)
            .fetch_one(f.api.state.db())
            .await?;
    assert_eq!(row, ("expired".to_owned(), None));
    Ok(())
}
