//! Object storage end to end on the real single-node cluster: an `app` deploy whose process writes an object into
//! its channel's bucket and reads it back with nothing but the injected `S3_*` variables (a hand-written SigV4
//! client on Python's standard library, as a tenant without an SDK would write), through the platform's S3
//! gateway; the object is then read from outside with the credentials route's key pair, and the deploy's env
//! snapshot lists the `S3_*` keys by name only.

// Fixture helpers panic on a malformed response: in a test that is the failure to report.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::time::Duration;

use anyhow::Result;
use serde_json::json;
use support::TestApi;
use support::blob::ObjectStore;

/// A build, a rollout and readiness; generous for a loaded 2-core machine.
const DEPLOY_WITHIN: Duration = Duration::from_secs(600);

/// The app's process: writes `from-app.txt` into the channel's bucket, reads it back, then serves what it read.
const APP: &str = include_str!("../s3/app_roundtrip.py");

#[tokio::test]
async fn an_app_writes_and_reads_its_bucket_with_the_injected_keys() -> Result<()> {
    let mut api = TestApi::start().await?;
    let user = api.user("blobapp", "builder").await?;
    let host_ip = std::env::var("SLIPWAY_NODE_HOST_IP").map_err(|_| {
        anyhow::anyhow!("SLIPWAY_NODE_HOST_IP is not set; run under `hack/test.sh e2e`")
    })?;
    let store = ObjectStore::start(&mut api, &host_ip).await?;
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
    let db = slipway_store::db::connect(api.db_url()).await?;
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
    // The app's small write is counted moments after its answer.
    let blob = format!("/apps/{app_id}/channels/{prod_id}/blob");
    let usage = || async { api.get(&blob, &user).await.expect(200, None)["usage_bytes"].clone() };
    let counted =
        slipway_testkit::wait_until(Duration::from_secs(5), || async { Ok(usage().await == 29) })
            .await;
    if counted.is_err() {
        assert_eq!(usage().await, 29);
    }
    Ok(())
}
