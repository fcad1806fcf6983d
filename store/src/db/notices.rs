//! In-memory caches that forget what the platform database announces. A trigger notifies a channel on every change
//! to what a cache keeps (so no write path can forget to), and a task per cache listens to it: each notice is handed
//! to the cache, and the cache is told whether anyone is listening at all, because while no one is (before the
//! first connection, after one is lost) notices go unheard and the cache must not answer from memory.
//!
//! [`Noticed`] is such a cache of values by key, with the rules both of the platform's caches (the API's tokens,
//! the S3 gateway's access keys) keep:
//!
//! - a value is answered from memory only while the cache listens, and for at most [`TTL`];
//! - listening starting or stopping forgets everything, because notices may have gone unheard;
//! - a notice forgets the key its payload names, or everything;
//! - a read that overlapped a change (one was announced while it ran) is not kept.
//!
//! A listener keeps its connection for as long as it listens, so it gets a connection of its own, outside the
//! pool it was given: sqlx's listener would otherwise hold one of the pool's connections for good, and requests
//! would share what is left.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use sqlx::PgPool;
use sqlx::postgres::{PgListener, PgPoolOptions};
use tokio_util::sync::CancellationToken;

/// How long to wait before listening again after the connection failed.
const RETRY: Duration = Duration::from_secs(1);
/// Longest a value read is trusted: the bound on a change whose notice was lost on a connection that died without a
/// sign.
pub const TTL: Duration = Duration::from_secs(60);
/// Most values a cache keeps; past it the cache starts over.
const MAX_KEPT: usize = 100_000;

/// A cache kept current by notices.
pub trait Forgetful: Send + Sync + 'static {
    /// Listening started (`true`) or stopped (`false`); either way, what the cache keeps may have missed a change.
    fn set_listening(&self, listening: bool);
    /// A notice arrived with this payload.
    fn heard(&self, payload: &str);
}

/// Listens to `channel` for `cache` until `stop` is cancelled or the cache is dropped, listening again whenever the
/// connection is lost; `what` names the cache in the warning a lost connection logs.
pub async fn keep_listening<C: Forgetful>(
    cache: Weak<C>,
    stop: CancellationToken,
    db: PgPool,
    channel: &'static str,
    what: &'static str,
) {
    // One connection, kept open for as long as the listener wants it, made with the pool's settings.
    let own = PgPoolOptions::new()
        .max_connections(1)
        .idle_timeout(None)
        .max_lifetime(None)
        .connect_lazy_with((*db.connect_options()).clone());
    loop {
        let listened = async {
            let mut listener = PgListener::connect_with(&own).await?;
            // A lost connection ends the wait at once, so the cache stops answering from memory at once.
            listener.eager_reconnect(false);
            listener.listen(channel).await?;
            let Some(live) = cache.upgrade() else {
                return Ok(());
            };
            live.set_listening(true);
            drop(live);
            while let Some(notice) = listener.try_recv().await? {
                let Some(live) = cache.upgrade() else {
                    return Ok(());
                };
                live.heard(notice.payload());
            }
            anyhow::Ok(())
        };
        let ended = tokio::select! {
            () = stop.cancelled() => return,
            ended = listened => ended,
        };
        let Some(live) = cache.upgrade() else {
            return;
        };
        live.set_listening(false);
        drop(live);
        if let Err(e) = ended {
            tracing::warn!(error = %e, "not listening to changes; {what} are read from the database until it is");
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(RETRY) => {}
        }
    }
}

/// Values by key, read from the platform database and kept as the module docs say.
pub struct Noticed<K, V> {
    state: Mutex<State<K, V>>,
    stop: CancellationToken,
    /// The key a notice's payload names; `None`: the notice concerns every key.
    named: fn(&str) -> Option<K>,
    /// Reads answered from memory.
    hits: AtomicU64,
    /// Reads that went to the database.
    misses: AtomicU64,
}

/// How a cache's reads were answered since it was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Lookups {
    /// From memory.
    pub hits: u64,
    /// From the database (not kept, expired, or the cache was not listening).
    pub misses: u64,
}

struct State<K, V> {
    listening: bool,
    /// Moves on at every change, so a read that overlapped one is not kept.
    epoch: u64,
    kept: HashMap<K, (Instant, V)>,
}

impl<K, V> Noticed<K, V>
where
    K: Eq + Hash + Send + 'static,
    V: Clone + Send + 'static,
{
    /// A cache that answers from memory once it listens to `channel` of `db` (a task, until the cache is dropped);
    /// `named` says which key a notice's payload is about, and `what` names the values in the warning a lost
    /// connection logs.
    pub fn listening(
        db: PgPool,
        channel: &'static str,
        what: &'static str,
        named: fn(&str) -> Option<K>,
    ) -> Arc<Self> {
        let cache = Arc::new(Self::new(named));
        tokio::spawn(keep_listening(
            Arc::downgrade(&cache),
            cache.stop.clone(),
            db,
            channel,
            what,
        ));
        cache
    }

    /// A cache that listens to nothing yet, so answers nothing from memory.
    fn new(named: fn(&str) -> Option<K>) -> Self {
        Self {
            state: Mutex::new(State {
                listening: false,
                epoch: 0,
                kept: HashMap::new(),
            }),
            stop: CancellationToken::new(),
            named,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// The value of `key`: from memory when the cache may answer it, else `read`'s, kept (when `keep` says so of
    /// it) unless a change overlapped the read.
    pub async fn get<Q, E>(
        &self,
        key: &Q,
        read: impl Future<Output = Result<V, E>>,
        keep: impl FnOnce(&V) -> bool,
    ) -> Result<V, E>
    where
        K: Borrow<Q>,
        Q: Eq + Hash + ToOwned<Owned = K> + ?Sized,
    {
        let epoch = {
            let state = self.lock();
            if !state.listening {
                None
            } else if let Some((at, value)) = state.kept.get(key)
                && at.elapsed() < TTL
            {
                self.hits.fetch_add(1, Ordering::Relaxed);
                return Ok(value.clone());
            } else {
                Some(state.epoch)
            }
        };
        self.misses.fetch_add(1, Ordering::Relaxed);
        let value = read.await?;
        if let Some(epoch) = epoch
            && keep(&value)
        {
            let mut state = self.lock();
            if state.listening && state.epoch == epoch {
                if state.kept.len() >= MAX_KEPT {
                    state.kept.clear();
                }
                state
                    .kept
                    .insert(key.to_owned(), (Instant::now(), value.clone()));
            }
        }
        Ok(value)
    }

    /// How its reads were answered so far.
    pub fn lookups(&self) -> Lookups {
        Lookups {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
        }
    }

    /// Forgets every value: something they depend on changed.
    pub fn forget_all(&self) {
        self.lock().forget(None);
    }

    /// Whether the cache answers from memory (it is listening to changes).
    pub fn is_listening(&self) -> bool {
        self.lock().listening
    }

    fn lock(&self) -> MutexGuard<'_, State<K, V>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl<K: Eq + Hash, V> State<K, V> {
    /// Forgets `key`'s value, or every value.
    fn forget(&mut self, key: Option<&K>) {
        self.epoch += 1;
        match key {
            Some(key) => {
                self.kept.remove(key);
            }
            None => self.kept.clear(),
        }
    }
}

impl<K, V> Forgetful for Noticed<K, V>
where
    K: Eq + Hash + Send + 'static,
    V: Clone + Send + 'static,
{
    fn set_listening(&self, listening: bool) {
        let mut state = self.lock();
        state.forget(None);
        state.listening = listening;
    }

    fn heard(&self, payload: &str) {
        let key = (self.named)(payload);
        self.lock().forget(key.as_ref());
    }
}

impl<K, V> Drop for Noticed<K, V> {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// A cache whose notices name keys (an empty payload: every key), and a read that counts itself.
    fn cache() -> Noticed<String, Option<u32>> {
        Noticed::new(|payload| (!payload.is_empty()).then(|| payload.to_owned()))
    }

    async fn get(
        cache: &Noticed<String, Option<u32>>,
        key: &str,
        reads: &AtomicUsize,
    ) -> Option<u32> {
        let read = async {
            reads.fetch_add(1, Ordering::SeqCst);
            Ok::<_, ()>(Some(7))
        };
        cache.get(key, read, |_| true).await.unwrap()
    }

    #[tokio::test]
    async fn values_are_kept_only_while_the_cache_listens() {
        let (cache, reads) = (cache(), AtomicUsize::new(0));
        get(&cache, "a", &reads).await;
        get(&cache, "a", &reads).await;
        assert_eq!(
            reads.load(Ordering::SeqCst),
            2,
            "not listening: every get reads"
        );

        cache.set_listening(true);
        assert_eq!(get(&cache, "a", &reads).await, Some(7));
        get(&cache, "a", &reads).await;
        assert_eq!(
            reads.load(Ordering::SeqCst),
            3,
            "listening: the second get is answered from memory"
        );

        cache.set_listening(false);
        get(&cache, "a", &reads).await;
        assert_eq!(
            reads.load(Ordering::SeqCst),
            4,
            "a lost connection forgets and stops answering"
        );
        assert_eq!(cache.lookups(), Lookups { hits: 1, misses: 4 });
    }

    #[tokio::test]
    async fn a_notice_forgets_the_key_it_names_or_every_key() {
        let (cache, reads) = (cache(), AtomicUsize::new(0));
        cache.set_listening(true);
        get(&cache, "a", &reads).await;
        get(&cache, "b", &reads).await;
        cache.heard("a");
        get(&cache, "a", &reads).await;
        get(&cache, "b", &reads).await;
        assert_eq!(reads.load(Ordering::SeqCst), 3, "only a was read again");
        cache.heard("");
        get(&cache, "a", &reads).await;
        get(&cache, "b", &reads).await;
        assert_eq!(reads.load(Ordering::SeqCst), 5, "both were read again");
    }

    #[tokio::test]
    async fn a_read_that_overlapped_a_change_or_is_not_wanted_is_not_kept() {
        let cache = cache();
        cache.set_listening(true);
        // The change is announced while the read runs.
        let read = async {
            cache.heard("a");
            Ok::<_, ()>(Some(1))
        };
        assert_eq!(cache.get("a", read, |_| true).await, Ok(Some(1)));
        let reread = async { Ok::<_, ()>(Some(2)) };
        assert_eq!(
            cache.get("a", reread, |_| true).await,
            Ok(Some(2)),
            "the overlapped read was not kept"
        );

        let unwanted = async { Ok::<_, ()>(None) };
        assert_eq!(cache.get("b", unwanted, Option::is_some).await, Ok(None));
        let found = async { Ok::<_, ()>(Some(3)) };
        assert_eq!(
            cache.get("b", found, Option::is_some).await,
            Ok(Some(3)),
            "the unwanted value was not kept"
        );
    }
}
