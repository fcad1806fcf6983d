//! When each token was last used, for its owner's list of tokens. Every request names a token, and writing each
//! use would put a database write on every request: a process records a token's use at most once a minute, in a
//! task of its own, so a request never waits for it and a lost write costs a minute of precision, nothing else.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sqlx::PgPool;
use uuid::Uuid;

/// How often one process records one token's use at most.
pub const PRECISION: Duration = Duration::from_secs(60);
/// Most tokens remembered; past it the memory starts over (a few extra writes, nothing lost).
const MAX_KEPT: usize = 100_000;

/// The tokens this process recorded a use of lately.
#[derive(Default)]
pub struct Uses {
    recorded: Mutex<HashMap<Uuid, Instant>>,
}

impl Uses {
    /// Notes that `token` was used now: records it unless this process did within [`PRECISION`].
    pub fn note(&self, db: &PgPool, token: Uuid) {
        if !self.due(token, Instant::now()) {
            return;
        }
        let db = db.clone();
        tokio::spawn(async move {
            if let Err(e) = slipway_store::db::tokens::record_use(&db, token).await {
                tracing::debug!(error = %e, "the token's use could not be recorded");
            }
        });
    }

    /// Whether a use of `token` at `now` is to be recorded; if so, it counts as recorded.
    fn due(&self, token: Uuid, now: Instant) -> bool {
        let mut recorded = self
            .recorded
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if recorded
            .get(&token)
            .is_some_and(|at| now.duration_since(*at) < PRECISION)
        {
            return false;
        }
        if recorded.len() >= MAX_KEPT {
            recorded.clear();
        }
        recorded.insert(token, now);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_use_is_recorded_once_a_minute_per_token() {
        let uses = Uses::default();
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let start = Instant::now();
        assert!(uses.due(a, start));
        assert!(!uses.due(a, start + Duration::from_secs(59)));
        assert!(uses.due(b, start + Duration::from_secs(1)), "another token");
        assert!(uses.due(a, start + PRECISION));
    }
}
