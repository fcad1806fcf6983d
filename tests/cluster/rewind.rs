//! The rewind route against the real apiserver and Postgres, without a node: its refusals (a static app, a channel
//! without an earlier successful deploy of another image, an unknown channel, another user's app, a token without
//! `deploy:*`), the Deploy it writes (the earlier deploy's name, image and commit) and what the channel and log
//! views show at once; the apiserver's own rules on a rewind's fields; and the operator refusing a rewind written
//! with kubectl that names no successful deploy of the channel or another image. Successful deploys of `app`
//! channels need a node to build, so here they are written the way the operator leaves them.

// Fixture helpers panic on a malformed response: in a test that is the failure to report.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::time::Duration;

use anyhow::Result;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use slipway_crds::{Deploy, DeploySpec, names::messages};
use support::deploys::{image, succeeded, web_prod};
use support::{TestApi, User};

const WITHIN: Duration = Duration::from_secs(60);

/// Creates the app `web` of `template` and returns (app id, prod channel id).
async fn web(api: &TestApi, user: &User, template: &str) -> (String, String) {
    let app = api.create_app(user, "web", template).await;
    (
        app["id"].as_str().unwrap().to_owned(),
        app["channels"][0]["id"].as_str().unwrap().to_owned(),
    )
}

fn rewind_path(app: &str, channel: &str) -> String {
    format!("/apps/{app}/channels/{channel}/rewind")
}

#[tokio::test]
async fn rewind_refusals_follow_the_deploy_route_and_the_channel_history() -> Result<()> {
    let api = TestApi::start().await?;
    let alice = api.user("rwref", "builder").await?;

    // A static app has no images: 409, even after deploys went live.
    let (site, site_prod) = web(&api, &alice, "static").await;
    api.start_operator_without_node(&alice.namespace).await?;
    for i in 0..2 {
        api.commit(
            &alice,
            &site,
            json!({"index.html": format!("<p>{i}</p>\n")}),
        )
        .await;
        let id = api
            .deploy(&alice, &site, &site_prod, json!({"ref": "master"}))
            .await;
        let log = api
            .finished_deploy(&alice, &site, &site_prod, &id, WITHIN)
            .await?;
        assert_eq!(log["status"], "success", "{log}");
    }
    let reply = api
        .post(&rewind_path(&site, &site_prod), &alice, Value::Null)
        .await;
    assert!(reply.message().contains("static"), "{:?}", reply.body);
    reply.expect(409, Some("conflict"));

    // The deploy route's own checks: another user's app and an unknown channel are 404, a token without deploy:*
    // is 403.
    let bob = api.user("rwbob", "builder").await?;
    api.post(&rewind_path(&site, &site_prod), &bob, Value::Null)
        .await
        .expect(404, Some("not_found"));
    api.post(
        &rewind_path(&site, "00000000-0000-4000-8000-000000000000"),
        &alice,
        Value::Null,
    )
    .await
    .expect(404, Some("not_found"));
    let narrow = User {
        token: api
            .token(alice.id, &["repo:*".to_owned()], false, None)
            .await?,
        ..alice.clone()
    };
    api.post(&rewind_path(&site, &site_prod), &narrow, Value::Null)
        .await
        .expect(403, Some("scope_denied"));

    // An app channel (carol's, no operator): nothing live yet, then one successful deploy: 409 both times.
    let carol = api.user("rwcarol", "builder").await?;
    let (app, prod) = web(&api, &carol, "app").await;
    let path = rewind_path(&app, &prod);
    let reply = api.post(&path, &carol, Value::Null).await;
    assert!(reply.message().contains("gone live"), "{:?}", reply.body);
    reply.expect(409, Some("conflict"));
    let v1 = "1".repeat(40);
    succeeded(&api, &carol, "web.prod.1000-aaaaaa", &v1, 'a').await?;
    let reply = api.post(&path, &carol, Value::Null).await;
    assert!(
        reply.message().contains("one successful deploy"),
        "{:?}",
        reply.body
    );
    reply.expect(409, Some("conflict"));
    // A redeploy of the same image is no earlier version either.
    succeeded(&api, &carol, "web.prod.1500-aaaaaa", &v1, 'a').await?;
    api.post(&path, &carol, Value::Null)
        .await
        .expect(409, Some("conflict"));
    assert_eq!(api.post(&path, &bob, Value::Null).await.status, 404);
    Ok(())
}

#[tokio::test]
async fn a_rewind_writes_a_deploy_of_the_previous_image_visible_at_once() -> Result<()> {
    let api = TestApi::start().await?;
    let carol = api.user("rwok", "builder").await?;
    let (app, prod) = web(&api, &carol, "app").await;
    let (v1, v2) = ("1".repeat(40), "2".repeat(40));
    let first = succeeded(&api, &carol, "web.prod.1000-aaaaaa", &v1, 'a').await?;
    let second = succeeded(&api, &carol, "web.prod.2000-bbbbbb", &v2, 'b').await?;

    let reply = api
        .post(&rewind_path(&app, &prod), &carol, Value::Null)
        .await
        .expect(202, None);
    let first_id = first.metadata.uid.clone().unwrap();
    assert_eq!(reply["status"], "queued");
    assert_eq!(reply["channel_id"], prod.as_str());
    assert_eq!(reply["rewound_from"], first_id.as_str());
    assert_eq!(reply["sha"], v1.as_str());
    let id = reply["deploy_id"].as_str().unwrap();

    // The Deploy says what it is: a rewind of the first deploy, its image and commit.
    let written = api.deploy_resource(&carol.namespace, id).await?;
    assert_eq!(
        written.spec.rewind_of.as_deref(),
        Some("web.prod.1000-aaaaaa")
    );
    assert_eq!(written.spec.image, Some(image(&carol.namespace, 'a')));
    assert_eq!(written.spec.sha.as_deref(), Some(v1.as_str()));

    // The channel and the log name the commit and the rewound deploy from the first read on.
    let channel = api
        .get(&format!("/apps/{app}/channels/{prod}"), &carol)
        .await
        .expect(200, None);
    assert_eq!(channel["pending_deploy"]["deploy_id"], id);
    assert_eq!(channel["pending_deploy"]["sha"], v1.as_str());
    let logs = format!("/apps/{app}/channels/{prod}/logs?deploy=");
    let log = api
        .get(&format!("{logs}{id}"), &carol)
        .await
        .expect(200, None);
    assert_eq!(log["status"], "queued");
    assert_eq!(log["rewound_from"], first_id.as_str());
    assert_eq!(log["git_sha"], v1.as_str());
    assert_eq!(log["log"], "");
    let normal = api
        .get(&format!("{logs}{}", second.metadata.uid.unwrap()), &carol)
        .await
        .expect(200, None);
    assert_eq!(normal["rewound_from"], Value::Null);
    Ok(())
}

#[tokio::test]
async fn the_apiserver_and_the_operator_hold_rewinds_written_with_kubectl_to_the_channel_history()
-> Result<()> {
    let api = TestApi::start().await?;
    let dave = api.user("rwkube", "builder").await?;
    let (app, prod) = web(&api, &dave, "app").await;
    let v1 = "1".repeat(40);
    succeeded(&api, &dave, "web.prod.1000-aaaaaa", &v1, 'a').await?;
    succeeded(&api, &dave, "web.prod.1001-failed", &"3".repeat(40), 'c').await?;
    let deploys: Api<Deploy> = Api::namespaced(api.kube.clone(), &dave.namespace);
    deploys
        .patch_status(
            "web.prod.1001-failed",
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {"phase": "failed"}})),
        )
        .await?;

    // The apiserver: both fields or neither, an image by digest, and a full commit id.
    let write = |name: &str, sha: &str, rewind_of: Option<&str>, image: Option<String>| {
        let mut deploy = Deploy::new(
            name,
            DeploySpec {
                rewind_of: rewind_of.map(str::to_owned),
                image,
                ..web_prod(sha)
            },
        );
        deploy.metadata.namespace = Some(dave.namespace.clone());
        let deploys = deploys.clone();
        async move { deploys.create(&PostParams::default(), &deploy).await }
    };
    for (sha, rewind_of, image_ref, message) in [
        (
            v1.as_str(),
            Some("web.prod.1000-aaaaaa"),
            None,
            messages::REWIND_PAIR,
        ),
        (
            v1.as_str(),
            None,
            Some(image(&dave.namespace, 'a')),
            messages::REWIND_PAIR,
        ),
        (
            v1.as_str(),
            Some("web.prod.1000-aaaaaa"),
            Some("registry.test:5000/x/web-prod:latest".to_owned()),
            messages::IMAGE_DIGEST,
        ),
        (
            "master",
            Some("web.prod.1000-aaaaaa"),
            Some(image(&dave.namespace, 'a')),
            messages::REWIND_SHA,
        ),
    ] {
        let err = write("web.prod.refused", sha, rewind_of, image_ref)
            .await
            .unwrap_err();
        assert!(err.to_string().contains(message), "{err}");
    }

    // The operator: a rewind to a deploy the channel does not have, to one that failed, or of another image fails
    // with the reason, and nothing goes live.
    api.start_operator_without_node(&dave.namespace).await?;
    for (name, rewind_of, fill, needle) in [
        (
            "web.prod.5000-nope",
            "web.prod.0000-nothing",
            'a',
            "not a deploy of channel web.prod",
        ),
        (
            "web.prod.5001-fail",
            "web.prod.1001-failed",
            'c',
            "did not succeed",
        ),
        (
            "web.prod.5002-other",
            "web.prod.1000-aaaaaa",
            'f',
            "is not the image",
        ),
    ] {
        let sha = if fill == 'c' {
            "3".repeat(40)
        } else {
            v1.clone()
        };
        let created = write(
            name,
            &sha,
            Some(rewind_of),
            Some(image(&dave.namespace, fill)),
        )
        .await?;
        let id = created.metadata.uid.unwrap();
        // Written with kubectl: the API reads it once its cache has it.
        api.state.cache().deploy_appeared(&id).await?;
        let log = api.finished_deploy(&dave, &app, &prod, &id, WITHIN).await?;
        assert_eq!(log["status"], "failed", "{log}");
        let text = log["log"].as_str().unwrap();
        assert!(text.contains(needle), "{text}");
        assert!(!text.contains("[build]"), "{text}");
    }
    let channel = api
        .get(&format!("/apps/{app}/channels/{prod}"), &dave)
        .await
        .expect(200, None);
    assert_eq!(channel["current_sha"], Value::Null);
    assert_eq!(channel["pending_deploy"], Value::Null);
    Ok(())
}
