//! A real MCP client for tests: the official Python SDK (`tests/mcp/client.py`), one session per client, driven
//! over a socket that is the client's stdin and stdout. The client process ends when the session is dropped.
//!
//! Importing the SDK takes seconds of CPU, and the tests open dozens of sessions on two cores: one process per test
//! binary imports it once and forks a client per session (`client.py --fork-server`), which connects to a socket
//! the session listens on.

use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::net::UnixListener;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};

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

/// The API on a socket; returns it with the MCP endpoint's URL.
pub async fn serving() -> Result<(super::TestApi, String)> {
    let mut api = super::TestApi::start().await?;
    // The account overview reads /me/usage, which needs the data server to measure databases.
    super::postgres::attach(&mut api)?;
    let base = api.serve().await?;
    Ok((api, format!("{base}/mcp")))
}

/// `initialize`, as a client's first POST sends it.
pub fn initialize() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "curl", "version": "1"}}})
}

/// POSTs `body` to the MCP endpoint at `url` the way a client does, with `token` and `headers`, in raw HTTP (for
/// what an SDK would not send); the status and the answer (JSON when it is).
pub async fn post_raw(
    url: &str,
    token: &str,
    headers: &[(&str, &str)],
    body: impl Into<reqwest::Body>,
) -> Result<(u16, Value)> {
    let mut request = reqwest::Client::new()
        .post(url)
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2025-06-18")
        .body(body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let answer = request.send().await?;
    let status = answer.status().as_u16();
    let text = answer.text().await?;
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    Ok((status, body))
}

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

    /// The message of a refusal.
    pub fn message(&self) -> String {
        assert!(self.is_error, "the tool did not refuse: {}", self.text);
        self.structured["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
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

/// The fork server: its socket, and its stdin, whose end (with this process) tells it to go.
struct ForkServer {
    socket: UnixDatagram,
    _stdin: std::process::ChildStdin,
}

static FORK_SERVER: Mutex<Option<ForkServer>> = Mutex::new(None);

impl ForkServer {
    /// Starts `client.py --fork-server` and waits until it has imported the SDK.
    fn start() -> Result<Self> {
        let path =
            std::env::temp_dir().join(format!("slipway-mcp-{}", uuid::Uuid::new_v4().simple()));
        let socket = UnixDatagram::bind(&path)?;
        let mut child = std::process::Command::new("python3")
            .arg(super::platform::root().join("tests/mcp/client.py"))
            .arg("--fork-server")
            .arg(&path)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .context("cannot start tests/mcp/client.py (python3 with the mcp package)")?;
        let stdin = child.stdin.take().context("fork server stdin")?;
        socket.set_read_timeout(Some(ANSWER_WITHIN))?;
        let mut said = [0u8; 16];
        let (n, peer) = socket
            .recv_from(&mut said)
            .context("the MCP fork server did not say it was ready")?;
        if &said[..n] != b"ready" {
            bail!(
                "the MCP fork server said {:?}",
                String::from_utf8_lossy(&said[..n])
            );
        }
        socket.connect(peer.as_pathname().context("the fork server's address")?)?;
        Ok(Self {
            socket,
            _stdin: stdin,
        })
    }

    /// Where a new session listens for its client.
    fn session_path() -> PathBuf {
        std::env::temp_dir().join(format!(
            "slipway-mcp-session-{}",
            uuid::Uuid::new_v4().simple()
        ))
    }

    /// Has a client forked for a session at `url`, to connect to `session`.
    fn fork(&self, url: &str, token: &str, session: &std::path::Path) -> Result<()> {
        let request = json!({"url": url, "token": token, "session": session});
        self.socket
            .send(&serde_json::to_vec(&request)?)
            .context("ask the MCP fork server for a client")?;
        Ok(())
    }
}

/// Has the fork server (started on first use) fork a client for `url`, to connect to a socket of its own; answers
/// that socket's path.
fn fork_client(url: &str, token: &str) -> Result<(PathBuf, UnixListener)> {
    let mut started = FORK_SERVER
        .lock()
        .map_err(|_| anyhow::anyhow!("the MCP fork server's lock is poisoned"))?;
    let server = match &mut *started {
        Some(server) => server,
        none => none.insert(ForkServer::start()?),
    };
    let path = ForkServer::session_path();
    let listener = UnixListener::bind(&path)?;
    server.fork(url, token, &path)?;
    Ok((path, listener))
}

/// One MCP session of the Python SDK.
pub struct McpClient {
    stdin: OwnedWriteHalf,
    lines: Lines<BufReader<OwnedReadHalf>>,
    /// What `initialize` answered: `{server, protocol, tools}`.
    pub initialized: Value,
}

impl McpClient {
    /// Opens a session at `url` with `Authorization: Bearer token`.
    pub async fn connect(url: &str, token: &str) -> Result<Self> {
        let (url, token) = (url.to_owned(), token.to_owned());
        let (path, listener) =
            tokio::task::spawn_blocking(move || fork_client(&url, &token)).await??;
        let accepted = tokio::time::timeout(ANSWER_WITHIN, listener.accept()).await;
        std::fs::remove_file(&path).ok();
        let (session, _) = accepted.context("the forked MCP client did not connect in time")??;
        let (read, stdin) = session.into_split();
        let lines = BufReader::new(read).lines();
        let mut client = McpClient {
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

    /// `tools/call name arguments`: the tool's answer; a JSON-RPC error instead is an error.
    pub async fn call(&mut self, name: &str, arguments: Value) -> Result<ToolReply> {
        match self.call_answered(name, arguments).await? {
            Ok(reply) => Ok(reply),
            Err(rpc) => bail!("the server answered {name} with JSON-RPC error {rpc:?}"),
        }
    }

    /// `tools/call name arguments` that the server answers with a JSON-RPC error: its `(code, message)`. The
    /// session goes on.
    pub async fn rpc_error(&mut self, name: &str, arguments: Value) -> Result<(i64, String)> {
        match self.call_answered(name, arguments).await? {
            Ok(reply) => bail!("{name} answered as a tool: {}", reply.text),
            Err(rpc) => Ok(rpc),
        }
    }

    /// The tool's answer, or the JSON-RPC error's `(code, message)`.
    async fn call_answered(
        &mut self,
        name: &str,
        arguments: Value,
    ) -> Result<std::result::Result<ToolReply, (i64, String)>> {
        self.ask(json!({"op": "call", "name": name, "arguments": arguments}))
            .await?;
        let answer = self.answer().await?;
        if let Some(rpc) = answer.get("rpc_error") {
            let message = rpc["message"].as_str().unwrap_or_default().to_owned();
            return Ok(Err((rpc["code"].as_i64().unwrap_or_default(), message)));
        }
        Ok(Ok(ToolReply {
            is_error: answer["is_error"].as_bool().unwrap_or(true),
            text: answer["text"].as_str().unwrap_or_default().to_owned(),
            structured: answer["structured"].clone(),
        }))
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
            bail!("the MCP client ended without answering (its error is in the test's output)");
        };
        let answer: Value =
            serde_json::from_str(&line).with_context(|| format!("not JSON: {line}"))?;
        if let Some(failure) = answer.get("failure") {
            bail!("the MCP client failed: {failure}");
        }
        Ok(answer)
    }
}
