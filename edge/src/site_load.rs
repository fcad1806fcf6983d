//! Loading one site: the commit's tar is fetched from the API server's internal archive route and read as it
//! streams in, into memory or onto disk.
//!
//! A site starts in memory: its files are read whole until they add up to more than the memory tier takes for one
//! site ([`Limits::memory_site_bytes`]). Under that, each content is interned (and compressed once) in the shared
//! [`BlobStore`]. Over it, what was read so far is written to a fresh directory of the disk tier and the rest of
//! the archive follows it there, file by file, so a large site never sits in memory whole. A site over
//! [`Limits::max_site_bytes`], or over the memory share when the edge has no disk tier, is refused.

use std::io::Read;
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use slipway_internal::{CallError, InternalClient};

use super::content_type;
use super::site::{BlobStore, Content, FILE_OVERHEAD, Site, SiteBuilder, SiteKey};
use super::site_disk::{DiskDir, DiskRoot};

/// A commit's tar as it streams in.
pub type ArchiveStream = BoxStream<'static, std::io::Result<Bytes>>;

/// Where sites' archives come from: the API server's internal archive route, or a test's own.
#[async_trait::async_trait]
pub trait ArchiveSource: Send + Sync + 'static {
    /// The tar of the commit `key` names (as `git archive --format=tar` writes it).
    async fn archive(&self, key: &SiteKey) -> Result<ArchiveStream, CallError>;
}

#[async_trait::async_trait]
impl ArchiveSource for InternalClient {
    async fn archive(&self, key: &SiteKey) -> Result<ArchiveStream, CallError> {
        let res = InternalClient::archive(self, &key.app_id, &key.sha).await?;
        let chunks = futures::stream::unfold(res, |mut res| async move {
            match res.chunk().await {
                Ok(Some(chunk)) => Some((Ok(chunk), res)),
                Ok(None) => None,
                Err(e) => Some((Err(std::io::Error::other(e)), res)),
            }
        });
        Ok(chunks.boxed())
    }
}

/// Why a site could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The API server could not give the archive (it is down, or the commit is gone).
    #[error("fetch the archive: {0}")]
    Fetch(#[from] CallError),
    /// The site is larger than the edge serves.
    #[error("the commit's files exceed {0} bytes")]
    TooLarge(u64),
    /// The archive does not read as a tar.
    #[error("read the archive: {0}")]
    Archive(String),
    /// The disk tier could not take the site's files.
    #[error("write the site to disk: {0}")]
    Disk(String),
}

impl LoadError {
    /// The metric label of the failure.
    pub fn reason(&self) -> &'static str {
        match self {
            LoadError::Fetch(_) => "fetch",
            LoadError::TooLarge(_) => "too_large",
            LoadError::Archive(_) => "archive",
            LoadError::Disk(_) => "disk",
        }
    }
}

/// How large a site may be, in all and in memory.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest site served at all: the sum of its files' sizes.
    pub max_site_bytes: u64,
    /// Largest site held in memory: the sum of its files' sizes plus [`FILE_OVERHEAD`] and the path of each file.
    /// Larger ones go to the disk tier.
    pub memory_site_bytes: u64,
}

/// Fetches the site `key` names from `source` and reads it (in a blocking thread) into memory or, when larger
/// than the memory share, into a directory of `disk`.
pub async fn load(
    source: &dyn ArchiveSource,
    key: &SiteKey,
    limits: Limits,
    blobs: Arc<BlobStore>,
    disk: Option<Arc<DiskRoot>>,
) -> Result<Site, LoadError> {
    let stream = source.archive(key).await?;
    // Read synchronously (the tar crate's reader) while the stream is polled on the runtime.
    let reader = tokio_util::io::SyncIoBridge::new(tokio_util::io::StreamReader::new(stream));
    tokio::task::spawn_blocking(move || read_site(reader, limits, &blobs, disk.as_deref()))
        .await
        .map_err(|e| LoadError::Archive(e.to_string()))?
}

/// Where the files read so far are.
enum Sink {
    /// In memory, not yet interned: interning compresses, which is wasted on a site that ends up on disk.
    Memory(Vec<(String, Vec<u8>)>),
    /// On disk.
    Disk(DiskDir, SiteBuilder),
}

/// Reads a tar (as `git archive --format=tar` writes it) into a site: regular files become entries, symbolic links
/// to files inside the tree serve their target's content, everything else (directories, the pax header carrying
/// the commit id, links leaving the tree) only shapes the directory set.
pub fn read_site(
    tar: impl Read,
    limits: Limits,
    blobs: &BlobStore,
    disk: Option<&DiskRoot>,
) -> Result<Site, LoadError> {
    let bad = |e: std::io::Error| LoadError::Archive(e.to_string());
    let to_disk = |e: std::io::Error| LoadError::Disk(e.to_string());
    let mut archive = tar::Archive::new(tar);
    let mut sink = Sink::Memory(Vec::new());
    let mut links = Vec::new();
    let mut dirs = Vec::new();
    let (mut total, mut in_memory) = (0u64, 0u64);
    for entry in archive.entries().map_err(bad)? {
        let mut entry = entry.map_err(bad)?;
        let path = entry.path().map_err(bad)?.to_string_lossy().into_owned();
        let path = path.trim_end_matches('/').to_owned();
        match entry.header().entry_type() {
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                let size = entry.header().size().map_err(bad)?;
                total = total.saturating_add(size);
                if total > limits.max_site_bytes {
                    return Err(LoadError::TooLarge(limits.max_site_bytes));
                }
                in_memory = in_memory.saturating_add(size + FILE_OVERHEAD + path.len() as u64);
                if let Sink::Memory(pending) = &mut sink
                    && in_memory > limits.memory_site_bytes
                {
                    let Some(root) = disk else {
                        return Err(LoadError::TooLarge(limits.memory_site_bytes));
                    };
                    sink = spill(root, std::mem::take(pending)).map_err(to_disk)?;
                }
                match &mut sink {
                    Sink::Memory(pending) => {
                        let mut content = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
                        entry.read_to_end(&mut content).map_err(bad)?;
                        pending.push((path, content));
                    }
                    Sink::Disk(dir, builder) => {
                        let file = dir.write(&mut entry, size).map_err(to_disk)?;
                        builder.file(path, Content::Disk(Arc::new(file)));
                    }
                }
            }
            tar::EntryType::Symlink => {
                if let Some(target) = entry.link_name().map_err(bad)? {
                    links.push((path, target.to_string_lossy().into_owned()));
                }
            }
            tar::EntryType::Directory => dirs.push(path),
            _ => {}
        }
    }
    let (mut builder, dir) = match sink {
        Sink::Memory(pending) => {
            let mut builder = SiteBuilder::default();
            for (path, content) in pending {
                let blob = blobs.intern(content, &content_type::for_path(&path));
                builder.file(path, Content::Memory(blob));
            }
            (builder, None)
        }
        Sink::Disk(dir, builder) => (builder, Some(dir)),
    };
    for (path, target) in links {
        builder.link(path, target);
    }
    for dir in dirs {
        builder.dir(dir);
    }
    Ok(builder.finish(dir))
}

/// Moves the files read so far to a new directory of `root`: the site continues on disk.
fn spill(root: &DiskRoot, pending: Vec<(String, Vec<u8>)>) -> std::io::Result<Sink> {
    let mut dir = root.site_dir()?;
    let mut builder = SiteBuilder::default();
    for (path, content) in pending {
        let file = dir.write(&mut &content[..], content.len() as u64)?;
        builder.file(path, Content::Disk(Arc::new(file)));
    }
    Ok(Sink::Disk(dir, builder))
}

/// A site read from a whole tar in memory, of at most `max_bytes` (all in memory): for tests and tools.
pub fn from_tar(tar: &[u8], blobs: &BlobStore, max_bytes: u64) -> Result<Site, LoadError> {
    let limits = Limits {
        max_site_bytes: max_bytes,
        memory_site_bytes: u64::MAX,
    };
    read_site(tar, limits, blobs, None)
}

/// A tar with the given regular files, symlinks (content `-> target`) and directories (path ending in `/`): for
/// tests and tools.
pub fn tar_of(entries: &[(&str, &[u8])]) -> std::io::Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    for (path, content) in entries {
        let mut header = tar::Header::new_ustar();
        if let Some(target) = content.strip_prefix(b"-> ") {
            header.set_entry_type(tar::EntryType::Symlink);
            header.set_size(0);
            header.set_cksum();
            let target = String::from_utf8_lossy(target).into_owned();
            builder.append_link(&mut header, path, target)?;
        } else if path.ends_with('/') {
            header.set_entry_type(tar::EntryType::Directory);
            header.set_size(0);
            header.set_cksum();
            builder.append_data(&mut header, path, &[][..])?;
        } else {
            header.set_size(content.len() as u64);
            header.set_mode(0o644);
            header.set_cksum();
            builder.append_data(&mut header, path, *content)?;
        }
    }
    builder.into_inner()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::site::{FileEntry, Lookup};

    fn tar(entries: &[(&str, &str)]) -> Vec<u8> {
        let entries: Vec<(&str, &[u8])> = entries.iter().map(|(p, c)| (*p, c.as_bytes())).collect();
        tar_of(&entries).unwrap()
    }

    fn text(file: &FileEntry) -> String {
        match &file.content {
            Content::Memory(blob) => String::from_utf8(blob.identity.to_vec()).unwrap(),
            Content::Disk(disk) => String::from_utf8(std::fs::read(&disk.path).unwrap()).unwrap(),
        }
    }

    #[test]
    fn the_root_and_directories_serve_their_index() {
        let tar = tar(&[
            ("index.html", "<h1>home</h1>"),
            ("docs/", ""),
            ("docs/index.html", "<h1>docs</h1>"),
            ("docs/a.css", "body{}"),
            ("empty/", ""),
        ]);
        let site = from_tar(&tar, &BlobStore::default(), 1 << 20).unwrap();
        let content = |l: Lookup<'_>| match l {
            Lookup::File(f) => text(f),
            other => format!("{other:?}"),
        };
        assert_eq!(content(site.lookup("")), "<h1>home</h1>");
        assert_eq!(content(site.lookup("docs/")), "<h1>docs</h1>");
        assert_eq!(content(site.lookup("docs/a.css")), "body{}");
        assert!(matches!(site.lookup("docs"), Lookup::Directory));
        assert!(matches!(site.lookup("empty/"), Lookup::Missing));
        assert!(matches!(site.lookup("empty"), Lookup::Directory));
        assert!(matches!(site.lookup("nope.html"), Lookup::Missing));
        assert_eq!(site.len(), 3);
        assert!(!site.on_disk());
    }

    #[test]
    fn links_inside_the_tree_serve_their_target() {
        let tar = tar(&[
            ("a/real.txt", "real"),
            ("a/alias.txt", "-> real.txt"),
            ("escape.txt", "-> ../../etc/passwd"),
        ]);
        let site = from_tar(&tar, &BlobStore::default(), 1 << 20).unwrap();
        assert_eq!(text(site.file("a/alias.txt").unwrap()), "real");
        assert!(site.file("escape.txt").is_none());
    }

    #[test]
    fn a_site_over_the_limit_or_a_broken_archive_is_refused() {
        let tar = tar(&[("a.txt", "0123456789"), ("b.txt", "0123456789")]);
        assert!(matches!(
            from_tar(&tar, &BlobStore::default(), 15),
            Err(LoadError::TooLarge(15))
        ));
        let long = "x".repeat(2000);
        let truncated = &self::tar(&[("long.txt", &long)])[..600];
        assert!(matches!(
            from_tar(truncated, &BlobStore::default(), 1 << 20),
            Err(LoadError::Archive(_))
        ));
    }

    #[test]
    fn a_site_over_the_memory_share_continues_on_disk_with_the_same_entity_tags() {
        let base = std::env::temp_dir().join(format!(
            "slipway-load-test-{}",
            uuid::Uuid::new_v4().simple()
        ));
        let root = DiskRoot::open(&base).unwrap();
        let big = "0123456789abcdef".repeat(256);
        let tar = tar(&[
            ("index.html", "<h1>first, read into memory</h1>"),
            ("big.txt", &big),
            ("alias.txt", "-> big.txt"),
            ("z/last.css", "body{}"),
        ]);
        let limits = Limits {
            max_site_bytes: 1 << 20,
            memory_site_bytes: 1024,
        };
        let blobs = BlobStore::default();
        let site = read_site(&tar[..], limits, &blobs, Some(&root)).unwrap();
        assert!(site.on_disk());
        assert_eq!(
            text(site.file("index.html").unwrap()),
            "<h1>first, read into memory</h1>"
        );
        assert_eq!(text(site.file("big.txt").unwrap()), big);
        assert_eq!(text(site.file("alias.txt").unwrap()), big);
        assert_eq!(text(site.file("z/last.css").unwrap()), "body{}");
        assert!(matches!(site.lookup("z"), Lookup::Directory));
        assert_eq!(blobs.live_count(), 0, "nothing of it stays in memory");
        // Three distinct files, in whole blocks.
        assert_eq!(site.cached_bytes(), 3 * 4096);
        let in_memory = from_tar(&tar, &blobs, 1 << 20).unwrap();
        assert_eq!(
            in_memory.file("big.txt").unwrap().etag,
            site.file("big.txt").unwrap().etag,
            "a site keeps its entity tags whichever tier holds it"
        );

        let without_disk = read_site(&tar[..], limits, &blobs, None);
        assert!(matches!(without_disk, Err(LoadError::TooLarge(1024))));
        let over_all = read_site(
            &tar[..],
            Limits {
                max_site_bytes: 4000,
                ..limits
            },
            &blobs,
            Some(&root),
        );
        assert!(matches!(over_all, Err(LoadError::TooLarge(4000))));
        drop(site);
        std::fs::remove_dir_all(base).unwrap();
    }
}
