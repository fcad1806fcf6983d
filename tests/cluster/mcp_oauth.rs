//! OAuth 2.0 for people at the MCP server, against real parts: the API on a socket with its platform database on
//! the test Postgres, the upstream OpenID Connect provider of end-user sign-in (oidc-provider-mock,
//! `hack/oidc.sh`), and two clients: the official Python SDK's `OAuthClientProvider`, which discovers, registers,
//! signs the person in headless and calls tools with the token it got; and a client driven step by step here, which
//! sees every refusal the RFCs define (unknown client, redirect URI, PKCE, resource, scope, another browser, a
//! wrong verifier, an expired or reused code, a person without an account, a refusal on the consent page).

// Fixture helpers panic on a malformed response: in a test that is the failure to report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::collections::HashMap;
use std::process::Stdio;

use anyhow::{Context, Result, ensure};
use axum::http::Method;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use support::browser::{Browser, Page, upstream_user};
use support::{TestApi, User};

const REDIRECT: &str = "http://127.0.0.1:9/callback";

/// The upstream provider, from `hack/oidc.sh env`.
fn upstream_issuer() -> Result<String> {
    std::env::var("SLIPWAY_TEST_OIDC_ISSUER")
        .context("SLIPWAY_TEST_OIDC_ISSUER is not set: start hack/oidc.sh (hack/test.sh does)")
}

/// The API on a socket with OAuth on (its public URL is that socket's), and a person: an account with a verified
/// address, and an upstream user vouching for that address.
struct Fixture {
    api: TestApi,
    base: String,
    person: User,
    /// The person's subject at the upstream provider.
    sub: String,
}

async fn fixture(prefix: &str) -> Result<Fixture> {
    let mut api = TestApi::start().await?;
    let base = api.serve().await?;
    let issuer = upstream_issuer()?;
    let server = slipway_core::oauth::OAuthServer::new(
        &base,
        Some(slipway_identity::UpstreamConfig {
            issuer: issuer.clone(),
            client_id: "slipway".into(),
            client_secret: "slipway-secret".into(),
        }),
    )?;
    api.enable(|features| features.oauth = Some(std::sync::Arc::new(server)));
    let person = api.user(prefix, "basic").await?;
    let address = format!("{}@example.com", person.username);
    verify_address(&api, &person, &address).await?;
    let sub = format!("{}-upstream", person.username);
    upstream_user(
        &issuer,
        &sub,
        json!({"email": address.to_uppercase(), "email_verified": true, "name": "Ada"}),
    )
    .await?;
    Ok(Fixture {
        api,
        base,
        person,
        sub,
    })
}

/// Gives `user` a verified address, as the email code route does.
async fn verify_address(api: &TestApi, user: &User, address: &str) -> Result<()> {
    sqlx::query("UPDATE users SET email = $1, email_verified_at = now() WHERE id = $2")
        .bind(address)
        .bind(user.id)
        .execute(api.state.db())
        .await?;
    Ok(())
}

/// A PKCE pair: (verifier, S256 challenge).
fn pkce() -> (String, String) {
    let verifier = format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    );
    let challenge = URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()));
    (verifier, challenge)
}

/// The query of a redirect's `Location`, and the URL before it.
fn answer_of(page: &Page) -> (String, HashMap<String, String>) {
    let location = page.location.clone().unwrap_or_default();
    let url = reqwest::Url::parse(&location).unwrap();
    let query = url.query_pairs().into_owned().collect();
    let mut bare = url.clone();
    bare.set_query(None);
    (bare.to_string(), query)
}

impl Fixture {
    /// Registers a client with `redirect_uris`; the answer.
    async fn register(&self, body: Value) -> Result<(u16, Value)> {
        let res = reqwest::Client::new()
            .post(format!("{}/oauth/register", self.base))
            .json(&body)
            .send()
            .await?;
        Ok((res.status().as_u16(), res.json().await?))
    }

    async fn client(&self) -> Result<String> {
        let (status, body) = self
            .register(json!({"redirect_uris": [REDIRECT], "client_name": "step by step"}))
            .await?;
        ensure!(status == 201, "registration: {status} {body}");
        Ok(body["client_id"].as_str().unwrap().to_owned())
    }

    /// The authorization URL with `params` (those given as `None` are left out).
    fn authorize_url(&self, params: &[(&str, Option<&str>)]) -> String {
        let mut query = form_urlencoded::Serializer::new(String::new());
        for (key, value) in params {
            if let Some(value) = value {
                query.append_pair(key, value);
            }
        }
        format!("{}/oauth/authorize?{}", self.base, query.finish())
    }

    /// A well-formed authorization request of `client` with `challenge`.
    fn good_request(&self, client: &str, challenge: &str, scope: Option<&str>) -> String {
        let resource = format!("{}/mcp", self.base);
        self.authorize_url(&[
            ("response_type", Some("code")),
            ("client_id", Some(client)),
            ("redirect_uri", Some(REDIRECT)),
            ("state", Some("client-state")),
            ("code_challenge", Some(challenge)),
            ("code_challenge_method", Some("S256")),
            ("resource", Some(&resource)),
            ("scope", scope),
        ])
    }

    /// Follows an authorization request in `browser` through the provider's form (as `sub`); the platform's
    /// callback URL the provider sends the browser back to (not visited yet).
    async fn to_callback(&self, browser: &Browser, url: &str, sub: &str) -> Result<String> {
        let (form, visited) = browser.follow(url).await?;
        ensure!(
            form.status == 200,
            "the provider's form: {} {}",
            form.status,
            form.text
        );
        let form_url = visited.last().cloned().context("no page")?;
        let submitted = browser.post_form(&form_url, &[("sub", sub)]).await?;
        ensure!(
            submitted.status == 302,
            "the provider: {} {}",
            submitted.status,
            submitted.text
        );
        let callback = submitted
            .location
            .context("no redirect from the provider")?;
        ensure!(
            callback.starts_with(&format!("{}/oauth/callback?", self.base)),
            "{callback}"
        );
        Ok(callback)
    }

    /// [`Fixture::to_callback`], then the callback: the platform's answer (the consent page, or a redirect back to
    /// the client) and the callback's URL.
    async fn sign_in(&self, browser: &Browser, url: &str, sub: &str) -> Result<(Page, String)> {
        let callback = self.to_callback(browser, url, sub).await?;
        Ok((browser.get(&callback).await?, callback))
    }

    /// The hidden request id of a consent page.
    fn request_of(page: &Page) -> String {
        let marker = r#"name="request" value=""#;
        let start = page.text.find(marker).expect("a consent form") + marker.len();
        page.text[start..].split('"').next().unwrap().to_owned()
    }

    /// A code for `client`, allowed by the person: (code, state).
    async fn code(
        &self,
        client: &str,
        challenge: &str,
        scope: Option<&str>,
    ) -> Result<(String, String)> {
        let browser = Browser::plain()?;
        let (consent, _) = self
            .sign_in(
                &browser,
                &self.good_request(client, challenge, scope),
                &self.sub,
            )
            .await?;
        ensure!(
            consent.status == 200,
            "consent page: {} {}",
            consent.status,
            consent.text
        );
        let allowed = browser
            .post_form(
                &format!("{}/oauth/consent", self.base),
                &[
                    ("request", &Self::request_of(&consent)),
                    ("decision", "allow"),
                ],
            )
            .await?;
        ensure!(
            allowed.status == 303 || allowed.status == 302,
            "{}",
            allowed.text
        );
        let (to, query) = answer_of(&allowed);
        ensure!(to == REDIRECT, "{to}");
        Ok((query["code"].clone(), query["state"].clone()))
    }

    /// POSTs the token endpoint with `fields`.
    async fn token(&self, fields: &[(&str, &str)]) -> Result<(u16, Value)> {
        let body = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(fields)
            .finish();
        let res = reqwest::Client::new()
            .post(format!("{}/oauth/token", self.base))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await?;
        let status = res.status().as_u16();
        if status != 401 {
            ensure!(
                res.headers()["cache-control"] == "no-store",
                "token answers are not cached"
            );
        }
        Ok((status, res.json().await?))
    }

    /// Redeems `code` with `verifier` as `client` for `redirect` (and the resource {mcp_url}).
    async fn redeem(
        &self,
        code: &str,
        verifier: &str,
        client: &str,
        redirect: &str,
    ) -> Result<(u16, Value)> {
        let resource = format!("{}/mcp", self.base);
        self.token(&[
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", redirect),
            ("client_id", client),
            ("code_verifier", verifier),
            ("resource", &resource),
        ])
        .await
    }

    /// `initialize` at the MCP endpoint with `token`: the status and, on 401, the challenge.
    async fn mcp_status(&self, token: Option<&str>) -> Result<(u16, Option<String>, Value)> {
        let mut req = reqwest::Client::new()
            .post(format!("{}/mcp", self.base))
            .header("accept", "application/json, text/event-stream")
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}));
        if let Some(token) = token {
            req = req.bearer_auth(token);
        }
        let res = req.send().await?;
        let status = res.status().as_u16();
        let challenge = res
            .headers()
            .get("www-authenticate")
            .map(|v| v.to_str().unwrap().to_owned());
        let body = res.json().await.unwrap_or(Value::Null);
        Ok((status, challenge, body))
    }
}

#[tokio::test]
async fn the_metadata_and_the_401_lead_a_client_to_the_authorization_server() -> Result<()> {
    let f = fixture("oameta").await?;
    let mcp = format!("{}/mcp", f.base);
    let (status, challenge, _) = f.mcp_status(None).await?;
    assert_eq!(status, 401);
    let metadata_url = format!("{}/.well-known/oauth-protected-resource/mcp", f.base);
    assert_eq!(
        challenge.unwrap(),
        format!(r#"Bearer realm="slipway", resource_metadata="{metadata_url}""#)
    );
    for url in [
        metadata_url,
        format!("{}/.well-known/oauth-protected-resource", f.base),
    ] {
        let resource: Value = reqwest::get(&url).await?.json().await?;
        assert_eq!(resource["resource"], mcp.as_str(), "{url}");
        assert_eq!(resource["authorization_servers"], json!([f.base]));
        assert_eq!(resource["bearer_methods_supported"], json!(["header"]));
        assert_eq!(
            resource["scopes_supported"],
            json!(slipway_auth::scopes::DEFAULT)
        );
    }
    let server: Value = reqwest::get(format!("{}/.well-known/oauth-authorization-server", f.base))
        .await?
        .json()
        .await?;
    assert_eq!(server["issuer"], f.base.as_str());
    assert_eq!(
        server["authorization_endpoint"],
        format!("{}/oauth/authorize", f.base)
    );
    assert_eq!(server["token_endpoint"], format!("{}/oauth/token", f.base));
    assert_eq!(
        server["registration_endpoint"],
        format!("{}/oauth/register", f.base)
    );
    assert_eq!(server["code_challenge_methods_supported"], json!(["S256"]));
    assert_eq!(server["response_types_supported"], json!(["code"]));

    // Without a public URL the API has no authorization server: 404 in the envelope, and a bare challenge.
    let plain = TestApi::start().await?;
    let reply = plain
        .call(
            Method::GET,
            "/.well-known/oauth-authorization-server",
            None,
            None,
        )
        .await;
    reply.expect(404, Some("not_found"));
    Ok(())
}

#[tokio::test]
async fn a_person_signs_in_with_the_sdk_and_the_token_works_at_the_mcp_endpoint_only() -> Result<()>
{
    let f = fixture("oasdk").await?;
    let out = tokio::process::Command::new("python3")
        .arg(slipway_testkit::package_dir().join("tests/mcp/oauth_client.py"))
        .arg(format!("{}/mcp", f.base))
        .arg(&f.sub)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .context("start tests/mcp/oauth_client.py")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().last().unwrap_or_default();
    let reply: Value = serde_json::from_str(line)
        .with_context(|| format!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr)))?;
    assert!(
        reply.get("failure").is_none() && out.status.success(),
        "{reply}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(reply["tools"], 54);
    assert_eq!(reply["apps"]["apps"], json!([]));
    assert_eq!(reply["created_error"], false, "{reply}");
    assert_eq!(reply["created"]["name"], "oauth-made");
    assert_eq!(
        reply["scope"]
            .as_str()
            .unwrap()
            .split(' ')
            .collect::<Vec<_>>(),
        slipway_auth::scopes::DEFAULT
    );

    // The app is the person's: their own token sees it.
    let apps = f.api.get("/apps", &f.person).await.expect(200, None);
    assert_eq!(apps["apps"][0]["name"], "oauth-made");

    // The token: a person's (not an agent's), for 30 days, stored as a hash, bound to the MCP endpoint.
    let token = reply["token"].as_str().unwrap();
    assert!(token.starts_with("svc_"));
    let row: (
        bool,
        Option<String>,
        Option<String>,
        chrono::DateTime<chrono::Utc>,
        uuid::Uuid,
    ) = sqlx::query_as(
        "SELECT is_agent, audience, origin, expires_at, user_id FROM tokens WHERE token_hash = $1",
    )
    .bind(&slipway_auth::token::hash(token)[..])
    .fetch_one(f.api.state.db())
    .await?;
    assert!(!row.0, "a person");
    assert_eq!(row.1.as_deref(), Some("mcp"));
    assert_eq!(row.2.as_deref(), Some("oauth"));
    let days = (row.3 - chrono::Utc::now()).num_days();
    assert!((29..=30).contains(&days), "{days}");
    assert_eq!(row.4, f.person.id);
    let stored: i64 =
        sqlx::query_scalar("SELECT count(*) FROM tokens WHERE token_hash = $1::bytea")
            .bind(token.as_bytes())
            .fetch_one(f.api.state.db())
            .await?;
    assert_eq!(stored, 0, "no plaintext is stored");

    assert_eq!(f.mcp_status(Some(token)).await?.0, 200);
    let rest = f.api.call(Method::GET, "/apps", Some(token), None).await;
    assert_eq!(rest.status, 403);
    assert_eq!(rest.body["error"]["code"], "scope_denied");
    assert!(rest.message().contains("/mcp"), "{}", rest.message());
    let base = f.base.clone();
    let git = reqwest::Client::new()
        .get(format!(
            "{base}/{}/oauth-made.git/info/refs?service=git-upload-pack",
            f.person.username
        ))
        .basic_auth("x", Some(token))
        .send()
        .await?;
    assert_eq!(git.status(), 401, "git does not take it");
    Ok(())
}

#[tokio::test]
async fn a_credential_minted_with_an_oauth_token_is_good_at_the_mcp_endpoint_only() -> Result<()> {
    let f = fixture("oacred").await?;
    let client = f.client().await?;
    let (verifier, challenge) = pkce();
    let (code, _) = f.code(&client, &challenge, None).await?;
    let (status, answer) = f.redeem(&code, &verifier, &client, REDIRECT).await?;
    assert_eq!(status, 200, "{answer}");
    let oauth = answer["access_token"].as_str().unwrap().to_owned();
    let mcp_url = format!("{}/mcp", f.base);
    let audience = |token: String| {
        let db = f.api.state.db().clone();
        async move {
            sqlx::query_scalar::<_, Option<String>>(
                "SELECT audience FROM tokens WHERE token_hash = $1",
            )
            .bind(&slipway_auth::token::hash(&token)[..])
            .fetch_one(&db)
            .await
        }
    };

    // get_credentials (POST /credentials in-process) with the OAuth token: a credential bound to /mcp as well,
    // and so is one minted with that credential in turn.
    let mut minted = Vec::new();
    let mut minter = oauth.clone();
    for _ in 0..2 {
        let mut session = support::mcp::McpClient::connect(&mcp_url, &minter).await?;
        let credential = session.call("get_credentials", json!({})).await?.ok();
        minter = credential["token"].as_str().unwrap().to_owned();
        minted.push(minter.clone());
    }
    for credential in &minted {
        assert_eq!(audience(credential.clone()).await?.as_deref(), Some("mcp"));
        assert_eq!(f.mcp_status(Some(credential)).await?.0, 200, "good at /mcp");
        for path in ["/apps", "/tokens"] {
            let rest = f.api.call(Method::GET, path, Some(credential), None).await;
            assert_eq!(rest.status, 403, "{path}");
            assert_eq!(rest.body["error"]["code"], "scope_denied");
            assert!(rest.message().contains("/mcp"), "{}", rest.message());
        }
        let minting = f
            .api
            .call(
                Method::POST,
                "/credentials",
                Some(credential),
                Some(json!({})),
            )
            .await;
        assert_eq!(minting.status, 403, "nor a general token minted over REST");
        let git = reqwest::Client::new()
            .get(format!(
                "{}/{}/any.git/info/refs?service=git-upload-pack",
                f.base, f.person.username
            ))
            .basic_auth("x", Some(credential))
            .send()
            .await?;
        assert_eq!(git.status(), 401, "git does not take it");
    }
    // A general token still mints general credentials.
    let general = f
        .api
        .post("/credentials", &f.person, json!({}))
        .await
        .expect(200, None);
    let general = general["token"].as_str().unwrap().to_owned();
    assert_eq!(audience(general.clone()).await?, None);
    f.api
        .call(Method::GET, "/apps", Some(&general), None)
        .await
        .expect(200, None);
    Ok(())
}

#[tokio::test]
async fn registration_and_authorization_refuse_with_the_rfcs_errors() -> Result<()> {
    let f = fixture("oaref").await?;
    for body in [
        json!({}),
        json!({"redirect_uris": []}),
        json!({"redirect_uris": ["http://client.example/cb"]}),
        json!({"redirect_uris": ["https://client.example/cb#x"]}),
    ] {
        let (status, answer) = f.register(body.clone()).await?;
        assert_eq!(
            (status, answer["error"].as_str()),
            (400, Some("invalid_redirect_uri")),
            "{body}"
        );
    }
    let (status, answer) = f
        .register(json!({"redirect_uris": [REDIRECT], "grant_types": ["client_credentials"]}))
        .await?;
    assert_eq!(
        (status, answer["error"].as_str()),
        (400, Some("invalid_client_metadata"))
    );
    let (status, registered) = f
        .register(json!({"redirect_uris": [REDIRECT], "token_endpoint_auth_method": "client_secret_post"}))
        .await?;
    assert_eq!(status, 201);
    assert_eq!(
        registered["token_endpoint_auth_method"], "none",
        "public clients only"
    );
    assert!(registered.get("client_secret").is_none());
    let client = registered["client_id"].as_str().unwrap().to_owned();
    let (_, challenge) = pkce();
    let browser = Browser::plain()?;

    // An unknown client, or a redirect URI the client did not register: answered here, never redirected.
    let unknown = browser
        .get(&f.good_request("mcp-nobody", &challenge, None).to_string())
        .await?;
    assert_eq!(unknown.status, 400);
    assert!(unknown.location.is_none());
    assert_eq!(unknown.json()?["error"], "invalid_client");
    let elsewhere = browser
        .get(&f.good_request(&client, &challenge, None).replace(
            &form_urlencoded::byte_serialize(REDIRECT.as_bytes()).collect::<String>(),
            &form_urlencoded::byte_serialize(b"http://127.0.0.1:9/other").collect::<String>(),
        ))
        .await?;
    assert_eq!(elsewhere.status, 400);
    assert!(elsewhere.location.is_none());
    assert_eq!(elsewhere.json()?["error"], "invalid_request");

    // Every other error is answered here too: registration is open, so a redirect would make the API a redirector.
    let resource = format!("{}/mcp", f.base);
    let base = |changes: &[(&str, Option<&str>)]| {
        let mut params: Vec<(&str, Option<&str>)> = vec![
            ("response_type", Some("code")),
            ("client_id", Some(&client)),
            ("redirect_uri", Some(REDIRECT)),
            ("state", Some("s1")),
            ("code_challenge", Some(&challenge)),
            ("code_challenge_method", Some("S256")),
            ("resource", Some(&resource)),
        ];
        for (key, value) in changes {
            params.retain(|(k, _)| k != key);
            params.push((key, *value));
        }
        f.authorize_url(&params)
    };
    for (changes, error) in [
        (vec![("code_challenge", None)], "invalid_request"),
        (
            vec![("code_challenge_method", Some("plain"))],
            "invalid_request",
        ),
        (vec![("code_challenge_method", None)], "invalid_request"),
        (
            vec![("code_challenge", Some("too-short"))],
            "invalid_request",
        ),
        (
            vec![("response_type", Some("token"))],
            "unsupported_response_type",
        ),
        (
            vec![("resource", Some("https://elsewhere.example/mcp"))],
            "invalid_target",
        ),
        (vec![("scope", Some("repo:* email:bind"))], "invalid_scope"),
    ] {
        let page = browser.get(&base(&changes)).await?;
        assert_eq!(page.status, 400, "{changes:?}: {}", page.text);
        assert!(page.location.is_none(), "{changes:?}");
        assert_eq!(page.json()?["error"], error, "{changes:?}");
    }
    let stateless = browser.get(&base(&[("state", None)])).await?;
    assert_eq!(stateless.status, 400);
    assert!(stateless.location.is_none());
    assert_eq!(stateless.json()?["error"], "invalid_request");
    Ok(())
}

#[tokio::test]
async fn codes_are_bound_to_the_browser_the_verifier_and_one_use() -> Result<()> {
    let f = fixture("oacode").await?;
    let client = f.client().await?;
    let (verifier, challenge) = pkce();

    // The provider's callback and the consent form work only in the browser that started the request.
    let browser = Browser::plain()?;
    let callback = f
        .to_callback(
            &browser,
            &f.good_request(&client, &challenge, Some("repo:* stats:read")),
            &f.sub,
        )
        .await?;
    let stranger = Browser::plain()?;
    let replayed = stranger.get(&callback).await?;
    assert_eq!(replayed.status, 400, "another browser");
    assert_eq!(replayed.json()?["error"], "invalid_request");
    let consent = browser.get(&callback).await?;
    assert_eq!(
        consent.status, 200,
        "the browser that started it: {}",
        consent.text
    );
    assert!(
        consent.text.contains(&f.person.username),
        "the page names the account"
    );
    assert!(consent.text.contains("step by step"), "and the client");
    assert_eq!(consent.headers["x-frame-options"], "DENY");
    let again = stranger.get(&callback).await?;
    assert_eq!(again.status, 400, "nor once it was used");
    let request = Fixture::request_of(&consent);
    let consent_url = format!("{}/oauth/consent", f.base);
    let forged = stranger
        .post_form(
            &consent_url,
            &[("request", &request), ("decision", "allow")],
        )
        .await?;
    assert_eq!(forged.status, 400, "a consent posted from another browser");
    let allowed = browser
        .post_form(
            &consent_url,
            &[("request", &request), ("decision", "allow")],
        )
        .await?;
    let (to, query) = answer_of(&allowed);
    assert_eq!(to, REDIRECT);
    assert_eq!(query["state"], "client-state");
    let code = query["code"].clone();
    let again = browser
        .post_form(
            &consent_url,
            &[("request", &request), ("decision", "allow")],
        )
        .await?;
    assert_eq!(again.status, 400, "a consent is answered once");

    let (status, answer) = f.redeem(&code, &verifier, "mcp-nobody", REDIRECT).await?;
    assert_eq!(
        (status, answer["error"].as_str()),
        (401, Some("invalid_client"))
    );
    let (other_verifier, _) = pkce();
    let (status, answer) = f.redeem(&code, &other_verifier, &client, REDIRECT).await?;
    assert_eq!(
        (status, answer["error"].as_str()),
        (400, Some("invalid_grant")),
        "{answer}"
    );
    let (status, answer) = f
        .redeem(&code, &verifier, &client, "http://127.0.0.1:9/other")
        .await?;
    assert_eq!(
        (status, answer["error"].as_str()),
        (400, Some("invalid_grant"))
    );
    let (status, answer) = f
        .token(&[
            ("grant_type", "authorization_code"),
            ("code", &code),
            ("redirect_uri", REDIRECT),
            ("client_id", &client),
            ("code_verifier", &verifier),
            ("resource", "https://elsewhere.example/mcp"),
        ])
        .await?;
    assert_eq!(
        (status, answer["error"].as_str()),
        (400, Some("invalid_target"))
    );
    let (status, answer) = f
        .token(&[("grant_type", "client_credentials"), ("client_id", &client)])
        .await?;
    assert_eq!(
        (status, answer["error"].as_str()),
        (400, Some("unsupported_grant_type"))
    );

    // The right verifier: a token with the scopes asked for, good at /mcp.
    let (status, answer) = f.redeem(&code, &verifier, &client, REDIRECT).await?;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["token_type"], "Bearer");
    assert_eq!(answer["scope"], "repo:* stats:read");
    assert_eq!(answer["expires_in"], 30 * 24 * 3600);
    let token = answer["access_token"].as_str().unwrap().to_owned();
    assert_eq!(f.mcp_status(Some(&token)).await?.0, 200);

    // The code again: refused, and the token it bought is revoked.
    let (status, answer) = f.redeem(&code, &verifier, &client, REDIRECT).await?;
    assert_eq!(
        (status, answer["error"].as_str()),
        (400, Some("invalid_grant"))
    );
    let (status, _, body) = f.mcp_status(Some(&token)).await?;
    assert_eq!(status, 401);
    assert_eq!(body["error"]["code"], "token_revoked");

    // A code past its minute.
    let (verifier, challenge) = pkce();
    let (late, _) = f.code(&client, &challenge, None).await?;
    sqlx::query("UPDATE oauth_requests SET code_expires_at = now() - interval '1 second' WHERE code_hash = $1")
        .bind(&slipway_auth::token::hash(&late)[..])
        .execute(f.api.state.db())
        .await?;
    let (status, answer) = f.redeem(&late, &verifier, &client, REDIRECT).await?;
    assert_eq!(
        (status, answer["error"].as_str()),
        (400, Some("invalid_grant"))
    );
    assert!(
        answer["error_description"]
            .as_str()
            .unwrap()
            .contains("expired")
    );
    Ok(())
}

#[tokio::test]
async fn a_person_without_a_verified_account_or_who_refuses_gets_no_code() -> Result<()> {
    let f = fixture("oadeny").await?;
    let issuer = upstream_issuer()?;
    let client = f.client().await?;
    let (_, challenge) = pkce();

    // Refused on the consent page.
    let browser = Browser::plain()?;
    let (consent, _) = f
        .sign_in(&browser, &f.good_request(&client, &challenge, None), &f.sub)
        .await?;
    let refused = browser
        .post_form(
            &format!("{}/oauth/consent", f.base),
            &[
                ("request", &Fixture::request_of(&consent)),
                ("decision", "deny"),
            ],
        )
        .await?;
    let (to, query) = answer_of(&refused);
    assert_eq!(to, REDIRECT);
    assert_eq!(query["error"], "access_denied");
    assert_eq!(query["state"], "client-state");
    assert!(!query.contains_key("code"));

    // An address no account verified, and one the provider does not say it verified.
    let stranger = format!("{}-nobody", f.sub);
    upstream_user(
        &issuer,
        &stranger,
        json!({"email": "nobody@example.com", "email_verified": true}),
    )
    .await?;
    let unverified = format!("{}-unverified", f.sub);
    upstream_user(
        &issuer,
        &unverified,
        json!({"email": format!("{}@example.com", f.person.username)}),
    )
    .await?;
    for (sub, words) in [
        (&stranger, "no account"),
        (&unverified, "verified email address"),
    ] {
        let browser = Browser::plain()?;
        let (answer, _) = f
            .sign_in(&browser, &f.good_request(&client, &challenge, None), sub)
            .await?;
        assert_eq!(answer.status, 303, "{}", answer.text);
        let (to, query) = answer_of(&answer);
        assert_eq!(to, REDIRECT);
        assert_eq!(query["error"], "access_denied");
        assert!(query["error_description"].contains(words), "{query:?}");
        assert!(!query.contains_key("code"));
    }

    // A deactivated account signs in no more.
    sqlx::query("UPDATE users SET deactivated_at = now() WHERE id = $1")
        .bind(f.person.id)
        .execute(f.api.state.db())
        .await?;
    let browser = Browser::plain()?;
    let (answer, _) = f
        .sign_in(&browser, &f.good_request(&client, &challenge, None), &f.sub)
        .await?;
    let (_, query) = answer_of(&answer);
    assert_eq!(query["error"], "access_denied");
    Ok(())
}

#[tokio::test]
async fn a_source_starts_only_so_many_sign_ins_an_hour_and_a_client_never_used_expires()
-> Result<()> {
    let f = fixture("oabudget").await?;
    let used = f.client().await?;
    let (verifier, challenge) = pkce();
    let (code, _) = f.code(&used, &challenge, None).await?;
    assert_eq!(f.redeem(&code, &verifier, &used, REDIRECT).await?.0, 200);

    // Every start counts, refused or not (the sign-in above was one): past the budget, 429 and when to come back.
    let browser = Browser::plain()?;
    let refused = f.good_request(&used, &challenge, Some("nope"));
    for _ in 1..slipway_core::state::OAUTH_AUTHORIZATIONS_PER_SOURCE_PER_HOUR {
        assert_eq!(browser.get(&refused).await?.status, 400);
    }
    let spent = reqwest::get(&refused).await?;
    assert_eq!(spent.status(), 429);
    assert!(spent.headers().contains_key("retry-after"));
    let spent: Value = spent.json().await?;
    assert_eq!(spent["error"]["code"], "too_many_requests");

    // A client registered over a day ago that never bought a token is gone at the next registration; the used
    // one stays.
    let unused = f.client().await?;
    let db = f.api.state.db();
    sqlx::query("UPDATE oauth_clients SET created_at = now() - interval '25 hours' WHERE client_id = ANY($1)")
        .bind([&used, &unused])
        .execute(db)
        .await?;
    f.client().await?;
    let kept: Vec<String> =
        sqlx::query_scalar("SELECT client_id FROM oauth_clients WHERE client_id = ANY($1)")
            .bind([&used, &unused])
            .fetch_all(db)
            .await?;
    assert_eq!(kept, [used]);
    Ok(())
}

/// The whole flow in a real browser: Chromium goes through the provider's form and the consent page, and its
/// Allow lands on the client's redirect URI (a listener of the test's) with a code that buys a token. Browsers apply
/// a consent page's `form-action` to the redirect that follows its POST, so a policy naming only the API's origin
/// would stop the flow here.
#[tokio::test]
async fn in_chromium_allow_on_the_consent_page_reaches_the_clients_redirect_uri() -> Result<()> {
    use fantoccini::Locator;
    let f = fixture("oachrome").await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let redirect = format!("http://{}/callback", listener.local_addr()?);
    let (sent, mut received) = tokio::sync::mpsc::unbounded_channel::<HashMap<String, String>>();
    let client_side = axum::Router::new().route(
        "/callback",
        axum::routing::get(
            move |axum::extract::Query(query): axum::extract::Query<HashMap<String, String>>| {
                let _ = sent.send(query);
                async { "signed in" }
            },
        ),
    );
    tokio::spawn(async move { axum::serve(listener, client_side).await });
    let (status, registered) = f
        .register(json!({"redirect_uris": [redirect], "client_name": "in a browser"}))
        .await?;
    ensure!(status == 201, "registration: {status} {registered}");
    let client = registered["client_id"].as_str().unwrap().to_owned();
    let (verifier, challenge) = pkce();
    let url = f.authorize_url(&[
        ("response_type", Some("code")),
        ("client_id", Some(&client)),
        ("redirect_uri", Some(&redirect)),
        ("state", Some("in-chromium")),
        ("code_challenge", Some(&challenge)),
        ("code_challenge_method", Some("S256")),
    ]);

    let chromium = support::chromium::Chromium::start("MAP unused.invalid 127.0.0.1").await?;
    let c = &chromium.client;
    c.goto(&url).await?;
    c.wait()
        .for_element(Locator::Css("input[name=sub]"))
        .await?
        .send_keys(&f.sub)
        .await?;
    c.find(Locator::Css("button:not([name=action])"))
        .await?
        .click()
        .await?;
    c.wait()
        .for_element(Locator::Css("button[value=allow]"))
        .await?
        .click()
        .await?;
    let query = tokio::time::timeout(std::time::Duration::from_secs(30), received.recv())
        .await
        .context("the browser never reached the client's redirect URI")?
        .context("the listener stopped")?;
    assert_eq!(query["state"], "in-chromium");
    assert!(
        c.current_url().await?.as_str().starts_with(&redirect),
        "the browser is at the client"
    );
    let (status, answer) = f
        .redeem(&query["code"], &verifier, &client, &redirect)
        .await?;
    assert_eq!(status, 200, "{answer}");
    chromium.close().await?;
    Ok(())
}
