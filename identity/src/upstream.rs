//! The upstream OpenID Connect provider people sign in at: slipway is its relying party (the `openidconnect`
//! crate: discovery, authorization code with PKCE S256, CSRF state, nonce, ID token signature and claims). The
//! provider is the platform operator's choice, named in the chart's values.
//!
//! Its discovery document and keys are fetched on the first sign-in (so an edge starts while the provider is
//! down), one fetch at a time, kept for an hour and fetched again at once when an ID token does not verify (the
//! provider rotated its keys). After a failed fetch, sign-ins answer 503 for [`RETRY_AFTER`] without calling the
//! provider, so requests cannot pile up behind an unreachable one.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use openidconnect::core::{CoreAuthenticationFlow, CoreClient, CoreProviderMetadata};
use openidconnect::{
    AsyncHttpClient, AuthorizationCode, ClientId, ClientSecret, CsrfToken, EndpointMaybeSet,
    EndpointNotSet, EndpointSet, HttpClientError, HttpRequest, HttpResponse, IssuerUrl, Nonce,
    PkceCodeChallenge, PkceCodeVerifier, RedirectUrl, Scope, TokenResponse as _,
};
use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;

use super::{SubjectKey, https_picture};

/// Longest wait for one call to the provider.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a discovery document and its keys are used before they are fetched again.
const DISCOVERY_LIFETIME: Duration = Duration::from_secs(3600);
/// How long after a failed discovery sign-ins fail at once.
pub const RETRY_AFTER: Duration = Duration::from_secs(30);
/// Longest `email` and `name` kept (longer ones are left out), and longest `picture` URL.
const MAX_CLAIM: usize = 320;
const MAX_PICTURE: usize = 2048;

/// The provider, as the platform operator names it.
#[derive(Clone)]
pub struct UpstreamConfig {
    /// Its issuer URL (discovery is at `<issuer>/.well-known/openid-configuration`).
    pub issuer: String,
    /// slipway's client id there.
    pub client_id: String,
    /// slipway's client secret there.
    pub client_secret: String,
}

/// The flags that name the upstream provider, shared by the edge (end-user sign-in) and the API server (the MCP
/// server's OAuth sign-in for people): one provider and one client for both.
#[derive(Debug, Clone, clap::Args)]
pub struct UpstreamArgs {
    /// Issuer URL of the upstream OpenID Connect provider people sign in at: end-user sign-in at the edge, the MCP
    /// server's OAuth sign-in at the API. Unset: the edge's sign-in answers 503, and the MCP server's OAuth
    /// authorization answers temporarily_unavailable.
    #[arg(long, env = "SLIPWAY_SIGN_IN_ISSUER", requires_all = ["sign_in_client_id", "sign_in_client_secret_file"])]
    pub sign_in_issuer: Option<String>,
    /// The platform's client id at that provider (redirect URIs `{auth_url}/svc-auth/callback` at the edge and
    /// `<public-url>/oauth/callback` at the API).
    #[arg(long, env = "SLIPWAY_SIGN_IN_CLIENT_ID")]
    pub sign_in_client_id: Option<String>,
    /// File holding the platform's client secret at that provider.
    #[arg(long, env = "SLIPWAY_SIGN_IN_CLIENT_SECRET_FILE")]
    pub sign_in_client_secret_file: Option<std::path::PathBuf>,
}

impl UpstreamArgs {
    /// The provider these flags name; `None` unless all three are set.
    pub fn config(&self) -> anyhow::Result<Option<UpstreamConfig>> {
        UpstreamConfig::from_flags(
            self.sign_in_issuer.as_ref(),
            self.sign_in_client_id.as_ref(),
            self.sign_in_client_secret_file.as_ref(),
        )
    }
}

impl UpstreamConfig {
    /// The provider the flags name: its issuer, slipway's client id, and the file holding the client secret.
    /// `None` unless all three are set.
    pub fn from_flags(
        issuer: Option<&String>,
        client_id: Option<&String>,
        secret_file: Option<&std::path::PathBuf>,
    ) -> anyhow::Result<Option<Self>> {
        let (Some(issuer), Some(client_id), Some(secret_file)) = (issuer, client_id, secret_file)
        else {
            return Ok(None);
        };
        let client_secret = std::fs::read_to_string(secret_file)
            .with_context(|| format!("read the sign-in client secret {}", secret_file.display()))?;
        Ok(Some(Self {
            issuer: issuer.clone(),
            client_id: client_id.clone(),
            client_secret: client_secret.trim().to_owned(),
        }))
    }
}

impl std::fmt::Debug for UpstreamConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamConfig")
            .field("issuer", &self.issuer)
            .field("client_id", &self.client_id)
            .finish_non_exhaustive()
    }
}

/// What the auth host keeps (sealed, in its flow cookie) between sending someone to the provider and their return.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pending {
    /// The CSRF token sent as `state` to the provider.
    pub csrf: String,
    /// The PKCE verifier.
    pub verifier: String,
    /// The nonce the ID token must carry.
    pub nonce: String,
}

/// The person the provider vouched for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstreamed {
    /// The provider's issuer (as the ID token states it).
    pub issuer: String,
    /// The provider's subject.
    pub subject: String,
    /// Email, when the provider gives one (and does not say it is unverified).
    pub email: Option<String>,
    /// Whether the provider says it verified that address (`email_verified`); `None` when it does not say.
    pub email_verified: Option<bool>,
    /// Name, when the provider gives one.
    pub name: Option<String>,
    /// Picture URL, when https.
    pub picture: Option<String>,
}

impl Upstreamed {
    /// The person as the platform vouches for them.
    pub fn person(self, subjects: &SubjectKey) -> super::Person {
        super::Person {
            sub: subjects.sub(&self.issuer, &self.subject),
            email: self.email,
            name: self.name,
            picture: https_picture(self.picture),
        }
    }
}

type Client = CoreClient<
    EndpointSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointMaybeSet,
    EndpointMaybeSet,
>;

/// The relying party. Discovery is cached once it succeeds.
pub struct Upstream {
    config: UpstreamConfig,
    redirect: String,
    http: Http,
    discovery: Mutex<Discovery>,
}

/// The provider's discovery, as last fetched.
#[derive(Default)]
struct Discovery {
    client: Option<(Client, Instant)>,
    failed_at: Option<Instant>,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Upstream {
    /// A relying party returning people to `redirect` (`{auth_url}/svc-auth/callback`).
    pub fn new(config: UpstreamConfig, redirect: String) -> Self {
        Self {
            config,
            redirect,
            http: Http::new(),
            discovery: Mutex::default(),
        }
    }

    /// The client for the provider's current discovery: the kept one while it is fresh, else one fetch (callers
    /// wait for the fetch in flight rather than start their own); a failure is answered for [`RETRY_AFTER`] without
    /// another fetch.
    async fn client(&self) -> anyhow::Result<Client> {
        let mut discovery = self.discovery.lock().await;
        if let Some((client, fetched)) = &discovery.client
            && fetched.elapsed() < DISCOVERY_LIFETIME
        {
            return Ok(client.clone());
        }
        if let Some(failed) = discovery.failed_at
            && failed.elapsed() < RETRY_AFTER
        {
            anyhow::bail!(
                "the provider {} could not be discovered {}s ago; retrying after {}s",
                self.config.issuer,
                failed.elapsed().as_secs(),
                RETRY_AFTER.as_secs()
            );
        }
        match self.discover().await {
            Ok(client) => {
                *discovery = Discovery {
                    client: Some((client.clone(), Instant::now())),
                    failed_at: None,
                };
                Ok(client)
            }
            Err(e) => {
                discovery.failed_at = Some(Instant::now());
                Err(e)
            }
        }
    }

    /// Forgets the kept discovery, so the next sign-in fetches the provider's keys again.
    async fn forget(&self) {
        self.discovery.lock().await.client = None;
    }

    async fn discover(&self) -> anyhow::Result<Client> {
        let issuer = IssuerUrl::new(self.config.issuer.clone()).context("the issuer URL")?;
        let metadata = CoreProviderMetadata::discover_async(issuer, &self.http)
            .await
            .with_context(|| format!("discover the provider {}", self.config.issuer))?;
        Ok(CoreClient::from_provider_metadata(
            metadata,
            ClientId::new(self.config.client_id.clone()),
            Some(ClientSecret::new(self.config.client_secret.clone())),
        )
        .set_redirect_uri(RedirectUrl::new(self.redirect.clone()).context("the redirect URL")?))
    }

    /// Where to send someone to sign in, and what to keep until they return.
    pub async fn start(&self) -> anyhow::Result<(String, Pending)> {
        let client = self.client().await?;
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let (url, csrf, nonce) = client
            .authorize_url(
                CoreAuthenticationFlow::AuthorizationCode,
                CsrfToken::new_random,
                Nonce::new_random,
            )
            .add_scope(Scope::new("email".into()))
            .add_scope(Scope::new("profile".into()))
            .set_pkce_challenge(challenge)
            .url();
        Ok((
            url.to_string(),
            Pending {
                csrf: csrf.into_secret(),
                verifier: verifier.into_secret(),
                nonce: nonce.secret().clone(),
            },
        ))
    }

    /// Exchanges the provider's `code` and verifies the ID token (signature, issuer, audience, expiry, nonce).
    pub async fn finish(&self, pending: Pending, code: &str) -> anyhow::Result<Upstreamed> {
        let client = self.client().await?;
        let response = client
            .exchange_code(AuthorizationCode::new(code.to_owned()))
            .context("the provider has no token endpoint")?
            .set_pkce_verifier(PkceCodeVerifier::new(pending.verifier))
            .request_async(&self.http)
            .await
            .map_err(|e| anyhow::Error::new(e).context("exchange the code"))?;
        let id_token = response
            .id_token()
            .context("the provider's token response has no ID token")?;
        let claims = match id_token.claims(&client.id_token_verifier(), &Nonce::new(pending.nonce))
        {
            Ok(claims) => claims,
            Err(e) => {
                // Perhaps signed with a key published after the kept discovery: the next sign-in fetches again.
                self.forget().await;
                return Err(anyhow::Error::new(e).context("the ID token does not verify"));
            }
        };
        let bounded = |value: String, limit: usize| (value.len() <= limit).then_some(value);
        Ok(Upstreamed {
            issuer: claims.issuer().to_string(),
            subject: claims.subject().to_string(),
            // An address the provider says it did not verify is not vouched for.
            email: claims
                .email()
                .filter(|_| claims.email_verified() != Some(false))
                .and_then(|e| bounded(e.to_string(), MAX_CLAIM)),
            email_verified: claims.email_verified(),
            name: claims
                .name()
                .and_then(|n| n.get(None))
                .and_then(|n| bounded(n.to_string(), MAX_CLAIM)),
            picture: claims
                .picture()
                .and_then(|p| p.get(None))
                .and_then(|p| bounded(p.to_string(), MAX_PICTURE)),
        })
    }
}

/// The HTTP client the relying party calls the provider with: no redirects followed (the token endpoint must
/// answer itself), a timeout per call.
struct Http(reqwest::Client);

impl Http {
    fn new() -> Self {
        Self(
            reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .timeout(CALL_TIMEOUT)
                .build()
                .unwrap_or_else(|e| unreachable!("a plain reqwest client builds: {e}")),
        )
    }
}

impl<'c> AsyncHttpClient<'c> for Http {
    type Error = HttpClientError<reqwest::Error>;
    type Future =
        Pin<Box<dyn Future<Output = Result<HttpResponse, Self::Error>> + Send + Sync + 'c>>;

    fn call(&'c self, request: HttpRequest) -> Self::Future {
        Box::pin(async move {
            let request = reqwest::Request::try_from(request).map_err(Box::new)?;
            let response = self.0.execute(request).await.map_err(Box::new)?;
            let mut builder = http::Response::builder().status(response.status());
            for (name, value) in response.headers() {
                builder = builder.header(name, value);
            }
            builder
                .body(response.bytes().await.map_err(Box::new)?.to_vec())
                .map_err(HttpClientError::Http)
        })
    }
}
