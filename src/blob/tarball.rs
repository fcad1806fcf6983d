//! A bucket as of a checkpoint, as a `tar.gz` stream: for each object of the marker's manifest a tar header, then
//! that version's body read through the gateway, gzipped on the fly. Nothing is staged on disk and only one object
//! is in flight, so memory stays flat whatever the size; a read that fails aborts the stream, so a broken
//! download never looks like a short complete archive.
//!
//! Entry names follow the keys. A key is not always a safe path, so a leading `/` is dropped and a `..` or `.`
//! component is written `%2E%2E` or `%2E`; a key ending in `/` with no bytes (a "folder") is a directory entry.

use std::io;

use axum::body::Body;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use tokio::sync::mpsc;

use super::bucket::Bucket;
use super::checkpoints::Entry;

/// Chunks in flight between the reader of objects and the gzip encoder.
const IN_FLIGHT: usize = 16;

/// The tar.gz of `entries` (a manifest) read from `bucket`; `fallback_mtime` for versions with no time.
pub fn tar_gz(bucket: Bucket, entries: Vec<Entry>, fallback_mtime: DateTime<Utc>) -> Body {
    let (tx, rx) = mpsc::channel::<io::Result<Bytes>>(IN_FLIGHT);
    tokio::spawn(async move {
        if let Err(e) = write_tar(&bucket, &entries, fallback_mtime, &tx).await {
            tracing::warn!(bucket = %bucket.name, error = %e, "the snapshot archive stopped mid-stream");
            let _ = tx.send(Err(io::Error::other(e.to_string()))).await;
        }
    });
    let tar = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    let gzip =
        async_compression::tokio::bufread::GzipEncoder::new(tokio_util::io::StreamReader::new(tar));
    Body::from_stream(tokio_util::io::ReaderStream::with_capacity(gzip, 64 * 1024))
}

/// The receiver went away (the client hung up): stop reading objects.
#[derive(Debug, thiserror::Error)]
#[error("the client went away")]
struct Gone;

async fn send(tx: &mpsc::Sender<io::Result<Bytes>>, bytes: Bytes) -> anyhow::Result<()> {
    tx.send(Ok(bytes)).await.map_err(|_| Gone.into())
}

async fn write_tar(
    bucket: &Bucket,
    entries: &[Entry],
    fallback_mtime: DateTime<Utc>,
    tx: &mpsc::Sender<io::Result<Bytes>>,
) -> anyhow::Result<()> {
    for entry in entries {
        let size = u64::try_from(entry.size_bytes).unwrap_or(0);
        let mtime = entry.last_modified.unwrap_or(fallback_mtime);
        let (header, is_dir) = header(&entry.key, size, mtime)?;
        send(tx, header).await?;
        if is_dir {
            continue;
        }
        let mut body = bucket.read(&entry.key, &entry.version_id).await?;
        let mut written = 0u64;
        while let Some(chunk) = body
            .try_next()
            .await
            .map_err(|e| anyhow::anyhow!("read {}: {e}", entry.key))?
        {
            written += chunk.len() as u64;
            anyhow::ensure!(
                written <= size,
                "{} is longer than its checkpoint says ({size} bytes)",
                entry.key
            );
            send(tx, chunk).await?;
        }
        anyhow::ensure!(
            written == size,
            "{} ended after {written} of {size} bytes",
            entry.key
        );
        let padding = padding(size);
        if padding > 0 {
            send(tx, Bytes::from(vec![0; padding])).await?;
        }
    }
    // Two empty blocks end a tar archive.
    send(tx, Bytes::from(vec![0; 1024])).await
}

/// Zero bytes that round an entry of `size` bytes up to the 512-byte block.
fn padding(size: u64) -> usize {
    let rest = (size % 512) as usize;
    if rest == 0 { 0 } else { 512 - rest }
}

/// The entry name of `key`, and whether it is a directory.
pub fn entry_name(key: &str, size: u64) -> (String, bool) {
    let is_dir = key.ends_with('/') && size == 0;
    let name = key
        .trim_start_matches('/')
        .split('/')
        .map(|part| match part {
            ".." => "%2E%2E",
            "." => "%2E",
            other => other,
        })
        .collect::<Vec<_>>()
        .join("/");
    (name, is_dir)
}

/// The header block(s) of one entry: GNU long-name blocks when the name needs them, then the entry's header.
fn header(key: &str, size: u64, mtime: DateTime<Utc>) -> anyhow::Result<(Bytes, bool)> {
    let (name, is_dir) = entry_name(key, size);
    let mut header = tar::Header::new_gnu();
    header.set_mtime(u64::try_from(mtime.timestamp()).unwrap_or(0));
    if is_dir {
        header.set_entry_type(tar::EntryType::Directory);
        header.set_mode(0o755);
        header.set_size(0);
    } else {
        header.set_entry_type(tar::EntryType::Regular);
        header.set_mode(0o644);
        header.set_size(size);
    }
    // The builder writes the long-name blocks and the checksum; with no data after the header, what it wrote up to
    // its end-of-archive blocks is exactly the header.
    let mut builder = tar::Builder::new(Vec::new());
    builder.append_data(&mut header, &name, io::empty())?;
    let mut bytes = builder.into_inner()?;
    bytes.truncate(bytes.len().saturating_sub(1024));
    Ok((Bytes::from(bytes), is_dir))
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    #[test]
    fn names_stay_inside_the_archive() {
        assert_eq!(entry_name("a/b.txt", 3), ("a/b.txt".into(), false));
        assert_eq!(entry_name("/etc/passwd", 3), ("etc/passwd".into(), false));
        assert_eq!(entry_name("../../x", 3), ("%2E%2E/%2E%2E/x".into(), false));
        assert_eq!(entry_name("a/./b", 3), ("a/%2E/b".into(), false));
        assert_eq!(entry_name("photos/", 0), ("photos/".into(), true));
    }

    #[test]
    fn headers_and_padding_make_an_archive_tar_reads() {
        let long = format!("{}/file.bin", "d".repeat(150));
        let mut archive = Vec::new();
        for (key, body) in [
            ("short.txt", &b"hello"[..]),
            (long.as_str(), &[7u8; 600][..]),
        ] {
            let (h, _) = header(key, body.len() as u64, Utc::now()).unwrap();
            archive.extend_from_slice(&h);
            archive.extend_from_slice(body);
            archive.extend(std::iter::repeat_n(0, padding(body.len() as u64)));
        }
        archive.extend(std::iter::repeat_n(0, 1024));
        let mut read = tar::Archive::new(archive.as_slice());
        let mut seen = Vec::new();
        for entry in read.entries().unwrap() {
            let mut entry = entry.unwrap();
            let mut body = Vec::new();
            entry.read_to_end(&mut body).unwrap();
            seen.push((entry.path().unwrap().display().to_string(), body.len()));
        }
        assert_eq!(seen, [("short.txt".into(), 5), (long, 600)]);
    }
}
