//! What the two transports share: finding the repository a `<owner>/<app>.git` path names and checking that the
//! caller may use it, and starting the real git program that serves it. HTTP and SSH differ only in how bytes
//! reach that program.

use std::path::PathBuf;
use std::process::Stdio;

use slipway_crds::labels;
use slipway_crds::names::{AppName, Username};
use uuid::Uuid;

use slipway_core::access::{self, Action, VisibleApp};
use slipway_core::error::ApiError;
use slipway_core::state::AppState;
use slipway_git_store::{Writer, Writing};

/// The git services slipway serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    /// Clone and fetch.
    UploadPack,
    /// Push.
    ReceivePack,
}

impl Service {
    /// Parses a service name as git sends it (`git-upload-pack`, `git-receive-pack`).
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "git-upload-pack" => Some(Service::UploadPack),
            "git-receive-pack" => Some(Service::ReceivePack),
            _ => None,
        }
    }

    /// The service's name on the wire.
    pub fn name(self) -> &'static str {
        match self {
            Service::UploadPack => "git-upload-pack",
            Service::ReceivePack => "git-receive-pack",
        }
    }

    /// The `git` subcommand that serves it.
    fn subcommand(self) -> &'static str {
        match self {
            Service::UploadPack => "upload-pack",
            Service::ReceivePack => "receive-pack",
        }
    }
}

/// Why a transport request for a repository is refused.
#[derive(Debug)]
pub enum Refusal {
    /// No such repository, or not one the caller can see: answered like a missing one.
    NotFound,
    /// The caller can see it but may not do this.
    Forbidden(String),
    /// A fault on our side.
    Internal(anyhow::Error),
}

impl From<ApiError> for Refusal {
    fn from(e: ApiError) -> Self {
        match e {
            ApiError::NotFound(_) => Refusal::NotFound,
            ApiError::Internal(e) => Refusal::Internal(e),
            other => Refusal::Forbidden(other.to_string()),
        }
    }
}

/// The repository an authenticated account asked for.
#[derive(Debug, Clone)]
pub struct Granted {
    /// The app.
    pub app: VisibleApp,
    /// Its bare repository.
    pub path: PathBuf,
    /// What a push's `receive-pack` is started with, so its ref updates are published.
    pub writer: Writer,
    /// Largest pack a push may send, in bytes.
    pub max_push_bytes: u64,
}

/// Finds `<owner>/<repo>` (`repo` with or without `.git`) for the account `user_id`/`username` and checks it may
/// run `service` on it: fetching reads the app, pushing writes it (every role may do both), and an app that mirrors
/// an external repository takes no push.
pub async fn authorize(
    state: &AppState,
    user_id: Uuid,
    username: &str,
    owner: &str,
    repo: &str,
    service: Service,
) -> Result<Granted, Refusal> {
    let app_name = repo.strip_suffix(".git").unwrap_or(repo);
    let (Ok(owner), Ok(app_name)) = (owner.parse::<Username>(), app_name.parse::<AppName>()) else {
        return Err(Refusal::NotFound);
    };
    let namespace = labels::user_namespace(&owner);
    let uid = state
        .cache()
        .apps_in(&namespace)
        .into_iter()
        .find(|a| {
            a.metadata.name.as_deref() == Some(app_name.as_str()) && a.spec.owner == owner.as_str()
        })
        .and_then(|a| {
            a.metadata
                .uid
                .as_deref()
                .and_then(|u| u.parse::<Uuid>().ok())
        })
        .ok_or(Refusal::NotFound)?;
    let app = access::visible_app_to(state, user_id, username, uid).await?;
    app.require(match service {
        Service::UploadPack => Action::Read,
        Service::ReceivePack => Action::Write,
    })?;
    if service == Service::ReceivePack
        && let Some(reason) = crate::mirror::commits_refused(state, app.id).await?
    {
        return Err(Refusal::Forbidden(reason));
    }
    let path = app.ready_repo(state).await?;
    let writer = match service {
        Service::ReceivePack => state.repos().writer(app.id, username, Writing::Push).await,
        Service::UploadPack => Default::default(),
    };
    Ok(Granted {
        app,
        path,
        writer,
        max_push_bytes: state.limits().git_max_push_bytes,
    })
}

/// A `git upload-pack`/`receive-pack` process for the granted repository, with every stream piped. `stateless` is
/// the smart HTTP mode (one request, one response); `advertise` only lists refs (HTTP's `info/refs`).
/// `git_protocol` is the client's `GIT_PROTOCOL` (`version=2`), passed on when it is plain text.
///
/// A push is held to the size limit by git itself (`receive.maxInputSize`): past it git stops storing the pack and
/// answers `pack exceeds maximum allowed size`, which the client prints as a `remote:` line with the refs
/// rejected; no ref moves.
pub fn command(
    service: Service,
    granted: &Granted,
    stateless: bool,
    advertise: bool,
    git_protocol: Option<&str>,
) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new("git");
    cmd.args(&granted.writer.config);
    if service == Service::ReceivePack {
        cmd.arg("-c")
            .arg(format!("receive.maxInputSize={}", granted.max_push_bytes));
    }
    cmd.arg(service.subcommand());
    if stateless {
        cmd.arg("--stateless-rpc");
    }
    if advertise {
        cmd.arg("--advertise-refs");
    }
    cmd.arg(&granted.path)
        .env_remove("GIT_DIR")
        .env_remove("GIT_PROTOCOL")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if let Some(protocol) = git_protocol.filter(|p| slipway_repository::protocol::valid(p)) {
        cmd.env("GIT_PROTOCOL", protocol);
    }
    cmd.envs(granted.writer.env.iter().map(|(k, v)| (k, v)));
    cmd
}

/// Logs what a finished git process wrote to stderr and how it ended. Holds `granted` (and with it a push's writer
/// lock) until then.
pub async fn reap(mut child: tokio::process::Child, service: Service, granted: Granted) {
    let repo = &granted.path;
    // Drain stderr to the end (a full pipe would stall git) and keep the first 64 KiB for the log.
    let mut stderr = Vec::new();
    if let Some(mut err) = child.stderr.take() {
        use tokio::io::AsyncReadExt;
        let mut buf = [0u8; 8192];
        while let Ok(n) = err.read(&mut buf).await {
            if n == 0 {
                break;
            }
            if stderr.len() < 64 * 1024 {
                stderr.extend_from_slice(&buf[..n]);
            }
        }
    }
    match child.wait().await {
        Ok(status) if status.success() => {
            tracing::debug!(service = service.name(), repo = %repo.display(), "git finished");
        }
        Ok(status) => tracing::info!(
            service = service.name(),
            repo = %repo.display(),
            %status,
            stderr = %String::from_utf8_lossy(&stderr),
            "git ended with an error"
        ),
        Err(e) => tracing::warn!(service = service.name(), error = %e, "waiting for git failed"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_two_services_parse() {
        assert_eq!(Service::parse("git-upload-pack"), Some(Service::UploadPack));
        assert_eq!(
            Service::parse("git-receive-pack"),
            Some(Service::ReceivePack)
        );
        assert_eq!(Service::parse("git-upload-archive"), None);
        assert_eq!(Service::parse("sh"), None);
    }
}
