//! The web console ({console_url}): the pages people use instead of curl. It is served by `slipway api` on a
//! listener of its own (`--console-listen`), over TLS when given a certificate, and calls the REST API in-process
//! with the signed-in person's own token, as the MCP server does ([`slipway_rest::in_process`]): every rule (scopes,
//! roles, 404 for an app the person cannot see, validation, audit events) is the route's, never implemented again
//! here. The few things no route does are the console's by the spec: signing people in ([`login`], mapping
//! them to accounts in [`slipway_core::people`]), minting tokens at `/tokens` ([`pages::tokens`]), and moving an app to
//! another account ([`slipway_core::transfer`], which has no route at all).
//!
//! Pages are HTML rendered on the server ([`html`]); the only script is the console's own (`/static/console.js`:
//! the live build log, the copy button), and the Content-Security-Policy allows nothing from elsewhere. Sessions
//! and CSRF protection are in [`session`].

pub mod dotenv;
pub mod graphs;
pub mod html;
pub mod login;
pub mod pages;
pub mod retry;
pub mod session;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;

use slipway_core::state::AppState;
use slipway_identity::seal::Sealer;
use slipway_identity::upstream::{Upstream, UpstreamConfig};
use slipway_rest::in_process::Failure;

/// The console's router type.
pub type ConsoleRouter = axum::Router<Arc<Console>>;

/// Options of the console (flags of `slipway api`).
#[derive(Debug, Clone, clap::Args)]
pub struct ConsoleArgs {
    /// Serve the web console on this address, e.g. 0.0.0.0:8443. Unset: no console.
    #[arg(long, env = "SLIPWAY_CONSOLE_LISTEN", requires_all = ["console_url", "console_secret_file"])]
    pub console_listen: Option<SocketAddr>,
    /// The console's public origin ({console_url}), https: its session cookie is Secure. Links and the upstream
    /// provider's redirect (`<url>/sign-in/callback`) are formed from it.
    #[arg(long, env = "SLIPWAY_CONSOLE_URL")]
    pub console_url: Option<String>,
    /// File of the secret (32 bytes or more) the console's cookies are sealed with. Changing it signs everyone
    /// out.
    #[arg(long, env = "SLIPWAY_CONSOLE_SECRET_FILE")]
    pub console_secret_file: Option<PathBuf>,
    /// Certificate chain (PEM) the console's listener serves TLS with; without it the listener speaks plain HTTP
    /// and something in front of it must terminate TLS.
    #[arg(long, env = "SLIPWAY_CONSOLE_TLS_CERT", requires = "console_tls_key")]
    pub console_tls_cert: Option<PathBuf>,
    /// The certificate's private key (PEM).
    #[arg(long, env = "SLIPWAY_CONSOLE_TLS_KEY", requires = "console_tls_cert")]
    pub console_tls_key: Option<PathBuf>,
    /// Issuer URL of the upstream OpenID Connect provider people sign in to the console at (register
    /// `<console url>/sign-in/callback` there). Unset: people sign in by a code mailed to their verified address.
    #[arg(long, env = "SLIPWAY_CONSOLE_SIGN_IN_ISSUER", requires_all = ["console_sign_in_client_id", "console_sign_in_client_secret_file"])]
    pub console_sign_in_issuer: Option<String>,
    /// The console's client id at that provider.
    #[arg(long, env = "SLIPWAY_CONSOLE_SIGN_IN_CLIENT_ID")]
    pub console_sign_in_client_id: Option<String>,
    /// File holding the console's client secret at that provider.
    #[arg(long, env = "SLIPWAY_CONSOLE_SIGN_IN_CLIENT_SECRET_FILE")]
    pub console_sign_in_client_secret_file: Option<PathBuf>,
    /// The port apps answer HTTPS on at their hostnames (the edge's public one), for the console's links to them;
    /// at 443 the links name none.
    #[arg(long, env = "SLIPWAY_CONSOLE_APPS_PORT", default_value_t = 443)]
    pub console_apps_port: u16,
}

/// The console: its origin, its sealing key, its upstream provider, and the API it calls.
pub struct Console {
    /// `https://host[:port]`, no trailing slash.
    pub origin: String,
    /// Seals the console's cookies.
    pub sealer: Sealer,
    /// The port apps answer HTTPS on at their hostnames (443 unless set otherwise).
    pub apps_port: u16,
    /// The provider people may sign in at.
    pub upstream: Option<Upstream>,
    /// The public REST API's router, called in-process.
    pub api: axum::Router,
    /// The API's state (the database for sign-in codes and sessions, the mailer, the transfer service).
    pub state: AppState,
    /// One mailed sign-in code a minute per address, whether or not an account has it, so the answer never tells.
    pub code_spacing: slipway_auth::rate::KeyedLimiter<String>,
}

impl Console {
    /// A console at `url` (an https origin) sealing with `secret` (at least 32 bytes), calling `api`.
    pub fn new(
        url: &str,
        secret: &[u8],
        upstream: Option<UpstreamConfig>,
        api: axum::Router,
        state: AppState,
    ) -> anyhow::Result<Self> {
        let origin = checked_origin(url, secret)?;
        let upstream =
            upstream.map(|config| Upstream::new(config, format!("{origin}/sign-in/callback")));
        Ok(Self {
            origin,
            sealer: Sealer::derive_for(secret, b"slipway console sealing key"),
            apps_port: 443,
            upstream,
            api,
            state,
            code_spacing: slipway_auth::rate::KeyedLimiter::with_quota(Some(
                governor::Quota::with_period(std::time::Duration::from_secs(
                    slipway_core::registration::codes::SPACING_SECONDS.unsigned_abs(),
                ))
                .context("the spacing of sign-in codes is zero")?,
            )),
        })
    }
}

/// The origin of the console URL `url` (no trailing slash) when it is an https origin without a path, and `secret`
/// is long enough to seal with.
fn checked_origin(url: &str, secret: &[u8]) -> anyhow::Result<String> {
    let parsed = openidconnect::url::Url::parse(url)
        .with_context(|| format!("the console URL {url} is not a URL"))?;
    anyhow::ensure!(
        parsed.scheme() == "https" && parsed.path() == "/" && parsed.host_str().is_some(),
        "the console URL {url} must be an https origin without a path (the session cookie is Secure)"
    );
    anyhow::ensure!(
        secret.len() >= 32,
        "the console secret has {} bytes; it needs at least 32",
        secret.len()
    );
    Ok(parsed.as_str().trim_end_matches('/').to_owned())
}

impl ConsoleArgs {
    /// The console the flags describe, calling `api`; `None` without `--console-listen`.
    pub fn console(
        &self,
        api: axum::Router,
        state: AppState,
    ) -> anyhow::Result<Option<(SocketAddr, Arc<Console>)>> {
        let Some(listen) = self.console_listen else {
            return Ok(None);
        };
        let (Some(url), Some(secret_file)) = (&self.console_url, &self.console_secret_file) else {
            anyhow::bail!("--console-listen needs --console-url and --console-secret-file");
        };
        let secret = std::fs::read(secret_file)
            .with_context(|| format!("read the console secret {}", secret_file.display()))?;
        let upstream = UpstreamConfig::from_flags(
            self.console_sign_in_issuer.as_ref(),
            self.console_sign_in_client_id.as_ref(),
            self.console_sign_in_client_secret_file.as_ref(),
        )?;
        let mut console = Console::new(url, secret.trim_ascii(), upstream, api, state)?;
        console.apps_port = self.console_apps_port;
        tracing::info!(
            addr = %listen,
            url = %console.origin,
            upstream = console.upstream.is_some(),
            "the console is on"
        );
        Ok(Some((listen, Arc::new(console))))
    }

    /// The TLS configuration of the listener, when a certificate is given.
    pub fn tls(&self) -> anyhow::Result<Option<Arc<rustls::ServerConfig>>> {
        let (Some(cert), Some(key)) = (&self.console_tls_cert, &self.console_tls_key) else {
            return Ok(None);
        };
        let chain = rustls_pemfile::certs(&mut std::io::BufReader::new(
            std::fs::File::open(cert).with_context(|| format!("open {}", cert.display()))?,
        ))
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("read the certificates in {}", cert.display()))?;
        let key = rustls_pemfile::private_key(&mut std::io::BufReader::new(
            std::fs::File::open(key).with_context(|| format!("open {}", key.display()))?,
        ))?
        .with_context(|| format!("no private key in {}", key.display()))?;
        let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .context("the console's certificate and key")?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Some(Arc::new(config)))
    }
}

/// Every page of the console, with its static files and security headers.
pub fn router(console: Arc<Console>) -> axum::Router {
    let routes = ConsoleRouter::new()
        .route("/", get(|| async { Redirect::to("/apps") }))
        .route("/static/console.css", get(css))
        .route("/static/console.js", get(js))
        .route("/static/favicon.svg", get(favicon))
        .merge(login::routes())
        .merge(pages::routes())
        .fallback(|| async { error_page(StatusCode::NOT_FOUND, "There is no such page.") })
        .with_state(console);
    slipway_rest::guarded(
        routes
            .layer(axum::middleware::from_fn(security_headers))
            .layer(tower_http::timeout::TimeoutLayer::with_status_code(
                StatusCode::SERVICE_UNAVAILABLE,
                slipway_rest::REQUEST_TIMEOUT,
            ))
            .layer(
                tower_http::trace::TraceLayer::new_for_http().make_span_with(
                    |req: &Request| tracing::info_span!("console", method = %req.method()),
                ),
            ),
    )
}

/// What the browser is told about every answer: only the console's own resources, no framing, no caching of
/// pages that show a person's data, and no referrer leaving for another site (`same-origin`: with `no-referrer` a browser posts forms with `Origin: null`).
async fn security_headers(req: Request, next: Next) -> Response {
    let mut response = next.run(req).await;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; \
             form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    headers.insert(
        header::STRICT_TRANSPORT_SECURITY,
        HeaderValue::from_static("max-age=31536000"),
    );
    if !headers.contains_key(header::CACHE_CONTROL) {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

async fn css() -> Response {
    asset(
        "text/css; charset=utf-8",
        include_str!("assets/console.css"),
    )
}

async fn js() -> Response {
    asset(
        "text/javascript; charset=utf-8",
        include_str!("assets/console.js"),
    )
}

async fn favicon() -> Response {
    asset("image/svg+xml", include_str!("assets/favicon.svg"))
}

/// One of the console's own files, of type `content_type`, cached a little while.
fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "public, max-age=300"),
        ],
        body,
    )
        .into_response()
}

/// An HTML answer.
pub fn html_page(
    status: StatusCode,
    title: &str,
    header: Option<&html::Header<'_>>,
    body: html::Markup,
) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        html::page(title, header, body).into_string(),
    )
        .into_response()
}

/// A page saying what went wrong, with the navigation when someone is signed in.
pub fn error_page_for(
    header: Option<&html::Header<'_>>,
    status: StatusCode,
    message: &str,
) -> Response {
    let body = html::html! {
        (html::banner("error", message))
        p { a href="/apps" { "Back to your apps" } }
    };
    let title = if status == StatusCode::NOT_FOUND {
        "Not found"
    } else {
        "That did not work"
    };
    html_page(status, title, header, body)
}

/// A page saying what went wrong, for nobody in particular.
pub fn error_page(status: StatusCode, message: &str) -> Response {
    error_page_for(None, status, message)
}

impl session::Person {
    /// What a page answers this person when the API refused: the sign-in page for a token that stopped working,
    /// else the API's status and its message as a sentence. The API answers what a caller cannot see exactly as
    /// what does not exist, so its message says no more than a missing thing's would; it names what was missing
    /// (`No account is named "bob".` when sharing), which a bare "no such page" would not.
    pub fn refused(&self, failure: &Failure, here: &str) -> Response {
        if failure.status == 401 {
            return session::SignedOut::returning_to(here).into_response();
        }
        error_page_for(
            Some(&self.header()),
            StatusCode::from_u16(failure.status).unwrap_or(StatusCode::BAD_GATEWAY),
            &html::sentence(&failure.message),
        )
    }
}

/// How long open console requests may finish once the process is told to stop.
const DRAIN_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Serves the console on `listener` until `shutdown`: TLS when `tls` is set, else plain HTTP.
pub async fn serve(
    listener: tokio::net::TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    console: Arc<Console>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let app = router(console);
    match tls {
        None => slipway_http::serve_router(listener, app, shutdown, DRAIN_LIMIT).await,
        Some(tls) => {
            let limits = slipway_http::TlsServing {
                handshake: slipway_http::HEADER_READ_TIMEOUT,
                header_read: slipway_http::HEADER_READ_TIMEOUT,
                drain: DRAIN_LIMIT,
            };
            slipway_http::serve_router_tls(listener, tls, app, shutdown, limits).await;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(cert: Option<PathBuf>, key: Option<PathBuf>) -> ConsoleArgs {
        ConsoleArgs {
            console_listen: None,
            console_url: None,
            console_secret_file: None,
            console_tls_cert: cert,
            console_tls_key: key,
            console_sign_in_issuer: None,
            console_sign_in_client_id: None,
            console_sign_in_client_secret_file: None,
            console_apps_port: 443,
        }
    }

    #[test]
    fn the_console_is_an_https_origin_with_a_long_enough_secret() {
        let secret = [7u8; 32];
        assert_eq!(
            checked_origin("https://console.example:8443/", &secret).unwrap(),
            "https://console.example:8443"
        );
        assert_eq!(
            checked_origin("https://console.example:443", &secret).unwrap(),
            "https://console.example"
        );
        for url in [
            "http://console.example",
            "https://console.example/console",
            "console.example",
        ] {
            assert!(checked_origin(url, &secret).is_err(), "{url}");
        }
        assert!(checked_origin("https://console.example", &secret[..31]).is_err());
    }

    #[test]
    fn the_listener_serves_the_certificate_it_is_given_and_plain_http_without_one() {
        assert!(args(None, None).tls().unwrap().is_none());
        let made = rcgen::generate_simple_self_signed(vec!["console.example".to_owned()]).unwrap();
        let dir =
            std::env::temp_dir().join(format!("slipway-console-tls-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
        std::fs::write(&cert, made.cert.pem()).unwrap();
        std::fs::write(&key, made.signing_key.serialize_pem()).unwrap();
        let tls = args(Some(cert.clone()), Some(key)).tls().unwrap().unwrap();
        assert_eq!(tls.alpn_protocols, [b"h2".to_vec(), b"http/1.1".to_vec()]);
        let missing = args(Some(cert), Some(dir.join("nothing.key"))).tls();
        assert!(missing.is_err(), "a key that is not there stops the start");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
