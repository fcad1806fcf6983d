//! The installed platform's repositories moved from the api's volume into object storage, as the chart README says
//! to (api scaled to 0, `slipway admin git-import` in a pod on the data claim, `helm upgrade` with
//! `api.git.storage=objectStore`, `movedFromVolume` and two replicas; without `movedFromVolume` the chart refuses
//! and nothing changes), and the two replicas serving them: every ref, the SSH host key
//! and an existing clone survive the move, a push through one pod is what a clone through the other gets, and 200
//! rounds of pushes racing through the two pods each have exactly one winner with no update lost.
//!
//! One test, because the steps follow each other on one release. It ends by putting the release back on the
//! volume with one replica and deleting its app, as `upgrade::` expects the release.

#![allow(clippy::unwrap_used)]

use crate::support;

use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::{Value, json};
use support::git::{Workspace, http_remote};
use support::platform::{Account, Installed, hack, kubectl, until};
use tokio::io::AsyncBufReadExt;

/// Rounds of racing pushes.
const ROUNDS: usize = 200;

/// `kubectl port-forward` to one pod's API port, for as long as the value lives; its base URL.
struct PodForward {
    _child: tokio::process::Child,
    url: String,
}

async fn forward(platform: &Installed, pod: &str) -> Result<PodForward> {
    let mut command = support::platform::kubectl_command(&[
        "-n",
        &platform.namespace,
        "port-forward",
        &format!("pod/{pod}"),
        ":8080",
    ])?;
    let mut child = command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .context("port-forward said nothing")??
        .context("port-forward ended")?;
    // "Forwarding from 127.0.0.1:PORT -> 8080"
    let port = line
        .split("127.0.0.1:")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .context(format!("port-forward said {line:?}"))?
        .to_owned();
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok(PodForward {
        _child: child,
        url: format!("http://127.0.0.1:{port}"),
    })
}

/// The names of the running api pods.
async fn api_pods(platform: &Installed) -> Result<Vec<String>> {
    let pods: Value = serde_json::from_str(
        &kubectl(&[
            "-n",
            &platform.namespace,
            "get",
            "pods",
            "-l",
            "app.kubernetes.io/component=api",
            "-o",
            "json",
        ])
        .await?,
    )?;
    Ok(pods["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| {
            p["metadata"]["deletionTimestamp"].is_null() && p["status"]["phase"] == "Running"
        })
        .map(|p| p["metadata"]["name"].as_str().unwrap().to_owned())
        .collect())
}

/// Runs `slipway admin git-import` in a Job shaped like the api's pod (its image, ServiceAccount, environment and
/// volumes, the data claim read only) and returns what it printed.
async fn import_job(platform: &Installed) -> Result<String> {
    let deployment = format!("{}-api", platform.release);
    let current: Value = serde_json::from_str(
        &kubectl(&[
            "-n",
            &platform.namespace,
            "get",
            "deployment",
            &deployment,
            "-o",
            "json",
        ])
        .await?,
    )?;
    let mut pod = current["spec"]["template"]["spec"].clone();
    let container = &mut pod["containers"][0];
    let data_dir = container["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "data")
        .context("the api mounts no data volume")?["mountPath"]
        .as_str()
        .unwrap()
        .to_owned();
    container["args"] = json!([
        "admin",
        "git-import",
        "--from",
        format!("{data_dir}/repos"),
        "--cache",
        "/tmp/import"
    ]);
    for field in ["ports", "readinessProbe", "livenessProbe", "startupProbe"] {
        container.as_object_mut().unwrap().remove(field);
    }
    for mount in container["volumeMounts"].as_array_mut().unwrap() {
        if mount["name"] == "data" {
            mount["readOnly"] = json!(true);
        }
    }
    pod["restartPolicy"] = json!("Never");
    let name = "git-import";
    let job = json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": platform.namespace},
        "spec": {"backoffLimit": 0, "template": {"spec": pod}},
    });
    let file = tempfile_with(&job.to_string())?;
    kubectl(&["apply", "-f", file.to_str().unwrap()]).await?;
    let waited = kubectl(&[
        "-n",
        &platform.namespace,
        "wait",
        &format!("job/{name}"),
        "--for=condition=complete",
        "--timeout=300s",
    ])
    .await;
    let logs = kubectl(&["-n", &platform.namespace, "logs", &format!("job/{name}")]).await?;
    waited.with_context(|| format!("the import did not complete:\n{logs}"))?;
    kubectl(&[
        "-n",
        &platform.namespace,
        "delete",
        &format!("job/{name}"),
        "--wait=false",
    ])
    .await?;
    Ok(logs)
}

fn tempfile_with(text: &str) -> Result<std::path::PathBuf> {
    let path = std::env::temp_dir().join(format!("slipway-job-{}.json", uuid::Uuid::new_v4()));
    std::fs::write(&path, text)?;
    Ok(path)
}

async fn scale_api(platform: &Installed, replicas: u32) -> Result<()> {
    let deployment = format!("deployment/{}-api", platform.release);
    kubectl(&[
        "-n",
        &platform.namespace,
        "scale",
        &deployment,
        &format!("--replicas={replicas}"),
    ])
    .await?;
    if replicas == 0 {
        kubectl(&[
            "-n",
            &platform.namespace,
            "wait",
            "pods",
            "-l",
            "app.kubernetes.io/component=api",
            "--for=delete",
            "--timeout=180s",
        ])
        .await?;
    }
    Ok(())
}

/// `helm upgrade` with `values`, then waits until the api's rollout is done and the Service answers through it.
async fn set_api(platform: &Installed, account: &Account, values: &[&str]) -> Result<()> {
    let mut args = vec!["set"];
    args.extend_from_slice(values);
    hack("install.sh", &args).await?;
    kubectl(&[
        "-n",
        &platform.namespace,
        "rollout",
        "status",
        &format!("deployment/{}-api", platform.release),
        "--timeout=300s",
    ])
    .await?;
    until(
        Duration::from_secs(60),
        "the api answering through its Service",
        async || {
            Ok(platform
                .call("GET", "/apps", account, None)
                .await
                .is_ok_and(|a| a.status == 200)
                .then_some(()))
        },
    )
    .await
}

#[tokio::test]
async fn repositories_move_into_object_storage_and_two_api_replicas_serve_them() -> Result<()> {
    let platform = Installed::from_env()?;
    let account = platform.account("gitobj").await?;
    let (app_id, _) = platform.create_app(&account, "moved", "static").await?;
    let remote = http_remote(&platform.api, &account.token, &account.username, "moved");
    let ws = Workspace::new()?;
    support::git::push_refs_of_three_kinds(&ws, "w", &remote).await?;
    let refs_before = ws.git(".", &["ls-remote", &remote]).await?;
    let key_before = platform.ssh_host_key().await?;

    // An upgrade to the chart's default (repositories in object storage) is refused while the api mounts the
    // volume that holds them, and changes nothing.
    let refused = hack(
        "install.sh",
        &["set", "api.git.storage=objectStore", "api.replicaCount=2"],
    )
    .await
    .expect_err("the chart switched an api on its volume to object storage");
    assert!(
        format!("{refused:#}").contains("keeps the apps' git repositories on its volume"),
        "{refused:#}"
    );
    assert_eq!(api_pods(&platform).await?.len(), 1);
    assert_eq!(ws.git(".", &["ls-remote", &remote]).await?, refs_before);

    // The move, as the chart README says.
    scale_api(&platform, 0).await?;
    let printed = import_job(&platform).await?;
    println!("git-import printed:\n{printed}");
    assert!(printed.contains(" 0 failed"), "{printed}");
    assert!(
        printed.contains(&format!("{}/moved: 3 refs checked", account.username)),
        "{printed}"
    );
    set_api(
        &platform,
        &account,
        &[
            "api.git.storage=objectStore",
            "api.git.movedFromVolume=true",
            "api.replicaCount=2",
        ],
    )
    .await?;

    // Every ref, HEAD and the host key are as they were; the clone made before fetches and pushes on.
    assert_eq!(ws.git(".", &["ls-remote", &remote]).await?, refs_before);
    assert_eq!(platform.ssh_host_key().await?, key_before);
    ws.git("w", &["fetch", "-q", &remote]).await?;
    ws.write("w/after.txt", "after\n")?;
    ws.git("w", &["add", "."]).await?;
    ws.git("w", &["commit", "-qm", "after the move"]).await?;
    ws.git("w", &["push", "-q", &remote, "HEAD:master"]).await?;

    // Two pods: a push through one is what a clone through the other gets.
    let pods = api_pods(&platform).await?;
    assert_eq!(pods.len(), 2, "{pods:?}");
    let (a, b) = (
        forward(&platform, &pods[0]).await?,
        forward(&platform, &pods[1]).await?,
    );
    let via = [
        http_remote(&a.url, &account.token, &account.username, "moved"),
        http_remote(&b.url, &account.token, &account.username, "moved"),
    ];
    ws.git(".", &["clone", "-q", &via[1], "w1"]).await?;
    // A token of its own for the race's fetches: each pod then sees two requests a round per token, inside the
    // default budget of 600 a minute.
    let fetcher = platform
        .call(
            "POST",
            "/tokens",
            &account,
            Some(json!({"label": "race fetches"})),
        )
        .await?
        .expect(200)["token"]
        .as_str()
        .context("token")?
        .to_owned();
    let fetch_via = [
        http_remote(&a.url, &fetcher, &account.username, "moved"),
        http_remote(&b.url, &fetcher, &account.username, "moved"),
    ];
    assert_eq!(
        ws.git("w1", &["rev-parse", "HEAD"]).await?,
        ws.git("w", &["rev-parse", "HEAD"]).await?
    );

    // Pushes racing through the two pods: one winner a round, and the branch's first-parent history is exactly
    // the winners in order (no update lost, none made twice).
    let base = ws.git("w", &["rev-parse", "HEAD"]).await?.trim().to_owned();
    let ws = std::sync::Arc::new(ws);
    let mut winners = Vec::new();
    let started = std::time::Instant::now();
    for round in 0..ROUNDS {
        winners.push(support::git::race_round(&ws, ["w", "w1"], &fetch_via, &via, round).await?);
    }
    ws.git("w1", &["fetch", "-q", &via[0], "master"]).await?;
    let history = ws
        .git(
            "w1",
            &["rev-list", "--first-parent", &format!("{base}..FETCH_HEAD")],
        )
        .await?;
    let mut expected = winners.clone();
    expected.reverse();
    assert_eq!(history.lines().collect::<Vec<_>>(), expected);
    println!(
        "pushes raced through two api pods: {ROUNDS} rounds in {:.0?}, one winner each, none lost",
        started.elapsed()
    );

    // Back on the volume with one replica, as `upgrade::` expects the release; this app lived only in object
    // storage, so it goes.
    drop((a, b));
    platform.delete_app(&account, &app_id).await?;
    set_api(
        &platform,
        &account,
        &[
            "api.git.storage=volume",
            "api.git.movedFromVolume=false",
            "api.replicaCount=1",
        ],
    )
    .await?;
    Ok(())
}
