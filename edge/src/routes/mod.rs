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

mod endpoints;
mod table;
mod trust;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::Ingress;
use kube::ResourceExt;
use slipway_crds::{App, Channel, Domain, DomainPhase};

pub use endpoints::{named_port_endpoints, settle};
/// The IngressClass the edge serves.
pub use slipway_crds::labels::INGRESS_CLASS;
pub use table::{Route, RouteTable, Target, Upstreams, normalize_host, strip_port};
pub use trust::is_ours;

/// The label EndpointSlices carry naming their Service.
const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// The label naming who manages an EndpointSlice, and the value the cluster's EndpointSlice controller sets.
const SLICE_MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
const SLICE_CONTROLLER: &str = "endpointslice-controller.k8s.io";

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
    let (rules, ignored) = trust::trusted_rules(objects);
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
        let target = endpoints::backend_target(objects, rule.channel, &namespace, rule.backend);
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

#[cfg(test)]
mod tests;
