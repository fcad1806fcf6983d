//! Mirroring an external git repository into an app's own repository over SSH.
//!
//! The owner connects a repository by its SSH URL and gets the public half of a fresh Ed25519 deploy key to install
//! there; the private half is sealed with the env keyring and never leaves the API. Each sync (the sync route, and
//! every deploy of a connected app first) resolves the server's name, refuses the whole answer if any address is
//! one a user must not make the platform reach ([`vet`]), connects to a checked address itself, pins the server's
//! host key on first contact and refuses a changed one, and lets the real `git fetch` pull every branch and tag
//! over that connection ([`transport`]). The external repository is authoritative: a force-push there rewrites the
//! branch here, a deleted branch goes. While connected, pushes and changesets are refused, so the two cannot
//! diverge. Each sync runs as a job of the platform ([`job`]): the syncs of one app run one at a time on whichever
//! API replica claims them, and outlive the request that asked.

pub mod cluster;
pub mod job;
pub mod keys;
pub mod relay;
pub mod remote;
pub mod resolve;
pub mod service;
pub mod transport;
pub mod vet;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use ipnet::IpNet;
use uuid::Uuid;

use crate::core::error::ApiError;
use crate::core::state::AppState;

/// How syncs reach external repositories (`slipway api --mirror-*` flags).
#[derive(Debug, Clone)]
pub struct MirrorConfig {
    /// Networks a sync may reach whatever their class (on-premises forges).
    pub allow: Vec<IpNet>,
    /// Networks refused on top of the fixed classes and the ranges read from the cluster.
    pub deny: Vec<IpNet>,
    /// The DNS server names are resolved with; `None` uses the system's configuration.
    pub dns_server: Option<SocketAddr>,
    /// The program git runs as its SSH command: this binary, whose `mirror-relay` subcommand carries git's
    /// bytes to the connection the API made.
    pub relay_program: PathBuf,
    /// Longest a sync may take, connection and fetch together.
    pub timeout: Duration,
}

impl MirrorConfig {
    /// Default time limit of one sync.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);
}

impl Default for MirrorConfig {
    fn default() -> Self {
        Self {
            allow: Vec::new(),
            deny: Vec::new(),
            dns_server: None,
            relay_program: std::env::current_exe().unwrap_or_else(|_| PathBuf::from("slipway")),
            timeout: Self::DEFAULT_TIMEOUT,
        }
    }
}

/// The mirror settings.
#[derive(Debug, Default)]
pub struct Mirrors {
    config: MirrorConfig,
}

impl Mirrors {
    /// Mirrors under `config`.
    pub fn new(config: MirrorConfig) -> Self {
        Self { config }
    }

    /// The settings.
    pub fn config(&self) -> &MirrorConfig {
        &self.config
    }
}

/// Why commits to `app` by push or changeset are refused, if they are: its commits come from the external
/// repository it is connected to.
pub async fn commits_refused(state: &AppState, app: Uuid) -> Result<Option<String>, ApiError> {
    Ok(slipway_store::db::mirrors::connected(state.db(), app)
        .await?
        .then(|| {
            "this app mirrors an external repository: commit there and sync, or disconnect the mirror first"
                .to_owned()
        }))
}
