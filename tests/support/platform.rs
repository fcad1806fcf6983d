//! The platform as it ships: slipway installed on the test node by its Helm chart (`hack/install.sh`, run by
//! `hack/test.sh e2e` before these tests), reached the way a user reaches it, over HTTP, git and SSH on the
//! addresses the install wrote (`SLIPWAY_PLATFORM_*`). Nothing here runs a component in the test process.

use std::path::PathBuf;
use std::time::Duration;

use super::blob::Keys;
use anyhow::{Context, Result, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

/// An app's web server (`server.py`) that answers `GET /` with the contents of its `VERSION` file, for tests that
/// deploy versions and tell them apart.
pub const VERSION_SERVER: &str = r#"import os, http.server

class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = "version={}\n".format(open("/app/VERSION").read().strip()).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

http.server.ThreadingHTTPServer(("0.0.0.0", int(os.environ["SVC_HTTP_PORT"])), Handler).serve_forever()
"#;

/// Polls `look` every half second until it gives `Some`, for at most `limit`; `what` names it in the error.
pub async fn until<T>(
    limit: Duration,
    what: &str,
    mut look: impl AsyncFnMut() -> Result<Option<T>>,
) -> Result<T> {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(found) = look().await? {
            return Ok(found);
        }
        if tokio::time::Instant::now() > deadline {
            bail!("{what}: not within {limit:?}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// How long a build, a rollout and readiness may take on a loaded 2-core machine.
pub const DEPLOY_WITHIN: Duration = Duration::from_secs(600);
/// How many times [`Installed::call`] sends a request the busy platform answered 503 with `Retry-After`.
const BUSY_TRIES: u32 = 5;

/// An HTTP answer.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

impl Answer {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    /// The body as JSON, after checking the status.
    #[track_caller]
    pub fn expect(&self, status: u16) -> Value {
        assert_eq!(
            self.status,
            status,
            "unexpected status; body: {}",
            self.text()
        );
        self.json()
    }

    /// The body as JSON when the status is `status`; otherwise an error that carries the status and the body.
    pub fn ok(&self, status: u16) -> Result<Value> {
        if self.status == status {
            Ok(self.json())
        } else {
            bail!("{} {}", self.status, self.text())
        }
    }
}

/// A user of the installed platform and their token.
#[derive(Debug, Clone)]
pub struct Account {
    pub username: String,
    pub token: String,
    pub namespace: String,
}

/// The installed platform.
pub struct Installed {
    pub api: String,
    pub edge: String,
    /// The edge's HTTPS address (`host:port`).
    pub edge_https: std::net::SocketAddr,
    /// The CA the edge's wildcard certificate chains to (PEM file).
    pub edge_ca: PathBuf,
    pub ssh_host: String,
    pub ssh_port: u16,
    pub app_domain: String,
    pub namespace: String,
    /// The namespace of the certificate Secrets (tls.certificateNamespace), apart from the release's.
    pub certificate_namespace: String,
    pub release: String,
    /// Where raw TCP forwards are reached (`forward.host`).
    pub forward_host: String,
    /// End-user sign-in's issuer, {auth_url} (`signIn.authUrl`).
    pub auth_url: String,
    /// The upstream provider people sign in at (hack/oidc.sh).
    pub oidc_issuer: String,
    /// The web console's origin (`https://<node>:<port>`), its certificate from the CA at `edge_ca`.
    pub console: String,
    /// Where the chart's mail relay delivers (hack/smtp.sh's Maildir).
    pub maildir: PathBuf,
    http: Client<HttpConnector, Full<Bytes>>,
}

/// `prefix` and six random characters: a username no other test run takes.
fn fresh_name(prefix: &str) -> String {
    format!(
        "{prefix}{}",
        &uuid::Uuid::new_v4().simple().to_string()[..6]
    )
}

fn var(name: &str) -> Result<String> {
    std::env::var(name).with_context(|| {
        format!("{name} is not set: run under `hack/test.sh e2e`, which installs the chart first")
    })
}

/// The repository's root.
pub fn root() -> PathBuf {
    slipway_testkit::package_dir()
}

/// Runs kubectl (the test cluster's, `SLIPWAY_KUBECTL` with `SLIPWAY_KUBECONFIG`) and returns stdout; fails on a
/// non-zero exit with what it printed.
pub async fn kubectl(args: &[&str]) -> Result<String> {
    let out = kubectl_run(args).await?;
    if !out.status.success() {
        bail!(
            "kubectl {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs `command`; its stdout, or an error with everything it printed.
pub async fn output(mut command: tokio::process::Command, what: &str) -> Result<String> {
    let out = command.output().await?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    anyhow::ensure!(
        out.status.success(),
        "{what} failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(stdout)
}

/// The (app id, prod channel id) of an app as the API answers it.
pub fn app_ids(app: &Value) -> Result<(String, String)> {
    Ok((
        app["id"].as_str().context("app id")?.to_owned(),
        app["channels"][0]["id"]
            .as_str()
            .context("channel id")?
            .to_owned(),
    ))
}

/// The notAfter of the certificate of `account`'s one custom domain, once the operator recorded it.
pub async fn domain_certificate(account: &Account) -> Result<Option<String>> {
    let domains: Value = serde_json::from_str(
        &kubectl(&[
            "-n",
            &account.namespace,
            "get",
            "domains.slipway.dev",
            "-o",
            "json",
        ])
        .await?,
    )?;
    Ok(domains["items"][0]["status"]["certificate"]["notAfter"]
        .as_str()
        .map(str::to_owned))
}

/// Runs `hack/SCRIPT ARGS...` (the installer, the node's controls), failing with its stderr when it fails.
pub async fn hack(script: &str, args: &[&str]) -> Result<()> {
    let out = tokio::process::Command::new(root().join("hack").join(script))
        .args(args)
        .kill_on_drop(true)
        .output()
        .await?;
    if !out.status.success() {
        bail!(
            "hack/{script} {args:?} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// Runs kubectl and returns its whole output, whatever the exit.
pub async fn kubectl_run(args: &[&str]) -> Result<std::process::Output> {
    Ok(kubectl_command(args)?.output().await?)
}

/// The test cluster's kubectl with `args`, to run as the caller needs (its input from a file, say).
pub fn kubectl_command(args: &[&str]) -> Result<tokio::process::Command> {
    let mut command = tokio::process::Command::new(var("SLIPWAY_KUBECTL")?);
    command
        .arg("--kubeconfig")
        .arg(var("SLIPWAY_KUBECONFIG")?)
        .args(args)
        .kill_on_drop(true);
    Ok(command)
}

impl Installed {
    /// The platform `hack/install.sh` installed for this run.
    pub fn from_env() -> Result<Self> {
        let ssh = var("SLIPWAY_PLATFORM_SSH")?;
        let (ssh_host, ssh_port) = ssh
            .rsplit_once(':')
            .with_context(|| format!("SLIPWAY_PLATFORM_SSH={ssh} is not host:port"))?;
        Ok(Self {
            api: var("SLIPWAY_PLATFORM_API")?,
            edge: var("SLIPWAY_PLATFORM_EDGE")?,
            edge_https: {
                let url = var("SLIPWAY_PLATFORM_EDGE_HTTPS")?;
                url.strip_prefix("https://")
                    .with_context(|| {
                        format!("SLIPWAY_PLATFORM_EDGE_HTTPS={url} is not https://host:port")
                    })?
                    .parse()?
            },
            edge_ca: var("SLIPWAY_PLATFORM_EDGE_CA")?.into(),
            ssh_host: ssh_host.to_owned(),
            ssh_port: ssh_port.parse()?,
            app_domain: var("SLIPWAY_PLATFORM_APP_DOMAIN")?,
            namespace: var("SLIPWAY_PLATFORM_NAMESPACE")?,
            certificate_namespace: var("SLIPWAY_PLATFORM_CERTIFICATE_NAMESPACE")?,
            release: var("SLIPWAY_PLATFORM_RELEASE")?,
            forward_host: var("SLIPWAY_PLATFORM_FORWARD_HOST")?,
            auth_url: var("SLIPWAY_PLATFORM_AUTH_URL")?,
            oidc_issuer: var("SLIPWAY_PLATFORM_OIDC_ISSUER")?,
            console: var("SLIPWAY_PLATFORM_CONSOLE")?,
            maildir: var("SLIPWAY_PLATFORM_MAILDIR")?.into(),
            // A connection per request, as a load balancer in front of the platform opens them: a pooled
            // connection to a replica that is shutting down can be closed by it just as a request is written,
            // which clients retry for idempotent requests and this client would count as a failure.
            http: Client::builder(TokioExecutor::new())
                .pool_max_idle_per_host(0)
                .build_http(),
        })
    }

    /// Creates a user the way the chart's notes say (`slipway admin create-user` in the api pod) on the builder
    /// plan, whose apps fit the test node.
    pub async fn account(&self, prefix: &str) -> Result<Account> {
        self.account_on(prefix, "builder").await
    }

    /// [`Installed::account`] on `plan`: `basic` apps request a quarter core, so a test can run two of them in the
    /// room of one builder app.
    pub async fn account_on(&self, prefix: &str, plan: &str) -> Result<Account> {
        self.create_user(&fresh_name(prefix), plan, None).await
    }

    /// [`Installed::account`] with a verified email address (`<username>@example.test`, returned too), which
    /// signs the person in to the console by a mailed code.
    pub async fn person(&self, prefix: &str) -> Result<(Account, String)> {
        let username = fresh_name(prefix);
        let address = format!("{username}@example.test");
        let account = self
            .create_user(&username, "builder", Some(&address))
            .await?;
        Ok((account, address))
    }

    /// The status of the container `container` of the platform's pod `pod`.
    async fn container_status(&self, pod: &str, container: &str) -> Result<Value> {
        let pod: Value = serde_json::from_str(
            &kubectl(&["-n", &self.namespace, "get", "pod", pod, "-o", "json"]).await?,
        )?;
        pod["status"]["containerStatuses"]
            .as_array()
            .and_then(|all| all.iter().find(|c| c["name"] == container))
            .cloned()
            .with_context(|| format!("pod {pod} has no container {container}"))
    }

    /// Kills the process of the container `container` of the platform's pod `pod` with SIGKILL, through the
    /// node's containerd, as a crash or the OOM killer would: no drain, no shutdown hook. The kubelet starts it
    /// again in the same pod. Returns how many times it had been restarted before, for [`Self::wait_restarted`].
    pub async fn kill_container(&self, pod: &str, container: &str) -> Result<u64> {
        let status = self.container_status(pod, container).await?;
        let restarts = status["restartCount"].as_u64().unwrap_or(0);
        let id = status["containerID"]
            .as_str()
            .and_then(|id| id.strip_prefix("containerd://"))
            .with_context(|| format!("{pod}/{container} runs no containerd container: {status}"))?;
        let out = tokio::process::Command::new(var("SLIPWAY_CTR")?)
            .args(["--address", &var("SLIPWAY_CONTAINERD_SOCKET")?])
            .args([
                "--namespace",
                "k8s.io",
                "tasks",
                "kill",
                "--signal",
                "SIGKILL",
                id,
            ])
            .output()
            .await?;
        if !out.status.success() {
            bail!(
                "ctr tasks kill {id} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(restarts)
    }

    /// Waits until the container `container` of `pod`, restarted `restarts` times before a kill, has been started
    /// again and is ready.
    pub async fn wait_restarted(&self, pod: &str, container: &str, restarts: u64) -> Result<()> {
        until(
            Duration::from_secs(180),
            &format!("{pod}/{container} started again and ready"),
            async || {
                let status = self.container_status(pod, container).await?;
                Ok((status["restartCount"].as_u64().unwrap_or(0) > restarts
                    && status["ready"] == true)
                    .then_some(()))
            },
        )
        .await
    }

    /// The Ed25519 host key the platform's SSH port answers with, as `ssh-keyscan` prints it.
    pub async fn ssh_host_key(&self) -> Result<String> {
        let mut keyscan = tokio::process::Command::new("ssh-keyscan");
        keyscan.args([
            "-t",
            "ed25519",
            "-p",
            &self.ssh_port.to_string(),
            &self.ssh_host,
        ]);
        let key = output(keyscan, "ssh-keyscan").await?;
        anyhow::ensure!(key.contains("ssh-ed25519"), "no host key: {key}");
        Ok(key.trim().to_owned())
    }

    /// A browser signed in to the console as the person with the verified `address` (by a mailed code).
    pub async fn console_session(&self, address: &str) -> Result<super::browser::Browser> {
        let ca = std::fs::read_to_string(&self.edge_ca)?;
        let addr = self
            .console
            .strip_prefix("https://")
            .with_context(|| format!("SLIPWAY_PLATFORM_CONSOLE={} is not https://", self.console))?
            .parse()?;
        let browser = super::browser::Browser::new(&ca, &[], addr)?;
        super::console::sign_in_by_code(&browser, &self.console, &self.maildir, address).await?;
        Ok(browser)
    }

    /// `slipway admin create-user` in the api pod, with `email` taken as verified.
    async fn create_user(
        &self,
        username: &str,
        plan: &str,
        email: Option<&str>,
    ) -> Result<Account> {
        let deploy = format!("deployment/{}-api", self.release);
        let mut args = vec![
            "-n",
            &self.namespace,
            "exec",
            &deploy,
            "--",
            "slipway",
            "admin",
            "create-user",
            "--username",
            username,
            "--plan",
            plan,
        ];
        if let Some(email) = email {
            args.extend(["--email", email]);
        }
        let token = kubectl(&args).await?.trim().to_owned();
        Ok(Account {
            namespace: format!("slipway-user-{username}"),
            username: username.to_owned(),
            token,
        })
    }

    /// Sends a request to `base` (an address of the platform) with an optional Host header, bearer and body.
    pub async fn request(
        &self,
        method: &str,
        url: &str,
        host: Option<&str>,
        bearer: Option<&str>,
        body: Option<Value>,
    ) -> Result<Answer> {
        let mut req = http::Request::builder().method(method).uri(url);
        if let Some(host) = host {
            req = req.header("host", host);
        }
        if let Some(token) = bearer {
            req = req.header("authorization", format!("Bearer {token}"));
        }
        let body = match body {
            Some(v) => {
                req = req.header("content-type", "application/json");
                Bytes::from(v.to_string())
            }
            None => Bytes::new(),
        };
        self.send(req.body(Full::new(body))?, Duration::from_secs(60))
            .await
    }

    /// Sends `req`, failing when the whole answer has not arrived within `limit`.
    async fn send(&self, req: http::Request<Full<Bytes>>, limit: Duration) -> Result<Answer> {
        let what = format!("{} {}", req.method(), req.uri());
        let answer = async {
            let (parts, body) = self.http.request(req).await?.into_parts();
            anyhow::Ok(Answer {
                status: parts.status.as_u16(),
                headers: parts.headers,
                body: body.collect().await?.to_bytes(),
            })
        };
        tokio::time::timeout(limit, answer)
            .await
            .with_context(|| format!("{what} timed out after {limit:?}"))?
    }

    /// A call to the REST API as `account` that may take up to `limit` (a restore of a large database answers
    /// once it is done); sent once.
    pub async fn call_within(
        &self,
        method: &str,
        path: &str,
        account: &Account,
        body: Value,
        limit: Duration,
    ) -> Result<Answer> {
        let req = http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.api))
            .header("authorization", format!("Bearer {}", account.token))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.to_string())))?;
        self.send(req, limit).await
    }

    /// GETs `path` of the REST API as `account` into the file `to`, chunk by chunk (a large download is never
    /// held in memory); the bytes written. Any answer but 200 fails with its body.
    pub async fn download(
        &self,
        path: &str,
        account: &Account,
        to: &std::path::Path,
    ) -> Result<u64> {
        use tokio::io::AsyncWriteExt;
        let req = http::Request::builder()
            .uri(format!("{}{path}", self.api))
            .header("authorization", format!("Bearer {}", account.token))
            .body(Full::new(Bytes::new()))?;
        let (parts, mut body) = self.http.request(req).await?.into_parts();
        if parts.status != 200 {
            let text = body.collect().await?.to_bytes();
            bail!(
                "GET {path} answered {}: {}",
                parts.status,
                String::from_utf8_lossy(&text)
            );
        }
        let mut file = tokio::fs::File::create(to).await?;
        let mut written = 0u64;
        while let Some(frame) = body.frame().await {
            if let Ok(data) = frame?.into_data() {
                file.write_all(&data).await?;
                written += data.len() as u64;
            }
        }
        file.flush().await?;
        Ok(written)
    }

    /// A call to the REST API as `account`. A 503 with `Retry-After` (the platform is busy) is tried again after
    /// the wait it names, a few times, as the spec tells clients to; any other answer is the caller's to judge.
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        account: &Account,
        body: Option<Value>,
    ) -> Result<Answer> {
        let url = format!("{}{path}", self.api);
        let mut tries = 1;
        loop {
            let answer = self
                .request(method, &url, None, Some(&account.token), body.clone())
                .await?;
            let retry_after = (answer.status == 503)
                .then(|| answer.headers.get(http::header::RETRY_AFTER))
                .flatten()
                .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
            match retry_after {
                Some(secs) if tries < BUSY_TRIES => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_secs(secs)).await;
                }
                _ => return Ok(answer),
            }
        }
    }

    /// GET `path` of `host` through the edge.
    pub async fn edge_get(&self, host: &str, path: &str) -> Result<Answer> {
        self.request(
            "GET",
            &format!("{}{path}", self.edge),
            Some(host),
            None,
            None,
        )
        .await
    }

    /// GET `path` of `host` through the edge's HTTPS port, with `host` as SNI, offering `alpn` and trusting only
    /// the CA of the platform's wildcard certificate.
    pub async fn edge_get_https(
        &self,
        host: &str,
        path: &str,
        alpn: &[&[u8]],
    ) -> Result<super::https::Fetched> {
        let roots = std::fs::read_to_string(&self.edge_ca)
            .with_context(|| format!("read {}", self.edge_ca.display()))?;
        let config = super::https::client_config(&roots, alpn)?;
        super::https::get(self.edge_https, host, config, path).await
    }

    /// The hostname of the prod channel of `account`'s app `app`.
    pub fn prod_host(&self, account: &Account, app: &str) -> String {
        format!("{app}-{}.{}", account.username, self.app_domain)
    }

    /// Commits [`VERSION_SERVER`] (`v1`) as `account`'s app `name` in `ws` and pushes it over HTTP; the commit.
    pub async fn push_version_server(
        &self,
        account: &Account,
        ws: &super::git::Workspace,
        name: &str,
    ) -> Result<String> {
        ws.git(".", &["init", "-q", "-b", "master", name]).await?;
        ws.write(&format!("{name}/server.py"), VERSION_SERVER)?;
        ws.write(&format!("{name}/VERSION"), "v1\n")?;
        ws.write(&format!("{name}/launch.sh"), "exec python3 server.py\n")?;
        let remote = super::git::http_remote(&self.api, &account.token, &account.username, name);
        ws.commit_and_push(name, "v1", &remote).await
    }

    /// Creates an app; returns (app id, prod channel id).
    pub async fn create_app(
        &self,
        account: &Account,
        name: &str,
        template: &str,
    ) -> Result<(String, String)> {
        let app = self
            .call(
                "POST",
                "/apps",
                account,
                Some(json!({"name": name, "template": template})),
            )
            .await?
            .expect(200);
        app_ids(&app)
    }

    /// Adds custom domain `domain` to the channel, gives it its TXT record and an A record of the edge's address at
    /// the test DNS server `dns`, and verifies it; answers the verify call's body.
    pub async fn add_verified_domain(
        &self,
        account: &Account,
        app: &str,
        channel: &str,
        domain: &str,
        dns: &super::https::TestDns,
    ) -> Result<Value> {
        let path = format!("/apps/{app}/channels/{channel}/domains");
        let row = self
            .call("POST", &path, account, Some(json!({"domain": domain})))
            .await?
            .expect(201);
        dns.txt(
            &format!("_svc.{domain}"),
            row["dns_records"]["txt_value"]
                .as_str()
                .context("txt_value")?,
        )
        .await?;
        let node_ip = self
            .edge
            .trim_start_matches("http://")
            .rsplit_once(':')
            .context("the edge's address")?
            .0
            .to_owned();
        dns.a(domain, &[&node_ip]).await?;
        Ok(self
            .call(
                "POST",
                &format!("{path}/{domain}/verify"),
                account,
                Some(json!({})),
            )
            .await?
            .expect(200))
    }

    /// Deploys `sha` on the channel and waits until the deploy finished; returns (deploy id, its last log reply).
    pub async fn deploy(
        &self,
        account: &Account,
        app: &str,
        channel: &str,
        sha: &str,
    ) -> Result<(String, Value)> {
        let id = self.queue_deploy(account, app, channel, sha).await?;
        let log = self.finished(account, app, channel, &id).await?;
        Ok((id, log))
    }

    /// Queues a deploy of `sha`; returns its id, or an error that carries the answer.
    pub async fn queue_deploy(
        &self,
        account: &Account,
        app: &str,
        channel: &str,
        sha: &str,
    ) -> Result<String> {
        let queued = self
            .call(
                "POST",
                &format!("/apps/{app}/channels/{channel}/deploy"),
                account,
                Some(json!({"sha": sha})),
            )
            .await?
            .ok(200)
            .context("queueing a deploy")?;
        Ok(queued["deploy_id"]
            .as_str()
            .context("deploy id")?
            .to_owned())
    }

    /// Waits until the deploy `id` is `success` or `failed`; returns the log reply (with the whole log).
    pub async fn finished(
        &self,
        account: &Account,
        app: &str,
        channel: &str,
        id: &str,
    ) -> Result<Value> {
        let deadline = tokio::time::Instant::now() + DEPLOY_WITHIN;
        loop {
            let log = self
                .call(
                    "GET",
                    &format!("/apps/{app}/channels/{channel}/logs?deploy={id}&max_bytes=262144"),
                    account,
                    None,
                )
                .await;
            // The API restarts during an upgrade (its pod is recreated, and the node's proxy learns of the new one a
            // moment after it is ready): a refused connection, or an answer that is not the log, is asked again.
            let seen = match log {
                Ok(log) if log.status == 200 => {
                    let body = log.json();
                    if matches!(body["status"].as_str(), Some("success" | "failed")) {
                        return Ok(body);
                    }
                    log.text()
                }
                Ok(log) => log.text(),
                Err(e) => format!("{e:#}"),
            };
            if tokio::time::Instant::now() > deadline {
                bail!("deploy {id} did not finish: {seen}");
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Polls `host` on the edge until GET `path` answers 200 with a body containing `wanted`.
    pub async fn wait_for_page(&self, host: &str, path: &str, wanted: &str) -> Result<String> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        loop {
            let answer = self.edge_get(host, path).await?;
            if answer.status == 200 && answer.text().contains(wanted) {
                return Ok(answer.text());
            }
            if tokio::time::Instant::now() > deadline {
                bail!(
                    "{host}{path} answers {} {:?}, not {wanted:?}",
                    answer.status,
                    answer.text()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Deletes several apps at once, each as [`Self::delete_app`] does: their pods' drains run side by side.
    pub async fn delete_apps(&self, apps: &[(&Account, &str)]) -> Result<()> {
        futures::future::try_join_all(
            apps.iter()
                .map(|(account, app)| self.delete_app(account, app)),
        )
        .await?;
        Ok(())
    }

    /// Deletes the app through the API and waits until the operator has removed what it ran for it (its channels,
    /// their Deployments and pods), so a missing verb in the operator's tenant grants fails here, and nothing of it
    /// outlives the release.
    pub async fn delete_app(&self, account: &Account, app: &str) -> Result<()> {
        let name = self
            .call("GET", &format!("/apps/{app}"), account, None)
            .await?
            .expect(200)["name"]
            .as_str()
            .context("app name")?
            .to_owned();
        self.call("DELETE", &format!("/apps/{app}"), account, None)
            .await?
            .expect(204);
        // Polled through one client: a kubectl per look costs a process start and a TLS handshake, and a pod's
        // drain lasts tens of looks.
        let kube = slipway_testkit::client().await?;
        let ns = account.namespace.as_str();
        let channels: kube::Api<slipway_crds::Channel> = kube::Api::namespaced(kube.clone(), ns);
        let deployments: kube::Api<k8s_openapi::api::apps::v1::Deployment> =
            kube::Api::namespaced(kube.clone(), ns);
        let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::namespaced(kube, ns);
        let of_app = kube::api::ListParams::default()
            .labels(&format!("{}={name}", slipway_crds::labels::APP));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        loop {
            use kube::ResourceExt;
            let channels: Vec<String> = channels
                .list(&Default::default())
                .await?
                .into_iter()
                .filter(|c| c.spec.app == name)
                .map(|c| c.name_any())
                .collect();
            let running: Vec<String> = deployments
                .list(&of_app)
                .await?
                .into_iter()
                .map(|d| format!("deployment/{}", d.name_any()))
                .chain(
                    pods.list(&of_app)
                        .await?
                        .into_iter()
                        .map(|p| format!("pod/{}", p.name_any())),
                )
                .collect();
            if channels.is_empty() && running.is_empty() {
                return Ok(());
            }
            if tokio::time::Instant::now() > deadline {
                bail!(
                    "two minutes after deleting app {name}, still there in {ns}: channels {channels:?}, {running:?}"
                );
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

/// A token of the ServiceAccount `namespace/name` for `audience`, minted by the apiserver (TokenRequest).
pub async fn service_account_token(namespace: &str, name: &str, audience: &str) -> Result<String> {
    Ok(kubectl(&[
        "-n",
        namespace,
        "create",
        "token",
        name,
        "--audience",
        audience,
        "--duration",
        "10m",
    ])
    .await?
    .trim()
    .to_owned())
}

/// A channel's bucket reached from outside as a tenant's S3 client reaches it: with the credentials route's key
/// pair, through the edge's public endpoint `<label>.s3.<app domain>` (opened with the app's toggle).
pub struct PublicBucket {
    /// The endpoint over plain HTTP (`http://<host>:<edge port>`).
    pub endpoint: String,
    /// The endpoint's HTTPS URL (`https://<host>:<edge HTTPS port>`), with the platform's wildcard certificate.
    pub https_endpoint: String,
    /// The endpoint's host name, which exists only in the test: clients resolve it to `edge_ip`.
    pub host: String,
    /// The edge's address.
    pub edge_ip: String,
    /// The channel's key pair and bucket.
    pub keys: Keys,
}

impl PublicBucket {
    /// Turns the app's external object-store access on and waits until the endpoint answers.
    pub async fn open(
        platform: &Installed,
        account: &Account,
        app: &str,
        channel: &str,
    ) -> Result<Self> {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(120);
        // A new channel's bucket is made by the operator after the app: until then the route answers 409
        // blob_not_ready, as the spec has it.
        let credentials = loop {
            let answer = platform
                .call(
                    "POST",
                    &format!("/apps/{app}/channels/{channel}/blob/credentials"),
                    account,
                    Some(json!({})),
                )
                .await?;
            if answer.status != 409
                || answer.json()["error"]["code"] != "blob_not_ready"
                || tokio::time::Instant::now() >= deadline
            {
                break answer.expect(200);
            }
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        };
        let keys = Keys::from_credentials(&credentials);
        let host = format!("{}.s3.{}", keys.bucket, platform.app_domain);
        let edge = platform
            .edge
            .strip_prefix("http://")
            .unwrap_or(&platform.edge);
        let (edge_ip, edge_port) = edge.rsplit_once(':').unwrap();
        let bucket = Self {
            endpoint: format!("http://{host}:{edge_port}"),
            https_endpoint: format!("https://{host}:{}", platform.edge_https.port()),
            host,
            edge_ip: edge_ip.to_owned(),
            keys,
        };
        platform
            .call(
                "PATCH",
                &format!("/apps/{app}"),
                account,
                Some(json!({"external_blob_access_enabled": true})),
            )
            .await?
            .expect(200);
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let probe = bucket.run(&["probe"]).await?;
            if probe == "ok" {
                return Ok(bucket);
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "through the edge: {probe}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
    }

    /// rclone with `args` against the endpoint over HTTPS, as the remote `channel:` with the channel's key pair,
    /// trusting only `ca`. rclone resolves names itself: the endpoint's name goes into /etc/hosts of a mount
    /// namespace of its own, written to `hosts` first.
    pub fn rclone(
        &self,
        ca: &str,
        hosts: &std::path::Path,
        args: &[&str],
    ) -> tokio::process::Command {
        let mut command = tokio::process::Command::new("unshare");
        command
            .args(["--mount", "sh", "-c", r#"printf '%s %s\n' "$EDGE" "$HOST" >"$HOSTS" && mount --bind "$HOSTS" /etc/hosts && exec rclone "$@""#, "rclone"])
            .args(["--ca-cert", ca, "--s3-chunk-size", "5M", "--s3-upload-cutoff", "5M"])
            .args(args)
            .env("EDGE", &self.edge_ip)
            .env("HOST", &self.host)
            .env("HOSTS", hosts)
            // rclone's S3 SDK cannot take a CA bundle from the environment beside `--ca-cert` (it fails with
            // "unsupported transport"); the platform's CA comes from `--ca-cert` alone.
            .env_remove("AWS_CA_BUNDLE")
            .env("RCLONE_CONFIG", "/dev/null")
            .env("RCLONE_CONFIG_CHANNEL_TYPE", "s3")
            .env("RCLONE_CONFIG_CHANNEL_PROVIDER", "Other")
            .env("RCLONE_CONFIG_CHANNEL_ENDPOINT", &self.https_endpoint)
            .env("RCLONE_CONFIG_CHANNEL_ACCESS_KEY_ID", &self.keys.access_key_id)
            .env("RCLONE_CONFIG_CHANNEL_SECRET_ACCESS_KEY", &self.keys.secret_access_key)
            .env("RCLONE_CONFIG_CHANNEL_REGION", "us-east-1")
            .env("RCLONE_CONFIG_CHANNEL_FORCE_PATH_STYLE", "true")
            .kill_on_drop(true);
        command
    }

    /// `tests/s3/boto3_client.py ARGS` against the bucket; its one line.
    pub async fn run(&self, args: &[&str]) -> Result<String> {
        super::blob::boto3(
            args,
            &self.endpoint,
            Some((&self.host, &self.edge_ip)),
            &self.keys,
        )
        .await
    }
}
