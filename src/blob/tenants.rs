//! What the gateway knows of each access key, from memory. Every request names its key, and reading the store
//! from Postgres each time (and opening its sealed secret) would cost a round trip and a decryption per request. So
//! the key pair, the bucket mapping and the owner's byte quota are kept per access key for [`TTL`], and a change
//! still takes effect at once:
//!
//! - the platform database announces on [`CHANNEL`] every change to a store's key pair, buckets or owner (the
//!   access key id is the payload; a channel deleted, a secret resealed or replaced) and every change of an
//!   account's plan or existence (an empty payload: forget everything), by triggers, so no write path can forget
//!   to; the gateway forgets what it heard of as soon as the notice arrives;
//! - while the cache is not listening (before its first connection, after one is lost) it answers nothing from
//!   memory and reads every request's key from the database, and it forgets everything when it listens again;
//! - a read that overlapped a change (one was announced while it ran) is not kept.
//!
//! Unknown keys are kept too, so a client retrying a bad key costs one read per [`TTL`]; a store made later with
//! that key is announced like any change.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::StatusCode;
use s3s::auth::{Credentials, S3Auth, SecretKey};
use s3s::{S3Error, S3Result, s3_error};
use slipway_crds::plans::Plan;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::store;
use crate::db::notices::{self, Forgetful};
use crate::env::crypto::Keyring;

/// Longest a looked-up key is trusted: the bound on a change whose notice was lost on a connection that died
/// without a sign.
pub const TTL: Duration = Duration::from_secs(60);
/// The notification channel of migration `20261127000000`.
pub const CHANNEL: &str = "slipway_blob_changed";
/// Most keys kept; past it the cache starts over.
const MAX_KEPT: usize = 100_000;

/// What the gateway knows of the channel a request is signed for.
#[derive(Debug)]
pub struct Tenant {
    /// The channel's id.
    pub channel_id: Uuid,
    /// The bucket name the client uses.
    pub virtual_bucket: String,
    /// The bucket on the backend.
    pub backend_bucket: String,
    /// The owner's byte quota (-1: unlimited).
    pub byte_limit: i64,
    /// When the store was made (the bucket's creation date).
    pub created_at: chrono::DateTime<chrono::Utc>,
    secret: String,
}

impl Tenant {
    /// Checks that `bucket` is the tenant's own and names its backend bucket instead; any other name answers 404
    /// `NoSuchBucket`, exactly as a bucket that does not exist.
    pub fn enter(&self, bucket: &mut String) -> S3Result<()> {
        if *bucket != self.virtual_bucket {
            return Err(no_such_bucket(bucket));
        }
        bucket.clone_from(&self.backend_bucket);
        Ok(())
    }
}

/// The answer for a bucket a key may not reach, or that does not exist.
pub fn no_such_bucket(bucket: &str) -> S3Error {
    s3_error!(NoSuchBucket, "the bucket {bucket} does not exist")
}

/// The answer when the platform database does not answer.
pub fn unavailable(e: impl std::fmt::Display) -> S3Error {
    tracing::warn!(error = %e, "platform database unavailable");
    let mut err = s3_error!(
        ServiceUnavailable,
        "object storage is unavailable; try again"
    );
    err.set_status_code(StatusCode::SERVICE_UNAVAILABLE);
    err
}

/// A cached lookup: when it was made and what it found.
type Kept = (Instant, Option<Arc<Tenant>>);

#[derive(Default)]
struct State {
    listening: bool,
    /// Moves on at every change, so a read that overlapped one is not kept.
    epoch: u64,
    kept: HashMap<String, Kept>,
}

/// Stores by access key, read from the platform database and kept as the module docs say.
pub struct Tenants {
    db: PgPool,
    ring: Keyring,
    state: Mutex<State>,
    stop: CancellationToken,
}

impl Tenants {
    /// Stores of `db`, whose secrets open with `ring`, answered from memory once the cache listens to the
    /// database's announcements (a task, until the cache is dropped).
    pub fn listening(db: PgPool, ring: Keyring) -> Arc<Self> {
        let tenants = Arc::new(Self {
            db: db.clone(),
            ring,
            state: Mutex::default(),
            stop: CancellationToken::new(),
        });
        tokio::spawn(notices::keep_listening(
            Arc::downgrade(&tenants),
            tenants.stop.clone(),
            db,
            CHANNEL,
            "access keys",
        ));
        tenants
    }

    /// The platform database.
    pub fn db(&self) -> &PgPool {
        &self.db
    }

    /// Whether keys are answered from memory (the cache is listening to changes).
    pub fn is_listening(&self) -> bool {
        self.lock().listening
    }

    /// The channel `access_key` belongs to, if any.
    pub async fn get(&self, access_key: &str) -> S3Result<Option<Arc<Tenant>>> {
        let epoch = {
            let state = self.lock();
            if !state.listening {
                None
            } else if let Some((at, tenant)) = state.kept.get(access_key)
                && at.elapsed() < TTL
            {
                return Ok(tenant.clone());
            } else {
                Some(state.epoch)
            }
        };
        let tenant = self.read(access_key).await?;
        if let Some(epoch) = epoch {
            let mut state = self.lock();
            if state.listening && state.epoch == epoch {
                if state.kept.len() >= MAX_KEPT {
                    state.kept.clear();
                }
                state
                    .kept
                    .insert(access_key.to_owned(), (Instant::now(), tenant.clone()));
            }
        }
        Ok(tenant)
    }

    /// The channel whose key pair signed a request with `credentials` (checked by s3s).
    pub async fn signer(&self, credentials: Option<&Credentials>) -> S3Result<Arc<Tenant>> {
        let credentials = credentials.ok_or_else(|| {
            s3_error!(
                AccessDenied,
                "requests must be signed with the channel's key pair"
            )
        })?;
        self.get(&credentials.access_key)
            .await?
            .ok_or_else(|| s3_error!(InvalidAccessKeyId))
    }

    /// Reads the store of `access_key` and opens its secret.
    async fn read(&self, access_key: &str) -> S3Result<Option<Arc<Tenant>>> {
        let Some((row, plan)) = store::by_access_key(&self.db, access_key)
            .await
            .map_err(unavailable)?
        else {
            return Ok(None);
        };
        let secret = row.secret(&self.ring).map_err(|e| {
            tracing::error!(channel_id = %row.channel_id, error = %e, "a store's secret does not open");
            s3_error!(InternalError)
        })?;
        let byte_limit = plan
            .as_deref()
            .and_then(Plan::by_tier)
            // An owner without an account (or an unknown plan) gets nothing more stored.
            .map_or(0, |p| p.blob_storage_bytes);
        Ok(Some(Arc::new(Tenant {
            channel_id: row.channel_id,
            virtual_bucket: row.virtual_bucket,
            backend_bucket: row.backend_bucket,
            byte_limit,
            created_at: row.created_at,
            secret,
        })))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Forgetful for Tenants {
    fn set_listening(&self, listening: bool) {
        let mut state = self.lock();
        state.epoch += 1;
        state.kept.clear();
        state.listening = listening;
    }

    fn heard(&self, access_key: &str) {
        let mut state = self.lock();
        state.epoch += 1;
        if access_key.is_empty() {
            state.kept.clear();
        } else {
            state.kept.remove(access_key);
        }
    }
}

impl Drop for Tenants {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// SigV4 secrets of channels, for s3s's signature checks.
pub struct ChannelKeys(pub Arc<Tenants>);

#[async_trait::async_trait]
impl S3Auth for ChannelKeys {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        match self.0.get(access_key).await? {
            Some(tenant) => Ok(SecretKey::from(tenant.secret.as_str())),
            None => Err(s3_error!(
                InvalidAccessKeyId,
                "the access key does not name a channel's store"
            )),
        }
    }
}
