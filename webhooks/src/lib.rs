//! Validating admission for the five kinds: the rules one object's CEL cannot express (a name already taken, one
//! channel per branch, hostname and domain uniqueness, plan caps), using the parsers of `slipway_crds::names`.
//!
//! `slipway webhook` calls [`run`]: it watches what the rules look at ([`caches`]), and serves `POST /validate`
//! over TLS ([`server`], [`tls`]), where each review is read and dispatched by kind ([`admission`]) to a validator
//! ([`validate`]) built on the shared rules ([`rules`]), which the REST API calls too.

pub mod admission;
pub mod caches;
pub mod lookup;
pub mod metrics;
pub mod server;
pub mod validate;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;

pub use caches::Caches;
pub use slipway_http::tls::TlsFiles;

/// Options of `slipway webhook`.
#[derive(Debug, Clone, clap::Args)]
pub struct WebhookArgs {
    /// Address to serve admission reviews and health checks on (HTTPS).
    #[arg(long, env = "SLIPWAY_WEBHOOK_LISTEN", default_value = "0.0.0.0:8443")]
    pub listen: SocketAddr,

    /// Address of the admin endpoints (plain HTTP): Prometheus metrics on /metrics, liveness on /healthz,
    /// readiness (the caches are loaded) on /readyz.
    #[arg(
        long,
        env = "SLIPWAY_WEBHOOK_ADMIN_LISTEN",
        default_value = "0.0.0.0:8080"
    )]
    pub admin_listen: SocketAddr,

    /// PEM certificate chain to serve, leaf first; reloaded when the file changes.
    #[arg(
        long,
        env = "SLIPWAY_WEBHOOK_TLS_CERT",
        default_value = "/etc/slipway/webhook-tls/tls.crt"
    )]
    pub tls_cert: PathBuf,

    /// PEM private key of the certificate; reloaded when the file changes.
    #[arg(
        long,
        env = "SLIPWAY_WEBHOOK_TLS_KEY",
        default_value = "/etc/slipway/webhook-tls/tls.key"
    )]
    pub tls_key: PathBuf,

    /// Seconds between checks of the certificate files for a change.
    #[arg(
        long,
        env = "SLIPWAY_WEBHOOK_CERT_RELOAD_SECONDS",
        default_value_t = 10
    )]
    pub cert_reload_seconds: u64,

    /// The platform's domain of channel hostnames ({app_domain}): custom domains under it are refused.
    #[arg(long, env = "SLIPWAY_APP_DOMAIN")]
    pub app_domain: Option<String>,
}

/// Runs the webhook until SIGTERM or Ctrl-C: checks that the CRDs are installed, starts the caches, and serves.
pub async fn run(args: WebhookArgs) -> anyhow::Result<()> {
    let client = kube::Client::try_default()
        .await
        .context("connect to the Kubernetes API")?;
    caches::check_crds(&client).await?;
    let listener = TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("listen on {}", args.listen))?;
    tracing::info!(listen = %args.listen, "serving admission reviews on /validate");
    let tls = TlsFiles {
        cert: args.tls_cert,
        key: args.tls_key,
    };
    let admin = TcpListener::bind(args.admin_listen)
        .await
        .with_context(|| format!("listen on {}", args.admin_listen))?;
    let caches = Caches::start(client, args.app_domain);
    let reviews = metrics::Reviews::default();
    let mut registry = prometheus_client::registry::Registry::default();
    reviews.register(&mut registry);
    let ready = {
        let caches = caches.clone();
        move || lookup::Lookup::readiness(&caches) == lookup::Readiness::Ready
    };
    let admin = slipway_http::serve_router(
        admin,
        slipway_http::admin_router(Arc::new(registry), ready),
        // It answers until the process ends, which the review server decides.
        std::future::pending(),
        Duration::ZERO,
    );
    tracing::info!(listen = %args.admin_listen, "admin endpoints on /healthz, /readyz, /metrics");
    let served = serve(
        listener,
        tls,
        Duration::from_secs(args.cert_reload_seconds),
        caches,
        reviews,
        shutdown_signal(),
    );
    tokio::select! {
        served = served => served,
        () = admin => Err(anyhow::anyhow!("the admin server stopped")),
    }
}

/// Serves admission reviews over TLS on `listener` from `caches`, counted in `reviews`, until `shutdown` resolves. The certificate pair is
/// loaded now (an unusable pair is an error) and reread at most every `cert_reload`. Returns an error when a cache
/// stops for good, so the process exits and is restarted.
pub async fn serve(
    listener: TcpListener,
    tls: TlsFiles,
    cert_reload: Duration,
    caches: Caches,
    reviews: metrics::Reviews,
    shutdown: impl Future<Output = ()> + Send,
) -> anyhow::Result<()> {
    let watched = caches.clone();
    tokio::select! {
        served = serve_lookup(listener, tls, cert_reload, Arc::new(caches), reviews, shutdown) => served,
        why = watched.failed() => Err(anyhow::anyhow!(why)),
    }
}

/// Serves admission reviews over TLS on `listener`, answered from `lookup`, until `shutdown` resolves ([`serve`]
/// without the watch on the caches; tests serve a view of the caches with it).
pub async fn serve_lookup<L: lookup::Lookup + 'static>(
    listener: TcpListener,
    tls: TlsFiles,
    cert_reload: Duration,
    lookup: Arc<L>,
    reviews: metrics::Reviews,
    shutdown: impl Future<Output = ()> + Send,
) -> anyhow::Result<()> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let resolver = Arc::new(slipway_http::tls::ReloadingCert::load(
        tls,
        cert_reload,
        provider.clone(),
    )?);
    let config = Arc::new(slipway_http::tls::server_config(resolver, provider)?);
    server::serve_tls(listener, config, server::router(lookup, reviews), shutdown).await
}

/// Resolves on SIGTERM (what the kubelet sends) or Ctrl-C.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::warn!(error = %e, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
    tracing::info!("shutting down");
}
