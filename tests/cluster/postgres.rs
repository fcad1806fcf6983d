//! SQL databases per channel against the real parts: the test control plane, the platform database, the channels'
//! data server (Debian's PostgreSQL 15 with postgis and pgextwlist, started by `hack/postgres.sh` with
//! `SLIPWAY_PG_DATA_SERVER=1`) and the operator. The channel's roles are used the way an app uses them: with the
//! `DATABASE_URL` and `DATABASE_URL_READONLY` a deploy would get.

// Fixture helpers panic on a malformed response: in a test that is the failure to report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use anyhow::{Context, Result};
use axum::http::Method;
use serde_json::{Value, json};
use sqlx::Connection;
use support::TestApi;
use support::postgres::{self, WITHIN, execute, fixture, refusal};

#[tokio::test]
async fn a_channel_gets_its_own_database_with_a_write_role_and_a_read_only_role() -> Result<()> {
    let f = fixture("pgroles", "basic").await?;
    let status = f.ready(&f.prod_id).await;
    let db_name = format!("shop_{}", f.user.username);
    assert_eq!(status["db_name"], db_name.as_str());
    assert_eq!(status["role_name"], db_name.as_str());
    assert_eq!(status["last_error"], Value::Null);
    assert_eq!(status["password_set"], true);
    assert_eq!(status["connection_limit"], 10, "basic's connection limit");
    assert_eq!(status["connection_count"], 0);
    assert!(status["storage_bytes"].as_i64().unwrap() > 0, "{status}");

    let env = postgres::variables(&f.api, &f.prod_id).await?;
    assert_eq!(env["DATABASE_HOST"], "127.0.0.1");
    assert!(env["DATABASE_URL"].contains(&env["DATABASE_PASSWORD"]));

    // A migration as the write role: tables in public, postgis, a schema of the app's own.
    let mut rw = postgres::connect(&env["DATABASE_URL"]).await?;
    execute(
        &mut rw,
        "CREATE EXTENSION postgis; \
         CREATE TABLE places (id serial PRIMARY KEY, name text, at geometry(Point, 4326)); \
         INSERT INTO places (name, at) VALUES ('harbour', ST_SetSRID(ST_MakePoint(4.3, 50.8), 4326)); \
         CREATE SCHEMA private; CREATE TABLE private.secrets (v text); INSERT INTO private.secrets VALUES ('x')",
    )
    .await?;
    let name: String = sqlx::query_scalar("SELECT name FROM places WHERE ST_X(at) > 4")
        .fetch_one(&mut rw)
        .await?;
    assert_eq!(name, "harbour");
    // Other spatial extensions are not installable.
    for extension in ["postgis_raster", "postgis_topology", "address_standardizer"] {
        let message = refusal(execute(&mut rw, &format!("CREATE EXTENSION {extension}")).await);
        assert!(
            message.contains("superuser") || message.contains("permission denied"),
            "{extension}: {message}"
        );
    }
    let measured = f
        .api
        .get(&f.path(&f.prod_id), &f.user)
        .await
        .expect(200, None);
    assert!(
        measured["connection_count"].as_i64().unwrap() >= 1,
        "the open session counts: {measured}"
    );

    // The read-only role reads every table of public, present and future, and writes nothing.
    let mut ro = postgres::connect(&env["DATABASE_URL_READONLY"]).await?;
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM places")
        .fetch_one(&mut ro)
        .await?;
    assert_eq!(count, 1);
    execute(
        &mut rw,
        "CREATE TABLE later (v int); INSERT INTO later VALUES (7)",
    )
    .await?;
    let later: i32 = sqlx::query_scalar("SELECT v FROM later")
        .fetch_one(&mut ro)
        .await?;
    assert_eq!(later, 7, "a table made after provisioning is readable too");
    for write in [
        "INSERT INTO places (name) VALUES ('no')",
        "UPDATE later SET v = 8",
        "DELETE FROM later",
        "CREATE TABLE mine (v int)",
        "DROP TABLE later",
    ] {
        let message = refusal(execute(&mut ro, write).await);
        assert!(
            message.contains("permission denied") || message.contains("must be owner"),
            "{write}: {message}"
        );
    }
    let message = refusal(execute(&mut ro, "SELECT * FROM private.secrets").await);
    assert!(
        message.contains("permission denied for schema private"),
        "{message}"
    );
    let kept: i32 = sqlx::query_scalar("SELECT v FROM later")
        .fetch_one(&mut rw)
        .await?;
    assert_eq!(kept, 7, "no write of the read-only role landed");
    rw.close().await?;
    ro.close().await?;
    Ok(())
}

#[tokio::test]
async fn no_channel_role_connects_to_another_channel_or_the_servers_own_databases() -> Result<()> {
    let f = fixture("pgiso", "builder").await?;
    let next_id = f.new_channel("next").await;
    f.ready(&f.prod_id).await;
    let next = f.ready(&next_id).await;
    assert_eq!(
        next["db_name"],
        format!("next_shop_{}", f.user.username).as_str()
    );
    assert_eq!(next["connection_limit"], 20, "builder's connection limit");
    // Another user's channel on the same server.
    let other = f.api.user("pgother", "basic").await?;
    let other_app = f.api.create_app(&other, "shop", "app").await;
    let other_prod = other_app["channels"][0]["id"].as_str().unwrap().to_owned();
    f.api
        .start_operator_with_postgres(&other.namespace, postgres::settings()?)
        .await?;
    let other_path = format!(
        "/apps/{}/channels/{other_prod}/postgres",
        other_app["id"].as_str().unwrap()
    );
    slipway_testkit::wait_until(WITHIN, || async {
        Ok(f.api.get(&other_path, &other).await.body["status"] == "ready")
    })
    .await?;

    let prod = postgres::variables(&f.api, &f.prod_id).await?;
    let nxt = postgres::variables(&f.api, &next_id).await?;
    let theirs = postgres::variables(&f.api, &other_prod).await?;
    let db_of = |env: &std::collections::BTreeMap<String, String>| {
        env["DATABASE_URL"].rsplit_once('/').unwrap().1.to_owned()
    };
    let with_db = |url: &str, db: &str| format!("{}/{db}", url.rsplit_once('/').unwrap().0);
    for (from, to) in [
        (&prod, &nxt),
        (&nxt, &prod),
        (&prod, &theirs),
        (&theirs, &prod),
    ] {
        for key in ["DATABASE_URL", "DATABASE_URL_READONLY"] {
            let url = with_db(&from[key], &db_of(to));
            let message = refusal(postgres::connect(&url).await);
            assert!(
                message.contains("permission denied for database"),
                "{key} into {}: {message}",
                db_of(to)
            );
        }
    }
    for maintenance in ["postgres", "template1"] {
        let message =
            refusal(postgres::connect(&with_db(&prod["DATABASE_URL"], maintenance)).await);
        assert!(
            message.contains("permission denied for database"),
            "{maintenance}: {message}"
        );
    }
    // A role's own database still opens, and a wrong password does not.
    postgres::connect(&prod["DATABASE_URL"])
        .await?
        .close()
        .await?;
    let wrong = prod["DATABASE_URL"].replace(&prod["DATABASE_PASSWORD"], "wrong");
    assert!(postgres::connect(&wrong).await.is_err());
    Ok(())
}

#[tokio::test]
async fn a_deleted_channel_takes_its_database_and_roles_along() -> Result<()> {
    let f = fixture("pgdel", "basic").await?;
    let tmp_id = f.new_channel("tmp").await;
    let status = f.ready(&tmp_id).await;
    let db_name = status["db_name"].as_str().unwrap().to_owned();
    let env = postgres::variables(&f.api, &tmp_id).await?;
    // An open session does not hold the drop back.
    let mut session = postgres::connect(&env["DATABASE_URL"]).await?;
    execute(&mut session, "CREATE TABLE t (v int)").await?;
    f.api
        .delete(&format!("/apps/{}/channels/{tmp_id}", f.app_id), &f.user)
        .await
        .expect(204, None);
    // The operator drops the database and its roles, then forgets the record.
    let server = postgres::server()?;
    let id: uuid::Uuid = tmp_id.parse()?;
    slipway_testkit::wait_until(WITHIN, || {
        let server = server.clone();
        let db_name = db_name.clone();
        let platform = f.api.state.db().clone();
        async move {
            let left: i64 = sqlx::query_scalar(
                "SELECT (SELECT count(*) FROM pg_database WHERE datname = $1) \
                 + (SELECT count(*) FROM pg_roles WHERE rolname IN ($1, $1 || '_ro'))",
            )
            .bind(&db_name)
            .fetch_one(server.pool())
            .await?;
            let recorded = slipway_postgres::store::by_channel(&platform, id)
                .await?
                .is_some();
            Ok(left == 0 && !recorded)
        }
    })
    .await
    .context("the database, its roles and its record are gone")?;
    assert!(postgres::connect(&env["DATABASE_URL"]).await.is_err());
    // Prod's database is untouched.
    let prod = f.ready(&f.prod_id).await;
    assert_eq!(prod["password_set"], true);
    Ok(())
}

#[tokio::test]
async fn a_server_without_pgextwlist_fails_the_channel_until_a_retry_works() -> Result<()> {
    let mut api = TestApi::start().await?;
    postgres::attach(&mut api)?;
    let user = api.user("pgfail", "basic").await?;
    let app = api.create_app(&user, "shop", "app").await;
    let app_id = app["id"].as_str().unwrap().to_owned();
    let prod_id = app["channels"][0]["id"].as_str().unwrap().to_owned();
    // The platform database's server has no pgextwlist: channel roles could not create postgis there.
    let bare = slipway_controllers::postgres::PostgresSettings {
        server: std::sync::Arc::new(slipway_backends::data_server::DataServer::new(
            &slipway_testkit::postgres::admin_url(),
        )?),
        pod_address: "127.0.0.1:9".into(),
    };
    let failing = api
        .start_operator_with_postgres(&user.namespace, bare)
        .await?;
    let path = format!("/apps/{app_id}/channels/{prod_id}/postgres");
    let channel_path = format!("/apps/{app_id}/channels/{prod_id}");
    slipway_testkit::wait_until(WITHIN, || async {
        Ok(api.get(&path, &user).await.body["status"] == "failed")
    })
    .await?;
    let status = api.get(&path, &user).await.expect(200, None);
    let last_error = status["last_error"].as_str().unwrap();
    assert!(
        last_error.contains("pgextwlist") && last_error.contains("postgis"),
        "{last_error}"
    );
    assert_eq!(
        status["password_set"], true,
        "recorded before the server refused"
    );
    assert_eq!(status["storage_bytes"], 0);
    let channel = api.get(&channel_path, &user).await.expect(200, None);
    assert_eq!(channel["status"], "failed", "{channel}");

    // The retry (here: an operator that reaches a server that can host it) provisions it and the channel
    // goes back to provisioning.
    failing.abort();
    let _ = failing.await;
    api.start_operator_with_postgres(&user.namespace, postgres::settings()?)
        .await?;
    slipway_testkit::wait_until(WITHIN, || async {
        Ok(api.get(&path, &user).await.body["status"] == "ready")
    })
    .await?;
    let channel = api.get(&channel_path, &user).await.expect(200, None);
    assert_eq!(channel["status"], "provisioning", "{channel}");
    let env = postgres::variables(&api, &prod_id).await?;
    postgres::connect(&env["DATABASE_URL"])
        .await?
        .close()
        .await?;
    Ok(())
}

#[tokio::test]
async fn static_channels_have_no_database_and_a_platform_without_a_data_server_answers_503()
-> Result<()> {
    let f = fixture("pgstatic", "basic").await?;
    let site = f.api.create_app(&f.user, "site", "static").await;
    let site_path = format!(
        "/apps/{}/channels/{}/postgres",
        site["id"].as_str().unwrap(),
        site["channels"][0]["id"].as_str().unwrap()
    );
    f.api
        .get(&site_path, &f.user)
        .await
        .expect(404, Some("not_found"));
    f.ready(&f.prod_id).await;
    let server = postgres::server()?;
    let databases: i64 =
        sqlx::query_scalar("SELECT count(*) FROM pg_database WHERE datname LIKE $1")
            .bind(format!("%{}", f.user.username))
            .fetch_one(server.pool())
            .await?;
    assert_eq!(databases, 1, "only the app's channel has a database");

    // Unknown and foreign channels are 404; the storage rollup counts the caller's databases whole.
    let unknown = format!(
        "/apps/{}/channels/{}/postgres",
        f.app_id,
        uuid::Uuid::new_v4()
    );
    f.api
        .get(&unknown, &f.user)
        .await
        .expect(404, Some("not_found"));
    let stranger = f.api.user("pgstranger", "basic").await?;
    f.api
        .get(&f.path(&f.prod_id), &stranger)
        .await
        .expect(404, Some("not_found"));
    let storage = f
        .api
        .get("/me/postgres/storage", &f.user)
        .await
        .expect(200, None);
    assert_eq!(storage["database_count"], 1);
    let status = f
        .api
        .get(&f.path(&f.prod_id), &f.user)
        .await
        .expect(200, None);
    assert!(
        storage["database_size_bytes"].as_i64().unwrap()
            >= status["storage_bytes"].as_i64().unwrap()
    );
    // The account's usage counts the same bytes.
    let usage = f.api.get("/me/usage", &f.user).await.expect(200, None);
    assert!(usage["storage_bytes"].as_i64().unwrap() >= status["storage_bytes"].as_i64().unwrap());
    assert!(usage["storage_bytes"].as_i64().unwrap() > 0, "{usage}");
    let none = f
        .api
        .get("/me/postgres/storage", &stranger)
        .await
        .expect(200, None);
    assert_eq!(none, json!({"database_size_bytes": 0, "database_count": 0}));

    // An API without a data server cannot measure: 503, never a guess.
    let bare = TestApi::start().await?;
    let user = bare.user("pgbare", "basic").await?;
    let app = bare.create_app(&user, "shop", "app").await;
    let path = format!(
        "/apps/{}/channels/{}/postgres",
        app["id"].as_str().unwrap(),
        app["channels"][0]["id"].as_str().unwrap()
    );
    bare.get(&path, &user)
        .await
        .expect(503, Some("postgres_unavailable"));
    bare.get("/me/postgres/storage", &user)
        .await
        .expect(503, Some("postgres_unavailable"));
    // Usage counts database storage too: not a 0 it never measured.
    bare.get("/me/usage", &user)
        .await
        .expect(503, Some("postgres_unavailable"));
    Ok(())
}

#[tokio::test]
async fn reset_empties_the_database_and_keeps_the_roles_and_their_passwords() -> Result<()> {
    let f = fixture("pgreset", "basic").await?;
    let status = f.ready(&f.prod_id).await;
    let db_name = status["db_name"].as_str().unwrap().to_owned();
    let env = postgres::variables(&f.api, &f.prod_id).await?;
    let mut rw = postgres::connect(&env["DATABASE_URL"]).await?;
    execute(
        &mut rw,
        "CREATE EXTENSION postgis; CREATE TABLE items (v int); INSERT INTO items VALUES (1); \
         CREATE SCHEMA private; CREATE TABLE private.t (v int)",
    )
    .await?;
    let reset = format!("{}/reset", f.path(&f.prod_id));

    // A wrong or missing confirmation changes nothing.
    for body in [
        json!({"confirm_db_name": "wrong"}),
        json!({"confirm_db_name": db_name.to_uppercase()}),
    ] {
        f.api
            .post(&reset, &f.user, body)
            .await
            .expect(400, Some("invalid_confirmation"));
    }
    f.api
        .post(&reset, &f.user, json!({}))
        .await
        .expect(400, Some("bad_request"));
    // A narrow credential stays narrow: without db:* it neither empties, dumps nor restores the database, and
    // without blob:* it does not roll the bucket back, though it names the database right.
    let narrow = f
        .api
        .post("/credentials", &f.user, json!({"scopes": ["stats:read"]}))
        .await
        .expect(200, None)["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let channel = format!("/apps/{}/channels/{}", f.app_id, f.prod_id);
    let refused = [
        (
            Method::POST,
            reset.clone(),
            Some(json!({"confirm_db_name": db_name})),
        ),
        (Method::GET, format!("{}/dump", f.path(&f.prod_id)), None),
        (
            Method::POST,
            format!("{}/restore", f.path(&f.prod_id)),
            Some(json!({"confirm_db_name": db_name, "snapshot_id": uuid::Uuid::new_v4()})),
        ),
        (
            Method::POST,
            format!("{channel}/blob/restore"),
            Some(json!({"confirm_channel_name": "prod", "snapshot_id": uuid::Uuid::new_v4()})),
        ),
    ];
    for (method, path, body) in refused {
        let reply = f.api.call(method.clone(), &path, Some(&narrow), body).await;
        assert_eq!(reply.status, 403, "{method} {path}: {}", reply.body);
        assert_eq!(
            reply.body["error"]["code"], "scope_denied",
            "{method} {path}"
        );
    }
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM items")
        .fetch_one(&mut rw)
        .await?;
    assert_eq!(count, 1);

    f.api
        .post(&reset, &f.user, json!({"confirm_db_name": db_name}))
        .await
        .expect(204, None);
    // The session was ended; the same URL opens a fresh one on an empty database.
    assert!(
        execute(&mut rw, "SELECT 1").await.is_err(),
        "the old session is gone"
    );
    let mut rw = postgres::connect(&env["DATABASE_URL"]).await?;
    let left: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\\_%'",
    )
    .fetch_one(&mut rw)
    .await?;
    assert_eq!(left, 0, "no table, view or sequence is left");
    let schemas: Vec<String> = sqlx::query_scalar(
        "SELECT nspname::text FROM pg_namespace WHERE nspname NOT IN ('pg_catalog', 'information_schema') \
         AND nspname NOT LIKE 'pg\\_%' ORDER BY 1",
    )
    .fetch_all(&mut rw)
    .await?;
    assert_eq!(schemas, ["public"]);
    // The app migrates again as before, postgis included, and the read-only role reads the new tables.
    execute(
        &mut rw,
        "CREATE EXTENSION postgis; CREATE TABLE items (v int); INSERT INTO items VALUES (2)",
    )
    .await?;
    let mut ro = postgres::connect(&env["DATABASE_URL_READONLY"]).await?;
    let v: i32 = sqlx::query_scalar("SELECT v FROM items")
        .fetch_one(&mut ro)
        .await?;
    assert_eq!(v, 2);
    assert!(
        execute(&mut ro, "INSERT INTO items VALUES (3)")
            .await
            .is_err()
    );

    let audit: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_events WHERE action = 'postgres.reset' AND detail->>'db_name' = $1",
    )
    .bind(&db_name)
    .fetch_one(f.api.state.db())
    .await?;
    assert_eq!(
        audit, 1,
        "the reset is in the audit journal, the refusals are not"
    );

    // A channel whose database is not ready answers 409 and is left alone.
    let mut bare = TestApi::start().await?;
    postgres::attach(&mut bare)?;
    let user = bare.user("pgnotready", "basic").await?;
    let app = bare.create_app(&user, "shop", "app").await;
    let path = format!(
        "/apps/{}/channels/{}/postgres",
        app["id"].as_str().unwrap(),
        app["channels"][0]["id"].as_str().unwrap()
    );
    let pending = bare.get(&path, &user).await.expect(200, None);
    assert_eq!(pending["status"], "provisioning");
    bare.post(
        &format!("{path}/reset"),
        &user,
        json!({"confirm_db_name": pending["db_name"]}),
    )
    .await
    .expect(409, Some("conflict"));
    bare.get(&format!("{path}/dump"), &user)
        .await
        .expect(409, Some("conflict"));
    Ok(())
}

#[tokio::test]
async fn the_dump_streams_the_data_as_sql_that_loads_elsewhere() -> Result<()> {
    let f = fixture("pgdump", "basic").await?;
    let status = f.ready(&f.prod_id).await;
    let db_name = status["db_name"].as_str().unwrap().to_owned();
    let env = postgres::variables(&f.api, &f.prod_id).await?;
    let mut rw = postgres::connect(&env["DATABASE_URL"]).await?;
    execute(
        &mut rw,
        "CREATE TABLE notes (id int PRIMARY KEY, body text); \
         INSERT INTO notes SELECT g, 'note ' || g FROM generate_series(1, 5000) g",
    )
    .await?;

    let dump = f
        .api
        .get(&format!("{}/dump", f.path(&f.prod_id)), &f.user)
        .await;
    assert_eq!(dump.status, 200);
    assert_eq!(dump.headers["content-type"], "application/sql");
    assert_eq!(
        dump.headers["content-disposition"],
        format!("attachment; filename=\"{db_name}.sql\"").as_str()
    );
    let text = dump.body.as_str().unwrap().to_owned();
    assert!(
        text.contains("PostgreSQL database dump complete"),
        "the dump is whole"
    );
    assert!(text.contains("CREATE TABLE public.notes"));
    assert!(!text.contains("OWNER TO"), "no owners: it loads as anyone");
    assert!(text.contains("note 4999"));

    // It loads into a fresh database with a patched psql (the dump carries \restrict).
    let target = format!("load_{}", uuid::Uuid::new_v4().simple());
    let server = postgres::server()?;
    execute(
        &mut *server.pool().acquire().await?,
        &format!("CREATE DATABASE {target}"),
    )
    .await?;
    let mut psql = server.client_command("psql", &target);
    psql.args(["-X", "-q", "-v", "ON_ERROR_STOP=1"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null());
    let mut child = psql.spawn()?;
    {
        use tokio::io::AsyncWriteExt;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(text.as_bytes()).await?;
    }
    assert!(child.wait().await?.success());
    let mut loaded = server.connect_to(&target).await?;
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM notes")
        .fetch_one(&mut loaded)
        .await?;
    assert_eq!(count, 5000);
    loaded.close().await?;
    execute(
        &mut *server.pool().acquire().await?,
        &format!("DROP DATABASE {target} WITH (FORCE)"),
    )
    .await?;

    let audit: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_events WHERE action = 'postgres.dump' AND detail->>'db_name' = $1",
    )
    .bind(&db_name)
    .fetch_one(f.api.state.db())
    .await?;
    assert_eq!(audit, 1);
    Ok(())
}

#[tokio::test]
async fn the_operator_holds_the_roles_lock_from_reading_the_record_to_setting_the_passwords()
-> Result<()> {
    use kube::Api;
    use kube::api::{Patch, PatchParams};
    use slipway_crds::Channel;
    let f = fixture("rlk", "basic").await?;
    f.ready(&f.prod_id).await;
    let server = postgres::server()?;
    let held = server.lock_roles(&f.prod_id).await?;
    // A change of the channel starts a reconcile, which waits for the lock before it reads the record.
    let channels: Api<Channel> = Api::namespaced(f.api.kube.clone(), &f.user.namespace);
    channels
        .patch(
            "shop.prod",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"test.slipway.dev/touch": "1"}}})),
        )
        .await?;
    postgres::roles_lock_waited_for(&server, &f.prod_id, || false).await?;
    held.release().await;
    f.ready(&f.prod_id).await;
    Ok(())
}
