//! OAuth 2.0 for people at the MCP server, as the MCP authorization specification (2026-07-28) asks: the API is
//! both the protected resource ({mcp_url}) and its authorization server, whose issuer is the API's public URL.
//! The routes are in `slipway_rest::oauth`; this module holds what is not HTTP.
//!
//! - **Discovery**: `/.well-known/oauth-protected-resource[/mcp]` (RFC 9728) names {mcp_url} and this issuer; a
//!   401 from the MCP endpoint points at it with `WWW-Authenticate: Bearer resource_metadata="..."`;
//!   `/.well-known/oauth-authorization-server` (RFC 8414) names the endpoints.
//! - **Clients** register themselves (RFC 7591, [`clients`]): public clients only (no secret; PKCE stands in for
//!   it), with redirect URIs that are https, or http on a loopback address, matched exactly later.
//! - **Authorization** (authorization code with PKCE, S256 only, [`requests`]): the person signs in at the same
//!   upstream OpenID Connect provider as end-user sign-in ([`slipway_identity::upstream`], with this server's own
//!   redirect URI), is mapped to their account by their verified address ([`crate::people`]), and allows the
//!   client on a consent page. The request is bound to the browser that started it by a cookie, so a sign-in
//!   carried to another browser opens nothing, and a client registered by anyone gets a code only after the
//!   person saw its name and redirect and said yes.
//! - **Tokens**: the single-use code (60 s) and its verifier buy an ordinary `svc_` token (stored as a SHA-256
//!   like every token) with the scopes asked for (default: the nine default scopes), for a person (not an agent),
//!   living 30 days (the spec's longest credential), bound to {mcp_url} (RFC 8707 `resource`): it is taken at
//!   the MCP endpoint only, and refused (403 `scope_denied`) by every REST route, git and the SQL listener.
//!   There is no refresh token: a client signs in again after 30 days, and a second long-lived secret with the
//!   same power would buy nothing. A code presented twice revokes the token it bought.
//!
//! Errors of these endpoints are the RFCs' JSON (`{error, error_description}`), which OAuth clients read, rather
//! than the API's envelope; once the client and its redirect URI are known to be good, the authorization
//! endpoint's errors go back to the client on that redirect, as RFC 6749 says.

pub mod clients;
pub mod consent;
pub mod pkce;
pub mod requests;

use std::time::Duration;

use anyhow::Context as _;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use slipway_identity::upstream::{Upstream, UpstreamConfig};

/// How long an authorization request may take, sign-in and consent included.
pub const REQUEST_LIFETIME: Duration = Duration::from_secs(600);
/// How long a code may wait for its redemption.
pub const CODE_LIFETIME: Duration = Duration::from_secs(60);
/// How long a token from the flow lives.
pub const TOKEN_LIFETIME: Duration = Duration::from_secs(30 * 24 * 3600);
/// The cookie binding an authorization request to the browser that started it.
pub const BROWSER_COOKIE: &str = "slipway_oauth";
/// Where the OAuth routes live (the cookie's path).
pub const PREFIX: &str = "/oauth";

/// The authorization server, configured.
pub struct OAuthServer {
    /// The issuer: the API's public URL, without a trailing slash.
    pub issuer: String,
    /// {mcp_url}: the protected resource, and the one `resource` tokens are bound to.
    pub mcp_url: String,
    /// The upstream provider people sign in at; `None`: nobody can (authorization answers
    /// `temporarily_unavailable`).
    pub upstream: Option<Upstream>,
}

impl std::fmt::Debug for OAuthServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuthServer")
            .field("issuer", &self.issuer)
            .field("upstream", &self.upstream)
            .finish()
    }
}

impl OAuthServer {
    /// The server of the API at `public_url` (an http(s) origin: the API's routes are at its root), whose people
    /// sign in at `upstream`.
    pub fn new(public_url: &str, upstream: Option<UpstreamConfig>) -> anyhow::Result<Self> {
        let url = crate::public_urls::checked(public_url)
            .with_context(|| format!("the public URL {public_url}"))?;
        let issuer = url.as_str().trim_end_matches('/').to_owned();
        let redirect = format!("{issuer}{PREFIX}/callback");
        Ok(Self {
            mcp_url: format!("{issuer}{}", slipway_auth::MCP_PATH),
            upstream: upstream.map(|config| Upstream::new(config, redirect)),
            issuer,
        })
    }

    /// Whether the browser cookie must be `Secure` (an https issuer).
    pub fn secure(&self) -> bool {
        self.issuer.starts_with("https://")
    }

    /// Where the protected resource's metadata is (RFC 9728's path-aware form for {mcp_url}).
    pub fn resource_metadata_url(&self) -> String {
        format!(
            "{}/.well-known/oauth-protected-resource{}",
            self.issuer,
            slipway_auth::MCP_PATH
        )
    }

    /// The protected resource's metadata (RFC 9728).
    pub fn resource_metadata(&self) -> Value {
        json!({
            "resource": self.mcp_url,
            "authorization_servers": [self.issuer],
            "scopes_supported": slipway_auth::scopes::DEFAULT,
            "bearer_methods_supported": ["header"],
            "resource_name": "slipway",
        })
    }

    /// The authorization server's metadata (RFC 8414).
    pub fn metadata(&self) -> Value {
        let issuer = &self.issuer;
        json!({
            "issuer": issuer,
            "authorization_endpoint": format!("{issuer}{PREFIX}/authorize"),
            "token_endpoint": format!("{issuer}{PREFIX}/token"),
            "registration_endpoint": format!("{issuer}{PREFIX}/register"),
            "scopes_supported": slipway_auth::scopes::DEFAULT,
            "response_types_supported": ["code"],
            "response_modes_supported": ["query"],
            "grant_types_supported": ["authorization_code"],
            "token_endpoint_auth_methods_supported": ["none"],
            "code_challenge_methods_supported": ["S256"],
            "client_id_metadata_document_supported": false,
        })
    }

    /// The `WWW-Authenticate` challenge of a 401 from the MCP endpoint.
    pub fn challenge(&self) -> String {
        format!(
            r#"Bearer realm="slipway", resource_metadata="{}""#,
            self.resource_metadata_url()
        )
    }
}

/// An error of the OAuth endpoints, in the RFCs' JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuthError {
    /// The HTTP status.
    pub status: StatusCode,
    /// The RFC's error code (`invalid_request`, `invalid_grant`, ...).
    pub error: &'static str,
    /// What was wrong, for the developer of the client.
    pub description: String,
}

impl OAuthError {
    /// An error with status 400.
    pub fn bad(error: &'static str, description: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            error,
            description: description.into(),
        }
    }

    /// 401 `invalid_client`: the token endpoint does not know the client.
    pub fn invalid_client(description: impl Into<String>) -> Self {
        Self {
            status: StatusCode::UNAUTHORIZED,
            error: "invalid_client",
            description: description.into(),
        }
    }

    /// 500 `server_error`; the cause is logged.
    pub fn server(cause: impl std::fmt::Display) -> Self {
        tracing::warn!(error = %cause, "OAuth endpoint failed");
        Self {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            error: "server_error",
            description: "the authorization server failed; try again".into(),
        }
    }
}

impl From<sqlx::Error> for OAuthError {
    fn from(e: sqlx::Error) -> Self {
        Self::server(e)
    }
}

impl IntoResponse for OAuthError {
    fn into_response(self) -> Response {
        let mut res = (
            self.status,
            axum::Json(json!({"error": self.error, "error_description": self.description})),
        )
            .into_response();
        no_store(&mut res);
        if self.status == StatusCode::UNAUTHORIZED {
            res.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static(r#"Basic realm="slipway""#),
            );
        }
        res
    }
}

/// Marks an answer as not to be cached (token and error answers, pages with secrets).
pub fn no_store(res: &mut Response) {
    let headers = res.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(header::PRAGMA, HeaderValue::from_static("no-cache"));
}

/// `redirect_uri` with the pairs added to its query (an authorization response, RFC 6749 4.1.2).
pub fn redirect_with(redirect_uri: &str, pairs: &[(&str, &str)]) -> String {
    match openidconnect::url::Url::parse(redirect_uri) {
        Ok(mut url) => {
            {
                let mut query = url.query_pairs_mut();
                for (key, value) in pairs {
                    query.append_pair(key, value);
                }
            }
            url.to_string()
        }
        // Registered URIs parse; this is never reached with one.
        Err(_) => redirect_uri.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_metadata_name_the_resource_and_the_endpoints() {
        let server = OAuthServer::new("https://api.example.com/", None).unwrap();
        assert_eq!(server.issuer, "https://api.example.com");
        assert_eq!(server.mcp_url, "https://api.example.com/mcp");
        assert_eq!(
            server.resource_metadata_url(),
            "https://api.example.com/.well-known/oauth-protected-resource/mcp"
        );
        assert_eq!(server.resource_metadata()["resource"], server.mcp_url);
        let metadata = server.metadata();
        assert_eq!(
            metadata["token_endpoint"],
            "https://api.example.com/oauth/token"
        );
        assert_eq!(
            metadata["code_challenge_methods_supported"],
            json!(["S256"])
        );
        assert!(server.secure());
        assert!(
            !OAuthServer::new("http://10.0.0.2:30080", None)
                .unwrap()
                .secure()
        );
        for bad in ["ftp://x", "https://x/?q=1", "https://x/api", "not a url"] {
            assert!(OAuthServer::new(bad, None).is_err(), "{bad}");
        }
    }

    #[test]
    fn an_authorization_response_keeps_the_redirects_own_query() {
        assert_eq!(
            redirect_with(
                "http://127.0.0.1:9/cb?x=1",
                &[("code", "a b"), ("state", "s")]
            ),
            "http://127.0.0.1:9/cb?x=1&code=a+b&state=s"
        );
    }
}
