//! The tools that reach the platform's other parts, through the official Python MCP SDK against the real ones the
//! cluster tier has: `rewind` on a channel history written as the operator leaves it, `get_runtime_log` on the log
//! archive the operator fills, `sync_git` from an SSH git server (`hack/git-peer.sh`), `get_blob_usage` on
//! versitygw behind the S3 gateway, `verify_custom_domain` against Pebble's test DNS, and email verification
//! through the SMTP server of `hack/smtp.sh`. Each answer is checked to be about the arguments given. And every
//! one of the spec's tools is called by some test.

// A test panics on a reply that lacks what it checks.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::Result;
use serde_json::json;
use slipway_internal::InternalClient;
use slipway_internal::protocol::RuntimeContainer;
use support::agent::{attach_mailer, code_mailed_to, register};
use support::blob::ObjectStore;
use support::deploys::succeeded;
use support::git_peer::GitPeer;
use support::https::{self, TestDns};
use support::mcp::{McpClient, SPEC_TOOLS, serving};
use support::{EDGE_ADDRESS, TestApi, User};

const WITHIN: Duration = Duration::from_secs(60);

/// `user`'s app `name` of `template`: (app id, prod channel id).
async fn app_of(api: &TestApi, user: &User, name: &str, template: &str) -> (String, String) {
    let app = api.create_app(user, name, template).await;
    (
        app["id"].as_str().unwrap().to_owned(),
        app["channels"][0]["id"].as_str().unwrap().to_owned(),
    )
}

#[tokio::test]
async fn rewind_puts_the_named_channel_back_on_its_previous_image() -> Result<()> {
    let (api, url) = serving().await?;
    let carol = api.user("carol", "builder").await?;
    let (_, prod) = app_of(&api, &carol, "web", "app").await;
    let (v1, v2) = ("1".repeat(40), "2".repeat(40));
    let first = succeeded(&api, &carol, "web.prod.1000-aaaaaa", &v1, 'a').await?;
    succeeded(&api, &carol, "web.prod.2000-bbbbbb", &v2, 'b').await?;
    let mut agent = McpClient::connect(&url, &carol.token).await?;

    let rewound = agent
        .call("rewind", json!({"app_name": "web", "channel": "prod"}))
        .await?
        .ok();
    assert_eq!(rewound["status"], "queued");
    assert_eq!(rewound["channel_id"], prod.as_str());
    assert_eq!(
        rewound["rewound_from"],
        first.metadata.uid.as_deref().unwrap()
    );
    assert_eq!(rewound["sha"], v1.as_str());
    let unknown = agent
        .call("rewind", json!({"app_name": "web", "channel": "next"}))
        .await?;
    assert_eq!(unknown.refusal(), (404, "not_found".to_owned()));
    // A static app has no image to go back to: the route's refusal.
    app_of(&api, &carol, "site", "static").await;
    let refused = agent
        .call("rewind", json!({"app_name": "site", "channel": "prod"}))
        .await?;
    assert_eq!(refused.refusal(), (409, "conflict".to_owned()));
    assert!(refused.message().contains("static"), "{}", refused.text);
    Ok(())
}

#[tokio::test]
async fn get_runtime_log_reads_the_generation_asked_for() -> Result<()> {
    let (api, url) = serving().await?;
    let alice = api.user("alice", "builder").await?;
    let (app, prod) = app_of(&api, &alice, "web", "app").await;
    let operator = InternalClient::new(api.operator_endpoint(&api.serve_internal().await?));
    let started = |at: &str| {
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            at.parse().unwrap(),
        ))
    };
    let mut facts = RuntimeContainer {
        app_id: app.clone(),
        channel_id: prod.clone(),
        pod_name: "web-prod-1".into(),
        deploy_id: None,
        running: false,
        status: "exited".into(),
        exit_code: Some(3),
        oom_killed: false,
        started_at: started("2026-11-24T10:00:00Z"),
        finished_at: started("2026-11-24T10:01:00Z"),
    };
    operator.runtime_container("c-first", &facts).await?;
    operator
        .append_runtime_log(
            "c-first",
            b"2026-11-24T10:00:00.100000000Z boot one\n".to_vec(),
        )
        .await?;
    facts.pod_name = "web-prod-2".into();
    facts.running = true;
    facts.status = "running".into();
    facts.exit_code = None;
    facts.finished_at = None;
    operator.runtime_container("c-second", &facts).await?;
    let mut agent = McpClient::connect(&url, &alice.token).await?;

    let newest = agent
        .call(
            "get_runtime_log",
            json!({"app_name": "web", "channel": "prod"}),
        )
        .await?
        .ok();
    assert_eq!(
        (
            newest["container_index"].clone(),
            newest["container_id"].clone()
        ),
        (json!(1), json!("c-second"))
    );
    assert_eq!(newest["available_indices"], json!([0, 1]));
    let earlier = agent
        .call(
            "get_runtime_log",
            json!({"app_name": "web", "channel": "prod", "container_index": 0}),
        )
        .await?
        .ok();
    assert_eq!(
        (
            earlier["container_id"].clone(),
            earlier["exit_code"].clone()
        ),
        (json!("c-first"), json!(3))
    );
    let missing = agent
        .call(
            "get_runtime_log",
            json!({"app_name": "web", "channel": "prod", "container_index": 7}),
        )
        .await?;
    assert_eq!(missing.refusal(), (404, "not_found".to_owned()));
    assert!(
        missing.message().ends_with("generation 7"),
        "{}",
        missing.text
    );
    // A command runs in a sandbox this tier has none of: the route says so (without one, no sandbox is asked for).
    let command = agent
        .call(
            "get_runtime_log",
            json!({"app_name": "web", "channel": "prod", "command": "tail -5 app.log"}),
        )
        .await?;
    assert_eq!(command.refusal(), (503, "service_unavailable".to_owned()));
    assert!(
        command.message().contains("log sandbox"),
        "{}",
        command.text
    );
    Ok(())
}

#[tokio::test]
async fn sync_git_fetches_the_named_apps_external_repository_now() -> Result<()> {
    let peer = GitPeer::start().await?;
    peer.create_repo("site").await?;
    let (api, url) = serving().await?;
    let alice = api.user("alice", "basic").await?;
    let (app, _) = app_of(&api, &alice, "site", "static").await;
    api.create_app(&alice, "other", "static").await;
    // Connecting a mirror is a person's REST call; no tool does it.
    let connected = api
        .post(
            &format!("/apps/{app}/github/connect"),
            &alice,
            json!({"remote_url": peer.url("site")}),
        )
        .await
        .expect(200, None);
    peer.authorize(connected["public_key"].as_str().unwrap())?;
    let head = peer
        .commit("site", "master", &[("index.html", "upstream")], false)
        .await?;
    let mut agent = McpClient::connect(&url, &alice.token).await?;

    let synced = agent
        .call("sync_git", json!({"app_name": "site"}))
        .await?
        .ok();
    assert_eq!(synced["last_sync_status"], "success", "{synced}");
    assert_eq!(synced["remote_url"], peer.url("site"));
    assert_eq!(synced["last_sync_refs"]["refs/heads/master"], head.as_str());
    let file = agent
        .call(
            "read_file",
            json!({"app_name": "site", "path": "index.html"}),
        )
        .await?;
    assert_eq!(file.text, "upstream");
    let unmirrored = agent.call("sync_git", json!({"app_name": "other"})).await?;
    assert_eq!(unmirrored.refusal(), (404, "not_found".to_owned()));
    Ok(())
}

#[tokio::test]
async fn get_blob_usage_reports_the_named_channel_or_the_accounts_total() -> Result<()> {
    let (mut api, url) = serving().await?;
    let store = ObjectStore::start(&mut api, "127.0.0.1").await?;
    let alice = api.user("alice", "basic").await?;
    let (app, prod) = app_of(&api, &alice, "files", "static").await;
    let dev = api
        .post(
            &format!("/apps/{app}/channels"),
            &alice,
            json!({"name": "dev", "git_ref_binding": "branch:dev"}),
        )
        .await
        .expect(200, None)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    api.start_operator_without_node_with(&alice.namespace, Some(store.settings()))
        .await?;
    let status = |channel: &str| format!("/apps/{app}/channels/{channel}/blob");
    for channel in [&prod, &dev] {
        api.get_until(&status(channel), &alice.token, 200, WITHIN)
            .await?;
        slipway_testkit::wait_until(WITHIN, || async {
            Ok(api.get(&status(channel), &alice).await.body["status"] == "ready")
        })
        .await?;
    }
    let mut agent = McpClient::connect(&url, &alice.token).await?;

    let account = api.get("/me/blob/storage", &alice).await.expect(200, None);
    assert_eq!(account["store_count"], 2, "{account}");
    let total = agent.call("get_blob_usage", json!({})).await?.ok();
    assert_eq!(total, json!({"account": account}));
    for (name, id) in [("prod", &prod), ("dev", &dev)] {
        let usage = agent
            .call(
                "get_blob_usage",
                json!({"app_name": "files", "channel": name}),
            )
            .await?
            .ok();
        let route = api.get(&status(id), &alice).await.expect(200, None);
        assert_eq!(
            usage,
            json!({"channel": route, "account": account}),
            "{name}"
        );
    }
    assert_ne!(
        api.get(&status(&prod), &alice).await.body["virtual_bucket"],
        api.get(&status(&dev), &alice).await.body["virtual_bucket"]
    );
    let half = agent
        .call("get_blob_usage", json!({"app_name": "files"}))
        .await?;
    assert_eq!(half.refusal(), (400, "bad_request".to_owned()));
    // The key pair of the channel named: its bucket is that channel's.
    let keys = agent
        .call(
            "get_blob_credentials",
            json!({"app_name": "files", "channel": "dev"}),
        )
        .await?
        .ok();
    let dev_status = api.get(&status(&dev), &alice).await.expect(200, None);
    assert_eq!(keys["bucket"], dev_status["virtual_bucket"], "{keys}");
    assert!(keys["access_key_id"].is_string() && keys["secret_access_key"].is_string());
    Ok(())
}

#[tokio::test]
async fn verify_custom_domain_checks_the_named_domains_records() -> Result<()> {
    let dns = TestDns::from_env()?;
    let (api, url) = serving().await?;
    let user = api.user("domv", "builder").await?;
    api.start_operator_with_domains(
        &user.namespace,
        https::domains_config(&user.namespace, false)?,
    )
    .await?;
    app_of(&api, &user, "site", "static").await;
    let mut agent = McpClient::connect(&url, &user.token).await?;
    let domain = format!(
        "v{}.example",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let arguments = json!({"app_name": "site", "channel": "prod", "domain": domain});
    let added = agent
        .call("add_custom_domain", arguments.clone())
        .await?
        .ok();

    let pending = agent
        .call("verify_custom_domain", arguments.clone())
        .await?
        .ok();
    assert_eq!(pending["domain"], domain.as_str());
    assert_eq!(
        (pending["status"].clone(), pending["reason"].clone()),
        (json!("pending"), json!("txt_nxdomain"))
    );
    dns.txt(
        &format!("_svc.{domain}"),
        added["dns_records"]["txt_value"].as_str().unwrap(),
    )
    .await?;
    dns.a(&domain, &[EDGE_ADDRESS]).await?;
    let verified = agent.call("verify_custom_domain", arguments).await?.ok();
    assert_eq!(verified["domain"], domain.as_str());
    assert_eq!(verified["status"], "verified", "{verified}");
    assert!(verified["verified_at"].is_string());
    let unknown = agent
        .call(
            "verify_custom_domain",
            json!({"app_name": "site", "channel": "prod", "domain": "not-added.example"}),
        )
        .await?;
    assert_eq!(unknown.refusal(), (404, "not_found".to_owned()));
    Ok(())
}

#[tokio::test]
async fn an_agent_verifies_its_email_address_with_the_mailed_code() -> Result<()> {
    let (mut api, url) = serving().await?;
    let maildir = attach_mailer(&mut api)?;
    let (_key, registered) = register(&api).await?;
    let mut agent = McpClient::connect(&url, registered["token"].as_str().unwrap()).await?;
    let address = format!("{}@example.test", registered["username"].as_str().unwrap());

    let sent = agent
        .call("request_email_verification", json!({"email": address}))
        .await?
        .ok();
    assert_eq!(sent["status"], "sent");
    let code = code_mailed_to(&maildir, &address)?;
    let wrong = agent
        .call("complete_email_verification", json!({"code": "WRONG234"}))
        .await?;
    assert_eq!(wrong.refusal(), (400, "bad_request".to_owned()));
    assert!(wrong.message().starts_with("wrong code"), "{}", wrong.text);
    let verified = agent
        .call("complete_email_verification", json!({"code": code}))
        .await?
        .ok();
    assert_eq!(
        (verified["status"].clone(), verified["plan"].clone()),
        (json!("verified"), json!("basic"))
    );
    let user_id: uuid::Uuid = registered["user_id"].as_str().unwrap().parse()?;
    let bound: Option<String> = sqlx::query_scalar("SELECT email FROM users WHERE id = $1")
        .bind(user_id)
        .fetch_one(api.state.db())
        .await?;
    assert_eq!(bound.as_deref(), Some(address.as_str()));
    Ok(())
}

/// The tools a test calls by name (`.call("name"`) in the cluster tests' sources.
fn tools_called_in(source: &str) -> BTreeSet<String> {
    let mut called = BTreeSet::new();
    for (at, _) in source.match_indices(".call(") {
        let rest = source[at + ".call(".len()..].trim_start();
        if let Some(quoted) = rest.strip_prefix('"')
            && let Some(end) = quoted.find('"')
        {
            called.insert(quoted[..end].to_owned());
        }
    }
    called
}

#[test]
fn every_spec_tool_is_called_by_a_test() -> Result<()> {
    let dir = support::platform::root().join("tests/cluster");
    let mut called = BTreeSet::new();
    for entry in std::fs::read_dir(&dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "rs") {
            called.extend(tools_called_in(&std::fs::read_to_string(&path)?));
        }
    }
    let uncalled: Vec<&str> = SPEC_TOOLS
        .iter()
        .copied()
        .filter(|tool| !called.contains(*tool))
        .collect();
    assert!(uncalled.is_empty(), "no test calls {uncalled:?}");
    Ok(())
}

#[test]
fn a_call_is_found_by_the_tools_name_however_it_is_laid_out() {
    let source = r#"agent.call("list_apps", json!({})); agent
        .call(
            "get_app",
            json!({}),
        ); api.call(Method::GET, "/apps"); dns.call("clear-txt")"#;
    let found = tools_called_in(source);
    assert!(
        found.contains("list_apps") && found.contains("get_app"),
        "{found:?}"
    );
    assert!(!found.contains("/apps"), "{found:?}");
}
