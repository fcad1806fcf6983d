//! Deploys of an `app` channel written the way the operator leaves a successful build-deploy, for tests without a
//! node to build on: the rewind route and the `rewind` tool read a channel's history of them.

use anyhow::Result;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;
use slipway_crds::{Channel, Deploy, DeployPhase, DeploySpec};

use super::{TestApi, User};

/// An image reference of the `web` app's prod repository in `namespace` whose digest is `fill` repeated.
pub fn image(namespace: &str, fill: char) -> String {
    format!(
        "registry.test:5000/{namespace}/web-prod@sha256:{}",
        fill.to_string().repeat(64)
    )
}

/// A deploy of `sha` to the prod channel of the app `web`.
pub fn web_prod(sha: &str) -> DeploySpec {
    DeploySpec {
        channel: "web.prod".into(),
        sha: Some(sha.into()),
        git_ref: None,
        rewind_of: None,
        image: None,
    }
}

/// A Deploy `name` of web.prod as the operator leaves a successful build-deploy of `sha` with image `fill`, once
/// the API's cache holds it as successful.
pub async fn succeeded(
    api: &TestApi,
    user: &User,
    name: &str,
    sha: &str,
    fill: char,
) -> Result<Deploy> {
    let deploys: Api<Deploy> = Api::namespaced(api.kube.clone(), &user.namespace);
    let mut deploy = Deploy::new(name, web_prod(sha));
    deploy.metadata.namespace = Some(user.namespace.clone());
    deploys.create(&PostParams::default(), &deploy).await?;
    let now = "2026-01-01T00:00:00Z";
    let status = json!({"status": {
        "phase": "success", "resolvedSha": sha, "startedAt": now, "finishedAt": now, "readyBy": "http",
        "image": {"reference": image(&user.namespace, fill), "tag": sha, "sizeBytes": 1000, "created": now},
    }});
    let done = deploys
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    // The API answers from its cache: wait until it holds the deploy as successful.
    let uid = done.metadata.uid.clone().unwrap_or_default();
    slipway_core::platform::cache::poll_for(std::time::Duration::from_secs(10), || {
        api.state
            .cache()
            .deploys_of(&user.namespace, "web.prod")
            .into_iter()
            .find(|d| {
                d.metadata.uid.as_deref() == Some(uid.as_str())
                    && d.status
                        .as_ref()
                        .is_some_and(|s| s.phase == DeployPhase::Success)
            })
    })
    .await?;
    Ok(done)
}

/// Asserts that each named status field of `channel` has exactly the one writer given, by its `managedFields`.
pub fn assert_sole_writers(channel: &Channel, writers: &[(&str, &str)]) {
    let mut owners = std::collections::BTreeMap::<String, Vec<String>>::new();
    for entry in channel.metadata.managed_fields.iter().flatten() {
        let Some(fields) = entry.fields_v1.as_ref() else {
            continue;
        };
        let Some(status) = fields.0.get("f:status").and_then(|s| s.as_object()) else {
            continue;
        };
        for key in status.keys().filter_map(|k| k.strip_prefix("f:")) {
            owners
                .entry(key.to_owned())
                .or_default()
                .push(entry.manager.clone().unwrap_or_default());
        }
    }
    for (field, manager) in writers {
        assert_eq!(
            owners.get(*field).map(Vec::as_slice),
            Some([(*manager).to_owned()].as_slice()),
            "the writers of status.{field}: {owners:?}"
        );
    }
}
