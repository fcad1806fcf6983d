//! `slipway s3`: the S3 gateway as a process of its own, so it scales and restarts apart from the API (which is
//! one replica on a ReadWriteOnce volume and restarts with Recreate; object traffic should not wait on it). It
//! needs the platform database, the keyring (to check SigV4 it must know each channel's secret) and the backend's
//! root key pair; it needs nothing from the Kubernetes API.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::routing::get;
use s3s::service::S3ServiceBuilder;
use slipway_backends::object_store::{self, S3Endpoint};
use sqlx::PgPool;
use tokio::net::TcpListener;

use super::front::Front;
use super::gateway::Gateway;
use super::metrics::{GatewayMetrics, NamesOperations};
use super::passthrough::Passthrough;
use super::quota::{Quota, Settler};
use super::tenants::{ChannelKeys, Tenants};
use slipway_store::env::crypto::Keyring;

/// Longest wait, once told to stop, for open connections to finish the requests they are in (an upload in flight
/// included).
const DRAIN_LIMIT: Duration = Duration::from_secs(20);

/// Longest wait, once the connections have ended, for the settlements of the writes they answered.
const SETTLE_LIMIT: Duration = Duration::from_secs(5);

/// Options of `slipway s3`.
#[derive(Debug, clap::Args)]
pub struct S3Args {
    /// Address to serve S3 on (apps reach it as `S3_ENDPOINT`; the edge forwards the public endpoints to it).
    #[arg(long, env = "SLIPWAY_S3_LISTEN", default_value = "0.0.0.0:7480")]
    pub listen: SocketAddr,
    /// Address of /healthz and /readyz.
    #[arg(long, env = "SLIPWAY_S3_ADMIN_LISTEN", default_value = "0.0.0.0:7481")]
    pub admin_listen: SocketAddr,
    /// Postgres URL of the platform database.
    #[arg(long, env = "SLIPWAY_DATABASE_URL")]
    pub database_url: String,
    /// Keyring that seals the channels' secret keys (the same file as the API's env keyring).
    #[arg(
        long,
        env = "SLIPWAY_ENV_KEYS_FILE",
        default_value = "/etc/slipway/env-keys/keys"
    )]
    pub env_keys_file: PathBuf,
    /// URL of the S3 backend that holds the objects.
    #[arg(long, env = "SLIPWAY_S3_BACKEND_URL")]
    pub backend_url: String,
    /// The backend's access key id.
    #[arg(long, env = "SLIPWAY_S3_BACKEND_ACCESS_KEY_ID")]
    pub backend_access_key_id: String,
    /// The backend's secret access key (from the environment; a flag would show in the process list).
    #[arg(
        long,
        env = "SLIPWAY_S3_BACKEND_SECRET_ACCESS_KEY",
        hide_env_values = true
    )]
    pub backend_secret_access_key: String,
    /// Seconds between recounts of each store's usage from the backend's listing.
    #[arg(long, env = "SLIPWAY_S3_RECOUNT_SECONDS", default_value_t = 3600)]
    pub recount_seconds: u64,
}

impl S3Args {
    /// The backend endpoint these options name.
    pub fn backend(&self) -> S3Endpoint {
        S3Endpoint {
            url: self.backend_url.clone(),
            access_key_id: self.backend_access_key_id.clone(),
            secret_access_key: self.backend_secret_access_key.clone(),
        }
    }
}

/// The gateway's S3 service and what it runs beside.
pub struct Service {
    /// The S3 service behind its front.
    pub s3: Front,
    /// The task that settles the service's writes after their answers, to be [finished](Settler::finish) once
    /// the service has stopped.
    pub settler: Settler,
    /// The access keys it knows.
    pub tenants: Arc<Tenants>,
}

/// The gateway's S3 service over `db`, opening secrets with `ring`, forwarding to `backend`.
pub fn service(db: PgPool, ring: Keyring, backend: &S3Endpoint) -> Service {
    let tenants = Tenants::listening(db.clone(), ring);
    let (quota, settler) = Quota::start(db);
    let gateway = Gateway::new(super::sdk::client(backend), tenants.clone(), quota.clone());
    let mut builder = S3ServiceBuilder::new(gateway);
    builder.set_auth(ChannelKeys(tenants.clone()));
    builder.set_access(NamesOperations);
    match Passthrough::new(backend, tenants.clone(), quota) {
        Some(forward) => builder.set_route(forward),
        None => tracing::info!(
            backend = %backend.url,
            "the backend is not plain HTTP: every request goes through the SDK"
        ),
    }
    Service {
        s3: Front::new(builder.build(), GatewayMetrics::default()),
        settler,
        tenants,
    }
}

/// Serves `service` behind its [`Front`] on `listener` until `shutdown` resolves, then lets every open connection
/// finish the request it is in (idle keep-alive connections close at once), for at most [`DRAIN_LIMIT`].
pub async fn serve(
    front: Front,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    slipway_http::accept_until(listener, shutdown, DRAIN_LIMIT, |stream, peer, draining| {
        let service = front.clone();
        async move {
            slipway_http::serve_http1(stream, peer, service, draining).await;
        }
    })
    .await;
    Ok(())
}

/// Runs the gateway until SIGTERM or Ctrl-C.
pub async fn run(args: S3Args) -> anyhow::Result<()> {
    let ring = Keyring::load(&args.env_keys_file)?;
    let db = slipway_store::db::connect(&args.database_url).await?;
    let endpoint = args.backend();
    let listener = TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("listen on {}", args.listen))?;
    let admin = TcpListener::bind(args.admin_listen)
        .await
        .with_context(|| format!("listen on {}", args.admin_listen))?;
    let ready_db = db.clone();
    let Service { s3, settler, .. } = service(db.clone(), ring, &endpoint);
    let mut registry = prometheus_client::registry::Registry::default();
    s3.metrics().register(&mut registry);
    let admin_routes = axum::Router::new()
        .route("/metrics", slipway_http::metrics_route(Arc::new(registry)))
        .route("/healthz", get(|| std::future::ready("ok")))
        .route(
            "/readyz",
            get(move || {
                let db = ready_db.clone();
                async move {
                    match sqlx::query("SELECT 1").execute(&db).await {
                        Ok(_) => (http::StatusCode::OK, "ok"),
                        Err(_) => (
                            http::StatusCode::SERVICE_UNAVAILABLE,
                            "database unavailable",
                        ),
                    }
                }
            }),
        );
    let recount = tokio::spawn(super::recount::run(
        db.clone(),
        object_store::client(&endpoint, Some(Duration::from_secs(60))),
        Duration::from_secs(args.recount_seconds.max(60)),
    ));
    tracing::info!(addr = %args.listen, backend = %endpoint.url, "serving S3");
    tokio::select! {
        served = serve(s3, listener, slipway_http::shutdown_signal()) => {
            // Every connection has ended: count the writes they answered before going.
            settler.finish(SETTLE_LIMIT).await;
            served.context("serve S3")
        }
        () = slipway_http::serve_router(admin, admin_routes, std::future::pending(), Duration::ZERO) => {
            Err(anyhow::anyhow!("the admin server stopped"))
        }
        ended = recount => Err(anyhow::anyhow!("the recount task stopped: {ended:?}")),
    }
}
