//! The git bucket: every published pack as `repos/<repository>/pack-<sha>.<upload>.pack` and its `.idx`, written
//! once and read by every replica that syncs its cache. A push's pack sent while git was still receiving it
//! ([`crate::stream`]) is kept as chunks instead, `repos/<repository>/upload-<upload>.pack.<n>`, since its name is
//! known only at the end. A pack is uploaded before the ref update that needs it is
//! published, so no ref ever names an object the bucket does not hold. Each upload has a key of its own, so that
//! removing a retired or orphaned copy can never take a live one with it.

use std::path::Path;
use std::time::SystemTime;

use anyhow::Context;
use aws_sdk_s3::Client;
use aws_sdk_s3::primitives::{ByteStream, Length};
use aws_sdk_s3::types::{ChecksumAlgorithm, CompletedMultipartUpload, CompletedPart};
use futures::{StreamExt as _, TryStreamExt as _};
use slipway_backends::object_store::{self, S3Endpoint};
use slipway_store::db::git_refs::PackRow;
use tokio::io::AsyncWriteExt;
use uuid::Uuid;

/// The git bucket of an installation whose buckets are named `<prefix>...`.
pub fn name(prefix: &str) -> String {
    format!("{prefix}git")
}

/// Whether `key` is one [`PackBucket::key`] or [`PackBucket::chunk_key`] makes:
/// `repos/<uuid>/pack-<hex>[.<uuid>].{pack,idx}` or `repos/<uuid>/upload-<uuid>.pack.<n>`.
pub fn is_pack_key(key: &str) -> bool {
    let mut parts = key.split('/');
    let (Some("repos"), Some(repo), Some(file), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    if let Some(chunk) = file.strip_prefix("upload-") {
        return repo.parse::<Uuid>().is_ok()
            && chunk.split_once(".pack.").is_some_and(|(upload, n)| {
                upload.parse::<Uuid>().is_ok() && n.parse::<u32>().is_ok_and(|v| v.to_string() == n)
            });
    }
    let Some((rest, extension)) = file.rsplit_once('.') else {
        return false;
    };
    let pack = match rest.split_once('.') {
        Some((pack, upload)) if upload.parse::<Uuid>().is_ok() => pack,
        Some(_) => return false,
        None => rest,
    };
    repo.parse::<Uuid>().is_ok()
        && EXTENSIONS.contains(&extension)
        && pack
            .strip_prefix("pack-")
            .is_some_and(|sha| !sha.is_empty() && sha.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Files from this size go up as multipart uploads, since stores cap a single PUT (5 GiB on AWS). Below it one PUT
/// is the faster: a gigabyte pack took 4.3 s to the bundled versitygw in one PUT, and 6.1 s in 64 MiB parts four
/// at a time, which the store then copies into one file (`make bench`, git_transport).
pub const IN_PARTS_FROM: u64 = 4 << 30;

/// The size of each part but the last (S3 takes 5 MiB to 5 GiB each, and 10,000 parts: 640 GB a file).
const PART_BYTES: u64 = 64 << 20;

/// How many parts of one file are sent at once.
const PARTS_AT_ONCE: usize = 4;

/// How much of a file each read takes while it is sent, and each write while one is fetched. The SDK reads a body
/// 4 KiB at a time unless told otherwise, a trip through the blocking pool each: 262,144 of them a gigabyte, CPU
/// the push shares with git on the same node.
const IO_BYTES: usize = 1 << 20;

/// The two files of a pack, `.pack` first: a reader finds a pack by its `.idx`, so that one is written last.
pub const EXTENSIONS: [&str; 2] = ["pack", "idx"];

/// The bucket the packs are kept in.
#[derive(Clone, Debug)]
pub struct PackBucket {
    client: Client,
    bucket: String,
    in_parts_from: u64,
}

impl PackBucket {
    /// The bucket `bucket` on `endpoint`, made when it does not exist yet.
    pub async fn open(endpoint: &S3Endpoint, bucket: &str) -> anyhow::Result<Self> {
        let client = object_store::client(endpoint, None);
        object_store::create_bucket(&client, bucket)
            .await
            .with_context(|| format!("create the git bucket {bucket}"))?;
        Ok(Self {
            client,
            bucket: bucket.to_owned(),
            in_parts_from: IN_PARTS_FROM,
        })
    }

    /// The same bucket, sending files from `bytes` (at least two parts) as multipart uploads rather than from
    /// [`IN_PARTS_FROM`]: for a store that caps single PUTs lower.
    pub fn in_parts_from(mut self, bytes: u64) -> Self {
        self.in_parts_from = bytes.max(2 * PART_BYTES);
        self
    }

    /// The key of one file of a pack of repository `repo`: `repos/<repo>/<pack>.<upload>.<extension>`, or
    /// `repos/<repo>/<pack>.<extension>` for a pack uploaded before uploads were told apart.
    pub fn key(repo: Uuid, pack: &str, upload: Option<Uuid>, extension: &str) -> String {
        match upload {
            Some(upload) => format!("repos/{repo}/{pack}.{upload}.{extension}"),
            None => format!("repos/{repo}/{pack}.{extension}"),
        }
    }

    /// The key of chunk `n` (from 0) of a `.pack` file sent as it was received: `repos/<repo>/upload-<upload>.pack.<n>`.
    pub fn chunk_key(repo: Uuid, upload: Uuid, n: u64) -> String {
        format!("repos/{repo}/upload-{upload}.pack.{n}")
    }

    /// The keys of every object of `pack`'s copy in repository `repo`: its `.pack` file (or the chunks of it, in
    /// order) and its `.idx`.
    pub fn pack_keys(repo: Uuid, pack: &PackRow) -> Vec<String> {
        let mut keys = match (pack.upload, pack.chunk_bytes) {
            (Some(upload), Some(chunk)) if chunk > 0 => {
                let chunks = u64::try_from(pack.bytes.max(1))
                    .unwrap_or(1)
                    .div_ceil(chunk as u64);
                (0..chunks)
                    .map(|n| Self::chunk_key(repo, upload, n))
                    .collect()
            }
            _ => vec![Self::key(repo, &pack.name, pack.upload, "pack")],
        };
        keys.push(Self::key(repo, &pack.name, pack.upload, "idx"));
        keys
    }

    /// The repository whose object `key` is (`repos/<repo>/...`).
    pub fn repo_of(key: &str) -> Option<Uuid> {
        key.strip_prefix("repos/")?.split('/').next()?.parse().ok()
    }

    /// Uploads `<dir>/<pack>.pack` and `.idx` as a new copy of the pack; returns the upload's id, part of its key.
    /// The requests are signed and name their body's CRC32, which the store checks, rather than a SHA-256 of the body
    /// in the signature: hashing a gigabyte push with SHA-256 here and again in the store cost more than sending it.
    pub async fn upload(&self, repo: Uuid, dir: &Path, pack: &str) -> anyhow::Result<Uuid> {
        let upload = Uuid::new_v4();
        for extension in EXTENSIONS {
            let file = dir.join(format!("{pack}.{extension}"));
            self.send_file(&Self::key(repo, pack, Some(upload), extension), &file)
                .await?;
        }
        Ok(upload)
    }

    /// Writes the file at `path` as the object `key`: in one request, or, from [`IN_PARTS_FROM`] bytes (or what
    /// [`Self::in_parts_from`] set), as a multipart upload of [`PART_BYTES`] parts, [`PARTS_AT_ONCE`] at a time.
    pub(crate) async fn send_file(&self, key: &str, path: &Path) -> anyhow::Result<()> {
        let size = tokio::fs::metadata(path)
            .await
            .with_context(|| format!("read {}", path.display()))?
            .len();
        if size >= self.in_parts_from {
            return self.send_in_parts(key, path, size).await;
        }
        self.send_range(key, path, 0, size).await.map(|_| ())
    }

    /// Writes `length` bytes of the file at `path` from `offset` as the object `key`, in one request checked by
    /// its CRC32, which it returns.
    pub(crate) async fn send_range(
        &self,
        key: &str,
        path: &Path,
        offset: u64,
        length: u64,
    ) -> anyhow::Result<u32> {
        let crc = crc32_of(path, offset, length).await?;
        let body = range_body(path, offset, length).await?;
        self.client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .body(body)
            .checksum_crc32(crc_header(crc))
            .customize()
            .disable_payload_signing()
            .send()
            .await
            .map_err(|e| object_store::failure(format_args!("upload {key}"), &e))?;
        Ok(crc)
    }

    /// A multipart upload of the file at `path`, each part checked by its CRC32; aborted when a part fails, so
    /// that the store keeps none of it.
    async fn send_in_parts(&self, key: &str, path: &Path, size: u64) -> anyhow::Result<()> {
        let started = self
            .client
            .create_multipart_upload()
            .bucket(&self.bucket)
            .key(key)
            .checksum_algorithm(ChecksumAlgorithm::Crc32)
            .send()
            .await
            .map_err(|e| object_store::failure(format_args!("start the upload of {key}"), &e))?;
        let id = started
            .upload_id()
            .with_context(|| format!("the store named no upload of {key}"))?
            .to_owned();
        let parts = (0..size.div_ceil(PART_BYTES)).map(|i| {
            let offset = i * PART_BYTES;
            (i, offset, PART_BYTES.min(size - offset))
        });
        let sent: anyhow::Result<Vec<CompletedPart>> = futures::stream::iter(parts)
            .map(|(i, offset, length)| self.send_part(key, &id, path, i, offset, length))
            .buffered(PARTS_AT_ONCE)
            .try_collect()
            .await;
        let completed = match sent {
            Ok(parts) => self
                .client
                .complete_multipart_upload()
                .bucket(&self.bucket)
                .key(key)
                .upload_id(&id)
                .multipart_upload(
                    CompletedMultipartUpload::builder()
                        .set_parts(Some(parts))
                        .build(),
                )
                .send()
                .await
                .map(|_| ())
                .map_err(|e| {
                    object_store::failure(format_args!("complete the upload of {key}"), &e)
                }),
            Err(e) => Err(e),
        };
        if completed.is_err() {
            let aborted = self
                .client
                .abort_multipart_upload()
                .bucket(&self.bucket)
                .key(key)
                .upload_id(&id)
                .send()
                .await;
            if let Err(e) = aborted {
                tracing::warn!(key, error = %object_store::describe(&e), "could not abort a failed upload");
            }
        }
        completed
    }

    /// Sends part `index` (from 0) of the multipart upload `id`: `length` bytes of `path` from `offset`.
    async fn send_part(
        &self,
        key: &str,
        id: &str,
        path: &Path,
        index: u64,
        offset: u64,
        length: u64,
    ) -> anyhow::Result<CompletedPart> {
        let number = i32::try_from(index + 1).context("too many parts")?;
        let crc = crc_header(crc32_of(path, offset, length).await?);
        let body = range_body(path, offset, length).await?;
        let sent = self
            .client
            .upload_part()
            .bucket(&self.bucket)
            .key(key)
            .upload_id(id)
            .part_number(number)
            .body(body)
            .checksum_crc32(&crc)
            .customize()
            .disable_payload_signing()
            .send()
            .await
            .map_err(|e| {
                object_store::failure(format_args!("upload part {number} of {key}"), &e)
            })?;
        Ok(CompletedPart::builder()
            .part_number(number)
            .set_e_tag(sent.e_tag().map(str::to_owned))
            .checksum_crc32(crc)
            .build())
    }

    /// Downloads `pack` into `dir`, each file written beside its final name and renamed into place, the `.idx`
    /// last; a `.pack` kept in chunks is joined into one file.
    pub async fn download(&self, repo: Uuid, dir: &Path, pack: &PackRow) -> anyhow::Result<()> {
        let mut keys = Self::pack_keys(repo, pack);
        let idx = keys.pop().context("a pack has an .idx")?;
        for (keys, extension) in [(keys, "pack"), (vec![idx], "idx")] {
            let target = dir.join(format!("{}.{extension}", pack.name));
            if let Some(missing) = self.fetch_all(&keys, &target).await? {
                anyhow::bail!("{missing} is missing from the git bucket");
            }
        }
        Ok(())
    }

    /// Writes the object `key` to `target`, beside it first and renamed into place; false when there is no such
    /// object.
    pub async fn fetch(&self, key: &str, target: &Path) -> anyhow::Result<bool> {
        Ok(self
            .fetch_all(std::slice::from_ref(&key.to_owned()), target)
            .await?
            .is_none())
    }

    /// Writes the objects `keys`, one after the other, to `target`, beside it first and renamed into place; the
    /// first key there is no object of, when one is missing (nothing is written then).
    async fn fetch_all(&self, keys: &[String], target: &Path) -> anyhow::Result<Option<String>> {
        let partial = target.with_file_name(format!(
            "tmp_{}.{}",
            target.file_name().unwrap_or_default().to_string_lossy(),
            Uuid::new_v4()
        ));
        let result = async {
            let file = tokio::fs::File::create(&partial).await?;
            let mut file = tokio::io::BufWriter::with_capacity(IO_BYTES, file);
            for key in keys {
                let object = match self
                    .client
                    .get_object()
                    .bucket(&self.bucket)
                    .key(key)
                    .send()
                    .await
                {
                    Ok(object) => object,
                    Err(e) if e.as_service_error().is_some_and(|e| e.is_no_such_key()) => {
                        return Ok(Some(key.clone()));
                    }
                    Err(e) => {
                        return Err(object_store::failure(format_args!("download {key}"), &e));
                    }
                };
                let mut body = object.body;
                // A connection lost mid-body is the store going away, as a refused one is.
                let lost = |e| object_store::Unavailable(format!("download {key}: {e}"));
                while let Some(chunk) = body.try_next().await.map_err(lost)? {
                    file.write_all(&chunk).await?;
                }
            }
            file.flush().await?;
            file.get_ref().sync_all().await?;
            tokio::fs::rename(&partial, target).await?;
            anyhow::Ok(None)
        }
        .await;
        if !matches!(result, Ok(None)) {
            let _ = tokio::fs::remove_file(&partial).await;
        }
        result
    }

    /// Removes every object of each of `packs`; missing ones are fine.
    pub async fn remove(&self, repo: Uuid, packs: &[PackRow]) -> anyhow::Result<()> {
        let keys: Vec<String> = packs
            .iter()
            .flat_map(|p| Self::pack_keys(repo, p))
            .collect();
        self.remove_keys(&keys).await
    }

    /// Removes the objects `keys`; missing ones are fine.
    pub async fn remove_keys(&self, keys: &[String]) -> anyhow::Result<()> {
        for key in keys {
            self.client
                .delete_object()
                .bucket(&self.bucket)
                .key(key)
                .send()
                .await
                .map_err(|e| object_store::failure(format_args!("remove {key}"), &e))?;
        }
        Ok(())
    }

    /// Every object of repository `repo`, with when it was written.
    pub async fn list(&self, repo: Uuid) -> anyhow::Result<Vec<(String, SystemTime)>> {
        self.list_under(&format!("repos/{repo}/")).await
    }

    /// Every object of every repository, with when it was written.
    pub async fn list_all(&self) -> anyhow::Result<Vec<(String, SystemTime)>> {
        self.list_under("repos/").await
    }

    async fn list_under(&self, prefix: &str) -> anyhow::Result<Vec<(String, SystemTime)>> {
        let mut found = Vec::new();
        let mut pages = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(prefix)
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page =
                page.map_err(|e| object_store::failure(format_args!("list {prefix}"), &e))?;
            for object in page.contents() {
                let (Some(key), Some(modified)) = (object.key(), object.last_modified()) else {
                    continue;
                };
                let modified = SystemTime::try_from(*modified).unwrap_or(SystemTime::UNIX_EPOCH);
                found.push((key.to_owned(), modified));
            }
        }
        Ok(found)
    }

    /// Writes the file at `path` as the object `key`: a restore puts back the copies a backup took, under the keys
    /// the platform database names. Only keys of this bucket's shape are taken.
    pub async fn put_file(&self, key: &str, path: &Path) -> anyhow::Result<()> {
        anyhow::ensure!(is_pack_key(key), "{key} is not the key of a pack's file");
        self.send_file(key, path).await
    }

    /// Aborts the multipart uploads started before `before`: what a process stopped mid-upload left. Answers how
    /// many went.
    pub async fn abort_uploads_before(&self, before: SystemTime) -> anyhow::Result<usize> {
        object_store::abort_uploads_before(&self.client, &self.bucket, before).await
    }

    /// Whether any repository has an object here.
    pub async fn holds_any(&self) -> anyhow::Result<bool> {
        let page = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix("repos/")
            .max_keys(1)
            .send()
            .await
            .map_err(|e| object_store::failure(format_args!("list the git bucket"), &e))?;
        Ok(!page.contents().is_empty())
    }

    /// Removes every object of repository `repo`: the packs its rows name and any a failed publish left.
    pub async fn remove_repository(&self, repo: Uuid) -> anyhow::Result<usize> {
        let keys: Vec<String> = self.list(repo).await?.into_iter().map(|(k, _)| k).collect();
        self.remove_keys(&keys).await?;
        Ok(keys.len())
    }
}

/// A request body of `length` bytes of the file at `path` from `offset`, read again from the file if the request is
/// retried.
async fn range_body(path: &Path, offset: u64, length: u64) -> anyhow::Result<ByteStream> {
    ByteStream::read_from()
        .path(path)
        .offset(offset)
        .length(Length::Exact(length))
        .buffer_size(IO_BYTES)
        .build()
        .await
        .with_context(|| format!("read {}", path.display()))
}

/// A CRC32 as S3's `x-amz-checksum-crc32` takes it: base64 of its four bytes.
fn crc_header(crc: u32) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(crc.to_be_bytes())
}

/// The CRC32 of `length` bytes of the file at `path` from `offset`.
pub(crate) async fn crc32_of(path: &Path, offset: u64, length: u64) -> anyhow::Result<u32> {
    use std::io::{Read as _, Seek as _};
    let path = path.to_owned();
    tokio::task::spawn_blocking(move || {
        let mut file =
            std::fs::File::open(&path).with_context(|| format!("read {}", path.display()))?;
        file.seek(std::io::SeekFrom::Start(offset))?;
        let mut file = file.take(length);
        let mut hasher = crc32fast::Hasher::new();
        let mut chunk = vec![0u8; IO_BYTES];
        loop {
            let read = file.read(&mut chunk)?;
            if read == 0 {
                break;
            }
            hasher.update(&chunk[..read]);
        }
        Ok(hasher.finalize())
    })
    .await?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_keys_of_packs_are_pack_keys() {
        let (repo, upload) = (Uuid::new_v4(), Uuid::new_v4());
        let sha = "0123456789abcdef0123456789abcdef01234567";
        let pack = format!("pack-{sha}");
        for key in [
            PackBucket::key(repo, &pack, Some(upload), "pack"),
            PackBucket::key(repo, &pack, Some(upload), "idx"),
            PackBucket::key(repo, &pack, None, "idx"),
        ] {
            assert!(is_pack_key(&key), "{key}");
            assert_eq!(PackBucket::repo_of(&key), Some(repo), "{key}");
        }
        let chunked = PackRow {
            name: pack.clone(),
            bytes: (64 << 20) * 2 + 1,
            upload: Some(upload),
            chunk_bytes: Some(64 << 20),
        };
        let keys = PackBucket::pack_keys(repo, &chunked);
        assert_eq!(
            keys,
            [
                format!("repos/{repo}/upload-{upload}.pack.0"),
                format!("repos/{repo}/upload-{upload}.pack.1"),
                format!("repos/{repo}/upload-{upload}.pack.2"),
                format!("repos/{repo}/{pack}.{upload}.idx"),
            ]
        );
        assert!(keys.iter().all(|key| is_pack_key(key)), "{keys:?}");
        let whole = PackRow {
            chunk_bytes: None,
            ..chunked
        };
        assert_eq!(
            PackBucket::pack_keys(repo, &whole),
            [
                PackBucket::key(repo, &pack, Some(upload), "pack"),
                PackBucket::key(repo, &pack, Some(upload), "idx"),
            ]
        );
        for key in [
            format!("repos/{repo}/upload-{upload}.pack.01"),
            format!("repos/{repo}/upload-{upload}.pack.-1"),
            format!("repos/{repo}/upload-{upload}.pack."),
            format!("repos/{repo}/upload-{upload}.idx.0"),
            format!("repos/{repo}/upload-nonsense.pack.0"),
            format!("repos/{repo}/{pack}.{upload}.keep"),
            format!("repos/{repo}/{pack}.nonsense.pack"),
            format!("repos/{repo}/pack-.pack"),
            format!("repos/{repo}/../x/{pack}.pack"),
            format!("repos/not-a-uuid/{pack}.pack"),
            format!("other/{repo}/{pack}.pack"),
            format!("repos/{repo}/sub/{pack}.pack"),
        ] {
            assert!(!is_pack_key(&key), "{key}");
        }
    }
}
