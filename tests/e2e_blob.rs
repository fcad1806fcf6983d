//! Object storage end to end on the real single-node cluster: an `app` deploy whose process writes an object into
//! its channel's bucket and reads it back with nothing but the injected `S3_*` variables (a hand-written SigV4
//! client on Python's standard library, as a tenant without an SDK would write), through the platform's S3
//! gateway; the object is then read from outside with the credentials route's key pair, and the deploy's env
//! snapshot lists the `S3_*` keys by name only.

// Fixture helpers panic on a malformed response: in a test that is the failure to report.
#![allow(clippy::unwrap_used)]

mod support;

use std::time::Duration;

use anyhow::Result;
use serde_json::json;
use support::TestApi;
use support::blob::ObjectStore;

/// A build, a rollout and readiness; generous for a loaded 2-core machine.
const DEPLOY_WITHIN: Duration = Duration::from_secs(600);

/// Writes `from-app.txt` into the channel's bucket, reads it back, and only then serves `GET /` with what it read
/// (so the deploy passes readiness only when the round trip worked).
const APP: &str = r#"import datetime, hashlib, hmac, http.server, os, sys, urllib.parse, urllib.request

ENDPOINT = os.environ["S3_ENDPOINT"].rstrip("/")
BUCKET = os.environ["S3_BUCKET"]
ACCESS = os.environ["S3_ACCESS_KEY_ID"]
SECRET = os.environ["S3_SECRET_ACCESS_KEY"]
REGION = os.environ["S3_REGION"]


def hmac256(key, text):
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def s3(method, key, body=b""):
    path = "/" + BUCKET + "/" + urllib.parse.quote(key)
    now = datetime.datetime.now(datetime.timezone.utc)
    stamp, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    digest = hashlib.sha256(body).hexdigest()
    headers = {"host": urllib.parse.urlsplit(ENDPOINT).netloc, "x-amz-content-sha256": digest, "x-amz-date": stamp}
    names = ";".join(sorted(headers))
    canonical = "\n".join([method, path, "", "".join(f"{k}:{headers[k]}\n" for k in sorted(headers)), names, digest])
    scope = f"{day}/{REGION}/s3/aws4_request"
    text = "\n".join(["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key_ = hmac256(hmac256(hmac256(hmac256(("AWS4" + SECRET).encode(), day), REGION), "s3"), "aws4_request")
    signature = hmac.new(key_, text.encode(), hashlib.sha256).hexdigest()
    headers["authorization"] = f"AWS4-HMAC-SHA256 Credential={ACCESS}/{scope}, SignedHeaders={names}, Signature={signature}"
    del headers["host"]
    request = urllib.request.Request(ENDPOINT + path, data=body if method == "PUT" else None, method=method, headers=headers)
    with urllib.request.urlopen(request, timeout=30) as res:
        return res.read()


written = ("written by the app, version " + open("/app/VERSION").read().strip()).encode()
s3("PUT", "from-app.txt", written)
read = s3("GET", "from-app.txt")
if read != written:
    sys.exit(f"read back {read!r}, wrote {written!r}")
print("object round trip ok", flush=True)


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", str(len(read)))
        self.end_headers()
        self.wfile.write(read)


http.server.HTTPServer(("0.0.0.0", int(os.environ["SVC_HTTP_PORT"])), Handler).serve_forever()
"#;

#[tokio::test]
async fn an_app_writes_and_reads_its_bucket_with_the_injected_keys() -> Result<()> {
    let api = TestApi::start().await?;
    let user = api.user("blobapp", "builder").await?;
    let host_ip = std::env::var("SLIPWAY_NODE_HOST_IP").map_err(|_| {
        anyhow::anyhow!("SLIPWAY_NODE_HOST_IP is not set; run under `hack/test.sh e2e`")
    })?;
    let store = ObjectStore::start(&api, &host_ip).await?;
    api.start_operator_with_blob(&user.namespace, store.settings())
        .await?;
    let app = api.create_app(&user, "bucketeer", "app").await;
    let app_id = app["id"].as_str().unwrap().to_owned();
    let prod_id = app["channels"][0]["id"].as_str().unwrap().to_owned();
    let sha = api
        .commit(
            &user,
            &app_id,
            json!({"launch.sh": "#!/bin/sh\nexec python3 /app/app.py\n", "app.py": APP, "VERSION": "1\n"}),
        )
        .await;
    let deploy_id = api
        .deploy(&user, &app_id, &prod_id, json!({"sha": sha}))
        .await;
    let log = api
        .finished_deploy(&user, &app_id, &prod_id, &deploy_id, DEPLOY_WITHIN)
        .await?;
    assert_eq!(
        log["status"],
        "success",
        "deploy log:\n{}",
        log["log"].as_str().unwrap_or_default()
    );

    // What the app wrote is in the bucket, read from outside with the credentials route's key pair.
    let credentials = api
        .post(
            &format!("/apps/{app_id}/channels/{prod_id}/blob/credentials"),
            &user,
            json!({}),
        )
        .await
        .expect(200, None);
    let s3 = store.client(
        credentials["access_key_id"].as_str().unwrap(),
        credentials["secret_access_key"].as_str().unwrap(),
    );
    let object = s3
        .get_object()
        .bucket(credentials["bucket"].as_str().unwrap())
        .key("from-app.txt")
        .send()
        .await?;
    let body = object.body.collect().await?.into_bytes();
    assert_eq!(body.as_ref(), b"written by the app, version 1");

    // The snapshot names the store's keys as system keys and holds none of their values.
    let db = slipway::db::connect(api.db_url()).await?;
    let (system_keys, entries): (Vec<String>, serde_json::Value) = sqlx::query_as(
        "SELECT system_keys, entries FROM deploy_env_snapshots WHERE deploy_id = $1",
    )
    .bind(deploy_id.parse::<uuid::Uuid>()?)
    .fetch_one(&db)
    .await?;
    for key in slipway_controllers::blob::ENV_KEYS {
        assert!(
            system_keys.iter().any(|k| k == key),
            "{key} in {system_keys:?}"
        );
    }
    assert!(
        !entries.to_string().contains("S3_"),
        "no S3 value in the snapshot's entries: {entries}"
    );
    let status = api
        .get(&format!("/apps/{app_id}/channels/{prod_id}/blob"), &user)
        .await
        .expect(200, None);
    assert_eq!(status["usage_bytes"], 29);
    Ok(())
}
