//! End-user sign-in against a real upstream OpenID Connect provider (hack/oidc.sh): an edge in this process serving
//! two channel hosts and the auth host over HTTPS, a client following every redirect of the flow by hand (so each
//! cookie and each step is seen), and the identity cookie checked the way the spec tells app authors to: the JWKS
//! fetched, RS256 pinned, the key picked by `kid`, `iss`, `aud` and `exp` required.

// Fixture helpers panic on a malformed response or a poisoned jar: in a test that is the failure to report.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, Result};
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use serde_json::{Value, json};
use support::browser::{self, Browser};
use support::https::{self, TestDns};
use support::{APP_DOMAIN, EDGE_ADDRESS, TestApi};

/// The wildcard certificate's Secret the edge serves channel hosts and the auth host with.
const WILDCARD: &str = "platform-wildcard";

/// The upstream provider, from `hack/oidc.sh env`.
fn upstream_issuer() -> Result<String> {
    std::env::var("SLIPWAY_TEST_OIDC_ISSUER")
        .context("SLIPWAY_TEST_OIDC_ISSUER is not set: start hack/oidc.sh (hack/test.sh does)")
}

/// The platform: two static apps' hosts, the auth host, the edge's HTTPS address, its signing key, and a PKI whose
/// CA the clients trust.
struct Platform {
    _api: TestApi,
    hosts: [String; 2],
    auth_url: String,
    https: SocketAddr,
    ca_pem: String,
    signing_pem: Vec<u8>,
    registry: prometheus_client::registry::Registry,
}

impl Platform {
    async fn start() -> Result<Self> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let api = TestApi::start().await?;
        let user = api.user("signin", "builder").await?;
        let ns = user.namespace.clone();
        let pki = wildcard_certificate(&api, &ns).await?;
        api.start_operator_without_node(&ns).await?;
        let mut hosts = Vec::new();
        for name in ["one", "two"] {
            let app = api.create_app(&user, name, "static").await;
            hosts.push(
                app["channels"][0]["hostname"]
                    .as_str()
                    .context("hostname")?
                    .to_owned(),
            );
        }

        // Sign-in is made once the HTTPS port is known: the auth URL names it, as on a platform on a
        // non-standard port.
        let keys = Keys::new()?;
        let edge = https::start_edge(
            &api,
            &ns,
            https::EdgeOptions {
                wildcard_secret: WILDCARD,
                access_log: false,
                redirect_https: true,
                acme_http: false,
                sign_in: Some(Box::new(|port| keys.sign_in(port))),
            },
        )
        .await?;
        let (https, registry) = (edge.https, edge.registry);
        let platform = Self {
            _api: api,
            hosts: [hosts[0].clone(), hosts[1].clone()],
            auth_url: auth_url(https.port()),
            https,
            ca_pem: pki.ca_pem().to_owned(),
            signing_pem: keys.signing_pem,
            registry,
        };
        // The channel hosts are served once the operator has written their Ingresses and the edge has read them.
        let browser = platform.browser()?;
        for host in &platform.hosts {
            slipway_testkit::wait_until(std::time::Duration::from_secs(60), || {
                let (browser, url) = (browser.clone(), platform.url(host, "/"));
                async move {
                    Ok(browser
                        .get(&url)
                        .await?
                        .text
                        .contains("Nothing has been deployed"))
                }
            })
            .await
            .with_context(|| format!("{host} is not served"))?;
        }
        Ok(platform)
    }

    fn url(&self, host: &str, path: &str) -> String {
        format!("https://{host}:{}{path}", self.https.port())
    }

    /// A new browser: no cookies, trusting the platform's CA, every platform host resolving to the edge.
    fn browser(&self) -> Result<Browser> {
        let auth = format!("auth.{APP_DOMAIN}");
        let hosts = [
            auth.as_str(),
            self.hosts[0].as_str(),
            self.hosts[1].as_str(),
        ];
        Browser::new(&self.ca_pem, &hosts, self.https)
    }

    /// The edge's count of sign-in steps that ended with `outcome` (`slipway_edge_sign_ins`).
    fn sign_ins(&self, outcome: &str) -> Result<u64> {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)?;
        let series = format!("slipway_edge_sign_ins_total{{outcome=\"{outcome}\"}} ");
        Ok(text
            .lines()
            .find_map(|line| line.strip_prefix(&series))
            .map(str::parse)
            .transpose()?
            .unwrap_or(0))
    }

    /// The identity cookie's claims when it passes an app's check on `host` (see [`app_check`]).
    async fn app_check(&self, browser: &Browser, token: &str, host: &str) -> Result<Value> {
        app_check(browser, &self.auth_url, token, host).await
    }
}

/// The identity cookie's claims when it passes an app's check on `host`: the JWKS from the discovery
/// document's `jwks_uri`, RS256 only, the key by `kid`, `iss` = the auth URL, `aud` = `host`, `exp` ahead.
async fn app_check(browser: &Browser, auth_url: &str, token: &str, host: &str) -> Result<Value> {
    let discovery = browser
        .get(&format!("{}/.well-known/openid-configuration", auth_url))
        .await?
        .json()?;
    let jwks: JwkSet = serde_json::from_str(
        &browser
            .get(discovery["jwks_uri"].as_str().context("jwks_uri")?)
            .await?
            .text,
    )?;
    let kid = jsonwebtoken::decode_header(token)?
        .kid
        .context("the token names no kid")?;
    let jwk = jwks
        .find(&kid)
        .context("no published key has the token's kid")?;
    let mut validation = Validation::new(Algorithm::RS256);
    validation.set_issuer(&[auth_url]);
    validation.set_audience(&[host]);
    validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
    Ok(jsonwebtoken::decode::<Value>(token, &DecodingKey::from_jwk(jwk)?, &validation)?.claims)
}

/// The wildcard certificate of channel hostnames (and the auth host), from a CA of the platform operator's, in
/// `namespace`; returns the PKI, whose CA clients trust.
async fn wildcard_certificate(
    api: &TestApi,
    namespace: &str,
) -> Result<slipway_testkit::tls::TestPki> {
    let pki = slipway_testkit::tls::TestPki::new()?;
    let wildcard = pki.serving_cert(&[&format!("*.{APP_DOMAIN}")])?;
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": WILDCARD}, "type": "kubernetes.io/tls",
        "stringData": {"tls.crt": wildcard.cert_pem(), "tls.key": wildcard.key_pem()}}))?;
    Api::<Secret>::namespaced(api.kube.clone(), namespace)
        .create(&Default::default(), &secret)
        .await?;
    Ok(pki)
}

/// Sign-in's files as a platform operator keeps them: the signing key, the secret, the upstream client's secret.
struct Keys {
    dir: std::path::PathBuf,
    signing_pem: Vec<u8>,
}

impl Keys {
    fn new() -> Result<Self> {
        let dir = tempfile_dir()?;
        let signing_pem = rsa_pem()?;
        std::fs::write(dir.join("signing.pem"), &signing_pem)?;
        std::fs::write(dir.join("secret"), "a-platform-secret-of-at-least-32-bytes")?;
        std::fs::write(dir.join("client-secret"), "slipway-secret")?;
        Ok(Self { dir, signing_pem })
    }

    /// Sign-in with the auth host on `port`.
    fn sign_in(&self, port: u16) -> Result<Arc<slipway_identity::SignIn>> {
        let sign_in = slipway_identity::SignIn::load(slipway_identity::SignInConfig {
            auth_url: auth_url(port).parse()?,
            signing_key: self.dir.join("signing.pem"),
            published_keys: vec![],
            secret: self.dir.join("secret"),
            upstream: Some(slipway_identity::UpstreamConfig {
                issuer: upstream_issuer()?,
                client_id: "slipway".into(),
                client_secret: std::fs::read_to_string(self.dir.join("client-secret"))?,
            }),
        })?;
        Ok(Arc::new(sign_in))
    }
}

/// The auth URL of an edge whose HTTPS listener is on `port`.
fn auth_url(port: u16) -> String {
    format!("https://auth.{APP_DOMAIN}:{port}")
}

/// A directory of its own under the system's temporary directory.
fn tempfile_dir() -> Result<std::path::PathBuf> {
    let dir =
        std::env::temp_dir().join(format!("slipway-sign-in-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// A fresh RSA key in PEM, as a platform operator makes one.
fn rsa_pem() -> Result<Vec<u8>> {
    slipway_testkit::tls::rsa_key_pem(false)
}

/// Sets the upstream's claims for `sub`.
async fn upstream_user(sub: &str, claims: Value) -> Result<()> {
    browser::upstream_user(&upstream_issuer()?, sub, claims).await
}

#[tokio::test]
async fn a_person_signs_in_through_the_upstream_and_every_app_can_verify_the_cookie() -> Result<()>
{
    let p = Platform::start().await?;
    let [one, two] = &p.hosts;
    let alice = format!("alice-{}", uuid::Uuid::new_v4().simple());
    upstream_user(
        &alice,
        json!({"email": "alice@example.test", "name": "Alice Liddell",
               "picture": "http://img.example/alice.png"}),
    )
    .await?;
    let browser = p.browser()?;

    // Before: whoami says nobody, with where to sign in.
    let nobody = browser.get(&p.url(one, "/svc-auth/whoami")).await?.json()?;
    assert_eq!(nobody["logged_in"], false);
    assert_eq!(
        nobody["login_url"],
        p.url(one, "/svc-auth/login?return_to=%2F"),
        "{nobody}"
    );

    let (back, visited) = browser.sign_in(&p.url(one, ""), &alice).await?;
    println!("sign-in passed: {visited:#?}");
    assert_eq!(
        (back.status, back.location.clone()),
        (302, Some(p.url(one, "/after?x=1")))
    );
    let set = back
        .set_cookies
        .iter()
        .find(|c| c.starts_with("__Host-svc_id="))
        .context("no identity cookie")?;
    for attribute in ["Path=/", "Secure", "HttpOnly"] {
        assert!(
            set.split("; ").any(|a| a == attribute),
            "{attribute} missing: {set}"
        );
    }
    assert!(!set.contains("Domain"), "{set}");
    // The flow passed the auth host and the provider, with PKCE and a nonce.
    assert!(
        visited
            .iter()
            .any(|u| u.starts_with(&format!("{}/svc-auth/authorize?", p.auth_url)))
    );
    let at_provider = visited
        .iter()
        .find(|u| u.starts_with(&upstream_issuer().unwrap()))
        .context("the provider was not visited")?;
    for param in [
        "code_challenge_method=S256",
        "nonce=",
        "state=",
        "code_challenge=",
    ] {
        assert!(
            at_provider.contains(param),
            "{param} missing: {at_provider}"
        );
    }
    // The state and flow cookies are gone once used.
    assert_eq!(browser.cookie(one, "__Host-svc_state"), None);
    assert_eq!(
        browser.cookie(&format!("auth.{APP_DOMAIN}"), "__Host-svc_flow"),
        None
    );

    let token = browser
        .cookie(one, "__Host-svc_id")
        .context("cookie kept")?;
    let claims = p.app_check(&browser, &token, one).await?;
    assert_eq!(claims["iss"], p.auth_url);
    assert_eq!(claims["aud"], one.as_str());
    assert_eq!(claims["email"], "alice@example.test");
    assert_eq!(claims["name"], "Alice Liddell");
    assert!(
        claims.get("picture").is_none(),
        "an http picture is dropped: {claims}"
    );
    let sub = claims["sub"].as_str().context("sub")?.to_owned();
    assert_ne!(sub, alice, "sub is the platform's, not the upstream's");
    let lifetime = claims["exp"].as_u64().unwrap() - claims["iat"].as_u64().unwrap();
    assert_eq!(lifetime, 12 * 3600);

    let me = browser.get(&p.url(one, "/svc-auth/whoami")).await?;
    assert_eq!(me.headers["cache-control"], "no-store");
    assert_eq!(
        me.json()?,
        json!({"logged_in": true, "email": "alice@example.test", "name": "Alice Liddell", "sub": sub})
    );

    // The cookie copied to another host fails there, for whoami and for an app's check.
    browser.set(two, "__Host-svc_id", &token);
    assert_eq!(
        browser.get(&p.url(two, "/svc-auth/whoami")).await?.json()?["logged_in"],
        false
    );
    assert!(p.app_check(&browser, &token, two).await.is_err());

    // Signing in on the second app (the provider remembers nobody: the person signs in again) gives the same sub.
    let (_, _) = browser.sign_in(&p.url(two, ""), &alice).await?;
    let token_two = browser
        .cookie(two, "__Host-svc_id")
        .context("second cookie")?;
    assert_eq!(
        p.app_check(&browser, &token_two, two).await?["sub"],
        sub.as_str()
    );
    // Another person gets another sub.
    let bob_browser = p.browser()?;
    let bob = format!("bob-{}", uuid::Uuid::new_v4().simple());
    upstream_user(
        &bob,
        json!({"email": "bob@example.test", "email_verified": false, "name": "Bob",
               "picture": "https://img.example/b.png"}),
    )
    .await?;
    bob_browser.sign_in(&p.url(one, ""), &bob).await?;
    let bob_token = bob_browser
        .cookie(one, "__Host-svc_id")
        .context("bob's cookie")?;
    let bob_claims = p.app_check(&bob_browser, &bob_token, one).await?;
    assert_ne!(bob_claims["sub"], sub.as_str());
    assert_eq!(bob_claims["picture"], "https://img.example/b.png");
    // The provider says it did not verify Bob's address: the platform does not vouch for it.
    assert!(bob_claims.get("email").is_none(), "{bob_claims}");
    assert_eq!(bob_claims["name"], "Bob");

    // Logout clears the cookie and goes where it is told, on this host.
    let out = browser
        .get(&p.url(one, "/svc-auth/logout?return_to=/bye"))
        .await?;
    assert_eq!(
        (out.status, out.location.clone()),
        (302, Some(p.url(one, "/bye")))
    );
    assert!(
        out.set_cookies
            .iter()
            .any(|c| c.starts_with("__Host-svc_id=;") && c.contains("Max-Age=0"))
    );
    assert_eq!(
        browser.get(&p.url(one, "/svc-auth/whoami")).await?.json()?["logged_in"],
        false
    );
    // Three sign-ins completed, none refused.
    assert_eq!((p.sign_ins("signed_in")?, p.sign_ins("refused")?), (3, 0));
    Ok(())
}

#[tokio::test]
async fn forged_expired_and_misdirected_sign_ins_are_refused() -> Result<()> {
    let p = Platform::start().await?;
    let [one, two] = &p.hosts;
    let browser = p.browser()?;

    // return_to that would leave the host, on login and logout, and on the auth host itself.
    for bad in [
        "//evil.example/",
        "https://evil.example/",
        "/\\evil.example",
        "evil",
    ] {
        let enc: String = form_urlencoded::byte_serialize(bad.as_bytes()).collect();
        for route in ["login", "logout"] {
            let page = browser
                .get(&p.url(one, &format!("/svc-auth/{route}?return_to={enc}")))
                .await?;
            assert_eq!(page.status, 400, "{route} {bad}: {}", page.text);
            assert_eq!(page.json()?["error"]["code"], "bad_request");
            assert!(page.location.is_none());
        }
        let page = browser
            .get(&format!(
                "{}/svc-auth/authorize?host={one}&state=abc&return_to={enc}",
                p.auth_url
            ))
            .await?;
        assert_eq!(page.status, 400, "authorize {bad}");
    }
    // The auth host hands sign-ins only to hosts the platform serves, spelled exactly as it serves them: a served
    // host in brackets, with a port or a trailing dot would read as that host to the routing table and as another
    // (evil.example) or none to a browser.
    for host in [
        "evil.example".to_owned(),
        format!("auth.{APP_DOMAIN}"),
        format!("nobody.{APP_DOMAIN}"),
        format!("[{one}]@evil.example"),
        format!("{one}:443"),
        format!("{one}."),
        one.to_uppercase(),
    ] {
        let enc: String = form_urlencoded::byte_serialize(host.as_bytes()).collect();
        let page = browser
            .get(&format!(
                "{}/svc-auth/authorize?host={enc}&state=abc",
                p.auth_url
            ))
            .await?;
        assert_eq!(page.status, 400, "{host}: {}", page.text);
        assert_eq!(page.json()?["error"]["code"], "bad_request");
    }

    // A handoff is good only for its host and for the browser that started the sign-in.
    let mallory = format!("mallory-{}", uuid::Uuid::new_v4().simple());
    let (form, visited) = browser
        .follow(&p.url(one, "/svc-auth/login?return_to=/"))
        .await?;
    assert_eq!(form.status, 200);
    let submitted = browser
        .post_form(visited.last().unwrap(), &[("sub", &mallory)])
        .await?;
    let to_channel = browser
        .get(&submitted.location.context("provider redirect")?)
        .await?
        .location
        .context("auth host redirect")?;
    assert!(
        to_channel.starts_with(&p.url(one, "/svc-auth/callback?code=")),
        "{to_channel}"
    );
    // Another browser (no state cookie): refused. The same code on the other host: refused.
    let victim = p.browser()?;
    let stolen = victim.get(&to_channel).await?;
    assert_eq!(stolen.status, 400, "{}", stolen.text);
    assert!(
        stolen
            .set_cookies
            .iter()
            .all(|c| !c.starts_with("__Host-svc_id="))
    );
    let moved = to_channel.replace(one.as_str(), two.as_str());
    browser.set(
        two,
        "__Host-svc_state",
        &browser.cookie(one, "__Host-svc_state").unwrap(),
    );
    assert_eq!(browser.get(&moved).await?.status, 400);
    // A tampered code: refused. The real one in the right browser: accepted.
    let tampered = format!("{to_channel}x");
    assert_eq!(browser.get(&tampered).await?.status, 400);
    assert_eq!(browser.get(&to_channel).await?.status, 302);
    assert!(browser.cookie(one, "__Host-svc_id").is_some());

    // The provider's answer without the flow cookie, or with another state: refused.
    let fresh = p.browser()?;
    let page = fresh
        .get(&format!("{}/svc-auth/callback?code=x&state=y", p.auth_url))
        .await?;
    assert_eq!(page.status, 400);

    // Tokens the platform did not sign, or that expired, or for another issuer: whoami says nobody.
    let now = slipway_internal::source_url::unix_now();
    let kid = jsonwebtoken::decode_header(browser.cookie(one, "__Host-svc_id").unwrap())?
        .kid
        .unwrap();
    let mint = |pem: &[u8], claims: Value| -> Result<String> {
        let mut header = Header::new(Algorithm::RS256);
        header.kid = Some(kid.clone());
        Ok(jsonwebtoken::encode(
            &header,
            &claims,
            &EncodingKey::from_rsa_pem(pem)?,
        )?)
    };
    let good = json!({"iss": p.auth_url, "aud": one, "sub": "x", "iat": now, "exp": now + 600});
    let cases = [
        ("signed by another key", mint(&rsa_pem()?, good.clone())?),
        (
            "expired",
            mint(
                &p.signing_pem,
                json!({"iss": p.auth_url, "aud": one, "sub": "x", "iat": now - 7200, "exp": now - 3600}),
            )?,
        ),
        (
            "another issuer",
            mint(
                &p.signing_pem,
                json!({"iss": "https://evil.example", "aud": one, "sub": "x", "iat": now, "exp": now + 600}),
            )?,
        ),
        ("not a JWT", "garbage".to_owned()),
    ];
    // The control: the platform's key and the right claims pass, so the refusals below are about what changed.
    let control = mint(&p.signing_pem, good)?;
    let checker = p.browser()?;
    checker.set(one, "__Host-svc_id", &control);
    assert_eq!(
        checker.get(&p.url(one, "/svc-auth/whoami")).await?.json()?["logged_in"],
        true
    );
    for (what, token) in cases {
        checker.set(one, "__Host-svc_id", &token);
        let me = checker.get(&p.url(one, "/svc-auth/whoami")).await?.json()?;
        assert_eq!(me["logged_in"], false, "{what}: {me}");
        assert!(p.app_check(&checker, &token, one).await.is_err(), "{what}");
    }

    // The provider refusing. This provider leaves `state` out of its refusal, so the auth host cannot tell it from
    // a link anyone could send, and refuses it as foreign; with the sign-in's state (as RFC 6749 has providers
    // send it), the refusal is the provider's and the auth host says so.
    let denied = p.browser()?;
    let (form, visited) = denied
        .follow(&p.url(one, "/svc-auth/login?return_to=/"))
        .await?;
    assert_eq!(form.status, 200);
    let at_provider: reqwest::Url = visited.last().unwrap().parse()?;
    let csrf = at_provider
        .query_pairs()
        .find(|(k, _)| k == "state")
        .map(|(_, v)| v.into_owned())
        .context("the provider was sent no state")?;
    let refused = denied
        .post_form(at_provider.as_str(), &[("action", "deny")])
        .await?;
    let without_state = refused.location.context("deny redirect")?;
    assert!(
        without_state.contains("error=access_denied"),
        "{without_state}"
    );
    let back = denied.get(&without_state).await?;
    assert_eq!(back.status, 400, "{}", back.text);
    let message = back.json()?["error"]["message"].clone();
    assert!(
        message.as_str().unwrap().contains("does not belong"),
        "{message}"
    );
    let with_state = format!(
        "{}/svc-auth/callback?error=access_denied&state={csrf}",
        p.auth_url
    );
    let back = denied.get(&with_state).await?;
    assert_eq!(back.status, 400, "{}", back.text);
    let message = back.json()?["error"]["message"].clone();
    assert!(
        message.as_str().unwrap().contains("did not sign you in"),
        "{message}"
    );
    assert!(denied.cookie(one, "__Host-svc_id").is_none());

    // Only GET, and only the sign-in routes.
    let post = browser
        .http
        .post(p.url(one, "/svc-auth/whoami"))
        .send()
        .await?;
    assert_eq!(post.status(), 405);
    let other = browser.get(&p.url(one, "/svc-auth/other")).await?;
    assert_eq!(
        (other.status, other.json()?["error"]["code"].clone()),
        (404, json!("not_found"))
    );
    // The edge counted it: one sign-in completed (the right browser's); the moved and tampered handoffs and the
    // refusal without state refused (the other browser's and the stray callback started no sign-in, so they are
    // not counted); and the provider's refusal.
    assert_eq!(
        (
            p.sign_ins("signed_in")?,
            p.sign_ins("refused")?,
            p.sign_ins("provider_refused")?
        ),
        (1, 3, 1)
    );
    Ok(())
}

#[tokio::test]
async fn the_auth_host_publishes_keys_and_a_discovery_document_an_oidc_library_accepts()
-> Result<()> {
    let p = Platform::start().await?;
    let browser = p.browser()?;
    let jwks = browser
        .get(&format!("{}/svc-auth/jwks", p.auth_url))
        .await?;
    assert_eq!(jwks.status, 200);
    assert_eq!(jwks.headers["cache-control"], "public, max-age=300");
    let keys = jwks.json()?;
    assert_eq!(keys["keys"].as_array().map(Vec::len), Some(1), "{keys}");
    let key = &keys["keys"][0];
    assert_eq!(
        (&key["kty"], &key["alg"], &key["use"]),
        (&json!("RSA"), &json!("RS256"), &json!("sig"))
    );
    assert!(key["kid"].is_string() && key["d"].is_null(), "{key}");

    // openidconnect's discovery (issuer match, required fields, the JWKS fetched and parsed).
    let http = browser.http.clone();
    let client = move |req: openidconnect::HttpRequest| {
        let http = http.clone();
        async move {
            let res = http
                .execute(reqwest::Request::try_from(req).map_err(Box::new)?)
                .await
                .map_err(Box::new)?;
            let mut out = http::Response::builder().status(res.status());
            for (k, v) in res.headers() {
                out = out.header(k, v);
            }
            out.body(res.bytes().await.map_err(Box::new)?.to_vec())
                .map_err(openidconnect::HttpClientError::<reqwest::Error>::Http)
        }
    };
    let metadata = openidconnect::core::CoreProviderMetadata::discover_async(
        openidconnect::IssuerUrl::new(p.auth_url.clone())?,
        &client,
    )
    .await
    .context("openidconnect's discovery")?;
    assert_eq!(metadata.issuer().as_str(), p.auth_url);
    assert_eq!(metadata.jwks().keys().len(), 1);
    assert_eq!(
        metadata.authorization_endpoint().as_str(),
        format!("{}/svc-auth/authorize", p.auth_url)
    );
    // Anything else on the auth host is not found.
    assert_eq!(browser.get(&format!("{}/", p.auth_url)).await?.status, 404);
    Ok(())
}

#[tokio::test]
async fn a_verified_custom_domain_signs_people_in_with_the_domain_as_audience() -> Result<()> {
    let dns = TestDns::from_env()?;
    let pebble_root = https::acme_root().await?;
    let api = TestApi::start().await?;
    let user = api.user("signdom", "builder").await?;
    let ns = user.namespace.clone();
    let pki = wildcard_certificate(&api, &ns).await?;
    api.start_operator_with_domains(&ns, https::domains_config(&ns, true)?)
        .await?;
    let keys = Keys::new()?;
    let https_addr = https::start_edge(
        &api,
        &ns,
        https::EdgeOptions {
            wildcard_secret: WILDCARD,
            access_log: false,
            redirect_https: true,
            acme_http: true,
            sign_in: Some(Box::new(|port| keys.sign_in(port))),
        },
    )
    .await?
    .https;
    let auth_url = auth_url(https_addr.port());
    let app = api.create_app(&user, "shop", "static").await;
    let path = format!(
        "/apps/{}/channels/{}/domains",
        app["id"].as_str().context("app id")?,
        app["channels"][0]["id"].as_str().context("channel id")?
    );
    let domain = format!(
        "shop-{}.example",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let row = api
        .post(&path, &user, json!({"domain": domain}))
        .await
        .expect(201, None);
    let token = row["dns_records"]["txt_value"].as_str().context("txt")?;
    dns.txt(&format!("_svc.{domain}"), token).await?;
    dns.a(&domain, &[EDGE_ADDRESS]).await?;
    let verified = api
        .post(&format!("{path}/{domain}/verify"), &user, json!({}))
        .await
        .expect(200, None);
    assert_eq!(verified["status"], "verified", "{verified}");

    // The domain's own certificate (Pebble's) and the auth host's (the wildcard) are both trusted here.
    let auth_host = format!("auth.{APP_DOMAIN}");
    let roots = format!("{}{pebble_root}", pki.ca_pem());
    let browser = Browser::new(&roots, &[&auth_host, &domain], https_addr)?;
    let origin = format!("https://{domain}:{}", https_addr.port());
    // The channel's own 404 (nothing deployed), not the unknown-host one the edge answers until it has read the domain.
    slipway_testkit::wait_until(std::time::Duration::from_secs(120), || {
        let (browser, url) = (browser.clone(), format!("{origin}/"));
        async move {
            Ok(browser
                .get(&url)
                .await
                .is_ok_and(|p| p.status == 404 && p.text.contains("Nothing has been deployed")))
        }
    })
    .await
    .context("the domain is not served over HTTPS")?;

    let person = format!("dora-{}", uuid::Uuid::new_v4().simple());
    upstream_user(&person, json!({"email": "dora@example.test"})).await?;
    let (back, visited) = browser.sign_in(&origin, &person).await?;
    assert_eq!(
        back.location,
        Some(format!("{origin}/after?x=1")),
        "{visited:#?}"
    );
    let cookie = browser
        .cookie(&domain, "__Host-svc_id")
        .context("no identity cookie on the domain")?;
    let claims = app_check(&browser, &auth_url, &cookie, &domain).await?;
    assert_eq!(claims["aud"], domain.as_str());
    assert_eq!(claims["email"], "dora@example.test");
    let me = browser
        .get(&format!("{origin}/svc-auth/whoami"))
        .await?
        .json()?;
    assert_eq!(
        (&me["logged_in"], &me["sub"]),
        (&json!(true), &claims["sub"])
    );
    Ok(())
}
