//! The routing rules, each shown on objects as the cluster would hold them.

use super::*;
use crate::metrics::HostMetrics;
use crate::site::SiteKey;
use serde_json::json;

fn obj<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> Arc<T> {
    Arc::new(serde_json::from_value(value).unwrap())
}

fn ingress(name: &str, host: &str, backend: serde_json::Value, created: &str) -> Arc<Ingress> {
    obj(json!({
        "metadata": {"name": name, "namespace": "ns", "creationTimestamp": created,
            "ownerReferences": [{"apiVersion": "slipway.dev/v1alpha1", "kind": "Channel", "name": name,
                "uid": format!("uid-{name}"), "controller": true}]},
        "spec": {"ingressClassName": "slipway", "rules": [{"host": host, "http": {"paths": [
            {"path": "/", "pathType": "Prefix", "backend": backend}]}}]}
    }))
}

fn channel(name: &str, status: serde_json::Value) -> Arc<Channel> {
    let app = name.split('.').next().unwrap();
    obj(
        json!({"apiVersion": "slipway.dev/v1alpha1", "kind": "Channel",
        "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}")},
        "spec": {"app": app, "gitRefBinding": "branch:master"}, "status": status}),
    )
}

fn app(name: &str, uid: &str) -> Arc<App> {
    obj(json!({"apiVersion": "slipway.dev/v1alpha1", "kind": "App",
        "metadata": {"name": name, "namespace": "ns", "uid": uid},
        "spec": {"owner": "alice", "template": "app"}}))
}

fn service(name: &str) -> Arc<Service> {
    obj(json!({"metadata": {"name": name, "namespace": "ns"},
        "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}]}}))
}

fn slice(service: &str, endpoints: serde_json::Value) -> Arc<EndpointSlice> {
    obj(
        json!({"metadata": {"name": format!("{service}-x"), "namespace": "ns",
            "labels": {"kubernetes.io/service-name": service,
                "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080}],
        "endpoints": endpoints}),
    )
}

const SHA: &str = "0123456789abcdef0123456789abcdef01234567";
const T0: &str = "2026-01-01T00:00:00Z";

fn resource(name: &str) -> serde_json::Value {
    json!({"resource": {"apiGroup": "slipway.dev", "kind": "Channel", "name": name}})
}

fn service_backend(name: &str) -> serde_json::Value {
    json!({"service": {"name": name, "port": {"name": "http"}}})
}

#[test]
fn a_static_channel_is_served_from_its_current_commit() {
    let objects = Objects::new(
        vec![
            ingress(
                "site.prod",
                "site-alice.apps.test",
                resource("site.prod"),
                T0,
            ),
            ingress(
                "site.next",
                "next-site-alice.apps.test",
                resource("site.next"),
                T0,
            ),
        ],
        vec![
            channel(
                "site.prod",
                json!({"currentSha": SHA, "hostname": "site-alice.apps.test"}),
            ),
            channel(
                "site.next",
                json!({"hostname": "next-site-alice.apps.test"}),
            ),
        ],
        vec![app("site", "uid-site")],
        vec![],
        vec![],
    );
    let t = routing(&objects).targets;
    assert_eq!(
        t["site-alice.apps.test"],
        Target::Static(SiteKey {
            app_id: "uid-site".into(),
            sha: SHA.into()
        })
    );
    assert_eq!(t["next-site-alice.apps.test"], Target::NotDeployed);
}

#[test]
fn a_dynamic_channel_goes_to_its_ready_endpoints_on_the_http_port() {
    let objects = Objects::new(
        vec![ingress(
            "web.prod",
            "Web-Alice.apps.test",
            service_backend("web-prod"),
            T0,
        )],
        vec![channel(
            "web.prod",
            json!({"readyBy": "http", "hostname": "web-alice.apps.test"}),
        )],
        vec![app("web", "uid-web")],
        vec![service("web-prod")],
        vec![slice(
            "web-prod",
            json!([
                {"addresses": ["10.244.0.7"], "conditions": {"ready": true}},
                {"addresses": ["10.244.0.8"], "conditions": {"ready": false}},
                {"addresses": ["10.244.0.9"]}
            ]),
        )],
    );
    let t = routing(&objects).targets;
    let Target::Proxy(up) = &t["web-alice.apps.test"] else {
        panic!("{:?}", t);
    };
    let want: Vec<SocketAddr> = vec![
        "10.244.0.7:8080".parse().unwrap(),
        "10.244.0.9:8080".parse().unwrap(),
    ];
    assert_eq!(up.addrs(), &want[..]);
    let picks: Vec<_> = (0..4).map(|_| up.pick().unwrap()).collect();
    assert_eq!(picks, [want[0], want[1], want[0], want[1]], "round robin");
}

#[test]
fn a_ready_file_channel_answers_502_and_one_without_endpoints_503() {
    let objects = Objects::new(
        vec![
            ingress(
                "worker.prod",
                "worker.apps.test",
                service_backend("worker-prod"),
                T0,
            ),
            ingress("web.prod", "web.apps.test", service_backend("web-prod"), T0),
            ingress(
                "gone.prod",
                "gone.apps.test",
                service_backend("gone-prod"),
                T0,
            ),
        ],
        vec![
            channel(
                "worker.prod",
                json!({"readyBy": "file", "hostname": "worker.apps.test"}),
            ),
            channel("web.prod", json!({"hostname": "web.apps.test"})),
            channel("gone.prod", json!({"hostname": "gone.apps.test"})),
        ],
        vec![],
        vec![service("worker-prod"), service("web-prod")],
        vec![
            slice("worker-prod", json!([{"addresses": ["10.244.0.7"]}])),
            slice(
                "web-prod",
                json!([{"addresses": ["10.244.0.8"], "conditions": {"ready": false}}]),
            ),
        ],
    );
    let t = routing(&objects).targets;
    assert_eq!(t["worker.apps.test"], Target::ReadyFile);
    assert_eq!(t["web.apps.test"], Target::NoEndpoints);
    assert_eq!(t["gone.apps.test"], Target::NoEndpoints, "missing Service");
}

#[test]
fn other_classes_are_ignored_and_the_oldest_ingress_keeps_a_host() {
    let mut foreign = (*ingress("a.prod", "a.apps.test", resource("a.prod"), T0)).clone();
    foreign.spec.as_mut().unwrap().ingress_class_name = Some("nginx".into());
    let objects = Objects::new(
        vec![
            Arc::new(foreign),
            ingress(
                "late.prod",
                "dup.apps.test",
                resource("late.prod"),
                "2026-02-01T00:00:00Z",
            ),
            ingress("early.prod", "dup.apps.test", resource("early.prod"), T0),
        ],
        vec![
            channel(
                "early.prod",
                json!({"currentSha": SHA, "hostname": "dup.apps.test"}),
            ),
            channel("late.prod", json!({"hostname": "dup.apps.test"})),
        ],
        vec![app("early", "uid-early")],
        vec![],
        vec![],
    );
    let t = routing(&objects).targets;
    assert!(!t.contains_key("a.apps.test"));
    assert!(matches!(&t["dup.apps.test"], Target::Static(k) if k.app_id == "uid-early"));
}

#[test]
fn hosts_match_without_case_or_port() {
    let table = RouteTable::new([Route {
        host: "a.apps.test".into(),
        target: Target::NotDeployed,
        metrics: Arc::new(HostMetrics::detached()),
        bandwidth: None,
    }]);
    for host in [
        "a.apps.test",
        "A.Apps.Test",
        "a.apps.test:8080",
        "a.apps.test.",
    ] {
        assert!(table.get(host).is_some(), "{host}");
    }
    assert!(table.get("b.apps.test").is_none());
    assert_eq!(strip_port("[::1]:80"), "::1");
}

#[test]
fn a_hot_static_host_moves_to_a_new_commit_once_it_is_loaded_and_a_cold_one_at_once() {
    let site = |sha: &str| SiteKey {
        app_id: "a".into(),
        sha: sha.into(),
    };
    let old = Target::Static(site("old"));
    // Hot: the old commit is cached, the new one is loaded before the host moves.
    let cached_old = |k: &SiteKey| k.sha == "old";
    let (serve, load) = settle(Target::Static(site("new")), Some(&old), cached_old);
    assert_eq!(
        (serve, load),
        (Target::Static(site("old")), Some(site("new")))
    );
    let cached_both = |_: &SiteKey| true;
    let (serve, load) = settle(Target::Static(site("new")), Some(&old), cached_both);
    assert_eq!((serve, load), (Target::Static(site("new")), None));
    // Cold: nothing to keep serving, nothing loaded ahead.
    let (serve, load) = settle(Target::Static(site("new")), Some(&old), |_| false);
    assert_eq!((serve, load), (Target::Static(site("new")), None));
    // A new host, or one that stays on its commit, loads nothing.
    let (serve, load) = settle(Target::Static(site("new")), None, |_| false);
    assert_eq!((serve, load), (Target::Static(site("new")), None));
    let (serve, load) = settle(Target::Static(site("old")), Some(&old), |_| false);
    assert_eq!((serve, load), (Target::Static(site("old")), None));
    let (serve, load) = settle(Target::ReadyFile, Some(&old), cached_old);
    assert_eq!((serve, load), (Target::ReadyFile, None));
}

#[test]
fn public_s3_endpoints_follow_the_apps_toggle() {
    let open = obj::<App>(json!({"apiVersion": "slipway.dev/v1alpha1", "kind": "App",
        "metadata": {"name": "blog", "namespace": "ns", "uid": "u1"},
        "spec": {"owner": "alice", "externalBlobAccessEnabled": true}}));
    let closed = app("site", "u2");
    let objects = Objects::new(
        vec![],
        vec![
            channel("blog.prod", json!({"hostname": "blog-alice.apps.test"})),
            channel("blog.next", json!({})),
            channel("site.prod", json!({"hostname": "site-alice.apps.test"})),
        ],
        vec![open, closed],
        vec![],
        vec![],
    );
    let gateway: SocketAddr = "10.0.0.1:7480".parse().unwrap();
    let targets = object_store_targets(&objects, gateway);
    assert_eq!(
        targets.keys().map(String::as_str).collect::<Vec<_>>(),
        ["blog-alice.s3.apps.test"],
        "only channels with a hostname, of apps with the toggle on"
    );
    assert_eq!(
        targets["blog-alice.s3.apps.test"],
        Target::ObjectStore(Upstreams::new(vec![gateway]))
    );
}

fn domain(name: &str, channel: &str, host: &str, phase: &str) -> Arc<Domain> {
    obj(
        json!({"apiVersion": "slipway.dev/v1alpha1", "kind": "Domain",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"domain": host, "channel": channel}, "status": {"phase": phase}}),
    )
}

#[test]
fn only_the_operators_ingress_of_a_channel_for_its_own_hosts_and_backend_is_routed() {
    let with_owner = |name: &str, owner: serde_json::Value, host: &str, backend| {
        let mut value = serde_json::to_value(ingress(name, host, backend, T0)).unwrap();
        value["metadata"]["ownerReferences"] = json!([owner]);
        obj::<Ingress>(value)
    };
    let owner = |name: &str, uid: &str| {
        json!({"apiVersion": "slipway.dev/v1alpha1", "kind": "Channel", "name": name, "uid": uid,
            "controller": true})
    };
    // The channel's own Ingress, with one more rule for a host that is not the channel's.
    let mut own = serde_json::to_value(ingress(
        "web.prod",
        "web-alice.apps.test",
        service_backend("web-prod"),
        T0,
    ))
    .unwrap();
    let extra = json!({"host": "victim-bob.apps.test", "http": {"paths": [
        {"path": "/", "pathType": "Prefix", "backend": service_backend("web-prod")}]}});
    own["spec"]["rules"].as_array_mut().unwrap().push(extra);
    let mut no_owner = serde_json::to_value(ingress(
        "squat",
        "site-alice.apps.test",
        resource("site.prod"),
        T0,
    ))
    .unwrap();
    no_owner["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("ownerReferences");
    let objects = Objects::new(
        vec![
            obj(own),
            obj(no_owner),
            // Owned by the channel in name only (another uid): a channel deleted and made again, or a forgery.
            with_owner(
                "site.prod",
                owner("site.prod", "uid-other"),
                "site-alice.apps.test",
                resource("site.prod"),
            ),
            // Named otherwise than its Channel.
            with_owner(
                "extra",
                owner("web.next", "uid-web.next"),
                "next-web-alice.apps.test",
                service_backend("web-next"),
            ),
            // The channel's Ingress pointing elsewhere: another channel's files, a Service not the channel's.
            ingress(
                "blog.prod",
                "blog-alice.apps.test",
                resource("site.prod"),
                T0,
            ),
            ingress("api.prod", "api-alice.apps.test", service_backend("db"), T0),
        ],
        vec![
            channel("web.prod", json!({"hostname": "web-alice.apps.test"})),
            channel("web.next", json!({"hostname": "next-web-alice.apps.test"})),
            channel(
                "site.prod",
                json!({"hostname": "site-alice.apps.test", "currentSha": SHA}),
            ),
            channel("blog.prod", json!({"hostname": "blog-alice.apps.test"})),
            channel("api.prod", json!({"hostname": "api-alice.apps.test"})),
        ],
        vec![app("site", "uid-site")],
        vec![service("web-prod"), service("db")],
        vec![slice("db", json!([{"addresses": ["10.96.0.5"]}]))],
    );
    let routing = routing(&objects);
    assert_eq!(
        routing.targets.keys().collect::<Vec<_>>(),
        ["web-alice.apps.test"]
    );
    assert_eq!(routing.targets["web-alice.apps.test"], Target::NoEndpoints);
    assert_eq!(routing.ignored, 6, "every other rule is counted");
}

#[test]
fn verified_domains_of_the_channel_are_routed_and_no_other() {
    let mut value = serde_json::to_value(ingress(
        "web.prod",
        "web-alice.apps.test",
        service_backend("web-prod"),
        T0,
    ))
    .unwrap();
    for host in ["shop.example", "pending.example", "bob.example"] {
        value["spec"]["rules"]
            .as_array_mut()
            .unwrap()
            .push(json!({"host": host, "http": {"paths": [
                {"path": "/", "pathType": "Prefix", "backend": service_backend("web-prod")}]}}));
    }
    let objects = Objects::new(
        vec![obj(value)],
        vec![
            channel("web.prod", json!({"hostname": "web-alice.apps.test"})),
            channel("other.prod", json!({"hostname": "other-alice.apps.test"})),
        ],
        vec![],
        vec![service("web-prod")],
        vec![],
    )
    .with_domains(&[
        domain("shop", "web.prod", "Shop.Example", "verified"),
        domain("pending", "web.prod", "pending.example", "pending"),
        domain("bob", "other.prod", "bob.example", "verified"),
    ]);
    let routing = routing(&objects);
    assert_eq!(
        routing.targets.keys().collect::<Vec<_>>(),
        ["shop.example", "web-alice.apps.test"]
    );
    assert_eq!(routing.ignored, 2);
}

#[test]
fn endpoints_come_only_from_slices_the_endpointslice_controller_made() {
    let mut forged =
        serde_json::to_value(slice("web-prod", json!([{"addresses": ["10.96.0.1"]}]))).unwrap();
    forged["metadata"]["name"] = json!("web-prod-forged");
    forged["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"] = json!("alice");
    let objects = Objects::new(
        vec![ingress(
            "web.prod",
            "web-alice.apps.test",
            service_backend("web-prod"),
            T0,
        )],
        vec![channel(
            "web.prod",
            json!({"hostname": "web-alice.apps.test"}),
        )],
        vec![],
        vec![service("web-prod")],
        vec![
            obj(forged),
            slice("web-prod", json!([{"addresses": ["10.244.0.7"]}])),
        ],
    );
    let Target::Proxy(up) = &routing(&objects).targets["web-alice.apps.test"] else {
        panic!("no proxy target");
    };
    assert_eq!(
        up.addrs(),
        &["10.244.0.7:8080".parse::<SocketAddr>().unwrap()][..]
    );
}
