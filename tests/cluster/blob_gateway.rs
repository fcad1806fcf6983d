//! The S3 gateway's own machinery against the real parts, without the API or a control plane: a Postgres database
//! and a versitygw backend of each test's own, a channel's store recorded as the API records it, and the gateway
//! in process. What is tested here is what makes the gateway cheap per request and must not make it wrong: the
//! lean forwarding of plain GETs, HEADs and PUTs, the access keys kept in memory (and forgotten as soon as the
//! database announces a change), writes whose count settles after their answer (and a write that never settles,
//! which must still count), and small writes that take their bytes from a quota lease instead of reserving each.

// Fixture helpers panic on a malformed response: in a test that is the failure to report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use anyhow::Result;
use aws_sdk_s3::presigning::PresigningConfig;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{Delete, ObjectIdentifier};
use slipway_backends::object_store::{self, Backend, S3Endpoint};
use slipway_blob::store::{self, NewStore, Store};
use slipway_blob::{keys, recount};
use slipway_store::env::crypto::Keyring;
use slipway_testkit::postgres::TestDatabase;
use slipway_testkit::s3::TestS3;
use sqlx::PgPool;
use uuid::Uuid;

use crate::support::blob::{Keys, boto3};
use crate::support::s3_calls::{failure, root};

/// How long a change may take to reach the gateway: a notification's trip, not a timer.
const ANNOUNCED_WITHIN: Duration = Duration::from_secs(5);
/// The starter plan's quota.
const STARTER: i64 = 268_435_456;

/// A gateway in front of a backend of its own, with one channel's store.
struct Gateway {
    _database: TestDatabase,
    db: PgPool,
    backend: TestS3,
    ring: Keyring,
    url: String,
    store: Store,
    metrics: slipway_blob::metrics::GatewayMetrics,
}

impl Gateway {
    /// A store owned by `owner` on `plan`, its bucket made, and the gateway serving it; returns once the gateway
    /// answers keys from memory (it listens to the database's announcements).
    async fn start(owner: &str, plan: &str) -> Result<Self> {
        let database = crate::support::migrated_database().await?;
        let db = slipway_store::db::connect(database.url()).await?;
        let backend = TestS3::start().await?;
        slipway_store::db::users::create(&db, &owner.parse()?, plan).await?;
        let ring = Keyring::parse(&Keyring::generate_line("k"))?;
        let channel = Uuid::new_v4();
        let store = store::ensure(
            &db,
            &ring,
            &NewStore {
                channel_id: channel,
                app_id: Uuid::new_v4(),
                owner,
                virtual_bucket: &format!("files-{owner}"),
                backend_bucket: &format!("slipway-{channel}"),
            },
        )
        .await?;
        let root = root(&backend);
        Backend::new(&root)
            .ensure_bucket(&store.backend_bucket)
            .await?;
        let service = slipway_blob::serve::service(db.clone(), ring.clone(), &root);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let metrics = service.s3.metrics().clone();
        tokio::spawn(slipway_blob::serve::serve(
            service.s3,
            listener,
            std::future::pending(),
        ));
        let tenants = service.tenants;
        slipway_testkit::wait_until(ANNOUNCED_WITHIN, || {
            let listening = tenants.is_listening();
            async move { Ok(listening) }
        })
        .await?;
        Ok(Self {
            _database: database,
            db,
            backend,
            ring,
            url,
            store,
            metrics,
        })
    }

    /// A client of the gateway signing with `secret` for the store's access key.
    fn client_with(&self, secret: &str) -> aws_sdk_s3::Client {
        object_store::client(
            &S3Endpoint {
                url: self.url.clone(),
                access_key_id: self.store.access_key_id.clone(),
                secret_access_key: secret.to_owned(),
            },
            None,
        )
    }

    /// A client of the gateway with the store's key pair.
    fn client(&self) -> aws_sdk_s3::Client {
        self.client_with(&self.store.secret(&self.ring).unwrap())
    }

    /// A client of the backend itself, with its root key pair.
    fn backend_client(&self) -> aws_sdk_s3::Client {
        object_store::client(&root(&self.backend), None)
    }

    fn bucket(&self) -> &str {
        &self.store.virtual_bucket
    }

    /// The store's usage as the API reports it: stored, and reserved by writes in flight (not leased).
    async fn counted(&self) -> i64 {
        store::counted_bytes(&self.db, self.store.channel_id)
            .await
            .unwrap()
    }

    /// What the quota holds for the store: its usage, every reservation and every lease.
    async fn held(&self) -> i64 {
        sqlx::query_scalar(
            "SELECT usage_bytes + coalesce((SELECT sum(bytes) FROM blob_pending WHERE channel_id = $1), 0)::bigint \
             FROM blob_stores WHERE channel_id = $1",
        )
        .bind(self.store.channel_id)
        .fetch_one(&self.db)
        .await
        .unwrap()
    }

    /// Waits until the usage the API reports is `bytes`.
    async fn usage_reaches(&self, bytes: i64) -> Result<()> {
        slipway_testkit::wait_until(ANNOUNCED_WITHIN, || async {
            Ok(self.counted().await == bytes)
        })
        .await
    }

    /// The store's settled usage and its open reservations and leases.
    async fn settled(&self) -> (i64, i64) {
        sqlx::query_as(
            "SELECT usage_bytes, (SELECT count(*) FROM blob_pending WHERE channel_id = $1) \
             FROM blob_stores WHERE channel_id = $1",
        )
        .bind(self.store.channel_id)
        .fetch_one(&self.db)
        .await
        .unwrap()
    }

    /// Waits until every write's reservation is settled into the usage and every lease has ended, and answers the
    /// usage.
    async fn all_settled(&self) -> Result<i64> {
        slipway_testkit::wait_until(ANNOUNCED_WITHIN, || async {
            Ok(self.settled().await.1 == 0)
        })
        .await?;
        Ok(self.settled().await.0)
    }

    async fn put(&self, key: &str, body: Vec<u8>) -> Result<(), (u16, String)> {
        self.client()
            .put_object()
            .bucket(self.bucket())
            .key(key)
            .body(ByteStream::from(body))
            .send()
            .await
            .map(|_| ())
            .map_err(|e| failure(&e))
    }
}

#[tokio::test]
async fn plain_gets_heads_and_puts_answer_as_s3_does_and_name_only_the_virtual_bucket() -> Result<()>
{
    let g = Gateway::start("lean", "basic").await?;
    let s3 = g.client();
    let bucket = g.bucket();
    let first = s3
        .put_object()
        .bucket(bucket)
        .key("dir/a b+ä.txt")
        .content_type("text/plain")
        .metadata("colour", "blue")
        .body(ByteStream::from_static(b"first"))
        .send()
        .await?;
    let v1 = first.version_id().expect("versioned").to_owned();
    s3.put_object()
        .bucket(bucket)
        .key("dir/a b+ä.txt")
        .body(ByteStream::from_static(b"second!"))
        .send()
        .await?;

    let head = s3
        .head_object()
        .bucket(bucket)
        .key("dir/a b+ä.txt")
        .version_id(&v1)
        .send()
        .await?;
    assert_eq!(head.content_length(), Some(5));
    assert_eq!(head.content_type(), Some("text/plain"));
    assert_eq!(
        head.metadata()
            .and_then(|m| m.get("colour"))
            .map(String::as_str),
        Some("blue")
    );
    let old = s3
        .get_object()
        .bucket(bucket)
        .key("dir/a b+ä.txt")
        .version_id(&v1)
        .send()
        .await?;
    assert_eq!(old.body.collect().await?.into_bytes().as_ref(), b"first");
    let latest = s3
        .get_object()
        .bucket(bucket)
        .key("dir/a b+ä.txt")
        .range("bytes=1-3")
        .send()
        .await?;
    assert_eq!(latest.content_range(), Some("bytes 1-3/7"));
    let etag = latest.e_tag().unwrap().to_owned();
    assert_eq!(latest.body.collect().await?.into_bytes().as_ref(), b"eco");

    // Conditional reads pass the backend's answer on.
    let err = s3
        .get_object()
        .bucket(bucket)
        .key("dir/a b+ä.txt")
        .if_none_match(&etag)
        .send()
        .await
        .unwrap_err();
    assert_eq!(failure(&err).0, 304);

    // The backend's errors keep their status and code; a HEAD's has no body.
    let err = s3
        .get_object()
        .bucket(bucket)
        .key("missing")
        .send()
        .await
        .unwrap_err();
    assert_eq!(failure(&err), (404, "NoSuchKey".into()));
    let err = s3
        .head_object()
        .bucket(bucket)
        .key("missing")
        .send()
        .await
        .unwrap_err();
    assert_eq!(failure(&err).0, 404);
    // A body that does not match its Content-MD5 is refused by the backend and stores nothing, counts nothing.
    let before = g.all_settled().await?;
    let err = s3
        .put_object()
        .bucket(bucket)
        .key("digest.txt")
        .content_md5("1B2M2Y8AsgTpgAmY7PhCfg==")
        .body(ByteStream::from_static(b"not empty"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(failure(&err).0, 400, "{:?}", failure(&err));
    assert_eq!(g.all_settled().await?, before);

    // Another bucket is no bucket at all, on reads and writes alike.
    for other in ["other", "slipway-data", g.store.backend_bucket.as_str()] {
        let err = s3
            .get_object()
            .bucket(other)
            .key("x")
            .send()
            .await
            .unwrap_err();
        assert_eq!(failure(&err), (404, "NoSuchBucket".into()), "{other}");
        let err = s3
            .put_object()
            .bucket(other)
            .key("x")
            .body(ByteStream::from_static(b"x"))
            .send()
            .await
            .unwrap_err();
        assert_eq!(failure(&err), (404, "NoSuchBucket".into()), "{other}");
    }

    // Presigned reads and writes, and what a plain HTTP client sees: nothing names the backend's bucket.
    let presigned_put = s3
        .put_object()
        .bucket(bucket)
        .key("presigned.txt")
        .presigned(PresigningConfig::expires_in(Duration::from_secs(300))?)
        .await?;
    let http = http();
    let res = http.put(presigned_put.uri()).body("by url").send().await?;
    assert_eq!(res.status(), 200);
    let presigned_get = s3
        .get_object()
        .bucket(bucket)
        .key("presigned.txt")
        .presigned(PresigningConfig::expires_in(Duration::from_secs(300))?)
        .await?;
    let res = http.get(presigned_get.uri()).send().await?;
    assert_eq!(res.status(), 200);
    let headers = format!("{:?}", res.headers());
    assert_eq!(res.text().await?, "by url");
    let missing = presigned_get.uri().replace("presigned.txt", "gone.txt");
    let res = http.get(missing).send().await?;
    assert_eq!(res.status(), 403, "the signature names one object");
    let unsigned = http
        .get(format!("{}/{bucket}/presigned.txt", g.url))
        .send()
        .await?;
    assert_eq!(unsigned.status(), 403);
    let unsigned = unsigned.text().await?;
    assert!(unsigned.contains("<Code>AccessDenied</Code>"), "{unsigned}");
    for answer in [&headers, &unsigned] {
        assert!(!answer.contains(&g.store.backend_bucket), "{answer}");
    }

    // Every version counts: 5 + 7 + 6 bytes.
    assert_eq!(g.all_settled().await?, 18);

    // Counted by operation and status, the refused reads too; no series names a bucket or a key.
    let mut registry = prometheus_client::registry::Registry::default();
    g.metrics.register(&mut registry);
    let mut metrics = String::new();
    prometheus_client::encoding::text::encode(&mut metrics, &registry)?;
    for series in [
        r#"slipway_s3_requests_total{operation="PutObject",status="200"}"#,
        r#"slipway_s3_requests_total{operation="HeadObject",status="200"}"#,
        r#"slipway_s3_requests_total{operation="GetObject",status="200"}"#,
        r#"slipway_s3_requests_total{operation="GetObject",status="403"}"#,
        r#"slipway_s3_bytes_total{operation="PutObject",direction="in"}"#,
        r#"slipway_s3_bytes_total{operation="GetObject",direction="out"}"#,
    ] {
        assert!(
            metrics.contains(series),
            "{series} missing from:\n{metrics}"
        );
    }
    assert!(!metrics.contains(bucket), "{metrics}");
    Ok(())
}

#[tokio::test]
async fn writes_are_held_against_the_quota_at_once_and_settle_into_the_usage_after_their_answers()
-> Result<()> {
    let g = Gateway::start("settle", "basic").await?;
    g.put("one.bin", vec![1; 1000]).await.unwrap();
    g.usage_reaches(1000).await?;

    // A burst: all of the writes settle, and the usage never shows more than was stored (a lease's slack is not
    // usage).
    let writes = (0..40).map(|n| {
        let g = &g;
        async move { g.put(&format!("burst/{n}"), vec![2; 100 + n]).await }
    });
    for written in futures::future::join_all(writes).await {
        written.unwrap();
    }
    let burst: i64 = (0..40).map(|n| 100 + n).sum();
    assert!(g.counted().await <= 1000 + burst);
    assert_eq!(g.all_settled().await?, 1000 + burst);

    // A large write reserves its own bytes and is counted in the usage as soon as it answered.
    let large = 1024 * 1024;
    g.put("large.bin", vec![3; large]).await.unwrap();
    let large = i64::try_from(large)?;
    assert_eq!(g.counted().await, 1000 + burst + large);

    // A copy stores another version and settles the same way; a version deleted for good frees its bytes at once.
    let s3 = g.client();
    let copied = s3
        .copy_object()
        .bucket(g.bucket())
        .key("copy.bin")
        .copy_source(format!("{}/one.bin", g.bucket()))
        .send()
        .await?;
    g.usage_reaches(2000 + burst + large).await?;
    s3.delete_object()
        .bucket(g.bucket())
        .key("copy.bin")
        .version_id(copied.version_id().unwrap())
        .send()
        .await?;
    assert_eq!(g.counted().await, 1000 + burst + large);
    assert_eq!(g.all_settled().await?, 1000 + burst + large);
    Ok(())
}

#[tokio::test]
async fn small_writes_take_from_one_lease_that_never_holds_much_of_the_quota() -> Result<()> {
    let g = Gateway::start("leases", "starter").await?;
    let mib = 1024 * 1024;
    let stored = STARTER - 160 * mib;
    sqlx::query("UPDATE blob_stores SET usage_bytes = $2 WHERE channel_id = $1")
        .bind(g.store.channel_id)
        .bind(stored)
        .execute(&g.db)
        .await?;
    // Count what the gateway asks of the database: per-write reservations and leases.
    for statement in [
        "CREATE TABLE asked (what text NOT NULL)",
        "ALTER FUNCTION blob_reserve(uuid, uuid, bigint, bigint, interval) RENAME TO blob_reserve_asked",
        "CREATE FUNCTION blob_reserve(a uuid, b uuid, c bigint, d bigint, e interval) RETURNS text \
         LANGUAGE sql AS $$ INSERT INTO asked VALUES ('reserve'); SELECT blob_reserve_asked(a, b, c, d, e) $$",
        "ALTER FUNCTION blob_lease(uuid, uuid, bigint, bigint, bigint, interval) RENAME TO blob_lease_asked",
        "CREATE FUNCTION blob_lease(a uuid, b uuid, c bigint, d bigint, e bigint, f interval) RETURNS bigint \
         LANGUAGE sql AS $$ INSERT INTO asked VALUES ('lease'); SELECT blob_lease_asked(a, b, c, d, e, f) $$",
    ] {
        sqlx::query(statement).execute(&g.db).await?;
    }
    let asked = |what: &'static str| {
        let db = g.db.clone();
        async move {
            sqlx::query_scalar::<_, i64>("SELECT count(*) FROM asked WHERE what = $1")
                .bind(what)
                .fetch_one(&db)
                .await
                .unwrap()
        }
    };

    // A burst of small writes takes no reservation, and a lease serves many of them. The lease is an eighth of what
    // was left (20 MiB) at most, capped at 16 MiB; it holds quota, and is not usage.
    let writes = (0..40).map(|n| {
        let g = &g;
        async move { g.put(&format!("small/{n}"), vec![1; 1000 + n]).await }
    });
    for written in futures::future::join_all(writes).await {
        written.unwrap();
    }
    let burst: i64 = (0..40).map(|n| 1000 + n).sum();
    assert_eq!(asked("reserve").await, 0);
    let leases = asked("lease").await;
    assert!((1..10).contains(&leases), "{leases} leases for 40 writes");
    let held = g.held().await;
    assert!(
        held >= stored + burst && held <= stored + 16 * mib,
        "{held}"
    );
    assert!(g.counted().await <= stored + burst);
    g.usage_reaches(stored + burst).await?;

    // A write past the small size reserves its own bytes.
    g.put("large.bin", vec![2; 512 * 1024]).await.unwrap();
    assert_eq!(asked("reserve").await, 1);
    let large = 512 * 1024;

    // Idle, the lease ends: only what was stored is held.
    assert_eq!(g.all_settled().await?, stored + burst + large);
    assert_eq!(g.held().await, stored + burst + large);

    // Near the quota an eighth of what is left is too little for a lease: each write reserves exactly its bytes,
    // so the last byte of the quota can be written and the next one is refused.
    let left = 4 * mib;
    sqlx::query("UPDATE blob_stores SET usage_bytes = $2 WHERE channel_id = $1")
        .bind(g.store.channel_id)
        .bind(STARTER - left)
        .execute(&g.db)
        .await?;
    g.put("almost.bin", vec![3; usize::try_from(left)? - 1000])
        .await
        .unwrap();
    g.put("last.bin", vec![4; 1000]).await.unwrap();
    assert_eq!(
        g.put("over.bin", vec![5; 1]).await.unwrap_err(),
        (507, "QuotaExceeded".into())
    );
    assert_eq!(
        (asked("lease").await, asked("reserve").await),
        (leases + 2, 4)
    );
    assert_eq!(g.all_settled().await?, STARTER);
    Ok(())
}

#[tokio::test]
async fn a_lease_report_applied_twice_counts_once() -> Result<()> {
    let g = Gateway::start("reports", "starter").await?;
    let channel = g.store.channel_id;
    let lease = Uuid::new_v4();
    let mib = 1024 * 1024;
    let granted = store::lease(&g.db, lease, channel, 16 * mib, mib, STARTER).await?;
    assert_eq!(granted, store::Leased::Granted(16 * mib));
    assert_eq!((g.counted().await, g.held().await), (0, 16 * mib));

    // Running totals: the same report again (a retry after a lost commit) and an older one move nothing more.
    let report = |bytes| store::Settled {
        id: lease,
        channel_id: channel,
        bytes,
    };
    store::settle_leases(&g.db, &[report(700)], &[]).await?;
    store::settle_leases(&g.db, &[report(700)], &[]).await?;
    store::settle_leases(&g.db, &[report(300), report(1000)], &[]).await?;
    store::settle_leases(&g.db, &[report(900)], &[]).await?;
    assert_eq!((g.counted().await, g.held().await), (1000, 16 * mib));

    // A report for another channel moves nothing; ending the lease frees what no write took.
    let elsewhere = store::Settled {
        channel_id: Uuid::new_v4(),
        ..report(5000)
    };
    store::settle_leases(&g.db, &[elsewhere], &[lease]).await?;
    assert_eq!((g.counted().await, g.held().await), (1000, 1000));
    assert_eq!(g.settled().await, (1000, 0));
    Ok(())
}

#[tokio::test]
async fn a_write_whose_client_goes_away_is_never_left_uncounted() -> Result<()> {
    let g = Gateway::start("gone", "basic").await?;
    let presigned = g
        .client()
        .put_object()
        .bucket(g.bucket())
        .key("abandoned.bin")
        .presigned(PresigningConfig::expires_in(Duration::from_secs(300))?)
        .await?;
    let url: reqwest::Url = presigned.uri().parse()?;
    let target = &presigned.uri()[presigned.uri().find(url.path()).unwrap()..];
    let body = vec![7u8; 100_000];
    for _ in 0..5 {
        // The whole request, then the connection closed before the answer.
        let mut conn =
            tokio::net::TcpStream::connect((url.host_str().unwrap(), url.port().unwrap())).await?;
        let head = format!(
            "PUT {target} HTTP/1.1\r\nHost: {}\r\nContent-Length: {}\r\n\r\n",
            url.authority(),
            body.len()
        );
        tokio::io::AsyncWriteExt::write_all(&mut conn, head.as_bytes()).await?;
        tokio::io::AsyncWriteExt::write_all(&mut conn, &body).await?;
        drop(conn);
    }
    g.put("answered.bin", vec![1; 10]).await.unwrap();

    // Whatever the backend kept of the abandoned writes is counted.
    let usage = g.all_settled().await?;
    let listed: i64 = g
        .backend_client()
        .list_object_versions()
        .bucket(&g.store.backend_bucket)
        .send()
        .await?
        .versions()
        .iter()
        .filter_map(|v| v.size())
        .sum();
    assert!(listed >= 10, "{listed}");
    assert!(usage >= listed, "usage {usage} < stored {listed}");
    Ok(())
}

#[tokio::test]
async fn a_write_that_never_settles_counts_until_a_recount_replaces_it() -> Result<()> {
    let g = Gateway::start("crash", "starter").await?;
    // The owner's other channel holds nearly all the rest of the quota.
    let other = Uuid::new_v4();
    store::ensure(
        &g.db,
        &g.ring,
        &NewStore {
            channel_id: other,
            app_id: Uuid::new_v4(),
            owner: "crash",
            virtual_bucket: "next-crash",
            backend_bucket: &format!("slipway-{other}"),
        },
    )
    .await?;
    let mib = 1024 * 1024;
    sqlx::query("UPDATE blob_stores SET usage_bytes = $2 WHERE channel_id = $1")
        .bind(other)
        .bind(STARTER - mib - 2048)
        .execute(&g.db)
        .await?;
    g.put("kept.txt", vec![1; 1024]).await.unwrap();
    g.all_settled().await?;

    // A gateway stops between reserving a write and counting it, after the backend stored it: what is left is the
    // reservation and the object.
    let lost = Uuid::new_v4();
    let reserved = store::reserve(&g.db, lost, g.store.channel_id, mib, STARTER).await?;
    assert_eq!(reserved, store::Reserved::Ok);
    g.backend_client()
        .put_object()
        .bucket(&g.store.backend_bucket)
        .key("lost.bin")
        .body(ByteStream::from(vec![2; usize::try_from(mib)?]))
        .send()
        .await?;

    // The reservation counts: 1 KiB more would pass the quota by a byte.
    assert_eq!(g.counted().await, 1024 + mib);
    assert_eq!(
        g.put("over.txt", vec![3; 1025]).await.unwrap_err(),
        (507, "QuotaExceeded".into())
    );
    // It keeps counting once it has expired...
    sqlx::query("UPDATE blob_pending SET expires_at = now() - interval '1 second' WHERE id = $1")
        .bind(lost)
        .execute(&g.db)
        .await?;
    assert_eq!(
        g.put("over.txt", vec![3; 1025]).await.unwrap_err(),
        (507, "QuotaExceeded".into())
    );
    assert_eq!(g.counted().await, 1024 + mib);

    // ...until a recount, due at once for a store holding an expired reservation however recently it was
    // recounted, replaces it with what the backend holds.
    sqlx::query("UPDATE blob_stores SET recounted_at = now() WHERE channel_id = $1")
        .bind(g.store.channel_id)
        .execute(&g.db)
        .await?;
    let due = store::due_for_recount(&g.db, Duration::from_secs(3600)).await?;
    let due: Vec<&Store> = due
        .iter()
        .filter(|s| s.channel_id == g.store.channel_id)
        .collect();
    assert_eq!(due.len(), 1, "the store is due for a recount");
    assert!(recount::recount(&g.db, &g.backend_client(), due[0]).await?);
    assert_eq!(g.settled().await, (1024 + mib, 0));
    assert_eq!(g.counted().await, 1024 + mib);
    assert_eq!(
        g.put("over.txt", vec![3; 1025]).await.unwrap_err(),
        (507, "QuotaExceeded".into())
    );
    g.put("last.txt", vec![3; 1024]).await.unwrap();
    let (owner_bytes, _) = store::owner_usage(&g.db, "crash").await?;
    assert_eq!(
        owner_bytes, STARTER,
        "exactly the quota, every stored byte counted"
    );
    Ok(())
}

#[tokio::test]
async fn keys_are_served_from_memory_until_the_database_announces_a_change() -> Result<()> {
    let g = Gateway::start("keys", "basic").await?;
    let old_secret = g.store.secret(&g.ring)?;
    g.put("a.txt", b"a".to_vec()).await.unwrap();
    let reseal = |secret: &str| {
        g.ring
            .seal(
                secret.as_bytes(),
                &keys::aad(g.store.channel_id, &g.store.access_key_id),
            )
            .unwrap()
    };
    let replace_secret = |secret: String| {
        let sealed = reseal(&secret);
        let db = g.db.clone();
        let channel = g.store.channel_id;
        async move {
            sqlx::query(
                "UPDATE blob_stores SET key_id = $2, sealed_secret = $3 WHERE channel_id = $1",
            )
            .bind(channel)
            .bind(&sealed.key_id)
            .bind(&sealed.bytes)
            .execute(&db)
            .await
            .unwrap();
        }
    };
    let lists = |secret: String| {
        let client = g.client_with(&secret);
        let bucket = g.bucket().to_owned();
        async move {
            client
                .list_objects_v2()
                .bucket(bucket)
                .send()
                .await
                .map(|_| ())
                .map_err(|e| failure(&e))
        }
    };

    // Silenced, a replaced secret goes unseen: the key is answered from memory.
    sqlx::query("ALTER TABLE blob_stores DISABLE TRIGGER blob_stores_keys_updated")
        .execute(&g.db)
        .await?;
    let new_secret = "N".repeat(40);
    replace_secret(new_secret.clone()).await;
    lists(old_secret.clone()).await.unwrap();
    sqlx::query("ALTER TABLE blob_stores ENABLE TRIGGER blob_stores_keys_updated")
        .execute(&g.db)
        .await?;

    // Announced, it takes effect at once: the old secret is refused, the new one works.
    replace_secret(new_secret.clone()).await;
    slipway_testkit::wait_until(ANNOUNCED_WITHIN, || {
        let attempt = lists(old_secret.clone());
        async move { Ok(attempt.await == Err((403, "SignatureDoesNotMatch".into()))) }
    })
    .await?;
    lists(new_secret.clone()).await.unwrap();

    // A deleted store's key stops at once, on the lean path as on the others.
    store::delete(&g.db, g.store.channel_id).await?;
    slipway_testkit::wait_until(ANNOUNCED_WITHIN, || {
        let attempt = lists(new_secret.clone());
        async move { Ok(attempt.await == Err((403, "InvalidAccessKeyId".into()))) }
    })
    .await?;
    let err = g
        .client_with(&new_secret)
        .get_object()
        .bucket(g.bucket())
        .key("a.txt")
        .send()
        .await
        .unwrap_err();
    assert_eq!(failure(&err), (403, "InvalidAccessKeyId".into()));
    Ok(())
}

#[tokio::test]
async fn a_plan_change_applies_to_the_quota_at_once() -> Result<()> {
    let g = Gateway::start("plans", "pro").await?;
    sqlx::query("UPDATE blob_stores SET usage_bytes = $2 WHERE channel_id = $1")
        .bind(g.store.channel_id)
        .bind(STARTER)
        .execute(&g.db)
        .await?;
    g.put("unlimited.txt", b"x".to_vec()).await.unwrap();
    slipway_store::db::users::set_plan(&g.db, &"plans".parse()?, "starter").await?;
    slipway_testkit::wait_until(ANNOUNCED_WITHIN, || async {
        Ok(g.put("limited.txt", b"y".to_vec()).await == Err((507, "QuotaExceeded".into())))
    })
    .await?;
    Ok(())
}

/// A plain HTTP client for presigned URLs.
fn http() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

/// The `<RequestId>` of an error document.
fn body_request_id(document: &str) -> Option<&str> {
    let (_, rest) = document.split_once("<RequestId>")?;
    Some(rest.split_once("</RequestId>")?.0)
}

#[tokio::test]
async fn every_error_names_the_request_id_its_header_gives() -> Result<()> {
    let g = Gateway::start("reqid", "basic").await?;
    let s3 = g.client();
    let presign = PresigningConfig::expires_in(Duration::from_secs(300))?;
    // A missing key on the lean path, the same through the SDK (a response override), another bucket (the
    // gateway's own answer) and a bad signature (s3s's): each answer's body names the id its header gives.
    let lean = s3
        .get_object()
        .bucket(g.bucket())
        .key("missing")
        .presigned(presign.clone())
        .await?;
    let through_sdk = s3
        .get_object()
        .bucket(g.bucket())
        .key("missing")
        .response_content_type("text/plain")
        .presigned(presign.clone())
        .await?;
    let other_bucket = s3
        .get_object()
        .bucket("other")
        .key("x")
        .presigned(presign.clone())
        .await?;
    let (signed, signature) = lean.uri().split_once("X-Amz-Signature=").unwrap();
    let flipped = if signature.starts_with('0') { '1' } else { '0' };
    let forged = format!("{signed}X-Amz-Signature={flipped}{}", &signature[1..]);
    let mut ids = Vec::new();
    for (url, code) in [
        (lean.uri(), "NoSuchKey"),
        (through_sdk.uri(), "NoSuchKey"),
        (other_bucket.uri(), "NoSuchBucket"),
        (forged.as_str(), "SignatureDoesNotMatch"),
    ] {
        let res = http().get(url).send().await?;
        let header = res
            .headers()
            .get("x-amz-request-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = res.text().await?;
        assert!(body.contains(&format!("<Code>{code}</Code>")), "{body}");
        assert_eq!(body.matches("<RequestId>").count(), 1, "{body}");
        let header = header.unwrap_or_else(|| panic!("no x-amz-request-id header: {body}"));
        assert_eq!(body_request_id(&body), Some(header.as_str()), "{body}");
        ids.push(header);
    }
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 4, "one id per request: {ids:?}");

    // A success carries one too, and the SDK reads it.
    let put = s3
        .put_object()
        .bucket(g.bucket())
        .key("k")
        .body(ByteStream::from_static(b"k"))
        .send()
        .await?;
    use aws_sdk_s3::operation::RequestId;
    assert_eq!(put.request_id().map(str::len), Some(16));
    Ok(())
}

#[tokio::test]
async fn a_presigned_url_valid_for_over_a_week_is_refused_as_s3_does() -> Result<()> {
    let g = Gateway::start("week", "basic").await?;
    let s3 = g.client();
    g.put("k", b"body".to_vec()).await.unwrap();
    // The SDK presigns a week at most; a longer URL is one edited afterwards, refused before its signature is
    // checked.
    let week = s3
        .get_object()
        .bucket(g.bucket())
        .key("k")
        .presigned(PresigningConfig::expires_in(Duration::from_secs(604_800))?)
        .await?;
    let res = http().get(week.uri()).send().await?;
    assert_eq!(res.status(), 200);
    for method in [reqwest::Method::GET, reqwest::Method::PUT] {
        let longer = week
            .uri()
            .replace("X-Amz-Expires=604800", "X-Amz-Expires=604801");
        let res = http().request(method, longer).send().await?;
        assert_eq!(res.status(), 400);
        let body = res.text().await?;
        assert!(
            body.contains("<Code>AuthorizationQueryParametersError</Code>")
                && body.contains("604800"),
            "{body}"
        );
    }
    let got = s3.get_object().bucket(g.bucket()).key("k").send().await?;
    assert_eq!(got.body.collect().await?.into_bytes().as_ref(), b"body");
    Ok(())
}

#[tokio::test]
async fn object_attributes_answer_as_s3_does() -> Result<()> {
    use aws_sdk_s3::types::ObjectAttributes;
    let g = Gateway::start("attrs", "basic").await?;
    let s3 = g.client();
    let first = s3
        .put_object()
        .bucket(g.bucket())
        .key("k")
        .body(ByteStream::from_static(b"first"))
        .send()
        .await?;
    g.put("k", b"second!".to_vec()).await.unwrap();
    let attributes = |version: Option<&str>| {
        s3.get_object_attributes()
            .bucket(g.bucket())
            .key("k")
            .set_version_id(version.map(str::to_owned))
            .object_attributes(ObjectAttributes::Etag)
            .object_attributes(ObjectAttributes::ObjectSize)
            .send()
    };
    let latest = attributes(None).await?;
    assert_eq!(latest.object_size(), Some(7));
    let old = attributes(first.version_id()).await?;
    assert_eq!(old.object_size(), Some(5));
    assert_eq!(
        old.e_tag().map(|e| e.trim_matches('"')),
        first.e_tag().map(|e| e.trim_matches('"'))
    );
    assert_eq!(old.version_id(), first.version_id());
    let err = s3
        .get_object_attributes()
        .bucket("other")
        .key("k")
        .object_attributes(ObjectAttributes::ObjectSize)
        .send()
        .await
        .unwrap_err();
    assert_eq!(failure(&err), (404, "NoSuchBucket".into()));
    Ok(())
}

#[tokio::test]
async fn listings_name_the_prefix_marker_and_token_asked_for_even_empty_ones() -> Result<()> {
    let g = Gateway::start("listing", "basic").await?;
    g.put("a", b"a".to_vec()).await.unwrap();
    let s3 = g.client();
    // S3 always names the prefix (and, in version 1, the marker) it listed from.
    let unasked = s3.list_objects().bucket(g.bucket()).send().await?;
    let empty = s3
        .list_objects()
        .bucket(g.bucket())
        .prefix("")
        .marker("")
        .send()
        .await?;
    for v1 in [&unasked, &empty] {
        assert_eq!((v1.prefix(), v1.marker()), (Some(""), Some("")));
        assert_eq!(v1.name(), Some(g.bucket()));
        assert_eq!(v1.contents().len(), 1);
    }
    let asked = s3
        .list_objects()
        .bucket(g.bucket())
        .prefix("a")
        .send()
        .await?;
    assert_eq!(asked.prefix(), Some("a"));
    // Version 2 names the prefix too, and the continuation token a client sent, even an empty one.
    let unasked = s3.list_objects_v2().bucket(g.bucket()).send().await?;
    assert_eq!(unasked.prefix(), Some(""));
    assert_eq!(unasked.continuation_token(), None);
    let empty = s3
        .list_objects_v2()
        .bucket(g.bucket())
        .continuation_token("")
        .send()
        .await?;
    assert_eq!(empty.continuation_token(), Some(""));
    assert_eq!(empty.contents().len(), 1);
    Ok(())
}

#[tokio::test]
async fn a_key_of_only_whitespace_is_kept_and_its_versions_deleted_by_id() -> Result<()> {
    let g = Gateway::start("space", "basic").await?;
    // The AWS SDK for Rust refuses such a key itself (as the gateway's SDK path did); boto3 sends it.
    let keys = Keys {
        access_key_id: g.store.access_key_id.clone(),
        secret_access_key: g.store.secret(&g.ring)?,
        bucket: g.bucket().to_owned(),
    };
    let py = |args: &'static [&'static str]| boto3(args, &g.url, None, &keys);
    let answered = |line: String| line.strip_prefix("ok ").map(str::to_owned).expect(&line);
    let first = answered(py(&["put-version", " ", "first"]).await?);
    let second = answered(py(&["put-version", " ", "second!"]).await?);
    assert_eq!(g.all_settled().await?, 12);
    // Deleting a version of it by id frees that version's bytes before the answer.
    let deleted = boto3(&["delete-version", " ", &first], &g.url, None, &keys).await?;
    assert_eq!(deleted, format!("ok {first}"));
    assert_eq!(g.counted().await, 7);
    let listed: Vec<(String, String)> =
        serde_json::from_str(&answered(py(&["versions", ""]).await?))?;
    assert_eq!(listed, [(" ".to_owned(), second.clone())]);
    // Without a version a delete adds a marker and frees nothing.
    assert_eq!(py(&["delete", " "]).await?, "ok");
    assert_eq!(py(&["read", " "]).await?, "error 404 NoSuchKey");
    assert_eq!(g.all_settled().await?, 7);
    Ok(())
}

#[tokio::test]
async fn deletes_of_the_same_versions_at_once_free_their_bytes_once_and_leave_nothing_behind()
-> Result<()> {
    let g = Gateway::start("racing", "basic").await?;
    g.put("kept", b"kept!!!".to_vec()).await.unwrap();
    for _ in 0..3 {
        for n in 0..5 {
            g.put(&format!("key_{n}"), vec![b'x'; 10]).await.unwrap();
        }
        g.put("single", vec![b'y'; 10]).await.unwrap();
    }
    assert_eq!(g.all_settled().await?, 7 + 15 * 10 + 3 * 10);
    let listed = g
        .client()
        .list_object_versions()
        .bucket(g.bucket())
        .send()
        .await?;
    let versions: Vec<(String, String)> = listed
        .versions()
        .iter()
        .map(|v| {
            (
                v.key().unwrap().to_owned(),
                v.version_id().unwrap().to_owned(),
            )
        })
        .collect();
    let mut batch = Delete::builder();
    for (key, version) in versions.iter().filter(|(key, _)| key.starts_with("key_")) {
        batch = batch.objects(
            ObjectIdentifier::builder()
                .key(key)
                .version_id(version)
                .build()?,
        );
    }
    let batch = batch.build()?;

    // Five requests delete the same fifteen versions at once (DeleteObjects, through the SDK path), and beside them
    // five more delete each version of `single` by itself (DELETE ?versionId, the lean path).
    let mut batches = tokio::task::JoinSet::new();
    let mut singles = tokio::task::JoinSet::new();
    for _ in 0..5 {
        let (client, bucket, batch) = (g.client(), g.bucket().to_owned(), batch.clone());
        batches.spawn(async move {
            let out = client
                .delete_objects()
                .bucket(bucket)
                .delete(batch)
                .send()
                .await?;
            anyhow::Ok((out.deleted().len(), out.errors().len()))
        });
        for (key, version) in versions.iter().filter(|(key, _)| key == "single") {
            let (client, bucket) = (g.client(), g.bucket().to_owned());
            let (key, version) = (key.clone(), version.clone());
            singles.spawn(async move {
                client
                    .delete_object()
                    .bucket(bucket)
                    .key(key)
                    .version_id(version)
                    .send()
                    .await
            });
        }
    }
    for answer in batches.join_all().await {
        assert_eq!(
            answer?,
            (15, 0),
            "each request deletes every version it names"
        );
    }
    for answer in singles.join_all().await {
        answer?;
    }

    // Only `kept` is left on the backend: no object, version or marker of the deleted keys.
    let backend = g
        .backend_client()
        .list_object_versions()
        .bucket(&g.store.backend_bucket)
        .send()
        .await?;
    let left: Vec<&str> = backend.versions().iter().filter_map(|v| v.key()).collect();
    assert_eq!(left, ["kept"]);
    assert!(
        backend.delete_markers().is_empty(),
        "{:?}",
        backend.delete_markers()
    );
    // Every deleted version's bytes were freed once: the usage is what is still stored.
    assert_eq!(g.all_settled().await?, 7);
    let listed = g
        .client()
        .list_objects_v2()
        .bucket(g.bucket())
        .send()
        .await?;
    let names: Vec<&str> = listed.contents().iter().filter_map(|o| o.key()).collect();
    assert_eq!(names, ["kept"]);
    Ok(())
}

#[tokio::test]
async fn deleting_a_version_already_deleted_answers_as_s3_does_and_frees_nothing_more() -> Result<()>
{
    let g = Gateway::start("twice", "basic").await?;
    g.put("kept", b"kept!!!".to_vec()).await.unwrap();
    let put = g
        .client()
        .put_object()
        .bucket(g.bucket())
        .key("only")
        .body(vec![b'z'; 10].into())
        .send()
        .await?;
    let version = put.version_id().expect("a version id").to_owned();
    assert_eq!(g.all_settled().await?, 17);
    // The key's only version, deleted, then deleted again: the backend then holds no version of the key at all.
    for _ in 0..2 {
        let deleted = g
            .client()
            .delete_object()
            .bucket(g.bucket())
            .key("only")
            .version_id(&version)
            .send()
            .await?;
        assert_eq!(deleted.version_id(), Some(version.as_str()));
        assert_eq!(g.all_settled().await?, 7);
    }
    // A version id no key ever had is refused as before.
    let err = g
        .client()
        .delete_object()
        .bucket(g.bucket())
        .key("kept")
        .version_id("not-a-version")
        .send()
        .await
        .expect_err("an invalid version id");
    assert_eq!(err.raw_response().map(|r| r.status().as_u16()), Some(400));
    Ok(())
}

#[tokio::test]
async fn an_object_the_backend_lost_the_metadata_of_is_listed_without_an_etag_and_deleted()
-> Result<()> {
    let g = Gateway::start("damaged", "basic").await?;
    g.put("whole", b"whole".to_vec()).await.unwrap();
    // A file with no metadata at all: versitygw lists it with an empty ETag, which s3s cannot read.
    std::fs::write(
        g.backend
            .bucket_dir(&g.store.backend_bucket)
            .join("damaged"),
        b"bytes",
    )?;
    let client = g.client();
    let listed = client.list_objects_v2().bucket(g.bucket()).send().await?;
    let etags: Vec<(&str, Option<&str>)> = listed
        .contents()
        .iter()
        .map(|o| (o.key().unwrap(), o.e_tag()))
        .collect();
    assert_eq!(etags.len(), 2, "{etags:?}");
    assert_eq!(etags[0], ("damaged", None));
    assert_eq!(etags[1].0, "whole");
    assert!(etags[1].1.is_some_and(|e| e.len() == 34), "{etags:?}");
    let v1 = client.list_objects().bucket(g.bucket()).send().await?;
    assert_eq!(v1.contents().len(), 2);
    let versions = client
        .list_object_versions()
        .bucket(g.bucket())
        .send()
        .await?;
    let damaged = versions
        .versions()
        .iter()
        .find(|v| v.key() == Some("damaged"))
        .expect("listed");
    assert_eq!(damaged.e_tag(), None);
    // Found, it can be deleted like any other.
    client
        .delete_object()
        .bucket(g.bucket())
        .key("damaged")
        .set_version_id(damaged.version_id().map(str::to_owned))
        .send()
        .await?;
    let listed = client.list_objects_v2().bucket(g.bucket()).send().await?;
    let names: Vec<&str> = listed.contents().iter().filter_map(|o| o.key()).collect();
    assert_eq!(names, ["whole"]);
    Ok(())
}
