//! External SQL access: a TLS Postgres endpoint (`slipway api --sql-listen`) where a client logs in with its
//! account's username and an access token as the password, and is relayed to a channel's database as the
//! channel's write role:
//!
//! ```text
//! postgresql://<username>:<token>@<db host>:5432/<app>[-<channel>]?sslmode=require
//! ```
//!
//! It runs in the API process, like git over SSH, because everything a login needs is there: the token hashes,
//! the apps and channels (cache), the sealed role passwords and the keyring that opens them, and the data
//! server's address. The proxy speaks the protocol only up to authentication:
//!
//! 1. [`wire`]: a plaintext StartupMessage is refused (TLS is required); an SSLRequest is answered `S` and TLS
//!    starts ([`tls`]), a GSSENCRequest `N`; a client may also start with TLS directly (`sslnegotiation=direct`).
//! 2. The client is asked for a cleartext password (inside TLS) and [`login`] checks it, the user and the
//!    database ([`target`]); every refusal is the same `28P01` error, whatever the reason.
//! 3. [`upstream`] logs in to the data server as the channel's role, and its greeting (parameters, backend key,
//!    ReadyForQuery) goes to the client; from then on bytes are copied both ways untouched.
//! 4. [`slipway_core::sql_sessions`] ends open sessions when their token or the app's toggle no longer allows them.
//!
//! A CancelRequest (plaintext or inside TLS) is passed on to the data server only when it names the backend key
//! of a session the proxy opened, on this replica or another ([`slipway_store::db::sql_cancel_keys`]: a client
//! cancels on a new connection, which a Service may send to any replica), so the proxy cannot be used to guess
//! other sessions' keys.

pub mod login;
pub mod target;
pub mod tls;
pub mod upstream;
pub mod wire;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tracing::Instrument;

use login::Refusal;
use slipway_core::state::AppState;
use wire::Startup;

/// Longest a client may take from connecting to being logged in.
pub const LOGIN_LIMIT: Duration = Duration::from_secs(30);

/// Options of the external SQL listener (part of `slipway api`).
#[derive(Debug, Clone, clap::Args)]
pub struct SqlProxyArgs {
    /// Also serve external SQL access on this address (TLS Postgres, e.g. 0.0.0.0:5432): clients log in with
    /// their username and an access token and reach `<app>` (prod) or `<app>-<channel>` of apps whose external
    /// SQL access is on. Needs the data server.
    #[arg(long, env = "SLIPWAY_SQL_LISTEN")]
    pub sql_listen: Option<SocketAddr>,
    /// PEM certificate chain of the SQL listener (reread when it changes); without it a self-signed certificate
    /// is made at start, which `sslmode=require` accepts.
    #[arg(long, env = "SLIPWAY_SQL_TLS_CERT", requires = "sql_tls_key")]
    pub sql_tls_cert: Option<PathBuf>,
    /// PEM private key of the SQL listener's certificate.
    #[arg(long, env = "SLIPWAY_SQL_TLS_KEY", requires = "sql_tls_cert")]
    pub sql_tls_key: Option<PathBuf>,
    /// Where clients reach the SQL listener (HOST or HOST:PORT), as the console's connection strings name it;
    /// default: the git host on port 5432, where the chart's api Service answers.
    #[arg(long, env = "SLIPWAY_SQL_PUBLIC_ADDRESS")]
    pub sql_public_address: Option<String>,
}

impl SqlProxyArgs {
    /// Where clients reach the listener, when there is one: `--sql-public-address`, else `git_host` on 5432.
    pub fn public_address(&self, git_host: &str) -> Option<String> {
        self.sql_listen?;
        Some(
            self.sql_public_address
                .clone()
                .unwrap_or_else(|| format!("{git_host}:5432")),
        )
    }

    /// The listener's TLS configuration.
    pub fn tls(&self) -> anyhow::Result<Arc<rustls::ServerConfig>> {
        let files = self.sql_tls_cert.clone().zip(self.sql_tls_key.clone());
        tls::server_config(files, &["localhost".to_owned()])
    }
}

/// What every connection of the listener shares.
struct Proxy {
    state: AppState,
    tls: TlsAcceptor,
    data_server: (String, u16),
}

/// Serves external SQL access on `listener` until the process ends, and checks the open sessions' access every
/// second. Fails at once without a data server.
pub async fn serve(
    state: AppState,
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
) -> anyhow::Result<()> {
    let server = state
        .data_server()
        .context("--sql-listen needs the data server (--data-server-url)")?;
    let options = server.admin_options();
    let proxy = Arc::new(Proxy {
        data_server: (options.get_host().to_owned(), options.get_port()),
        tls: TlsAcceptor::from(tls),
        state: state.clone(),
    });
    tracing::info!(addr = %listener.local_addr()?, "serving external SQL access");
    tokio::spawn(slipway_core::sql_sessions::watch(
        state.sql_sessions().clone(),
        state.cache().clone(),
        state.db().clone(),
    ));
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(pair) => pair,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let proxy = proxy.clone();
        let span = tracing::info_span!("sql", %peer);
        tokio::spawn(proxy.connection(stream).instrument(span));
    }
}

/// How the login phase ended.
enum Login<C> {
    /// Relay `client` and the data server's session.
    Relay(C, Box<(upstream::Upstream, login::Grant)>),
    /// The connection is done (refused, cancelled, or gone).
    Done,
}

impl Proxy {
    async fn connection(self: Arc<Self>, stream: TcpStream) {
        let login = tokio::time::timeout(LOGIN_LIMIT, self.login(stream)).await;
        match login {
            Ok(Ok(Login::Relay(client, session))) => {
                let (upstream, grant) = *session;
                self.relay(client, upstream, grant).await;
            }
            Ok(Ok(Login::Done)) => {}
            Ok(Err(e)) => {
                self.state
                    .sql_sessions()
                    .refused(Refusal::Protocol.as_str());
                tracing::debug!(error = %e, "connection ended before login");
            }
            Err(_) => {
                self.state
                    .sql_sessions()
                    .refused(Refusal::Protocol.as_str());
                tracing::debug!("login took too long; connection closed");
            }
        }
    }

    /// The plaintext start: encryption requests and cancels, until TLS starts.
    async fn login(
        &self,
        mut tcp: TcpStream,
    ) -> Result<Login<tokio_rustls::server::TlsStream<TcpStream>>, wire::WireError> {
        let mut first = [0u8; 1];
        let direct_tls = tcp.peek(&mut first).await? == 1 && first[0] == wire::TLS_HANDSHAKE_BYTE;
        if !direct_tls {
            loop {
                match wire::read_startup(&mut tcp).await? {
                    Startup::Ssl => {
                        wire::send(&mut tcp, b"S").await?;
                        break;
                    }
                    Startup::GssEnc => wire::send(&mut tcp, b"N").await?,
                    Startup::Cancel { pid, key } => {
                        self.cancel(pid, &key).await;
                        return Ok(Login::Done);
                    }
                    Startup::Message { .. } => {
                        self.state.sql_sessions().refused("plaintext");
                        tracing::info!("plaintext login refused: TLS is required");
                        let refusal =
                            wire::fatal("28000", "TLS is required: connect with sslmode=require");
                        wire::send(&mut tcp, &refusal).await?;
                        return Ok(Login::Done);
                    }
                }
            }
        }
        let tls = self.tls.accept(tcp).await?;
        self.login_tls(tls).await
    }

    /// The login inside TLS: the StartupMessage, the password, the checks, and the data server's login.
    async fn login_tls<C: AsyncRead + AsyncWrite + Unpin>(
        &self,
        mut client: C,
    ) -> Result<Login<C>, wire::WireError> {
        let startup = loop {
            match wire::read_startup(&mut client).await? {
                Startup::GssEnc => wire::send(&mut client, b"N").await?,
                Startup::Ssl => return Err(wire::WireError::Invalid("SSLRequest inside TLS")),
                Startup::Cancel { pid, key } => {
                    self.cancel(pid, &key).await;
                    return Ok(Login::Done);
                }
                message @ Startup::Message { .. } => break message,
            }
        };
        let Startup::Message { minor, params } = &startup else {
            return Ok(Login::Done);
        };
        let user = startup.param("user").unwrap_or_default().to_owned();
        let database = startup.param("database").unwrap_or(&user).to_owned();
        let unrecognized: Vec<&str> = params
            .iter()
            .map(|(k, _)| k.as_str())
            .filter(|k| k.starts_with("_pq_."))
            .collect();
        if *minor > 0 || !unrecognized.is_empty() {
            wire::send(&mut client, &wire::negotiate_protocol(&unrecognized)).await?;
        }
        wire::send(&mut client, &wire::cleartext_password_request()).await?;
        let password = wire::read_password(&mut client).await?;

        let grant = match login::check(&self.state, &user, &database, &password).await {
            Ok(grant) => grant,
            Err((reason, detail)) => {
                self.state.sql_sessions().refused(reason.as_str());
                tracing::info!(%user, %database, reason = reason.as_str(), %detail, "SQL login refused");
                wire::send(&mut client, &wire::login_refused(&user)).await?;
                return Ok(Login::Done);
            }
        };
        let passed_on: Vec<(String, String)> = params
            .iter()
            .filter(|(k, _)| {
                !matches!(k.as_str(), "user" | "database" | "replication")
                    && !k.starts_with("_pq_.")
            })
            .cloned()
            .collect();
        let upstream = upstream::connect(
            &self.data_server,
            &grant.db_name,
            &grant.role,
            &grant.password,
            &passed_on,
        )
        .await;
        match upstream {
            Ok(upstream) => Ok(Login::Relay(client, Box::new((upstream, grant)))),
            Err(upstream::UpstreamError::Refused(error)) => {
                self.state.sql_sessions().refused("data_server");
                tracing::info!(db = %grant.db_name, "the data server refused the session");
                wire::send(&mut client, &error).await?;
                Ok(Login::Done)
            }
            Err(e) => {
                self.state.sql_sessions().refused("data_server");
                tracing::warn!(db = %grant.db_name, error = %e, "the data server cannot be reached");
                let unavailable = wire::fatal(
                    "57P03",
                    "the database cannot be reached right now; try again shortly",
                );
                wire::send(&mut client, &unavailable).await?;
                Ok(Login::Done)
            }
        }
    }

    /// Passes a CancelRequest on when it names a session the proxy opened on any replica.
    async fn cancel(&self, pid: i32, key: &[u8]) {
        match slipway_store::db::sql_cancel_keys::known(self.state.db(), pid, key).await {
            Ok(true) => {}
            Ok(false) => {
                tracing::debug!(pid, "cancel request for no open session ignored");
                return;
            }
            Err(e) => {
                tracing::warn!(pid, error = %e, "cancel request dropped: the platform database did not answer");
                return;
            }
        }
        if let Err(e) = upstream::cancel(&self.data_server, pid, key).await {
            tracing::warn!(pid, error = %e, "passing a cancel request on failed");
        }
    }

    /// Sends the data server's greeting to the client and copies bytes both ways until either side closes or the
    /// session's access is taken away.
    async fn relay<C: AsyncRead + AsyncWrite + Unpin>(
        &self,
        mut client: C,
        mut upstream: upstream::Upstream,
        grant: login::Grant,
    ) {
        let session = self
            .state
            .sql_sessions()
            .open(grant.token_id, grant.app_id, &grant.username);
        // Listed before the client learns the key, so a cancel sent at once finds it; forgotten when it ends.
        let cancel_key = upstream.cancel_key.take();
        if let Some((pid, key)) = &cancel_key
            && let Err(e) =
                slipway_store::db::sql_cancel_keys::record(self.state.db(), *pid, key).await
        {
            tracing::warn!(error = %e, "the session's cancel key could not be listed: cancels will not reach it");
        }
        let started = Instant::now();
        tracing::info!(user = %grant.username, db = %grant.db_name, channel_id = %grant.channel_id, "SQL session opened");
        if let Err(e) = wire::send(&mut client, &upstream.greeting).await {
            tracing::debug!(error = %e, "the client went away during the greeting");
            return;
        }
        let ended = tokio::select! {
            copied = tokio::io::copy_bidirectional(&mut client, &mut upstream.stream) => match copied {
                Ok((up, down)) => format!("closed after {up} bytes up, {down} down"),
                Err(e) => format!("ended: {e}"),
            },
            () = session.cut.cancelled() => {
                let _ = tokio::time::timeout(Duration::from_secs(1), client.shutdown()).await;
                "cut: access was taken away".to_owned()
            }
        };
        tracing::info!(
            user = %grant.username,
            db = %grant.db_name,
            seconds = started.elapsed().as_secs_f64(),
            "SQL session {ended}"
        );
        if let Some((pid, key)) = &cancel_key
            && let Err(e) =
                slipway_store::db::sql_cancel_keys::forget(self.state.db(), *pid, key).await
        {
            tracing::warn!(error = %e, "the ended session's cancel key stays listed until the sweep");
        }
    }
}
