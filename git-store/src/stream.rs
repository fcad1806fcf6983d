//! Sending a push's pack to the git bucket while git is still receiving it, so that a large push waits at the end
//! for little more than its last chunk rather than for an upload of the whole pack.
//!
//! While a push runs, [`watch`] looks into its cache for the file `index-pack` writes the received pack to
//! (`objects/tmp_objdir-incoming-*/pack/tmp_pack_*`) and [`follow`]s it: each time the file has grown past another
//! [`CHUNK_BYTES`], that chunk goes up as an object of its own ([`PackBucket::chunk_key`]). Two parts of the file
//! are never sent early, since `index-pack --fix-thin` rewrites them when it completes a thin pack: the first chunk
//! (the header's object count) and the last [`TRAILER`] bytes (the checksum, which appended objects overwrite).
//!
//! When the push publishes, [`finish`] finds the stream by the final file's inode (git renames the file, it does not
//! copy it), sends the chunks not sent yet and the `.idx`, and meanwhile checks every chunk sent earlier against the
//! final file by its CRC32. Whatever goes wrong (a chunk that changed, a failed request, a repository handed over
//! meanwhile) removes the chunks and the publish uploads the pack as a whole, as it does for a pack no stream
//! followed.
//!
//! A stream whose file git removed (a push cut off, or declined) or that stopped growing for [`IDLE`] removes its
//! chunks itself. A replica killed mid-push leaves chunks no pack row names, which maintenance removes as orphans.

use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use anyhow::ensure;
use slipway_store::db::git_refs;
use uuid::Uuid;

use crate::bucket::{self, PackBucket};
use crate::{Hold, ObjectStorage};

/// The size of each chunk but the last. Large enough that a gigabyte push is 16 requests, small enough that what is
/// left after git received the pack is a few hundred milliseconds of upload.
pub(crate) const CHUNK_BYTES: u64 = 64 << 20;

/// How near the end of the growing file nothing is sent: more than the 20-byte checksum that ends a pack.
const TRAILER: u64 = 32;

/// How often a push's cache is looked into, and a followed file's size read.
const LOOK_EVERY: Duration = Duration::from_millis(100);

/// How long a file may stop growing before its stream gives up.
const IDLE: Duration = Duration::from_secs(600);

/// A file, by device and inode: the same across git's rename of it.
type FileId = (u64, u64);

/// The files being followed on this replica.
#[derive(Debug, Default)]
pub(crate) struct Streams(Mutex<HashMap<FileId, Arc<Stream>>>);

/// One followed file.
#[derive(Debug)]
struct Stream {
    /// The file, open: its chunks are read through `/proc/self/fd`, whatever git renames it to.
    file: std::fs::File,
    /// The file's device and inode, its key in [`Streams`].
    id: FileId,
    /// The upload the chunks belong to, part of their keys.
    upload: Uuid,
    /// What was sent; locked while a chunk is being sent, so that [`finish`] waits for it.
    sent: tokio::sync::Mutex<Sent>,
}

#[derive(Debug, Default)]
struct Sent {
    /// The repository the chunks were sent under, once the first one was.
    repo: Option<Uuid>,
    /// The CRC32 of each chunk sent, by number.
    chunks: BTreeMap<u64, u32>,
    /// Whether the stream is over: finished by a publish, or given up.
    over: bool,
}

/// A pack's `.pack` file as [`finish`] left it in the bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Streamed {
    /// The upload, part of every key.
    pub(crate) upload: Uuid,
    /// The size of every chunk but the last.
    pub(crate) chunk_bytes: i64,
}

impl Streams {
    /// The stream of the file at `path`, new; `None` when one follows it already or it is gone.
    fn claim(&self, path: &Path) -> Option<Arc<Stream>> {
        let id = file_id(&std::fs::metadata(path).ok()?);
        if self.lock().contains_key(&id) {
            return None;
        }
        let file = std::fs::File::open(path).ok()?;
        if file_id(&file.metadata().ok()?) != id {
            return None;
        }
        let stream = Arc::new(Stream {
            file,
            id,
            upload: Uuid::new_v4(),
            sent: tokio::sync::Mutex::default(),
        });
        match self.lock().entry(id) {
            std::collections::hash_map::Entry::Occupied(_) => None,
            std::collections::hash_map::Entry::Vacant(free) => Some(free.insert(stream).clone()),
        }
    }

    /// Takes the stream of the file `id` out of the registry.
    fn take(&self, id: FileId) -> Option<Arc<Stream>> {
        self.lock().remove(&id)
    }

    /// Forgets `stream`, when it is still the one registered for its file.
    fn forget(&self, stream: &Arc<Stream>) {
        let mut streams = self.lock();
        if streams
            .get(&stream.id)
            .is_some_and(|s| Arc::ptr_eq(s, stream))
        {
            streams.remove(&stream.id);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<FileId, Arc<Stream>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn file_id(meta: &std::fs::Metadata) -> FileId {
    (meta.dev(), meta.ino())
}

/// While `push` lives, looks into `app`'s cache for packs being received and follows each one no stream follows
/// yet.
pub(crate) fn watch(storage: &Arc<ObjectStorage>, app: Uuid, push: Weak<Hold>) {
    let storage = storage.clone();
    tokio::spawn(async move {
        let objects = storage.cache_path(app).join("objects");
        while push.strong_count() > 0 {
            tokio::time::sleep(LOOK_EVERY).await;
            for file in being_received(&objects).await {
                if let Some(stream) = storage.streams.claim(&file) {
                    tokio::spawn(follow(storage.clone(), app, stream));
                }
            }
        }
    });
}

/// The files `index-pack` is writing under `objects`: `tmp_pack_*` in the `pack` directory of a push's quarantine.
async fn being_received(objects: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(mut quarantines) = tokio::fs::read_dir(objects).await else {
        return found;
    };
    while let Ok(Some(quarantine)) = quarantines.next_entry().await {
        if !quarantine
            .file_name()
            .to_string_lossy()
            .starts_with("tmp_objdir-incoming-")
        {
            continue;
        }
        let Ok(mut files) = tokio::fs::read_dir(quarantine.path().join("pack")).await else {
            continue;
        };
        while let Ok(Some(file)) = files.next_entry().await {
            if file.file_name().to_string_lossy().starts_with("tmp_pack_") {
                found.push(file.path());
            }
        }
    }
    found
}

/// Sends `stream`'s chunks as its file grows, until a publish takes it over or it is given up.
async fn follow(storage: Arc<ObjectStorage>, app: Uuid, stream: Arc<Stream>) {
    use std::os::fd::AsRawFd as _;
    let path = PathBuf::from(format!("/proc/self/fd/{}", stream.file.as_raw_fd()));
    let (mut size, mut grew) = (0, Instant::now());
    loop {
        tokio::time::sleep(LOOK_EVERY).await;
        let Ok(meta) = stream.file.metadata() else {
            break;
        };
        let mut sent = stream.sent.lock().await;
        if sent.over {
            break;
        }
        if meta.len() > size {
            (size, grew) = (meta.len(), Instant::now());
        }
        if meta.nlink() == 0 || grew.elapsed() > IDLE {
            // git removed the file (the push was cut off or declined), or the push went quiet.
            give_up(
                &storage,
                &stream,
                &mut sent,
                "the push's pack was not published",
            )
            .await;
            break;
        }
        let next = sent.chunks.keys().next_back().map_or(1, |n| n + 1);
        if (next + 1) * CHUNK_BYTES + TRAILER > size {
            continue;
        }
        let repo = match sent.repo {
            Some(repo) => repo,
            None => match git_refs::id(&storage.db, app).await {
                Ok(Some(repo)) => *sent.repo.insert(repo),
                Ok(None) => {
                    give_up(&storage, &stream, &mut sent, "the app has no repository").await;
                    break;
                }
                Err(e) => {
                    give_up(&storage, &stream, &mut sent, &format!("{e:#}")).await;
                    break;
                }
            },
        };
        let key = PackBucket::chunk_key(repo, stream.upload, next);
        match storage
            .bucket
            .send_range(&key, &path, next * CHUNK_BYTES, CHUNK_BYTES)
            .await
        {
            Ok(crc) => {
                sent.chunks.insert(next, crc);
            }
            Err(e) => {
                give_up(&storage, &stream, &mut sent, &format!("{e:#}")).await;
                break;
            }
        }
    }
    storage.streams.forget(&stream);
}

/// Ends `stream` without a publish: its chunks are removed, and a publish uploads the pack as a whole.
async fn give_up(storage: &ObjectStorage, stream: &Stream, sent: &mut Sent, why: &str) {
    sent.over = true;
    if let Some(repo) = sent.repo
        && !sent.chunks.is_empty()
    {
        let keys: Vec<String> = sent
            .chunks
            .keys()
            .map(|&n| PackBucket::chunk_key(repo, stream.upload, n))
            .collect();
        tracing::info!(upload = %stream.upload, chunks = keys.len(), reason = why, "gave up streaming a push's pack");
        if let Err(e) = storage.bucket.remove_keys(&keys).await {
            tracing::warn!(
                error = format!("{e:#}"),
                "removing the chunks of a stream given up failed"
            );
        }
        sent.chunks.clear();
    }
}

/// Completes the stream of the pack `<dir>/<name>.pack` of repository `repo`, if one followed it and sent
/// anything: the chunks not sent yet and the `.idx` go up, the ones sent earlier are checked against the final
/// file. `None` when there was no stream or it failed (its chunks are removed then): upload the pack as a whole.
pub(crate) async fn finish(
    storage: &ObjectStorage,
    repo: Uuid,
    dir: &Path,
    name: &str,
) -> Option<Streamed> {
    let file = dir.join(format!("{name}.pack"));
    let meta = tokio::fs::metadata(&file).await.ok()?;
    let stream = storage.streams.take(file_id(&meta))?;
    let mut sent = stream.sent.lock().await;
    sent.over = true;
    let (streamed_under, chunks) = (sent.repo?, std::mem::take(&mut sent.chunks));
    drop(sent);
    if chunks.is_empty() {
        return None;
    }
    let upload = stream.upload;
    let result = if streamed_under == repo {
        complete(
            &storage.bucket,
            repo,
            upload,
            dir,
            name,
            meta.len(),
            &chunks,
        )
        .await
    } else {
        Err(anyhow::anyhow!(
            "the repository was handed over while the push ran"
        ))
    };
    match result {
        Ok(()) => Some(Streamed {
            upload,
            chunk_bytes: CHUNK_BYTES as i64,
        }),
        Err(e) => {
            tracing::warn!(%repo, pack = name, error = format!("{e:#}"), "a streamed pack could not be completed; uploading it whole");
            let count = meta.len().div_ceil(CHUNK_BYTES);
            // Every chunk the file has, and any sent earlier past a shorter end.
            let numbers: std::collections::BTreeSet<u64> =
                (0..count).chain(chunks.keys().copied()).collect();
            let mut keys: Vec<String> = numbers
                .into_iter()
                .map(|n| PackBucket::chunk_key(streamed_under, upload, n))
                .collect();
            keys.push(PackBucket::key(streamed_under, name, Some(upload), "idx"));
            if let Err(e) = storage.bucket.remove_keys(&keys).await {
                tracing::warn!(
                    error = format!("{e:#}"),
                    "removing a failed stream's chunks failed"
                );
            }
            None
        }
    }
}

/// Sends what is missing of the streamed pack `<dir>/<name>.pack` (`size` bytes), its `.idx` last, while checking
/// the chunks sent earlier against the file.
async fn complete(
    bucket: &PackBucket,
    repo: Uuid,
    upload: Uuid,
    dir: &Path,
    name: &str,
    size: u64,
    sent: &BTreeMap<u64, u32>,
) -> anyhow::Result<()> {
    let file = dir.join(format!("{name}.pack"));
    let check = async {
        for (&n, &crc) in sent {
            ensure!(
                (n + 1) * CHUNK_BYTES <= size,
                "chunk {n} was sent, and the pack is only {size} bytes"
            );
            let now = bucket::crc32_of(&file, n * CHUNK_BYTES, CHUNK_BYTES).await?;
            ensure!(now == crc, "chunk {n} changed after it was sent");
        }
        anyhow::Ok(())
    };
    let send = async {
        for n in (0..size.div_ceil(CHUNK_BYTES)).filter(|n| !sent.contains_key(n)) {
            let offset = n * CHUNK_BYTES;
            let key = PackBucket::chunk_key(repo, upload, n);
            bucket
                .send_range(&key, &file, offset, CHUNK_BYTES.min(size - offset))
                .await?;
        }
        let idx = dir.join(format!("{name}.idx"));
        bucket
            .send_file(&PackBucket::key(repo, name, Some(upload), "idx"), &idx)
            .await
    };
    tokio::try_join!(check, send)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_claimed_once_and_known_by_its_inode_across_a_rename() {
        let dir = std::env::temp_dir().join(format!("slipway-stream-{}", Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let (receiving, published) = (dir.join("tmp_pack_x"), dir.join("pack-1.pack"));
        std::fs::write(&receiving, b"PACK").unwrap();
        let streams = Streams::default();
        let stream = streams.claim(&receiving).unwrap();
        assert!(streams.claim(&receiving).is_none(), "claimed twice");
        std::fs::rename(&receiving, &published).unwrap();
        let id = file_id(&std::fs::metadata(&published).unwrap());
        let taken = streams.take(id).unwrap();
        assert!(Arc::ptr_eq(&taken, &stream));
        assert!(streams.take(id).is_none());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
