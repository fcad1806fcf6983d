//! Prometheus metrics of the edge: requests by what the host is (a channel's, the sign-in host, or one nobody
//! serves) and status class, latency to the response head, and bytes sent; and apart from them the 5xx the edge
//! answered itself because a channel's process could not answer, by why. A channel's own 500s are its tenant's
//! business; these are the ones a platform team looks into. A label per host would make a series
//! per channel, 200,000 of them at 10,000 channels; the access log names the host of every request instead. The
//! series of each kind of host are looked up once, so the request path only bumps atomics.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// What the access log names as the host of requests for hosts no channel has.
pub const UNKNOWN_HOST: &str = "unknown";
const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

/// What a request's host is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostKind {
    /// A channel's hostname or one of its verified domains.
    Channel,
    /// The end-user sign-in host.
    SignIn,
    /// A host nobody serves.
    Unknown,
}

impl HostKind {
    fn label(self) -> &'static str {
        match self {
            HostKind::Channel => "channel",
            HostKind::SignIn => "sign_in",
            HostKind::Unknown => "unknown",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HostLabels {
    host: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    host: &'static str,
    class: &'static str,
}

fn latency_histogram() -> Histogram {
    // 100 µs to about 15 s.
    Histogram::new(exponential_buckets(0.0001, 2.5, 14))
}

/// Why the edge answered a channel's request with a 5xx of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpstreamFailure {
    /// No ready endpoint: a crashed or scaled-down process, a rollout without a ready pod (503).
    NoEndpoint,
    /// The process refused the connection or broke off (502).
    Refused,
    /// The process did not answer in time (504).
    Timeout,
    /// The process passed readiness on the ready file and serves no HTTP (502).
    NoHttp,
    /// A static deploy's files could not be had (503).
    StaticUnavailable,
}

impl UpstreamFailure {
    /// Every reason, in the order of declaration (`failure as usize` indexes it).
    const ALL: [UpstreamFailure; 5] = [
        UpstreamFailure::NoEndpoint,
        UpstreamFailure::Refused,
        UpstreamFailure::Timeout,
        UpstreamFailure::NoHttp,
        UpstreamFailure::StaticUnavailable,
    ];

    fn label(self) -> &'static str {
        match self {
            UpstreamFailure::NoEndpoint => "no_endpoint",
            UpstreamFailure::Refused => "refused",
            UpstreamFailure::Timeout => "timeout",
            UpstreamFailure::NoHttp => "no_http",
            UpstreamFailure::StaticUnavailable => "static_unavailable",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
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
    sign_ins: Family<OutcomeLabels, Counter>,
    /// Indexed by [`UpstreamFailure`]'s order in [`UpstreamFailure::ALL`]: an outage makes every request one, so
    /// the series are looked up once, like the requests'.
    upstream_failures: [Counter; 5],
    hosts: Gauge,
    ignored_rules: Gauge,
    channel: Arc<HostMetrics>,
    sign_in_host: Arc<HostMetrics>,
    unknown: Arc<HostMetrics>,
}

/// The series of one kind of host.
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
        let requests = Family::<RequestLabels, Counter>::default();
        let upstream_failures = Family::<ReasonLabels, Counter>::default();
        let duration = Family::<HostLabels, Histogram>::new_with_constructor(latency_histogram);
        let bytes = Family::<HostLabels, Counter>::default();
        let of = |kind: HostKind| {
            let host = kind.label();
            Arc::new(HostMetrics {
                by_class: CLASSES.map(|class| {
                    requests
                        .get_or_create(&RequestLabels { host, class })
                        .clone()
                }),
                duration: duration.get_or_create(&HostLabels { host }).clone(),
                bytes: bytes.get_or_create(&HostLabels { host }).clone(),
            })
        };
        let metrics = Self {
            sign_ins: Family::default(),
            // Every reason from zero, so that a rate over the first failure sees it.
            upstream_failures: UpstreamFailure::ALL.map(|failure| {
                upstream_failures
                    .get_or_create(&ReasonLabels {
                        reason: failure.label(),
                    })
                    .clone()
            }),
            hosts: Gauge::default(),
            ignored_rules: Gauge::default(),
            channel: of(HostKind::Channel),
            sign_in_host: of(HostKind::SignIn),
            unknown: of(HostKind::Unknown),
        };
        registry.register(
            "slipway_edge_requests",
            "Requests answered, by host (channel, sign_in, unknown) and status class",
            requests,
        );
        registry.register(
            "slipway_edge_request_duration_seconds",
            "Time from the request to the response head, by host (channel, sign_in, unknown)",
            duration,
        );
        registry.register(
            "slipway_edge_response_bytes",
            "Response body bytes of known length, by host (channel, sign_in, unknown)",
            bytes,
        );
        registry.register(
            "slipway_edge_upstream_failures",
            "Requests for a channel the edge answered with a 5xx of its own, by why: no_endpoint, refused, timeout, \
             no_http, static_unavailable (a channel's own 5xx are not counted here)",
            upstream_failures,
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

    /// Counts a request the edge answered with a 5xx of its own, because of `failure`.
    pub fn upstream_failure(&self, failure: UpstreamFailure) {
        self.upstream_failures[failure as usize].inc();
    }

    /// The series of requests for a kind of host.
    pub fn of(&self, kind: HostKind) -> Arc<HostMetrics> {
        match kind {
            HostKind::Channel => self.channel.clone(),
            HostKind::SignIn => self.sign_in_host.clone(),
            HostKind::Unknown => self.unknown.clone(),
        }
    }

    /// Sets the count of hosts in the routing table.
    pub fn set_hosts(&self, hosts: usize) {
        self.hosts.set(i64::try_from(hosts).unwrap_or(i64::MAX));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_indexes_its_own_series() {
        for (i, failure) in UpstreamFailure::ALL.into_iter().enumerate() {
            assert_eq!(failure as usize, i, "{failure:?}");
        }
    }

    #[test]
    fn requests_are_counted_by_kind_of_host_and_class_never_by_host() {
        let mut registry = Registry::default();
        let metrics = EdgeMetrics::register(&mut registry);
        let (a, b) = (metrics.of(HostKind::Channel), metrics.of(HostKind::Channel));
        assert!(
            Arc::ptr_eq(&a, &b),
            "every channel's host shares its series"
        );
        a.record(http::StatusCode::OK, Duration::from_millis(2), Some(10));
        b.record(
            http::StatusCode::BAD_GATEWAY,
            Duration::from_millis(1),
            None,
        );
        metrics
            .of(HostKind::Unknown)
            .record(http::StatusCode::NOT_FOUND, Duration::ZERO, None);
        assert_eq!((a.requests(2), a.requests(5), a.requests(4)), (1, 1, 0));
        metrics.set_hosts(3);
        metrics.upstream_failure(UpstreamFailure::Refused);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for line in [
            r#"slipway_edge_requests_total{host="channel",class="2xx"} 1"#,
            r#"slipway_edge_requests_total{host="channel",class="5xx"} 1"#,
            r#"slipway_edge_requests_total{host="unknown",class="4xx"} 1"#,
            r#"slipway_edge_requests_total{host="sign_in",class="2xx"} 0"#,
            r#"slipway_edge_response_bytes_total{host="channel"} 10"#,
            "slipway_edge_hosts 3",
            r#"slipway_edge_upstream_failures_total{reason="refused"} 1"#,
            r#"slipway_edge_upstream_failures_total{reason="no_endpoint"} 0"#,
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
    }
}
