//! How many registrations, and other unauthenticated or mail-sending requests, may come in. Each is an hourly
//! [`HourlyBudget`] per key (a source address, a mail address, an SSH key), kept in the platform database
//! ([`slipway_store::db::rate_buckets`]) so every replica shares it and a restart does not refill it; registrations
//! also have a global budget (registrations in the last hour, counted in the database too). A spent budget answers
//! 429; the platform operator can also close registration (503 `service_unavailable`).

use std::net::IpAddr;
use std::time::Duration;

use sqlx::PgPool;

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

/// An hourly budget of one kind (`scope`): `per_hour` spends per key, all of which may come at once; 0 is
/// unlimited.
#[derive(Debug, Clone, Copy)]
pub struct HourlyBudget {
    scope: &'static str,
    per_hour: u32,
}

impl HourlyBudget {
    /// `per_hour` spends an hour per key of `scope`.
    pub const fn new(scope: &'static str, per_hour: u32) -> Self {
        Self { scope, per_hour }
    }

    /// Takes one from `key`'s bucket; `Ok(Err(wait))` when it is empty, with how long until the next fits.
    pub async fn spend(&self, db: &PgPool, key: &str) -> sqlx::Result<Result<(), Duration>> {
        if self.per_hour == 0 {
            return Ok(Ok(()));
        }
        slipway_store::db::rate_buckets::spend(
            db,
            self.scope,
            key,
            self.per_hour,
            Duration::from_secs(3600),
        )
        .await
    }

    /// Takes one from the bucket of the source address `source` ([`source_key`]).
    pub async fn spend_from(
        &self,
        db: &PgPool,
        source: IpAddr,
    ) -> sqlx::Result<Result<(), Duration>> {
        self.spend(db, &source_key(source)).await
    }
}

/// The key a source address is counted under. IPv6 sources are bucketed by their /48, the block a site is usually
/// given, so one allocation cannot fill the table with addresses of its own.
pub fn source_key(source: IpAddr) -> String {
    bucket_of(source).to_string()
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
    fn ipv6_sources_share_their_48_and_mapped_ipv4_is_ipv4() {
        let key = |a: &str| source_key(a.parse().unwrap());
        assert_eq!(key("2001:db8::1"), key("2001:db8:0:ffff::2"));
        assert_ne!(key("2001:db8::1"), key("2001:db8:1::1"));
        assert_eq!(key("::ffff:10.0.0.1"), "10.0.0.1");
        assert_eq!(key("10.0.0.1"), "10.0.0.1");
    }
}
