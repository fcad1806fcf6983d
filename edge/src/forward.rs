//! Raw TCP forwarding: a listener per active Forward, on the port the operator allocated, passing bytes unchanged
//! to the channel's ready pods on their `SVC_FORWARD_PORT` (7000). The allowlist is checked when a connection is
//! accepted, before anything is read from it or sent to the app: a peer outside it is closed at once.
//!
//! A Forward that goes away (unexposed) or stops being active closes its listener only: sessions already
//! forwarding keep going until one side ends them (a redeploy replaces the pods, and their connections end with
//! them). A changed allowlist or a new set of pods applies to the next connection, without closing the listener.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use ipnet::IpNet;
use kube::ResourceExt;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;
use slipway_crds::Forward;
use slipway_crds::forward::FORWARD_PORT_NAME;
use slipway_crds::names::{Cidr, workload_name};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use super::routes::{Objects, Upstreams};

/// Longest wait for a pod to accept a forwarded connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Who may connect to one forward.
#[derive(Debug, PartialEq)]
enum Allow {
    /// Anyone: the forward's allowlist is empty.
    Anyone,
    /// The peers in these networks only (none at all when no entry of the list could be read).
    Only(Vec<IpNet>),
}

impl Allow {
    /// The allowlist `nets` as written; empty means anyone.
    fn of(nets: Vec<IpNet>) -> Self {
        if nets.is_empty() {
            Allow::Anyone
        } else {
            Allow::Only(nets)
        }
    }
}

/// Who may connect to one forward, and where its connections go.
#[derive(Debug)]
pub struct Entry {
    /// The allowlist.
    allow: Allow,
    /// The channel's ready pods, on the forward port.
    upstreams: Upstreams,
    /// `<namespace>/<forward>`, for logs.
    name: String,
}

impl Entry {
    /// An entry letting `allow` (empty: anyone) reach `pods`, logged as `name`.
    pub fn new(allow: Vec<IpNet>, pods: Vec<SocketAddr>, name: String) -> Self {
        Self {
            allow: Allow::of(allow),
            upstreams: Upstreams::new(pods),
            name,
        }
    }

    /// Whether `peer` may connect (an IPv4 peer seen as IPv4-mapped IPv6 is judged as IPv4).
    pub fn allows(&self, peer: IpAddr) -> bool {
        let peer = peer.to_canonical();
        match &self.allow {
            Allow::Anyone => true,
            Allow::Only(nets) => nets.iter().any(|net| net.contains(&peer)),
        }
    }
}

/// The allowlist as networks (`Cidr` keeps host bits as written; the network is what is matched). It fails closed:
/// an entry that cannot be read (the API and the CRD refuse one, but a resource may predate a rule) is left out
/// with a warning and never widens the list, so a list of unreadable entries lets nobody in, not anybody.
fn networks(forward: &str, cidrs: &[slipway_crds::forward::Cidr]) -> Allow {
    if cidrs.is_empty() {
        return Allow::Anyone;
    }
    let mut nets = Vec::with_capacity(cidrs.len());
    for written in cidrs {
        match written
            .0
            .parse::<Cidr>()
            .map(|c| IpNet::new(c.addr, c.prefix))
        {
            Ok(Ok(net)) => nets.push(net.trunc()),
            _ => {
                tracing::warn!(%forward, entry = %written.0, "allowlist entry left out: not an address or range")
            }
        }
    }
    Allow::Only(nets)
}

/// The entries active Forwards ask for, by public port.
pub fn entries(forwards: &[Arc<Forward>], objects: &Objects) -> HashMap<u16, Entry> {
    let mut out = HashMap::new();
    for forward in forwards {
        let Some(status) = forward.status.as_ref().filter(|s| s.active) else {
            continue;
        };
        let Some(port) = status.port.and_then(|p| u16::try_from(p).ok()) else {
            continue;
        };
        let namespace = forward.namespace().unwrap_or_default();
        let service = workload_name(&forward.spec.channel);
        let pods =
            super::routes::named_port_endpoints(objects, &namespace, &service, FORWARD_PORT_NAME);
        out.insert(
            port,
            Entry {
                allow: networks(&forward.name_any(), &forward.spec.allow_cidrs),
                upstreams: Upstreams::new(pods),
                name: format!("{namespace}/{}", forward.name_any()),
            },
        );
    }
    out
}

/// Counts of forwarded and refused connections.
#[derive(Clone, Default)]
struct ForwardMetrics {
    accepted: Counter,
    denied: Counter,
    unavailable: Counter,
}

/// The forward listeners of an edge.
pub struct Forwarder {
    /// The address listeners bind (the port is each Forward's).
    host: IpAddr,
    listeners: Mutex<HashMap<u16, Listener>>,
    metrics: ForwardMetrics,
}

struct Listener {
    entry: Arc<ArcSwap<Entry>>,
    accept: JoinHandle<()>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        // Closes the listening socket; the sessions are tasks of their own and live on.
        self.accept.abort();
    }
}

impl Forwarder {
    /// Forward listeners on `host`, with their counters in `registry`.
    pub fn new(host: IpAddr, registry: &mut Registry) -> Self {
        let metrics = ForwardMetrics::default();
        registry.register(
            "slipway_edge_forward_connections_accepted",
            "Raw TCP connections accepted and passed to a channel",
            metrics.accepted.clone(),
        );
        registry.register(
            "slipway_edge_forward_connections_denied",
            "Raw TCP connections closed because the peer is outside the allowlist",
            metrics.denied.clone(),
        );
        registry.register(
            "slipway_edge_forward_connections_unavailable",
            "Raw TCP connections closed because the channel had no ready pod to take them",
            metrics.unavailable.clone(),
        );
        Self {
            host,
            listeners: Mutex::default(),
            metrics,
        }
    }

    /// Opens, updates and closes listeners so that exactly the ports of `wanted` are served, each by its entry.
    /// A port that cannot be bound now is tried again at the next update.
    pub fn apply(&self, mut wanted: HashMap<u16, Entry>) {
        let mut listeners = self.listeners.lock().unwrap_or_else(|e| e.into_inner());
        listeners.retain(|port, _| wanted.contains_key(port));
        for (port, listener) in listeners.iter() {
            if let Some(entry) = wanted.remove(port) {
                listener.entry.store(Arc::new(entry));
            }
        }
        for (port, entry) in wanted {
            let addr = SocketAddr::new(self.host, port);
            match bind(addr) {
                Ok(socket) => {
                    tracing::info!(%addr, forward = %entry.name, "forward listening");
                    let entry = Arc::new(ArcSwap::from_pointee(entry));
                    let accept =
                        tokio::spawn(accept_loop(socket, entry.clone(), self.metrics.clone()));
                    listeners.insert(port, Listener { entry, accept });
                }
                Err(e) => {
                    tracing::warn!(%addr, forward = %entry.name, error = %e, "cannot listen for a forward; retrying at the next change");
                }
            }
        }
    }

    /// The ports listened on now.
    pub fn ports(&self) -> Vec<u16> {
        let mut ports: Vec<u16> = self
            .listeners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .copied()
            .collect();
        ports.sort_unstable();
        ports
    }
}

fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = std::net::TcpListener::bind(addr)?;
    socket.set_nonblocking(true)?;
    TcpListener::from_std(socket)
}

async fn accept_loop(listener: TcpListener, entry: Arc<ArcSwap<Entry>>, metrics: ForwardMetrics) {
    loop {
        let (client, peer) = match listener.accept().await {
            Ok(pair) => pair,
            Err(e) => {
                tracing::warn!(error = %e, "forward accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let entry = entry.load_full();
        if !entry.allows(peer.ip()) {
            metrics.denied.inc();
            tracing::info!(forward = %entry.name, client = %peer, "forward connection refused: not in the allowlist");
            drop(client);
            continue;
        }
        let Some(upstream) = entry.upstreams.pick() else {
            metrics.unavailable.inc();
            tracing::info!(forward = %entry.name, client = %peer, "forward connection closed: no ready pod");
            drop(client);
            continue;
        };
        metrics.accepted.inc();
        tokio::spawn(session(client, upstream, entry.name.clone()));
    }
}

/// Passes bytes both ways until each side has closed its half (or either fails).
async fn session(mut client: TcpStream, upstream: SocketAddr, name: String) {
    let mut pod = match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(upstream)).await {
        Ok(Ok(pod)) => pod,
        Ok(Err(e)) => {
            tracing::info!(forward = %name, %upstream, error = %e, "forward: the pod refused the connection");
            return;
        }
        Err(_) => {
            tracing::info!(forward = %name, %upstream, "forward: the pod did not accept within the connect timeout");
            return;
        }
    };
    let _ = client.set_nodelay(true);
    let _ = pod.set_nodelay(true);
    if let Err(e) = tokio_splice::zero_copy_bidirectional(&mut client, &mut pod).await {
        tracing::debug!(forward = %name, %upstream, error = %e, "forward session ended with an error");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use slipway_crds::forward::Cidr as Written;

    fn entry(cidrs: &[&str]) -> Entry {
        Entry {
            allow: networks(
                "ns/f",
                &cidrs
                    .iter()
                    .map(|c| Written((*c).into()))
                    .collect::<Vec<_>>(),
            ),
            upstreams: Upstreams::new(Vec::new()),
            name: "ns/f".into(),
        }
    }

    #[test]
    fn the_allowlist_matches_networks_of_both_families() {
        let e = entry(&["127.0.0.1/32", "10.1.2.3/16", "2001:db8::/32"]);
        assert!(e.allows("127.0.0.1".parse().unwrap()));
        assert!(!e.allows("127.0.0.2".parse().unwrap()));
        // Host bits as written do not narrow the network.
        assert!(e.allows("10.1.200.7".parse().unwrap()));
        assert!(!e.allows("10.2.0.1".parse().unwrap()));
        assert!(e.allows("2001:db8:ffff::9".parse().unwrap()));
        assert!(!e.allows("2001:db9::1".parse().unwrap()));
        // An IPv4 peer on a dual-stack socket arrives IPv4-mapped.
        assert!(e.allows("::ffff:127.0.0.1".parse().unwrap()));
        assert!(!e.allows("::ffff:127.0.0.2".parse().unwrap()));
    }

    #[test]
    fn an_empty_allowlist_lets_anyone_in() {
        let e = entry(&[]);
        assert!(e.allows("192.0.2.1".parse().unwrap()));
        assert!(e.allows("2001:db8::1".parse().unwrap()));
    }

    #[test]
    fn an_unreadable_entry_never_widens_the_allowlist() {
        let none_readable = entry(&["not-an-address", "10.0.0.0/99"]);
        assert!(!none_readable.allows("192.0.2.1".parse().unwrap()));
        assert!(!none_readable.allows("10.0.0.1".parse().unwrap()));
        let one_readable = entry(&["bogus", "192.0.2.0/24"]);
        assert!(one_readable.allows("192.0.2.7".parse().unwrap()));
        assert!(!one_readable.allows("198.51.100.1".parse().unwrap()));
    }
}
