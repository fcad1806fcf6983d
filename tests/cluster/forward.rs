//! Raw TCP forwarding against a real apiserver: the routes' refusals and answers, the operator allocating
//! addresses (kept across an allowlist change, a toggle and an operator restart; new after an unexpose), and the
//! edge's forward listeners passing bytes to the channel's pods only from the allowlist.
//!
//! This tier has no node, so the channel's "pod" is an echo server of the test's own, on this machine's own address
//! (an EndpointSlice may not name loopback), named by the channel's Service and an EndpointSlice the test writes
//! (what the endpoint controller writes on a node). The edge listens on loopback, where all of 127.0.0.0/8 is
//! this machine: a client bound to 127.0.0.2 is a second source address.

// A test fails loudly on a reply of the wrong shape.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::Result;
use axum::http::Method;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use slipway_controllers::forward::ForwardPorts;
use slipway_crds::Forward;
use support::{TestApi, User};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// A generous bound on how long the operator and the edge take to act on a change.
const WITHIN: Duration = Duration::from_secs(20);

/// An echo server standing in for the channel's pod, counting the connections that reached it.
struct Echo {
    addr: SocketAddr,
    reached: Arc<AtomicUsize>,
}

impl Echo {
    async fn start() -> Result<Self> {
        let listener = tokio::net::TcpListener::bind((support::own_address()?, 0)).await?;
        let addr = listener.local_addr()?;
        let reached = Arc::new(AtomicUsize::new(0));
        let counter = reached.clone();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let (mut r, mut w) = conn.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        Ok(Self { addr, reached })
    }

    fn reached(&self) -> usize {
        self.reached.load(Ordering::SeqCst)
    }
}

struct Fixture {
    api: TestApi,
    user: User,
    app_id: String,
    channel_id: String,
    edge: Arc<slipway_edge::Edge>,
    echo: Echo,
    operator: tokio::task::JoinHandle<()>,
    ports: ForwardPorts,
}

/// A builder-plan user (port forwarding included) with an `app` app, its toggle on, and its prod channel's
/// Service and endpoints pointing at an echo server; the operator allocating from a range of its own; an edge
/// with forward listeners on loopback. Each test's range sits below the kernel's ephemeral ports (32768 and up), so
/// no outgoing connection of the machine can be holding one when the edge binds it.
async fn fixture(prefix: &str, first_port: u16) -> Result<Fixture> {
    let api = TestApi::start().await?;
    let user = api.user(prefix, "builder").await?;
    let app = api.create_app(&user, "tcp", "app").await;
    let app_id = app["id"].as_str().unwrap().to_owned();
    let channel_id = app["channels"][0]["id"].as_str().unwrap().to_owned();
    api.call(
        Method::PATCH,
        &format!("/apps/{app_id}"),
        Some(&user.token),
        Some(json!({"port_forwarding_enabled": true})),
    )
    .await
    .expect(200, None);
    let echo = Echo::start().await?;
    support::service_with_pod(
        &api.kube,
        &user.namespace,
        &slipway_crds::names::workload_name("tcp.prod"),
        "forward",
        echo.addr,
    )
    .await?;
    let ports: ForwardPorts = format!("127.0.0.1:{first_port}-{}", first_port + 9)
        .parse()
        .unwrap();
    let operator = api
        .start_operator_with_forwards(&user.namespace, ports.clone())
        .await?;
    let config = slipway_edge::EdgeConfig {
        forward_listen: Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        sign_in: None,
        ..api.edge_config(&user.namespace, false).await?
    };
    let mut registry = prometheus_client::registry::Registry::default();
    let (edge, _tasks) = slipway_edge::Edge::start(api.kube.clone(), config, &mut registry).await?;
    Ok(Fixture {
        api,
        user,
        app_id,
        channel_id,
        edge,
        echo,
        operator,
        ports,
    })
}

impl Fixture {
    fn forward_path(&self) -> String {
        format!("/apps/{}/channels/{}/forward", self.app_id, self.channel_id)
    }

    async fn expose(&self, allow: Value) -> support::Reply {
        self.api
            .call(
                Method::POST,
                &self.forward_path(),
                Some(&self.user.token),
                Some(json!({"allow_cidrs": allow})),
            )
            .await
    }

    async fn list(&self) -> Value {
        self.api
            .get(&format!("/apps/{}/forwards", self.app_id), &self.user)
            .await
            .expect(200, None)
    }

    /// The list once `wanted` holds of it: the API answers from its own watch of the Forwards, which may come to a
    /// change a moment after the operator or the edge acted on it.
    async fn list_until(&self, wanted: impl Fn(&Value) -> bool, what: &str) -> Value {
        let deadline = tokio::time::Instant::now() + WITHIN;
        loop {
            let listed = self.list().await;
            if wanted(&listed) {
                return listed;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the list still says {listed}; waited for {what}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The list once its first forward's `active` is `active`.
    async fn list_until_active(&self, active: bool) -> Value {
        self.list_until(
            |listed| listed["forwards"][0]["active"] == active,
            &format!("active {active}"),
        )
        .await
    }

    /// Waits until the edge listens on `port` (or, with `open` false, no longer does).
    async fn listening(&self, port: u16, open: bool) {
        let deadline = tokio::time::Instant::now() + WITHIN;
        while self.edge.forward_ports().contains(&port) != open {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the edge's forward listeners are {:?}; waited for {port} to be {}",
                self.edge.forward_ports(),
                if open { "open" } else { "closed" }
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Connects to `port` on 127.0.0.1 from `source`.
async fn connect_from(source: Ipv4Addr, port: u16) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(IpAddr::V4(source), 0))?;
    socket
        .connect(SocketAddr::from(([127, 0, 0, 1], port)))
        .await
}

/// Sends `message` and reads the echo back.
async fn echo_through(conn: &mut TcpStream, message: &[u8]) -> std::io::Result<Vec<u8>> {
    conn.write_all(message).await?;
    let mut back = vec![0; message.len()];
    tokio::time::timeout(WITHIN, conn.read_exact(&mut back))
        .await
        .map_err(|_| std::io::Error::other("no echo"))??;
    Ok(back)
}

/// Whether a connection from `source` to `port` is refused or closed before it echoes anything.
async fn refused_from(source: Ipv4Addr, port: u16) -> bool {
    let Ok(mut conn) = connect_from(source, port).await else {
        return true;
    };
    let _ = conn.write_all(b"knock").await;
    let mut buf = [0u8; 8];
    matches!(
        tokio::time::timeout(WITHIN, conn.read(&mut buf)).await,
        Ok(Ok(0)) | Ok(Err(_))
    )
}

#[tokio::test]
async fn the_allowlist_decides_who_reaches_the_channel_and_an_exposed_port_stays_put() -> Result<()>
{
    let fx = fixture("fwd", 29100).await?;
    let exposed = fx
        .expose(json!(["127.0.0.1", "2001:db8::/32"]))
        .await
        .expect(201, None);
    let port = u16::try_from(exposed["port"].as_u64().unwrap())?;
    assert_eq!(
        exposed,
        json!({
            "channel_id": fx.channel_id, "channel": "prod", "host": "127.0.0.1", "port": port,
            "allow_cidrs": ["127.0.0.1/32", "2001:db8::/32"], "active": true,
            "created_at": exposed["created_at"],
        })
    );
    assert!((fx.ports.first..fx.ports.first + fx.ports.count).contains(&port));
    assert_eq!(fx.list().await["forwards"], json!([exposed]));
    fx.listening(port, true).await;

    // From the allowlist: bytes go through unchanged, both ways.
    let mut session = connect_from(Ipv4Addr::new(127, 0, 0, 1), port).await?;
    assert_eq!(
        echo_through(&mut session, b"hello\0\xff").await?,
        b"hello\0\xff"
    );
    assert_eq!(fx.echo.reached(), 1);
    // From outside it: closed, and nothing reached the app.
    assert!(refused_from(Ipv4Addr::new(127, 0, 0, 2), port).await);
    assert_eq!(fx.echo.reached(), 1);

    // Re-expose: 200, the same address, the allowlist replaced (applied to the next connection).
    let again = fx.expose(json!(["127.0.0.2/32"])).await.expect(200, None);
    assert_eq!(
        (again["host"].clone(), again["port"].clone()),
        (exposed["host"].clone(), exposed["port"].clone())
    );
    assert_eq!(again["allow_cidrs"], json!(["127.0.0.2/32"]));
    let deadline = tokio::time::Instant::now() + WITHIN;
    while !refused_from(Ipv4Addr::new(127, 0, 0, 1), port).await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "127.0.0.1 still let in"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut second = connect_from(Ipv4Addr::new(127, 0, 0, 2), port).await?;
    assert_eq!(echo_through(&mut second, b"second").await?, b"second");
    // The session opened under the old allowlist goes on.
    assert_eq!(echo_through(&mut session, b"still").await?, b"still");

    // Unexpose: no new connections; open sessions keep echoing.
    fx.api
        .delete(&fx.forward_path(), &fx.user)
        .await
        .expect(204, None);
    assert_eq!(fx.list().await["forwards"], json!([]));
    fx.listening(port, false).await;
    let deadline = tokio::time::Instant::now() + WITHIN;
    while connect_from(Ipv4Addr::new(127, 0, 0, 2), port)
        .await
        .is_ok()
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the unexposed port still accepts"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        echo_through(&mut second, b"after unexpose").await?,
        b"after unexpose"
    );
    fx.api
        .delete(&fx.forward_path(), &fx.user)
        .await
        .expect(404, Some("not_found"));

    // A later expose gets a new address.
    let later = fx.expose(json!([])).await.expect(201, None);
    assert_ne!(later["port"], exposed["port"]);
    assert_eq!(later["allow_cidrs"], json!([]));
    Ok(())
}

#[tokio::test]
async fn the_toggle_turns_serving_off_and_on_and_the_operator_restarts_without_moving_it()
-> Result<()> {
    let fx = fixture("fwdtoggle", 29200).await?;
    let exposed = fx.expose(json!([])).await.expect(201, None);
    let port = u16::try_from(exposed["port"].as_u64().unwrap())?;
    fx.listening(port, true).await;

    let app_path = format!("/apps/{}", fx.app_id);
    let toggle = |on: bool| {
        fx.api.call(
            Method::PATCH,
            &app_path,
            Some(&fx.user.token),
            Some(json!({"port_forwarding_enabled": on})),
        )
    };
    toggle(false).await.expect(200, None);
    fx.listening(port, false).await;
    let listed = fx.list_until_active(false).await;
    assert_eq!(listed["forwards"][0]["port"], exposed["port"]);
    toggle(true).await.expect(200, None);
    fx.listening(port, true).await;
    fx.list_until_active(true).await;

    // A new operator (a restart, or another replica taking the lead) keeps the allocation, and the edge serves on.
    fx.operator.abort();
    let _restarted = fx
        .api
        .start_operator_with_forwards(&fx.user.namespace, fx.ports.clone())
        .await?;
    let mut conn = connect_from(Ipv4Addr::new(127, 0, 0, 1), port).await?;
    assert_eq!(
        echo_through(&mut conn, b"across a restart").await?,
        b"across a restart"
    );
    // A Forward written with kubectl for another channel gets the next address, and the channel as its owner.
    let next = fx
        .api
        .post(
            &format!("/apps/{}/channels", fx.app_id),
            &fx.user,
            json!({"name": "next", "git_ref_binding": "branch:next"}),
        )
        .await
        .expect(200, None);
    let forwards: Api<Forward> = Api::namespaced(fx.api.kube.clone(), &fx.user.namespace);
    forwards
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "slipway.dev/v1alpha1", "kind": "Forward",
                "metadata": {"name": "by-hand"},
                "spec": {"channel": "tcp.next", "allowCidrs": ["10.0.0.0/8"]},
            }))?,
        )
        .await?;
    let deadline = tokio::time::Instant::now() + WITHIN;
    let by_hand = loop {
        let f = forwards.get("by-hand").await?;
        if f.status.as_ref().is_some_and(|s| s.port.is_some())
            && !f
                .metadata
                .owner_references
                .clone()
                .unwrap_or_default()
                .is_empty()
        {
            break f;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the kubectl Forward was never allocated: {f:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        by_hand.status.as_ref().unwrap().port,
        Some(i32::from(port) + 1),
        "the restarted operator continues after the newest allocation"
    );
    assert_eq!(
        by_hand.metadata.owner_references.unwrap()[0].uid,
        next["id"].as_str().unwrap()
    );
    let listed = fx
        .list_until(
            |listed| listed["forwards"].as_array().is_some_and(|f| f.len() == 2),
            "both forwards",
        )
        .await;
    let channels: Vec<&str> = listed["forwards"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["channel"].as_str().unwrap())
        .collect();
    assert_eq!(channels, ["next", "prod"], "channel-name order");
    Ok(())
}

/// The operator's reconcile of a Forward read before an unexpose can finish after the next expose created a new
/// Forward of the same name: what it computed from its stale copy (the old address) must not land on the new one,
/// which gets an address of its own.
#[tokio::test]
async fn a_stale_copy_of_an_unexposed_forward_never_lends_its_address_to_the_next() -> Result<()> {
    let api = TestApi::start().await?;
    let user = api.user("fwdstale", "builder").await?;
    api.create_app(&user, "tcp", "app").await;
    let ports: ForwardPorts = "127.0.0.1:29300-29309".parse().unwrap();
    let ctx = api.forward_context(&user.namespace, ports).await?;
    let forwards: Api<Forward> = Api::namespaced(api.kube.clone(), &user.namespace);
    let expose = || async {
        let resource: Forward = serde_json::from_value(json!({
            "apiVersion": "slipway.dev/v1alpha1", "kind": "Forward",
            "metadata": {"name": "tcp.prod"}, "spec": {"channel": "tcp.prod", "allowCidrs": []},
        }))?;
        let created = forwards.create(&PostParams::default(), &resource).await?;
        slipway_controllers::forward::reconcile(Arc::new(created), ctx.clone()).await?;
        anyhow::Ok(forwards.get("tcp.prod").await?)
    };
    let port_of = |f: &Forward| f.status.as_ref().and_then(|s| s.port);

    let first = expose().await?;
    assert_eq!(port_of(&first), Some(29300), "{first:?}");
    // An allowlist change: the copy the operator's cache then holds has a status to bring up to date.
    let changed = forwards
        .patch(
            "tcp.prod",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"allowCidrs": ["10.0.0.0/8"]}})),
        )
        .await?;
    forwards
        .delete("tcp.prod", &DeleteParams::default())
        .await?;
    let second = expose().await?;
    assert_eq!(port_of(&second), Some(29301), "{second:?}");

    // The late reconcile of the first Forward's copy writes nothing onto the second.
    slipway_controllers::forward::reconcile(Arc::new(changed), ctx.clone()).await?;
    let after = forwards.get("tcp.prod").await?;
    assert_eq!(after.metadata.uid, second.metadata.uid);
    assert_eq!(port_of(&after), Some(29301), "{after:?}");
    Ok(())
}

#[tokio::test]
async fn exposing_refuses_static_channels_plans_without_it_a_toggle_off_and_bad_allowlists()
-> Result<()> {
    let api = TestApi::start().await?;
    let paid = api.user("fwdpaid", "builder").await?;
    let basic = api.user("fwdbasic", "basic").await?;
    let expose = |user: &User, app: &Value, body: Option<Value>| {
        let path = format!(
            "/apps/{}/channels/{}/forward",
            app["id"].as_str().unwrap(),
            app["channels"][0]["id"].as_str().unwrap()
        );
        let token = user.token.clone();
        let api = &api;
        async move { api.call(Method::POST, &path, Some(&token), body).await }
    };
    let site = api.create_app(&paid, "site", "static").await;
    let reply = expose(&paid, &site, None)
        .await
        .expect(400, Some("bad_request"));
    assert!(
        reply["error"]["message"]
            .as_str()
            .unwrap()
            .contains("static"),
        "{reply}"
    );

    let cheap = api.create_app(&basic, "cheap", "app").await;
    let reply = expose(&basic, &cheap, None)
        .await
        .expect(403, Some("plan_limit_exceeded"));
    assert!(
        reply["error"]["message"]
            .as_str()
            .unwrap()
            .contains("basic"),
        "{reply}"
    );

    let tcp = api.create_app(&paid, "tcp", "app").await;
    let reply = expose(&paid, &tcp, Some(json!({})))
        .await
        .expect(409, Some("conflict"));
    assert!(
        reply["error"]["message"]
            .as_str()
            .unwrap()
            .contains("port_forwarding_enabled"),
        "{reply}"
    );

    // Turning the toggle on is a protected action: an agent credential is refused until agent access is on.
    let agent = api
        .token(paid.id, &slipway_auth::scopes::default_scopes(), true, None)
        .await?;
    let toggle = json!({"port_forwarding_enabled": true});
    let app_path = format!("/apps/{}", tcp["id"].as_str().unwrap());
    api.call(Method::PATCH, &app_path, Some(&agent), Some(toggle.clone()))
        .await
        .expect(403, Some("protected_action"));
    api.call(Method::PATCH, &app_path, Some(&paid.token), Some(toggle))
        .await
        .expect(200, None);

    let seventeen: Vec<String> = (0..17).map(|i| format!("10.0.{i}.0/24")).collect();
    for bad in [
        json!({"allow_cidrs": seventeen}),
        json!({"allow_cidrs": ["10.0.0.0/33"]}),
        json!({"allow_cidrs": ["example.com"]}),
        json!({"allow_cidrs": ["2001:db8::/129"]}),
        json!({"allow_cidrs": "10.0.0.0/8"}),
        json!({"allow": []}),
    ] {
        expose(&paid, &tcp, Some(bad.clone()))
            .await
            .expect(400, Some("bad_request"));
    }
    // Nothing was recorded by any refusal.
    let forwards: Api<Forward> = Api::namespaced(api.kube.clone(), &paid.namespace);
    assert!(forwards.list(&Default::default()).await?.items.is_empty());
    let missing = format!(
        "/apps/{}/channels/{}/forward",
        tcp["id"].as_str().unwrap(),
        uuid::Uuid::new_v4()
    );
    api.call(Method::POST, &missing, Some(&paid.token), Some(json!({})))
        .await
        .expect(404, Some("not_found"));
    api.call(Method::DELETE, &missing, Some(&paid.token), None)
        .await
        .expect(404, Some("not_found"));
    Ok(())
}
