//! Prometheus metrics of the edge, per host: requests by status class, latency to the response head, and bytes
//! sent. Each host's series are looked up once, when the routing table is built, so the request path only bumps
//! atomics. Requests for unknown hosts share the host label `unknown` (a scanner cannot grow the label set).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Host label of requests for hosts no channel has.
pub const UNKNOWN_HOST: &str = "unknown";
const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HostLabels {
    host: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    host: String,
    class: String,
}

fn latency_histogram() -> Histogram {
    // 100 µs to about 15 s.
    Histogram::new(exponential_buckets(0.0001, 2.5, 14))
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

/// How one end-user sign-in step ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignInOutcome {
    /// The identity cookie was set on a channel host.
    SignedIn,
    /// A step was refused: expired, from another browser, for another host, tampered, or bad input.
    Refused,
    /// The upstream provider did not sign the person in (they denied, or it answered an error).
    ProviderRefused,
    /// The upstream provider's answer could not be had or did not verify.
    ProviderFailed,
}

impl SignInOutcome {
    fn label(self) -> &'static str {
        match self {
            SignInOutcome::SignedIn => "signed_in",
            SignInOutcome::Refused => "refused",
            SignInOutcome::ProviderRefused => "provider_refused",
            SignInOutcome::ProviderFailed => "provider_failed",
        }
    }
}

/// The edge's metric families.
pub struct EdgeMetrics {
    requests: Family<RequestLabels, Counter>,
    sign_ins: Family<OutcomeLabels, Counter>,
    duration: Family<HostLabels, Histogram>,
    bytes: Family<HostLabels, Counter>,
    hosts: Gauge,
    ignored_rules: Gauge,
    handles: Mutex<HashMap<String, Arc<HostMetrics>>>,
}

/// One host's series.
pub struct HostMetrics {
    by_class: [Counter; 5],
    duration: Histogram,
    bytes: Counter,
}

impl HostMetrics {
    /// Series registered nowhere (for tests and tools).
    pub fn detached() -> Self {
        Self {
            by_class: Default::default(),
            duration: latency_histogram(),
            bytes: Counter::default(),
        }
    }

    /// Counts one answered request.
    pub fn record(&self, status: http::StatusCode, elapsed: Duration, bytes: Option<u64>) {
        let class = usize::from(status.as_u16() / 100).clamp(1, 5) - 1;
        self.by_class[class].inc();
        self.duration.observe(elapsed.as_secs_f64());
        if let Some(bytes) = bytes {
            self.bytes.inc_by(bytes);
        }
    }

    /// Requests counted in a status class (`2` for 2xx).
    pub fn requests(&self, class: u16) -> u64 {
        self.by_class
            .get(usize::from(class.clamp(1, 5) - 1))
            .map_or(0, Counter::get)
    }
}

impl EdgeMetrics {
    /// Creates the families and registers them.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self {
            requests: Family::default(),
            sign_ins: Family::default(),
            duration: Family::new_with_constructor(latency_histogram),
            bytes: Family::default(),
            hosts: Gauge::default(),
            ignored_rules: Gauge::default(),
            handles: Mutex::default(),
        };
        registry.register(
            "slipway_edge_requests",
            "Requests answered, by host and status class",
            metrics.requests.clone(),
        );
        registry.register(
            "slipway_edge_request_duration_seconds",
            "Time from the request to the response head, by host",
            metrics.duration.clone(),
        );
        registry.register(
            "slipway_edge_response_bytes",
            "Response body bytes of known length, by host",
            metrics.bytes.clone(),
        );
        registry.register(
            "slipway_edge_sign_ins",
            "End-user sign-in steps by outcome: signed_in, refused, provider_refused, provider_failed",
            metrics.sign_ins.clone(),
        );
        registry.register(
            "slipway_edge_hosts",
            "Hosts in the routing table",
            metrics.hosts.clone(),
        );
        registry.register(
            "slipway_edge_ignored_ingress_rules",
            "Rules of class-slipway Ingresses not routed: not the operator's Ingress of a Channel, or a host or \
             backend that is not the channel's",
            metrics.ignored_rules.clone(),
        );
        metrics
    }

    /// Sets the count of untrusted Ingress rules, and logs when it changes (once, not per rebuild).
    pub fn set_ignored_rules(&self, count: usize) {
        let count = i64::try_from(count).unwrap_or(i64::MAX);
        let before = self.ignored_rules.set(count);
        if before != count {
            tracing::warn!(
                rules = count,
                "Ingress rules of class slipway left unrouted: only the operator's Ingress of a Channel, for its \
                 hostname or verified domains, is served"
            );
        }
    }

    /// Counts one sign-in step's outcome.
    pub fn sign_in(&self, outcome: SignInOutcome) {
        self.sign_ins
            .get_or_create(&OutcomeLabels {
                outcome: outcome.label(),
            })
            .inc();
    }

    /// The count of sign-in steps that ended with `outcome`.
    pub fn sign_ins(&self, outcome: SignInOutcome) -> u64 {
        self.sign_ins
            .get_or_create(&OutcomeLabels {
                outcome: outcome.label(),
            })
            .get()
    }

    /// The series of `host`, created on first use.
    pub fn host(&self, host: &str) -> Arc<HostMetrics> {
        let mut handles = self.handles.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(existing) = handles.get(host) {
            return existing.clone();
        }
        let by_class = CLASSES.map(|class| {
            self.requests
                .get_or_create(&RequestLabels {
                    host: host.to_owned(),
                    class: class.to_owned(),
                })
                .clone()
        });
        let labels = HostLabels {
            host: host.to_owned(),
        };
        let handle = Arc::new(HostMetrics {
            by_class,
            duration: self.duration.get_or_create(&labels).clone(),
            bytes: self.bytes.get_or_create(&labels).clone(),
        });
        handles.insert(host.to_owned(), handle.clone());
        handle
    }

    /// Drops the series of hosts that are gone (keeping [`UNKNOWN_HOST`]), and sets the hosts gauge.
    pub fn retain(&self, hosts: &HashSet<&str>) {
        self.hosts
            .set(i64::try_from(hosts.len()).unwrap_or(i64::MAX));
        let mut handles = self.handles.lock().unwrap_or_else(|e| e.into_inner());
        let gone: Vec<String> = handles
            .keys()
            .filter(|h| h.as_str() != UNKNOWN_HOST && !hosts.contains(h.as_str()))
            .cloned()
            .collect();
        for host in gone {
            handles.remove(&host);
            for class in CLASSES {
                self.requests.remove(&RequestLabels {
                    host: host.clone(),
                    class: class.to_owned(),
                });
            }
            let labels = HostLabels { host };
            self.duration.remove(&labels);
            self.bytes.remove(&labels);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_counted_per_host_and_class() {
        let mut registry = Registry::default();
        let metrics = EdgeMetrics::register(&mut registry);
        let a = metrics.host("a.apps.test");
        a.record(http::StatusCode::OK, Duration::from_millis(2), Some(10));
        a.record(
            http::StatusCode::BAD_GATEWAY,
            Duration::from_millis(1),
            None,
        );
        assert!(
            Arc::ptr_eq(&a, &metrics.host("a.apps.test")),
            "one handle per host"
        );
        assert_eq!((a.requests(2), a.requests(5), a.requests(4)), (1, 1, 0));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains(r#"slipway_edge_requests_total{host="a.apps.test",class="2xx"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"slipway_edge_response_bytes_total{host="a.apps.test"} 10"#),
            "{text}"
        );

        metrics.retain(&HashSet::new());
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            !text.contains("a.apps.test"),
            "a host that is gone leaves no series"
        );
        assert!(text.contains("slipway_edge_hosts 0"), "{text}");
    }
}
