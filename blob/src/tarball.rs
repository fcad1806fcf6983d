//! A bucket as of a checkpoint, as a `tar.gz` stream ([`slipway_tar_stream`]): for each object of the marker's
//! manifest a tar entry whose body is that version read through the gateway. The manifest is read a page at a time,
//! and the objects are written one after another while the next few are already asked for ([`READ_AHEAD`]): small
//! objects cost a round trip each, which one at a time made a bucket of 20,000 take minutes. An object asked for
//! early waits in its connection's buffers, so memory stays flat whatever the bucket's size. A read that fails
//! aborts the stream, so a broken download never looks like a short complete archive. Exports write a channel's
//! current objects the same way ([`append_all`]).
//!
//! Entry names follow the keys. A key is not always a safe path, so a leading `/` is dropped and a `..` or `.`
//! component is written `%2E%2E` or `%2E`; a key ending in `/` with no bytes (a "folder") is a directory entry.

use aws_sdk_s3::primitives::ByteStream;
use axum::body::Body;
use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use futures::{StreamExt, TryStreamExt};
use sqlx::PgPool;
use uuid::Uuid;

use super::bucket::Bucket;
use super::checkpoints::{Entry, manifest_page};
use slipway_tar_stream::TarWriter;

/// Manifest entries read from the platform database per page of a download.
const PAGE: i64 = 1000;

/// Objects asked for ahead of the one being written.
const READ_AHEAD: usize = 8;

/// The tar.gz of marker `marker_id`'s manifest read from `bucket`, a page of the manifest at a time;
/// `fallback_mtime` for versions with no time.
pub fn tar_gz(bucket: Bucket, db: PgPool, marker_id: Uuid, fallback_mtime: DateTime<Utc>) -> Body {
    let what = format!("bucket {}", bucket.name);
    Body::from_stream(slipway_tar_stream::tar_gz(what, move |tar| async move {
        let mut after: Option<String> = None;
        loop {
            let page = manifest_page(&db, marker_id, after.as_deref(), PAGE).await?;
            append_all(&tar, &bucket, &page, "", fallback_mtime).await?;
            match page.last() {
                Some(last) if page.len() == PAGE as usize => after = Some(last.key.clone()),
                _ => return Ok(()),
            }
        }
    }))
}

/// Appends the objects of a listing or manifest to `tar` in their order, each named `prefix` + its entry name.
pub async fn append_all(
    tar: &TarWriter,
    bucket: &Bucket,
    entries: &[Entry],
    prefix: &str,
    fallback_mtime: DateTime<Utc>,
) -> anyhow::Result<()> {
    // Made before they are streamed (each is idle until polled): a closure mapping the entries inside the stream
    // would make the archive's future not `Send`.
    let opens: Vec<_> = entries
        .iter()
        .map(|entry| open(bucket, entry, prefix))
        .collect();
    let mut opened = futures::stream::iter(opens).buffered(READ_AHEAD);
    while let Some((entry, name, size, body)) = opened.try_next().await? {
        let mtime = entry.last_modified.unwrap_or(fallback_mtime);
        write(tar, &name, size, mtime, body).await?;
    }
    Ok(())
}

/// An entry of `entries` ready to write: it, its name, its size, and its body unless it is a directory.
type Opened<'a> = (&'a Entry, String, u64, Option<ByteStream>);

/// Asks for `entry`'s body (a directory has none).
fn open<'a>(
    bucket: &'a Bucket,
    entry: &'a Entry,
    prefix: &'a str,
) -> BoxFuture<'a, anyhow::Result<Opened<'a>>> {
    Box::pin(async move {
        let size = u64::try_from(entry.size_bytes).unwrap_or(0);
        let (name, is_dir) = entry_name(&entry.key, size);
        let body = match is_dir {
            true => None,
            false => Some(bucket.read(&entry.key, &entry.version_id).await?),
        };
        Ok((entry, format!("{prefix}{name}"), size, body))
    })
}

/// One entry: a directory without a body, else a file of `size` bytes from `body`.
async fn write(
    tar: &TarWriter,
    name: &str,
    size: u64,
    mtime: DateTime<Utc>,
    body: Option<ByteStream>,
) -> anyhow::Result<()> {
    match body {
        None => tar.directory(name, mtime).await,
        Some(body) => {
            let body = slipway_backends::object_store::body_chunks(body);
            tar.file(name, size, mtime, body).await
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_stay_inside_the_archive() {
        assert_eq!(entry_name("a/b.txt", 3), ("a/b.txt".into(), false));
        assert_eq!(entry_name("/etc/passwd", 3), ("etc/passwd".into(), false));
        assert_eq!(entry_name("../../x", 3), ("%2E%2E/%2E%2E/x".into(), false));
        assert_eq!(entry_name("a/./b", 3), ("a/%2E/b".into(), false));
        assert_eq!(entry_name("photos/", 0), ("photos/".into(), true));
    }
}
