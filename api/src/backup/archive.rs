//! The backup file: a plain tar of a few named entries, written and read with random access.
//!
//! Its parts come off streams whose length is known only at their end (a `pg_dump`, a tar of the repositories), and
//! holding either in memory or in a temporary copy is what a backup of gigabytes must not do. So each entry's header
//! is written with size 0, its body streamed after it, and the header written again once the body has ended (the
//! file is seekable, a pipe would not be). A reader then indexes the headers and reads the entries in whatever
//! order the restore needs them, which need not be the order in which they were taken. Any tar tool lists and
//! extracts the file.
//!
//! The file is written as `<output>.partial` and renamed to its name only once it is whole and on disk, so a backup
//! that is killed, loses its connection or fails leaves nothing under the name a restore is given.

use std::collections::BTreeMap;
use std::io::SeekFrom;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use tokio::fs::File;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncSeekExt, AsyncWriteExt, BufWriter};

const BLOCK: u64 = 512;

/// Writes a backup file entry by entry.
pub struct ArchiveWriter {
    file: BufWriter<File>,
    at: u64,
    /// The name the file takes once whole.
    path: PathBuf,
    /// Where it is written until then.
    partial: PathBuf,
}

/// Where the backup that will be `path` is written until it is whole.
fn partial_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".partial");
    PathBuf::from(name)
}

impl ArchiveWriter {
    /// Starts the file that becomes `path`. An existing `path` is an error, so a backup never overwrites an older
    /// one, and so is an existing `<path>.partial`: another backup is writing it, or one was interrupted.
    pub async fn create(path: &Path) -> anyhow::Result<Self> {
        if tokio::fs::try_exists(path).await? {
            bail!(
                "{} exists: a backup never overwrites a file",
                path.display()
            );
        }
        let partial = partial_path(path);
        let file = tokio::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&partial)
            .await
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::AlreadyExists => anyhow::anyhow!(
                    "{} exists: another backup is writing it, or one was interrupted (remove it and start again)",
                    partial.display()
                ),
                _ => anyhow::Error::from(e).context(format!("create {}", partial.display())),
            })?;
        Ok(Self {
            file: BufWriter::with_capacity(1 << 20, file),
            at: 0,
            path: path.to_owned(),
            partial,
        })
    }

    /// Appends entry `name` with everything `body` yields; returns its size.
    pub async fn entry(&mut self, name: &str, body: impl AsyncRead) -> anyhow::Result<u64> {
        let start = self.at;
        self.file.write_all(&header(name, 0)?).await?;
        let mut body = std::pin::pin!(body);
        let size = tokio::io::copy(&mut body, &mut self.file)
            .await
            .with_context(|| format!("write {name}"))?;
        let padding = padding(size);
        self.file.write_all(&vec![0; padding as usize]).await?;
        self.at = start + BLOCK + size + padding;
        self.file.flush().await?;
        let file = self.file.get_mut();
        file.seek(SeekFrom::Start(start)).await?;
        file.write_all(&header(name, size)?).await?;
        file.seek(SeekFrom::Start(self.at)).await?;
        Ok(size)
    }

    /// Appends entry `name` holding `bytes`.
    pub async fn bytes(&mut self, name: &str, bytes: &[u8]) -> anyhow::Result<u64> {
        self.entry(name, bytes).await
    }

    /// Ends the archive, waits until it is on disk and gives it its name; its size.
    pub async fn finish(mut self) -> anyhow::Result<u64> {
        self.file.write_all(&[0; 2 * BLOCK as usize]).await?;
        self.file.flush().await?;
        self.file.get_mut().sync_all().await?;
        // A link, not a rename: it fails rather than replace a file that appeared under the name meanwhile.
        tokio::fs::hard_link(&self.partial, &self.path)
            .await
            .with_context(|| format!("name the backup {}", self.path.display()))?;
        tokio::fs::remove_file(&self.partial).await?;
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            File::open(dir).await?.sync_all().await?;
        }
        Ok(self.at + 2 * BLOCK)
    }

    /// Removes the unfinished file.
    pub async fn abandon(self) {
        drop(self.file);
        let _ = tokio::fs::remove_file(&self.partial).await;
    }
}

/// A backup file's entries, by name.
pub struct ArchiveReader {
    path: std::path::PathBuf,
    entries: BTreeMap<String, (u64, u64)>,
}

impl ArchiveReader {
    /// Opens `path` and reads its index of entries.
    pub async fn open(path: &Path) -> anyhow::Result<Self> {
        let mut file = File::open(path)
            .await
            .with_context(|| format!("open {}", path.display()))?;
        let length = file.metadata().await?.len();
        let mut entries = BTreeMap::new();
        let mut at = 0u64;
        let mut block = [0u8; BLOCK as usize];
        loop {
            if at + BLOCK > length {
                bail!(
                    "{} ends inside an entry: not a whole backup",
                    path.display()
                );
            }
            file.seek(SeekFrom::Start(at)).await?;
            file.read_exact(&mut block).await?;
            if block.iter().all(|b| *b == 0) {
                break;
            }
            let header = tar::Header::from_byte_slice(&block);
            let name = header
                .path()
                .context("an entry's name")?
                .to_string_lossy()
                .into_owned();
            let size = header.size().context("an entry's size")?;
            if at + BLOCK + size > length {
                bail!("{} ends inside {name}: not a whole backup", path.display());
            }
            entries.insert(name, (at + BLOCK, size));
            at += BLOCK + size + padding(size);
        }
        Ok(Self {
            path: path.to_owned(),
            entries,
        })
    }

    /// The size of entry `name`, when there is one.
    pub fn size(&self, name: &str) -> Option<u64> {
        self.entries.get(name).map(|(_, size)| *size)
    }

    /// The body of entry `name`.
    pub async fn reader(
        &self,
        name: &str,
    ) -> anyhow::Result<impl AsyncRead + Send + Unpin + use<>> {
        let (offset, size) = *self
            .entries
            .get(name)
            .with_context(|| format!("the backup has no {name}"))?;
        let mut file = File::open(&self.path).await?;
        file.seek(SeekFrom::Start(offset)).await?;
        Ok(tokio::io::BufReader::with_capacity(1 << 20, file).take(size))
    }

    /// The whole body of entry `name`, for the small ones.
    pub async fn bytes(&self, name: &str) -> anyhow::Result<Vec<u8>> {
        let mut bytes = Vec::new();
        self.reader(name).await?.read_to_end(&mut bytes).await?;
        Ok(bytes)
    }
}

fn padding(size: u64) -> u64 {
    (BLOCK - size % BLOCK) % BLOCK
}

fn header(name: &str, size: u64) -> anyhow::Result<[u8; BLOCK as usize]> {
    let mut header = tar::Header::new_ustar();
    header.set_path(name)?;
    header.set_entry_type(tar::EntryType::Regular);
    header.set_mode(0o600);
    header.set_size(size);
    header.set_mtime(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
    );
    header.set_cksum();
    let mut block = [0u8; BLOCK as usize];
    block.copy_from_slice(header.as_bytes());
    Ok(block)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch() -> std::path::PathBuf {
        let dir =
            std::env::temp_dir().join(format!("slipway-archive-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[tokio::test]
    async fn entries_of_unknown_length_read_back_by_name_and_with_tar() {
        let path = scratch().join("b.tar");
        let mut writer = ArchiveWriter::create(&path).await.unwrap();
        let big: Vec<u8> = (0..100_000u32).flat_map(|i| i.to_le_bytes()).collect();
        writer.entry("database.dump", &big[..]).await.unwrap();
        writer.bytes("manifest.json", b"{}").await.unwrap();
        writer.bytes("empty", b"").await.unwrap();
        writer.finish().await.unwrap();

        let reader = ArchiveReader::open(&path).await.unwrap();
        assert_eq!(reader.bytes("manifest.json").await.unwrap(), b"{}");
        assert_eq!(reader.bytes("database.dump").await.unwrap(), big);
        assert_eq!(reader.size("empty"), Some(0));
        assert!(reader.reader("nothing").await.is_err());

        let mut names = Vec::new();
        let mut archive = tar::Archive::new(std::fs::File::open(&path).unwrap());
        for entry in archive.entries().unwrap() {
            let entry = entry.unwrap();
            names.push((
                entry.path().unwrap().to_string_lossy().into_owned(),
                entry.size(),
            ));
        }
        assert_eq!(
            names,
            [
                ("database.dump".to_owned(), 400_000),
                ("manifest.json".to_owned(), 2),
                ("empty".to_owned(), 0)
            ]
        );
    }

    #[tokio::test]
    async fn a_cut_file_is_not_taken_for_a_backup() {
        let path = scratch().join("b.tar");
        let mut writer = ArchiveWriter::create(&path).await.unwrap();
        writer.entry("data.tar", &[7u8; 5000][..]).await.unwrap();
        writer.finish().await.unwrap();
        let whole = std::fs::read(&path).unwrap();
        std::fs::write(&path, &whole[..3000]).unwrap();
        let error = ArchiveReader::open(&path).await.err().unwrap();
        assert!(format!("{error}").contains("not a whole backup"), "{error}");
        assert!(
            ArchiveWriter::create(&path).await.is_err(),
            "overwrote a file"
        );
    }

    #[tokio::test]
    async fn the_file_has_its_name_only_once_whole() {
        let path = scratch().join("b.backup");
        let partial = partial_path(&path);
        assert_eq!(partial.file_name().unwrap(), "b.backup.partial");

        // Killed mid-way: the bytes written so far are only under the partial name.
        let mut writer = ArchiveWriter::create(&path).await.unwrap();
        writer.bytes("database.dump", b"half").await.unwrap();
        std::mem::forget(writer);
        assert!(!path.exists());
        assert!(partial.exists());
        let refused = ArchiveWriter::create(&path).await.err().unwrap();
        assert!(
            format!("{refused:#}").contains("b.backup.partial exists"),
            "{refused:#}"
        );

        // Failed: nothing is left.
        std::fs::remove_file(&partial).unwrap();
        let mut writer = ArchiveWriter::create(&path).await.unwrap();
        writer.bytes("database.dump", b"half").await.unwrap();
        writer.abandon().await;
        assert!(!path.exists() && !partial.exists());

        // Whole: the name holds every entry, and a second backup to it is refused.
        let mut writer = ArchiveWriter::create(&path).await.unwrap();
        writer.bytes("manifest.json", b"{}").await.unwrap();
        let size = writer.finish().await.unwrap();
        assert!(!partial.exists());
        assert_eq!(std::fs::metadata(&path).unwrap().len(), size);
        let reader = ArchiveReader::open(&path).await.unwrap();
        assert_eq!(reader.bytes("manifest.json").await.unwrap(), b"{}");
        let refused = ArchiveWriter::create(&path).await.err().unwrap();
        assert!(
            format!("{refused:#}").contains("a backup never overwrites"),
            "{refused:#}"
        );
    }
}
