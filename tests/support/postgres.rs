//! The channels' data server for tests: the Postgres server `hack/postgres.sh` starts with
//! `SLIPWAY_PG_DATA_SERVER=1` (pgextwlist preloaded for postgis; the cluster tier starts it), found through
//! `SLIPWAY_TEST_DATA_SERVER_URL`. Channel databases are named after hostname labels, which hold each test user's
//! unique name, so tests share the server without meeting.

use std::sync::Arc;

use anyhow::{Context, Result};
use slipway_backends::data_server::DataServer;
use slipway_controllers::postgres::PostgresSettings;
use sqlx::Connection;
use sqlx::postgres::PgConnection;

use std::time::Duration;

use serde_json::{Value, json};

use super::{TestApi, User};

/// How long the database may take to become ready.
pub const WITHIN: Duration = Duration::from_secs(60);

/// Admin URL of the test data server.
pub fn admin_url() -> String {
    std::env::var("SLIPWAY_TEST_DATA_SERVER_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:25500/postgres".into())
}

/// The test data server's admin connection.
pub fn server() -> Result<Arc<DataServer>> {
    Ok(Arc::new(DataServer::new(&admin_url())?))
}

/// The operator's settings for the test data server (pods, were there any, would reach it on loopback).
pub fn settings() -> Result<PostgresSettings> {
    let server = server()?;
    let options = server.admin_options();
    let pod_address = format!("{}:{}", options.get_host(), options.get_port());
    Ok(PostgresSettings {
        server,
        pod_address,
    })
}

/// Points `api`'s database routes at the test data server.
pub fn attach(api: &mut TestApi) -> Result<()> {
    let server = server()?;
    api.enable(|features| features.data_server = Some(server));
    Ok(())
}

/// The `DATABASE_*` variables a deploy of `channel_id` would get, read from the API's record.
pub async fn variables(
    api: &TestApi,
    channel_id: &str,
) -> Result<std::collections::BTreeMap<String, String>> {
    let record = slipway_postgres::store::by_channel(api.state.db(), channel_id.parse()?)
        .await?
        .context("the channel's database is not recorded")?;
    let (password, readonly_password) = record.passwords(api.state.keyring())?;
    let wire = slipway_internal::protocol::DatabaseRecord {
        db_name: record.db_name,
        role_name: record.role_name,
        readonly_role_name: record.readonly_role_name,
        password,
        readonly_password,
    };
    Ok(slipway_controllers::postgres::variables(
        &wire,
        &settings()?.pod_address,
    ))
}

/// Waits until a holder waits for the lock on channel `channel_id`'s roles ([`DataServer::lock_roles`]), or `done`
/// says there is nothing left to wait for.
pub async fn roles_lock_waited_for(
    server: &DataServer,
    channel_id: &str,
    done: impl Fn() -> bool,
) -> Result<()> {
    slipway_testkit::wait_until(WITHIN, || async {
        if done() {
            return Ok(true);
        }
        // pg_locks shows the lock's two keys as oids: the hash's bits, unsigned.
        let waiting: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted \
             AND objsubid = 2 AND classid::bigint = $1 AND objid::bigint = hashtext($2)::bigint & 4294967295)",
        )
        .bind(i64::from(slipway_backends::data_server::ROLES_LOCK_CLASS))
        .bind(channel_id)
        .fetch_one(server.pool())
        .await?;
        Ok(waiting)
    })
    .await
    .context("nobody waited for the roles' lock")
}

/// Connects to `url` (a channel role's).
pub async fn connect(url: &str) -> Result<PgConnection, sqlx::Error> {
    PgConnection::connect(url).await
}

/// An API and an operator on the data server, and a user with one `app` app.
pub struct Fixture {
    pub api: TestApi,
    pub user: User,
    pub app_id: String,
    pub prod_id: String,
    /// The operator's task (a test may stop it).
    pub operator: tokio::task::JoinHandle<()>,
}

pub async fn fixture(prefix: &str, plan: &str) -> Result<Fixture> {
    let mut api = TestApi::start().await?;
    attach(&mut api)?;
    let user = api.user(prefix, plan).await?;
    let app = api.create_app(&user, "shop", "app").await;
    let app_id = app["id"].as_str().unwrap().to_owned();
    let prod_id = app["channels"][0]["id"].as_str().unwrap().to_owned();
    let operator = api
        .start_operator_with_postgres(&user.namespace, settings()?)
        .await?;
    Ok(Fixture {
        api,
        user,
        app_id,
        prod_id,
        operator,
    })
}

impl Fixture {
    pub fn path(&self, channel_id: &str) -> String {
        format!("/apps/{}/channels/{channel_id}/postgres", self.app_id)
    }

    /// Polls the status route until the channel's database is ready.
    pub async fn ready(&self, channel_id: &str) -> Value {
        self.status_becomes(channel_id, "ready").await
    }

    pub async fn status_becomes(&self, channel_id: &str, wanted: &str) -> Value {
        let deadline = tokio::time::Instant::now() + WITHIN;
        loop {
            let reply = self.api.get(&self.path(channel_id), &self.user).await;
            if reply.status == 200 && reply.body["status"] == wanted {
                return reply.body;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the database never became {wanted}: {} {}",
                reply.status,
                reply.body
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    pub async fn new_channel(&self, name: &str) -> String {
        let channel = self
            .api
            .post(
                &format!("/apps/{}/channels", self.app_id),
                &self.user,
                json!({"name": name, "git_ref_binding": format!("branch:{name}")}),
            )
            .await
            .expect(200, None);
        channel["id"].as_str().unwrap().to_owned()
    }
}

/// The message of a refused statement or connection.
pub fn refusal<T: std::fmt::Debug>(result: Result<T, sqlx::Error>) -> String {
    match result {
        Ok(v) => panic!("expected a refusal, got {v:?}"),
        Err(e) => e.to_string(),
    }
}

pub async fn execute(conn: &mut sqlx::PgConnection, sql: &str) -> Result<(), sqlx::Error> {
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
        .execute(conn)
        .await
        .map(|_| ())
}
