//! How every slipway server holds its connections. Each listener accepts until its shutdown signal, then stops
//! accepting and lets open connections finish the request they are in, for a bounded time ([`accept_until`]); the
//! API, the console, the edge, the S3 gateway and the admin endpoints all drain this one way, so a rolling update
//! or a node drain cuts no request short. Slow clients cannot hold a connection open for free
//! ([`HEADER_READ_TIMEOUT`]).

mod admin;
pub mod cookies;
pub mod request_id;
pub mod tls;

pub use self::admin::{OPENMETRICS_CONTENT_TYPE, admin_router, metrics_route};

use tower::ServiceExt as _;

/// Accepts connections on `listener` until `shutdown` resolves, with TCP_NODELAY, running `serve(stream, peer,
/// draining)` for each as a task of its own. Then it stops accepting (the listener closes), tells every connection to
/// finish the request it is in ([`Draining`]), and waits for them for at most `drain_limit`. An accept error (out of
/// file descriptors and the like) waits a moment instead of spinning.
pub async fn accept_until<F>(
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()>,
    drain_limit: std::time::Duration,
    mut serve: impl FnMut(tokio::net::TcpStream, std::net::SocketAddr, Draining) -> F,
) where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    tokio::pin!(shutdown);
    let (stop, stopping) = tokio::sync::watch::channel(false);
    let connections = tokio_util::task::TaskTracker::new();
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        connections.spawn(serve(stream, peer, Draining(stopping.clone())));
    }
    drop(listener);
    let _ = stop.send(true);
    connections.close();
    if tokio::time::timeout(drain_limit, connections.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            open = connections.len(),
            "connections still open after the drain limit"
        );
    }
}

/// Longest wait for a request head on a connection [`serve_http1`] or [`serve_http`] serves (slow clients cannot
/// hold connections open for free). hyper runs it while a kept-alive connection idles between requests too, so it is
/// also how long such a connection may idle; clients that pool connections here keep them for less.
pub const HEADER_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Drives a hyper connection until it ends or, once `draining` starts, until the request it is in is answered.
macro_rules! serve_until_drained {
    ($conn:expr, $draining:expr, $peer:expr) => {{
        let conn = $conn;
        tokio::pin!(conn);
        let served = tokio::select! {
            served = conn.as_mut() => served,
            () = $draining.started() => {
                conn.as_mut().graceful_shutdown();
                conn.await
            }
        };
        if let Err(e) = served {
            tracing::debug!(error = %e, peer = %$peer, "connection ended with an error");
        }
    }};
}

/// Serves one connection [`accept_until`] accepted over HTTP/1.1 with `service` (keep-alive, upgrades allowed),
/// until the client closes it or, once `draining` starts, until the request it is in is answered.
pub async fn serve_http1<S, B>(
    stream: tokio::net::TcpStream,
    peer: std::net::SocketAddr,
    service: S,
    draining: Draining,
) where
    S: hyper::service::HttpService<hyper::body::Incoming, ResBody = B>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: hyper::body::Body + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    serve_until_drained!(
        hyper::server::conn::http1::Builder::new()
            .timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(HEADER_READ_TIMEOUT)
            .keep_alive(true)
            .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
            .with_upgrades(),
        draining,
        peer
    );
}

/// Like [`serve_http1`], over any stream (a TLS session) and speaking HTTP/2 or HTTP/1.1, whichever the client
/// starts with (ALPN's choice), waiting at most `header_read_timeout` for a request head (usually
/// [`HEADER_READ_TIMEOUT`]; it is also how long a kept-alive connection may idle).
pub async fn serve_http<I, S, B>(
    io: I,
    peer: std::net::SocketAddr,
    service: S,
    draining: Draining,
    header_read_timeout: std::time::Duration,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    S: hyper::service::Service<http::Request<hyper::body::Incoming>, Response = http::Response<B>>
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(header_read_timeout)
        .keep_alive(true);
    builder.http2().timer(TokioTimer::new());
    serve_until_drained!(
        builder.serve_connection_with_upgrades(TokioIo::new(io), service),
        draining,
        peer
    );
}

/// Tells a connection served by [`accept_until`] that the server is stopping: it should finish the request it is
/// in and close (hyper's `graceful_shutdown`).
pub struct Draining(tokio::sync::watch::Receiver<bool>);

impl Draining {
    /// Resolves once the server is stopping.
    pub async fn started(mut self) {
        let _ = self.0.wait_for(|stopping| *stopping).await;
    }
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

/// Serves `router` over HTTP/1.1 on `listener` until `shutdown`, then drains for at most `drain_limit` (see
/// [`accept_until`]). Handlers can read the peer's address with axum's `ConnectInfo<SocketAddr>`.
pub async fn serve_router(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    shutdown: impl std::future::Future<Output = ()>,
    drain_limit: std::time::Duration,
) {
    accept_until(
        listener,
        shutdown,
        drain_limit,
        move |stream, peer, draining| {
            let service =
                router
                    .clone()
                    .map_request(move |mut req: http::Request<hyper::body::Incoming>| {
                        req.extensions_mut()
                            .insert(axum::extract::ConnectInfo(peer));
                        req
                    });
            let service = hyper_util::service::TowerToHyperService::new(service);
            async move { serve_http1(stream, peer, service, draining).await }
        },
    )
    .await;
}

/// How a TLS listener holds its connections ([`serve_router_tls`]).
#[derive(Debug, Clone, Copy)]
pub struct TlsServing {
    /// Longest TLS handshake.
    pub handshake: std::time::Duration,
    /// Longest wait for a request head, and so the longest a kept-alive connection idles.
    pub header_read: std::time::Duration,
    /// How long open requests may finish once the listener stops.
    pub drain: std::time::Duration,
}

/// Serves `router` over TLS (HTTP/2 or HTTP/1.1, by ALPN) on `listener` until `shutdown`, then drains (see
/// [`accept_until`]).
pub async fn serve_router_tls(
    listener: tokio::net::TcpListener,
    tls: std::sync::Arc<rustls::ServerConfig>,
    router: axum::Router,
    shutdown: impl std::future::Future<Output = ()>,
    limits: TlsServing,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    accept_until(
        listener,
        shutdown,
        limits.drain,
        move |stream, peer, draining| {
            let acceptor = acceptor.clone();
            let service =
                hyper_util::service::TowerToHyperService::new(router.clone().map_request(
                    move |mut req: http::Request<hyper::body::Incoming>| {
                        req.extensions_mut()
                            .insert(axum::extract::ConnectInfo(peer));
                        req
                    },
                ));
            async move {
                let tls =
                    match tokio::time::timeout(limits.handshake, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => tls,
                        Ok(Err(e)) => {
                            tracing::debug!(%peer, error = %e, "TLS handshake failed");
                            return;
                        }
                        Err(_) => {
                            tracing::debug!(%peer, "TLS handshake timed out");
                            return;
                        }
                    };
                serve_http(tls, peer, service, draining, limits.header_read).await;
            }
        },
    )
    .await;
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::time::Duration;

    use axum::extract::ConnectInfo;
    use axum::routing::get;
    use http_body_util::{BodyExt as _, Empty};
    use hyper::body::Bytes;

    /// A router on a loopback port, and the sender that starts its shutdown.
    async fn start(
        router: axum::Router,
    ) -> (
        SocketAddr,
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<()>,
    ) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let served = tokio::spawn(super::serve_router(
            listener,
            router,
            async {
                let _ = stopped.await;
            },
            Duration::from_secs(10),
        ));
        (addr, stop, served)
    }

    async fn get_body(addr: SocketAddr, path: &str) -> String {
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .unwrap();
        tokio::spawn(conn);
        let req = http::Request::get(path)
            .header("host", "test")
            .body(Empty::<Bytes>::new())
            .unwrap();
        let res = sender.send_request(req).await.unwrap();
        let body = res.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8(body.to_vec()).unwrap()
    }

    #[tokio::test]
    async fn handlers_see_the_peer_address() {
        let router = axum::Router::new().route(
            "/peer",
            get(|ConnectInfo(peer): ConnectInfo<SocketAddr>| async move { peer.ip().to_string() }),
        );
        let (addr, _stop, _served) = start(router).await;
        assert_eq!(get_body(addr, "/peer").await, "127.0.0.1");
    }

    #[tokio::test]
    async fn a_request_in_flight_at_shutdown_is_answered_and_then_the_listener_is_gone() {
        let (entered, mut in_handler) = tokio::sync::mpsc::channel::<()>(1);
        let (release, released) = tokio::sync::watch::channel(false);
        let router = axum::Router::new().route(
            "/slow",
            get(move || {
                let entered = entered.clone();
                let mut released = released.clone();
                async move {
                    let _ = entered.send(()).await;
                    let _ = released.wait_for(|r| *r).await;
                    "done"
                }
            }),
        );
        let (addr, stop, served) = start(router).await;
        let request = tokio::spawn(get_body(addr, "/slow"));
        in_handler.recv().await.unwrap();
        stop.send(()).unwrap();
        // The server stops accepting before the request in flight ends.
        let refused = loop {
            match tokio::net::TcpStream::connect(addr).await {
                Err(e) => break e,
                Ok(_) => tokio::task::yield_now().await,
            }
        };
        // Reset: the connection sat in the backlog when the listener closed.
        assert!(
            matches!(
                refused.kind(),
                std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::ConnectionReset
            ),
            "{refused}"
        );
        assert!(!served.is_finished(), "it drains the open request");
        release.send(true).unwrap();
        assert_eq!(request.await.unwrap(), "done");
        served.await.unwrap();
    }
}
