//! Tokens from memory. Every request names its token, and reading it from Postgres each time costs a round trip
//! and the walk up its chain for revocations. The cache keeps each token it has read for [`TTL`], and a revocation
//! still takes effect at once:
//!
//! - the platform database notifies [`CHANNEL`] on every change to `tokens` or `users` (triggers, so no write path
//!   can forget it, the admin CLI's included), and every process's cache forgets everything when told: another
//!   process's change applies as soon as the notice arrives (milliseconds);
//! - the API's own writes to tokens and accounts (revocation, an SSH login's cap, an email verification's plan)
//!   clear its process's cache before they answer, so the caller's next request is judged by them whatever the
//!   notice's timing;
//! - while the cache is not listening (before its first connection, after one is lost) it answers nothing from
//!   memory, and it forgets everything when it listens again, because notices may have gone unheard;
//! - a read that overlapped a change (the change was announced while it ran) is not kept.
//!
//! New tokens need no notice: a token the cache has not read is read from the database. Unknown tokens are not
//! kept, so a token works the moment it is minted.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::db::notices::{self, Forgetful};
use crate::db::tokens::TokenRow;

/// Longest a token's row is trusted: the bound on a change whose notice was lost on a connection that died
/// without a sign.
pub const TTL: Duration = Duration::from_secs(60);
/// The notification channel the trigger of migration `20261124300000` announces changes on.
pub const CHANNEL: &str = "slipway_auth_changed";
/// Most tokens kept; past it the cache starts over.
const MAX_KEPT: usize = 100_000;

/// Token rows by the hash of their plaintext. See the module docs.
pub struct TokenCache {
    state: Mutex<State>,
    stop: CancellationToken,
}

#[derive(Default)]
struct State {
    listening: bool,
    /// Moves on at every change, so a read that overlapped one is not kept.
    epoch: u64,
    rows: HashMap<[u8; 32], (Instant, TokenRow)>,
}

impl TokenCache {
    /// A cache that answers from memory once it listens to the changes of `db`: the listening runs as a task
    /// until the cache is dropped.
    pub fn listening_to(db: PgPool) -> Arc<Self> {
        let cache = Arc::new(Self {
            state: Mutex::default(),
            stop: CancellationToken::new(),
        });
        tokio::spawn(notices::keep_listening(
            Arc::downgrade(&cache),
            cache.stop.clone(),
            db,
            CHANNEL,
            "tokens",
        ));
        cache
    }

    /// The token whose plaintext hashes to `hash`, from memory or from `db`.
    pub async fn by_hash(&self, db: &PgPool, hash: &[u8; 32]) -> sqlx::Result<Option<TokenRow>> {
        let epoch = {
            let state = self.lock();
            if !state.listening {
                None
            } else if let Some((at, row)) = state.rows.get(hash)
                && at.elapsed() < TTL
            {
                return Ok(Some(row.clone()));
            } else {
                Some(state.epoch)
            }
        };
        let row = crate::db::tokens::by_hash(db, hash).await?;
        if let (Some(epoch), Some(row)) = (epoch, &row) {
            let mut state = self.lock();
            if state.listening && state.epoch == epoch {
                if state.rows.len() >= MAX_KEPT {
                    state.rows.clear();
                }
                state.rows.insert(*hash, (Instant::now(), row.clone()));
            }
        }
        Ok(row)
    }

    /// Forgets every token: something about tokens or accounts changed.
    pub fn forget_all(&self) {
        let mut state = self.lock();
        state.epoch += 1;
        state.rows.clear();
    }

    /// Whether the cache answers from memory (it is listening to changes).
    pub fn is_listening(&self) -> bool {
        self.lock().listening
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Forgetful for TokenCache {
    fn set_listening(&self, listening: bool) {
        let mut state = self.lock();
        state.epoch += 1;
        state.rows.clear();
        state.listening = listening;
    }

    fn heard(&self, _payload: &str) {
        self.forget_all();
    }
}

impl Drop for TokenCache {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
