//! The webhook's Prometheus metrics, on its admin port's `/metrics`: admission reviews by kind, operation and
//! outcome, and how long answering took. A review's kind and operation come from its sender; anything the webhook
//! does not validate is counted as `other`, so a stray caller cannot grow the series.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

use crate::admission::{Answer, KINDS, Subject};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReviewLabels {
    kind: &'static str,
    operation: &'static str,
    outcome: &'static str,
}

/// The counts of answered reviews; clones share them.
#[derive(Clone, Debug)]
pub struct Reviews {
    answered: Family<ReviewLabels, Counter>,
    duration: Histogram,
}

impl Default for Reviews {
    fn default() -> Self {
        Self {
            answered: Family::default(),
            // 0.5 ms to 4 s: the apiserver gives a webhook 10 s at most.
            duration: Histogram::new(exponential_buckets(0.0005, 2.0, 14)),
        }
    }
}

impl Reviews {
    /// Registers the metrics (clones share their values) in `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "slipway_webhook_admissions",
            "Admission reviews answered, by kind, operation and outcome (allowed, denied, unavailable: the caches \
             could not decide, malformed: not a review)",
            self.answered.clone(),
        );
        registry.register_with_unit(
            "slipway_webhook_admission_duration",
            "Time from a review's arrival to its answer",
            Unit::Seconds,
            self.duration.clone(),
        );
    }

    /// Counts one answered review.
    pub fn observe(&self, subject: &Subject, answer: &Answer, took: Duration) {
        let kind = KINDS
            .into_iter()
            .find(|k| *k == subject.kind)
            .unwrap_or("other");
        let operation = ["CREATE", "UPDATE", "DELETE", "CONNECT"]
            .into_iter()
            .find(|o| *o == subject.operation)
            .unwrap_or("other");
        let outcome = if answer.status.is_client_error() {
            "malformed"
        } else if answer.allowed() {
            "allowed"
        } else if answer.code() == Some(503) {
            "unavailable"
        } else {
            "denied"
        };
        self.answered
            .get_or_create(&ReviewLabels {
                kind,
                operation,
                outcome,
            })
            .inc();
        self.duration.observe(took.as_secs_f64());
    }
}
