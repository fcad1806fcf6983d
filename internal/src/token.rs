//! The token a caller presents: a projected ServiceAccount token the kubelet writes to a file and replaces before
//! it expires, so the file is read again whenever it changes (one `stat` per call; the read only on a change).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

/// Where the kubelet puts the internal token unless configured otherwise (the chart's projected volume).
pub const DEFAULT_TOKEN_FILE: &str = "/var/run/secrets/slipway.dev/internal/token";

/// Where a caller's token comes from.
#[derive(Clone)]
pub enum TokenSource {
    /// A file the token is (re)read from.
    File(Arc<TokenFile>),
    /// A token given in code (tests, tools).
    Fixed(Arc<str>),
}

impl std::fmt::Debug for TokenSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TokenSource::File(file) => write!(f, "TokenSource::File({})", file.path.display()),
            TokenSource::Fixed(_) => f.write_str("TokenSource::Fixed(..)"),
        }
    }
}

impl TokenSource {
    /// The token in the file at `path`, re-read when the file changes.
    pub fn file(path: impl Into<PathBuf>) -> Self {
        TokenSource::File(Arc::new(TokenFile {
            path: path.into(),
            cached: Mutex::default(),
        }))
    }

    /// The token `token`.
    pub fn fixed(token: impl Into<Arc<str>>) -> Self {
        TokenSource::Fixed(token.into())
    }

    /// The token to present now.
    pub fn token(&self) -> std::io::Result<Arc<str>> {
        match self {
            TokenSource::File(file) => file.token(),
            TokenSource::Fixed(token) => Ok(token.clone()),
        }
    }
}

/// A token file and its last read contents.
pub struct TokenFile {
    path: PathBuf,
    cached: Mutex<Option<Cached>>,
}

struct Cached {
    modified: SystemTime,
    len: u64,
    token: Arc<str>,
}

impl TokenFile {
    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn token(&self) -> std::io::Result<Arc<str>> {
        let with_path = |e: std::io::Error| {
            std::io::Error::new(
                e.kind(),
                format!("internal token file {}: {e}", self.path.display()),
            )
        };
        // The kubelet swaps a symlink to a new file, which `metadata` follows.
        let meta = std::fs::metadata(&self.path).map_err(with_path)?;
        let modified = meta.modified().map_err(with_path)?;
        let mut cached = self.cached.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = cached.as_ref()
            && c.modified == modified
            && c.len == meta.len()
        {
            return Ok(c.token.clone());
        }
        let text = std::fs::read_to_string(&self.path).map_err(with_path)?;
        let token: Arc<str> = text.trim().into();
        if token.is_empty() {
            return Err(with_path(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "the file is empty",
            )));
        }
        *cached = Some(Cached {
            modified,
            len: meta.len(),
            token: token.clone(),
        });
        Ok(token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rotated_file_is_read_again() {
        let dir = std::env::temp_dir().join(format!("slipway-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("token");
        std::fs::write(&path, "first\n").unwrap();
        let source = TokenSource::file(&path);
        assert_eq!(&*source.token().unwrap(), "first");
        assert_eq!(&*source.token().unwrap(), "first");
        // As the kubelet does: a new file, then an atomic rename over the old name.
        let next = dir.join("token.next");
        std::fs::write(&next, "second-token").unwrap();
        std::fs::rename(&next, &path).unwrap();
        assert_eq!(&*source.token().unwrap(), "second-token");
        std::fs::write(&path, "  \n").unwrap();
        assert!(source.token().is_err(), "an empty file is no token");
        std::fs::remove_file(&path).unwrap();
        let err = source.token().unwrap_err();
        assert!(err.to_string().contains("internal token file"), "{err}");
        assert_eq!(&*TokenSource::fixed("given").token().unwrap(), "given");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
