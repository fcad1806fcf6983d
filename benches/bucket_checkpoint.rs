//! Bucket checkpoints at production size: a channel's bucket of `SLIPWAY_BENCH_BUCKET_OBJECTS` objects (default
//! 50,000) holding `SLIPWAY_BENCH_BUCKET_GB` gigabytes (default 5) of incompressible bytes in the object-storage
//! backend (versitygw), reached through the platform's S3 gateway as the API reaches it. Each figure is printed
//! beside the plain S3 client's work against the backend in the same run, with the ratio:
//!
//! - the checkpoint (the version listing through the gateway and the marker's manifest written to the platform
//!   database) against a version listing of the backend bucket; no object is copied, so it grows with the number of
//!   keys and not with their bytes (the line prints both);
//! - the restore after a tenth of the keys were rewritten (a version listing in [`slipway_blob::restore::LISTINGS`]
//!   key ranges side by side, then a copy forward of each changed key, [`slipway_blob::restore::AT_ONCE`] at a time)
//!   against the same restore made directly on the backend with a plain client: its version listing, then the same
//!   copies with the same concurrency (the line also prints the copies alone);
//! - the download (the `tar.gz` the download route streams, read to the end) against reading every object directly,
//!   one at a time, in key order;
//! - this process's peak resident memory after each (the gateway and slipway's side run in it), which must not grow
//!   with the bucket's size.
//!
//! Needs Postgres (`make bench` starts it); the backend is started here. Prints one line per figure; it asserts
//! nothing about time.

use std::time::Instant;

use anyhow::{Context, Result, ensure};
use aws_sdk_s3::Client;
use aws_sdk_s3::primitives::ByteStream;
use futures::{StreamExt, TryStreamExt};
use slipway_backends::object_store::{self, Backend, S3Endpoint};
use slipway_blob::access::BlobAccess;
use slipway_blob::checkpoints::{self, Owner};
use slipway_blob::store::{self, NewStore};
use slipway_postgres::snapshots::{Kind, Occasion};
use slipway_store::env::crypto::Keyring;
use slipway_testkit::postgres::TestDatabase;
use slipway_testkit::s3::TestS3;

#[path = "common/rss.rs"]
mod rss;
use rss::peak_rss_mib;

const MB: f64 = 1_000_000.0;
/// Requests in flight while filling the bucket.
const AT_ONCE: usize = 16;

/// A number from the environment, or its default.
fn setting(name: &str, default: f64) -> Result<f64> {
    std::env::var(name)
        .map_or(Ok(default), |v| v.parse())
        .with_context(|| format!("{name} is a number"))
}

/// Key of object `n`: a hundred keys under each prefix, as a tenant's uploads land.
fn key(n: usize) -> String {
    format!("uploads/{:04}/{n:06}.bin", n / 100)
}

/// `size` bytes that deflate cannot shrink (media, archives), different for each `seed`.
fn incompressible(seed: usize, size: usize) -> bytes::Bytes {
    let mut state = (seed as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut out = Vec::with_capacity(size + 8);
    while out.len() < size {
        // xorshift64*
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        out.extend_from_slice(&state.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes());
    }
    out.truncate(size);
    out.into()
}

/// Writes `keys` (object numbers) with `size` bytes each through `client`, [`AT_ONCE`] at a time; `round` makes
/// the contents of a rewrite differ from the first write.
async fn write_all(
    client: &Client,
    bucket: &str,
    keys: impl Iterator<Item = usize>,
    size: usize,
    round: usize,
) -> Result<()> {
    futures::stream::iter(keys)
        .map(|n| {
            let body = incompressible(n * 7 + round, size);
            async move {
                client
                    .put_object()
                    .bucket(bucket)
                    .key(key(n))
                    .body(ByteStream::from(body))
                    .send()
                    .await
                    .with_context(|| format!("put {}", key(n)))
            }
        })
        .buffer_unordered(AT_ONCE)
        .try_for_each(|_| async { Ok(()) })
        .await
}

/// Every version and delete marker in `bucket`, listed directly with the backend's own paging.
async fn list_versions(client: &Client, bucket: &str) -> Result<usize> {
    let mut count = 0;
    let mut key_marker: Option<String> = None;
    let mut version_marker: Option<String> = None;
    loop {
        let page = client
            .list_object_versions()
            .bucket(bucket)
            .set_key_marker(key_marker.clone())
            .set_version_id_marker(version_marker.clone())
            .send()
            .await?;
        count += page.versions().len() + page.delete_markers().len();
        if !page.is_truncated().unwrap_or(false) {
            return Ok(count);
        }
        key_marker = page.next_key_marker().map(str::to_owned);
        version_marker = page.next_version_id_marker().map(str::to_owned);
    }
}

/// One figure beside the backend's, with the ratio of their speeds.
fn report(what: &str, slipway_s: f64, direct_s: f64, detail: &str) {
    println!(
        "bucket {what:<10} slipway {slipway_s:>7.1} s  backend {direct_s:>7.1} s  ratio {:.2}x  {detail}; peak RSS {:.0} MiB",
        direct_s / slipway_s,
        peak_rss_mib()
    );
}

#[tokio::main]
async fn main() -> Result<()> {
    let objects = setting("SLIPWAY_BENCH_BUCKET_OBJECTS", 50_000.0)? as usize;
    let object_size = (setting("SLIPWAY_BENCH_BUCKET_GB", 5.0)? * 1e9 / objects as f64) as usize;
    ensure!(objects > 0, "SLIPWAY_BENCH_BUCKET_OBJECTS is at least 1");
    let database = TestDatabase::create().await?;
    let db = slipway_store::db::connect(database.url()).await?;
    let backend_s3 = TestS3::start().await?;
    let root = S3Endpoint {
        url: backend_s3.url.clone(),
        access_key_id: backend_s3.access_key_id.clone(),
        secret_access_key: backend_s3.secret_access_key.clone(),
    };

    // One channel's store on the unlimited plan, its bucket made the way the operator makes it (versioned), and the
    // gateway in this process.
    slipway_store::db::users::create(&db, &"bench".parse()?, "pro").await?;
    let ring = Keyring::parse(&Keyring::generate_line("bench"))?;
    let owner = Owner {
        channel_id: uuid::Uuid::new_v4(),
        app_id: uuid::Uuid::new_v4(),
    };
    let row = store::ensure(
        &db,
        &ring,
        &NewStore {
            channel_id: owner.channel_id,
            app_id: owner.app_id,
            owner: "bench",
            virtual_bucket: "files-bench",
            backend_bucket: &format!("slipway-{}", owner.channel_id),
        },
    )
    .await?;
    Backend::new(&root)
        .ensure_bucket(&row.backend_bucket)
        .await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let access = BlobAccess {
        gateway_url: format!("http://{}", listener.local_addr()?),
    };
    let service = slipway_blob::serve::service(db.clone(), ring.clone(), &root);
    tokio::spawn(slipway_blob::serve::serve(
        service.s3,
        listener,
        std::future::pending(),
    ));
    let bucket = access.bucket(&ring, &row)?;
    let direct = object_store::client(&root, None);
    let raw = row.backend_bucket.as_str();

    // The bucket, written directly to the backend (the fill is not measured).
    let started = Instant::now();
    write_all(&direct, raw, 0..objects, object_size, 0).await?;
    let total = objects as f64 * object_size as f64;
    println!(
        "bucket: {objects} objects of {object_size} bytes, {:.0} MB, written in {:.0} s; peak RSS {:.0} MiB",
        total / MB,
        started.elapsed().as_secs_f64(),
        peak_rss_mib()
    );

    // Checkpoint: list through the gateway and record the manifest, against the backend's own listing.
    let started = Instant::now();
    let versions = list_versions(&direct, raw).await?;
    let direct_s = started.elapsed().as_secs_f64();
    let started = Instant::now();
    let listing = checkpoints::list_now(&bucket).await?;
    let occasion = Occasion {
        kind: Kind::PreDeploy,
        deploy_id: Some(uuid::Uuid::new_v4()),
        git_sha: None,
    };
    let marker = checkpoints::record(&db, owner, &occasion, &listing, None).await?;
    let slipway_s = started.elapsed().as_secs_f64();
    ensure!(
        marker.object_count == objects as i64,
        "the checkpoint holds {} objects of {objects}",
        marker.object_count
    );
    report(
        "checkpoint",
        slipway_s,
        direct_s,
        &format!(
            "{versions} versions listed, {:.1} µs per object, {:.3} s per GB",
            slipway_s * 1e6 / objects as f64,
            slipway_s / (total / 1e9)
        ),
    );

    // Restore: a tenth of the keys rewritten, then copied forward to the checkpoint.
    let changed: Vec<usize> = (0..objects).step_by(10).collect();
    write_all(&direct, raw, changed.iter().copied(), object_size, 1).await?;
    let manifest = checkpoints::manifest(&db, marker.id).await?;
    let progress = slipway_jobs::Progress::default();
    let started = Instant::now();
    let restored = slipway_blob::restore::restore(&bucket, &manifest, &progress)
        .await
        .map_err(|e| anyhow::anyhow!("restore: {e}"))?;
    let slipway_s = started.elapsed().as_secs_f64();
    ensure!(
        restored.copied == changed.len(),
        "the restore copied {} keys of {}",
        restored.copied,
        changed.len()
    );
    // The same copies directly: rewrite the keys again, and copy each checkpoint version forward on the backend.
    write_all(&direct, raw, changed.iter().copied(), object_size, 2).await?;
    let version_of: std::collections::HashMap<&str, &str> = manifest
        .iter()
        .map(|e| (e.key.as_str(), e.version_id.as_str()))
        .collect();
    let copies: Vec<(String, String)> = changed
        .iter()
        .map(|&n| {
            let key = key(n);
            let version = version_of[key.as_str()].to_owned();
            (key, version)
        })
        .collect();
    let started = Instant::now();
    list_versions(&direct, raw).await?;
    let listed_s = started.elapsed().as_secs_f64();
    futures::stream::iter(&copies)
        .map(|(key, version)| {
            direct
                .copy_object()
                .bucket(raw)
                .key(key)
                .copy_source(format!("{raw}/{key}?versionId={version}"))
                .send()
        })
        .buffer_unordered(slipway_blob::restore::AT_ONCE)
        .map_err(anyhow::Error::from)
        .try_for_each(|_| async { Ok(()) })
        .await?;
    let direct_s = started.elapsed().as_secs_f64();
    let copies_s = direct_s - listed_s;
    report(
        "restore",
        slipway_s,
        direct_s,
        &format!(
            "{} keys, {:.0} MB copied forward; the backend's listing {listed_s:.1} s and copies {copies_s:.1} s, \
             ratio to the copies alone {:.2}x",
            changed.len(),
            changed.len() as f64 * object_size as f64 / MB,
            copies_s / slipway_s
        ),
    );

    // Download: the route's tar.gz to the end, against every object read directly, one at a time.
    let started = Instant::now();
    let mut read = 0u64;
    for entry in &manifest {
        let object = direct
            .get_object()
            .bucket(raw)
            .key(&entry.key)
            .version_id(&entry.version_id)
            .send()
            .await?;
        let mut body = object.body;
        while let Some(chunk) = body.try_next().await? {
            read += chunk.len() as u64;
        }
    }
    let direct_s = started.elapsed().as_secs_f64();
    let started = Instant::now();
    let body = slipway_blob::tarball::tar_gz(bucket, db.clone(), marker.id, marker.snapshot_ts);
    let mut stream = body.into_data_stream();
    let mut sent = 0u64;
    while let Some(chunk) = stream.next().await {
        sent += chunk?.len() as u64;
    }
    let slipway_s = started.elapsed().as_secs_f64();
    report(
        "download",
        slipway_s,
        direct_s,
        &format!(
            "{:.0} MB of tar.gz for {:.0} MB of objects, {:.0} MB/s",
            sent as f64 / MB,
            read as f64 / MB,
            read as f64 / MB / slipway_s
        ),
    );
    Ok(())
}
