//! SQL snapshots against the real parts: the channels' data server (Debian's PostgreSQL 15 with pgextwlist), a
//! versitygw backend holding the snapshot files in the platform's system bucket, the platform database, the test
//! control plane and the operator. Snapshots are taken the ways the platform takes them (the operator's internal
//! route for `pre_deploy`, the nightly pass), listed, downloaded (`pg_restore` reads the file), restored in place,
//! and pruned by plan.

// Fixture helpers panic on a malformed response: in a test that is the failure to report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use anyhow::{Context, Result};
use axum::body::Body;
use axum::http::{Method, Request};
use chrono::Utc;
use serde_json::{Value, json};
use slipway_backends::object_store::S3Endpoint;
use slipway_internal::InternalClient;
use slipway_internal::protocol::{PreDeploySnapshot, PreDeploySnapshotRequest};
use slipway_postgres::archive::{self, Archive};
use slipway_testkit::s3::TestS3;
use sqlx::PgConnection;
use support::console::TestConsole;
use support::postgres::{self, Fixture, execute, fixture};
use tower::ServiceExt;
use uuid::Uuid;

/// A database fixture whose API keeps snapshots in a backend of its own.
struct Snapshots {
    f: Fixture,
    backend: TestS3,
    archive: Archive,
}

async fn snapshots(prefix: &str, plan: &str) -> Result<Snapshots> {
    let mut f = fixture(prefix, plan).await?;
    let backend = TestS3::start().await?;
    let archive = Archive::new(
        &S3Endpoint {
            url: backend.url.clone(),
            access_key_id: backend.access_key_id.clone(),
            secret_access_key: backend.secret_access_key.clone(),
        },
        archive::system_bucket("slipway-"),
    );
    archive.ensure_bucket().await?;
    f.api
        .enable(|features| features.snapshot_archive = Some(archive.clone()));
    f.ready(&f.prod_id).await;
    Ok(Snapshots {
        f,
        backend,
        archive,
    })
}

impl Snapshots {
    fn list_path(&self, channel_id: &str) -> String {
        format!("{}/snapshots", self.f.path(channel_id))
    }

    fn download_path(&self, channel_id: &str, snapshot_id: &str) -> String {
        format!(
            "{}/snapshots/{snapshot_id}/download",
            self.f.path(channel_id)
        )
    }

    /// The write role's connection, as the app has it.
    async fn app_connection(&self, channel_id: &str) -> Result<PgConnection> {
        let env = postgres::variables(&self.f.api, channel_id).await?;
        Ok(postgres::connect(&env["DATABASE_URL"]).await?)
    }

    /// Asks for a deploy's pre-deploy snapshot the way the operator does, with its identity.
    async fn pre_deploy(
        &self,
        channel_id: &str,
        git_sha: Option<&str>,
    ) -> Result<PreDeploySnapshot> {
        let base = self.f.api.serve_internal().await?;
        let client = InternalClient::new(self.f.api.operator_endpoint(&base));
        support::pre_deploy_checkpoint(
            &client,
            &Uuid::new_v4().to_string(),
            &PreDeploySnapshotRequest {
                app_id: self.f.app_id.clone(),
                channel_id: channel_id.to_owned(),
                git_sha: git_sha.map(str::to_owned),
            },
        )
        .await
    }

    /// Takes a pre-deploy snapshot of prod; its id.
    async fn snapshot(&self, git_sha: Option<&str>) -> Result<String> {
        self.snapshot_of(&self.f.prod_id, git_sha).await
    }

    /// Takes a pre-deploy snapshot of `channel_id`; its id.
    async fn snapshot_of(&self, channel_id: &str, git_sha: Option<&str>) -> Result<String> {
        match self.pre_deploy(channel_id, git_sha).await? {
            PreDeploySnapshot::Taken { snapshot_id } => Ok(snapshot_id),
            other => panic!("no snapshot: {other:?}"),
        }
    }

    async fn rows(&self, channel_id: &str) -> Vec<Value> {
        let list = self
            .f
            .api
            .get(&self.list_path(channel_id), &self.f.user)
            .await
            .expect(200, None);
        list.as_array().unwrap().clone()
    }

    /// GET with `token`, the body as bytes.
    async fn fetch(&self, path: &str, token: &str) -> (u16, Vec<u8>, Value) {
        let req = Request::builder()
            .method(Method::GET)
            .uri(path)
            .header("authorization", format!("Bearer {token}"))
            .body(Body::empty())
            .unwrap();
        let res = self.f.api.router.clone().oneshot(req).await.unwrap();
        let status = res.status().as_u16();
        let headers = json!({
            "content-type": res.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned()),
            "content-disposition": res.headers().get("content-disposition").map(|v| v.to_str().unwrap().to_owned()),
        });
        let bytes = axum::body::to_bytes(res.into_body(), usize::MAX)
            .await
            .unwrap()
            .to_vec();
        (status, bytes, headers)
    }

    /// The object keys in the system bucket.
    async fn files(&self) -> Vec<String> {
        let client = slipway_backends::object_store::client(
            &S3Endpoint {
                url: self.backend.url.clone(),
                access_key_id: self.backend.access_key_id.clone(),
                secret_access_key: self.backend.secret_access_key.clone(),
            },
            None,
        );
        let listed = client
            .list_objects_v2()
            .bucket(archive::system_bucket("slipway-"))
            .send()
            .await
            .unwrap();
        let mut keys: Vec<String> = listed
            .contents()
            .iter()
            .filter_map(|o| o.key().map(str::to_owned))
            .collect();
        keys.sort();
        keys
    }

    /// A staging channel whose table `notes` held `kept` when its snapshot was taken and `changed` since: the
    /// channel's id, its database's name, the snapshot's id and the app's connection.
    async fn kept_then_changed(&self) -> Result<(String, String, String, PgConnection)> {
        let staging = self.f.new_channel("staging").await;
        let status = self.f.ready(&staging).await;
        let db_name = status["db_name"].as_str().unwrap().to_owned();
        let mut app = self.app_connection(&staging).await?;
        execute(
            &mut app,
            "CREATE TABLE notes (id serial PRIMARY KEY, body text); INSERT INTO notes (body) VALUES ('kept')",
        )
        .await?;
        let snapshot = self.snapshot_of(&staging, None).await?;
        execute(&mut app, "UPDATE notes SET body = 'changed'").await?;
        Ok((staging, db_name, snapshot, app))
    }

    /// The console, and a client signed in to it as the app's owner (by a code mailed to a verified address).
    async fn signed_in_console(&mut self) -> Result<(TestConsole, support::browser::Browser)> {
        let address = format!("{}@people.test", self.f.user.username);
        slipway_store::db::users::set_verified_email(
            self.f.api.state.db(),
            &self.f.user.username.parse()?,
            &address,
        )
        .await?;
        let console = TestConsole::start(&mut self.f.api).await?;
        let client = console.client()?;
        console.sign_in_by_code(&client, &address).await?;
        Ok((console, client))
    }

    async fn restore(&self, channel_id: &str, body: Value) -> support::Reply {
        self.f
            .api
            .post(
                &format!("{}/restore", self.f.path(channel_id)),
                &self.f.user,
                body,
            )
            .await
    }
}

/// Holds `channel`'s checkpoint lock, as a checkpoint pruning the files a restore reads does, until the sender is
/// used or dropped; returns once the lock is held.
async fn hold_checkpoint_lock(
    db: &sqlx::PgPool,
    channel: Uuid,
) -> Result<(
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<sqlx::Result<()>>,
)> {
    let db = db.clone();
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    let (started, under_way) = tokio::sync::oneshot::channel::<()>();
    let holder = tokio::spawn(async move {
        slipway_data::checkpoints::exclusively(&db, channel, async move {
            let _ = started.send(());
            let _ = released.await;
        })
        .await
    });
    under_way.await?;
    Ok((release, holder))
}

async fn notes(conn: &mut PgConnection) -> Vec<String> {
    sqlx::query_scalar("SELECT body FROM notes ORDER BY id")
        .fetch_all(conn)
        .await
        .unwrap()
}

/// Runs a client program of the data server with `input` on stdin; its stdout (it must succeed).
async fn run_client(program: &str, db_name: &str, args: &[&str], input: &[u8]) -> Result<Vec<u8>> {
    use tokio::io::AsyncWriteExt;
    let server = postgres::server()?;
    let mut command = server.client_command(program, db_name);
    command
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = command.spawn()?;
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input).await?;
    drop(stdin);
    let out = child.wait_with_output().await?;
    assert!(
        out.status.success(),
        "{program} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(out.stdout)
}

#[tokio::test]
async fn snapshots_are_listed_newest_first_and_download_as_a_dump_pg_restore_reads() -> Result<()> {
    let s = snapshots("snaplist", "builder").await?;
    let mut app = s.app_connection(&s.f.prod_id).await?;
    execute(
        &mut app,
        "CREATE TABLE notes (id int PRIMARY KEY, body text); \
         INSERT INTO notes SELECT g, 'note ' || g FROM generate_series(1, 2000) g",
    )
    .await?;
    assert!(
        s.rows(&s.f.prod_id).await.is_empty(),
        "none before the first"
    );

    let first = s.snapshot(None).await?;
    let nightly = slipway_data::checkpoints::nightly::pass(&s.f.api.state).await?;
    assert!(nightly >= 1, "the nightly pass took this channel's");
    let second = s.snapshot(Some(&"a".repeat(40))).await?;
    let rows = s.rows(&s.f.prod_id).await;
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert_eq!(rows[0]["snapshot_id"], second.as_str(), "newest first");
    assert_eq!(rows[0]["kind"], "pre_deploy");
    assert_eq!(rows[0]["git_sha"], "a".repeat(40).as_str());
    assert!(rows[0]["deploy_id"].is_string());
    assert_eq!(rows[1]["kind"], "nightly");
    assert_eq!(rows[1]["deploy_id"], Value::Null);
    assert_eq!(rows[2]["snapshot_id"], first.as_str());
    assert_eq!(
        rows[2]["git_sha"],
        Value::Null,
        "the channel's first deploy: no commit ran before"
    );
    for row in &rows {
        assert!(row["size_bytes"].as_i64().unwrap() > 0, "{row}");
        assert_eq!(row["aligned_blob"], false);
        assert_eq!(row["recoverable"], true);
    }
    // One nightly per channel per day: a second pass takes none for it.
    slipway_data::checkpoints::nightly::pass(&s.f.api.state).await?;
    assert_eq!(s.rows(&s.f.prod_id).await.len(), 3);
    assert_eq!(s.files().await.len(), 3, "one file per row");

    // The download is the custom-format dump: pg_restore lists it and loads it into a fresh database.
    let (status, bytes, headers) = s
        .fetch(&s.download_path(&s.f.prod_id, &second), &s.f.user.token)
        .await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&bytes));
    assert_eq!(headers["content-type"], "application/octet-stream");
    assert!(
        headers["content-disposition"]
            .as_str()
            .unwrap()
            .starts_with("attachment; filename=\"shop-pre_deploy-"),
        "{headers}"
    );
    assert_eq!(bytes.len() as i64, rows[0]["size_bytes"].as_i64().unwrap());
    assert!(bytes.starts_with(b"PGDMP"), "a custom-format archive");
    let listing = run_client("pg_restore", "postgres", &["--list"], &bytes).await?;
    assert!(String::from_utf8_lossy(&listing).contains("TABLE public notes"));
    let target = format!("restored_{}", Uuid::new_v4().simple());
    let server = postgres::server()?;
    execute(
        &mut *server.pool().acquire().await?,
        &format!("CREATE DATABASE {target}"),
    )
    .await?;
    run_client(
        "pg_restore",
        &target,
        &["--no-owner", "--dbname", &target],
        &bytes,
    )
    .await?;
    let mut loaded = server.connect_to(&target).await?;
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM notes")
        .fetch_one(&mut loaded)
        .await?;
    assert_eq!(count, 2000);
    drop(loaded);
    execute(
        &mut *server.pool().acquire().await?,
        &format!("DROP DATABASE {target} WITH (FORCE)"),
    )
    .await?;
    let audited: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_events WHERE action = 'postgres.snapshot.download' AND detail->>'snapshot_id' = $1",
    )
    .bind(&second)
    .fetch_one(s.f.api.state.db())
    .await?;
    assert_eq!(audited, 1);

    // Another channel's id, a random id and a static app's channel: 404s with their codes.
    let (status, body, _) = s
        .fetch(
            &s.download_path(&s.f.prod_id, &Uuid::new_v4().to_string()),
            &s.f.user.token,
        )
        .await;
    assert_eq!(status, 404);
    assert!(String::from_utf8_lossy(&body).contains("snapshot_not_found"));
    let staging = s.f.new_channel("staging").await;
    s.f.ready(&staging).await;
    let (status, body, _) = s
        .fetch(&s.download_path(&staging, &second), &s.f.user.token)
        .await;
    assert_eq!(
        status, 404,
        "a snapshot of another channel is not this channel's"
    );
    assert!(String::from_utf8_lossy(&body).contains("snapshot_not_found"));
    Ok(())
}

#[tokio::test]
async fn the_console_downloads_a_snapshot_as_the_route_gives_it() -> Result<()> {
    let mut s = snapshots("snapconsole", "builder").await?;
    let id = s.snapshot(None).await?;
    let (console, client) = s.signed_in_console().await?;

    // The channel's page offers each snapshot's download as a form.
    let channel_page = format!("/apps/{}/channels/{}", s.f.app_id, s.f.prod_id);
    let page = client.get(&console.url(&channel_page)).await?;
    assert_eq!(page.status, 200, "{}", page.text);
    let action = format!("{channel_page}/postgres/snapshots/{id}/download");
    assert!(
        page.text.contains(&format!(r#"action="{action}""#)),
        "{}",
        page.text
    );
    let csrf = super::console::csrf_in(&page.text);

    // It answers what the route answers: the same attachment, byte for byte.
    let through = client
        .post_form(&console.url(&action), &[("csrf", &csrf)])
        .await?;
    let (status, direct, headers) = s
        .fetch(&s.download_path(&s.f.prod_id, &id), &s.f.user.token)
        .await;
    assert_eq!(status, 200);
    assert_eq!(through.status, 200, "{}", through.text);
    assert_eq!(
        through.headers["content-disposition"].to_str()?,
        headers["content-disposition"].as_str().unwrap()
    );
    assert_eq!(through.text, String::from_utf8_lossy(&direct));

    // Without the session's CSRF token nothing is sent, and a snapshot the channel does not have is not found.
    let forged = client
        .post_form(&console.url(&action), &[("csrf", &"0".repeat(48))])
        .await?;
    assert_eq!(forged.status, 403);
    let missing = client
        .post_form(
            &console.url(&format!(
                "{channel_page}/postgres/snapshots/{}/download",
                Uuid::new_v4()
            )),
            &[("csrf", &csrf)],
        )
        .await?;
    assert_eq!(missing.status, 404, "{}", missing.text);
    Ok(())
}

#[tokio::test]
async fn the_console_restores_a_snapshot_and_says_when_one_runs_on_past_its_answer() -> Result<()> {
    let mut s = snapshots("snapconsolerestore", "builder").await?;
    let (staging, db_name, snapshot, mut app) = s.kept_then_changed().await?;
    let (console, client) = s.signed_in_console().await?;
    let channel_page = format!("/apps/{}/channels/{staging}", s.f.app_id);
    let action = format!("{channel_page}/postgres/restore");
    let page = client.get(&console.url(&channel_page)).await?;
    assert_eq!(page.status, 200, "{}", page.text);
    assert!(
        page.text.contains(&format!(r#"action="{action}""#))
            && page
                .text
                .contains(&format!(r#"name="snapshot_id" value="{snapshot}""#)),
        "{}",
        page.text
    );
    let csrf = super::console::csrf_in(&page.text);
    let restore = |confirm: String| {
        let (client, console, csrf, action, snapshot) = (
            &client,
            &console,
            csrf.clone(),
            action.clone(),
            snapshot.clone(),
        );
        async move {
            client
                .post_form(
                    &console.url(&action),
                    &[
                        ("csrf", csrf.as_str()),
                        ("snapshot_id", snapshot.as_str()),
                        ("confirm", confirm.as_str()),
                    ],
                )
                .await
        }
    };

    // A mistyped name: the route's 400 on the channel's page, that row's form open with what was typed.
    let refused = restore(format!("{db_name}x")).await?;
    assert_eq!(refused.status, 400, "{}", refused.text);
    assert!(
        refused.text.contains(r#"data-refused="restore-sql""#)
            && refused.text.contains(r#"<details class="confirm" open>"#),
        "{}",
        refused.text
    );
    assert!(refused.text.contains(&format!(r#"value="{db_name}x""#)));
    assert_eq!(notes(&mut app).await, ["changed"], "nothing restored");

    // The name typed: done within the console's wait, and the data is the snapshot's.
    let done = restore(db_name.clone()).await?;
    assert_eq!(done.status, 303, "{}", done.text);
    assert_eq!(
        done.location.as_deref(),
        Some(
            console
                .url(&format!("{channel_page}?done=restored"))
                .as_str()
        )
    );
    let mut app = s.app_connection(&staging).await?;
    assert_eq!(notes(&mut app).await, ["kept"]);

    // A restore that outlasts the console's wait (it waits behind the channel's checkpoint lock): the page says it
    // runs on, and it does, to the end, after the page was answered.
    execute(&mut app, "UPDATE notes SET body = 'changed again'").await?;
    let channel: Uuid = staging.parse()?;
    let (release, holder) = hold_checkpoint_lock(s.f.api.state.db(), channel).await?;
    let running = restore(db_name.clone()).await?;
    assert_eq!(running.status, 303, "{}", running.text);
    assert_eq!(
        running.location.as_deref(),
        Some(
            console
                .url(&format!("{channel_page}?done=restoring"))
                .as_str()
        )
    );
    assert_eq!(notes(&mut app).await, ["changed again"]);
    let _ = release.send(());
    holder.await??;
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    while restore_job_state(s.f.api.state.db(), channel)
        .await
        .as_deref()
        != Some("succeeded")
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the restore never finished: {:?}",
            restore_job_state(s.f.api.state.db(), channel).await
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert_eq!(notes(&mut app).await, ["kept"]);
    Ok(())
}

#[tokio::test]
async fn a_restore_replaces_the_data_in_place_and_a_failed_one_changes_nothing() -> Result<()> {
    let s = snapshots("snaprestore", "builder").await?;
    let staging = s.f.new_channel("staging").await;
    let status = s.f.ready(&staging).await;
    let db_name = status["db_name"].as_str().unwrap().to_owned();
    let mut app = s.app_connection(&staging).await?;
    execute(
        &mut app,
        "CREATE EXTENSION postgis; \
         CREATE TABLE notes (id serial PRIMARY KEY, body text, at geometry(Point, 4326)); \
         INSERT INTO notes (body, at) VALUES ('v1 first', ST_SetSRID(ST_MakePoint(1, 2), 4326)), ('v1 second', NULL)",
    )
    .await?;
    let snapshot = match s.pre_deploy(&staging, None).await? {
        PreDeploySnapshot::Taken { snapshot_id } => snapshot_id,
        other => panic!("{other:?}"),
    };
    // "v2" migrates: changes rows, adds a table.
    execute(
        &mut app,
        "UPDATE notes SET body = 'v2 changed' WHERE id = 1; INSERT INTO notes (body) VALUES ('v2 new'); \
         CREATE TABLE v2_only (x int)",
    )
    .await?;
    drop(app);

    let restored = s
        .restore(
            &staging,
            json!({"confirm_db_name": db_name, "snapshot_id": snapshot}),
        )
        .await
        .expect(200, None);
    assert_eq!(restored["db_name"], db_name.as_str());
    assert_eq!(restored["status"], "ready");
    // The same DATABASE_URL reaches v1's data; the read-only role reads the restored table.
    let mut app = s.app_connection(&staging).await?;
    assert_eq!(notes(&mut app).await, ["v1 first", "v1 second"]);
    let x: f64 = sqlx::query_scalar("SELECT ST_X(at) FROM notes WHERE id = 1")
        .fetch_one(&mut app)
        .await?;
    assert_eq!(x, 1.0, "postgis came back with the data");
    let v2_only: Option<String> = sqlx::query_scalar("SELECT to_regclass('v2_only')::text")
        .fetch_one(&mut app)
        .await?;
    assert_eq!(v2_only, None, "what v2 added is gone");
    execute(
        &mut app,
        "INSERT INTO notes (body) VALUES ('after restore')",
    )
    .await?;
    let env = postgres::variables(&s.f.api, &staging).await?;
    let mut ro = postgres::connect(&env["DATABASE_URL_READONLY"]).await?;
    assert_eq!(notes(&mut ro).await.len(), 3);
    let owner: String =
        sqlx::query_scalar("SELECT tableowner::text FROM pg_tables WHERE tablename = 'notes'")
            .fetch_one(&mut ro)
            .await?;
    assert_eq!(
        owner, db_name,
        "restored tables belong to the channel's role"
    );
    let audited: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_events WHERE action = 'postgres.restore' AND detail->>'snapshot_id' = $1",
    )
    .bind(&snapshot)
    .fetch_one(s.f.api.state.db())
    .await?;
    assert_eq!(audited, 1);
    assert_eq!(
        s.rows(&staging).await.len(),
        1,
        "no snapshot of the replaced state is taken"
    );

    // A file cut off half-way: pg_restore reads some of it, fails, and nothing changes.
    let before = notes(&mut app).await;
    let (_, whole, _) = s
        .fetch(&s.download_path(&staging, &snapshot), &s.f.user.token)
        .await;
    let cut = match s.pre_deploy(&staging, None).await? {
        PreDeploySnapshot::Taken { snapshot_id } => snapshot_id,
        other => panic!("{other:?}"),
    };
    let key = archive::object_key(staging.parse()?, cut.parse()?);
    let half = whole[..whole.len() * 2 / 3].to_vec();
    s.archive
        .upload(&key, futures::stream::iter([Ok(bytes::Bytes::from(half))]))
        .await?;
    let failed = s
        .restore(
            &staging,
            json!({"confirm_db_name": db_name, "snapshot_id": cut}),
        )
        .await
        .expect(503, Some("postgres_unavailable"));
    let message = failed["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("the restore did not complete (")
            && message.ends_with("; the database is unchanged"),
        "{failed}"
    );
    // What pg_restore and psql said stays in the platform's log: it can quote the dump's rows.
    for echo in ["pg_restore:", "psql:", "error:", "exit status"] {
        assert!(!message.contains(echo), "{echo} in {message}");
    }
    let mut app = s.app_connection(&staging).await?;
    assert_eq!(
        notes(&mut app).await,
        before,
        "the data is exactly as before"
    );
    let mut ro = postgres::connect(&env["DATABASE_URL_READONLY"]).await?;
    assert_eq!(
        notes(&mut ro).await,
        before,
        "and the read-only role still reads it"
    );
    Ok(())
}

#[tokio::test]
async fn restore_refusals_follow_the_spec_and_change_nothing() -> Result<()> {
    let s = snapshots("snaprefuse", "builder").await?;
    let status = s.f.ready(&s.f.prod_id).await;
    let db_name = status["db_name"].as_str().unwrap().to_owned();
    let mut app = s.app_connection(&s.f.prod_id).await?;
    execute(
        &mut app,
        "CREATE TABLE notes (id int PRIMARY KEY, body text); INSERT INTO notes VALUES (1, 'kept')",
    )
    .await?;
    let snapshot = s.snapshot(None).await?;
    execute(&mut app, "UPDATE notes SET body = 'current'").await?;

    // Wrong confirmation: 400.
    s.restore(
        &s.f.prod_id,
        json!({"confirm_db_name": "wrong", "snapshot_id": snapshot}),
    )
    .await
    .expect(400, Some("invalid_confirmation"));
    // Prod without SVC_ALLOW_PROD_RESTORE=1 (unset, then 0): 403.
    let restore_prod = || {
        s.restore(
            &s.f.prod_id,
            json!({"confirm_db_name": db_name, "snapshot_id": snapshot}),
        )
    };
    let env_path = format!("/apps/{}/env", s.f.app_id);
    let allow_prod_restore = |value: &str| {
        s.f.api.post(
            &env_path,
            &s.f.user,
            json!({"key": "SVC_ALLOW_PROD_RESTORE", "value": value}),
        )
    };
    restore_prod()
        .await
        .expect(403, Some("prod_restore_blocked"));
    allow_prod_restore("0").await.expect(204, None);
    restore_prod()
        .await
        .expect(403, Some("prod_restore_blocked"));
    allow_prod_restore("1").await.expect(204, None);
    // An id that names no snapshot of the channel: 404.
    s.restore(
        &s.f.prod_id,
        json!({"confirm_db_name": db_name, "snapshot_id": Uuid::new_v4()}),
    )
    .await
    .expect(404, Some("snapshot_not_found"));
    // A deploy queued on the channel: 409 channel_busy. (The operator is stopped first, so it stays queued.)
    s.f.operator.abort();
    let deploys: kube::Api<slipway_crds::Deploy> =
        kube::Api::namespaced(s.f.api.kube.clone(), &s.f.user.namespace);
    let channel =
        s.f.api
            .state
            .cache()
            .channels_in(&s.f.user.namespace)
            .into_iter()
            .find(|c| c.metadata.uid.as_deref() == Some(s.f.prod_id.as_str()))
            .unwrap();
    let queued: slipway_crds::Deploy = serde_json::from_value(json!({
        "apiVersion": "slipway.dev/v1alpha1",
        "kind": "Deploy",
        "metadata": {"name": "queued-restore-test"},
        "spec": {"channel": kube::ResourceExt::name_any(channel.as_ref()), "sha": "b".repeat(40)}
    }))?;
    deploys.create(&Default::default(), &queued).await?;
    restore_prod().await.expect(409, Some("channel_busy"));
    deploys
        .delete("queued-restore-test", &Default::default())
        .await?;
    // Bad bodies: 400 envelopes.
    s.restore(&s.f.prod_id, json!({"confirm_db_name": db_name}))
        .await
        .expect(400, None);
    s.restore(
        &s.f.prod_id,
        json!({"confirm_db_name": db_name, "snapshot_id": "nope"}),
    )
    .await
    .expect(400, None);
    assert_eq!(
        notes(&mut app).await,
        ["current"],
        "no refusal touched the data"
    );

    // A member may list but not restore or download.
    let member = s.f.api.user("snapmember", "basic").await?;
    s.f.api
        .call(
            Method::PUT,
            &format!("/apps/{}/members/{}", s.f.app_id, member.username),
            Some(&s.f.user.token),
            Some(json!({"role": "member"})),
        )
        .await
        .expect(200, None);
    s.f.api
        .get(&s.list_path(&s.f.prod_id), &member)
        .await
        .expect(200, None);
    s.f.api
        .post(
            &format!("{}/restore", s.f.path(&s.f.prod_id)),
            &member,
            json!({"confirm_db_name": db_name, "snapshot_id": snapshot}),
        )
        .await
        .expect(403, Some("permission_denied"));
    let (status, _, _) = s
        .fetch(&s.download_path(&s.f.prod_id, &snapshot), &member.token)
        .await;
    assert_eq!(status, 403);

    // Allowed now: prod is restored.
    restore_prod().await.expect(200, None);
    let mut app = s.app_connection(&s.f.prod_id).await?;
    assert_eq!(notes(&mut app).await, ["kept"]);
    Ok(())
}

#[tokio::test]
async fn a_download_token_downloads_its_snapshot_and_nothing_else() -> Result<()> {
    let s = snapshots("snaptoken", "builder").await?;
    let one = s.snapshot(None).await?;
    let other = s.snapshot(None).await?;
    let minted =
        s.f.api
            .post(
                &format!("{}/snapshots/{one}/download-token", s.f.path(&s.f.prod_id)),
                &s.f.user,
                json!({}),
            )
            .await
            .expect(201, None);
    let token = minted["token"].as_str().unwrap();
    assert_eq!(
        minted["download_url"],
        s.download_path(&s.f.prod_id, &one).as_str()
    );
    let expires: chrono::DateTime<Utc> = minted["expires_at"].as_str().unwrap().parse()?;
    let life = expires - Utc::now();
    assert!(
        life <= chrono::Duration::hours(1) && life > chrono::Duration::minutes(59),
        "{life}"
    );
    let (status, bytes, _) = s
        .fetch(minted["download_url"].as_str().unwrap(), token)
        .await;
    assert_eq!(status, 200);
    assert!(bytes.starts_with(b"PGDMP"));
    // Stored only as a hash.
    let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM tokens WHERE token_hash = $1")
        .bind(&slipway_auth::token::hash(token)[..])
        .fetch_one(s.f.api.state.db())
        .await?;
    assert_eq!(stored, 1);
    // Good for that one download only: not another snapshot, not a listing, not minting tokens.
    let (status, body, _) = s.fetch(&s.download_path(&s.f.prod_id, &other), token).await;
    assert_eq!(status, 403, "{}", String::from_utf8_lossy(&body));
    assert!(String::from_utf8_lossy(&body).contains("scope_denied"));
    s.f.api
        .call(Method::GET, "/apps", Some(token), None)
        .await
        .expect(403, Some("scope_denied"));
    s.f.api
        .call(Method::POST, "/tokens", Some(token), Some(json!({})))
        .await
        .expect(403, Some("scope_denied"));

    // A caller whose token ends sooner gets a token that ends with it.
    let soon = Utc::now() + chrono::Duration::minutes(10);
    let short =
        s.f.api
            .token(
                s.f.user.id,
                &slipway_auth::scopes::default_scopes(),
                false,
                Some(soon),
            )
            .await?;
    let minted =
        s.f.api
            .call(
                Method::POST,
                &format!("{}/snapshots/{one}/download-token", s.f.path(&s.f.prod_id)),
                Some(&short),
                Some(json!({})),
            )
            .await
            .expect(201, None);
    let expires: chrono::DateTime<Utc> = minted["expires_at"].as_str().unwrap().parse()?;
    assert!(
        (expires - soon).num_seconds().abs() <= 1,
        "{expires} vs {soon}"
    );

    // Without snapshots:read: 403 scope_denied, for the token and for the download.
    let narrow =
        s.f.api
            .token(s.f.user.id, &["repo:*".to_owned()], false, None)
            .await?;
    s.f.api
        .call(
            Method::POST,
            &format!("{}/snapshots/{one}/download-token", s.f.path(&s.f.prod_id)),
            Some(&narrow),
            Some(json!({})),
        )
        .await
        .expect(403, Some("scope_denied"));
    let (status, _, _) = s.fetch(&s.download_path(&s.f.prod_id, &one), &narrow).await;
    assert_eq!(status, 403);
    // An unknown snapshot: 404 snapshot_not_found.
    s.f.api
        .post(
            &format!(
                "{}/snapshots/{}/download-token",
                s.f.path(&s.f.prod_id),
                Uuid::new_v4()
            ),
            &s.f.user,
            json!({}),
        )
        .await
        .expect(404, Some("snapshot_not_found"));

    // The platform operator turns downloads off: both routes answer 403 download_disabled.
    let limits = slipway_core::state::Limits {
        downloads: false,
        ..Default::default()
    };
    let api = s.f.api.with_limits(limits);
    api.post(
        &format!(
            "/apps/{}/channels/{}/postgres/snapshots/{one}/download-token",
            s.f.app_id, s.f.prod_id
        ),
        &s.f.user,
        json!({}),
    )
    .await
    .expect(403, Some("download_disabled"));
    api.get(
        &format!(
            "/apps/{}/channels/{}/postgres/snapshots/{one}/download",
            s.f.app_id, s.f.prod_id
        ),
        &s.f.user,
    )
    .await
    .expect(403, Some("download_disabled"));
    Ok(())
}

#[tokio::test]
async fn the_nightly_pass_goes_on_past_a_channel_whose_owner_cannot_be_read() -> Result<()> {
    let s = snapshots("snapowner", "builder").await?;
    let next =
        s.f.api
            .post(
                &format!("/apps/{}/channels", s.f.app_id),
                &s.f.user,
                json!({"name": "next", "git_ref_binding": "branch:next"}),
            )
            .await
            .expect(200, None);
    let next_id = next["id"].as_str().unwrap().to_owned();
    s.f.ready(&next_id).await;
    // The next channel's record comes first in the pass and names an owner with no account, as a row left by an
    // account removed under it would.
    sqlx::query(
        "UPDATE channel_databases SET owner = 'gone', created_at = created_at - interval '1 day'          WHERE channel_id = $1",
    )
    .bind(Uuid::parse_str(&next_id)?)
    .execute(s.f.api.state.db())
    .await?;
    let taken = slipway_data::checkpoints::nightly::pass(&s.f.api.state).await?;
    assert_eq!(taken, 1, "prod's nightly is taken past the unreadable row");
    let kinds: Vec<Value> = s
        .rows(&s.f.prod_id)
        .await
        .iter()
        .map(|r| r["kind"].clone())
        .collect();
    assert_eq!(kinds, [json!("nightly")]);
    assert!(
        s.rows(&next_id).await.is_empty(),
        "the unreadable one waits"
    );
    Ok(())
}

#[tokio::test]
async fn snapshots_are_pruned_to_the_owners_plan() -> Result<()> {
    // basic: the newest pre-deploy, nightlies for 24 hours (the newest always).
    let s = snapshots("snapbasic", "basic").await?;
    for _ in 0..3 {
        s.snapshot(None).await?;
    }
    let newest = s.snapshot(None).await?;
    let rows = s.rows(&s.f.prod_id).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["snapshot_id"], newest.as_str());
    assert_eq!(s.files().await.len(), 1, "pruned files are removed too");
    // An old nightly is the newest nightly: kept at any age.
    slipway_data::checkpoints::nightly::pass(&s.f.api.state).await?;
    sqlx::query("UPDATE postgres_snapshots SET created_at = now() - interval '3 days', taken_on = taken_on - 3 WHERE kind = 'nightly' AND channel_id = $1")
        .bind(Uuid::parse_str(&s.f.prod_id)?)
        .execute(s.f.api.state.db())
        .await?;
    s.snapshot(None).await?;
    let kinds: Vec<String> = s
        .rows(&s.f.prod_id)
        .await
        .iter()
        .map(|r| r["kind"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        kinds,
        ["pre_deploy", "nightly"],
        "the newest nightly stays however old"
    );
    // Today's nightly makes the old one expire.
    slipway_data::checkpoints::nightly::pass(&s.f.api.state).await?;
    let rows = s.rows(&s.f.prod_id).await;
    let nightlies: Vec<&Value> = rows.iter().filter(|r| r["kind"] == "nightly").collect();
    assert_eq!(nightlies.len(), 1, "{rows:?}");
    let age = Utc::now()
        - nightlies[0]["created_at"]
            .as_str()
            .unwrap()
            .parse::<chrono::DateTime<Utc>>()?;
    assert!(age < chrono::Duration::hours(1), "the old one went");
    assert_eq!(s.files().await.len(), 2);

    // A paid plan keeps the newest three pre-deploy snapshots, and nightlies for seven days.
    let paid = snapshots("snappaid", "builder").await?;
    let mut taken = Vec::new();
    for _ in 0..5 {
        taken.push(paid.snapshot(None).await?);
    }
    let kept: Vec<String> = paid
        .rows(&paid.f.prod_id)
        .await
        .iter()
        .map(|r| r["snapshot_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(kept, [taken[4].clone(), taken[3].clone(), taken[2].clone()]);
    slipway_data::checkpoints::nightly::pass(&paid.f.api.state).await?;
    sqlx::query("UPDATE postgres_snapshots SET created_at = now() - interval '6 days', taken_on = taken_on - 6 WHERE kind = 'nightly' AND channel_id = $1")
        .bind(Uuid::parse_str(&paid.f.prod_id)?)
        .execute(paid.f.api.state.db())
        .await?;
    slipway_data::checkpoints::nightly::pass(&paid.f.api.state).await?;
    let nightlies = paid
        .rows(&paid.f.prod_id)
        .await
        .iter()
        .filter(|r| r["kind"] == "nightly")
        .count();
    assert_eq!(nightlies, 2, "six days old is within a paid plan's seven");
    Ok(())
}

#[tokio::test]
async fn the_pre_deploy_route_is_the_operators_and_skips_what_it_cannot_keep() -> Result<()> {
    let mut s = snapshots("snaproute", "basic").await?;
    // The same deploy asked twice: one snapshot.
    let base = s.f.api.serve_internal().await?;
    let operator = InternalClient::new(s.f.api.operator_endpoint(&base));
    let deploy_id = Uuid::new_v4().to_string();
    let request = PreDeploySnapshotRequest {
        app_id: s.f.app_id.clone(),
        channel_id: s.f.prod_id.clone(),
        git_sha: None,
    };
    let first = support::pre_deploy_checkpoint(&operator, &deploy_id, &request).await?;
    let again = operator.pre_deploy_snapshot(&deploy_id, &request).await?;
    assert_eq!(first, again);
    assert_eq!(s.rows(&s.f.prod_id).await.len(), 1);
    // The edge's identity is refused.
    let edge = InternalClient::new(s.f.api.edge_endpoint(&base));
    let refused = edge
        .pre_deploy_snapshot(&Uuid::new_v4().to_string(), &request)
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("403"), "{refused}");
    assert_eq!(s.rows(&s.f.prod_id).await.len(), 1);
    // A channel whose database is not there yet: skipped, and the deploy goes on.
    let unready = s.f.new_channel("fresh").await;
    let skipped = support::pre_deploy_checkpoint(
        &operator,
        &Uuid::new_v4().to_string(),
        &PreDeploySnapshotRequest {
            app_id: s.f.app_id.clone(),
            channel_id: unready.clone(),
            git_sha: None,
        },
    )
    .await?;
    // It may have become ready in between; then the snapshot is taken. Either way nothing fails.
    assert!(
        !matches!(skipped, PreDeploySnapshot::Failed { .. }),
        "{skipped:?}"
    );
    // The snapshot store down: the snapshot fails, and says so (the operator fails the deploy).
    s.backend.pause();
    let failed =
        support::pre_deploy_checkpoint(&operator, &Uuid::new_v4().to_string(), &request).await?;
    s.backend.resume().await?;
    match failed {
        PreDeploySnapshot::Failed { reason } => assert!(
            reason.contains("pre-deploy SQL snapshot failed"),
            "{reason}"
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(s.files().await.len(), 1, "a failed dump leaves no file");
    Ok(())
}

#[tokio::test]
async fn a_restore_waits_for_the_channels_checkpoint_lock() -> Result<()> {
    let s = snapshots("snaplock", "builder").await?;
    let (staging, db_name, snapshot, mut app) = s.kept_then_changed().await?;
    // Something of the channel's holds its checkpoint lock: a checkpoint pruning the files a restore reads.
    let channel: Uuid = staging.parse()?;
    let (release, holder) = hold_checkpoint_lock(s.f.api.state.db(), channel).await?;
    let restoring = s.restore(
        &staging,
        json!({"confirm_db_name": db_name, "snapshot_id": snapshot}),
    );
    let watching = async {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let waiting: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted \
                 AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            )
            .fetch_one(s.f.api.state.db())
            .await
            .unwrap();
            if waiting == 1 {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the restore never waited for the channel's lock"
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        assert_eq!(
            notes(&mut app).await,
            ["changed"],
            "restored under the lock"
        );
        let _ = release.send(());
    };
    let (reply, ()) = tokio::join!(restoring, watching);
    reply.expect(200, None);
    holder.await??;
    let mut app = s.app_connection(&staging).await?;
    assert_eq!(notes(&mut app).await, ["kept"]);
    Ok(())
}

/// The restore job of `channel` in the platform database: its state, once there is one.
async fn restore_job_state(db: &sqlx::PgPool, channel: Uuid) -> Option<String> {
    sqlx::query_scalar(
        "SELECT state FROM jobs WHERE kind = 'sql_restore' AND channel_id = $1 ORDER BY created_at DESC LIMIT 1",
    )
    .bind(channel)
    .fetch_optional(db)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_restore_runs_on_when_its_caller_leaves_and_refuses_a_second_meanwhile() -> Result<()> {
    let s = snapshots("snapjob", "builder").await?;
    let (staging, db_name, snapshot, mut app) = s.kept_then_changed().await?;
    // A prune holds the channel's checkpoint lock: the restore's job starts and waits there.
    let db = s.f.api.state.db().clone();
    let channel: Uuid = staging.parse()?;
    let (release, holder) = hold_checkpoint_lock(&db, channel).await?;
    let body = json!({"confirm_db_name": db_name, "snapshot_id": snapshot});
    let caller = {
        let path = format!("{}/restore", s.f.path(&staging));
        let (api, token, body) = (s.f.api.router.clone(), s.f.user.token.clone(), body.clone());
        tokio::spawn(async move {
            let req = Request::builder()
                .method(Method::POST)
                .uri(path)
                .header("authorization", format!("Bearer {token}"))
                .header("content-type", "application/json")
                .body(Body::from(body.to_string()))
                .unwrap();
            api.oneshot(req).await
        })
    };
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    while restore_job_state(&db, channel).await.as_deref() != Some("running") {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the restore's job never ran"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    // A second restore while the first runs is refused, and the caller of the first goes away.
    let second = s.restore(&staging, body.clone()).await;
    second.expect(409, Some("channel_busy"));
    caller.abort();
    assert!(caller.await.unwrap_err().is_cancelled());
    assert_eq!(notes(&mut app).await, ["changed"], "nothing restored yet");
    let _ = release.send(());
    holder.await??;
    // The job finishes without its caller: the data is the snapshot's, and the journal says who restored it.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        match restore_job_state(&db, channel).await.as_deref() {
            Some("succeeded") => break,
            Some("failed") => panic!("the restore's job failed"),
            _ => {}
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the restore's job never finished"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let mut app = s.app_connection(&staging).await?;
    assert_eq!(notes(&mut app).await, ["kept"]);
    let journaled: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_events WHERE action = 'postgres.restore' AND detail->>'snapshot_id' = $1",
    )
    .bind(&snapshot)
    .fetch_one(&db)
    .await?;
    assert_eq!(journaled, 1);
    // With the channel idle again, a restore is taken and answered in the request.
    s.restore(&staging, body).await.expect(200, None);
    Ok(())
}

/// Puts `channel`'s last restore job back as its process leaves it on dying after the restore's outcome and before
/// the job recorded it: running under a runner that is gone, its lease lapsed, one attempt spent, with `handover`
/// as that attempt recorded it. Returns once the API's runner has taken it over and finished it: its state.
async fn taken_over_after_its_runner_died(
    db: &sqlx::PgPool,
    channel: Uuid,
    handover: Option<&Value>,
) -> Result<String> {
    let id: Uuid = sqlx::query_scalar(
        "UPDATE jobs SET state = 'running', runner = 'a-replica-that-died', attempts = 1, max_attempts = 3,
             lease_until = now() - interval '1 second', finished_at = NULL, result = NULL, error = NULL,
             handover = $2
         WHERE id = (SELECT id FROM jobs WHERE kind = 'sql_restore' AND channel_id = $1
                     ORDER BY created_at DESC LIMIT 1)
         RETURNING id",
    )
    .bind(channel)
    .bind(handover.map(sqlx::types::Json))
    .fetch_one(db)
    .await?;
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let (state, attempts): (String, i32) =
            sqlx::query_as("SELECT state, attempts FROM jobs WHERE id = $1")
                .bind(id)
                .fetch_one(db)
                .await?;
        if state != "running" {
            assert_eq!(attempts, 2, "the takeover is one more attempt");
            return Ok(state);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the restore's job was never taken over"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Opens a transaction of the app's that changes `notes`, and leaves it open: the connection and the
/// transaction's id on the data server.
async fn open_transaction(app: &mut PgConnection, body: &str) -> Result<String> {
    execute(app, "BEGIN").await?;
    sqlx::query("UPDATE notes SET body = $1")
        .bind(body)
        .execute(&mut *app)
        .await?;
    Ok(sqlx::query_scalar("SELECT pg_current_xact_id()::text")
        .fetch_one(&mut *app)
        .await?)
}

#[tokio::test]
async fn a_restore_taken_over_after_its_runner_died_applies_the_snapshot_only_if_it_had_not_committed()
-> Result<()> {
    let s = snapshots("snaphandover", "builder").await?;
    let (staging, db_name, snapshot, app) = s.kept_then_changed().await?;
    drop(app);
    let db = s.f.api.state.db().clone();
    let channel: Uuid = staging.parse()?;
    let body = json!({"confirm_db_name": db_name, "snapshot_id": snapshot});
    s.restore(&staging, body).await.expect(200, None);
    let handover: Option<sqlx::types::Json<Value>> = sqlx::query_scalar(
        "SELECT handover FROM jobs WHERE kind = 'sql_restore' AND channel_id = $1",
    )
    .bind(channel)
    .fetch_one(&db)
    .await?;
    let handover = handover
        .expect("the restore named its transaction before COMMIT")
        .0;
    assert!(handover["transaction"].is_string(), "{handover}");

    // The restore committed, the app wrote since, and the process died before the job said so: the takeover
    // leaves the data alone.
    let mut app = s.app_connection(&staging).await?;
    assert_eq!(notes(&mut app).await, ["kept"]);
    execute(&mut app, "UPDATE notes SET body = 'written since'").await?;
    let state = taken_over_after_its_runner_died(&db, channel, Some(&handover)).await?;
    assert_eq!(state, "succeeded");
    assert_eq!(
        notes(&mut app).await,
        ["written since"],
        "a committed restore is not applied again"
    );

    // The restore's transaction rolled back (its process died before COMMIT reached the server): the takeover
    // applies the snapshot.
    let rolled_back = open_transaction(&mut app, "rolled back").await?;
    execute(&mut app, "ROLLBACK").await?;
    let state = taken_over_after_its_runner_died(
        &db,
        channel,
        Some(&json!({ "transaction": rolled_back })),
    )
    .await?;
    assert_eq!(state, "succeeded");
    let mut app = s.app_connection(&staging).await?;
    assert_eq!(notes(&mut app).await, ["kept"]);

    // The restore's transaction is still open (its process is gone, and the server has not noticed yet): the
    // takeover ends it, then applies the snapshot.
    execute(&mut app, "UPDATE notes SET body = 'written since'").await?;
    let mut orphan = s.app_connection(&staging).await?;
    let open = open_transaction(&mut orphan, "never committed").await?;
    let state =
        taken_over_after_its_runner_died(&db, channel, Some(&json!({ "transaction": open })))
            .await?;
    assert_eq!(state, "succeeded");
    assert!(
        sqlx::query("SELECT 1").execute(&mut orphan).await.is_err(),
        "the open transaction's session was ended"
    );
    let mut app = s.app_connection(&staging).await?;
    assert_eq!(notes(&mut app).await, ["kept"]);

    // No transaction was named (the process died before it had one): the snapshot is applied.
    execute(&mut app, "UPDATE notes SET body = 'written since'").await?;
    let state = taken_over_after_its_runner_died(&db, channel, None).await?;
    assert_eq!(state, "succeeded");
    let mut app = s.app_connection(&staging).await?;
    assert_eq!(notes(&mut app).await, ["kept"]);
    Ok(())
}

/// Unfinished uploads in the snapshot store's bucket, by key.
async fn unfinished_uploads(client: &aws_sdk_s3::Client, bucket: &str) -> Result<Vec<String>> {
    let listed = client
        .list_multipart_uploads()
        .bucket(bucket)
        .send()
        .await?;
    let mut keys: Vec<String> = listed
        .uploads()
        .iter()
        .filter_map(|u| u.key().map(str::to_owned))
        .collect();
    keys.sort();
    Ok(keys)
}

#[tokio::test]
async fn abandoned_uploads_into_the_snapshot_store_are_aborted_and_files_kept() -> Result<()> {
    let backend = TestS3::start().await?;
    let endpoint = S3Endpoint {
        url: backend.url.clone(),
        access_key_id: backend.access_key_id.clone(),
        secret_access_key: backend.secret_access_key.clone(),
    };
    let bucket = archive::system_bucket("slipway-");
    let archive = Archive::new(&endpoint, bucket.clone());
    archive.ensure_bucket().await?;
    let client = slipway_backends::object_store::client(&endpoint, None);

    // A finished file, and two uploads with a part each, as a process killed mid-dump leaves them.
    let file = futures::stream::iter([Ok(bytes::Bytes::from_static(b"PGDMP finished"))]);
    archive.upload("postgres/c/kept.dump", file).await?;
    for key in ["postgres/a/1.dump", "postgres/b/2.dump"] {
        let upload = client
            .create_multipart_upload()
            .bucket(&bucket)
            .key(key)
            .send()
            .await?;
        client
            .upload_part()
            .bucket(&bucket)
            .key(key)
            .upload_id(upload.upload_id().unwrap_or_default())
            .part_number(1)
            .body(aws_sdk_s3::primitives::ByteStream::from(vec![7u8; 1024]))
            .send()
            .await?;
    }
    assert_eq!(
        unfinished_uploads(&client, &bucket).await?,
        ["postgres/a/1.dump", "postgres/b/2.dump"]
    );

    // Uploads younger than the sweep's age are someone's work in progress: kept.
    assert_eq!(
        archive
            .abort_stale_uploads(std::time::Duration::from_secs(3600))
            .await?,
        0
    );
    assert_eq!(unfinished_uploads(&client, &bucket).await?.len(), 2);

    // Past it, both are aborted; the finished file reads back whole.
    assert_eq!(
        archive
            .abort_stale_uploads(std::time::Duration::ZERO)
            .await?,
        2
    );
    assert!(unfinished_uploads(&client, &bucket).await?.is_empty());
    let mut read = Vec::new();
    let mut body = archive.download("postgres/c/kept.dump").await?;
    while let Some(chunk) = futures::StreamExt::next(&mut body).await {
        read.extend_from_slice(&chunk?);
    }
    assert_eq!(read, b"PGDMP finished");
    // A second sweep finds nothing left to do.
    assert_eq!(
        archive
            .abort_stale_uploads(std::time::Duration::ZERO)
            .await?,
        0
    );
    Ok(())
}

#[tokio::test]
async fn a_file_read_in_ranges_comes_back_whole_and_a_replaced_one_fails_the_read() -> Result<()> {
    let backend = TestS3::start().await?;
    let endpoint = S3Endpoint {
        url: backend.url.clone(),
        access_key_id: backend.access_key_id.clone(),
        secret_access_key: backend.secret_access_key.clone(),
    };
    let archive = Archive::new(&endpoint, archive::system_bucket("slipway-"));
    archive.ensure_bucket().await?;
    let read_all = |key: &'static str| {
        let archive = archive.clone();
        async move {
            let mut read = Vec::new();
            let mut body = archive.download(key).await?;
            while let Some(chunk) = futures::StreamExt::next(&mut body).await {
                read.extend_from_slice(&chunk?);
            }
            anyhow::Ok(read)
        }
    };
    let upload = |key: &'static str, bytes: Vec<u8>| {
        let archive = archive.clone();
        async move {
            let chunks: Vec<std::io::Result<bytes::Bytes>> = bytes
                .chunks(1 << 20)
                .map(|c| Ok(bytes::Bytes::copy_from_slice(c)))
                .collect();
            archive.upload(key, futures::stream::iter(chunks)).await
        }
    };

    // Over six ranges of 8 MiB, the last one short: every byte in order.
    let big: Vec<u8> = (0..50 * 1024 * 1024 + 12_345u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    upload("postgres/r/big.dump", big.clone()).await?;
    let read = read_all("postgres/r/big.dump").await?;
    assert_eq!(read.len(), big.len());
    assert!(read == big, "the file reads back byte for byte");
    // One byte, and none: a file shorter than a range, and one with no range to read.
    upload("postgres/r/one.dump", vec![7]).await?;
    assert_eq!(read_all("postgres/r/one.dump").await?, [7]);
    upload("postgres/r/empty.dump", Vec::new()).await?;
    assert_eq!(read_all("postgres/r/empty.dump").await?, Vec::<u8>::new());

    // The file replaced while it is read: the ranges asked after it fail instead of mixing two files.
    let mut body = archive.download("postgres/r/big.dump").await?;
    let first = futures::StreamExt::next(&mut body)
        .await
        .context("a first chunk")??;
    assert_eq!(first[..], big[..first.len()]);
    upload("postgres/r/big.dump", vec![1u8; big.len()]).await?;
    let mut rest = first.len();
    let mut failed = None;
    while let Some(chunk) = futures::StreamExt::next(&mut body).await {
        match chunk {
            Ok(chunk) => {
                assert_eq!(
                    chunk[..],
                    big[rest..rest + chunk.len()],
                    "only the first file's bytes"
                );
                rest += chunk.len();
            }
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    let failed = failed.context("the read of a replaced file fails")?;
    assert!(
        failed.to_string().contains("PreconditionFailed") || failed.to_string().contains("412"),
        "{failed}"
    );
    assert!(
        rest < big.len(),
        "read {rest} of {} bytes before it failed",
        big.len()
    );
    Ok(())
}
