//! A real MCP client for tests: the official Python SDK (`tests/mcp/client.py`), one session per client, driven
//! over its stdin and stdout. The process is killed when the client is dropped.

use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

/// Longest one answer may take (a tool call that reads a route).
const ANSWER_WITHIN: Duration = Duration::from_secs(90);

/// The spec's 54 tools, in its order.
pub const SPEC_TOOLS: [&str; 54] = [
    "list_apps",
    "create_app",
    "get_app",
    "delete_app",
    "list_channels",
    "create_channel",
    "delete_channel",
    "list_files",
    "read_file",
    "commit_files",
    "deploy",
    "rewind",
    "get_deploy_log",
    "get_runtime_log",
    "sync_git",
    "set_env",
    "delete_env",
    "list_env",
    "get_deploy_env",
    "list_channel_snapshots",
    "restore_channel_db",
    "download_channel_snapshot",
    "get_blob_credentials",
    "get_blob_usage",
    "restore_channel_blobs",
    "download_channel_blobs",
    "add_custom_domain",
    "verify_custom_domain",
    "list_custom_domains",
    "remove_custom_domain",
    "expose_port",
    "list_exposed_ports",
    "unexpose_port",
    "get_credentials",
    "register_ssh_key",
    "list_ssh_keys",
    "delete_ssh_key",
    "request_email_verification",
    "complete_email_verification",
    "get_account_overview",
    "get_app_stats",
    "get_app_health",
    "list_activity",
    "export_data",
    "get_export_status",
    "submit_feedback",
    "list_feedback",
    "create_thread",
    "list_threads",
    "add_note",
    "list_notes",
    "vote_note",
    "add_app_feedback",
    "list_app_feedback",
];

/// A tool's answer as the client read it.
#[derive(Debug, Clone)]
pub struct ToolReply {
    pub is_error: bool,
    pub text: String,
    pub structured: Value,
}

impl ToolReply {
    /// The answer of a call that must succeed, as JSON (structured content, else the text parsed).
    pub fn ok(&self) -> Value {
        assert!(!self.is_error, "the tool refused: {}", self.text);
        if self.structured.is_null() {
            serde_json::from_str(&self.text).unwrap_or(Value::String(self.text.clone()))
        } else {
            self.structured.clone()
        }
    }

    /// `(status, code)` of a refusal.
    pub fn refusal(&self) -> (u64, String) {
        assert!(self.is_error, "the tool did not refuse: {}", self.text);
        (
            self.structured["status"].as_u64().unwrap_or_default(),
            self.structured["error"]["code"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        )
    }
}

/// One MCP session of the Python SDK.
pub struct McpClient {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    /// What `initialize` answered: `{server, protocol, tools}`.
    pub initialized: Value,
}

impl McpClient {
    /// Opens a session at `url` with `Authorization: Bearer token`.
    pub async fn connect(url: &str, token: &str) -> Result<Self> {
        let mut child = tokio::process::Command::new("python3")
            .arg(super::platform::root().join("tests/mcp/client.py"))
            .arg(url)
            .arg(token)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .context("cannot start tests/mcp/client.py (python3 with the mcp package)")?;
        let stdin = child.stdin.take().context("client stdin")?;
        let lines = BufReader::new(child.stdout.take().context("client stdout")?).lines();
        let mut client = McpClient {
            child,
            stdin,
            lines,
            initialized: Value::Null,
        };
        client.initialized = client.answer().await?["initialized"].clone();
        Ok(client)
    }

    /// `tools/list`.
    pub async fn list_tools(&mut self) -> Result<Vec<Value>> {
        self.ask(json!({"op": "list"})).await?;
        let answer = self.answer().await?;
        Ok(answer["tools"].as_array().cloned().unwrap_or_default())
    }

    /// `tools/call name arguments`.
    pub async fn call(&mut self, name: &str, arguments: Value) -> Result<ToolReply> {
        self.ask(json!({"op": "call", "name": name, "arguments": arguments}))
            .await?;
        let answer = self.answer().await?;
        Ok(ToolReply {
            is_error: answer["is_error"].as_bool().unwrap_or(true),
            text: answer["text"].as_str().unwrap_or_default().to_owned(),
            structured: answer["structured"].clone(),
        })
    }

    async fn ask(&mut self, request: Value) -> Result<()> {
        self.stdin
            .write_all(format!("{request}\n").as_bytes())
            .await?;
        Ok(self.stdin.flush().await?)
    }

    async fn answer(&mut self) -> Result<Value> {
        let line = tokio::time::timeout(ANSWER_WITHIN, self.lines.next_line())
            .await
            .context("the MCP client did not answer in time")??;
        let Some(line) = line else {
            let status = self.child.wait().await?;
            bail!("the MCP client ended ({status}) without answering");
        };
        let answer: Value =
            serde_json::from_str(&line).with_context(|| format!("not JSON: {line}"))?;
        if let Some(failure) = answer.get("failure") {
            bail!("the MCP client failed: {failure}");
        }
        Ok(answer)
    }
}
