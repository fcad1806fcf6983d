//! The edge against nginx on the same machine in the same run, both driven by `wrk` (Debian's nginx-light and
//! wrk; `hack/install-deps.sh` installs them):
//!
//! 1. static files: requests per second and p99 of `slipway edge` serving a deployed static site from its cache,
//!    and of nginx serving the same files from disk (sendfile, access logs off on both), with the ratio;
//! 2. the proxy: p50 latency of requests to a dynamic channel through the edge, against the same backend hit
//!    directly (one connection, one request at a time), and the difference: what the proxy adds;
//! 3. HTTPS: the same static file over TLS from the edge and from nginx with the same certificate, over HTTP/1.1
//!    and HTTP/2, driven by `h2load` (Debian's nghttp2-client): requests per second, p99 (from h2load's per-request
//!    log) and the ratio;
//! 4. a custom domain: the time from its verify call to the first successful HTTPS answer, its certificate issued
//!    by Pebble (`hack/pebble.sh`, which `make bench` starts) and validated over HTTP-01 on the edge.
//!
//! The site is committed and deployed through the API with the operator running (control plane and Postgres from
//! `make bench`); the dynamic channel's Service points at a backend on this machine through a hand-written
//! EndpointSlice. The load generator shares the machine's cores with the servers, so the figures compare the two
//! servers, not the machine. Environment: `SLIPWAY_BENCH_SECONDS` (per run, default 8), `SLIPWAY_BENCH_CONNECTIONS`
//! (default 64). Prints figures; it asserts nothing about time.

#[path = "../tests/support/mod.rs"]
mod support;
#[path = "common/wrk.rs"]
mod wrk;

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, PostParams};
use serde_json::json;
use wrk::{Run, env_or, free_port, report, run_tool, wait_for, wrk};

/// The Secret of the wildcard certificate the edge and nginx both serve.
const WILDCARD: &str = "bench-wildcard";

#[tokio::main]
async fn main() -> Result<()> {
    let seconds = env_or("SLIPWAY_BENCH_SECONDS", 8);
    let connections = env_or("SLIPWAY_BENCH_CONNECTIONS", 64);
    let api = support::TestApi::start().await?;
    let user = api.user("bench", "pro").await?;
    api.start_operator_with_domains(
        &user.namespace,
        support::https::domains_config(&user.namespace, true)?,
    )
    .await?;

    // A small site: a 4 KiB page, a stylesheet and a script.
    let files = site_files();
    let app = api.create_app(&user, "bench", "static").await;
    let app_id = app["id"].as_str().context("app id")?.to_owned();
    let prod = app["channels"][0]["id"]
        .as_str()
        .context("channel id")?
        .to_owned();
    let sha = api
        .commit(&user, &app_id, serde_json::to_value(&files)?)
        .await;
    let deploy = api.deploy(&user, &app_id, &prod, json!({"sha": sha})).await;
    let log = api
        .finished_deploy(&user, &app_id, &prod, &deploy, Duration::from_secs(60))
        .await?;
    ensure!(log["status"] == "success", "deploy failed: {log}");

    let dir = std::env::temp_dir().join(format!(
        "slipway-bench-edge-{}",
        uuid::Uuid::new_v4().simple()
    ));
    for (path, content) in &files {
        let file = dir.join("site").join(path);
        std::fs::create_dir_all(file.parent().context("parent")?)?;
        std::fs::write(&file, content)?;
    }
    // One certificate for `*.{app_domain}`, served by the edge (from its Secret) and by nginx (from files).
    let pki = slipway_testkit::tls::TestPki::new()?;
    let wildcard = pki.serving_cert(&[&format!("*.{}", support::APP_DOMAIN)])?;
    std::fs::write(dir.join("tls.crt"), wildcard.cert_pem())?;
    std::fs::write(dir.join("tls.key"), wildcard.key_pem())?;
    std::fs::write(dir.join("ca.pem"), pki.ca_pem())?;
    let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(json!({
        "metadata": {"name": WILDCARD}, "type": "kubernetes.io/tls",
        "stringData": {"tls.crt": wildcard.cert_pem(), "tls.key": wildcard.key_pem()}}))?;
    Api::namespaced(api.kube.clone(), &user.namespace)
        .create(&PostParams::default(), &secret)
        .await?;

    let backend_ip = host_ip()?;
    let (nginx_static, backend_port, nginx_tls) = (free_port()?, free_port()?, free_port()?);
    let mut nginx = start_nginx(&dir, nginx_static, nginx_tls, backend_ip, backend_port).await?;

    // The dynamic channel: an `app` channel whose Service has one endpoint, the backend on this machine.
    api.create_app(&user, "dyn", "app").await;
    let dyn_service = slipway_crds::names::workload_name("dyn.prod");
    service_to(
        &api.kube,
        &user.namespace,
        &dyn_service,
        backend_ip,
        backend_port,
    )
    .await?;

    // Access logs off (nginx runs without them too); no redirect, as wrk measures plain HTTP.
    let support::https::StartedEdge {
        http: edge_addr,
        https: edge_tls,
        ..
    } = support::https::start_edge(
        &api,
        &user.namespace,
        support::https::EdgeOptions {
            wildcard_secret: WILDCARD,
            access_log: false,
            redirect_https: false,
            acme_http: true,
            sign_in: None,
        },
    )
    .await?;
    let static_host = format!("bench-{}.{}", user.username, support::APP_DOMAIN);
    let dyn_host = format!("dyn-{}.{}", user.username, support::APP_DOMAIN);
    wait_for(&format!("http://{edge_addr}/index.html"), &static_host, 200).await?;
    wait_for(&format!("http://{edge_addr}/"), &dyn_host, 200).await?;

    println!(
        "\nstatic file (index.html, {} bytes), {connections} connections, {seconds}s per run",
        files["index.html"].len()
    );
    let edge = wrk(
        &format!("http://{edge_addr}/index.html"),
        &static_host,
        connections,
        seconds,
    )
    .await?;
    let native = wrk(
        &format!("http://127.0.0.1:{nginx_static}/index.html"),
        "localhost",
        connections,
        seconds,
    )
    .await?;
    compare(&edge, &native);

    println!(
        "\nproxy to a dynamic channel (one connection, sequential requests), {seconds}s per run"
    );
    let direct = wrk(
        &format!("http://{backend_ip}:{backend_port}/"),
        &dyn_host,
        1,
        seconds,
    )
    .await?;
    let proxied = wrk(&format!("http://{edge_addr}/"), &dyn_host, 1, seconds).await?;
    report("backend directly", &direct);
    report("through the edge", &proxied);
    println!(
        "  latency the proxy adds at p50: {:.3} ms",
        proxied.p50_ms - direct.p50_ms
    );

    let url = format!("https://{static_host}/index.html");
    let nginx_tls_addr = SocketAddr::from(([127, 0, 0, 1], nginx_tls));
    for (protocol, streams) in [("http/1.1", 1), ("h2", 8)] {
        println!(
            "
HTTPS static file over {protocol} ({connections} connections, {streams} request(s) in flight each), {seconds}s per run"
        );
        let edge = h2load(
            &dir,
            &url,
            edge_tls,
            protocol,
            connections,
            streams,
            seconds,
        )
        .await?;
        let native = h2load(
            &dir,
            &url,
            nginx_tls_addr,
            protocol,
            connections,
            streams,
            seconds,
        )
        .await?;
        compare(&edge, &native);
    }

    let verify_to_https = custom_domain_first_https(&api, &user, &app_id, &prod, edge_tls).await?;
    println!(
        "
custom domain: verify to the first HTTPS answer (ACME HTTP-01 from Pebble): {:.2} s",
        verify_to_https.as_secs_f64()
    );

    nginx.kill().await.ok();
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

fn site_files() -> std::collections::BTreeMap<String, String> {
    let paragraph = "<p>slipway serves this page from the files of a git commit.</p>\n";
    let page = format!(
        "<!doctype html><title>bench</title>\n{}",
        paragraph.repeat(4096 / paragraph.len())
    );
    [
        ("index.html".to_owned(), page),
        (
            "style.css".to_owned(),
            "body { margin: 0 auto; max-width: 40em; }\n".repeat(200),
        ),
        (
            "app.js".to_owned(),
            "console.log('slipway');\n".repeat(2000),
        ),
    ]
    .into()
}

/// Attaches a custom domain to the static channel, sets its records in the test DNS, verifies it, and measures
/// until the edge answers it over HTTPS with a certificate from Pebble.
async fn custom_domain_first_https(
    api: &support::TestApi,
    user: &support::User,
    app_id: &str,
    channel_id: &str,
    edge_tls: SocketAddr,
) -> Result<Duration> {
    let dns = support::https::TestDns::from_env()?;
    let roots = support::https::client_config(&support::https::acme_root().await?, &[b"h2"])?;
    let domain = format!(
        "bench-{}.example",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let path = format!("/apps/{app_id}/channels/{channel_id}/domains");
    let row = api
        .post(&path, user, json!({"domain": domain}))
        .await
        .expect(201, None);
    dns.txt(
        &format!("_svc.{domain}"),
        row["dns_records"]["txt_value"].as_str().context("token")?,
    )
    .await?;
    dns.a(&domain, &[support::EDGE_ADDRESS]).await?;
    let started = std::time::Instant::now();
    let verified = api
        .post(&format!("{path}/{domain}/verify"), user, json!({}))
        .await
        .expect(200, None);
    ensure!(verified["status"] == "verified", "{verified}");
    while started.elapsed() < Duration::from_secs(120) {
        if let Ok(res) = support::https::get(edge_tls, &domain, roots.clone(), "/").await
            && res.status == 200
        {
            return Ok(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    bail!("{domain} was not served over HTTPS within 120 s of its verification")
}

/// Runs h2load over TLS to `connect` (SNI and `:authority` from `url`) with `protocol` (ALPN) and reads its rate
/// and, from its per-request log, the p50 and p99.
async fn h2load(
    dir: &Path,
    url: &str,
    connect: SocketAddr,
    protocol: &str,
    connections: usize,
    streams: usize,
    seconds: usize,
) -> Result<Run> {
    let log = dir.join(format!("h2load-{}.log", uuid::Uuid::new_v4().simple()));
    let text = run_tool(
        "h2load",
        "hack/install-deps.sh installs nghttp2-client",
        &[
            "-c",
            &connections.to_string(),
            "-t",
            "2",
            "-m",
            &streams.to_string(),
            "-D",
            &seconds.to_string(),
            "--warm-up-time=1",
            &format!("--connect-to={connect}"),
            // `--npn-list` sets the ALPN list too (Debian's h2load 1.52 has no `--alpn-list`).
            &format!("--npn-list={protocol}"),
            &format!("--log-file={}", log.display()),
            url,
        ],
    )
    .await?;
    let rate = text
        .lines()
        .find_map(|l| l.strip_prefix("finished in "))
        .and_then(|l| l.split(", ").nth(1))
        .and_then(|r| r.strip_suffix(" req/s"))
        .with_context(|| {
            format!(
                "no rate in h2load's output:
{text}"
            )
        })?
        .parse()?;
    let status_ok = text
        .lines()
        .any(|l| l.trim().starts_with("status codes:") && l.contains(" 0 3xx, 0 4xx, 0 5xx"));
    ensure!(
        status_ok && text.contains(" 0 failed"),
        "h2load saw failures:
{text}"
    );
    let mut micros: Vec<u64> = std::fs::read_to_string(&log)?
        .lines()
        // Columns: start (µs since the epoch), status, duration (µs).
        .filter_map(|l| l.split('\t').nth(2)?.trim().parse().ok())
        .collect();
    ensure!(!micros.is_empty(), "h2load logged no request");
    micros.sort_unstable();
    let at = |q: f64| micros[((micros.len() - 1) as f64 * q) as usize] as f64 / 1000.0;
    let _ = std::fs::remove_file(&log);
    Ok(Run {
        requests_per_second: rate,
        p50_ms: at(0.50),
        p99_ms: at(0.99),
    })
}

/// A Service without selector named `name` (port 80 named `http`) and an EndpointSlice with one endpoint.
async fn service_to(
    client: &kube::Client,
    ns: &str,
    name: &str,
    ip: IpAddr,
    port: u16,
) -> Result<()> {
    let service: Service = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"ports": [{"name": "http", "port": 80, "targetPort": port}]}
    }))?;
    Api::<Service>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &service)
        .await?;
    let slice: EndpointSlice = serde_json::from_value(json!({
        // Labelled as the EndpointSlice controller labels its own: the edge trusts no other slice.
        "metadata": {"name": format!("{name}-bench"), "labels": {
            "kubernetes.io/service-name": name,
            "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
        }},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
        "endpoints": [{"addresses": [ip.to_string()], "conditions": {"ready": true}}]
    }))?;
    Api::<EndpointSlice>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &slice)
        .await?;
    Ok(())
}

/// nginx with the site on 127.0.0.1:`static_port` (and over TLS, HTTP/2 and HTTP/1.1, with the edge's certificate
/// on `tls_port`) and a minimal backend on `backend_ip`:`backend_port`.
async fn start_nginx(
    dir: &Path,
    static_port: u16,
    tls_port: u16,
    backend_ip: IpAddr,
    backend_port: u16,
) -> Result<tokio::process::Child> {
    let d = dir.display();
    std::fs::create_dir_all(dir.join("tmp"))?;
    let conf = format!(
        r#"worker_processes auto;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
daemon off;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  sendfile on; tcp_nopush on; tcp_nodelay on;
  keepalive_requests 1000000;
  types {{ text/html html; text/css css; text/javascript js; }}
  default_type application/octet-stream;
  client_body_temp_path {d}/tmp/body; proxy_temp_path {d}/tmp/proxy; fastcgi_temp_path {d}/tmp/fastcgi;
  uwsgi_temp_path {d}/tmp/uwsgi; scgi_temp_path {d}/tmp/scgi;
  server {{ listen 127.0.0.1:{static_port}; root {d}/site; }}
  server {{ listen 127.0.0.1:{tls_port} ssl http2; ssl_certificate {d}/tls.crt; ssl_certificate_key {d}/tls.key;
           ssl_session_cache shared:tls:10m; root {d}/site; }}
  server {{ listen {backend_ip}:{backend_port}; location / {{ default_type text/plain; return 200 "ok\n"; }} }}
}}
"#
    );
    std::fs::write(dir.join("nginx.conf"), conf)?;
    // Workers drop to an unprivileged user when nginx starts as root: let them read the files.
    for entry in walk(dir)? {
        let mode = if entry.is_dir() { 0o755 } else { 0o644 };
        std::fs::set_permissions(&entry, std::os::unix::fs::PermissionsExt::from_mode(mode))?;
    }
    let child = tokio::process::Command::new("nginx")
        .args(["-p", &format!("{d}"), "-c", &format!("{d}/nginx.conf")])
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .context("start nginx (hack/install-deps.sh installs nginx-light)")?;
    wait_for(
        &format!("http://127.0.0.1:{static_port}/index.html"),
        "localhost",
        200,
    )
    .await?;
    Ok(child)
}

fn walk(dir: &Path) -> Result<Vec<std::path::PathBuf>> {
    let mut out = vec![dir.to_path_buf()];
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            out.extend(walk(&path)?);
        } else {
            out.push(path);
        }
    }
    Ok(out)
}

/// Reports the edge's run beside nginx's, with the ratio of their rates.
fn compare(edge: &Run, nginx: &Run) {
    report("slipway edge", edge);
    report("nginx", nginx);
    println!(
        "  edge / nginx requests per second: {:.2}x",
        edge.requests_per_second / nginx.requests_per_second
    );
}

/// This machine's address on its default route (not loopback: EndpointSlices refuse loopback addresses). Nothing
/// is sent; connecting a UDP socket only picks the source address.
fn host_ip() -> Result<IpAddr> {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0")?;
    socket.connect("192.0.2.1:9")?;
    Ok(socket.local_addr()?.ip())
}
