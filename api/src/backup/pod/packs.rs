//! The data part of an installation that keeps its repositories in object storage: the SSH host key, then a copy
//! of every pack the platform database names, as `git/<key>` (`git/repos/<repository>/pack-<sha>.<upload>.pack`, or
//! the chunks of a pack sent while it was received, `git/repos/<repository>/upload-<upload>.pack.<n>`).
//! The refs, HEAD and which packs are live are rows of the platform database, which the database part carries; a
//! restore puts each copy back under its key, and the replicas' caches fill from the bucket on their first
//! requests.
//!
//! The bucket is listed after the database was dumped, and every pack's file in it is taken, whatever its row says:
//! a compaction in between retires packs the dump still names as live, and those stay in the bucket at least an
//! hour more. A file removed between the listing and its copy (a retired one whose time had come) is skipped;
//! copies no row names come back as orphans, which maintenance removes.

use std::io::{Read, Write};
use std::path::Path;

use anyhow::{Context, bail};
use slipway_git_store::bucket::{self, PackBucket};
use uuid::Uuid;

use super::{DATA_END, DataCounts, HOST_KEY, PodSources};

/// The folder of the packs' copies in the data part.
const GIT: &str = "git/";

/// The git bucket the api of `sources` keeps its packs in.
pub(super) async fn bucket(sources: &PodSources) -> anyhow::Result<PackBucket> {
    let endpoint = sources
        .object_store
        .endpoint()?
        .context("repositories in object storage need the object store (SLIPWAY_S3_BACKEND_URL)")?;
    PackBucket::open(
        &endpoint,
        &bucket::name(&sources.object_store.s3_bucket_prefix),
    )
    .await
}

/// Writes the data part to stdout: the host key, every pack's file in the bucket (downloaded one at a time into a
/// scratch directory beside the cache) and the counts.
pub(super) async fn send(sources: &PodSources) -> anyhow::Result<DataCounts> {
    let bucket = bucket(sources).await?;
    let keys: Vec<String> = bucket
        .list_all()
        .await?
        .into_iter()
        .map(|(key, _)| key)
        .filter(|key| bucket::is_pack_key(key))
        .collect();
    let scratch = sources
        .repos_dir
        .join(format!(".backup-{}", Uuid::new_v4().simple()));
    tokio::fs::create_dir_all(&scratch).await?;
    let written = async {
        let out = std::io::BufWriter::with_capacity(1 << 20, std::io::stdout());
        let mut tar = tar::Builder::new(out);
        tar.mode(tar::HeaderMode::Deterministic);
        let mut counts = DataCounts::default();
        if sources.ssh_host_key.exists() {
            super::append_file(&mut tar, &sources.ssh_host_key, HOST_KEY, &mut counts)?;
        }
        let mut repositories = std::collections::HashSet::new();
        let file = scratch.join("copy");
        for key in keys {
            if !bucket.fetch(&key, &file).await? {
                continue;
            }
            let copied = file.clone();
            let name = format!("{GIT}{key}");
            (tar, counts) = tokio::task::spawn_blocking(move || {
                super::append_file(&mut tar, &copied, &name, &mut counts)?;
                std::fs::remove_file(&copied)?;
                anyhow::Ok((tar, counts))
            })
            .await??;
            repositories.insert(key.split('/').nth(1).unwrap_or_default().to_owned());
        }
        counts.repositories = repositories.len() as u64;
        tokio::task::spawn_blocking(move || {
            let end = serde_json::to_vec(&counts)?;
            super::append_regular(&mut tar, DATA_END, end.len() as u64, &end[..])?;
            tar.into_inner()?.flush()?;
            anyhow::Ok(counts)
        })
        .await?
    }
    .await;
    let _ = tokio::fs::remove_dir_all(&scratch).await;
    written
}

/// Reads the data part from `input` into the git bucket, which must hold no repository yet, and the host key into
/// its file. Each copy is unpacked beside the cache and uploaded; a part cut short, or one that holds anything but
/// the host key and packs' copies, is refused, and what it had uploaded is removed. Returns the counts.
pub(super) async fn receive(
    input: impl Read + Send + 'static,
    sources: &PodSources,
) -> anyhow::Result<DataCounts> {
    let bucket = bucket(sources).await?;
    if bucket.holds_any().await? {
        bail!(
            "the git bucket already holds repositories: a backup is restored into a fresh install only"
        );
    }
    let staging = sources
        .repos_dir
        .join(format!(".restore-{}", Uuid::new_v4().simple()));
    std::fs::create_dir_all(&staging)?;
    let runtime = tokio::runtime::Handle::current();
    let (into, host_key) = (staging.clone(), sources.ssh_host_key.clone());
    let uploader = bucket.clone();
    let read = tokio::task::spawn_blocking(move || {
        let mut uploaded = Vec::new();
        let result = unpack(input, &into, &host_key, |key, file| {
            runtime.block_on(uploader.put_file(key, file))?;
            uploaded.push(key.to_owned());
            Ok(())
        });
        (result, uploaded)
    })
    .await?;
    let _ = std::fs::remove_dir_all(&staging);
    match read {
        (Ok(counts), _) => Ok(counts),
        (Err(e), uploaded) => {
            if let Err(removing) = bucket.remove_keys(&uploaded).await {
                tracing::warn!(
                    error = format!("{removing:#}"),
                    "removing the copies of a refused restore failed"
                );
            }
            Err(e)
        }
    }
}

/// Unpacks the data part: each pack file into `staging` and then to `upload`, the host key to `host_key`.
fn unpack(
    input: impl Read,
    staging: &Path,
    host_key: &Path,
    mut upload: impl FnMut(&str, &Path) -> anyhow::Result<()>,
) -> anyhow::Result<DataCounts> {
    let mut archive = tar::Archive::new(input);
    let mut unpacked = DataCounts::default();
    let mut repositories = std::collections::HashSet::new();
    let mut key_bytes = None;
    let mut end = None;
    for entry in archive.entries()? {
        let mut entry = entry?;
        let name = entry.path()?.to_string_lossy().into_owned();
        if end.is_some() {
            bail!("{name} follows the data part's end");
        }
        if name == DATA_END {
            let mut bytes = Vec::new();
            entry.read_to_end(&mut bytes)?;
            end =
                Some(serde_json::from_slice::<DataCounts>(&bytes).context("the data part's end")?);
            continue;
        }
        if !entry.header().entry_type().is_file() {
            bail!(
                "{name} is not a file: this data part is not one of repositories in object storage"
            );
        }
        unpacked.files += 1;
        unpacked.bytes += entry.header().size()?;
        if name == HOST_KEY {
            let mut bytes = Vec::new();
            entry.read_to_end(&mut bytes)?;
            key_bytes = Some(bytes);
            continue;
        }
        let Some(key) = name.strip_prefix(GIT).filter(|k| bucket::is_pack_key(k)) else {
            bail!("{name} does not belong in a data part of repositories in object storage");
        };
        let file = staging.join("pack");
        entry
            .unpack(&file)
            .with_context(|| format!("unpack {name}"))?;
        upload(key, &file)?;
        std::fs::remove_file(&file)?;
        repositories.insert(key.split('/').nth(1).unwrap_or_default().to_owned());
    }
    unpacked.repositories = repositories.len() as u64;
    unpacked.matches(end)?;
    if let Some(key) = key_bytes {
        super::put_host_key(host_key, &key)?;
    }
    Ok(unpacked)
}
