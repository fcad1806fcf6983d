//! External SQL access against the real parts: the test control plane, the platform database, the channels' data
//! server (started by `hack/postgres.sh` with `SLIPWAY_PG_DATA_SERVER=1`), the operator, and the listener
//! `slipway api --sql-listen` runs, on a loopback port. The clients are real: Debian's `psql` and sqlx, both with
//! `sslmode=require`, logging in with the account's username and an access token.

// Fixture helpers panic on a malformed response: in a test that is the failure to report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::time::Duration;

use anyhow::Result;
use axum::http::Method;
use serde_json::{Value, json};
use sqlx::Connection;
use sqlx::postgres::PgConnection;
use support::postgres::{Fixture, fixture};
use support::{TestApi, User};

/// How long an open session may outlive the access that let it in.
const CUT_WITHIN: Duration = Duration::from_secs(10);

/// Serves external SQL access for `api` on a loopback port (a self-signed certificate) and answers the port.
async fn serve_sql(api: &TestApi) -> Result<u16> {
    serve_sql_of(api.state.clone()).await
}

/// Serves external SQL access for the API process of `state` on a loopback port and answers the port.
async fn serve_sql_of(state: slipway_core::state::AppState) -> Result<u16> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    let tls = slipway_data::sql_proxy::tls::server_config(None, &["localhost".to_owned()])?;
    tokio::spawn(async move { slipway_data::sql_proxy::serve(state, listener, tls).await });
    Ok(port)
}

/// A TCP balancer on a loopback port that sends each connection to the next of `ports` in turn, as a Service
/// spreads connections over replicas; answers its port.
async fn round_robin(ports: Vec<u16>) -> Result<u16> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(async move {
        for to in ports.iter().cycle() {
            let Ok((mut client, _)) = listener.accept().await else {
                return;
            };
            let to = *to;
            tokio::spawn(async move {
                if let Ok(mut upstream) = tokio::net::TcpStream::connect(("127.0.0.1", to)).await {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                }
            });
        }
    });
    Ok(port)
}

fn url(port: u16, user: &str, token: &str, database: &str, sslmode: &str) -> String {
    format!("postgresql://{user}:{token}@127.0.0.1:{port}/{database}?sslmode={sslmode}")
}

/// `psql` on `url` running `sql`, set up so nothing from the environment or the home directory takes part.
fn psql(url: &str, sql: &str) -> tokio::process::Command {
    let mut command = tokio::process::Command::new("psql");
    command
        .args(["-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql, url])
        .env("PGCONNECT_TIMEOUT", "10")
        .env_remove("PGPASSWORD")
        .env_remove("PGPASSFILE")
        .env_remove("PGSERVICE")
        .env_remove("PGSSLMODE")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    command
}

/// `psql`'s answer: Ok(stdout) when it exits 0, else Err(stderr).
async fn run_psql(url: &str, sql: &str) -> Result<String, String> {
    let out = psql(url, sql).output().await.expect("run psql");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
    }
}

async fn set_toggle(f: &Fixture, on: bool) {
    f.api
        .call(
            Method::PATCH,
            &format!("/apps/{}", f.app_id),
            Some(&f.user.token),
            Some(json!({"external_db_access_enabled": on})),
        )
        .await
        .expect(200, None);
}

/// The database of a channel as the status route names it.
async fn db_name(f: &Fixture, channel_id: &str) -> String {
    f.ready(channel_id).await["db_name"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// Polls `conn` until a query fails, within [`CUT_WITHIN`]; panics naming `what` otherwise.
async fn dies(conn: &mut PgConnection, what: &str) {
    let deadline = tokio::time::Instant::now() + CUT_WITHIN;
    loop {
        if sqlx::query_scalar::<_, i32>("SELECT 1")
            .fetch_one(&mut *conn)
            .await
            .is_err()
        {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the session is still open {CUT_WITHIN:?} after {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The text psql prints for every refused login.
fn refused_text(user: &User) -> String {
    format!(
        "password authentication failed for user \"{}\"",
        user.username
    )
}

#[tokio::test]
async fn psql_and_sqlx_reach_the_channels_databases_only_while_the_toggle_is_on() -> Result<()> {
    let f = fixture("sqlproxy", "basic").await?;
    let prod_db = db_name(&f, &f.prod_id).await;
    let port = serve_sql(&f.api).await?;
    let user = &f.user;
    let prod_url = url(port, &user.username, &user.token, "shop", "require");

    // Off by default: the login is refused like any other.
    let refused = run_psql(&prod_url, "SELECT 1").await.unwrap_err();
    assert!(refused.contains(&refused_text(user)), "{refused}");

    set_toggle(&f, true).await;
    let who = run_psql(
        &prod_url,
        "SELECT current_user || ' ' || current_database() || ' ' || (SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid())",
    )
    .await
    .expect("psql through the proxy");
    assert_eq!(
        who,
        format!("{prod_db} {prod_db} false"),
        "the channel's role on its database (the proxy's own hop is plain TCP)"
    );
    let written = run_psql(
        &prod_url,
        "CREATE TABLE notes (v text); INSERT INTO notes VALUES ('hello'); SELECT v FROM notes",
    )
    .await
    .expect("writes go through as the write role");
    assert!(written.ends_with("hello"), "{written}");

    // sqlx: the same database, and the data psql wrote.
    let mut conn = PgConnection::connect(&prod_url).await?;
    let (current_user, note): (String, String) =
        sqlx::query_as("SELECT current_user::text, (SELECT v FROM notes)")
            .fetch_one(&mut conn)
            .await?;
    assert_eq!(
        (current_user.as_str(), note.as_str()),
        (prod_db.as_str(), "hello")
    );
    let bound: i64 = sqlx::query_scalar("SELECT $1::int8 * 2")
        .bind(21i64)
        .fetch_one(&mut conn)
        .await?;
    assert_eq!(bound, 42, "the extended protocol is relayed too");

    // Wrong token, unknown database, another account's name or database: one answer for all.
    let other = f.api.user("sqlother", "basic").await?;
    let wrong_token = slipway_auth::token::generate();
    let cases = [
        (
            url(port, &user.username, &wrong_token, "shop", "require"),
            user,
        ),
        (
            url(port, &user.username, &user.token, "nope", "require"),
            user,
        ),
        (
            url(port, &user.username, &user.token, "shop-nope", "require"),
            user,
        ),
        (
            url(port, &user.username, &other.token, "shop", "require"),
            user,
        ),
        (
            url(port, &other.username, &other.token, "shop", "require"),
            &other,
        ),
        (
            url(port, &other.username, &user.token, "shop", "require"),
            &other,
        ),
        // The server's own name of the first account's database, asked for by the other account and by its owner
        // (only app names reach a database).
        (
            url(port, &other.username, &other.token, &prod_db, "require"),
            &other,
        ),
        (
            url(port, &user.username, &user.token, &prod_db, "require"),
            user,
        ),
    ];
    for (i, (case, user_named)) in cases.iter().enumerate() {
        let refused = run_psql(case, "SELECT 1").await.unwrap_err();
        assert!(
            refused.contains(&refused_text(user_named)),
            "case {i}: {refused}"
        );
        let sqlx_refused = PgConnection::connect(case).await.unwrap_err().to_string();
        assert!(
            sqlx_refused.contains(&refused_text(user_named)),
            "case {i}: {sqlx_refused}"
        );
    }
    // A token without db:* is refused the same way.
    let no_db = f
        .api
        .token(user.id, &["repo:*".to_owned()], false, None)
        .await?;
    let refused = run_psql(
        &url(port, &user.username, &no_db, "shop", "require"),
        "SELECT 1",
    )
    .await
    .unwrap_err();
    assert!(refused.contains(&refused_text(user)), "{refused}");
    // So is an expired one.
    let expired = f
        .api
        .token(
            user.id,
            &slipway_auth::scopes::default_scopes(),
            false,
            Some(chrono::Utc::now() - chrono::Duration::minutes(1)),
        )
        .await?;
    let refused = run_psql(
        &url(port, &user.username, &expired, "shop", "require"),
        "SELECT 1",
    )
    .await
    .unwrap_err();
    assert!(refused.contains(&refused_text(user)), "{refused}");

    // Plaintext is refused before any password is asked for.
    let plain = run_psql(
        &url(port, &user.username, &user.token, "shop", "disable"),
        "SELECT 1",
    )
    .await
    .unwrap_err();
    assert!(plain.contains("TLS is required"), "{plain}");

    // Another channel is `<app>-<channel>`.
    let dev_id = f.new_channel("dev").await;
    let dev_db = db_name(&f, &dev_id).await;
    let dev = run_psql(
        &url(port, &user.username, &user.token, "shop-dev", "require"),
        "SELECT current_database()",
    )
    .await
    .expect("the dev channel");
    assert_eq!(dev, dev_db);
    assert_ne!(dev_db, prod_db);

    // Turning the toggle off ends open sessions of every channel and refuses new ones.
    let mut dev_conn = PgConnection::connect(&url(
        port,
        &user.username,
        &user.token,
        "shop-dev",
        "require",
    ))
    .await?;
    set_toggle(&f, false).await;
    dies(&mut conn, "the toggle was turned off").await;
    dies(&mut dev_conn, "the toggle was turned off").await;
    let refused = run_psql(&prod_url, "SELECT 1").await.unwrap_err();
    assert!(refused.contains(&refused_text(user)), "{refused}");
    let deadline = tokio::time::Instant::now() + CUT_WITHIN;
    while !f.api.state.sql_sessions().is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "cut sessions stay registered"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let metrics = slipway_core::metrics::encode(&f.api.state);
    assert!(
        metrics.contains("slipway_sql_proxy_sessions_cut_total{reason=\"access\"}"),
        "{metrics}"
    );
    Ok(())
}

#[tokio::test]
async fn revoking_a_token_ends_the_sessions_of_every_credential_minted_from_it() -> Result<()> {
    let f = fixture("sqlrevoke", "basic").await?;
    f.ready(&f.prod_id).await;
    set_toggle(&f, true).await;
    let port = serve_sql(&f.api).await?;
    let user = &f.user;

    // A token, and a credential minted from it: the credential is the SQL password.
    let parent: Value = f
        .api
        .post("/tokens", user, json!({"label": "laptop"}))
        .await
        .expect(200, None);
    let parent_token = parent["token"].as_str().unwrap();
    let credential = f
        .api
        .call(
            Method::POST,
            "/credentials",
            Some(parent_token),
            Some(json!({"scopes": ["db:*"]})),
        )
        .await
        .expect(200, None);
    assert_eq!(credential["username"], user.username.as_str());
    let password = credential["token"].as_str().unwrap();
    let db_url = url(port, &user.username, password, "shop", "require");

    // One session busy in a long statement (psql), one idle (sqlx).
    let mut busy = psql(&db_url, "SELECT pg_sleep(120)").spawn()?;
    let mut idle = PgConnection::connect(&db_url).await?;
    let deadline = tokio::time::Instant::now() + CUT_WITHIN;
    while f.api.state.sql_sessions().len() < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "psql never logged in"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    f.api
        .delete(&format!("/tokens/{}", parent["id"].as_str().unwrap()), user)
        .await
        .expect(204, None);
    dies(&mut idle, "its parent token was revoked").await;
    let status = tokio::time::timeout(CUT_WITHIN, busy.wait())
        .await
        .expect("psql's session outlived the revocation")?;
    assert!(!status.success(), "psql's statement was cut, not finished");

    let refused = run_psql(&db_url, "SELECT 1").await.unwrap_err();
    assert!(
        refused.contains(&refused_text(user)),
        "a revoked credential logs in no more: {refused}"
    );
    // The account's own token still works.
    let own = run_psql(
        &url(port, &user.username, &user.token, "shop", "require"),
        "SELECT 1",
    )
    .await
    .expect("another token is unaffected");
    assert_eq!(own, "1");
    Ok(())
}

#[tokio::test]
async fn a_revocation_made_elsewhere_ends_sessions_at_the_periodic_check() -> Result<()> {
    let f = fixture("sqlperiod", "basic").await?;
    f.ready(&f.prod_id).await;
    set_toggle(&f, true).await;
    let port = serve_sql(&f.api).await?;
    let user = &f.user;
    let token = f
        .api
        .token(
            user.id,
            &slipway_auth::scopes::default_scopes(),
            false,
            None,
        )
        .await?;
    let mut conn =
        PgConnection::connect(&url(port, &user.username, &token, "shop", "require")).await?;
    // Straight in the platform database, as another replica or an admin would: this process hears nothing.
    sqlx::query("UPDATE tokens SET revoked_at = now() WHERE token_hash = $1")
        .bind(&slipway_auth::token::hash(&token)[..])
        .execute(f.api.state.db())
        .await?;
    dies(&mut conn, "the token was revoked in the database").await;
    Ok(())
}

#[tokio::test]
async fn a_cancel_that_reaches_another_replica_cancels_the_session_s_query() -> Result<()> {
    let f = fixture("sqlcancel", "basic").await?;
    f.ready(&f.prod_id).await;
    set_toggle(&f, true).await;
    // Two API processes behind one address: the session goes to the first, the next connection to the second.
    let first = serve_sql(&f.api).await?;
    let second = serve_sql_of(f.api.replica_state().await?).await?;
    let port = round_robin(vec![first, second]).await?;
    let user = &f.user;
    let sql = "SELECT pg_sleep(300)";
    let sleeping = psql(
        &url(port, &user.username, &user.token, "shop", "require"),
        sql,
    )
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped())
    .spawn()?;
    let mut admin = support::postgres::connect(&support::postgres::admin_url()).await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while sqlx::query_scalar::<_, i64>(
        "SELECT count(*) FROM pg_stat_activity WHERE query = $1 AND state = 'active'",
    )
    .bind(sql)
    .fetch_one(&mut admin)
    .await?
        == 0
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the query never ran"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Ctrl-C: psql sends a CancelRequest with the session's backend key on a new connection, which reaches the
    // second process; it passes it on because the first listed the key in the platform database.
    let pid = sleeping.id().expect("psql runs");
    let interrupted = tokio::process::Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .await?;
    assert!(interrupted.success());
    let out = sleeping.wait_with_output().await?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "the query was not cancelled: {stderr}"
    );
    assert!(
        stderr.contains("canceling statement due to user request"),
        "{stderr}"
    );
    // The session is over: its key is no longer listed.
    let deadline = tokio::time::Instant::now() + CUT_WITHIN;
    while sqlx::query_scalar::<_, i64>("SELECT count(*) FROM sql_cancel_keys")
        .fetch_one(f.api.state.db())
        .await?
        > 0
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the ended session's key is still listed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}
