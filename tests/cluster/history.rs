//! Bounded history against the real apiserver, Postgres and the operator: a channel keeps its newest finished
//! deploys (the older Deploys are deleted by the operator and their logs are then forgotten by the API's sweep),
//! and the rows of an app deleted with kubectl go after two sweeps that found it missing. Static channels run no
//! pod, so no node is needed.

// Fixture helpers panic on a malformed response: in a test that is the failure to report.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::time::Duration;

use anyhow::Result;
use kube::Api;
use kube::api::DeleteParams;
use serde_json::json;
use slipway_controllers::deploy::history::KEEP_FINISHED;
use slipway_core::platform::sweep::{Sweeper, Swept};
use slipway_crds::{App, Deploy};
use support::TestApi;

const WITHIN: Duration = Duration::from_secs(90);

async fn log_rows(api: &TestApi, deploys: &[String]) -> Result<i64> {
    let ids: Vec<uuid::Uuid> = deploys.iter().map(|d| d.parse().unwrap()).collect();
    Ok(
        sqlx::query_scalar("SELECT count(*) FROM deploy_logs WHERE deploy_id = ANY($1)")
            .bind(&ids)
            .fetch_one(api.state.db())
            .await?,
    )
}

#[tokio::test]
async fn a_channel_keeps_its_newest_deploys_and_the_api_forgets_the_logs_of_the_rest() -> Result<()>
{
    let api = TestApi::start().await?;
    let alice = api.user("hist", "builder").await?;
    let app = api.create_app(&alice, "site", "static").await;
    let app_id = app["id"].as_str().unwrap();
    let prod_id = app["channels"][0]["id"].as_str().unwrap();
    let sha = api
        .commit(&alice, app_id, json!({"index.html": "<p>hi</p>\n"}))
        .await;
    // Two more deploys than the history keeps, all queued before the operator starts.
    let mut deploys = Vec::new();
    for _ in 0..KEEP_FINISHED + 2 {
        deploys.push(
            api.deploy(&alice, app_id, prod_id, json!({"sha": sha}))
                .await,
        );
    }
    api.start_operator_without_node(&alice.namespace).await?;
    let newest = deploys.last().unwrap();
    let log = api
        .finished_deploy(&alice, app_id, prod_id, newest, WITHIN)
        .await?;
    assert_eq!(log["status"], "success", "{log}");

    // The operator deletes the two oldest Deploys once newer ones finished.
    let resources: Api<Deploy> = Api::namespaced(api.kube.clone(), &alice.namespace);
    let deadline = tokio::time::Instant::now() + WITHIN;
    let left = loop {
        let left: Vec<String> = resources
            .list(&Default::default())
            .await?
            .items
            .into_iter()
            .filter(|d| d.metadata.deletion_timestamp.is_none())
            .filter_map(|d| d.metadata.uid)
            .collect();
        if left.len() == KEEP_FINISHED {
            break left;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} Deploys left, {KEEP_FINISHED} wanted",
            left.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let (pruned, kept) = deploys.split_at(2);
    let mut expected: Vec<String> = kept.to_vec();
    expected.sort();
    let mut left = left;
    left.sort();
    assert_eq!(left, expected, "the two oldest went");

    // A pruned deploy is gone from the API; its log rows stay until the sweep.
    let logs = |deploy: &str| format!("/apps/{app_id}/channels/{prod_id}/logs?deploy={deploy}");
    let deadline = tokio::time::Instant::now() + WITHIN;
    while api.get(&logs(&pruned[0]), &alice).await.status != 404 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the API still shows {}",
            pruned[0]
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    api.get(&logs(&kept[0]), &alice).await.expect(200, None);
    assert_eq!(log_rows(&api, pruned).await?, 2);

    let mut sweeper = Sweeper::new(api.state.db().clone(), api.state.cache().clone());
    // Within the grace period nothing goes: the operator may log for a deploy this cache has not seen yet.
    assert_eq!(sweeper.sweep(Duration::from_secs(3600)).await?.deploys, 0);
    let swept = sweeper.sweep(Duration::ZERO).await?;
    assert_eq!(swept.deploys, 2, "{swept:?}");
    assert_eq!(log_rows(&api, pruned).await?, 0);
    assert_eq!(log_rows(&api, kept).await?, i64::try_from(KEEP_FINISHED)?);
    Ok(())
}

#[tokio::test]
async fn the_rows_of_an_app_deleted_with_kubectl_go_after_two_sweeps_that_miss_it() -> Result<()> {
    let api = TestApi::start().await?;
    let alice = api.user("histapp", "builder").await?;
    let gone = api.create_app(&alice, "gone", "static").await;
    let stays = api.create_app(&alice, "stays", "static").await;
    for app in [&gone, &stays] {
        api.post(
            &format!("/apps/{}/env", app["id"].as_str().unwrap()),
            &alice,
            json!({"key": "GREETING", "value": "hello"}),
        )
        .await
        .expect(204, None);
    }
    let env_rows = |app: &serde_json::Value| {
        let id: uuid::Uuid = app["id"].as_str().unwrap().parse().unwrap();
        let db = api.state.db().clone();
        async move {
            sqlx::query_scalar::<_, i64>("SELECT count(*) FROM env_vars WHERE app_id = $1")
                .bind(id)
                .fetch_one(&db)
                .await
        }
    };
    let apps: Api<App> = Api::namespaced(api.kube.clone(), &alice.namespace);
    apps.delete("gone", &DeleteParams::background()).await?;
    api.state
        .cache()
        .app_gone(gone["id"].as_str().unwrap())
        .await?;

    let mut sweeper = Sweeper::new(api.state.db().clone(), api.state.cache().clone());
    assert_eq!(
        sweeper.sweep(Duration::ZERO).await?,
        Swept::default(),
        "one miss is not enough"
    );
    assert_eq!(env_rows(&gone).await?, 1);
    assert_eq!(sweeper.sweep(Duration::ZERO).await?.apps, 1);
    assert_eq!(env_rows(&gone).await?, 0);
    assert_eq!(env_rows(&stays).await?, 1, "a live app keeps its rows");
    Ok(())
}
