//! The root files of a commit that decide its build (`Dockerfile`, `package.json`, `install.sh`, `launch.sh`, the
//! dependency manifests), read from the API server's tar of the commit as it streams past: everything else is
//! skipped, so a large repository costs the operator no memory.

use std::io::Read;

use slipway_internal::{CallError, InternalClient};

/// The dependency manifests `install.sh` is given before the rest of the commit (see
/// `dockerfile::app_dockerfile`): what npm, yarn, pnpm, pip, Poetry, uv and Pipenv install from.
pub const MANIFESTS: [&str; 15] = [
    "package.json",
    "package-lock.json",
    "npm-shrinkwrap.json",
    "yarn.lock",
    "pnpm-lock.yaml",
    ".npmrc",
    ".yarnrc.yml",
    "requirements.txt",
    "pyproject.toml",
    "poetry.lock",
    "uv.lock",
    "Pipfile",
    "Pipfile.lock",
    "setup.py",
    "setup.cfg",
];

/// Largest Dockerfile read (the rest is not looked at).
const DOCKERFILE_LIMIT: u64 = 1024 * 1024;

/// What the root of a commit holds, as far as building it goes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sources {
    /// The root `Dockerfile`'s text (lossily decoded, at most 1 MiB).
    pub dockerfile: Option<String>,
    /// Whether that `Dockerfile` is longer than what was read.
    pub dockerfile_truncated: bool,
    /// Whether `package.json` is at the root.
    pub has_package_json: bool,
    /// `Some(starts with #!)` when `install.sh` is at the root.
    pub install_sh_shebang: Option<bool>,
    /// Whether that `install.sh` is a symlink (into the rest of the commit).
    pub install_sh_linked: bool,
    /// Whether `launch.sh` is at the root.
    pub has_launch_sh: bool,
    /// Whether `launch.sh` starts with `#!`.
    pub launch_sh_shebang: bool,
    /// The [`MANIFESTS`] at the root, in that list's order.
    pub manifests: Vec<&'static str>,
}

impl Sources {
    /// Reads the root files of a tar stream.
    pub fn from_tar(reader: impl Read) -> std::io::Result<Self> {
        let mut sources = Sources::default();
        let mut archive = tar::Archive::new(reader);
        for entry in archive.entries()? {
            let mut entry = entry?;
            let kind = entry.header().entry_type();
            if !(kind.is_file() || kind.is_symlink()) {
                continue;
            }
            let path = entry.path()?.to_string_lossy().into_owned();
            match path.strip_prefix("./").unwrap_or(&path) {
                "Dockerfile" if kind.is_file() => {
                    let mut text = Vec::new();
                    (&mut entry).take(DOCKERFILE_LIMIT).read_to_end(&mut text)?;
                    sources.dockerfile_truncated = entry.header().size()? > DOCKERFILE_LIMIT;
                    sources.dockerfile = Some(String::from_utf8_lossy(&text).into_owned());
                }
                "package.json" => sources.has_package_json = true,
                "install.sh" => {
                    sources.install_sh_linked = kind.is_symlink();
                    sources.install_sh_shebang = Some(shebang(&mut entry, kind)?);
                }
                "launch.sh" => {
                    sources.has_launch_sh = true;
                    sources.launch_sh_shebang = shebang(&mut entry, kind)?;
                }
                _ => {}
            }
            if let Some(manifest) = MANIFESTS
                .iter()
                .find(|m| **m == path.strip_prefix("./").unwrap_or(&path))
                && !sources.manifests.contains(manifest)
            {
                sources.manifests.push(manifest);
            }
        }
        sources
            .manifests
            .sort_by_key(|m| MANIFESTS.iter().position(|n| n == m));
        Ok(sources)
    }
}

/// Whether a regular file starts with `#!` (a symlink is run through `sh`).
fn shebang(entry: &mut impl Read, kind: tar::EntryType) -> std::io::Result<bool> {
    if !kind.is_file() {
        return Ok(false);
    }
    let mut head = Vec::with_capacity(2);
    entry.take(2).read_to_end(&mut head)?;
    Ok(head == b"#!")
}

/// Reads the root files of `sha` in the app's repository through the API server.
pub async fn fetch(
    internal: &InternalClient,
    app_id: &str,
    sha: &str,
) -> Result<Sources, CallError> {
    let mut res = internal.archive(app_id, sha).await?;
    let (tx, rx) = tokio::sync::mpsc::channel::<Vec<u8>>(16);
    let reader = tokio::task::spawn_blocking(move || Sources::from_tar(ChunkReader::new(rx)));
    let mut streamed = Ok(());
    loop {
        match res.chunk().await {
            Ok(Some(chunk)) => {
                // The reader stops early only on a broken archive, which it reports itself.
                if tx.send(chunk.to_vec()).await.is_err() {
                    break;
                }
            }
            Ok(None) => break,
            Err(e) => {
                streamed = Err(CallError::Unavailable(format!("reading the archive: {e}")));
                break;
            }
        }
    }
    drop(tx);
    let read = reader
        .await
        .map_err(|e| CallError::Unavailable(format!("reading the archive: {e}")))?;
    streamed?;
    read.map_err(|e| CallError::Unavailable(format!("reading the archive: {e}")))
}

/// A blocking reader (run it on a blocking thread) over chunks sent from async code; the end of the channel is
/// the end of the stream.
struct ChunkReader {
    chunks: tokio::sync::mpsc::Receiver<Vec<u8>>,
    current: std::io::Cursor<Vec<u8>>,
}

impl ChunkReader {
    fn new(chunks: tokio::sync::mpsc::Receiver<Vec<u8>>) -> Self {
        Self {
            chunks,
            current: std::io::Cursor::new(Vec::new()),
        }
    }
}

impl Read for ChunkReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            let n = self.current.read(buf)?;
            if n > 0 || buf.is_empty() {
                return Ok(n);
            }
            match self.chunks.blocking_recv() {
                Some(chunk) => self.current = std::io::Cursor::new(chunk),
                None => return Ok(0),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tar_of(files: &[(&str, &str)]) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        for (path, content) in files {
            let mut header = tar::Header::new_gnu();
            header.set_size(content.len() as u64);
            header.set_mode(0o644);
            header.set_cksum();
            builder
                .append_data(&mut header, path, content.as_bytes())
                .unwrap();
        }
        builder.into_inner().unwrap()
    }

    #[test]
    fn root_files_are_found_and_nested_ones_ignored() {
        let tar = tar_of(&[
            ("Dockerfile", "FROM debian:trixie-slim\n"),
            ("launch.sh", "#!/bin/sh\nexec node server.js\n"),
            ("install.sh", "npm ci\n"),
            ("web/package.json", "{}"),
            ("src/launch.sh", "x"),
            ("requirements.txt", "flask\n"),
            ("web/requirements.txt", "x"),
            ("poetry.lock", ""),
        ]);
        let sources = Sources::from_tar(tar.as_slice()).unwrap();
        assert_eq!(
            sources,
            Sources {
                dockerfile: Some("FROM debian:trixie-slim\n".into()),
                dockerfile_truncated: false,
                has_package_json: false,
                install_sh_shebang: Some(false),
                install_sh_linked: false,
                has_launch_sh: true,
                launch_sh_shebang: true,
                manifests: vec!["requirements.txt", "poetry.lock"],
            }
        );
        let sources = Sources::from_tar(tar_of(&[("./package.json", "{}")]).as_slice()).unwrap();
        assert!(sources.has_package_json && !sources.has_launch_sh && sources.dockerfile.is_none());
        assert_eq!(sources.manifests, ["package.json"]);
    }

    #[test]
    fn chunks_read_as_one_stream() {
        let tar = tar_of(&[("a/b", "0123456789"), ("launch.sh", "#!")]);
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let sender = std::thread::spawn(move || {
            for chunk in tar.chunks(7) {
                // The reader stops at the end-of-archive blocks, before the padding after them.
                if tx.blocking_send(chunk.to_vec()).is_err() {
                    break;
                }
            }
        });
        let sources = Sources::from_tar(ChunkReader::new(rx)).unwrap();
        sender.join().unwrap();
        assert!(sources.has_launch_sh && sources.launch_sh_shebang);
    }
}
