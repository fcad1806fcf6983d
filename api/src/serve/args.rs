//! The flags of `slipway api`, and the settings each group of them makes.

use std::net::SocketAddr;
use std::path::PathBuf;

use ipnet::IpNet;
use slipway_internal::CallerSpec;

use slipway_auth::rate::Budget;
use slipway_core::registration::budget::RegistrationLimits;
use slipway_core::state::{BlobDownloadLimits, Limits};
use slipway_mirror_fetch::MirrorConfig;

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
    /// Where the apps' repositories are kept: `volume` (bare repositories under --repos-dir, for one API replica)
    /// or `object-store` (packs in the `<prefix>git` bucket of --s3-backend-url, refs in the platform database,
    /// --repos-dir this replica's disposable cache; any number of replicas).
    #[arg(long, env = "SLIPWAY_GIT_STORAGE", value_enum, default_value_t = GitStorage::Volume)]
    pub git_storage: GitStorage,
    /// Directory holding the apps' bare git repositories (with --git-storage object-store, this replica's cache of
    /// them).
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
    /// The Secret (`<namespace>/<name>`, existing) that holds the SSH host key for every replica. The first start
    /// puts the key file's key in it (or a new one); the file is then kept equal to it. Without it, the file alone.
    #[arg(long, env = "SLIPWAY_SSH_HOST_KEY_SECRET")]
    pub ssh_host_key_secret: Option<crate::host_key::SecretName>,
    /// Address of the internal listener: the `/internal/v1` routes the operator, the edge and build pods call, and
    /// `/healthz`. Keep it inside the cluster.
    #[arg(long, env = "SLIPWAY_INTERNAL_LISTEN", default_value = "0.0.0.0:8081")]
    pub internal_listen: SocketAddr,
    /// Audience the callers' ServiceAccount tokens must be minted for (checked with a TokenReview).
    #[arg(
        long,
        env = "SLIPWAY_INTERNAL_AUDIENCE",
        default_value = slipway_internal::review::DEFAULT_AUDIENCE
    )]
    pub internal_audience: String,
    /// Base URL of the S3 gateway (`slipway s3`) as the API reaches it; without it the object-storage routes
    /// answer 503 blob_unavailable.
    #[arg(long, env = "SLIPWAY_S3_GATEWAY_URL")]
    pub s3_gateway_url: Option<String>,
    /// The web console ({console_url}).
    #[command(flatten)]
    pub console: Box<slipway_console::ConsoleArgs>,
    /// External SQL access (a TLS Postgres listener).
    #[command(flatten)]
    pub sql_proxy: slipway_data::sql_proxy::SqlProxyArgs,
    /// The data server (the channels' SQL databases), measured by the database routes.
    #[command(flatten)]
    pub data_server: slipway_backends::args::DataServerArgs,
    /// The object-storage backend, where SQL snapshot files are kept (in `<prefix>system`). Unset: no
    /// snapshots are taken.
    #[command(flatten)]
    pub snapshot_store: slipway_backends::args::S3BackendArgs,
    /// The cluster registry's token endpoint (`/registry/token`).
    #[command(flatten)]
    pub registry_tokens: slipway_internal::registry_token::RegistryTokenArgs,
    /// Whether code, SQL snapshots and bucket checkpoints may be downloaded; `false` answers 403
    /// download_disabled on every download route and download-token route.
    #[arg(long, env = "SLIPWAY_DOWNLOADS", default_value_t = true, action = clap::ArgAction::Set)]
    pub downloads: bool,
    /// How long `git gc` keeps objects nothing references (a force-pushed commit, still a snapshot's code leg),
    /// in git's `--prune` syntax; repositories are collected daily.
    #[arg(long, env = "SLIPWAY_GIT_GC_PRUNE", default_value = "2.weeks.ago")]
    pub git_gc_prune: String,
    /// Oldest bucket checkpoint that may be downloaded, in days (older: 409 conflict).
    #[arg(long, env = "SLIPWAY_BLOB_DOWNLOAD_MAX_AGE_DAYS", default_value_t = BlobDownloadLimits::default().max_age_days)]
    pub blob_download_max_age_days: u32,
    /// Most objects one bucket checkpoint download may hold (more: 409 conflict).
    #[arg(long, env = "SLIPWAY_BLOB_DOWNLOAD_MAX_FILES", default_value_t = BlobDownloadLimits::default().max_files)]
    pub blob_download_max_files: u64,
    /// Most bytes one bucket checkpoint download may hold, before compression (more: 409 conflict).
    #[arg(long, env = "SLIPWAY_BLOB_DOWNLOAD_MAX_BYTES", default_value_t = BlobDownloadLimits::default().max_bytes)]
    pub blob_download_max_bytes: u64,
    /// A ServiceAccount allowed on the internal listener, as ROLE=NAMESPACE/SERVICEACCOUNT: role `operator` may call
    /// every internal route, `edge` only reads static sites' archives and reports bandwidth; any other identity gets
    /// 403. Repeat the flag
    /// or separate with commas.
    #[arg(
        long = "internal-caller",
        env = "SLIPWAY_INTERNAL_CALLERS",
        value_delimiter = ','
    )]
    pub internal_callers: Vec<CallerSpec>,
    /// File holding the key that signs build pods' source URLs (at least 32 bytes; used for nothing else, and held
    /// by the API server alone).
    #[arg(
        long,
        env = "SLIPWAY_BUILD_SOURCE_KEY_FILE",
        default_value = "/etc/slipway/build-source/key"
    )]
    pub build_source_key_file: PathBuf,
    /// Requests each token may send per minute, sustained (429 too_many_requests past it, with Retry-After); 0
    /// turns the budget off. Counted per API process.
    #[arg(long, env = "SLIPWAY_RATE_LIMIT_PER_MINUTE", default_value_t = Budget::DEFAULT.per_minute.get())]
    pub rate_limit_per_minute: u32,
    /// Requests a token may send at once on top of an idle budget.
    #[arg(long, env = "SLIPWAY_RATE_LIMIT_BURST", default_value_t = Budget::DEFAULT.burst.get())]
    pub rate_limit_burst: u32,
    /// Largest pack one git push may send (HTTP and SSH), in bytes; git refuses a larger one with
    /// "pack exceeds maximum allowed size". Default 1 GiB.
    #[arg(long, env = "SLIPWAY_GIT_MAX_PUSH_BYTES", default_value_t = Limits::DEFAULT_GIT_MAX_PUSH_BYTES)]
    pub git_max_push_bytes: u64,
    /// A network git mirrors may reach although it is private, loopback, link-local or the cluster's own (an
    /// on-premises forge); narrow it to the forge's address. Repeat the flag or separate with commas.
    #[arg(
        long = "mirror-allow-cidr",
        env = "SLIPWAY_MIRROR_ALLOW_CIDRS",
        value_delimiter = ','
    )]
    pub mirror_allow_cidrs: Vec<IpNet>,
    /// A network git mirrors may not reach, on top of the fixed private classes and the node addresses, pod
    /// ranges and Service ranges read from the cluster (name the pod and Service ranges here when the cluster does
    /// not publish them). Repeat the flag or separate with commas.
    #[arg(
        long = "mirror-deny-cidr",
        env = "SLIPWAY_MIRROR_DENY_CIDRS",
        value_delimiter = ','
    )]
    pub mirror_deny_cidrs: Vec<IpNet>,
    /// DNS server (IP:PORT) that resolves git mirrors' hosts; default: the system's resolver configuration.
    #[arg(long, env = "SLIPWAY_MIRROR_DNS_SERVER")]
    pub mirror_dns_server: Option<SocketAddr>,
    /// Longest one git mirror sync may take (connection and fetch), in seconds.
    #[arg(long, env = "SLIPWAY_MIRROR_SYNC_TIMEOUT", default_value_t = MirrorConfig::DEFAULT_TIMEOUT.as_secs())]
    pub mirror_sync_timeout: u64,
    /// Whether agents may register themselves (`POST /registrations`); `false` answers 503 service_unavailable.
    #[arg(long, env = "SLIPWAY_REGISTRATION_OPEN", default_value_t = RegistrationLimits::default().open, action = clap::ArgAction::Set)]
    pub registration_open: bool,
    /// Registrations one source address may make per hour (429 past it; IPv6 counted per /64); 0 is unlimited.
    /// Counted per API process, by the TCP peer address (put no proxy that hides it in front of the API).
    #[arg(long, env = "SLIPWAY_REGISTRATION_PER_SOURCE_PER_HOUR", default_value_t = RegistrationLimits::default().per_source_per_hour)]
    pub registration_per_source_per_hour: u32,
    /// Registrations the platform takes per hour from everyone together (429 past it); 0 is unlimited. Counted
    /// in the platform database, across replicas.
    #[arg(long, env = "SLIPWAY_REGISTRATION_GLOBAL_PER_HOUR", default_value_t = RegistrationLimits::default().global_per_hour)]
    pub registration_global_per_hour: u32,
    /// The SMTP relay email verification codes go out through: `smtp://host:25` (plain), `smtp://host:587?tls=required`
    /// (STARTTLS), `smtps://host:465`; a user and password go in the userinfo. Unset: the email routes answer 503.
    #[arg(long, env = "SLIPWAY_SMTP_URL", hide_env_values = true)]
    pub smtp_url: Option<String>,
    /// The sender of those mails.
    #[arg(
        long,
        env = "SLIPWAY_MAIL_FROM",
        default_value = "slipway <noreply@localhost>"
    )]
    pub mail_from: String,
    /// Namespace runtime-log commands run in, one throwaway pod each. Unset: a runtime-log call with a command
    /// answers 503 (the status facts still work).
    #[arg(long, env = "SLIPWAY_LOG_SANDBOX_NAMESPACE")]
    pub log_sandbox_namespace: Option<String>,
    /// Image of those pods: Debian with bash, coreutils, grep, sed, awk, findutils, python3, node and perl.
    #[arg(long, env = "SLIPWAY_LOG_SANDBOX_IMAGE")]
    pub log_sandbox_image: Option<String>,
    /// RuntimeClass of those pods (optional).
    #[arg(long, env = "SLIPWAY_LOG_SANDBOX_RUNTIME_CLASS")]
    pub log_sandbox_runtime_class: Option<String>,
    /// Runtime-log commands one API process runs at once; more wait up to 10 s, then answer 503.
    #[arg(long, env = "SLIPWAY_LOG_SANDBOX_CONCURRENCY", default_value_t = 4)]
    pub log_sandbox_concurrency: usize,
    /// The API's public URL, an origin such as https://api.example.com: {mcp_url} is its `/mcp`, it is the issuer
    /// of the MCP server's OAuth sign-in for people (metadata, client registration, authorization, tokens), the
    /// base of the download links MCP tools hand out, and a browser origin the MCP endpoint answers. Unset: no
    /// OAuth (people use tokens from POST /tokens), and download links are paths on the host the client reached.
    #[arg(long, env = "SLIPWAY_PUBLIC_URL")]
    pub public_url: Option<String>,
    /// The upstream OpenID Connect provider people sign in at for the MCP server (the one end-user sign-in uses).
    #[command(flatten)]
    pub upstream: slipway_identity::UpstreamArgs,
}

impl ApiArgs {
    /// The limits the flags set.
    pub fn limits(&self) -> Limits {
        Limits {
            rate: Budget::from_flags(self.rate_limit_per_minute, self.rate_limit_burst),
            git_max_push_bytes: self.git_max_push_bytes,
            downloads: self.downloads,
            blob_download: BlobDownloadLimits {
                max_age_days: self.blob_download_max_age_days,
                max_files: self.blob_download_max_files,
                max_bytes: self.blob_download_max_bytes,
            },
            registration: RegistrationLimits {
                open: self.registration_open,
                per_source_per_hour: self.registration_per_source_per_hour,
                global_per_hour: self.registration_global_per_hour,
            },
        }
    }

    /// The runtime-log sandbox the flags set, if any.
    pub fn log_sandbox(&self) -> Option<slipway_core::log_sandbox::SandboxConfig> {
        Some(slipway_core::log_sandbox::SandboxConfig {
            namespace: self.log_sandbox_namespace.clone()?,
            image: self.log_sandbox_image.clone()?,
            runtime_class: self.log_sandbox_runtime_class.clone(),
            concurrency: self.log_sandbox_concurrency,
        })
    }

    /// The MCP server's OAuth authorization server the flags set, if any.
    pub fn oauth(&self) -> anyhow::Result<Option<slipway_core::oauth::OAuthServer>> {
        let Some(public_url) = &self.public_url else {
            return Ok(None);
        };
        let upstream = self.upstream.config()?;
        Ok(Some(slipway_core::oauth::OAuthServer::new(
            public_url, upstream,
        )?))
    }

    /// The mirror settings the flags set.
    pub fn mirrors(&self) -> MirrorConfig {
        MirrorConfig {
            allow: self.mirror_allow_cidrs.clone(),
            deny: self.mirror_deny_cidrs.clone(),
            dns_server: self.mirror_dns_server,
            timeout: std::time::Duration::from_secs(self.mirror_sync_timeout.max(1)),
            ..MirrorConfig::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use slipway_internal::Role;

    /// `slipway api`'s flags alone.
    #[derive(Parser)]
    struct Api {
        #[command(flatten)]
        args: super::ApiArgs,
    }

    fn api_args(extra: &[&str]) -> Result<super::ApiArgs, clap::Error> {
        let base = [
            "slipway-api",
            "--database-url",
            "postgres://x",
            "--app-domain",
            "apps.test",
            "--git-host",
            "git.test",
        ];
        Ok(Api::try_parse_from(base.iter().chain(extra))?.args)
    }

    #[test]
    fn internal_listener_flags_have_their_defaults_and_callers_add_up() {
        let args = api_args(&[]).unwrap();
        assert_eq!(args.internal_listen.to_string(), "0.0.0.0:8081");
        assert_eq!(args.internal_audience, "slipway-internal");
        assert_eq!(
            args.build_source_key_file,
            std::path::Path::new("/etc/slipway/build-source/key")
        );
        assert!(args.internal_callers.is_empty());

        let args = api_args(&[
            "--internal-caller",
            "operator=slipway-system/slipway-operator,edge=slipway-system/slipway-edge",
            "--internal-caller",
            "edge=other/edge",
        ])
        .unwrap();
        let roles: Vec<(Role, String)> = args
            .internal_callers
            .iter()
            .map(|c| (c.role, c.identity.to_string()))
            .collect();
        assert_eq!(
            roles,
            [
                (Role::Operator, "slipway-system/slipway-operator".into()),
                (Role::Edge, "slipway-system/slipway-edge".into()),
                (Role::Edge, "other/edge".into()),
            ]
        );
        assert!(api_args(&["--internal-caller", "admin=ns/sa"]).is_err());
        assert!(
            api_args(&["--internal-token-file", "/x"]).is_err(),
            "the shared token is gone"
        );
    }

    #[test]
    fn the_sql_listener_is_off_by_default_and_takes_its_certificate_as_a_pair() {
        let args = api_args(&[]).unwrap();
        assert!(args.sql_proxy.sql_listen.is_none());
        let args = api_args(&["--sql-listen", "0.0.0.0:5432"]).unwrap();
        assert_eq!(args.sql_proxy.sql_listen.unwrap().port(), 5432);
        assert!(args.sql_proxy.sql_tls_cert.is_none(), "self-signed then");
        assert!(
            api_args(&["--sql-tls-cert", "/c.pem"]).is_err(),
            "a key is needed too"
        );
        assert!(api_args(&["--sql-tls-cert", "/c.pem", "--sql-tls-key", "/k.pem"]).is_ok());
    }
}

/// Where the apps' repositories are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum GitStorage {
    /// On one volume.
    Volume,
    /// In object storage and the platform database.
    ObjectStore,
}
