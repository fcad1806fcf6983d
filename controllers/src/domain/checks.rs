//! When a custom domain is checked, and what a check's outcome does to its status: the hosting API's state table,
//! with automatic checks of a pending domain backing off from 30 seconds to an hour.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use slipway_crds::{DomainPhase, DomainReason, DomainStatus};

use super::certificate;

/// First wait between automatic checks of a pending domain; it doubles with each failed check.
const FIRST_CHECK_INTERVAL: Duration = Duration::from_secs(30);
/// Longest wait between automatic checks of a pending domain.
const MAX_CHECK_INTERVAL: Duration = Duration::from_secs(3600);
/// How often a domain with nothing due is looked at again.
const RECHECK: Duration = Duration::from_secs(3600);

/// The outcome of a check, applied to a status exactly as the hosting API's state table says: a pass verifies; a
/// definitive failure makes a verified domain pending again; a transient failure records its reason and moves
/// nothing. Returns whether the phase changed.
pub fn apply_check(
    status: &mut DomainStatus,
    outcome: Result<(), DomainReason>,
    now: Timestamp,
) -> bool {
    let before = status.phase;
    status.checked_at = Some(Time(now));
    match outcome {
        Ok(()) => {
            if before != DomainPhase::Verified {
                status.verified_at = Some(Time(now));
            }
            status.phase = DomainPhase::Verified;
            status.reason = None;
            status.failed_checks = 0;
        }
        Err(reason) => {
            status.reason = Some(reason);
            if reason.is_definitive() {
                status.phase = DomainPhase::Pending;
                status.verified_at = None;
            }
            if status.phase == DomainPhase::Pending {
                status.failed_checks = status.failed_checks.saturating_add(1);
            }
        }
    }
    status.phase != before
}

/// Whether a check is due: never checked, a new verify request, or a pending domain whose next automatic check
/// has come. A verified domain is checked again only when asked.
pub fn check_due(status: &DomainStatus, request: Option<&str>, now: Timestamp) -> bool {
    if request.is_some() && request != status.verify_request.as_deref() {
        return true;
    }
    let Some(checked) = &status.checked_at else {
        return true;
    };
    status.phase == DomainPhase::Pending && now >= next_check(checked.0, status.failed_checks)
}

/// When a pending domain checked at `checked` after `failed` failed checks is checked again.
fn next_check(checked: Timestamp, failed: u32) -> Timestamp {
    let wait = FIRST_CHECK_INTERVAL
        .saturating_mul(1 << failed.saturating_sub(1).min(16))
        .min(MAX_CHECK_INTERVAL);
    certificate::after(checked, wait)
}

/// When something next falls due: a pending domain's next automatic check, a certificate's renewal, or the end of
/// an issuance backoff.
pub(super) fn next_wake(status: &DomainStatus, now: Timestamp) -> Duration {
    let mut at = Vec::new();
    if status.phase == DomainPhase::Pending
        && let Some(checked) = &status.checked_at
    {
        at.push(next_check(checked.0, status.failed_checks));
    }
    if status.phase == DomainPhase::Verified
        && let Some(cert) = &status.certificate
    {
        at.extend(cert.renew_at.iter().map(|t| t.0));
        at.extend(cert.next_attempt_at.iter().map(|t| t.0));
    }
    at.into_iter()
        .map(|t| {
            Duration::try_from(t.duration_since(now)).unwrap_or(Duration::ZERO)
                + Duration::from_secs(1)
        })
        .min()
        .unwrap_or(RECHECK)
        .min(RECHECK)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap()
    }

    fn verified() -> DomainStatus {
        let mut s = DomainStatus::default();
        assert!(apply_check(&mut s, Ok(()), at(0)));
        s
    }

    #[test]
    fn a_pass_verifies_and_stamps_the_time() {
        let s = verified();
        assert_eq!(s.phase, DomainPhase::Verified);
        assert_eq!(s.verified_at, Some(Time(at(0))));
        assert_eq!(s.reason, None);
    }

    #[test]
    fn definitive_failures_downgrade_a_verified_domain() {
        use DomainReason::*;
        for reason in [
            TxtNxdomain,
            TxtTokenMismatch,
            DnsNotPointing,
            DomainNxdomain,
        ] {
            let mut s = verified();
            assert!(apply_check(&mut s, Err(reason), at(10)), "{reason:?}");
            assert_eq!(s.phase, DomainPhase::Pending);
            assert_eq!(s.reason, Some(reason));
            assert_eq!(s.verified_at, None);
        }
    }

    #[test]
    fn transient_failures_keep_verified_and_record_the_reason() {
        use DomainReason::*;
        for reason in [TxtLookupFailed, DnsLookupFailed, PlatformIpUnknown] {
            let mut s = verified();
            assert!(!apply_check(&mut s, Err(reason), at(10)), "{reason:?}");
            assert_eq!(s.phase, DomainPhase::Verified);
            assert_eq!(s.reason, Some(reason));
            assert_eq!(s.verified_at, Some(Time(at(0))), "verified_at stays");
            // A pending domain stays pending on them.
            let mut p = DomainStatus::default();
            assert!(!apply_check(&mut p, Err(reason), at(10)));
            assert_eq!(p.phase, DomainPhase::Pending);
        }
    }

    #[test]
    fn pending_domains_are_rechecked_less_and_less_often_and_verified_ones_only_on_request() {
        let mut s = DomainStatus::default();
        assert!(check_due(&s, None, at(0)), "never checked");
        apply_check(&mut s, Err(DomainReason::TxtNxdomain), at(0));
        assert!(!check_due(&s, None, at(29)));
        assert!(check_due(&s, None, at(30)));
        apply_check(&mut s, Err(DomainReason::TxtNxdomain), at(30));
        assert!(!check_due(&s, None, at(89)));
        assert!(check_due(&s, None, at(90)));
        assert!(
            check_due(&s, Some("r1"), at(31)),
            "a request is answered at once"
        );
        s.verify_request = Some("r1".into());
        assert!(!check_due(&s, Some("r1"), at(31)), "once");
        let v = verified();
        assert!(!check_due(&v, None, at(100_000)));
        assert!(check_due(&v, Some("r2"), at(1)));
    }
}
