//! The owner's byte quota as the gateway keeps it. A write (PUT, copy, part) first reserves its bytes against the
//! quota ([`store::reserve`]: one statement, serialized per owner, so concurrent writes cannot pass the quota
//! together) and answers 507 before any byte reaches the backend when they would pass it; when the backend
//! answered, the write settles: its real size moves into the store's usage, or its reservation is released.
//!
//! A plain write that stored what it reserved (PUT, CopyObject) is settled after its answer: the reservation
//! already counts those bytes against the quota (and in the usage the API reports), so the client need not wait
//! for a second statement. A task applies every settlement waiting in one statement ([`store::settle_many`]),
//! so a burst of small writes costs one reservation each and a few shared settlements. Should the gateway stop
//! before a settlement runs, the reservation keeps counting until a recount replaces it with what the backend
//! holds ([`super::recount`]); the quota is never short of a stored byte. Every other settlement (deleted versions,
//! multipart parts, completed or aborted uploads, released reservations) runs before the answer, so the usage a
//! client reads after its call already shows it, and the parts of an upload are counted in the order they were
//! answered, whichever gateway replica answered them.
//!
//! A small plain write takes its bytes from a quota lease instead of reserving them ([`super::lease`]); the same
//! task counts it after its answer, when it sweeps the leases (every [`SWEEP`]), and ends the leases that serve no
//! more.
//!
//! A delete of versions by id frees the bytes it measured just before it was sent ([`Quota::freeing`]), so two
//! deletes of one version at once would both measure it and both free it: a tenant could delete a version many
//! times over and store past the quota until the next recount. Deletes of versions therefore hold their keys'
//! locks ([`store::lock_keys`], across every gateway replica) from the measure to the backend's answer. The locks
//! keep the backend whole too: versitygw, deleting versions of one key from several requests at once, can leave
//! the key with an object it lost the metadata of, which every one of those deletes answered as gone. The locks
//! live on a small pool of their own ([`LOCK_CONNECTIONS`]), so deletes waiting for them never hold the
//! connections the counting needs.

use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;
use s3s::{S3Error, S3ErrorCode, S3Result};
use sqlx::PgPool;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use uuid::Uuid;

use super::lease::{self, Leases};
use super::store::{self, Reserved, Settled};
use super::tenants::{Tenant, no_such_bucket, unavailable};

/// Most settlements applied in one statement.
const MAX_BATCH: usize = 512;
/// How long to wait before applying a batch again after the database failed it.
const RETRY: Duration = Duration::from_secs(1);
/// How often the leases' stored bytes are counted and the leases that serve no more ended.
const SWEEP: Duration = Duration::from_millis(250);
/// Connections that hold deletes' key locks, per gateway process; more deletes of versions at once wait for one.
const LOCK_CONNECTIONS: u32 = 4;

/// What the backend holds of one version about to be deleted by id, measured under its key's lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stored {
    /// The version, this many bytes (0 for a delete marker, or when it could not be read).
    Bytes(i64),
    /// No such version: the backend answered 404 (an earlier delete took it, or it never was).
    Gone,
}

impl Stored {
    /// The bytes deleting it frees.
    pub fn bytes(self) -> i64 {
        match self {
            Self::Bytes(bytes) => bytes,
            Self::Gone => 0,
        }
    }

    /// Whether `err`, the backend's answer to deleting this version, only says it was already gone. S3 answers a
    /// delete of a version it does not hold 204 with that version's id, so concurrent deletes of one version all
    /// succeed; versitygw answers `InvalidArgument` when no version of the key is left, and `InternalError` when a
    /// key above it is a file (versity/versitygw#1758, #1757). Only a version measured gone is taken for deleted.
    pub fn already_deleted(self, err: &S3Error) -> bool {
        self == Self::Gone
            && matches!(
                err.code(),
                S3ErrorCode::InvalidArgument | S3ErrorCode::InternalError
            )
    }
}

/// How a write that went through moves the stored bytes.
#[derive(Debug)]
pub enum Settlement {
    /// It stored exactly what it reserved (settled after the answer).
    Reserved,
    /// It moved the stored bytes by this many (settled before the answer).
    Delta(i64),
    /// A part of an upload was stored (replacing one of the same number).
    Part {
        /// The upload.
        upload_id: String,
        /// The part's number.
        part_number: i32,
        /// Its size.
        bytes: i64,
    },
    /// An upload ended: completed as an object of `object_bytes` (`None`: as big as its parts), or aborted
    /// (`Some(0)`).
    Upload {
        /// The upload.
        upload_id: String,
        /// The object's size.
        object_bytes: Option<i64>,
    },
}

/// Reservations and settlements of the gateway's writes.
#[derive(Clone)]
pub struct Quota {
    db: PgPool,
    locks: PgPool,
    leases: Arc<Leases>,
    later: mpsc::UnboundedSender<Settled>,
}

/// The task that applies settlements after their answers; see [`Settler::finish`].
pub struct Settler(JoinHandle<()>);

impl Settler {
    /// Waits, for at most `limit`, until every settlement queued by the [`Quota`] this came with is applied. Only
    /// ends early once every clone of that `Quota` is dropped (the service that held them has stopped).
    pub async fn finish(self, limit: Duration) {
        if tokio::time::timeout(limit, self.0).await.is_err() {
            tracing::warn!(
                "settlements still waiting for the database; their reservations count until a recount"
            );
        }
    }
}

fn over_quota(tenant: &Tenant) -> S3Error {
    let mut err = S3Error::with_message(
        S3ErrorCode::Custom("QuotaExceeded".into()),
        format!(
            "this write would pass the account's object storage quota of {} bytes (every stored version counts)",
            tenant.byte_limit
        ),
    );
    err.set_status_code(StatusCode::INSUFFICIENT_STORAGE);
    err
}

impl Quota {
    /// The quota kept in `db`, with the task that settles writes after their answers.
    pub fn start(db: PgPool) -> (Self, Settler) {
        let (later, queued) = mpsc::unbounded_channel();
        let leases = Arc::new(Leases::default());
        let task = tokio::spawn(settle_later(db.clone(), leases.clone(), queued));
        let locks = sqlx::postgres::PgPoolOptions::new()
            .max_connections(LOCK_CONNECTIONS)
            .acquire_timeout(db.options().get_acquire_timeout())
            .connect_lazy_with(db.connect_options().as_ref().clone());
        let quota = Self {
            db,
            locks,
            leases,
            later,
        };
        (quota, Settler(task))
    }

    /// Forwards a plain write of `bytes` (a PUT or a copy) through `send`, counted as [`Self::counted`] counts it;
    /// a small one takes its bytes from a lease instead of reserving them.
    pub async fn write<O>(
        &self,
        tenant: &Tenant,
        bytes: i64,
        send: impl Future<Output = S3Result<O>>,
    ) -> S3Result<O> {
        if bytes <= lease::SMALL_WRITE
            && let Some(take) = self.leases.take(&self.db, tenant, bytes).await?
        {
            return send.await.inspect_err(|_| take.failed());
        }
        self.counted(tenant, bytes, async {
            Ok((send.await?, Settlement::Reserved))
        })
        .await
    }

    /// Deletes versions of `keys` by id through `send`, which measures what it deletes (after the keys' locks are
    /// taken, before it sends) and answers how the stored bytes moved, counted as [`Self::counted`] counts it.
    pub async fn freeing<O>(
        &self,
        tenant: &Tenant,
        keys: &[&str],
        send: impl Future<Output = S3Result<(O, Settlement)>>,
    ) -> S3Result<O> {
        let locked = store::lock_keys(&self.locks, tenant.channel_id, keys)
            .await
            .map_err(unavailable)?;
        let out = self.counted(tenant, 0, send).await?;
        if let Err(e) = locked.commit().await {
            // The delete is done and counted; the locks went with the transaction all the same.
            tracing::warn!(error = %e, "could not end a delete's key locks");
        }
        Ok(out)
    }

    /// Reserves `bytes`, then forwards through `send`, which answers the output and how the stored bytes moved;
    /// the move is counted when it succeeds (see the module docs for when), the reservation released when it
    /// fails. A write that would pass the quota answers 507 and `send` never runs.
    pub async fn counted<O>(
        &self,
        tenant: &Tenant,
        bytes: i64,
        send: impl Future<Output = S3Result<(O, Settlement)>>,
    ) -> S3Result<O> {
        let id = Uuid::new_v4();
        let channel = tenant.channel_id;
        match store::reserve(&self.db, id, channel, bytes, tenant.byte_limit)
            .await
            .map_err(unavailable)?
        {
            Reserved::Ok => {}
            Reserved::OverQuota => return Err(over_quota(tenant)),
            Reserved::Gone => return Err(no_such_bucket(&tenant.virtual_bucket)),
        }
        let (out, settlement) = match send.await {
            Ok(sent) => sent,
            Err(e) => {
                if let Err(e) = store::release(&self.db, id).await {
                    tracing::warn!(error = %e, "could not release a reservation; it counts until a recount");
                }
                return Err(e);
            }
        };
        let db = &self.db;
        let settled = match settlement {
            Settlement::Reserved => {
                let write = Settled {
                    id,
                    channel_id: channel,
                    bytes,
                };
                if self.later.send(write).is_ok() {
                    return Ok(out);
                }
                // The settling task is gone (the runtime is stopping): settle here.
                store::settle_many(db, &[write]).await
            }
            Settlement::Delta(delta) => store::settle(db, id, channel, delta).await,
            Settlement::Part {
                upload_id,
                part_number,
                bytes,
            } => store::settle_part(db, id, channel, &upload_id, part_number, bytes).await,
            Settlement::Upload {
                upload_id,
                object_bytes,
            } => store::settle_upload(db, id, channel, &upload_id, object_bytes).await,
        };
        if let Err(e) = settled {
            // The object is stored; the reservation counts it until a recount does.
            tracing::warn!(error = %e, "could not count a write; the recount will");
        }
        Ok(out)
    }
}

/// Applies the settlements `queued` sends, every one waiting at once, and every [`SWEEP`] what the leases' writes
/// stored, ending the leases that serve no more, until every sender is gone and nothing is left (every lease ended
/// then). A batch the database refuses is tried again; its reservations and leases count meanwhile.
async fn settle_later(
    db: PgPool,
    leases: Arc<Leases>,
    mut queued: mpsc::UnboundedReceiver<Settled>,
) {
    let mut sweep = tokio::time::interval(SWEEP);
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut reserved = Vec::with_capacity(MAX_BATCH);
    let (mut leased, mut ended) = (Vec::new(), Vec::new());
    loop {
        let open = tokio::select! {
            received = queued.recv_many(&mut reserved, MAX_BATCH) => received > 0,
            _ = sweep.tick() => {
                leases.sweep(lease::IDLE, |write| leased.push(write), |lease| ended.push(lease));
                true
            }
        };
        if !open {
            leases.sweep(
                Duration::ZERO,
                |write| leased.push(write),
                |lease| ended.push(lease),
            );
        }
        if !reserved.is_empty() {
            while let Err(e) = store::settle_many(&db, &reserved).await {
                tracing::warn!(error = %e, writes = reserved.len(), "could not count writes; trying again");
                tokio::time::sleep(RETRY).await;
            }
            reserved.clear();
        }
        if !leased.is_empty() || !ended.is_empty() {
            while let Err(e) = store::settle_leases(&db, &leased, &ended).await {
                tracing::warn!(error = %e, leases = leased.len(), "could not count leased writes; trying again");
                tokio::time::sleep(RETRY).await;
            }
            leased.clear();
            ended.clear();
        }
        if !open {
            return;
        }
    }
}
