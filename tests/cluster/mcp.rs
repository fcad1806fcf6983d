//! The MCP server against real parts: the REST API served on a socket with the operator in this process on the
//! test control plane and Postgres, and the official Python MCP SDK as the client. An agent registers by SSH key
//! over REST, then works through tools only: creates an app, commits, deploys, reads the log, sets env, adds a
//! domain, manages keys and credentials. Tools refuse exactly as their routes do, and the endpoint answers 401
//! without a live token. Static channels run no pod, so no node is needed.

// A test panics on a reply that lacks what it checks.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::Result;
use axum::http::Method;
use serde_json::{Value, json};
use support::agent::{AgentKey, now};
use support::mcp::{McpClient, SPEC_TOOLS, initialize, post_raw, serving};
use support::{TestApi, User, call_on};

const WITHIN: Duration = Duration::from_secs(60);

fn random() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..8].to_owned()
}

/// Makes `member` a member of `owner`'s app.
async fn share(api: &TestApi, owner: &User, app_id: &str, member: &User) {
    api.call(
        Method::PUT,
        &format!("/apps/{app_id}/members/{}", member.username),
        Some(&owner.token),
        Some(json!({"role": "member"})),
    )
    .await
    .expect(200, None);
}

/// Polls `get_deploy_log` until its first line names a finished status; returns the whole text.
async fn finished_log(client: &mut McpClient, arguments: Value) -> Result<String> {
    let deadline = tokio::time::Instant::now() + WITHIN;
    loop {
        let text = client.call("get_deploy_log", arguments.clone()).await?.text;
        let first = text.lines().next().unwrap_or_default().to_owned();
        if first.starts_with("status: success") || first.starts_with("status: failed") {
            return Ok(text);
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "the deploy is still {first:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test]
async fn tools_list_names_the_spec_tools_each_with_a_description_a_schema_and_hints() -> Result<()>
{
    let (api, url) = serving().await?;
    let alice = api.user("alice", "basic").await?;
    let mut client = McpClient::connect(&url, &alice.token).await?;
    assert_eq!(client.initialized["server"], "slipway");
    assert_eq!(client.initialized["tools"], true);

    let tools = client.list_tools().await?;
    let listed: BTreeSet<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    let expected: BTreeSet<&str> = SPEC_TOOLS.iter().copied().collect();
    assert_eq!(
        listed, expected,
        "tools/list answers the spec's 54 tools, no more"
    );
    assert_eq!(tools.len(), 54, "each name once");

    for tool in &tools {
        let name = tool["name"].as_str().unwrap();
        assert!(
            tool["description"].as_str().is_some_and(|d| d.len() >= 20),
            "{name} has a description"
        );
        assert_eq!(tool["inputSchema"]["type"], "object", "{name}");
        for (argument, schema) in tool["inputSchema"]["properties"]
            .as_object()
            .cloned()
            .unwrap_or_default()
        {
            assert!(
                schema["description"]
                    .as_str()
                    .is_some_and(|d| !d.is_empty()),
                "{name}.{argument} is described"
            );
        }
        let hints = &tool["annotations"];
        assert!(
            hints["readOnlyHint"].is_boolean(),
            "{name} says whether it reads only"
        );
        assert!(hints["destructiveHint"].is_boolean(), "{name}");
        assert!(hints["idempotentHint"].is_boolean(), "{name}");
    }
    let hint = |name: &str, key: &str| {
        tools.iter().find(|t| t["name"] == name).unwrap()["annotations"][key].clone()
    };
    assert_eq!(hint("list_apps", "readOnlyHint"), true);
    assert_eq!(hint("delete_app", "destructiveHint"), true);
    assert_eq!(hint("restore_channel_db", "destructiveHint"), true);
    assert_eq!(hint("commit_files", "readOnlyHint"), false);
    // Apps and channels are addressed by name; the deprecated ids retired after 2026-10-01.
    let schema =
        |name: &str| tools.iter().find(|t| t["name"] == name).unwrap()["inputSchema"].clone();
    for argument in ["app_name", "channel", "sha", "ref"] {
        assert!(
            schema("deploy")["properties"][argument].is_object(),
            "deploy takes {argument}"
        );
    }
    // Each schema says which arguments the server needs, and that it takes no others.
    let optional_channel = ["set_env", "delete_env", "list_env", "get_blob_usage"];
    for tool in &tools {
        let name = tool["name"].as_str().unwrap();
        let schema = &tool["inputSchema"];
        for retired in ["app_id", "channel_id"] {
            assert!(
                schema["properties"][retired].is_null(),
                "{name} still lists {retired}"
            );
        }
        assert_eq!(schema["additionalProperties"], false, "{name}");
        let required: BTreeSet<&str> = schema["required"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        if schema["properties"]["app_name"].is_object() && name != "get_blob_usage" {
            assert!(required.contains("app_name"), "{name} requires app_name");
        }
        if schema["properties"]["channel"].is_object() && !optional_channel.contains(&name) {
            assert!(required.contains("channel"), "{name} requires channel");
        }
    }
    assert!(
        schema("get_blob_usage")["required"]
            .as_array()
            .is_none_or(Vec::is_empty),
        "get_blob_usage needs no argument"
    );
    // create_channel shows a binding the route takes.
    let binding = schema("create_channel")["properties"]["git_ref_binding"]["description"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(binding.contains("`branch:dev`"), "{binding}");
    assert!(!binding.contains("refs/heads"), "{binding}");
    Ok(())
}

#[tokio::test]
async fn a_registered_agent_builds_and_deploys_a_site_through_tools_alone() -> Result<()> {
    let (api, url) = serving().await?;
    // Registration is the one step outside MCP: it is public and proven by an SSH signature.
    let key = AgentKey::new("ed25519")?;
    let name = format!("agent{}", random());
    let registered = call_on(
        &api.router,
        Method::POST,
        "/registrations",
        None,
        Some(key.registration(Some(&name), now())?),
    )
    .await
    .expect(200, None);
    let namespace = format!("slipway-user-{name}");
    api.forget_namespace_later(&namespace);
    let _operator = api.start_operator_without_node(&namespace).await?;
    let token = registered["token"].as_str().unwrap();
    let mut agent = McpClient::connect(&url, token).await?;

    let app = agent
        .call("create_app", json!({"name": "site", "template": "static"}))
        .await?
        .ok();
    let app_id = app["id"].as_str().unwrap().to_owned();
    assert_eq!(app["channels"][0]["name"], "prod");
    let got = agent
        .call("get_app", json!({"app_name": "site"}))
        .await?
        .ok();
    assert_eq!(got["id"], app_id.as_str());
    let by_id = agent
        .call("get_app", json!({"app_name": app_id}))
        .await?
        .ok();
    assert_eq!(by_id["name"], "site", "an app by its UUID");
    let listed = agent.call("list_apps", json!({})).await?.ok();
    assert_eq!(listed["apps"].as_array().unwrap().len(), 1);

    let page = "<h1>made by an agent</h1>\n";
    let commit = agent
        .call(
            "commit_files",
            json!({"app_name": "site", "message": "first page", "files": {"index.html": page, "notes.txt": "draft"}}),
        )
        .await?
        .ok();
    let sha = commit["sha"].as_str().unwrap().to_owned();
    let edited = agent
        .call(
            "commit_files",
            json!({"app_name": "site", "message": "edit", "edits": {"notes.txt": [{"old_string": "draft", "new_string": "final"}]}}),
        )
        .await?
        .ok();
    assert_ne!(edited["sha"], sha.as_str());
    let files = agent
        .call("list_files", json!({"app_name": "site"}))
        .await?
        .ok();
    let paths: Vec<&str> = files["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["path"].as_str())
        .collect();
    assert_eq!(paths, ["index.html", "notes.txt"]);
    let read = agent
        .call(
            "read_file",
            json!({"app_name": "site", "path": "notes.txt"}),
        )
        .await?;
    assert_eq!(read.text, "final");
    let old = agent
        .call(
            "read_file",
            json!({"app_name": "site", "path": "notes.txt", "ref": sha}),
        )
        .await?;
    assert_eq!(old.text, "draft", "a file at an earlier commit");

    let deploy = agent
        .call(
            "deploy",
            json!({"app_name": "site", "channel": "prod", "ref": "master"}),
        )
        .await?
        .ok();
    assert_eq!(deploy["status"], "queued");
    let deploy_id = deploy["deploy_id"].as_str().unwrap().to_owned();
    let log = finished_log(
        &mut agent,
        json!({"app_name": "site", "channel": "prod", "deploy_id": deploy_id}),
    )
    .await?;
    assert!(log.starts_with("status: success"), "{log}");
    let prod = &agent
        .call("get_app", json!({"app_name": "site"}))
        .await?
        .ok()["channels"][0];
    assert_eq!(
        prod["current_sha"], edited["sha"],
        "the deployed commit is the branch's head"
    );

    // How it is doing: health, statistics, the account at a glance.
    let health = agent
        .call("get_app_health", json!({"app_name": "site"}))
        .await?
        .ok();
    assert_eq!(health["healthy"], true, "{health}");
    let channel = &health["channels"][0];
    assert_eq!(channel["status"], "running");
    assert_eq!(channel["last_deploy"]["deploy_id"], deploy_id.as_str());
    assert_eq!(channel["last_deploy"]["status"], "success");
    assert!(
        channel["container"].is_null(),
        "a static channel runs no container"
    );
    let stats = agent
        .call("get_app_stats", json!({"app_name": "site"}))
        .await?
        .ok();
    assert_eq!(stats["deploys"]["total"], 1);
    assert_eq!(stats["deploys"]["success"], 1);
    assert!(stats["channels"][0]["median_deploy_seconds"].is_number());
    assert!(stats["channels"][0]["last_success_at"].is_string());
    let overview = agent.call("get_account_overview", json!({})).await?.ok();
    assert_eq!(overview["usage"]["plan"], "starter");
    assert_eq!(overview["apps"]["owned"], 1);
    assert_eq!(overview["channels"]["running"], 1);

    // Environment: set, listed by name, removed.
    agent
        .call(
            "set_env",
            json!({"app_name": "site", "key": "GREETING", "value": "hello"}),
        )
        .await?
        .ok();
    agent
        .call(
            "set_env",
            json!({"app_name": "site", "key": "API_KEY", "value": "s3cret", "secret": true}),
        )
        .await?
        .ok();
    let env = agent.call("list_env", json!({"app_name": "site"})).await?;
    let entries = env.ok()["env"].as_array().cloned().unwrap();
    let keys: BTreeSet<&str> = entries.iter().filter_map(|e| e["key"].as_str()).collect();
    assert_eq!(keys, BTreeSet::from(["API_KEY", "GREETING"]));
    assert!(!env.text.contains("s3cret"), "no tool shows a secret");
    // The environment the deploy ran with, recorded the way the operator records it when a container starts.
    let internal =
        slipway_internal::InternalClient::new(api.operator_endpoint(&api.serve_internal().await?));
    internal
        .deploy_env(
            &deploy_id,
            &slipway_internal::protocol::EnvRequest {
                app_id: app_id.clone(),
                channel_id: app["channels"][0]["id"].as_str().unwrap().to_owned(),
                system_keys: vec!["SVC_SHA".into()],
            },
        )
        .await?;
    let ran = agent
        .call(
            "get_deploy_env",
            json!({"app_name": "site", "channel": "prod", "deploy_id": deploy_id}),
        )
        .await?;
    let snapshot = ran.ok();
    assert_eq!(snapshot["deploy_id"], deploy_id.as_str());
    assert_eq!(
        snapshot["env"],
        json!([{"key": "API_KEY", "kind": "secret", "source": "app", "value": null},
               {"key": "GREETING", "kind": "env", "source": "app", "value": "hello"}])
    );
    assert_eq!(snapshot["system_keys"], json!(["SVC_SHA"]));
    assert!(!ran.text.contains("s3cret"), "no tool shows a secret");
    agent
        .call("delete_env", json!({"app_name": "site", "key": "GREETING"}))
        .await?
        .ok();
    let env = agent
        .call("list_env", json!({"app_name": "site"}))
        .await?
        .ok();
    assert_eq!(env["env"].as_array().unwrap().len(), 1);

    // A second channel, listed and deleted by name.
    agent
        .call(
            "create_channel",
            json!({"app_name": "site", "name": "next", "git_ref_binding": "branch:next"}),
        )
        .await?
        .ok();
    let channels = agent
        .call("list_channels", json!({"app_name": "site"}))
        .await?
        .ok();
    let names: BTreeSet<&str> = channels["channels"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(names, BTreeSet::from(["next", "prod"]));
    agent
        .call(
            "delete_channel",
            json!({"app_name": "site", "channel": "next"}),
        )
        .await?
        .ok();

    // A custom domain: attached with its DNS records, listed, removed.
    let domain = format!("www.{}.example.com", random());
    let attached = agent
        .call(
            "add_custom_domain",
            json!({"app_name": "site", "channel": "prod", "domain": domain}),
        )
        .await?
        .ok();
    assert_eq!(attached["status"], "pending");
    assert!(attached["dns_records"]["txt_value"].is_string());
    let domains = agent
        .call(
            "list_custom_domains",
            json!({"app_name": "site", "channel": "prod"}),
        )
        .await?
        .ok();
    assert_eq!(domains["domains"][0]["domain"], domain.as_str());
    agent
        .call(
            "remove_custom_domain",
            json!({"app_name": "site", "channel": "prod", "domain": domain}),
        )
        .await?
        .ok();

    // Keys and credentials.
    let listed = agent.call("list_ssh_keys", json!({})).await?.ok();
    assert_eq!(
        listed["ssh_keys"].as_array().unwrap().len(),
        1,
        "the registration key"
    );
    let second = AgentKey::new("ed25519")?;
    let added = agent
        .call(
            "register_ssh_key",
            json!({"public_key": second.public, "label": "laptop"}),
        )
        .await?
        .ok();
    let key_id = added["id"].as_str().unwrap().to_owned();
    agent
        .call("delete_ssh_key", json!({"key_id": key_id}))
        .await?
        .ok();
    let credential = agent
        .call(
            "get_credentials",
            json!({"scopes": ["repo:*"], "expires_in": 600}),
        )
        .await?
        .ok();
    let minted = credential["token"].as_str().unwrap();
    assert!(minted.starts_with("svc_"));
    assert_eq!(credential["scopes"], json!(["repo:*"]));
    call_on(&api.router, Method::GET, "/apps", Some(minted), None)
        .await
        .expect(200, None);

    agent
        .call("delete_app", json!({"app_name": "site"}))
        .await?
        .ok();
    let gone = agent.call("get_app", json!({"app_name": "site"})).await?;
    assert_eq!(gone.refusal(), (404, "not_found".to_owned()));
    drop(key);
    Ok(())
}

/// Takes a deploy's pre-deploy checkpoint of `channel_id` the way the operator does before a new container starts
/// (an `app` deploy would, but the cluster tier has no node to build one); the SQL snapshot id.
async fn checkpoint(api: &TestApi, app_id: &str, channel_id: &str) -> Result<String> {
    let base = api.serve_internal().await?;
    let client = slipway_internal::InternalClient::new(api.operator_endpoint(&base));
    let answer = support::pre_deploy_checkpoint(
        &client,
        &uuid::Uuid::new_v4().to_string(),
        &slipway_internal::protocol::PreDeploySnapshotRequest {
            app_id: app_id.to_owned(),
            channel_id: channel_id.to_owned(),
            git_sha: None,
        },
    )
    .await?;
    match answer {
        slipway_internal::protocol::PreDeploySnapshot::Taken { snapshot_id } => Ok(snapshot_id),
        other => anyhow::bail!("no checkpoint: {other:?}"),
    }
}

#[tokio::test]
async fn a_registered_agent_restores_its_database_and_opens_a_port_through_tools_alone()
-> Result<()> {
    let (mut api, url) = serving().await?;
    // The data server for channel databases, and a snapshot archive in an object-storage backend of the test's own.
    support::postgres::attach(&mut api)?;
    let backend = slipway_testkit::s3::TestS3::start().await?;
    let archive = slipway_postgres::archive::Archive::new(
        &slipway_backends::object_store::S3Endpoint {
            url: backend.url.clone(),
            access_key_id: backend.access_key_id.clone(),
            secret_access_key: backend.secret_access_key.clone(),
        },
        slipway_postgres::archive::system_bucket("slipway-"),
    );
    archive.ensure_bucket().await?;
    api.enable(|features| features.snapshot_archive = Some(archive));

    // The agent registers by SSH key; its account is on a plan with port forwarding (an operator's choice).
    let key = AgentKey::new("ed25519")?;
    let name = format!("agent{}", random());
    let registered = call_on(
        &api.router,
        Method::POST,
        "/registrations",
        None,
        Some(key.registration(Some(&name), now())?),
    )
    .await
    .expect(200, None);
    let token = registered["token"].as_str().unwrap().to_owned();
    let user_id: uuid::Uuid = registered["user_id"].as_str().unwrap().parse()?;
    slipway_store::db::users::set_plan(api.state.db(), &name.parse()?, "builder").await?;
    api.state.tokens().forget_all();
    let namespace = format!("slipway-user-{name}");
    api.forget_namespace_later(&namespace);
    let ports: slipway_controllers::forward::ForwardPorts = "127.0.0.1:29330-29339"
        .parse()
        .map_err(anyhow::Error::msg)?;
    let postgres = support::postgres::settings()?;
    let _operator = api
        .start_nodeless_operator_extended(&namespace, move |ctx| {
            ctx.with_postgres(postgres).with_forwards(ports)
        })
        .await?;
    let mut agent = McpClient::connect(&url, &token).await?;

    let app = agent
        .call("create_app", json!({"name": "notes", "template": "app"}))
        .await?
        .ok();
    let app_id = app["id"].as_str().unwrap().to_owned();
    let prod_id = app["channels"][0]["id"].as_str().unwrap().to_owned();
    agent
        .call(
            "commit_files",
            json!({"app_name": "notes", "message": "start", "files": {"launch.sh": "exec ./serve\n"}}),
        )
        .await?
        .ok();
    let status_path = format!("/apps/{app_id}/channels/{prod_id}/postgres");
    let deadline = tokio::time::Instant::now() + WITHIN;
    while api
        .call(Method::GET, &status_path, Some(&token), None)
        .await
        .body["status"]
        != "ready"
    {
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "the database never became ready"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The app keeps rows; a deploy's checkpoint is taken; later rows replace them.
    let env = support::postgres::variables(&api, &prod_id).await?;
    let mut db = support::postgres::connect(&env["DATABASE_URL"]).await?;
    support::postgres::execute(
        &mut db,
        "CREATE TABLE notes (body text); INSERT INTO notes VALUES ('kept')",
    )
    .await?;
    let snapshot_id = checkpoint(&api, &app_id, &prod_id).await?;
    support::postgres::execute(
        &mut db,
        "DELETE FROM notes; INSERT INTO notes VALUES ('later')",
    )
    .await?;

    let listed = agent
        .call(
            "list_channel_snapshots",
            json!({"app_name": "notes", "channel": "prod"}),
        )
        .await?
        .ok();
    assert_eq!(listed["snapshots"][0]["snapshot_id"], snapshot_id.as_str());
    assert_eq!(listed["snapshots"][0]["kind"], "pre_deploy");
    let db_name = listed["db_name"].as_str().unwrap().to_owned();
    let restore = |confirm: &str| json!({"app_name": "notes", "channel": "prod", "snapshot_id": snapshot_id, "confirm_db_name": confirm});
    let blocked = agent.call("restore_channel_db", restore(&db_name)).await?;
    assert_eq!(blocked.refusal(), (403, "prod_restore_blocked".to_owned()));
    agent
        .call(
            "set_env",
            json!({"app_name": "notes", "key": "SVC_ALLOW_PROD_RESTORE", "value": "1"}),
        )
        .await?
        .ok();
    let mistyped = agent
        .call("restore_channel_db", restore("notes-typo"))
        .await?;
    assert_eq!(mistyped.refusal(), (400, "invalid_confirmation".to_owned()));
    let restored = agent
        .call("restore_channel_db", restore(&db_name))
        .await?
        .ok();
    assert_eq!(restored["status"], "ready");
    // A restore ends the role's sessions: the app connects again, as it would.
    let mut db = support::postgres::connect(&env["DATABASE_URL"]).await?;
    let rows: Vec<String> = sqlx::query_scalar("SELECT body FROM notes")
        .fetch_all(&mut db)
        .await?;
    assert_eq!(rows, ["kept"], "the checkpoint's rows are back");

    // The bucket's leg of that checkpoint: the route's refusals name the channel and the checkpoint given (this
    // platform has no object storage, so the checkpoint has no bucket leg).
    let blobs = |confirm: &str| json!({"app_name": "notes", "channel": "prod", "snapshot_id": snapshot_id, "confirm_channel_name": confirm});
    let mistyped = agent.call("restore_channel_blobs", blobs("notes")).await?;
    assert_eq!(mistyped.refusal(), (400, "invalid_confirmation".to_owned()));
    assert!(
        mistyped.message().ends_with("the channel's name, prod"),
        "{}",
        mistyped.text
    );
    let legless = agent.call("restore_channel_blobs", blobs("prod")).await?;
    let no_leg = (409, "no_aligned_blob_snapshot".to_owned());
    let names_it = format!("checkpoint {snapshot_id} has no object-store leg");
    assert_eq!(legless.refusal(), no_leg);
    assert!(legless.message().starts_with(&names_it), "{}", legless.text);
    let undownloadable = agent
        .call(
            "download_channel_blobs",
            json!({"app_name": "notes", "channel": "prod", "snapshot_id": snapshot_id}),
        )
        .await?;
    assert_eq!(undownloadable.refusal(), no_leg);
    assert!(
        undownloadable.message().starts_with(&names_it),
        "{}",
        undownloadable.text
    );

    // A download link. Without a public URL the API knows no address of its own: the link is a path on the host
    // the client reached. With one, the link is on it, whatever Host a request names.
    let download = json!({"app_name": "notes", "channel": "prod", "snapshot_id": snapshot_id});
    let path =
        format!("/apps/{app_id}/channels/{prod_id}/postgres/snapshots/{snapshot_id}/download");
    let relative = agent
        .call("download_channel_snapshot", download.clone())
        .await?
        .ok();
    assert_eq!(relative["download"]["url"], path.as_str(), "{relative}");
    assert!(relative["download"]["curl"].is_null(), "{relative}");
    let public = "https://api.example.test";
    let urls = slipway_core::public_urls::PublicUrls::new(Some(public), None)?;
    api.enable(|features| features.public_urls = urls);
    let link = agent
        .call("download_channel_snapshot", download.clone())
        .await?
        .ok();
    assert_eq!(link["download"]["url"], format!("{public}{path}"), "{link}");
    assert!(link["expires_at"].is_string());
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                      "params": {"name": "download_channel_snapshot", "arguments": download}});
    let forged = [
        ("host", "attacker.example"),
        ("x-forwarded-proto", "https"),
        ("x-forwarded-host", "attacker.example"),
    ];
    let (status, answer) = post_raw(&url, &token, &forged, call.to_string()).await?;
    assert_eq!(status, 200, "{answer}");
    let link = &answer["result"]["structuredContent"]["download"];
    assert_eq!(link["url"], format!("{public}{path}"), "{answer}");
    assert!(!answer.to_string().contains("attacker.example"), "{answer}");
    // The link works.
    let authorization = link["headers"]["Authorization"].as_str().unwrap();
    let fetched = reqwest::Client::new()
        .get(url.replace("/mcp", &path))
        .header("authorization", authorization)
        .send()
        .await?;
    assert_eq!(fetched.status(), 200);

    // A port: refused while the app's toggle is off (no tool turns it on), opened once the owner's person does.
    let expose = json!({"app_name": "notes", "channel": "prod", "allow_cidrs": ["10.0.0.0/8"]});
    let off = agent.call("expose_port", expose.clone()).await?;
    assert_eq!(off.refusal(), (409, "conflict".to_owned()));
    let person = api
        .token(
            user_id,
            &slipway_auth::scopes::default_scopes(),
            false,
            None,
        )
        .await?;
    api.call(
        Method::PATCH,
        &format!("/apps/{app_id}"),
        Some(&person),
        Some(json!({"port_forwarding_enabled": true})),
    )
    .await
    .expect(200, None);
    let exposed = agent.call("expose_port", expose).await?.ok();
    let port = exposed["port"].as_u64().unwrap();
    assert!((29330..=29339).contains(&port), "{exposed}");
    assert_eq!(exposed["allow_cidrs"], json!(["10.0.0.0/8"]));
    let ports = agent
        .call("list_exposed_ports", json!({"app_name": "notes"}))
        .await?
        .ok();
    assert_eq!(ports["forwards"][0]["port"], port);
    agent
        .call(
            "unexpose_port",
            json!({"app_name": "notes", "channel": "prod"}),
        )
        .await?
        .ok();
    let ports = agent
        .call("list_exposed_ports", json!({"app_name": "notes"}))
        .await?
        .ok();
    assert_eq!(ports["forwards"], json!([]));
    drop(key);
    Ok(())
}

/// The (status, code) a route answered.
fn route_refusal(reply: support::Reply) -> (u64, String) {
    (
        u64::from(reply.status.as_u16()),
        reply.body["error"]["code"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    )
}

#[tokio::test]
async fn a_member_reads_a_shared_apps_health_and_journal_by_owner_and_name() -> Result<()> {
    let (api, url) = serving().await?;
    let alice = api.user("alice", "basic").await?;
    let bob = api.user("bob", "basic").await?;
    let app = api.create_app(&alice, "shop", "static").await;
    let app_id = app["id"].as_str().unwrap();
    share(&api, &alice, app_id, &bob).await;
    // Two audit-logged actions: the owner reveals two secrets.
    for key in ["FIRST", "SECOND"] {
        api.post(
            &format!("/apps/{app_id}/env"),
            &alice,
            json!({"key": key, "value": "v", "kind": "secret"}),
        )
        .await
        .expect(204, None);
        api.get(&format!("/apps/{app_id}/env/{key}/value"), &alice)
            .await
            .expect(200, None);
    }

    let mut client = McpClient::connect(&url, &bob.token).await?;
    let shared = format!("{}/shop", alice.username);
    let bare = client
        .call("get_app_health", json!({"app_name": "shop"}))
        .await?;
    assert_eq!(bare.refusal().0, 404);
    assert!(
        bare.text.contains(&shared),
        "the refusal names {shared}: {}",
        bare.text
    );
    let health = client
        .call("get_app_health", json!({"app_name": shared}))
        .await?
        .ok();
    assert_eq!(health["healthy"], false, "never deployed");
    assert_eq!(health["channels"][0]["notes"][0], "not deployed yet");

    let first = client
        .call("list_activity", json!({"app_name": shared, "limit": 1}))
        .await?
        .ok();
    assert_eq!(first["events"][0]["action"], "env.reveal");
    assert_eq!(first["events"][0]["actor"], alice.username.as_str());
    assert_eq!(
        first["events"][0]["detail"]["key"], "SECOND",
        "newest first"
    );
    let cursor = first["next_cursor"].as_str().unwrap().to_owned();
    let second = client
        .call(
            "list_activity",
            json!({"app_name": shared, "limit": 1, "cursor": cursor}),
        )
        .await?
        .ok();
    assert_eq!(second["events"][0]["detail"]["key"], "FIRST");
    let rest = client
        .call(
            "list_activity",
            json!({"app_name": shared, "cursor": second["next_cursor"]}),
        )
        .await?
        .ok();
    assert_eq!(rest["events"], json!([]));
    assert!(rest["next_cursor"].is_null());
    for bad in [
        json!({"limit": 0}),
        json!({"limit": 201}),
        json!({"cursor": "x"}),
    ] {
        let mut arguments = bad.clone();
        arguments["app_name"] = json!(shared);
        let refused = client.call("list_activity", arguments).await?;
        assert_eq!(refused.refusal(), (400, "bad_request".to_owned()), "{bad}");
    }
    Ok(())
}
#[tokio::test]
async fn tools_refuse_exactly_as_their_routes_do() -> Result<()> {
    let (api, url) = serving().await?;
    let alice = api.user("alice", "basic").await?;
    let bob = api.user("bob", "basic").await?;
    let bobs = api.create_app(&bob, "private", "static").await;
    let bobs_id = bobs["id"].as_str().unwrap();
    let mine = api.create_app(&alice, "mine", "static").await;
    let mine_id = mine["id"].as_str().unwrap();
    let prod_id = mine["channels"][0]["id"].as_str().unwrap();
    let mut client = McpClient::connect(&url, &alice.token).await?;

    // Another person's app: 404 as if missing, by id and by owner/name.
    let tool = client.call("get_app", json!({"app_name": bobs_id})).await?;
    let route = api.get(&format!("/apps/{bobs_id}"), &alice).await;
    assert_eq!(tool.refusal(), route_refusal(route));
    assert_eq!(tool.refusal(), (404, "not_found".to_owned()));
    let by_name = client
        .call(
            "get_app",
            json!({"app_name": format!("{}/private", bob.username)}),
        )
        .await?;
    assert_eq!(by_name.refusal(), (404, "not_found".to_owned()));
    let deleting = client
        .call("delete_app", json!({"app_name": bobs_id}))
        .await?;
    assert_eq!(deleting.refusal(), (404, "not_found".to_owned()));
    api.get(&format!("/apps/{bobs_id}"), &bob)
        .await
        .expect(200, None);

    // Bad input: the route's 400.
    let tool = client
        .call(
            "commit_files",
            json!({"app_name": "mine", "message": "", "files": {"a": "b"}}),
        )
        .await?;
    let route = api
        .post(
            &format!("/apps/{mine_id}/changeset"),
            &alice,
            json!({"message": "", "changes": {"a": "b"}}),
        )
        .await;
    assert_eq!(tool.refusal(), route_refusal(route));
    let tool = client
        .call(
            "deploy",
            json!({"app_name": "mine", "channel": "prod", "sha": "no such sha!"}),
        )
        .await?;
    let route = api
        .post(
            &format!("/apps/{mine_id}/channels/{prod_id}/deploy"),
            &alice,
            json!({"sha": "no such sha!"}),
        )
        .await;
    assert_eq!(tool.refusal(), route_refusal(route));
    assert_eq!(tool.refusal().0, 400);
    let neither = client
        .call("deploy", json!({"app_name": "mine", "channel": "prod"}))
        .await?;
    assert_eq!(neither.refusal(), (400, "bad_request".to_owned()));
    let unknown_channel = client
        .call(
            "deploy",
            json!({"app_name": "mine", "channel": "nope", "ref": "master"}),
        )
        .await?;
    assert_eq!(unknown_channel.refusal(), (404, "not_found".to_owned()));
    let malformed = client.call("get_app", json!({"app_name": 42})).await?;
    assert_eq!(malformed.refusal(), (400, "bad_request".to_owned()));

    // A token without the scope: the route's 403 scope_denied.
    let narrow = api
        .token(alice.id, &["deploy:*".to_owned()], true, None)
        .await?;
    let mut limited = McpClient::connect(&url, &narrow).await?;
    let tool = limited.call("create_app", json!({"name": "other"})).await?;
    let route = call_on(
        &api.router,
        Method::POST,
        "/apps",
        Some(&narrow),
        Some(json!({"name": "other"})),
    )
    .await;
    assert_eq!(tool.refusal(), route_refusal(route));
    assert_eq!(tool.refusal(), (403, "scope_denied".to_owned()));
    for (name, path) in [
        ("get_app_health", "health"),
        ("get_app_stats", "stats"),
        ("list_activity", "activity"),
    ] {
        let tool = limited.call(name, json!({"app_name": "mine"})).await?;
        let route = call_on(
            &api.router,
            Method::GET,
            &format!("/apps/{mine_id}/{path}"),
            Some(&narrow),
            None,
        )
        .await;
        assert_eq!(tool.refusal(), route_refusal(route), "{name}");
        assert_eq!(
            tool.refusal(),
            (403, "scope_denied".to_owned()),
            "without stats:read"
        );
    }
    // The data tools' scopes: each refused by its route, before anything else about the channel.
    let without = |scope: &str| -> Vec<String> {
        slipway_auth::scopes::DEFAULT
            .iter()
            .filter(|s| **s != scope)
            .map(|s| (*s).to_owned())
            .collect()
    };
    let some_id = uuid::Uuid::new_v4();
    for (scope, tool, arguments, method, path) in [
        (
            "snapshots:read",
            "download_channel_snapshot",
            json!({"app_name": "mine", "channel": "prod", "snapshot_id": some_id}),
            Method::POST,
            format!(
                "/apps/{mine_id}/channels/{prod_id}/postgres/snapshots/{some_id}/download-token"
            ),
        ),
        (
            "blobs:read",
            "download_channel_blobs",
            json!({"app_name": "mine", "channel": "prod", "snapshot_id": some_id}),
            Method::POST,
            format!("/apps/{mine_id}/channels/{prod_id}/blob/snapshots/{some_id}/download-token"),
        ),
        (
            "blob:*",
            "get_blob_credentials",
            json!({"app_name": "mine", "channel": "prod"}),
            Method::POST,
            format!("/apps/{mine_id}/channels/{prod_id}/blob/credentials"),
        ),
        (
            "exports:read",
            "export_data",
            json!({"app_name": "mine"}),
            Method::POST,
            format!("/apps/{mine_id}/exports"),
        ),
    ] {
        let narrow = api.token(alice.id, &without(scope), false, None).await?;
        let mut limited = McpClient::connect(&url, &narrow).await?;
        let tool_reply = limited.call(tool, arguments).await?;
        let route = call_on(&api.router, method, &path, Some(&narrow), Some(json!({}))).await;
        assert_eq!(tool_reply.refusal(), route_refusal(route), "{tool}");
        assert_eq!(
            tool_reply.refusal(),
            (403, "scope_denied".to_owned()),
            "{tool} without {scope}"
        );
    }
    let journal = client
        .call("list_activity", json!({"app_name": bobs_id}))
        .await?;
    let route = api.get(&format!("/apps/{bobs_id}/activity"), &alice).await;
    assert_eq!(journal.refusal(), route_refusal(route));
    assert_eq!(journal.refusal().0, 404);
    // Forwarding needs the app's toggle, which no tool turns on: the route's refusal.
    let tool = client
        .call(
            "expose_port",
            json!({"app_name": "mine", "channel": "prod"}),
        )
        .await?;
    let route = api
        .post(
            &format!("/apps/{mine_id}/channels/{prod_id}/forward"),
            &alice,
            json!({}),
        )
        .await;
    assert_eq!(tool.refusal(), route_refusal(route));
    Ok(())
}

async fn post_mcp(url: &str, token: Option<&str>) -> Result<reqwest::Response> {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .json(&initialize());
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    Ok(request.send().await?)
}

#[tokio::test]
async fn the_endpoint_answers_401_without_a_live_token() -> Result<()> {
    let (api, url) = serving().await?;
    let alice: User = api.user("alice", "basic").await?;
    for (token, code) in [
        (None, "auth_required"),
        (Some("svc_not-a-token"), "token_invalid"),
    ] {
        let answer = post_mcp(&url, token).await?;
        assert_eq!(answer.status(), 401);
        let challenge = answer.headers()["www-authenticate"].to_str()?.to_owned();
        assert!(challenge.starts_with("Bearer"), "{challenge}");
        let body: Value = answer.json().await?;
        assert_eq!(body["error"]["code"], code);
    }
    assert_eq!(post_mcp(&url, Some(&alice.token)).await?.status(), 200);

    // A revoked token stops at once, for a new session and for one already open.
    let mut open = McpClient::connect(&url, &alice.token).await?;
    let listed = open.call("list_apps", json!({})).await?;
    assert!(!listed.is_error);
    let hash = slipway_auth::token::hash(&alice.token);
    let row = slipway_store::db::tokens::by_hash(api.state.db(), &hash)
        .await?
        .unwrap();
    api.delete(&format!("/tokens/{}", row.id), &alice)
        .await
        .expect(204, None);
    let answer = post_mcp(&url, Some(&alice.token)).await?;
    assert_eq!(answer.status(), 401);
    let body: Value = answer.json().await?;
    assert_eq!(body["error"]["code"], "token_revoked");
    assert!(
        open.call("list_apps", json!({})).await.is_err(),
        "the open session is refused too"
    );
    Ok(())
}

#[tokio::test]
async fn members_keep_threads_of_notes_with_votes_and_leave_feedback_through_tools() -> Result<()> {
    let (api, url) = serving().await?;
    let alice = api.user("alice", "basic").await?;
    let bob = api.user("bob", "basic").await?;
    let carol = api.user("carol", "basic").await?;
    let app = api.create_app(&alice, "wiki", "static").await;
    let app_id = app["id"].as_str().unwrap();
    share(&api, &alice, app_id, &bob).await;
    let mut owner = McpClient::connect(&url, &alice.token).await?;
    let mut member = McpClient::connect(&url, &bob.token).await?;
    let mut stranger = McpClient::connect(&url, &carol.token).await?;
    let shared = format!("{}/wiki", alice.username);

    // Threads are numbered per app.
    let first = owner
        .call(
            "create_thread",
            json!({"app_name": "wiki", "title": "deploy checklist"}),
        )
        .await?
        .ok();
    assert_eq!(first["number"], 1);
    let second = member
        .call(
            "create_thread",
            json!({"app_name": shared, "title": "slow pages"}),
        )
        .await?
        .ok();
    assert_eq!(second["number"], 2);
    assert_eq!(second["author"], bob.username.as_str());

    // Notes append, read oldest first, and carry votes.
    let note = owner
        .call(
            "add_note",
            json!({"app_name": "wiki", "thread": 1, "body": "run the migrations first"}),
        )
        .await?
        .ok();
    member
        .call(
            "add_note",
            json!({"app_name": shared, "thread": 1, "body": "and warm the cache"}),
        )
        .await?
        .ok();
    let note_id = note["id"].as_i64().unwrap();
    let voted = member
        .call(
            "vote_note",
            json!({"app_name": shared, "thread": 1, "note_id": note_id, "value": 1}),
        )
        .await?
        .ok();
    assert_eq!(
        (voted["score"].clone(), voted["my_vote"].clone()),
        (json!(1), json!(1))
    );
    let again = member
        .call(
            "vote_note",
            json!({"app_name": shared, "thread": 1, "note_id": note_id, "value": 1}),
        )
        .await?
        .ok();
    assert_eq!(again["score"], 1, "one vote per person");
    owner
        .call(
            "vote_note",
            json!({"app_name": "wiki", "thread": 1, "note_id": note_id, "value": -1}),
        )
        .await?
        .ok();
    let notes = owner
        .call("list_notes", json!({"app_name": "wiki", "thread": 1}))
        .await?
        .ok();
    let bodies: Vec<&str> = notes["notes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n["body"].as_str())
        .collect();
    assert_eq!(bodies, ["run the migrations first", "and warm the cache"]);
    assert_eq!(notes["notes"][0]["score"], 0);
    assert_eq!(notes["notes"][0]["my_vote"], -1);
    let withdrawn = member
        .call(
            "vote_note",
            json!({"app_name": shared, "thread": 1, "note_id": note_id, "value": 0}),
        )
        .await?
        .ok();
    assert_eq!(
        (withdrawn["score"].clone(), withdrawn["my_vote"].clone()),
        (json!(-1), json!(0))
    );
    let page = owner
        .call(
            "list_notes",
            json!({"app_name": "wiki", "thread": 1, "limit": 1}),
        )
        .await?
        .ok();
    let rest = owner
        .call(
            "list_notes",
            json!({"app_name": "wiki", "thread": 1, "cursor": page["next_cursor"]}),
        )
        .await?
        .ok();
    assert_eq!(rest["notes"][0]["body"], "and warm the cache");
    let threads = member
        .call("list_threads", json!({"app_name": shared}))
        .await?
        .ok();
    assert_eq!(threads["threads"][0]["number"], 2, "newest first");
    assert_eq!(threads["threads"][1]["note_count"], 2);

    // Refusals: a bad vote, a missing thread or note, blank text, and a stranger who cannot see the app.
    let bad_vote = owner
        .call(
            "vote_note",
            json!({"app_name": "wiki", "thread": 1, "note_id": note_id, "value": 2}),
        )
        .await?;
    assert_eq!(bad_vote.refusal(), (400, "bad_request".to_owned()));
    let no_thread = owner
        .call(
            "add_note",
            json!({"app_name": "wiki", "thread": 9, "body": "x"}),
        )
        .await?;
    assert_eq!(no_thread.refusal(), (404, "not_found".to_owned()));
    let no_note = owner
        .call(
            "vote_note",
            json!({"app_name": "wiki", "thread": 2, "note_id": note_id, "value": 1}),
        )
        .await?;
    assert_eq!(
        no_note.refusal(),
        (404, "not_found".to_owned()),
        "the note is in thread 1"
    );
    let blank = owner
        .call("create_thread", json!({"app_name": "wiki", "title": "  "}))
        .await?;
    assert_eq!(blank.refusal(), (400, "bad_request".to_owned()));
    let long = owner
        .call(
            "add_app_feedback",
            json!({"app_name": "wiki", "message": "x".repeat(4001)}),
        )
        .await?;
    assert_eq!(long.refusal(), (400, "bad_request".to_owned()));
    for (name, arguments) in [
        ("list_threads", json!({"app_name": app_id})),
        (
            "add_note",
            json!({"app_name": app_id, "thread": 1, "body": "hi"}),
        ),
        ("list_app_feedback", json!({"app_name": app_id})),
    ] {
        let refused = stranger.call(name, arguments).await?;
        assert_eq!(refused.refusal(), (404, "not_found".to_owned()), "{name}");
    }

    // Feedback on the app, read by its members; feedback to the platform, read back by its author only.
    member
        .call(
            "add_app_feedback",
            json!({"app_name": shared, "message": "the build is quick"}),
        )
        .await?
        .ok();
    let on_app = owner
        .call("list_app_feedback", json!({"app_name": "wiki"}))
        .await?
        .ok();
    assert_eq!(on_app["feedback"][0]["message"], "the build is quick");
    assert_eq!(on_app["feedback"][0]["author"], bob.username.as_str());
    for message in ["one", "two", "three"] {
        member
            .call("submit_feedback", json!({"message": message}))
            .await?
            .ok();
    }
    let mine = member
        .call("list_feedback", json!({"limit": 2}))
        .await?
        .ok();
    let messages: Vec<&str> = mine["feedback"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["message"].as_str())
        .collect();
    assert_eq!(messages, ["three", "two"]);
    let older = member
        .call("list_feedback", json!({"cursor": mine["next_cursor"]}))
        .await?
        .ok();
    assert_eq!(older["feedback"][0]["message"], "one");
    let theirs = owner.call("list_feedback", json!({})).await?.ok();
    assert_eq!(
        theirs["feedback"],
        json!([]),
        "nobody reads another's feedback"
    );

    // The notes go with the app.
    owner
        .call("delete_app", json!({"app_name": "wiki"}))
        .await?
        .ok();
    let left: i64 = sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM note_threads WHERE app_id = $1) + (SELECT count(*) FROM notes WHERE app_id = $1) \
         + (SELECT count(*) FROM feedback WHERE app_id = $1)",
    )
    .bind(uuid::Uuid::parse_str(app_id)?)
    .fetch_one(api.state.db())
    .await?;
    assert_eq!(left, 0);
    Ok(())
}
