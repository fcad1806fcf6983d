//! Quota leases: how small writes stay off the database's critical path. Reserving each write in the database
//! ([`store::reserve`], serialized per owner) costs more than storing a kilobyte on the backend, so a small plain
//! write takes its bytes from a lease instead: a slice of the owner's remaining quota reserved at once for one
//! channel ([`store::lease`]: at most an eighth of what is left, so a lease never holds much of it). The lease is a
//! reservation like any other in the database, counted against the quota by every gateway replica, so no replica
//! can pass the quota through another's lease; writes take from it here, in memory, and the settler moves what
//! they stored out of it and into the usage after their answers ([`store::settle_leases`]).
//!
//! A lease ends (what is left of it stops counting) once its channel's writes have been idle for [`IDLE`], or
//! when it can no longer serve a write and its last write in flight has ended. Near the quota, where an eighth of
//! what is left is less than [`SMALLEST`], no lease is granted and each write reserves exactly its own bytes, so
//! the last bytes of a quota are given out write by write. A gateway that stops without ending its leases leaves
//! them counting until a recount replaces them with what the backend holds, as it does a write's reservation.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use s3s::S3Result;
use sqlx::PgPool;
use uuid::Uuid;

use super::store::{self, Leased, Settled};
use super::tenants::{Tenant, no_such_bucket, unavailable};

/// Writes up to this size take from a lease; larger ones reserve their own bytes (their reservation costs little
/// beside their transfer).
pub const SMALL_WRITE: i64 = 256 * 1024;
/// The size of a lease, when the quota leaves room for it.
const LEASE: i64 = 16 * 1024 * 1024;
/// The smallest lease worth taking.
const SMALLEST: i64 = 1024 * 1024;
/// How long a channel's writes may be idle before its lease ends.
pub const IDLE: Duration = Duration::from_secs(1);
/// How long a lease serves new writes; an older one ends as soon as its writes in flight have, so a lease's slack
/// never stays out of a recount for long.
const SERVES_FOR: Duration = Duration::from_secs(30);

/// A write's take from a lease. Dropped before its write was [stored](Take::stored) (the write failed, or its
/// client went away), its bytes go back to the lease.
pub struct Take {
    channel: Arc<Channel>,
    lease: Uuid,
    bytes: i64,
    stored: bool,
}

impl Take {
    /// The write was stored: `count` is handed its settlement (before the lease can end, so the settler sees the
    /// write before the lease's end).
    pub fn stored(mut self, count: impl FnOnce(Settled)) {
        count(Settled {
            id: self.lease,
            channel_id: self.channel.id,
            bytes: self.bytes,
        });
        self.stored = true;
    }
}

impl Drop for Take {
    fn drop(&mut self) {
        let mut leases = self.channel.lock();
        if let Some(open) = leases.open.as_mut().filter(|l| l.id == self.lease) {
            open.in_flight -= 1;
            if !self.stored {
                open.slack += self.bytes;
            }
        } else if let Some(in_flight) = leases.draining.get_mut(&self.lease) {
            *in_flight -= 1;
        }
    }
}

/// The leases this gateway holds, per channel.
#[derive(Default)]
pub struct Leases {
    channels: Mutex<HashMap<Uuid, Arc<Channel>>>,
}

/// A channel's leases, and the turn to take a new one (one at a time, so a burst takes one lease, not many).
struct Channel {
    id: Uuid,
    leases: Mutex<ChannelLeases>,
    taking: tokio::sync::Mutex<()>,
}

/// A channel's leases: the one new writes take from, and older ones waiting for their writes in flight.
#[derive(Default)]
struct ChannelLeases {
    open: Option<Lease>,
    /// Writes in flight per lease that serves no more.
    draining: HashMap<Uuid, u32>,
}

struct Lease {
    id: Uuid,
    /// The owner's quota it was granted under: a plan change takes a new lease.
    byte_limit: i64,
    /// Bytes of the lease no write has taken.
    slack: i64,
    in_flight: u32,
    taken_at: Instant,
    last_used: Instant,
}

impl Channel {
    fn lock(&self) -> std::sync::MutexGuard<'_, ChannelLeases> {
        self.leases.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes `bytes` from the open lease, if it serves them under the quota `byte_limit`.
    fn take_open(self: &Arc<Self>, bytes: i64, byte_limit: i64) -> Option<Take> {
        let mut leases = self.lock();
        let now = Instant::now();
        let open = leases.open.as_mut().filter(|l| {
            l.slack >= bytes
                && l.byte_limit == byte_limit
                && now.duration_since(l.taken_at) < SERVES_FOR
        })?;
        open.slack -= bytes;
        open.in_flight += 1;
        open.last_used = now;
        Some(Take {
            channel: self.clone(),
            lease: open.id,
            bytes,
            stored: false,
        })
    }
}

impl Leases {
    fn channel(&self, channel_id: Uuid) -> Arc<Channel> {
        let mut channels = self.channels.lock().unwrap_or_else(|e| e.into_inner());
        channels
            .entry(channel_id)
            .or_insert_with(|| {
                Arc::new(Channel {
                    id: channel_id,
                    leases: Mutex::default(),
                    taking: tokio::sync::Mutex::new(()),
                })
            })
            .clone()
    }

    /// Takes `bytes` for a write to the tenant's store from its lease, taking a new lease when the open one cannot
    /// serve it (the old one ends once its writes in flight have). `None` when the owner is too near the quota for
    /// a lease: the write reserves its own bytes.
    pub async fn take(&self, db: &PgPool, tenant: &Tenant, bytes: i64) -> S3Result<Option<Take>> {
        let channel = self.channel(tenant.channel_id);
        if let Some(take) = channel.take_open(bytes, tenant.byte_limit) {
            return Ok(Some(take));
        }
        let _turn = channel.taking.lock().await;
        // Another write may have taken a lease while this one waited for its turn.
        if let Some(take) = channel.take_open(bytes, tenant.byte_limit) {
            return Ok(Some(take));
        }
        let id = Uuid::new_v4();
        let granted = store::lease(
            db,
            id,
            tenant.channel_id,
            LEASE,
            SMALLEST,
            tenant.byte_limit,
        )
        .await
        .map_err(unavailable)?;
        let mut leases = channel.lock();
        let now = Instant::now();
        let new = match granted {
            Leased::Granted(granted) => Lease {
                id,
                byte_limit: tenant.byte_limit,
                slack: granted,
                in_flight: 0,
                taken_at: now,
                last_used: now,
            },
            Leased::Refused => return Ok(None),
            Leased::Gone => return Err(no_such_bucket(&tenant.virtual_bucket)),
        };
        if let Some(old) = leases.open.replace(new) {
            leases.draining.insert(old.id, old.in_flight);
        }
        drop(leases);
        Ok(channel.take_open(bytes, tenant.byte_limit))
    }

    /// Ends, through `ended`, every lease that serves no more and has no write in flight, and every open lease idle
    /// for `idle` (every lease, with zero: the gateway is stopping); forgets channels that hold none. A lease ends
    /// only after every write that took from it was handed to the settler.
    pub fn sweep(&self, idle: Duration, mut ended: impl FnMut(Uuid)) {
        let now = Instant::now();
        let mut channels = self.channels.lock().unwrap_or_else(|e| e.into_inner());
        channels.retain(|_, channel| {
            let mut leases = channel.lock();
            leases.draining.retain(|&lease, in_flight| {
                let done = *in_flight == 0;
                if done {
                    ended(lease);
                }
                !done
            });
            let idle = leases
                .open
                .as_ref()
                .is_some_and(|l| l.in_flight == 0 && now.duration_since(l.last_used) >= idle);
            if idle && let Some(lease) = leases.open.take() {
                ended(lease.id);
            }
            // A channel another write is about to use stays, with its (empty) leases.
            leases.open.is_some() || !leases.draining.is_empty() || Arc::strong_count(channel) > 1
        });
    }
}
