//! SQL snapshots at production size: a channel database of `SLIPWAY_BENCH_DB_GB` (default 5) gigabytes, filled on
//! the data server. Each figure is printed beside the plain tool's in the same run, with the ratio:
//!
//! - the checkpoint (`pg_dump -Fc` streamed into the object-storage backend, versitygw, as a multipart upload, and
//!   its row written) against `pg_dump -Fc` with the same options into a local file, and against the best plain
//!   way into the same store, `pg_dump -Fc | rclone rcat` (a streamed multipart upload);
//! - the restore (the file streamed back out of the backend through `pg_restore` into one `psql` transaction that
//!   replaces the database) against `pg_restore` of the local file into an empty database;
//! - the download (the file streamed out of the backend, as the download route sends it) against reading the
//!   local file, and against `rclone cat` of the same object out of the same store (best of three each);
//! - this process's peak resident memory after each (slipway's side of the work runs in it), which must not grow
//!   with the database's size.
//!
//! Needs the platform Postgres and the data server (`make bench` starts both); the backend is started here.
//!
//! Prints one line per figure; it asserts nothing about time.

use std::time::Instant;

use anyhow::{Context, Result, ensure};
use futures::StreamExt;
use slipway_backends::data_server::names;
use slipway_backends::data_server::{DataServer, DumpFormat, RoleSettings};
use slipway_backends::object_store::S3Endpoint;
use slipway_postgres::archive::{self, Archive};
use slipway_postgres::snapshots::{self, Kind, Occasion, Parts};
use slipway_postgres::store::{self, NewRecord};
use slipway_store::env::crypto::Keyring;
use slipway_testkit::postgres::TestDatabase;
use slipway_testkit::s3::TestS3;

#[path = "common/rss.rs"]
mod rss;
use rss::peak_rss_mib;

/// Bytes a row of the generated table takes on disk, headers and the primary key's index entry included.
const ROW_BYTES: i64 = 290;
const MB: f64 = 1_000_000.0;

/// The database's size to generate, in bytes (`SLIPWAY_BENCH_DB_GB`, default 5).
fn wanted_bytes() -> Result<i64> {
    let gb: f64 = std::env::var("SLIPWAY_BENCH_DB_GB")
        .unwrap_or_else(|_| "5".to_owned())
        .parse()
        .context("SLIPWAY_BENCH_DB_GB is a number of gigabytes")?;
    Ok((gb * 1e9) as i64)
}

#[tokio::main]
async fn main() -> Result<()> {
    let admin_url = std::env::var("SLIPWAY_TEST_DATA_SERVER_URL")
        .context("SLIPWAY_TEST_DATA_SERVER_URL names the data server (make bench starts one)")?;
    let server = DataServer::new(&admin_url)?;
    let database = TestDatabase::create().await?;
    let db = slipway_store::db::connect(database.url()).await?;
    let ring = Keyring::parse(&Keyring::generate_line("bench"))?;
    slipway_store::db::users::create(&db, &"bench".parse()?, "pro").await?;
    let label = format!("snap-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let record = store::ensure(
        &db,
        &ring,
        &NewRecord {
            channel_id: uuid::Uuid::new_v4(),
            app_id: uuid::Uuid::new_v4(),
            owner: "bench",
            names: &names::for_label(&label),
        },
    )
    .await?;
    let (password, readonly_password) = record.passwords(&ring)?;
    server
        .provision(
            &record.names(),
            &RoleSettings {
                password: &password,
                readonly_password: &readonly_password,
                connection_limit: 10,
            },
        )
        .await?;
    let rows = wanted_bytes()? / ROW_BYTES;
    let fill = Instant::now();
    let mut conn = server.connect_to(&record.db_name).await?;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE TABLE events AS SELECT g AS id, now() - g * interval '1 second' AS at, \
         md5(g::text) || repeat(md5((g * 7)::text), 6) AS body FROM generate_series(1, {rows}) g; \
         ALTER TABLE events ADD PRIMARY KEY (id); ALTER TABLE events OWNER TO {}",
        slipway_backends::data_server::ident(&record.role_name)
    )))
    .execute(&mut conn)
    .await?;
    let size: i64 = sqlx::query_scalar("SELECT pg_database_size(current_database())")
        .fetch_one(&mut conn)
        .await?;
    drop(conn);
    let size_mb = size as f64 / MB;
    println!(
        "snapshot database: {size_mb:.0} MB ({rows} rows, filled in {:.1} s); peak RSS {:.0} MiB",
        fill.elapsed().as_secs_f64(),
        peak_rss_mib()
    );

    // The alternative: pg_dump with the same format and compression into a local file.
    let file = std::env::temp_dir().join(format!("{label}.dump"));
    let mut dump = server.dump_command(&record.db_name, DumpFormat::Custom);
    dump.arg(format!("--file={}", file.display()));
    let started = Instant::now();
    let out = dump.output().await?;
    ensure!(
        out.status.success(),
        "pg_dump: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let to_file = started.elapsed().as_secs_f64();
    let file_bytes = std::fs::metadata(&file)?.len();

    // Through slipway: streamed into the backend's system bucket, then the row.
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
    let parts = Parts {
        db: &db,
        server: &server,
        archive: &archive,
    };
    let started = Instant::now();
    let snapshot = snapshots::take(
        parts,
        &record,
        &Occasion {
            kind: Kind::PreDeploy,
            deploy_id: Some(uuid::Uuid::new_v4()),
            git_sha: None,
        },
        &slipway_jobs::Progress::default(),
    )
    .await?;
    let through = started.elapsed().as_secs_f64();
    println!(
        "checkpoint ({:.0} MB file): pg_dump -Fc to a file {:.1} MB/s ({to_file:.1} s), through slipway into the object store {:.1} MB/s ({through:.1} s), ratio {:.2}x (target 0.9x); peak RSS {:.0} MiB",
        file_bytes as f64 / MB,
        size_mb / to_file,
        size_mb / through,
        to_file / through,
        peak_rss_mib()
    );

    let key = snapshot.object_key.context("the snapshot's file")?;

    // The best real alternative into the same store: pg_dump piped into rclone's streaming upload.
    let piped = dump_piped_into_rclone(&server, &record.db_name, &backend, &label).await?;
    println!(
        "checkpoint into the object store: pg_dump -Fc | rclone rcat {:.1} MB/s ({piped:.1} s), through slipway {:.1} MB/s ({through:.1} s), ratio {:.2}x",
        size_mb / piped,
        size_mb / through,
        piped / through,
    );

    // The download: the file streamed out of the backend, against reading the local file and against the plain
    // tool reading the same object out of the same store. Each takes well under a second at this size, so each is
    // the best of three.
    let mut from_file = f64::MAX;
    let mut read = 0u64;
    for _ in 0..3 {
        let started = Instant::now();
        read = 0;
        let mut file_stream = tokio_util::io::ReaderStream::with_capacity(
            tokio::fs::File::open(&file).await?,
            1 << 20,
        );
        while let Some(chunk) = file_stream.next().await {
            read += chunk?.len() as u64;
        }
        from_file = from_file.min(started.elapsed().as_secs_f64());
    }
    let mut through = f64::MAX;
    for _ in 0..3 {
        let started = Instant::now();
        let mut downloaded = 0u64;
        let mut stream = archive.download(&key).await?;
        while let Some(chunk) = stream.next().await {
            downloaded += chunk?.len() as u64;
        }
        through = through.min(started.elapsed().as_secs_f64());
        ensure!(
            downloaded == read,
            "downloaded {downloaded} bytes of {read}"
        );
    }
    let mut by_rclone = f64::MAX;
    for _ in 0..3 {
        let started = Instant::now();
        // Not `output()`: tokio's pipes stdout whatever was set, and this process would hold the whole file.
        let out = rclone(&backend)
            .args([
                "cat",
                &format!("store:{}/{key}", archive::system_bucket("slipway-")),
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()?
            .wait_with_output()
            .await?;
        ensure!(
            out.status.success(),
            "rclone cat: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        by_rclone = by_rclone.min(started.elapsed().as_secs_f64());
    }
    let mb = read as f64 / MB;
    println!(
        "download ({mb:.0} MB, best of 3): reading the file {:.1} MB/s ({from_file:.2} s), out of the object store {:.1} MB/s ({through:.2} s), ratio {:.2}x (target 0.8x); the same object by rclone cat {:.1} MB/s ({by_rclone:.2} s), ratio to it {:.2}x; peak RSS {:.0} MiB",
        mb / from_file,
        mb / through,
        from_file / through,
        mb / by_rclone,
        by_rclone / through,
        peak_rss_mib()
    );

    // The restore: pg_restore of the file into an empty database, against slipway's restore in place.
    let plain = format!("{}_plain", record.db_name);
    let mut admin = server.connect_to("postgres").await?;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE DATABASE {}",
        slipway_backends::data_server::ident(&plain)
    )))
    .execute(&mut admin)
    .await?;
    let mut pg_restore = server.client_command("pg_restore", &plain);
    pg_restore
        .args([
            "--no-owner",
            "--no-privileges",
            "--single-transaction",
            "--no-password",
        ])
        .arg(format!("--dbname={plain}"))
        .arg(&file);
    let started = Instant::now();
    let out = pg_restore.output().await?;
    ensure!(
        out.status.success(),
        "pg_restore: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plain_restore = started.elapsed().as_secs_f64();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE {} WITH (FORCE)",
        slipway_backends::data_server::ident(&plain)
    )))
    .execute(&mut admin)
    .await?;
    std::fs::remove_file(&file)?;
    let started = Instant::now();
    slipway_postgres::restore::restore(
        &server,
        &record.names(),
        archive.download(&key).await?,
        |_transaction| async { Ok(()) },
    )
    .await?;
    let through = started.elapsed().as_secs_f64();
    println!(
        "restore: pg_restore of the file into an empty database {:.1} MB/s ({plain_restore:.1} s), through slipway from the object store in one transaction {:.1} MB/s ({through:.1} s), ratio {:.2}x (target 0.9x); peak RSS {:.0} MiB",
        size_mb / plain_restore,
        size_mb / through,
        plain_restore / through,
        peak_rss_mib()
    );
    server.drop_database(&record.names()).await?;
    Ok(())
}

/// Seconds `pg_dump -Fc` of `db_name` piped into `rclone rcat` took to land in `backend`'s system bucket.
async fn dump_piped_into_rclone(
    server: &DataServer,
    db_name: &str,
    backend: &TestS3,
    label: &str,
) -> Result<f64> {
    let started = Instant::now();
    let mut dump = server.dump_command(db_name, DumpFormat::Custom);
    let mut dump = dump
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    let stdout: std::process::Stdio = dump.stdout.take().context("pg_dump's stdout")?.try_into()?;
    let target = format!(
        "store:{}/{label}-rclone.dump",
        archive::system_bucket("slipway-")
    );
    let rclone = rclone(backend)
        .args(["rcat", &target])
        .stdin(stdout)
        .output();
    let (dumped, uploaded) = tokio::join!(dump.wait_with_output(), rclone);
    let (dumped, uploaded) = (dumped?, uploaded?);
    // rclone first: pg_dump fails without a word when the reader of its pipe went away.
    ensure!(
        uploaded.status.success(),
        "rclone rcat: {}",
        String::from_utf8_lossy(&uploaded.stderr)
    );
    ensure!(
        dumped.status.success(),
        "pg_dump ({}): {}",
        dumped.status,
        String::from_utf8_lossy(&dumped.stderr)
    );
    Ok(started.elapsed().as_secs_f64())
}

/// rclone with `backend` as its remote `store:`.
fn rclone(backend: &TestS3) -> tokio::process::Command {
    let mut rclone = tokio::process::Command::new("rclone");
    rclone
        .env("RCLONE_CONFIG", "/dev/null")
        // A CA bundle named for other clients breaks rclone's plain-HTTP transport; the backend needs none.
        .env_remove("AWS_CA_BUNDLE")
        .env("RCLONE_CONFIG_STORE_TYPE", "s3")
        .env("RCLONE_CONFIG_STORE_PROVIDER", "Other")
        .env("RCLONE_CONFIG_STORE_ENDPOINT", &backend.url)
        .env("RCLONE_CONFIG_STORE_ACCESS_KEY_ID", &backend.access_key_id)
        .env(
            "RCLONE_CONFIG_STORE_SECRET_ACCESS_KEY",
            &backend.secret_access_key,
        )
        .env("RCLONE_CONFIG_STORE_REGION", "us-east-1")
        .env("RCLONE_CONFIG_STORE_FORCE_PATH_STYLE", "true");
    rclone
}
