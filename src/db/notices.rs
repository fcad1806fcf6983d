//! In-memory caches that forget what the platform database announces. A trigger notifies a channel on every change
//! to what a cache keeps (so no write path can forget to), and a task per cache listens to it: each notice is handed
//! to the cache, and the cache is told whether anyone is listening at all, because while no one is (before the
//! first connection, after one is lost) notices go unheard and the cache must not answer from memory. Used by the
//! API's token cache and the S3 gateway's key cache.

use std::sync::Weak;
use std::time::Duration;

use sqlx::PgPool;
use sqlx::postgres::PgListener;
use tokio_util::sync::CancellationToken;

/// How long to wait before listening again after the connection failed.
const RETRY: Duration = Duration::from_secs(1);

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
    loop {
        let listened = async {
            let mut listener = PgListener::connect_with(&db).await?;
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
