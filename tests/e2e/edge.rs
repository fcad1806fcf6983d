//! End to end for the edge on the local node: the REST API, the operator (which writes each channel's Ingress)
//! and `slipway edge` run in this process against the real apiserver, the real node's pods and the real git
//! store. Every site and app is committed and deployed through the API: static sites are served from the edge's
//! cache; `app` channels (a Python echo server, built by BuildKit on the `python:3.13-slim` stand-in) are proxied
//! to their pod on the node.

use crate::support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};
use slipway_crds::Channel;
use slipway_edge::Edge;
use support::answer::Answer;
use support::{APP_DOMAIN, TestApi, User};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const WAIT: Duration = Duration::from_secs(90);
/// A build, a rollout and readiness; generous for a loaded 2-core machine.
const DEPLOY_WAIT: Duration = Duration::from_secs(600);

/// The API, the operator scoped to one user's namespace, and an edge serving that namespace on loopback.
struct Platform {
    api: TestApi,
    user: User,
    edge: SocketAddr,
    http: Client<HttpConnector, Full<Bytes>>,
    registry: prometheus_client::registry::Registry,
}

impl Platform {
    async fn start(prefix: &str) -> Result<Self> {
        let api = TestApi::start().await?;
        // The builder plan's CPU request (half a core) fits the test node beside other tests' pods.
        let user = api.user(prefix, "builder").await?;
        ensure_ingress_class(&api.kube).await?;
        api.start_operator(&user.namespace).await?;
        let config = api.edge_config(&user.namespace, true).await?;
        let mut registry = prometheus_client::registry::Registry::default();
        let (edge, _tasks) = Edge::start(api.kube.clone(), config, &mut registry).await?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        tokio::spawn(slipway_edge::server::serve(
            edge,
            listener,
            slipway_edge::server::Scheme::Http,
            std::future::pending(),
        ));
        let http = Client::builder(TokioExecutor::new()).build_http();
        Ok(Self {
            api,
            user,
            edge: addr,
            http,
            registry,
        })
    }

    /// The hostname of `channel` of the user's app `app`.
    fn hostname(&self, app: &str, channel: &str) -> String {
        let label = if channel == "prod" {
            format!("{app}-{}", self.user.username)
        } else {
            format!("{channel}-{app}-{}", self.user.username)
        };
        format!("{label}.{APP_DOMAIN}")
    }

    /// Sends a request to the edge for `host`; `target` is sent exactly as given.
    async fn request(
        &self,
        method: &str,
        host: &str,
        target: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Result<Answer> {
        let mut req = http::Request::builder()
            .method(method)
            .uri(format!("http://{}{target}", self.edge))
            .header("host", host);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req.body(Full::new(Bytes::from(body.to_owned())))?;
        let res = self.http.request(req).await?;
        let (parts, body) = res.into_parts();
        Ok(Answer {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body: body.collect().await?.to_bytes(),
        })
    }

    async fn get(&self, host: &str, target: &str, headers: &[(&str, &str)]) -> Result<Answer> {
        self.request("GET", host, target, headers, "").await
    }

    /// Polls `host` until `done` holds for its answer to `target`.
    async fn wait_for(
        &self,
        host: &str,
        target: &str,
        done: impl Fn(&Answer) -> bool,
    ) -> Result<Answer> {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let answer = self.get(host, target, &[]).await?;
            if done(&answer) {
                return Ok(answer);
            }
            if tokio::time::Instant::now() > deadline {
                bail!(
                    "{host}{target} still answers {} {:?}",
                    answer.status,
                    answer.text().chars().take(200).collect::<String>()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Creates an app through the API; returns its id and its prod channel's id.
    async fn app(&self, name: &str, template: &str) -> Result<(String, String)> {
        let app = self.api.create_app(&self.user, name, template).await;
        let id = app["id"].as_str().context("app id")?;
        let prod = app["channels"][0]["id"]
            .as_str()
            .context("prod channel id")?;
        Ok((id.to_owned(), prod.to_owned()))
    }

    /// Commits whole files on master through the changeset route; returns the commit.
    async fn commit(&self, app_id: &str, files: Value) -> String {
        self.api.commit(&self.user, app_id, files).await
    }

    /// Deploys `sha` through the deploy route and waits until the deploy succeeded.
    async fn deploy(&self, app_id: &str, channel_id: &str, sha: &str) -> Result<()> {
        let deploy = self
            .api
            .deploy(&self.user, app_id, channel_id, json!({"sha": sha}))
            .await;
        let log = self
            .api
            .finished_deploy(&self.user, app_id, channel_id, &deploy, DEPLOY_WAIT)
            .await?;
        ensure!(log["status"] == "success", "deploy failed: {log}");
        Ok(())
    }

    fn metrics(&self) -> Result<String> {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)?;
        Ok(text)
    }

    /// The edge's count of answers of status `class` (`4xx`) to requests for a kind of host (`channel`,
    /// `unknown`).
    fn answers(&self, host: &str, class: &str) -> Result<u64> {
        let series = format!(r#"slipway_edge_requests_total{{host="{host}",class="{class}"}} "#);
        let metrics = self.metrics()?;
        Ok(metrics
            .lines()
            .find_map(|line| line.strip_prefix(series.as_str()))
            .map(str::parse)
            .transpose()?
            .unwrap_or(0))
    }
}

/// IngressClass `slipway`, as the chart installs it.
async fn ensure_ingress_class(client: &kube::Client) -> Result<()> {
    let class: IngressClass = serde_json::from_value(json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
        "metadata": {"name": "slipway"},
        "spec": {"controller": "slipway.dev/edge"}
    }))?;
    Api::<IngressClass>::all(client.clone())
        .patch(
            "slipway",
            &PatchParams::apply("slipway-tests").force(),
            &Patch::Apply(&class),
        )
        .await?;
    Ok(())
}

fn site_files(version: &str, big: &str) -> Value {
    json!({
        "index.html": format!("<!doctype html><title>{version}</title><p>home {version}</p>"),
        "docs/index.html": format!("<p>docs {version}</p>"),
        "big.txt": big,
        "style.css": format!("/* {version} */ body {{ color: black; }} ").repeat(40),
    })
}

#[tokio::test]
async fn a_static_site_deploys_and_goes_live_with_the_static_rules() -> Result<()> {
    let p = Platform::start("edgestatic").await?;
    let (app_id, prod) = p.app("site", "static").await?;
    let host = p.hostname("site", "prod");

    // The operator gives the channel an Ingress the edge serves, naming the Channel as a resource backend.
    let ingresses: Api<Ingress> = Api::namespaced(p.api.kube.clone(), &p.user.namespace);
    slipway_testkit::wait_until(WAIT, || {
        let ingresses = ingresses.clone();
        async move { Ok(ingresses.get_opt("site.prod").await?.is_some()) }
    })
    .await
    .context("the operator wrote no Ingress")?;
    let ingress = serde_json::to_value(ingresses.get("site.prod").await?)?;
    assert_eq!(ingress["spec"]["ingressClassName"], "slipway");
    assert_eq!(ingress["spec"]["rules"][0]["host"], host.as_str());
    assert_eq!(
        ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"],
        json!({"resource": {"apiGroup": "slipway.dev", "kind": "Channel", "name": "site.prod"}})
    );

    // Before a deploy the host is known but has nothing to serve. Until the edge has read the Ingress, the host is
    // unknown and answers the unknown-host 404 instead, so the wait is for this page.
    let before = p
        .wait_for(&host, "/", |a| {
            a.status == 404 && a.text().contains("Nothing has been deployed")
        })
        .await?;
    assert_eq!(before.header("content-type"), "text/html; charset=utf-8");

    let sha = p.commit(&app_id, site_files("v1", "plain text")).await;
    p.deploy(&app_id, &prod, &sha).await?;
    let home = p.wait_for(&host, "/", |a| a.status == 200).await?;
    assert!(home.text().contains("home v1"));
    assert_eq!(home.header("content-type"), "text/html; charset=utf-8");

    // Directories answer with their index; without the slash they redirect to it.
    assert_eq!(p.get(&host, "/docs/", &[]).await?.text(), "<p>docs v1</p>");
    let moved = p.get(&host, "/docs?x=1", &[]).await?;
    assert_eq!(
        (moved.status, moved.header("location")),
        (301, "/docs/?x=1")
    );
    assert_eq!(p.get(&host, "/missing.html", &[]).await?.status, 404);

    // Entity tags, ranges and compression.
    let css = p.get(&host, "/style.css", &[]).await?;
    assert_eq!(css.header("content-type"), "text/css; charset=utf-8");
    let etag = css.header("etag").to_owned();
    let again = p
        .get(&host, "/style.css", &[("if-none-match", &etag)])
        .await?;
    assert_eq!((again.status, again.body.len()), (304, 0));
    let part = p
        .get(&host, "/style.css", &[("range", "bytes=0-9")])
        .await?;
    assert_eq!(part.status, 206);
    assert_eq!(&part.body[..], &css.body[..10]);
    assert_eq!(
        part.header("content-range"),
        format!("bytes 0-9/{}", css.body.len())
    );
    let br = p
        .get(&host, "/style.css", &[("accept-encoding", "gzip, br")])
        .await?;
    assert_eq!(br.header("content-encoding"), "br");
    assert!(br.body.len() < css.body.len());
    let gz = p
        .get(&host, "/style.css", &[("accept-encoding", "gzip")])
        .await?;
    assert_eq!(gz.header("content-encoding"), "gzip");

    // The platform's routes on every channel host, and hosts nobody serves.
    let auth = p.get(&host, "/svc-auth/whoami", &[]).await?;
    assert_eq!(auth.status, 404);
    assert_eq!(auth.json()["error"]["code"], "not_found", "{}", auth.text());
    assert!(
        auth.json()["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty())
    );
    let unknown_before = p.answers("unknown", "4xx")?;
    let unknown = p.get(&format!("nobody.{APP_DOMAIN}"), "/", &[]).await?;
    assert_eq!(unknown.status, 404);
    assert_eq!(unknown.header("content-type"), "text/html; charset=utf-8");
    assert_eq!(p.answers("unknown", "4xx")?, unknown_before + 1);

    // Counted by kind of host, never by host: the home page, /docs/, the stylesheet, its range and its two
    // encodings answered 2xx.
    assert!(p.answers("channel", "2xx")? >= 6, "{}", p.metrics()?);
    assert!(
        !p.metrics()?.contains(host.as_str()),
        "no series names a host"
    );
    Ok(())
}

#[tokio::test]
async fn a_second_deploy_switches_atomically_under_concurrent_readers() -> Result<()> {
    let p = Arc::new(Platform::start("edgeatomic").await?);
    let (app_id, prod) = p.app("swap", "static").await?;
    let host = p.hostname("swap", "prod");
    // Large files make a torn read (part old, part new) visible if the switch were not atomic.
    let old = "old-tree ".repeat(40_000);
    let new = "NEW-TREE ".repeat(40_000);
    let first = p.commit(&app_id, site_files("v1", &old)).await;
    p.deploy(&app_id, &prod, &first).await?;
    p.wait_for(&host, "/big.txt", |a| a.status == 200).await?;

    let switched = Arc::new(AtomicBool::new(false));
    let mut readers = Vec::new();
    for _ in 0..6 {
        let (p, host, old, new, switched) = (
            p.clone(),
            host.clone(),
            old.clone(),
            new.clone(),
            switched.clone(),
        );
        readers.push(tokio::spawn(async move {
            let mut seen = Vec::new();
            let mut after_switch = None;
            loop {
                let big = p.get(&host, "/big.txt", &[]).await?;
                ensure!(big.status == 200, "a reader got {}", big.status);
                let version = if big.body == old.as_bytes() {
                    "old"
                } else if big.body == new.as_bytes() {
                    "new"
                } else {
                    bail!("a reader got a mixed file of {} bytes", big.body.len());
                };
                seen.push(version);
                if after_switch.is_none() && switched.load(Ordering::Acquire) {
                    after_switch = Some(seen.len());
                }
                // Keep reading for a while after the switch was seen from outside.
                if after_switch.is_some_and(|at| seen.len() >= at + 20) {
                    return Ok::<_, anyhow::Error>(seen);
                }
            }
        }));
    }
    let second = p.commit(&app_id, site_files("v2", &new)).await;
    p.deploy(&app_id, &prod, &second).await?;
    p.wait_for(&host, "/big.txt", |a| a.body == new.as_bytes())
        .await?;
    switched.store(true, Ordering::Release);

    for reader in readers {
        let seen = reader.await??;
        let first_new = seen
            .iter()
            .position(|v| *v == "new")
            .context("a reader never saw the new tree")?;
        ensure!(
            seen[first_new..].iter().all(|v| *v == "new"),
            "once a reader saw the new tree it never saw the old one: {seen:?}"
        );
    }
    assert!(p.get(&host, "/", &[]).await?.text().contains("home v2"));
    Ok(())
}

/// A Python echo server on `$SVC_HTTP_PORT`: answers every request with its method, raw path, headers and body as JSON, and
/// echoes WebSocket frames.
const ECHO_SERVER: &str = r#"
import base64, hashlib, http.server, json, os, struct

class Echo(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def answer(self):
        if self.headers.get("Upgrade", "").lower() == "websocket":
            return self.websocket()
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode() if length else ""
        out = json.dumps({"method": self.command, "path": self.path, "body": body,
                          "headers": [[k.lower(), v] for k, v in self.headers.items()]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = answer

    def websocket(self):
        key = self.headers["Sec-WebSocket-Key"] + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", base64.b64encode(hashlib.sha1(key.encode()).digest()).decode())
        self.end_headers()
        self.wfile.flush()
        while True:
            head = self.rfile.read(2)
            if len(head) < 2:
                return
            opcode, n = head[0] & 0x0F, head[1] & 0x7F
            if n == 126:
                n = struct.unpack(">H", self.rfile.read(2))[0]
            mask = self.rfile.read(4) if head[1] & 0x80 else b"\0\0\0\0"
            data = bytes(b ^ mask[i % 4] for i, b in enumerate(self.rfile.read(n)))
            if opcode == 8:
                return
            size = bytes([n]) if n < 126 else bytes([126]) + struct.pack(">H", n)
            self.wfile.write(bytes([0x80 | opcode]) + size + data)
            self.wfile.flush()

http.server.ThreadingHTTPServer(("0.0.0.0", int(os.environ["SVC_HTTP_PORT"])), Echo).serve_forever()
"#;

/// The files of an `app` channel running `server` (Python) with `launch.sh`.
fn python_app(server: &str, launch: &str) -> Value {
    json!({"server.py": server, "launch.sh": launch})
}

fn echoed_header<'a>(echo: &'a Value, name: &str) -> Vec<&'a str> {
    echo["headers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|pair| pair[0] == name)
        .filter_map(|pair| pair[1].as_str())
        .collect()
}

#[tokio::test]
async fn a_dynamic_channel_is_proxied_unchanged_without_platform_headers() -> Result<()> {
    let p = Platform::start("edgeproxy").await?;
    let (app_id, prod) = p.app("echo", "app").await?;
    let host = p.hostname("echo", "prod");
    // Before its first deploy the channel has no endpoint to send to.
    p.wait_for(&host, "/", |a| a.status == 503).await?;
    let sha = p
        .commit(&app_id, python_app(ECHO_SERVER, "exec python3 server.py\n"))
        .await;
    p.deploy(&app_id, &prod, &sha).await?;
    p.wait_for(&host, "/", |a| a.status == 200).await?;

    // Path and query exactly as sent, whatever they contain; the body and method pass through.
    let target = "/a/../b/%2F%2e%2E/c%20d;p=1?q=1&q=2&empty=&%41=%42&plus=a+b";
    let res = p
        .request(
            "POST",
            &host,
            target,
            &[
                ("x-svc-user", "mallory"),
                ("X-Svc-Email", "mallory@example.test"),
                ("x-forwarded-for", "198.51.100.7"),
                ("x-request-id", "forged"),
                ("x-custom", "kept"),
                ("content-type", "text/plain"),
            ],
            "the body",
        )
        .await?;
    assert_eq!(res.status, 200, "{}", res.text());
    let echo = res.json();
    // The request's id is the edge's own, the same in what the app received and in the answer.
    let id = echoed_header(&echo, "x-request-id");
    assert_eq!(id.len(), 1, "{id:?}");
    assert!(
        id[0].len() == 16 && id[0].chars().all(|c| c.is_ascii_hexdigit()),
        "{id:?}"
    );
    assert_eq!(res.headers["x-request-id"], id[0]);
    assert_eq!(echo["path"], target);
    assert_eq!(
        (echo["method"].as_str(), echo["body"].as_str()),
        (Some("POST"), Some("the body"))
    );
    let names: Vec<&str> = echo["headers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|pair| pair[0].as_str())
        .collect();
    assert!(
        names.iter().all(|n| !n.starts_with("x-svc-")),
        "an X-Svc-* header reached the app: {names:?}"
    );
    assert_eq!(echoed_header(&echo, "x-custom"), ["kept"]);
    assert_eq!(echoed_header(&echo, "host"), [host.as_str()]);
    assert_eq!(echoed_header(&echo, "x-forwarded-for"), ["127.0.0.1"]);
    assert_eq!(echoed_header(&echo, "x-forwarded-proto"), ["http"]);
    assert_eq!(echoed_header(&echo, "x-forwarded-host"), [host.as_str()]);

    // The platform keeps /svc-auth/* on the channel's host; the app never sees it.
    let auth = p.get(&host, "/svc-auth/login?return_to=/", &[]).await?;
    assert_eq!(auth.status, 404);
    assert_eq!(auth.json()["error"]["code"], "not_found");

    websocket_echo(p.edge, &host).await?;
    Ok(())
}

/// Opens a WebSocket through the edge and checks that frames come back.
async fn websocket_echo(edge: SocketAddr, host: &str) -> Result<()> {
    let mut stream = tokio::net::TcpStream::connect(edge).await?;
    let handshake = format!(
        "GET /ws?room=1 HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nX-Svc-User: mallory\r\n\r\n"
    );
    stream.write_all(handshake.as_bytes()).await?;
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        ensure!(
            stream.read(&mut byte).await? == 1,
            "the edge closed during the handshake: {}",
            String::from_utf8_lossy(&head)
        );
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
    ensure!(head.starts_with("http/1.1 101"), "no upgrade: {head}");
    ensure!(
        head.contains("sec-websocket-accept: s3pplmbitxaq9kygzzhzrbk+xoo="),
        "{head}"
    );
    for message in ["hello edge", "and again"] {
        let mask = [0x12u8, 0x34, 0x56, 0x78];
        let mut frame = vec![0x81, 0x80 | u8::try_from(message.len())?];
        frame.extend_from_slice(&mask);
        frame.extend(message.bytes().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        stream.write_all(&frame).await?;
        let mut reply = [0u8; 2];
        tokio::time::timeout(WAIT, stream.read_exact(&mut reply)).await??;
        ensure!(reply[0] == 0x81, "a text frame back, got {reply:?}");
        let mut data = vec![0u8; usize::from(reply[1] & 0x7F)];
        stream.read_exact(&mut data).await?;
        assert_eq!(String::from_utf8(data)?, message);
    }
    Ok(())
}

#[tokio::test]
async fn a_channel_ready_on_the_file_answers_502() -> Result<()> {
    let p = Platform::start("edgefile").await?;
    let (app_id, prod) = p.app("worker", "app").await?;
    let host = p.hostname("worker", "prod");
    let worker = python_app("", "touch \"$SVC_READY_FILE\"\nexec sleep 100000\n");
    let sha = p.commit(&app_id, worker).await;
    p.deploy(&app_id, &prod, &sha).await?;
    let channels: Api<Channel> = Api::namespaced(p.api.kube.clone(), &p.user.namespace);
    let status = channels
        .get("worker.prod")
        .await?
        .status
        .unwrap_or_default();
    assert_eq!(status.ready_by, Some(slipway_crds::ReadyBy::File));
    let res = p.wait_for(&host, "/", |a| a.status == 502).await?;
    assert_eq!(res.header("content-type"), "text/html; charset=utf-8");
    assert_eq!(p.get(&host, "/any/path?x=1", &[]).await?.status, 502);
    // The platform's own routes stay on the host.
    assert_eq!(p.get(&host, "/svc-auth/whoami", &[]).await?.status, 404);
    Ok(())
}
