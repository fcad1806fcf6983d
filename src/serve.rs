//! `slipway api`: connects the parts the REST API needs and serves it until SIGTERM, with git's smart HTTP on the
//! same port and, with `--ssh-listen`, git over SSH.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;

use crate::api::state::{AppState, PublicNames};
use crate::platform::cache::Cache;
use crate::platform::repos::Repos;

/// Options of `slipway api`.
#[derive(Debug, clap::Args)]
pub struct ApiArgs {
    /// Address to listen on.
    #[arg(long, env = "SLIPWAY_LISTEN", default_value = "0.0.0.0:8080")]
    pub listen: SocketAddr,
    /// Postgres URL of the platform database.
    #[arg(long, env = "SLIPWAY_DATABASE_URL")]
    pub database_url: String,
    /// Domain under which channel hostnames are formed ({app_domain}).
    #[arg(long, env = "SLIPWAY_APP_DOMAIN")]
    pub app_domain: String,
    /// Host of the git transports ({git_host}).
    #[arg(long, env = "SLIPWAY_GIT_HOST")]
    pub git_host: String,
    /// The public addresses of the edge, offered as the A records of custom apex domains (repeat the flag or
    /// separate with commas); the operator's --edge-address must name the same ones.
    #[arg(
        long = "edge-address",
        env = "SLIPWAY_EDGE_ADDRESSES",
        value_delimiter = ','
    )]
    pub edge_addresses: Vec<String>,
    /// Keyring that seals env values: lines of `<key-id> <base64 32-byte key>`, the first one sealing (mounted from
    /// the Secret the chart creates). `slipway admin new-env-key` prints a line.
    #[arg(
        long,
        env = "SLIPWAY_ENV_KEYS_FILE",
        default_value = "/etc/slipway/env-keys/keys"
    )]
    pub env_keys_file: PathBuf,
    /// Directory holding the apps' bare git repositories.
    #[arg(
        long,
        env = "SLIPWAY_REPOS_DIR",
        default_value = "/var/lib/slipway/repos"
    )]
    pub repos_dir: PathBuf,
    /// Also serve git over SSH on this address (git@<git_host>:<owner>/<app>.git), e.g. 0.0.0.0:2222.
    #[arg(long, env = "SLIPWAY_SSH_LISTEN")]
    pub ssh_listen: Option<SocketAddr>,
    /// The SSH host key (OpenSSH format); an Ed25519 key is generated there on first start.
    #[arg(
        long,
        env = "SLIPWAY_SSH_HOST_KEY",
        default_value = "/var/lib/slipway/ssh/ssh_host_ed25519_key"
    )]
    pub ssh_host_key: PathBuf,
    /// File holding the internal token shared with the operator and the edge (the `/internal/v1` routes).
    #[arg(
        long,
        env = "SLIPWAY_INTERNAL_TOKEN_FILE",
        default_value = "/etc/slipway/internal/token"
    )]
    pub internal_token_file: PathBuf,
}

/// Builds the API's state: database (migrated), kube client, synced caches.
pub async fn state(
    args: &ApiArgs,
    kube: kube::Client,
) -> anyhow::Result<(AppState, Vec<tokio::task::JoinHandle<()>>)> {
    let keyring = crate::env::crypto::Keyring::load(&args.env_keys_file)?;
    let internal_token = read_internal_token(&args.internal_token_file)?;
    let db = crate::db::connect(&args.database_url).await?;
    let (cache, tasks) = Cache::start(kube.clone()).await?;
    let names = PublicNames {
        app_domain: args.app_domain.clone(),
        git_host: args.git_host.clone(),
        edge_addresses: args.edge_addresses.clone(),
    };
    Ok((
        AppState::new(
            db,
            kube,
            cache,
            Repos::new(&args.repos_dir),
            names,
            keyring,
            internal_token,
        ),
        tasks,
    ))
}

/// Serves the API until SIGTERM or Ctrl-C; a cache task that dies takes the process down.
pub async fn run(args: ApiArgs) -> anyhow::Result<()> {
    let kube = kube::Client::try_default()
        .await
        .context("connect to Kubernetes")?;
    let (state, tasks) = state(&args, kube).await?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("listen on {}", args.listen))?;
    tracing::info!(addr = %args.listen, "serving the API");
    let ssh = match args.ssh_listen {
        Some(addr) => {
            let key = crate::git::ssh::load_or_create_host_key(&args.ssh_host_key)?;
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("listen for SSH on {addr}"))?;
            let state = state.clone();
            futures::future::Either::Left(async move {
                crate::git::ssh::serve(state, listener, key).await
            })
        }
        None => futures::future::Either::Right(std::future::pending()),
    };
    let server =
        axum::serve(listener, crate::api::router(state)).with_graceful_shutdown(shutdown_signal());
    let watch_tasks = futures::future::select_all(tasks);
    tokio::select! {
        served = server => served.context("serve the API"),
        ssh = ssh => ssh.and_then(|()| Err(anyhow::anyhow!("the SSH server stopped"))),
        (ended, _, _) = watch_tasks => Err(anyhow::anyhow!("a cache task stopped: {ended:?}")),
    }
}

/// Reads the internal token the API server, the operator and the edge share; refuses one too short to be secret.
pub fn read_internal_token(path: &std::path::Path) -> anyhow::Result<String> {
    let token = std::fs::read_to_string(path)
        .with_context(|| format!("read the internal token from {}", path.display()))?
        .trim()
        .to_owned();
    if token.len() < 32 {
        anyhow::bail!(
            "the internal token in {} is shorter than 32 characters",
            path.display()
        );
    }
    Ok(token)
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
    tracing::info!("shutting down");
}
