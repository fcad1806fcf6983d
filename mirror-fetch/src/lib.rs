//! How a mirror's sync reaches an external repository, below the mirror operations that the
//! routes and jobs call: the SSH URL ([`remote`]), name resolution ([`resolve`]), the addresses a sync may reach
//! ([`vet`], with the cluster's own networks from [`cluster`]), deploy keys ([`keys`]), the SSH connection and
//! `git fetch` over it ([`transport`]) and the hidden `slipway mirror-relay` git runs as its SSH command
//! ([`relay`]). It knows nothing of the API's state.

pub mod cluster;
pub mod keys;
pub mod relay;
pub mod remote;
pub mod resolve;
pub mod transport;
pub mod vet;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use ipnet::IpNet;

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
