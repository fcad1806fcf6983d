//! Git over SSH (`git@<git_host>:<owner>/<app>.git`) with russh. A connection authenticates with a public key
//! registered on an account (`POST /ssh-keys`); the SSH username is ignored, the key names the account. The only
//! thing a session may do is one `exec` of `git-upload-pack '<owner>/<app>.git'` or `git-receive-pack '...'`,
//! which runs the same git program the HTTP transport runs, on the same repository, with the channel's data as
//! its stdin and its stdout and stderr as the channel's data and extended data. Shells, terminals, subsystems,
//! port forwarding and every other command are refused.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use russh::keys::HashAlg;
pub use russh::keys::PrivateKey;
use russh::server::{
    Auth, ChannelOpenHandle, Msg, PublicKeyOffer, Server as _, Session, VerifiedPublicKey,
};
use russh::{Channel, ChannelId, MethodKind, MethodSet};
use tokio::io::AsyncWriteExt;
use uuid::Uuid;

use super::service::{self, Granted, Refusal, Service};
use slipway_core::state::AppState;

/// Exit status of a refused command, as git's own tools use for fatal errors.
const REFUSED: u32 = 128;

/// Loads the host key at `path`, or creates an Ed25519 key there (mode 0600) on first start.
pub fn load_or_create_host_key(path: &Path) -> anyhow::Result<PrivateKey> {
    if let Some(key) = read_host_key(path)? {
        return Ok(key);
    }
    let key = new_host_key();
    write_host_key(path, &key)?;
    tracing::info!(path = %path.display(), "generated an SSH host key");
    Ok(key)
}

/// The host key at `path` (OpenSSH format), if there is one.
pub fn read_host_key(path: &Path) -> anyhow::Result<Option<PrivateKey>> {
    if !path.exists() {
        return Ok(None);
    }
    PrivateKey::read_openssh_file(path)
        .map(Some)
        .with_context(|| format!("read the SSH host key {}", path.display()))
}

/// `key` as OpenSSH's private key text, as it is kept in a file or a Secret.
pub fn host_key_text(key: &PrivateKey) -> anyhow::Result<String> {
    Ok(key
        .to_openssh(russh::keys::ssh_key::LineEnding::LF)
        .context("encode the SSH host key")?
        .to_string())
}

/// The host key in OpenSSH's private key `text`.
pub fn parse_host_key(text: &str) -> anyhow::Result<PrivateKey> {
    PrivateKey::from_openssh(text).context("read the SSH host key")
}

/// A new Ed25519 host key.
pub fn new_host_key() -> PrivateKey {
    let seed: [u8; 32] = rand::RngExt::random(&mut rand::rng());
    PrivateKey::from(russh::keys::ssh_key::private::Ed25519Keypair::from_seed(
        &seed,
    ))
}

/// Writes `key` to `path` (OpenSSH format, mode 0600) in place of what is there, whole or not at all.
pub fn write_host_key(path: &Path, key: &PrivateKey) -> anyhow::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    }
    let fresh = path.with_extension("new");
    key.write_openssh_file(&fresh, russh::keys::ssh_key::LineEnding::LF)
        .with_context(|| format!("write the SSH host key {}", fresh.display()))?;
    std::fs::rename(&fresh, path)
        .with_context(|| format!("move the SSH host key to {}", path.display()))
}

/// The russh configuration: public keys only, the given host key.
pub fn config(host_key: PrivateKey) -> russh::server::Config {
    russh::server::Config {
        methods: MethodSet::from(&[MethodKind::PublicKey][..]),
        keys: vec![host_key],
        auth_rejection_time: std::time::Duration::from_millis(300),
        auth_rejection_time_initial: Some(std::time::Duration::ZERO),
        inactivity_timeout: Some(std::time::Duration::from_secs(600)),
        nodelay: true,
        ..Default::default()
    }
}

/// Serves git over SSH on `listener` until the task is dropped.
pub async fn serve(
    state: AppState,
    listener: tokio::net::TcpListener,
    host_key: PrivateKey,
) -> anyhow::Result<()> {
    let addr = listener.local_addr()?;
    tracing::info!(%addr, "serving git over SSH");
    let mut server = Server { state };
    server
        .run_on_socket(Arc::new(config(host_key)), &listener)
        .await
        .context("serve SSH")
}

struct Server {
    state: AppState,
}

impl russh::server::Server for Server {
    type Handler = Connection;

    fn new_client(&mut self, peer: Option<std::net::SocketAddr>) -> Connection {
        Connection {
            state: self.state.clone(),
            peer,
            account: None,
            channels: HashMap::new(),
            protocol: HashMap::new(),
        }
    }

    fn handle_session_error(&mut self, error: russh::Error) {
        tracing::debug!(%error, "SSH session ended with an error");
    }
}

/// One SSH connection.
pub struct Connection {
    state: AppState,
    peer: Option<std::net::SocketAddr>,
    /// The account the key belongs to: (id, username).
    account: Option<(Uuid, String)>,
    /// Session channels opened and not yet running a command.
    channels: HashMap<ChannelId, Channel<Msg>>,
    /// `GIT_PROTOCOL` sent per channel (protocol v2).
    protocol: HashMap<ChannelId, String>,
}

impl Connection {
    async fn account_of(
        &self,
        key: &russh::keys::PublicKey,
    ) -> Result<Option<(Uuid, String)>, russh::Error> {
        let fingerprint = key.fingerprint(HashAlg::Sha256).to_string();
        match slipway_store::db::ssh_keys::owner_of(self.state.db(), &fingerprint).await {
            Ok(found) => Ok(found),
            Err(e) => {
                tracing::error!(error = %e, "looking up an SSH key failed");
                Ok(None)
            }
        }
    }

    /// Tells the client why its command is refused (on stderr, as git prints it) and ends the channel.
    async fn refuse(
        &mut self,
        channel: ChannelId,
        message: &str,
        session: &mut Session,
    ) -> Result<(), russh::Error> {
        self.channels.remove(&channel);
        session.channel_success(channel)?;
        session.extended_data(channel, 1, fatal(message))?;
        session.exit_status_request(channel, REFUSED)?;
        session.eof(channel)?;
        session.close(channel)?;
        Ok(())
    }
}

/// Parses `git-upload-pack '<owner>/<app>.git'` (the path may start with `/`, and may be unquoted).
pub fn parse_command(command: &str) -> Option<(Service, String, String)> {
    let (verb, arg) = command.trim().split_once(' ')?;
    let service = Service::parse(verb)?;
    let arg = arg.trim();
    let path = match arg.strip_prefix('\'').and_then(|a| a.strip_suffix('\'')) {
        Some(quoted) => quoted,
        None => arg,
    };
    if path.contains(['\'', '"', '\\', ' ', '\n', ';', '$', '`']) {
        return None;
    }
    let path = path.strip_prefix('/').unwrap_or(path);
    let (owner, repo) = path.split_once('/')?;
    if repo.contains('/')
        || [owner, repo]
            .iter()
            .any(|c| c.is_empty() || c.starts_with('.'))
    {
        return None;
    }
    Some((service, owner.to_owned(), repo.to_owned()))
}

impl russh::server::Handler for Connection {
    type Error = russh::Error;

    async fn auth_publickey_offered(
        &mut self,
        _user: &str,
        offer: PublicKeyOffer<'_>,
    ) -> Result<Auth, Self::Error> {
        Ok(match self.account_of(offer.public_key).await? {
            Some(_) => Auth::Accept,
            None => Auth::reject(),
        })
    }

    async fn auth_publickey(
        &mut self,
        _user: &str,
        key: VerifiedPublicKey<'_>,
    ) -> Result<Auth, Self::Error> {
        match self.account_of(key.public_key).await? {
            Some(account) => {
                tracing::debug!(user = %account.1, peer = ?self.peer, "SSH key accepted");
                self.account = Some(account);
                Ok(Auth::Accept)
            }
            None => Ok(Auth::reject()),
        }
    }

    async fn channel_open_session(
        &mut self,
        channel: Channel<Msg>,
        reply: ChannelOpenHandle,
        _session: &mut Session,
    ) -> Result<(), Self::Error> {
        if self.channels.len() >= 8 {
            return Ok(()); // dropping the handle rejects the channel
        }
        self.channels.insert(channel.id(), channel);
        reply.accept().await;
        Ok(())
    }

    async fn env_request(
        &mut self,
        channel: ChannelId,
        name: &str,
        value: &str,
        _session: &mut Session,
    ) -> Result<(), Self::Error> {
        if name == "GIT_PROTOCOL" {
            self.protocol.insert(channel, value.to_owned());
        }
        Ok(())
    }

    async fn pty_request(
        &mut self,
        channel: ChannelId,
        _term: &str,
        _cols: u32,
        _rows: u32,
        _pw: u32,
        _ph: u32,
        _modes: &[(russh::Pty, u32)],
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        session.channel_failure(channel)
    }

    async fn shell_request(
        &mut self,
        channel: ChannelId,
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        let name = self
            .account
            .as_ref()
            .map(|a| a.1.clone())
            .unwrap_or_default();
        self.refuse(
            channel,
            &format!("hi {name}: this host serves git only (git clone git@<host>:<owner>/<app>.git); there is no shell"),
            session,
        )
        .await
    }

    async fn subsystem_request(
        &mut self,
        channel: ChannelId,
        _name: &str,
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        session.channel_failure(channel)
    }

    async fn exec_request(
        &mut self,
        channel: ChannelId,
        data: &[u8],
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        let Some((user_id, username)) = self.account.clone() else {
            return session.channel_failure(channel);
        };
        let command = String::from_utf8_lossy(data).into_owned();
        let Some((service, owner, repo)) = parse_command(&command) else {
            tracing::info!(user = %username, command = %command, "SSH command refused");
            return self
                .refuse(
                    channel,
                    "only git-upload-pack and git-receive-pack '<owner>/<app>.git' run here",
                    session,
                )
                .await;
        };
        let Some(chan) = self.channels.remove(&channel) else {
            return session.channel_failure(channel);
        };
        session.channel_success(channel)?;
        let protocol = self.protocol.remove(&channel);
        // Authorizing may wait (a repository's cache syncing behind a push on this replica): it runs beside the
        // session's loop, so the connection's other channels keep moving meanwhile.
        let state = self.state.clone();
        tokio::spawn(async move {
            let refusal = match service::authorize(
                &state, user_id, &username, &owner, &repo, service,
            )
            .await
            {
                Ok(granted) => return run(chan, service, granted, protocol).await,
                Err(Refusal::NotFound) => format!("repository '{owner}/{repo}' not found"),
                Err(Refusal::Forbidden(m)) => m,
                Err(Refusal::Internal(e)) => {
                    tracing::error!(
                        error = format!("{e:#}"),
                        "authorizing an SSH git command failed"
                    );
                    "internal error".to_owned()
                }
            };
            refuse_on(&chan, &refusal).await;
        });
        Ok(())
    }

    async fn channel_close(
        &mut self,
        channel: ChannelId,
        _session: &mut Session,
    ) -> Result<(), Self::Error> {
        self.channels.remove(&channel);
        self.protocol.remove(&channel);
        Ok(())
    }
}

/// A refusal as git prints its own on stderr.
fn fatal(message: &str) -> Vec<u8> {
    format!("fatal: {message}\n").into_bytes()
}

/// Tells the client on `channel` why its command does not run ([`fatal`]) and closes the channel.
async fn refuse_on(channel: &Channel<Msg>, message: &str) {
    let _ = channel.extended_data_bytes(1, fatal(message)).await;
    let _ = channel.exit_status(REFUSED).await;
    let _ = channel.eof().await;
    let _ = channel.close().await;
}

/// Runs `service` on `repo` with the channel as its stdio, then reports its exit status and closes the channel.
async fn run(channel: Channel<Msg>, service: Service, granted: Granted, protocol: Option<String>) {
    let repo = &granted.path;
    let (mut read_half, write_half) = channel.split();
    let mut child =
        match service::command(service, &granted, false, false, protocol.as_deref()).spawn() {
            Ok(child) => child,
            Err(e) => {
                tracing::error!(error = %e, "start git over SSH");
                let _ = write_half.exit_status(REFUSED).await;
                let _ = write_half.eof().await;
                let _ = write_half.close().await;
                return;
            }
        };
    let (Some(mut stdin), Some(mut stdout), Some(mut stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return;
    };
    // Client -> stdin runs on its own: git may finish (and the client wait for that) before the client sends EOF.
    let feed = tokio::spawn(async move {
        let mut reader = read_half.make_reader();
        let _ = tokio::io::copy(&mut reader, &mut stdin).await;
        let _ = stdin.shutdown().await;
    });
    let mut out = write_half.make_writer();
    let mut err = write_half.make_writer_ext(Some(1));
    let to_client = async {
        let copied = tokio::io::copy(&mut stdout, &mut out).await;
        let _ = out.flush().await;
        copied
    };
    let errors = async {
        let _ = tokio::io::copy(&mut stderr, &mut err).await;
        let _ = err.flush().await;
    };
    let (copied, ()) = tokio::join!(to_client, errors);
    if let Err(e) = copied {
        tracing::debug!(error = %e, "SSH client went away");
        let _ = child.start_kill();
    }
    let status = match child.wait().await {
        Ok(s) => s
            .code()
            .and_then(|c| u32::try_from(c).ok())
            .unwrap_or(REFUSED),
        Err(_) => REFUSED,
    };
    feed.abort();
    if status != 0 {
        tracing::info!(service = service.name(), repo = %repo.display(), status, "git over SSH ended with an error");
    }
    let _ = write_half.exit_status(status).await;
    let _ = write_half.eof().await;
    let _ = write_half.close().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_git_commands_on_one_repository_parse() {
        assert_eq!(
            parse_command("git-upload-pack 'alice/blog.git'"),
            Some((Service::UploadPack, "alice".into(), "blog.git".into()))
        );
        assert_eq!(
            parse_command("git-receive-pack '/alice/blog.git'"),
            Some((Service::ReceivePack, "alice".into(), "blog.git".into()))
        );
        assert_eq!(
            parse_command("git-upload-pack alice/blog"),
            Some((Service::UploadPack, "alice".into(), "blog".into()))
        );
        for bad in [
            "sh",
            "ls -la",
            "git-upload-archive 'alice/blog.git'",
            "git-upload-pack 'a/b/c.git'",
            "git-upload-pack 'alice/blog.git'; rm -rf /",
            "git-upload-pack '../x'",
            "git-upload-pack",
            "git-upload-pack 'alice'",
        ] {
            assert_eq!(parse_command(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_host_key_is_created_once_and_read_back() {
        let dir = std::env::temp_dir().join(format!("slipway-hostkey-{}", Uuid::new_v4().simple()));
        let path = dir.join("ssh_host_ed25519_key");
        let first = load_or_create_host_key(&path).unwrap();
        let again = load_or_create_host_key(&path).unwrap();
        assert_eq!(first.public_key(), again.public_key());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
