//! `get_blob_usage` through the official Python MCP SDK against versitygw behind the platform's S3 gateway: the
//! account's total without arguments, a channel's bucket with `app_name` and `channel`, each as its route answers.

// A test panics on a reply that lacks what it checks.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::time::Duration;

use anyhow::Result;
use serde_json::json;
use support::blob::ObjectStore;
use support::mcp::{McpClient, serving};
use support::{TestApi, User};

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
async fn get_blob_usage_reports_the_named_channel_or_the_accounts_total() -> Result<()> {
    let (api, url) = serving().await?;
    let store = ObjectStore::start(&api, "127.0.0.1").await?;
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
