//! Deploys end to end on the real single-node cluster, through the REST API and the operator: an `app` (Python)
//! and a `docker` channel are built by BuildKit, run, pass readiness and answer through their Service; a version
//! that never answers fails after the readiness window while the old one keeps answering; a ready-file app goes
//! live on the file; env changes reach the app only with the next deploy; an operator stopped mid-deploy is
//! replaced and the deploy still finishes; deleting a channel removes its workloads; a rewind serves the previous
//! image again, without a build and with the current environment.

// Fixture helpers panic on a malformed response: in a test that is the failure to report.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::time::Duration;

use anyhow::Result;
use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use kube::api::ListParams;
use serde_json::{Value, json};
use slipway_crds::{Deploy, ReadyBy};
use slipway_testkit::node::{BUSYBOX, run_pod};
use support::{TestApi, User};

/// A build, a rollout and readiness; generous for a loaded 2-core machine.
const DEPLOY_WITHIN: Duration = Duration::from_secs(600);
/// The readiness window of these tests' operators, which a version that never answers waits out. The shipped two
/// minutes (a unit test holds them) would make that test the tier's longest; a small Python app is ready within
/// seconds, and within this on a loaded node too.
const READINESS_WINDOW: Duration = Duration::from_secs(60);

/// A web server that answers GET / with the values the spec's runtime contract puts in its environment.
const SERVER: &str = r#"import os, http.server

class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = "version={} greeting={} port={} forward={} ready_file={} uid={}\n".format(
            open("/app/VERSION").read().strip(), os.environ.get("GREETING", ""), os.environ["SVC_HTTP_PORT"],
            os.environ["SVC_FORWARD_PORT"], os.environ["SVC_READY_FILE"], os.getuid()).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

http.server.HTTPServer(("0.0.0.0", int(os.environ["SVC_HTTP_PORT"])), Handler).serve_forever()
"#;

struct Platform {
    api: TestApi,
    alice: User,
    /// A namespace of the test's own, where pods that fetch pages run (tenant namespaces are `restricted`).
    probe_ns: slipway_testkit::TestNamespace,
    client: kube::Client,
}

async fn platform(prefix: &str) -> Result<Platform> {
    let api = TestApi::start().await?;
    let alice = api.user(prefix, "builder").await?;
    let (client, probe_ns) = slipway_testkit::setup(&format!("{prefix}-probe")).await?;
    Ok(Platform {
        api,
        alice,
        probe_ns,
        client,
    })
}

impl Platform {
    /// Creates an app of `template` and returns (app id, prod channel id).
    async fn app(&self, name: &str, template: &str) -> (String, String) {
        let app = self.api.create_app(&self.alice, name, template).await;
        (
            app["id"].as_str().unwrap().to_owned(),
            app["channels"][0]["id"].as_str().unwrap().to_owned(),
        )
    }

    async fn deploy_and_wait(
        &self,
        app: &str,
        channel: &str,
        sha: &str,
    ) -> Result<(String, Value)> {
        let id = self
            .api
            .deploy(&self.alice, app, channel, json!({"sha": sha}))
            .await;
        let log = self
            .api
            .finished_deploy(&self.alice, app, channel, &id, DEPLOY_WITHIN)
            .await?;
        Ok((id, log))
    }

    /// GET / of the channel's Service, from a pod. kube-proxy on the node applies a Service's new endpoints a
    /// moment after they change, so a refused connection right after a switch is tried again (a wrong answer is not).
    async fn page(&self, service: &str, tag: &str) -> Result<String> {
        let url = self.service_url(service);
        self.fetch(
            tag,
            &format!("for i in 1 2 3 4 5; do timeout 20 wget -q -O - {url} && exit 0; sleep 2; done; exit 1"),
            Duration::from_secs(180),
        )
        .await
    }

    /// GET / of the channel's Service right after a switch to a new version, until it answers with `expected`:
    /// for a moment after the switch kube-proxy may still send a connection to the old pod, which still runs out
    /// its drain. Where the old version must keep answering, [`Self::page`] takes one answer as final.
    async fn page_showing(&self, service: &str, tag: &str, expected: &str) -> Result<String> {
        let url = self.service_url(service);
        self.fetch(
            tag,
            &format!(
                "for i in 1 2 3 4 5 6 7 8 9 10; do out=$(timeout 20 wget -q -O - {url}) && case \"$out\" in *'{expected}'*) echo \"$out\"; exit 0;; esac; sleep 2; done; echo \"$out\"; exit 1"
            ),
            Duration::from_secs(240),
        )
        .await
    }

    fn service_url(&self, service: &str) -> String {
        format!("http://{service}.{}.svc/", self.alice.namespace)
    }

    /// Runs `script` in a probe pod named after `tag` and returns its output.
    async fn fetch(&self, tag: &str, script: &str, within: Duration) -> Result<String> {
        run_pod(
            &self.client,
            self.probe_ns.name(),
            &format!("fetch-{tag}"),
            BUSYBOX,
            &["sh", "-c", script],
            within,
        )
        .await
    }

    async fn set_env(&self, app: &str, key: &str, value: &str) {
        self.api
            .post(
                &format!("/apps/{app}/env"),
                &self.alice,
                json!({"key": key, "value": value}),
            )
            .await
            .expect(204, None);
    }

    async fn channel(&self, app: &str, channel: &str) -> Value {
        self.api
            .get(&format!("/apps/{app}/channels/{channel}"), &self.alice)
            .await
            .expect(200, None)
    }

    async fn deploy_resource(&self, id: &str) -> Result<Deploy> {
        self.api.deploy_resource(&self.alice.namespace, id).await
    }

    /// Starts the operator, creates the Python app `name` with `GREETING` set, commits v1 of it and deploys that;
    /// returns (app id, prod channel id, v1's sha, the deploy's id, its finished log).
    async fn python_v1(
        &self,
        name: &str,
        greeting: &str,
    ) -> Result<(String, String, String, String, Value)> {
        self.api
            .start_operator_with_readiness_window(&self.alice.namespace, READINESS_WINDOW)
            .await?;
        let (app, prod) = self.app(name, "app").await;
        self.set_env(&app, "GREETING", greeting).await;
        let v1 = self
            .api
            .commit(
                &self.alice,
                &app,
                python_app("v1", "exec python3 server.py\n"),
            )
            .await;
        let (first, log) = self.deploy_and_wait(&app, &prod, &v1).await?;
        assert_eq!(log["status"], "success", "{}", log["log"]);
        Ok((app, prod, v1, first, log))
    }
}

fn python_app(version: &str, launch: &str) -> Value {
    json!({
        "server.py": SERVER,
        "VERSION": format!("{version}\n"),
        "launch.sh": launch,
    })
}

#[tokio::test]
async fn an_app_channel_builds_runs_and_keeps_serving_through_a_failed_deploy() -> Result<()> {
    let p = platform("appdeploy").await?;
    let (app, prod, v1, first, log) = p.python_v1("web", "hello").await?;
    let text = log["log"].as_str().unwrap();
    assert!(text.contains("[build]"), "{text}");
    let page = p.page("web-prod", "v1").await?;
    assert!(page.contains("version=v1 greeting=hello"), "{page}");
    assert!(page.contains("forward=7000"), "{page}");
    assert!(page.contains("ready_file=/tmp/"), "{page}");
    assert!(page.contains("uid=10001"), "{page}");

    // The env snapshot shows what the deploy got; system keys by name only.
    let snapshot = p
        .api
        .get(
            &format!("/apps/{app}/channels/{prod}/deploys/{first}/env"),
            &p.alice,
        )
        .await
        .expect(200, None);
    assert_eq!(snapshot["env"][0]["key"], "GREETING");
    assert_eq!(snapshot["env"][0]["value"], "hello");
    let system: Vec<&str> = snapshot["system_keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap())
        .collect();
    for key in [
        "SVC_HTTP_PORT",
        "PORT",
        "SVC_FORWARD_PORT",
        "SVC_READY_FILE",
    ] {
        assert!(system.contains(&key), "{system:?}");
    }

    // An env change reaches the app only with the next deploy.
    p.set_env(&app, "GREETING", "changed").await;
    let page = p.page("web-prod", "v1-again").await?;
    assert!(page.contains("greeting=hello"), "{page}");
    let (_, log) = p.deploy_and_wait(&app, &prod, &v1).await?;
    assert_eq!(log["status"], "success", "{}", log["log"]);
    let page = p
        .page_showing("web-prod", "v1-redeployed", "greeting=changed")
        .await?;
    assert!(page.contains("greeting=changed"), "{page}");

    // A version that never answers and never creates the ready file fails after the readiness window; the old
    // version keeps answering and stays the channel's commit.
    let silent = p
        .api
        .commit(&p.alice, &app, python_app("v2", "exec sleep 100000\n"))
        .await;
    let (_, log) = p.deploy_and_wait(&app, &prod, &silent).await?;
    assert_eq!(log["status"], "failed");
    let text = log["log"].as_str().unwrap();
    assert!(
        text.contains("GET /") && text.contains("/tmp/.svc-ready"),
        "names both checks: {text}"
    );
    let page = p.page("web-prod", "after-failure").await?;
    assert!(page.contains("version=v1"), "{page}");
    let channel = p.channel(&app, &prod).await;
    assert_eq!(channel["current_sha"], v1.as_str());
    assert_eq!(channel["status"], "running");

    // A commit without launch.sh fails at build time with a clear line.
    let no_launch = p
        .api
        .commit(
            &p.alice,
            &app,
            json!({"launch.sh": null, "other.txt": "x\n"}),
        )
        .await;
    let (_, log) = p.deploy_and_wait(&app, &prod, &no_launch).await?;
    assert_eq!(log["status"], "failed");
    assert!(
        log["log"].as_str().unwrap().contains("launch.sh"),
        "{}",
        log["log"]
    );

    // The inventory lists the built images, newest first, the deployed one current.
    let images = p
        .api
        .get(&format!("/apps/{app}/channels/{prod}/images"), &p.alice)
        .await
        .expect(200, None);
    let list = images["images"].as_array().unwrap();
    assert!(
        list.iter()
            .any(|i| i["sha"] == v1.as_str() && i["current"] == true),
        "{images}"
    );
    assert!(list.iter().all(|i| i["size_bytes"].as_u64().unwrap() > 0));
    Ok(())
}

#[tokio::test]
async fn a_ready_file_app_goes_live_on_the_file() -> Result<()> {
    let p = platform("readyfile").await?;
    p.api.start_operator(&p.alice.namespace).await?;
    let (app, prod) = p.app("worker", "app").await;
    let sha = p
        .api
        .commit(
            &p.alice,
            &app,
            python_app("w1", "touch \"$SVC_READY_FILE\"\nexec sleep 100000\n"),
        )
        .await;
    let (id, log) = p.deploy_and_wait(&app, &prod, &sha).await?;
    assert_eq!(log["status"], "success", "{}", log["log"]);
    let deploy = p.deploy_resource(&id).await?;
    assert_eq!(deploy.status.unwrap().ready_by, Some(ReadyBy::File));
    Ok(())
}

#[tokio::test]
async fn a_docker_channel_runs_its_dockerfile_and_survives_an_operator_restart() -> Result<()> {
    let p = platform("dockerdeploy").await?;
    let operator = p.api.start_operator(&p.alice.namespace).await?;
    let (app, prod) = p.app("box", "docker").await;
    let sha = p
        .api
        .commit(
            &p.alice,
            &app,
            json!({
                "Dockerfile": "FROM python:3.13-slim\nCOPY server.py VERSION /app/\nWORKDIR /app\nCMD [\"python3\", \"/app/server.py\"]\n",
                "server.py": SERVER,
                "VERSION": "d1\n",
            }),
        )
        .await;
    let id = p
        .api
        .deploy(&p.alice, &app, &prod, json!({"sha": sha}))
        .await;
    // Stop the operator once the deploy is under way, then start another: the deploy picks up where it was.
    slipway_testkit::wait_until(Duration::from_secs(120), || {
        let p = &p;
        let id = id.clone();
        async move {
            let d = p.deploy_resource(&id).await?;
            Ok(d.status.map(|s| s.phase) == Some(slipway_crds::DeployPhase::Running))
        }
    })
    .await?;
    operator.abort();
    tokio::time::sleep(Duration::from_secs(3)).await;
    p.api.start_operator(&p.alice.namespace).await?;
    let log = p
        .api
        .finished_deploy(&p.alice, &app, &prod, &id, DEPLOY_WITHIN)
        .await?;
    assert_eq!(log["status"], "success", "{}", log["log"]);
    let page = p.page("box-prod", "docker").await?;
    assert!(page.contains("version=d1"), "{page}");

    // Deleting a non-prod channel stops its workloads.
    let next_id = p
        .api
        .post(
            &format!("/apps/{app}/channels"),
            &p.alice,
            json!({"name": "next", "git_ref_binding": "branch:next"}),
        )
        .await
        .expect(200, None)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (_, log) = p.deploy_and_wait(&app, &next_id, &sha).await?;
    assert_eq!(log["status"], "success", "{}", log["log"]);
    let deployments: Api<Deployment> = Api::namespaced(p.client.clone(), &p.alice.namespace);
    let of_next = |list: &[Deployment]| {
        list.iter()
            .filter(|d| {
                d.metadata
                    .name
                    .as_deref()
                    .unwrap_or("")
                    .starts_with("box-next")
            })
            .count()
    };
    assert_eq!(
        of_next(&deployments.list(&ListParams::default()).await?.items),
        1
    );
    p.api
        .delete(&format!("/apps/{app}/channels/{next_id}"), &p.alice)
        .await
        .expect(204, None);
    slipway_testkit::wait_until(Duration::from_secs(60), || {
        let deployments = deployments.clone();
        async move { Ok(of_next(&deployments.list(&ListParams::default()).await?.items) == 0) }
    })
    .await?;
    // ... and its images leave the registry before the channel itself goes.
    let tags = format!(
        "http://{}/v2/{}/box-next/tags/list",
        slipway_testkit::node::registry()?,
        p.alice.namespace
    );
    slipway_testkit::wait_until(Duration::from_secs(60), || {
        let tags = tags.clone();
        async move {
            let res = reqwest::get(&tags).await?;
            let left: Value = if res.status() == 404 {
                json!({})
            } else {
                res.json().await?
            };
            Ok(left["tags"].as_array().is_none_or(|t| t.is_empty()))
        }
    })
    .await?;
    Ok(())
}

#[tokio::test]
async fn a_rewind_serves_the_previous_image_again_without_a_build() -> Result<()> {
    let p = platform("rewind").await?;
    let (app, prod, v1, first, log) = p.python_v1("back", "first").await?;
    assert_eq!(log["rewound_from"], Value::Null);
    // v2 passes readiness but serves the wrong thing.
    let v2 = p
        .api
        .commit(
            &p.alice,
            &app,
            python_app("v2-wrong", "exec python3 server.py\n"),
        )
        .await;
    let (_, log) = p.deploy_and_wait(&app, &prod, &v2).await?;
    assert_eq!(log["status"], "success", "{}", log["log"]);
    let page = p
        .page_showing("back-prod", "rw-v2", "version=v2-wrong")
        .await?;
    assert!(page.contains("version=v2-wrong"), "{page}");

    // The rewind runs v1's image again, with the environment as it is now.
    p.set_env(&app, "GREETING", "second").await;
    let reply = p
        .api
        .post(
            &format!("/apps/{app}/channels/{prod}/rewind"),
            &p.alice,
            Value::Null,
        )
        .await
        .expect(202, None);
    assert_eq!(reply["rewound_from"], first.as_str());
    assert_eq!(reply["sha"], v1.as_str());
    let id = reply["deploy_id"].as_str().unwrap().to_owned();
    let log = p
        .api
        .finished_deploy(&p.alice, &app, &prod, &id, DEPLOY_WITHIN)
        .await?;
    assert_eq!(log["status"], "success", "{}", log["log"]);
    assert_eq!(log["git_sha"], v1.as_str());
    assert_eq!(log["rewound_from"], first.as_str());
    let text = log["log"].as_str().unwrap();
    assert!(!text.contains("[build]"), "a rewind builds nothing: {text}");
    assert!(
        text.contains(&format!(
            "[deploy] rewinding to {v1} (image of deploy {first}"
        )),
        "{text}"
    );
    let page = p
        .page_showing("back-prod", "rw-back", "version=v1 greeting=second")
        .await?;
    assert!(page.contains("version=v1 greeting=second"), "{page}");
    let channel = p.channel(&app, &prod).await;
    assert_eq!(channel["current_sha"], v1.as_str());
    assert_eq!(channel["pending_deploy"], Value::Null);

    // The same image by digest, and no build Job was made for the rewind.
    let image = |d: Deploy| d.status.and_then(|s| s.image).map(|i| i.reference);
    let original = image(p.deploy_resource(&first).await?).unwrap();
    assert!(original.contains("@sha256:"), "{original}");
    assert_eq!(image(p.deploy_resource(&id).await?), Some(original));
    let jobs: Api<k8s_openapi::api::batch::v1::Job> =
        Api::namespaced(p.client.clone(), &p.alice.namespace);
    assert!(jobs.get_opt(&format!("build-{id}")).await?.is_none());
    Ok(())
}
