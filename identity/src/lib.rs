//! End-user sign-in: slipway is the OpenID Connect identity provider of every deployed app, with zero
//! configuration per app. The edge serves it over HTTP; this crate holds what is not HTTP, and the console and the
//! MCP server's OAuth take its upstream relying party and sealed values too.
//!
//! People sign in at an upstream OpenID Connect provider the platform operator configures ([`upstream`]:
//! authorization code with PKCE, state and nonce checked). The platform then vouches for them to one channel host
//! at a time with the identity cookie `__Host-svc_id`: an RS256 JWT whose `aud` is that exact host, signed by a
//! key published at `{auth_url}/svc-auth/jwks` ([`keys`]), which apps verify themselves.
//!
//! Nothing about a person is stored. `sub` is derived from the upstream issuer and subject under a platform secret
//! ([`subject`]): stable across every app and host, and not the upstream's own id. The sign-in's state between the
//! channel host, the auth host and the upstream travels in sealed values ([`seal`]) bound to the browser by
//! host-only cookies, so any edge replica can take any step.
//!
//! The flow (H is the channel host, A the auth host):
//!
//! 1. `H/svc-auth/login?return_to=/p`: a random state in the cookie `__Host-svc_state` on H; redirect to
//!    `A/svc-auth/authorize?host=H&state=..&return_to=/p`.
//! 2. `A/svc-auth/authorize`: H must be a host the edge serves; PKCE verifier, nonce and CSRF token sealed into the
//!    cookie `__Host-svc_flow` on A; redirect to the upstream.
//! 3. `A/svc-auth/callback?code&state` (from the upstream): CSRF checked, code exchanged, ID token and nonce
//!    verified; the person sealed for H into a handoff code good for 60 seconds; redirect to
//!    `H/svc-auth/callback?code=..`.
//! 4. `H/svc-auth/callback`: the handoff opened, its host and state checked against H and the state cookie; the
//!    identity cookie set; redirect to `/p`.

pub mod keys;
pub mod seal;
pub mod subject;
pub mod upstream;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

pub use self::keys::SigningKeys;
pub use self::seal::Sealer;
pub use self::subject::SubjectKey;
pub use self::upstream::{Upstream, UpstreamArgs, UpstreamConfig};

/// The identity cookie: the JWT an app verifies.
pub const ID_COOKIE: &str = "__Host-svc_id";
/// The channel host's cookie binding a sign-in to the browser that started it.
pub const STATE_COOKIE: &str = "__Host-svc_state";
/// The auth host's cookie carrying a sign-in across the upstream provider.
pub const FLOW_COOKIE: &str = "__Host-svc_flow";

/// How long an identity cookie (and the JWT in it) is good for.
pub const SESSION_LIFETIME: Duration = Duration::from_secs(12 * 3600);
/// How long a sign-in may spend at the upstream provider.
pub const FLOW_LIFETIME: Duration = Duration::from_secs(600);
/// How long the auth host's handoff to the channel host is good for.
pub const HANDOFF_LIFETIME: Duration = Duration::from_secs(60);
/// Longest `return_to` taken.
const MAX_RETURN_TO: usize = 2048;

/// A person as the platform vouches for them: the claims of the identity cookie besides `iss`, `aud` and times.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Person {
    /// Stable per person across every app and host.
    pub sub: String,
    /// The email address the upstream states.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub email: Option<String>,
    /// The display name the upstream states.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// A picture URL, only when it is https.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub picture: Option<String>,
}

/// The claims of the identity cookie.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdentityClaims {
    /// `{auth_url}`.
    pub iss: String,
    /// The exact host the cookie was set on.
    pub aud: String,
    /// The person.
    #[serde(flatten)]
    pub person: Person,
    /// Issued at (Unix seconds).
    pub iat: u64,
    /// Expires at (Unix seconds).
    pub exp: u64,
}

/// HMAC-SHA256 of `parts` (concatenated) under `key`: how sign-in derives its keys from the secret (one label per
/// key) and `sub`.
pub(crate) fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    use hmac::{KeyInit as _, Mac as _};
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key)
        .unwrap_or_else(|_| unreachable!("HMAC accepts keys of any length"));
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().into()
}

/// `return_to` when it is a path on the same host: it starts with one `/`, and holds only printable ASCII without
/// a backslash (`//evil`, `/\evil` and `https://evil` would leave the host in a browser; anything else non-ASCII
/// arrives percent-encoded). `None` otherwise.
pub fn same_host_path(return_to: &str) -> Option<&str> {
    let rest = return_to.strip_prefix('/')?;
    let leaves_host = rest.starts_with('/')
        || return_to.len() > MAX_RETURN_TO
        || return_to
            .bytes()
            .any(|b| b == b'\\' || !b.is_ascii_graphic());
    (!leaves_host).then_some(return_to)
}

/// A picture URL the identity cookie may carry: https only.
pub fn https_picture(picture: Option<String>) -> Option<String> {
    picture.filter(|p| {
        openidconnect::url::Url::parse(p)
            .is_ok_and(|u| u.scheme() == "https" && u.host_str().is_some())
    })
}

/// Where sign-in's keys and upstream come from.
#[derive(Debug, Clone)]
pub struct SignInConfig {
    /// `{auth_url}`: the issuer, served by the edge at its host.
    pub auth_url: openidconnect::url::Url,
    /// PEM file of the RSA key that signs identity cookies.
    pub signing_key: PathBuf,
    /// PEM files of RSA keys published beside it (the next key, ahead of a rotation; the previous one, until the
    /// cookies it signed expire).
    pub published_keys: Vec<PathBuf>,
    /// File of the secret `sub` and the sealed values are derived from (at least 32 bytes). Keep it forever:
    /// changing it changes every person's `sub`.
    pub secret: PathBuf,
    /// The upstream provider; `None`: nobody can sign in (login answers 503).
    pub upstream: Option<UpstreamConfig>,
}

/// Sign-in, loaded: the issuer, its keys, its secrets, the upstream. Its `Debug` shows no secret.
#[derive(Debug)]
pub struct SignIn {
    /// `{auth_url}` without a trailing slash: `iss`.
    pub issuer: String,
    /// The auth host (lowercase, no port).
    pub auth_host: String,
    /// The port in `{auth_url}`, used for channel hosts too (they are served by the same listener).
    pub port: Option<u16>,
    /// The signing and published keys.
    pub keys: SigningKeys,
    /// Seals the flow cookie and the handoff.
    pub sealer: Sealer,
    /// Derives `sub`.
    pub subjects: SubjectKey,
    /// The upstream provider.
    pub upstream: Option<Upstream>,
}

impl SignIn {
    /// Loads the keys and the secret named by `config`.
    pub fn load(config: SignInConfig) -> anyhow::Result<Self> {
        let keys = SigningKeys::load(&config.signing_key, &config.published_keys)?;
        let secret = std::fs::read(&config.secret)
            .with_context(|| format!("read the sign-in secret {}", config.secret.display()))?;
        Self::new(config.auth_url, keys, secret.trim_ascii(), config.upstream)
    }

    /// Sign-in with these parts.
    pub fn new(
        auth_url: openidconnect::url::Url,
        keys: SigningKeys,
        secret: &[u8],
        upstream: Option<UpstreamConfig>,
    ) -> anyhow::Result<Self> {
        anyhow::ensure!(
            secret.len() >= 32,
            "the sign-in secret has {} bytes; it needs at least 32",
            secret.len()
        );
        anyhow::ensure!(
            auth_url.scheme() == "https" && auth_url.path() == "/",
            "the auth URL {auth_url} must be an https origin without a path (the cookies are Secure)"
        );
        let host = auth_url
            .host_str()
            .with_context(|| format!("the auth URL {auth_url} has no host"))?
            .to_ascii_lowercase();
        let port = auth_url.port();
        let issuer = auth_url.as_str().trim_end_matches('/').to_owned();
        let redirect = format!("{issuer}/svc-auth/callback");
        Ok(Self {
            auth_host: host,
            port,
            keys,
            sealer: Sealer::derive(secret),
            subjects: SubjectKey::derive(secret),
            upstream: upstream.map(|config| Upstream::new(config, redirect)),
            issuer,
        })
    }

    /// Whether `host` (lowercase, without port, as the routing table keys hosts) is the auth host.
    pub fn is_auth_host(&self, host: &str) -> bool {
        host == self.auth_host
    }

    /// The origin of a channel host, as redirects name it.
    pub fn origin_of(&self, host: &str) -> String {
        match self.port {
            Some(port) => format!("https://{host}:{port}"),
            None => format!("https://{host}"),
        }
    }

    /// The identity cookie's JWT for `person` on `host`.
    pub fn mint(&self, host: &str, person: Person) -> String {
        let iat = slipway_internal::source_url::unix_now();
        self.keys.mint(&IdentityClaims {
            iss: self.issuer.clone(),
            aud: host.to_owned(),
            person,
            iat,
            exp: iat + SESSION_LIFETIME.as_secs(),
        })
    }

    /// The claims of `token` when it passes the rules apps apply: RS256 by a published key, `iss`, `aud` = `host`,
    /// `exp` ahead.
    pub fn verify(&self, token: &str, host: &str) -> Option<IdentityClaims> {
        self.keys.verify(token, &self.issuer, host)
    }

    /// The OpenID Connect discovery document of `{auth_url}`.
    pub fn discovery(&self) -> serde_json::Value {
        let issuer = &self.issuer;
        serde_json::json!({
            "issuer": issuer,
            "authorization_endpoint": format!("{issuer}/svc-auth/authorize"),
            "jwks_uri": format!("{issuer}/svc-auth/jwks"),
            "response_types_supported": ["code"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256"],
            "scopes_supported": ["openid", "email", "profile"],
            "claims_supported": ["iss", "aud", "sub", "email", "name", "picture", "iat", "exp"],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn return_to_must_stay_on_the_host() {
        for ok in ["/", "/a/b?c=d#e", "/%2F%2Fevil", "/a//b"] {
            assert_eq!(same_host_path(ok), Some(ok), "{ok}");
        }
        for bad in [
            "",
            "//evil",
            "https://evil",
            "/\\evil",
            "\\\\evil",
            "/a\\b",
            "evil",
            "/\tevil",
            "/ evil",
            "/\r\nSet-Cookie: x=1",
            "/caf\u{e9}",
            "http:/evil",
        ] {
            assert_eq!(same_host_path(bad), None, "{bad:?}");
        }
        assert_eq!(same_host_path(&format!("/{}", "a".repeat(3000))), None);
    }

    #[test]
    fn only_https_pictures_are_kept() {
        assert_eq!(
            https_picture(Some("https://img.example/p.png".into())).as_deref(),
            Some("https://img.example/p.png")
        );
        for bad in [
            "http://img.example/p.png",
            "javascript:alert(1)",
            "data:image/png;base64,AA",
            "/relative.png",
        ] {
            assert_eq!(https_picture(Some(bad.into())), None, "{bad}");
        }
        assert_eq!(https_picture(None), None);
    }
}
