//! `slipway api`: connects the parts the REST API needs and serves it until SIGTERM, with git's smart HTTP on the
//! same port, with `--ssh-listen`, git over SSH, and with `--sql-listen`, external SQL access; the internal routes
//! the operator, the edge and build pods call are served on a listener of their own (`--internal-listen`).

mod args;
mod state;

use anyhow::Context;

use slipway_core::state::Features;

pub use self::args::{ApiArgs, GitStorage};
pub use self::state::state;

/// How long the API's listeners let open requests finish once the process is told to stop: inside the chart's
/// 30-second grace period, so the process exits before it is killed.
const DRAIN_LIMIT: std::time::Duration = std::time::Duration::from_secs(25);

/// The features the flags turn on, each checked as far as it can be at start.
async fn features(args: &ApiArgs, kube: &kube::Client) -> anyhow::Result<Features> {
    let data_server = args.data_server.server()?;
    if let Some(server) = &data_server {
        server.check_at_start().await;
    }
    let snapshot_archive = match args.snapshot_store.endpoint()? {
        Some(endpoint) => {
            let archive = slipway_postgres::archive::Archive::new(
                &endpoint,
                slipway_postgres::archive::system_bucket(&args.snapshot_store.s3_bucket_prefix),
            );
            if let Err(e) = archive.ensure_bucket().await {
                tracing::error!(error = %e, "the snapshot bucket is not there yet; snapshots fail until it is");
            }
            Some(archive)
        }
        None => None,
    };
    let oauth = args.oauth()?;
    if let Some(server) = &oauth {
        tracing::info!(issuer = %server.issuer, upstream = server.upstream.is_some(), "OAuth for the MCP server on");
    }
    Ok(Features {
        blob_access: args.s3_gateway_url.as_ref().map(|gateway_url| {
            slipway_blob::access::BlobAccess {
                gateway_url: gateway_url.clone(),
            }
        }),
        data_server,
        snapshot_archive,
        registry_tokens: args.registry_tokens.tokens()?,
        mailer: args
            .smtp_url
            .as_deref()
            .map(|url| slipway_core::registration::mailer::Mailer::new(url, &args.mail_from))
            .transpose()?,
        log_sandbox: args
            .log_sandbox()
            .map(|config| slipway_core::log_sandbox::Sandbox::new(config, kube.clone())),
        oauth: oauth.map(std::sync::Arc::new),
        public_urls: slipway_core::public_urls::PublicUrls::new(
            args.public_url.as_deref(),
            args.console.console_url.as_deref(),
        )?,
    })
}

/// Serves the API until SIGTERM or Ctrl-C; a cache task that dies takes the process down.
pub async fn run(args: ApiArgs) -> anyhow::Result<()> {
    let kube = kube::Client::try_default()
        .await
        .context("connect to Kubernetes")?;
    let features = features(&args, &kube).await?;
    let (state, tasks) = state(&args, kube).await?;
    let state = state.with_features(features);
    if let Some(sandbox) = state.log_sandbox() {
        tokio::spawn(slipway_core::log_sandbox::sweep(
            state.kube().clone(),
            sandbox.namespace().to_owned(),
        ));
    }
    tokio::spawn(slipway_data::runtime_logs::prune_every_hour(
        state.db().clone(),
    ));
    tokio::spawn(
        slipway_core::platform::sweep::Sweeper::new(state.db().clone(), state.cache().clone())
            .every_hour(),
    );
    if state.snapshot_archive().is_some() {
        tokio::spawn(slipway_data::exports::sweep_every(state.clone()));
        if state.data_server().is_some() {
            tokio::spawn(slipway_data::checkpoints::nightly::run(state.clone()));
        }
    }
    tokio::spawn(crate::job_kinds::run(state.clone()));
    tokio::spawn(slipway_git::gc::run(
        state.clone(),
        args.git_gc_prune.clone(),
    ));
    tokio::spawn(slipway_core::platform::tenancy::sync_plan_labels(
        state.kube().clone(),
        state.db().clone(),
    ));
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("listen on {}", args.listen))?;
    tracing::info!(addr = %args.listen, "serving the API");
    let ssh = match args.ssh_listen {
        Some(addr) => {
            let key = match &args.ssh_host_key_secret {
                Some(secret) => {
                    crate::host_key::load(state.kube(), secret, &args.ssh_host_key).await?
                }
                None => slipway_git::ssh::load_or_create_host_key(&args.ssh_host_key)?,
            };
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("listen for SSH on {addr}"))?;
            let state = state.clone();
            futures::future::Either::Left(async move {
                slipway_git::ssh::serve(state, listener, key).await
            })
        }
        None => futures::future::Either::Right(std::future::pending()),
    };
    let sql = match args.sql_proxy.sql_listen {
        Some(addr) => {
            let tls = args.sql_proxy.tls()?;
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("listen for SQL on {addr}"))?;
            futures::future::Either::Left(slipway_data::sql_proxy::serve(
                state.clone(),
                listener,
                tls,
            ))
        }
        None => futures::future::Either::Right(std::future::pending()),
    };
    let router = crate::routes::public(state.clone());
    let console = match args.console.console(router.clone(), state.clone())? {
        Some((addr, console)) => {
            let tls = args.console.tls()?;
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("listen for the console on {addr}"))?;
            futures::future::Either::Left(slipway_console::serve(
                listener,
                tls,
                console,
                slipway_http::shutdown_signal(),
            ))
        }
        // No console: nothing to wait for when the others drain.
        None => futures::future::Either::Right(std::future::ready(Ok(()))),
    };
    let internal_listener = tokio::net::TcpListener::bind(args.internal_listen)
        .await
        .with_context(|| format!("listen on {}", args.internal_listen))?;
    tracing::info!(addr = %args.internal_listen, "serving the internal routes");
    let internal = slipway_http::serve_router(
        internal_listener,
        slipway_rest::internal_router(state.clone()),
        slipway_http::shutdown_signal(),
        DRAIN_LIMIT,
    );
    // The peer address reaches the handlers: registration budgets are per source address.
    let server = slipway_http::serve_router(
        listener,
        router,
        slipway_http::shutdown_signal(),
        DRAIN_LIMIT,
    );
    // Both listeners drain on the signal; either failing ends the process.
    let servers = async {
        tokio::try_join!(
            async {
                server.await;
                anyhow::Ok(())
            },
            async {
                internal.await;
                anyhow::Ok(())
            },
            console,
        )
        .map(|_| ())
    };
    let watch_tasks = futures::future::select_all(tasks);
    tokio::select! {
        served = servers => served,
        ssh = ssh => ssh.and_then(|()| Err(anyhow::anyhow!("the SSH server stopped"))),
        sql = sql => sql.and_then(|()| Err(anyhow::anyhow!("the SQL listener stopped"))),
        (ended, _, _) = watch_tasks => Err(anyhow::anyhow!("a cache task stopped: {ended:?}")),
    }
}
