//! Environment variables and secrets against real Postgres and the real apiserver: every rule of the spec's env
//! section, sealing at rest, reveal as an audited protected action, GitOps Secrets, and deploy snapshots.

// Fixture helpers panic on a malformed response: in a test that is the failure to report.
#![allow(clippy::unwrap_used)]

use crate::support;

use anyhow::Result;
use axum::http::Method;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use slipway_crds::App;
use slipway_store::env::{self, EnvSources};
use support::{TestApi, User};

struct Fixture {
    api: TestApi,
    alice: User,
    app_id: String,
    prod_id: String,
    next_id: String,
}

async fn fixture() -> Result<Fixture> {
    let api = TestApi::start().await?;
    let alice = api.user("alice", "builder").await?;
    let app = api.create_app(&alice, "blog", "app").await;
    let app_id = app["id"].as_str().unwrap().to_owned();
    let prod_id = app["channels"][0]["id"].as_str().unwrap().to_owned();
    let next = api
        .post(
            &format!("/apps/{app_id}/channels"),
            &alice,
            json!({"name": "next", "git_ref_binding": "branch:next"}),
        )
        .await
        .expect(200, None);
    let next_id = next["id"].as_str().unwrap().to_owned();
    Ok(Fixture {
        api,
        alice,
        app_id,
        prod_id,
        next_id,
    })
}

impl Fixture {
    async fn set(&self, body: Value) -> support::Reply {
        self.api
            .post(&format!("/apps/{}/env", self.app_id), &self.alice, body)
            .await
    }

    async fn list(&self, channel: Option<&str>) -> Vec<Value> {
        let q = channel
            .map(|c| format!("?channel_id={c}"))
            .unwrap_or_default();
        let body = self
            .api
            .get(&format!("/apps/{}/env{q}", self.app_id), &self.alice)
            .await
            .expect(200, None);
        body["env"].as_array().unwrap().clone()
    }

    async fn reveal(&self, user: &User, key: &str, channel: Option<&str>) -> support::Reply {
        let q = channel
            .map(|c| format!("?channel_id={c}"))
            .unwrap_or_default();
        self.api
            .get(&format!("/apps/{}/env/{key}/value{q}", self.app_id), user)
            .await
    }
}

fn find<'a>(entries: &'a [Value], key: &str, scope: &str) -> &'a Value {
    entries
        .iter()
        .find(|e| e["key"] == key && e["scope"] == scope)
        .unwrap_or_else(|| panic!("{key}/{scope} in {entries:?}"))
}

#[tokio::test]
async fn kinds_follow_the_spec_rules() -> Result<()> {
    let f = fixture().await?;
    f.set(json!({"key": "GREETING", "value": "hello"}))
        .await
        .expect(204, None);
    let e = f.list(None).await;
    assert_eq!(
        find(&e, "GREETING", "app")["kind"],
        "env",
        "a new key is env"
    );
    assert_eq!(
        find(&e, "GREETING", "app")["value"],
        "hello",
        "env values are listed in cleartext"
    );
    assert_eq!(find(&e, "GREETING", "app")["channel_id"], Value::Null);
    assert!(find(&e, "GREETING", "app")["updated_at"].as_str().is_some());

    f.set(json!({"key": "API_TOKEN", "value": "s3cr3t", "kind": "secret"}))
        .await
        .expect(204, None);
    f.set(json!({"key": "API_TOKEN", "value": "rotated"}))
        .await
        .expect(204, None);
    let e = f.list(None).await;
    assert_eq!(
        find(&e, "API_TOKEN", "app")["kind"],
        "secret",
        "an omitted kind keeps the existing kind"
    );
    assert_eq!(
        find(&e, "API_TOKEN", "app")["value"],
        Value::Null,
        "secrets are listed as null"
    );

    f.set(json!({"key": "GREETING", "value": "hi", "kind": "secret"}))
        .await
        .expect(204, None);
    assert_eq!(
        find(&f.list(None).await, "GREETING", "app")["kind"],
        "secret",
        "an explicit kind flips a key"
    );
    f.set(json!({"key": "API_TOKEN", "value": "now-plain", "kind": "env"}))
        .await
        .expect(204, None);
    let e = f.list(None).await;
    assert_eq!(
        find(&e, "API_TOKEN", "app")["kind"],
        "env",
        "env on a secret downgrades it"
    );
    assert_eq!(
        find(&e, "API_TOKEN", "app")["value"],
        "now-plain",
        "and lists return it in cleartext"
    );
    Ok(())
}

#[tokio::test]
async fn overrides_and_the_resolved_view() -> Result<()> {
    let f = fixture().await?;
    f.set(json!({"key": "MODE", "value": "production"}))
        .await
        .expect(204, None);
    f.set(json!({"key": "ONLY_APP", "value": "a"}))
        .await
        .expect(204, None);
    f.set(json!({"key": "DB_PASS", "value": "app-secret", "kind": "secret"}))
        .await
        .expect(204, None);
    f.set(json!({"key": "MODE", "value": "staging", "channel_id": f.next_id}))
        .await
        .expect(204, None);
    // An override of a secret without a kind stays a secret.
    f.set(json!({"key": "DB_PASS", "value": "next-secret", "channel_id": f.next_id}))
        .await
        .expect(204, None);

    let raw = f.list(None).await;
    assert_eq!(
        raw.len(),
        5,
        "raw rows: app defaults and overrides: {raw:?}"
    );
    assert_eq!(
        find(&raw, "MODE", "channel")["channel_id"],
        f.next_id.as_str()
    );
    assert_eq!(find(&raw, "MODE", "channel")["value"], "staging");
    assert_eq!(find(&raw, "DB_PASS", "channel")["kind"], "secret");

    let next = f.list(Some(&f.next_id)).await;
    let keys: Vec<(&str, &str)> = next
        .iter()
        .map(|e| (e["key"].as_str().unwrap(), e["scope"].as_str().unwrap()))
        .collect();
    assert_eq!(
        keys,
        [
            ("DB_PASS", "channel"),
            ("MODE", "channel"),
            ("ONLY_APP", "app")
        ]
    );
    assert_eq!(find(&next, "MODE", "channel")["value"], "staging");
    let prod = f.list(Some(&f.prod_id)).await;
    assert_eq!(
        find(&prod, "MODE", "app")["value"],
        "production",
        "prod has no override"
    );

    // Delete with channel_id removes only the override.
    f.api
        .delete(
            &format!("/apps/{}/env/MODE?channel_id={}", f.app_id, f.next_id),
            &f.alice,
        )
        .await
        .expect(204, None);
    assert_eq!(
        find(&f.list(Some(&f.next_id)).await, "MODE", "app")["value"],
        "production"
    );
    f.api
        .delete(&format!("/apps/{}/env/MODE", f.app_id), &f.alice)
        .await
        .expect(204, None);
    assert!(f.list(None).await.iter().all(|e| e["key"] != "MODE"));
    Ok(())
}

#[tokio::test]
async fn env_errors() -> Result<()> {
    let f = fixture().await?;
    for (body, message) in [
        (
            json!({"key": "lower", "value": "x"}),
            "key must match ^[A-Z_][A-Z0-9_]*$",
        ),
        (json!({"key": "1ST", "value": "x"}), "key must match"),
        (json!({"key": "PORT", "value": "x"}), "PORT is reserved"),
        (
            json!({"key": "DATABASE_URL", "value": "x"}),
            "DATABASE_URL is reserved",
        ),
        (
            json!({"key": "SVC_USER", "value": "x"}),
            "SVC_USER is reserved",
        ),
        (
            json!({"key": "BIG", "value": "x".repeat(16 * 1024 + 1)}),
            "at most 16 KiB",
        ),
        (
            json!({"key": "K", "value": "x", "kind": "plain"}),
            "kind must be env or secret",
        ),
        (json!({"key": "K"}), "missing field `value`"),
        (json!({"key": "K", "value": 5}), "invalid type"),
    ] {
        let reply = f.set(body.clone()).await;
        assert!(
            reply.message().contains(message),
            "{body}: {:?}",
            reply.body
        );
        reply.expect(400, Some("bad_request"));
    }
    f.set(json!({"key": "EXACT", "value": "é".repeat(8 * 1024)}))
        .await
        .expect(204, None);
    let other = f.api.user("bob", "builder").await?;
    let bobs = f.api.create_app(&other, "shop", "app").await;
    let foreign_channel = bobs["channels"][0]["id"].as_str().unwrap();
    f.set(json!({"key": "K", "value": "x", "channel_id": foreign_channel}))
        .await
        .expect(404, Some("not_found"));
    f.api
        .get(
            &format!("/apps/{}/env?channel_id={foreign_channel}", f.app_id),
            &f.alice,
        )
        .await
        .expect(404, Some("not_found"));
    f.api
        .get(&format!("/apps/{}/env?channel_id=nope", f.app_id), &f.alice)
        .await
        .expect(400, Some("bad_request"));
    f.reveal(&f.alice, "NOPE", None)
        .await
        .expect(404, Some("not_found"));

    let limited = f
        .api
        .post("/credentials", &f.alice, json!({"scopes": ["repo:*"]}))
        .await
        .expect(200, None);
    let limited = User {
        token: limited["token"].as_str().unwrap().to_owned(),
        ..f.alice.clone()
    };
    f.api
        .post(
            &format!("/apps/{}/env", f.app_id),
            &limited,
            json!({"key": "K", "value": "x"}),
        )
        .await
        .expect(403, Some("scope_denied"));
    f.api
        .get(&format!("/apps/{}/env", f.app_id), &limited)
        .await
        .expect(403, Some("scope_denied"));
    // Nothing refused was written.
    let keys: Vec<String> = f
        .list(None)
        .await
        .iter()
        .map(|e| e["key"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(keys, ["EXACT"]);
    Ok(())
}

#[tokio::test]
async fn reveal_is_an_audited_protected_action() -> Result<()> {
    let f = fixture().await?;
    f.set(json!({"key": "TOKEN", "value": "app-value", "kind": "secret"}))
        .await
        .expect(204, None);
    f.set(json!({"key": "TOKEN", "value": "next-value", "channel_id": f.next_id}))
        .await
        .expect(204, None);

    let app_level = f.reveal(&f.alice, "TOKEN", None).await.expect(200, None);
    assert_eq!(
        app_level,
        json!({"key": "TOKEN", "kind": "secret", "scope": "app", "value": "app-value"})
    );
    let next = f
        .reveal(&f.alice, "TOKEN", Some(&f.next_id))
        .await
        .expect(200, None);
    assert_eq!(
        next,
        json!({"key": "TOKEN", "kind": "secret", "scope": "channel", "value": "next-value"})
    );
    let prod = f
        .reveal(&f.alice, "TOKEN", Some(&f.prod_id))
        .await
        .expect(200, None);
    assert_eq!(prod["value"], "app-value", "resolved: no override on prod");

    let audits: Vec<(String, Value)> =
        sqlx::query_as("SELECT action, detail FROM audit_events WHERE app_id = $1 ORDER BY id")
            .bind(uuid::Uuid::parse_str(&f.app_id)?)
            .fetch_all(f.api.state.db())
            .await?;
    assert_eq!(audits.len(), 3);
    assert!(
        audits
            .iter()
            .all(|(a, d)| a == "env.reveal" && d["key"] == "TOKEN")
    );
    assert_eq!(audits[1].1["channel_id"], f.next_id.as_str());

    let agent_token = f
        .api
        .token(
            f.alice.id,
            &slipway_auth::scopes::default_scopes(),
            true,
            None,
        )
        .await?;
    let agent = User {
        token: agent_token,
        ..f.alice.clone()
    };
    let denied = f.reveal(&agent, "TOKEN", None).await;
    assert!(denied.body.get("value").is_none());
    denied.expect(403, Some("protected_action"));
    let path = format!("/apps/{}", f.app_id);
    f.api
        .call(
            Method::PATCH,
            &path,
            Some(&f.alice.token),
            Some(json!({"agent_protected_actions_enabled": true})),
        )
        .await
        .expect(200, None);
    f.reveal(&agent, "TOKEN", None).await.expect(200, None);

    // The audit row is written before the value leaves: without the journal, no value.
    sqlx::query("ALTER TABLE audit_events RENAME TO audit_events_away")
        .execute(f.api.state.db())
        .await?;
    let reply = f.reveal(&f.alice, "TOKEN", None).await;
    assert!(!reply.body.to_string().contains("app-value"));
    reply.expect(500, Some("internal_error"));
    Ok(())
}

#[tokio::test]
async fn a_database_dump_holds_no_value() -> Result<()> {
    let f = fixture().await?;
    let plain = "plain-value-4a8f1c";
    let secret = "secret-value-9b2e7d";
    f.set(json!({"key": "PLAIN", "value": plain}))
        .await
        .expect(204, None);
    f.set(json!({"key": "SECRET", "value": secret, "kind": "secret", "channel_id": f.next_id}))
        .await
        .expect(204, None);
    let url = f.api.db_url();
    let dump = std::process::Command::new("pg_dump")
        .arg("--data-only")
        .arg(url)
        .output()?;
    assert!(
        dump.status.success(),
        "pg_dump: {}",
        String::from_utf8_lossy(&dump.stderr)
    );
    let dump = String::from_utf8_lossy(&dump.stdout);
    assert!(
        dump.contains("PLAIN") && dump.contains("SECRET"),
        "the dump has the rows"
    );
    assert!(
        !dump.contains(plain) && !dump.contains(secret),
        "but no value in any form"
    );
    Ok(())
}

#[tokio::test]
async fn gitops_secrets_feed_the_resolution() -> Result<()> {
    let f = fixture().await?;
    let ns = f.alice.namespace.clone();
    let secrets: Api<Secret> = Api::namespaced(f.api.kube.clone(), &ns);
    let secret = |name: &str, data: Value| -> Secret {
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "stringData": data})).unwrap()
    };
    secrets
        .create(
            &PostParams::default(),
            &secret(
                "blog-env",
                json!({"FROM_GITOPS": "g", "SHARED": "gitops", "bad-key": "x", "PORT": "1"}),
            ),
        )
        .await?;
    secrets
        .create(
            &PostParams::default(),
            &secret("blog-next-env", json!({"NEXT_ONLY": "n"})),
        )
        .await?;
    let apps: Api<App> = Api::namespaced(f.api.kube.clone(), &ns);
    apps.patch(
        "blog",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"envSecret": "blog-env"}})),
    )
    .await?;
    let channels: Api<slipway_crds::Channel> = Api::namespaced(f.api.kube.clone(), &ns);
    channels
        .patch(
            "blog.next",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"envSecret": "blog-next-env"}})),
        )
        .await?;
    f.set(json!({"key": "SHARED", "value": "api"}))
        .await
        .expect(204, None);

    // The resolution a deploy receives, straight from the function the deploy uses.
    let app_id = uuid::Uuid::parse_str(&f.app_id)?;
    let next_id = uuid::Uuid::parse_str(&f.next_id)?;
    let sources = EnvSources {
        app_id,
        namespace: &ns,
        app_secret: Some("blog-env"),
        channel: Some((next_id, Some("blog-next-env"))),
    };
    let (entries, warnings) = env::resolve_sources(
        f.api.state.db(),
        &f.api.kube,
        f.api.state.keyring(),
        &sources,
    )
    .await?;
    let view: Vec<(&str, &str, env::Kind)> = entries
        .iter()
        .map(|e| (e.key.as_str(), e.value.as_str(), e.kind))
        .collect();
    assert_eq!(
        view,
        [
            ("FROM_GITOPS", "g", env::Kind::Secret),
            ("NEXT_ONLY", "n", env::Kind::Secret),
            ("SHARED", "api", env::Kind::Env)
        ]
    );
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("PORT") && w.contains("reserved"))
    );

    // The API's resolved view shows the same once the cache has the patched resources.
    slipway_testkit::wait_until(std::time::Duration::from_secs(10), || async {
        Ok(f.list(Some(&f.next_id))
            .await
            .iter()
            .any(|e| e["key"] == "NEXT_ONLY"))
    })
    .await?;
    let listed = f.list(Some(&f.next_id)).await;
    assert_eq!(
        find(&listed, "FROM_GITOPS", "app")["value"],
        Value::Null,
        "Secret-sourced values are secrets"
    );
    assert_eq!(find(&listed, "NEXT_ONLY", "channel")["kind"], "secret");
    Ok(())
}

#[tokio::test]
async fn deploy_snapshots_show_what_a_deploy_received() -> Result<()> {
    let f = fixture().await?;
    f.set(json!({"key": "MODE", "value": "production"}))
        .await
        .expect(204, None);
    f.set(json!({"key": "TOKEN", "value": "t0p", "kind": "secret"}))
        .await
        .expect(204, None);
    f.set(json!({"key": "MODE", "value": "staging", "channel_id": f.next_id}))
        .await
        .expect(204, None);

    // A Deploy of the next channel (no operator runs here), held by the API's cache: the route answers for deploys
    // the channel's history still has.
    let deploys: Api<slipway_crds::Deploy> =
        Api::namespaced(f.api.kube.clone(), &f.alice.namespace);
    let mut written = slipway_crds::Deploy::new(
        "blog.next.snapshot",
        slipway_crds::DeploySpec {
            channel: "blog.next".into(),
            sha: Some("next".into()),
            git_ref: None,
            rewind_of: None,
            image: None,
        },
    );
    written.metadata.namespace = Some(f.alice.namespace.clone());
    let written = deploys.create(&PostParams::default(), &written).await?;
    let uid = written.metadata.uid.clone().unwrap_or_default();
    slipway_core::platform::cache::poll_for(std::time::Duration::from_secs(10), || {
        f.api.state.cache().holds_deploy(&uid).then_some(())
    })
    .await?;
    let (app_id, next_id, deploy) = (
        uuid::Uuid::parse_str(&f.app_id)?,
        uuid::Uuid::parse_str(&f.next_id)?,
        uuid::Uuid::parse_str(&uid)?,
    );
    let sources = EnvSources {
        app_id,
        namespace: &f.alice.namespace,
        app_secret: None,
        channel: Some((next_id, None)),
    };
    let (entries, _) = env::resolve_sources(
        f.api.state.db(),
        &f.api.kube,
        f.api.state.keyring(),
        &sources,
    )
    .await?;
    let system = env::resolve::system_keys(slipway_crds::Template::App);
    env::snapshot::record(
        f.api.state.db(),
        f.api.state.keyring(),
        deploy,
        app_id,
        next_id,
        &entries,
        &system,
    )
    .await?;

    // Later changes do not touch the snapshot.
    f.set(json!({"key": "MODE", "value": "changed", "channel_id": f.next_id}))
        .await
        .expect(204, None);
    let path = format!(
        "/apps/{}/channels/{}/deploys/{deploy}/env",
        f.app_id, f.next_id
    );
    let snap = f.api.get(&path, &f.alice).await.expect(200, None);
    assert_eq!(snap["deploy_id"], deploy.to_string());
    assert_eq!(
        snap["env"],
        json!([{"key": "MODE", "kind": "env", "source": "channel", "value": "staging"},
               {"key": "TOKEN", "kind": "secret", "source": "app", "value": null}])
    );
    let keys: Vec<&str> = snap["system_keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap())
        .collect();
    assert!(keys.contains(&"SVC_HTTP_PORT") && keys.contains(&"DATABASE_URL"));
    assert!(!snap.to_string().contains("t0p"));

    f.api
        .get(
            &format!(
                "/apps/{}/channels/{}/deploys/{}/env",
                f.app_id,
                f.next_id,
                uuid::Uuid::new_v4()
            ),
            &f.alice,
        )
        .await
        .expect(404, Some("not_found"));
    f.api
        .get(
            &format!(
                "/apps/{}/channels/{}/deploys/{deploy}/env",
                f.app_id, f.prod_id
            ),
            &f.alice,
        )
        .await
        .expect(404, Some("not_found"));
    Ok(())
}

#[tokio::test]
async fn a_static_deploy_ran_with_an_empty_environment_and_its_snapshot_says_so() -> Result<()> {
    let api = TestApi::start().await?;
    let alice = api.user("alice", "builder").await?;
    let app = api.create_app(&alice, "site", "static").await;
    let app_id = app["id"].as_str().unwrap();
    let prod_id = app["channels"][0]["id"].as_str().unwrap();
    api.post(
        &format!("/apps/{app_id}/env"),
        &alice,
        json!({"key": "MODE", "value": "production"}),
    )
    .await
    .expect(204, None);
    // A Deploy of prod (no operator runs here, and a static deploy records no snapshot: it starts no container).
    let deploys: Api<slipway_crds::Deploy> = Api::namespaced(api.kube.clone(), &alice.namespace);
    let mut written = slipway_crds::Deploy::new(
        "site.prod.first",
        slipway_crds::DeploySpec {
            channel: "site.prod".into(),
            sha: Some("master".into()),
            git_ref: None,
            rewind_of: None,
            image: None,
        },
    );
    written.metadata.namespace = Some(alice.namespace.clone());
    let written = deploys.create(&PostParams::default(), &written).await?;
    let uid = written.metadata.uid.clone().unwrap_or_default();
    slipway_core::platform::cache::poll_for(std::time::Duration::from_secs(10), || {
        api.state.cache().holds_deploy(&uid).then_some(())
    })
    .await?;
    let path = |deploy: &str| format!("/apps/{app_id}/channels/{prod_id}/deploys/{deploy}/env");
    let snap = api.get(&path(&uid), &alice).await.expect(200, None);
    assert_eq!(
        snap,
        json!({"deploy_id": uid, "env": [], "system_keys": []}),
        "the deploy exists and does not predate snapshots: it ran with nothing"
    );
    // A deploy the channel does not have is still 404.
    api.get(&path(&uuid::Uuid::new_v4().to_string()), &alice)
        .await
        .expect(404, Some("not_found"));
    Ok(())
}

#[tokio::test]
async fn key_rotation_reseals_every_value() -> Result<()> {
    use slipway_store::env::crypto::Keyring;
    let f = fixture().await?;
    f.set(json!({"key": "A", "value": "one"}))
        .await
        .expect(204, None);
    f.set(json!({"key": "B", "value": "two", "kind": "secret", "channel_id": f.next_id}))
        .await
        .expect(204, None);
    let new_line = Keyring::generate_line("next");
    let during = Keyring::parse(&format!("{new_line}\n{}", f.api.keyring_line))?;
    assert_eq!(
        slipway_store::env::store::reseal_all(f.api.state.db(), &during).await?,
        2
    );
    let ids: Vec<(String,)> = sqlx::query_as("SELECT DISTINCT key_id FROM env_vars")
        .fetch_all(f.api.state.db())
        .await?;
    assert_eq!(ids, [("next".to_owned(),)]);
    // The new key alone opens everything now, so the old one can go.
    let after = Keyring::parse(&new_line)?;
    let app_id = uuid::Uuid::parse_str(&f.app_id)?;
    let rows = slipway_store::env::store::rows(f.api.state.db(), app_id).await?;
    let values: Vec<String> = rows
        .iter()
        .map(|r| r.open(&after, app_id))
        .collect::<Result<_>>()?;
    assert_eq!(values, ["one", "two"]);
    Ok(())
}
