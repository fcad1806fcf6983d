//! The files of one deployed commit of a static channel, and the content-addressed cache that holds them.
//!
//! A [`Site`] is immutable: it is built whole from the commit's tar (fetched from the API server's internal
//! archive route) before anyone can see it, and a request holds one `Arc<Site>` from start to end. A new deploy is
//! a new `Site` swapped in by the routing table, so a reader sees the old tree or the new one, never a mix.
//!
//! File contents are [`Blob`]s keyed by their SHA-256: two commits (or two apps) with the same file share one
//! copy, and compressed variants are computed once per content. Blobs live as long as a site uses them.

use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::sync::{Arc, Mutex, Weak};

use bytes::Bytes;
use http::HeaderValue;
use sha2::{Digest, Sha256};
use slipway_internal::{CallError, InternalClient};

use super::content_type;

/// Which commit of which app a site is.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SiteKey {
    /// The app's id (the App's uid).
    pub app_id: String,
    /// The 40-hex commit.
    pub sha: String,
}

/// One file content, with the encodings worth sending for it.
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

/// A file of a site: its content and what the responses for it say.
#[derive(Debug)]
pub struct FileEntry {
    /// The content.
    pub blob: Arc<Blob>,
    /// `Content-Type` by extension.
    pub content_type: &'static str,
    /// Strong entity tag of the identity encoding, `"<hash prefix>"`.
    pub etag: HeaderValue,
}

/// The files of one commit, by path relative to the repository root (no leading `/`).
#[derive(Debug, Default)]
pub struct Site {
    files: HashMap<String, Arc<FileEntry>>,
    dirs: HashSet<String>,
    bytes: u64,
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

    /// Total size of the files' contents.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

/// Why a site could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The API server could not give the archive (it is down, or the commit is gone).
    #[error("fetch the archive: {0}")]
    Fetch(#[from] CallError),
    /// The archive is larger than the cache takes for one site.
    #[error("the commit's files exceed {0} bytes")]
    TooLarge(u64),
    /// The archive does not read as a tar.
    #[error("read the archive: {0}")]
    Archive(String),
}

/// Keeps one copy of each content: a blob with the same hash (and the same compressibility, which the type
/// decides) as a live one is that one.
#[derive(Default)]
pub struct BlobStore {
    blobs: Mutex<HashMap<BlobKey, Weak<Blob>>>,
}

/// A content's SHA-256, and whether its type compresses.
type BlobKey = ([u8; 32], bool);

impl BlobStore {
    /// The blob of `content`, shared when a live blob has the same content, else made (compressed when its type
    /// compresses).
    pub fn intern(&self, content: Vec<u8>, content_type: &str) -> Arc<Blob> {
        let hash: [u8; 32] = Sha256::digest(&content).into();
        let key = (hash, content_type::compressible(content_type));
        if let Some(existing) = self.live(&key) {
            return existing;
        }
        let blob = Arc::new(make_blob(hash, content, key.1));
        let mut blobs = self.blobs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(existing) = blobs.get(&key).and_then(Weak::upgrade) {
            return existing;
        }
        blobs.insert(key, Arc::downgrade(&blob));
        blob
    }

    fn live(&self, key: &BlobKey) -> Option<Arc<Blob>> {
        let blobs = self.blobs.lock().unwrap_or_else(|e| e.into_inner());
        blobs.get(key).and_then(Weak::upgrade)
    }

    /// Forgets entries whose blob is gone.
    pub fn sweep(&self) {
        let mut blobs = self.blobs.lock().unwrap_or_else(|e| e.into_inner());
        blobs.retain(|_, b| b.strong_count() > 0);
    }

    /// Number of live blobs.
    pub fn live_count(&self) -> usize {
        let blobs = self.blobs.lock().unwrap_or_else(|e| e.into_inner());
        blobs.values().filter(|b| b.strong_count() > 0).count()
    }
}

/// Smallest content worth compressing.
const COMPRESS_MIN_BYTES: usize = 256;
/// gzip level: a good ratio at a speed that keeps a deploy quick.
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

/// Builds a site from a tar (as `git archive --format=tar` writes it): regular files become entries, symbolic
/// links to files inside the tree serve their target's content, everything else (directories, the pax header
/// carrying the commit id, links leaving the tree) only shapes the directory set.
pub fn from_tar(tar: &[u8], blobs: &BlobStore, max_bytes: u64) -> Result<Site, LoadError> {
    let bad = |e: std::io::Error| LoadError::Archive(e.to_string());
    let mut archive = tar::Archive::new(tar);
    let mut site = Site::default();
    let mut links = Vec::new();
    for entry in archive.entries().map_err(bad)? {
        let mut entry = entry.map_err(bad)?;
        let path = entry.path().map_err(bad)?.to_string_lossy().into_owned();
        let path = path.trim_end_matches('/').to_owned();
        match entry.header().entry_type() {
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                let size = entry.header().size().map_err(bad)?;
                site.bytes += size;
                if site.bytes > max_bytes {
                    return Err(LoadError::TooLarge(max_bytes));
                }
                let mut content = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
                entry.read_to_end(&mut content).map_err(bad)?;
                let content_type = content_type::for_path(&path);
                let blob = blobs.intern(content, content_type);
                site.add(path, blob, content_type);
            }
            tar::EntryType::Symlink => {
                if let Some(target) = entry.link_name().map_err(bad)? {
                    links.push((path, target.to_string_lossy().into_owned()));
                }
            }
            tar::EntryType::Directory => {
                site.dirs.insert(path);
            }
            _ => {}
        }
    }
    for (path, target) in links {
        if let Some(file) = resolve_link(&site, &path, &target) {
            let (blob, content_type) = (file.blob.clone(), content_type::for_path(&path));
            site.add(path, blob, content_type);
        }
    }
    Ok(site)
}

impl Site {
    fn add(&mut self, path: String, blob: Arc<Blob>, content_type: &'static str) {
        let mut parent = path.as_str();
        while let Some((dir, _)) = parent.rsplit_once('/') {
            self.dirs.insert(dir.to_owned());
            parent = dir;
        }
        let etag = etag(&blob.hash, "");
        self.files.insert(
            path,
            Arc::new(FileEntry {
                blob,
                content_type,
                etag,
            }),
        );
    }
}

/// The file a symbolic link at `path` pointing at `target` reaches, if it stays inside the tree.
fn resolve_link<'a>(site: &'a Site, path: &str, target: &str) -> Option<&'a FileEntry> {
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
    site.file(&parts.join("/"))
}

/// The entity tag of a content (`suffix` names an encoding: `""`, `"-gz"`, `"-br"`).
pub fn etag(hash: &[u8; 32], suffix: &str) -> HeaderValue {
    let tag = format!("\"{}{suffix}\"", hex::encode(&hash[..12]));
    HeaderValue::from_str(&tag).unwrap_or_else(|_| HeaderValue::from_static("\"\""))
}

/// The sites of deployed commits, loaded once each (concurrent requests for a site that is loading wait for the
/// same load) and dropped when no route names them.
pub struct SiteCache {
    api: InternalClient,
    blobs: Arc<BlobStore>,
    sites: Mutex<HashMap<SiteKey, Arc<tokio::sync::OnceCell<Arc<Site>>>>>,
    max_site_bytes: u64,
}

impl SiteCache {
    /// A cache that fills itself from `api`, taking sites of at most `max_site_bytes`.
    pub fn new(api: InternalClient, max_site_bytes: u64) -> Self {
        Self {
            api,
            blobs: Arc::default(),
            sites: Mutex::default(),
            max_site_bytes,
        }
    }

    fn cell(&self, key: &SiteKey) -> Arc<tokio::sync::OnceCell<Arc<Site>>> {
        let mut sites = self.sites.lock().unwrap_or_else(|e| e.into_inner());
        sites.entry(key.clone()).or_default().clone()
    }

    /// The site if it is loaded.
    pub fn loaded(&self, key: &SiteKey) -> Option<Arc<Site>> {
        let sites = self.sites.lock().unwrap_or_else(|e| e.into_inner());
        sites.get(key).and_then(|cell| cell.get().cloned())
    }

    /// The site, loading it first when needed.
    pub async fn get(&self, key: &SiteKey) -> Result<Arc<Site>, LoadError> {
        let cell = self.cell(key);
        cell.get_or_try_init(|| self.load(key))
            .await
            .map(Arc::clone)
    }

    async fn load(&self, key: &SiteKey) -> Result<Arc<Site>, LoadError> {
        let started = std::time::Instant::now();
        let mut res = self.api.archive(&key.app_id, &key.sha).await?;
        let mut tar = Vec::new();
        while let Some(chunk) = res
            .chunk()
            .await
            .map_err(|e| CallError::Unavailable(e.to_string()))?
        {
            tar.extend_from_slice(&chunk);
            if tar.len() as u64 > self.max_site_bytes.saturating_mul(2) {
                return Err(LoadError::TooLarge(self.max_site_bytes));
            }
        }
        let max = self.max_site_bytes;
        let blobs = self.blobs.clone();
        let site = tokio::task::spawn_blocking(move || from_tar(&tar, &blobs, max))
            .await
            .map_err(|e| LoadError::Archive(e.to_string()))??;
        tracing::info!(app_id = %key.app_id, sha = %key.sha, files = site.len(), bytes = site.bytes(),
            millis = started.elapsed().as_millis() as u64, "static site loaded");
        Ok(Arc::new(site))
    }

    /// Drops every site not in `keep` (requests still serving one keep it alive until they finish).
    pub fn retain(&self, keep: &HashSet<SiteKey>) {
        {
            let mut sites = self.sites.lock().unwrap_or_else(|e| e.into_inner());
            sites.retain(|key, _| keep.contains(key));
        }
        self.blobs.sweep();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tar with the given regular files, symlinks (`-> target`) and directories (trailing `/`).
    pub(crate) fn tar_of(entries: &[(&str, &str)]) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        for (path, content) in entries {
            let mut header = tar::Header::new_ustar();
            if let Some(target) = content.strip_prefix("-> ") {
                header.set_entry_type(tar::EntryType::Symlink);
                header.set_size(0);
                header.set_cksum();
                builder.append_link(&mut header, path, target).unwrap();
            } else if path.ends_with('/') {
                header.set_entry_type(tar::EntryType::Directory);
                header.set_size(0);
                header.set_cksum();
                builder.append_data(&mut header, path, &[][..]).unwrap();
            } else {
                header.set_size(content.len() as u64);
                header.set_mode(0o644);
                header.set_cksum();
                builder
                    .append_data(&mut header, path, content.as_bytes())
                    .unwrap();
            }
        }
        builder.into_inner().unwrap()
    }

    #[test]
    fn the_root_and_directories_serve_their_index() {
        let tar = tar_of(&[
            ("index.html", "<h1>home</h1>"),
            ("docs/", ""),
            ("docs/index.html", "<h1>docs</h1>"),
            ("docs/a.css", "body{}"),
            ("empty/", ""),
        ]);
        let site = from_tar(&tar, &BlobStore::default(), 1 << 20).unwrap();
        let content = |l: Lookup<'_>| match l {
            Lookup::File(f) => String::from_utf8(f.blob.identity.to_vec()).unwrap(),
            other => format!("{other:?}"),
        };
        assert_eq!(content(site.lookup("")), "<h1>home</h1>");
        assert_eq!(content(site.lookup("docs/")), "<h1>docs</h1>");
        assert_eq!(content(site.lookup("docs/a.css")), "body{}");
        assert!(matches!(site.lookup("docs"), Lookup::Directory));
        assert!(matches!(site.lookup("empty/"), Lookup::Missing));
        assert!(matches!(site.lookup("nope.html"), Lookup::Missing));
        assert_eq!(site.len(), 3);
    }

    #[test]
    fn links_inside_the_tree_serve_their_target_and_others_nothing() {
        let tar = tar_of(&[
            ("a/real.txt", "real"),
            ("a/alias.txt", "-> real.txt"),
            ("up.txt", "-> a/real.txt"),
            ("escape.txt", "-> ../../etc/passwd"),
            ("absolute.txt", "-> /etc/passwd"),
        ]);
        let site = from_tar(&tar, &BlobStore::default(), 1 << 20).unwrap();
        assert_eq!(
            &site.file("a/alias.txt").unwrap().blob.identity[..],
            b"real"
        );
        assert_eq!(&site.file("up.txt").unwrap().blob.identity[..], b"real");
        assert!(site.file("escape.txt").is_none());
        assert!(site.file("absolute.txt").is_none());
    }

    #[test]
    fn equal_contents_share_one_blob_across_sites() {
        let blobs = BlobStore::default();
        let one = from_tar(
            &tar_of(&[("a.txt", "same"), ("b.txt", "same")]),
            &blobs,
            1 << 20,
        )
        .unwrap();
        let two = from_tar(&tar_of(&[("c.txt", "same")]), &blobs, 1 << 20).unwrap();
        let a = &one.file("a.txt").unwrap().blob;
        assert!(Arc::ptr_eq(a, &one.file("b.txt").unwrap().blob));
        assert!(Arc::ptr_eq(a, &two.file("c.txt").unwrap().blob));
        assert_eq!(blobs.live_count(), 1);
        drop((one, two));
        blobs.sweep();
        assert_eq!(
            blobs.live_count(),
            0,
            "blobs go with the last site using them"
        );
    }

    #[test]
    fn text_is_compressed_when_it_pays_and_binary_never() {
        let blobs = BlobStore::default();
        let text = "hello static world ".repeat(100);
        let site = from_tar(
            &tar_of(&[("big.js", &text), ("tiny.css", "a{}"), ("pic.png", &text)]),
            &blobs,
            1 << 20,
        )
        .unwrap();
        let big = &site.file("big.js").unwrap().blob;
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
        let tiny = &site.file("tiny.css").unwrap().blob;
        assert!(
            tiny.gzip.is_none() && tiny.brotli.is_none(),
            "too small to pay"
        );
        let png = &site.file("pic.png").unwrap().blob;
        assert!(png.gzip.is_none(), "images are not compressed");
    }

    #[test]
    fn a_site_over_the_limit_or_a_broken_archive_is_refused() {
        let tar = tar_of(&[("a.txt", "0123456789"), ("b.txt", "0123456789")]);
        assert!(matches!(
            from_tar(&tar, &BlobStore::default(), 15),
            Err(LoadError::TooLarge(15))
        ));
        let long = "x".repeat(2000);
        let truncated = &tar_of(&[("long.txt", &long)])[..600];
        assert!(matches!(
            from_tar(truncated, &BlobStore::default(), 1 << 20),
            Err(LoadError::Archive(_))
        ));
    }

    #[test]
    fn entity_tags_differ_by_content_and_encoding() {
        let a = etag(&[1; 32], "");
        assert_eq!(a, "\"010101010101010101010101\"");
        assert_ne!(etag(&[2; 32], ""), a);
        assert_ne!(etag(&[1; 32], "-br"), a);
    }
}
