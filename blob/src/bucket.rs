//! A channel's bucket as the API server works on it for checkpoints: through the gateway, signed with the
//! channel's own key pair, like an app. Listing, restoring and pruning therefore pass the gateway's checks and
//! keep its byte count (a restore's copies count against the owner's quota, a pruned version frees its bytes),
//! and the API server never holds the backend's keys.

use std::sync::atomic::{AtomicUsize, Ordering};

use aws_sdk_s3::Client;
use aws_sdk_s3::primitives::ByteStream;
use chrono::{DateTime, Utc};
use slipway_backends::object_store::{self, S3Endpoint};

use super::access::BlobAccess;
use super::store::Store;
use slipway_store::env::crypto::Keyring;

/// A channel's bucket, reached through the gateway.
#[derive(Clone)]
pub struct Bucket {
    client: Client,
    /// The bucket name clients use (the channel's hostname label).
    pub name: String,
}

/// One entry of a bucket's version listing: an object version or a delete marker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    /// The object key.
    pub key: String,
    /// The version id (`null` for an object written before versioning was on).
    pub version_id: String,
    /// Bytes (0 for a delete marker).
    pub size: i64,
    /// Whether it is the key's current version.
    pub is_latest: bool,
    /// Whether it is a delete marker.
    pub delete_marker: bool,
    /// The content's ETag (none on a delete marker).
    pub etag: Option<String>,
    /// When it was written.
    pub last_modified: Option<DateTime<Utc>>,
}

/// Most versions and delete markers a bucket may hold for checkpoints to cover it: the listing is held in memory
/// and written as a manifest, so a bucket past this (zero-byte keys cost no quota) gets no bucket leg.
pub const MAX_VERSIONS: usize = 100_000;

/// The version id the S3 API uses for an object without one.
const NULL_VERSION: &str = "null";

fn time_of(t: Option<&aws_sdk_s3::primitives::DateTime>) -> Option<DateTime<Utc>> {
    t.and_then(|t| DateTime::from_timestamp(t.secs(), t.subsec_nanos()))
}

impl BlobAccess {
    /// The channel's bucket, signed with its key pair.
    pub fn bucket(&self, ring: &Keyring, store: &Store) -> anyhow::Result<Bucket> {
        let client = object_store::client(
            &S3Endpoint {
                url: self.gateway_url.clone(),
                access_key_id: store.access_key_id.clone(),
                secret_access_key: store.secret(ring)?,
            },
            None,
        );
        Ok(Bucket {
            client,
            name: store.virtual_bucket.clone(),
        })
    }
}

impl Bucket {
    /// Every version and delete marker in the bucket, a key's newest first; an error past [`MAX_VERSIONS`].
    pub async fn versions(&self) -> anyhow::Result<Vec<Version>> {
        self.versions_between(None, None, &AtomicUsize::new(0))
            .await
    }

    /// Every version and delete marker in the bucket, as [`Self::versions`] lists them, listed in key ranges side
    /// by side: the ranges end at each of `bounds` (any order) and the last at the bucket's end. The backend lists
    /// one range's pages one after another, each a round trip and a walk of its own; several ranges at once keep
    /// it busy meanwhile, so a listing of tens of thousands of keys takes a fraction of the time.
    pub async fn versions_split(&self, bounds: &[&str]) -> anyhow::Result<Vec<Version>> {
        let mut bounds = bounds.to_vec();
        bounds.sort_unstable();
        bounds.dedup();
        let ranges = std::iter::once(None)
            .chain(bounds.iter().copied().map(Some))
            .zip(
                bounds
                    .iter()
                    .copied()
                    .map(Some)
                    .chain(std::iter::once(None)),
            );
        // One count for all ranges, so a bucket past the bound stops every listing, not one range's.
        let listed = AtomicUsize::new(0);
        let ranges = futures::future::try_join_all(
            ranges.map(|(after, through)| self.versions_between(after, through, &listed)),
        )
        .await?;
        Ok(ranges.into_iter().flatten().collect())
    }

    /// The versions and delete markers of the keys after `after` up to and including `through` (byte order, as
    /// S3 lists), from the bucket's first key and to its last without them; each adds to `listed`, the count of the
    /// whole listing, which past [`MAX_VERSIONS`] is an error.
    async fn versions_between(
        &self,
        after: Option<&str>,
        through: Option<&str>,
        listed: &AtomicUsize,
    ) -> anyhow::Result<Vec<Version>> {
        // Keys up to `after` can come back (a backend may repeat the marker's key); keys past `through` end it.
        let in_range =
            |key: &str| after.is_none_or(|a| key > a) && through.is_none_or(|t| key <= t);
        let mut all = Vec::new();
        // A backend may repeat the entry a page ended on at the start of the next (versitygw does past a few
        // thousand keys): an entry already listed is listed once.
        let mut seen = std::collections::HashSet::new();
        let (mut key_marker, mut version_marker) = (after.map(str::to_owned), None::<String>);
        loop {
            let page = self
                .client
                .list_object_versions()
                .bucket(&self.name)
                .set_key_marker(key_marker.clone())
                .set_version_id_marker(version_marker.clone())
                .send()
                .await
                .map_err(|e| anyhow::anyhow!("list versions: {}", object_store::describe(&e)))?;
            let mut past_range = false;
            let before = all.len();
            for v in page.versions() {
                let key = v.key().unwrap_or_default();
                past_range |= through.is_some_and(|t| key > t);
                let id = (key, v.version_id().unwrap_or(NULL_VERSION));
                if !in_range(key) || !seen.insert((id.0.to_owned(), id.1.to_owned())) {
                    continue;
                }
                all.push(Version {
                    key: key.to_owned(),
                    version_id: id.1.to_owned(),
                    size: v.size().unwrap_or(0),
                    is_latest: v.is_latest().unwrap_or(false),
                    delete_marker: false,
                    etag: v.e_tag().map(str::to_owned),
                    last_modified: time_of(v.last_modified()),
                });
            }
            for m in page.delete_markers() {
                let key = m.key().unwrap_or_default();
                past_range |= through.is_some_and(|t| key > t);
                let id = (key, m.version_id().unwrap_or(NULL_VERSION));
                if !in_range(key) || !seen.insert((id.0.to_owned(), id.1.to_owned())) {
                    continue;
                }
                all.push(Version {
                    key: key.to_owned(),
                    version_id: id.1.to_owned(),
                    size: 0,
                    is_latest: m.is_latest().unwrap_or(false),
                    delete_marker: true,
                    etag: None,
                    last_modified: time_of(m.last_modified()),
                });
            }
            let added = all.len() - before;
            anyhow::ensure!(
                listed.fetch_add(added, Ordering::Relaxed) + added <= MAX_VERSIONS,
                "the bucket holds more than {MAX_VERSIONS} versions, more than checkpoints cover"
            );
            if past_range || !page.is_truncated().unwrap_or(false) {
                break;
            }
            key_marker = page.next_key_marker().map(str::to_owned);
            version_marker = page.next_version_id_marker().map(str::to_owned);
            if key_marker.is_none() {
                anyhow::bail!("the version listing was cut short without a marker to go on from");
            }
        }
        Ok(all)
    }

    /// Writes `version_id` of `key` again as the key's current version (a server-side copy; the history stays).
    pub async fn copy_forward(&self, key: &str, version_id: &str) -> anyhow::Result<()> {
        let source = format!(
            "{}/{}?versionId={}",
            self.name,
            percent_encoding::utf8_percent_encode(key, COPY_SOURCE),
            percent_encoding::utf8_percent_encode(version_id, COPY_SOURCE)
        );
        self.client
            .copy_object()
            .bucket(&self.name)
            .key(key)
            .copy_source(source)
            .send()
            .await
            .map_err(|e| anyhow::anyhow!("copy {key} forward: {}", object_store::describe(&e)))?;
        Ok(())
    }

    /// Deletes `key` without a version: a delete marker goes on top, the history stays.
    pub async fn hide(&self, key: &str) -> anyhow::Result<()> {
        self.client
            .delete_object()
            .bucket(&self.name)
            .key(key)
            .send()
            .await
            .map_err(|e| anyhow::anyhow!("delete {key}: {}", object_store::describe(&e)))?;
        Ok(())
    }

    /// Removes one version (or delete marker) for good.
    pub async fn remove_version(&self, key: &str, version_id: &str) -> anyhow::Result<()> {
        self.client
            .delete_object()
            .bucket(&self.name)
            .key(key)
            .version_id(version_id)
            .send()
            .await
            .map_err(|e| {
                anyhow::anyhow!(
                    "remove {key} version {version_id}: {}",
                    object_store::describe(&e)
                )
            })?;
        Ok(())
    }

    /// The body of one version of `key`.
    pub async fn read(&self, key: &str, version_id: &str) -> anyhow::Result<ByteStream> {
        let object = self
            .client
            .get_object()
            .bucket(&self.name)
            .key(key)
            .version_id(version_id)
            .send()
            .await
            .map_err(|e| anyhow::anyhow!("read {key}: {}", object_store::describe(&e)))?;
        Ok(object.body)
    }
}

/// What `x-amz-copy-source` escapes: everything but unreserved characters and `/`.
const COPY_SOURCE: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~')
    .remove(b'/');

#[cfg(test)]
pub(crate) mod tests {
    use super::Version;

    /// A version of `key` (one byte, its ETag its id), or a delete marker.
    pub(crate) fn version(key: &str, id: &str, latest: bool, marker: bool) -> Version {
        Version {
            key: key.into(),
            version_id: id.into(),
            size: if marker { 0 } else { 1 },
            is_latest: latest,
            delete_marker: marker,
            etag: (!marker).then(|| format!("\"{id}\"")),
            last_modified: None,
        }
    }
}
