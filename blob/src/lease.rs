//! Quota leases: how small writes stay off the database's critical path. Reserving each write in the database
//! ([`store::reserve`], serialized per owner) costs more than storing a kilobyte on the backend, so a small plain
//! write takes its bytes from a lease instead: a slice of the owner's remaining quota reserved at once for one
//! channel ([`store::lease`]: at most an eighth of what is left, so a lease never holds much of it). The lease is a
//! reservation like any other in the database, counted against the quota by every gateway replica, so no replica
//! can pass the quota through another's lease; writes take from it here, in memory.
//!
//! The settler [sweeps](Leases::sweep) the leases a few times a second: it reports each lease's running total of
//! stored bytes ([`store::settle_leases`] moves what is new of it from the lease into the usage, so a report
//! applied twice moves nothing the second time), and ends the leases that serve no more (what is left of them
//! stops counting): once their channel's writes have been idle for [`IDLE`], or when they can no longer serve a
//! write, when they have served [`SERVES_FOR`] or the owner's quota changed, each once their writes in flight have
//! ended. A write whose client went away before it was answered counts as stored: the backend may have it, and a
//! recount corrects the count, never a quota short of a stored byte.
//!
//! Near the quota, where an eighth of what is left is less than [`SMALLEST`], no lease is granted and each write
//! reserves exactly its own bytes, so the last bytes of a quota are given out write by write. A gateway that stops
//! without ending its leases leaves them counting until a recount replaces them with what the backend holds, as it
//! does a write's reservation.

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

/// A write's take from a lease. Dropped, its write counts as stored (whether it was answered or its client went
/// away); only a write the backend refused gives its bytes back ([`Take::failed`]).
pub struct Take {
    channel: Arc<Channel>,
    lease: Uuid,
    bytes: i64,
    failed: bool,
}

impl Take {
    /// The backend refused the write: nothing was stored, and the bytes go back to the lease.
    pub fn failed(mut self) {
        self.failed = true;
    }
}

impl Drop for Take {
    fn drop(&mut self) {
        let mut leases = self.channel.lock();
        let open = leases.open.as_ref().is_some_and(|l| l.id == self.lease);
        let Some(lease) = leases.get_mut(self.lease) else {
            return;
        };
        lease.in_flight -= 1;
        if !self.failed {
            lease.stored += self.bytes;
        } else if open {
            lease.slack += self.bytes;
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
    draining: Vec<Lease>,
}

impl ChannelLeases {
    fn get_mut(&mut self, id: Uuid) -> Option<&mut Lease> {
        self.open
            .iter_mut()
            .chain(self.draining.iter_mut())
            .find(|l| l.id == id)
    }
}

struct Lease {
    id: Uuid,
    /// The owner's quota it was granted under: a plan change takes a new lease.
    byte_limit: i64,
    /// Bytes of the lease no write has taken.
    slack: i64,
    in_flight: u32,
    /// Bytes its writes stored, in all.
    stored: i64,
    /// What of `stored` the settler has been handed.
    reported: i64,
    taken_at: Instant,
    last_used: Instant,
}

impl Lease {
    fn new(id: Uuid, byte_limit: i64, slack: i64) -> Self {
        let now = Instant::now();
        Self {
            id,
            byte_limit,
            slack,
            in_flight: 0,
            stored: 0,
            reported: 0,
            taken_at: now,
            last_used: now,
        }
    }
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
            failed: false,
        })
    }

    /// Makes `lease` the one new writes take from; the one before waits for its writes in flight.
    fn open(&self, lease: Lease) {
        let mut leases = self.lock();
        if let Some(old) = leases.open.replace(lease) {
            leases.draining.push(old);
        }
    }
}

/// Asks the database for a lease for `channel`'s writes under the quota `byte_limit`, and records it when granted,
/// whether or not the write that asked is still waiting for it.
async fn grant(db: PgPool, channel: Arc<Channel>, byte_limit: i64) -> sqlx::Result<Leased> {
    let id = Uuid::new_v4();
    let granted = store::lease(&db, id, channel.id, LEASE, SMALLEST, byte_limit).await?;
    if let Leased::Granted(slack) = granted {
        channel.open(Lease::new(id, byte_limit, slack));
    }
    Ok(granted)
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
        // A task of its own, so that a lease granted is recorded even when this write's client has gone.
        let granted = tokio::spawn(grant(db.clone(), channel.clone(), tenant.byte_limit))
            .await
            .map_err(unavailable)?
            .map_err(unavailable)?;
        match granted {
            Leased::Granted(_) => Ok(channel.take_open(bytes, tenant.byte_limit)),
            Leased::Refused => Ok(None),
            Leased::Gone => Err(no_such_bucket(&tenant.virtual_bucket)),
        }
    }

    /// Hands `stored` each lease's running total of stored bytes that grew since the last sweep, then ends,
    /// through `ended`, every lease that serves no more and has no write in flight, and every open lease idle for
    /// `idle` (every lease, with zero: the gateway is stopping); forgets channels that hold none.
    pub fn sweep(
        &self,
        idle: Duration,
        mut stored: impl FnMut(Settled),
        mut ended: impl FnMut(Uuid),
    ) {
        let now = Instant::now();
        let mut channels = self.channels.lock().unwrap_or_else(|e| e.into_inner());
        channels.retain(|&channel_id, channel| {
            let mut leases = channel.lock();
            let ChannelLeases { open, draining } = &mut *leases;
            for lease in open.iter_mut().chain(draining.iter_mut()) {
                if lease.stored > lease.reported {
                    lease.reported = lease.stored;
                    stored(Settled {
                        id: lease.id,
                        channel_id,
                        bytes: lease.stored,
                    });
                }
            }
            draining.retain(|lease| {
                let done = lease.in_flight == 0;
                if done {
                    ended(lease.id);
                }
                !done
            });
            let idle = open
                .as_ref()
                .is_some_and(|l| l.in_flight == 0 && now.duration_since(l.last_used) >= idle);
            if idle && let Some(lease) = open.take() {
                ended(lease.id);
            }
            // A channel another write is about to use stays, with its (empty) leases.
            open.is_some() || !draining.is_empty() || Arc::strong_count(channel) > 1
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: i64 = 1_000_000;

    /// Leases with one open lease of `slack` bytes for a channel.
    fn leased(slack: i64) -> (Leases, Arc<Channel>, Uuid) {
        let leases = Leases::default();
        let channel = leases.channel(Uuid::new_v4());
        let lease = Uuid::new_v4();
        channel.open(Lease::new(lease, LIMIT, slack));
        (leases, channel, lease)
    }

    /// What a sweep reports and ends.
    fn sweep(leases: &Leases, idle: Duration) -> (Vec<i64>, Vec<Uuid>) {
        let (mut stored, mut ended) = (Vec::new(), Vec::new());
        leases.sweep(idle, |s| stored.push(s.bytes), |l| ended.push(l));
        (stored, ended)
    }

    #[test]
    fn writes_are_reported_as_running_totals_and_a_failed_one_gives_its_bytes_back() {
        let (leases, channel, lease) = leased(100);
        let first = channel.take_open(60, LIMIT).unwrap();
        assert!(
            channel.take_open(60, LIMIT).is_none(),
            "only 40 bytes are left"
        );
        first.failed();
        let a = channel.take_open(60, LIMIT).unwrap();
        let b = channel.take_open(30, LIMIT).unwrap();
        drop(a);
        assert_eq!(sweep(&leases, IDLE), (vec![60], vec![]));
        drop(b);
        assert_eq!(sweep(&leases, IDLE), (vec![90], vec![]));
        assert_eq!(sweep(&leases, Duration::ZERO), (vec![], vec![lease]));
    }

    #[test]
    fn a_write_whose_client_went_away_counts_as_stored() {
        let (leases, channel, _) = leased(100);
        // The write's future dropped before it had an outcome: the backend may hold the object.
        drop(channel.take_open(25, LIMIT).unwrap());
        assert_eq!(sweep(&leases, IDLE).0, vec![25]);
    }

    #[test]
    fn a_lease_that_serves_no_more_ends_after_its_last_write_and_its_report() {
        let (leases, channel, old) = leased(100);
        let in_flight = channel.take_open(10, LIMIT).unwrap();
        channel.open(Lease::new(Uuid::new_v4(), LIMIT, 100));
        assert_eq!(
            sweep(&leases, Duration::ZERO).1.len(),
            1,
            "only the idle new lease ends"
        );
        drop(in_flight);
        assert_eq!(sweep(&leases, Duration::ZERO), (vec![10], vec![old]));
    }

    #[test]
    fn a_changed_quota_takes_nothing_from_the_old_lease() {
        let (_, channel, _) = leased(100);
        assert!(channel.take_open(10, LIMIT * 2).is_none());
        assert!(channel.take_open(10, LIMIT).is_some());
    }
}
