//! Leader election on a `coordination.k8s.io` Lease, so several operator replicas can run and exactly one
//! reconciles. A replica waits until the Lease is free or expired, takes it, and renews it; if it cannot renew
//! before the Lease would expire, it has lost leadership and must stop reconciling (the operator exits and is
//! restarted as a candidate).

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, PostParams};

/// One candidate for one Lease.
#[derive(Clone)]
pub struct LeaderElector {
    api: Api<Lease>,
    name: String,
    identity: String,
    lease_duration: Duration,
}

/// What a look at the Lease found.
enum Outcome {
    /// We hold it now.
    Held,
    /// Someone else holds a live lease.
    Taken(String),
}

/// Whether a Lease is free to take at `now`: never renewed, or its last renewal plus its duration is past. Checked
/// arithmetic: a Lease is data anyone with write access to it can shape, and an end past the last representable
/// time is simply not over yet.
fn expired(spec: &LeaseSpec, now: Timestamp) -> bool {
    let duration = SignedDuration::from_secs(i64::from(spec.lease_duration_seconds.unwrap_or(0)));
    spec.renew_time
        .as_ref()
        .is_none_or(|t| t.0.checked_add(duration).is_ok_and(|end| end < now))
}

impl LeaderElector {
    /// A candidate `identity` for Lease `name` in the namespace of `api`, holding it for `lease_duration` per renewal.
    pub fn new(api: Api<Lease>, name: &str, identity: &str, lease_duration: Duration) -> Self {
        Self {
            api,
            name: name.into(),
            identity: identity.into(),
            lease_duration,
        }
    }

    fn retry_period(&self) -> Duration {
        self.lease_duration / 3
    }

    /// Waits until this candidate holds the Lease.
    pub async fn acquire(&self) -> kube::Result<()> {
        let mut logged = false;
        loop {
            match self.try_acquire_or_renew().await? {
                Outcome::Held => {
                    tracing::info!(lease = %self.name, identity = %self.identity, "became the leader");
                    return Ok(());
                }
                Outcome::Taken(holder) => {
                    if !logged {
                        tracing::info!(lease = %self.name, %holder, "waiting for the leader's lease to end");
                        logged = true;
                    }
                }
            }
            tokio::time::sleep(self.retry_period()).await;
        }
    }

    /// Renews the Lease until renewal fails for longer than the lease lasts; returns when leadership is lost.
    pub async fn hold(&self) -> String {
        let mut last_renewal = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(self.retry_period()).await;
            match self.try_acquire_or_renew().await {
                Ok(Outcome::Held) => last_renewal = tokio::time::Instant::now(),
                Ok(Outcome::Taken(holder)) => {
                    return format!("lease {} was taken by {holder}", self.name);
                }
                Err(e) if last_renewal.elapsed() >= self.lease_duration => {
                    return format!("could not renew lease {} in time: {e}", self.name);
                }
                Err(e) => tracing::warn!(error = %e, "lease renewal failed; retrying"),
            }
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
        let expired = expired(&spec, now);
        if let (Some(holder), false, false) = (&holder, ours, expired) {
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
    fn a_lease_expires_after_its_duration_and_never_overflows() {
        let now = Timestamp::now();
        let lease = |renewed: Timestamp, seconds: i32| LeaseSpec {
            renew_time: Some(MicroTime(renewed)),
            lease_duration_seconds: Some(seconds),
            ..Default::default()
        };
        assert!(expired(&LeaseSpec::default(), now));
        assert!(!expired(&lease(now, 15), now));
        let past = now.checked_sub(SignedDuration::from_secs(16)).unwrap();
        assert!(expired(&lease(past, 15), now));
        assert!(!expired(&lease(Timestamp::MAX, i32::MAX), now));
    }
}
