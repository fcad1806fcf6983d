//! The MCP endpoint's transport against the API on a socket. In raw HTTP, what it answers requests an SDK would
//! not send: a body that is not JSON (-32700), not a JSON-RPC message (-32600), params that are not a method's
//! (-32602), and a browser page of another origin (403). Through the official Python SDK: a changeset as large
//! as the REST route takes goes through, and one over the limit is a JSON-RPC error the session survives.

// A test panics on a reply that lacks what it checks.
#![allow(clippy::unwrap_used)]

use crate::support;

use anyhow::Result;
use serde_json::{Value, json};
use slipway_core::public_urls::PublicUrls;
use support::mcp::{McpClient, initialize, post_raw, serving};

#[tokio::test]
async fn a_request_that_is_not_a_method_call_answers_its_json_rpc_error() -> Result<()> {
    let (api, url) = serving().await?;
    let alice = api.user("alice", "basic").await?;
    let error = |body: &Value| (body["error"]["code"].clone(), body["id"].clone());

    let (status, body) =
        post_raw(&url, &alice.token, &[], "{\"jsonrpc\": \"2.0\", \"id\": 1,").await?;
    assert_eq!(status, 400, "{body}");
    assert_eq!(error(&body), (json!(-32700), Value::Null), "{body}");
    assert_eq!(body["jsonrpc"], "2.0");
    assert!(
        body.get("id").is_some(),
        "an error answer has an id, null here: {body}"
    );

    let (status, body) =
        post_raw(&url, &alice.token, &[], r#"{"jsonrpc": "2.0", "id": 8}"#).await?;
    assert_eq!(status, 400, "{body}");
    assert_eq!(error(&body), (json!(-32600), json!(8)), "{body}");

    // Params that are not a structured value make no JSON-RPC request at all (JSON-RPC 2.0, 4.2).
    let (status, body) = post_raw(
        &url,
        &alice.token,
        &[],
        json!({"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": "list_apps"})
            .to_string(),
    )
    .await?;
    assert_eq!(status, 400, "{body}");
    assert_eq!(error(&body), (json!(-32600), json!(6)), "{body}");

    // A method this server answers, with params it does not take.
    for params in [
        json!({"arguments": {}}),
        json!({"name": "list_apps", "arguments": 5}),
    ] {
        let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params});
        let (_, body) = post_raw(&url, &alice.token, &[], call.to_string()).await?;
        assert_eq!(error(&body), (json!(-32602), json!(7)), "{params}: {body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .starts_with("the params of tools/call are not what it takes"),
            "{body}"
        );
    }
    let unknown = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                         "params": {"name": "no_such_tool", "arguments": {}}});
    let (_, body) = post_raw(&url, &alice.token, &[], unknown.to_string()).await?;
    assert_eq!(error(&body), (json!(-32602), json!(9)), "{body}");
    let (_, body) = post_raw(
        &url,
        &alice.token,
        &[],
        json!({"jsonrpc": "2.0", "id": 10, "method": "tools/dance"}).to_string(),
    )
    .await?;
    assert_eq!(error(&body), (json!(-32601), json!(10)), "{body}");

    // A well-formed call still works.
    let call = json!({"jsonrpc": "2.0", "id": 11, "method": "tools/call",
                      "params": {"name": "list_apps", "arguments": {}}});
    let (status, body) = post_raw(&url, &alice.token, &[], call.to_string()).await?;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["result"]["structuredContent"]["apps"],
        json!([]),
        "{body}"
    );
    Ok(())
}

#[tokio::test]
async fn a_browser_page_of_another_origin_is_refused() -> Result<()> {
    let (mut api, url) = serving().await?;
    let urls = PublicUrls::new(
        Some("https://api.example.test"),
        Some("https://console.example.test"),
    )?;
    api.enable(|features| features.public_urls = urls);
    let alice = api.user("alice", "basic").await?;
    let init = initialize().to_string();
    for origin in [
        "https://evil.example",
        "null",
        "https://api.example.test.evil.example",
        "http://api.example.test",
    ] {
        let (status, body) =
            post_raw(&url, &alice.token, &[("origin", origin)], init.clone()).await?;
        assert_eq!(status, 403, "{origin}: {body}");
        assert_eq!(body["error"]["code"], -32600, "{origin}: {body}");
    }
    for origin in [
        "https://api.example.test",
        "https://console.example.test",
        "http://localhost:6274",
        "http://127.0.0.1:3000",
    ] {
        let (status, body) =
            post_raw(&url, &alice.token, &[("origin", origin)], init.clone()).await?;
        assert_eq!(status, 200, "{origin}: {body}");
    }
    // Agents send no Origin.
    let (status, body) = post_raw(&url, &alice.token, &[], init).await?;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["result"]["serverInfo"]["name"], "slipway");
    Ok(())
}

#[tokio::test]
async fn commit_files_takes_what_the_changeset_route_takes_and_no_more() -> Result<()> {
    let (api, url) = serving().await?;
    let alice = api.user("alice", "basic").await?;
    api.create_app(&alice, "site", "static").await;
    let mut agent = McpClient::connect(&url, &alice.token).await?;

    // A file just under the REST changeset route's limit, in one call.
    let size = slipway_rest::repo::CHANGESET_BODY_LIMIT - 4096;
    let large = "x".repeat(size);
    let committed = agent
        .call(
            "commit_files",
            json!({"app_name": "site", "message": "large", "files": {"large.txt": large}}),
        )
        .await?
        .ok();
    assert!(committed["sha"].is_string(), "{committed}");
    let files = agent
        .call("list_files", json!({"app_name": "site"}))
        .await?
        .ok();
    assert_eq!(files["files"][0]["size"], size);

    // Over the endpoint's limit: a JSON-RPC error naming it, and the session goes on.
    let over = "x".repeat(slipway_mcp::transport::BODY_LIMIT);
    let (code, message) = agent
        .rpc_error(
            "commit_files",
            json!({"app_name": "site", "message": "too large", "files": {"over.txt": over}}),
        )
        .await?;
    assert_eq!(code, -32600, "{message}");
    assert!(
        message.contains(&slipway_mcp::transport::BODY_LIMIT.to_string()),
        "{message}"
    );
    let listed = agent.call("list_apps", json!({})).await?.ok();
    assert_eq!(listed["apps"][0]["name"], "site");
    Ok(())
}
