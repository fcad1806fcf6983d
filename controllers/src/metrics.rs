//! The operator's Prometheus metrics: reconciles by kind, deploys by outcome with their durations and queue waits,
//! builds by outcome with their durations and image sizes against the plan's cap, ACME orders, the backends' probes, and what the shared stores hold at scrape time (deploys in flight and past their deadline, the
//! earliest certificate expiry). No label names a channel, an app or a domain: the series stay as few at 10,000
//! channels as at one; `kubectl get deploys,domains -A` names the objects behind a figure.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::runtime::reflector::Store;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};
use slipway_crds::{Deploy, DeployPhase, Domain};

use crate::error::Error;

/// Labels of the reconcile metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReconcileLabels {
    /// The kind reconciled.
    pub kind: String,
}

/// Labels of the failure counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FailureLabels {
    /// The kind reconciled.
    pub kind: String,
    /// The error category.
    pub category: String,
}

/// How a deploy or an ACME order ended.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

/// How a build ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BuildEnd {
    /// Its image was pushed and is within the plan's cap.
    Built,
    /// The build itself failed.
    Failed,
    /// It ran past the build timeout.
    TimedOut,
    /// It built, but its image was refused: over the plan's cap, or not in the registry.
    ImageRefused,
}

impl BuildEnd {
    fn label(self) -> &'static str {
        match self {
            BuildEnd::Built => "built",
            BuildEnd::Failed => "failed",
            BuildEnd::TimedOut => "timed_out",
            BuildEnd::ImageRefused => "image_refused",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BackendLabels {
    backend: &'static str,
}

/// A backend the operator provisions on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// The data server of channel databases.
    DataServer,
    /// The object store of channel buckets.
    ObjectStore,
}

impl Backend {
    /// Its label.
    pub fn label(self) -> &'static str {
        match self {
            Backend::DataServer => "data_server",
            Backend::ObjectStore => "object_store",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabels {
    phase: &'static str,
}

/// The operator's metrics; clones share them.
#[derive(Clone)]
pub struct Metrics {
    runs: Family<ReconcileLabels, Counter>,
    failures: Family<FailureLabels, Counter>,
    duration: Family<ReconcileLabels, Histogram>,
    deploys: Family<OutcomeLabels, Counter>,
    deploy_duration: Family<OutcomeLabels, Histogram>,
    queue_wait: Histogram,
    acme_orders: Family<OutcomeLabels, Counter>,
    builds: Family<OutcomeLabels, Counter>,
    build_duration: Family<OutcomeLabels, Histogram>,
    image_against_cap: Histogram,
    backend_up: Family<BackendLabels, Gauge>,
    fleet: Arc<OnceLock<Fleet>>,
}

/// 1 s to about 4.5 hours: a build of a large image, or a deploy that waits for a long checkpoint.
fn long_buckets() -> Histogram {
    Histogram::new(exponential_buckets(1.0, 2.0, 15))
}

impl Metrics {
    /// Creates the metrics and registers them.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self {
            runs: Family::default(),
            failures: Family::default(),
            duration: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.001, 2.0, 14))
            }),
            deploys: Family::default(),
            deploy_duration: Family::new_with_constructor(long_buckets),
            queue_wait: long_buckets(),
            acme_orders: Family::default(),
            builds: Family::default(),
            build_duration: Family::new_with_constructor(long_buckets),
            // A tenth of the cap to one and a half times it.
            image_against_cap: Histogram::new([0.1, 0.25, 0.5, 0.75, 0.9, 1.0, 1.25, 1.5]),
            backend_up: Family::default(),
            fleet: Arc::default(),
        };
        registry.register(
            "slipway_reconcile_runs",
            "Reconciles started",
            metrics.runs.clone(),
        );
        registry.register(
            "slipway_reconcile_failures",
            "Reconciles that failed, by error category",
            metrics.failures.clone(),
        );
        registry.register(
            "slipway_reconcile_duration_seconds",
            "How long reconciles took",
            metrics.duration.clone(),
        );
        registry.register(
            "slipway_deploys",
            "Deploys that ended, by outcome (success, failed)",
            metrics.deploys.clone(),
        );
        registry.register_with_unit(
            "slipway_deploy_duration",
            "Time from a deploy's creation to its end, by outcome",
            Unit::Seconds,
            metrics.deploy_duration.clone(),
        );
        registry.register_with_unit(
            "slipway_deploy_queue_wait",
            "Time a deploy waited queued (behind its channel's earlier deploys) before it started",
            Unit::Seconds,
            metrics.queue_wait.clone(),
        );
        registry.register(
            "slipway_acme_orders",
            "Certificate orders to the ACME CA, by outcome (issued, failed)",
            metrics.acme_orders.clone(),
        );
        registry.register(
            "slipway_builds",
            "Image builds that ended, by outcome (built, failed, timed_out, image_refused: over the plan's cap or \
             not in the registry)",
            metrics.builds.clone(),
        );
        registry.register_with_unit(
            "slipway_build_duration",
            "How long build Jobs ran, by outcome",
            Unit::Seconds,
            metrics.build_duration.clone(),
        );
        registry.register(
            "slipway_build_image_cap_ratio",
            "Built images' charged size as a share of their plan's image cap (over 1 is refused)",
            metrics.image_against_cap.clone(),
        );
        registry.register(
            "slipway_backend_up",
            "Whether a backend answered the operator's last probe (1) or not (0), by backend (data_server, \
             object_store); absent for a backend not configured",
            metrics.backend_up.clone(),
        );
        registry.register_collector(Box::new(FleetCollector(metrics.fleet.clone())));
        metrics
    }

    /// Records one reconcile of `kind` that started at `started`.
    pub fn observe(&self, kind: &str, started: Instant, result: &Result<Action, Error>) {
        let labels = ReconcileLabels {
            kind: kind.to_owned(),
        };
        self.runs.get_or_create(&labels).inc();
        self.duration
            .get_or_create(&labels)
            .observe(started.elapsed().as_secs_f64());
        if let Err(e) = result {
            self.failures
                .get_or_create(&FailureLabels {
                    kind: kind.to_owned(),
                    category: e.category().to_owned(),
                })
                .inc();
        }
    }

    /// Records that `deploy`, created then, left the queue now.
    pub fn deploy_started(&self, deploy: &Deploy) {
        if let Some(waited) = age(deploy, Timestamp::now()) {
            self.queue_wait.observe(waited.as_secs_f64());
        }
    }

    /// Records that `deploy` ended now: live (`succeeded`) or failed.
    pub fn deploy_ended(&self, deploy: &Deploy, succeeded: bool) {
        let labels = OutcomeLabels {
            outcome: if succeeded { "success" } else { "failed" },
        };
        self.deploys.get_or_create(&labels).inc();
        if let Some(took) = age(deploy, Timestamp::now()) {
            self.deploy_duration
                .get_or_create(&labels)
                .observe(took.as_secs_f64());
        }
    }

    /// Records one certificate order: issued and stored, or failed.
    pub fn acme_order(&self, issued: bool) {
        let outcome = if issued { "issued" } else { "failed" };
        self.acme_orders
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
    }

    /// Records a build that ended, with how long its Job ran when known.
    pub fn build_ended(&self, ended: BuildEnd, took: Option<Duration>) {
        let labels = OutcomeLabels {
            outcome: ended.label(),
        };
        self.builds.get_or_create(&labels).inc();
        if let Some(took) = took {
            self.build_duration
                .get_or_create(&labels)
                .observe(took.as_secs_f64());
        }
    }

    /// Records a built image's charged size against its plan's cap.
    pub fn image_size_against_cap(&self, charged: u64, cap: u64) {
        if cap > 0 {
            self.image_against_cap.observe(charged as f64 / cap as f64);
        }
    }

    /// Records whether `backend` answered its probe; what it was before (`None`: never probed).
    pub fn set_backend_up(&self, backend: Backend, up: bool) -> Option<bool> {
        let labels = BackendLabels {
            backend: backend.label(),
        };
        let known = self.backend_up.get(&labels).is_some();
        let before = self.backend_up.get_or_create(&labels).set(i64::from(up));
        known.then_some(before == 1)
    }

    /// Reads the shared Deploy and Domain stores at every scrape from now on; a deploy running longer than
    /// `deadline` counts as past it. Before this (the controllers not yet running) those figures are absent. Only
    /// the first call counts.
    pub fn watch_fleet(&self, deploys: Store<Deploy>, domains: Store<Domain>, deadline: Duration) {
        let _ = self.fleet.set(Fleet {
            deploys,
            domains,
            deadline,
        });
    }
}

/// How long ago `deploy` was created, at `now`.
fn age(deploy: &Deploy, now: Timestamp) -> Option<Duration> {
    let created = deploy.metadata.creation_timestamp.as_ref()?.0;
    Duration::try_from(now.duration_since(created)).ok()
}

/// The stores the scrape-time figures are read from.
struct Fleet {
    deploys: Store<Deploy>,
    domains: Store<Domain>,
    deadline: Duration,
}

/// What a scrape reads from the shared stores.
#[derive(Debug, Default, PartialEq)]
struct FleetFigures {
    queued: i64,
    running: i64,
    past_deadline: i64,
    /// The earliest `notAfter` of the certificates issued, in Unix seconds; `None` without any.
    earliest_expiry: Option<i64>,
}

impl FleetFigures {
    fn read<'a>(
        deploys: impl IntoIterator<Item = &'a Deploy>,
        domains: impl IntoIterator<Item = &'a Domain>,
        deadline: Duration,
        now: Timestamp,
    ) -> Self {
        let mut figures = Self::default();
        for deploy in deploys {
            let status = deploy.status.as_ref();
            match status.map(|s| s.phase).unwrap_or_default() {
                DeployPhase::Queued => figures.queued += 1,
                DeployPhase::Running => {
                    figures.running += 1;
                    let started = status.and_then(|s| s.started_at.as_ref()).map(|t| t.0);
                    let running_for =
                        started.and_then(|t| Duration::try_from(now.duration_since(t)).ok());
                    if running_for.is_some_and(|d| d > deadline) {
                        figures.past_deadline += 1;
                    }
                }
                DeployPhase::Success | DeployPhase::Failed => {}
            }
        }
        figures.earliest_expiry = domains
            .into_iter()
            .filter_map(|d| d.status.as_ref()?.certificate.as_ref()?.not_after.as_ref())
            .map(|t| t.0.as_second())
            .min();
        figures
    }
}

struct FleetCollector(Arc<OnceLock<Fleet>>);

impl std::fmt::Debug for FleetCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetCollector")
            .field("watching", &self.0.get().is_some())
            .finish()
    }
}

impl Collector for FleetCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(fleet) = self.0.get() else {
            return Ok(());
        };
        let (deploys, domains) = (fleet.deploys.state(), fleet.domains.state());
        let figures = FleetFigures::read(
            deploys.iter().map(AsRef::as_ref),
            domains.iter().map(AsRef::as_ref),
            fleet.deadline,
            Timestamp::now(),
        );
        let in_flight = Family::<PhaseLabels, Gauge>::default();
        in_flight
            .get_or_create(&PhaseLabels { phase: "queued" })
            .set(figures.queued);
        in_flight
            .get_or_create(&PhaseLabels { phase: "running" })
            .set(figures.running);
        in_flight.encode(encoder.encode_descriptor(
            "slipway_deploys_in_flight",
            "Deploys not yet ended, by phase (queued, running)",
            None,
            in_flight.metric_type(),
        )?)?;
        let past = ConstGauge::new(figures.past_deadline);
        past.encode(encoder.encode_descriptor(
            "slipway_deploys_past_deadline",
            "Deploys running longer than the deploy deadline (the operator fails them at it: one that stays is \
             stuck)",
            None,
            past.metric_type(),
        )?)?;
        let deadline = ConstGauge::new(i64::try_from(fleet.deadline.as_secs()).unwrap_or(i64::MAX));
        deadline.encode(encoder.encode_descriptor(
            "slipway_deploy_deadline_seconds",
            "The deploy deadline in force (--deploy-deadline-minutes)",
            None,
            deadline.metric_type(),
        )?)?;
        if let Some(expiry) = figures.earliest_expiry {
            let expiry = ConstGauge::new(expiry);
            expiry.encode(encoder.encode_descriptor(
                "slipway_certificate_expiry_earliest_timestamp_seconds",
                "The earliest notAfter among the certificates the platform issued (absent without any)",
                None,
                expiry.metric_type(),
            )?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use slipway_crds::{CertificateStatus, DeployStatus, DomainStatus};

    fn deploy(phase: DeployPhase, started_secs_ago: Option<i64>, now: Timestamp) -> Deploy {
        let mut d: Deploy = serde_json::from_value(serde_json::json!({
            "apiVersion": "slipway.dev/v1alpha1", "kind": "Deploy",
            "metadata": {"name": "blog.prod.1", "namespace": "u", "uid": "1"},
            "spec": {"channel": "blog.prod", "sha": "master"}
        }))
        .unwrap();
        d.status = Some(DeployStatus {
            phase,
            started_at: started_secs_ago
                .map(|s| Time(now - k8s_openapi::jiff::SignedDuration::from_secs(s))),
            ..Default::default()
        });
        d
    }

    fn domain(not_after: Option<i64>) -> Domain {
        let mut d = Domain::new(
            "example.com",
            slipway_crds::DomainSpec {
                channel: "blog.prod".into(),
                domain: "example.com".into(),
            },
        );
        d.status = Some(DomainStatus {
            certificate: not_after.map(|s| CertificateStatus {
                not_after: Some(Time(Timestamp::from_second(s).unwrap())),
                ..Default::default()
            }),
            ..Default::default()
        });
        d
    }

    #[test]
    fn fleet_figures_count_deploys_in_flight_past_the_deadline_and_the_earliest_expiry() {
        let now = Timestamp::from_second(1_800_000_000).unwrap();
        let hour = Duration::from_secs(3600);
        let deploys = [
            deploy(DeployPhase::Queued, None, now),
            deploy(DeployPhase::Running, Some(60), now),
            deploy(DeployPhase::Running, Some(2 * 3600), now),
            deploy(DeployPhase::Running, None, now),
            deploy(DeployPhase::Success, Some(5 * 3600), now),
            deploy(DeployPhase::Failed, Some(5 * 3600), now),
        ];
        let domains = [
            domain(Some(1_900_000_000)),
            domain(None),
            domain(Some(1_850_000_000)),
        ];
        assert_eq!(
            FleetFigures::read(&deploys, &domains, hour, now),
            FleetFigures {
                queued: 1,
                running: 3,
                past_deadline: 1,
                earliest_expiry: Some(1_850_000_000),
            }
        );
        assert_eq!(
            FleetFigures::read(&deploys[..2], &domains[1..2], hour, now).earliest_expiry,
            None,
            "no certificate: no expiry"
        );
    }

    #[test]
    fn builds_are_counted_by_outcome_with_their_image_against_the_cap() {
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry);
        metrics.build_ended(BuildEnd::Built, Some(Duration::from_secs(90)));
        metrics.build_ended(BuildEnd::ImageRefused, None);
        metrics.image_size_against_cap(600, 1000);
        metrics.image_size_against_cap(1200, 1000);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry).unwrap();
        for line in [
            r#"slipway_builds_total{outcome="built"} 1"#,
            r#"slipway_builds_total{outcome="image_refused"} 1"#,
            r#"slipway_build_duration_seconds_count{outcome="built"} 1"#,
            r#"slipway_build_image_cap_ratio_bucket{le="0.75"} 1"#,
            r#"slipway_build_image_cap_ratio_bucket{le="1.25"} 2"#,
        ] {
            assert!(out.contains(line), "{line} missing from:\n{out}");
        }
        assert!(!out.contains(r#"slipway_build_duration_seconds_count{outcome="image_refused"}"#));
    }

    #[test]
    fn the_scrape_reads_the_stores_once_they_are_given() {
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry);
        let encode = |registry: &Registry| {
            let mut out = String::new();
            prometheus_client::encoding::text::encode(&mut out, registry).unwrap();
            out
        };
        assert!(!encode(&registry).contains("slipway_deploys_in_flight"));
        let (deploys, mut deploys_writer) = kube::runtime::reflector::store::<Deploy>();
        let (domains, _domains_writer) = kube::runtime::reflector::store::<Domain>();
        deploys_writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(deploy(
            DeployPhase::Running,
            Some(10),
            Timestamp::now(),
        )));
        metrics.watch_fleet(deploys, domains, Duration::from_secs(3600));
        let out = encode(&registry);
        assert!(
            out.contains("slipway_deploys_in_flight{phase=\"running\"} 1"),
            "{out}"
        );
        assert!(out.contains("slipway_deploys_past_deadline 0"), "{out}");
        assert!(!out.contains("slipway_certificate_expiry"), "{out}");
    }
}
