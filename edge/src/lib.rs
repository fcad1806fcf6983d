//! `slipway edge`: the platform's HTTP entry, and the Ingress controller of IngressClass `slipway`.
//!
//! The operator writes one Ingress per channel (`slipway_controllers::ingress`). The edge watches those Ingresses
//! and what they name, keeps a routing table by host ([`routes`], rebuilt by [`watch`]), and answers each request
//! ([`server`]):
//!
//! - a **static** channel (resource backend naming the Channel) from the files of its deployed commit ([`site`],
//!   [`files`]), loaded from the API server's internal archive route when a request first names it and kept in a
//!   capped cache, in memory or, for a large site, on disk, the least recently used evicted ([`site_cache`]); a
//!   host always serves one whole commit, so a reader gets the old site or the new one, never a mix;
//! - a **dynamic** channel (Service backend) through a pooled HTTP/1.1 proxy to its ready endpoints ([`proxy`]),
//!   path and query unchanged, inbound `X-Svc-*` dropped, WebSocket and other upgrades joined; a channel that
//!   passed readiness on the ready file answers 502;
//! - `/svc-auth/*` on every channel host is the platform's: end-user sign-in ([`sign_in`], also the auth host
//!   `{auth_url}`), or 404 in the API's envelope when sign-in is off; an unknown host gets a small 404 page
//!   ([`pages`]).
//!
//! Over HTTPS ([`tls`]) the same answers are given on HTTP/2 or HTTP/1.1, with the certificate chosen by SNI
//! ([`certs`]): the platform's wildcard for channel hostnames and public S3 endpoints, a verified custom domain's
//! own certificate (issued by the operator) for that domain, none for any other name. Plain HTTP then redirects to HTTPS every host it
//! has a certificate for, except ACME's HTTP-01 challenges, which it answers from the Domains' status.
//!
//! Metrics per host ([`metrics`]) are served with `/healthz` and `/readyz` on the admin port; the bytes sent per
//! account are reported to the API server for its monthly bandwidth ([`bandwidth`]).

pub mod bandwidth;
pub mod certs;
mod content_type;
pub mod file_body;
pub mod files;
pub mod forward;
pub mod metrics;
pub mod pages;
pub mod proxy;
pub mod routes;
pub mod server;
pub mod site;
pub mod site_cache;
pub mod site_disk;
pub mod site_load;
pub mod site_metrics;
pub mod svc_auth;
pub mod tls;
pub mod watch;

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use arc_swap::ArcSwap;
use bytes::Bytes;
use http_body_util::{Either, Full};
use prometheus_client::registry::Registry;
use slipway_internal::{InternalClient, InternalEndpoint};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use self::metrics::{EdgeMetrics, HostKind, HostMetrics};
use self::proxy::{Proxy, ProxyConfig};
use self::routes::{Objects, Route, RouteTable, Target};
use self::site::SiteKey;
use self::site_cache::{DiskCacheConfig, SiteCache, SiteCacheConfig};

/// The body of every edge response: bytes the edge has (pages, static files in memory), an upstream's stream, or a
/// static file streamed from disk.
pub type EdgeBody = Either<Full<Bytes>, Either<hyper::body::Incoming, file_body::FileBody>>;

/// A body of `bytes`.
pub fn full(bytes: Bytes) -> EdgeBody {
    Either::Left(Full::new(bytes))
}

/// An empty body.
pub fn empty() -> EdgeBody {
    Either::Left(Full::new(Bytes::new()))
}

/// An upstream's body, passed through.
pub fn upstream(body: hyper::body::Incoming) -> EdgeBody {
    Either::Right(Either::Left(body))
}

/// A file streamed from disk.
pub fn file(body: file_body::FileBody) -> EdgeBody {
    Either::Right(Either::Right(body))
}

/// Options of `slipway edge`.
#[derive(Debug, clap::Args)]
pub struct EdgeArgs {
    /// Addresses to serve HTTP on (repeat the flag or separate with commas).
    #[arg(
        long,
        env = "SLIPWAY_EDGE_LISTEN",
        value_delimiter = ',',
        default_value = "0.0.0.0:8000"
    )]
    pub listen: Vec<SocketAddr>,
    /// Port of /healthz, /readyz and /metrics.
    #[arg(long, env = "SLIPWAY_ADMIN_PORT", default_value_t = 8081)]
    pub admin_port: u16,
    /// Base URL of the API server's internal listener, whose archive route gives static sites' files.
    #[arg(long, env = "SLIPWAY_INTERNAL_URL")]
    pub internal_url: String,
    /// File holding the edge's ServiceAccount token for the internal listener (audience `slipway-internal`), read
    /// again whenever the kubelet rotates it.
    #[arg(
        long,
        env = "SLIPWAY_INTERNAL_TOKEN_FILE",
        default_value = slipway_internal::token::DEFAULT_TOKEN_FILE
    )]
    pub internal_token_file: PathBuf,
    /// Serve only this namespace's Ingresses (default: all namespaces).
    #[arg(long, env = "SLIPWAY_WATCH_NAMESPACE")]
    pub namespace: Option<String>,
    /// Write one structured log event per request (target slipway::edge::access).
    #[arg(long, env = "SLIPWAY_EDGE_ACCESS_LOG", default_value_t = true, action = clap::ArgAction::Set)]
    pub access_log: bool,
    /// Largest static site (sum of its files) the edge serves, in MiB; a larger one answers 503. The disk cache
    /// must hold it (without --site-disk-dir the largest is a quarter of --site-cache-mib).
    #[arg(long, env = "SLIPWAY_EDGE_MAX_SITE_MIB", default_value_t = 512)]
    pub max_site_mib: u64,
    /// Memory for static sites' files and their gzip/brotli forms, in MiB. Sites are loaded when first requested
    /// and the least recently used is evicted past this cap; a site whose files exceed a quarter of it is served
    /// from the disk cache instead.
    #[arg(long, env = "SLIPWAY_EDGE_SITE_CACHE_MIB", default_value_t = 256)]
    pub site_cache_mib: u64,
    /// Directory of the disk cache, for static sites too large for memory (the edge empties its `slipway-sites`
    /// subdirectory at start). Unset: no disk cache, and such sites answer 503.
    #[arg(long, env = "SLIPWAY_EDGE_SITE_DISK_DIR")]
    pub site_disk_dir: Option<PathBuf>,
    /// Disk the disk cache may fill, in MiB (files in whole 4 KiB blocks); the least recently used site is evicted
    /// past it. At least --max-site-mib.
    #[arg(long, env = "SLIPWAY_EDGE_SITE_DISK_CACHE_MIB", default_value_t = 2048)]
    pub site_disk_cache_mib: u64,
    /// Seconds to wait for an upstream's response head.
    #[arg(long, env = "SLIPWAY_EDGE_UPSTREAM_TIMEOUT", default_value_t = 60)]
    pub upstream_timeout: u64,
    /// The S3 gateway (`slipway s3`, host:port) the channels' public S3 endpoints
    /// (`<channel hostname label>.s3.<app domain>`) are forwarded to while their app's external object-store
    /// access is on. Unset: no public S3 endpoint.
    #[arg(long, env = "SLIPWAY_S3_GATEWAY")]
    pub s3_gateway: Option<String>,
    /// Addresses to serve HTTPS on (HTTP/2 and HTTP/1.1; repeat the flag or separate with commas). None: no HTTPS.
    #[arg(long, env = "SLIPWAY_EDGE_TLS_LISTEN", value_delimiter = ',')]
    pub tls_listen: Vec<SocketAddr>,
    /// The domain of channel hostnames ({app_domain}), which the wildcard certificate covers.
    #[arg(long, env = "SLIPWAY_APP_DOMAIN")]
    pub app_domain: Option<String>,
    /// The namespace of the certificate Secrets, the only one the edge reads Secrets in: give it a namespace of its
    /// own, holding nothing but certificates. Default: the namespace the edge runs in (POD_NAMESPACE).
    #[arg(long, env = "SLIPWAY_CERTIFICATE_NAMESPACE")]
    pub certificate_namespace: Option<String>,
    /// Name of the kubernetes.io/tls Secret (in the certificate namespace) holding the certificate for
    /// `*.{app_domain}` and `*.s3.{app_domain}` (channel hostnames and their public S3 endpoints).
    #[arg(long, env = "SLIPWAY_TLS_WILDCARD_SECRET")]
    pub tls_wildcard_secret: Option<String>,
    /// Redirect plain HTTP to HTTPS for every host the edge has a certificate for (ACME challenges excepted).
    #[arg(long, env = "SLIPWAY_EDGE_REDIRECT_HTTPS", default_value_t = true, action = clap::ArgAction::Set)]
    pub redirect_https: bool,
    /// Seconds a handshake for a verified domain waits for its first certificate.
    #[arg(long, env = "SLIPWAY_EDGE_ISSUANCE_WAIT", default_value_t = 20)]
    pub issuance_wait: u64,
    /// Raw TCP forwarding: the address to open each active Forward's listener on (its port is the one the operator
    /// allocated). Unset: no forward listeners, and Forwards are not watched.
    #[arg(long, env = "SLIPWAY_EDGE_FORWARD_LISTEN")]
    pub forward_listen: Option<std::net::IpAddr>,
    /// End-user sign-in's issuer ({auth_url}): an https origin whose host this edge serves as the identity
    /// provider (`/svc-auth/jwks`, the discovery document, the sign-in's steps). Unset: no sign-in, and
    /// `/svc-auth/*` answers 404 on every channel host.
    #[arg(long, env = "SLIPWAY_AUTH_URL", requires_all = ["sign_in_key", "sign_in_secret"])]
    pub auth_url: Option<openidconnect::url::Url>,
    /// PEM file of the RSA key that signs identity cookies (PKCS#1 or PKCS#8).
    #[arg(long, env = "SLIPWAY_SIGN_IN_KEY")]
    pub sign_in_key: Option<PathBuf>,
    /// PEM files of RSA keys published beside the signing key (the next one before a rotation, the previous one
    /// for 12 hours after); repeat the flag or separate with commas.
    #[arg(long, env = "SLIPWAY_SIGN_IN_PUBLISHED_KEYS", value_delimiter = ',')]
    pub sign_in_published_keys: Vec<PathBuf>,
    /// File of the secret (32 bytes or more) people's `sub` and the sign-in's sealed values derive from. Keep it:
    /// a new one gives everybody a new `sub`.
    #[arg(long, env = "SLIPWAY_SIGN_IN_SECRET")]
    pub sign_in_secret: Option<PathBuf>,
    /// The upstream OpenID Connect provider people sign in at.
    #[command(flatten)]
    pub upstream: slipway_identity::UpstreamArgs,
}

impl EdgeArgs {
    /// Sign-in as the flags configure it.
    fn sign_in(&self) -> anyhow::Result<Option<Arc<slipway_identity::SignIn>>> {
        let (Some(auth_url), Some(key), Some(secret)) =
            (&self.auth_url, &self.sign_in_key, &self.sign_in_secret)
        else {
            return Ok(None);
        };
        let upstream = self.upstream.config()?;
        let sign_in = slipway_identity::SignIn::load(slipway_identity::SignInConfig {
            auth_url: auth_url.clone(),
            signing_key: key.clone(),
            published_keys: self.sign_in_published_keys.clone(),
            secret: secret.clone(),
            upstream,
        })?;
        tracing::info!(
            issuer = %sign_in.issuer,
            kid = sign_in.keys.signing_kid(),
            upstream = sign_in.upstream.is_some(),
            "end-user sign-in on"
        );
        Ok(Some(Arc::new(sign_in)))
    }
}

/// Settings of an edge.
#[derive(Debug, Clone)]
pub struct EdgeConfig {
    /// Serve only this namespace.
    pub namespace: Option<String>,
    /// The API server's internal listener (the archive route) and the edge's token.
    pub internal: InternalEndpoint,
    /// Whether to log every request.
    pub access_log: bool,
    /// The static-site cache's sizes and disk directory.
    pub sites: SiteCacheConfig,
    /// Proxy limits.
    pub proxy: ProxyConfig,
    /// The S3 gateway the public S3 endpoints go to; `None`: no public S3 endpoint.
    pub object_store: Option<SocketAddr>,
    /// HTTPS: where certificates come from, and how plain HTTP behaves.
    pub tls: TlsSettings,
    /// Where forward listeners are opened; `None`: no raw TCP forwarding.
    pub forward_listen: Option<std::net::IpAddr>,
    /// End-user sign-in; `None`: `/svc-auth/*` answers 404.
    pub sign_in: Option<Arc<slipway_identity::SignIn>>,
}

/// HTTPS settings of an edge.
#[derive(Debug, Clone, Default)]
pub struct TlsSettings {
    /// Where certificates come from.
    pub sources: watch::CertificateSources,
    /// Redirect plain HTTP to HTTPS for hosts with a certificate.
    pub redirect_https: bool,
    /// How long a handshake for a verified domain waits for its first certificate.
    pub issuance_wait: Duration,
}

/// A running edge: the routing table and what answers requests.
pub struct Edge {
    table: ArcSwap<RouteTable>,
    sites: SiteCache,
    proxy: Proxy,
    metrics: EdgeMetrics,
    unknown: Arc<HostMetrics>,
    access_log: bool,
    object_store: Option<SocketAddr>,
    bandwidth: Arc<bandwidth::Bandwidth>,
    /// The API server's internal listener, where bandwidth is reported.
    internal: InternalClient,
    certs: Arc<certs::Certificates>,
    tls_config: Arc<rustls::ServerConfig>,
    tls: TlsSettings,
    forwarder: Option<forward::Forwarder>,
    sign_in: Option<Arc<slipway_identity::SignIn>>,
    /// The auth host's metrics (when sign-in is on).
    auth_host: Option<Arc<HostMetrics>>,
}

impl Edge {
    /// Starts the caches and the table builder; returns once the first table is built (so a listener bound after
    /// this answers every host that exists): the edge is ready then, with no static site loaded (each is loaded
    /// by the first request naming it). The tasks run as long as the edge; one that ends is a failure.
    pub async fn start(
        client: kube::Client,
        config: EdgeConfig,
        registry: &mut Registry,
    ) -> anyhow::Result<(Arc<Self>, Vec<JoinHandle<()>>)> {
        let metrics = EdgeMetrics::register(registry);
        let auth_host = config
            .sign_in
            .as_ref()
            .map(|_| metrics.of(HostKind::SignIn));
        let internal = InternalClient::new(config.internal);
        let sites = SiteCache::new(
            Arc::new(internal.clone()),
            &config.sites,
            site_metrics::SiteCacheMetrics::register(registry),
        )?;
        let certs = Arc::new(certs::Certificates::default());
        let edge = Arc::new(Self {
            tls_config: tls::server_config(certs.clone())?,
            certs: certs.clone(),
            tls: config.tls.clone(),
            table: ArcSwap::from_pointee(RouteTable::default()),
            sites,
            proxy: Proxy::new(&config.proxy),
            unknown: metrics.of(HostKind::Unknown),
            metrics,
            access_log: config.access_log,
            object_store: config.object_store,
            bandwidth: Arc::default(),
            internal,
            forwarder: config
                .forward_listen
                .map(|host| forward::Forwarder::new(host, registry)),
            auth_host,
            sign_in: config.sign_in,
        });
        let changed = Arc::new(Notify::new());
        let (caches, mut tasks) = watch::Caches::start(
            &client,
            config.namespace.as_deref(),
            config.forward_listen.is_some(),
            &changed,
        )
        .await?;
        tasks.extend(
            watch::start_certificates(
                &client,
                &config.tls.sources,
                config.namespace.as_deref(),
                certs,
            )
            .await?,
        );
        // The first table before any listener, so every existing host is known when serving starts (it loads no
        // site: no host had one before it); the builder then builds it again at once and keeps it current.
        let objects = caches.objects();
        edge.rebuild(&objects);
        edge.listen_for_forwards(&caches, &objects);
        changed.notify_one();
        tasks.push(watch::spawn_builder(edge.clone(), caches, changed));
        tasks.push(tokio::spawn(bandwidth::report(
            edge.bandwidth.clone(),
            edge.internal.clone(),
        )));
        Ok((edge, tasks))
    }

    /// Reports the bandwidth counted since the last report now (at shutdown, once every connection has drained, so
    /// a restart loses none of it).
    pub async fn report_bandwidth(&self) {
        bandwidth::report_once(&self.bandwidth, &self.internal).await;
    }

    /// The static-site cache.
    pub fn sites(&self) -> &SiteCache {
        &self.sites
    }

    /// Opens and closes forward listeners for the active Forwards (when forwarding is on).
    pub fn listen_for_forwards(&self, caches: &watch::Caches, objects: &Objects) {
        if let Some(forwarder) = &self.forwarder {
            forwarder.apply(forward::entries(&caches.forwards(), objects));
        }
    }

    /// The ports forward listeners are open on.
    pub fn forward_ports(&self) -> Vec<u16> {
        self.forwarder
            .as_ref()
            .map(forward::Forwarder::ports)
            .unwrap_or_default()
    }

    /// Builds and installs the table for `objects`; returns the deployed commits to load ahead of their first
    /// request (see [`routes::settle`]). Sites the old table served and the new one does not are dropped from the
    /// cache.
    pub fn rebuild(&self, objects: &Objects) -> Vec<SiteKey> {
        let current = self.table.load();
        let mut loads = Vec::new();
        let mut routes = Vec::new();
        let public_s3 = self
            .object_store
            .map(|gateway| routes::object_store_targets(objects, gateway))
            .unwrap_or_default();
        // A channel's own hostname wins over an S3 endpoint that happens to spell the same host.
        let mut wanted_routes = public_s3;
        let routing = routes::routing(objects);
        self.metrics.set_ignored_rules(routing.ignored);
        wanted_routes.extend(routing.targets);
        let owners = routing.owners;
        for (host, wanted) in wanted_routes {
            let serving = current.get(&host).map(|r| &r.target);
            let (target, load) = routes::settle(wanted, serving, |key| self.sites.contains(key));
            loads.extend(load);
            routes.push(Route {
                metrics: self.metrics.of(HostKind::Channel),
                bandwidth: owners.get(&host).map(|owner| self.bandwidth.counter(owner)),
                host,
                target,
            });
        }
        let mut keep: HashSet<&SiteKey> = loads.iter().collect();
        keep.extend(routes.iter().filter_map(|r| match &r.target {
            Target::Static(key) => Some(key),
            _ => None,
        }));
        for route in current.routes() {
            if let Target::Static(key) = &route.target
                && !keep.contains(key)
            {
                self.sites.forget(key);
            }
        }
        self.metrics.set_hosts(routes.len());
        self.table.store(Arc::new(RouteTable::new(routes)));
        loads
    }
}

fn mib(n: u64) -> u64 {
    n.saturating_mul(1024 * 1024)
}

/// Runs `slipway edge` until SIGTERM.
pub async fn run(args: EdgeArgs) -> anyhow::Result<()> {
    let client = kube::Client::try_default()
        .await
        .context("connect to Kubernetes")?;
    let sign_in = args.sign_in()?;
    let config = EdgeConfig {
        namespace: args.namespace,
        internal: InternalEndpoint::with_token_file(args.internal_url, &args.internal_token_file)?,
        access_log: args.access_log,
        sites: SiteCacheConfig {
            memory_bytes: mib(args.site_cache_mib),
            max_site_bytes: mib(args.max_site_mib),
            disk: args.site_disk_dir.map(|dir| DiskCacheConfig {
                dir,
                bytes: mib(args.site_disk_cache_mib),
            }),
        },
        proxy: ProxyConfig {
            response_timeout: Duration::from_secs(args.upstream_timeout),
            ..ProxyConfig::default()
        },
        object_store: match &args.s3_gateway {
            Some(gateway) => Some(
                tokio::net::lookup_host(gateway.as_str())
                    .await
                    .with_context(|| format!("resolve the S3 gateway {gateway}"))?
                    .next()
                    .with_context(|| format!("the S3 gateway {gateway} resolves to no address"))?,
            ),
            None => None,
        },
        tls: TlsSettings {
            sources: watch::CertificateSources {
                namespace: args
                    .certificate_namespace
                    .or_else(|| std::env::var("POD_NAMESPACE").ok()),
                wildcard_secret: args.tls_wildcard_secret,
                app_domain: args.app_domain,
            },
            redirect_https: args.redirect_https && !args.tls_listen.is_empty(),
            issuance_wait: Duration::from_secs(args.issuance_wait),
        },
        forward_listen: args.forward_listen,
        sign_in,
    };
    let mut registry = Registry::default();
    let (edge, tasks) = Edge::start(client, config, &mut registry).await?;
    let mut servers = Vec::new();
    let listeners = args
        .listen
        .iter()
        .map(|a| (a, server::Scheme::Http))
        .chain(args.tls_listen.iter().map(|a| (a, server::Scheme::Https)));
    for (addr, scheme) in listeners {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("listen on {addr}"))?;
        tracing::info!(%addr, scheme = scheme.as_str(), "edge serving");
        servers.push(tokio::spawn(server::serve(
            edge.clone(),
            listener,
            scheme,
            slipway_http::shutdown_signal(),
        )));
    }
    let admin_addr = SocketAddr::from(([0, 0, 0, 0], args.admin_port));
    let admin_listener = tokio::net::TcpListener::bind(admin_addr)
        .await
        .with_context(|| format!("listen on {admin_addr}"))?;
    // Ready as soon as it serves: the first routing table is built before the admin port opens, and static sites
    // load on their first request.
    let ready = || true;
    // The admin server runs until the process ends: the HTTP and HTTPS servers decide when that is, once every one
    // of them has drained (a listener that finishes first must not cut the other's requests short).
    let admin = slipway_http::serve_router(
        admin_listener,
        slipway_http::admin_router(Arc::new(registry), ready),
        std::future::pending(),
        std::time::Duration::ZERO,
    );
    tracing::info!(%admin_addr, "admin endpoints on /healthz, /readyz, /metrics");
    let servers = futures::future::join_all(servers);
    let watch_tasks = futures::future::select_all(tasks);
    tokio::select! {
        served = servers => {
            edge.report_bandwidth().await;
            served.into_iter().try_for_each(|s| {
                s.context("edge server task")?.context("serve HTTP")
            })
        }
        () = admin => Err(anyhow::anyhow!("the admin server stopped")),
        (ended, _, _) = watch_tasks => Err(anyhow::anyhow!("a watch task stopped: {ended:?}")),
    }
}
