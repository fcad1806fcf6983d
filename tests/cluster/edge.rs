//! The edge against a real apiserver, API server and operator (no node).
//!
//! Routing trust: the edge serves what slipway's operator wrote for a Channel and nothing else that anyone with
//! Ingress or EndpointSlice rights writes in class `slipway`. The channel's "pod" is an HTTP server of the test's
//! own on this machine's address, named by the channel's Service and an EndpointSlice labelled as the EndpointSlice
//! controller's. A second server ("loot") stands for an address an attacker wants the edge to reach; the test
//! counts what reaches it. The same setup shows what the edge sends counted exactly as the owner's bandwidth of the
//! month.
//!
//! The static-site cache: sites committed and deployed through the API, fetched by the edge from the API's internal
//! archive route, which the tests serve behind a layer that counts the archive requests. An edge is ready before it
//! loads anything, loads a site once for its first requests, loads it again after evicting it, serves a site larger
//! than its memory cap from disk, and loads a hot channel's new deploy before its first visitor.

// A test fails loudly on a reply of the wrong shape.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::io::Read;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Result, ensure};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::Ingress;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;
use slipway_crds::Channel;
use slipway_edge::site_cache::{DiskCacheConfig, SiteCacheConfig};
use slipway_edge::site_metrics::Tier;
use support::TestApi;
use support::answer::Answer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const WITHIN: Duration = Duration::from_secs(60);

/// An HTTP server answering every request with `body`, counting the requests that reached it.
struct Pod {
    addr: SocketAddr,
    reached: Arc<AtomicUsize>,
}

impl Pod {
    async fn start(body: &'static str) -> Result<Self> {
        let app = |reached: Arc<AtomicUsize>| {
            axum::Router::new().fallback(move || {
                reached.fetch_add(1, Ordering::SeqCst);
                async move { body }
            })
        };
        let listener = tokio::net::TcpListener::bind((support::own_address()?, 0)).await?;
        let addr = listener.local_addr()?;
        let reached = Arc::new(AtomicUsize::new(0));
        let router = app(reached.clone());
        tokio::spawn(async move { axum::serve(listener, router).await });
        Ok(Self { addr, reached })
    }

    fn reached(&self) -> usize {
        self.reached.load(Ordering::SeqCst)
    }
}

/// `GET /` for `host` at the edge on `edge`: the status and the body.
async fn get(edge: SocketAddr, host: &str) -> Result<(u16, String)> {
    let mut conn = tokio::net::TcpStream::connect(edge).await?;
    conn.write_all(
        format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await?;
    let mut reply = String::new();
    conn.read_to_string(&mut reply).await?;
    let status = reply
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = reply
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_owned();
    Ok((status, body))
}

/// The value of the edge's untrusted-rules gauge.
fn ignored_rules(registry: &prometheus_client::registry::Registry) -> Option<i64> {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("slipway_edge_ignored_ingress_rules "))
        .and_then(|v| v.trim().parse().ok())
}

fn ingress(name: &str, host: &str, backend_service: &str, owners: serde_json::Value) -> Ingress {
    serde_json::from_value(json!({
        "metadata": {"name": name, "ownerReferences": owners},
        "spec": {"ingressClassName": "slipway", "rules": [{"host": host, "http": {"paths": [
            {"path": "/", "pathType": "Prefix", "backend": {"service": {
                "name": backend_service, "port": {"name": "http"}}}}]}}]},
    }))
    .unwrap()
}

/// The prod channel of `user`'s app `web` (template `app`) with `pod` behind its Service, once the operator has
/// written its hostname and Ingress: the channel and its hostname.
async fn served_web_channel(
    api: &TestApi,
    user: &support::User,
    pod: &Pod,
) -> Result<(Channel, String)> {
    api.create_app(user, "web", "app").await;
    support::service_with_pod(&api.kube, &user.namespace, "web-prod", "http", pod.addr).await?;
    let channels: Api<Channel> = Api::namespaced(api.kube.clone(), &user.namespace);
    let ingresses: Api<Ingress> = Api::namespaced(api.kube.clone(), &user.namespace);
    slipway_testkit::wait_until(WITHIN, || {
        let (channels, ingresses) = (channels.clone(), ingresses.clone());
        async move {
            let channel = channels.get("web.prod").await?;
            let named = channel.status.is_some_and(|s| s.hostname.is_some());
            Ok(named && ingresses.get_opt("web.prod").await?.is_some())
        }
    })
    .await?;
    let channel = channels.get("web.prod").await?;
    let hostname = channel.status.as_ref().unwrap().hostname.clone().unwrap();
    Ok((channel, hostname))
}

/// An edge of `user`'s namespace in this process, serving plain HTTP on loopback: the edge and its address.
async fn start_edge(
    api: &TestApi,
    user: &support::User,
    registry: &mut prometheus_client::registry::Registry,
) -> Result<(Arc<slipway_edge::Edge>, SocketAddr)> {
    let config = api.edge_config(&user.namespace, false).await?;
    let (edge, _tasks) = slipway_edge::Edge::start(api.kube.clone(), config, registry).await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let at = listener.local_addr()?;
    tokio::spawn(slipway_edge::server::serve(
        edge.clone(),
        listener,
        slipway_edge::server::Scheme::Http,
        std::future::pending(),
    ));
    Ok((edge, at))
}

#[tokio::test]
async fn the_edge_routes_only_the_operators_ingress_of_a_channel() -> Result<()> {
    let api = TestApi::start().await?;
    let user = api.user("edgetrust", "builder").await?;
    let _operator = api.start_operator_without_node(&user.namespace).await?;
    let pod = Pod::start("pod").await?;
    let loot = Pod::start("loot").await?;
    support::service_with_pod(&api.kube, &user.namespace, "loot", "http", loot.addr).await?;
    let (channel, hostname) = served_web_channel(&api, &user, &pod).await?;
    let ingresses: Api<Ingress> = Api::namespaced(api.kube.clone(), &user.namespace);

    let mut registry = prometheus_client::registry::Registry::default();
    let (_edge, at) = start_edge(&api, &user, &mut registry).await?;
    // The operator's Ingress reaches the channel's pod: the path the attempts below take works.
    assert_eq!(get(at, &hostname).await?, (200, "pod".to_owned()));
    assert_eq!(ignored_rules(&registry), Some(0));

    // 1. An Ingress of class slipway that no Channel controls, taking a host of its own for an address of its
    //    choosing.
    let squat_host = format!("squat-{}", hostname);
    ingresses
        .create(
            &PostParams::default(),
            &ingress("squat", &squat_host, "loot", json!([])),
        )
        .await?;
    // 2. One that names the channel as its controller (with its uid) but is not the channel's Ingress.
    let owner = json!([{"apiVersion": "slipway.dev/v1alpha1", "kind": "Channel", "name": "web.prod",
        "uid": channel.metadata.uid, "controller": true}]);
    ingresses
        .create(
            &PostParams::default(),
            &ingress("web-alias", "alias.example", "loot", owner),
        )
        .await?;
    // 3. A slice for the channel's Service that the EndpointSlice controller did not make.
    let slices: Api<EndpointSlice> = Api::namespaced(api.kube.clone(), &user.namespace);
    slices
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "web-prod-extra", "labels": {"kubernetes.io/service-name": "web-prod"}},
                "addressType": "IPv4",
                "endpoints": [{"addresses": [loot.addr.ip().to_string()], "conditions": {"ready": true}}],
                "ports": [{"name": "http", "port": loot.addr.port(), "protocol": "TCP"}],
            }))?,
        )
        .await?;

    // A second pod's slice, written after the forged one: once the edge sends requests there, its slice watch
    // (which delivers in order) has shown it the forged slice too.
    let second = Pod::start("pod").await?;
    support::add_pod_slice(
        &api.kube,
        &user.namespace,
        "web-prod",
        "http",
        "more",
        second.addr,
    )
    .await?;
    slipway_testkit::wait_until(WITHIN, || {
        let reached = second.reached();
        let hostname = hostname.clone();
        async move {
            get(at, &hostname).await?;
            Ok(reached > 0)
        }
    })
    .await?;

    // The edge has seen both Ingresses when it counts their rules as untrusted.
    slipway_testkit::wait_until(WITHIN, || {
        let count = ignored_rules(&registry);
        async move { Ok(count == Some(2)) }
    })
    .await?;
    assert_eq!(get(at, &squat_host).await?.0, 404);
    assert_eq!(get(at, "alias.example").await?.0, 404);
    for _ in 0..6 {
        assert_eq!(get(at, &hostname).await?, (200, "pod".to_owned()));
    }
    assert_eq!(loot.reached(), 0, "nothing reached the attacker's address");
    Ok(())
}

#[tokio::test]
async fn the_bytes_the_edge_sends_are_the_owner_s_bandwidth_this_month_and_day_exactly_and_outlive_a_restart()
-> Result<()> {
    let mut api = TestApi::start().await?;
    // GET /me/usage measures the account's databases on the data server, so it answers only with one.
    support::postgres::attach(&mut api)?;
    let user = api.user("edgebytes", "builder").await?;
    let _operator = api.start_operator_without_node(&user.namespace).await?;
    let body = "fifteen bytes!\n";
    let pod = Pod::start(body).await?;
    let (_, hostname) = served_web_channel(&api, &user, &pod).await?;
    let mut registry = prometheus_client::registry::Registry::default();
    let (edge, at) = start_edge(&api, &user, &mut registry).await?;

    // Last month's bytes are not this month's.
    sqlx::query(
        "INSERT INTO bandwidth_usage (owner, month, bytes)
         VALUES ($1, (date_trunc('month', now() AT TIME ZONE 'UTC') - interval '1 month')::date, 999)",
    )
    .bind(&user.username)
    .execute(api.state.db())
    .await?;
    // The days: yesterday's 40 bytes are in the last 30 days; a day past the 90 kept goes with the next report.
    sqlx::query(
        "INSERT INTO bandwidth_days (owner, day, bytes) VALUES
         ($1, (now() AT TIME ZONE 'UTC')::date - 1, 40), ($1, (now() AT TIME ZONE 'UTC')::date - 90, 7)",
    )
    .bind(&user.username)
    .execute(api.state.db())
    .await?;
    let mut sent = 0;
    for _ in 0..10 {
        let (status, text) = get(at, &hostname).await?;
        assert_eq!((status, text.as_str()), (200, body));
        sent += text.len();
    }
    // A host nobody owns is nobody's bandwidth.
    assert_eq!(get(at, "nobody.example").await?.0, 404);

    // What a stopping edge reports once it has drained; the periodic report may carry part of it instead, never
    // twice.
    edge.report_bandwidth().await;
    let deadline = tokio::time::Instant::now() + WITHIN;
    loop {
        let usage = api.get("/me/usage", &user).await.expect(200, None);
        let bytes = usage["bandwidth_month_bytes"].as_u64().unwrap();
        assert!(
            bytes <= sent as u64,
            "counted more than was sent: {bytes} > {sent}"
        );
        if bytes == sent as u64 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{bytes} of {sent} bytes reported"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(sent, 150);
    // Today's bytes are the month's; with yesterday's they are the 30 days', one entry a day, oldest first.
    let usage = api.get("/me/usage", &user).await.expect(200, None);
    let days = usage["bandwidth_days"].as_array().unwrap();
    assert_eq!(days.len(), 30, "{usage}");
    let dates: Vec<chrono::NaiveDate> = days
        .iter()
        .map(|d| d["day"].as_str().unwrap().parse().unwrap())
        .collect();
    assert!(
        dates
            .windows(2)
            .all(|w| w[1] == w[0] + chrono::Days::new(1)),
        "{usage}"
    );
    let by_day: Vec<u64> = days.iter().map(|d| d["bytes"].as_u64().unwrap()).collect();
    assert_eq!(by_day.iter().sum::<u64>(), 190, "{usage}");
    assert!(by_day.contains(&150) && by_day.contains(&40), "{usage}");
    let kept: Vec<i32> = sqlx::query_scalar(
        "SELECT ((now() AT TIME ZONE 'UTC')::date - day)::int FROM bandwidth_days WHERE owner = $1 ORDER BY day",
    )
    .bind(&user.username)
    .fetch_all(api.state.db())
    .await?;
    assert_eq!(kept, [1, 0], "the day 90 days back was dropped");
    // Another API process (a restart) reads the same month from the platform database; another account has none.
    let restarted = api.replica().await?;
    let usage = support::call_on(
        &restarted,
        axum::http::Method::GET,
        "/me/usage",
        Some(&user.token),
        None,
    )
    .await
    .expect(200, None);
    assert_eq!(usage["bandwidth_month_bytes"], 150);
    let stranger = api.user("edgenobody", "basic").await?;
    let usage = api.get("/me/usage", &stranger).await.expect(200, None);
    assert_eq!(usage["bandwidth_month_bytes"], 0);
    Ok(())
}

/// The internal listener of `api` on loopback, behind a layer that records the path of every archive request.
async fn counting_internal(api: &TestApi) -> Result<(String, Arc<Mutex<Vec<String>>>)> {
    let archives: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = archives.clone();
    let router = api.internal_router.clone().layer(axum::middleware::from_fn(
        move |req: axum::extract::Request, next: axum::middleware::Next| {
            let path = req.uri().path().to_owned();
            if path.contains("/archive/") {
                seen.lock().unwrap().push(path);
            }
            next.run(req)
        },
    ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move {
        axum::serve(
            listener,
            router.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
    });
    Ok((url, archives))
}

/// How many archive requests named `app_id`.
fn fetches(archives: &Mutex<Vec<String>>, app_id: &str) -> usize {
    archives
        .lock()
        .unwrap()
        .iter()
        .filter(|p| p.contains(app_id))
        .count()
}

/// A static app `name` of `user` with `files` committed and deployed on its prod channel, once the operator has
/// written the channel's Ingress: (app id, channel id, hostname).
async fn deployed_site(
    api: &TestApi,
    user: &support::User,
    name: &str,
    files: serde_json::Value,
) -> Result<(String, String, String)> {
    let app = api.create_app(user, name, "static").await;
    let app_id = app["id"].as_str().unwrap().to_owned();
    let channel_id = app["channels"][0]["id"].as_str().unwrap().to_owned();
    let hostname = app["channels"][0]["hostname"].as_str().unwrap().to_owned();
    deploy_files(api, user, &app_id, &channel_id, files).await?;
    let ingresses: Api<Ingress> = Api::namespaced(api.kube.clone(), &user.namespace);
    let ingress = format!("{name}.prod");
    slipway_testkit::wait_until(WITHIN, || {
        let (ingresses, ingress) = (ingresses.clone(), ingress.clone());
        async move { Ok(ingresses.get_opt(&ingress).await?.is_some()) }
    })
    .await?;
    Ok((app_id, channel_id, hostname))
}

/// Commits `files` and deploys them on the channel; returns the commit.
async fn deploy_files(
    api: &TestApi,
    user: &support::User,
    app_id: &str,
    channel_id: &str,
    files: serde_json::Value,
) -> Result<String> {
    let sha = api.commit(user, app_id, files).await;
    let deploy = api
        .deploy(user, app_id, channel_id, json!({"sha": sha}))
        .await;
    let log = api
        .finished_deploy(user, app_id, channel_id, &deploy, WITHIN)
        .await?;
    ensure!(log["status"] == "success", "deploy failed: {log}");
    Ok(sha)
}

/// An edge of `user`'s namespace reading archives from `internal_url`, with the site cache `sites`.
async fn start_static_edge(
    api: &TestApi,
    user: &support::User,
    internal_url: &str,
    sites: SiteCacheConfig,
) -> Result<(Arc<slipway_edge::Edge>, SocketAddr)> {
    let config = slipway_edge::EdgeConfig {
        internal: api.edge_endpoint(internal_url),
        sites,
        ..api.edge_config(&user.namespace, false).await?
    };
    let mut registry = prometheus_client::registry::Registry::default();
    let (edge, _tasks) = slipway_edge::Edge::start(api.kube.clone(), config, &mut registry).await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let at = listener.local_addr()?;
    tokio::spawn(slipway_edge::server::serve(
        edge.clone(),
        listener,
        slipway_edge::server::Scheme::Http,
        std::future::pending(),
    ));
    Ok((edge, at))
}

/// `method target` for `host` at the edge on `edge`, with `headers`.
async fn send(
    edge: SocketAddr,
    method: &str,
    host: &str,
    target: &str,
    headers: &[(&str, &str)],
) -> Result<Answer> {
    let client: Client<HttpConnector, Empty<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();
    let mut req = http::Request::builder()
        .method(method)
        .uri(format!("http://{edge}{target}"))
        .header("host", host);
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let res = client.request(req.body(Empty::new())?).await?;
    let (parts, body) = res.into_parts();
    Ok(Answer {
        status: parts.status.as_u16(),
        headers: parts.headers,
        body: body.collect().await?.to_bytes(),
    })
}

/// Text of `len` bytes that differs by `seed` and compresses about as well as prose.
fn page_text(seed: &str, len: usize) -> String {
    let mut text = format!("<!doctype html><title>{seed}</title>\n");
    let mut n = seed
        .bytes()
        .fold(17u64, |h, b| h.wrapping_mul(131).wrapping_add(u64::from(b)));
    while text.len() < len {
        n = n
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        text.push_str(&format!("<p>{seed} line {:016x}</p>\n", n));
    }
    text.truncate(len);
    text
}

fn brotli_decoded(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    brotli::BrotliDecompress(&mut &body[..], &mut out).unwrap();
    out
}

fn memory_only(kib: u64) -> SiteCacheConfig {
    SiteCacheConfig {
        memory_bytes: kib * 1024,
        max_site_bytes: 64 << 20,
        disk: None,
    }
}

#[tokio::test]
async fn an_edge_is_ready_before_it_loads_a_site_and_its_first_requests_share_one_load()
-> Result<()> {
    let api = TestApi::start().await?;
    let user = api.user("edgeready", "builder").await?;
    let _operator = api.start_operator_without_node(&user.namespace).await?;
    let (one, _, one_host) =
        deployed_site(&api, &user, "one", json!({"index.html": "<h1>one</h1>\n"})).await?;
    let (two, _, _) =
        deployed_site(&api, &user, "two", json!({"index.html": "<h1>two</h1>\n"})).await?;
    let (internal, archives) = counting_internal(&api).await?;

    // Started (its first table built, the point its admin port opens and it reports ready) with two deployed sites,
    // and nothing loaded.
    let (edge, at) = start_static_edge(&api, &user, &internal, memory_only(1024)).await?;
    let metrics = edge.sites().metrics();
    assert_eq!(
        archives.lock().unwrap().len(),
        0,
        "nothing fetched at start"
    );
    assert_eq!(
        (metrics.loads(Tier::Memory), metrics.entries(Tier::Memory)),
        (0, 0)
    );

    // Eight first requests at once: one fetch, eight right answers.
    let requests: Vec<_> = (0..8)
        .map(|_| {
            let host = one_host.clone();
            tokio::spawn(async move { send(at, "GET", &host, "/", &[]).await })
        })
        .collect();
    for answer in futures::future::join_all(requests).await {
        let answer = answer??;
        assert_eq!(
            (answer.status, &answer.body[..]),
            (200, &b"<h1>one</h1>\n"[..])
        );
    }
    assert_eq!(
        fetches(&archives, &one),
        1,
        "one load for the first requests"
    );
    assert_eq!(
        fetches(&archives, &two),
        0,
        "a site nobody asked for is not loaded"
    );
    assert_eq!(metrics.loads(Tier::Memory), 1);
    assert_eq!(metrics.hits(Tier::Memory) + metrics.misses(), 8);
    assert!(metrics.misses() >= 1);
    // Later requests are hits.
    let hits = metrics.hits(Tier::Memory);
    assert_eq!(send(at, "GET", &one_host, "/", &[]).await?.status, 200);
    assert_eq!(metrics.hits(Tier::Memory), hits + 1);
    assert_eq!(fetches(&archives, &one), 1);
    Ok(())
}

#[tokio::test]
async fn a_site_evicted_from_memory_is_loaded_again_and_served_right() -> Result<()> {
    let api = TestApi::start().await?;
    let user = api.user("edgeevict", "builder").await?;
    let _operator = api.start_operator_without_node(&user.namespace).await?;
    // Six sites of 12 KiB of text each (a memory share is 16 KiB) in a 64 KiB cache: they cannot all stay, so the
    // first one asked for, the least recently used, is the first to go.
    let mut sites = Vec::new();
    for i in 0..6 {
        let name = format!("site{i}");
        let page = page_text(&name, 12 * 1024);
        let (app_id, _, host) =
            deployed_site(&api, &user, &name, json!({"index.html": page})).await?;
        sites.push((app_id, host, page));
    }
    let (internal, archives) = counting_internal(&api).await?;
    let cap = 64 * 1024;
    let (edge, at) = start_static_edge(&api, &user, &internal, memory_only(64)).await?;
    let metrics = edge.sites().metrics();

    let mut first_tags = Vec::new();
    for (_, host, page) in &sites {
        let answer = send(at, "GET", host, "/", &[("accept-encoding", "br, gzip")]).await?;
        assert_eq!(answer.status, 200);
        assert_eq!(answer.header("content-encoding"), "br");
        assert_eq!(brotli_decoded(&answer.body), page.as_bytes());
        first_tags.push(answer.header("etag").to_owned());
        let held = metrics.bytes(Tier::Memory);
        assert!(
            held > 0 && held as u64 <= cap,
            "{held} bytes held over a cap of {cap}"
        );
    }
    assert!(metrics.evictions(Tier::Memory) >= 1);
    assert_eq!(metrics.loads(Tier::Memory), 6);
    let (first_app, first_host, first_page) = &sites[0];
    assert_eq!(fetches(&archives, first_app), 1);

    // The evicted site is loaded again and served as before, in every encoding.
    let answer = send(at, "GET", first_host, "/", &[("accept-encoding", "br")]).await?;
    assert_eq!(answer.status, 200);
    assert_eq!(brotli_decoded(&answer.body), first_page.as_bytes());
    assert_eq!(answer.header("etag"), first_tags[0]);
    assert_eq!(
        fetches(&archives, first_app),
        2,
        "fetched again after its eviction"
    );
    assert_eq!(metrics.loads(Tier::Memory), 7);
    let answer = send(at, "GET", first_host, "/", &[("accept-encoding", "gzip")]).await?;
    let mut gunzipped = String::new();
    flate2::read::GzDecoder::new(&answer.body[..]).read_to_string(&mut gunzipped)?;
    assert_eq!(&gunzipped, first_page);
    let answer = send(at, "GET", first_host, "/", &[]).await?;
    assert_eq!(
        (answer.header("content-encoding"), &answer.body[..]),
        ("", first_page.as_bytes())
    );
    assert!(metrics.bytes(Tier::Memory) as u64 <= cap);
    Ok(())
}

#[tokio::test]
async fn a_site_larger_than_the_memory_cap_is_streamed_from_disk_with_ranges_and_entity_tags()
-> Result<()> {
    let api = TestApi::start().await?;
    let user = api.user("edgedisk", "builder").await?;
    let _operator = api.start_operator_without_node(&user.namespace).await?;
    // 200 KiB of text in a site beside a 64 KiB memory cap.
    let big = page_text("big", 200 * 1024);
    let (app_id, _, host) = deployed_site(
        &api,
        &user,
        "large",
        json!({"index.html": "<h1>large</h1>\n", "big.txt": big}),
    )
    .await?;
    let (internal, archives) = counting_internal(&api).await?;
    let dir = std::env::temp_dir().join(format!(
        "slipway-edge-disk-{}",
        uuid::Uuid::new_v4().simple()
    ));
    let sites = SiteCacheConfig {
        memory_bytes: 64 * 1024,
        max_site_bytes: 1 << 20,
        disk: Some(DiskCacheConfig {
            dir: dir.clone(),
            bytes: 4 << 20,
        }),
    };
    let (edge, at) = start_static_edge(&api, &user, &internal, sites).await?;
    let metrics = edge.sites().metrics();

    let whole = send(
        at,
        "GET",
        &host,
        "/big.txt",
        &[("accept-encoding", "br, gzip")],
    )
    .await?;
    assert_eq!(whole.status, 200);
    assert_eq!(
        &whole.body[..],
        big.as_bytes(),
        "as committed: no compressed form on disk"
    );
    assert_eq!(whole.header("content-encoding"), "");
    assert_eq!(whole.header("content-length"), big.len().to_string());
    assert_eq!(whole.header("content-type"), "text/plain; charset=utf-8");
    let tag = whole.header("etag").to_owned();
    assert!(tag.starts_with('"'));
    assert_eq!(
        (
            metrics.loads(Tier::Disk),
            metrics.entries(Tier::Disk),
            metrics.entries(Tier::Memory)
        ),
        (1, 1, 0)
    );
    let on_disk = metrics.bytes(Tier::Disk);
    assert!(on_disk as usize >= big.len(), "{on_disk} bytes on disk");
    assert!(std::fs::read_dir(dir.join("slipway-sites"))?.count() == 1);

    let part = send(
        at,
        "GET",
        &host,
        "/big.txt",
        &[("range", "bytes=100000-100999")],
    )
    .await?;
    assert_eq!(part.status, 206);
    assert_eq!(
        part.header("content-range"),
        format!("bytes 100000-100999/{}", big.len())
    );
    assert_eq!(&part.body[..], &big.as_bytes()[100_000..101_000]);
    let tail = send(at, "GET", &host, "/big.txt", &[("range", "bytes=-10")]).await?;
    assert_eq!(&tail.body[..], &big.as_bytes()[big.len() - 10..]);
    let beyond = send(at, "GET", &host, "/big.txt", &[("range", "bytes=999999-")]).await?;
    assert_eq!(beyond.status, 416);
    let fresh = send(at, "GET", &host, "/big.txt", &[("if-none-match", &tag)]).await?;
    assert_eq!((fresh.status, fresh.body.len()), (304, 0));
    let if_range = send(
        at,
        "GET",
        &host,
        "/big.txt",
        &[("range", "bytes=0-9"), ("if-range", &tag)],
    )
    .await?;
    assert_eq!(
        (if_range.status, &if_range.body[..]),
        (206, &big.as_bytes()[..10])
    );
    let stale = send(
        at,
        "GET",
        &host,
        "/big.txt",
        &[("range", "bytes=0-9"), ("if-range", "\"stale\"")],
    )
    .await?;
    assert_eq!((stale.status, stale.body.len()), (200, big.len()));
    let head = send(at, "HEAD", &host, "/big.txt", &[]).await?;
    assert_eq!(
        (head.status, head.header("content-length")),
        (200, big.len().to_string().as_str())
    );
    let index = send(at, "GET", &host, "/", &[]).await?;
    assert_eq!(
        (index.status, &index.body[..]),
        (200, &b"<h1>large</h1>\n"[..])
    );
    assert_eq!(
        fetches(&archives, &app_id),
        1,
        "written once, served from disk since"
    );

    // Without a disk tier the same site is refused (503), not held in memory.
    let (edge, at) = start_static_edge(&api, &user, &internal, memory_only(64)).await?;
    assert_eq!(send(at, "GET", &host, "/", &[]).await?.status, 503);
    assert_eq!(edge.sites().metrics().failures(), 1);
    let _ = std::fs::remove_dir_all(dir);
    Ok(())
}

#[tokio::test]
async fn a_hot_sites_new_deploy_is_loaded_before_its_first_visitor_and_a_cold_ones_is_not()
-> Result<()> {
    let api = TestApi::start().await?;
    let user = api.user("edgedeploy", "builder").await?;
    let _operator = api.start_operator_without_node(&user.namespace).await?;
    let (hot, hot_channel, hot_host) =
        deployed_site(&api, &user, "hot", json!({"index.html": "hot v1"})).await?;
    let (cold, cold_channel, cold_host) =
        deployed_site(&api, &user, "cold", json!({"index.html": "cold v1"})).await?;
    let (internal, archives) = counting_internal(&api).await?;
    let (edge, at) = start_static_edge(&api, &user, &internal, memory_only(1024)).await?;
    let metrics = edge.sites().metrics();
    assert_eq!(send(at, "GET", &hot_host, "/", &[]).await?.body, "hot v1");

    deploy_files(
        &api,
        &user,
        &hot,
        &hot_channel,
        json!({"index.html": "hot v2"}),
    )
    .await?;
    deploy_files(
        &api,
        &user,
        &cold,
        &cold_channel,
        json!({"index.html": "cold v2"}),
    )
    .await?;
    // The hot channel's new commit is fetched without a request, and its host moves to it once it is in.
    slipway_testkit::wait_until(WITHIN, || {
        let fetched = fetches(&archives, &hot);
        async move { Ok(fetched == 2) }
    })
    .await?;
    let misses = metrics.misses();
    slipway_testkit::wait_until(WITHIN, || {
        let host = hot_host.clone();
        async move { Ok(send(at, "GET", &host, "/", &[]).await?.body == "hot v2") }
    })
    .await?;
    assert_eq!(
        metrics.misses(),
        misses,
        "the first visitors of the new deploy found it loaded"
    );
    // The cold one was never loaded; its next request loads its new commit, never the old one.
    assert_eq!(fetches(&archives, &cold), 0);
    assert_eq!(send(at, "GET", &cold_host, "/", &[]).await?.body, "cold v2");
    assert_eq!(fetches(&archives, &cold), 1);
    // The old commit left the cache with the switch: the hot site is one entry, the cold one another.
    assert_eq!(metrics.entries(Tier::Memory), 2);
    Ok(())
}
