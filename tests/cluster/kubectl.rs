//! What a person sees with kubectl: `kubectl get slipway` lists every kind with its printer columns, and
//! `kubectl explain` shows the field docs written on the Rust types.

use anyhow::{Context, Result, ensure};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use slipway_crds::{App, Channel};
use slipway_testkit::setup;

fn kubectl(args: &[&str]) -> Result<String> {
    let out = std::process::Command::new(slipway_testkit::kubectl())
        .args(args)
        .env("KUBECONFIG", slipway_testkit::kubeconfig_path())
        .output()
        .context("run kubectl (make test puts the control plane's kubectl on PATH, or set SLIPWAY_KUBECTL)")?;
    ensure!(
        out.status.success(),
        "kubectl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?)
}

/// kubectl explain wraps descriptions; compare text with whitespace collapsed.
fn flat(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[tokio::test]
async fn kubectl_get_slipway_shows_the_printer_columns() -> Result<()> {
    let (client, ns) = setup("kubectl").await?;
    let apps: Api<App> = Api::namespaced(client.clone(), ns.name());
    let channels: Api<Channel> = Api::namespaced(client, ns.name());
    let app = json!({"apiVersion": "slipway.dev/v1alpha1", "kind": "App", "metadata": {"name": "blog"},
                     "spec": {"owner": "alice", "template": "docker"}});
    apps.create(&PostParams::default(), &serde_json::from_value(app)?)
        .await?;
    let ch = json!({"apiVersion": "slipway.dev/v1alpha1", "kind": "Channel", "metadata": {"name": "blog.prod"},
                    "spec": {"app": "blog", "gitRefBinding": "branch:master"}});
    channels
        .create(&PostParams::default(), &serde_json::from_value(ch)?)
        .await?;
    let sha = "89abcdef0123456789abcdef0123456789abcdef";
    let status = json!({"status": {"phase": "running", "currentSha": sha, "hostname": "blog-alice.apps.example.test"}});
    channels
        .patch_status("blog.prod", &PatchParams::default(), &Patch::Merge(status))
        .await?;

    let out = kubectl(&["get", "slipway", "-n", ns.name()])?;
    let lines: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    let channel_header = lines
        .iter()
        .position(|l| l.first() == Some(&"NAME") && l.contains(&"HOSTNAME"));
    let channel_header = channel_header.with_context(|| format!("no channel table in:\n{out}"))?;
    assert_eq!(
        lines[channel_header],
        ["NAME", "APP", "BRANCH", "STATUS", "SHA", "HOSTNAME", "AGE"]
    );
    assert_eq!(
        lines[channel_header + 1][..6],
        [
            "channel.slipway.dev/blog.prod",
            "blog",
            "branch:master",
            "running",
            sha,
            "blog-alice.apps.example.test"
        ]
    );
    let app_header = lines
        .iter()
        .position(|l| l.first() == Some(&"NAME") && l.contains(&"TEMPLATE"));
    let app_header = app_header.with_context(|| format!("no app table in:\n{out}"))?;
    assert_eq!(
        lines[app_header],
        ["NAME", "TEMPLATE", "OWNER", "READY", "AGE"]
    );
    assert_eq!(
        lines[app_header + 1][..3],
        ["app.slipway.dev/blog", "docker", "alice"]
    );

    // Short names resolve too.
    let out = kubectl(&["get", "sch", "-n", ns.name(), "-o", "name"])?;
    assert_eq!(out.trim(), "channel.slipway.dev/blog.prod");
    Ok(())
}

#[tokio::test]
async fn kubectl_explain_shows_the_field_docs() -> Result<()> {
    let client = slipway_testkit::client().await?;
    slipway_testkit::ensure_crds(&client).await?;
    // The apiserver publishes a new CRD's OpenAPI a moment after it is Established.
    let mut out = String::new();
    slipway_testkit::wait_until(std::time::Duration::from_secs(20), || {
        let result = kubectl(&["explain", "channel.spec"]);
        let found = matches!(&result, Ok(text) if text.contains("gitRefBinding"));
        if let Ok(text) = result {
            out = text;
        }
        async move { Ok(found) }
    })
    .await
    .with_context(|| format!("kubectl explain channel.spec never listed the fields:\n{out}"))?;
    let out = flat(&out);
    assert!(
        out.contains("The git branch the channel follows, as branch:<name>."),
        "{out}"
    );
    assert!(
        out.contains("Name of the App (in the same namespace) this channel belongs to."),
        "{out}"
    );

    let out = flat(&kubectl(&[
        "explain",
        "app.spec.agentProtectedActionsEnabled",
    ])?);
    assert!(
        out.contains("Unset inherits the owner's account default; true lets agent credentials"),
        "{out}"
    );
    let out = flat(&kubectl(&["explain", "sdep.status.phase"])?);
    assert!(out.contains("queued, running, success or failed"), "{out}");
    // `deploy` stays the Deployments' short name: the Deploy CRD's singular is `slipwaydeploy`.
    let out = flat(&kubectl(&["explain", "deploy"])?);
    assert!(out.contains("KIND: Deployment"), "{out}");
    Ok(())
}

#[tokio::test]
async fn the_examples_apply_cleanly() -> Result<()> {
    let (_client, ns) = setup("examples").await?;
    let examples = slipway_testkit::package_dir().join("examples");
    let out = kubectl(&["apply", "-n", ns.name(), "-f", &examples.to_string_lossy()])?;
    for created in [
        "app.slipway.dev/blog created",
        "channel.slipway.dev/blog.prod created",
        "deploy.slipway.dev/blog.next-1 created",
    ] {
        assert!(out.contains(created), "{created} in {out}");
    }
    Ok(())
}
