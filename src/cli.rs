//! The command line: one subcommand per role of the binary.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};

use slipway_api::telemetry::LogFormat;

/// slipway — a self-hostable hosting platform for Kubernetes.
///
/// Apps, channels, deploys, domains and forwards are custom resources (kubectl get slipway); the roles below turn
/// them into running workloads and serve the hosting API.
#[derive(Debug, Parser)]
#[command(name = "slipway", version, propagate_version = true)]
pub struct Cli {
    /// Log line format.
    #[arg(
        long,
        global = true,
        value_enum,
        default_value_t,
        env = "SLIPWAY_LOG_FORMAT"
    )]
    pub log_format: LogFormat,

    /// What to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The roles and tools of the binary.
// Parsed once at start and taken apart at once: the size of the largest role's flags costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the hosting REST API (apps, channels, deploys, env, git, tokens, plans, object-storage status and
    /// credentials), its OpenAPI document, its MCP server (/mcp) and, with --console-listen, the web console.
    Api(slipway_api::serve::ApiArgs),
    /// Run the reconcilers that turn apps, channels and deploys into builds, workloads and routes, with /healthz,
    /// /readyz and /metrics.
    Operator(slipway_controllers::operator::OperatorArgs),
    /// Serve S3 for the channels' buckets: each channel's key pair reaches only its own bucket, versioning stays
    /// on, and the owner's byte quota holds; objects live on the S3 backend behind it.
    S3(slipway_blob::serve::S3Args),
    /// Serve validating admission over TLS for the five kinds: the rules one object cannot check alone.
    Webhook(slipway_webhooks::WebhookArgs),
    /// Serve HTTP for every channel: the Ingress controller of IngressClass `slipway`, static sites from git, and
    /// the proxy to dynamic channels, with /healthz, /readyz and /metrics on an admin port.
    Edge(slipway_edge::EdgeArgs),
    /// Administrative tasks that have no route, such as creating the first user.
    #[command(subcommand)]
    Admin(slipway_api::admin::AdminCommand),
    /// Print the CustomResourceDefinitions of the five kinds as YAML (or write one file per CRD).
    ///
    /// The output is generated from the Rust types; `kubectl apply -f -` installs it.
    Crds {
        /// Write <plural>.slipway.dev.yaml files into this directory instead of printing one stream.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// The SSH command git runs while the API syncs a git mirror (not for people): relays git's bytes to the
    /// connection the API opened. Its arguments are ignored.
    #[command(hide = true)]
    MirrorRelay {
        /// What git passes to an SSH command (options, host, command), ignored.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        ignored: Vec<String>,
    },
    /// git's hooks for repositories in object storage (not for people): hands the ref updates of a push,
    /// changeset or mirror sync to the API process that started git, which publishes them.
    #[command(hide = true)]
    GitHook {
        /// The hook (`pre-receive`, `reference-transaction`).
        hook: String,
        /// The reference transaction's state (`prepared`, `committed`, `aborted`).
        state: Option<String>,
    },
}

/// Runs the chosen subcommand.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Api(args) => slipway_api::serve::run(args).await,
        Command::Admin(command) => slipway_api::admin::run(command).await,
        Command::Operator(args) => slipway_controllers::operator::run(args).await,
        Command::Webhook(args) => slipway_webhooks::run(args).await,
        Command::Edge(args) => slipway_edge::run(args).await,
        Command::S3(args) => slipway_blob::serve::run(args).await,
        Command::Crds { dir: None } => {
            print!("{}", slipway_crds::crds_yaml()?);
            Ok(())
        }
        Command::Crds { dir: Some(dir) } => write_crds(&dir),
        Command::MirrorRelay { .. } => slipway_mirror_fetch::relay::run(),
        Command::GitHook { hook, state } => {
            std::process::exit(slipway_git_store::hook::run(&hook, state.as_deref()))
        }
    }
}

fn write_crds(dir: &std::path::Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    for crd in slipway_crds::crds() {
        let path = dir.join(slipway_crds::crd_file_name(&crd));
        std::fs::write(&path, slipway_crds::crd_yaml(&crd)?)
            .with_context(|| format!("write {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}
