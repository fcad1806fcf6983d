//! What every reconcile shares: the client, the platform's public names, the client of the API server's internal
//! listener, the event recorder and the metrics.

use kube::Client;
use kube::runtime::events::{Recorder, Reporter};

use crate::metrics::Metrics;
use slipway_internal::{InternalClient, InternalEndpoint};

/// Settings of the operator.
#[derive(Debug, Clone)]
pub struct OperatorConfig {
    /// Domain of channel hostnames ({app_domain}).
    pub app_domain: String,
    /// Watch only this namespace instead of all of them.
    pub namespace: Option<String>,
    /// The API server's internal listener (git, env, deploy logs, signed source URLs, object-store records) and the
    /// operator's token.
    pub internal: InternalEndpoint,
    /// Base URL of the internal listener as build pods reach it (they fetch their sources there, with a signed URL
    /// and no token).
    pub pod_internal_url: String,
    /// The cluster's image registry (`host:port`), where builds push and nodes pull.
    pub registry: String,
    /// Where the warm bases are kept (`host:port`, the registry BuildKit's Docker Hub mirror is); `None`: the
    /// registry above.
    pub bases_registry: Option<String>,
    /// The BuildKit daemon build pods talk to (`tcp://host:port`).
    pub buildkit_addr: String,
    /// The CA BuildKit trusts for clients: each build gets a certificate of its own. `None`: BuildKit's listener
    /// takes plain connections (it must then be kept from everything but build pods by the network).
    pub buildkit_ca: Option<crate::build::buildkit_tls::BuildkitCa>,
    /// The image of the readiness sidecar beside every app container (needs busybox's `sh`, `nc` and `timeout`).
    pub probe_image: String,
    /// The image build Jobs run: curl and buildctl (see `hack/build-images.sh builder`).
    pub builder_image: String,
    /// ClusterRoles bound to the platform's ServiceAccounts in every tenant namespace (empty: none are kept, as
    /// when the components run with cluster-wide rights).
    pub tenant_grants: Vec<crate::tenancy::TenantGrant>,
    /// NetworkPolicies kept in every tenant namespace: `Some` keeps exactly these (an empty list removes slipway's
    /// policies there), `None` leaves tenant namespaces' policies alone.
    pub tenant_network_policies: Option<Vec<k8s_openapi::api::networking::v1::NetworkPolicy>>,
    /// Custom domains: the verification resolver, the edge's addresses, ACME.
    pub domains: crate::domain::DomainsConfig,
    /// How long a deploy's new version has to pass readiness: the hosting API's 120 s
    /// ([`crate::workload::READINESS_WINDOW`]), which the operator binary always uses. Tests of the failure shorten
    /// it rather than wait two minutes.
    pub readiness_window: std::time::Duration,
    /// How long after it started a deploy may wait for its pre-deploy checkpoint
    /// ([`crate::deploy::DEPLOY_DEADLINE`] unless the operator is told otherwise): past it the checkpoint is
    /// cancelled, the deploy fails saying what it waited for, and the channel's next deploy can run.
    pub deploy_deadline: std::time::Duration,
    /// How much of its plan's CPU share an app's pod requests, in percent (1-100): 100
    /// ([`crate::workload::FULL_CPU_REQUEST_PERCENT`]) reserves it all, less overcommits the nodes' CPU.
    pub cpu_request_percent: u8,
    /// Whether each app's Deployment gets a PodDisruptionBudget ([`crate::evacuate`]); never in a namespaced
    /// operator, which does not watch the nodes that would move the pod.
    pub app_disruption_budgets: bool,
}

/// Shared state of the reconcilers.
pub struct Context {
    /// The kube client.
    pub client: Client,
    /// Settings.
    pub config: OperatorConfig,
    /// Publishes Events on the reconciled objects.
    pub recorder: Recorder,
    /// Reconcile metrics.
    pub metrics: Metrics,
    /// The client of the API server's internal routes.
    pub internal: InternalClient,
    /// Object storage; `None` runs channels without buckets (the cluster tests of other parts).
    pub blob: Option<crate::blob::BlobSettings>,
    /// The data server; `None` runs channels without databases (the cluster tests of other parts).
    pub postgres: Option<crate::postgres::PostgresSettings>,
    /// DNS lookups of domain verification.
    pub dns: crate::domain::dns::HickoryLookups,
    /// Issues domain certificates, when an ACME CA and the certificate namespace are configured.
    pub issuer: Option<crate::domain::acme::Issuer>,
    /// Allocates forward ports; `None`: no raw TCP forwarding on this platform.
    pub forwards: Option<crate::forward::Allocator>,
    /// Mints the registry's tokens; `None`: the registry takes none (it is open to whoever reaches it).
    pub registry_tokens: Option<slipway_internal::registry_token::RegistryTokens>,
    /// Consecutive reconcile failures per object.
    pub backoff: crate::backoff::Backoff,
    /// How many builds may run at once, cluster-wide.
    pub max_builds: usize,
    /// The Channel controller's caches, once it runs ([`crate::run::run`]).
    pub caches: std::sync::OnceLock<crate::caches::Caches>,
    /// How long a Domain may be without its Channel before the sweep deletes it
    /// ([`crate::domain::ownership::ORPHAN_GRACE`]).
    pub orphan_domain_grace: std::time::Duration,
}

impl Context {
    /// A context for `client` with `config`.
    pub fn new(client: Client, config: OperatorConfig, metrics: Metrics) -> Self {
        let reporter = Reporter {
            controller: "slipway-operator".into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        let issuer = match (&config.domains.acme, &config.domains.certificate_namespace) {
            (Some(acme), Some(ns)) => Some(crate::domain::acme::Issuer::new(
                acme.clone(),
                client.clone(),
                ns,
            )),
            _ => None,
        };
        Self {
            dns: crate::domain::dns::HickoryLookups::new(config.domains.resolver),
            issuer,
            internal: InternalClient::new(config.internal.clone()),
            recorder: Recorder::new(client.clone(), reporter),
            client,
            config,
            metrics,
            blob: None,
            postgres: None,
            forwards: None,
            registry_tokens: None,
            backoff: Default::default(),
            max_builds: crate::build::DEFAULT_MAX_BUILDS.into(),
            caches: Default::default(),
            orphan_domain_grace: crate::domain::ownership::ORPHAN_GRACE,
        }
    }

    /// The same context with another grace for Domains without their Channel (tests shorten it).
    pub fn with_orphan_domain_grace(mut self, grace: std::time::Duration) -> Self {
        self.orphan_domain_grace = grace;
        self
    }

    /// The same context with raw TCP forwarding on `ports`.
    pub fn with_forwards(mut self, ports: crate::forward::ForwardPorts) -> Self {
        self.forwards = Some(crate::forward::Allocator::new(ports));
        self
    }

    /// The same context with at most `builds` builds at once.
    pub fn with_max_builds(mut self, builds: usize) -> Self {
        self.max_builds = builds.max(1);
        self
    }

    /// The same context with object storage.
    pub fn with_blob(mut self, blob: crate::blob::BlobSettings) -> Self {
        self.blob = Some(blob);
        self
    }

    /// The same context with a registry that takes slipway's tokens.
    pub fn with_registry_tokens(
        mut self,
        tokens: slipway_internal::registry_token::RegistryTokens,
    ) -> Self {
        self.registry_tokens = Some(tokens);
        self
    }

    /// The same context with channel databases.
    pub fn with_postgres(mut self, postgres: crate::postgres::PostgresSettings) -> Self {
        self.postgres = Some(postgres);
        self
    }
}

/// Field manager of everything the operator writes.
pub const FIELD_MANAGER: &str = "slipway-operator";
