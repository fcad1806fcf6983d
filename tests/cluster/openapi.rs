//! The OpenAPI document against the routes it describes, checked by a schema-driven generator: schemathesis (from
//! PyPI, `hack/install-deps.sh`) sends requests that its schemas allow to the API served on a socket, with every
//! path parameter pinned to a real object of one account, and fails when a route refuses one as invalid input
//! (400 or 422, `tests/openapi/checks.py`), or answers 500. A refusal that depends on state (404, 409, a scope or
//! role, a name already taken) is not the document's to state.
//!
//! A few operations take input whose validity no schema can carry; they are left out here, each with its reason,
//! and their refusals are covered by their own tests.

// A test panics on a reply that lacks what it checks.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::collections::BTreeMap;
use std::fmt::Write as _;

use anyhow::{Context, Result};
use serde_json::{Value, json};
use support::TestApi;

/// Operations left out, with why their input cannot be judged from a schema.
const LEFT_OUT: &[(&str, &str, &str)] = &[
    (
        "POST",
        "/registrations",
        "the body carries an SSH signature only the key's holder can make",
    ),
    (
        "POST",
        "/auth/ssh-key",
        "the body carries an SSH signature only the key's holder can make",
    ),
    (
        "POST",
        "/ssh-keys",
        "the key must decode to an Ed25519 public key",
    ),
    (
        "POST",
        "/apps/{app_id}/changeset",
        "edits and hunks must match the files they change",
    ),
    (
        "POST",
        "/me/email-verifications/complete",
        "the code must be the one that was mailed",
    ),
    (
        "POST",
        "/apps/{app_id}/channels/{channel_id}/postgres/reset",
        "the confirmation must name the database",
    ),
    (
        "POST",
        "/apps/{app_id}/channels/{channel_id}/postgres/restore",
        "the confirmation must name the database",
    ),
    (
        "POST",
        "/apps/{app_id}/channels/{channel_id}/blob/restore",
        "the confirmation must name the channel",
    ),
    (
        "POST",
        "/apps/{app_id}/github/connect",
        "the URL's host must be one a sync may reach",
    ),
    (
        "DELETE",
        "/apps/{app_id}",
        "the other requests are pinned to the app",
    ),
    (
        "DELETE",
        "/apps/{app_id}/channels/{channel_id}",
        "the other requests are pinned to the channel",
    ),
    (
        "DELETE",
        "/tokens/{token_id}",
        "the token it would revoke may be the one the run signs with",
    ),
    (
        "POST",
        "/mcp",
        "JSON-RPC over MCP's transport, which the MCP tests drive with the official SDK",
    ),
];

/// Where schemathesis was installed (`hack/install-deps.sh`); `hack/test.sh` exports it.
fn schemathesis() -> Result<String> {
    std::env::var("SLIPWAY_TEST_SCHEMATHESIS").context(
        "SLIPWAY_TEST_SCHEMATHESIS is not set; run under hack/test.sh, which installs schemathesis",
    )
}

#[tokio::test]
async fn what_the_document_allows_the_routes_take() -> Result<()> {
    let mut api = TestApi::start().await?;
    support::postgres::attach(&mut api)?;
    let base = api.serve().await?;
    let alice = api.user("oas", "builder").await?;
    let _operator = api.start_operator_without_node(&alice.namespace).await?;
    let app = api.create_app(&alice, "shop", "app").await;
    let app_id = app["id"].as_str().unwrap().to_owned();
    let channel = api
        .post(
            &format!("/apps/{app_id}/channels"),
            &alice,
            json!({"name": "next", "git_ref_binding": "branch:next"}),
        )
        .await
        .expect(200, None);
    let thread = api
        .post(
            &format!("/apps/{app_id}/threads"),
            &alice,
            json!({"title": "plans"}),
        )
        .await
        .expect(201, None);
    let number = thread["number"].to_string();
    let note = api
        .post(
            &format!("/apps/{app_id}/threads/{number}/notes"),
            &alice,
            json!({"body": "first"}),
        )
        .await
        .expect(201, None);
    let bob = api.user("oasbob", "basic").await?;
    let values: BTreeMap<&str, String> = [
        ("app_id", app_id.clone()),
        ("channel_id", channel["id"].as_str().unwrap().to_owned()),
        ("number", number),
        (
            "note_id",
            note["id"].to_string().trim_matches('"').to_owned(),
        ),
        ("username", bob.username.clone()),
        ("key", "GREETING".to_owned()),
        ("domain", "www.example.com".to_owned()),
    ]
    .into();

    let doc: Value = reqwest::get(format!("{base}/openapi.json"))
        .await?
        .json()
        .await?;
    let mut pinned: BTreeMap<String, String> = BTreeMap::new();
    let mut unknown = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for operation in item.as_object().unwrap().values() {
            for parameter in operation["parameters"].as_array().into_iter().flatten() {
                if parameter["in"] != "path" {
                    continue;
                }
                let name = parameter["name"].as_str().unwrap();
                let value = match values.get(name) {
                    Some(value) => value.clone(),
                    // An id of a kind the account holds none of: a fresh uuid, answered 404 like any unknown id.
                    None if parameter["schema"]["format"] == "uuid" => {
                        uuid::Uuid::new_v4().to_string()
                    }
                    None => {
                        unknown.push(format!("{path} {name}"));
                        continue;
                    }
                };
                pinned.entry(format!("path.{name}")).or_insert(value);
            }
        }
    }
    unknown.sort();
    unknown.dedup();
    assert!(
        unknown.is_empty(),
        "path parameters with no value here: {unknown:?}"
    );
    let parameters: String = pinned
        .iter()
        .map(|(name, value)| format!("\"{name}\" = \"{value}\"\n"))
        .collect();

    let dir = std::env::temp_dir().join(format!("slipway-openapi-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir)?;
    let mut config = format!(
        "base-url = \"{base}\"\nheaders = {{ Authorization = \"Bearer {token}\" }}\n\
         [generation]\nmode = \"positive\"\nmax-examples = 20\ncodec = \"ascii\"\nallow-x00 = false\n\
         [phases.stateful]\nenabled = false\n\
         [checks.not_a_server_error]\nexpected-statuses = [\"2xx\", \"4xx\", \"503\"]\n\
         [parameters]\n{parameters}",
        token = alice.token,
    );
    // A channel takes five domains: the attach's examples stay under that.
    config.push_str(
        "[[operations]]\ninclude-name = \"POST /apps/{app_id}/channels/{channel_id}/domains\"\n\
         generation.max-examples = 4\n",
    );
    for (method, path, _) in LEFT_OUT {
        writeln!(
            config,
            "[[operations]]\ninclude-name = \"{method} {path}\"\nenabled = false"
        )?;
    }
    let config_path = dir.join("schemathesis.toml");
    std::fs::write(&config_path, config)?;
    let mut command = tokio::process::Command::new(schemathesis()?);
    command
        .arg("--config-file")
        .arg(&config_path)
        .arg("run")
        .arg(format!("{base}/openapi.json"))
        .args([
            "--phases",
            "examples,fuzzing",
            "--workers",
            "2",
            "--seed",
            "1",
            "--no-color",
        ])
        .args([
            "--checks",
            "conforming_requests_are_taken,not_a_server_error",
        ])
        // The check (tests/openapi/checks.py): a 400 or 422 fails it unless it is about a name already taken.
        .env("SCHEMATHESIS_HOOKS", "checks")
        .env(
            "PYTHONPATH",
            concat!(env!("CARGO_MANIFEST_DIR"), "/tests/openapi"),
        )
        .current_dir(&dir);
    let out = command.output().await?;
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "schemathesis found requests its schema allows that a route refused:\n{report}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(report.contains("passed"), "{report}");
    eprintln!("{report}");
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
