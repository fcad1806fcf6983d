//! One fetch from the external repository: the API makes the SSH connection itself (to an address already
//! checked, pinning or checking the host key, authenticating with the deploy key), starts `git-upload-pack` on the
//! server, and runs the real `git fetch` with this binary's `mirror-relay` as its SSH command, which carries git's
//! bytes over a private Unix socket to that channel. git never resolves a name or opens a connection, and the
//! private key never leaves this process.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use russh::ChannelMsg;
use russh::client;
use russh::keys::{HashAlg, PrivateKey, PrivateKeyWithHashAlg, PublicKey, PublicKeyOrCertificate};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpStream, UnixListener};

use super::remote::Remote;

/// Environment variable naming the socket the relay connects to.
pub const SOCKET_ENV: &str = "SLIPWAY_MIRROR_SOCKET";
/// The URL git is given: any SSH URL does, since the relay ignores where git thinks it connects.
const GIT_URL: &str = "ssh://mirror.invalid/repository";
/// How long one connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Most of the server's stderr and git's kept for an error message.
const STDERR_CAP: usize = 16 * 1024;

/// What a fetch needs.
pub struct Fetch<'a> {
    /// The external repository.
    pub remote: &'a Remote,
    /// Addresses of its server, already vetted; tried in order.
    pub addrs: &'a [IpAddr],
    /// The deploy key.
    pub key: PrivateKey,
    /// The host key pinned earlier, if any.
    pub pinned: Option<PublicKey>,
    /// The app's bare repository.
    pub repo: &'a Path,
    /// The relay program (this binary).
    pub relay: &'a Path,
    /// `-c` options and environment that publish the fetch's ref updates (a repository in object storage);
    /// empty for one on a volume.
    pub publish: (&'a [String], &'a [(&'static str, String)]),
}

/// How a fetch went.
pub struct Fetched {
    /// The host key the server presented, once a handshake got that far.
    pub host_key: Option<PublicKey>,
    /// The repository's branches and tags afterwards, or why the fetch failed (a message for the owner).
    pub outcome: Result<BTreeMap<String, String>, String>,
}

/// Connects, authenticates and fetches every branch and tag into `fetch.repo`, pruning what the server no
/// longer has.
pub async fn fetch(fetch: Fetch<'_>) -> Fetched {
    let seen = Arc::new(Mutex::new(None));
    let outcome = run(&fetch, &seen).await;
    let host_key = seen
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take();
    Fetched { host_key, outcome }
}

async fn run(
    fetch: &Fetch<'_>,
    seen: &Arc<Mutex<Option<PublicKey>>>,
) -> Result<BTreeMap<String, String>, String> {
    let remote = fetch.remote;
    let server = format!("{}:{}", remote.host, remote.port);
    let stream = connect(fetch.addrs, remote.port, &server).await?;
    let checker = HostKeyCheck {
        pinned: fetch.pinned.clone(),
        seen: seen.clone(),
    };
    let config = Arc::new(client::Config {
        inactivity_timeout: Some(Duration::from_secs(120)),
        ..Default::default()
    });
    let mut session = match client::connect_stream(config, stream, checker).await {
        Ok(session) => session,
        Err(e) => return Err(handshake_error(&server, fetch.pinned.as_ref(), seen, &e)),
    };
    let key = PrivateKeyWithHashAlg::new(Arc::new(fetch.key.clone()), None);
    let auth = session
        .authenticate_publickey(remote.user.as_str(), key)
        .await
        .map_err(|e| format!("SSH authentication with {server} failed: {e}"))?;
    if !auth.success() {
        return Err(format!(
            "{server} refused the deploy key for user {}: add the public key of this mirror to the repository \
             (read access is enough), then sync again",
            remote.user
        ));
    }
    let channel = session
        .channel_open_session()
        .await
        .map_err(|e| format!("could not open an SSH session on {server}: {e}"))?;
    let result = relay_git(fetch, channel, &server).await;
    let _ = session
        .disconnect(russh::Disconnect::ByApplication, "", "en")
        .await;
    result?;
    refs(fetch.repo).await
}

/// A TCP connection to the first of `addrs` that answers.
async fn connect(addrs: &[IpAddr], port: u16, server: &str) -> Result<TcpStream, String> {
    let mut last = format!("{server} has no address");
    for ip in addrs {
        let addr = SocketAddr::new(ip.to_canonical(), port);
        match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => {
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Ok(Err(e)) => last = format!("could not connect to {server} ({addr}): {e}"),
            Err(_) => last = format!("could not connect to {server} ({addr}): timed out"),
        }
    }
    Err(last)
}

/// Accepts the pinned host key only, or any key when none is pinned yet; remembers what was offered.
struct HostKeyCheck {
    pinned: Option<PublicKey>,
    seen: Arc<Mutex<Option<PublicKey>>>,
}

impl client::Handler for HostKeyCheck {
    type Error = russh::Error;

    async fn check_server_key(
        &mut self,
        offered: &PublicKeyOrCertificate,
    ) -> Result<bool, Self::Error> {
        let PublicKeyOrCertificate::PublicKey { key, .. } = offered else {
            return Ok(false);
        };
        *self
            .seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(key.clone());
        Ok(self
            .pinned
            .as_ref()
            .is_none_or(|pinned| pinned.key_data() == key.key_data()))
    }
}

fn handshake_error(
    server: &str,
    pinned: Option<&PublicKey>,
    seen: &Arc<Mutex<Option<PublicKey>>>,
    e: &russh::Error,
) -> String {
    let offered = seen
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    match (pinned, offered) {
        (Some(pinned), Some(offered)) if pinned.key_data() != offered.key_data() => format!(
            "the host key of {server} changed: pinned {}, offered {}. Someone may be intercepting the connection; \
             if the server's key really changed, disconnect the mirror and connect it again",
            pinned.fingerprint(HashAlg::Sha256),
            offered.fingerprint(HashAlg::Sha256)
        ),
        (None, None) => format!(
            "SSH handshake with {server} failed: {e} (the server offered no plain host key)"
        ),
        _ => format!("SSH handshake with {server} failed: {e}"),
    }
}

/// A private directory for the relay's socket, removed when dropped.
struct SocketDir(PathBuf);

impl SocketDir {
    fn create() -> std::io::Result<Self> {
        use std::os::unix::fs::DirBuilderExt;
        let dir =
            std::env::temp_dir().join(format!("slipway-mirror-{}", uuid::Uuid::new_v4().simple()));
        std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        Ok(Self(dir))
    }
}

impl Drop for SocketDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `git fetch` with the relay as its SSH command and joins the relay's connection to `channel`, on which
/// `git-upload-pack` runs on the server.
async fn relay_git(
    fetch: &Fetch<'_>,
    channel: russh::Channel<client::Msg>,
    server: &str,
) -> Result<(), String> {
    let internal = |what: &str, e: &dyn std::fmt::Display| {
        tracing::error!(error = %e, "mirror fetch: {what}");
        format!("the fetch could not start here ({what}); try again later")
    };
    let dir = SocketDir::create().map_err(|e| internal("socket directory", &e))?;
    let socket = dir.0.join("relay.sock");
    let listener = UnixListener::bind(&socket).map_err(|e| internal("socket", &e))?;
    let mut git = git_fetch(fetch.repo, fetch.relay, &socket, fetch.publish)
        .spawn()
        .map_err(|e| internal("git", &e))?;
    let mut git_stderr = git.stderr.take();
    let git_errors = async move {
        let mut buf = Vec::new();
        if let Some(err) = git_stderr.as_mut() {
            let _ = err.take(STDERR_CAP as u64).read_to_end(&mut buf).await;
        }
        buf
    };
    let carried = async {
        // The relay's first line is the GIT_PROTOCOL git asked for; the rest is the protocol itself.
        let (relay, _) = listener
            .accept()
            .await
            .map_err(|e| internal("accept", &e))?;
        let (relay_read, mut relay_write) = relay.into_split();
        let mut relay_read = BufReader::new(relay_read);
        let mut protocol = String::new();
        (&mut relay_read)
            .take(256)
            .read_line(&mut protocol)
            .await
            .map_err(|e| internal("relay header", &e))?;
        let protocol = protocol.trim();
        if slipway_repository::protocol::valid(protocol) {
            let _ = channel.set_env(false, "GIT_PROTOCOL", protocol).await;
        }
        channel
            .exec(true, fetch.remote.upload_pack_command())
            .await
            .map_err(|e| format!("could not start git-upload-pack on {server}: {e}"))?;
        let (mut from_server, to_server) = channel.split();
        let upstream = async {
            let mut writer = to_server.make_writer();
            let _ = tokio::io::copy(&mut relay_read, &mut writer).await;
            let _ = writer.shutdown().await;
            let _ = to_server.eof().await;
        };
        let downstream = async {
            let mut server_errors = Vec::new();
            let mut exit = None;
            while let Some(msg) = from_server.wait().await {
                match msg {
                    ChannelMsg::Data { data } => {
                        // git stopped reading: nothing more to carry.
                        let carried = relay_write.write_all(&data).await;
                        if carried.is_err() {
                            break;
                        }
                    }
                    ChannelMsg::ExtendedData { data, ext: 1 } => {
                        let room = STDERR_CAP.saturating_sub(server_errors.len());
                        server_errors.extend_from_slice(&data[..data.len().min(room)]);
                    }
                    ChannelMsg::ExitStatus { exit_status } => exit = Some(exit_status),
                    ChannelMsg::Eof => {
                        let _ = relay_write.shutdown().await;
                    }
                    ChannelMsg::Close => break,
                    _ => {}
                }
            }
            let _ = relay_write.shutdown().await;
            (exit, server_errors)
        };
        let ((), result) = tokio::join!(upstream, downstream);
        Ok::<_, String>(result)
    };
    // git ending first (it may never have started the relay) ends the wait for the channel after a grace period.
    let ended = async {
        tokio::pin!(carried);
        tokio::select! {
            carried = &mut carried => (Some(carried), git.wait().await),
            status = git.wait() => {
                let carried = tokio::time::timeout(Duration::from_secs(5), &mut carried).await.ok();
                (carried, status)
            }
        }
    };
    let ((carried, status), git_errors) = tokio::join!(ended, git_errors);
    let status = status.map_err(|e| internal("waiting for git", &e))?;
    let (exit, server_errors) = match carried {
        Some(Ok(r)) => r,
        Some(Err(e)) => return Err(e),
        None => (None, Vec::new()),
    };
    if status.success() && exit.is_none_or(|code| code == 0) {
        return Ok(());
    }
    let said = |bytes: &[u8]| {
        String::from_utf8_lossy(bytes)
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join("; ")
    };
    let mut message = format!("git fetch from {server} failed");
    let server_said = said(&server_errors);
    if !server_said.is_empty() {
        message.push_str(&format!(": the server said: {server_said}"));
    }
    let git_said = said(&git_errors);
    if !git_said.is_empty() {
        message.push_str(&format!(" (git: {git_said})"));
    }
    Err(message)
}

/// `git fetch` of every branch and tag into the bare repository, over the relay, with nothing from the
/// environment's git configuration and no transport but SSH.
fn git_fetch(
    repo: &Path,
    relay: &Path,
    socket: &Path,
    (publish_config, publish_env): (&[String], &[(&'static str, String)]),
) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new("git");
    cmd.arg("-C")
        .arg(repo)
        .args(publish_config)
        .args([
            "-c",
            "protocol.allow=never",
            "-c",
            "protocol.ssh.allow=always",
        ])
        .args(["-c", "fetch.recurseSubmodules=false", "-c", "core.askPass="])
        .args([
            "fetch",
            "--prune",
            "--no-write-fetch-head",
            "--quiet",
            GIT_URL,
        ])
        .args(["+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"])
        .env_clear()
        .env(
            "PATH",
            std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()),
        )
        .env("HOME", "/nonexistent")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_ALLOW_PROTOCOL", "ssh")
        .env("GIT_SSH_VARIANT", "ssh")
        .env(
            "GIT_SSH_COMMAND",
            format!("{} mirror-relay", shell_word(&relay.to_string_lossy())),
        )
        .env(SOCKET_ENV, socket)
        .envs(publish_env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd
}

/// `s` single-quoted for the shell git runs its SSH command with.
fn shell_word(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The repository's branches and tags (tags peeled to what they point at).
async fn refs(repo: &Path) -> Result<BTreeMap<String, String>, String> {
    let out = tokio::process::Command::new("git")
        .arg("-C")
        .arg(repo)
        .args([
            "for-each-ref",
            "--format=%(refname) %(objectname) %(*objectname)",
            "refs/heads",
            "refs/tags",
        ])
        .output()
        .await
        .map_err(|e| format!("could not list the mirrored refs: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "could not list the mirrored refs: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| {
            let mut parts = line.split(' ');
            let (name, object, peeled) = (parts.next()?, parts.next()?, parts.next().unwrap_or(""));
            let sha = if peeled.is_empty() { object } else { peeled };
            Some((name.to_owned(), sha.to_owned()))
        })
        .collect())
}
