//! Tokens from memory. Every request names its token, and reading it from Postgres each time costs a round trip
//! and the walk up its chain for revocations. The cache ([`Noticed`]) keeps each token it has read for [`TTL`], and
//! a revocation still takes effect at once:
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
//!
//! [`TTL`]: slipway_store::db::notices::TTL

use std::sync::Arc;

use sqlx::PgPool;

use slipway_store::db::notices::Noticed;
use slipway_store::db::tokens::TokenRow;

/// The notification channel the trigger of migration `20261124300000` announces changes on.
pub const CHANNEL: &str = "slipway_auth_changed";

/// Token rows by the hash of their plaintext. See the module docs.
pub struct TokenCache(Arc<Noticed<[u8; 32], Option<TokenRow>>>);

impl TokenCache {
    /// A cache that answers from memory once it listens to the changes of `db`: the listening runs as a task
    /// until the cache is dropped.
    pub fn listening_to(db: PgPool) -> Arc<Self> {
        // Every notice concerns every token (its payload names nothing).
        Arc::new(Self(Noticed::listening(db, CHANNEL, "tokens", |_| None)))
    }

    /// The token whose plaintext hashes to `hash`, from memory or from `db`.
    pub async fn by_hash(&self, db: &PgPool, hash: &[u8; 32]) -> sqlx::Result<Option<TokenRow>> {
        self.0
            .get(
                hash,
                slipway_store::db::tokens::by_hash(db, hash),
                Option::is_some,
            )
            .await
    }

    /// Forgets every token: something about tokens or accounts changed.
    pub fn forget_all(&self) {
        self.0.forget_all();
    }

    /// How its reads were answered so far.
    pub fn lookups(&self) -> slipway_store::db::notices::Lookups {
        self.0.lookups()
    }

    /// Whether the cache answers from memory (it is listening to changes).
    pub fn is_listening(&self) -> bool {
        self.0.is_listening()
    }
}
