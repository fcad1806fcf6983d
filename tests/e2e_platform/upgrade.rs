//! The chart's life after install, on the installed platform (see `platform.rs`): `helm upgrade` to a new image
//! rolls every component while a steady stream of requests reaches a deployed app and a static site through the
//! edge and a deploy is in flight; not one request fails and the deploy finishes. Then `helm uninstall` leaves
//! nothing behind but what the chart README says it keeps.
//!
//! One test, because the steps follow each other on one release; `hack/test.sh e2e` runs this file after
//! `platform.rs` and before the tests that run the components in the test process.

#![allow(clippy::unwrap_used)]

use crate::support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use support::git::{Workspace, http_remote};
use support::platform::{Installed, VERSION_SERVER, hack, kubectl};

/// What the readers saw.
#[derive(Default)]
struct Tally {
    ok: AtomicUsize,
    failures: std::sync::Mutex<Vec<String>>,
}

/// Readers that GET each (host, acceptable bodies) through the edge until `stop`, each on its own connections.
fn readers(
    platform: &Arc<Installed>,
    targets: Vec<(String, Vec<&'static str>)>,
    stop: &Arc<AtomicBool>,
    tally: &Arc<Tally>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::new();
    for (host, wanted) in targets {
        for _ in 0..2 {
            let (platform, stop, tally, host, wanted) = (
                platform.clone(),
                stop.clone(),
                tally.clone(),
                host.clone(),
                wanted.clone(),
            );
            tasks.push(tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    match platform.edge_get(&host, "/").await {
                        Ok(a) if a.status == 200 && wanted.iter().any(|w| a.text().contains(w)) => {
                            tally.ok.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(a) => tally.failures.lock().unwrap().push(format!(
                            "{host}: {} {:?}",
                            a.status,
                            a.text().chars().take(120).collect::<String>()
                        )),
                        Err(e) => tally
                            .failures
                            .lock()
                            .unwrap()
                            .push(format!("{host}: {e:#}")),
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }));
        }
    }
    tasks
}

async fn push(
    ws: &Workspace,
    dir: &str,
    remote: &str,
    files: &[(&str, &str)],
    message: &str,
) -> Result<String> {
    for (path, content) in files {
        ws.write(&format!("{dir}/{path}"), content)?;
    }
    ws.git(dir, &["add", "."]).await?;
    ws.git(dir, &["commit", "-q", "-m", message]).await?;
    ws.git(dir, &["push", "-q", remote, "HEAD:master"]).await?;
    Ok(ws.git(dir, &["rev-parse", "HEAD"]).await?.trim().to_owned())
}

async fn script(args: &[&str]) -> Result<()> {
    hack("install.sh", args).await
}

/// The slipway images the release's pods run, leaving out pods on their way out (the bundled object-store backend
/// runs an image of its own, which an upgrade of slipway leaves as it is).
async fn images(platform: &Installed) -> Result<BTreeSet<String>> {
    let pods: Value = serde_json::from_str(
        &kubectl(&["-n", &platform.namespace, "get", "pods", "-o", "json"]).await?,
    )?;
    Ok(pods["items"]
        .as_array()
        .context("pods")?
        .iter()
        .filter(|pod| pod["metadata"]["deletionTimestamp"].is_null())
        .flat_map(|pod| {
            pod["spec"]["containers"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter_map(|c| c["image"].as_str().map(str::to_owned))
        .filter(|image| image.contains("/slipway/slipway:"))
        .collect())
}

#[tokio::test]
async fn an_upgrade_under_load_loses_nothing_and_an_uninstall_leaves_only_what_it_keeps()
-> Result<()> {
    let platform = Arc::new(Installed::from_env()?);
    let fay = platform.account("fay").await?;
    let ws = Workspace::new()?;

    // A dynamic app and a static site, live.
    let (web, web_prod) = platform.create_app(&fay, "web", "app").await?;
    ws.git(".", &["init", "-q", "-b", "master", "web"]).await?;
    let web_remote = http_remote(&platform.api, &fay.token, &fay.username, "web");
    let v1 = push(
        &ws,
        "web",
        &web_remote,
        &[
            ("server.py", VERSION_SERVER),
            ("VERSION", "v1\n"),
            ("launch.sh", "exec python3 server.py\n"),
        ],
        "v1",
    )
    .await?;
    let (site, site_prod) = platform.create_app(&fay, "site", "static").await?;
    ws.git(".", &["init", "-q", "-b", "master", "site"]).await?;
    let site_remote = http_remote(&platform.api, &fay.token, &fay.username, "site");
    let s1 = push(
        &ws,
        "site",
        &site_remote,
        &[("index.html", "static-one\n")],
        "s1",
    )
    .await?;
    let (_, log) = platform.deploy(&fay, &web, &web_prod, &v1).await?;
    assert_eq!(log["status"], "success", "{}", log["log"]);
    let (_, log) = platform.deploy(&fay, &site, &site_prod, &s1).await?;
    assert_eq!(log["status"], "success", "{}", log["log"]);
    let web_host = platform.prod_host(&fay, "web");
    let site_host = platform.prod_host(&fay, "site");
    platform.wait_for_page(&web_host, "/", "version=v1").await?;
    platform
        .wait_for_page(&site_host, "/", "static-one")
        .await?;

    // A release from before the host key's Secret kept the key on the data volume only: so does this one once
    // the Secret is emptied. After the upgrade SSH answers with the same key, and the Secret holds it.
    let key_before = platform.ssh_host_key().await?;
    let secret = format!("secret/{}-ssh-host-key", platform.release);
    kubectl(&[
        "-n",
        &platform.namespace,
        "patch",
        &secret,
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/data"}]"#,
    ])
    .await?;

    // A steady stream of readers, and a deploy queued just before the upgrade starts.
    let before = images(&platform).await?;
    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let tasks = readers(
        &platform,
        vec![
            (web_host.clone(), vec!["version=v1", "version=v2"]),
            (site_host.clone(), vec!["static-one"]),
        ],
        &stop,
        &tally,
    );
    let v2 = push(&ws, "web", &web_remote, &[("VERSION", "v2\n")], "v2").await?;
    let in_flight = platform.queue_deploy(&fay, &web, &web_prod, &v2).await?;
    let tag = format!(
        "upgrade-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let upgraded = script(&["upgrade", &tag]).await;
    let deployed = platform.finished(&fay, &web, &web_prod, &in_flight).await;
    let switched = match &deployed {
        Ok(d) if d["status"] == "success" => {
            platform.wait_for_page(&web_host, "/", "version=v2").await
        }
        _ => Ok(String::new()),
    };
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await?;
    }
    upgraded?;
    let deployed = deployed?;
    assert_eq!(deployed["status"], "success", "{}", deployed["log"]);
    switched?;
    let ok = tally.ok.load(Ordering::Relaxed);
    let failures = tally.failures.lock().unwrap().clone();
    println!(
        "helm upgrade under load: {ok} requests answered, {} failed; the deploy in flight ended {}",
        failures.len(),
        deployed["status"]
    );
    assert!(
        failures.is_empty(),
        "requests failed during the upgrade: {failures:#?}"
    );
    assert!(ok > 100, "only {ok} requests were answered");
    let after = images(&platform).await?;
    assert!(
        after.iter().all(|i| i.ends_with(&format!(":{tag}"))),
        "pods still run {after:?} (before: {before:?})"
    );
    assert_eq!(
        platform.ssh_host_key().await?,
        key_before,
        "SSH kept its host key"
    );
    let held = kubectl(&[
        "-n",
        &platform.namespace,
        "get",
        &secret,
        "-o",
        "jsonpath={.data.ssh_host_ed25519_key}",
    ])
    .await?;
    assert!(!held.trim().is_empty(), "the Secret holds the host key");

    // The platform cleans up what it made, then the release goes.
    platform.delete_apps(&[(&fay, &web), (&fay, &site)]).await?;
    script(&["uninstall"]).await?;
    left_behind(&platform, &fay.namespace).await
}

/// After `helm uninstall`: the release namespace holds only what the chart keeps (the env keyring, the data claim,
/// the object-store backend's key pair and volume) and the certificate namespace only the certificates and the ACME
/// account key, each beside
/// what the installer made itself and what Kubernetes puts in every namespace; no cluster-wide object of the release
/// remains, and the grants and NetworkPolicies in tenant namespaces went with their ClusterRoles.
async fn left_behind(platform: &Installed, tenant: &str) -> Result<()> {
    let release = &platform.release;
    // Kubernetes' own, in every namespace.
    let every = ["configmap/kube-root-ca.crt", "serviceaccount/default"];
    let kept: BTreeSet<String> = [
        format!("secret/{release}-env-keys"),
        // End-user sign-in's signing key and the secret people's `sub` derive from (kept, like the keyring).
        format!("secret/{release}-sign-in"),
        // The SSH host key (kept, like the claim that held it before it had a Secret).
        format!("secret/{release}-ssh-host-key"),
        format!("persistentvolumeclaim/{release}-api-data"),
        // The bundled object-store backend's root key pair (kept, like the keyring) and its StatefulSet's claim
        // (Kubernetes leaves those), every object and version in it.
        format!("secret/{release}-s3-backend"),
        format!("persistentvolumeclaim/data-{release}-s3-backend-0"),
        // hack/install.sh's own: the URLs of the platform database and the data server, the registry's token key,
        // BuildKit's CA and the console's certificate it gives the chart (database.existingSecret,
        // dataServer.existingSecret, build.registryAuth.existingSecret, build.buildkitTls.existingSecret,
        // api.console.tlsSecret), and the CA of its ACME directory's listener (domains.acme.rootCASecret).
        "secret/slipway-database".to_owned(),
        "secret/slipway-data-server".to_owned(),
        "secret/slipway-registry-token".to_owned(),
        "secret/slipway-buildkit-ca".to_owned(),
        "secret/slipway-console-tls".to_owned(),
        "secret/slipway-acme-ca".to_owned(),
    ]
    .into_iter()
    .chain(every.map(String::from))
    .collect();
    // hack/install.sh's wildcard certificate of channel hostnames (tls.wildcardSecret), the operator's ACME
    // account key and the certificates it issued custom domains (`tls-<domain>`); the chart's Roles there went
    // with the release.
    let certificates_kept: BTreeSet<String> =
        ["secret/slipway-wildcard-tls", "secret/slipway-acme-account"]
            .into_iter()
            .chain(every)
            .map(String::from)
            .collect();
    let kinds = kubectl(&[
        "api-resources",
        "--verbs=list",
        "--namespaced",
        "-o",
        "name",
    ])
    .await?;
    let kinds: Vec<&str> = kinds.lines().filter(|k| !k.starts_with("events")).collect();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let found = objects(&platform.namespace, &kinds).await?;
        let certificates = objects(&platform.certificate_namespace, &kinds).await?;
        let cluster = kubectl(&[
            "get",
            "clusterroles,clusterrolebindings,validatingwebhookconfigurations,ingressclasses",
            "-l",
            &format!("app.kubernetes.io/instance={release}"),
            "-o",
            "name",
        ])
        .await?;
        let grants = kubectl(&[
            "-n",
            tenant,
            "get",
            "rolebindings,networkpolicies",
            "-l",
            "app.kubernetes.io/managed-by=slipway",
            "-o",
            "name",
        ])
        .await?;
        let extra: Vec<&String> = found.difference(&kept).collect();
        let extra_certificates: Vec<&String> = certificates
            .difference(&certificates_kept)
            .filter(|name| !name.starts_with("secret/tls-"))
            .collect();
        if extra.is_empty()
            && extra_certificates.is_empty()
            && cluster.trim().is_empty()
            && grants.trim().is_empty()
        {
            let json: Value = json!({"kept": found, "certificates": certificates});
            println!("helm uninstall left: {json}");
            assert!(found.contains(&format!("secret/{release}-env-keys")));
            assert!(found.contains(&format!("persistentvolumeclaim/{release}-api-data")));
            assert!(certificates.contains("secret/slipway-wildcard-tls"));
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            bail!(
                "after helm uninstall, still there: {extra:?} in {}, {extra_certificates:?} in {}; cluster-wide: {cluster:?}; grants in {tenant}: {grants:?}",
                platform.namespace,
                platform.certificate_namespace
            );
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Every object of `kinds` in `namespace`, as `kind/name`.
async fn objects(namespace: &str, kinds: &[&str]) -> Result<BTreeSet<String>> {
    let mut found = BTreeSet::new();
    for chunk in kinds.chunks(20) {
        let out = kubectl(&["-n", namespace, "get", &chunk.join(","), "-o", "name"]).await?;
        for line in out.lines() {
            let (kind, name) = line.split_once('/').context("kind/name")?;
            let kind = kind.split('.').next().unwrap_or(kind);
            found.insert(format!("{kind}/{name}"));
        }
    }
    Ok(found)
}
