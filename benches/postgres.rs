//! SQL snapshots of a ~200 MB channel database: throughput of a snapshot through slipway (`pg_dump -Fc` streamed
//! into the object-storage backend, versitygw, as a multipart upload, and its row written) against `pg_dump -Fc`
//! with the same options into a local file, in MB/s of database size, with the ratio; then the time a restore
//! takes (the file back from the backend through `pg_restore` into one `psql` transaction). Needs the platform
//! Postgres and the data server (`make bench` starts both); the backend is started here.
//!
//! Prints one line per figure; it asserts nothing about time.

use std::time::Instant;

use anyhow::{Context, Result, ensure};
use slipway::env::crypto::Keyring;
use slipway::postgres::archive::{self, Archive};
use slipway::postgres::snapshots::{self, Kind, Occasion, Parts};
use slipway::postgres::store::{self, NewRecord};
use slipway_controllers::blob::backend::S3Endpoint;
use slipway_controllers::postgres::names;
use slipway_controllers::postgres::server::{DataServer, DumpFormat, RoleSettings};
use slipway_testkit::postgres::TestDatabase;
use slipway_testkit::s3::TestS3;

/// Rows of ~250 bytes: about 200 MB of table.
const ROWS: i64 = 800_000;
const MB: f64 = 1_000_000.0;

#[tokio::main]
async fn main() -> Result<()> {
    let admin_url = std::env::var("SLIPWAY_TEST_DATA_SERVER_URL")
        .context("SLIPWAY_TEST_DATA_SERVER_URL names the data server (make bench starts one)")?;
    let server = DataServer::new(&admin_url)?;
    let database = TestDatabase::create().await?;
    let db = slipway::db::connect(database.url()).await?;
    let ring = Keyring::parse(&Keyring::generate_line("bench"))?;
    slipway::db::users::create(&db, &"bench".parse()?, "pro").await?;
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
    let fill = Instant::now();
    let mut conn = server.connect_to(&record.db_name).await?;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE TABLE events AS SELECT g AS id, now() - g * interval '1 second' AS at, \
         md5(g::text) || repeat(md5((g * 7)::text), 6) AS body FROM generate_series(1, {ROWS}) g; \
         ALTER TABLE events ADD PRIMARY KEY (id); ALTER TABLE events OWNER TO {}",
        slipway_controllers::postgres::server::ident(&record.role_name)
    )))
    .execute(&mut conn)
    .await?;
    let size: i64 = sqlx::query_scalar("SELECT pg_database_size(current_database())")
        .fetch_one(&mut conn)
        .await?;
    drop(conn);
    let size_mb = size as f64 / MB;
    println!(
        "snapshot database: {size_mb:.0} MB ({ROWS} rows, filled in {:.1} s)",
        fill.elapsed().as_secs_f64()
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
    std::fs::remove_file(&file)?;

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
        &slipway::jobs::Progress::default(),
    )
    .await?;
    let through = started.elapsed().as_secs_f64();
    println!(
        "snapshot ({:.0} MB file): pg_dump -Fc to a file {:.1} MB/s ({to_file:.1} s), through slipway into the object store {:.1} MB/s ({through:.1} s), ratio {:.2}x",
        file_bytes as f64 / MB,
        size_mb / to_file,
        size_mb / through,
        to_file / through
    );

    let key = snapshot.object_key.context("the snapshot's file")?;
    let started = Instant::now();
    slipway::postgres::restore::restore(&server, &record.names(), archive.download(&key).await?)
        .await?;
    println!(
        "restore of that snapshot in one transaction: {:.1} s ({:.1} MB/s of database)",
        started.elapsed().as_secs_f64(),
        size_mb / started.elapsed().as_secs_f64()
    );
    server.drop_database(&record.names()).await?;
    Ok(())
}
