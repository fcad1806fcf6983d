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

/// A database of one test, dropped (with its connections) when this is dropped.
pub struct TestDatabase {
    name: String,
    url: String,
}

impl TestDatabase {
    /// Creates an empty database `t_<random>`.
    pub async fn create() -> Result<Self> {
        let admin = admin_url();
        let mut conn = PgConnection::connect(&admin).await.with_context(|| {
            format!(
                "no Postgres at {admin} — start one with `hack/postgres.sh start` (make test does)"
            )
        })?;
        let name = format!("t_{}", uuid::Uuid::new_v4().simple());
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut conn)
            .await?;
        let (base, _) = admin
            .rsplit_once('/')
            .context("database URL without a path")?;
        Ok(Self {
            url: format!("{base}/{name}"),
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
