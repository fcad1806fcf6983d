//! Per-object backoff of failed reconciles. An object whose reconcile keeps failing is retried later and later
//! (doubling from the error's first delay up to [`MAX_DELAY`], with a little jitter so that objects failing for
//! one cause, an apiserver or a registry that is down, do not all come back in the same second); one success and
//! it starts from the beginning again. Other objects are not slowed by it: each keeps its own count.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use crate::error::Error;

/// The longest a failed object waits before it is tried again.
pub const MAX_DELAY: Duration = Duration::from_secs(300);

/// Which object failed: its kind, namespace and name.
pub type ObjectKey = (&'static str, String, String);

/// Consecutive failures per object.
#[derive(Default)]
pub struct Backoff {
    failures: Mutex<HashMap<ObjectKey, u32>>,
}

impl Backoff {
    /// Records a failure of `key` with `error`; answers how long to wait before the next try.
    pub fn failed(&self, key: ObjectKey, error: &Error) -> Duration {
        let attempts = {
            let mut failures = self
                .failures
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let count = failures.entry(key).or_insert(0);
            *count = count.saturating_add(1);
            *count
        };
        with_jitter(delay(attempts, error), rand::random::<f64>())
    }

    /// Forgets the failures of `key`: its reconcile succeeded.
    pub fn succeeded(&self, key: &ObjectKey) {
        let mut failures = self
            .failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        failures.remove(key);
    }
}

/// The delay after the `attempts`-th failure in a row: the error's first delay, doubled each time, at most
/// [`MAX_DELAY`]. A transient failure (the apiserver, the API, the registry, the store, the data server) starts at
/// 5 s; one that needs a change to go away (an invalid or incomplete object) waits the longest at once.
pub fn delay(attempts: u32, error: &Error) -> Duration {
    let first = match error {
        Error::Kube(_)
        | Error::Internal(_)
        | Error::Registry(_)
        | Error::ObjectStore(_)
        | Error::Database(_) => Duration::from_secs(5),
        Error::InvalidSpec(_) | Error::Incomplete(_) => MAX_DELAY,
    };
    let doublings = attempts.saturating_sub(1).min(16);
    first.saturating_mul(1 << doublings).min(MAX_DELAY)
}

/// `delay` lengthened by up to a tenth, by `unit` (in 0..1).
fn with_jitter(delay: Duration, unit: f64) -> Duration {
    delay.mul_f64(1.0 + unit.clamp(0.0, 1.0) / 10.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn transient() -> Error {
        Error::Registry("down".into())
    }

    #[test]
    fn a_transient_failure_doubles_from_five_seconds_up_to_five_minutes() {
        let delays: Vec<u64> = (1..=8).map(|n| delay(n, &transient()).as_secs()).collect();
        assert_eq!(delays, [5, 10, 20, 40, 80, 160, 300, 300]);
        assert_eq!(delay(u32::MAX, &transient()), MAX_DELAY);
    }

    #[test]
    fn an_invalid_object_waits_the_longest_at_once() {
        assert_eq!(delay(1, &Error::InvalidSpec("bad".into())), MAX_DELAY);
    }

    #[test]
    fn each_object_counts_its_own_failures_and_a_success_starts_it_over() {
        let backoff = Backoff::default();
        let a: ObjectKey = ("Deploy", "ns".into(), "a".into());
        let b: ObjectKey = ("Deploy", "ns".into(), "b".into());
        let within = |d: Duration, secs: u64| {
            d >= Duration::from_secs(secs) && d <= Duration::from_secs(secs).mul_f64(1.1)
        };
        assert!(within(backoff.failed(a.clone(), &transient()), 5));
        assert!(within(backoff.failed(a.clone(), &transient()), 10));
        assert!(
            within(backoff.failed(b.clone(), &transient()), 5),
            "b is not slowed by a"
        );
        backoff.succeeded(&a);
        assert!(within(backoff.failed(a, &transient()), 5));
    }
}
