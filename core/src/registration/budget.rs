//! How many registrations may come in: a budget per source address (a GCRA bucket per address, refilled over an
//! hour, in this process) and a global one (registrations in the last hour, counted in the platform database, so
//! every replica shares it). A spent budget answers 429; the platform operator can also close registration
//! (503 `service_unavailable`).

use std::net::IpAddr;
use std::num::NonZeroU32;

use slipway_auth::rate::{KeyedLimiter, Quota};

/// The registration switch and budgets (`slipway api` flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegistrationLimits {
    /// Whether `POST /registrations` takes new accounts.
    pub open: bool,
    /// Registrations one source address may make in an hour; 0 is unlimited.
    pub per_source_per_hour: u32,
    /// Registrations the platform takes in an hour from everyone; 0 is unlimited.
    pub global_per_hour: u32,
}

impl Default for RegistrationLimits {
    fn default() -> Self {
        Self {
            open: true,
            per_source_per_hour: 5,
            global_per_hour: 100,
        }
    }
}

/// The per-source buckets. IPv6 sources are bucketed by their /48, the block a site is usually given, so one
/// allocation cannot fill the limiter with addresses of its own.
#[derive(Debug)]
pub struct SourceBudget {
    limiter: KeyedLimiter<IpAddr>,
}

/// A quota of `n` an hour, all of which may come at once (`n` of 0 counts as 1).
pub fn per_hour(n: u32) -> Quota {
    Quota::per_hour(NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN))
}

impl SourceBudget {
    /// Buckets of `per_hour` registrations, all of which may come at once.
    pub fn new(per_hour: u32) -> Self {
        Self {
            limiter: KeyedLimiter::with_quota(NonZeroU32::new(per_hour).map(Quota::per_hour)),
        }
    }

    /// Takes one registration from `source`'s bucket; when it is empty, how long until the next fits.
    pub fn spend(&self, source: IpAddr) -> Result<(), std::time::Duration> {
        self.limiter.check(bucket_of(source))
    }
}

/// The address a source is counted under: IPv4 (and IPv4-mapped IPv6) as is, other IPv6 by its /48.
fn bucket_of(source: IpAddr) -> IpAddr {
    match source {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let prefix = u128::from(v6) & !((1u128 << 80) - 1);
                IpAddr::V6(prefix.into())
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_gets_its_hourly_budget_and_others_keep_theirs() {
        let budget = SourceBudget::new(2);
        let (a, b) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        assert!(budget.spend(a).is_ok() && budget.spend(a).is_ok());
        let wait = budget.spend(a).unwrap_err();
        assert!(wait > std::time::Duration::from_secs(60), "{wait:?}");
        assert!(budget.spend(b).is_ok());
    }

    #[test]
    fn ipv6_sources_share_their_48_and_mapped_ipv4_is_ipv4() {
        let budget = SourceBudget::new(1);
        assert!(budget.spend("2001:db8::1".parse().unwrap()).is_ok());
        assert!(budget.spend("2001:db8:0:ffff::2".parse().unwrap()).is_err());
        assert!(budget.spend("2001:db8:1::1".parse().unwrap()).is_ok());
        assert!(budget.spend("192.0.2.7".parse().unwrap()).is_ok());
        assert!(budget.spend("::ffff:192.0.2.7".parse().unwrap()).is_err());
    }

    #[test]
    fn zero_is_unlimited() {
        let budget = SourceBudget::new(0);
        let a = "10.0.0.1".parse().unwrap();
        assert!((0..1000).all(|_| budget.spend(a).is_ok()));
    }
}
