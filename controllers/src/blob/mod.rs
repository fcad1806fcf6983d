//! Object storage of a channel, as the Channel reconciler keeps it: a bucket on the backend made with the channel
//! (every template, static included), with versioning on, and removed with the channel behind the
//! [`FINALIZER`]; its state is the Channel's `ObjectStoreReady` condition. The store's record (the key pair,
//! sealed in the platform database) belongs to the API server, which the operator asks through internal routes:
//! the operator never holds the keyring.
//!
//! Deploys of `app` and `docker` channels get the store's `S3_*` variables from [`container_env`].

use std::collections::BTreeMap;

use kube::ResourceExt;
use slipway_crds::conditions::reasons;
use slipway_crds::names::{self, Username};
use slipway_crds::{App, Channel};

use crate::context::Context;
use crate::error::Error;
use slipway_backends::object_store;
use slipway_internal::protocol::BlobStoreRequest;

/// Held by every channel until its bucket is gone from the backend and its store forgotten.
pub const FINALIZER: &str = "slipway.dev/blob";

/// The variables a deploy's containers receive for the channel's store (recorded by name only in the deploy's
/// env snapshot).
pub const ENV_KEYS: [&str; 5] = [
    "S3_ENDPOINT",
    "S3_BUCKET",
    "S3_ACCESS_KEY_ID",
    "S3_SECRET_ACCESS_KEY",
    "S3_REGION",
];

/// How the operator reaches object storage.
#[derive(Clone, Debug)]
pub struct BlobSettings {
    /// The backend, with the platform's root key pair.
    pub backend: object_store::Backend,
    /// Prefix of backend bucket names (`<prefix><channel uid>`), so several installations can share a backend.
    pub bucket_prefix: String,
    /// The gateway as pods reach it (`S3_ENDPOINT`).
    pub pod_endpoint: String,
}

/// The state of a channel's store, for its condition.
#[derive(Debug, Clone, PartialEq)]
pub struct StoreState {
    /// Whether the bucket is there with versioning on and the store recorded.
    pub ready: bool,
    /// The condition's reason.
    pub reason: &'static str,
    /// The condition's message (the failure, when not ready).
    pub message: String,
}

/// Makes sure the channel's store is recorded and its bucket exists with versioning on. Failures are reported in
/// the state (and retried by the caller), never hidden.
pub async fn ensure(
    ctx: &Context,
    settings: &BlobSettings,
    channel: &Channel,
    app: &App,
) -> StoreState {
    match try_ensure(ctx, settings, channel, app).await {
        Ok(()) => StoreState {
            ready: true,
            reason: reasons::RECONCILED,
            message: "the bucket is ready, with versioning on".into(),
        },
        Err(e) => StoreState {
            ready: false,
            reason: reasons::OBJECT_STORE_FAILED,
            message: e.to_string(),
        },
    }
}

async fn try_ensure(
    ctx: &Context,
    settings: &BlobSettings,
    channel: &Channel,
    app: &App,
) -> Result<(), Error> {
    let channel_uid = channel.uid().ok_or(Error::Incomplete("uid"))?;
    let app_uid = app.uid().ok_or(Error::Incomplete("uid"))?;
    // The client-facing name is the hostname label; a channel whose names do not form one is refused earlier.
    let (app_name, channel_name) = names::parse_channel_resource_name(&channel.name_any())
        .map_err(|e| Error::InvalidSpec(e.0.to_owned()))?;
    let owner: Username = app
        .spec
        .owner
        .parse()
        .map_err(|e: names::InvalidName| Error::InvalidSpec(e.0.to_owned()))?;
    names::channel_host_label(&app_name, &channel_name, &owner)
        .map_err(|e| Error::InvalidSpec(e.0.to_owned()))?;
    let store = ctx
        .internal
        .ensure_blob_store(
            &channel_uid,
            &BlobStoreRequest {
                app_id: app_uid,
                backend_bucket: object_store::backend_bucket(&settings.bucket_prefix, &channel_uid),
            },
        )
        .await?;
    settings
        .backend
        .ensure_bucket(&store.backend_bucket)
        .await
        .map_err(|e| Error::ObjectStore(e.0))?;
    Ok(())
}

/// Removes the channel's bucket (every version in it) and forgets its store. Safe to repeat.
pub async fn remove(
    ctx: &Context,
    settings: &BlobSettings,
    channel: &Channel,
) -> Result<(), Error> {
    let channel_uid = channel.uid().ok_or(Error::Incomplete("uid"))?;
    // The store names the bucket; a store never recorded still had its bucket named by the rule.
    let bucket = object_store::backend_bucket(&settings.bucket_prefix, &channel_uid);
    settings
        .backend
        .remove_bucket(&bucket)
        .await
        .map_err(|e| Error::ObjectStore(e.0))?;
    ctx.internal.delete_blob_store(&channel_uid).await?;
    Ok(())
}

/// The `S3_*` variables of the channel's store, for a deploy's containers.
pub async fn container_env(
    ctx: &Context,
    settings: &BlobSettings,
    channel: &Channel,
) -> Result<BTreeMap<String, String>, Error> {
    let channel_uid = channel.uid().ok_or(Error::Incomplete("uid"))?;
    let credentials = ctx.internal.blob_credentials(&channel_uid).await?;
    Ok(BTreeMap::from([
        ("S3_ENDPOINT".to_owned(), settings.pod_endpoint.clone()),
        ("S3_BUCKET".to_owned(), credentials.bucket),
        ("S3_ACCESS_KEY_ID".to_owned(), credentials.access_key_id),
        (
            "S3_SECRET_ACCESS_KEY".to_owned(),
            credentials.secret_access_key,
        ),
        ("S3_REGION".to_owned(), object_store::REGION.to_owned()),
    ]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_env_keys_are_the_reserved_s3_keys() {
        for key in ENV_KEYS {
            assert!(
                slipway_crds::names::RESERVED_ENV_KEYS.contains(&key),
                "{key} must be reserved so no user value can shadow it"
            );
        }
    }
}
