//! Apps and channels: `GET/POST /apps`, `GET/DELETE /apps/{id}`, `GET/POST /apps/{id}/channels`,
//! `DELETE .../channels/{cid}`.

use axum::http::Method;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::{ADDS, Ctx, DESTROYS, NoArguments, OfApp, OfChannel, READS, ToolDef, body, json, tool};
use crate::address::{self, AppAddress};

/// `create_app` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct CreateApp {
    /// The app's name: a DNS label of at most 40 characters (lowercase letters, digits, hyphens).
    name: String,
    /// `static` (the default: the committed files are served), `app` (built on a Node/Python runtime, started by
    /// `launch.sh`) or `docker` (built from the `Dockerfile`).
    #[serde(default)]
    template: Option<String>,
}

/// `create_channel` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct CreateChannel {
    #[serde(flatten)]
    app: AppAddress,
    /// The new channel's name (a DNS label; `prod` exists already).
    name: String,
    /// The git branch the channel follows, as `branch:<name>`, e.g. `branch:dev` (one channel per branch).
    git_ref_binding: String,
}

pub(super) fn tools() -> Vec<ToolDef> {
    vec![
        tool(
            "list_apps",
            "List the apps you can see (your own and those shared with you), each with its channels, hostnames, \
             current commit and any deploy in flight.",
            READS,
            |ctx: Ctx, _: NoArguments| async move { json(ctx.rest.get("/apps").await?) },
        ),
        tool(
            "create_app",
            "Create an app with its `prod` channel and an empty git repository. Commit files with `commit_files`, \
             then `deploy`.",
            ADDS,
            |ctx: Ctx, a: CreateApp| async move {
                let request = body(json!({"name": a.name, "template": a.template}));
                json(ctx.rest.write(Method::POST, "/apps", &request).await?)
            },
        ),
        tool(
            "get_app",
            "Show one app: its settings, channels, hostnames, current commits and deploys in flight.",
            READS,
            |ctx: Ctx, a: OfApp| async move { json(address::app(&ctx.rest, &a.app).await?.view) },
        ),
        tool(
            "delete_app",
            "Delete an app: its channels stop, its repository, databases, buckets and routes are removed. This \
             cannot be undone.",
            DESTROYS,
            |ctx: Ctx, a: OfApp| async move {
                let app = address::app(&ctx.rest, &a.app).await?;
                ctx.rest.delete(&app.path()).await?;
                json(json!({"deleted": app.id}))
            },
        ),
        tool(
            "list_channels",
            "List an app's channels with their hostname, bound git branch, status and current commit.",
            READS,
            |ctx: Ctx, a: OfApp| async move {
                let app = address::app(&ctx.rest, &a.app).await?;
                let channels = ctx.rest.get(&format!("{}/channels", app.path())).await?;
                json(json!({"channels": channels}))
            },
        ),
        tool(
            "create_channel",
            "Create a channel of an app that follows a git branch (`git_ref_binding` `branch:<name>`, e.g. \
             `branch:dev`), with its own hostname, environment, database and bucket.",
            ADDS,
            |ctx: Ctx, a: CreateChannel| async move {
                let app = address::app(&ctx.rest, &a.app).await?;
                let request = json!({"name": a.name, "git_ref_binding": a.git_ref_binding});
                json(
                    ctx.rest
                        .write(Method::POST, &format!("{}/channels", app.path()), &request)
                        .await?,
                )
            },
        ),
        tool(
            "delete_channel",
            "Delete a channel (not `prod`): its container stops and its routes, database and bucket are removed.",
            DESTROYS,
            |ctx: Ctx, a: OfChannel| async move {
                let app = address::app(&ctx.rest, &a.app).await?;
                let path = app.channel_path(&a.channel)?;
                ctx.rest.delete(&path).await?;
                json(json!({"deleted": app.channel_id(&a.channel)?}))
            },
        ),
    ]
}
