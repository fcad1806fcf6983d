//! Runtime logs: what the runtime-log route answers, from the generations the operator's log archive recorded
//! (`slipway_store::db::runtime_logs`), and the sandbox a command runs in ([`slipway_core::log_sandbox`]). One service function for every
//! surface that reads a runtime log (the REST route, and the MCP tool that wraps it).

use chrono::SecondsFormat;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use slipway_core::error::ApiError;
use slipway_core::state::AppState;
use slipway_store::db::runtime_logs::{self, Generation};

use slipway_core::log_sandbox::{COMMAND_LIMIT, SandboxError};

/// What a caller asks of a runtime log.
#[derive(Debug, Default, Clone, serde::Deserialize, utoipa::ToSchema)]
pub struct RuntimeLogRequest {
    /// A shell pipeline run on `app.log` in a network-less sandbox (at most 4096 characters). Without it, only the
    /// status facts are returned.
    pub command: Option<String>,
    /// The generation to read; the newest when omitted.
    pub container_index: Option<i32>,
}

/// Runtime log response.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RuntimeLog {
    /// The generation read.
    pub container_index: i32,
    /// The runtime's id of the container instance.
    pub container_id: String,
    /// The pod the container runs (ran) in.
    pub container_name: String,
    /// Whether it is running.
    pub running: bool,
    /// `live` while the container runs, `archived` once it ended.
    pub source: String,
    /// The container's state: `running`, `waiting` or `exited`.
    pub status: String,
    /// The app's own exit code; null while it runs.
    pub exit_code: Option<i32>,
    /// True when the app passed the plan's memory limit and was killed.
    pub oom_killed: bool,
    /// Generations of the same pod before this one.
    pub restart_count: i32,
    /// When the container started.
    pub started_at: Option<String>,
    /// When it ended; null while it runs.
    pub finished_at: Option<String>,
    /// The channel's readable generations, oldest first.
    pub available_indices: Vec<i32>,
    /// Size of the log: the whole kept log without a command, what the command saw with one.
    pub log_bytes: u64,
    /// The command's combined stdout and stderr, at most 256 KiB; empty without a command.
    pub output: String,
    /// The command's exit code; null when no command ran or it hit the time limit.
    pub command_exit_code: Option<i32>,
    /// Whether the command hit the 30-second limit (its output so far is returned).
    pub timed_out: bool,
    /// Whether the command's output passed the cap.
    pub truncated: bool,
}

/// The runtime log of `channel` per `request`, for `account`: 404 when it has no such generation (nothing readable
/// yet), 400 for a command that is too long, 429 while the account has its share of commands running, 503 when no
/// sandbox can answer.
pub async fn read(
    state: &AppState,
    account: Uuid,
    channel: Uuid,
    request: RuntimeLogRequest,
) -> Result<RuntimeLog, ApiError> {
    if let Some(command) = &request.command
        && command.chars().count() > COMMAND_LIMIT
    {
        return Err(ApiError::bad_request(format!(
            "command is {} characters; at most {COMMAND_LIMIT} are allowed",
            command.chars().count()
        )));
    }
    let generations = runtime_logs::generations(state.db(), channel).await?;
    let chosen = match request.container_index {
        Some(index) => generations.iter().find(|g| g.container_index == index),
        None => generations.last(),
    }
    .ok_or_else(|| nothing_readable(request.container_index))?;
    let mut log = view(chosen, &generations);
    if let Some(command) = request.command.as_deref().filter(|c| !c.trim().is_empty()) {
        let sandbox = state.log_sandbox().ok_or_else(|| {
            ApiError::Unavailable("no log sandbox is configured on this platform".into())
        })?;
        let run = sandbox
            .run(account, state.db().clone(), chosen.id, command.to_owned())
            .await
            .map_err(unavailable)?;
        log.log_bytes = run.log_bytes;
        log.output = String::from_utf8_lossy(&run.output).into_owned();
        log.command_exit_code = run.exit_code;
        log.timed_out = run.timed_out;
        log.truncated = run.truncated;
    }
    Ok(log)
}

/// The 503 for a command no sandbox ran. What the cluster or the database said stays in the API's log: it names
/// the platform's namespaces and accounts, which are none of the caller's business.
fn unavailable(e: SandboxError) -> ApiError {
    match e {
        SandboxError::Busy => ApiError::Unavailable(e.to_string()),
        SandboxError::AccountBusy => {
            ApiError::Throttled(e.to_string(), std::time::Duration::from_secs(5))
        }
        SandboxError::NotStarted(_) => {
            tracing::warn!(error = %e, "runtime-log command not run");
            ApiError::Unavailable("the log sandbox did not start in time; retry later".into())
        }
        SandboxError::NotIsolated => {
            tracing::error!(error = %e, "runtime-log command refused");
            ApiError::Unavailable(e.to_string())
        }
        SandboxError::Kube(_) | SandboxError::Database(_) => {
            tracing::error!(error = %e, "runtime-log command failed");
            ApiError::Unavailable("the log sandbox failed; retry later".into())
        }
    }
}

fn nothing_readable(index: Option<i32>) -> ApiError {
    ApiError::Missing(
        "not_found",
        match index {
            Some(i) => format!("the channel has no readable container generation {i}"),
            None => "the channel has no container output yet".into(),
        },
    )
}

fn view(g: &Generation, all: &[Generation]) -> RuntimeLog {
    let time = |t: &chrono::DateTime<chrono::Utc>| t.to_rfc3339_opts(SecondsFormat::Secs, true);
    RuntimeLog {
        container_index: g.container_index,
        container_id: g.container_id.clone(),
        container_name: g.pod_name.clone(),
        running: g.running,
        source: if g.running { "live" } else { "archived" }.to_owned(),
        status: g.status.clone(),
        exit_code: g.exit_code,
        oom_killed: g.oom_killed,
        restart_count: g.restart_count,
        started_at: g.started_at.as_ref().map(time),
        finished_at: g.finished_at.as_ref().map(time),
        available_indices: all.iter().map(|g| g.container_index).collect(),
        log_bytes: u64::try_from(g.log_bytes).unwrap_or(0),
        output: String::new(),
        command_exit_code: None,
        timed_out: false,
        truncated: false,
    }
}

/// Forgets generations past their retention, every hour.
pub async fn prune_every_hour(db: sqlx::PgPool) {
    let mut every = tokio::time::interval(std::time::Duration::from_secs(3600));
    loop {
        every.tick().await;
        match runtime_logs::prune(&db).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(
                generations = n,
                "runtime logs past their retention forgotten"
            ),
            Err(e) => tracing::warn!(error = %e, "runtime log pruning failed"),
        }
    }
}
