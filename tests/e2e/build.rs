//! The build step of `app` and `docker` deploys on the real node: apps are created and committed to through the
//! API (served where pods reach it), a Deploy resource is made by hand, and the build step is advanced until it
//! settles. The build Job fetches the commit through a signed URL, builds with the node's BuildKit and pushes to
//! the node's registry; the tests read the registry, the deploy log in the platform database and the image itself.
//!
//! Builds share one cluster-wide queue, so the tests here run one at a time.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};
use slipway_controllers::Context;
use slipway_controllers::build::registry::Registry;
use slipway_controllers::build::{self, BuildRequest, BuildState};
use slipway_crds::{App, Channel, Deploy, DeployImage, DeploySpec};
use support::{TestApi, User};

/// The basic plan's cap.
const CAP: u64 = 512 * 1024 * 1024;
/// Long enough for any build here on a loaded machine; a build that takes longer is a failure.
const SETTLE: Duration = Duration::from_secs(900);

static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

struct Fixture {
    api: TestApi,
    user: User,
    ctx: Arc<Context>,
}

/// One app of the fixture, with a commit of its files.
struct Committed {
    app: App,
    channel: Channel,
    sha: String,
}

impl Fixture {
    async fn start(prefix: &str) -> Result<Self> {
        let api = TestApi::start().await?;
        let user = api.user(prefix, "basic").await?;
        let ctx = api.operator_context(&user.namespace).await?;
        Ok(Self { api, user, ctx })
    }

    /// Creates an app with `template` and commits `files` (path to content) to its master branch.
    async fn app(&self, name: &str, template: &str, files: Value) -> Result<Committed> {
        let created = self.api.create_app(&self.user, name, template).await;
        let app_id = created["id"].as_str().context("app id")?;
        let sha = self
            .api
            .post(
                &format!("/apps/{app_id}/changeset"),
                &self.user,
                json!({"message": "the files to build", "changes": files}),
            )
            .await
            .expect(200, None)["sha"]
            .as_str()
            .context("commit sha")?
            .to_owned();
        let app = Api::<App>::namespaced(self.api.kube.clone(), &self.user.namespace)
            .get(name)
            .await?;
        let channel = Api::<Channel>::namespaced(self.api.kube.clone(), &self.user.namespace)
            .get(&format!("{name}.prod"))
            .await?;
        Ok(Committed { app, channel, sha })
    }

    /// Commits `files` on top of the app of `committed`; the new commit, same app and channel.
    async fn recommit(&self, committed: &Committed, files: Value) -> Result<Committed> {
        let app_id = committed.app.uid().context("app uid")?;
        let sha = self
            .api
            .post(
                &format!("/apps/{app_id}/changeset"),
                &self.user,
                json!({"message": "more files to build", "changes": files}),
            )
            .await
            .expect(200, None)["sha"]
            .as_str()
            .context("commit sha")?
            .to_owned();
        Ok(Committed {
            app: committed.app.clone(),
            channel: committed.channel.clone(),
            sha,
        })
    }

    /// A Deploy of the commit to the app's prod channel.
    async fn deploy(&self, name: &str, committed: &Committed) -> Result<Deploy> {
        let mut deploy = Deploy::new(
            name,
            DeploySpec {
                channel: committed.channel.name_any(),
                sha: Some(committed.sha.clone()),
                git_ref: None,
                rewind_of: None,
                image: None,
            },
        );
        deploy.metadata.namespace = Some(self.user.namespace.clone());
        Ok(
            Api::<Deploy>::namespaced(self.api.kube.clone(), &self.user.namespace)
                .create(&PostParams::default(), &deploy)
                .await?,
        )
    }

    async fn advance(
        &self,
        deploy: &Deploy,
        committed: &Committed,
        cap: u64,
    ) -> Result<BuildState> {
        let req = BuildRequest {
            deploy,
            app: &committed.app,
            channel: &committed.channel,
            sha: &committed.sha,
            image_cap_bytes: cap,
        };
        Ok(build::advance(&self.ctx, &req).await?)
    }

    /// Advances the build every second until it is built or failed.
    async fn settle(&self, deploy: &Deploy, committed: &Committed, cap: u64) -> Result<BuildState> {
        let deadline = tokio::time::Instant::now() + SETTLE;
        loop {
            let state = self.advance(deploy, committed, cap).await?;
            if matches!(state, BuildState::Built(_) | BuildState::Failed(_)) {
                return Ok(state);
            }
            if tokio::time::Instant::now() > deadline {
                bail!(
                    "the build of {} did not settle: {state:?}",
                    deploy.name_any()
                );
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// The deploy's log as the logs route would serve it.
    async fn log(&self, deploy: &Deploy) -> Result<String> {
        let id = deploy.uid().context("deploy uid")?.parse()?;
        let bytes =
            slipway_store::db::deploy_logs::read(self.api.state.db(), id, 0, 64 << 20).await?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    async fn tags(&self, committed: &Committed) -> Result<Vec<String>> {
        let registry = self.ctx.config.registry.clone();
        Ok(Registry::new(&registry, None)
            .tags(&build::repository(&committed.channel)?)
            .await?)
    }

    async fn build_jobs(&self) -> Result<Vec<Job>> {
        Ok(
            Api::<Job>::namespaced(self.api.kube.clone(), &self.user.namespace)
                .list(&Default::default())
                .await?
                .items,
        )
    }
}

#[track_caller]
fn built(state: BuildState) -> DeployImage {
    match state {
        BuildState::Built(image) => image,
        other => panic!("expected a built image, got {other:?}"),
    }
}

#[track_caller]
fn failed(state: BuildState) -> String {
    match state {
        BuildState::Failed(message) => message,
        other => panic!("expected a failed build, got {other:?}"),
    }
}

#[tokio::test]
async fn an_app_builds_on_its_runtime_and_runs_launch_sh_as_uid_10001() -> Result<()> {
    let _serial = ONE_AT_A_TIME.lock().await;
    let f = Fixture::start("buildapp").await?;

    // No package.json: Python 3.13. install.sh runs as root at build time; what it leaves belongs to the app.
    let py = f
        .app(
            "pyweb",
            "app",
            json!({
                "launch.sh": "#!/bin/sh\nexec python3 -m http.server \"$SVC_HTTP_PORT\"\n",
                "install.sh": "set -e\nid -u > /app/install-ran-as\nmkdir -p \"$HOME/.cache\"\necho warm > \"$HOME/.cache/pip-ish\"\n",
                "main.py": "print('hello')\n",
            }),
        )
        .await?;
    let deploy = f.deploy("pyweb-1", &py).await?;
    let image = built(f.settle(&deploy, &py, CAP).await?);
    eprintln!("built {image:?}");
    assert_eq!(image.tag, py.sha);
    assert_eq!(image.matched_base.as_deref(), Some("python:3.13-slim"));
    let registry = &f.ctx.config.registry;
    let repository = build::repository(&py.channel)?;
    assert!(
        image
            .reference
            .starts_with(&format!("{registry}/{repository}@sha256:"))
    );
    let charged = image.charged_size_bytes.context("charged size")?;
    assert!(
        charged > 0 && charged < image.size_bytes / 4,
        "only the app's layers are charged: {image:?}"
    );
    assert_eq!(f.tags(&py).await?, vec![py.sha.clone()]);

    let log = f.log(&deploy).await?;
    eprintln!("deploy log:\n{log}");
    assert!(
        log.starts_with("[build] queue position 1: building "),
        "{log}"
    );
    for line in [
        "(waited ",
        "[build] built in ",
        &format!(
            "[build] image {}, charged {} of 512 MiB (base python:3.13-slim)",
            build::image::human_size(image.size_bytes),
            build::image::human_size(charged)
        ),
    ] {
        assert!(log.contains(line), "the log has {line:?}");
    }
    assert!(
        !log.contains("[build] note:"),
        "the generated Dockerfile is on a warm base"
    );

    // Settled: asking again answers from the record and logs nothing more.
    assert_eq!(built(f.advance(&deploy, &py, CAP).await?), image);
    assert_eq!(f.log(&deploy).await?, log, "every line is logged once");

    // The image runs as 10001 with /app and $HOME its own.
    let out = slipway_testkit::node::run_restricted_pod(
        &f.api.kube,
        &f.user.namespace,
        "inspect",
        &image.reference,
        &[
            "sh",
            "-c",
            "id -u; cat /app/install-ran-as; stat -c %u /app /app/main.py /home/app \"$HOME/.cache/pip-ish\"; touch /app/new \"$HOME/new\" && echo writable; touch /usr/new 2>/dev/null || echo read-only elsewhere",
        ],
        Duration::from_secs(120),
    )
    .await?;
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "10001",
            "0",
            "10001",
            "10001",
            "10001",
            "10001",
            "writable",
            "read-only elsewhere"
        ],
        "output: {out}"
    );

    // package.json at the root: Node 22.
    let node = f
        .app(
            "nodeweb",
            "app",
            json!({
                "package.json": "{\"name\": \"nodeweb\", \"version\": \"1.0.0\"}\n",
                "launch.sh": "exec node -e \"require('http').createServer((q, s) => s.end('ok')).listen(process.env.SVC_HTTP_PORT)\"\n",
            }),
        )
        .await?;
    let deploy = f.deploy("nodeweb-1", &node).await?;
    let image = built(f.settle(&deploy, &node, CAP).await?);
    assert_eq!(image.matched_base.as_deref(), Some("node:22-slim"));
    assert!(f.log(&deploy).await?.contains("(base node:22-slim)"));
    Ok(())
}

#[tokio::test]
async fn refused_and_failing_builds_fail_the_deploy_with_a_clear_line() -> Result<()> {
    let _serial = ONE_AT_A_TIME.lock().await;
    let f = Fixture::start("buildrefused").await?;

    let no_launch = f
        .app(
            "nolaunch",
            "app",
            json!({"install.sh": "echo hi\n", "main.py": "print(1)\n"}),
        )
        .await?;
    let deploy = f.deploy("nolaunch-1", &no_launch).await?;
    let message = failed(f.advance(&deploy, &no_launch, CAP).await?);
    assert_eq!(
        message,
        "launch.sh is missing at the repository root: the app template starts your process with it"
    );
    let log = f.log(&deploy).await?;
    assert_eq!(
        log,
        "[build] launch.sh is missing at the repository root: the app template starts your process with it\n"
    );
    assert_eq!(failed(f.advance(&deploy, &no_launch, CAP).await?), message);
    assert_eq!(f.log(&deploy).await?, log, "a refusal is logged once");

    let no_dockerfile = f
        .app(
            "nodocker",
            "docker",
            json!({"README.md": "no Dockerfile here\n"}),
        )
        .await?;
    let deploy = f.deploy("nodocker-1", &no_dockerfile).await?;
    let message = failed(f.advance(&deploy, &no_dockerfile, CAP).await?);
    assert!(
        message.starts_with("Dockerfile is missing at the repository root"),
        "{message}"
    );
    assert!(
        f.log(&deploy)
            .await?
            .starts_with("[build] Dockerfile is missing at the repository root")
    );
    assert!(
        f.build_jobs().await?.is_empty(),
        "a refused build runs no Job"
    );

    // A failing RUN fails the deploy; the build's own output is in the log.
    let broken = f
        .app(
            "broken",
            "docker",
            json!({"Dockerfile": "FROM debian:trixie-slim\nRUN echo compiling-the-broken-app && exit 3\n"}),
        )
        .await?;
    let deploy = f.deploy("broken-1", &broken).await?;
    let message = failed(f.settle(&deploy, &broken, CAP).await?);
    assert_eq!(message, "the image build failed; see the deploy log");
    let log = f.log(&deploy).await?;
    eprintln!("deploy log:\n{log}");
    assert!(
        log.contains("compiling-the-broken-app"),
        "the build output is kept"
    );
    assert!(log.contains("[build] failed: the image build failed"));
    assert!(f.tags(&broken).await?.is_empty());
    Ok(())
}

#[tokio::test]
async fn a_docker_build_notes_cold_stages_is_capped_and_its_images_are_removed() -> Result<()> {
    let _serial = ONE_AT_A_TIME.lock().await;
    let f = Fixture::start("builddocker").await?;
    // The cold stage is never needed by the final one, so BuildKit never pulls it: a note, not a failure.
    let dockerfile = "FROM golang:1.22 AS unused\nRUN false\n\nFROM debian:trixie-slim\nCOPY hello.txt /hello.txt\nCMD [\"cat\", \"/hello.txt\"]\n";
    let web = f
        .app(
            "dock",
            "docker",
            json!({"Dockerfile": dockerfile, "hello.txt": "hello from a docker deploy\n"}),
        )
        .await?;

    // Over a tiny cap (the config alone is larger): failed, and the pushed tag is deleted.
    let deploy = f.deploy("dock-1", &web).await?;
    let message = failed(f.settle(&deploy, &web, 100).await?);
    assert!(
        message.starts_with("the image's charged size ")
            && message.ends_with(" exceeds the plan's cap of 100 B"),
        "{message}"
    );
    let log = f.log(&deploy).await?;
    eprintln!("deploy log:\n{log}");
    assert!(log.contains(
        "[build] note: stage 1 (FROM golang:1.22) is not on a warm base; it needs a network pull"
    ));
    assert!(log.contains("of 100 B (base debian:trixie-slim)"));
    assert!(log.contains("the image was deleted"));
    assert!(
        f.tags(&web).await?.is_empty(),
        "the image over the cap is gone"
    );

    // Within the plan's cap: built on debian:trixie-slim, only the added file and config charged.
    let deploy = f.deploy("dock-2", &web).await?;
    let image = built(f.settle(&deploy, &web, CAP).await?);
    assert_eq!(image.matched_base.as_deref(), Some("debian:trixie-slim"));
    assert!(
        image.charged_size_bytes.context("charged")? < 64 * 1024,
        "{image:?}"
    );
    assert_eq!(f.tags(&web).await?, vec![web.sha.clone()]);
    let job_labels = f
        .build_jobs()
        .await?
        .into_iter()
        .find(|j| j.labels().get("slipway.dev/deploy").map(String::as_str) == Some("dock-2"))
        .context("the build Job")?
        .labels()
        .clone();
    assert_eq!(
        job_labels.get("slipway.dev/app").map(String::as_str),
        Some("dock")
    );
    assert_eq!(
        job_labels.get("slipway.dev/channel").map(String::as_str),
        Some("prod")
    );

    // The output is in the deploy log; the build pod is removed, the Job stays as the record.
    let pods = Api::<Pod>::namespaced(f.api.kube.clone(), &f.user.namespace)
        .list(&ListParams::default().labels("slipway.dev/deploy=dock-2"))
        .await?;
    assert!(
        pods.items
            .iter()
            .all(|p| p.metadata.deletion_timestamp.is_some()),
        "the build pod is deleted"
    );

    build::remove_images(&f.ctx, &web.channel).await?;
    assert!(f.tags(&web).await?.is_empty(), "no tag is left");
    build::remove_images(&f.ctx, &web.channel).await?;
    Ok(())
}

#[tokio::test]
async fn two_builds_run_side_by_side_each_with_its_own_files_and_a_third_waits_in_order()
-> Result<()> {
    let _serial = ONE_AT_A_TIME.lock().await;
    let f = Fixture::start("buildqueue").await?;
    assert_eq!(f.ctx.max_builds, 2, "the default");
    let dockerfile = "FROM debian:trixie-slim\nRUN sleep 3\nCOPY . /site\n";
    let mut sites = Vec::new();
    for name in ["left", "right", "third"] {
        let files = json!({"Dockerfile": dockerfile, "index.html": format!("{name}\n")});
        sites.push(f.app(name, "docker", files).await?);
    }
    let mut deploys = Vec::new();
    for site in &sites {
        deploys.push(
            f.deploy(&format!("{}-1", site.app.name_any()), site)
                .await?,
        );
    }
    let mut first = Vec::new();
    for (deploy, site) in deploys.iter().zip(&sites) {
        first.push(f.advance(deploy, site, CAP).await?);
    }
    assert_eq!(
        first,
        [
            BuildState::Building,
            BuildState::Building,
            BuildState::Queued { position: 1 }
        ],
        "two slots"
    );
    let mut images = Vec::new();
    for (deploy, site) in deploys.iter().zip(&sites) {
        images.push(built(f.settle(deploy, site, CAP).await?));
    }
    // Built at the same time from the same Dockerfile, each image holds its own commit's files.
    for (image, name) in images.iter().zip(["left", "right", "third"]) {
        let out = slipway_testkit::node::run_restricted_pod(
            &f.api.kube,
            &f.user.namespace,
            &format!("inspect-{name}"),
            &image.reference,
            &["cat", "/site/index.html"],
            Duration::from_secs(120),
        )
        .await?;
        assert_eq!(out.trim(), name, "{image:?}");
    }
    let waited = f.log(&deploys[2]).await?;
    eprintln!("deploy log of the third:\n{waited}");
    assert!(waited.starts_with(
        "[build] queued: position 1 (2 builds running)\n[build] queue position 1: building "
    ));
    assert_eq!(
        waited.matches("[build] queued").count(),
        1,
        "logged once however often asked"
    );
    for deploy in &deploys[..2] {
        assert!(
            !f.log(deploy).await?.contains("[build] queued"),
            "the first two did not wait"
        );
    }
    Ok(())
}

#[tokio::test]
async fn a_rebuild_that_changes_neither_install_sh_nor_a_manifest_reuses_the_installed_layer()
-> Result<()> {
    let _serial = ONE_AT_A_TIME.lock().await;
    let f = Fixture::start("buildreuse").await?;
    let install = "set -e\nhead -c 16 /dev/urandom | od -An -tx1 | tr -d ' \\n' > /app/installed\ncat requirements.txt > /app/deps\n";
    let files = |main: &str, deps: &str| {
        json!({
            "launch.sh": "exec python3 -m http.server \"$SVC_HTTP_PORT\"\n",
            "install.sh": install,
            "requirements.txt": deps,
            "main.py": main,
        })
    };
    let installed = |image: DeployImage, name: &'static str| {
        let f = &f;
        async move {
            slipway_testkit::node::run_restricted_pod(
                &f.api.kube,
                &f.user.namespace,
                name,
                &image.reference,
                &[
                    "sh",
                    "-c",
                    "cat /app/installed; echo; cat /app/deps /app/main.py",
                ],
                Duration::from_secs(120),
            )
            .await
        }
    };
    let first = f
        .app("reuse", "app", files("print(1)\n", "flask\n"))
        .await?;
    let image = built(
        f.settle(&f.deploy("reuse-1", &first).await?, &first, CAP)
            .await?,
    );
    let one = installed(image, "inspect-one").await?;

    // Only the code changed: the installed layer (its random stamp) is the first build's.
    let code = f.recommit(&first, files("print(2)\n", "flask\n")).await?;
    let image = built(
        f.settle(&f.deploy("reuse-2", &code).await?, &code, CAP)
            .await?,
    );
    let two = installed(image, "inspect-two").await?;
    let stamp = |out: &str| out.lines().next().unwrap_or_default().to_owned();
    assert_eq!(stamp(&two), stamp(&one), "install.sh did not run again");
    assert!(two.contains("flask\nprint(2)"), "{two}");

    // A manifest changed: install.sh runs again.
    let deps = f
        .recommit(&first, files("print(2)\n", "flask\nrequests\n"))
        .await?;
    let image = built(
        f.settle(&f.deploy("reuse-3", &deps).await?, &deps, CAP)
            .await?,
    );
    let three = installed(image, "inspect-three").await?;
    assert_ne!(stamp(&three), stamp(&one), "install.sh ran again");
    assert!(three.contains("flask\nrequests\nprint(2)"), "{three}");
    Ok(())
}
