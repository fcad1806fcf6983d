//! Environment: `POST/GET /apps/{id}/env`, `DELETE /apps/{id}/env/{key}`, and a deploy's env snapshot. No tool
//! reveals a secret's value.

use axum::http::Method;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Ctx, DESTROYS, READS, SETS, ToolDef, body, json, tool};
use crate::address::{self, AppAddress, ChannelAddress, ResolvedApp};
use slipway_rest::in_process::{Failure, Rest, segment, with_query};

/// `set_env` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct SetEnv {
    #[serde(flatten)]
    app: AppAddress,
    /// The variable's name (letters, digits and underscores; platform-reserved names are refused).
    key: String,
    /// Its value.
    value: String,
    /// `true` stores it as a secret (sealed at rest, never shown again by any tool); `false` stores a plain
    /// variable that lists show, turning a secret of that name into one. Omitted: an existing key keeps its kind,
    /// a new key is a plain variable.
    #[serde(default)]
    secret: Option<bool>,
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

/// `kind` of the env route for `secret`: omitted when it is, so that an existing key keeps its kind.
fn kind_of(secret: Option<bool>) -> Option<&'static str> {
    secret.map(|secret| if secret { "secret" } else { "env" })
}

/// The entry of `key` at the scope `channel_id` names, as the list route shows it (a secret without its value).
async fn entry(
    rest: &Rest,
    app: &ResolvedApp,
    key: &str,
    channel_id: Option<String>,
) -> Result<Value, Failure> {
    let path = with_query(
        &format!("{}/env", app.path()),
        &[("channel_id", channel_id.clone())],
    );
    let listed = rest.get(&path).await?;
    listed["env"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["key"] == key && e["channel_id"].as_str() == channel_id.as_deref())
        .cloned()
        .ok_or_else(|| Failure::not_found("variable"))
}

pub(super) fn tools() -> Vec<ToolDef> {
    vec![
        tool(
            "set_env",
            "Set an environment variable of an app, or of one of its channels. It reaches the containers at the \
             next deploy; it is never available at build time. Answers the variable as `list_env` shows it, with \
             the kind it has now (`secret` keeps its value hidden).",
            SETS,
            |ctx: Ctx, a: SetEnv| async move {
                let app = address::app(&ctx.rest, &a.app).await?;
                let channel_id = app.optional_channel_id(a.channel.as_deref())?;
                let request = body(json!({"key": a.key, "value": a.value,
                                          "kind": kind_of(a.secret), "channel_id": channel_id}));
                ctx.rest
                    .write(Method::POST, &format!("{}/env", app.path()), &request)
                    .await?;
                json(entry(&ctx.rest, &app, &a.key, channel_id).await?)
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
