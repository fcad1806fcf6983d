//! The files of one deployed commit of a static channel.
//!
//! A [`Site`] is immutable: it is built whole from the commit's tar ([`super::site_load`]) before anyone can see it,
//! and a request holds one `Arc<Site>` from start to end. A new deploy is a new `Site` the routing table switches
//! to, so a reader sees the old tree or the new one, never a mix.
//!
//! A file's content lives in one of two places ([`Content`]):
//! - in memory, as a [`Blob`] keyed by its SHA-256: two commits (or two apps) with the same file share one copy, and
//!   the gzip and brotli forms are computed once per content, so a response is a reference to bytes made once;
//! - on disk, for a site too large for the memory tier: one file in the site's own directory ([`DiskFile`]),
//!   served as committed (no compressed forms: computing them would hold the site in memory, or cost a second copy
//!   on disk, for files that are mostly media).
//!
//! Either way the entity tag is the content's hash, so a site keeps its ETags whichever tier holds it.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};

use bytes::Bytes;
use http::HeaderValue;
use sha2::{Digest, Sha256};

use super::content_type;
use super::site_disk::DiskDir;

/// Which commit of which app a site is.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SiteKey {
    /// The app's id (the App's uid).
    pub app_id: String,
    /// The 40-hex commit.
    pub sha: String,
}

/// One file content held in memory, with the encodings worth sending for it.
#[derive(Debug)]
pub struct Blob {
    /// SHA-256 of the content.
    pub hash: [u8; 32],
    /// The content as committed.
    pub identity: Bytes,
    /// gzip of the content, when the type compresses and the result is smaller.
    pub gzip: Option<Bytes>,
    /// brotli of the content, under the same rule.
    pub brotli: Option<Bytes>,
}

impl Blob {
    /// Bytes held: the content and its compressed forms.
    pub fn held_bytes(&self) -> u64 {
        let len = |b: &Option<Bytes>| b.as_ref().map_or(0, Bytes::len);
        (self.identity.len() + len(&self.gzip) + len(&self.brotli)) as u64
    }
}

/// One file content held on disk, in the directory of its site.
#[derive(Debug)]
pub struct DiskFile {
    /// Where it is.
    pub path: PathBuf,
    /// Its size.
    pub len: u64,
    /// SHA-256 of the content.
    pub hash: [u8; 32],
}

/// Where a file's content is.
#[derive(Debug, Clone)]
pub enum Content {
    /// In memory, shared by every site with the same content.
    Memory(Arc<Blob>),
    /// In a file of the site's directory.
    Disk(Arc<DiskFile>),
}

impl Content {
    /// SHA-256 of the content.
    pub fn hash(&self) -> &[u8; 32] {
        match self {
            Content::Memory(blob) => &blob.hash,
            Content::Disk(file) => &file.hash,
        }
    }

    /// Size of the content as committed.
    pub fn len(&self) -> u64 {
        match self {
            Content::Memory(blob) => blob.identity.len() as u64,
            Content::Disk(file) => file.len,
        }
    }

    /// Whether the content is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A file of a site: its content and what the responses for it say.
#[derive(Debug)]
pub struct FileEntry {
    /// The content.
    pub content: Content,
    /// `Content-Type` by extension.
    pub content_type: HeaderValue,
    /// Strong entity tag of the identity encoding, `"<hash prefix>"`.
    pub etag: HeaderValue,
}

/// The files of one commit, by path relative to the repository root (no leading `/`).
#[derive(Debug, Default)]
pub struct Site {
    files: HashMap<String, Arc<FileEntry>>,
    dirs: HashSet<String>,
    bytes: u64,
    cached_bytes: u64,
    /// The directory of a site on disk, removed when the site is dropped (by the cache and by the last request
    /// serving it, so no request finds its files gone).
    disk: Option<DiskDir>,
}

/// What a request path names in a site.
#[derive(Debug)]
pub enum Lookup<'a> {
    /// A file to serve.
    File(&'a FileEntry),
    /// A directory asked for without its trailing slash: redirect there.
    Directory,
    /// Nothing.
    Missing,
}

impl Site {
    /// Finds what `path` (decoded, relative, without a leading `/`; empty for the root) names: a file, the
    /// `index.html` of a directory asked for with a trailing slash, or a directory without its slash.
    pub fn lookup(&self, path: &str) -> Lookup<'_> {
        if path.is_empty() || path.ends_with('/') {
            return match self.files.get(&format!("{path}index.html")) {
                Some(file) => Lookup::File(file),
                None => Lookup::Missing,
            };
        }
        if let Some(file) = self.files.get(path) {
            return Lookup::File(file);
        }
        if self.dirs.contains(path) {
            return Lookup::Directory;
        }
        Lookup::Missing
    }

    /// A file by exact path.
    pub fn file(&self, path: &str) -> Option<&FileEntry> {
        self.files.get(path).map(Arc::as_ref)
    }

    /// Number of files.
    pub fn len(&self) -> usize {
        self.files.len()
    }

    /// Whether the site has no file.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// Total size of the files' contents as committed.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// What the site counts against its tier's cap: in memory, its distinct contents with their compressed forms
    /// plus [`FILE_OVERHEAD`] and the path of each file; on disk, its distinct files in whole 4 KiB blocks.
    pub fn cached_bytes(&self) -> u64 {
        self.cached_bytes
    }

    /// Whether the site's files are on disk.
    pub fn on_disk(&self) -> bool {
        self.disk.is_some()
    }
}

/// What a file costs in memory beside its content and path (its entry, its entity tag, the maps), counted
/// against the memory cap.
pub const FILE_OVERHEAD: u64 = 160;
/// The block a file on disk takes space in.
const DISK_BLOCK: u64 = 4096;

/// The entries of a site as its archive is read; [`SiteBuilder::finish`] makes the site.
#[derive(Default)]
pub struct SiteBuilder {
    files: Vec<(String, Content)>,
    links: Vec<(String, String)>,
    dirs: HashSet<String>,
}

impl SiteBuilder {
    /// A regular file.
    pub fn file(&mut self, path: String, content: Content) {
        self.files.push((path, content));
    }

    /// A symbolic link at `path` to `target`: it serves its target's content when that is a file inside the tree.
    pub fn link(&mut self, path: String, target: String) {
        self.links.push((path, target));
    }

    /// A directory (it answers a redirect to itself with a slash, even when empty).
    pub fn dir(&mut self, path: String) {
        self.dirs.insert(path);
    }

    /// The site, its files on disk in `disk` when given.
    pub fn finish(self, disk: Option<DiskDir>) -> Site {
        let mut site = Site {
            dirs: self.dirs,
            disk,
            ..Site::default()
        };
        for (path, content) in self.files {
            site.add(path, content);
        }
        for (path, target) in self.links {
            if let Some(content) = resolve_link(&site, &path, &target) {
                site.add(path, content);
            }
        }
        site.bytes = site.files.values().map(|f| f.content.len()).sum();
        site.cached_bytes = cached_bytes(&site);
        site
    }
}

impl Site {
    fn add(&mut self, path: String, content: Content) {
        let mut parent = path.as_str();
        while let Some((dir, _)) = parent.rsplit_once('/') {
            self.dirs.insert(dir.to_owned());
            parent = dir;
        }
        let content_type = content_type::for_path(&path);
        let etag = etag(content.hash(), "");
        self.files.insert(
            path,
            Arc::new(FileEntry {
                content,
                content_type,
                etag,
            }),
        );
    }
}

/// See [`Site::cached_bytes`]; a content two paths share counts once.
fn cached_bytes(site: &Site) -> u64 {
    let mut seen = HashSet::new();
    let mut total = 0;
    for (path, file) in &site.files {
        match &file.content {
            Content::Memory(blob) => {
                total += FILE_OVERHEAD + path.len() as u64;
                if seen.insert(Arc::as_ptr(blob) as usize) {
                    total += blob.held_bytes();
                }
            }
            Content::Disk(disk) => {
                if seen.insert(Arc::as_ptr(disk) as usize) {
                    total += disk.len.div_ceil(DISK_BLOCK).max(1) * DISK_BLOCK;
                }
            }
        }
    }
    total
}

/// The content a symbolic link at `path` pointing at `target` reaches, if it is a file inside the tree.
fn resolve_link(site: &Site, path: &str, target: &str) -> Option<Content> {
    if target.starts_with('/') {
        return None;
    }
    let mut parts: Vec<&str> = path.split('/').collect();
    parts.pop();
    for part in target.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            name => parts.push(name),
        }
    }
    site.file(&parts.join("/")).map(|f| f.content.clone())
}

/// Keeps one copy of each content: a blob with the same hash (and the same compressibility, which the type
/// decides) as a live one is that one. Entries of blobs no site holds any more are swept out as the store grows,
/// so it never holds more than about twice the live entries.
#[derive(Default)]
pub struct BlobStore {
    blobs: Mutex<Blobs>,
}

#[derive(Default)]
struct Blobs {
    by_key: HashMap<BlobKey, Weak<Blob>>,
    /// Entries left after the last sweep.
    after_sweep: usize,
}

/// A content's SHA-256, and whether its type compresses.
type BlobKey = ([u8; 32], bool);

/// Entries the store may gain over twice its size after the last sweep before it sweeps again.
const SWEEP_SLACK: usize = 1024;

impl BlobStore {
    /// The blob of `content` (of a file of type `content_type`), shared when a live blob has the same content,
    /// else made (compressed when its type compresses).
    pub fn intern(&self, content: Vec<u8>, content_type: &HeaderValue) -> Arc<Blob> {
        let hash: [u8; 32] = Sha256::digest(&content).into();
        let key = (hash, content_type::compressible(content_type));
        if let Some(existing) = self.live(&key) {
            return existing;
        }
        let blob = Arc::new(make_blob(hash, content, key.1));
        let mut blobs = self.blobs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(existing) = blobs.by_key.get(&key).and_then(Weak::upgrade) {
            return existing;
        }
        blobs.by_key.insert(key, Arc::downgrade(&blob));
        if blobs.by_key.len() > blobs.after_sweep.saturating_mul(2) + SWEEP_SLACK {
            blobs.sweep();
        }
        blob
    }

    fn live(&self, key: &BlobKey) -> Option<Arc<Blob>> {
        let blobs = self.blobs.lock().unwrap_or_else(|e| e.into_inner());
        blobs.by_key.get(key).and_then(Weak::upgrade)
    }

    /// Forgets entries whose blob is gone.
    pub fn sweep(&self) {
        self.blobs.lock().unwrap_or_else(|e| e.into_inner()).sweep();
    }

    /// Number of live blobs.
    pub fn live_count(&self) -> usize {
        let blobs = self.blobs.lock().unwrap_or_else(|e| e.into_inner());
        blobs
            .by_key
            .values()
            .filter(|b| b.strong_count() > 0)
            .count()
    }

    /// Number of entries, live or not yet swept.
    pub fn entries(&self) -> usize {
        self.blobs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .by_key
            .len()
    }
}

impl Blobs {
    fn sweep(&mut self) {
        self.by_key.retain(|_, b| b.strong_count() > 0);
        self.after_sweep = self.by_key.len();
    }
}

/// Smallest content worth compressing.
const COMPRESS_MIN_BYTES: usize = 256;
/// gzip level: a good ratio at a speed that keeps a load quick.
const GZIP_LEVEL: u32 = 6;
/// brotli quality: same trade-off (11 is several times slower for a few percent).
const BROTLI_QUALITY: u32 = 5;

fn make_blob(hash: [u8; 32], content: Vec<u8>, compressible: bool) -> Blob {
    let compress = compressible && content.len() >= COMPRESS_MIN_BYTES;
    let smaller = |encoded: Vec<u8>| (encoded.len() < content.len()).then(|| Bytes::from(encoded));
    let (gzip, brotli) = if compress {
        (
            gzip(&content).and_then(smaller),
            brotli(&content).and_then(smaller),
        )
    } else {
        (None, None)
    };
    Blob {
        hash,
        identity: Bytes::from(content),
        gzip,
        brotli,
    }
}

fn gzip(content: &[u8]) -> Option<Vec<u8>> {
    use std::io::Write;
    let mut encoder =
        flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(GZIP_LEVEL));
    encoder.write_all(content).ok()?;
    encoder.finish().ok()
}

fn brotli(content: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let params = brotli::enc::BrotliEncoderParams {
        quality: BROTLI_QUALITY as i32,
        ..Default::default()
    };
    brotli::BrotliCompress(&mut &content[..], &mut out, &params).ok()?;
    Some(out)
}

/// The entity tag of a content (`suffix` names an encoding: `""`, `"-gz"`, `"-br"`).
pub fn etag(hash: &[u8; 32], suffix: &str) -> HeaderValue {
    let tag = format!("\"{}{suffix}\"", hex::encode(&hash[..12]));
    HeaderValue::from_str(&tag).unwrap_or_else(|_| HeaderValue::from_static("\"\""))
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    const TEXT: HeaderValue = HeaderValue::from_static("text/plain");

    fn memory_site(files: &[(&str, &str)], blobs: &BlobStore) -> Site {
        let mut builder = SiteBuilder::default();
        for (path, content) in files {
            let blob = blobs.intern(content.as_bytes().to_vec(), &content_type::for_path(path));
            builder.file((*path).to_owned(), Content::Memory(blob));
        }
        builder.finish(None)
    }

    fn identity(file: &FileEntry) -> &[u8] {
        match &file.content {
            Content::Memory(blob) => &blob.identity,
            Content::Disk(_) => panic!("on disk"),
        }
    }

    #[test]
    fn equal_contents_share_one_blob_across_sites() {
        let blobs = BlobStore::default();
        let one = memory_site(&[("a.txt", "same"), ("b.txt", "same")], &blobs);
        let two = memory_site(&[("c.txt", "same")], &blobs);
        let blob = |site: &Site, path: &str| match &site.file(path).unwrap().content {
            Content::Memory(blob) => blob.clone(),
            Content::Disk(_) => panic!("on disk"),
        };
        let a = blob(&one, "a.txt");
        assert!(Arc::ptr_eq(&a, &blob(&one, "b.txt")));
        assert!(Arc::ptr_eq(&a, &blob(&two, "c.txt")));
        assert_eq!(blobs.live_count(), 1);
        drop((one, two, a));
        blobs.sweep();
        assert_eq!(
            blobs.live_count(),
            0,
            "blobs go with the last site using them"
        );
    }

    #[test]
    fn the_store_sweeps_dead_entries_as_it_grows() {
        let blobs = BlobStore::default();
        for i in 0..(3 * SWEEP_SLACK) {
            drop(blobs.intern(format!("content {i}").into_bytes(), &TEXT));
        }
        assert!(
            blobs.entries() <= SWEEP_SLACK + 1,
            "{} entries of dead blobs kept",
            blobs.entries()
        );
    }

    #[test]
    fn text_is_compressed_when_it_pays_and_binary_never() {
        let blobs = BlobStore::default();
        let text = "hello static world ".repeat(100);
        let site = memory_site(
            &[("big.js", &text), ("tiny.css", "a{}"), ("pic.png", &text)],
            &blobs,
        );
        let blob = |path: &str| match &site.file(path).unwrap().content {
            Content::Memory(blob) => blob.clone(),
            Content::Disk(_) => panic!("on disk"),
        };
        let big = blob("big.js");
        let gz = big.gzip.as_ref().unwrap();
        let mut decoded = String::new();
        flate2::read::GzDecoder::new(&gz[..])
            .read_to_string(&mut decoded)
            .unwrap();
        assert_eq!(decoded, text);
        let br = big.brotli.as_ref().unwrap();
        let mut decoded = Vec::new();
        brotli::BrotliDecompress(&mut &br[..], &mut decoded).unwrap();
        assert_eq!(decoded, text.as_bytes());
        let tiny = blob("tiny.css");
        assert!(
            tiny.gzip.is_none() && tiny.brotli.is_none(),
            "too small to pay"
        );
        assert!(blob("pic.png").gzip.is_none(), "images are not compressed");
    }

    #[test]
    fn a_site_counts_its_contents_with_their_compressed_forms_once_each() {
        let blobs = BlobStore::default();
        let text = "hello static world ".repeat(100);
        let site = memory_site(&[("a.js", &text), ("b.js", &text)], &blobs);
        let Content::Memory(blob) = &site.file("a.js").unwrap().content else {
            panic!("on disk")
        };
        assert!(blob.held_bytes() > text.len() as u64);
        assert_eq!(site.bytes(), 2 * text.len() as u64);
        assert_eq!(
            site.cached_bytes(),
            blob.held_bytes() + 2 * FILE_OVERHEAD + "a.js".len() as u64 + "b.js".len() as u64
        );
    }

    #[test]
    fn links_inside_the_tree_serve_their_target_and_others_nothing() {
        let blobs = BlobStore::default();
        let mut builder = SiteBuilder::default();
        let real = blobs.intern(b"real".to_vec(), &TEXT);
        builder.file("a/real.txt".into(), Content::Memory(real));
        builder.link("a/alias.txt".into(), "real.txt".into());
        builder.link("up.txt".into(), "a/real.txt".into());
        builder.link("escape.txt".into(), "../../etc/passwd".into());
        builder.link("absolute.txt".into(), "/etc/passwd".into());
        let site = builder.finish(None);
        assert_eq!(identity(site.file("a/alias.txt").unwrap()), b"real");
        assert_eq!(identity(site.file("up.txt").unwrap()), b"real");
        assert!(site.file("escape.txt").is_none());
        assert!(site.file("absolute.txt").is_none());
        assert!(matches!(site.lookup("a"), Lookup::Directory));
    }

    #[test]
    fn entity_tags_differ_by_content_and_encoding() {
        let a = etag(&[1; 32], "");
        assert_eq!(a, "\"010101010101010101010101\"");
        assert_ne!(etag(&[2; 32], ""), a);
        assert_ne!(etag(&[1; 32], "-br"), a);
    }
}
