//! Files and deploys: the repository's tree, a file, a commit, a deploy, a rewind, the deploy log, the runtime
//! log and a mirror sync.

use std::collections::BTreeMap;

use axum::http::Method;
use base64::Engine;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{ADDS, Ctx, OfApp, OfChannel, Output, READS, SETS, ToolDef, body, json, tool};
use crate::address::{self, AppAddress, ChannelAddress};
use slipway_rest::deploys::{DeployRequest, checked_request};
use slipway_rest::in_process::{Failure, with_query};

/// `list_files` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ListFiles {
    #[serde(flatten)]
    app: AppAddress,
    /// Branch name or commit sha; `master` when omitted.
    #[serde(default, rename = "ref")]
    reference: Option<String>,
}

/// `read_file` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ReadFile {
    #[serde(flatten)]
    app: AppAddress,
    /// Repository-relative path of the file, e.g. `src/index.js`.
    path: String,
    /// Branch name or commit sha; `master` when omitted.
    #[serde(default, rename = "ref")]
    reference: Option<String>,
}

/// One exact replacement inside an existing file.
#[derive(Debug, Deserialize, JsonSchema, serde::Serialize)]
pub struct Edit {
    /// Text to find; it must occur exactly once unless `replace_all` is true (byte-exact).
    old_string: String,
    /// Text to put in its place.
    new_string: String,
    /// Replace every occurrence.
    #[serde(default)]
    replace_all: bool,
}

/// `commit_files` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct CommitFiles {
    #[serde(flatten)]
    app: AppAddress,
    /// The commit message (not empty).
    message: String,
    /// Whole files to write, path to content; a null content deletes the file.
    #[serde(default)]
    files: Option<BTreeMap<String, Option<String>>>,
    /// Replacements inside existing files, path to a list of edits.
    #[serde(default)]
    edits: Option<BTreeMap<String, Vec<Edit>>>,
    /// Hunks per path: headers `@@` or `@@ <anchor line>`, body lines starting with a space, `-` or `+`; no
    /// line numbers.
    #[serde(default)]
    patches: Option<BTreeMap<String, String>>,
    /// The branch to commit on; `master` when omitted.
    #[serde(default, rename = "ref")]
    reference: Option<String>,
}

/// `deploy` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct Deploy {
    #[serde(flatten)]
    app: AppAddress,
    #[serde(flatten)]
    channel: ChannelAddress,
    /// The commit to deploy: 40 hex digits, or a branch name (its head now). Give this or `ref`; with both,
    /// `sha` wins.
    #[serde(default)]
    sha: Option<String>,
    /// A branch (`dev` or `refs/heads/dev`) whose head is deployed. Give this or `sha`.
    #[serde(default, rename = "ref")]
    reference: Option<String>,
}

/// `get_deploy_log` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct DeployLog {
    #[serde(flatten)]
    app: AppAddress,
    #[serde(flatten)]
    channel: ChannelAddress,
    /// The deploy, as `deploy` answered it (a UUID).
    #[schemars(with = "String", extend("format" = "uuid"))]
    deploy_id: uuid::Uuid,
    /// Byte offset to read from; without it, the log's last `max_bytes`, starting on a whole line.
    #[serde(default)]
    offset: Option<u64>,
    /// Most bytes to return, 1 to 262144 (16384 when omitted).
    #[serde(default)]
    max_bytes: Option<u64>,
}

/// `get_runtime_log` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct RuntimeLog {
    #[serde(flatten)]
    app: AppAddress,
    #[serde(flatten)]
    channel: ChannelAddress,
    /// A shell pipeline run on `app.log` in a network-less sandbox, e.g. `grep -i error app.log | tail -50`
    /// (at most 4096 characters, 30 s). Without it, only the container's status is returned.
    #[serde(default)]
    command: Option<String>,
    /// Which container generation: 0 is the oldest kept; omitted means the newest.
    #[serde(default)]
    container_index: Option<i64>,
}

pub(super) fn tools() -> Vec<ToolDef> {
    vec![
        tool(
            "list_files",
            "List the files of an app's repository at a branch or commit, with their sizes.",
            READS,
            |ctx: Ctx, a: ListFiles| async move {
                let app = address::app(&ctx.rest, &a.app).await?;
                let path = with_query(&format!("{}/tree", app.path()), &[("ref", a.reference)]);
                json(ctx.rest.get(&path).await?)
            },
        ),
        tool(
            "read_file",
            "Read one file of an app's repository at a branch or commit. Text comes back as is; a binary file comes \
             back base64-encoded.",
            READS,
            |ctx: Ctx, a: ReadFile| async move {
                let app = address::app(&ctx.rest, &a.app).await?;
                let path = with_query(
                    &format!("{}/blob", app.path()),
                    &[("ref", a.reference), ("path", Some(a.path))],
                );
                let answer = ctx.rest.send(Method::GET, &path, None).await?;
                match std::str::from_utf8(&answer.body) {
                    Ok(text) => Ok(Output::Text(text.to_owned())),
                    Err(_) => json(json!({
                        "encoding": "base64",
                        "size": answer.body.len(),
                        "content": base64::engine::general_purpose::STANDARD.encode(&answer.body),
                    })),
                }
            },
        ),
        tool(
            "commit_files",
            "Commit changes to an app's repository as one git commit: whole files (`files`), exact replacements \
             (`edits`) and hunks (`patches`); a path belongs to one of them. Answers the new commit's sha.",
            ADDS,
            |ctx: Ctx, a: CommitFiles| async move {
                let app = address::app(&ctx.rest, &a.app).await?;
                let request = body(json!({
                    "ref": a.reference,
                    "message": a.message,
                    "changes": a.files,
                    "edits": a.edits,
                    "patches": a.patches,
                }));
                json(
                    ctx.rest
                        .write(Method::POST, &format!("{}/changeset", app.path()), &request)
                        .await?,
                )
            },
        ),
        tool(
            "deploy",
            "Deploy a commit (`sha`) or a branch's head (`ref`) to a channel. Answers the queued deploy; follow it \
             with `get_deploy_log`.",
            ADDS,
            |ctx: Ctx, a: Deploy| async move {
                // The route's own check, before anything is looked up or queued.
                let (sha, reference) = checked_request(DeployRequest {
                    sha: a.sha,
                    git_ref: a.reference,
                })
                .map_err(|e| Failure::of_error(&e))?;
                let app = address::app(&ctx.rest, &a.app).await?;
                let path = format!("{}/deploy", app.channel_path(&a.channel)?);
                let request = body(json!({"sha": sha, "ref": reference}));
                json(ctx.rest.write(Method::POST, &path, &request).await?)
            },
        ),
        tool(
            "rewind",
            "Put a channel back on its previous successful deploy's image, without a rebuild (not for static apps \
             or a channel with one deployed commit).",
            ADDS,
            |ctx: Ctx, a: OfChannel| async move {
                let app = address::app(&ctx.rest, &a.app).await?;
                let path = format!("{}/rewind", app.channel_path(&a.channel)?);
                json(ctx.rest.write(Method::POST, &path, &json!({})).await?)
            },
        ),
        tool(
            "get_deploy_log",
            "Read a deploy's build and start-up log as plain text. The first line states the deploy's status and \
             which bytes of the log follow; page with `offset` (the next page starts at offset + window bytes).",
            READS,
            |ctx: Ctx, a: DeployLog| async move {
                let app = address::app(&ctx.rest, &a.app).await?;
                let path = with_query(
                    &format!("{}/logs", app.channel_path(&a.channel)?),
                    &[
                        ("deploy", Some(a.deploy_id.to_string())),
                        ("offset", a.offset.map(|o| o.to_string())),
                        ("max_bytes", a.max_bytes.map(|m| m.to_string())),
                    ],
                );
                Ok(Output::Text(deploy_log_text(&ctx.rest.get(&path).await?)))
            },
        ),
        tool(
            "get_runtime_log",
            "Read what a channel's running (or an earlier) container printed: the container's status, and with \
             `command` the output of that shell pipeline run on `app.log` (grep, tail, awk, python3 and node are \
             there; no network).",
            READS,
            |ctx: Ctx, a: RuntimeLog| async move {
                let app = address::app(&ctx.rest, &a.app).await?;
                let path = format!("{}/runtime/log", app.channel_path(&a.channel)?);
                let request =
                    body(json!({"command": a.command, "container_index": a.container_index}));
                json(ctx.rest.write(Method::POST, &path, &request).await?)
            },
        ),
        tool(
            "sync_git",
            "Fetch the external git repository an app mirrors now, instead of waiting for the next scheduled sync \
             (needs the admin role).",
            SETS,
            |ctx: Ctx, a: OfApp| async move {
                let app = address::app(&ctx.rest, &a.app).await?;
                let path = format!("{}/github/sync", app.path());
                json(ctx.rest.write(Method::POST, &path, &json!({})).await?)
            },
        ),
    ]
}

/// A deploy log page as text: a status line, then the window of the log.
fn deploy_log_text(page: &Value) -> String {
    let text = |key: &str| page[key].as_str().unwrap_or("").to_owned();
    let number = |key: &str| page[key].as_u64().unwrap_or(0);
    let (offset, window, total) = (
        number("offset"),
        number("window_bytes"),
        number("log_bytes"),
    );
    let end = if offset + window >= total {
        "end of log".to_owned()
    } else {
        format!("next offset {}", offset + window)
    };
    format!(
        "status: {} (deploy {}, commit {}; bytes {}..{} of {}, {end})\n{}",
        text("status"),
        text("deploy_id"),
        text("git_sha"),
        offset,
        offset + window,
        total,
        text("log"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_line_of_a_deploy_log_states_the_status_and_the_window() {
        let page = json!({"status": "building", "deploy_id": "d", "git_sha": "abc", "offset": 10,
                          "window_bytes": 5, "log_bytes": 30, "log": "step\n"});
        assert_eq!(
            deploy_log_text(&page),
            "status: building (deploy d, commit abc; bytes 10..15 of 30, next offset 15)\nstep\n"
        );
        let last = json!({"status": "success", "deploy_id": "d", "git_sha": "abc", "offset": 25,
                          "window_bytes": 5, "log_bytes": 30, "log": "done\n"});
        assert!(deploy_log_text(&last).starts_with("status: success ("));
        assert!(deploy_log_text(&last).contains("end of log"));
    }
}
