//! Databases and buckets: SQL snapshots (list, restore, download link) and object storage (credentials, usage,
//! restore, download link). Restores keep their routes' confirmation argument: a restore replaces data.

use axum::http::Method;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::{ADDS, Ctx, DESTROYS, OfChannel, READS, ToolDef, download_link, json, tool};
use crate::address::{self, AppAddress, ChannelAddress};
use slipway_rest::in_process::{Failure, segment};

/// Arguments naming one snapshot of a channel.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct OfSnapshot {
    #[serde(flatten)]
    app: AppAddress,
    #[serde(flatten)]
    channel: ChannelAddress,
    /// The snapshot, as `list_channel_snapshots` lists it.
    snapshot_id: String,
}

/// `restore_channel_db` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct RestoreDb {
    #[serde(flatten)]
    app: AppAddress,
    #[serde(flatten)]
    channel: ChannelAddress,
    /// The snapshot to restore.
    snapshot_id: String,
    /// The channel's database name (`db_name` of `list_channel_snapshots`), confirming what is replaced.
    confirm_db_name: String,
}

/// `restore_channel_blobs` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct RestoreBlobs {
    #[serde(flatten)]
    app: AppAddress,
    #[serde(flatten)]
    channel: ChannelAddress,
    /// The checkpoint to restore: a SQL snapshot id whose row has `aligned_blob` true.
    snapshot_id: String,
    /// The channel's name again, confirming which bucket is rolled back.
    confirm_channel_name: String,
}

/// `get_blob_usage` arguments: a channel of an app, or neither for the account's total alone.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct BlobUsage {
    /// The app whose channel's bucket to show, with `channel`; omitted (with `channel`) for your account's total.
    #[serde(default)]
    app_name: Option<String>,
    /// The channel's name, e.g. `prod`, with `app_name`.
    #[serde(default)]
    channel: Option<String>,
}

pub(super) fn tools() -> Vec<ToolDef> {
    vec![
        tool(
            "list_channel_snapshots",
            "List a channel's SQL database snapshots, newest first (one is taken before every deploy), with the \
             database's name that a restore confirms.",
            READS,
            |ctx: Ctx, a: OfChannel| async move {
                let app = address::app(&ctx.rest, &a.app).await?;
                let channel = app.channel_path(&a.channel)?;
                let database = ctx.rest.get(&format!("{channel}/postgres")).await?;
                let snapshots = ctx
                    .rest
                    .get(&format!("{channel}/postgres/snapshots"))
                    .await?;
                json(json!({"db_name": database["db_name"], "snapshots": snapshots}))
            },
        ),
        tool(
            "restore_channel_db",
            "Replace a channel's SQL database with a snapshot's contents. Everything written since is lost.",
            DESTROYS,
            |ctx: Ctx, a: RestoreDb| async move {
                let app = address::app(&ctx.rest, &a.app).await?;
                let path = format!("{}/postgres/restore", app.channel_path(&a.channel)?);
                let request =
                    json!({"snapshot_id": a.snapshot_id, "confirm_db_name": a.confirm_db_name});
                json(ctx.rest.write(Method::POST, &path, &request).await?)
            },
        ),
        tool(
            "download_channel_snapshot",
            "Get a link that downloads one SQL snapshot as a pg_restore-readable dump; it works for an hour and for \
             nothing else. Needs the `snapshots:read` scope.",
            ADDS,
            |ctx: Ctx, a: OfSnapshot| async move {
                let app = address::app(&ctx.rest, &a.app).await?;
                let path = format!(
                    "{}/postgres/snapshots/{}/download-token",
                    app.channel_path(&a.channel)?,
                    segment(&a.snapshot_id)
                );
                let token = ctx.rest.write(Method::POST, &path, &json!({})).await?;
                download_link(&ctx, &token)
            },
        ),
        tool(
            "get_blob_credentials",
            "Get the S3 endpoint, bucket, region and key pair of a channel's bucket (the same ones its containers \
             get as S3_*). Needs the `blob:*` scope; every call is recorded.",
            READS,
            |ctx: Ctx, a: OfChannel| async move {
                let app = address::app(&ctx.rest, &a.app).await?;
                let path = format!("{}/blob/credentials", app.channel_path(&a.channel)?);
                json(ctx.rest.write(Method::POST, &path, &json!({})).await?)
            },
        ),
        tool(
            "get_blob_usage",
            "Show your account's object storage (bytes stored in all your buckets, and how many), and with \
             `app_name` and `channel` that channel's bucket status and bytes stored (every version counts).",
            READS,
            |ctx: Ctx, a: BlobUsage| async move {
                let channel = match (a.app_name, a.channel) {
                    (Some(app_name), Some(channel)) => {
                        let app = address::app(&ctx.rest, &AppAddress { app_name }).await?;
                        let path = app.channel_path(&ChannelAddress { channel })?;
                        Some(ctx.rest.get(&format!("{path}/blob")).await?)
                    }
                    (None, None) => None,
                    _ => {
                        return Err(Failure::bad_request(
                            "give `app_name` and `channel` together for a channel's bucket, or neither for your \
                             account's total",
                        ));
                    }
                };
                let account = ctx.rest.get("/me/blob/storage").await?;
                json(match channel {
                    Some(channel) => json!({"channel": channel, "account": account}),
                    None => json!({"account": account}),
                })
            },
        ),
        tool(
            "restore_channel_blobs",
            "Roll a channel's bucket back to a checkpoint: each key gets its version of that instant back as its \
             newest and later keys are hidden; no version is deleted.",
            DESTROYS,
            |ctx: Ctx, a: RestoreBlobs| async move {
                let app = address::app(&ctx.rest, &a.app).await?;
                let path = format!("{}/blob/restore", app.channel_path(&a.channel)?);
                let request = json!({"snapshot_id": a.snapshot_id, "confirm_channel_name": a.confirm_channel_name});
                json(ctx.rest.write(Method::POST, &path, &request).await?)
            },
        ),
        tool(
            "download_channel_blobs",
            "Get a link that downloads a channel's bucket as of a checkpoint (a gzipped tar); it works for an hour \
             and for nothing else. Needs the `blobs:read` scope.",
            ADDS,
            |ctx: Ctx, a: OfSnapshot| async move {
                let app = address::app(&ctx.rest, &a.app).await?;
                let path = format!(
                    "{}/blob/snapshots/{}/download-token",
                    app.channel_path(&a.channel)?,
                    segment(&a.snapshot_id)
                );
                let token = ctx.rest.write(Method::POST, &path, &json!({})).await?;
                download_link(&ctx, &token)
            },
        ),
    ]
}
