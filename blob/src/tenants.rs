//! What the gateway knows of each access key, from memory. Every request names its key, and reading the store
//! from Postgres each time (and opening its sealed secret) would cost a round trip and a decryption per request. So
//! the key pair, the bucket mapping and the owner's byte quota are kept per access key ([`Noticed`]) for [`TTL`],
//! and a change still takes effect at once:
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
//!
//! [`TTL`]: slipway_store::db::notices::TTL

use std::sync::Arc;

use http::StatusCode;
use s3s::auth::{Credentials, S3Auth, SecretKey};
use s3s::{S3Error, S3Result, s3_error};
use slipway_crds::plans::Plan;
use sqlx::PgPool;
use uuid::Uuid;

use super::store;
use slipway_store::db::notices::Noticed;
use slipway_store::env::crypto::Keyring;

/// The notification channel of migration `20261127000000`.
pub const CHANNEL: &str = "slipway_blob_changed";

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

/// Stores by access key, read from the platform database and kept as the module docs say.
pub struct Tenants {
    db: PgPool,
    ring: Keyring,
    kept: Arc<Noticed<String, Option<Arc<Tenant>>>>,
}

impl Tenants {
    /// Stores of `db`, whose secrets open with `ring`, answered from memory once the cache listens to the
    /// database's announcements (a task, until the cache is dropped).
    pub fn listening(db: PgPool, ring: Keyring) -> Arc<Self> {
        // A notice names the access key whose store changed; an empty one concerns every key.
        let named = |key: &str| (!key.is_empty()).then(|| key.to_owned());
        Arc::new(Self {
            kept: Noticed::listening(db.clone(), CHANNEL, "access keys", named),
            db,
            ring,
        })
    }

    /// The platform database.
    pub fn db(&self) -> &PgPool {
        &self.db
    }

    /// Whether keys are answered from memory (the cache is listening to changes).
    pub fn is_listening(&self) -> bool {
        self.kept.is_listening()
    }

    /// The channel `access_key` belongs to, if any. Unknown keys are kept too.
    pub async fn get(&self, access_key: &str) -> S3Result<Option<Arc<Tenant>>> {
        self.kept
            .get(access_key, self.read(access_key), |_| true)
            .await
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
