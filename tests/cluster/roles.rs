//! Shared apps: the owner shares an app with an admin and a member, and every app route in the OpenAPI document is
//! called by the owner, the admin, the member and a stranger. Each route's weakest permitted role is stated here,
//! independently of the code's own table; a role below it gets 403 `permission_denied` (404 `not_found` on the
//! mirror's routes, whose rows say so), a stranger 404 `not_found`,
//! and a permitted role the route's success. A route missing from the table fails the test, so every new app route
//! takes a stand.
//!
//! Needs `hack/pebble.sh start` and its `env` (hack/test.sh starts it for this tier): the operator checks the shared
//! app's custom domains against its test DNS. The channels' buckets are on a versitygw backend of the test's own.

// A test fails loudly on a reply of the wrong shape.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::Result;
use axum::http::Method;
use serde_json::{Value, json};
use support::{TestApi, User};

/// The roles, weakest first; a stranger has none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Who {
    Stranger,
    Member,
    Admin,
    Owner,
}

/// Every app route and the weakest role that may call it.
const ROUTES: &[(&str, &str, Who)] = &[
    ("get", "/apps/{app_id}", Who::Member),
    ("get", "/apps/{app_id}/activity", Who::Member),
    ("get", "/apps/{app_id}/health", Who::Member),
    ("get", "/apps/{app_id}/stats", Who::Member),
    ("get", "/apps/{app_id}/feedback", Who::Member),
    ("post", "/apps/{app_id}/feedback", Who::Member),
    ("get", "/apps/{app_id}/threads", Who::Member),
    ("post", "/apps/{app_id}/threads", Who::Member),
    ("get", "/apps/{app_id}/threads/{number}/notes", Who::Member),
    ("post", "/apps/{app_id}/threads/{number}/notes", Who::Member),
    (
        "put",
        "/apps/{app_id}/threads/{number}/notes/{note_id}/vote",
        Who::Member,
    ),
    ("patch", "/apps/{app_id}", Who::Admin),
    ("delete", "/apps/{app_id}", Who::Owner),
    ("get", "/apps/{app_id}/channels", Who::Member),
    ("post", "/apps/{app_id}/channels", Who::Admin),
    ("get", "/apps/{app_id}/channels/{channel_id}", Who::Member),
    ("delete", "/apps/{app_id}/channels/{channel_id}", Who::Admin),
    (
        "get",
        "/apps/{app_id}/channels/{channel_id}/images",
        Who::Member,
    ),
    (
        "get",
        "/apps/{app_id}/channels/{channel_id}/code/download",
        Who::Member,
    ),
    (
        "post",
        "/apps/{app_id}/channels/{channel_id}/deploy",
        Who::Member,
    ),
    (
        "post",
        "/apps/{app_id}/channels/{channel_id}/rewind",
        Who::Member,
    ),
    (
        "get",
        "/apps/{app_id}/channels/{channel_id}/logs",
        Who::Member,
    ),
    (
        "get",
        "/apps/{app_id}/channels/{channel_id}/deploys",
        Who::Member,
    ),
    (
        "post",
        "/apps/{app_id}/channels/{channel_id}/runtime/log",
        Who::Member,
    ),
    (
        "get",
        "/apps/{app_id}/channels/{channel_id}/deploys/{deploy_id}/env",
        Who::Member,
    ),
    (
        "get",
        "/apps/{app_id}/channels/{channel_id}/domains",
        Who::Member,
    ),
    (
        "post",
        "/apps/{app_id}/channels/{channel_id}/domains",
        Who::Admin,
    ),
    (
        "post",
        "/apps/{app_id}/channels/{channel_id}/domains/{domain}/verify",
        Who::Admin,
    ),
    (
        "delete",
        "/apps/{app_id}/channels/{channel_id}/domains/{domain}",
        Who::Admin,
    ),
    (
        "get",
        "/apps/{app_id}/channels/{channel_id}/blob",
        Who::Member,
    ),
    (
        "post",
        "/apps/{app_id}/channels/{channel_id}/blob/credentials",
        Who::Admin,
    ),
    (
        "get",
        "/apps/{app_id}/channels/{channel_id}/postgres",
        Who::Member,
    ),
    (
        "post",
        "/apps/{app_id}/channels/{channel_id}/postgres/reset",
        Who::Admin,
    ),
    (
        "get",
        "/apps/{app_id}/channels/{channel_id}/postgres/dump",
        Who::Admin,
    ),
    (
        "get",
        "/apps/{app_id}/channels/{channel_id}/postgres/snapshots",
        Who::Member,
    ),
    (
        "get",
        "/apps/{app_id}/channels/{channel_id}/postgres/snapshots/{snapshot_id}/download",
        Who::Admin,
    ),
    (
        "post",
        "/apps/{app_id}/channels/{channel_id}/postgres/snapshots/{snapshot_id}/download-token",
        Who::Admin,
    ),
    (
        "post",
        "/apps/{app_id}/channels/{channel_id}/postgres/restore",
        Who::Admin,
    ),
    (
        "get",
        "/apps/{app_id}/channels/{channel_id}/blob/snapshots",
        Who::Member,
    ),
    (
        "get",
        "/apps/{app_id}/channels/{channel_id}/blob/snapshots/{snapshot_id}/download",
        Who::Admin,
    ),
    (
        "post",
        "/apps/{app_id}/channels/{channel_id}/blob/snapshots/{snapshot_id}/download-token",
        Who::Admin,
    ),
    (
        "post",
        "/apps/{app_id}/channels/{channel_id}/blob/restore",
        Who::Admin,
    ),
    // An export holds every row and object of the app, like a channel's dump and checkpoints.
    ("post", "/apps/{app_id}/exports", Who::Admin),
    ("get", "/apps/{app_id}/exports/{export_id}", Who::Admin),
    (
        "get",
        "/apps/{app_id}/exports/{export_id}/download",
        Who::Admin,
    ),
    (
        "post",
        "/apps/{app_id}/channels/{channel_id}/forward",
        Who::Admin,
    ),
    (
        "delete",
        "/apps/{app_id}/channels/{channel_id}/forward",
        Who::Admin,
    ),
    ("get", "/apps/{app_id}/forwards", Who::Member),
    ("get", "/apps/{app_id}/tree", Who::Member),
    ("get", "/apps/{app_id}/blob", Who::Member),
    ("post", "/apps/{app_id}/changeset", Who::Member),
    ("get", "/apps/{app_id}/env", Who::Member),
    ("post", "/apps/{app_id}/env", Who::Member),
    ("delete", "/apps/{app_id}/env/{key}", Who::Member),
    ("get", "/apps/{app_id}/env/{key}/value", Who::Admin),
    ("get", "/apps/{app_id}/members", Who::Member),
    ("put", "/apps/{app_id}/members/{username}", Who::Owner),
    ("delete", "/apps/{app_id}/members/{username}", Who::Owner),
    ("get", "/apps/{app_id}/github", Who::Member),
    ("post", "/apps/{app_id}/github/connect", Who::Owner),
    ("post", "/apps/{app_id}/github/sync", Who::Admin),
    ("delete", "/apps/{app_id}/github", Who::Owner),
];

/// Routes whose rows say a role below the weakest is answered 404, as a stranger is ("404 (not found or not
/// owner)"), not 403.
const HIDDEN_BELOW_ROLE: &[(&str, &str)] = &[
    ("post", "/apps/{app_id}/github/connect"),
    ("post", "/apps/{app_id}/github/sync"),
    ("delete", "/apps/{app_id}/github"),
];

/// Where a mirror connected for the matrix points: loopback (allowed in tests), where nothing listens.
const NOWHERE: &str = "ssh://git@127.0.0.1:9/x.git";

struct Fixture {
    api: TestApi,
    owner: User,
    admin: User,
    member: User,
    stranger: User,
    /// Someone the owner shares the app with during the test.
    newcomer: User,
    app_id: String,
    channel_id: String,
    deploy_id: String,
    /// A custom domain attached to the prod channel.
    domain: String,
    /// Makes this run's domain names its own (a domain is unique across accounts).
    run: String,
    /// The object store the channels' buckets are on (kept running for the test).
    _store: support::blob::ObjectStore,
    /// An `app` app shared the same way, for the SQL database routes (static channels have no database).
    sql_app_id: String,
    sql_channel_id: String,
    /// A pre-deploy snapshot of its database.
    snapshot_id: String,
    /// A ready export of the static app.
    export_id: String,
}

impl Fixture {
    fn user(&self, who: Who) -> &User {
        match who {
            Who::Owner => &self.owner,
            Who::Admin => &self.admin,
            Who::Member => &self.member,
            Who::Stranger => &self.stranger,
        }
    }

    fn app(&self, rest: &str) -> String {
        format!("/apps/{}{rest}", self.app_id)
    }

    async fn as_owner(&self, method: Method, path: &str, body: Option<Value>) -> Value {
        let reply = self
            .api
            .call(method.clone(), path, Some(&self.owner.token), body)
            .await;
        assert!(
            reply.status.is_success(),
            "{method} {path} as the owner: {:?}",
            reply.body
        );
        reply.body
    }

    /// Records a running container generation of the prod channel, as the operator's log archive would.
    async fn record_generation(&self) {
        let facts = slipway_store::db::runtime_logs::Facts {
            app_id: self.app_id.parse().unwrap(),
            channel_id: self.channel_id.parse().unwrap(),
            container_id: format!("c-{}", self.channel_id),
            pod_name: "web-prod-1".into(),
            deploy_id: None,
            running: true,
            status: "running".into(),
            exit_code: None,
            oom_killed: false,
            started_at: None,
            finished_at: None,
        };
        slipway_store::db::runtime_logs::upsert(self.api.state.db(), &facts)
            .await
            .unwrap();
    }

    /// A channel of the app to delete.
    /// The prod channel's domains path.
    fn domains(&self) -> String {
        self.app(&format!("/channels/{}/domains", self.channel_id))
    }

    /// A domain of this run, named for `what`.
    fn domain_named(&self, what: &str) -> String {
        format!("{what}-{}.example", self.run)
    }

    async fn spare_channel(&self, tag: &str) -> String {
        let channel = self
            .as_owner(
                Method::POST,
                &self.app("/channels"),
                Some(json!({"name": format!("spare-{tag}"), "git_ref_binding": format!("branch:spare-{tag}")})),
            )
            .await;
        channel["id"].as_str().unwrap().to_owned()
    }

    /// The concrete request of `(method, route)` as `who` makes it, after what a permitted call needs set up;
    /// and the status a permitted call answers.
    async fn request(
        &self,
        method: &str,
        route: &str,
        who: Who,
        permitted: bool,
    ) -> (String, Option<Value>, u16) {
        let tag = format!("{who:?}").to_lowercase();
        // SQL routes and checkpoint routes go to the app with a database (its checkpoint has both legs).
        let (app_id, channel_id) = if route.contains("/postgres")
            || route.contains("/blob/snapshots")
            || route.contains("/blob/restore")
        {
            (&self.sql_app_id, &self.sql_channel_id)
        } else {
            (&self.app_id, &self.channel_id)
        };
        let mut path = route
            .replace("{app_id}", app_id)
            .replace("{channel_id}", channel_id)
            .replace("{deploy_id}", &self.deploy_id)
            .replace("{snapshot_id}", &self.snapshot_id)
            .replace("{export_id}", &self.export_id)
            .replace("{key}", "SHARED_KEY")
            .replace("{domain}", &self.domain)
            .replace("{username}", &self.newcomer.username);
        if route.contains("{number}") {
            // A thread with one note, opened by the owner.
            let thread = self
                .as_owner(
                    Method::POST,
                    &self.app("/threads"),
                    Some(json!({"title": tag})),
                )
                .await;
            let number = thread["number"].to_string();
            let note = self
                .as_owner(
                    Method::POST,
                    &self.app(&format!("/threads/{number}/notes")),
                    Some(json!({"body": tag})),
                )
                .await;
            path = path
                .replace("{number}", &number)
                .replace("{note_id}", &note["id"].to_string());
        }
        let mut body = None;
        let mut success = if method == "delete" { 204 } else { 200 };
        match (method, route) {
            ("post", "/apps/{app_id}/feedback") => {
                body = Some(json!({"message": tag}));
                success = 201;
            }
            ("post", "/apps/{app_id}/exports") => success = 202,
            ("post", "/apps/{app_id}/threads") => {
                body = Some(json!({"title": tag}));
                success = 201;
            }
            ("post", "/apps/{app_id}/threads/{number}/notes") => {
                body = Some(json!({"body": tag}));
                success = 201;
            }
            ("put", "/apps/{app_id}/threads/{number}/notes/{note_id}/vote") => {
                body = Some(json!({"value": 1}));
            }
            ("patch", "/apps/{app_id}") => body = Some(json!({"port_forwarding_enabled": false})),
            ("delete", "/apps/{app_id}") if permitted => {
                let spare = self
                    .api
                    .create_app(&self.owner, &format!("spare{tag}"), "static")
                    .await;
                path = format!("/apps/{}", spare["id"].as_str().unwrap());
            }
            ("post", "/apps/{app_id}/channels") => {
                body = Some(
                    json!({"name": format!("made-{tag}"), "git_ref_binding": format!("branch:made-{tag}")}),
                );
            }
            ("delete", "/apps/{app_id}/channels/{channel_id}") if permitted => {
                path = self.app(&format!("/channels/{}", self.spare_channel(&tag).await));
            }
            ("get", "/apps/{app_id}/channels/{channel_id}/logs") => {
                path.push_str(&format!("?deploy={}", self.deploy_id))
            }
            ("get", "/apps/{app_id}/blob") => path.push_str("?path=index.html"),
            ("post", "/apps/{app_id}/channels/{channel_id}/deploy") => {
                body = Some(json!({"ref": "master"}))
            }
            ("post", "/apps/{app_id}/channels/{channel_id}/runtime/log") => {
                // The status facts of a generation the log archive recorded.
                body = Some(json!({}));
                self.record_generation().await;
            }
            ("post", "/apps/{app_id}/changeset") => {
                body = Some(
                    json!({"message": format!("by {tag}"), "changes": {format!("{tag}.txt"): tag}}),
                );
            }
            ("post", "/apps/{app_id}/env") => {
                body = Some(json!({"key": format!("KEY_{}", tag.to_uppercase()), "value": tag}));
                success = 204;
            }
            ("delete", "/apps/{app_id}/env/{key}") => {
                path = self.app(&format!("/env/GONE_{}", tag.to_uppercase()))
            }
            ("post", "/apps/{app_id}/channels/{channel_id}/domains") => {
                body = Some(json!({"domain": self.domain_named(&format!("made{tag}"))}));
                success = 201;
            }
            ("post", "/apps/{app_id}/channels/{channel_id}/domains/{domain}/verify")
            | ("post", "/apps/{app_id}/channels/{channel_id}/blob/credentials") => {
                body = Some(json!({}))
            }
            ("delete", "/apps/{app_id}/channels/{channel_id}/domains/{domain}") if permitted => {
                let spare = self.domain_named(&format!("gone{tag}"));
                self.as_owner(
                    Method::POST,
                    &self.domains(),
                    Some(json!({"domain": spare})),
                )
                .await;
                path = format!("{}/{spare}", self.domains());
                success = 200;
            }
            (
                "post",
                "/apps/{app_id}/channels/{channel_id}/postgres/snapshots/{snapshot_id}/download-token",
            )
            | (
                "post",
                "/apps/{app_id}/channels/{channel_id}/blob/snapshots/{snapshot_id}/download-token",
            ) => {
                body = Some(json!({}));
                success = 201;
            }
            ("post", "/apps/{app_id}/channels/{channel_id}/blob/restore") => {
                body =
                    Some(json!({"confirm_channel_name": "prod", "snapshot_id": self.snapshot_id}));
            }
            ("post", "/apps/{app_id}/channels/{channel_id}/postgres/restore") => {
                body = Some(json!({
                    "confirm_db_name": format!("sharedsql_{}", self.owner.username),
                    "snapshot_id": self.snapshot_id,
                }));
            }
            ("post", "/apps/{app_id}/channels/{channel_id}/postgres/reset") => {
                body =
                    Some(json!({"confirm_db_name": format!("sharedsql_{}", self.owner.username)}));
                success = 204;
            }
            // The shared app is static: a permitted rewind passes the deploy route's checks and is then refused,
            // as a static app has no images.
            ("post", "/apps/{app_id}/channels/{channel_id}/rewind") => success = 409,
            // The shared app is static: a permitted expose passes the role check and is then refused for that.
            ("post", "/apps/{app_id}/channels/{channel_id}/forward") => {
                body = Some(json!({}));
                success = 400;
            }
            // A Forward written with kubectl, for a permitted unexpose to remove.
            ("delete", "/apps/{app_id}/channels/{channel_id}/forward") if permitted => {
                self.forward_by_hand().await;
            }
            ("put", "/apps/{app_id}/members/{username}") => body = Some(json!({"role": "member"})),
            ("delete", "/apps/{app_id}/members/{username}") if permitted => {
                self.as_owner(Method::PUT, &path, Some(json!({"role": "member"})))
                    .await;
            }
            ("post", "/apps/{app_id}/github/connect") => {
                body = Some(json!({"remote_url": NOWHERE}))
            }
            ("post", "/apps/{app_id}/github/sync") | ("delete", "/apps/{app_id}/github")
                if permitted =>
            {
                self.as_owner(
                    Method::POST,
                    &self.app("/github/connect"),
                    Some(json!({"remote_url": NOWHERE})),
                )
                .await;
                if method == "post" {
                    success = 200;
                }
            }
            _ => {}
        }
        (path, body, success)
    }

    /// A Forward of the prod channel, as `kubectl apply` would write it.
    async fn forward_by_hand(&self) {
        let forwards: kube::Api<slipway_crds::Forward> =
            kube::Api::namespaced(self.api.kube.clone(), &self.owner.namespace);
        let channel = self
            .api
            .state
            .cache()
            .channels_of(&self.owner.namespace, "shared")
            .into_iter()
            .find(|c| c.metadata.uid.as_deref() == Some(self.channel_id.as_str()))
            .unwrap();
        let name = channel.metadata.name.clone().unwrap();
        forwards
            .create(
                &Default::default(),
                &serde_json::from_value(json!({
                    "apiVersion": "slipway.dev/v1alpha1", "kind": "Forward",
                    "metadata": {"name": name},
                    "spec": {"channel": name, "allowCidrs": []},
                }))
                .unwrap(),
            )
            .await
            .unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while self
            .api
            .state
            .cache()
            .forward_of(&self.owner.namespace, &name)
            .is_none()
        {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the Forward never reached the cache"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Puts back what a permitted call changed that later calls rely on: no mirror connected, no export in flight.
    async fn tidy(&self, method: &str, route: &str) {
        if (method, route) == ("post", "/apps/{app_id}/exports") {
            exports_settled(&self.api, &self.app_id).await;
        }
        if matches!(
            (method, route),
            ("post", "/apps/{app_id}/github/connect") | ("post", "/apps/{app_id}/github/sync")
        ) {
            self.api
                .call(
                    Method::DELETE,
                    &self.app("/github"),
                    Some(&self.owner.token),
                    None,
                )
                .await
                .expect(204, None);
        }
    }
}

/// Waits until no export of `app_id` is in flight.
async fn exports_settled(api: &TestApi, app_id: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let in_flight: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM exports WHERE app_id = $1 AND status IN ('queued', 'running')",
        )
        .bind(uuid::Uuid::parse_str(app_id).unwrap())
        .fetch_one(api.state.db())
        .await
        .unwrap();
        if in_flight == 0 {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "an export of {app_id} is still in flight"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn fixture() -> Result<Fixture> {
    let mut api = TestApi::start().await?;
    let owner = api.user("owner", "builder").await?;
    let admin = api.user("admin", "basic").await?;
    let member = api.user("member", "basic").await?;
    let stranger = api.user("stranger", "basic").await?;
    let newcomer = api.user("newcomer", "basic").await?;
    let app = api.create_app(&owner, "shared", "static").await;
    let app_id = app["id"].as_str().unwrap().to_owned();
    let channel_id = app["channels"][0]["id"].as_str().unwrap().to_owned();
    let sql_app = api.create_app(&owner, "sharedsql", "app").await;
    let sql_app_id = sql_app["id"].as_str().unwrap().to_owned();
    let sql_channel_id = sql_app["channels"][0]["id"].as_str().unwrap().to_owned();
    support::postgres::attach(&mut api)?;
    for shared in [&app_id, &sql_app_id] {
        for (user, role) in [(&admin, "admin"), (&member, "member")] {
            let added = api
                .call(
                    Method::PUT,
                    &format!("/apps/{shared}/members/{}", user.username),
                    Some(&owner.token),
                    Some(json!({"role": role})),
                )
                .await
                .expect(200, None);
            assert_eq!(
                added,
                json!({"username": user.username, "role": role, "created_at": added["created_at"]})
            );
        }
    }
    // Real values of the owner's for every parameter: a deployed commit, a variable, a deploy with its env.
    api.commit(&owner, &app_id, json!({"index.html": "<h1>shared</h1>"}))
        .await;
    api.post(
        &format!("/apps/{app_id}/env"),
        &owner,
        json!({"key": "SHARED_KEY", "value": "s3cret", "kind": "secret"}),
    )
    .await
    .expect(204, None);
    // The operator checks domains against the test DNS, where nothing is set: a verify answers at once, pending;
    // and it makes each channel's bucket on an object store of the test's own.
    let store = support::blob::ObjectStore::start(&mut api, "127.0.0.1").await?;
    api.start_nodeless_operator_with_postgres(
        &owner.namespace,
        support::https::domains_config(&owner.namespace, false)?,
        Some(store.settings()),
        support::postgres::settings()?,
    )
    .await?;
    let run = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    let domain = format!("shared-{run}.example");
    api.post(
        &format!("/apps/{app_id}/channels/{channel_id}/domains"),
        &owner,
        json!({"domain": domain}),
    )
    .await
    .expect(201, None);
    let deploy_id = api
        .deploy(&owner, &app_id, &channel_id, json!({"ref": "master"}))
        .await;
    let log = api
        .finished_deploy(
            &owner,
            &app_id,
            &channel_id,
            &deploy_id,
            Duration::from_secs(60),
        )
        .await?;
    assert_eq!(log["status"], "success", "{log}");
    let database = format!("/apps/{sql_app_id}/channels/{sql_channel_id}/postgres");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while api.get(&database, &owner).await.body["status"] != "ready" {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the shared app's database never became ready"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The checkpoint below has a bucket leg once the shared SQL app's bucket is ready.
    let sql_bucket = format!("/apps/{sql_app_id}/channels/{sql_channel_id}/blob");
    while api.get(&sql_bucket, &owner).await.body["status"] != "ready" {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the shared SQL app's bucket never became ready"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Snapshots go to the object store's backend; the shared SQL app has one, and allows restoring its prod.
    let archive = slipway_postgres::archive::Archive::new(
        &slipway_backends::object_store::S3Endpoint {
            url: store.backend.url.clone(),
            access_key_id: store.backend.access_key_id.clone(),
            secret_access_key: store.backend.secret_access_key.clone(),
        },
        slipway_postgres::archive::system_bucket("slipway-"),
    );
    archive.ensure_bucket().await?;
    api.enable(|features| features.snapshot_archive = Some(archive));
    let operator =
        slipway_internal::InternalClient::new(api.operator_endpoint(&api.serve_internal().await?));
    let snapshot_id = match support::pre_deploy_checkpoint(
        &operator,
        &uuid::Uuid::new_v4().to_string(),
        &slipway_internal::protocol::PreDeploySnapshotRequest {
            app_id: sql_app_id.clone(),
            channel_id: sql_channel_id.clone(),
            git_sha: None,
        },
    )
    .await?
    {
        slipway_internal::protocol::PreDeploySnapshot::Taken { snapshot_id } => snapshot_id,
        other => anyhow::bail!("the shared app's snapshot was not taken: {other:?}"),
    };
    api.post(
        &format!("/apps/{sql_app_id}/env"),
        &owner,
        json!({"key": "SVC_ALLOW_PROD_RESTORE", "value": "1"}),
    )
    .await
    .expect(204, None);
    let bucket = format!("/apps/{app_id}/channels/{channel_id}/blob");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while api.get(&bucket, &owner).await.body["status"] != "ready" {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the channel's bucket never became ready"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    slipway_store::env::snapshot::record(
        api.state.db(),
        api.state.keyring(),
        deploy_id.parse()?,
        app_id.parse()?,
        channel_id.parse()?,
        &[],
        &["PORT"],
    )
    .await?;
    // An export of the static app, ready, for the status and download routes.
    let export = api
        .post(&format!("/apps/{app_id}/exports"), &owner, json!({}))
        .await
        .expect(202, None);
    let export_id = export["export_id"].as_str().unwrap().to_owned();
    exports_settled(&api, &app_id).await;
    let settled = api
        .get(&format!("/apps/{app_id}/exports/{export_id}"), &owner)
        .await
        .expect(200, None);
    assert_eq!(settled["status"], "ready", "{settled}");
    Ok(Fixture {
        api,
        owner,
        admin,
        member,
        stranger,
        newcomer,
        app_id,
        channel_id,
        deploy_id,
        domain,
        run,
        _store: store,
        sql_app_id,
        sql_channel_id,
        snapshot_id,
        export_id,
    })
}

#[tokio::test]
async fn every_app_route_answers_each_role_as_the_table_says() -> Result<()> {
    let fx = fixture().await?;
    let doc = serde_json::to_value(slipway_api::routes::openapi())?;
    let mut documented = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        if path.contains("{app_id}") {
            for method in item.as_object().unwrap().keys() {
                documented.insert((method.clone(), path.clone()));
            }
        }
    }
    let tabled: BTreeSet<_> = ROUTES
        .iter()
        .map(|(m, p, _)| (m.to_string(), p.to_string()))
        .collect();
    assert_eq!(
        documented, tabled,
        "every app route of the OpenAPI document is in the table, and nothing else"
    );

    let mut calls = 0;
    for &(method, route, weakest) in ROUTES {
        for who in [Who::Stranger, Who::Member, Who::Admin, Who::Owner] {
            let permitted = who >= weakest;
            let (path, body, success) = fx.request(method, route, who, permitted).await;
            let m = Method::from_bytes(method.to_uppercase().as_bytes())?;
            let reply = fx.api.call(m, &path, Some(&fx.user(who).token), body).await;
            let context = format!(
                "{method} {route} as {who:?}: {} {:?}",
                reply.status, reply.body
            );
            match who {
                Who::Stranger => {
                    assert_eq!(reply.status, 404, "{context}");
                    assert_eq!(reply.body["error"]["code"], "not_found", "{context}");
                }
                _ if !permitted && HIDDEN_BELOW_ROLE.contains(&(method, route)) => {
                    assert_eq!(reply.status, 404, "{context}");
                    assert_eq!(reply.body["error"]["code"], "not_found", "{context}");
                }
                _ if !permitted => {
                    assert_eq!(reply.status, 403, "{context}");
                    assert_eq!(
                        reply.body["error"]["code"], "permission_denied",
                        "{context}"
                    );
                }
                _ => assert_eq!(reply.status.as_u16(), success, "{context}"),
            }
            if permitted {
                fx.tidy(method, route).await;
            }
            calls += 1;
        }
    }
    assert_eq!(calls, ROUTES.len() * 4);

    // Nothing a refusal touched changed: the app, its prod channel and the secret are the owner's as before.
    let app = fx.api.get(&fx.app(""), &fx.owner).await.expect(200, None);
    assert!(
        app["channels"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["id"] == fx.channel_id.as_str())
    );
    let secret = fx
        .api
        .get(&fx.app("/env/SHARED_KEY/value"), &fx.owner)
        .await
        .expect(200, None);
    assert_eq!(secret["value"], "s3cret");
    // The domains: the shared one, and one attached by each role permitted to (the spares were detached again).
    let list = fx.api.get(&fx.domains(), &fx.owner).await.expect(200, None);
    let mut names: Vec<&str> = list["domains"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["domain"].as_str().unwrap())
        .collect();
    names.sort_unstable();
    let mut expected = [
        fx.domain.clone(),
        fx.domain_named("madeadmin"),
        fx.domain_named("madeowner"),
    ];
    expected.sort_unstable();
    assert_eq!(names, expected);
    Ok(())
}

#[tokio::test]
async fn members_see_the_app_with_their_role_and_reach_it_by_owner_and_name() -> Result<()> {
    let fx = fixture().await?;
    for (who, role) in [
        (Who::Owner, "owner"),
        (Who::Admin, "admin"),
        (Who::Member, "member"),
    ] {
        let user = fx.user(who);
        let listed = fx.api.get("/apps", user).await.expect(200, None);
        let apps = listed["apps"].as_array().unwrap();
        let shared = apps
            .iter()
            .find(|a| a["id"] == fx.app_id.as_str())
            .unwrap_or_else(|| panic!("{who:?}: {listed}"));
        assert_eq!(shared["role"], role);
        assert_eq!(shared["owner_username"], fx.owner.username.as_str());
        assert_eq!(
            fx.api.get(&fx.app(""), user).await.expect(200, None)["role"],
            role
        );
    }
    let listed = fx.api.get("/apps", &fx.stranger).await.expect(200, None);
    assert_eq!(listed["apps"], json!([]));

    // The member list: owner first, then the members in the order they were added.
    let members = fx
        .api
        .get(&fx.app("/members"), &fx.member)
        .await
        .expect(200, None);
    let names: Vec<(&str, &str)> = members["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["username"].as_str().unwrap(), m["role"].as_str().unwrap()))
        .collect();
    assert_eq!(
        names,
        [
            (fx.owner.username.as_str(), "owner"),
            (fx.admin.username.as_str(), "admin"),
            (fx.member.username.as_str(), "member"),
        ]
    );

    // git names the app owner/name: a member may fetch and push, a stranger finds nothing there.
    let base = fx.api.serve().await?;
    let ws = support::git::Workspace::new()?;
    let as_member =
        support::git::http_remote(&base, &fx.member.token, &fx.owner.username, "shared");
    ws.git(".", &["clone", "-q", &as_member, "work"]).await?;
    ws.write("work/member.txt", "from a member")?;
    ws.git("work", &["add", "-A"]).await?;
    ws.git("work", &["commit", "-q", "-m", "member"]).await?;
    ws.git("work", &["push", "-q", "origin", "HEAD:master"])
        .await?;
    let as_stranger =
        support::git::http_remote(&base, &fx.stranger.token, &fx.owner.username, "shared");
    let refused = ws
        .try_git(".", &["clone", "-q", &as_stranger, "nothing"])
        .await?;
    assert!(
        !refused.ok && refused.stderr.contains("not found"),
        "{}",
        refused.stderr
    );
    Ok(())
}

#[tokio::test]
async fn membership_writes_check_their_input_and_are_protected_actions() -> Result<()> {
    let fx = fixture().await?;
    let put = |user: &str| fx.app(&format!("/members/{user}"));
    let owner = &fx.owner;
    for bad in [json!({"role": "owner"}), json!({"role": "boss"}), json!({})] {
        fx.api
            .call(
                Method::PUT,
                &put(&fx.newcomer.username),
                Some(&owner.token),
                Some(bad),
            )
            .await
            .expect(400, Some("bad_request"));
    }
    fx.api
        .call(
            Method::PUT,
            &put(&owner.username),
            Some(&owner.token),
            Some(json!({"role": "admin"})),
        )
        .await
        .expect(400, Some("bad_request"));
    fx.api
        .call(
            Method::PUT,
            &put("nobodyhere"),
            Some(&owner.token),
            Some(json!({"role": "admin"})),
        )
        .await
        .expect(404, Some("not_found"));
    fx.api
        .delete(&put(&fx.newcomer.username), owner)
        .await
        .expect(404, Some("not_found"));

    // Changing a role takes effect at once: the member becomes an admin and may reveal the secret.
    fx.api
        .get(&fx.app("/env/SHARED_KEY/value"), &fx.member)
        .await
        .expect(403, Some("permission_denied"));
    let changed = fx
        .api
        .call(
            Method::PUT,
            &put(&fx.member.username),
            Some(&owner.token),
            Some(json!({"role": "admin"})),
        )
        .await
        .expect(200, None);
    assert_eq!(changed["role"], "admin");
    fx.api
        .get(&fx.app("/env/SHARED_KEY/value"), &fx.member)
        .await
        .expect(200, None);
    // Removed, the app is gone for them: 404, not 403.
    fx.api
        .delete(&put(&fx.member.username), owner)
        .await
        .expect(204, None);
    fx.api
        .get(&fx.app(""), &fx.member)
        .await
        .expect(404, Some("not_found"));

    // An agent credential of the owner: membership writes are protected until agent access is on.
    let agent = fx
        .api
        .token(
            owner.id,
            &slipway_auth::scopes::default_scopes(),
            true,
            None,
        )
        .await?;
    let body = Some(json!({"role": "member"}));
    fx.api
        .call(
            Method::PUT,
            &put(&fx.newcomer.username),
            Some(&agent),
            body.clone(),
        )
        .await
        .expect(403, Some("protected_action"));
    fx.api
        .call(Method::DELETE, &put(&fx.admin.username), Some(&agent), None)
        .await
        .expect(403, Some("protected_action"));
    fx.api
        .call(
            Method::PATCH,
            &fx.app(""),
            Some(&owner.token),
            Some(json!({"agent_protected_actions_enabled": true})),
        )
        .await
        .expect(200, None);
    fx.api
        .call(Method::PUT, &put(&fx.newcomer.username), Some(&agent), body)
        .await
        .expect(200, None);
    // The owner's switch decides for the app: an admin's agent credential may now reveal the secret too.
    let admin_agent = fx
        .api
        .token(
            fx.admin.id,
            &slipway_auth::scopes::default_scopes(),
            true,
            None,
        )
        .await?;
    fx.api
        .call(
            Method::GET,
            &fx.app("/env/SHARED_KEY/value"),
            Some(&admin_agent),
            None,
        )
        .await
        .expect(200, None);
    Ok(())
}
