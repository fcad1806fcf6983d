//! Observability and exports: the account overview (`GET /me/usage` and `GET /api/user/stats` together), an app's
//! health, statistics and activity journal, and exports of an app (`/apps/{app_id}/exports`).

use axum::http::Method;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::{
    ADDS, AppPage, Ctx, Hints, NoArguments, OfApp, READS, ToolDef, download_of, json, tool,
};
use crate::address::{self, AppAddress};
use slipway_rest::in_process::segment;

/// `get_export_status` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct OfExport {
    #[serde(flatten)]
    app: AppAddress,
    /// The export, as `export_data` answered it (`export_id`).
    export_id: String,
}

/// Reads a status; a ready export's answer carries a new download link each time.
const READS_MINTING: Hints = Hints {
    read_only: true,
    destructive: false,
    idempotent: false,
};

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
        tool(
            "export_data",
            "Start an export of an app: one tar.gz of its repository (a git bundle), each channel's variable names \
             (never values), database dump (pg_restore reads it) and bucket objects, built in the background. Poll \
             get_export_status with the export_id until it is ready; one export per app at a time. Needs the \
             `exports:read` scope and the owner or admin role; recorded in the app's journal.",
            ADDS,
            |ctx: Ctx, a: OfApp| async move {
                let app = address::app(&ctx.rest, &a.app).await?;
                let path = format!("{}/exports", app.path());
                json(ctx.rest.write(Method::POST, &path, &json!({})).await?)
            },
        ),
        tool(
            "get_export_status",
            "Read an export's status: queued, running, ready (with a download link that works once, within the hour) \
             or failed (with the reason); a ready archive expires after a day.",
            READS_MINTING,
            |ctx: Ctx, a: OfExport| async move {
                let app = address::app(&ctx.rest, &a.app).await?;
                let path = format!("{}/exports/{}", app.path(), segment(&a.export_id));
                let mut status = ctx.rest.get(&path).await?;
                if let Some(token) = status.get("download").filter(|t| t.is_object()).cloned() {
                    let mut link = download_of(&ctx, &token);
                    link["expires_at"] = token["expires_at"].clone();
                    status["download"] = link;
                }
                json(status)
            },
        ),
    ]
}
