//! Routing trust at the edge against a real apiserver: the edge serves what slipway's operator wrote for a Channel
//! and nothing else that anyone with Ingress or EndpointSlice rights writes in class `slipway`.
//!
//! This tier has no node, so the channel's "pod" is an HTTP server of the test's own on this machine's address,
//! named by the channel's Service and an EndpointSlice labelled as the EndpointSlice controller's. A second server
//! ("loot") stands for an address an attacker wants the edge to reach; the test counts what reaches it. The same
//! setup shows what the edge sends counted exactly as the owner's bandwidth of the month.

// A test fails loudly on a reply of the wrong shape.
#![allow(clippy::unwrap_used)]

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::Result;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::Ingress;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;
use slipway_crds::Channel;
use support::TestApi;
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
) -> Result<(Arc<slipway::edge::Edge>, SocketAddr)> {
    let config = api.edge_config(&user.namespace, false).await?;
    let (edge, _tasks) = slipway::edge::Edge::start(api.kube.clone(), config, registry).await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let at = listener.local_addr()?;
    tokio::spawn(slipway::edge::server::serve(
        edge.clone(),
        listener,
        slipway::edge::server::Scheme::Http,
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
async fn the_bytes_the_edge_sends_are_the_owner_s_bandwidth_this_month_exactly_and_outlive_a_restart()
-> Result<()> {
    let api = TestApi::start().await?;
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
