//! The routing table: which host is served how. Built from Ingresses of class `slipway` and what they name
//! (Channels and Apps for static sites; Services and EndpointSlices for dynamic channels) by a pure function, so
//! every rule is tested without a cluster; [`super::watch`] rebuilds it whenever one of those objects changes.
//!
//! Rules: hosts are matched case-insensitively and without port; a host named by several Ingresses goes to the
//! oldest one (then by namespace and name), as other controllers do; each host has one backend, the one of its
//! rule's first path (slipway writes a single `/` prefix path per channel).
//!
//! Trust: the IngressClass is not a boundary (anyone who may write an Ingress may name it), so a rule is routed
//! only when it is what slipway's operator writes for a Channel ([`slipway_controllers::ingress::build`]): the
//! Ingress is named like the Channel and controlled by it (owner reference with the Channel's uid), its host is
//! the channel's hostname or one of its verified Domains, and its backend is the Channel itself (static) or the
//! channel's own Service. Anything else is left out and counted ([`Routing::ignored`]). Endpoints come only from
//! EndpointSlices the cluster's EndpointSlice controller made from a Service's selector, so a hand-written slice
//! cannot point the edge at an address of its author's choosing.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressBackend};
use kube::ResourceExt;
use slipway_crds::{App, Channel, Domain, DomainPhase, ReadyBy, names};

use super::metrics::HostMetrics;
use super::site::SiteKey;

/// The IngressClass the edge serves.
pub use slipway_crds::labels::INGRESS_CLASS;
/// The API group a resource backend naming a Channel carries.
const CHANNEL_API_GROUP: &str = "slipway.dev";
/// The annotation older Ingresses name their class with.
const CLASS_ANNOTATION: &str = "kubernetes.io/ingress.class";
/// The label EndpointSlices carry naming their Service.
const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// The label naming who manages an EndpointSlice, and the value the cluster's EndpointSlice controller sets.
const SLICE_MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
const SLICE_CONTROLLER: &str = "endpointslice-controller.k8s.io";

/// How a host is served.
#[derive(Debug)]
pub enum Target {
    /// The files of this commit of a static channel.
    Static(SiteKey),
    /// A static channel that has no deployed commit: 404.
    NotDeployed,
    /// Proxied to one of these ready endpoints.
    Proxy(Upstreams),
    /// A dynamic channel without a ready endpoint (or whose Service is missing): 503.
    NoEndpoints,
    /// A dynamic channel that passed readiness on the ready file: 502.
    ReadyFile,
    /// A channel's public S3 endpoint, proxied to the gateway whole (no path is the edge's own).
    ObjectStore(Upstreams),
}

/// Ready endpoints of a Service, taken in turn.
#[derive(Debug)]
pub struct Upstreams {
    addrs: Vec<SocketAddr>,
    next: AtomicUsize,
}

impl Upstreams {
    /// Endpoints to take in turn (deduplicated, in a stable order). Empty lists are [`Target::NoEndpoints`].
    pub fn new(mut addrs: Vec<SocketAddr>) -> Self {
        addrs.sort();
        addrs.dedup();
        Self {
            addrs,
            next: AtomicUsize::new(0),
        }
    }

    /// The next endpoint, round robin.
    pub fn pick(&self) -> Option<SocketAddr> {
        if self.addrs.is_empty() {
            return None;
        }
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        self.addrs.get(i % self.addrs.len()).copied()
    }

    /// All endpoints.
    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }
}

impl PartialEq for Target {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Target::Static(a), Target::Static(b)) => a == b,
            (Target::Proxy(a), Target::Proxy(b)) => a.addrs == b.addrs,
            (Target::ObjectStore(a), Target::ObjectStore(b)) => a.addrs == b.addrs,
            (Target::NotDeployed, Target::NotDeployed)
            | (Target::NoEndpoints, Target::NoEndpoints)
            | (Target::ReadyFile, Target::ReadyFile) => true,
            _ => false,
        }
    }
}

/// A host, how it is served, and its metrics.
pub struct Route {
    /// The host (lowercase).
    pub host: String,
    /// How it is served.
    pub target: Target,
    /// Its request metrics.
    pub metrics: Arc<HostMetrics>,
    /// The byte counter of the account that owns it.
    pub bandwidth: Option<Arc<std::sync::atomic::AtomicU64>>,
}

/// Every served host. Immutable: a change is a new table, swapped in whole.
#[derive(Default)]
pub struct RouteTable {
    routes: HashMap<String, Arc<Route>>,
}

impl RouteTable {
    /// A table of `routes`.
    pub fn new(routes: impl IntoIterator<Item = Route>) -> Self {
        Self {
            routes: routes
                .into_iter()
                .map(|r| (r.host.clone(), Arc::new(r)))
                .collect(),
        }
    }

    /// The route of `host` as the request named it (any case, with or without a port).
    pub fn get(&self, host: &str) -> Option<&Arc<Route>> {
        let host = strip_port(host);
        if host.bytes().any(|b| b.is_ascii_uppercase()) {
            return self.routes.get(&host.to_ascii_lowercase());
        }
        self.routes.get(host)
    }

    /// Every route.
    pub fn routes(&self) -> impl Iterator<Item = &Arc<Route>> {
        self.routes.values()
    }

    /// Number of hosts.
    pub fn len(&self) -> usize {
        self.routes.len()
    }

    /// Whether no host is served.
    pub fn is_empty(&self) -> bool {
        self.routes.is_empty()
    }
}

/// A request's host as the tables key it: lowercase, without port or trailing dot.
pub fn normalize_host(host: &str) -> String {
    strip_port(host).to_ascii_lowercase()
}

/// `host` without a port (and brackets of an IPv6 literal) or a trailing dot; case is left as sent.
pub fn strip_port(host: &str) -> &str {
    if host.starts_with('[') {
        return host.split_once(']').map_or(host, |(h, _)| &h[1..]);
    }
    match host.rsplit_once(':') {
        Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => host,
    }
    .trim_end_matches('.')
}

/// The cluster objects the table is built from.
#[derive(Default)]
pub struct Objects {
    ingresses: Vec<Arc<Ingress>>,
    channels: HashMap<(String, String), Arc<Channel>>,
    apps: HashMap<(String, String), Arc<App>>,
    services: HashMap<(String, String), Arc<Service>>,
    slices: HashMap<(String, String), Vec<Arc<EndpointSlice>>>,
    /// Verified custom domains (lowercase) by the namespace and name of their Channel.
    domains: HashMap<(String, String), Vec<String>>,
}

fn key<K: kube::Resource>(obj: &K) -> (String, String) {
    (obj.namespace().unwrap_or_default(), obj.name_any())
}

impl Objects {
    /// Indexes the objects by namespace and name (slices by their Service, Domains by their Channel). Slices the
    /// EndpointSlice controller did not make, and Domains that are not verified, are left out here.
    pub fn new(
        ingresses: Vec<Arc<Ingress>>,
        channels: Vec<Arc<Channel>>,
        apps: Vec<Arc<App>>,
        services: Vec<Arc<Service>>,
        slices: Vec<Arc<EndpointSlice>>,
    ) -> Self {
        let mut by_service: HashMap<(String, String), Vec<Arc<EndpointSlice>>> = HashMap::new();
        for slice in slices {
            let labels = slice.labels();
            if labels.get(SLICE_MANAGED_BY_LABEL).map(String::as_str) != Some(SLICE_CONTROLLER) {
                continue;
            }
            if let Some(service) = labels.get(SERVICE_NAME_LABEL) {
                by_service
                    .entry((slice.namespace().unwrap_or_default(), service.clone()))
                    .or_default()
                    .push(slice);
            }
        }
        Self {
            ingresses,
            channels: channels.into_iter().map(|c| (key(c.as_ref()), c)).collect(),
            apps: apps.into_iter().map(|a| (key(a.as_ref()), a)).collect(),
            services: services.into_iter().map(|s| (key(s.as_ref()), s)).collect(),
            slices: by_service,
            domains: HashMap::new(),
        }
    }

    /// These Domains: the verified ones are hosts their Channel's Ingress may route.
    pub fn with_domains(mut self, domains: &[Arc<Domain>]) -> Self {
        for domain in domains {
            let verified = domain.metadata.deletion_timestamp.is_none()
                && domain.status.as_ref().map(|s| s.phase) == Some(DomainPhase::Verified);
            if verified {
                self.domains
                    .entry((
                        domain.namespace().unwrap_or_default(),
                        domain.spec.channel.clone(),
                    ))
                    .or_default()
                    .push(
                        domain
                            .spec
                            .domain
                            .trim_end_matches('.')
                            .to_ascii_lowercase(),
                    );
            }
        }
        self
    }
}

/// Whether the edge serves this Ingress.
pub fn is_ours(ingress: &Ingress) -> bool {
    let by_field = ingress
        .spec
        .as_ref()
        .and_then(|s| s.ingress_class_name.as_deref());
    let by_annotation = ingress
        .annotations()
        .get(CLASS_ANNOTATION)
        .map(String::as_str);
    by_field.or(by_annotation) == Some(INGRESS_CLASS)
}

/// A rule the edge routes: its host, the Channel whose Ingress names it, and its backend.
struct TrustedRule<'a> {
    host: String,
    ingress: &'a Ingress,
    channel: &'a Arc<Channel>,
    backend: &'a IngressBackend,
}

/// What the Ingresses of class `slipway` route, and how many of their rules are left out as untrusted.
pub struct Routing {
    /// How each routed host is served.
    pub targets: BTreeMap<String, Target>,
    /// The account each routed host belongs to (the owner of its Ingress's user namespace).
    pub owners: HashMap<String, String>,
    /// Rules not routed: not the operator's Ingress of a Channel, a host that is not the channel's, or a backend
    /// that is not the channel's.
    pub ignored: usize,
}

/// How every host the edge trusts is served, by host (see the module docs for what is trusted).
pub fn routing(objects: &Objects) -> Routing {
    let (rules, ignored) = trusted_rules(objects);
    let mut targets = BTreeMap::new();
    let mut owners = HashMap::new();
    for rule in rules {
        if targets.contains_key(&rule.host) {
            continue;
        }
        let namespace = rule.ingress.namespace().unwrap_or_default();
        if let Some(owner) = namespace_owner(&namespace) {
            owners.insert(rule.host.clone(), owner.to_owned());
        }
        let target = backend_target(objects, rule.channel, &namespace, rule.backend);
        targets.insert(rule.host, target);
    }
    for ((namespace, _), channel) in &objects.channels {
        if let (Some(owner), Some(host)) = (namespace_owner(namespace), public_s3_host(channel)) {
            owners.insert(host, owner.to_owned());
        }
    }
    Routing {
        targets,
        owners,
        ignored,
    }
}

/// The rules of the edge's Ingresses that slipway's operator wrote for a Channel, oldest Ingress first (then by
/// namespace and name), and the count of the other rules.
fn trusted_rules(objects: &Objects) -> (Vec<TrustedRule<'_>>, usize) {
    let mut ingresses: Vec<&Arc<Ingress>> =
        objects.ingresses.iter().filter(|i| is_ours(i)).collect();
    ingresses.sort_by_key(|i| {
        (
            i.metadata.creation_timestamp.clone().map(|t| t.0),
            i.namespace(),
            i.name_any(),
        )
    });
    let mut trusted = Vec::new();
    let mut ignored = 0;
    for ingress in ingresses {
        let channel = ingress_channel(objects, ingress);
        for rule in ingress.spec.iter().flat_map(|s| s.rules.iter().flatten()) {
            let (Some(host), Some(http)) = (&rule.host, &rule.http) else {
                continue;
            };
            let host = host.trim_end_matches('.').to_ascii_lowercase();
            let Some(path) = http.paths.first() else {
                continue;
            };
            match channel {
                Some(channel)
                    if channel_hosts(objects, channel).any(|h| h == host)
                        && is_channels_backend(channel, &path.backend) =>
                {
                    trusted.push(TrustedRule {
                        host,
                        ingress,
                        channel,
                        backend: &path.backend,
                    });
                }
                _ => ignored += 1,
            }
        }
    }
    (trusted, ignored)
}

/// The Channel this Ingress is the operator's Ingress of: it is named like the Channel and controlled by it.
fn ingress_channel<'a>(objects: &'a Objects, ingress: &Ingress) -> Option<&'a Arc<Channel>> {
    let name = ingress.name_any();
    let owner = ingress
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true))?;
    let is_channel = owner.kind == "Channel"
        && owner
            .api_version
            .starts_with(&format!("{CHANNEL_API_GROUP}/"))
        && owner.name == name;
    if !is_channel {
        return None;
    }
    let channel = objects
        .channels
        .get(&(ingress.namespace().unwrap_or_default(), name))?;
    (channel.metadata.uid.as_deref() == Some(owner.uid.as_str())).then_some(channel)
}

/// The hosts a channel may be reached at: its hostname and its verified custom domains (lowercase).
fn channel_hosts<'a>(
    objects: &'a Objects,
    channel: &'a Channel,
) -> impl Iterator<Item = String> + 'a {
    let hostname = channel
        .status
        .as_ref()
        .and_then(|s| s.hostname.as_deref())
        .map(|h| h.trim_end_matches('.').to_ascii_lowercase());
    let domains = objects
        .domains
        .get(&key(channel))
        .into_iter()
        .flatten()
        .cloned();
    hostname.into_iter().chain(domains)
}

/// Whether `backend` is what the operator points a channel's Ingress at: the Channel itself, or its Service.
fn is_channels_backend(channel: &Channel, backend: &IngressBackend) -> bool {
    let name = channel.name_any();
    match (&backend.resource, &backend.service) {
        (Some(resource), None) => {
            resource.kind == "Channel"
                && resource.api_group.as_deref() == Some(CHANNEL_API_GROUP)
                && resource.name == name
        }
        (None, Some(service)) => service.name == names::workload_name(&name),
        _ => false,
    }
}

/// The public S3 endpoints, `<channel hostname label>.s3.<app domain>`, of every channel whose app has external
/// object-store access on, all forwarded to the gateway at `gateway`. A channel without a hostname yet, or of an
/// app with the toggle off, has none, so the toggle opens and closes the endpoint with the next table.
pub fn object_store_targets(objects: &Objects, gateway: SocketAddr) -> BTreeMap<String, Target> {
    let mut out = BTreeMap::new();
    for ((namespace, _), channel) in &objects.channels {
        let open = objects
            .apps
            .get(&(namespace.clone(), channel.spec.app.clone()))
            .is_some_and(|app| app.spec.external_blob_access_enabled);
        if let (true, Some(host)) = (open, public_s3_host(channel)) {
            out.insert(host, Target::ObjectStore(Upstreams::new(vec![gateway])));
        }
    }
    out
}

/// The label under the app domain that the public S3 endpoints live under: `<hostname label>.s3.<app domain>`.
pub const PUBLIC_S3_LABEL: &str = "s3";

/// A channel's public S3 endpoint host, `<hostname label>.s3.<app domain>` (lowercase), once it has a hostname.
fn public_s3_host(channel: &Channel) -> Option<String> {
    let hostname = channel.status.as_ref()?.hostname.as_deref()?;
    let (label, domain) = hostname.split_once('.')?;
    Some(format!("{label}.{PUBLIC_S3_LABEL}.{domain}").to_ascii_lowercase())
}

/// The account a user namespace belongs to.
fn namespace_owner(namespace: &str) -> Option<&str> {
    namespace.strip_prefix(slipway_crds::labels::USER_NAMESPACE_PREFIX)
}

fn backend_target(
    objects: &Objects,
    channel: &Channel,
    namespace: &str,
    backend: &IngressBackend,
) -> Target {
    if backend.resource.is_some() {
        return static_target(objects, namespace, channel);
    }
    if channel.status.as_ref().and_then(|s| s.ready_by) == Some(ReadyBy::File) {
        return Target::ReadyFile;
    }
    let Some(service) = &backend.service else {
        return Target::NoEndpoints;
    };
    let port = service.port.as_ref();
    let addrs = service_endpoints(
        objects,
        namespace,
        &service.name,
        port.and_then(|p| p.name.as_deref()),
        port.and_then(|p| p.number),
    );
    if addrs.is_empty() {
        Target::NoEndpoints
    } else {
        Target::Proxy(Upstreams::new(addrs))
    }
}

fn static_target(objects: &Objects, namespace: &str, channel: &Channel) -> Target {
    let app = objects
        .apps
        .get(&(namespace.to_owned(), channel.spec.app.clone()));
    let app_id = app.and_then(|a| a.metadata.uid.clone());
    let sha = channel.status.as_ref().and_then(|s| s.current_sha.clone());
    match (app_id, sha) {
        (Some(app_id), Some(sha)) => Target::Static(SiteKey { app_id, sha }),
        _ => Target::NotDeployed,
    }
}

/// Ready endpoints of the port named `port_name` of the Service `service` in `namespace`.
pub fn named_port_endpoints(
    objects: &Objects,
    namespace: &str,
    service: &str,
    port_name: &str,
) -> Vec<SocketAddr> {
    service_endpoints(objects, namespace, service, Some(port_name), None)
}

/// Ready endpoints of the Service port named `port_name` (or numbered `port_number`).
fn service_endpoints(
    objects: &Objects,
    namespace: &str,
    service: &str,
    port_name: Option<&str>,
    port_number: Option<i32>,
) -> Vec<SocketAddr> {
    let key = (namespace.to_owned(), service.to_owned());
    let Some(svc) = objects.services.get(&key) else {
        return Vec::new();
    };
    let ports = svc
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .map(Vec::as_slice)
        .unwrap_or_default();
    let Some(svc_port) = ports.iter().find(|p| match (port_name, port_number) {
        (Some(name), _) => p.name.as_deref() == Some(name),
        (None, Some(number)) => p.port == number,
        (None, None) => ports.len() == 1,
    }) else {
        return Vec::new();
    };
    let wanted = svc_port.name.clone().unwrap_or_default();
    let mut addrs = Vec::new();
    for slice in objects.slices.get(&key).into_iter().flatten() {
        if !matches!(slice.address_type.as_str(), "IPv4" | "IPv6") {
            continue;
        }
        let Some(port) = slice
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.clone().unwrap_or_default() == wanted)
            .and_then(|p| p.port)
            .and_then(|p| u16::try_from(p).ok())
        else {
            continue;
        };
        for endpoint in &slice.endpoints {
            let ready = endpoint
                .conditions
                .as_ref()
                .and_then(|c| c.ready)
                .unwrap_or(true);
            if !ready {
                continue;
            }
            addrs.extend(
                endpoint
                    .addresses
                    .iter()
                    .filter_map(|a| a.parse::<IpAddr>().ok())
                    .map(|ip| SocketAddr::new(ip, port)),
            );
        }
    }
    addrs
}

/// What a host's route should be now, given what the objects say (`wanted`), the route it has (`current`) and
/// whether a site is in the cache. A host always serves one whole commit; when a deploy moves a static host to a
/// new commit:
/// - the new commit is cached: the host moves at once;
/// - the old one is cached (the channel is hot): the host keeps serving it and the new commit is loaded now (the
///   second value), the host moving once it is in, so no visitor waits for the deploy's load;
/// - neither (the channel is cold): the host moves at once, and its next request loads the new commit, as it would
///   have loaded the old one. Nothing is loaded for a host nobody asks for.
pub fn settle(
    wanted: Target,
    current: Option<&Target>,
    cached: impl Fn(&SiteKey) -> bool,
) -> (Target, Option<SiteKey>) {
    let Target::Static(site) = &wanted else {
        return (wanted, None);
    };
    match current {
        Some(Target::Static(old)) if old != site && !cached(site) && cached(old) => {
            (Target::Static(old.clone()), Some(site.clone()))
        }
        _ => (wanted, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
            value["spec"]["rules"].as_array_mut().unwrap().push(
                json!({"host": host, "http": {"paths": [
                    {"path": "/", "pathType": "Prefix", "backend": service_backend("web-prod")}]}}),
            );
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
}
