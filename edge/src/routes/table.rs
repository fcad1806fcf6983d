//! The routing table itself: how each host is served, and the lookup by the host a request names.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::metrics::HostMetrics;
use crate::site::SiteKey;

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
