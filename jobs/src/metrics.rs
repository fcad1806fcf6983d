//! What the runner counts of the jobs it ran, for `/metrics`: how each kind's jobs ended, how long they took and
//! the bytes they moved. Checkpoints and restores are jobs, so their failures, durations and sizes are read here,
//! by kind. The labels are the kind and the outcome, never the channel: the series stay as few at 10,000 channels
//! as at one.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

use super::Kind;

/// How a run of a job ended in this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Its work succeeded.
    Succeeded,
    /// Its work failed.
    Failed,
    /// The platform was busy; the job was put back in the queue.
    Busy,
    /// Another runner took it over, or it was cancelled, while it ran here.
    Lost,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Succeeded => "succeeded",
            Outcome::Failed => "failed",
            Outcome::Busy => "busy",
            Outcome::Lost => "lost",
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    kind: String,
    outcome: String,
}

/// The runner's counts; clones share them.
#[derive(Debug, Clone)]
pub struct JobMetrics {
    runs: Family<OutcomeLabels, Counter>,
    duration: Family<OutcomeLabels, Histogram>,
    bytes: Family<KindLabels, Counter>,
}

impl Default for JobMetrics {
    /// Counts with every kind's successes and failures at zero: a series that first appeared at its first failure
    /// would hide that failure from `increase()`, which an alert on failures reads.
    fn default() -> Self {
        let metrics = Self {
            runs: Family::default(),
            // 1 s to about 4.5 hours: a restore of a large database runs for hours.
            duration: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(1.0, 2.0, 15))
            }),
            bytes: Family::default(),
        };
        for kind in Kind::ALL {
            for outcome in [Outcome::Succeeded, Outcome::Failed] {
                let _ = metrics.runs.get_or_create(&OutcomeLabels {
                    kind: kind.as_str().to_owned(),
                    outcome: outcome.as_str().to_owned(),
                });
            }
        }
        metrics
    }
}

impl JobMetrics {
    /// Records one run of a job of `kind` (a row whose kind this version does not know is counted as `unknown`).
    pub fn observe(
        &self,
        kind: Option<Kind>,
        outcome: Outcome,
        took: std::time::Duration,
        bytes: u64,
    ) {
        let kind = kind.map_or("unknown", Kind::as_str).to_owned();
        let labels = OutcomeLabels {
            kind: kind.clone(),
            outcome: outcome.as_str().to_owned(),
        };
        self.runs.get_or_create(&labels).inc();
        if matches!(outcome, Outcome::Succeeded | Outcome::Failed) {
            self.duration
                .get_or_create(&labels)
                .observe(took.as_secs_f64());
        }
        if outcome == Outcome::Succeeded {
            self.bytes.get_or_create(&KindLabels { kind }).inc_by(bytes);
        }
    }

    /// Registers the families (clones share their values) in `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "slipway_jobs",
            "Job runs in this process by kind (checkpoint, nightly_checkpoint, sql_restore, bucket_restore, \
             mirror_sync) and outcome (succeeded, failed, busy, lost)",
            self.runs.clone(),
        );
        registry.register_with_unit(
            "slipway_job_duration",
            "How long job runs that succeeded or failed took, by kind and outcome",
            Unit::Seconds,
            self.duration.clone(),
        );
        registry.register_with_unit(
            "slipway_job",
            "Bytes the jobs that succeeded moved (dumped, restored or copied), by kind",
            Unit::Bytes,
            self.bytes.clone(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(metrics: &JobMetrics) -> String {
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry).unwrap();
        out
    }

    #[test]
    fn counts_runs_by_kind_and_outcome_and_bytes_only_of_successes() {
        let metrics = JobMetrics::default();
        let second = std::time::Duration::from_secs(1);
        metrics.observe(Some(Kind::Checkpoint), Outcome::Succeeded, second, 1000);
        metrics.observe(Some(Kind::Checkpoint), Outcome::Failed, second, 500);
        metrics.observe(Some(Kind::SqlRestore), Outcome::Busy, second, 0);
        metrics.observe(None, Outcome::Failed, second, 0);
        let out = encoded(&metrics);
        for line in [
            r#"slipway_jobs_total{kind="checkpoint",outcome="succeeded"} 1"#,
            r#"slipway_jobs_total{kind="checkpoint",outcome="failed"} 1"#,
            r#"slipway_jobs_total{kind="sql_restore",outcome="busy"} 1"#,
            r#"slipway_jobs_total{kind="unknown",outcome="failed"} 1"#,
            r#"slipway_job_bytes_total{kind="checkpoint"} 1000"#,
            r#"slipway_job_duration_seconds_count{kind="checkpoint",outcome="failed"} 1"#,
        ] {
            assert!(out.contains(line), "{line} missing from:\n{out}");
        }
        assert!(
            out.contains(r#"slipway_jobs_total{kind="mirror_sync",outcome="failed"} 0"#),
            "every kind's failures start at zero:\n{out}"
        );
        // A busy run did not do the work: no duration for it.
        assert!(!out.contains(r#"slipway_job_duration_seconds_count{kind="sql_restore""#));
    }
}
