//! Observability: the account overview (`GET /me/usage` and `GET /api/user/stats` together), an app's health,
//! statistics and activity journal.

use serde_json::json;

use super::{AppPage, Ctx, NoArguments, OfApp, READS, ToolDef, json, tool};
use crate::mcp::address;

pub(super) fn tools() -> Vec<ToolDef> {
    vec![
        tool(
            "get_account_overview",
            "Show your account at a glance: plan, storage and bandwidth used against the plan, your apps and those \
             shared with you, every channel's status and commit, and what your running containers hold.",
            READS,
            |ctx: Ctx, _: NoArguments| async move {
                let usage = ctx.rest.get("/me/usage").await?;
                let stats = ctx.rest.get("/api/user/stats").await?;
                json(
                    json!({"usage": usage, "apps": stats["apps"], "channels": stats["channels"],
                            "sites": stats["sites"], "resources": stats["resources"]}),
                )
            },
        ),
        tool(
            "get_app_stats",
            "Show an app's deploys by outcome, per channel and in all, with when each channel last went live and \
             its median deploy time.",
            READS,
            |ctx: Ctx, a: OfApp| async move {
                let app = address::app(&ctx.rest, &a.app).await?;
                json(ctx.rest.get(&format!("{}/stats", app.path())).await?)
            },
        ),
        tool(
            "get_app_health",
            "Check whether each channel of an app serves now: its status, the deploy in flight and the last one, \
             and its newest container (exit code, memory kill, restarts), with notes on what to look at.",
            READS,
            |ctx: Ctx, a: OfApp| async move {
                let app = address::app(&ctx.rest, &a.app).await?;
                json(ctx.rest.get(&format!("{}/health", app.path())).await?)
            },
        ),
        tool(
            "list_activity",
            "Read an app's journal of recorded actions (secret reveals, database resets, dumps and restores, bucket \
             restores and credential reads, downloads), newest first, with who did each.",
            READS,
            |ctx: Ctx, a: AppPage| async move {
                let app = address::app(&ctx.rest, &a.app).await?;
                let path = a.page.query(&format!("{}/activity", app.path()));
                json(ctx.rest.get(&path).await?)
            },
        ),
    ]
}
