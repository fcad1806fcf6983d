//! Platform backup and restore on the installed platform: `slipway admin backup` of a platform with apps, an env
//! secret, a custom domain with its certificate and deploys; then everything the platform kept is taken away
//! (`hack/install.sh purge`: the release, every object and namespace, the platform database and the repositories);
//! then a fresh install and `slipway admin restore`. After it every app answers again (the custom domain over HTTPS
//! with its old certificate), the secret reveals the same value, the repository has the same refs, SSH shows the
//! same host key, and a new deploy builds, unseals the secret with the restored keyring and goes live. A repository
//! of 200 MiB comes back with the same refs and passes `git fsck --full` in the api pod.
//!
//! `hack/test.sh e2e` runs this module after `size::` and before `git_objects::`, alone: it takes the whole
//! platform away and brings it back.

#![allow(clippy::unwrap_used)]

use crate::support;

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::json;
use support::git::{Workspace, http_remote};
use support::https::TestDns;
use support::platform::{Account, Installed, app_ids, domain_certificate, hack, kubectl, until};
use tokio::io::AsyncBufReadExt;

/// A server that answers its version and the secret the platform gave it.
const SERVER: &str = r#"import os, http.server

class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = "version={} secret={}\n".format(open("/app/VERSION").read().strip(), os.environ.get("SHOP_KEY")).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

http.server.ThreadingHTTPServer(("0.0.0.0", int(os.environ["SVC_HTTP_PORT"])), Handler).serve_forever()
"#;

/// The size of the large repository among the backed-up apps.
const ARCHIVE_MIB: u64 = 200;

/// How long the restored platform gets to bring a channel or certificate back.
const BACK_WITHIN: Duration = Duration::from_secs(300);

/// What a user can see of the platform, compared before the backup and after the restore.
#[derive(Debug, PartialEq)]
struct Seen {
    refs: String,
    secret: String,
    host_key: String,
    domains: Vec<String>,
}

async fn seen(
    platform: &Installed,
    ws: &Workspace,
    remote: &str,
    ann: &Account,
    shop: &str,
    site: &str,
    site_channel: &str,
) -> Result<Seen> {
    let refs = ws.git(".", &["ls-remote", remote]).await?;
    let secret = platform
        .call(
            "GET",
            &format!("/apps/{shop}/env/SHOP_KEY/value"),
            ann,
            None,
        )
        .await?
        .expect(200)["value"]
        .as_str()
        .context("the revealed value")?
        .to_owned();
    let host_key = platform.ssh_host_key().await?;
    let domains = platform
        .call(
            "GET",
            &format!("/apps/{site}/channels/{site_channel}/domains"),
            ann,
            None,
        )
        .await?
        .expect(200);
    let domains = domains["domains"]
        .as_array()
        .context("the domains")?
        .iter()
        .map(|d| format!("{} {}", d["domain"], d["status"]))
        .collect();
    Ok(Seen {
        refs,
        secret,
        host_key,
        domains,
    })
}

#[tokio::test]
async fn a_backup_brings_the_platform_back_after_everything_it_kept_is_gone() -> Result<()> {
    let platform = Installed::from_env()?;
    let dns = TestDns::at(
        std::env::var("SLIPWAY_PLATFORM_DNS_API")
            .context("SLIPWAY_PLATFORM_DNS_API: run under `hack/test.sh e2e`")?,
    );
    let ann = platform.account("ann").await?;
    let ws = Workspace::new()?;

    // A static site with a custom domain and its certificate.
    let (site, site_channel) = platform.create_app(&ann, "site", "static").await?;
    ws.git(".", &["init", "-q", "-b", "master", "site"]).await?;
    ws.write("site/index.html", "<h1>kept</h1>\n")?;
    let site_remote = http_remote(&platform.api, &ann.token, &ann.username, "site");
    let sha = ws.commit_and_push("site", "site", &site_remote).await?;
    let (_, log) = platform.deploy(&ann, &site, &site_channel, &sha).await?;
    assert_eq!(log["status"], "success", "{log}");
    let domain = format!("kept-{}.example", ann.username);
    let verified = platform
        .add_verified_domain(&ann, &site, &site_channel, &domain, &dns)
        .await?;
    assert_eq!(verified["status"], "verified", "{verified}");
    until(BACK_WITHIN, "the domain's certificate", async || {
        domain_certificate(&ann).await
    })
    .await?;
    let served = https_page(&platform, &domain).await?;

    // An app with a secret, deployed.
    let (shop, shop_channel) = platform.create_app(&ann, "shop", "app").await?;
    platform
        .call(
            "POST",
            &format!("/apps/{shop}/env"),
            &ann,
            Some(json!({"key": "SHOP_KEY", "value": "s3cr3t-kept", "kind": "secret"})),
        )
        .await?
        .expect(204);
    ws.git(".", &["init", "-q", "-b", "master", "shop"]).await?;
    ws.write("shop/server.py", SERVER)?;
    ws.write("shop/VERSION", "v1\n")?;
    ws.write("shop/launch.sh", "exec python3 server.py\n")?;
    let shop_remote = http_remote(&platform.api, &ann.token, &ann.username, "shop");
    let sha = ws.commit_and_push("shop", "v1", &shop_remote).await?;
    let (_, log) = platform.deploy(&ann, &shop, &shop_channel, &sha).await?;
    assert_eq!(log["status"], "success", "{log}");
    let shop_host = platform.prod_host(&ann, "shop");
    platform
        .wait_for_page(&shop_host, "/", "version=v1 secret=s3cr3t-kept")
        .await?;
    // A repository of 200 MiB of incompressible files: the backup streams it, and the restore checks every file
    // and byte of it against the count the backup wrote.
    platform.create_app(&ann, "archive", "static").await?;
    ws.git(".", &["init", "-q", "-b", "master", "archive"])
        .await?;
    for (key, value) in [("pack.window", "0"), ("pack.compression", "0")] {
        ws.git("archive", &["config", key, value]).await?;
    }
    for i in 0..ARCHIVE_MIB / 10 {
        let mut random = std::fs::File::open("/dev/urandom")?;
        let mut file = std::fs::File::create(ws.path(&format!("archive/part-{i:02}.bin")))?;
        std::io::copy(&mut std::io::Read::take(&mut random, 10 << 20), &mut file)?;
    }
    let archive_remote = http_remote(&platform.api, &ann.token, &ann.username, "archive");
    let started = Instant::now();
    ws.commit_and_push("archive", "parts", &archive_remote)
        .await?;
    println!(
        "pushed a {ARCHIVE_MIB} MiB repository in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    let archive_refs = ws.git(".", &["ls-remote", &archive_remote]).await?;

    let before = seen(
        &platform,
        &ws,
        &shop_remote,
        &ann,
        &shop,
        &site,
        &site_channel,
    )
    .await?;

    // The backup, with the caller's credentials.
    let file = ws.path("platform.backup");
    let started = Instant::now();
    admin(&["backup", "--output", file.to_str().unwrap()], &platform).await?;
    let size = std::fs::metadata(&file)?.len();
    println!(
        "backup: {size} bytes in {:.1}s",
        started.elapsed().as_secs_f64()
    );

    // Everything the platform kept is taken away, and a fresh release installed.
    let started = Instant::now();
    hack("install.sh", &["purge"]).await?;
    println!("purged in {:.1}s", started.elapsed().as_secs_f64());
    let gone = kubectl(&["get", "namespace", &ann.namespace, "--ignore-not-found"]).await?;
    assert!(gone.trim().is_empty(), "{gone}");
    let started = Instant::now();
    hack("install.sh", &["install"]).await?;
    println!("installed again in {:.1}s", started.elapsed().as_secs_f64());
    // The node's proxy learns of the new api's Service endpoint a moment after the install's wait.
    let fresh = until(BACK_WITHIN, "the fresh install's api", async || {
        Ok(platform.call("GET", "/apps", &ann, None).await.ok())
    })
    .await?;
    assert_eq!(
        fresh.status,
        401,
        "a fresh install knows no token: {}",
        fresh.text()
    );

    // A restore killed once it holds the operator leaves it at 0 replicas, the count it had noted on it; run
    // again, the restore goes on and puts that count back.
    let replicas = operator_replicas(&platform).await?;
    let mut cut = slipway(&["restore", "--input", file.to_str().unwrap()], &platform)?
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    let mut progress = tokio::io::BufReader::new(cut.stderr.take().context("stderr")?).lines();
    while let Some(line) = progress.next_line().await? {
        println!("cut restore: {line}");
        if line.contains("operator held at 0 replicas") {
            break;
        }
    }
    cut.kill().await?;
    assert_eq!(operator_replicas(&platform).await?, "0");
    // A backup is not restored over a platform that has apps: tried below once it has them.
    let started = Instant::now();
    admin(&["restore", "--input", file.to_str().unwrap()], &platform).await?;
    println!("restored in {:.1}s", started.elapsed().as_secs_f64());
    assert_eq!(
        operator_replicas(&platform).await?,
        replicas,
        "the operator is back at the replicas it had before the cut restore"
    );
    let note = operator_field(&platform, "{.metadata.annotations}").await?;
    assert!(!note.contains("restore-held-replicas"), "{note}");

    // Every app answers again: the site by its own name and over HTTPS on its custom domain, with the certificate it
    // had (restored, not ordered anew); the app with its secret.
    let site_host = platform.prod_host(&ann, "site");
    platform.wait_for_page(&site_host, "/", "kept").await?;
    let started = Instant::now();
    platform
        .wait_for_page(&shop_host, "/", "version=v1 secret=s3cr3t-kept")
        .await?;
    println!(
        "the app answered {:.1}s after the restore",
        started.elapsed().as_secs_f64()
    );
    let over_https = https_page(&platform, &domain).await?;
    assert!(
        over_https.leaf == served.leaf,
        "the custom domain presents another certificate than before the backup"
    );

    // An app's and a channel's id is its object's uid, which the cluster gives anew: the apps are found by name.
    let (shop, shop_channel) = by_name(&platform, &ann, "shop").await?;
    let (site, site_channel) = by_name(&platform, &ann, "site").await?;
    let after = seen(
        &platform,
        &ws,
        &shop_remote,
        &ann,
        &shop,
        &site,
        &site_channel,
    )
    .await?;
    assert_eq!(after, before);
    assert_eq!(
        ws.git(".", &["ls-remote", &archive_remote]).await?,
        archive_refs
    );
    let api = format!("deployment/{}-api", platform.release);
    let repo = format!("/var/lib/slipway/repos/{}/archive.git", ann.username);
    kubectl(&[
        "-n",
        &platform.namespace,
        "exec",
        &api,
        "--",
        "git",
        "-C",
        &repo,
        "fsck",
        "--full",
        "--no-progress",
    ])
    .await?;

    // A new deploy: the restored repository takes a push, the build runs, and the restored keyring unseals the
    // secret into the new release.
    ws.write("shop/VERSION", "v2\n")?;
    let sha = ws.commit_and_push("shop", "v2", &shop_remote).await?;
    let (_, log) = platform.deploy(&ann, &shop, &shop_channel, &sha).await?;
    assert_eq!(log["status"], "success", "{log}");
    platform
        .wait_for_page(&shop_host, "/", "version=v2 secret=s3cr3t-kept")
        .await?;

    // A second restore is refused before it changes anything: the platform has apps.
    let mut again = slipway(&["restore", "--input", file.to_str().unwrap()], &platform)?;
    let refused = again.stdin(std::process::Stdio::null()).output().await?;
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("fresh install only"), "{said}");
    assert_eq!(
        operator_replicas(&platform).await?,
        replicas,
        "a refused restore held the operator"
    );
    Ok(())
}

/// The operator Deployment's replicas, as its spec has them.
async fn operator_replicas(platform: &Installed) -> Result<String> {
    operator_field(platform, "{.spec.replicas}").await
}

/// What the JSONPath `path` picks of the operator's Deployment.
async fn operator_field(platform: &Installed, path: &str) -> Result<String> {
    let field = kubectl(&[
        "-n",
        &platform.namespace,
        "get",
        "deployment",
        &format!("{}-operator", platform.release),
        "-o",
        &format!("jsonpath={path}"),
    ])
    .await?;
    Ok(field.trim().to_owned())
}

/// The ids of `account`'s app `name` and of its prod channel.
async fn by_name(platform: &Installed, account: &Account, name: &str) -> Result<(String, String)> {
    let apps = platform
        .call("GET", "/apps", account, None)
        .await?
        .expect(200);
    let app = apps["apps"]
        .as_array()
        .context("the apps")?
        .iter()
        .find(|a| a["name"] == name)
        .with_context(|| format!("no app {name} in {apps}"))?;
    app_ids(app)
}

/// The custom domain's page over HTTPS, once the edge serves it, with the certificate it presented.
async fn https_page(platform: &Installed, domain: &str) -> Result<support::https::Fetched> {
    let root = support::https::acme_root_at(
        &std::env::var("SLIPWAY_PLATFORM_ACME_MANAGEMENT")?,
        &std::env::var("SLIPWAY_PLATFORM_ACME_CA")?,
    )
    .await?;
    let config = support::https::client_config(&root, &[b"http/1.1"])?;
    let page = until(BACK_WITHIN, "the custom domain over HTTPS", async || {
        Ok(
            support::https::get(platform.edge_https, domain, config.clone(), "/")
                .await
                .ok()
                .filter(|f| f.status == 200),
        )
    })
    .await?;
    let body = String::from_utf8_lossy(&page.body);
    anyhow::ensure!(body.contains("kept"), "{domain} answered {body}");
    Ok(page)
}

/// Runs `slipway admin ARGS...`, its progress going to the test's log.
async fn admin(args: &[&str], platform: &Installed) -> Result<()> {
    let status = slipway(args, platform)?
        .stdin(std::process::Stdio::null())
        .status()
        .await?;
    anyhow::ensure!(status.success(), "slipway admin {args:?} failed ({status})");
    Ok(())
}

/// `slipway admin ARGS...` as the platform team runs it, with the test cluster's kubeconfig.
fn slipway(args: &[&str], platform: &Installed) -> Result<tokio::process::Command> {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_slipway"));
    command
        .arg("admin")
        .args(args)
        .args([
            "--namespace",
            &platform.namespace,
            "--release",
            &platform.release,
        ])
        .env("KUBECONFIG", std::env::var("SLIPWAY_KUBECONFIG")?)
        .kill_on_drop(true);
    Ok(command)
}
