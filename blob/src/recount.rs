//! The periodic recount of each store's usage from the backend's own listing (every version and delete marker),
//! which corrects what the gateway's running count missed: a gateway that crashed between a write and its count,
//! or a version removed behind the gateway's back. A recount that overlaps a write is dropped and tried at the
//! next round rather than guessed ([`store::set_recounted`]).

use std::time::Duration;

use sqlx::PgPool;

use super::store::{self, Store};

/// The bytes of every version in `bucket`.
pub async fn listed_bytes(backend: &aws_sdk_s3::Client, bucket: &str) -> anyhow::Result<i64> {
    let mut total = 0i64;
    let (mut key_marker, mut version_marker) = (None, None);
    loop {
        let page = backend
            .list_object_versions()
            .bucket(bucket)
            .set_key_marker(key_marker)
            .set_version_id_marker(version_marker)
            .send()
            .await
            .map_err(|e| {
                anyhow::anyhow!(
                    "list versions of {bucket}: {}",
                    slipway_backends::object_store::describe(&e)
                )
            })?;
        total += page.versions().iter().filter_map(|v| v.size()).sum::<i64>();
        if page.is_truncated() != Some(true) {
            return Ok(total);
        }
        key_marker = page.next_key_marker().map(str::to_owned);
        version_marker = page.next_version_id_marker().map(str::to_owned);
        anyhow::ensure!(
            key_marker.is_some(),
            "a truncated listing of {bucket} without a marker"
        );
    }
}

/// Recounts one store; whether the count was set (false: a write overlapped, try again later).
pub async fn recount(
    db: &PgPool,
    backend: &aws_sdk_s3::Client,
    store: &Store,
) -> anyhow::Result<bool> {
    let listed = listed_bytes(backend, &store.backend_bucket).await?;
    Ok(store::set_recounted(db, store.channel_id, listed, store.usage_epoch).await?)
}

/// Recounts every store not recounted within `every`, one at a time, forever.
pub async fn run(db: PgPool, backend: aws_sdk_s3::Client, every: Duration) {
    loop {
        match store::due_for_recount(&db, every).await {
            Ok(stores) => {
                for store in stores {
                    if let Err(e) = recount(&db, &backend, &store).await {
                        tracing::warn!(channel_id = %store.channel_id, error = %e, "recount failed");
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "could not list stores to recount"),
        }
        tokio::time::sleep(every.min(Duration::from_secs(60))).await;
    }
}
