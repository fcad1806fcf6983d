//! Copy-forward restore of a bucket to a checkpoint: each key goes back to the version its marker lists by writing
//! that version again as the newest (a server-side copy), and each key the checkpoint did not have gets a delete
//! marker. Nothing is rewound or removed, so every later version stays listed (until a later checkpoint's prune
//! finds that no retained checkpoint needs it). A key whose current version is the checkpoint's, or has the same content (size and ETag:
//! an earlier restore's copy), is left alone, which also makes a restore that stopped half-way (the store went
//! away) finish when it is asked again. A checkpoint some of whose versions were deleted from the bucket since (a
//! client removed them) is refused before the first write, so a restore never stops half-way for that.

use std::collections::{HashMap, HashSet};

use futures::StreamExt;
use futures::future::BoxFuture;

use super::bucket::{Bucket, Version};
use super::checkpoints::Entry;
use slipway_jobs::Progress;

/// One write of a restore.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Write this version of the key again as its current one.
    CopyForward {
        /// The key.
        key: String,
        /// The checkpoint's version.
        version_id: String,
    },
    /// Put a delete marker on a key the checkpoint did not have.
    Hide {
        /// The key.
        key: String,
    },
}

/// The writes that bring a bucket whose listing is `now` back to `manifest`, in key order.
pub fn plan(manifest: &[Entry], now: &[Version]) -> Vec<Step> {
    let current: HashMap<&str, &Version> = now
        .iter()
        .filter(|v| v.is_latest && !v.delete_marker)
        .map(|v| (v.key.as_str(), v))
        .collect();
    let wanted: HashMap<&str, &str> = manifest
        .iter()
        .map(|e| (e.key.as_str(), e.version_id.as_str()))
        .collect();
    let mut steps: Vec<Step> = manifest
        .iter()
        .filter(|e| !current.get(e.key.as_str()).is_some_and(|now| holds(now, e)))
        .map(|e| Step::CopyForward {
            key: e.key.clone(),
            version_id: e.version_id.clone(),
        })
        .chain(
            current
                .keys()
                .filter(|key| !wanted.contains_key(*key))
                .map(|key| Step::Hide {
                    key: (*key).to_owned(),
                }),
        )
        .collect();
    steps.sort_by(|a, b| step_key(a).cmp(step_key(b)));
    steps
}

/// Whether the version `now` holds the checkpoint's content of `entry`: the same version, or a copy of it.
fn holds(now: &Version, entry: &Entry) -> bool {
    now.version_id == entry.version_id
        || (now.size == entry.size_bytes && now.etag.is_some() && now.etag == entry.etag)
}

/// The keys of `steps` whose checkpoint version `now` no longer lists: deleted from the bucket since the
/// checkpoint (a client that removed versions, a purge), so the restore cannot bring them back.
pub fn gone<'a>(steps: &'a [Step], now: &[Version]) -> Vec<&'a str> {
    let listed: HashSet<(&str, &str)> = now
        .iter()
        .filter(|v| !v.delete_marker)
        .map(|v| (v.key.as_str(), v.version_id.as_str()))
        .collect();
    steps
        .iter()
        .filter_map(|step| match step {
            Step::CopyForward { key, version_id }
                if !listed.contains(&(key.as_str(), version_id.as_str())) =>
            {
                Some(key.as_str())
            }
            _ => None,
        })
        .collect()
}

/// A restore refused before its first write: versions the checkpoint needs were deleted from the bucket.
#[derive(Debug, thiserror::Error)]
#[error(
    "the checkpoint can no longer be restored: the versions it recorded of {count} keys (first {first:?}) were deleted \
     from the bucket since; nothing was changed"
)]
pub struct VersionsGone {
    /// Keys whose version is gone.
    pub count: usize,
    /// The first of them, by key.
    pub first: String,
}

fn step_key(step: &Step) -> &str {
    match step {
        Step::CopyForward { key, .. } | Step::Hide { key } => key,
    }
}

/// What a restore did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Restored {
    /// Keys written back.
    pub copied: usize,
    /// Keys hidden behind a delete marker.
    pub hidden: usize,
}

/// A restore that stopped: how far it got and why.
#[derive(Debug, thiserror::Error)]
#[error("{done} of {total} writes were made before {cause}")]
pub struct Stopped {
    /// Writes made.
    pub done: usize,
    /// Writes planned.
    pub total: usize,
    /// Why it stopped.
    pub cause: anyhow::Error,
}

/// Makes one write of a restore; the step, with how it went.
fn write<'a>(bucket: &'a Bucket, step: &'a Step) -> BoxFuture<'a, (&'a Step, anyhow::Result<()>)> {
    Box::pin(async move {
        let written = match step {
            Step::CopyForward { key, version_id } => bucket.copy_forward(key, version_id).await,
            Step::Hide { key } => bucket.hide(key).await,
        };
        (step, written)
    })
}

/// Writes a restore has in flight at once: each is a server-side copy (or a delete marker), the backend's work,
/// and several at a time keep it busy where one at a time waits on each round trip. Each passes the gateway, which
/// measures the source version first (for the quota), so a write waits on two round trips to the backend, and
/// more in flight make up for that wait.
pub const AT_ONCE: usize = 32;

/// Key ranges a restore lists side by side ([`Bucket::versions_split`]): the listing of a bucket of tens of
/// thousands of keys is a long chain of round trips, and on two cores four chains at once take about half its time.
pub const LISTINGS: usize = 4;

/// Fewest checkpoint keys a range of the listing gets: a range of a page or two gains nothing from a chain of its
/// own.
const KEYS_PER_LISTING: usize = 2_000;

/// Where the listing's ranges end: keys of `manifest` (in its order) that part it evenly, none for a small one.
fn bounds(manifest: &[Entry]) -> Vec<&str> {
    let ranges = (manifest.len() / KEYS_PER_LISTING).clamp(1, LISTINGS);
    (1..ranges)
        .map(|i| manifest[i * manifest.len() / ranges].key.as_str())
        .collect()
}

/// Restores `bucket` to `manifest`, adding to `progress` the bytes of each object written back (those the bucket
/// holds already count as done at once).
pub async fn restore(
    bucket: &Bucket,
    manifest: &[Entry],
    progress: &Progress,
) -> Result<Restored, Stopped> {
    let now = bucket
        .versions_split(&bounds(manifest))
        .await
        .map_err(|cause| Stopped {
            done: 0,
            total: 0,
            cause,
        })?;
    let steps = plan(manifest, &now);
    let missing = gone(&steps, &now);
    if let Some(first) = missing.first() {
        return Err(Stopped {
            done: 0,
            total: steps.len(),
            cause: VersionsGone {
                count: missing.len(),
                first: (*first).to_owned(),
            }
            .into(),
        });
    }
    let size: HashMap<&str, u64> = manifest
        .iter()
        .map(|e| (e.key.as_str(), u64::try_from(e.size_bytes).unwrap_or(0)))
        .collect();
    let copied_bytes = |step: &Step| match step {
        Step::CopyForward { key, .. } => size.get(key.as_str()).copied().unwrap_or(0),
        Step::Hide { .. } => 0,
    };
    let to_copy: u64 = steps.iter().map(copied_bytes).sum();
    progress.add(size.values().sum::<u64>().saturating_sub(to_copy));
    let total = steps.len();
    // Made before they are streamed (each is idle until polled): a closure mapping the steps inside the stream
    // would make the whole restore's future not `Send`.
    let writes: Vec<_> = steps.iter().map(|step| write(bucket, step)).collect();
    let mut writes = futures::stream::iter(writes).buffer_unordered(AT_ONCE);
    let mut restored = Restored::default();
    let mut done = 0;
    while let Some((step, written)) = writes.next().await {
        written.map_err(|cause| Stopped { done, total, cause })?;
        done += 1;
        match step {
            Step::CopyForward { .. } => restored.copied += 1,
            Step::Hide { .. } => restored.hidden += 1,
        }
        progress.add(copied_bytes(step));
    }
    Ok(restored)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::bucket::tests::version;

    fn entry(key: &str, id: &str) -> Entry {
        Entry {
            key: key.into(),
            version_id: id.into(),
            size_bytes: 1,
            etag: Some(format!("\"{id}\"")),
            last_modified: None,
        }
    }

    #[test]
    fn changed_and_deleted_keys_come_back_and_later_keys_are_hidden() {
        let manifest = [
            entry("changed", "c1"),
            entry("deleted", "d1"),
            entry("same", "s1"),
        ];
        let now = [
            version("changed", "c2", true, false),
            version("changed", "c1", false, false),
            version("deleted", "m1", true, true),
            version("deleted", "d1", false, false),
            version("same", "s1", true, false),
            version("later", "l1", true, false),
            version("later-deleted", "m2", true, true),
        ];
        assert_eq!(
            plan(&manifest, &now),
            [
                Step::CopyForward {
                    key: "changed".into(),
                    version_id: "c1".into()
                },
                Step::CopyForward {
                    key: "deleted".into(),
                    version_id: "d1".into()
                },
                Step::Hide {
                    key: "later".into()
                },
            ]
        );
    }

    #[test]
    fn versions_deleted_since_the_checkpoint_are_found_before_any_write() {
        let manifest = [
            entry("kept", "k1"),
            entry("purged", "p1"),
            entry("same", "s1"),
        ];
        // `kept` changed but its checkpoint version is listed; `purged` changed and its version was removed.
        let now = [
            version("kept", "k2", true, false),
            version("kept", "k1", false, false),
            version("purged", "p2", true, false),
            version("same", "s1", true, false),
        ];
        let steps = plan(&manifest, &now);
        assert_eq!(gone(&steps, &now), ["purged"]);
        // A delete marker with the version's id does not count as the version.
        let marker = [version("kept", "k1", true, true)];
        assert_eq!(
            gone(&plan(&[entry("kept", "k1")], &marker), &marker),
            ["kept"]
        );
        assert!(gone(&plan(&manifest[..1], &now), &now).is_empty());
    }

    #[test]
    fn a_large_checkpoint_is_listed_in_even_ranges_and_a_small_one_whole() {
        let manifest: Vec<Entry> = (0..10_000)
            .map(|n| entry(&format!("k{n:05}"), "v"))
            .collect();
        assert_eq!(bounds(&manifest), ["k02500", "k05000", "k07500"]);
        assert_eq!(bounds(&manifest[..5_000]), ["k02500"]);
        assert!(bounds(&manifest[..3_999]).is_empty());
        assert!(bounds(&[]).is_empty());
    }

    #[test]
    fn a_bucket_already_at_its_checkpoint_needs_no_write() {
        let manifest = [entry("a", "a1")];
        assert!(plan(&manifest, &[version("a", "a1", true, false)]).is_empty());
        // An earlier restore's copy: a new version id with the checkpoint's content.
        let copy = Version {
            etag: Some("\"a1\"".into()),
            ..version("a", "a9", true, false)
        };
        assert!(plan(&manifest, std::slice::from_ref(&copy)).is_empty());
        let other_size = Version { size: 2, ..copy };
        assert_eq!(plan(&manifest, &[other_size]).len(), 1);
        assert!(plan(&[], &[version("gone", "m", true, true)]).is_empty());
    }
}
