//! The installed platform's repositories moved from the api's volume into object storage, as the chart README says
//! to (api scaled to 0, `slipway admin git-import` in a pod on the data claim, `helm upgrade` with
//! `api.git.storage=objectStore`, `movedFromVolume` and two replicas; without `movedFromVolume` the chart refuses
//! and nothing changes), and the two replicas serving them: every ref, the SSH host key
//! and an existing clone survive the move, a push through one pod is what a clone through the other gets, and 200
//! rounds of pushes racing through the two pods each have exactly one winner with no update lost. A push whose api
//! process is killed (SIGKILL) mid-way publishes nothing and its retry through the other pod succeeds; a new pod's
//! first clone comes whole from the bucket. Then a second node joins and each node is drained in turn under load
//! (`drain`).
//!
//! One test, because the steps follow each other on one release. It ends by putting the release back on the
//! volume with one replica and deleting its app, as `upgrade::` expects the release.

#![allow(clippy::unwrap_used)]

mod drain;

use crate::support;

use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::{Value, json};
use support::git::{Workspace, http_remote};
use support::platform::{Account, Installed, hack, kubectl, until};
use tokio::io::AsyncBufReadExt;

/// Rounds of racing pushes.
const ROUNDS: usize = 200;

/// Files of 1 MiB of random bytes in the push whose api process is killed: long enough a push to be cut in the
/// middle.
const KILL_FILES: usize = 300;

/// How long moving those 300 MB through one pod may take.
const KILL_PUSH_WITHIN: Duration = Duration::from_secs(600);

/// Percent of a push's objects written when its api process is killed.
const KILL_AT_PERCENT: u32 = 30;

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

/// How a push whose api process was killed ended.
struct Killed {
    /// Whether git reported success.
    ok: bool,
    /// What git printed.
    stderr: String,
    /// Percent of the objects written when the process was killed.
    written: u32,
    /// How many times the container had been restarted before the kill.
    restarts: u64,
}

/// Pushes `HEAD:master` of `dir` to `remote` (which goes through the api pod `pod`) and, once git has written
/// [`KILL_AT_PERCENT`]% of the objects, kills that pod's api process with SIGKILL.
async fn push_killed_midway(
    ws: &Workspace,
    dir: &str,
    remote: &str,
    platform: &Installed,
    pod: &str,
) -> Result<Killed> {
    use tokio::io::AsyncReadExt;
    let mut child = ws
        .command(dir, &["push", "--progress", remote, "HEAD:master"])
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    let mut stderr = child.stderr.take().context("git push has no stderr")?;
    let mut printed = String::new();
    let mut chunk = [0u8; 4096];
    let written = loop {
        let read = tokio::time::timeout(Duration::from_secs(120), stderr.read(&mut chunk))
            .await
            .context("git push printed nothing for 120s")??;
        anyhow::ensure!(
            read > 0,
            "git push ended before {KILL_AT_PERCENT}% was written:\n{printed}"
        );
        printed.push_str(&String::from_utf8_lossy(&chunk[..read]));
        if let Some(done) = writing_percent(&printed).filter(|d| *d >= KILL_AT_PERCENT) {
            break done;
        }
    };
    let restarts = platform.kill_container(pod, "api").await?;
    stderr.read_to_string(&mut printed).await?;
    let status = tokio::time::timeout(Duration::from_secs(120), child.wait())
        .await
        .context("git push did not end after its api process was killed")??;
    Ok(Killed {
        ok: status.success(),
        stderr: printed,
        written,
        restarts,
    })
}

/// The last percent of git's `Writing objects:  NN% (...)` progress in `progress`.
fn writing_percent(progress: &str) -> Option<u32> {
    progress
        .rsplit(['\r', '\n'])
        .filter(|line| line.contains('%'))
        .find_map(|line| {
            line.trim()
                .strip_prefix("Writing objects:")?
                .split('%')
                .next()?
                .trim()
                .parse()
                .ok()
        })
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
    let started = std::time::Instant::now();
    let (winners, at_server) =
        support::git::race_rounds(&ws, ["w", "w1"], &fetch_via, &via, ROUNDS).await?;
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
        "pushes raced through two api pods: {ROUNDS} rounds in {:.0?} ({at_server} declined by the server), one \
         winner each, none lost",
        started.elapsed()
    );

    // kill -9 of the api process a push goes through, mid-push: the push fails and publishes nothing, the retry
    // through the other pod succeeds, and the restarted process clears the killed push's quarantine.
    drop((a, b));
    ws.git(".", &["clone", "-q", &remote, "k"]).await?;
    let before_kill = ws.git("k", &["rev-parse", "HEAD"]).await?;
    for file in 0..KILL_FILES {
        let mut random = std::fs::File::open("/dev/urandom")?;
        let mut out = std::fs::File::create(ws.path(&format!("k/big-{file}.bin")))?;
        std::io::copy(&mut std::io::Read::take(&mut random, 1 << 20), &mut out)?;
    }
    ws.git("k", &["add", "."]).await?;
    ws.git("k", &["commit", "-qm", "big"]).await?;
    let a = forward(&platform, &pods[0]).await?;
    let via_a = http_remote(&a.url, &account.token, &account.username, "moved");
    let killed = push_killed_midway(&ws, "k", &via_a, &platform, &pods[0]).await?;
    println!(
        "killed {} with {}% of the push's objects written",
        pods[0], killed.written
    );
    assert!(
        !killed.ok,
        "the push went through the killed pod: {}",
        killed.stderr
    );
    drop(a);
    let b = forward(&platform, &pods[1]).await?;
    let via_b = http_remote(&b.url, &account.token, &account.username, "moved");
    assert_eq!(
        ws.git(".", &["ls-remote", &via_b, "refs/heads/master"])
            .await?,
        format!("{}\trefs/heads/master\n", before_kill.trim())
    );
    ws.git_within(
        "k",
        &["push", "-q", &via_b, "HEAD:master"],
        KILL_PUSH_WITHIN,
    )
    .await?;
    let big = ws.git("k", &["rev-parse", "HEAD"]).await?;
    // The retry's pack went up while the pod received it.
    let logs = kubectl(&["-n", &platform.namespace, "logs", &pods[1], "-c", "api"]).await?;
    assert!(
        logs.lines()
            .any(|l| l.contains("published a ref update") && l.contains("\"streamed\":1")),
        "the retry's pack was not streamed to the bucket:\n{logs}"
    );
    platform
        .wait_restarted(&pods[0], "api", killed.restarts)
        .await?;
    let logs = kubectl(&["-n", &platform.namespace, "logs", &pods[0], "-c", "api"]).await?;
    assert!(
        logs.contains("removed what killed git processes left in the repository caches"),
        "the restarted api did not clear the killed push's quarantine:\n{logs}"
    );

    // A new pod's first clone comes from the bucket alone, whole.
    drop(b);
    kubectl(&["-n", &platform.namespace, "delete", "pod", &pods[1]]).await?;
    let fresh = until(
        Duration::from_secs(180),
        "a new api pod in place of the deleted one",
        async || {
            let now = api_pods(&platform).await?;
            Ok((now.len() == 2 && !now.contains(&pods[1]))
                .then(|| now.into_iter().find(|p| *p != pods[0]))
                .flatten())
        },
    )
    .await?;
    let c = forward(&platform, &fresh).await?;
    let via_c = http_remote(&c.url, &account.token, &account.username, "moved");
    ws.git_within(".", &["clone", "-q", &via_c, "cold"], KILL_PUSH_WITHIN)
        .await?;
    assert_eq!(ws.git("cold", &["rev-parse", "HEAD"]).await?, big);
    ws.git("cold", &["fsck", "--strict", "--no-dangling"])
        .await?;
    drop(c);

    drain::each_node_drained_under_load(&account, ws.clone(), &remote).await?;

    // Back on the volume with one replica, as `upgrade::` expects the release; this app lived only in object
    // storage, so it goes.
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
