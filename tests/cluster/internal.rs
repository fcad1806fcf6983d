//! The internal listener against the real apiserver: callers prove who they are with ServiceAccount tokens the
//! apiserver minted (TokenRequest) and checks (TokenReview). The operator's identity reaches every internal route;
//! the edge's reads static sites' archives and reports bandwidth, and nothing else; no token, a token the apiserver rejects (garbage,
//! another audience, a deleted ServiceAccount's) and a valid token of an identity that plays no role get nothing.
//! Build pods' signed source URLs open one commit of one app until they expire. The public listener has no
//! internal route at all.

// Fixture helpers panic on a malformed response: in a test that is the failure to report.
#![allow(clippy::unwrap_used)]

use crate::support;

use anyhow::Result;
use axum::http::Method;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::Api;
use kube::api::DeleteParams;
use serde_json::{Value, json};
use slipway_internal::review::DEFAULT_AUDIENCE;
use slipway_internal::source_url::unix_now;
use slipway_testkit::TestNamespace;
use slipway_testkit::service_accounts::token_for;
use support::{Reply, TestApi, User};

/// An API with a static app and an `app` app, one commit in each.
struct Fixture {
    api: TestApi,
    alice: User,
    site_id: String,
    site_sha: String,
    code_id: String,
    code_prod_id: String,
    code_sha: String,
    /// The deploy id the env and log routes are called for.
    deploy: uuid::Uuid,
}

async fn fixture(prefix: &str) -> Result<Fixture> {
    let mut api = TestApi::start().await?;
    // Usage, which the edge's bandwidth feeds, needs the data server to measure databases.
    crate::support::postgres::attach(&mut api)?;
    let alice = api.user(prefix, "builder").await?;
    let site = api.create_app(&alice, "site", "static").await;
    let site_id = site["id"].as_str().unwrap().to_owned();
    let code = api.create_app(&alice, "code", "app").await;
    let code_id = code["id"].as_str().unwrap().to_owned();
    let code_prod_id = code["channels"][0]["id"].as_str().unwrap().to_owned();
    let site_sha = api
        .commit(&alice, &site_id, json!({"index.html": "<h1>site</h1>\n"}))
        .await;
    let code_sha = api
        .commit(
            &alice,
            &code_id,
            json!({"launch.sh": "#!/bin/sh\nexec true\n"}),
        )
        .await;
    Ok(Fixture {
        api,
        alice,
        site_id,
        site_sha,
        code_id,
        code_prod_id,
        code_sha,
        deploy: uuid::Uuid::new_v4(),
    })
}

/// Asserts `reply` is a refusal with `status` and `code`, naming `what` was called when it is not.
#[track_caller]
fn refused(reply: Reply, what: &str, status: u16, code: &str) {
    assert_eq!(reply.status.as_u16(), status, "{what}: {}", reply.body);
    reply.expect(status, Some(code));
}

/// The bytes each bandwidth report of [`Fixture::routes`] adds to the account.
const BANDWIDTH_REPORTED: u64 = 1234;

/// The routes the edge may call besides the operator.
const EDGE_ROUTES: [&str; 2] = ["site archive", "bandwidth"];

/// One internal route, called as a test would.
struct Route {
    name: &'static str,
    method: Method,
    path: String,
    body: Option<Value>,
    /// The status the operator gets.
    ok: u16,
}

impl Fixture {
    /// Every internal route, with arguments that succeed for a caller allowed to call it.
    fn routes(&self) -> Vec<Route> {
        let deploy = self.deploy;
        let route = |name, method, path: String, body, ok| Route {
            name,
            method,
            path,
            body,
            ok,
        };
        vec![
            route(
                "commits",
                Method::GET,
                format!("/internal/v1/apps/{}/commits/master", self.site_id),
                None,
                200,
            ),
            route(
                "site archive",
                Method::GET,
                format!(
                    "/internal/v1/apps/{}/archive/{}",
                    self.site_id, self.site_sha
                ),
                None,
                200,
            ),
            route(
                "source archive",
                Method::GET,
                format!(
                    "/internal/v1/apps/{}/archive/{}",
                    self.code_id, self.code_sha
                ),
                None,
                200,
            ),
            route(
                "env",
                Method::PUT,
                format!("/internal/v1/deploys/{deploy}/env"),
                Some(json!({
                    "app_id": self.code_id,
                    "channel_id": self.code_prod_id,
                    "system_keys": ["PORT"],
                })),
                200,
            ),
            route(
                "log",
                Method::POST,
                format!("/internal/v1/deploys/{deploy}/log"),
                Some(json!("a line")),
                204,
            ),
            route(
                "source URL",
                Method::POST,
                format!("/internal/v1/apps/{}/source-urls", self.code_id),
                Some(json!({"sha": self.code_sha})),
                200,
            ),
            route(
                "object store",
                Method::PUT,
                format!("/internal/v1/channels/{}/blob", self.code_prod_id),
                Some(json!({
                    "app_id": self.code_id,
                    "backend_bucket": format!("slipway-{}", self.code_prod_id),
                })),
                200,
            ),
            route(
                "object-store keys",
                Method::GET,
                format!(
                    "/internal/v1/channels/{}/blob/credentials",
                    self.code_prod_id
                ),
                None,
                200,
            ),
            route(
                "object store removal",
                Method::DELETE,
                format!("/internal/v1/channels/{}/blob", self.code_prod_id),
                None,
                204,
            ),
            route(
                "runtime container",
                Method::PUT,
                format!("/internal/v1/runtime/containers/c-{deploy}"),
                Some(json!({
                    "app_id": self.code_id,
                    "channel_id": self.code_prod_id,
                    "pod_name": "code-prod-1",
                    "deploy_id": null,
                    "running": true,
                    "status": "running",
                    "exit_code": null,
                    "oom_killed": false,
                    "started_at": null,
                    "finished_at": null,
                })),
                200,
            ),
            route(
                "runtime settle",
                Method::POST,
                "/internal/v1/runtime/settle".to_owned(),
                Some(json!({"container_ids": []})),
                200,
            ),
            route(
                "bandwidth",
                Method::POST,
                "/internal/v1/usage/bandwidth".to_owned(),
                Some(json!({"bytes": {self.alice.username.clone(): BANDWIDTH_REPORTED}})),
                204,
            ),
        ]
    }

    async fn call(&self, route: &Route, token: Option<&str>) -> Reply {
        self.api
            .internal_call(route.method.clone(), &route.path, token, route.body.clone())
            .await
    }

    /// Asks for a source URL as the operator.
    async fn mint(&self, app: &str, body: Value) -> Reply {
        let path = format!("/internal/v1/apps/{app}/source-urls");
        self.api
            .internal_call(
                Method::POST,
                &path,
                Some(&self.api.operator_token),
                Some(body),
            )
            .await
    }

    /// Calls every route with `token` and asserts the same refusal from each.
    async fn refused_everywhere(&self, token: Option<&str>, status: u16, code: &str) {
        for route in self.routes() {
            refused(self.call(&route, token).await, route.name, status, code);
        }
    }
}

#[tokio::test]
async fn the_operator_reaches_every_route_and_the_edge_only_site_archives_and_bandwidth()
-> Result<()> {
    let f = fixture("introles").await?;
    let operator = f.api.operator_token.clone();
    let edge = f.api.edge_token.clone();
    for route in f.routes() {
        let reply = f.call(&route, Some(&operator)).await;
        assert_eq!(
            reply.status.as_u16(),
            route.ok,
            "operator on {}: {}",
            route.name,
            reply.body
        );
        let reply = f.call(&route, Some(&edge)).await;
        if !EDGE_ROUTES.contains(&route.name) {
            refused(reply, route.name, 403, "permission_denied");
            continue;
        }
        assert_eq!(
            reply.status.as_u16(),
            route.ok,
            "edge on {}: {}",
            route.name,
            reply.body
        );
        if route.name == "site archive" {
            assert!(reply.body.as_str().unwrap().contains("index.html"));
        }
    }
    // The operator's line is the whole log: the edge's refused call wrote nothing.
    let written = slipway_store::db::deploy_logs::size(f.api.state.db(), f.deploy).await?;
    assert_eq!(written, "\"a line\"".len() as u64);
    // Both reports count: the operator's and the edge's.
    let usage = f.api.get("/me/usage", &f.alice).await.expect(200, None);
    assert_eq!(usage["bandwidth_month_bytes"], 2 * BANDWIDTH_REPORTED);
    Ok(())
}

#[tokio::test]
async fn callers_without_a_role_or_a_valid_token_get_nothing() -> Result<()> {
    let f = fixture("intrefusals").await?;
    let kube = &f.api.kube;
    let ns = f.api.callers_namespace.name().to_owned();

    // No token, an empty one, and a token that is not one.
    f.refused_everywhere(None, 401, "auth_required").await;
    f.refused_everywhere(Some("not-a-token"), 401, "token_invalid")
        .await;
    let reply = f
        .api
        .internal_call(
            Method::GET,
            &format!("/internal/v1/apps/{}/commits/master", f.site_id),
            Some(""),
            None,
        )
        .await;
    assert_eq!(reply.status.as_u16(), 401, "{}", reply.body);

    // The operator's own ServiceAccount, but a token minted for another audience (here the apiserver's).
    let elsewhere = token_for(
        kube,
        &ns,
        "operator",
        "https://kubernetes.default.svc.cluster.local",
    )
    .await?;
    f.refused_everywhere(Some(&elsewhere), 401, "token_invalid")
        .await;

    // Valid tokens for the internal audience of identities that play no role: another ServiceAccount beside the
    // operator's, and one named `operator` in another namespace.
    let stranger = token_for(kube, &ns, "stranger", DEFAULT_AUDIENCE).await?;
    f.refused_everywhere(Some(&stranger), 403, "permission_denied")
        .await;
    let foreign_ns = TestNamespace::create(kube, "internal-foreign").await?;
    let foreign = token_for(kube, foreign_ns.name(), "operator", DEFAULT_AUDIENCE).await?;
    f.refused_everywhere(Some(&foreign), 403, "permission_denied")
        .await;

    // A token of a ServiceAccount that was deleted since is no longer valid.
    let ghost = token_for(kube, &ns, "ghost", DEFAULT_AUDIENCE).await?;
    Api::<ServiceAccount>::namespaced(kube.clone(), &ns)
        .delete("ghost", &DeleteParams::default())
        .await?;
    // The apiserver's token authenticator learns of the deletion from its own cache, moments later; the API is
    // asked once the apiserver refuses the token (an answer it accepted would be trusted for a minute).
    let reviews: Api<TokenReview> = Api::all(kube.clone());
    let review = TokenReview {
        spec: TokenReviewSpec {
            token: Some(ghost.clone()),
            audiences: Some(vec![DEFAULT_AUDIENCE.to_owned()]),
        },
        ..Default::default()
    };
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let reviewed = reviews.create(&Default::default(), &review).await?;
        if reviewed.status.and_then(|s| s.authenticated) != Some(true) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the apiserver still accepts the deleted ServiceAccount's token"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    f.refused_everywhere(Some(&ghost), 401, "token_invalid")
        .await;
    Ok(())
}

#[tokio::test]
async fn signed_source_urls_open_one_commit_until_they_expire() -> Result<()> {
    let f = fixture("intsources").await?;
    let url = f
        .mint(&f.code_id, json!({"sha": f.code_sha}))
        .await
        .expect(200, None);
    let path = url["path"].as_str().unwrap().to_owned();
    let expires = url["expires"].as_u64().unwrap();
    let now = unix_now();
    assert!(
        (now + 3590..=now + 3600).contains(&expires),
        "valid for an hour: {expires} at {now}"
    );
    assert!(path.starts_with(&format!(
        "/internal/v1/apps/{}/archive/{}?",
        f.code_id, f.code_sha
    )));

    // With no token at all, the URL opens its commit.
    let reply = f.api.internal_call(Method::GET, &path, None, None).await;
    assert_eq!(reply.status.as_u16(), 200, "{}", reply.body);
    assert!(reply.body.as_str().unwrap().contains("launch.sh"));

    // It opens nothing else: another commit of the same app, the same commit named under another app, a later
    // expiry.
    let second = f
        .api
        .commit(
            &f.alice,
            &f.code_id,
            json!({"launch.sh": "#!/bin/sh\nexec false\n"}),
        )
        .await;
    let refused = [
        path.replace(&f.code_sha, &second),
        path.replace(&f.code_id, &f.site_id),
        path.replace(
            &format!("expires={expires}"),
            &format!("expires={}", expires + 60),
        ),
    ];
    for other in refused {
        f.api
            .internal_call(Method::GET, &other, None, None)
            .await
            .expect(401, Some("token_invalid"));
    }

    // Expired, or signed with another key: refused.
    let key = f.api.state.internal().source_key();
    let (app, sha) = (f.code_id.as_str(), f.code_sha.as_str());
    let past = now - 1;
    let expired = format!(
        "/internal/v1/apps/{app}/archive/{sha}?expires={past}&signature={}",
        key.sign(app, sha, past)
    );
    f.api
        .internal_call(Method::GET, &expired, None, None)
        .await
        .expect(401, Some("token_invalid"));
    let forged = TestApi::source_key().signed_path(app, sha, now).path;
    f.api
        .internal_call(Method::GET, &forged, None, None)
        .await
        .expect(401, Some("token_invalid"));

    // The public listener does not serve it.
    f.api
        .call(Method::GET, &path, None, None)
        .await
        .expect(404, Some("not_found"));

    // Minting checks what it signs.
    f.mint(&f.code_id, json!({"sha": "master"}))
        .await
        .expect(400, Some("bad_request"));
    f.mint(&f.code_id, json!({"sha": "0".repeat(40)}))
        .await
        .expect(404, Some("not_found"));
    f.mint(
        &uuid::Uuid::new_v4().to_string(),
        json!({"sha": f.code_sha}),
    )
    .await
    .expect(404, Some("not_found"));
    Ok(())
}

#[tokio::test]
async fn each_listener_serves_only_its_own_routes() -> Result<()> {
    let f = fixture("intlisteners").await?;
    let operator = f.api.operator_token.clone();
    for route in f.routes() {
        let reply = f
            .api
            .call(
                route.method.clone(),
                &route.path,
                Some(&operator),
                route.body.clone(),
            )
            .await;
        refused(reply, route.name, 404, "not_found");
    }
    // The internal listener answers its health check and none of the public routes.
    let health = f
        .api
        .internal_call(Method::GET, "/healthz", None, None)
        .await;
    assert_eq!(health.status.as_u16(), 200);
    f.api
        .internal_call(Method::GET, "/apps", Some(&f.alice.token), None)
        .await
        .expect(404, Some("not_found"));
    f.api
        .internal_call(Method::GET, "/openapi.json", None, None)
        .await
        .expect(404, Some("not_found"));
    Ok(())
}

/// An app and channel the apiserver has just stored, which this replica's cache has not seen yet, are found rather
/// than answered 404: the operator names only what it has seen, and a 404 would make it record the channel's
/// database as failed until its next sweep. Each is asked for the moment the apiserver has answered its creation.
#[tokio::test]
async fn an_app_the_apiserver_just_stored_is_found_before_the_cache_saw_it() -> Result<()> {
    let api = TestApi::start().await?;
    let alice = api.user("intlag", "builder").await?;
    let apps: Api<slipway_crds::App> = Api::namespaced(api.kube.clone(), &alice.namespace);
    let channels: Api<slipway_crds::Channel> = Api::namespaced(api.kube.clone(), &alice.namespace);
    for i in 0..3 {
        let name = format!("fresh{i}");
        let app = json!({"apiVersion": "slipway.dev/v1alpha1", "kind": "App", "metadata": {"name": name},
                         "spec": {"owner": alice.username, "template": "app"}});
        let app = apps
            .create(&Default::default(), &serde_json::from_value(app)?)
            .await?;
        let id = app.metadata.uid.unwrap();
        let reply = api
            .internal_call(
                Method::POST,
                &format!("/internal/v1/apps/{id}/source-urls"),
                Some(&api.operator_token),
                Some(json!({"sha": "0".repeat(40)})),
            )
            .await;
        // The app is found: what it lacks is the repository the API makes for the apps it creates.
        assert!(
            reply.body.to_string().contains("repository"),
            "{}",
            reply.body
        );
        refused(reply, "source URL", 404, "not_found");

        let channel = json!({"apiVersion": "slipway.dev/v1alpha1", "kind": "Channel",
                             "metadata": {"name": format!("{name}.prod")},
                             "spec": {"app": name, "gitRefBinding": "branch:master"}});
        let channel = channels
            .create(&Default::default(), &serde_json::from_value(channel)?)
            .await?;
        let reply = api
            .internal_call(
                Method::PUT,
                &format!("/internal/v1/deploys/{}/env", uuid::Uuid::new_v4()),
                Some(&api.operator_token),
                Some(
                    json!({"app_id": id, "channel_id": channel.metadata.uid.unwrap(),
                            "system_keys": ["PORT"]}),
                ),
            )
            .await;
        assert_eq!(reply.status.as_u16(), 200, "{}", reply.body);
    }
    Ok(())
}
