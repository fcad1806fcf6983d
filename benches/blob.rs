//! Object storage throughput through the platform's S3 gateway against the backend itself (versitygw, the same
//! instance, the same client library), and against nginx as a plain reverse proxy in front of the same backend in
//! the same run: PUT and GET of 1 MiB and 64 MiB objects in MiB/s (one at a time), and 1 KiB objects in requests per
//! second at a fixed concurrency, each figure the median of three timed rounds in which the sides take turns, with
//! the gateway's ratio to the backend and to nginx. The gateway runs with its real work per request: SigV4 with the
//! channel's key pair, the bucket mapping, and the quota's reservations, leases and counts in Postgres. nginx does
//! none of it (it passes the client's own signature through, with two workers as the gateway has two threads): its
//! ratio to the backend is what one more hop costs on this machine, the floor for any proxy. Needs Postgres (`make
//! bench` starts it) and nginx (hack/install-deps.sh); the backend is started here.
//!
//! Prints one line per figure; it asserts nothing about time.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use aws_sdk_s3::Client;
use aws_sdk_s3::primitives::ByteStream;
use slipway_backends::object_store::{self, Backend, S3Endpoint};
use slipway_blob::store::{self, NewStore};
use slipway_store::env::crypto::Keyring;
use slipway_testkit::postgres::TestDatabase;
use slipway_testkit::s3::TestS3;

#[path = "common/nginx.rs"]
mod nginx;
#[path = "common/rounds.rs"]
mod rounds;
use nginx::Nginx;
use rounds::median;

const MIB: usize = 1024 * 1024;
const SMALL: usize = 1024;
const CONCURRENCY: usize = 16;
/// How long each round of small requests runs.
const MEASURE: Duration = Duration::from_secs(5);
/// How long each round of 1 MiB or 64 MiB transfers runs.
const MEASURE_BULK: Duration = Duration::from_secs(2);
/// Rounds per side and figure.
const ROUNDS: usize = 3;

#[tokio::main]
async fn main() -> Result<()> {
    let database = TestDatabase::create().await?;
    let db = slipway_store::db::connect(database.url()).await?;
    let backend = TestS3::start().await?;
    let root = S3Endpoint {
        url: backend.url.clone(),
        access_key_id: backend.access_key_id.clone(),
        secret_access_key: backend.secret_access_key.clone(),
    };

    // One channel's store on an unlimited plan, its bucket made the way the operator makes it.
    slipway_store::db::users::create(&db, &"bench".parse()?, "pro").await?;
    let ring = Keyring::parse(&Keyring::generate_line("bench"))?;
    let channel = uuid::Uuid::new_v4();
    let row = store::ensure(
        &db,
        &ring,
        &NewStore {
            channel_id: channel,
            app_id: uuid::Uuid::new_v4(),
            owner: "bench",
            virtual_bucket: "files-bench",
            backend_bucket: &format!("slipway-{channel}"),
        },
    )
    .await?;
    Backend::new(&root)
        .ensure_bucket(&row.backend_bucket)
        .await?;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let gateway_url = format!("http://{}", listener.local_addr()?);
    let service = slipway_blob::serve::service(db.clone(), ring.clone(), &root);
    tokio::spawn(slipway_blob::serve::serve(
        service.s3,
        listener,
        std::future::pending(),
    ));
    let through = object_store::client(
        &S3Endpoint {
            url: gateway_url,
            access_key_id: row.access_key_id.clone(),
            secret_access_key: row.secret(&ring)?,
        },
        None,
    );
    let direct = object_store::client(&root, None);
    let nginx_dir = std::env::temp_dir().join(format!("slipway-bench-blob-{}", std::process::id()));
    let (_nginx, nginx_url) = start_nginx(&nginx_dir, &root.url).await?;
    let proxied = object_store::client(
        &S3Endpoint {
            url: nginx_url,
            ..root.clone()
        },
        None,
    );
    // The gateway, nginx, then the backend: a client and the name it knows the bucket by.
    let sides = [
        (&through, row.virtual_bucket.as_str()),
        (&proxied, row.backend_bucket.as_str()),
        (&direct, row.backend_bucket.as_str()),
    ];

    // Each side streams for [`MEASURE_BULK`] per round (a few dozen milliseconds of transfers said more about the
    // machine's moment than about either side).
    for size in [MIB, 64 * MIB] {
        let data = bytes::Bytes::from(vec![0x5a; size]);
        let [gateway, nginx, backend] = in_turns(sides, |(client, bucket)| {
            let data = data.clone();
            async move {
                Ok([
                    throughput(size, || put(client, bucket, "big", data.clone())).await?,
                    throughput(size, || get(client, bucket, "big")).await?,
                ])
            }
        })
        .await?;
        let label = format!("{} MiB", size / MIB);
        report(
            &format!("PUT {label}"),
            "MiB/s",
            [gateway[0], nginx[0], backend[0]],
        );
        report(
            &format!("GET {label}"),
            "MiB/s",
            [gateway[1], nginx[1], backend[1]],
        );
    }

    // Small requests the same way, at a fixed concurrency.
    let small = bytes::Bytes::from(vec![0x5a; SMALL]);
    let [gateway, nginx, backend] = in_turns(sides, |(client, bucket)| {
        let small = small.clone();
        async move {
            Ok([
                rate(client, bucket, Some(small)).await?,
                rate(client, bucket, None).await?,
            ])
        }
    })
    .await?;
    report("PUT 1 KiB", "req/s", [gateway[0], nginx[0], backend[0]]);
    report("GET 1 KiB", "req/s", [gateway[1], nginx[1], backend[1]]);
    Ok(())
}

/// A client and the bucket name it uses.
type Side<'a> = (&'a Client, &'a str);

/// Each side's PUT and GET figures (`[put, get]` per side, in the order of `sides`): the medians of [`ROUNDS`]
/// rounds in which the sides take turns, each round measured by `round`.
async fn in_turns<'a, F, Fut, const SIDES: usize>(
    sides: [Side<'a>; SIDES],
    mut round: F,
) -> Result<[[f64; 2]; SIDES]>
where
    F: FnMut(Side<'a>) -> Fut,
    Fut: Future<Output = Result<[f64; 2]>>,
{
    let mut figures = [(); SIDES].map(|_| [Vec::new(), Vec::new()]);
    for _ in 0..ROUNDS {
        for (of_side, side) in figures.iter_mut().zip(sides) {
            let [put, get] = round(side).await?;
            of_side[0].push(put);
            of_side[1].push(get);
        }
    }
    Ok(figures.map(|side| side.map(median)))
}

/// One figure of the three sides, with the gateway's and nginx's ratios to the backend and the gateway's to nginx.
fn report(what: &str, unit: &str, [gateway, nginx, backend]: [f64; 3]) {
    println!(
        "blob {what:<10} gateway {gateway:>8.1} {unit}  nginx {nginx:>8.1} {unit}  backend {backend:>8.1} {unit}  \
         ratio {:.2}x (nginx {:.2}x; gateway / nginx {:.2}x)",
        gateway / backend,
        nginx / backend,
        gateway / nginx
    );
}

/// nginx as a plain reverse proxy in front of the backend at `backend_url` (`http://host:port`), on a free port of
/// its own: kept-alive upstream connections, bodies streamed both ways through memory buffers (no temporary
/// files), the client's `Host` passed on so that its signature still holds. Answers it and its URL.
async fn start_nginx(dir: &std::path::Path, backend_url: &str) -> Result<(Nginx, String)> {
    let upstream = backend_url
        .strip_prefix("http://")
        .ok_or_else(|| anyhow::anyhow!("the backend is not plain HTTP: {backend_url}"))?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let d = dir.display();
    let conf = format!(
        r#"worker_processes 2;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  client_body_temp_path {d}/tmp/body; proxy_temp_path {d}/tmp/proxy; fastcgi_temp_path {d}/tmp/fastcgi;
  uwsgi_temp_path {d}/tmp/uwsgi; scgi_temp_path {d}/tmp/scgi;
  upstream backend {{ server {upstream}; keepalive 32; }}
  server {{
    listen 127.0.0.1:{port};
    keepalive_requests 1000000;
    client_max_body_size 0;
    proxy_http_version 1.1;
    proxy_set_header Connection "";
    proxy_set_header Host $http_host;
    proxy_request_buffering off;
    proxy_buffer_size 64k;
    proxy_buffers 16 64k;
    proxy_max_temp_file_size 0;
    location / {{ proxy_pass http://backend; }}
  }}
}}
"#
    );
    let address = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let nginx = Nginx::start(dir, &conf, &[], address).await?;
    Ok((nginx, format!("http://{address}")))
}

async fn put(client: &Client, bucket: &str, key: &str, data: bytes::Bytes) -> Result<()> {
    client
        .put_object()
        .bucket(bucket)
        .key(key)
        .body(ByteStream::from(data))
        .send()
        .await?;
    Ok(())
}

async fn get(client: &Client, bucket: &str, key: &str) -> Result<()> {
    let out = client.get_object().bucket(bucket).key(key).send().await?;
    out.body.collect().await?;
    Ok(())
}

/// MiB/s of sequential transfers of `size` bytes for [`MEASURE_BULK`] (after one warm-up transfer).
async fn throughput<F, Fut>(size: usize, mut one: F) -> Result<f64>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<()>>,
{
    one().await?;
    let started = Instant::now();
    let mut count = 0;
    while started.elapsed() < MEASURE_BULK {
        one().await?;
        count += 1;
    }
    Ok((count * size) as f64 / MIB as f64 / started.elapsed().as_secs_f64())
}

/// Requests per second of small PUTs (`data` given) or GETs, at [`CONCURRENCY`], for [`MEASURE`].
async fn rate(client: &Client, bucket: &str, data: Option<bytes::Bytes>) -> Result<f64> {
    // The objects the GETs read.
    for n in 0..CONCURRENCY {
        put(
            client,
            bucket,
            &format!("small/{n}"),
            bytes::Bytes::from_static(b"x"),
        )
        .await?;
    }
    let done = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let started = Instant::now();
    let mut workers = Vec::new();
    for n in 0..CONCURRENCY {
        let (client, bucket, data, done) = (
            client.clone(),
            bucket.to_owned(),
            data.clone(),
            done.clone(),
        );
        workers.push(tokio::spawn(async move {
            let key = format!("small/{n}");
            while started.elapsed() < MEASURE {
                match &data {
                    Some(data) => put(&client, &bucket, &key, data.clone()).await?,
                    None => get(&client, &bucket, &key).await?,
                }
                done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            anyhow::Ok(())
        }));
    }
    for worker in workers {
        worker.await??;
    }
    Ok(done.load(std::sync::atomic::Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64())
}
