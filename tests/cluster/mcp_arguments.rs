//! What tools make of their arguments, through the official Python MCP SDK against the API on a socket: `set_env`
//! keeps a secret a secret unless told otherwise and answers the kind the key has; an argument a tool does not
//! take, a retired alias, a missing or mistyped one is a tool error that names it, and nothing is done; `deploy`
//! checks `sha` with its route's own check before anything is queued; refusals name tools and their arguments,
//! never REST routes.

// A test panics on a reply that lacks what it checks.
#![allow(clippy::unwrap_used)]

use crate::support;

use anyhow::Result;
use axum::http::Method;
use serde_json::{Value, json};
use support::mcp::{McpClient, serving};

/// A refusal's message names no REST route.
fn names_no_route(message: &str) {
    for method in ["GET /", "POST /", "PUT /", "PATCH /", "DELETE /"] {
        assert!(!message.contains(method), "{message}");
    }
}

#[tokio::test]
async fn set_env_keeps_a_secret_secret_unless_told_otherwise() -> Result<()> {
    let (api, url) = serving().await?;
    let alice = api.user("alice", "basic").await?;
    let app = api.create_app(&alice, "vault", "static").await;
    let app_id = app["id"].as_str().unwrap().to_owned();
    let prod_id = app["channels"][0]["id"].as_str().unwrap().to_owned();
    let mut agent = McpClient::connect(&url, &alice.token).await?;
    let shown = |entry: &Value| {
        (
            entry["key"].clone(),
            entry["kind"].clone(),
            entry["scope"].clone(),
            entry["channel_id"].clone(),
            entry["value"].clone(),
        )
    };

    let first = agent
        .call(
            "set_env",
            json!({"app_name": "vault", "key": "API_KEY", "value": "f1rst", "secret": true}),
        )
        .await?;
    assert!(!first.text.contains("f1rst"));
    assert_eq!(
        shown(&first.ok()),
        shown(
            &json!({"key": "API_KEY", "kind": "secret", "scope": "app", "channel_id": null, "value": null})
        )
    );
    // Rotated without `secret`: still a secret, and the answer says so.
    let rotated = agent
        .call(
            "set_env",
            json!({"app_name": "vault", "key": "API_KEY", "value": "r0tated"}),
        )
        .await?;
    assert!(!rotated.text.contains("r0tated"), "{}", rotated.text);
    assert_eq!(rotated.ok()["kind"], "secret");
    let listed = agent.call("list_env", json!({"app_name": "vault"})).await?;
    assert!(!listed.text.contains("r0tated"), "{}", listed.text);
    let entries = listed.ok()["env"].clone();
    assert_eq!(entries.as_array().unwrap().len(), 1);
    assert_eq!(
        shown(&entries[0]),
        shown(
            &json!({"key": "API_KEY", "kind": "secret", "scope": "app", "channel_id": null, "value": null})
        )
    );
    let revealed = api
        .get(&format!("/apps/{app_id}/env/API_KEY/value"), &alice)
        .await
        .expect(200, None);
    assert_eq!(revealed["value"], "r0tated", "the value did change");

    // A new key without `secret` is a plain variable.
    let plain = agent
        .call(
            "set_env",
            json!({"app_name": "vault", "key": "GREETING", "value": "hello"}),
        )
        .await?
        .ok();
    assert_eq!(
        (plain["kind"].clone(), plain["value"].clone()),
        (json!("env"), json!("hello"))
    );
    // Only an explicit `secret: false` turns a secret into a plain variable.
    let downgraded = agent
        .call(
            "set_env",
            json!({"app_name": "vault", "key": "API_KEY", "value": "n0w-plain", "secret": false}),
        )
        .await?
        .ok();
    assert_eq!(
        (downgraded["kind"].clone(), downgraded["value"].clone()),
        (json!("env"), json!("n0w-plain"))
    );

    // A channel's own value: sealed with `secret: true`, and it stays sealed when rotated without it.
    let channel_secret = agent
        .call(
            "set_env",
            json!({"app_name": "vault", "channel": "prod", "key": "DB_PASS", "value": "p1", "secret": true}),
        )
        .await?
        .ok();
    assert_eq!(
        shown(&channel_secret),
        shown(
            &json!({"key": "DB_PASS", "kind": "secret", "scope": "channel", "channel_id": prod_id, "value": null})
        )
    );
    let channel_rotated = agent
        .call(
            "set_env",
            json!({"app_name": "vault", "channel": "prod", "key": "DB_PASS", "value": "p2"}),
        )
        .await?;
    assert!(
        !channel_rotated.text.contains("p2\""),
        "{}",
        channel_rotated.text
    );
    assert_eq!(
        shown(&channel_rotated.ok()),
        shown(
            &json!({"key": "DB_PASS", "kind": "secret", "scope": "channel", "channel_id": prod_id, "value": null})
        )
    );
    Ok(())
}

#[tokio::test]
async fn a_tool_refuses_an_argument_it_does_not_take_and_does_nothing() -> Result<()> {
    let (api, url) = serving().await?;
    let alice = api.user("alice", "basic").await?;
    let app = api.create_app(&alice, "site", "static").await;
    let app_id = app["id"].as_str().unwrap().to_owned();
    let prod_id = app["channels"][0]["id"].as_str().unwrap().to_owned();
    api.commit(&alice, &app_id, json!({"index.html": "<p>hi</p>\n"}))
        .await;
    let mut agent = McpClient::connect(&url, &alice.token).await?;
    let refused = async |agent: &mut McpClient, tool: &str, arguments: Value| -> Result<String> {
        let reply = agent.call(tool, arguments).await?;
        assert_eq!(reply.refusal(), (400, "bad_request".to_owned()), "{tool}");
        Ok(reply.message())
    };

    // `kind` is the route's field, not the tool's: refused, naming it and what set_env takes.
    let message = refused(
        &mut agent,
        "set_env",
        json!({"app_name": "site", "key": "API_KEY", "value": "v", "kind": "secret"}),
    )
    .await?;
    assert!(
        message.starts_with("unknown argument `kind`; set_env takes "),
        "{message}"
    );
    for taken in ["`app_name`", "`key`", "`value`", "`secret`", "`channel`"] {
        assert!(message.contains(taken), "{message}");
    }
    // A misspelt channel does not set the app-wide value instead.
    let message = refused(
        &mut agent,
        "set_env",
        json!({"app_name": "site", "key": "MODE", "value": "x", "chanel": "prod"}),
    )
    .await?;
    assert!(
        message.starts_with("unknown argument `chanel`"),
        "{message}"
    );
    let env = agent
        .call("list_env", json!({"app_name": "site"}))
        .await?
        .ok();
    assert_eq!(env["env"], json!([]), "nothing was stored");
    let message = refused(&mut agent, "list_apps", json!({"verbose": true})).await?;
    assert_eq!(
        message,
        "unknown argument `verbose`; list_apps takes no arguments"
    );

    // Mistyped and missing arguments are named.
    for (tool, arguments, expected) in [
        (
            "list_activity",
            json!({"app_name": "site", "limit": "5"}),
            "argument `limit` must be an integer",
        ),
        (
            "set_env",
            json!({"app_name": "site", "key": "K", "value": "v", "secret": "yes"}),
            "argument `secret` must be true or false",
        ),
        (
            "get_deploy_log",
            json!({"app_name": "site", "channel": "prod", "deploy_id": "d", "offset": -1}),
            "argument `offset` must be at least 0",
        ),
        (
            "get_app",
            json!({"app_name": 42}),
            "argument `app_name` must be a string",
        ),
    ] {
        assert_eq!(refused(&mut agent, tool, arguments).await?, expected);
    }
    let message = refused(
        &mut agent,
        "commit_files",
        json!({"app_name": "site", "message": "m", "edits": {"index.html": [{"old_string": 5, "new_string": "x"}]}}),
    )
    .await?;
    assert!(
        message.starts_with("argument `edits.index.html[0].old_string`: invalid type"),
        "{message}"
    );
    let message = refused(
        &mut agent,
        "deploy",
        json!({"app_name": "site", "ref": "master"}),
    )
    .await?;
    assert!(
        message.starts_with("argument `channel` is required"),
        "{message}"
    );

    // The deprecated aliases retired after 2026-10-01.
    let message = refused(&mut agent, "get_app", json!({"app_id": app_id})).await?;
    assert!(
        message.starts_with("argument `app_id` retired after 2026-10-01; use `app_name`"),
        "{message}"
    );
    let message = refused(
        &mut agent,
        "deploy",
        json!({"app_name": "site", "channel_id": prod_id, "ref": "master"}),
    )
    .await?;
    assert!(
        message.starts_with("argument `channel_id` retired after 2026-10-01; use `channel`"),
        "{message}"
    );

    // Nothing was queued by any of them.
    let deploys = api
        .get(
            &format!("/apps/{app_id}/channels/{prod_id}/deploys"),
            &alice,
        )
        .await
        .expect(200, None);
    assert_eq!(deploys["deploys"], json!([]), "{deploys}");
    Ok(())
}

#[tokio::test]
async fn deploy_checks_sha_with_its_routes_check_before_anything_is_queued() -> Result<()> {
    let (api, url) = serving().await?;
    let alice = api.user("alice", "basic").await?;
    let app = api.create_app(&alice, "site", "static").await;
    let app_id = app["id"].as_str().unwrap().to_owned();
    let prod_id = app["channels"][0]["id"].as_str().unwrap().to_owned();
    let head = api
        .commit(&alice, &app_id, json!({"index.html": "<p>hi</p>\n"}))
        .await;
    let mut agent = McpClient::connect(&url, &alice.token).await?;
    let deploy_path = format!("/apps/{app_id}/channels/{prod_id}/deploy");
    let history = format!("/apps/{app_id}/channels/{prod_id}/deploys");

    for asked in [
        json!({"sha": "no such sha!"}),
        json!({"sha": "-master"}),
        json!({"ref": "../master"}),
        json!({}),
    ] {
        let mut arguments = asked.clone();
        arguments["app_name"] = json!("site");
        arguments["channel"] = json!("prod");
        let tool = agent.call("deploy", arguments).await?;
        let route = api.post(&deploy_path, &alice, asked.clone()).await;
        assert_eq!(route.status, 400, "{asked}: {}", route.body);
        assert_eq!(tool.refusal(), (400, "bad_request".to_owned()), "{asked}");
        assert_eq!(
            tool.message(),
            route.body["error"]["message"].as_str().unwrap(),
            "{asked}: the route's own words"
        );
    }
    let none = api.get(&history, &alice).await.expect(200, None);
    assert_eq!(none["deploys"], json!([]), "nothing was queued");

    // A branch name is a `sha` the route takes: queued, pinned to the branch's head.
    let queued = agent
        .call(
            "deploy",
            json!({"app_name": "site", "channel": "prod", "sha": "master"}),
        )
        .await?
        .ok();
    assert_eq!(queued["status"], "queued");
    assert_eq!(queued["channel_id"], prod_id.as_str());
    let channel = api
        .get(&format!("/apps/{app_id}/channels/{prod_id}"), &alice)
        .await
        .expect(200, None);
    assert_eq!(channel["pending_deploy"]["deploy_id"], queued["deploy_id"]);
    assert_eq!(channel["pending_deploy"]["sha"], head.as_str());
    Ok(())
}

#[tokio::test]
async fn refusals_name_tools_and_their_arguments_never_rest_routes() -> Result<()> {
    let (api, url) = serving().await?;
    let alice = api.user("alice", "builder").await?;
    api.create_app(&alice, "site", "app").await;
    let mut agent = McpClient::connect(&url, &alice.token).await?;

    // No code is pending: the tool that asks for one is named.
    let gone = agent
        .call("complete_email_verification", json!({"code": "ABCD2345"}))
        .await?;
    assert_eq!(gone.refusal(), (410, "gone".to_owned()));
    assert_eq!(
        gone.message(),
        "no verification code is pending; request one with request_email_verification"
    );
    // The changeset's rules speak of the tool's `files`, not the route's `changes`.
    let empty = agent
        .call("commit_files", json!({"app_name": "site", "message": "m"}))
        .await?;
    assert_eq!(
        empty.message(),
        "a changeset needs at least one path in files, edits or patches"
    );
    let both = agent
        .call(
            "commit_files",
            json!({"app_name": "site", "message": "m", "files": {"a.txt": "x"},
                   "patches": {"a.txt": "@@\n-x\n+y\n"}}),
        )
        .await?;
    assert_eq!(
        both.message(),
        "path \"a.txt\" is in both files and patches; a path belongs to exactly one of them"
    );
    // Port forwarding is off for the app, and no tool turns it on.
    let off = agent
        .call(
            "expose_port",
            json!({"app_name": "site", "channel": "prod"}),
        )
        .await?;
    assert_eq!(off.refusal(), (409, "conflict".to_owned()));
    let message = off.message();
    assert!(
        message.starts_with("port forwarding is off for app site"),
        "{message}"
    );
    assert!(message.contains("no tool does"), "{message}");
    for message in [gone.message(), empty.message(), both.message(), message] {
        names_no_route(&message);
    }
    // The REST route still tells an HTTP client its way.
    let route = api
        .call(
            Method::POST,
            "/me/email-verifications/complete",
            Some(&alice.token),
            Some(json!({"code": "ABCD2345"})),
        )
        .await;
    assert!(route.message().contains("POST /me/email-verifications"));
    Ok(())
}
