//! `slipway operator`: its flags (the backends' shared ones from [`slipway_backends::args`], the operator's own on
//! top), and the run: the reconcilers, behind the leader lease, with health and Prometheus metrics on an admin
//! port.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use kube::Api;
use prometheus_client::registry::Registry;
use slipway_backends::args::{DataServerArgs, S3BackendArgs};
use slipway_backends::object_store::Backend;
use slipway_internal::InternalEndpoint;

use crate::blob::BlobSettings;
use crate::leader::LeaderElector;
use crate::metrics::Metrics;
use crate::postgres::PostgresSettings;
use crate::{Context, OperatorConfig};

/// Options of `slipway operator`.
#[derive(Debug, clap::Args)]
pub struct OperatorArgs {
    /// Domain under which channel hostnames are formed ({app_domain}).
    #[arg(long, env = "SLIPWAY_APP_DOMAIN")]
    pub app_domain: String,
    /// Port of /healthz, /readyz and /metrics.
    #[arg(long, env = "SLIPWAY_ADMIN_PORT", default_value_t = 8080)]
    pub admin_port: u16,
    /// Reconcile only this namespace (default: all namespaces).
    #[arg(long, env = "SLIPWAY_WATCH_NAMESPACE")]
    pub namespace: Option<String>,
    /// Elect a leader through a Lease in this namespace, so several replicas can run and one reconciles. Without
    /// it the operator reconciles at once (run a single replica).
    #[arg(long, env = "SLIPWAY_LEASE_NAMESPACE")]
    pub lease_namespace: Option<String>,
    /// Name of the Lease.
    #[arg(long, env = "SLIPWAY_LEASE_NAME", default_value = "slipway-operator")]
    pub lease_name: String,
    /// Base URL of the API server's internal listener, whose routes hold git, env values and deploy logs.
    #[arg(long, env = "SLIPWAY_INTERNAL_URL")]
    pub internal_url: String,
    /// Base URL of the internal listener as pods reach it (build pods fetch their sources there). Default:
    /// --internal-url.
    #[arg(long, env = "SLIPWAY_POD_INTERNAL_URL")]
    pub pod_internal_url: Option<String>,
    /// File holding the operator's ServiceAccount token for the internal listener (audience `slipway-internal`),
    /// read again whenever the kubelet rotates it.
    #[arg(
        long,
        env = "SLIPWAY_INTERNAL_TOKEN_FILE",
        default_value = slipway_internal::token::DEFAULT_TOKEN_FILE
    )]
    pub internal_token_file: std::path::PathBuf,
    /// The cluster's image registry (host:port) builds push to and nodes pull from.
    #[arg(long, env = "SLIPWAY_REGISTRY")]
    pub registry: String,
    /// The registry that keeps the warm bases (host:port: the one BuildKit's Docker Hub mirror is), whose layers
    /// an image's charged size leaves out. Default: --registry.
    #[arg(long, env = "SLIPWAY_BASES_REGISTRY")]
    pub bases_registry: Option<String>,
    /// The BuildKit daemon build pods use (tcp://host:port).
    #[arg(long, env = "SLIPWAY_BUILDKIT_ADDR")]
    pub buildkit_addr: String,
    /// The CA BuildKit's TCP listener trusts for clients (PEM certificate; it also signed BuildKit's server
    /// certificate). With its key, every build Job gets a client certificate of its own; unset, build pods connect
    /// in plain gRPC.
    #[arg(
        long,
        env = "SLIPWAY_BUILDKIT_CA_CERT_FILE",
        requires = "buildkit_ca_key_file"
    )]
    pub buildkit_ca_cert_file: Option<std::path::PathBuf>,
    /// The private key (PEM) of --buildkit-ca-cert-file.
    #[arg(
        long,
        env = "SLIPWAY_BUILDKIT_CA_KEY_FILE",
        requires = "buildkit_ca_cert_file"
    )]
    pub buildkit_ca_key_file: Option<std::path::PathBuf>,
    /// Image of the readiness sidecar that runs beside every app (busybox: `sh`, `nc`, `timeout`).
    #[arg(long, env = "SLIPWAY_PROBE_IMAGE", default_value = DEFAULT_PROBE_IMAGE)]
    pub probe_image: String,
    /// The image build Jobs run (curl and buildctl), e.g. `<registry>/slipway/builder:<buildkit version>`.
    #[arg(long, env = "SLIPWAY_BUILDER_IMAGE")]
    pub builder_image: String,
    /// Bind a ClusterRole to a ServiceAccount in every tenant namespace: CLUSTERROLE=NAMESPACE/SERVICEACCOUNT
    /// (repeat the flag, or separate with commas). This is how the platform's components get rights inside users'
    /// namespaces (Secrets among them) without holding them cluster-wide; the Helm chart passes its two grants.
    #[arg(
        long = "tenant-grant",
        env = "SLIPWAY_TENANT_GRANTS",
        value_delimiter = ','
    )]
    pub tenant_grants: Vec<crate::tenancy::TenantGrant>,
    /// A directory of YAML files whose NetworkPolicies are kept in every tenant namespace (the Helm chart mounts
    /// its isolation policies here). Given, the operator keeps exactly those and removes slipway's others (an empty
    /// directory removes them all); unset, it leaves tenant namespaces' policies alone.
    #[arg(long, env = "SLIPWAY_TENANT_NETWORK_POLICIES")]
    pub tenant_network_policies: Option<std::path::PathBuf>,
    /// Tokens of the cluster registry: builds push with one, and the operator reads and deletes images with its own.
    #[command(flatten)]
    pub registry_tokens: slipway_internal::registry_token::RegistryTokenArgs,
    /// Object storage (the channels' buckets).
    #[command(flatten)]
    pub blob: BlobOperatorArgs,
    /// The data server (the channels' SQL databases).
    #[command(flatten)]
    pub postgres: PostgresOperatorArgs,
    /// The DNS server custom-domain verification asks (host:port); the system's resolvers when unset.
    #[arg(long, env = "SLIPWAY_DNS_RESOLVER")]
    pub dns_resolver: Option<std::net::SocketAddr>,
    /// The public addresses of the edge: the A records custom apex domains point at (repeat or comma-separate).
    /// Unset: verification learns them from the channel hostname's own A records.
    #[arg(
        long = "edge-address",
        env = "SLIPWAY_EDGE_ADDRESSES",
        value_delimiter = ','
    )]
    pub edge_addresses: Vec<String>,
    /// The namespace where domain certificates (kubernetes.io/tls Secrets) and the ACME account are kept; the edge
    /// reads Secrets there, so it should hold nothing else. Default: the namespace the operator runs in
    /// (POD_NAMESPACE).
    #[arg(long, env = "SLIPWAY_CERTIFICATE_NAMESPACE")]
    pub certificate_namespace: Option<String>,
    /// ACME directory URL to issue custom domains' certificates from (HTTP-01). Unset: no certificates.
    #[arg(long, env = "SLIPWAY_ACME_DIRECTORY")]
    pub acme_directory: Option<String>,
    /// Contact email registered with the ACME account.
    #[arg(long, env = "SLIPWAY_ACME_EMAIL")]
    pub acme_email: Option<String>,
    /// PEM root certificate to trust for the ACME directory's HTTPS (a private or test CA); system roots otherwise.
    #[arg(long, env = "SLIPWAY_ACME_ROOT_CA")]
    pub acme_root_ca: Option<std::path::PathBuf>,
    /// Milliseconds between publishing an HTTP-01 challenge and asking the CA to validate it (so every edge replica
    /// has seen it).
    #[arg(long, env = "SLIPWAY_ACME_CHALLENGE_GRACE_MS", default_value_t = 2000)]
    pub acme_challenge_grace_ms: u64,
    /// Raw TCP forwarding: the public host of the edge's forward listeners and the port range they use, as
    /// `host:first-last` (e.g. `tcp.example.com:31000-31099`). Unset: channels cannot be exposed.
    #[arg(long, env = "SLIPWAY_FORWARD_PORTS")]
    pub forward_ports: Option<crate::forward::ForwardPorts>,
    /// How many builds may run at once, cluster-wide (a channel's own deploys still run one at a time). Each takes
    /// a build pod and BuildKit's work on the node.
    #[arg(long, env = "SLIPWAY_MAX_BUILDS", default_value_t = crate::build::DEFAULT_MAX_BUILDS,
          value_parser = clap::value_parser!(u16).range(1..))]
    pub max_builds: u16,
    /// How much of its plan's CPU share (`cpu_soft_cores`) an app's pod requests from the scheduler, in percent.
    /// 100 reserves every running app's whole share; less overcommits the nodes' CPU, so more apps fit while they
    /// idle (the limit stays the plan's burst; under contention only the requested part is guaranteed). A change
    /// resizes running apps, which roll over without a gap.
    #[arg(long, env = "SLIPWAY_CPU_REQUEST_PERCENT",
          default_value_t = crate::workload::FULL_CPU_REQUEST_PERCENT,
          value_parser = clap::value_parser!(u8).range(1..=100))]
    pub cpu_request_percent: u8,
    /// Give each app's Deployment a PodDisruptionBudget, so that a node drain waits while the operator moves the
    /// app's one pod to another node (a new pod ready first) instead of taking the app down. Off: a drain evicts
    /// at once (the app is down until its pod restarts elsewhere), and the cluster autoscaler, which never scales
    /// down a node whose pods a budget holds, may remove nodes that run apps.
    #[arg(long, env = "SLIPWAY_APP_DISRUPTION_BUDGETS", default_value_t = true,
          action = clap::ArgAction::Set)]
    pub app_disruption_budgets: bool,
    /// Minutes a deploy may wait for its pre-deploy checkpoint (the dump of the channel's database and the
    /// bucket's marker). Past them the checkpoint is cancelled, the deploy fails saying how far it got, and the
    /// channel's next deploy can run. Raise it when a channel's database takes longer than this to dump.
    #[arg(long, env = "SLIPWAY_DEPLOY_DEADLINE_MINUTES",
          default_value_t = crate::deploy::DEPLOY_DEADLINE.as_secs() / 60,
          value_parser = clap::value_parser!(u64).range(1..=10_080))]
    pub deploy_deadline_minutes: u64,
}

/// The readiness sidecar's image unless told otherwise.
const DEFAULT_PROBE_IMAGE: &str = "docker.io/library/busybox:1.37";

/// How long a leader's Lease lasts without renewal.
const LEASE_DURATION: std::time::Duration = std::time::Duration::from_secs(15);

/// Runs the operator until SIGTERM.
pub async fn run(args: OperatorArgs) -> anyhow::Result<()> {
    let client = kube::Client::try_default()
        .await
        .context("connect to Kubernetes")?;
    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    let config = OperatorConfig {
        app_domain: args.app_domain,
        namespace: args.namespace,
        pod_internal_url: args
            .pod_internal_url
            .unwrap_or_else(|| args.internal_url.clone()),
        internal: InternalEndpoint::with_token_file(args.internal_url, &args.internal_token_file)?,
        registry: args.registry,
        bases_registry: args.bases_registry,
        buildkit_addr: args.buildkit_addr,
        buildkit_ca: match (&args.buildkit_ca_cert_file, &args.buildkit_ca_key_file) {
            (Some(cert), Some(key)) => Some(
                crate::build::buildkit_tls::BuildkitCa::load(cert, key)
                    .map_err(anyhow::Error::msg)
                    .context("--buildkit-ca-cert-file")?,
            ),
            _ => None,
        },
        probe_image: args.probe_image,
        builder_image: args.builder_image,
        tenant_grants: args.tenant_grants,
        tenant_network_policies: args
            .tenant_network_policies
            .map(|dir| crate::network_policies::load_dir(&dir))
            .transpose()
            .map_err(anyhow::Error::msg)
            .context("--tenant-network-policies")?,
        readiness_window: crate::workload::READINESS_WINDOW,
        deploy_deadline: std::time::Duration::from_secs(args.deploy_deadline_minutes * 60),
        cpu_request_percent: args.cpu_request_percent,
        app_disruption_budgets: args.app_disruption_budgets,
        domains: crate::domain::DomainsConfig {
            resolver: args.dns_resolver,
            edge_addresses: args.edge_addresses,
            certificate_namespace: args
                .certificate_namespace
                .or_else(|| std::env::var("POD_NAMESPACE").ok()),
            acme: args
                .acme_directory
                .map(|directory_url| crate::domain::acme::AcmeConfig {
                    directory_url,
                    email: args.acme_email,
                    root_ca: args.acme_root_ca,
                    challenge_grace: std::time::Duration::from_millis(args.acme_challenge_grace_ms),
                }),
        },
    };
    let mut ctx =
        Context::new(client, config, metrics).with_max_builds(usize::from(args.max_builds));
    if let Some(tokens) = args.registry_tokens.tokens()? {
        ctx = ctx.with_registry_tokens(tokens);
    }
    if let Some(blob) = args.blob.settings()? {
        ctx = ctx.with_blob(blob);
    }
    if let Some(postgres) = args.postgres.settings()? {
        postgres.server.check_at_start().await;
        ctx = ctx.with_postgres(postgres);
    }
    if let Some(ports) = args.forward_ports {
        ctx = ctx.with_forwards(ports);
    }
    let ctx = Arc::new(ctx);
    let addr = SocketAddr::from(([0, 0, 0, 0], args.admin_port));
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("listen on {addr}"))?;
    let admin = slipway_http::serve_router(
        listener,
        slipway_http::admin_router(Arc::new(registry), || true),
        slipway_http::shutdown_signal(),
        std::time::Duration::from_secs(5),
    );
    tracing::info!(%addr, "operator running; admin endpoints on /healthz, /readyz, /metrics");
    let elector = args.lease_namespace.as_deref().map(|ns| {
        let identity = std::env::var("POD_NAME")
            .unwrap_or_else(|_| format!("slipway-operator-{}", uuid::Uuid::new_v4()));
        LeaderElector::new(
            Api::namespaced(ctx.client.clone(), ns),
            &args.lease_name,
            &identity,
            LEASE_DURATION,
        )
    });
    let reconcile = async {
        let Some(elector) = &elector else {
            return crate::run::run(ctx.clone()).await;
        };
        elector
            .acquire()
            .await
            .context("acquire the leader lease")?;
        let outcome = tokio::select! {
            result = crate::run::run(ctx.clone()) => result,
            lost = elector.hold() => Err(anyhow::anyhow!("lost leadership: {lost}")),
        };
        // Bounded: an apiserver that stalls the release must not keep the process from exiting.
        match tokio::time::timeout(elector.renew_deadline(), elector.release()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "could not release the leader lease"),
            Err(_) => tracing::warn!("releasing the leader lease timed out"),
        }
        outcome
    };
    tokio::select! {
        result = reconcile => result,
        () = admin => Ok(()),
    }
}

/// Object-storage options of `slipway operator`.
#[derive(Debug, clap::Args)]
pub struct BlobOperatorArgs {
    /// The backend.
    #[command(flatten)]
    pub backend: S3BackendArgs,
    /// The gateway (`slipway s3`) as pods reach it: the `S3_ENDPOINT` apps get, e.g.
    /// `http://slipway-s3.slipway-system.svc:7480`.
    #[arg(long, env = "SLIPWAY_S3_ENDPOINT")]
    pub s3_endpoint: Option<String>,
}

impl BlobOperatorArgs {
    /// The settings these options name; `None` without a backend.
    pub fn settings(&self) -> anyhow::Result<Option<BlobSettings>> {
        let Some(endpoint) = self.backend.endpoint()? else {
            return Ok(None);
        };
        let pod_endpoint = self.s3_endpoint.clone().ok_or_else(|| {
            anyhow::anyhow!(
                "--s3-endpoint (the gateway as pods reach it) is needed with --s3-backend-url"
            )
        })?;
        Ok(Some(BlobSettings {
            backend: Backend::new(&endpoint),
            bucket_prefix: self.backend.s3_bucket_prefix.clone(),
            pod_endpoint,
        }))
    }
}

/// The operator's data-server options.
#[derive(Debug, Clone, clap::Args)]
pub struct PostgresOperatorArgs {
    /// The admin connection.
    #[command(flatten)]
    pub admin: DataServerArgs,
    /// The data server as pods reach it, HOST:PORT (`DATABASE_HOST` and the host of `DATABASE_URL`). Default: the
    /// host and port of the admin URL.
    #[arg(long, env = "SLIPWAY_DATA_SERVER_POD_ADDRESS")]
    pub data_server_pod_address: Option<String>,
}

impl PostgresOperatorArgs {
    /// The settings these options name; `None` without an admin URL.
    pub fn settings(&self) -> anyhow::Result<Option<PostgresSettings>> {
        let Some(server) = self.admin.server()? else {
            return Ok(None);
        };
        let pod_address = match &self.data_server_pod_address {
            Some(address) => address.clone(),
            None => {
                let options = server.admin_options();
                format!("{}:{}", options.get_host(), options.get_port())
            }
        };
        Ok(Some(PostgresSettings {
            server,
            pod_address,
        }))
    }
}
