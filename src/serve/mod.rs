//! `slipway api`: connects the parts the REST API needs and serves it until SIGTERM, with git's smart HTTP on the
//! same port, with `--ssh-listen`, git over SSH, and with `--sql-listen`, external SQL access; the internal routes
//! the operator, the edge and build pods call are served on a listener of their own (`--internal-listen`).

mod args;
mod state;

use anyhow::Context;

pub use self::args::ApiArgs;
pub use self::state::state;

/// How long the API's listeners let open requests finish once the process is told to stop: inside the chart's
/// 30-second grace period, so the process exits before it is killed.
const DRAIN_LIMIT: std::time::Duration = std::time::Duration::from_secs(25);

/// Serves the API until SIGTERM or Ctrl-C; a cache task that dies takes the process down.
pub async fn run(args: ApiArgs) -> anyhow::Result<()> {
    let kube = kube::Client::try_default()
        .await
        .context("connect to Kubernetes")?;
    let (state, tasks) = state(&args, kube).await?;
    if let Some(tokens) = args.registry_tokens.tokens()? {
        state.set_registry_tokens(tokens);
    }
    if let Some(url) = &args.smtp_url {
        state.set_mailer(crate::registration::mailer::Mailer::new(
            url,
            &args.mail_from,
        )?);
    }
    if let Some(config) = args.log_sandbox() {
        tokio::spawn(crate::runtime_logs::sandbox::sweep(
            state.kube().clone(),
            config.namespace.clone(),
        ));
        state.set_log_sandbox(crate::runtime_logs::sandbox::Sandbox::new(
            config,
            state.kube().clone(),
        ));
    }
    tokio::spawn(crate::runtime_logs::prune_every_hour(state.db().clone()));
    tokio::spawn(
        crate::platform::sweep::Sweeper::new(state.db().clone(), state.cache().clone())
            .every_hour(),
    );
    state.set_public_urls(crate::core::public_urls::PublicUrls::new(
        args.public_url.as_deref(),
        args.console.console_url.as_deref(),
    )?);
    if let Some(server) = args.oauth()? {
        tracing::info!(issuer = %server.issuer, upstream = server.upstream.is_some(), "OAuth for the MCP server on");
        state.set_oauth(server);
    }
    if let Some(gateway_url) = &args.s3_gateway_url {
        state.set_blob_access(crate::blob::access::BlobAccess {
            gateway_url: gateway_url.clone(),
        });
    }
    if let Some(server) = args.data_server.server()? {
        crate::postgres::settings::check_at_start(&server).await;
        state.set_data_server(server);
    }
    if let Some(endpoint) = args.snapshot_store.endpoint()? {
        let archive = crate::postgres::archive::Archive::new(
            &endpoint,
            crate::postgres::archive::system_bucket(&args.snapshot_store.s3_bucket_prefix),
        );
        if let Err(e) = archive.ensure_bucket().await {
            tracing::error!(error = %e, "the snapshot bucket is not there yet; snapshots fail until it is");
        }
        state.set_snapshot_archive(archive);
        tokio::spawn(crate::exports::sweep_every(state.clone()));
        if state.data_server().is_some() {
            tokio::spawn(crate::checkpoints::nightly::run(state.clone()));
        }
    }
    tokio::spawn(crate::jobs::kinds::run(state.clone()));
    tokio::spawn(crate::git::gc::run(
        state.clone(),
        args.git_gc_prune.clone(),
    ));
    tokio::spawn(crate::platform::tenancy::sync_plan_labels(
        state.kube().clone(),
        state.db().clone(),
    ));
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
    let sql = match args.sql_proxy.sql_listen {
        Some(addr) => {
            let tls = args.sql_proxy.tls()?;
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("listen for SQL on {addr}"))?;
            futures::future::Either::Left(crate::sql_proxy::serve(state.clone(), listener, tls))
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
            futures::future::Either::Left(crate::console::serve(
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
        crate::api::internal_router(state.clone()),
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
