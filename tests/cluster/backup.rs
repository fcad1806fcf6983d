//! The platform database's part of `slipway admin restore` against the real Postgres: a dump that arrives cut short
//! (the backup's reader gone mid-stream, a damaged file) changes nothing, and a whole one restores every row and
//! nothing a newer version's fresh install had made beside them.

use std::process::Stdio;

use anyhow::{Context, Result, ensure};
use slipway_testkit::postgres::TestDatabase;
use sqlx::{Connection, PgConnection};

const ROWS: i64 = 200_000;

async fn run(url: &str, sql: &str) -> Result<()> {
    let mut db = PgConnection::connect(url).await?;
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
        .execute(&mut db)
        .await?;
    db.close().await?;
    Ok(())
}

/// The tables of `url`'s public schema with their row counts.
async fn tables(url: &str) -> Result<Vec<(String, i64)>> {
    let mut db = PgConnection::connect(url).await?;
    let names: Vec<String> = sqlx::query_scalar(
        "SELECT tablename::text FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename",
    )
    .fetch_all(&mut db)
    .await?;
    let mut counted = Vec::new();
    for name in names {
        let rows: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT count(*) FROM public.\"{name}\""
        )))
        .fetch_one(&mut db)
        .await?;
        counted.push((name, rows));
    }
    db.close().await?;
    Ok(counted)
}

#[tokio::test]
async fn a_platform_dump_cut_short_changes_nothing_and_a_whole_one_restores_every_row() -> Result<()>
{
    let from = TestDatabase::create().await?;
    run(
        from.url(),
        &format!(
            "CREATE TABLE events (id bigint PRIMARY KEY, body text); \
             INSERT INTO events SELECT i, md5(i::text) FROM generate_series(1, {ROWS}) i; \
             CREATE TABLE users (name text PRIMARY KEY); INSERT INTO users VALUES ('ann')"
        ),
    )
    .await?;
    let dir =
        std::env::temp_dir().join(format!("slipway-backup-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir)?;
    let dump = dir.join("database.dump");
    let dumped = std::process::Command::new("pg_dump")
        .args(["--format=custom", "--no-owner", "--no-privileges", "--file"])
        .arg(&dump)
        .arg(from.url())
        .output()?;
    ensure!(
        dumped.status.success(),
        "pg_dump: {}",
        String::from_utf8_lossy(&dumped.stderr)
    );
    let whole = std::fs::read(&dump)?;

    // A fresh install of a newer version: a table, a sequence and a function the backup's version never had.
    let to = TestDatabase::create().await?;
    run(
        to.url(),
        "CREATE TABLE users (name text PRIMARY KEY); INSERT INTO users VALUES ('before'); \
         CREATE TABLE added_later (id bigserial PRIMARY KEY); CREATE SEQUENCE counted_later; \
         CREATE FUNCTION added_later() RETURNS int LANGUAGE sql AS 'SELECT 1'",
    )
    .await?;
    let before = tables(to.url()).await?;
    // Cut in the middle of the events' rows, and one byte short of the end: pg_restore has written a script that
    // psql could run and commit up to there.
    for cut in [whole.len() / 2, whole.len() - 1] {
        let part = dir.join(format!("cut-{cut}.dump"));
        std::fs::write(&part, &whole[..cut])?;
        let refused = slipway_api::backup::pod::restore_database(
            to.url(),
            Stdio::from(std::fs::File::open(&part)?),
        )
        .await
        .err()
        .with_context(|| format!("a dump cut at {cut} of {} bytes was restored", whole.len()))?;
        ensure!(
            format!("{refused:#}").contains("nothing was changed"),
            "{refused:#}"
        );
        assert_eq!(tables(to.url()).await?, before, "cut at {cut}");
    }

    slipway_api::backup::pod::restore_database(to.url(), Stdio::from(std::fs::File::open(&dump)?))
        .await?;
    // Only what the backup held: its migrations then run on the schema they know.
    assert_eq!(
        tables(to.url()).await?,
        vec![("events".to_owned(), ROWS), ("users".to_owned(), 1)]
    );
    let mut db = PgConnection::connect(to.url()).await?;
    let left: i64 = sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM pg_class WHERE relname IN ('counted_later', 'added_later_id_seq')) \
              + (SELECT count(*) FROM pg_proc WHERE proname = 'added_later')",
    )
    .fetch_one(&mut db)
    .await?;
    db.close().await?;
    assert_eq!(
        left, 0,
        "the newer version's sequence and function are gone"
    );
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
