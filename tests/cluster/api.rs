//! The REST API core against real Postgres and the real apiserver: authentication, apps, channels, tokens,
//! credentials, plans and usage — every success and every error row the spec lists for those routes.

use crate::support;

use std::time::Duration;

use anyhow::Result;
use axum::body::Body;
use axum::http::{Method, Request};
use kube::Api;
use serde_json::{Value, json};
use slipway_crds::names::messages;
use slipway_crds::{App, Channel};
use support::{APP_DOMAIN, GIT_HOST, TestApi};

#[tokio::test]
async fn authentication_errors_follow_the_spec() -> Result<()> {
    let api = TestApi::start().await?;
    let alice = api.user("alice", "basic").await?;

    api.call(Method::GET, "/apps", None, None)
        .await
        .expect(401, Some("auth_required"));
    let basic = Request::get("/apps")
        .header("authorization", "Basic YTpi")
        .body(Body::empty())?;
    api.send(basic).await.expect(401, Some("auth_required"));
    api.call(Method::GET, "/apps", Some("svc_not-a-token"), None)
        .await
        .expect(401, Some("token_invalid"));
    let unknown = slipway_auth::token::generate();
    api.call(Method::GET, "/apps", Some(&unknown), None)
        .await
        .expect(401, Some("token_invalid"));

    let expired = api
        .token(
            alice.id,
            &slipway_auth::scopes::default_scopes(),
            false,
            Some(chrono::Utc::now() - chrono::Duration::seconds(1)),
        )
        .await?;
    api.call(Method::GET, "/apps", Some(&expired), None)
        .await
        .expect(401, Some("token_invalid"));

    let minted = api
        .post("/tokens", &alice, json!({"label": "ci"}))
        .await
        .expect(200, None);
    let minted_token = minted["token"].as_str().unwrap().to_owned();
    api.call(Method::GET, "/apps", Some(&minted_token), None)
        .await
        .expect(200, None);
    api.delete(
        &format!("/tokens/{}", minted["id"].as_str().unwrap()),
        &alice,
    )
    .await
    .expect(204, None);
    api.call(Method::GET, "/apps", Some(&minted_token), None)
        .await
        .expect(401, Some("token_revoked"));
    Ok(())
}

#[tokio::test]
async fn tokens_are_stored_only_as_hashes() -> Result<()> {
    let api = TestApi::start().await?;
    let alice = api.user("alice", "basic").await?;
    let stored: Vec<(Vec<u8>,)> = sqlx::query_as("SELECT token_hash FROM tokens")
        .fetch_all(api.state.db())
        .await?;
    assert!(!stored.is_empty());
    let plaintext = alice.token.as_bytes();
    for (hash,) in stored {
        assert_eq!(hash.len(), 32);
        assert!(!hash.windows(plaintext.len()).any(|w| w == plaintext));
    }
    let dump: (String,) = sqlx::query_as("SELECT string_agg(t::text, ' ') FROM tokens t")
        .fetch_one(api.state.db())
        .await?;
    assert!(
        !dump.0.contains(&alice.token),
        "no plaintext token in the tokens table"
    );
    Ok(())
}

#[tokio::test]
async fn creating_an_app_writes_the_app_its_prod_channel_and_an_empty_repository() -> Result<()> {
    let api = TestApi::start().await?;
    let alice = api.user("alice", "basic").await?;
    let app = api.create_app(&alice, "blog", "app").await;

    let id = app["id"].as_str().unwrap();
    assert!(uuid::Uuid::parse_str(id).is_ok());
    assert_eq!(app["name"], "blog");
    assert_eq!(app["template"], "app");
    assert_eq!(
        app["repo_url"],
        format!("https://{GIT_HOST}/{}/blog.git", alice.username)
    );
    assert!(
        app["created_at"].as_str().is_some_and(|t| t.ends_with('Z')),
        "{app}"
    );
    for toggle in [
        "external_db_access_enabled",
        "external_blob_access_enabled",
        "port_forwarding_enabled",
        "port_forwarding_available",
        "agent_protected_actions_effective",
    ] {
        assert_eq!(app[toggle], false, "{toggle}");
    }
    assert_eq!(app["agent_protected_actions_enabled"], Value::Null);
    assert_eq!(app["owner_username"], alice.username);
    assert_eq!(app["role"], "owner");
    let channels = app["channels"].as_array().unwrap();
    assert_eq!(channels.len(), 1);
    let prod = &channels[0];
    assert_eq!(prod["name"], "prod");
    assert_eq!(prod["git_ref_binding"], "branch:master");
    assert_eq!(prod["status"], "provisioning");
    assert_eq!(prod["current_sha"], Value::Null);
    assert_eq!(prod["pending_deploy"], Value::Null);
    assert_eq!(
        prod["hostname"],
        format!("blog-{}.{APP_DOMAIN}", alice.username)
    );

    // The resources: the App and its prod Channel (owned by the App) in the owner's namespace.
    let apps: Api<App> = Api::namespaced(api.kube.clone(), &alice.namespace);
    let resource = apps.get("blog").await?;
    assert_eq!(resource.metadata.uid.as_deref(), Some(id));
    assert_eq!(resource.spec.owner, alice.username);
    let channels: Api<Channel> = Api::namespaced(api.kube.clone(), &alice.namespace);
    let channel = channels.get("blog.prod").await?;
    assert_eq!(channel.metadata.uid.as_deref(), prod["id"].as_str());
    let owners = channel.metadata.owner_references.unwrap_or_default();
    assert_eq!(owners.len(), 1);
    assert_eq!(owners[0].uid, id);

    // The repository: bare, empty, default branch master.
    let repo = api.repos_dir.join(&alice.username).join("blog.git");
    let out = std::process::Command::new("git")
        .args(["--git-dir"])
        .arg(&repo)
        .args(["symbolic-ref", "HEAD"])
        .output()?;
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "refs/heads/master"
    );
    let out = std::process::Command::new("git")
        .args(["--git-dir"])
        .arg(&repo)
        .args(["rev-parse", "--is-bare-repository"])
        .output()?;
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "true");
    let refs = std::process::Command::new("git")
        .args(["--git-dir"])
        .arg(&repo)
        .args(["for-each-ref"])
        .output()?;
    assert!(refs.stdout.is_empty(), "a new repository is empty");

    // Reads agree with the create response.
    let listed = api.get("/apps", &alice).await.expect(200, None);
    assert_eq!(listed["apps"].as_array().unwrap().len(), 1);
    assert_eq!(listed["apps"][0], app);
    assert_eq!(
        api.get(&format!("/apps/{id}"), &alice)
            .await
            .expect(200, None),
        app
    );
    Ok(())
}

#[tokio::test]
async fn app_creation_errors() -> Result<()> {
    let api = TestApi::start().await?;
    let alice = api.user("alice", "basic").await?;
    let cases = [
        (json!({"name": "Blog"}), messages::APP_NAME),
        (json!({"name": "a".repeat(41)}), messages::APP_NAME),
        (json!({"name": "-blog"}), messages::APP_NAME),
        (json!({"name": "api-docs"}), messages::APP_NAME_RESERVED),
        (json!({"name": "www"}), messages::APP_NAME_RESERVED),
        (
            json!({"name": "blog", "template": "rails"}),
            "template must be one of static, app, docker",
        ),
        (json!({"template": "static"}), "missing field `name`"),
    ];
    for (body, message) in cases {
        let reply = api.post("/apps", &alice, body.clone()).await;
        assert!(
            reply.message().contains(message),
            "{body}: {:?}",
            reply.body
        );
        reply.expect(400, Some("bad_request"));
    }
    api.create_app(&alice, "blog", "static").await;
    let taken = api.post("/apps", &alice, json!({"name": "blog"})).await;
    assert_eq!(taken.message(), "an app named blog already exists");
    taken.expect(400, Some("bad_request"));

    // A token without repo:* may read but not create.
    let minted = api
        .post("/credentials", &alice, json!({"scopes": ["deploy:*"]}))
        .await
        .expect(200, None);
    let limited = support::User {
        token: minted["token"].as_str().unwrap().to_owned(),
        ..alice.clone()
    };
    let denied = api.post("/apps", &limited, json!({"name": "shop"})).await;
    assert!(denied.message().contains("repo:*"), "{:?}", denied.body);
    denied.expect(403, Some("scope_denied"));
    api.get("/apps", &limited).await.expect(200, None);

    // Nothing was left behind by the refused requests.
    let apps: Api<App> = Api::namespaced(api.kube.clone(), &alice.namespace);
    let names: Vec<String> = apps
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter_map(|a| a.metadata.name)
        .collect();
    assert_eq!(names, ["blog"]);
    Ok(())
}

#[tokio::test]
async fn deleting_an_app_leaves_nothing_behind() -> Result<()> {
    let api = TestApi::start().await?;
    let alice = api.user("alice", "basic").await?;
    let app = api.create_app(&alice, "blog", "static").await;
    let id = app["id"].as_str().unwrap();
    api.post(
        &format!("/apps/{id}/channels"),
        &alice,
        json!({"name": "next", "git_ref_binding": "branch:next"}),
    )
    .await
    .expect(200, None);

    let limited = api
        .post("/credentials", &alice, json!({"scopes": ["channel:*"]}))
        .await
        .expect(200, None);
    let limited = support::User {
        token: limited["token"].as_str().unwrap().to_owned(),
        ..alice.clone()
    };
    api.delete(&format!("/apps/{id}"), &limited)
        .await
        .expect(403, Some("scope_denied"));

    api.delete(&format!("/apps/{id}"), &alice)
        .await
        .expect(204, None);
    api.get(&format!("/apps/{id}"), &alice)
        .await
        .expect(404, Some("not_found"));
    api.delete(&format!("/apps/{id}"), &alice)
        .await
        .expect(404, Some("not_found"));
    assert!(
        !api.repos_dir
            .join(&alice.username)
            .join("blog.git")
            .exists(),
        "repository removed"
    );

    let apps: Api<App> = Api::namespaced(api.kube.clone(), &alice.namespace);
    let channels: Api<Channel> = Api::namespaced(api.kube.clone(), &alice.namespace);
    slipway_testkit::wait_until(Duration::from_secs(30), || {
        let (apps, channels) = (apps.clone(), channels.clone());
        async move {
            Ok(apps.list(&Default::default()).await?.items.is_empty()
                && channels.list(&Default::default()).await?.items.is_empty())
        }
    })
    .await?;
    // The name is free again, with a fresh, empty repository.
    api.create_app(&alice, "blog", "static").await;
    Ok(())
}

#[tokio::test]
async fn a_prod_channel_the_operator_wrote_first_is_the_apps_own() -> Result<()> {
    use slipway_crds::names::{ChannelName, GitRefBinding};
    let api = TestApi::start().await?;
    let alice = api.user("alice", "basic").await?;
    api.create_app(&alice, "blog", "static").await;
    api.create_app(&alice, "shop", "static").await;
    let apps: Api<App> = Api::namespaced(api.kube.clone(), &alice.namespace);
    let (blog, shop) = (apps.get("blog").await?, apps.get("shop").await?);
    let (prod, binding) = (ChannelName::prod(), GitRefBinding::prod());

    // The App controller writes an app's prod channel when it finds none, so the API's own write can meet it.
    let again = slipway_core::channels::create(&api.state, &blog, &prod, &binding).await?;
    assert_eq!(again.metadata.name.as_deref(), Some("blog.prod"));

    // A channel of that name that is not this app's is still refused.
    let mut stranger = shop.clone();
    stranger.metadata.name = Some("blog".into());
    let refused = slipway_core::channels::create(&api.state, &stranger, &prod, &binding).await;
    let refused = refused.expect_err("another app's channel is not this one's");
    assert_eq!(
        refused.to_string(),
        "app blog already has a channel named prod"
    );
    Ok(())
}

#[tokio::test]
async fn channels_follow_the_spec() -> Result<()> {
    let api = TestApi::start().await?;
    let alice = api.user("alice", "basic").await?;
    let app = api.create_app(&alice, "blog", "static").await;
    let id = app["id"].as_str().unwrap();
    let path = format!("/apps/{id}/channels");

    let next = api
        .post(
            &path,
            &alice,
            json!({"name": "next", "git_ref_binding": "branch:next"}),
        )
        .await
        .expect(200, None);
    assert_eq!(next["name"], "next");
    assert_eq!(
        next["hostname"],
        format!("next-blog-{}.{APP_DOMAIN}", alice.username)
    );
    assert_eq!(next["status"], "provisioning");
    assert_eq!(next["current_sha"], Value::Null);
    assert_eq!(next["git_ref_binding"], "branch:next");

    let list = api.get(&path, &alice).await.expect(200, None);
    let names: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["prod", "next"], "a bare array, prod first");
    let next_id = next["id"].as_str().unwrap();
    assert_eq!(
        api.get(&format!("{path}/{next_id}"), &alice)
            .await
            .expect(200, None),
        next
    );

    let cases = [
        (
            json!({"name": "Next", "git_ref_binding": "branch:x"}),
            messages::CHANNEL_NAME,
        ),
        (
            json!({"name": "prod", "git_ref_binding": "branch:x"}),
            "prod is reserved",
        ),
        (
            json!({"name": "all", "git_ref_binding": "branch:*"}),
            messages::BINDING_WILDCARD,
        ),
        (
            json!({"name": "dev", "git_ref_binding": "dev"}),
            messages::BINDING,
        ),
        (
            json!({"name": "dev", "git_ref_binding": "branch:a..b"}),
            messages::BINDING,
        ),
        (
            json!({"name": "again", "git_ref_binding": "branch:next"}),
            "already follows branch:next",
        ),
        (
            json!({"name": "next", "git_ref_binding": "branch:other"}),
            "already has a channel named next",
        ),
        (json!({"name": "dev"}), "missing field `git_ref_binding`"),
    ];
    for (body, message) in cases {
        let reply = api.post(&path, &alice, body.clone()).await;
        assert!(
            reply.message().contains(message),
            "{body}: {:?}",
            reply.body
        );
        reply.expect(400, Some("bad_request"));
    }

    // <channel>-<app>-<owner> must fit in one DNS label.
    let long_app = api
        .create_app(&alice, "a-rather-long-app-name", "static")
        .await;
    let long_path = format!("/apps/{}/channels", long_app["id"].as_str().unwrap());
    let reply = api
        .post(
            &long_path,
            &alice,
            json!({"name": "c".repeat(40), "git_ref_binding": "branch:long"}),
        )
        .await;
    assert_eq!(reply.message(), messages::HOST_LABEL_TOO_LONG);
    reply.expect(400, Some("bad_request"));

    let prod_id = app["channels"][0]["id"].as_str().unwrap();
    let reply = api.delete(&format!("{path}/{prod_id}"), &alice).await;
    assert!(reply.message().contains("prod channel cannot be deleted"));
    reply.expect(400, Some("bad_request"));

    let limited = api
        .post("/credentials", &alice, json!({"scopes": ["repo:*"]}))
        .await
        .expect(200, None);
    let limited = support::User {
        token: limited["token"].as_str().unwrap().to_owned(),
        ..alice.clone()
    };
    api.post(
        &path,
        &limited,
        json!({"name": "x", "git_ref_binding": "branch:x"}),
    )
    .await
    .expect(403, Some("scope_denied"));
    api.delete(&format!("{path}/{next_id}"), &limited)
        .await
        .expect(403, Some("scope_denied"));

    api.delete(&format!("{path}/{next_id}"), &alice)
        .await
        .expect(204, None);
    api.get(&format!("{path}/{next_id}"), &alice)
        .await
        .expect(404, Some("not_found"));
    api.get(&format!("{path}/{}", uuid::Uuid::new_v4()), &alice)
        .await
        .expect(404, Some("not_found"));
    api.get(&format!("/apps/{}/channels", uuid::Uuid::new_v4()), &alice)
        .await
        .expect(404, Some("not_found"));
    // The branch is free again.
    api.post(
        &path,
        &alice,
        json!({"name": "next2", "git_ref_binding": "branch:next"}),
    )
    .await
    .expect(200, None);
    Ok(())
}

#[tokio::test]
async fn the_plan_caps_channels_per_account() -> Result<()> {
    let api = TestApi::start().await?;
    let agent = api.user("agent", "starter").await?; // starter: 3 channels
    let blog = api.create_app(&agent, "blog", "static").await;
    let shop = api.create_app(&agent, "shop", "static").await;
    let path = format!("/apps/{}/channels", blog["id"].as_str().unwrap());
    api.post(
        &path,
        &agent,
        json!({"name": "next", "git_ref_binding": "branch:next"}),
    )
    .await
    .expect(200, None);
    let over = api
        .post(
            &path,
            &agent,
            json!({"name": "dev", "git_ref_binding": "branch:dev"}),
        )
        .await;
    assert!(
        over.message()
            .starts_with("the starter plan allows 3 channels per account"),
        "{:?}",
        over.body
    );
    over.expect(403, Some("plan_limit_exceeded"));
    // A new app needs a channel slot for its prod channel too.
    api.post("/apps", &agent, json!({"name": "wiki"}))
        .await
        .expect(403, Some("plan_limit_exceeded"));
    api.delete(&format!("/apps/{}", shop["id"].as_str().unwrap()), &agent)
        .await
        .expect(204, None);
    api.post(
        &path,
        &agent,
        json!({"name": "dev", "git_ref_binding": "branch:dev"}),
    )
    .await
    .expect(200, None);
    Ok(())
}

#[tokio::test]
async fn credentials_never_exceed_the_caller() -> Result<()> {
    let api = TestApi::start().await?;
    let alice = api.user("alice", "basic").await?;
    let all = api
        .post("/credentials", &alice, json!({}))
        .await
        .expect(200, None);
    let nine: Vec<&str> = slipway_auth::scopes::DEFAULT.to_vec();
    assert_eq!(all["scopes"], json!(nine));
    assert_eq!(all["username"], alice.username);
    let expires: chrono::DateTime<chrono::Utc> = all["expires_at"].as_str().unwrap().parse()?;
    let thirty_days = chrono::Utc::now() + chrono::Duration::seconds(2_592_000);
    assert!(
        (thirty_days - expires).num_seconds().abs() < 60,
        "30 days by default: {expires}"
    );
    assert!(slipway_auth::token::looks_like_token(
        all["token"].as_str().unwrap()
    ));

    // An empty body is fine too.
    api.call(Method::POST, "/credentials", Some(&alice.token), None)
        .await
        .expect(200, None);

    let subset = api
        .post(
            "/credentials",
            &alice,
            json!({"scopes": ["deploy:*", "repo:*"], "expires_in": 60}),
        )
        .await
        .expect(200, None);
    assert_eq!(subset["scopes"], json!(["repo:*", "deploy:*"]));
    let expires: chrono::DateTime<chrono::Utc> = subset["expires_at"].as_str().unwrap().parse()?;
    assert!(expires <= chrono::Utc::now() + chrono::Duration::seconds(61));

    // A credential minted from the subset cannot widen it, nor outlive it.
    let sub = support::User {
        token: subset["token"].as_str().unwrap().to_owned(),
        ..alice.clone()
    };
    api.post("/credentials", &sub, json!({"scopes": ["db:*"]}))
        .await
        .expect(403, Some("scope_denied"));
    let child = api
        .post("/credentials", &sub, json!({}))
        .await
        .expect(200, None);
    assert_eq!(child["scopes"], json!(["repo:*", "deploy:*"]));
    let child_expires: chrono::DateTime<chrono::Utc> =
        child["expires_at"].as_str().unwrap().parse()?;
    assert!(
        child_expires <= expires,
        "never a longer life than the caller"
    );
    api.post("/tokens", &sub, json!({}))
        .await
        .expect(403, Some("scope_denied"));

    for body in [
        json!({"scopes": ["email:bind"]}),
        json!({"scopes": ["root"]}),
        json!({"expires_in": 0}),
        json!({"expires_in": 2_592_001}),
        json!({"expires_in": "soon"}),
    ] {
        api.post("/credentials", &alice, body.clone())
            .await
            .expect(400, Some("bad_request"));
    }

    // POST /tokens: nine scopes, life no longer than the caller's.
    let tok = api.post("/tokens", &sub, json!({})).await;
    tok.expect(403, Some("scope_denied"));
    let tok = api
        .post("/tokens", &alice, json!({"label": "laptop"}))
        .await
        .expect(200, None);
    assert_eq!(tok["scopes"], json!(nine));
    assert_eq!(tok["label"], "laptop");
    let short = api
        .post("/credentials", &alice, json!({"expires_in": 120}))
        .await
        .expect(200, None);
    let short_user = support::User {
        token: short["token"].as_str().unwrap().to_owned(),
        ..alice.clone()
    };
    let from_short = api
        .post("/tokens", &short_user, json!({"expires_in": 86_400}))
        .await
        .expect(200, None);
    let a: chrono::DateTime<chrono::Utc> = from_short["expires_at"].as_str().unwrap().parse()?;
    let b: chrono::DateTime<chrono::Utc> = short["expires_at"].as_str().unwrap().parse()?;
    assert!(a <= b);

    // Another user's token cannot be revoked (and is not revealed to exist).
    let bob = api.user("bob", "basic").await?;
    api.delete(&format!("/tokens/{}", tok["id"].as_str().unwrap()), &bob)
        .await
        .expect(404, Some("not_found"));
    api.delete(&format!("/tokens/{}", uuid::Uuid::new_v4()), &alice)
        .await
        .expect(404, Some("not_found"));
    Ok(())
}

#[tokio::test]
async fn plans_are_public_and_usage_reports_the_plan() -> Result<()> {
    let mut api = TestApi::start().await?;
    crate::support::postgres::attach(&mut api)?;
    let plans = api
        .call(Method::GET, "/plans", None, None)
        .await
        .expect(200, None);
    let plans = plans["plans"].as_array().unwrap();
    assert_eq!(
        plans[0],
        json!({"tier": "starter", "rank": 0, "max_channels": 3, "cpu_soft_cores": 0.1, "cpu_burst": 2.0, "mem_limit_mb": 128,
               "storage_mb": 500, "blob_storage_bytes": 268435456, "image_size_bytes": 536870912,
               "snapshot_retention_days": 1, "deploy_snapshot_keep": 1, "port_forwarding": false,
               "agent_registration_only": true})
    );
    let ranks: Vec<u64> = plans.iter().map(|p| p["rank"].as_u64().unwrap()).collect();
    assert!(ranks.windows(2).all(|w| w[0] < w[1]), "ascending by rank");

    let alice = api.user("alice", "builder").await?;
    let mut usage = api.get("/me/usage", &alice).await.expect(200, None);
    // Beside the spec's four fields, the last 30 days of bandwidth (ARCHITECTURE.md, "Bandwidth").
    let days = usage
        .as_object_mut()
        .unwrap()
        .remove("bandwidth_days")
        .unwrap();
    assert_eq!(
        usage,
        json!({"plan": "builder", "storage_bytes": 0, "storage_limit_mb": 5120, "bandwidth_month_bytes": 0})
    );
    let days = days.as_array().unwrap();
    assert_eq!(days.len(), 30);
    assert!(days.iter().all(|d| d["bytes"] == 0), "{days:?}");
    api.call(Method::GET, "/me/usage", None, None)
        .await
        .expect(401, Some("auth_required"));
    Ok(())
}

#[tokio::test]
async fn protected_actions_need_agent_access() -> Result<()> {
    let api = TestApi::start().await?;
    let alice = api.user("alice", "builder").await?;
    let app = api.create_app(&alice, "blog", "app").await;
    let path = format!("/apps/{}", app["id"].as_str().unwrap());
    let agent_token = api
        .token(
            alice.id,
            &slipway_auth::scopes::default_scopes(),
            true,
            None,
        )
        .await?;
    let agent = support::User {
        token: agent_token,
        ..alice.clone()
    };
    let patch = |user: &support::User, body: Value| {
        let token = user.token.clone();
        let (api, path) = (&api, &path);
        async move {
            api.call(Method::PATCH, path, Some(&token), Some(body))
                .await
        }
    };

    let denied = patch(&agent, json!({"port_forwarding_enabled": true})).await;
    assert!(
        denied.message().contains("protected action"),
        "{:?}",
        denied.body
    );
    denied.expect(403, Some("protected_action"));
    patch(&agent, json!({"external_db_access_enabled": true}))
        .await
        .expect(403, Some("protected_action"));
    patch(&agent, json!({"agent_protected_actions_enabled": true}))
        .await
        .expect(403, Some("protected_action"));

    let on = patch(&alice, json!({"agent_protected_actions_enabled": true}))
        .await
        .expect(200, None);
    assert_eq!(on["agent_protected_actions_enabled"], true);
    assert_eq!(on["agent_protected_actions_effective"], true);
    let toggled = patch(
        &agent,
        json!({"port_forwarding_enabled": true, "external_blob_access_enabled": true}),
    )
    .await
    .expect(200, None);
    assert_eq!(toggled["port_forwarding_enabled"], true);
    assert_eq!(toggled["external_blob_access_enabled"], true);

    let inherit = patch(&alice, json!({"agent_protected_actions_enabled": null}))
        .await
        .expect(200, None);
    assert_eq!(inherit["agent_protected_actions_enabled"], Value::Null);
    assert_eq!(
        inherit["agent_protected_actions_effective"], false,
        "the account default is off"
    );
    patch(&agent, json!({"port_forwarding_enabled": false}))
        .await
        .expect(403, Some("protected_action"));

    // Port forwarding needs a plan that has it.
    let bob = api.user("bob", "basic").await?;
    let bobs = api.create_app(&bob, "shop", "app").await;
    let reply = api
        .call(
            Method::PATCH,
            &format!("/apps/{}", bobs["id"].as_str().unwrap()),
            Some(&bob.token),
            Some(json!({"port_forwarding_enabled": true})),
        )
        .await;
    reply.expect(403, Some("plan_limit_exceeded"));
    Ok(())
}

#[tokio::test]
async fn bad_input_answers_in_the_envelope() -> Result<()> {
    let api = TestApi::start().await?;
    let alice = api.user("alice", "basic").await?;
    let raw = |content_type: Option<&str>, body: Vec<u8>| {
        let mut req =
            Request::post("/apps").header("authorization", format!("Bearer {}", alice.token));
        if let Some(ct) = content_type {
            req = req.header("content-type", ct);
        }
        req.body(Body::from(body)).unwrap()
    };
    api.send(raw(Some("application/json"), b"{not json".to_vec()))
        .await
        .expect(400, Some("bad_request"));
    api.send(raw(Some("text/plain"), br#"{"name":"blog"}"#.to_vec()))
        .await
        .expect(400, Some("bad_request"));
    api.send(raw(None, br#"{"name":"blog"}"#.to_vec()))
        .await
        .expect(400, Some("bad_request"));
    api.send(raw(Some("application/json"), br#"{"name": 42}"#.to_vec()))
        .await
        .expect(400, Some("bad_request"));
    api.send(raw(Some("application/json"), br#"[1,2]"#.to_vec()))
        .await
        .expect(400, Some("bad_request"));
    let huge = format!(
        r#"{{"name":"blog","pad":"{}"}}"#,
        "x".repeat(2 * 1024 * 1024)
    );
    api.send(raw(Some("application/json"), huge.into_bytes()))
        .await
        .expect(400, Some("bad_request"));
    // Each answer names its request, in its header and in its error body; the ids are the server's own.
    let nowhere = api.get("/nowhere", &alice).await;
    let id = nowhere.headers["x-request-id"].to_str()?.to_owned();
    assert_eq!(nowhere.body["error"]["request_id"], id.as_str());
    nowhere.expect(404, Some("not_found"));
    let again = api
        .send(
            Request::get("/nowhere")
                .header("authorization", format!("Bearer {}", alice.token))
                .header("x-request-id", id.as_str())
                .body(Body::empty())?,
        )
        .await;
    assert_ne!(again.body["error"]["request_id"], id.as_str());
    api.get("/apps/not-a-uuid", &alice)
        .await
        .expect(404, Some("not_found"));
    let put = api
        .call(Method::PUT, "/apps", Some(&alice.token), None)
        .await;
    assert_eq!(put.status, 405);
    assert!(put.body["error"]["code"].is_string());
    // None of it created anything.
    assert_eq!(
        api.get("/apps", &alice).await.expect(200, None),
        json!({"apps": []})
    );
    Ok(())
}

#[tokio::test]
async fn the_openapi_document_lists_every_route() -> Result<()> {
    let api = TestApi::start().await?;
    let doc = api
        .call(Method::GET, "/openapi.json", None, None)
        .await
        .expect(200, None);
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"));
    let expected = [
        ("get", "/apps"),
        ("post", "/apps"),
        ("get", "/apps/{app_id}"),
        ("delete", "/apps/{app_id}"),
        ("get", "/apps/{app_id}/channels"),
        ("post", "/apps/{app_id}/channels"),
        ("get", "/apps/{app_id}/channels/{channel_id}"),
        ("delete", "/apps/{app_id}/channels/{channel_id}"),
        ("post", "/tokens"),
        ("get", "/tokens"),
        ("delete", "/tokens/{token_id}"),
        ("post", "/credentials"),
        ("get", "/plans"),
        ("get", "/me/usage"),
        ("get", "/apps/{app_id}/tree"),
        ("get", "/apps/{app_id}/blob"),
        ("post", "/apps/{app_id}/changeset"),
        ("get", "/apps/{app_id}/channels/{channel_id}/code/download"),
        ("post", "/apps/{app_id}/channels/{channel_id}/deploy"),
        ("post", "/apps/{app_id}/channels/{channel_id}/rewind"),
        ("get", "/apps/{app_id}/channels/{channel_id}/logs"),
        ("get", "/apps/{app_id}/channels/{channel_id}/deploys"),
        ("get", "/apps/{app_id}/channels/{channel_id}/blob"),
        (
            "post",
            "/apps/{app_id}/channels/{channel_id}/blob/credentials",
        ),
        ("get", "/me/blob/storage"),
        ("post", "/ssh-keys"),
        ("get", "/ssh-keys"),
        ("delete", "/ssh-keys/{key_id}"),
        ("get", "/apps/{app_id}/members"),
        ("put", "/apps/{app_id}/members/{username}"),
        ("delete", "/apps/{app_id}/members/{username}"),
        ("get", "/apps/{app_id}/github"),
        ("post", "/apps/{app_id}/github/connect"),
        ("post", "/apps/{app_id}/github/sync"),
        ("delete", "/apps/{app_id}/github"),
        ("post", "/registrations"),
        ("post", "/auth/ssh-key"),
        ("post", "/me/email-verifications"),
        ("post", "/me/email-verifications/complete"),
        ("get", "/api/user/stats"),
        ("post", "/apps/{app_id}/channels/{channel_id}/runtime/log"),
        ("post", "/mcp"),
        ("get", "/apps/{app_id}/activity"),
        ("get", "/apps/{app_id}/health"),
        ("get", "/apps/{app_id}/stats"),
        ("post", "/feedback"),
        ("get", "/feedback"),
        ("post", "/apps/{app_id}/feedback"),
        ("get", "/apps/{app_id}/feedback"),
        ("post", "/apps/{app_id}/threads"),
        ("get", "/apps/{app_id}/threads"),
        ("post", "/apps/{app_id}/threads/{number}/notes"),
        ("get", "/apps/{app_id}/threads/{number}/notes"),
        (
            "put",
            "/apps/{app_id}/threads/{number}/notes/{note_id}/vote",
        ),
        ("post", "/apps/{app_id}/exports"),
        ("get", "/apps/{app_id}/exports/{export_id}"),
        ("get", "/apps/{app_id}/exports/{export_id}/download"),
    ];
    for (method, path) in expected {
        assert!(
            doc["paths"][path][method].is_object(),
            "{method} {path} is missing from /openapi.json"
        );
        // Every route behind a bearer token says it can answer 429 with Retry-After; public ones do not, except
        // registration and SSH login, whose budgets are per source address, per key and for the platform.
        let budget = &doc["paths"][path][method]["responses"]["429"];
        if path == "/plans" {
            assert!(budget.is_null(), "{method} {path}");
        } else if path == "/registrations" || path == "/auth/ssh-key" {
            assert!(budget.is_object(), "{method} {path}");
        } else {
            assert!(
                budget["headers"]["Retry-After"].is_object(),
                "{method} {path} does not document 429"
            );
        }
    }
    // The MCP server's OAuth routes are public (no bearer, so no token budget to spend).
    for (method, path) in [
        ("get", "/.well-known/oauth-protected-resource"),
        ("get", "/.well-known/oauth-protected-resource/mcp"),
        ("get", "/.well-known/oauth-authorization-server"),
        ("post", "/oauth/register"),
        ("get", "/oauth/authorize"),
        ("get", "/oauth/callback"),
        ("post", "/oauth/consent"),
        ("post", "/oauth/token"),
    ] {
        let operation = &doc["paths"][path][method];
        assert!(
            operation.is_object(),
            "{method} {path} is missing from /openapi.json"
        );
        assert!(operation["security"].is_null(), "{method} {path} is public");
    }
    // The rewind route (ours: the spec shows none) documents its answer and each of its refusals.
    let rewind = &doc["paths"]["/apps/{app_id}/channels/{channel_id}/rewind"]["post"]["responses"];
    for status in ["202", "401", "403", "404", "409"] {
        assert!(
            rewind[status].is_object(),
            "rewind lacks {status}: {rewind}"
        );
    }
    let triggered = &doc["components"]["schemas"]["RewindTriggered"]["properties"];
    for field in ["deploy_id", "channel_id", "status", "rewound_from", "sha"] {
        assert!(
            triggered[field].is_object(),
            "RewindTriggered lacks {field}"
        );
    }
    let log = &doc["components"]["schemas"]["DeployLog"]["properties"];
    assert!(
        log["rewound_from"].is_object(),
        "DeployLog lacks rewound_from"
    );
    // End-user sign-in's routes, which the edge serves: on channel hosts and on the auth host, no bearer.
    for (path, server) in [
        ("/svc-auth/login", "https://{host}"),
        ("/svc-auth/logout", "https://{host}"),
        ("/svc-auth/whoami", "https://{host}"),
        ("/svc-auth/callback", "https://{host}"),
        ("/svc-auth/authorize", "{auth_url}"),
        ("/svc-auth/jwks", "{auth_url}"),
        ("/.well-known/openid-configuration", "{auth_url}"),
    ] {
        let item = &doc["paths"][path];
        assert!(item["get"].is_object(), "GET {path} is missing: {item}");
        assert_eq!(item["servers"][0]["url"], server, "{path}");
        assert!(item["get"]["security"].is_null(), "{path} takes no bearer");
    }
    Ok(())
}

#[tokio::test]
async fn a_username_cannot_squat_another_accounts_hostnames() -> Result<()> {
    // User "b-c" with app "a" would take a-b-c, the hostname of user c's future app "a-b": refused everywhere a
    // username enters (here the parse every path uses, and the database's own rule).
    let api = TestApi::start().await?;
    assert_eq!(
        "b-c".parse::<slipway_crds::names::Username>(),
        Err(slipway_crds::names::InvalidName(messages::USERNAME))
    );
    let raw = sqlx::query("INSERT INTO users (id, username, plan) VALUES ($1, 'b-c', 'basic')")
        .bind(uuid::Uuid::new_v4())
        .execute(api.state.db())
        .await;
    assert!(
        raw.is_err_and(|e| e.to_string().contains("users_username_format")),
        "the database refuses a hyphenated username too"
    );
    // Owner c's app a-b gets a-b-c, which no other account can form.
    let c = api.user("c", "basic").await?;
    let app = api.create_app(&c, "a-b", "static").await;
    assert_eq!(
        app["channels"][0]["hostname"],
        format!("a-b-{}.{APP_DOMAIN}", c.username)
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn parallel_creates_never_beat_the_plan_cap() -> Result<()> {
    let api = std::sync::Arc::new(TestApi::start().await?);
    let agent = api.user("agent", "starter").await?; // starter: 3 channels
    let fire = |requests: Vec<(String, Value)>| {
        let (api, agent) = (api.clone(), agent.clone());
        async move {
            let racers: Vec<_> = requests
                .into_iter()
                .map(|(path, body)| {
                    let (api, agent) = (api.clone(), agent.clone());
                    tokio::spawn(async move { api.post(&path, &agent, body).await })
                })
                .collect();
            let mut replies = Vec::new();
            for racer in racers {
                replies.push(racer.await.expect("racer"));
            }
            replies
        }
    };
    let apps: Vec<_> = (0..8)
        .map(|i| ("/apps".to_owned(), json!({"name": format!("app{i}")})))
        .collect();
    let replies = fire(apps).await;
    let won: Vec<&support::Reply> = replies.iter().filter(|r| r.status == 200).collect();
    assert_eq!(won.len(), 3, "exactly the cap wins: {replies:?}");
    for lost in replies.iter().filter(|r| r.status != 200) {
        assert_eq!(lost.status, 403, "{:?}", lost.body);
        assert_eq!(lost.body["error"]["code"], "plan_limit_exceeded");
    }
    let listed = api.get("/apps", &agent).await.expect(200, None);
    assert_eq!(listed["apps"].as_array().unwrap().len(), 3);
    let channels: Api<Channel> = Api::namespaced(api.kube.clone(), &agent.namespace);
    assert_eq!(channels.list(&Default::default()).await?.items.len(), 3);

    // Deleting an app frees one slot: of six channels raced onto another app, one lands.
    let first = won[0].body["id"].as_str().unwrap().to_owned();
    let second = won[1].body["id"].as_str().unwrap().to_owned();
    api.delete(&format!("/apps/{first}"), &agent)
        .await
        .expect(204, None);
    let channels_of_second: Vec<_> = (0..6)
        .map(|i| {
            (
                format!("/apps/{second}/channels"),
                json!({"name": format!("c{i}"), "git_ref_binding": format!("branch:c{i}")}),
            )
        })
        .collect();
    let replies = fire(channels_of_second).await;
    assert_eq!(
        replies.iter().filter(|r| r.status == 200).count(),
        1,
        "{replies:?}"
    );
    assert!(
        replies
            .iter()
            .filter(|r| r.status != 200)
            .all(|r| r.status == 403 && r.body["error"]["code"] == "plan_limit_exceeded"),
        "{replies:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_of_two_parallel_creates_of_a_hostname_wins() -> Result<()> {
    // App "a-<x>" (prod: a-<x>-<owner>) and channel "a" of app "<x>" (a-<x>-<owner>) want the same hostname.
    let api = std::sync::Arc::new(TestApi::start().await?);
    let owner = api.user("owner", "indie").await?;
    for round in 0..4 {
        let base = format!("b{round}");
        let app = api.create_app(&owner, &base, "static").await;
        let host = format!("a-{base}-{}", owner.username);
        let as_app = tokio::spawn({
            let (api, owner, name) = (api.clone(), owner.clone(), format!("a-{base}"));
            async move { api.post("/apps", &owner, json!({"name": name})).await }
        });
        let as_channel = tokio::spawn({
            let (api, owner) = (api.clone(), owner.clone());
            let path = format!("/apps/{}/channels", app["id"].as_str().unwrap());
            async move {
                api.post(
                    &path,
                    &owner,
                    json!({"name": "a", "git_ref_binding": "branch:a"}),
                )
                .await
            }
        });
        let replies = [as_app.await?, as_channel.await?];
        let winners = replies.iter().filter(|r| r.status == 200).count();
        assert_eq!(winners, 1, "round {round}: {replies:?}");
        let loser = replies.iter().find(|r| r.status != 200).unwrap();
        assert_eq!(loser.status, 400, "{:?}", loser.body);
        assert!(
            loser
                .message()
                .contains(&format!("hostname {host} is already used")),
            "{:?}",
            loser.body
        );
    }
    Ok(())
}

#[tokio::test]
async fn huge_lifetimes_answer_400_and_never_drop_the_connection() -> Result<()> {
    let api = TestApi::start().await?;
    let alice = api.user("alice", "basic").await?;
    // 9e12 s is past the last representable time: the old arithmetic panicked in the handler.
    for body in [
        json!({"expires_in": 9_000_000_000_000_i64}),
        json!({"expires_in": i64::MAX}),
        json!({"expires_in": slipway_rest::tokens::MAX_TOKEN_SECONDS + 1}),
    ] {
        let reply = api.post("/tokens", &alice, body.clone()).await;
        assert!(
            reply.message().contains("expires_in"),
            "{body}: {:?}",
            reply.body
        );
        reply.expect(400, Some("bad_request"));
        api.post("/credentials", &alice, body)
            .await
            .expect(400, Some("bad_request"));
    }
    let longest = api
        .post(
            "/tokens",
            &alice,
            json!({"expires_in": slipway_rest::tokens::MAX_TOKEN_SECONDS}),
        )
        .await
        .expect(200, None);
    let at: chrono::DateTime<chrono::Utc> = longest["expires_at"].as_str().unwrap().parse()?;
    assert!(at > chrono::Utc::now() + chrono::Duration::days(36_000));
    // And over a real socket the answer arrives, on a kept-alive connection that serves the next request too.
    let base = api.serve().await?;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Full<axum::body::Bytes>>();
    for _ in 0..2 {
        let req = Request::post(format!("{base}/tokens"))
            .header("authorization", format!("Bearer {}", alice.token))
            .header("content-type", "application/json")
            .body(http_body_util::Full::from(
                json!({"expires_in": 9_000_000_000_000_i64}).to_string(),
            ))?;
        assert_eq!(client.request(req).await?.status(), 400);
    }
    Ok(())
}

#[tokio::test]
async fn revoking_a_token_revokes_what_was_minted_from_it() -> Result<()> {
    let api = TestApi::start().await?;
    let alice = api.user("alice", "basic").await?;
    api.create_app(&alice, "site", "static").await;
    // A credential minted with `token`.
    let mint = |token: String| {
        let (api, user) = (
            &api,
            support::User {
                token,
                ..alice.clone()
            },
        );
        async move {
            let reply = api.post("/credentials", &user, json!({})).await;
            reply.expect(200, None)["token"]
                .as_str()
                .unwrap()
                .to_owned()
        }
    };
    // A chain of two mints: alice's token -> parent (POST /tokens) -> child -> grandchild (POST /credentials).
    let parent = api
        .post("/tokens", &alice, json!({"label": "laptop"}))
        .await
        .expect(200, None);
    let parent_token = parent["token"].as_str().unwrap().to_owned();
    let child = mint(parent_token.clone()).await;
    let grandchild = mint(child.clone()).await;
    let sibling = mint(alice.token.clone()).await;
    for token in [&parent_token, &child, &grandchild, &sibling] {
        api.call(Method::GET, "/apps", Some(token), None)
            .await
            .expect(200, None);
    }

    let revoke_parent = format!("/tokens/{}", parent["id"].as_str().unwrap());
    api.delete(&revoke_parent, &alice).await.expect(204, None);
    for token in [&parent_token, &child, &grandchild] {
        api.call(Method::GET, "/apps", Some(token), None)
            .await
            .expect(401, Some("token_revoked"));
        // Git over HTTP takes the same tokens as passwords.
        let refs = info_refs(&alice.username, token)?;
        assert_eq!(api.send(refs).await.status, 401);
    }
    // Tokens that did not come from the revoked one keep working.
    for token in [&alice.token, &sibling] {
        api.call(Method::GET, "/apps", Some(token), None)
            .await
            .expect(200, None);
    }
    // Revoking again is a 404 (nothing live), and the chain stays revoked.
    api.delete(&revoke_parent, &alice)
        .await
        .expect(404, Some("not_found"));
    Ok(())
}

/// `GET info/refs` of `owner`'s app `site` with `token` as git's password.
fn info_refs(owner: &str, token: &str) -> Result<Request<Body>> {
    Ok(Request::get(format!(
        "/{owner}/site.git/info/refs?service=git-upload-pack"
    ))
    .header("authorization", base64_basic(token))
    .body(Body::empty())?)
}

fn base64_basic(token: &str) -> String {
    use base64::Engine;
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("git:{token}"))
    )
}

#[tokio::test]
async fn a_token_past_its_budget_gets_429_with_retry_after() -> Result<()> {
    let limits = slipway_core::state::Limits {
        rate: slipway_auth::rate::Budget::from_flags(60, 3),
        ..Default::default()
    };
    let api = TestApi::start().await?.with_limits(limits);
    let alice = api.user("alice", "basic").await?;
    // Another token of the same account, which makes the app: budgets are per token.
    let other = api
        .token(
            alice.id,
            &slipway_auth::scopes::default_scopes(),
            false,
            None,
        )
        .await?;
    let with_other = support::User {
        token: other.clone(),
        ..alice.clone()
    };
    api.create_app(&with_other, "site", "static").await;
    for _ in 0..3 {
        api.get("/apps", &alice).await.expect(200, None);
    }
    let over = api.get("/apps", &alice).await;
    let retry_after: u64 = over
        .headers
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .expect("a Retry-After of whole seconds");
    assert!((1..=60).contains(&retry_after), "{retry_after}");
    over.expect(429, Some("too_many_requests"));
    // Git over HTTP spends the same budget, and says so in git's terms.
    let git = api.send(info_refs(&alice.username, &alice.token)?).await;
    assert_eq!(git.status, 429);
    assert!(git.headers.contains_key("retry-after"));
    // The other token is not held back.
    api.get("/apps", &with_other).await.expect(200, None);
    // After the wait it names, the spent token is served again.
    tokio::time::sleep(Duration::from_secs(retry_after)).await;
    api.get("/apps", &alice).await.expect(200, None);
    Ok(())
}

/// The cluster registry's token endpoint (the registry's own checks are in `tests/e2e_platform/isolation.rs`): absent
/// without a signing key; with one, a pull credential gets `pull` on its repository only, anything else 401, and a
/// malformed request 400.
#[tokio::test]
async fn the_registry_token_endpoint_grants_a_pull_credential_its_own_repository_only() -> Result<()>
{
    use slipway_internal::registry_token::{DEFAULT_SERVICE, RegistryTokens};
    let mut api = TestApi::start().await?;
    let get = |query: &str, credential: Option<(&str, &str)>| {
        let mut request = Request::get(format!("/registry/token?{query}"));
        if let Some((user, password)) = credential {
            let basic = base64::Engine::encode(
                &base64::engine::general_purpose::STANDARD,
                format!("{user}:{password}"),
            );
            request = request.header("authorization", format!("Basic {basic}"));
        }
        request.body(Body::empty()).unwrap()
    };
    api.send(get("scope=repository:a/web:pull", None))
        .await
        .expect(404, Some("not_found"));

    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?.serialize_pem();
    let tokens = RegistryTokens::from_pem(key.as_bytes(), "k", "slipway", DEFAULT_SERVICE)?;
    let password = tokens.pull_password("a/web");
    api.enable(|features| features.registry_tokens = Some(tokens));
    let own = Some(("a/web", password.as_str()));

    let granted = api
        .send(get(
            "service=slipway-registry&scope=repository:a/web:pull,push&scope=repository:b/web:pull",
            own,
        ))
        .await
        .expect(200, None);
    assert_eq!(granted["expires_in"], 300);
    assert_eq!(granted["token"], granted["access_token"]);
    let payload = granted["token"]
        .as_str()
        .unwrap()
        .split('.')
        .nth(1)
        .unwrap();
    let claims: Value = serde_json::from_slice(&base64::Engine::decode(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD,
        payload,
    )?)?;
    assert_eq!(
        claims["access"],
        json!([{"type": "repository", "name": "a/web", "actions": ["pull"]}])
    );
    assert_eq!(claims["aud"], "slipway-registry");

    api.send(get("scope=repository:a/web:pull", None))
        .await
        .expect(401, Some("auth_required"));
    api.send(get(
        "scope=repository:b/web:pull",
        Some(("b/web", &password)),
    ))
    .await
    .expect(401, Some("auth_required"));
    api.send(get("service=elsewhere&scope=repository:a/web:pull", own))
        .await
        .expect(400, Some("bad_request"));
    api.send(get("scope=nonsense", own))
        .await
        .expect(400, Some("bad_request"));

    // The OAuth2 form containerd tries first: the same grant.
    let form = |body: String| {
        Request::post("/registry/token")
            .header("content-type", "application/x-www-form-urlencoded")
            .body(Body::from(body))
            .unwrap()
    };
    let granted = api
        .send(form(format!(
            "grant_type=password&username=a%2Fweb&password={password}&service=slipway-registry&scope=repository%3Aa%2Fweb%3Apull"
        )))
        .await
        .expect(200, None);
    assert!(
        granted["access_token"]
            .as_str()
            .is_some_and(|t| t.split('.').count() == 3)
    );
    api.send(form(format!(
        "grant_type=password&username=b%2Fweb&password={password}"
    )))
    .await
    .expect(401, Some("auth_required"));
    api.send(form("grant_type=refresh_token&refresh_token=x".into()))
        .await
        .expect(400, Some("bad_request"));
    Ok(())
}
