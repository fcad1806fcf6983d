//! Condition types and reasons the reconcilers write into `status.conditions`, and the one helper that sets a
//! condition without churn (its `lastTransitionTime` moves only when its status really changes).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// The object is serving / has done what its spec asks.
pub const READY: &str = "Ready";
/// The spec was accepted (references resolve, cross-object rules hold).
pub const ACCEPTED: &str = "Accepted";
/// A channel's bucket exists on the object-store backend with versioning on, and its store is recorded.
pub const OBJECT_STORE_READY: &str = "ObjectStoreReady";
/// A channel's SQL database and its two roles exist on the data server, and the database is recorded.
pub const DATABASE_READY: &str = "DatabaseReady";
/// A Domain's DNS records passed the last check that counted (its phase is `verified`).
pub const VERIFIED: &str = "Verified";
/// A Domain's certificate is issued and current.
pub const CERTIFICATE_READY: &str = "CertificateReady";

/// Reasons, `UpperCamelCase` as Kubernetes conventions ask.
pub mod reasons {
    /// Work has started but is not finished.
    pub const PROVISIONING: &str = "Provisioning";
    /// Everything the spec asks for is in place.
    pub const RECONCILED: &str = "Reconciled";
    /// A referenced object does not exist.
    pub const REFERENCE_NOT_FOUND: &str = "ReferenceNotFound";
    /// The spec breaks a rule the schema cannot express.
    pub const INVALID_SPEC: &str = "InvalidSpec";
    /// A deploy is queued or running.
    pub const DEPLOYING: &str = "Deploying";
    /// The last deploy failed.
    pub const DEPLOY_FAILED: &str = "DeployFailed";
    /// The channel's bucket could not be made or checked (the message says why); retried.
    pub const OBJECT_STORE_FAILED: &str = "ObjectStoreFailed";
    /// The channel's SQL database could not be provisioned (the message says why); retried hourly.
    pub const DATABASE_FAILED: &str = "DatabaseFailed";
    /// A Domain's TXT and routing records passed.
    pub const DNS_VERIFIED: &str = "DnsVerified";
    /// A Domain has not been checked yet.
    pub const NOT_CHECKED: &str = "NotChecked";
    /// A certificate was issued.
    pub const ISSUED: &str = "Issued";
    /// The last issuance failed; it is retried after a backoff.
    pub const ISSUE_FAILED: &str = "IssueFailed";
    /// No certificate is asked for yet (the domain is not verified).
    pub const NOT_VERIFIED: &str = "NotVerified";
    /// The platform has no ACME CA configured, so no certificate is issued.
    pub const ACME_NOT_CONFIGURED: &str = "AcmeNotConfigured";
    /// The platform lacks what the object needs (a Forward: no forward port range).
    pub const NOT_CONFIGURED: &str = "NotConfigured";
    /// A Forward keeps its address but does not serve (the app's toggle or the owner's plan is off).
    pub const INACTIVE: &str = "Inactive";
}

/// Sets `condition` in `conditions`, keyed by type. Returns whether anything changed; `lastTransitionTime` is kept
/// when the status did not change, so writing the same condition twice is a no-op.
pub fn set_condition(conditions: &mut Vec<Condition>, mut condition: Condition) -> bool {
    match conditions.iter_mut().find(|c| c.type_ == condition.type_) {
        Some(existing) => {
            if existing.status == condition.status {
                condition.last_transition_time = existing.last_transition_time.clone();
            }
            if *existing == condition {
                return false;
            }
            *existing = condition;
            true
        }
        None => {
            conditions.push(condition);
            true
        }
    }
}

/// A condition of `type_` with the given status, reason and message, observed at `generation`, stamped `now`.
pub fn condition(
    type_: &str,
    status: bool,
    reason: &str,
    message: impl Into<String>,
    generation: Option<i64>,
    now: Time,
) -> Condition {
    Condition {
        type_: type_.to_owned(),
        status: if status { "True" } else { "False" }.to_owned(),
        reason: reason.to_owned(),
        message: message.into(),
        observed_generation: generation,
        last_transition_time: now,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn at(secs: i64) -> Time {
        Time(Timestamp::from_second(secs).unwrap())
    }

    #[test]
    fn same_status_keeps_the_transition_time() {
        let mut conds = vec![];
        assert!(set_condition(
            &mut conds,
            condition(
                READY,
                false,
                reasons::PROVISIONING,
                "waiting",
                Some(1),
                at(10)
            )
        ));
        assert!(!set_condition(
            &mut conds,
            condition(
                READY,
                false,
                reasons::PROVISIONING,
                "waiting",
                Some(1),
                at(20)
            )
        ));
        assert_eq!(conds[0].last_transition_time, at(10));
        assert!(set_condition(
            &mut conds,
            condition(
                READY,
                false,
                reasons::PROVISIONING,
                "still waiting",
                Some(2),
                at(30)
            )
        ));
        assert_eq!(conds[0].last_transition_time, at(10));
        assert!(set_condition(
            &mut conds,
            condition(READY, true, reasons::RECONCILED, "", Some(2), at(40))
        ));
        assert_eq!(conds[0].last_transition_time, at(40));
        assert_eq!(conds.len(), 1);
    }
}
