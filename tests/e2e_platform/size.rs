//! Data at the sizes users reach, on the installed platform (see `platform.rs`): a channel database of more than a
//! gigabyte, generated on the data server, goes through a deploy's pre-deploy checkpoint while the operator
//! restarts, a restore of that checkpoint while the API's pod is killed, and the snapshot's download; a bucket of
//! 20,000 objects goes through a deploy's checkpoint, a restore of it after a tenth of its keys changed, and the
//! checkpoint's tar.gz download. Nothing of it may be bounded by one request's life: checkpoints and restores are
//! jobs of the platform, which a new API process takes over.
//!
//! `hack/test.sh e2e` runs this file after `isolation.rs` and before `upgrade.rs`, one test at a time: a test that
//! kills the API's pod must not cut another's requests.

#![allow(clippy::unwrap_used)]

use crate::support;

use std::str::FromStr;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection};
use support::git::Workspace;
use support::platform::{
    Account, Installed, PublicBucket, kubectl, kubectl_command, output, until,
};

/// Rows of the generated table: 7 distinct MD5 sums each (224 bytes), about 1.1 GB of table in all.
const ROWS: i64 = 4_200_000;
/// Every this-many-th row is deleted after the deploy: the state the restore replaces.
const DELETED_EVERY: i64 = 100;
/// How long a restore of the generated database may take on a loaded 2-core machine, takeover included.
const RESTORE_WITHIN: Duration = Duration::from_secs(1200);

/// The SQL checkpoint of deploy `deploy` in the channel's snapshot list.
async fn checkpoint_of(
    platform: &Installed,
    account: &Account,
    postgres: &str,
    deploy: &str,
) -> Result<Value> {
    let snapshots = platform
        .call("GET", &format!("{postgres}/snapshots"), account, None)
        .await?
        .expect(200);
    snapshots
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["deploy_id"] == deploy)
        .cloned()
        .with_context(|| format!("no snapshot of deploy {deploy}: {snapshots}"))
}

/// A connection to `db_name` on the data server, as its administrator.
async fn data_server(db_name: &str) -> Result<PgConnection> {
    let url = std::env::var("SLIPWAY_PLATFORM_DATA_SERVER_URL")?;
    Ok(PgConnection::connect_with(&PgConnectOptions::from_str(&url)?.database(db_name)).await?)
}

/// A connection to the platform's own database, to read its jobs.
async fn platform_db() -> Result<PgConnection> {
    let url = std::env::var("SLIPWAY_PLATFORM_DATABASE_URL")
        .context("SLIPWAY_PLATFORM_DATABASE_URL: run under `hack/test.sh e2e`")?;
    Ok(PgConnection::connect(&url).await?)
}

/// The generated table as one of the two states a restore may leave: the checkpoint's (every row, no
/// `after_deploy` table) or the later one (rows deleted, the table there).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Checkpoint,
    Later,
}

/// Which state the database is in; fails on anything else (a restore half-applied), and `None` when a restore
/// holds the table and the look would have to wait.
async fn state_of(conn: &mut PgConnection) -> Result<Option<State>> {
    sqlx::query("SET lock_timeout = '2s'")
        .execute(&mut *conn)
        .await?;
    let looked: std::result::Result<(i64, bool), sqlx::Error> = sqlx::query_as(
        "SELECT (SELECT count(*) FROM filler), to_regclass('public.after_deploy') IS NOT NULL",
    )
    .fetch_one(&mut *conn)
    .await;
    match looked {
        Ok((rows, false)) if rows == ROWS => Ok(Some(State::Checkpoint)),
        Ok((rows, true)) if rows == ROWS - ROWS / DELETED_EVERY => Ok(Some(State::Later)),
        Ok((rows, marker)) => {
            bail!("the database is half-restored: {rows} rows, after_deploy {marker}")
        }
        // 55P03 lock_not_available; 42P01: the restore dropped the table in a transaction not yet committed.
        Err(sqlx::Error::Database(e)) if matches!(e.code().as_deref(), Some("55P03" | "42P01")) => {
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}

/// The deploy's log so far.
async fn deploy_log(
    platform: &Installed,
    account: &Account,
    app: &str,
    channel: &str,
    id: &str,
) -> Result<Value> {
    Ok(platform
        .call(
            "GET",
            &format!("/apps/{app}/channels/{channel}/logs?deploy={id}&max_bytes=262144"),
            account,
            None,
        )
        .await?
        .expect(200))
}

/// The newest `sql_restore` job of the channel: (state, attempts, error).
async fn restore_job(channel: &str) -> Result<Option<(String, i32, Option<String>)>> {
    let mut db = platform_db().await?;
    Ok(sqlx::query_as(
        "SELECT state, attempts, error FROM jobs WHERE kind = 'sql_restore' AND channel_id = $1 \
         ORDER BY created_at DESC LIMIT 1",
    )
    .bind(uuid::Uuid::parse_str(channel)?)
    .fetch_optional(&mut db)
    .await?)
}

/// Pods of a platform component: their names.
async fn pods_of(platform: &Installed, component: &str) -> Result<Vec<String>> {
    Ok(kubectl(&[
        "-n",
        &platform.namespace,
        "get",
        "pods",
        "-l",
        &format!("app.kubernetes.io/component={component}"),
        "-o",
        "jsonpath={.items[*].metadata.name}",
    ])
    .await?
    .split_whitespace()
    .map(str::to_owned)
    .collect())
}

#[tokio::test]
async fn a_gigabyte_database_deploys_through_an_operator_restart_and_restores_through_an_api_kill()
-> Result<()> {
    let platform = Installed::from_env()?;
    let ada = platform.account("ada").await?;
    let (app, channel) = platform.create_app(&ada, "big", "app").await?;
    let postgres = format!("/apps/{app}/channels/{channel}/postgres");
    let db_name = until(
        Duration::from_secs(120),
        "the channel's database ready",
        async || {
            let status = platform
                .call("GET", &postgres, &ada, None)
                .await?
                .expect(200);
            Ok((status["status"] == "ready")
                .then(|| status["db_name"].as_str().unwrap().to_owned()))
        },
    )
    .await?;

    // More than a gigabyte, generated on the data server by the channel's own role, as an app's writes would be.
    let mut admin = data_server(&db_name).await?;
    let filled = Instant::now();
    let owner: String = sqlx::query_scalar(
        "SELECT pg_get_userbyid(datdba)::text FROM pg_database WHERE datname = current_database()",
    )
    .fetch_one(&mut admin)
    .await?;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "SET ROLE \"{owner}\"; CREATE TABLE filler (id bigint PRIMARY KEY, body text NOT NULL); \
         INSERT INTO filler SELECT g, md5(g::text) || md5((g + 1)::text) || md5((g + 2)::text) \
         || md5((g + 3)::text) || md5((g + 4)::text) || md5((g + 5)::text) || md5((g + 6)::text) \
         FROM generate_series(1, {ROWS}) g; RESET ROLE"
    )))
    .execute(&mut admin)
    .await?;
    let size: i64 = sqlx::query_scalar("SELECT pg_database_size(current_database())")
        .fetch_one(&mut admin)
        .await?;
    println!(
        "generated {size} bytes in {:.0} s",
        filled.elapsed().as_secs_f64()
    );
    assert!(size >= 1_000_000_000, "{size} bytes");

    // The first deploy checkpoints it; the operator restarts while the dump runs, and the deploy still completes.
    let ws = Workspace::new()?;
    let sha = platform.push_version_server(&ada, &ws, "big").await?;
    let deploy = platform.queue_deploy(&ada, &app, &channel, &sha).await?;
    let progress = until(
        Duration::from_secs(600),
        "the checkpoint's progress in the log",
        async || {
            let log = deploy_log(&platform, &ada, &app, &channel, &deploy).await?;
            let text = log["log"].as_str().unwrap_or_default();
            Ok(text
                .lines()
                .find(|l| l.starts_with("[snapshot]") && l.contains(" of ") && l.ends_with(" s"))
                .map(str::to_owned))
        },
    )
    .await?;
    println!("mid-checkpoint: {progress}");
    let operators = pods_of(&platform, "operator").await?;
    assert!(!operators.is_empty());
    let mut delete = vec![
        "-n",
        platform.namespace.as_str(),
        "delete",
        "pod",
        "--wait=false",
    ];
    delete.extend(operators.iter().map(String::as_str));
    kubectl(&delete).await?;
    let log = platform.finished(&ada, &app, &channel, &deploy).await?;
    let text = log["log"].as_str().unwrap();
    assert_eq!(log["status"], "success", "{text}");
    assert!(
        text.contains("[snapshot] done: an SQL snapshot of"),
        "{text}"
    );
    let replaced: Vec<String> = pods_of(&platform, "operator").await?;
    assert!(
        replaced.iter().all(|p| !operators.contains(p)),
        "the operator's pods were replaced: {operators:?} then {replaced:?}"
    );
    let checkpoint = checkpoint_of(&platform, &ada, &postgres, &deploy).await?;
    let checkpoint_id = checkpoint["snapshot_id"].as_str().unwrap().to_owned();

    // The app changes its data; then a restore of the checkpoint runs while the API's pod is killed.
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "SET ROLE \"{owner}\"; DELETE FROM filler WHERE id % {DELETED_EVERY} = 0; \
         CREATE TABLE after_deploy (at timestamptz DEFAULT now()); RESET ROLE"
    )))
    .execute(&mut admin)
    .await?;
    assert_eq!(state_of(&mut admin).await?, Some(State::Later));
    platform
        .call(
            "POST",
            &format!("/apps/{app}/env"),
            &ada,
            Some(json!({"key": "SVC_ALLOW_PROD_RESTORE", "value": "1"})),
        )
        .await?
        .expect(204);
    let body = json!({"snapshot_id": checkpoint_id, "confirm_db_name": db_name});
    let asked = {
        let (platform, ada, path, body) = (
            Installed::from_env()?,
            ada.clone(),
            format!("{postgres}/restore"),
            body.clone(),
        );
        tokio::spawn(async move {
            platform
                .call_within("POST", &path, &ada, body, RESTORE_WITHIN)
                .await
        })
    };
    // In the middle: the restore's COPY has moved data into the database.
    let copied = until(Duration::from_secs(300), "the restore copying rows", async || {
        let mut conn = data_server(&db_name).await?;
        let bytes: Option<i64> = sqlx::query_scalar(
            "SELECT max(bytes_processed) FROM pg_stat_progress_copy WHERE datname = current_database() AND command = 'COPY FROM'",
        )
        .fetch_one(&mut conn)
        .await?;
        Ok(bytes.filter(|b| *b > 50_000_000))
    })
    .await?;
    let apis = pods_of(&platform, "api").await?;
    let mut kill = vec![
        "-n",
        platform.namespace.as_str(),
        "delete",
        "pod",
        "--grace-period=0",
        "--force",
    ];
    kill.extend(apis.iter().map(String::as_str));
    kubectl(&kill).await?;
    println!("killed {apis:?} with {copied} bytes of the restore copied");
    let cut = asked.await?;
    assert!(
        cut.as_ref().map_or(true, |answer| answer.status != 200),
        "the killed request answered: {:?}",
        cut.map(|a| a.text())
    );

    // Another API process takes the job over; meanwhile the database is all of one state or all of the other.
    let mut seen = Vec::new();
    let (state, attempts, error) = until(RESTORE_WITHIN, "the restore job finished", async || {
        if let Some(state) = state_of(&mut admin).await? {
            seen.push(state);
        }
        Ok(restore_job(&channel)
            .await?
            .filter(|(state, _, _)| state == "succeeded" || state == "failed"))
    })
    .await?;
    println!(
        "restore job {state} after {attempts} attempts ({error:?}); states seen meanwhile: {seen:?}"
    );
    let end = until(
        Duration::from_secs(60),
        "the database's state",
        async || state_of(&mut admin).await,
    )
    .await?;
    match state.as_str() {
        "succeeded" => {
            assert!(
                attempts >= 2,
                "taken over after the kill: {attempts} attempts"
            );
            assert_eq!(
                end,
                State::Checkpoint,
                "a restore that succeeded left the checkpoint's data"
            );
        }
        _ => assert_eq!(
            end,
            State::Later,
            "a restore that failed left the data unchanged: {error:?}"
        ),
    }
    // The API answers again, and the channel is free for the next restore.
    let status = until(Duration::from_secs(300), "the API back", async || {
        Ok(match platform.call("GET", &postgres, &ada, None).await {
            Ok(answer) if answer.status == 200 => Some(answer.json()),
            _ => None,
        })
    })
    .await?;
    assert_eq!(status["status"], "ready", "{status}");

    // The snapshot downloads whole, and pg_restore reads it: the one in the API's image, of the version that
    // wrote it (the data server's own tools here are older than the dump's format).
    let file = ws.path("checkpoint.dump");
    let started = Instant::now();
    let bytes = platform
        .download(
            &format!("{postgres}/snapshots/{checkpoint_id}/download"),
            &ada,
            &file,
        )
        .await?;
    println!(
        "downloaded {bytes} bytes in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(
        Some(bytes as i64),
        checkpoint["size_bytes"].as_i64(),
        "{checkpoint}"
    );
    // A dump streamed into the store has its table of contents ahead of the data, so pg_restore lists it from the
    // first megabytes. Those cross the exec stream into a file in the pod, which pg_restore then reads: `head`
    // ends the copy after exactly those bytes (the exec stream never passes on the end of its stdin), and
    // pg_restore reading that pipe itself hung after the first lines of its list.
    const HEAD: u64 = 4 << 20;
    let head = ws.path("checkpoint.head");
    let mut whole = std::fs::File::open(&file)?;
    std::io::copy(
        &mut std::io::Read::take(&mut whole, HEAD),
        &mut std::fs::File::create(&head)?,
    )?;
    let head_bytes = std::fs::metadata(&head)?.len();
    let api = format!("deployment/{}-api", platform.release);
    let listed = kubectl_command(&[
        "-n",
        &platform.namespace,
        "exec",
        "-i",
        &api,
        "--",
        "sh",
        "-c",
        &format!(
            "head -c {head_bytes} > /tmp/checkpoint.head && pg_restore --list /tmp/checkpoint.head; \
             status=$?; rm -f /tmp/checkpoint.head; exit $status"
        ),
    ])?
    .stdin(std::fs::File::open(&head)?)
    .output()
    .await?;
    assert!(
        listed.status.success(),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    assert!(String::from_utf8_lossy(&listed.stdout).contains("TABLE DATA public filler"));

    // Deleting the app drops the database.
    drop(admin);
    platform.delete_app(&ada, &app).await
}

/// Objects in the bucket test, in prefixes of [`PER_PREFIX`].
const OBJECTS: usize = 20_000;
const PER_PREFIX: usize = 200;

/// The key of object `n` under `o/`.
fn object_key(n: usize) -> String {
    format!("{:03}/{n:05}.txt", n / PER_PREFIX)
}

#[tokio::test]
async fn a_bucket_of_twenty_thousand_objects_restores_to_its_checkpoint_and_downloads_whole()
-> Result<()> {
    let platform = Installed::from_env()?;
    let kim = platform.account("kim").await?;
    let (app, channel) = platform.create_app(&kim, "objects", "app").await?;
    let bucket = PublicBucket::open(&platform, &kim, &app, &channel).await?;
    let work = slipway_testkit::tls::TempDir::new("size-objects")?;
    let ca = platform.edge_ca.to_str().unwrap().to_owned();
    let hosts = work.path().join("hosts");
    let rclone = |args: &[&str]| bucket.rclone(&ca, &hosts, args);
    let remote = format!("channel:{}/o", bucket.keys.bucket);
    let write = |dir: &std::path::Path,
                 keys: &mut dyn Iterator<Item = usize>,
                 version: &str|
     -> Result<()> {
        for n in keys {
            let path = dir.join(object_key(n));
            std::fs::create_dir_all(path.parent().unwrap())?;
            std::fs::write(path, format!("object {n} {version}\n"))?;
        }
        Ok(())
    };
    let v1 = work.path().join("v1");
    write(&v1, &mut (0..OBJECTS), "v1")?;
    let started = Instant::now();
    let parallel = ["--transfers", "16", "--checkers", "16"];
    let mut copy = vec!["copy", v1.to_str().unwrap(), remote.as_str()];
    copy.extend(parallel);
    output(rclone(&copy), "rclone copy").await?;
    println!(
        "uploaded {OBJECTS} objects in {:.0} s",
        started.elapsed().as_secs_f64()
    );

    // The deploy's checkpoint lists all of them.
    let ws = Workspace::new()?;
    let sha = platform.push_version_server(&kim, &ws, "objects").await?;
    let (deploy, log) = platform.deploy(&kim, &app, &channel, &sha).await?;
    assert_eq!(log["status"], "success", "{}", log["log"]);
    let postgres = format!("/apps/{app}/channels/{channel}/postgres");
    let checkpoint = checkpoint_of(&platform, &kim, &postgres, &deploy).await?;
    assert_eq!(checkpoint["aligned_blob"], true, "{checkpoint}");
    let checkpoint_id = checkpoint["snapshot_id"].as_str().unwrap().to_owned();

    // Later: every 40th object rewritten, one prefix deleted, one added.
    let v2 = work.path().join("v2");
    write(&v2, &mut (0..OBJECTS).step_by(40), "v2")?;
    write(&v2, &mut (OBJECTS..OBJECTS + PER_PREFIX), "v2")?;
    let mut copy = vec!["copy", v2.to_str().unwrap(), remote.as_str()];
    copy.extend(parallel);
    output(rclone(&copy), "rclone copy of the changes").await?;
    let gone = format!(
        "{remote}/{}",
        object_key(PER_PREFIX).split('/').next().unwrap()
    );
    // `delete` leaves delete markers, as an app's deletes do; `purge` would remove every version, the
    // checkpoint's too.
    output(rclone(&["delete", &gone]), "rclone delete").await?;
    let count = |listed: &str| listed.lines().filter(|l| l.ends_with(".txt")).count();
    let listed = output(
        rclone(&["lsf", "-R", "--files-only", &remote]),
        "rclone lsf",
    )
    .await?;
    assert_eq!(
        count(&listed),
        OBJECTS,
        "{} rewritten in place, {PER_PREFIX} gone, {PER_PREFIX} new",
        OBJECTS / 40
    );

    // The restore copies the changed keys forward to the checkpoint's versions.
    platform
        .call(
            "POST",
            &format!("/apps/{app}/env"),
            &kim,
            Some(json!({"key": "SVC_ALLOW_PROD_RESTORE", "value": "1"})),
        )
        .await?
        .expect(204);
    let started = Instant::now();
    let restored = platform
        .call_within(
            "POST",
            &format!("/apps/{app}/channels/{channel}/blob/restore"),
            &kim,
            json!({"confirm_channel_name": "prod", "snapshot_id": checkpoint_id}),
            RESTORE_WITHIN,
        )
        .await?;
    assert_eq!(restored.status, 200, "{}", restored.text());
    println!("restored in {:.0} s", started.elapsed().as_secs_f64());
    // rclone compares every key's MD5 (the listing's ETag) with the checkpoint's files, both ways: the same keys,
    // the same contents.
    let mut check = vec!["check", v1.to_str().unwrap(), remote.as_str()];
    check.extend(parallel);
    output(
        rclone(&check),
        "rclone check against the checkpoint's files",
    )
    .await?;

    // The checkpoint downloads as a tar.gz of every object as it was.
    let tarball = work.path().join("checkpoint.tar.gz");
    let started = Instant::now();
    let bytes = platform
        .download(
            &format!("/apps/{app}/channels/{channel}/blob/snapshots/{checkpoint_id}/download"),
            &kim,
            &tarball,
        )
        .await?;
    println!(
        "downloaded {bytes} bytes of tar.gz in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    let unpacked = work.path().join("unpacked");
    std::fs::create_dir_all(&unpacked)?;
    let mut tar = tokio::process::Command::new("tar");
    tar.arg("-xzf").arg(&tarball).arg("-C").arg(&unpacked);
    output(tar, "tar -xzf").await?;
    for n in 0..OBJECTS {
        let key = object_key(n);
        assert_eq!(
            std::fs::read(unpacked.join("o").join(&key)).ok(),
            std::fs::read(v1.join(&key)).ok(),
            "{key} in the download"
        );
    }
    assert!(!unpacked.join("o").join(object_key(OBJECTS)).exists());
    platform.delete_app(&kim, &app).await
}
