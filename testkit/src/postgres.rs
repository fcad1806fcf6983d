//! A fresh database per test on the Postgres server `hack/postgres.sh` starts (make test does), dropped when the
//! test ends. The server is found through `SLIPWAY_TEST_DATABASE_URL`; without it, the script's default port.

use anyhow::{Context, Result};
use sqlx::Connection;
use sqlx::postgres::PgConnection;

/// URL of the server's maintenance database.
pub fn admin_url() -> String {
    std::env::var("SLIPWAY_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:15432/postgres".into())
}

/// A connection to the server's maintenance database.
async fn admin_connection() -> Result<PgConnection> {
    let admin = admin_url();
    PgConnection::connect(&admin).await.with_context(|| {
        format!("no Postgres at {admin} — start one with `hack/postgres.sh start` (make test does)")
    })
}

/// The URL of the database `name` on the server.
fn database_url(name: &str) -> Result<String> {
    let admin = admin_url();
    let (base, _) = admin
        .rsplit_once('/')
        .context("database URL without a path")?;
    Ok(format!("{base}/{name}"))
}

/// Makes the database `name` with `prepare` (given its URL) unless the server has it already, for
/// [`TestDatabase::copy_of`]: one maker at a time, across processes, and a database `prepare` failed on is dropped
/// again. `prepare` must close every connection it opened, as a database with sessions cannot be copied. The
/// database stays until the server is thrown away: name it after what `prepare` puts in it.
pub async fn ensure_template<F, Fut>(name: &str, prepare: F) -> Result<()>
where
    F: FnOnce(String) -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    let mut conn = admin_connection().await?;
    sqlx::query("SELECT pg_advisory_lock(hashtext('slipway-testkit-template:' || $1))")
        .bind(name)
        .execute(&mut conn)
        .await?;
    let made: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
            .bind(name)
            .fetch_one(&mut conn)
            .await?;
    if !made {
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut conn)
            .await?;
        if let Err(e) = prepare(database_url(name)?).await {
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
            )))
            .execute(&mut conn)
            .await?;
            return Err(e.context(format!("prepare the template database {name}")));
        }
    }
    // Closing the session releases the lock.
    conn.close().await?;
    Ok(())
}

/// A database of one test, dropped (with its connections) when this is dropped.
pub struct TestDatabase {
    name: String,
    url: String,
}

impl TestDatabase {
    /// Creates an empty database `t_<random>`.
    pub async fn create() -> Result<Self> {
        Self::create_as("").await
    }

    /// Creates a database `t_<random>` as a copy of the database `template` (made by [`ensure_template`]).
    pub async fn copy_of(template: &str) -> Result<Self> {
        Self::create_as(&format!(" TEMPLATE {template}")).await
    }

    async fn create_as(clause: &str) -> Result<Self> {
        let mut conn = admin_connection().await?;
        let name = format!("t_{}", uuid::Uuid::new_v4().simple());
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "CREATE DATABASE {name}{clause}"
        )))
        .execute(&mut conn)
        .await?;
        Ok(Self {
            url: database_url(&name)?,
            name,
        })
    }

    /// Its URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Returns once `sessions` sessions of this database wait on an advisory lock (as the server shows them), or
    /// fails after `timeout`: a test's proof that work reached a lock and is held there, not that it was slow.
    pub async fn until_waiting_on_advisory_locks(
        &self,
        sessions: i64,
        timeout: std::time::Duration,
    ) -> Result<()> {
        let mut watcher = PgConnection::connect(&self.url).await?;
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let waiting: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE datname = current_database() AND wait_event_type = 'Lock' AND wait_event = 'advisory'",
            )
            .fetch_one(&mut watcher)
            .await?;
            if waiting == sessions {
                return Ok(());
            }
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "{waiting} of {sessions} sessions wait on an advisory lock"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let name = std::mem::take(&mut self.name);
        let dropped = std::thread::spawn(move || -> Result<()> {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(async {
                let mut conn = PgConnection::connect(&admin_url()).await?;
                sqlx::query(sqlx::AssertSqlSafe(format!(
                    "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                )))
                .execute(&mut conn)
                .await?;
                Ok(())
            })
        })
        .join();
        if let Ok(Err(e)) | Err(e) =
            dropped.map_err(|_| anyhow::anyhow!("database cleanup panicked"))
        {
            eprintln!("warning: could not drop test database: {e:#}");
        }
    }
}
