//! Agents register themselves (hosting API part 2, "Agent registration and sign-in"): keys made and messages signed
//! by the real `ssh-keygen`, a real apiserver and platform database behind the API, and, for email verification, a
//! real SMTP server (aiosmtpd, `hack/smtp.sh`) that the test reads the code back from. The operator runs in this
//! process to show a verified address resizing a running app's Deployment.

// Fixture helpers panic on a malformed response: in a test that is the failure to report.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::net::IpAddr;
use std::time::Duration;

use anyhow::Result;
use axum::http::Method;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use serde_json::{Value, json};
use slipway_core::registration::budget::RegistrationLimits;
use slipway_core::registration::mailer::Mailer;
use slipway_core::state::Limits;
use support::agent::{
    AgentKey, agent_name, attach_mailer, code_mailed_to, mails_to, now, register,
};
use support::{Reply, TestApi, call_on};

/// An API whose registration takes every source without a budget (these tests register many accounts from one
/// process), unless a test sets its own.
async fn api_with(registration: RegistrationLimits) -> Result<TestApi> {
    Ok(TestApi::start().await?.with_limits(Limits {
        registration,
        ..Limits::default()
    }))
}

async fn api() -> Result<TestApi> {
    api_with(RegistrationLimits {
        per_source_per_hour: 0,
        global_per_hour: 0,
        ..RegistrationLimits::default()
    })
    .await
}

async fn post(api: &TestApi, path: &str, token: Option<&str>, body: Value) -> Reply {
    call_on(&api.router, Method::POST, path, token, Some(body)).await
}

async fn get(api: &TestApi, path: &str, token: &str) -> Reply {
    call_on(&api.router, Method::GET, path, Some(token), None).await
}

/// The number of accounts in the platform database.
async fn accounts(api: &TestApi) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM users")
        .fetch_one(api.state.db())
        .await
        .unwrap()
}

#[tokio::test]
async fn an_agent_registers_with_ssh_keygen_signs_in_again_and_its_tokens_create_apps() -> Result<()>
{
    let api = api().await?;
    let key = AgentKey::new("ed25519")?;
    let name = agent_name();
    api.forget_namespace_later(&format!("slipway-user-{name}"));
    let body = key.registration(Some(&name), now())?;
    let made = post(&api, "/registrations", None, body.clone())
        .await
        .expect(200, None);
    assert_eq!(made["username"], name);
    assert_eq!(made["plan"], "starter");
    assert_eq!(
        made["fingerprint_sha256"], key.fingerprint,
        "as ssh-keygen -l prints it"
    );
    assert_eq!(made["git_ssh_host"], support::GIT_HOST);
    assert_eq!(
        made["next"],
        json!({"verify_email": "POST /me/email-verifications", "renew_token": "POST /auth/ssh-key"})
    );
    let plans = call_on(&api.router, Method::GET, "/plans", None, None)
        .await
        .expect(200, None);
    assert_eq!(
        made["limits"], plans["plans"][0],
        "the starter row of GET /plans"
    );
    assert_eq!(made["limits"]["tier"], "starter");
    let expires: chrono::DateTime<chrono::Utc> =
        made["token_expires_at"].as_str().unwrap().parse()?;
    let days = (expires - chrono::Utc::now()).num_hours() as f64 / 24.0;
    assert!((29.9..=30.0).contains(&days), "a 30-day token: {days}");
    let token = made["token"].as_str().unwrap().to_owned();

    // The key is on the account with api_login; the token creates an app and carries email:bind (it may ask for
    // a code; with no mail relay configured the route says so, past the scope check).
    let keys = get(&api, "/ssh-keys", &token).await.expect(200, None);
    assert_eq!(keys["ssh_keys"][0]["id"], made["ssh_key_id"]);
    assert_eq!(keys["ssh_keys"][0]["api_login"], true);
    assert_eq!(keys["ssh_keys"][0]["label"], "registration");
    // With email:bind, the spec's body adds another api_login key, which signs in to this account.
    let laptop = AgentKey::new("ed25519")?;
    post(
        &api,
        "/ssh-keys",
        Some(&token),
        json!({"public_key": laptop.public, "label": "laptop", "api_login": true}),
    )
    .await
    .expect(200, None);
    let renewed = post(&api, "/auth/ssh-key", None, laptop.login(now())?)
        .await
        .expect(200, None);
    assert_eq!(renewed["username"], name);
    post(&api, "/apps", Some(&token), json!({"name": "hello"}))
        .await
        .expect(200, None);
    post(
        &api,
        "/me/email-verifications",
        Some(&token),
        json!({"email": "a@example.com"}),
    )
    .await
    .expect(503, Some("service_unavailable"));
    let stats = get(&api, "/api/user/stats", &token).await.expect(200, None);
    assert_eq!(stats["apps"], json!({"total": 1, "owned": 1, "shared": 0}));
    assert_eq!(stats["sites"][0]["app_name"], "hello");
    assert_eq!(stats["sites"][0]["channel"], "prod");
    assert_eq!(stats["sites"][0]["role"], "owner");
    assert_eq!(stats["resources"]["plan"], "starter");
    assert_eq!(
        stats["resources"]["running_containers"], 0,
        "a static site runs no container"
    );
    assert_eq!(stats["resources"]["memory_limit_mb_per_container"], 128);

    // The same signature again is a replay.
    let replay = post(&api, "/registrations", None, body).await;
    assert!(replay.message().contains("used before"), "{}", replay.body);
    replay.expect(400, Some("bad_request"));

    // SSH login with the same key: a renewal for the same account, whose token works too.
    let login = key.login(now())?;
    let renewal = post(&api, "/auth/ssh-key", None, login.clone())
        .await
        .expect(200, None);
    assert_eq!(renewal["username"], name);
    assert_eq!(renewal["user_id"], made["user_id"]);
    let apps = get(&api, "/apps", renewal["token"].as_str().unwrap())
        .await
        .expect(200, None);
    assert_eq!(apps["apps"][0]["name"], "hello");
    post(&api, "/auth/ssh-key", None, login)
        .await
        .expect(400, Some("bad_request"));

    // Without a username, `agent` and 8 random characters.
    let other = AgentKey::new("ed25519")?;
    let picked = post(
        &api,
        "/registrations",
        None,
        other.registration(None, now())?,
    )
    .await
    .expect(200, None);
    let picked_name = picked["username"].as_str().unwrap();
    api.forget_namespace_later(&format!("slipway-user-{picked_name}"));
    assert!(
        slipway_rest::registrations::is_agent_username(picked_name) && picked_name.len() == 13,
        "{picked_name}"
    );
    Ok(())
}

#[tokio::test]
async fn registration_and_login_refuse_what_the_spec_refuses_and_create_nothing() -> Result<()> {
    let api = api().await?;
    let (key, made) = register(&api).await?;
    let taken = made["username"].as_str().unwrap();
    let before = accounts(&api).await;
    let fresh = AgentKey::new("ed25519")?;
    let name = agent_name();

    let refusals: Vec<(&str, Value, u16, &str, &str)> = vec![
        (
            "signed in the login namespace",
            fresh.registration_signed("svc-login", &name, Some(&name), now())?,
            400,
            "bad_request",
            "namespace",
        ),
        (
            "signed for another username",
            fresh.registration_signed("svc-register", &agent_name(), Some(&name), now())?,
            400,
            "bad_request",
            "does not verify",
        ),
        (
            "a timestamp 400 s old",
            fresh.registration(Some(&name), now() - 400)?,
            400,
            "bad_request",
            "timestamp",
        ),
        (
            "a timestamp 400 s ahead",
            fresh.registration(Some(&name), now() + 400)?,
            400,
            "bad_request",
            "timestamp",
        ),
        (
            "a username off the pattern",
            fresh.registration(Some("robot12345"), now())?,
            400,
            "bad_request",
            "^agent[a-z0-9]{5,35}$",
        ),
        (
            "an RSA key",
            AgentKey::new("rsa")?.registration(Some(&name), now())?,
            400,
            "bad_request",
            "ssh-ed25519",
        ),
        (
            "a taken username",
            fresh.registration(Some(taken), now())?,
            409,
            "conflict",
            "taken",
        ),
        (
            "a registered key",
            key.registration(Some(&name), now())?,
            409,
            "conflict",
            "already registered",
        ),
    ];
    for (what, body, status, code, says) in refusals {
        let reply = post(&api, "/registrations", None, body).await;
        assert!(reply.message().contains(says), "{what}: {}", reply.body);
        assert_eq!(reply.status.as_u16(), status, "{what}: {}", reply.body);
        assert_eq!(reply.body["error"]["code"], code, "{what}");
    }

    // Field problems are listed, all at once.
    let mut extra = fresh.registration(Some(&name), now())?;
    extra["plan"] = json!("studio");
    extra["timestamp"] = json!("soon");
    extra.as_object_mut().unwrap().remove("signature");
    let reply = post(&api, "/registrations", None, extra)
        .await
        .expect(422, Some("validation_failed"));
    let fields: Vec<&str> = reply["error"]["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["field"].as_str().unwrap())
        .collect();
    assert_eq!(fields, ["plan", "timestamp", "signature"], "{reply}");
    let long_label = json!({"public_key": fresh.public, "timestamp": now(), "signature": "x", "label": "l".repeat(65)});
    post(&api, "/registrations", None, long_label)
        .await
        .expect(400, Some("bad_request"));
    let raw = axum::http::Request::post("/registrations")
        .header("content-type", "application/json")
        .body(axum::body::Body::from("{not json"))
        .unwrap();
    api.send(raw).await.expect(400, Some("bad_request"));
    assert_eq!(
        accounts(&api).await,
        before,
        "no refusal created an account"
    );

    // Login: an unregistered key, a key without api_login, the wrong namespace, an extra field.
    post(&api, "/auth/ssh-key", None, fresh.login(now())?)
        .await
        .expect(404, Some("not_found"));
    let token = made["token"].as_str().unwrap();
    let git_only = AgentKey::new("ed25519")?;
    post(
        &api,
        "/ssh-keys",
        Some(token),
        json!({"public_key": git_only.public, "label": "git"}),
    )
    .await
    .expect(200, None);
    let reply = post(&api, "/auth/ssh-key", None, git_only.login(now())?).await;
    assert!(
        reply.message().contains(&git_only.fingerprint),
        "{}",
        reply.body
    );
    reply.expect(404, Some("not_found"));
    let message = format!("svc-login\n{}\n{}\n", key.fingerprint, now());
    let wrong_namespace = json!({"public_key": key.public, "timestamp": now(), "signature": key.sign("svc-register", &message)?});
    post(&api, "/auth/ssh-key", None, wrong_namespace)
        .await
        .expect(400, Some("bad_request"));
    let mut with_username = key.login(now())?;
    with_username["username"] = json!(taken);
    post(&api, "/auth/ssh-key", None, with_username)
        .await
        .expect(422, Some("validation_failed"));
    post(&api, "/auth/ssh-key", None, key.login(now() - 301)?)
        .await
        .expect(400, Some("bad_request"));
    Ok(())
}

/// Registers from `source` through a real socket; returns the status, the Retry-After header and the body.
async fn register_from(
    url: &str,
    source: IpAddr,
    body: &Value,
) -> Result<(u16, Option<u64>, Value)> {
    let client = reqwest::Client::builder().local_address(source).build()?;
    let res = client
        .post(format!("{url}/registrations"))
        .json(body)
        .send()
        .await?;
    let status = res.status().as_u16();
    let retry = res
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok()?.parse().ok());
    Ok((status, retry, res.json().await?))
}

#[tokio::test]
async fn hourly_budgets_are_one_for_every_replica_and_outlive_a_restart() -> Result<()> {
    // Two API processes on one platform database, with the default limits: 5 registrations an hour per source.
    let api = TestApi::start().await?;
    let (a, b) = (api.state.clone(), api.replica_state().await?);
    let source: IpAddr = "2001:db8:7::1".parse()?;
    for (i, state) in [&a, &b, &a, &b, &a].into_iter().enumerate() {
        assert_eq!(state.spend_registration(source).await?, Ok(()), "spend {i}");
    }
    // Spent on either replica, and for the rest of the source's /48; the next fits an hour / 5 later.
    for state in [&a, &b] {
        let wait = state.spend_registration(source).await?.unwrap_err();
        assert!(
            wait > Duration::from_secs(700) && wait <= Duration::from_secs(720),
            "{wait:?}"
        );
    }
    let neighbour: IpAddr = "2001:db8:7:ffff::9".parse()?;
    assert!(b.spend_registration(neighbour).await?.is_err());
    assert_eq!(a.spend_registration("192.0.2.7".parse()?).await?, Ok(()));
    // A replica started afterwards (a restart) finds the budget as spent.
    let restarted = api.replica_state().await?;
    assert!(restarted.spend_registration(source).await?.is_err());

    // Twenty spends at once from both replicas on a fresh budget: exactly five get through.
    let address = "racing@example.test";
    let spends = (0..20).map(|i| {
        let state = if i % 2 == 0 { a.clone() } else { b.clone() };
        async move { state.spend_mail_to(address).await }
    });
    let spent = futures::future::try_join_all(spends).await?;
    assert_eq!(spent.iter().filter(|s| s.is_ok()).count(), 5);
    assert_eq!(
        a.spend_login("SHA256:not-yet-seen").await?,
        Ok(()),
        "budgets are per kind"
    );

    // A bucket whose time has passed is full again and goes with the hourly sweep; the others stay.
    sqlx::query(
        "UPDATE rate_buckets SET tat = now() - interval '1 second' WHERE key = '192.0.2.7'",
    )
    .execute(api.state.db())
    .await?;
    let mut sweeper = slipway_core::platform::sweep::Sweeper::new(
        api.state.db().clone(),
        api.state.cache().clone(),
    );
    assert_eq!(
        sweeper.sweep(Duration::from_secs(3600)).await?.rate_buckets,
        1
    );
    let left: Vec<String> = sqlx::query_scalar("SELECT key FROM rate_buckets ORDER BY key")
        .fetch_all(api.state.db())
        .await?;
    assert_eq!(
        left,
        ["2001:db8:7::", "SHA256:not-yet-seen", "racing@example.test"]
    );
    Ok(())
}

#[tokio::test]
async fn registration_has_a_budget_per_source_address_and_one_for_the_platform_and_can_be_closed()
-> Result<()> {
    let api = api_with(RegistrationLimits {
        open: true,
        per_source_per_hour: 2,
        global_per_hour: 3,
    })
    .await?;
    let url = api.serve().await?;
    let register = async |source: &str| -> Result<(u16, Option<u64>, Value)> {
        let key = AgentKey::new("ed25519")?;
        let name = agent_name();
        api.forget_namespace_later(&format!("slipway-user-{name}"));
        register_from(
            &url,
            source.parse()?,
            &key.registration(Some(&name), now())?,
        )
        .await
    };
    assert_eq!(register("127.0.0.1").await?.0, 200);
    assert_eq!(register("127.0.0.1").await?.0, 200);
    let (status, retry, body) = register("127.0.0.1").await?;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (429, Some("too_many_requests")),
        "{body}"
    );
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("this address"),
        "{body}"
    );
    assert!(retry.is_some_and(|s| s > 60), "Retry-After: {retry:?}");
    // Another address has its own budget, until the platform's is spent.
    assert_eq!(register("127.0.0.2").await?.0, 200);
    let (status, retry, body) = register("127.0.0.3").await?;
    assert_eq!(status, 429, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("platform"),
        "{body}"
    );
    assert!(retry.is_some_and(|s| s > 60), "Retry-After: {retry:?}");

    let closed = api_with(RegistrationLimits {
        open: false,
        ..RegistrationLimits::default()
    })
    .await?;
    let key = AgentKey::new("ed25519")?;
    post(
        &closed,
        "/registrations",
        None,
        key.registration(None, now())?,
    )
    .await
    .expect(503, Some("service_unavailable"));
    Ok(())
}

#[tokio::test]
async fn an_account_holds_at_most_twenty_tokens_from_ssh_login() -> Result<()> {
    let api = api().await?;
    let (key, made) = register(&api).await?;
    let start = now();
    let mut tokens = Vec::new();
    // Each login signs its own time (Ed25519 signatures of one message are equal, and a used one is refused).
    for i in 0..21 {
        let renewal = post(&api, "/auth/ssh-key", None, key.login(start - i)?)
            .await
            .expect(200, None);
        tokens.push(renewal["token"].as_str().unwrap().to_owned());
    }
    get(&api, "/apps", &tokens[0])
        .await
        .expect(401, Some("token_revoked"));
    for token in &tokens[1..] {
        get(&api, "/apps", token).await.expect(200, None);
    }
    get(&api, "/apps", made["token"].as_str().unwrap())
        .await
        .expect(200, None);

    // Logins at the same moment do not get past the cap either: each counts what the others committed.
    let mut bodies = Vec::new();
    for i in 21..31 {
        bodies.push(key.login(start - i)?);
    }
    let replies = futures::future::join_all(
        bodies
            .into_iter()
            .map(|body| post(&api, "/auth/ssh-key", None, body)),
    )
    .await;
    assert!(replies.iter().all(|r| r.status == 200), "{replies:?}");
    let live: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM tokens WHERE user_id = $1::uuid AND origin = 'ssh_login' AND revoked_at IS NULL",
    )
    .bind(made["user_id"].as_str().unwrap())
    .fetch_one(api.state.db())
    .await?;
    assert_eq!(live, 20);
    Ok(())
}

/// An API that mails codes through the SMTP server of `hack/smtp.sh`; its Maildir.
async fn api_with_mail() -> Result<(TestApi, std::path::PathBuf)> {
    let mut api = api().await?;
    // GET /me/usage measures the account's databases on the data server.
    support::postgres::attach(&mut api)?;
    let maildir = attach_mailer(&mut api)?;
    Ok((api, maildir))
}

/// A Deployment shaped as the operator makes one for a running app of `plan` in `namespace`.
fn running_app(namespace: &str, plan: &str) -> Deployment {
    let plan = slipway_crds::plans::Plan::by_tier(plan).unwrap();
    serde_json::from_value(json!({
        "metadata": {"name": "hello-prod-run", "namespace": namespace, "labels": {
            "app.kubernetes.io/managed-by": "slipway", "app.kubernetes.io/component": "run"}},
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": {"app": "hello"}},
            "template": {
                "metadata": {"labels": {"app": "hello"}},
                "spec": {
                    "containers": [{"name": "app", "image": "registry.invalid/hello:1",
                        "resources": slipway_controllers::workload::app_resources(plan, 100)}],
                    "volumes": [slipway_controllers::workload::tmp_volume(plan)],
                }
            }
        }
    }))
    .unwrap()
}

#[tokio::test]
async fn a_mailed_code_verifies_the_address_moves_the_account_to_basic_and_resizes_its_running_app()
-> Result<()> {
    let (api, maildir) = api_with_mail().await?;
    let (key, made) = register(&api).await?;
    let token = made["token"].as_str().unwrap();
    let username = made["username"].as_str().unwrap();
    let namespace = format!("slipway-user-{username}");
    post(&api, "/apps", Some(token), json!({"name": "hello"}))
        .await
        .expect(200, None);
    let deployments: Api<Deployment> = Api::namespaced(api.kube.clone(), &namespace);
    deployments
        .create(&Default::default(), &running_app(&namespace, "starter"))
        .await?;
    let _operator = api.start_operator_without_node(&namespace).await?;

    // A minted token has no email:bind: it may not ask for a code, nor add an api_login key yet.
    let minted = post(&api, "/tokens", Some(token), json!({}))
        .await
        .expect(200, None)["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let address = format!("{username}@example.test");
    post(
        &api,
        "/me/email-verifications",
        Some(&minted),
        json!({"email": address}),
    )
    .await
    .expect(403, Some("scope_denied"));
    let second_key = AgentKey::new("ed25519")?;
    post(
        &api,
        "/ssh-keys",
        Some(&minted),
        json!({"public_key": second_key.public, "label": "ci", "api_login": true}),
    )
    .await
    .expect(409, Some("conflict"));
    post(
        &api,
        "/me/email-verifications",
        Some(token),
        json!({"email": "not an address"}),
    )
    .await
    .expect(400, Some("bad_request"));

    let sent = post(
        &api,
        "/me/email-verifications",
        Some(token),
        json!({"email": address.to_uppercase()}),
    )
    .await
    .expect(200, None);
    assert_eq!(sent["status"], "sent");
    let expires: chrono::DateTime<chrono::Utc> = sent["expires_at"].as_str().unwrap().parse()?;
    let minutes = (expires - chrono::Utc::now()).num_seconds();
    assert!(
        (14 * 60..=15 * 60).contains(&minutes),
        "15 minutes: {minutes} s"
    );
    let code = code_mailed_to(&maildir, &address)?;
    assert_eq!(code.len(), 8);
    assert!(
        code.bytes()
            .all(|b| b"abcdefghjkmnpqrstuvwxyz23456789".contains(&b)),
        "{code}"
    );
    let stored: Vec<u8> =
        sqlx::query_scalar("SELECT code_hash FROM email_challenges WHERE email = $1")
            .bind(&address)
            .fetch_one(api.state.db())
            .await?;
    assert_ne!(stored, code.as_bytes(), "only a keyed hash is stored");
    let again = post(
        &api,
        "/me/email-verifications",
        Some(token),
        json!({"email": address}),
    )
    .await;
    assert!(again.headers.contains_key("retry-after"));
    again.expect(429, Some("too_many_requests"));
    assert_eq!(mails_to(&maildir, &address)?, 1);

    let wrong = if code == "aaaaaaaa" {
        "bbbbbbbb"
    } else {
        "aaaaaaaa"
    };
    post(
        &api,
        "/me/email-verifications/complete",
        Some(token),
        json!({"code": wrong}),
    )
    .await
    .expect(400, Some("bad_request"));
    let verified = post(
        &api,
        "/me/email-verifications/complete",
        Some(token),
        json!({"code": code}),
    )
    .await
    .expect(200, None);
    assert_eq!(
        verified,
        json!({"status": "verified", "plan": "basic", "apply_queued": true})
    );
    let usage = get(&api, "/me/usage", token).await.expect(200, None);
    assert_eq!(
        (usage["plan"].as_str(), usage["storage_limit_mb"].as_i64()),
        (Some("basic"), Some(1024))
    );
    // The namespace's plan label follows the database in the background.
    let namespaces = Api::<Namespace>::all(api.kube.clone());
    slipway_testkit::wait_until(Duration::from_secs(60), || {
        let (namespaces, namespace) = (namespaces.clone(), namespace.clone());
        async move {
            let ns = namespaces.get(&namespace).await?;
            Ok(ns.metadata.labels.unwrap_or_default()["slipway.dev/plan"] == "basic")
        }
    })
    .await?;

    // The running app is resized to basic's limits by the operator, rolling over without a gap.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let d = deployments.get("hello-prod-run").await?;
        let spec = d.spec.unwrap();
        let resources = spec.template.spec.unwrap().containers[0]
            .resources
            .clone()
            .unwrap();
        let memory = resources.limits.unwrap()["memory"].0.clone();
        if memory == "256Mi" {
            assert_eq!(resources.requests.unwrap()["cpu"].0, "250m");
            assert_eq!(
                spec.strategy
                    .unwrap()
                    .rolling_update
                    .unwrap()
                    .max_unavailable,
                Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(0))
            );
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "still {memory} after a minute"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Verified: no second address, and an api_login key needs only the default scopes now.
    post(
        &api,
        "/me/email-verifications",
        Some(token),
        json!({"email": "other@example.test"}),
    )
    .await
    .expect(409, Some("conflict"));
    // The spec's body, {public_key, label, api_login}, is all an api_login key needs; the key then signs in.
    let add = |public_key: &str, proof: Value| {
        let mut body = proof;
        body["label"] = json!("ci");
        body["api_login"] = json!(true);
        body["public_key"] = json!(public_key);
        body
    };
    let added = post(
        &api,
        "/ssh-keys",
        Some(&minted),
        add(&second_key.public, json!({})),
    )
    .await
    .expect(200, None);
    assert_eq!(added["api_login"], true);
    let signed_in = post(&api, "/auth/ssh-key", None, second_key.login(now())?)
        .await
        .expect(200, None);
    assert_eq!(signed_in["username"], username);
    // A proof of possession may be added; when it is, it must hold: another key's signature, or half a proof, is
    // refused, and the key's own is taken.
    let third_key = AgentKey::new("ed25519")?;
    let mut not_its_holder = key.login(now() - 1)?;
    not_its_holder.as_object_mut().unwrap().remove("public_key");
    let reply = post(
        &api,
        "/ssh-keys",
        Some(&minted),
        add(&third_key.public, not_its_holder),
    )
    .await;
    assert!(reply.message().contains("another key"), "{}", reply.body);
    reply.expect(400, Some("bad_request"));
    let reply = post(
        &api,
        "/ssh-keys",
        Some(&minted),
        add(&third_key.public, json!({"timestamp": now()})),
    )
    .await;
    assert!(
        reply.message().contains("both or neither"),
        "{}",
        reply.body
    );
    reply.expect(400, Some("bad_request"));
    let mut proof = third_key.login(now() - 1)?;
    proof.as_object_mut().unwrap().remove("public_key");
    post(
        &api,
        "/ssh-keys",
        Some(&minted),
        add(&third_key.public, proof),
    )
    .await
    .expect(200, None);
    post(&api, "/auth/ssh-key", None, third_key.login(now())?)
        .await
        .expect(200, None);

    // Another account proving the same address is refused, and its challenge is gone.
    let (_, other) = register(&api).await?;
    let other_token = other["token"].as_str().unwrap();
    post(
        &api,
        "/me/email-verifications",
        Some(other_token),
        json!({"email": address}),
    )
    .await
    .expect(200, None);
    let code = code_mailed_to(&maildir, &address)?;
    let reply = post(
        &api,
        "/me/email-verifications/complete",
        Some(other_token),
        json!({"code": code}),
    )
    .await;
    assert!(
        reply.message().contains("another account"),
        "{}",
        reply.body
    );
    reply.expect(409, Some("conflict"));
    post(
        &api,
        "/me/email-verifications/complete",
        Some(other_token),
        json!({"code": code}),
    )
    .await
    .expect(410, Some("gone"));
    let plan: String = sqlx::query_scalar("SELECT plan FROM users WHERE id = $1::uuid")
        .bind(other["user_id"].as_str().unwrap())
        .fetch_one(api.state.db())
        .await?;
    assert_eq!(plan, "starter");
    drop(key);
    Ok(())
}

#[tokio::test]
async fn five_wrong_codes_lock_a_challenge_until_a_new_request_and_codes_expire() -> Result<()> {
    let (api, maildir) = api_with_mail().await?;
    let (_, made) = register(&api).await?;
    let token = made["token"].as_str().unwrap();
    let address = format!("{}@example.test", made["username"].as_str().unwrap());
    let complete = async |code: &str| {
        post(
            &api,
            "/me/email-verifications/complete",
            Some(token),
            json!({"code": code}),
        )
        .await
    };
    complete("abcdefgh").await.expect(410, Some("gone"));
    post(
        &api,
        "/me/email-verifications",
        Some(token),
        json!({"email": address}),
    )
    .await
    .expect(200, None);
    let first = code_mailed_to(&maildir, &address)?;
    let wrong = if first == "zzzzzzzz" {
        "yyyyyyyy"
    } else {
        "zzzzzzzz"
    };
    for left in (0..5).rev() {
        let reply = complete(wrong).await;
        assert!(
            reply.message().contains(&format!("{left} tries left")),
            "{}",
            reply.body
        );
        reply.expect(400, Some("bad_request"));
    }
    complete(&first)
        .await
        .expect(429, Some("too_many_requests"));

    // A new request after the 60 s spacing (the clock moved on: the challenge's send time is set back) replaces
    // the code and the count; the first code no longer works.
    let db = api.state.db();
    sqlx::query("UPDATE email_challenges SET sent_at = sent_at - interval '61 seconds' WHERE user_id = $1::uuid")
        .bind(made["user_id"].as_str().unwrap())
        .execute(db)
        .await?;
    post(
        &api,
        "/me/email-verifications",
        Some(token),
        json!({"email": address}),
    )
    .await
    .expect(200, None);
    let second = code_mailed_to(&maildir, &address)?;
    assert_eq!(mails_to(&maildir, &address)?, 2);
    if second != first {
        complete(&first).await.expect(400, Some("bad_request"));
    }

    // Past its 15 minutes the code is gone.
    sqlx::query("UPDATE email_challenges SET expires_at = now() - interval '1 second' WHERE user_id = $1::uuid")
        .bind(made["user_id"].as_str().unwrap())
        .execute(db)
        .await?;
    complete(&second).await.expect(410, Some("gone"));
    complete(&second).await.expect(410, Some("gone"));
    let plan: String = sqlx::query_scalar("SELECT plan FROM users WHERE id = $1::uuid")
        .bind(made["user_id"].as_str().unwrap())
        .fetch_one(db)
        .await?;
    assert_eq!(plan, "starter");
    Ok(())
}

#[tokio::test]
async fn a_deactivated_account_loses_its_keys_and_tokens_at_once() -> Result<()> {
    let api = api().await?;
    let (key, made) = register(&api).await?;
    let token = made["token"].as_str().unwrap();
    get(&api, "/apps", token).await.expect(200, None);
    // The admin CLI deactivates from a process of its own: the API hears of it from the database.
    assert!(
        slipway_store::db::registrations::deactivate(
            api.state.db(),
            made["username"].as_str().unwrap()
        )
        .await?
    );
    api.get_until("/apps", token, 401, Duration::from_secs(5))
        .await?
        .expect(401, Some("token_revoked"));
    post(&api, "/auth/ssh-key", None, key.login(now())?)
        .await
        .expect(404, Some("not_found"));
    let keys: i64 = sqlx::query_scalar("SELECT count(*) FROM ssh_keys WHERE user_id = $1::uuid")
        .bind(made["user_id"].as_str().unwrap())
        .fetch_one(api.state.db())
        .await?;
    assert_eq!(keys, 0);
    Ok(())
}

#[tokio::test]
async fn logins_are_budgeted_per_key_codes_per_address_and_a_refusing_relay_leaves_no_challenge()
-> Result<()> {
    // 60 SSH logins per key an hour; the 61st waits.
    let logins = api().await?;
    let (key, _) = register(&logins).await?;
    let start = now();
    for i in 0..60 {
        post(&logins, "/auth/ssh-key", None, key.login(start - i)?)
            .await
            .expect(200, None);
    }
    let over = post(&logins, "/auth/ssh-key", None, key.login(start - 60)?).await;
    assert!(
        over.headers.contains_key("retry-after"),
        "{:?}",
        over.headers
    );
    over.expect(429, Some("too_many_requests"));
    // Another key is not held up by it.
    let (other, _) = register(&logins).await?;
    post(&logins, "/auth/ssh-key", None, other.login(start)?)
        .await
        .expect(200, None);

    // Five codes to one address an hour, however far apart; the sixth is refused before anything is mailed.
    let (mailing, maildir) = api_with_mail().await?;
    let (_, made) = register(&mailing).await?;
    let token = made["token"].as_str().unwrap();
    let user = made["user_id"].as_str().unwrap();
    let address = format!("{}@example.test", made["username"].as_str().unwrap());
    let ask = || {
        post(
            &mailing,
            "/me/email-verifications",
            Some(token),
            json!({"email": address}),
        )
    };
    for _ in 0..5 {
        ask().await.expect(200, None);
        // The 60 s spacing between two requests of one account has passed.
        sqlx::query("UPDATE email_challenges SET sent_at = sent_at - interval '61 seconds' WHERE user_id = $1::uuid")
            .bind(user)
            .execute(mailing.state.db())
            .await?;
    }
    ask().await.expect(429, Some("too_many_requests"));
    assert_eq!(mails_to(&maildir, &address)?, 5);

    // A relay that refuses the mail: 503, and no challenge is left behind to block the next request.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = closed.local_addr()?.port();
    drop(closed);
    let mut refusing = api().await?;
    let mailer = Mailer::new(
        &format!("smtp://127.0.0.1:{port}"),
        "slipway <noreply@slipway.test>",
    )?;
    refusing.enable(|features| features.mailer = Some(mailer));
    let (_, made) = register(&refusing).await?;
    let refused = post(
        &refusing,
        "/me/email-verifications",
        made["token"].as_str(),
        json!({"email": "ada@example.test"}),
    )
    .await
    .expect(503, Some("service_unavailable"));
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("relay"),
        "{refused}"
    );
    let left: i64 =
        sqlx::query_scalar("SELECT count(*) FROM email_challenges WHERE user_id = $1::uuid")
            .bind(made["user_id"].as_str().unwrap())
            .fetch_one(refusing.state.db())
            .await?;
    assert_eq!(left, 0);
    Ok(())
}
