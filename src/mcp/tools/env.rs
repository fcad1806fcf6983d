//! Environment: `POST/GET /apps/{id}/env`, `DELETE /apps/{id}/env/{key}`, and a deploy's env snapshot. No tool
//! reveals a secret's value.

use axum::http::Method;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::{Ctx, DESTROYS, READS, SETS, ToolDef, body, json, tool};
use crate::mcp::address::{self, AppAddress, ChannelAddress};
use crate::mcp::rest::{segment, with_query};

/// `set_env` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct SetEnv {
    #[serde(flatten)]
    app: AppAddress,
    /// The variable's name (letters, digits and underscores; platform-reserved names are refused).
    key: String,
    /// Its value.
    value: String,
    /// Store it as a secret: sealed at rest, never shown again by any tool.
    #[serde(default)]
    secret: bool,
    /// The channel, for its own value; omitted means the app-wide value.
    #[serde(default)]
    channel: Option<String>,
}

/// Arguments of an env tool that names a key.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct OfKey {
    #[serde(flatten)]
    app: AppAddress,
    /// The variable's name.
    key: String,
    /// The channel, for its own value; omitted means the app-wide value.
    #[serde(default)]
    channel: Option<String>,
}

/// `list_env` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ListEnv {
    #[serde(flatten)]
    app: AppAddress,
    /// The channel, for its resolved view (its own values over the app-wide ones); omitted means every row.
    #[serde(default)]
    channel: Option<String>,
}

/// `get_deploy_env` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct DeployEnv {
    #[serde(flatten)]
    app: AppAddress,
    #[serde(flatten)]
    channel: ChannelAddress,
    /// The deploy whose environment to show (a UUID, as `deploy` answered it).
    #[schemars(with = "String", extend("format" = "uuid"))]
    deploy_id: uuid::Uuid,
}

pub(super) fn tools() -> Vec<ToolDef> {
    vec![
        tool(
            "set_env",
            "Set an environment variable of an app, or of one of its channels. It reaches the containers at the \
             next deploy; it is never available at build time.",
            SETS,
            |ctx: Ctx, a: SetEnv| async move {
                let app = address::app(&ctx.rest, &a.app).await?;
                let channel_id = app.optional_channel_id(a.channel.as_deref())?;
                let kind = if a.secret { "secret" } else { "env" };
                let request = body(
                    json!({"key": a.key, "value": a.value, "kind": kind, "channel_id": channel_id}),
                );
                ctx.rest
                    .write(Method::POST, &format!("{}/env", app.path()), &request)
                    .await?;
                json(json!({"key": a.key, "kind": kind, "channel_id": channel_id}))
            },
        ),
        tool(
            "delete_env",
            "Remove an environment variable from an app, or a channel's own value of it. Takes effect at the next \
             deploy.",
            DESTROYS,
            |ctx: Ctx, a: OfKey| async move {
                let app = address::app(&ctx.rest, &a.app).await?;
                let channel_id = app.optional_channel_id(a.channel.as_deref())?;
                let path = with_query(
                    &format!("{}/env/{}", app.path(), segment(&a.key)),
                    &[("channel_id", channel_id)],
                );
                ctx.rest.delete(&path).await?;
                json(json!({"deleted": a.key}))
            },
        ),
        tool(
            "list_env",
            "List an app's environment variables (and a channel's own, with `channel`). Secret values are never \
             shown.",
            READS,
            |ctx: Ctx, a: ListEnv| async move {
                let app = address::app(&ctx.rest, &a.app).await?;
                let channel_id = app.optional_channel_id(a.channel.as_deref())?;
                let path = with_query(
                    &format!("{}/env", app.path()),
                    &[("channel_id", channel_id)],
                );
                json(ctx.rest.get(&path).await?)
            },
        ),
        tool(
            "get_deploy_env",
            "Show the environment a deploy ran with: each key with its source, values of non-secrets only, and the \
             names of the keys the platform injects.",
            READS,
            |ctx: Ctx, a: DeployEnv| async move {
                let app = address::app(&ctx.rest, &a.app).await?;
                let path = format!(
                    "{}/deploys/{}/env",
                    app.channel_path(&a.channel)?,
                    a.deploy_id
                );
                json(ctx.rest.get(&path).await?)
            },
        ),
    ]
}
