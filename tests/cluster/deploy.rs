//! Deploys of static channels against the real apiserver, Postgres and the operator: the deploy route's rules and
//! error rows, the queue (one deploy at a time per channel, in order), the channel's `current_sha`,
//! `pending_deploy` and status, a branch pinned to its head by the deploy call (and one written with kubectl
//! resolved at start), the log windows, the image inventory of a static app, and a failed deploy that leaves the
//! serving commit alone; and an app's deploy deleted with kubectl mid-build, which the channel no longer names as
//! pending. Static channels run no pod, and the app's build never starts, so no node is needed.

// Fixture helpers panic on a malformed response: in a test that is the failure to report.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::time::Duration;

use anyhow::Result;
use kube::api::DeleteParams;
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use slipway_crds::{Channel, ChannelPhase, Deploy, DeployPhase};
use slipway_internal::{InternalClient, InternalEndpoint, TokenSource};
use slipway_testkit::wait_until;
use support::{TestApi, User};

const WITHIN: Duration = Duration::from_secs(60);

struct Site {
    api: TestApi,
    alice: User,
    app_id: String,
    prod_id: String,
}

async fn site(prefix: &str) -> Result<Site> {
    let s = idle_site(prefix).await?;
    s.api
        .start_operator_without_node(&s.alice.namespace)
        .await?;
    Ok(s)
}

/// A static app whose operator is not started yet: deploys stay queued until the test starts it.
async fn idle_site(prefix: &str) -> Result<Site> {
    let api = TestApi::start().await?;
    let alice = api.user(prefix, "builder").await?;
    let app = api.create_app(&alice, "site", "static").await;
    let app_id = app["id"].as_str().unwrap().to_owned();
    let prod_id = app["channels"][0]["id"].as_str().unwrap().to_owned();
    Ok(Site {
        api,
        alice,
        app_id,
        prod_id,
    })
}

impl Site {
    async fn channel(&self) -> Value {
        self.api
            .get(
                &format!("/apps/{}/channels/{}", self.app_id, self.prod_id),
                &self.alice,
            )
            .await
            .expect(200, None)
    }

    async fn deploy(&self, body: Value) -> String {
        self.api
            .deploy(&self.alice, &self.app_id, &self.prod_id, body)
            .await
    }

    async fn finished(&self, deploy_id: &str) -> Result<Value> {
        self.api
            .finished_deploy(&self.alice, &self.app_id, &self.prod_id, deploy_id, WITHIN)
            .await
    }

    async fn log(&self, query: &str) -> support::Reply {
        self.api
            .get(
                &format!(
                    "/apps/{}/channels/{}/logs?{query}",
                    self.app_id, self.prod_id
                ),
                &self.alice,
            )
            .await
    }
}

#[tokio::test]
async fn a_static_deploy_goes_live_and_moves_the_channel() -> Result<()> {
    let s = site("stat").await?;
    let before = s.channel().await;
    assert_eq!(before["status"], "provisioning");
    assert_eq!(before["current_sha"], Value::Null);

    let sha = s
        .api
        .commit(&s.alice, &s.app_id, json!({"index.html": "<h1>one</h1>\n"}))
        .await;
    let deploy_id = s.deploy(json!({"ref": "master"})).await;
    // The new deploy is visible at once as the channel's pending deploy.
    let pending = s.channel().await["pending_deploy"].clone();
    assert_eq!(pending["deploy_id"], deploy_id.as_str());
    assert!(pending["status"] == "queued" || pending["status"] == "running");

    let log = s.finished(&deploy_id).await?;
    assert_eq!(log["status"], "success", "{log}");
    assert_eq!(log["stage"], "success", "{log}");
    assert_eq!(log["git_sha"], sha.as_str());
    assert!(log["finished_at"].is_string());
    let text = log["log"].as_str().unwrap();
    assert!(text.contains(&format!("[deploy] live: {sha}")), "{text}");
    assert!(!text.contains("[build]"), "a static deploy builds nothing");

    let after = s.channel().await;
    assert_eq!(after["current_sha"], sha.as_str());
    assert_eq!(after["status"], "running");
    assert_eq!(after["pending_deploy"], Value::Null);

    // The go-live wakes the channel reconciler, which moves the resource's phase: each status field has one writer.
    let channels: Api<Channel> = Api::namespaced(s.api.kube.clone(), &s.alice.namespace);
    wait_until(WITHIN, || async {
        let channel = channels.get("site.prod").await?;
        Ok(channel
            .status
            .is_some_and(|c| c.phase == ChannelPhase::Running))
    })
    .await?;
    support::deploys::assert_sole_writers(
        &channels.get("site.prod").await?,
        &[
            ("currentSha", slipway_controllers::deploy::CHANNEL_MANAGER),
            ("phase", slipway_controllers::channel::STATUS_MANAGER),
            ("conditions", slipway_controllers::channel::STATUS_MANAGER),
        ],
    );

    // A static app has no images, and the cap is the plan's.
    let images = s
        .api
        .get(
            &format!("/apps/{}/channels/{}/images", s.app_id, s.prod_id),
            &s.alice,
        )
        .await
        .expect(200, None);
    assert_eq!(images["images"], json!([]));
    assert_eq!(images["image_cap_bytes"], 2_147_483_648_i64);
    Ok(())
}

#[tokio::test]
async fn deploys_of_a_channel_run_one_at_a_time_in_order() -> Result<()> {
    let s = site("queue").await?;
    let mut shas = Vec::new();
    let mut deploys = Vec::new();
    for i in 0..3 {
        let sha = s
            .api
            .commit(
                &s.alice,
                &s.app_id,
                json!({"index.html": format!("<p>{i}</p>\n")}),
            )
            .await;
        deploys.push(s.deploy(json!({"sha": sha})).await);
        shas.push(sha);
    }
    let mut finished = Vec::new();
    for (deploy_id, sha) in deploys.iter().zip(&shas) {
        let log = s.finished(deploy_id).await?;
        assert_eq!(log["status"], "success", "{log}");
        assert_eq!(log["git_sha"], sha.as_str());
        finished.push((
            log["started_at"].as_str().unwrap().to_owned(),
            log["finished_at"].as_str().unwrap().to_owned(),
        ));
    }
    // Each deploy started only after the one before it had finished.
    for pair in finished.windows(2) {
        let (_, previous_end) = &pair[0];
        let (next_start, _) = &pair[1];
        let end: k8s_openapi::jiff::Timestamp = previous_end.parse()?;
        let start: k8s_openapi::jiff::Timestamp = next_start.parse()?;
        assert!(
            start >= end,
            "a deploy started at {start} before the previous one finished at {end}"
        );
    }
    let channel = s.channel().await;
    assert_eq!(channel["current_sha"], shas[2].as_str());
    assert_eq!(channel["pending_deploy"], Value::Null);
    Ok(())
}

#[tokio::test]
async fn a_deploy_of_an_unknown_commit_fails_and_the_old_one_keeps_serving() -> Result<()> {
    let s = site("fail").await?;
    let good = s
        .api
        .commit(&s.alice, &s.app_id, json!({"index.html": "ok\n"}))
        .await;
    let first = s.deploy(json!({"sha": good})).await;
    assert_eq!(s.finished(&first).await?["status"], "success");

    let missing = "0123456789abcdef0123456789abcdef01234567";
    let bad = s.deploy(json!({"sha": missing})).await;
    let log = s.finished(&bad).await?;
    assert_eq!(log["status"], "failed");
    let text = log["log"].as_str().unwrap();
    assert!(
        text.contains("[deploy] failed:") && text.contains(missing),
        "{text}"
    );

    let unknown_branch = s.deploy(json!({"ref": "no-such-branch"})).await;
    assert_eq!(s.finished(&unknown_branch).await?["status"], "failed");

    let channel = s.channel().await;
    assert_eq!(
        channel["current_sha"],
        good.as_str(),
        "a failed deploy moves nothing"
    );
    assert_eq!(channel["status"], "running");

    // The Deploy resource says why, for kubectl users.
    let failed = s.api.deploy_resource(&s.alice.namespace, &bad).await?;
    let message = failed.status.unwrap().message.unwrap();
    assert!(message.contains(missing), "{message}");
    Ok(())
}

#[tokio::test]
async fn a_branch_is_pinned_to_its_head_by_the_deploy_call() -> Result<()> {
    // No operator yet: nothing starts the deploys, so only the API can have resolved what they name.
    let s = idle_site("pin").await?;
    let v1 = s
        .api
        .commit(&s.alice, &s.app_id, json!({"index.html": "<p>v1</p>\n"}))
        .await;
    let by_ref = s.deploy(json!({"ref": "master"})).await;
    // The channel read right after the call names the commit.
    let pending = s.channel().await["pending_deploy"].clone();
    assert_eq!(pending["deploy_id"], by_ref.as_str());
    assert_eq!(pending["status"], "queued");
    assert_eq!(pending["stage"], "queued");
    assert_eq!(pending["sha"], v1.as_str(), "{pending}");
    // A branch given as sha is pinned the same way, and so is refs/heads/<name>.
    let by_sha = s.deploy(json!({"sha": "master"})).await;
    assert_eq!(s.channel().await["pending_deploy"]["sha"], v1.as_str());
    let by_full_ref = s.deploy(json!({"ref": "refs/heads/master"})).await;
    assert_eq!(s.channel().await["pending_deploy"]["sha"], v1.as_str());
    // The Deploy holds the full commit id, nothing left to resolve.
    for id in [&by_ref, &by_sha, &by_full_ref] {
        let resource = s.api.deploy_resource(&s.alice.namespace, id).await?;
        assert_eq!(resource.spec.sha.as_deref(), Some(v1.as_str()));
        assert_eq!(resource.spec.git_ref, None);
    }

    // A push between the call and the start changes nothing: the deploys bring v1 live.
    let v2 = s
        .api
        .commit(&s.alice, &s.app_id, json!({"index.html": "<p>v2</p>\n"}))
        .await;
    assert_ne!(v1, v2);
    s.api
        .start_operator_without_node(&s.alice.namespace)
        .await?;
    for id in [&by_ref, &by_sha, &by_full_ref] {
        let log = s.finished(id).await?;
        assert_eq!(log["status"], "success", "{log}");
        assert_eq!(log["git_sha"], v1.as_str());
        let text = log["log"].as_str().unwrap();
        assert!(text.contains(&format!("[deploy] deploying {v1}")), "{text}");
    }
    assert_eq!(s.channel().await["current_sha"], v1.as_str());

    // A Deploy written with kubectl naming a branch still resolves when it starts: to the head then.
    let deploys: Api<Deploy> = Api::namespaced(s.api.kube.clone(), &s.alice.namespace);
    let mut by_hand = Deploy::new(
        "site.prod.by-hand",
        slipway_crds::DeploySpec {
            channel: "site.prod".into(),
            sha: Some("master".into()),
            git_ref: None,
            rewind_of: None,
            image: None,
        },
    );
    by_hand.metadata.namespace = Some(s.alice.namespace.clone());
    let by_hand = deploys
        .create(&kube::api::PostParams::default(), &by_hand)
        .await?;
    // Written with kubectl, it reaches the API by its watch: its log route answers once the API has seen it.
    let by_hand_id = by_hand.metadata.uid.as_deref().unwrap();
    s.api
        .get_until(
            &format!(
                "/apps/{}/channels/{}/logs?deploy={by_hand_id}",
                s.app_id, s.prod_id
            ),
            &s.alice.token,
            200,
            WITHIN,
        )
        .await?;
    let log = s.finished(by_hand_id).await?;
    assert_eq!(log["status"], "success", "{log}");
    assert_eq!(log["git_sha"], v2.as_str());
    assert_eq!(s.channel().await["current_sha"], v2.as_str());
    Ok(())
}

#[tokio::test]
async fn the_deploy_route_refuses_bad_requests() -> Result<()> {
    let s = site("bad").await?;
    let url = format!("/apps/{}/channels/{}/deploy", s.app_id, s.prod_id);
    for (body, needle) in [
        (json!({}), "needs sha"),
        (json!({"sha": "not a sha!"}), "sha must be"),
        (json!({"sha": "abc..def"}), "sha must be"),
        (json!({"ref": "refs/heads/../x"}), "branch name"),
    ] {
        let reply = s.api.post(&url, &s.alice, body.clone()).await;
        assert!(reply.message().contains(needle), "{body}: {:?}", reply.body);
        reply.expect(400, Some("bad_request"));
    }
    // sha wins over ref: a broken ref beside a good sha is ignored.
    let sha = s
        .api
        .commit(&s.alice, &s.app_id, json!({"index.html": "x\n"}))
        .await;
    s.api
        .post(&url, &s.alice, json!({"sha": sha, "ref": "..broken"}))
        .await
        .expect(200, None);

    // Another user sees neither the app nor its channel; a token without deploy:* is refused.
    let bob = s.api.user("bob", "builder").await?;
    s.api
        .post(&url, &bob, json!({"ref": "master"}))
        .await
        .expect(404, Some("not_found"));
    let narrow = User {
        token: s
            .api
            .token(s.alice.id, &["repo:*".to_owned()], false, None)
            .await?,
        ..s.alice.clone()
    };
    s.api
        .post(&url, &narrow, json!({"ref": "master"}))
        .await
        .expect(403, Some("scope_denied"));
    let other_channel = format!(
        "/apps/{}/channels/{}/deploy",
        s.app_id, "00000000-0000-4000-8000-000000000000"
    );
    s.api
        .post(&other_channel, &s.alice, json!({"ref": "master"}))
        .await
        .expect(404, Some("not_found"));
    Ok(())
}

#[tokio::test]
async fn log_windows_follow_the_spec() -> Result<()> {
    let s = site("logs").await?;
    let sha = s
        .api
        .commit(&s.alice, &s.app_id, json!({"index.html": "x\n"}))
        .await;
    let id = s.deploy(json!({"sha": sha})).await;
    s.finished(&id).await?;
    // Add known lines through the internal route with the operator's own client and identity.
    let base = s.api.serve_internal().await?;
    let client = |token: &str| {
        InternalClient::new(InternalEndpoint {
            url: base.clone(),
            token: TokenSource::fixed(token),
        })
    };
    let lines: String = (0..100).map(|i| format!("line {i:03}\n")).collect();
    client(&s.api.operator_token)
        .append_log(&id, &lines)
        .await?;
    // A token that is no ServiceAccount's is refused, and so is the edge's identity: neither writes anything.
    let refused = client("not-a-token")
        .append_log(&id, "injected\n")
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("401"), "{refused}");
    let refused = client(&s.api.edge_token)
        .append_log(&id, "injected\n")
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("403"), "{refused}");

    let whole = s
        .log(&format!("deploy={id}&max_bytes=262144"))
        .await
        .expect(200, None);
    let total = whole["log_bytes"].as_u64().unwrap();
    assert_eq!(whole["offset"], 0);
    assert_eq!(whole["window_bytes"], total);
    assert!(!whole["log"].as_str().unwrap().contains("injected"));

    // Tail: the last 20 bytes, advanced to a whole line ("line 099\n" is 9 bytes).
    let tail = s
        .log(&format!("deploy={id}&max_bytes=20"))
        .await
        .expect(200, None);
    assert_eq!(tail["log"], "line 098\nline 099\n");
    assert_eq!(tail["offset"].as_u64().unwrap(), total - 18);
    assert_eq!(tail["window_bytes"], 18);

    // Explicit offset: byte-exact, no snapping; the next page starts at offset + window_bytes.
    let exact = s
        .log(&format!("deploy={id}&offset={}&max_bytes=5", total - 6))
        .await
        .expect(200, None);
    assert_eq!(exact["log"], "e 099");
    let next = exact["offset"].as_u64().unwrap() + exact["window_bytes"].as_u64().unwrap();
    let end = s
        .log(&format!("deploy={id}&offset={next}&max_bytes=5"))
        .await
        .expect(200, None);
    assert_eq!(end["log"], "\n");
    assert_eq!(
        end["offset"].as_u64().unwrap() + end["window_bytes"].as_u64().unwrap(),
        total,
        "the end of the log is reached"
    );

    for query in [
        format!("deploy={id}&max_bytes=0"),
        format!("deploy={id}&max_bytes=262145"),
        format!("deploy={id}&offset={}", total + 1),
        "max_bytes=10".to_owned(),
    ] {
        s.log(&query).await.expect(400, Some("bad_request"));
    }
    s.log("deploy=00000000-0000-4000-8000-000000000000")
        .await
        .expect(404, Some("not_found"));
    Ok(())
}

/// A deploy deleted with kubectl while it builds leaves no reconcile of its own to take its name out of the
/// Channel's `pendingDeploy`; the channel's reconcile does, woken by the deletion. (The build never starts here:
/// this tier has no node, so the deploy stays in flight until it is deleted.)
#[tokio::test]
async fn a_deploy_deleted_with_kubectl_mid_build_is_no_longer_the_channel_s_pending_deploy()
-> Result<()> {
    let api = TestApi::start().await?;
    let alice = api.user("gone", "builder").await?;
    let app = api.create_app(&alice, "web", "app").await;
    let (app_id, prod_id) = (
        app["id"].as_str().unwrap(),
        app["channels"][0]["id"].as_str().unwrap(),
    );
    api.start_operator_without_node(&alice.namespace).await?;
    api.commit(
        &alice,
        app_id,
        json!({"launch.sh": "exec sleep infinity\n"}),
    )
    .await;
    let deploy_id = api
        .deploy(&alice, app_id, prod_id, json!({"ref": "master"}))
        .await;
    let deploy = api.deploy_resource(&alice.namespace, &deploy_id).await?;
    let channels: Api<Channel> = Api::namespaced(api.kube.clone(), &alice.namespace);
    let pending = || async {
        let channel = channels.get_status(&deploy.spec.channel).await?;
        anyhow::Ok(channel.status.and_then(|s| s.pending_deploy))
    };
    wait_until(WITHIN, || async {
        Ok(pending()
            .await?
            .is_some_and(|p| p.deploy_id == deploy_id && p.status == DeployPhase::Running))
    })
    .await?;

    let deploys: Api<Deploy> = Api::namespaced(api.kube.clone(), &alice.namespace);
    deploys
        .delete(&deploy.name_any(), &DeleteParams::default())
        .await?;
    wait_until(WITHIN, || async { Ok(pending().await?.is_none()) }).await?;
    let channel = api
        .get(&format!("/apps/{app_id}/channels/{prod_id}"), &alice)
        .await
        .expect(200, None);
    assert_eq!(channel["pending_deploy"], Value::Null);
    Ok(())
}
