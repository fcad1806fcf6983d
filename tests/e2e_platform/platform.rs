//! The platform as it ships, end to end: slipway installed on the test node by its Helm chart from the locally built
//! image (`hack/install.sh`, run by `hack/test.sh e2e` before these tests), used the way a user uses it. Every
//! component runs as pods under the chart's ServiceAccounts and RBAC, so a missing verb or a wrong value fails here:
//! git over HTTP and SSH, a static and an `app` deploy going live through the edge (the static one also over HTTPS
//! with the chart's wildcard certificate), admission through `kubectl apply`, the internal listener answering only
//! the callers it knows, a git mirror's sync refusing the cluster's own networks, no component holding Secrets
//! cluster-wide or in the release namespace (the edge reads certificates in a namespace of their own), and an app
//! writing and reading its channel's bucket with the injected `S3_*` keys through the chart's S3 gateway and bundled
//! backend, raw TCP forwarded through the chart's forward Service from the allowlist only, an open session
//! outliving its unexpose until a redeploy ends it, an app migrating its channel's database at start, whose
//! pre-deploy snapshot brings the data of v1 back under v2's code, end-user sign-in: two deployed apps verifying
//! the identity cookie themselves with a standard JWT library, and headless Chromium signing in on a deployed page,
//! and an agent registering itself with an SSH key, whose running app grows to the basic plan once the code the
//! chart's mail relay delivered verifies its address.

// Fixture helpers panic on a malformed response: in a test that is the failure to report.
#![allow(clippy::unwrap_used)]

use crate::support;

use anyhow::{Context, Result};
use fantoccini::Locator;
use serde_json::{Value, json};
use support::browser::{Browser, upstream_user};
use support::chromium::Chromium;
use support::git::{Workspace, http_remote};
use support::platform::{
    Account, Installed, PublicBucket, kubectl, kubectl_run, service_account_token,
};

/// A web server that answers GET / with its version and the uid it runs as.
const SERVER: &str = r#"import os, http.server

class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = "version={} uid={}\n".format(open("/app/VERSION").read().strip(), os.getuid()).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

http.server.HTTPServer(("0.0.0.0", int(os.environ["SVC_HTTP_PORT"])), Handler).serve_forever()
"#;

/// An app's process that writes `from-app.txt` into its channel's bucket with the injected keys, reads it back,
/// and only then serves what it read.
const BUCKET_APP: &str = include_str!("../s3/app_roundtrip.py");

/// An app keeping notes in its channel's database (a Postgres client on the standard library), migrated at start.
const NOTES_APP: &str = include_str!("../sql/notes_app.py");

/// The notes app's first migration: postgis made by the channel's own role, a table, a note.
const NOTES_V1_MIGRATION: &str = "CREATE EXTENSION IF NOT EXISTS postgis;
CREATE TABLE notes (id serial PRIMARY KEY, body text NOT NULL, place geometry(Point, 4326));
INSERT INTO notes (body, place) VALUES ('written by v1', ST_SetSRID(ST_MakePoint(13.4, 52.5), 4326));
";

/// v2's migration: a column and a note of its own.
const NOTES_V2_MIGRATION: &str = "ALTER TABLE notes ADD COLUMN stars int;
INSERT INTO notes (body, stars) VALUES ('written by v2', 5);
";

/// An app echoing raw TCP on `SVC_FORWARD_PORT` and answering its version over HTTP.
const ECHO_APP: &str = include_str!("../forward/echo_app.py");

const LOG_APP: &str = include_str!("../logs/log_app.py");

/// Where a pod finds its ServiceAccount token when one is mounted.
const TOKEN_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

#[tokio::test]
async fn every_component_runs_from_the_locally_built_image() -> Result<()> {
    let platform = Installed::from_env()?;
    let pods: Value = serde_json::from_str(
        &kubectl(&["-n", &platform.namespace, "get", "pods", "-o", "json"]).await?,
    )?;
    let mut components = std::collections::BTreeMap::<String, usize>::new();
    for pod in pods["items"].as_array().unwrap() {
        let name = pod["metadata"]["name"].as_str().unwrap();
        let component = pod["metadata"]["labels"]["app.kubernetes.io/component"]
            .as_str()
            .unwrap_or("?");
        assert_eq!(pod["status"]["phase"], "Running", "{name} is not running");
        // The bundled object-store backend runs the versitygw image built here; everything else the slipway one.
        let wanted = if component == "s3-backend" {
            "/versity/versitygw:"
        } else {
            "/slipway/slipway:"
        };
        for container in pod["spec"]["containers"].as_array().unwrap() {
            let image = container["image"].as_str().unwrap();
            assert!(image.contains(wanted), "{name} runs {image}, not {wanted}");
            // Object storage needs nothing from the Kubernetes API: no token in its pods.
            if component.starts_with("s3-") {
                let mounts = container["volumeMounts"].to_string();
                assert!(!mounts.contains(TOKEN_PATH), "{name} mounts a token");
            }
        }
        let account = pod["spec"]["serviceAccountName"]
            .as_str()
            .unwrap_or("default");
        assert_ne!(
            account, "default",
            "{name} runs as the default ServiceAccount"
        );
        *components.entry(component.to_owned()).or_default() += 1;
    }
    assert_eq!(components.get("api"), Some(&1), "{components:?}");
    assert_eq!(components.get("operator"), Some(&2), "{components:?}");
    assert_eq!(components.get("webhook"), Some(&2), "{components:?}");
    assert_eq!(components.get("edge"), Some(&2), "{components:?}");
    assert_eq!(components.get("s3-gateway"), Some(&1), "{components:?}");
    assert_eq!(components.get("s3-backend"), Some(&1), "{components:?}");
    // Two operator replicas, one of them leading through the chart's Lease.
    let holder = kubectl(&[
        "-n",
        &platform.namespace,
        "get",
        "lease",
        "slipway-operator",
        "-o",
        "jsonpath={.spec.holderIdentity}",
    ])
    .await?;
    assert!(
        holder.starts_with(&format!("{}-operator-", platform.release)),
        "the Lease is held by {holder:?}"
    );
    // The installed CRDs leave kubectl's own names alone: `deploy` still lists the Deployments.
    let deployments = kubectl(&["-n", &platform.namespace, "get", "deploy", "-o", "name"]).await?;
    assert!(
        deployments.lines().count() == 5
            && deployments
                .lines()
                .all(|l| l.starts_with("deployment.apps/")),
        "kubectl get deploy: {deployments}"
    );
    Ok(())
}

#[tokio::test]
async fn a_static_site_pushed_over_http_goes_live_through_the_edge_over_http_and_https()
-> Result<()> {
    let platform = Installed::from_env()?;
    let ann = platform.account("ann").await?;
    let (app, channel) = platform.create_app(&ann, "site", "static").await?;
    let ws = Workspace::new()?;
    ws.git(".", &["init", "-q", "-b", "master", "site"]).await?;
    ws.write("site/index.html", "<h1>shipped by the chart</h1>\n")?;
    ws.git("site", &["add", "."]).await?;
    ws.git("site", &["commit", "-q", "-m", "first"]).await?;
    let remote = http_remote(&platform.api, &ann.token, &ann.username, "site");
    ws.git("site", &["push", "-q", &remote, "HEAD:master"])
        .await?;
    let sha = ws
        .git("site", &["rev-parse", "HEAD"])
        .await?
        .trim()
        .to_owned();

    let (_, log) = platform.deploy(&ann, &app, &channel, &sha).await?;
    assert_eq!(log["status"], "success", "{}", log["log"]);
    let host = platform.prod_host(&ann, "site");
    platform
        .wait_for_page(&host, "/", "shipped by the chart")
        .await?;
    // HTTPS on the edge's node port: the chart's wildcard certificate for the app's hostname (a client trusting only
    // its CA accepts it), over HTTP/2 and HTTP/1.1 as ALPN settles; a name that is not the platform's gets no handshake.
    for (alpn, version) in [
        (&b"h2"[..], http::Version::HTTP_2),
        (&b"http/1.1"[..], http::Version::HTTP_11),
    ] {
        let page = platform.edge_get_https(&host, "/", &[alpn]).await?;
        assert_eq!(page.status, 200, "{page:?}");
        assert_eq!(page.version, version);
        assert!(
            String::from_utf8_lossy(&page.body).contains("shipped by the chart"),
            "{page:?}"
        );
    }
    let stranger = platform
        .edge_get_https("not-ours.example", "/", &[b"h2"])
        .await;
    assert!(stranger.is_err(), "{stranger:?}");
    // A clone over HTTP gets the same commit back.
    ws.git(".", &["clone", "-q", &remote, "again"]).await?;
    assert_eq!(ws.git("again", &["rev-parse", "HEAD"]).await?.trim(), sha);
    platform.delete_app(&ann, &app).await
}

#[tokio::test]
async fn an_app_pushed_over_ssh_builds_and_answers_through_the_edge() -> Result<()> {
    let platform = Installed::from_env()?;
    let bob = platform.account("bob").await?;
    let (app, channel) = platform.create_app(&bob, "web", "app").await?;
    let mut ws = Workspace::new()?;
    let key = ws.ssh_key("bob_key").await?;
    platform
        .call("POST", "/ssh-keys", &bob, Some(json!({"public_key": key})))
        .await?
        .expect(200);
    ws.ssh_command = Some(ws.ssh_command_for("bob_key", platform.ssh_port));
    ws.git(".", &["init", "-q", "-b", "master", "web"]).await?;
    ws.write("web/server.py", SERVER)?;
    ws.write("web/VERSION", "v1\n")?;
    ws.write("web/launch.sh", "exec python3 server.py\n")?;
    ws.git("web", &["add", "."]).await?;
    ws.git("web", &["commit", "-q", "-m", "v1"]).await?;
    let remote = format!("git@{}:{}/web.git", platform.ssh_host, bob.username);
    ws.git("web", &["push", "-q", &remote, "HEAD:master"])
        .await?;
    let sha = ws
        .git("web", &["rev-parse", "HEAD"])
        .await?
        .trim()
        .to_owned();

    let (_, log) = platform.deploy(&bob, &app, &channel, &sha).await?;
    assert_eq!(log["status"], "success", "{}", log["log"]);
    assert!(
        log["log"].as_str().unwrap().contains("[build]"),
        "{}",
        log["log"]
    );
    let page = platform
        .wait_for_page(&platform.prod_host(&bob, "web"), "/", "version=v1")
        .await?;
    assert!(page.contains("uid=10001"), "{page}");
    platform.delete_app(&bob, &app).await
}

#[tokio::test]
async fn a_git_mirror_of_the_installed_api_refuses_the_cluster_s_own_networks() -> Result<()> {
    let platform = Installed::from_env()?;
    // The chart passes the pod range install.sh names (the node publishes none).
    let pod_cidr = std::env::var("SLIPWAY_POD_CIDR")?;
    let env = kubectl(&[
        "-n",
        &platform.namespace,
        "get",
        &format!("deployment/{}-api", platform.release),
        "-o",
        "jsonpath={.spec.template.spec.containers[0].env[?(@.name==\"SLIPWAY_MIRROR_DENY_CIDRS\")].value}",
    ])
    .await?;
    assert_eq!(env.trim(), pod_cidr);
    // A name the pod's resolver answers with a Service address: the sync resolves it, lists the cluster's
    // networks under the chart's RBAC, and refuses before connecting.
    let mia = platform.account("mia").await?;
    let (app, _) = platform.create_app(&mia, "mirrored", "static").await?;
    platform
        .call(
            "POST",
            &format!("/apps/{app}/github/connect"),
            &mia,
            Some(json!({"remote_url": "ssh://git@kubernetes.default.svc.cluster.local/x.git"})),
        )
        .await?
        .expect(200);
    let status = platform
        .call("POST", &format!("/apps/{app}/github/sync"), &mia, None)
        .await?
        .expect(200);
    assert_eq!(status["last_sync_status"], "failed", "{status}");
    let error = status["last_sync_error"].as_str().unwrap();
    assert!(
        error.contains("refused to connect") && error.contains("the cluster's Service range"),
        "{error}"
    );
    platform.delete_app(&mia, &app).await
}

#[tokio::test]
async fn kubectl_apply_is_refused_by_the_installed_webhook_with_the_api_s_words() -> Result<()> {
    let platform = Installed::from_env()?;
    let cy = platform.account("cy").await?;
    let (app, _) = platform.create_app(&cy, "notes", "static").await?;
    let api = platform
        .call(
            "POST",
            &format!("/apps/{app}/channels"),
            &cy,
            Some(json!({"name": "again", "git_ref_binding": "branch:master"})),
        )
        .await?;
    assert_eq!(api.status, 400, "{}", api.text());
    let message = api.json()["error"]["message"].as_str().unwrap().to_owned();

    let manifest = "apiVersion: slipway.dev/v1alpha1\nkind: Channel\nmetadata:\n  name: notes.again\nspec:\n  app: notes\n  gitRefBinding: branch:master\n";
    let path = std::env::temp_dir().join(format!("channel-{}.yaml", cy.username));
    std::fs::write(&path, manifest)?;
    let out = kubectl_run(&["apply", "-n", &cy.namespace, "-f", path.to_str().unwrap()]).await?;
    let _ = std::fs::remove_file(&path);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "kubectl apply was admitted");
    assert!(
        stderr.contains("denied the request") && stderr.contains(&message),
        "kubectl said {stderr:?}; the API said {message:?}"
    );
    platform.delete_app(&cy, &app).await
}

#[tokio::test]
async fn the_internal_listener_answers_only_the_callers_it_knows() -> Result<()> {
    let platform = Installed::from_env()?;
    let dee = platform.account("dee").await?;
    let (app, channel) = platform.create_app(&dee, "docs", "static").await?;
    let ws = Workspace::new()?;
    ws.git(".", &["init", "-q", "-b", "master", "docs"]).await?;
    ws.write("docs/index.html", "docs\n")?;
    ws.git("docs", &["add", "."]).await?;
    ws.git("docs", &["commit", "-q", "-m", "docs"]).await?;
    let remote = http_remote(&platform.api, &dee.token, &dee.username, "docs");
    ws.git("docs", &["push", "-q", &remote, "HEAD:master"])
        .await?;
    let sha = ws
        .git("docs", &["rev-parse", "HEAD"])
        .await?
        .trim()
        .to_owned();

    // The internal Service, as a pod in the cluster reaches it (this machine routes to Service addresses through
    // the node, the way a pod's traffic goes).
    let ip = kubectl(&[
        "-n",
        &platform.namespace,
        "get",
        "service",
        &format!("{}-api-internal", platform.release),
        "-o",
        "jsonpath={.spec.clusterIP}:{.spec.ports[0].port}",
    ])
    .await?;
    let internal = format!("http://{ip}/internal/v1");
    let archive = format!("{internal}/apps/{app}/archive/{sha}");
    let env = json!({"app_id": app, "channel_id": channel, "system_keys": []});
    let env_url = format!("{internal}/deploys/{}/env", uuid::Uuid::new_v4());
    let get = |url: String, token: Option<String>| {
        let platform = &platform;
        async move {
            platform
                .request("GET", &url, None, token.as_deref(), None)
                .await
        }
    };

    // No token: nothing.
    assert_eq!(get(archive.clone(), None).await?.status, 401);
    // A token the apiserver does not vouch for: nothing.
    assert_eq!(
        get(archive.clone(), Some("not-a-token".into()))
            .await?
            .status,
        401
    );
    let audience = "slipway-internal";
    // A valid token of a ServiceAccount the platform does not know (a tenant's own): nothing.
    let foreign = service_account_token(&dee.namespace, "default", audience).await?;
    assert_eq!(
        get(archive.clone(), Some(foreign.clone())).await?.status,
        403
    );
    // The operator's ServiceAccount, but a token minted for the Kubernetes API rather than this listener: nothing.
    let operator_sa = platform.release.clone();
    let wrong_audience = kubectl(&["-n", &platform.namespace, "create", "token", &operator_sa])
        .await?
        .trim()
        .to_owned();
    assert_eq!(
        get(archive.clone(), Some(wrong_audience)).await?.status,
        401
    );

    // The edge reads static sites and nothing else: no env values, no commits, no logs, no keys.
    let edge = service_account_token(
        &platform.namespace,
        &format!("{}-edge", platform.release),
        audience,
    )
    .await?;
    let site = get(archive.clone(), Some(edge.clone())).await?;
    assert_eq!(site.status, 200, "{}", site.text());
    assert!(!site.body.is_empty());
    let env_by_edge = platform
        .request("PUT", &env_url, None, Some(&edge), Some(env.clone()))
        .await?;
    assert_eq!(env_by_edge.status, 403, "{}", env_by_edge.text());
    let commits = format!("{internal}/apps/{app}/commits/master");
    assert_eq!(get(commits.clone(), Some(edge.clone())).await?.status, 403);
    // Nor a channel's object-store keys.
    let store_keys = format!("{internal}/channels/{channel}/blob/credentials");
    assert_eq!(get(store_keys, Some(edge)).await?.status, 403);

    // The operator reaches what it needs.
    let operator = service_account_token(&platform.namespace, &operator_sa, audience).await?;
    let resolved = get(commits, Some(operator)).await?;
    assert_eq!(resolved.status, 200, "{}", resolved.text());
    assert_eq!(resolved.json()["sha"], sha);

    // The public listener has no internal route at all.
    let public = platform
        .request(
            "GET",
            &format!("{}/internal/v1/apps/{app}/archive/{sha}", platform.api),
            None,
            Some(&foreign),
            None,
        )
        .await?;
    assert_eq!(public.status, 404);
    platform.delete_app(&dee, &app).await
}

#[tokio::test]
async fn secrets_reach_the_operator_per_tenant_and_the_edge_only_as_certificates() -> Result<()> {
    let platform = Installed::from_env()?;
    let eve = platform.account("eve").await?;
    let ns = &platform.namespace;
    let accounts = [
        platform.release.clone(),
        format!("{}-api", platform.release),
        format!("{}-edge", platform.release),
        format!("{}-webhook", platform.release),
    ];
    for account in &accounts {
        for verb in ["get", "list", "watch"] {
            assert!(
                !can(&platform, verb, "secrets", &["--all-namespaces"], account).await?,
                "{account} can {verb} Secrets cluster-wide"
            );
        }
    }
    // Inside a tenant's namespace the operator writes env Secrets and the api reads GitOps ones, through the grants
    // the operator keeps there (a new namespace gets them within moments).
    let tenant = ["-n", eve.namespace.as_str()];
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    while !can(&platform, "create", "secrets", &tenant, &accounts[0]).await? {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the operator never got its grant in {}",
            eve.namespace
        );
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    assert!(can(&platform, "get", "secrets", &tenant, &accounts[1]).await?);
    assert!(!can(&platform, "list", "secrets", &tenant, &accounts[1]).await?);
    assert!(!can(&platform, "get", "secrets", &tenant, &accounts[2]).await?);
    // The release namespace holds the database URL and the env keyring, which reach only the pods they are mounted
    // into: no component may read or write Secrets there through the apiserver, least of all the edge, which faces
    // the internet. The tenant grants never reach there either (they would let the operator write Deployments).
    let own = ["-n", ns.as_str()];
    for account in &accounts {
        for verb in ["get", "list", "watch", "create"] {
            assert!(
                !can(&platform, verb, "secrets", &own, account).await?,
                "{account} can {verb} Secrets in the release namespace {ns}"
            );
        }
    }
    assert!(!can(&platform, "create", "deployments", &own, &accounts[0]).await?);
    // Certificates live in a namespace of their own: the operator writes them there, the edge only reads them, the
    // api and the webhook have no business there.
    let certs_ns = &platform.certificate_namespace;
    assert_ne!(certs_ns, ns, "certificates share the release namespace");
    let certs = ["-n", certs_ns.as_str()];
    for verb in ["get", "create", "patch", "delete"] {
        assert!(
            can(&platform, verb, "secrets", &certs, &accounts[0]).await?,
            "the operator cannot {verb} Secrets in {certs_ns}"
        );
    }
    for (verb, allowed) in [
        ("get", true),
        ("list", true),
        ("watch", true),
        ("create", false),
        ("patch", false),
        ("delete", false),
    ] {
        assert_eq!(
            can(&platform, verb, "secrets", &certs, &accounts[2]).await?,
            allowed,
            "whether the edge may {verb} Secrets in {certs_ns}"
        );
    }
    for account in [&accounts[1], &accounts[3]] {
        assert!(
            !can(&platform, "get", "secrets", &certs, account).await?,
            "{account} can get Secrets in {certs_ns}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn an_app_writes_and_reads_its_bucket_with_the_injected_keys() -> Result<()> {
    let platform = Installed::from_env()?;
    let gus = platform.account("gus").await?;
    let (app, channel) = platform.create_app(&gus, "bucket", "app").await?;
    let ws = Workspace::new()?;
    ws.git(".", &["init", "-q", "-b", "master", "bucket"])
        .await?;
    ws.write("bucket/app.py", BUCKET_APP)?;
    ws.write("bucket/VERSION", "v1\n")?;
    ws.write("bucket/launch.sh", "exec python3 app.py\n")?;
    ws.git("bucket", &["add", "."]).await?;
    ws.git("bucket", &["commit", "-q", "-m", "v1"]).await?;
    let remote = http_remote(&platform.api, &gus.token, &gus.username, "bucket");
    ws.git("bucket", &["push", "-q", &remote, "HEAD:master"])
        .await?;
    let sha = ws
        .git("bucket", &["rev-parse", "HEAD"])
        .await?
        .trim()
        .to_owned();

    // The app passes readiness only once its own round trip through the gateway worked.
    let (_, log) = platform.deploy(&gus, &app, &channel, &sha).await?;
    assert_eq!(log["status"], "success", "{}", log["log"]);
    let written = "written by the app, version v1";
    platform
        .wait_for_page(&platform.prod_host(&gus, "bucket"), "/", written)
        .await?;
    let blob = format!("/apps/{app}/channels/{channel}/blob");
    let status = platform.call("GET", &blob, &gus, None).await?.expect(200);
    assert_eq!(status["status"], "ready", "{status}");
    // The app's small write is counted moments after its answer.
    let counted = slipway_testkit::wait_until(std::time::Duration::from_secs(5), || async {
        let status = platform.call("GET", &blob, &gus, None).await?.expect(200);
        Ok(status["usage_bytes"] == written.len())
    })
    .await;
    let status = platform.call("GET", &blob, &gus, None).await?.expect(200);
    assert!(counted.is_ok(), "usage: {status}");

    // From outside, the object is read with the credentials route's key pair through the edge's public endpoint,
    // which opens with the app's toggle.
    let bucket = PublicBucket::open(&platform, &gus, &app, &channel).await?;
    assert_eq!(
        bucket.run(&["read", "from-app.txt"]).await?,
        format!("ok {written}")
    );

    // Deleting the app takes the bucket along: the operator empties and removes it before the channel goes.
    platform.delete_app(&gus, &app).await
}

#[tokio::test]
async fn raw_tcp_reaches_the_app_from_the_allowlist_and_an_open_session_lasts_until_a_redeploy()
-> Result<()> {
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let platform = Installed::from_env()?;
    let hal = platform.account("hal").await?;
    let (app, channel) = platform.create_app(&hal, "echo", "app").await?;
    let ws = Workspace::new()?;
    ws.git(".", &["init", "-q", "-b", "master", "echo"]).await?;
    ws.write("echo/app.py", ECHO_APP)?;
    ws.write("echo/launch.sh", "exec python3 app.py\n")?;
    let mut shas = Vec::new();
    for version in ["v1", "v2"] {
        ws.write("echo/VERSION", format!("{version}\n"))?;
        ws.git("echo", &["add", "."]).await?;
        ws.git("echo", &["commit", "-q", "-m", version]).await?;
        shas.push(
            ws.git("echo", &["rev-parse", "HEAD"])
                .await?
                .trim()
                .to_owned(),
        );
    }
    let remote = http_remote(&platform.api, &hal.token, &hal.username, "echo");
    ws.git("echo", &["push", "-q", &remote, "HEAD:master"])
        .await?;
    let (_, log) = platform.deploy(&hal, &app, &channel, &shas[0]).await?;
    assert_eq!(log["status"], "success", "{}", log["log"]);
    platform
        .call(
            "PATCH",
            &format!("/apps/{app}"),
            &hal,
            Some(json!({"port_forwarding_enabled": true})),
        )
        .await?
        .expect(200);

    // The edge sees this machine's address on the node link (the Service keeps client addresses).
    let me = std::env::var("SLIPWAY_NODE_HOST_IP")?;
    let forward = format!("/apps/{app}/channels/{channel}/forward");
    let exposed = platform
        .call("POST", &forward, &hal, Some(json!({"allow_cidrs": [me]})))
        .await?
        .expect(201);
    assert_eq!(exposed["host"], platform.forward_host.as_str(), "{exposed}");
    let port = exposed["port"].as_u64().unwrap();
    let addr = format!("{}:{port}", platform.forward_host);
    let within = Duration::from_secs(60);
    let echoes = |mut conn: tokio::net::TcpStream, message: &'static [u8]| async move {
        conn.write_all(message).await?;
        let mut back = vec![0; message.len()];
        tokio::time::timeout(Duration::from_secs(10), conn.read_exact(&mut back)).await??;
        anyhow::ensure!(back == message, "echoed {back:?}");
        Ok::<_, anyhow::Error>(conn)
    };
    // Until the edge has opened the listener, connections are refused.
    let deadline = tokio::time::Instant::now() + within;
    let session = loop {
        if let Ok(conn) = tokio::net::TcpStream::connect(&addr).await
            && let Ok(conn) = echoes(conn, b"hello\0raw").await
        {
            break conn;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{addr} never echoed"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };

    // Another allowlist, same port: this machine is refused before anything reaches the app.
    let again = platform
        .call(
            "POST",
            &forward,
            &hal,
            Some(json!({"allow_cidrs": ["203.0.113.0/24"]})),
        )
        .await?
        .expect(200);
    assert_eq!(again["port"], exposed["port"]);
    let refused = || async {
        let Ok(mut conn) = tokio::net::TcpStream::connect(&addr).await else {
            return true;
        };
        let _ = conn.write_all(b"knock").await;
        let mut buf = [0u8; 8];
        matches!(
            tokio::time::timeout(Duration::from_secs(10), conn.read(&mut buf)).await,
            Ok(Ok(0)) | Ok(Err(_))
        )
    };
    let deadline = tokio::time::Instant::now() + within;
    while !refused().await {
        assert!(tokio::time::Instant::now() < deadline, "still let in");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // The session opened before goes on.
    let session = echoes(session, b"still open").await?;

    // Unexpose: no new connections; the open session keeps echoing until a redeploy replaces the container.
    platform
        .call("DELETE", &forward, &hal, None)
        .await?
        .expect(204);
    let deadline = tokio::time::Instant::now() + within;
    while !refused().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the unexposed port still answers"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let mut session = echoes(session, b"after unexpose").await?;
    let (_, log) = platform.deploy(&hal, &app, &channel, &shas[1]).await?;
    assert_eq!(log["status"], "success", "{}", log["log"]);
    let mut buf = [0u8; 8];
    let ended = tokio::time::timeout(within, async {
        loop {
            if session.write_all(b"x").await.is_err() {
                return;
            }
            match session.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "the session outlived the redeploy");
    platform.delete_app(&hal, &app).await
}

/// `kubectl auth can-i VERB RESOURCE SCOPE... --as` the platform's ServiceAccount `account`.
async fn can(
    platform: &Installed,
    verb: &str,
    resource: &str,
    scope: &[&str],
    account: &str,
) -> Result<bool> {
    let subject = format!("system:serviceaccount:{}:{account}", platform.namespace);
    let mut args = vec!["auth", "can-i", verb, resource, "--as", &subject];
    args.extend_from_slice(scope);
    let out = kubectl_run(&args).await?;
    Ok(String::from_utf8_lossy(&out.stdout).trim() == "yes")
}

/// Commits the files of `version` of the notes app and pushes them over HTTP; returns the commit.
async fn push_notes(
    platform: &Installed,
    account: &support::platform::Account,
    ws: &Workspace,
    version: &str,
    migrations: &[(&str, &str)],
) -> Result<String> {
    ws.write("notes/app.py", NOTES_APP)?;
    ws.write("notes/VERSION", format!("{version}\n"))?;
    ws.write(
        "notes/launch.sh",
        "python3 app.py migrate && exec python3 app.py serve\n",
    )?;
    for (name, sql) in migrations {
        ws.write(&format!("notes/migrations/{name}"), sql)?;
    }
    ws.git("notes", &["add", "."]).await?;
    ws.git("notes", &["commit", "-q", "-m", version]).await?;
    let remote = http_remote(&platform.api, &account.token, &account.username, "notes");
    ws.git("notes", &["push", "-q", &remote, "HEAD:master"])
        .await?;
    Ok(ws
        .git("notes", &["rev-parse", "HEAD"])
        .await?
        .trim()
        .to_owned())
}

#[tokio::test]
async fn an_app_migrates_its_database_and_a_pre_deploy_snapshot_brings_v1_s_data_back_under_v2()
-> Result<()> {
    let platform = Installed::from_env()?;
    let admin_url = std::env::var("SLIPWAY_PLATFORM_DATA_SERVER_URL")?;
    let hana = platform.account("hana").await?;
    let (app, channel) = platform.create_app(&hana, "notes", "app").await?;
    let host = platform.prod_host(&hana, "notes");
    let postgres = format!("/apps/{app}/channels/{channel}/postgres");
    let ws = Workspace::new()?;
    ws.git(".", &["init", "-q", "-b", "master", "notes"])
        .await?;

    // v1 migrates at start with the injected DATABASE_URL (postgis by the channel's own role); the read-only role
    // reads the notes and may not write.
    let v1 = push_notes(
        &platform,
        &hana,
        &ws,
        "v1",
        &[("001_notes.sql", NOTES_V1_MIGRATION)],
    )
    .await?;
    let (_, log) = platform.deploy(&hana, &app, &channel, &v1).await?;
    assert_eq!(log["status"], "success", "{}", log["log"]);
    let page = platform.wait_for_page(&host, "/", "version=v1").await?;
    assert!(
        page.contains("note=written by v1 at POINT(13.4 52.5)"),
        "{page}"
    );
    assert!(page.contains("readonly reads 1 notes"), "{page}");
    assert!(page.contains("readonly write refused: 42501"), "{page}");
    let status = platform
        .call("GET", &postgres, &hana, None)
        .await?
        .expect(200);
    assert_eq!(status["status"], "ready", "{status}");
    assert!(status["storage_bytes"].as_i64().unwrap() > 0, "{status}");
    let db_name = status["db_name"].as_str().unwrap().to_owned();
    // From outside, psql reaches the database through the installed SQL endpoint with the account's token, once the
    // app's external access is on.
    let sql_address = std::env::var("SLIPWAY_PLATFORM_SQL")?;
    let external_psql = || {
        tokio::process::Command::new("psql")
            .args([
                "-XtAc",
                "SELECT count(*) FROM notes",
                &format!(
                    "postgresql://{}:{}@{sql_address}/notes?sslmode=require&connect_timeout=10",
                    hana.username, hana.token
                ),
            ])
            .output()
    };
    let refused = external_psql().await?;
    assert!(
        !refused.status.success(),
        "{}",
        String::from_utf8_lossy(&refused.stdout)
    );
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("password authentication failed"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    platform
        .call(
            "PATCH",
            &format!("/apps/{app}"),
            &hana,
            Some(json!({"external_db_access_enabled": true})),
        )
        .await?
        .expect(200);
    // The API sees the toggle with its next cache event, moments after the App changes.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    let counted = loop {
        let out = external_psql().await?;
        if out.status.success() || tokio::time::Instant::now() > deadline {
            break out;
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    };
    assert!(
        counted.status.success(),
        "{}",
        String::from_utf8_lossy(&counted.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&counted.stdout).trim(), "1");
    // v1's objects, written from outside with the channel's key pair through the edge's public endpoint.
    let bucket = PublicBucket::open(&platform, &hana, &app, &channel).await?;
    for (key, body) in [
        ("keep.txt", "kept"),
        ("changed.txt", "v1"),
        ("deleted.txt", "v1"),
    ] {
        assert_eq!(bucket.run(&["write", key, body]).await?, "ok");
    }

    // v2's deploy checkpoints the database and the bucket before its container starts, then migrates.
    let v2 = push_notes(
        &platform,
        &hana,
        &ws,
        "v2",
        &[("002_stars.sql", NOTES_V2_MIGRATION)],
    )
    .await?;
    let (deploy_v2, log) = platform.deploy(&hana, &app, &channel, &v2).await?;
    assert_eq!(log["status"], "success", "{}", log["log"]);
    let page = platform.wait_for_page(&host, "/", "version=v2").await?;
    assert!(
        page.contains("migrations=001_notes.sql,002_stars.sql"),
        "{page}"
    );
    assert!(page.contains("note=written by v2 at None"), "{page}");
    let snapshots = platform
        .call("GET", &format!("{postgres}/snapshots"), &hana, None)
        .await?
        .expect(200);
    let before_v2 = snapshots
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["deploy_id"] == deploy_v2.as_str())
        .unwrap_or_else(|| panic!("no snapshot of deploy {deploy_v2}: {snapshots}"));
    assert_eq!(before_v2["kind"], "pre_deploy", "{before_v2}");
    assert_eq!(before_v2["git_sha"], v1.as_str(), "{before_v2}");
    assert_eq!(before_v2["recoverable"], true, "{before_v2}");
    assert_eq!(before_v2["aligned_blob"], true, "{before_v2}");
    let checkpoint = before_v2["snapshot_id"].as_str().unwrap().to_owned();
    let blob = format!("/apps/{app}/channels/{channel}/blob");
    let markers = platform
        .call("GET", &format!("{blob}/snapshots"), &hana, None)
        .await?
        .expect(200);
    assert!(
        markers
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["pg_snapshot_id"] == checkpoint.as_str()
                && m["deploy_id"] == deploy_v2.as_str()),
        "{markers}"
    );
    // v2 changes the bucket too.
    assert_eq!(bucket.run(&["write", "changed.txt", "v2"]).await?, "ok");
    assert_eq!(bucket.run(&["write", "later.txt", "v2"]).await?, "ok");
    assert_eq!(bucket.run(&["delete", "deleted.txt"]).await?, "ok");

    // The checkpoint's bucket and code download as v1 had them.
    let v1_objects = [
        ("changed.txt", "v1"),
        ("deleted.txt", "v1"),
        ("keep.txt", "kept"),
        ("probe.txt", "through the edge"),
    ]
    .iter()
    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
    .collect::<std::collections::BTreeMap<_, _>>();
    let tarball = platform
        .call(
            "GET",
            &format!("{blob}/snapshots/{checkpoint}/download"),
            &hana,
            None,
        )
        .await?;
    assert_eq!(tarball.status, 200, "{}", tarball.text());
    assert_eq!(support::untar(&tarball.body, true), v1_objects);
    let code = platform
        .call(
            "GET",
            &format!("/apps/{app}/channels/{channel}/code/download?snapshot_id={checkpoint}"),
            &hana,
            None,
        )
        .await?;
    assert_eq!(code.status, 200, "{}", code.text());
    assert_eq!(
        support::untar(&code.body, false)
            .get("VERSION")
            .map(String::as_str),
        Some("v1\n")
    );

    // Restoring it brings v1's data back under v2's code, which keeps running on the same DATABASE_URL. prod's
    // data is replaced only where the app allows it.
    let restore = json!({"snapshot_id": before_v2["snapshot_id"], "confirm_db_name": db_name});
    let refused = platform
        .call(
            "POST",
            &format!("{postgres}/restore"),
            &hana,
            Some(restore.clone()),
        )
        .await?
        .expect(403);
    assert_eq!(
        refused["error"]["code"], "prod_restore_blocked",
        "{refused}"
    );
    platform
        .call(
            "POST",
            &format!("/apps/{app}/env"),
            &hana,
            Some(json!({"key": "SVC_ALLOW_PROD_RESTORE", "value": "1"})),
        )
        .await?
        .expect(204);
    let restored = platform
        .call("POST", &format!("{postgres}/restore"), &hana, Some(restore))
        .await?
        .expect(200);
    assert_eq!(restored["status"], "ready", "{restored}");
    let page = platform
        .wait_for_page(&host, "/", "migrations=001_notes.sql\n")
        .await?;
    assert!(page.contains("version=v2"), "{page}");
    assert!(
        page.contains("note=written by v1 at POINT(13.4 52.5)"),
        "{page}"
    );
    assert!(!page.contains("written by v2"), "{page}");
    assert!(page.contains("readonly reads 1 notes"), "{page}");

    // The bucket goes back to the checkpoint by copying forward: v1's objects are current again, the key made
    // later reads as deleted.
    platform
        .call(
            "POST",
            &format!("{blob}/restore"),
            &hana,
            Some(json!({"confirm_channel_name": "prod", "snapshot_id": checkpoint})),
        )
        .await?
        .expect(200);
    for (key, body) in &v1_objects {
        assert_eq!(bucket.run(&["read", key]).await?, format!("ok {body}"));
    }
    assert_eq!(
        bucket.run(&["read", "later.txt"]).await?,
        "error 404 NoSuchKey"
    );

    // Deleting the app drops its database on the data server.
    platform.delete_app(&hana, &app).await?;
    let left = tokio::process::Command::new("psql")
        .args([
            "-XtAc",
            &format!("SELECT count(*) FROM pg_database WHERE datname = '{db_name}'"),
            &admin_url,
        ])
        .output()
        .await?;
    assert_eq!(
        String::from_utf8_lossy(&left.stdout).trim(),
        "0",
        "{left:?}"
    );
    Ok(())
}

/// The sign-in test's app: verifies the identity cookie itself with jose (tests/signin/app.mjs).
const SIGN_IN_APP: &str = include_str!("../signin/app.mjs");

/// Pushes the sign-in app as `name` (jose vendored from npm into its `node_modules`, the platform's CA beside it
/// for fetching the JWKS over HTTPS) and deploys it; returns its id and prod host.
async fn deploy_sign_in_app(
    platform: &Installed,
    account: &Account,
    name: &str,
) -> Result<(String, String)> {
    let (app, channel) = platform.create_app(account, name, "app").await?;
    let ws = Workspace::new()?;
    ws.git(".", &["init", "-q", "-b", "master", name]).await?;
    ws.write(
        &format!("{name}/package.json"),
        r#"{"name":"signin","private":true,"type":"module"}"#,
    )?;
    ws.write(&format!("{name}/app.mjs"), SIGN_IN_APP)?;
    ws.write(&format!("{name}/ca.pem"), std::fs::read(&platform.edge_ca)?)?;
    ws.write(
        &format!("{name}/launch.sh"),
        format!(
            "export AUTH_URL={}\nexport NODE_EXTRA_CA_CERTS=/app/ca.pem\nexec node app.mjs\n",
            platform.auth_url
        ),
    )?;
    let jose = ws.path(&format!("{name}/node_modules/jose"));
    std::fs::create_dir_all(&jose)?;
    let tgz = std::env::var("SLIPWAY_TEST_JOSE_TGZ")
        .map_err(|_| anyhow::anyhow!("SLIPWAY_TEST_JOSE_TGZ is not set: run under hack/test.sh"))?;
    let untar = tokio::process::Command::new("tar")
        .args(["-xzf", &tgz, "--strip-components=1", "-C"])
        .arg(&jose)
        .status()
        .await?;
    anyhow::ensure!(untar.success(), "unpack {tgz}");
    let remote = http_remote(&platform.api, &account.token, &account.username, name);
    let sha = ws.commit_and_push(name, "sign-in", &remote).await?;
    let (_, log) = platform.deploy(account, &app, &channel, &sha).await?;
    anyhow::ensure!(log["status"] == "success", "{}", log["log"]);
    let host = platform.prod_host(account, name);
    platform.wait_for_page(&host, "/", "\"user\":null").await?;
    Ok((app, host))
}

#[tokio::test]
async fn people_sign_in_to_deployed_apps_that_verify_the_cookie_themselves_in_a_client_and_in_chromium()
-> Result<()> {
    use anyhow::Context as _;
    let platform = Installed::from_env()?;
    // Two apps at once: on the basic plan they need the CPU of one builder app beside the other tests' apps.
    let ida = platform.account_on("ida", "basic").await?;
    let ((app_one, one), (app_two, two)) = tokio::try_join!(
        deploy_sign_in_app(&platform, &ida, "idone"),
        deploy_sign_in_app(&platform, &ida, "idtwo"),
    )?;
    let port = platform.edge_https.port();
    let origin = |host: &str| format!("https://{host}:{port}");
    let auth_host = format!("auth.{}", platform.app_domain);
    let ca = std::fs::read_to_string(&platform.edge_ca)?;
    let browser = Browser::new(&ca, &[&auth_host, &one, &two], platform.edge_https)?;
    let person = format!("ida-{}", uuid::Uuid::new_v4().simple());
    upstream_user(
        &platform.oidc_issuer,
        &person,
        json!({"email": "ida@example.test", "name": "Ida"}),
    )
    .await?;

    // Signed in through the installed edge and the upstream provider; the app's own check passes.
    let (back, _) = browser.sign_in(&origin(&one), &person).await?;
    assert_eq!(back.location, Some(format!("{}/after?x=1", origin(&one))));
    let seen = browser.get(&format!("{}/", origin(&one))).await?.json()?;
    assert_eq!(seen["error"], Value::Null, "{seen}");
    assert_eq!(seen["user"]["email"], "ida@example.test", "{seen}");
    assert_eq!(seen["user"]["iss"], platform.auth_url);
    assert_eq!(seen["user"]["aud"], one.as_str());
    let sub = seen["user"]["sub"].as_str().context("sub")?.to_owned();

    // An inbound X-Svc-User never reaches the app.
    let url: reqwest::Url = format!("{}/", origin(&one)).parse()?;
    let forged = browser
        .send(
            browser
                .http
                .get(url.clone())
                .header("x-svc-user", "mallory"),
            &url,
        )
        .await?
        .json()?;
    assert_eq!(forged["x_svc_user"], Value::Null, "{forged}");
    assert_eq!(forged["user"]["sub"], sub.as_str());

    // The second app sees the same person under the same sub.
    browser.sign_in(&origin(&two), &person).await?;
    let seen_two = browser.get(&format!("{}/", origin(&two))).await?.json()?;
    assert_eq!(seen_two["user"]["sub"], sub.as_str(), "{seen_two}");

    // The first app's cookie copied to the second fails the second app's check.
    let token_one = browser.cookie(&one, "__Host-svc_id").context("cookie")?;
    let copier = Browser::new(&ca, &[&one, &two], platform.edge_https)?;
    copier.set(&two, "__Host-svc_id", &token_one);
    let copied = copier.get(&format!("{}/", origin(&two))).await?.json()?;
    assert_eq!(copied["user"], Value::Null, "{copied}");
    assert_eq!(
        copied["error"], "ERR_JWT_CLAIM_VALIDATION_FAILED",
        "{copied}"
    );

    // Forged and expired tokens fail it too: one signed by another key under the platform's kid, one signed by the
    // platform's own key (from the chart's Secret) that expired.
    let pem = kubectl(&[
        "-n",
        &platform.namespace,
        "get",
        "secret",
        &format!("{}-sign-in", platform.release),
        "-o",
        "jsonpath={.data.signing\\.pem}",
    ])
    .await?;
    let pem = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, pem.trim())?;
    let kid = jsonwebtoken::decode_header(&token_one)?
        .kid
        .context("kid")?;
    let now = slipway_internal::source_url::unix_now();
    let mint = |key: &[u8], iat: u64, exp: u64| -> Result<String> {
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256);
        header.kid = Some(kid.clone());
        let claims =
            json!({"iss": platform.auth_url, "aud": one, "sub": "forged", "iat": iat, "exp": exp});
        Ok(jsonwebtoken::encode(
            &header,
            &claims,
            &jsonwebtoken::EncodingKey::from_rsa_pem(key)?,
        )?)
    };
    let other_key = slipway_testkit::tls::rsa_key_pem(false)?;
    for (what, token, code) in [
        (
            "the platform's key, valid (the control)",
            mint(&pem, now, now + 600)?,
            Value::Null,
        ),
        (
            "another key",
            mint(&other_key, now, now + 600)?,
            json!("ERR_JWS_SIGNATURE_VERIFICATION_FAILED"),
        ),
        (
            "expired",
            mint(&pem, now - 7200, now - 3600)?,
            json!("ERR_JWT_EXPIRED"),
        ),
    ] {
        copier.set(&one, "__Host-svc_id", &token);
        let seen = copier.get(&format!("{}/", origin(&one))).await?.json()?;
        assert_eq!(seen["error"], code, "{what}: {seen}");
    }

    // Logout clears it: the app sees nobody.
    browser
        .get(&format!("{}/svc-auth/logout?return_to=/", origin(&one)))
        .await?;
    let after = browser.get(&format!("{}/", origin(&one))).await?.json()?;
    assert_eq!(after["user"], Value::Null, "{after}");

    // A real browser: headless Chromium signs in on the deployed page, typing the name into the provider's form.
    let carol = format!("carol-{}", uuid::Uuid::new_v4().simple());
    upstream_user(
        &platform.oidc_issuer,
        &carol,
        json!({"email": "carol@example.test"}),
    )
    .await?;
    let rules = format!("MAP *.{} {}", platform.app_domain, platform.edge_https.ip());
    let chromium = Chromium::start(&rules).await?;
    let c = &chromium.client;
    c.goto(&format!("{}/page", origin(&two))).await?;
    let before = c.find(Locator::Css("#who")).await?.text().await?;
    assert_eq!(before, "Not signed in");
    c.goto(&format!("{}/svc-auth/login?return_to=/page", origin(&two)))
        .await?;
    c.wait()
        .for_element(Locator::Css("input[name=sub]"))
        .await?
        .send_keys(&carol)
        .await?;
    c.find(Locator::Css("button:not([name=action])"))
        .await?
        .click()
        .await?;
    let who = c
        .wait()
        .for_element(Locator::XPath(
            "//p[@id='who' and starts-with(., 'Signed in')]",
        ))
        .await?
        .text()
        .await?;
    assert!(
        who.starts_with("Signed in as carol@example.test ("),
        "{who}"
    );
    assert_eq!(
        c.current_url().await?.as_str(),
        format!("{}/page", origin(&two))
    );
    // Host-only (WebDriver names the exact host, without a leading dot), Secure and HttpOnly.
    let cookie = c.get_named_cookie("__Host-svc_id").await?;
    assert_eq!(
        (cookie.secure(), cookie.http_only(), cookie.domain()),
        (Some(true), Some(true), Some(two.as_str()))
    );
    println!("headless Chromium on {}/page: {who}", origin(&two));
    chromium.close().await?;
    platform
        .delete_apps(&[(&ida, &app_one), (&ida, &app_two)])
        .await
}

/// The memory limit and CPU request of the app container of each Ready pod of `namespace`'s app `app`.
async fn ready_app_sizes(namespace: &str, app: &str) -> Result<Vec<(String, String)>> {
    // Through a client, not kubectl: the rollover check polls this a few times a second.
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(slipway_testkit::client().await?, namespace);
    let listed = pods
        .list(&kube::api::ListParams::default().labels(&format!(
            "slipway.dev/app={app},app.kubernetes.io/component=run"
        )))
        .await?;
    let pods = serde_json::to_value(&listed)?;
    let mut sizes = Vec::new();
    for pod in pods["items"].as_array().into_iter().flatten() {
        let ready = pod["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        if ready && pod["metadata"]["deletionTimestamp"].is_null() {
            for c in pod["spec"]["containers"].as_array().into_iter().flatten() {
                if c["name"] == "app" {
                    let resources = &c["resources"];
                    let text = |v: &Value| v.as_str().unwrap_or("").to_owned();
                    sizes.push((
                        text(&resources["limits"]["memory"]),
                        text(&resources["requests"]["cpu"]),
                    ));
                }
            }
        }
    }
    Ok(sizes)
}

/// What a pod of `plan` is sized as on the installed platform: its memory limit, and the CPU request that is the
/// chart's `workloads.cpuRequestPercent` (the node's, see `hack/node.sh`) of the plan's share.
fn installed_size(plan: &str) -> Result<(String, String)> {
    let plan = slipway_crds::plans::Plan::by_tier(plan).context("plan")?;
    let percent = slipway_testkit::node::cpu_request_percent()?;
    let millis = (plan.cpu_soft_cores * 10.0 * f64::from(percent)).round();
    Ok((format!("{}Mi", plan.mem_limit_mb), format!("{millis}m")))
}

#[tokio::test]
async fn an_agent_registers_with_its_ssh_key_and_a_mailed_code_grows_its_running_app_to_basic()
-> Result<()> {
    let platform = Installed::from_env()?;
    let maildir: std::path::PathBuf = std::env::var("SLIPWAY_PLATFORM_MAILDIR")?.into();
    // The agent signs its registration with ssh-keygen and sends it to the installed API: no admin involved.
    let key = support::agent::AgentKey::new("ed25519")?;
    let registered = platform
        .request(
            "POST",
            &format!("{}/registrations", platform.api),
            None,
            None,
            Some(key.registration(None, support::agent::now())?),
        )
        .await?
        .expect(200);
    assert_eq!(registered["plan"], "starter");
    let username = registered["username"].as_str().unwrap().to_owned();
    let agent = Account {
        namespace: format!("slipway-user-{username}"),
        token: registered["token"].as_str().unwrap().to_owned(),
        username,
    };
    let (app, channel) = platform.create_app(&agent, "grow", "app").await?;
    let sha = platform
        .call(
            "POST",
            &format!("/apps/{app}/changeset"),
            &agent,
            Some(json!({"message": "v1", "changes": {
                "server.py": SERVER, "VERSION": "v1\n", "launch.sh": "exec python3 server.py\n"}})),
        )
        .await?
        .expect(200)["sha"]
        .as_str()
        .unwrap()
        .to_owned();
    let (_, log) = platform.deploy(&agent, &app, &channel, &sha).await?;
    assert_eq!(log["status"], "success", "{}", log["log"]);
    let host = platform.prod_host(&agent, "grow");
    platform.wait_for_page(&host, "/", "version=v1").await?;
    assert_eq!(
        ready_app_sizes(&agent.namespace, "grow").await?,
        [installed_size("starter")?],
        "starter, at the chart's share of its CPU"
    );

    // The address is proven by the code the installed API mailed through the chart's SMTP relay.
    let address = format!("{}@example.test", agent.username);
    platform
        .call(
            "POST",
            "/me/email-verifications",
            &agent,
            Some(json!({"email": address})),
        )
        .await?
        .expect(200);
    let code = support::agent::code_mailed_to(&maildir, &address)?;
    let verified = platform
        .call(
            "POST",
            "/me/email-verifications/complete",
            &agent,
            Some(json!({"code": code})),
        )
        .await?
        .expect(200);
    assert_eq!(
        verified,
        json!({"status": "verified", "plan": "basic", "apply_queued": true})
    );

    // The operator resizes the running app to basic's 256 MiB (and its CPU share); the page answers throughout the
    // rollover.
    let basic = installed_size("basic")?;
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(180);
    let mut answers = 0;
    loop {
        let page = platform.edge_get(&host, "/").await?;
        assert_eq!(
            (page.status, page.text().contains("version=v1")),
            (200, true),
            "{}",
            page.text()
        );
        answers += 1;
        if ready_app_sizes(&agent.namespace, "grow").await? == [basic.clone()] {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not resized: {:?}",
            ready_app_sizes(&agent.namespace, "grow").await?
        );
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    println!("resized to basic with the page answering all {answers} requests during the rollover");
    let usage = platform
        .call("GET", "/me/usage", &agent, None)
        .await?
        .expect(200);
    assert_eq!(usage["plan"], "basic");
    platform.delete_app(&agent, &app).await
}

/// Calls the runtime-log route of `app`'s channel until `done` holds for its answer (the archive follows the
/// container's output and state as they happen, moments behind).
async fn runtime_log_until(
    platform: &Installed,
    account: &Account,
    path: &str,
    body: Value,
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> Result<Value> {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let answer = platform
            .call("POST", path, account, Some(body.clone()))
            .await?;
        if answer.status == 200 && done(&answer.json()) {
            return Ok(answer.json());
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "the runtime log never showed {what}: {} {}",
            answer.status,
            answer.text()
        );
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
}

/// The output the console's runtime-log page at `url` shows, once its sandbox has run (a loaded node answers 503
/// "retry later", which the page passes on).
async fn console_runtime_output(console: &support::browser::Browser, url: &str) -> Result<String> {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let page = console.get(url).await?;
        if page.status == 200 {
            let (_, output) = page
                .text
                .split_once(r#"id="runtime-output" role="log" aria-live="polite">"#)
                .with_context(|| format!("no runtime output in {}", page.text))?;
            let (output, _) = output.split_once("</pre>").context("an unclosed <pre>")?;
            return Ok(output.to_owned());
        }
        anyhow::ensure!(
            page.status == 503 && tokio::time::Instant::now() < deadline,
            "the console's runtime log answered {}: {}",
            page.status,
            page.text
        );
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    }
}

/// Runs `command` on generation `index` of the channel's runtime log.
async fn run_on_log(
    platform: &Installed,
    account: &Account,
    path: &str,
    index: u64,
    command: &str,
) -> Result<Value> {
    // A sandbox that could not start in its budget (a loaded node) answers 503 "retry later"; a client retries.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let answer = platform
            .call(
                "POST",
                path,
                account,
                Some(json!({"container_index": index, "command": command})),
            )
            .await?;
        if answer.status != 503 || tokio::time::Instant::now() > deadline {
            return Ok(answer.expect(200));
        }
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    }
}

#[tokio::test]
async fn runtime_logs_outlive_crashes_oom_kills_and_pod_deletion_and_commands_run_on_them_without_network()
-> Result<()> {
    let platform = Installed::from_env()?;
    let (kim, address) = platform.person("kim").await?;
    let (app, channel) = platform.create_app(&kim, "logs", "app").await?;
    let ws = Workspace::new()?;
    ws.git(".", &["init", "-q", "-b", "master", "logs"]).await?;
    ws.write("logs/app.py", LOG_APP)?;
    ws.write("logs/launch.sh", "exec python3 app.py\n")?;
    ws.git("logs", &["add", "."]).await?;
    ws.git("logs", &["commit", "-q", "-m", "v1"]).await?;
    let remote = http_remote(&platform.api, &kim.token, &kim.username, "logs");
    ws.git("logs", &["push", "-q", &remote, "HEAD:master"])
        .await?;
    let sha = ws
        .git("logs", &["rev-parse", "HEAD"])
        .await?
        .trim()
        .to_owned();
    let (_, log) = platform.deploy(&kim, &app, &channel, &sha).await?;
    assert_eq!(log["status"], "success", "{}", log["log"]);
    let host = platform.prod_host(&kim, "logs");
    let path = format!("/apps/{app}/channels/{channel}/runtime/log");

    // Generation 0 runs; its four boot lines (stdout and stderr) are kept.
    let boot_bytes = 3 * "2026-11-24T10:00:00.000000000Z boot line 1\n".len()
        + "2026-11-24T10:00:00.000000000Z warming up on stderr\n".len();
    let live = runtime_log_until(&platform, &kim, &path, json!({}), "the boot lines", |v| {
        v["log_bytes"].as_u64().unwrap_or(0) >= boot_bytes as u64
    })
    .await?;
    assert_eq!(live["container_index"], 0, "{live}");
    assert_eq!(live["running"], true);
    assert_eq!(live["source"], "live");
    assert_eq!(live["status"], "running");
    assert_eq!(live["restart_count"], 0);
    assert_eq!(live["available_indices"], json!([0]));
    assert_eq!(live["output"], "");
    assert_eq!(live["command_exit_code"], Value::Null);

    // It crashes with exit code 3: generation 0 is archived with it, generation 1 runs in the same pod.
    assert_eq!(
        platform.edge_get(&host, "/crash").await?.text(),
        "crashing\n"
    );
    let crashed = runtime_log_until(
        &platform,
        &kim,
        &path,
        json!({"container_index": 0}),
        "the crash",
        |v| v["status"] == "exited",
    )
    .await?;
    assert_eq!(crashed["exit_code"], 3, "{crashed}");
    assert_eq!(crashed["running"], false);
    assert_eq!(crashed["source"], "archived");
    assert_eq!(crashed["oom_killed"], false);
    assert!(crashed["finished_at"].is_string());
    let restarted = runtime_log_until(
        &platform,
        &kim,
        &path,
        json!({}),
        "generation 1 live",
        |v| {
            v["container_index"] == 1
                && v["running"] == true
                && v["log_bytes"].as_u64().unwrap_or(0) >= boot_bytes as u64
        },
    )
    .await?;
    assert_eq!(restarted["restart_count"], 1, "{restarted}");
    assert_eq!(restarted["source"], "live");
    assert_eq!(restarted["available_indices"], json!([0, 1]));

    // The console's runtime-log page builds its own pipeline and runs it in the same sandbox: the last lines, or
    // those containing a text in any case. A text with shell syntax in it is only searched for: run, this one
    // would print "boot".
    let console = platform.console_session(&address).await?;
    let page = |query: &str| {
        format!(
            "{}/apps/{app}/channels/{channel}/runtime-log?{query}",
            platform.console
        )
    };
    let warming = console_runtime_output(&console, &page("lines=10&filter=WARMING")).await?;
    assert!(warming.contains("warming up on stderr"), "{warming}");
    assert!(!warming.contains("boot line"), "{warming}");
    let last = console_runtime_output(&console, &page("lines=1")).await?;
    assert_eq!(last.lines().count(), 1, "{last}");
    let injected = "'; echo boot #";
    let query = form_urlencoded::Serializer::new(String::new())
        .extend_pairs([("lines", "5"), ("filter", injected)])
        .finish();
    assert_eq!(console_runtime_output(&console, &page(&query)).await?, "");

    // Pipelines on the archived generation's app.log, with the spec's userland.
    let counted = run_on_log(
        &platform,
        &kim,
        &path,
        0,
        "grep -c 'boot line' app.log; tail -n 1 app.log | cut -d' ' -f2-; \
         awk '{print $2}' app.log | sort | uniq -c | sort -rn | head -n 1 | awk '{print $1, $2}'; \
         python3 -c \"import re; print(all(re.match(r'\\d{4}-\\d\\d-\\d\\dT[0-9:.]+Z ', l) for l in open('app.log')))\"; \
         perl -ne 'print if /crash/' app.log | wc -l; node -e 'console.log(require(\"fs\").existsSync(\"app.log\"))'",
    )
    .await?;
    assert_eq!(
        counted["output"], "3\nabout to crash\n3 boot\nTrue\n1\ntrue\n",
        "{counted}"
    );
    assert_eq!(counted["command_exit_code"], 0);
    assert_eq!(counted["timed_out"], false);
    assert_eq!(counted["truncated"], false);
    assert_eq!(counted["container_index"], 0);
    assert_eq!(counted["log_bytes"], crashed["log_bytes"]);

    // No network at all: not the apiserver's Service, not the node.
    let kubernetes = kubectl(&[
        "-n",
        "default",
        "get",
        "service",
        "kubernetes",
        "-o",
        "jsonpath={.spec.clusterIP}",
    ])
    .await?;
    let offline = run_on_log(
        &platform,
        &kim,
        &path,
        1,
        &format!(
            "python3 -c \"import socket; socket.create_connection(('{kubernetes}', 443), 3)\""
        ),
    )
    .await?;
    assert_ne!(offline["command_exit_code"], 0, "{offline}");
    assert!(
        offline["output"]
            .as_str()
            .unwrap()
            .contains("Network is unreachable"),
        "{offline}"
    );

    // 30 seconds, then what was printed so far. The command runs beside the steps after it (an account may run
    // two at once), which wait on the app's pods rather than on it.
    let slow = run_on_log(
        &platform,
        &kim,
        &path,
        1,
        "echo before; sleep 60; echo after",
    );
    let rest = async {
        // 256 KiB, then cut.
        let loud = run_on_log(&platform, &kim, &path, 1, "yes 0123456789 | head -c 300000").await?;
        assert_eq!(loud["truncated"], true);
        assert_eq!(loud["output"].as_str().unwrap().len(), 256 * 1024);
        assert_eq!(loud["command_exit_code"], 0);

        // The error rows: a command too long, a generation that never was.
        let long = platform
            .call(
                "POST",
                &path,
                &kim,
                Some(json!({"command": "x".repeat(4097)})),
            )
            .await?;
        assert_eq!(long.status, 400, "{}", long.text());
        let never = platform
            .call("POST", &path, &kim, Some(json!({"container_index": 9})))
            .await?;
        assert_eq!(never.status, 404, "{}", never.text());

        // Past the plan's memory limit: the kernel kills it, and the generation says so.
        assert_eq!(platform.edge_get(&host, "/oom").await?.text(), "eating\n");
        let killed = runtime_log_until(
            &platform,
            &kim,
            &path,
            json!({"container_index": 1}),
            "the OOM kill",
            |v| v["status"] == "exited",
        )
        .await?;
        assert_eq!(killed["oom_killed"], true, "{killed}");
        assert_eq!(killed["exit_code"], 137);

        // The pod is deleted: its last generation is kept and readable; the new pod's count starts again.
        let third = runtime_log_until(
            &platform,
            &kim,
            &path,
            json!({}),
            "generation 2 live",
            |v| {
                v["container_index"] == 2
                    && v["running"] == true
                    && v["log_bytes"].as_u64().unwrap_or(0) >= boot_bytes as u64
            },
        )
        .await?;
        assert_eq!(third["restart_count"], 2, "{third}");
        kubectl(&[
            "-n",
            &kim.namespace,
            "delete",
            "pod",
            "-l",
            "slipway.dev/app=logs,app.kubernetes.io/component=run",
            "--wait=false",
        ])
        .await?;
        let fresh = runtime_log_until(
            &platform,
            &kim,
            &path,
            json!({}),
            "a generation in a new pod",
            |v| v["container_index"] == 3 && v["running"] == true,
        )
        .await?;
        assert_eq!(fresh["restart_count"], 0, "{fresh}");
        assert_ne!(fresh["container_name"], third["container_name"]);
        let deleted = runtime_log_until(
            &platform,
            &kim,
            &path,
            json!({"container_index": 2}),
            "the deleted pod's end",
            |v| v["running"] == false,
        )
        .await?;
        assert_eq!(deleted["source"], "archived", "{deleted}");
        let kept = run_on_log(&platform, &kim, &path, 2, "grep -c 'boot line' app.log").await?;
        assert_eq!(kept["output"], "3\n", "{kept}");
        anyhow::Ok(())
    };
    let (slow, rest) = tokio::join!(slow, rest);
    rest?;
    let slow = slow?;
    assert_eq!(slow["timed_out"], true, "{slow}");
    assert_eq!(slow["command_exit_code"], Value::Null);
    assert_eq!(slow["output"], "before\n");

    // The sandbox namespace admits nothing but the sandbox's own pod shape, whoever asks.
    let host_network = kubectl_run(&[
        "-n",
        "slipway-log-sandbox",
        "run",
        "not-a-sandbox",
        "--image=busybox:1.35.0",
        "--restart=Never",
        "--overrides={\"spec\": {\"hostNetwork\": true}}",
        "--",
        "true",
    ])
    .await?;
    assert!(!host_network.status.success());
    let refusal = String::from_utf8_lossy(&host_network.stderr);
    assert!(refusal.contains("log sandbox pod"), "{refusal}");
    platform.delete_app(&kim, &app).await
}
