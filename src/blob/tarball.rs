//! A bucket as of a checkpoint, as a `tar.gz` stream ([`crate::tar_stream`]): for each object of the marker's
//! manifest a tar entry whose body is that version read through the gateway. The manifest is read a page at a time
//! and only one object is in flight, so memory stays flat whatever the size; a read that fails aborts the stream, so a broken download never looks like
//! a short complete archive. Exports append a channel's current objects the same way ([`append`]).
//!
//! Entry names follow the keys. A key is not always a safe path, so a leading `/` is dropped and a `..` or `.`
//! component is written `%2E%2E` or `%2E`; a key ending in `/` with no bytes (a "folder") is a directory entry.

use axum::body::Body;
use chrono::{DateTime, Utc};

use sqlx::PgPool;
use uuid::Uuid;

use super::bucket::Bucket;
use super::checkpoints::{Entry, manifest_page};

/// Manifest entries read from the platform database per page of a download.
const PAGE: i64 = 1000;

/// The tar.gz of marker `marker_id`'s manifest read from `bucket`, a page of the manifest at a time;
/// `fallback_mtime` for versions with no time.
pub fn tar_gz(bucket: Bucket, db: PgPool, marker_id: Uuid, fallback_mtime: DateTime<Utc>) -> Body {
    let what = format!("bucket {}", bucket.name);
    Body::from_stream(crate::tar_stream::tar_gz(what, move |tar| async move {
        let mut after: Option<String> = None;
        loop {
            let page = manifest_page(&db, marker_id, after.as_deref(), PAGE).await?;
            for entry in &page {
                append(&tar, &bucket, entry, "", fallback_mtime).await?;
            }
            match page.last() {
                Some(last) if page.len() == PAGE as usize => after = Some(last.key.clone()),
                _ => return Ok(()),
            }
        }
    }))
}

/// Appends one object of a listing or manifest to `tar`, named `prefix` + its entry name.
pub async fn append(
    tar: &crate::tar_stream::TarWriter,
    bucket: &Bucket,
    entry: &Entry,
    prefix: &str,
    fallback_mtime: DateTime<Utc>,
) -> anyhow::Result<()> {
    let size = u64::try_from(entry.size_bytes).unwrap_or(0);
    let mtime = entry.last_modified.unwrap_or(fallback_mtime);
    let (name, is_dir) = entry_name(&entry.key, size);
    let name = format!("{prefix}{name}");
    if is_dir {
        return tar.directory(&name, mtime).await;
    }
    let body = bucket.read(&entry.key, &entry.version_id).await?;
    let body = tokio_util::io::ReaderStream::new(body.into_async_read());
    tar.file(&name, size, mtime, body).await
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
