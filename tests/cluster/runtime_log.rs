//! Runtime logs against the real apiserver and Postgres, without a node: the operator's log archive records
//! container generations and their output through the internal routes (with the operator's own client), and the
//! runtime-log route reads them back with the spec's facts, its 404 and 400 rows, and 503 where no sandbox can run a
//! command. Commands themselves run on a node (e2e_platform).

// Fixture helpers panic on a malformed response: in a test that is the failure to report.
#![allow(clippy::unwrap_used)]

use crate::support;

use anyhow::Result;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Value, json};
use slipway_internal::protocol::{RuntimeContainer, RuntimeSettle};
use slipway_internal::{CallError, InternalClient};
use slipway_store::db::runtime_logs::CHANNEL_BYTES;
use support::{TestApi, User};

struct Fixture {
    api: TestApi,
    alice: User,
    app: String,
    channel: String,
    operator: InternalClient,
}

async fn fixture(prefix: &str) -> Result<Fixture> {
    let api = TestApi::start().await?;
    let alice = api.user(prefix, "builder").await?;
    let created = api.create_app(&alice, "web", "app").await;
    let app = created["id"].as_str().unwrap().to_owned();
    let channel = created["channels"][0]["id"].as_str().unwrap().to_owned();
    let base = api.serve_internal().await?;
    let operator = InternalClient::new(api.operator_endpoint(&base));
    Ok(Fixture {
        api,
        alice,
        app,
        channel,
        operator,
    })
}

fn time(s: &str) -> Option<Time> {
    Some(Time(s.parse().unwrap()))
}

impl Fixture {
    /// Facts of an instance of the channel's app container in `pod`, running since `started`.
    fn running(&self, pod: &str, started: &str) -> RuntimeContainer {
        RuntimeContainer {
            app_id: self.app.clone(),
            channel_id: self.channel.clone(),
            pod_name: pod.into(),
            deploy_id: None,
            running: true,
            status: "running".into(),
            exit_code: None,
            oom_killed: false,
            started_at: time(started),
            finished_at: None,
        }
    }

    async fn runtime_log(&self, body: Value) -> support::Reply {
        self.api
            .post(
                &format!("/apps/{}/channels/{}/runtime/log", self.app, self.channel),
                &self.alice,
                body,
            )
            .await
    }
}

#[tokio::test]
async fn generations_recorded_by_the_archive_read_back_with_their_facts() -> Result<()> {
    let f = fixture("rtfacts").await?;
    // Nothing recorded yet: nothing readable.
    let none = f
        .runtime_log(json!({}))
        .await
        .expect(404, Some("not_found"));
    assert!(
        none["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no container output")
    );

    let first = f.running("web-prod-1", "2026-11-24T10:00:00Z");
    let record = f.operator.runtime_container("c-first", &first).await?;
    assert_eq!(record.container_index, 0);
    assert!(!record.finished);
    f.operator
        .append_runtime_log(
            "c-first",
            b"2026-11-24T10:00:00.100000000Z boot one\n2026-11-24T10:00:00.200000000Z boot two\n"
                .to_vec(),
        )
        .await?;
    // The same batch again (an append whose answer was lost) is not kept twice.
    f.operator
        .append_runtime_log(
            "c-first",
            b"2026-11-24T10:00:00.100000000Z boot one\n2026-11-24T10:00:00.200000000Z boot two\n"
                .to_vec(),
        )
        .await?;
    let live = f.runtime_log(json!({})).await.expect(200, None);
    assert_eq!(live["container_index"], 0);
    assert_eq!(live["container_id"], "c-first");
    assert_eq!(live["container_name"], "web-prod-1");
    assert_eq!(live["running"], true);
    assert_eq!(live["source"], "live");
    assert_eq!(live["status"], "running");
    assert_eq!(live["exit_code"], Value::Null);
    assert_eq!(live["oom_killed"], false);
    assert_eq!(live["restart_count"], 0);
    assert_eq!(live["started_at"], "2026-11-24T10:00:00Z");
    assert_eq!(live["finished_at"], Value::Null);
    assert_eq!(live["available_indices"], json!([0]));
    assert_eq!(live["log_bytes"], 80);
    assert_eq!(live["output"], "");
    assert_eq!(live["command_exit_code"], Value::Null);
    assert_eq!(live["timed_out"], false);
    assert_eq!(live["truncated"], false);
    // The archive resumes after its last recorded line.
    let again = f.operator.runtime_container("c-first", &first).await?;
    assert_eq!(
        again.last_timestamp.as_deref(),
        Some("2026-11-24T10:00:00.200000000Z")
    );

    // It crashed (exit 3) and the pod restarted it: a second generation of the same pod.
    let mut crashed = first.clone();
    crashed.running = false;
    crashed.status = "exited".into();
    crashed.exit_code = Some(3);
    crashed.finished_at = time("2026-11-24T10:01:00Z");
    let ended = f.operator.runtime_container("c-first", &crashed).await?;
    assert!(ended.finished);
    let second = f.running("web-prod-1", "2026-11-24T10:01:01Z");
    assert_eq!(
        f.operator
            .runtime_container("c-second", &second)
            .await?
            .container_index,
        1
    );
    // A late report of the first one running changes nothing: it ended.
    f.operator.runtime_container("c-first", &first).await?;

    let newest = f.runtime_log(json!({})).await.expect(200, None);
    assert_eq!(newest["container_index"], 1);
    assert_eq!(newest["restart_count"], 1);
    assert_eq!(newest["source"], "live");
    assert_eq!(newest["available_indices"], json!([0, 1]));
    assert_eq!(newest["log_bytes"], 0);
    let old = f
        .runtime_log(json!({"container_index": 0}))
        .await
        .expect(200, None);
    assert_eq!(old["source"], "archived");
    assert_eq!(old["running"], false);
    assert_eq!(old["status"], "exited");
    assert_eq!(old["exit_code"], 3);
    assert_eq!(old["finished_at"], "2026-11-24T10:01:00Z");
    assert_eq!(old["log_bytes"], 80);

    // A new deploy's pod starts its own count; an OOM kill is reported as such.
    let mut other_pod = f.running("web-prod-2", "2026-11-24T10:02:00Z");
    other_pod.running = false;
    other_pod.status = "exited".into();
    other_pod.exit_code = Some(137);
    other_pod.oom_killed = true;
    other_pod.finished_at = time("2026-11-24T10:03:00Z");
    f.operator.runtime_container("c-third", &other_pod).await?;
    let third = f
        .runtime_log(json!({"container_index": 2}))
        .await
        .expect(200, None);
    assert_eq!(third["restart_count"], 0);
    assert_eq!(third["oom_killed"], true);
    assert_eq!(third["exit_code"], 137);

    // An operator that starts lists every app pod: a generation recorded as running that no pod shows any more
    // ended while no archive watched. The ones shown keep running; the ended ones keep their facts.
    f.operator
        .runtime_container("c-orphan", &f.running("web-prod-3", "2026-11-24T10:04:00Z"))
        .await?;
    let ended = f
        .operator
        .settle_runtime_containers(&RuntimeSettle {
            container_ids: vec!["c-second".into()],
        })
        .await?;
    assert_eq!(ended, 1);
    let orphan = f
        .runtime_log(json!({"container_index": 3}))
        .await
        .expect(200, None);
    assert_eq!(orphan["running"], false);
    assert_eq!(orphan["source"], "archived");
    assert!(orphan["finished_at"].is_string());
    let still = f
        .runtime_log(json!({"container_index": 1}))
        .await
        .expect(200, None);
    assert_eq!(still["running"], true);
    let kept = f
        .runtime_log(json!({"container_index": 0}))
        .await
        .expect(200, None);
    assert_eq!(kept["finished_at"], "2026-11-24T10:01:00Z");
    Ok(())
}

#[tokio::test]
async fn the_route_s_error_rows() -> Result<()> {
    let f = fixture("rterrors").await?;
    f.operator
        .runtime_container("c-only", &f.running("web-prod-1", "2026-11-24T10:00:00Z"))
        .await?;
    // An index the channel never had.
    let missing = f
        .runtime_log(json!({"container_index": 7}))
        .await
        .expect(404, Some("not_found"));
    assert!(missing["error"]["message"].as_str().unwrap().contains('7'));
    // A command past 4096 characters, before anything runs.
    let long = "x".repeat(4097);
    let refused = f
        .runtime_log(json!({"command": long}))
        .await
        .expect(400, Some("bad_request"));
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("4096")
    );
    // 4096 characters (multi-byte ones count once) pass the check; with no sandbox on this platform the host
    // cannot answer.
    let unavailable = f
        .runtime_log(json!({"command": "é".repeat(4096)}))
        .await
        .expect(503, Some("service_unavailable"));
    assert!(
        unavailable["error"]["message"]
            .as_str()
            .unwrap()
            .contains("sandbox")
    );
    // A malformed body.
    f.runtime_log(json!({"container_index": "newest"}))
        .await
        .expect(400, None);

    // Someone else's app is not there at all; a token without deploy:* is refused.
    let bob = f.api.user("rterrorsb", "builder").await?;
    let path = format!("/apps/{}/channels/{}/runtime/log", f.app, f.channel);
    f.api
        .post(&path, &bob, json!({}))
        .await
        .expect(404, Some("not_found"));
    let narrow = f
        .api
        .token(f.alice.id, &["repo:*".to_owned()], false, None)
        .await?;
    let reply = f
        .api
        .call(
            axum::http::Method::POST,
            &path,
            Some(&narrow),
            Some(json!({})),
        )
        .await;
    reply.expect(403, Some("scope_denied"));
    Ok(())
}

#[tokio::test]
async fn the_archive_is_bounded_per_channel_in_bytes_and_generations_and_goes_with_its_app()
-> Result<()> {
    let f = fixture("rtbounds").await?;
    f.operator
        .runtime_container("c-chatty", &f.running("web-prod-1", "2026-11-24T10:00:00Z"))
        .await?;
    // 12 MiB in 1 MiB appends: the oldest output is dropped, the newest kept.
    let filler = "y".repeat(1023);
    for second in 0..12 {
        let mut batch = String::new();
        for n in 0..990 {
            batch.push_str(&format!("2026-11-24T10:00:{second:02}.{n:09}Z {filler}\n"));
        }
        f.operator
            .append_runtime_log("c-chatty", batch.into_bytes())
            .await?;
    }
    let log = f.runtime_log(json!({})).await.expect(200, None);
    let kept = log["log_bytes"].as_i64().unwrap();
    assert!(kept <= CHANNEL_BYTES, "{kept} bytes kept");
    assert!(kept >= CHANNEL_BYTES / 2, "{kept} bytes kept");
    let id = f.api.state.db().clone();
    let output: Vec<u8> = sqlx::query_scalar(
        "SELECT string_agg(content, ''::bytea ORDER BY seq) FROM runtime_log_chunks",
    )
    .fetch_one(&id)
    .await?;
    assert_eq!(output.len() as i64, kept);
    assert!(
        output.starts_with(b"2026-11-24T10:00:"),
        "whole lines from the start"
    );
    assert!(
        String::from_utf8_lossy(&output[output.len() - 1100..]).contains("10:00:11.000000989Z")
    );

    // At most 50 generations: a crash-looping container's oldest go first.
    for n in 0..51 {
        f.operator
            .runtime_container(
                &format!("c-loop-{n}"),
                &f.running("web-prod-2", "2026-11-24T11:00:00Z"),
            )
            .await?;
    }
    let looped = f.runtime_log(json!({})).await.expect(200, None);
    let indices: Vec<i64> = looped["available_indices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i.as_i64().unwrap())
        .collect();
    assert_eq!(indices, (2..=51).collect::<Vec<_>>());
    assert_eq!(looped["restart_count"], 50);
    f.runtime_log(json!({"container_index": 0}))
        .await
        .expect(404, Some("not_found"));

    // Malformed appends and appends to a generation never recorded are refused.
    let malformed = f
        .operator
        .append_runtime_log("c-chatty", b"no timestamp".to_vec())
        .await;
    assert!(matches!(malformed, Err(CallError::Unavailable(m)) if m.contains("400")));
    let unknown = f
        .operator
        .append_runtime_log("c-chatty", b"2026-11-24T10:00:00Z x\n".to_vec())
        .await;
    assert!(
        matches!(unknown, Err(CallError::NotFound(_))),
        "{unknown:?}"
    );

    // The app goes, and its generations with it; the archive can no longer record any.
    f.api
        .delete(&format!("/apps/{}", f.app), &f.alice)
        .await
        .expect(204, None);
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM runtime_containers")
        .fetch_one(&id)
        .await?;
    assert_eq!(left, 0);
    let late = f
        .operator
        .runtime_container("c-late", &f.running("web-prod-1", "2026-11-24T10:05:00Z"))
        .await;
    assert!(matches!(late, Err(CallError::NotFound(_))), "{late:?}");
    Ok(())
}
