//! End to end on the local node (`hack/node.sh`, the `e2e` tier of `make test`): pods run from images built on
//! this machine, Services answer by their cluster DNS names, and an image built by BuildKit from a warm-base
//! stand-in is pushed to the node's registry and runs as a Deployment that becomes Available.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Service};
use kube::Client;
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};
use slipway_testkit::node::{
    BUSYBOX, build_and_push, registry, run_pod, wait_for_deployment_available,
};

const POD_TIMEOUT: Duration = Duration::from_secs(120);

/// A Deployment of one replica with a readiness probe on GET / of `port`, and a Service on port 80 in front.
async fn deploy_web(
    client: &Client,
    ns: &str,
    name: &str,
    image: &str,
    command: Value,
    port: u16,
) -> Result<()> {
    let labels = json!({"app": name});
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{
                    "name": "web", "image": image, "command": command,
                    "ports": [{"containerPort": port}],
                    "readinessProbe": {"httpGet": {"path": "/", "port": port}, "periodSeconds": 1}
                }]}
            }
        }
    }))?;
    Api::<Deployment>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &deployment)
        .await?;
    let service: Service = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"selector": labels, "ports": [{"port": 80, "targetPort": port}]}
    }))?;
    Api::<Service>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &service)
        .await?;
    Ok(())
}

#[tokio::test]
async fn the_node_is_ready_and_runs_the_pinned_kubelet() -> Result<()> {
    let client = slipway_testkit::client().await?;
    let nodes = Api::<Node>::all(client)
        .list(&ListParams::default())
        .await?;
    ensure!(
        nodes.items.len() == 1,
        "one node, got {}",
        nodes.items.len()
    );
    let node = &nodes.items[0];
    let status = node.status.clone().context("node without status")?;
    let info = status.node_info.context("node without nodeInfo")?;
    eprintln!(
        "node {}: kubelet {}, {}, kernel {}",
        node.metadata.name.as_deref().unwrap_or("?"),
        info.kubelet_version,
        info.container_runtime_version,
        info.kernel_version
    );
    assert!(info.kubelet_version.starts_with("v1.34."));
    assert!(
        info.container_runtime_version
            .starts_with("containerd://2.")
    );
    let ready = status
        .conditions
        .unwrap_or_default()
        .into_iter()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    assert!(ready, "the node is Ready");
    Ok(())
}

#[tokio::test]
async fn a_local_image_answers_through_its_service_by_cluster_dns_name() -> Result<()> {
    let (client, ns) = slipway_testkit::setup("e2e-dns").await?;
    let ns = ns.name();
    let script = "mkdir -p /tmp/www && echo \"hello from $(hostname)\" > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www";
    deploy_web(
        &client,
        ns,
        "web",
        BUSYBOX,
        json!(["sh", "-c", script]),
        8080,
    )
    .await?;
    wait_for_deployment_available(&client, ns, "web", POD_TIMEOUT).await?;

    let host = format!("web.{ns}.svc.cluster.local");
    let out = run_pod(
        &client,
        ns,
        "client",
        BUSYBOX,
        &[
            "sh",
            "-c",
            &format!("nslookup {host} && wget -q -O - http://{host}/"),
        ],
        POD_TIMEOUT,
    )
    .await?;
    eprintln!("client pod output:\n{out}");
    assert!(
        out.contains("hello from web-"),
        "the Service answered: {out}"
    );

    // Names outside the cluster are answered locally (NXDOMAIN): DNS forwards nowhere.
    let out = run_pod(
        &client,
        ns,
        "outside",
        BUSYBOX,
        &["sh", "-c", "nslookup example.com 2>&1; echo exit=$?"],
        POD_TIMEOUT,
    )
    .await?;
    eprintln!("outside name lookup:\n{out}");
    assert!(out.contains("NXDOMAIN"), "example.com is unknown: {out}");
    Ok(())
}

#[tokio::test]
async fn the_warm_base_stand_ins_carry_their_runtimes() -> Result<()> {
    let (client, ns) = slipway_testkit::setup("e2e-bases").await?;
    let ns = ns.name();
    for (name, image, command, want) in [
        (
            "debian",
            "debian:trixie-slim",
            vec!["sh", "-c", ". /etc/os-release && echo $VERSION_CODENAME"],
            "trixie",
        ),
        (
            "python",
            "python:3.13-slim",
            vec!["python", "-c", "import sys; print(sys.version)"],
            "3.13.",
        ),
        (
            "node",
            "node:22-slim",
            vec!["node", "-e", "console.log(process.version)"],
            "v22.",
        ),
    ] {
        let out = run_pod(&client, ns, name, image, &command, POD_TIMEOUT).await?;
        eprintln!("{image}: {}", out.trim());
        assert!(out.contains(want), "{image} printed {out:?}, wanted {want}");
    }
    Ok(())
}

#[tokio::test]
async fn an_image_built_with_buildkit_from_a_warm_base_runs_as_a_deployment() -> Result<()> {
    let (client, ns) = slipway_testkit::setup("e2e-build").await?;
    let ns = ns.name();
    let context = std::env::temp_dir().join(format!("slipway-e2e-build-{ns}"));
    std::fs::create_dir_all(&context)?;
    std::fs::write(
        context.join("Dockerfile"),
        "FROM node:22-slim\n\
         WORKDIR /app\n\
         COPY server.js .\n\
         RUN node --check server.js\n\
         USER 10001\n\
         CMD [\"node\", \"server.js\"]\n",
    )?;
    std::fs::write(
        context.join("server.js"),
        "require('http').createServer((req, res) => res.end(`built by buildkit, node ${process.version}\\n`))\n\
         .listen(8080);\n",
    )?;
    let image = format!("{}/e2e/{ns}:v1", registry()?);
    let built = build_and_push(&context, &image).await;
    std::fs::remove_dir_all(&context).ok();
    built?;
    eprintln!("built and pushed {image}");

    deploy_web(
        &client,
        ns,
        "app",
        &image,
        json!(["node", "server.js"]),
        8080,
    )
    .await?;
    let deployment = wait_for_deployment_available(&client, ns, "app", POD_TIMEOUT).await?;
    eprintln!(
        "deployment app: {} of 1 replicas available",
        deployment
            .status
            .and_then(|s| s.available_replicas)
            .unwrap_or(0)
    );

    let out = run_pod(
        &client,
        ns,
        "client",
        BUSYBOX,
        &[
            "wget",
            "-q",
            "-O",
            "-",
            &format!("http://app.{ns}.svc.cluster.local/"),
        ],
        POD_TIMEOUT,
    )
    .await?;
    eprintln!("app answered: {}", out.trim());
    assert!(out.contains("built by buildkit, node v22."), "{out}");
    Ok(())
}
