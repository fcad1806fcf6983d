//! A request budget per token, so one client (a runaway script, a leaked token) cannot take the API from everyone
//! else. Each token gets a bucket (GCRA, from the `governor` crate) that refills at a steady rate and holds a burst;
//! a request over it answers 429 `too_many_requests` with `Retry-After`. The budget is per API process: with
//! several replicas a token may use each replica's budget.

use std::num::NonZeroU32;
use std::time::Duration;

pub use governor::Quota;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, RateLimiter};
use uuid::Uuid;

/// How many idle keys a limiter remembers before it forgets the ones whose bucket is full again.
const REMEMBERED_TOKENS: usize = 10_000;

/// What one token may send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Requests per minute, sustained.
    pub per_minute: NonZeroU32,
    /// Requests that may come at once on top of an idle bucket.
    pub burst: NonZeroU32,
}

impl Budget {
    /// The default budget: 600 requests a minute (10 a second) with bursts of 300. Generous for people, agents and
    /// CI scripts; a loop that hammers the API is slowed to that rate.
    pub const DEFAULT: Budget = Budget {
        per_minute: non_zero(600),
        burst: non_zero(300),
    };

    /// A budget from command-line numbers; `None` (no limit) when `per_minute` is 0.
    pub fn from_flags(per_minute: u32, burst: u32) -> Option<Budget> {
        Some(Budget {
            per_minute: NonZeroU32::new(per_minute)?,
            burst: NonZeroU32::new(burst).unwrap_or(NonZeroU32::MIN),
        })
    }
}

const fn non_zero(n: u32) -> NonZeroU32 {
    match NonZeroU32::new(n) {
        Some(n) => n,
        None => panic!("a budget figure is zero"),
    }
}

/// The buckets of every token that sent a request lately.
pub type TokenLimiter = KeyedLimiter<Uuid>;

/// A bucket per key (a token, an address the console mails) that sent lately, in this process; idle keys are
/// forgotten once many are held.
pub struct KeyedLimiter<K: Clone + Eq + std::hash::Hash> {
    limiter: Option<DefaultKeyedRateLimiter<K>>,
}

impl<K: Clone + Eq + std::hash::Hash> KeyedLimiter<K> {
    /// A limiter with `budget` per key; `None` lets every request through.
    pub fn new(budget: Option<Budget>) -> Self {
        Self::with_quota(budget.map(|b| Quota::per_minute(b.per_minute).allow_burst(b.burst)))
    }

    /// A limiter with `quota` per key; `None` lets every request through.
    pub fn with_quota(quota: Option<Quota>) -> Self {
        Self {
            limiter: quota.map(RateLimiter::keyed),
        }
    }

    /// Takes one request from `key`'s bucket; when it is empty, how long until the next request fits.
    pub fn check(&self, key: K) -> Result<(), Duration> {
        let Some(limiter) = &self.limiter else {
            return Ok(());
        };
        if limiter.len() > REMEMBERED_TOKENS {
            limiter.retain_recent();
            limiter.shrink_to_fit();
        }
        limiter
            .check_key(&key)
            .map_err(|not_until| not_until.wait_time_from(DefaultClock::default().now()))
    }
}

impl<K: Clone + Eq + std::hash::Hash> std::fmt::Debug for KeyedLimiter<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyedLimiter")
            .field("enabled", &self.limiter.is_some())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_gets_its_burst_then_waits_and_others_are_not_affected() {
        let limiter = TokenLimiter::new(Budget::from_flags(60, 3));
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        for _ in 0..3 {
            assert!(limiter.check(a).is_ok());
        }
        let wait = limiter.check(a).unwrap_err();
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_secs(1),
            "{wait:?}"
        );
        assert!(limiter.check(b).is_ok(), "budgets are per token");
    }

    #[test]
    fn zero_per_minute_turns_the_limit_off() {
        let limiter = TokenLimiter::new(Budget::from_flags(0, 5));
        let token = Uuid::new_v4();
        assert!((0..10_000).all(|_| limiter.check(token).is_ok()));
    }
}
