//! Leader election on a `coordination.k8s.io` Lease, so several operator replicas can run and exactly one
//! reconciles. It follows client-go's rules, which keep two leaders from ever overlapping:
//!
//! - A leader stops within its renew deadline (two thirds of the lease) of its last successful renewal, by its own
//!   clock: every renewal has a timeout, so an apiserver that stalls one cannot keep a leader leading.
//! - A candidate judges a held Lease by its own clock too: the Lease is over once it has seen no change to it for a
//!   whole lease duration. Comparing the holder's `renewTime` with the local clock would let skew between two
//!   machines hand the Lease over early.
//!
//! So a candidate takes over no sooner than a lease duration after the leader's last write reached the apiserver,
//! and the leader has stopped a third of a lease before that. The operator exits when it loses leadership and is
//! restarted as a candidate.

use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use tokio::time::Instant;

/// One candidate for one Lease.
#[derive(Clone)]
pub struct LeaderElector {
    api: Api<Lease>,
    name: String,
    identity: String,
    lease_duration: Duration,
    /// The version of the Lease this candidate last saw held by another, and when it first saw it.
    observed: std::sync::Arc<Mutex<Option<Observed>>>,
}

/// A version of another holder's Lease, as this candidate saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Observed {
    /// Its `resourceVersion`: any renewal changes it.
    version: String,
    /// When this candidate first saw that version, by its own clock.
    at: Instant,
}

/// What a look at the Lease found.
enum Outcome {
    /// We hold it now.
    Held,
    /// Someone else holds a live lease.
    Taken(String),
}

/// Whether another holder's Lease is over: unchanged since this candidate first saw `version` at `seen_at`, for
/// longer than the lease's own duration (`lease_seconds`), measured at `now` on this candidate's clock.
fn over(seen_at: Instant, lease_seconds: Option<i32>, now: Instant) -> bool {
    let duration = Duration::from_secs(u64::try_from(lease_seconds.unwrap_or(0)).unwrap_or(0));
    now.saturating_duration_since(seen_at) > duration
}

impl LeaderElector {
    /// A candidate `identity` for Lease `name` in the namespace of `api`, holding it for `lease_duration` per renewal.
    pub fn new(api: Api<Lease>, name: &str, identity: &str, lease_duration: Duration) -> Self {
        Self {
            api,
            name: name.into(),
            identity: identity.into(),
            lease_duration,
            observed: Default::default(),
        }
    }

    /// How long a leader goes on without a successful renewal: two thirds of the lease, as client-go's 10 s of 15.
    pub fn renew_deadline(&self) -> Duration {
        self.lease_duration * 2 / 3
    }

    fn retry_period(&self) -> Duration {
        self.lease_duration / 6
    }

    /// Waits until this candidate holds the Lease.
    pub async fn acquire(&self) -> kube::Result<()> {
        let mut logged = false;
        loop {
            let looked =
                tokio::time::timeout(self.renew_deadline(), self.try_acquire_or_renew()).await;
            match looked {
                Ok(Ok(Outcome::Held)) => {
                    tracing::info!(lease = %self.name, identity = %self.identity, "became the leader");
                    return Ok(());
                }
                Ok(Ok(Outcome::Taken(holder))) => {
                    if !logged {
                        tracing::info!(lease = %self.name, %holder, "waiting for the leader's lease to end");
                        logged = true;
                    }
                }
                Ok(Err(e)) => {
                    tracing::warn!(lease = %self.name, error = %e, "could not read the lease; retrying")
                }
                Err(_) => {
                    tracing::warn!(lease = %self.name, "reading the lease timed out; retrying")
                }
            }
            tokio::time::sleep(self.retry_period()).await;
        }
    }

    /// Renews the Lease; returns, saying why, once leadership is lost: the Lease was taken, or no renewal succeeded
    /// within the renew deadline of the last one (each attempt is cut off there).
    pub async fn hold(&self) -> String {
        let mut last_renewal = Instant::now();
        loop {
            tokio::time::sleep(self.retry_period()).await;
            let left = self.renew_deadline().saturating_sub(last_renewal.elapsed());
            let failure = match tokio::time::timeout(left, self.try_acquire_or_renew()).await {
                Ok(Ok(Outcome::Held)) => {
                    last_renewal = Instant::now();
                    continue;
                }
                Ok(Ok(Outcome::Taken(holder))) => {
                    return format!("lease {} was taken by {holder}", self.name);
                }
                Ok(Err(e)) => e.to_string(),
                Err(_) => "the renewal timed out".to_owned(),
            };
            if last_renewal.elapsed() >= self.renew_deadline() {
                return format!(
                    "could not renew lease {} within {:?}: {failure}",
                    self.name,
                    self.renew_deadline()
                );
            }
            tracing::warn!(lease = %self.name, error = %failure, "lease renewal failed; retrying");
        }
    }

    /// Gives the Lease up at once (on a clean shutdown), so another replica need not wait for it to expire.
    pub async fn release(&self) -> kube::Result<()> {
        if let Some(mut lease) = self.api.get_opt(&self.name).await? {
            let spec = lease.spec.get_or_insert_with(Default::default);
            if spec.holder_identity.as_deref() == Some(self.identity.as_str()) {
                spec.holder_identity = None;
                spec.renew_time = None;
                self.api
                    .replace(&self.name, &PostParams::default(), &lease)
                    .await?;
            }
        }
        Ok(())
    }

    async fn try_acquire_or_renew(&self) -> kube::Result<Outcome> {
        let now = Timestamp::now();
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..Default::default()
                },
                spec: Some(self.spec(now, now, 0)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(Outcome::Held),
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    Ok(Outcome::Taken("another candidate".into()))
                }
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let ours = holder.as_deref() == Some(self.identity.as_str());
        if let (Some(holder), false) = (&holder, ours)
            && !self.seen_over(
                lease.metadata.resource_version.clone(),
                spec.lease_duration_seconds,
            )
        {
            return Ok(Outcome::Taken(holder.clone()));
        }
        let (acquired, transitions) = if ours {
            (
                spec.acquire_time.map(|t| t.0).unwrap_or(now),
                spec.lease_transitions.unwrap_or(0),
            )
        } else {
            (now, spec.lease_transitions.unwrap_or(0) + 1)
        };
        lease.spec = Some(self.spec(acquired, now, transitions));
        // `replace` carries the resourceVersion we read: if another candidate wrote in between, this conflicts.
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(Outcome::Held),
            Err(kube::Error::Api(s)) if s.code == 409 => {
                Ok(Outcome::Taken("another candidate".into()))
            }
            Err(e) => Err(e),
        }
    }

    /// Whether another holder's Lease at `version` is over by this candidate's clock: a version not seen before
    /// starts the count again.
    fn seen_over(&self, version: Option<String>, lease_seconds: Option<i32>) -> bool {
        let now = Instant::now();
        let version = version.unwrap_or_default();
        let mut observed = self.observed.lock().unwrap_or_else(|e| e.into_inner());
        match &*observed {
            Some(seen) if seen.version == version => over(seen.at, lease_seconds, now),
            _ => {
                *observed = Some(Observed { version, at: now });
                false
            }
        }
    }

    fn spec(&self, acquired: Timestamp, renewed: Timestamp, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(
                i32::try_from(self.lease_duration.as_secs()).unwrap_or(i32::MAX),
            ),
            acquire_time: Some(MicroTime(acquired)),
            renew_time: Some(MicroTime(renewed)),
            lease_transitions: Some(transitions),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_is_over_only_after_its_duration_has_passed_on_the_local_clock() {
        let seen = Instant::now();
        assert!(!over(seen, Some(15), seen));
        assert!(!over(seen, Some(15), seen + Duration::from_secs(15)));
        assert!(over(seen, Some(15), seen + Duration::from_secs(16)));
        // A lease without a duration is over as soon as time has passed; a negative one likewise.
        assert!(over(seen, None, seen + Duration::from_millis(1)));
        assert!(over(seen, Some(-5), seen + Duration::from_millis(1)));
        // Huge durations do not overflow.
        assert!(!over(
            seen,
            Some(i32::MAX),
            seen + Duration::from_secs(3600)
        ));
    }
}
