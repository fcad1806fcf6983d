//! The disk tier's files: a site too large for the memory tier is written once, file by file as its archive
//! streams in, to a directory of its own under the edge's disk cache directory, and served from there by
//! streaming ([`super::file_body`]).
//!
//! A site's directory lives exactly as long as its [`super::site::Site`]: the cache evicting it drops the cache's
//! reference, and the directory goes when the last request serving the site drops the other ones, so a request
//! never finds its files gone. Files are named by number, never by their path in the commit, so no committed name
//! can reach outside the directory. The cache directory belongs to the edge: what an earlier process left in it
//! is removed at start.

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest, Sha256};

use super::site::DiskFile;

/// The subdirectory of the configured directory the edge writes into (and empties at start), so a flag pointing
/// at a directory holding anything else never removes it.
const SUBDIRECTORY: &str = "slipway-sites";

/// Where sites on disk are written.
#[derive(Debug)]
pub struct DiskRoot {
    dir: PathBuf,
    next: AtomicU64,
}

impl DiskRoot {
    /// The disk cache under `dir`, emptied of what an earlier process left there.
    pub fn open(dir: &Path) -> io::Result<Self> {
        let dir = dir.join(SUBDIRECTORY);
        match std::fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        std::fs::create_dir_all(&dir)?;
        Ok(Self {
            dir,
            next: AtomicU64::new(0),
        })
    }

    /// A new, empty directory for one site.
    pub fn site_dir(&self) -> io::Result<DiskDir> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let path = self.dir.join(n.to_string());
        std::fs::create_dir(&path)?;
        Ok(DiskDir { path, files: 0 })
    }

    /// The directory sites are written under.
    pub fn path(&self) -> &Path {
        &self.dir
    }
}

/// The directory of one site on disk, removed when dropped.
#[derive(Debug)]
pub struct DiskDir {
    path: PathBuf,
    files: u64,
}

impl DiskDir {
    /// Writes exactly `len` bytes from `content` as the site's next file, hashing them on the way.
    pub fn write(&mut self, content: &mut impl Read, len: u64) -> io::Result<DiskFile> {
        let path = self.path.join(self.files.to_string());
        self.files += 1;
        let mut out = Hashing {
            inner: io::BufWriter::with_capacity(64 * 1024, std::fs::File::create(&path)?),
            hasher: Sha256::new(),
        };
        let written = io::copy(&mut content.take(len), &mut out)?;
        if written != len {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("the archive ended {} bytes into a file of {len}", written),
            ));
        }
        out.inner.into_inner().map_err(|e| e.into_error())?;
        Ok(DiskFile {
            path,
            len,
            hash: out.hasher.finalize().into(),
        })
    }

    /// Where the site's files are.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for DiskDir {
    fn drop(&mut self) {
        let path = std::mem::take(&mut self.path);
        let remove = move || {
            if let Err(e) = std::fs::remove_dir_all(&path)
                && e.kind() != io::ErrorKind::NotFound
            {
                tracing::warn!(path = %path.display(), error = %e, "could not remove an evicted site's files");
            }
        };
        // Off the async workers when there are some: a large site is many unlinks.
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn_blocking(remove)),
            Err(_) => remove(),
        }
    }
}

/// A writer that hashes what goes through it.
struct Hashing<W> {
    inner: W,
    hasher: Sha256,
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch() -> PathBuf {
        std::env::temp_dir().join(format!(
            "slipway-disk-test-{}",
            uuid::Uuid::new_v4().simple()
        ))
    }

    #[test]
    fn files_are_written_hashed_and_go_with_their_directory() {
        let base = scratch();
        let root = DiskRoot::open(&base).unwrap();
        let mut dir = root.site_dir().unwrap();
        let file = dir.write(&mut &b"hello disk"[..], 10).unwrap();
        assert_eq!(std::fs::read(&file.path).unwrap(), b"hello disk");
        assert_eq!(file.hash, <[u8; 32]>::from(Sha256::digest(b"hello disk")));
        assert!(
            dir.write(&mut &b"short"[..], 10).is_err(),
            "a truncated file is an error"
        );
        let path = dir.path().to_owned();
        drop(dir);
        assert!(!path.exists(), "dropped outside a runtime: removed at once");
        std::fs::remove_dir_all(base).unwrap();
    }

    #[test]
    fn opening_empties_what_an_earlier_process_left() {
        let base = scratch();
        let left = base.join(SUBDIRECTORY).join("7");
        std::fs::create_dir_all(&left).unwrap();
        std::fs::write(left.join("0"), b"old").unwrap();
        std::fs::write(base.join("unrelated"), b"kept").unwrap();
        let root = DiskRoot::open(&base).unwrap();
        assert!(!left.exists());
        assert!(root.path().exists());
        assert!(
            base.join("unrelated").exists(),
            "only the edge's subdirectory is emptied"
        );
        std::fs::remove_dir_all(base).unwrap();
    }
}
