//! The static sites an edge replica holds: loaded when a request first names them, kept under a cap, the least
//! recently used evicted first. With 10,000 channels a replica cannot hold every site, nor wait for all of them
//! before it serves; it holds what is hot.
//!
//! Two tiers, each a weighted [`moka`] cache with the LRU policy:
//! - **memory** ([`SiteCacheConfig::memory_bytes`]): a site's files with their gzip and brotli forms, computed once
//!   per content ([`super::site`]); each site counts its distinct contents, so a content two cached sites share
//!   counts in both, and the cap bounds what the cache holds from above;
//! - **disk** (optional, [`DiskCacheConfig`]): a site whose files exceed a quarter of the memory cap
//!   ([`MEMORY_SHARE`]: one site never flushes the whole memory tier) is written to a directory of its own and
//!   streamed from there, in whole 4 KiB blocks against the disk cap. Without a disk tier such a site is refused.
//!
//! A site over [`SiteCacheConfig::max_site_bytes`] is refused either way; the disk cap must hold it.
//!
//! Loads: concurrent first requests for a site share one fetch (the load runs in a task of its own, so it
//! finishes for the others when the request that started it goes away). At most [`MAX_CONCURRENT_LOADS`] run at
//! once, so loading holds at most that many memory shares beside the cache. A failed load is remembered for
//! [`FAILURE_MEMORY`]: a broken site answers 503 without a fetch per request. The cap holds once each insert is
//! applied (the cache runs its evictions right after it); a site being loaded, or evicted while a request still
//! serves it, is in memory (or on disk) beside it until that finishes. Reads are recorded for the LRU order
//! asynchronously: under very heavy load moka may drop a few, so the order is the least recently used as far as it
//! recorded.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use moka::notification::RemovalCause;
use moka::policy::EvictionPolicy;
use moka::sync::Cache;

use super::site::{BlobStore, Site, SiteKey};
use super::site_disk::DiskRoot;
use super::site_load::{self, ArchiveSource, Limits, LoadError};
use super::site_metrics::{SiteCacheMetrics, Tier};

/// The memory tier takes a site whose files are at most this fraction (1/n) of its cap.
pub const MEMORY_SHARE: u64 = 4;
/// Loads running at once; more wait their turn.
pub const MAX_CONCURRENT_LOADS: usize = 4;
/// How long a failed load is answered from memory before a request tries again.
pub const FAILURE_MEMORY: Duration = Duration::from_secs(5);
/// Failed loads remembered at most.
const FAILURES_KEPT: u64 = 10_000;

/// Sizes of the cache.
#[derive(Debug, Clone)]
pub struct SiteCacheConfig {
    /// The memory tier's cap: files and their compressed forms.
    pub memory_bytes: u64,
    /// Largest site served at all (sum of its files).
    pub max_site_bytes: u64,
    /// The disk tier; `None`: sites over the memory share are refused.
    pub disk: Option<DiskCacheConfig>,
}

/// The disk tier.
#[derive(Debug, Clone)]
pub struct DiskCacheConfig {
    /// The directory it writes in (its `slipway-sites` subdirectory, emptied at start).
    pub dir: PathBuf,
    /// Its cap.
    pub bytes: u64,
}

impl SiteCacheConfig {
    /// The limits a load reads a site under.
    pub fn limits(&self) -> Limits {
        Limits {
            max_site_bytes: self.max_site_bytes,
            memory_site_bytes: self.memory_bytes / MEMORY_SHARE,
        }
    }

    /// Whether the sizes fit together: the disk tier must hold the largest site.
    pub fn check(&self) -> Result<(), String> {
        if self.memory_bytes < MEMORY_SHARE * 1024 {
            return Err(format!(
                "the site cache needs at least {} KiB of memory",
                MEMORY_SHARE
            ));
        }
        match &self.disk {
            Some(disk) if disk.bytes < self.max_site_bytes => Err(format!(
                "the disk cache ({} bytes) must hold the largest site ({} bytes)",
                disk.bytes, self.max_site_bytes
            )),
            _ => Ok(()),
        }
    }
}

/// A load in flight, awaited by every request that needs it.
type Load = Shared<BoxFuture<'static, Result<Arc<Site>, Arc<LoadError>>>>;

/// Loaded sites by commit, weighed by their bytes.
type Sites = Cache<SiteKey, Arc<Site>>;

/// The sites of deployed commits, by commit.
pub struct SiteCache {
    inner: Arc<Inner>,
}

struct Inner {
    source: Arc<dyn ArchiveSource>,
    blobs: Arc<BlobStore>,
    memory: Sites,
    disk: Option<(Arc<DiskRoot>, Sites)>,
    loading: Mutex<HashMap<SiteKey, Load>>,
    failed: Cache<SiteKey, Arc<LoadError>>,
    permits: tokio::sync::Semaphore,
    limits: Limits,
    metrics: Arc<SiteCacheMetrics>,
}

/// A weight moka can hold (u32), in KiB rounded up: the sum of the weights under the cap in KiB keeps the bytes
/// under the cap in bytes.
fn kib(bytes: u64) -> u32 {
    u32::try_from(bytes.div_ceil(1024)).unwrap_or(u32::MAX)
}

fn tier_cache(tier: Tier, cap: u64, metrics: &Arc<SiteCacheMetrics>) -> Cache<SiteKey, Arc<Site>> {
    metrics.set_capacity(tier, cap);
    let metrics = metrics.clone();
    Cache::builder()
        .max_capacity(cap / 1024)
        .weigher(|_, site: &Arc<Site>| kib(site.cached_bytes()))
        .eviction_policy(EvictionPolicy::lru())
        .eviction_listener(move |_, site: Arc<Site>, cause| {
            metrics.removed(tier, site.cached_bytes(), cause == RemovalCause::Size);
        })
        .build()
}

impl SiteCache {
    /// A cache of `config`'s sizes filled from `source`, counting in `metrics`.
    pub fn new(
        source: Arc<dyn ArchiveSource>,
        config: &SiteCacheConfig,
        metrics: SiteCacheMetrics,
    ) -> anyhow::Result<Self> {
        config.check().map_err(anyhow::Error::msg)?;
        let metrics = Arc::new(metrics);
        let disk = match &config.disk {
            Some(disk) => {
                let root = DiskRoot::open(&disk.dir).map_err(|e| {
                    anyhow::anyhow!("open the site disk cache {}: {e}", disk.dir.display())
                })?;
                Some((Arc::new(root), tier_cache(Tier::Disk, disk.bytes, &metrics)))
            }
            None => None,
        };
        Ok(Self {
            inner: Arc::new(Inner {
                source,
                blobs: Arc::default(),
                memory: tier_cache(Tier::Memory, config.memory_bytes, &metrics),
                disk,
                loading: Mutex::default(),
                failed: Cache::builder()
                    .max_capacity(FAILURES_KEPT)
                    .time_to_live(FAILURE_MEMORY)
                    .build(),
                permits: tokio::sync::Semaphore::new(MAX_CONCURRENT_LOADS),
                limits: config.limits(),
                metrics,
            }),
        })
    }

    /// The site for a request: from the cache (a hit), else from the load in flight or a new one (a miss).
    pub async fn get(&self, key: &SiteKey) -> Result<Arc<Site>, Arc<LoadError>> {
        let inner = &self.inner;
        if let Some((tier, site)) = inner.cached(key) {
            inner.metrics.hit(tier);
            return Ok(site);
        }
        inner.metrics.miss();
        if let Some(error) = inner.failed.get(key) {
            return Err(error);
        }
        Inner::load(inner, key).await
    }

    /// Loads the site unless it is cached (a deploy's new commit, ahead of its first request; not a request, so
    /// neither a hit nor a miss).
    pub async fn preload(&self, key: &SiteKey) -> Result<(), Arc<LoadError>> {
        if self.contains(key) {
            return Ok(());
        }
        Inner::load(&self.inner, key).await.map(drop)
    }

    /// Whether the site is cached (without counting as a use).
    pub fn contains(&self, key: &SiteKey) -> bool {
        self.inner.memory.contains_key(key)
            || self
                .inner
                .disk
                .as_ref()
                .is_some_and(|(_, cache)| cache.contains_key(key))
    }

    /// Drops a site no route serves any more (requests still serving it keep it until they finish).
    pub fn forget(&self, key: &SiteKey) {
        self.inner.memory.invalidate(key);
        if let Some((_, cache)) = &self.inner.disk {
            cache.invalidate(key);
        }
        self.inner.failed.invalidate(key);
    }

    /// The cache's metrics.
    pub fn metrics(&self) -> &SiteCacheMetrics {
        &self.inner.metrics
    }
}

impl Inner {
    /// The cached site, counted as a use.
    fn cached(&self, key: &SiteKey) -> Option<(Tier, Arc<Site>)> {
        if let Some(site) = self.memory.get(key) {
            return Some((Tier::Memory, site));
        }
        let (_, disk) = self.disk.as_ref()?;
        disk.get(key).map(|site| (Tier::Disk, site))
    }

    /// Joins the load of `key` in flight, or starts one.
    fn load(this: &Arc<Self>, key: &SiteKey) -> Load {
        let mut loading = this.loading.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(load) = loading.get(key) {
            return load.clone();
        }
        // A load that finished between the caller's look and this lock put its site in before it left `loading`.
        if let Some((_, site)) = this.cached(key) {
            return futures::future::ready(Ok(site)).boxed().shared();
        }
        let task = tokio::spawn(Self::run_load(this.clone(), key.clone()));
        let load = async move {
            task.await.unwrap_or_else(|e| {
                Err(Arc::new(LoadError::Archive(format!(
                    "the load stopped: {e}"
                ))))
            })
        }
        .boxed()
        .shared();
        loading.insert(key.clone(), load.clone());
        load
    }

    async fn run_load(self: Arc<Self>, key: SiteKey) -> Result<Arc<Site>, Arc<LoadError>> {
        let started = std::time::Instant::now();
        let result = self.fetch(&key).await;
        match &result {
            Ok(site) => {
                let tier = if site.on_disk() {
                    Tier::Disk
                } else {
                    Tier::Memory
                };
                self.keep(tier, &key, site.clone());
                self.failed.invalidate(&key);
                self.metrics.loaded(tier);
                tracing::info!(app_id = %key.app_id, sha = %key.sha, files = site.len(), bytes = site.bytes(),
                    cached_bytes = site.cached_bytes(), on_disk = site.on_disk(),
                    millis = started.elapsed().as_millis() as u64, "static site loaded");
            }
            Err(e) => {
                self.metrics.failed(e.reason());
                self.failed.insert(key.clone(), e.clone());
                tracing::warn!(app_id = %key.app_id, sha = %key.sha, error = %e, "static site not loaded");
            }
        }
        self.loading
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&key);
        result
    }

    async fn fetch(&self, key: &SiteKey) -> Result<Arc<Site>, Arc<LoadError>> {
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|e| Arc::new(LoadError::Archive(e.to_string())))?;
        let disk = self.disk.as_ref().map(|(root, _)| root.clone());
        site_load::load(
            self.source.as_ref(),
            key,
            self.limits,
            self.blobs.clone(),
            disk,
        )
        .await
        .map(Arc::new)
        .map_err(Arc::new)
    }

    /// Puts a loaded site in its tier and applies the evictions that keep the tier under its cap.
    fn keep(&self, tier: Tier, key: &SiteKey, site: Arc<Site>) {
        let cache = match (tier, &self.disk) {
            (Tier::Disk, Some((_, disk))) => disk,
            _ => &self.memory,
        };
        // Counted before it goes in: its eviction, however soon, is counted after.
        self.metrics.added(tier, site.cached_bytes());
        cache.insert(key.clone(), site);
        cache.run_pending_tasks();
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use futures::StreamExt;
    use proptest::prelude::*;
    use slipway_internal::CallError;

    use super::*;
    use crate::site::Content;
    use crate::site_load::{ArchiveStream, tar_of};

    /// Archives by sha, counting fetches; while `gate` is closed, fetches wait.
    #[derive(Default)]
    struct Archives {
        tars: Mutex<HashMap<String, Vec<u8>>>,
        fetches: Mutex<HashMap<String, usize>>,
        gate: Option<tokio::sync::Semaphore>,
    }

    impl Archives {
        fn with(sites: &[(&str, Vec<u8>)]) -> Self {
            let archives = Self::default();
            for (sha, tar) in sites {
                archives.add(sha, tar.clone());
            }
            archives
        }

        fn add(&self, sha: &str, tar: Vec<u8>) {
            self.tars.lock().unwrap().insert(sha.to_owned(), tar);
        }

        fn fetches(&self, sha: &str) -> usize {
            self.fetches.lock().unwrap().get(sha).copied().unwrap_or(0)
        }
    }

    #[async_trait::async_trait]
    impl ArchiveSource for Archives {
        async fn archive(&self, key: &SiteKey) -> Result<ArchiveStream, CallError> {
            *self
                .fetches
                .lock()
                .unwrap()
                .entry(key.sha.clone())
                .or_default() += 1;
            if let Some(gate) = &self.gate {
                drop(gate.acquire().await);
            }
            let tar = self.tars.lock().unwrap().get(&key.sha).cloned();
            let tar = tar.ok_or_else(|| CallError::NotFound(format!("no commit {}", key.sha)))?;
            // In several chunks, as it streams from the API.
            let chunks: Vec<std::io::Result<Bytes>> = tar
                .chunks(1000)
                .map(|c| Ok(Bytes::copy_from_slice(c)))
                .collect();
            Ok(futures::stream::iter(chunks).boxed())
        }
    }

    fn key(sha: &str) -> SiteKey {
        SiteKey {
            app_id: "app".into(),
            sha: sha.into(),
        }
    }

    /// A site of one incompressible file of `len` bytes (different per sha).
    fn binary_site(sha: &str, len: usize) -> Vec<u8> {
        let mut state = sha
            .bytes()
            .fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
        let content: Vec<u8> = (0..len)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect();
        tar_of(&[("file.bin", &content)]).unwrap()
    }

    fn cache(
        archives: Arc<Archives>,
        memory_kib: u64,
        disk: Option<(&std::path::Path, u64)>,
    ) -> SiteCache {
        let config = SiteCacheConfig {
            memory_bytes: memory_kib * 1024,
            max_site_bytes: disk.map_or(1 << 20, |(_, kib)| kib * 1024),
            disk: disk.map(|(dir, kib)| DiskCacheConfig {
                dir: dir.to_owned(),
                bytes: kib * 1024,
            }),
        };
        SiteCache::new(archives, &config, SiteCacheMetrics::default()).unwrap()
    }

    fn scratch() -> PathBuf {
        std::env::temp_dir().join(format!(
            "slipway-cache-test-{}",
            uuid::Uuid::new_v4().simple()
        ))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        #[test]
        fn the_memory_cap_holds_under_any_order_of_loads(
            // Up to the memory share (16 KiB, with the file's allowance).
            sizes in prop::collection::vec(1usize..=16 * 1024 - 200, 1..12),
            order in prop::collection::vec(0usize..12, 1..40),
        ) {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async {
                let sites: Vec<(String, Vec<u8>)> = sizes
                    .iter()
                    .enumerate()
                    .map(|(i, len)| (format!("s{i}"), binary_site(&format!("s{i}"), *len)))
                    .collect();
                let archives = Arc::new(Archives::default());
                for (sha, tar) in &sites {
                    archives.add(sha, tar.clone());
                }
                let cap = 64 * 1024;
                let cache = cache(archives, 64, None);
                for i in order {
                    let (sha, _) = &sites[i % sites.len()];
                    let site = cache.get(&key(sha)).await.unwrap();
                    assert!(!site.on_disk());
                    let held = cache.metrics().bytes(Tier::Memory);
                    assert!(held as u64 <= cap, "{held} bytes held over a cap of {cap}");
                    assert!(cache.inner.memory.weighted_size() <= cap / 1024);
                    assert!(cache.contains(&key(sha)), "the site just loaded stays");
                }
            });
        }
    }

    #[tokio::test]
    async fn the_least_recently_used_site_is_evicted_first() {
        // About 13 KiB each (an incompressible 12 KiB file): four fit in 64 KiB, not five.
        let shas = ["a", "b", "c", "d", "e"];
        let archives = Arc::new(Archives::with(
            &shas.map(|sha| (sha, binary_site(sha, 12 * 1024))),
        ));
        let cache = cache(archives.clone(), 64, None);
        for sha in &shas[..4] {
            cache.get(&key(sha)).await.unwrap();
        }
        assert_eq!(cache.metrics().entries(Tier::Memory), 4);
        // `a` is used again: `b` is now the least recently used.
        cache.get(&key("a")).await.unwrap();
        cache.get(&key("e")).await.unwrap();
        assert!(!cache.contains(&key("b")), "the least recently used went");
        for sha in ["a", "c", "d", "e"] {
            assert!(cache.contains(&key(sha)), "{sha} stays");
        }
        let metrics = cache.metrics();
        assert_eq!(metrics.evictions(Tier::Memory), 1);
        assert_eq!(metrics.entries(Tier::Memory), 4);
        assert_eq!((metrics.hits(Tier::Memory), metrics.misses()), (1, 5));
        // Asked for again, it is fetched again.
        let site = cache.get(&key("b")).await.unwrap();
        assert_eq!(site.len(), 1);
        assert_eq!(archives.fetches("b"), 2);
        assert_eq!(metrics.loads(Tier::Memory), 6);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_first_requests_share_one_fetch() {
        let archives = Arc::new(Archives {
            gate: Some(tokio::sync::Semaphore::new(0)),
            ..Archives::default()
        });
        archives.add("a", tar_of(&[("index.html", b"<h1>shared</h1>")]).unwrap());
        let cache = Arc::new(cache(archives.clone(), 1024, None));
        let requests: Vec<_> = (0..16)
            .map(|_| {
                let cache = cache.clone();
                tokio::spawn(async move { cache.get(&key("a")).await })
            })
            .collect();
        // Every request is waiting (on the load in flight) before the archive is given.
        while cache.metrics().misses() < 16 {
            tokio::task::yield_now().await;
        }
        archives.gate.as_ref().unwrap().add_permits(1);
        let sites: Vec<Arc<Site>> = futures::future::join_all(requests)
            .await
            .into_iter()
            .map(|r| r.unwrap().unwrap())
            .collect();
        assert_eq!(archives.fetches("a"), 1, "one fetch for sixteen requests");
        assert!(sites.iter().all(|s| Arc::ptr_eq(s, &sites[0])));
        assert_eq!(cache.metrics().loads(Tier::Memory), 1);
        let Content::Memory(blob) = &sites[0].file("index.html").unwrap().content else {
            panic!("on disk")
        };
        assert_eq!(&blob.identity[..], b"<h1>shared</h1>");
    }

    #[tokio::test]
    async fn a_failed_load_is_answered_from_memory_for_a_while() {
        let archives = Arc::new(Archives::default());
        let cache = cache(archives.clone(), 1024, None);
        for _ in 0..3 {
            let error = cache.get(&key("gone")).await.unwrap_err();
            assert_eq!(error.reason(), "fetch");
        }
        assert_eq!(archives.fetches("gone"), 1);
        assert_eq!(cache.metrics().failures(), 1);
        // A deploy's preload does not take the remembered answer.
        archives.add("gone", tar_of(&[("index.html", b"back")]).unwrap());
        cache.preload(&key("gone")).await.unwrap();
        assert!(cache.get(&key("gone")).await.is_ok());
    }

    #[tokio::test]
    async fn a_site_over_the_memory_share_is_on_disk_under_its_own_cap() {
        let dir = scratch();
        // Memory 64 KiB (a site of up to 16 KiB); disk 100 KiB: two 40 KiB sites, not three.
        let archives = Arc::new(Archives::with(&[
            ("small", binary_site("small", 4 * 1024)),
            ("big1", binary_site("big1", 40 * 1024)),
            ("big2", binary_site("big2", 40 * 1024)),
            ("big3", binary_site("big3", 40 * 1024)),
        ]));
        let cache = cache(archives, 64, Some((&dir, 100)));
        assert!(!cache.get(&key("small")).await.unwrap().on_disk());
        let big1 = cache.get(&key("big1")).await.unwrap();
        assert!(big1.on_disk());
        let Content::Disk(file) = &big1.file("file.bin").unwrap().content else {
            panic!("in memory")
        };
        let big1_dir = file.path.parent().unwrap().to_owned();
        assert_eq!(std::fs::metadata(&file.path).unwrap().len(), 40 * 1024);
        drop(big1);
        cache.get(&key("big2")).await.unwrap();
        cache.get(&key("big3")).await.unwrap();
        let metrics = cache.metrics();
        assert_eq!(
            (metrics.entries(Tier::Disk), metrics.evictions(Tier::Disk)),
            (2, 1)
        );
        assert!(metrics.bytes(Tier::Disk) as u64 <= 100 * 1024);
        assert!(!cache.contains(&key("big1")));
        assert!(
            cache.contains(&key("small")),
            "the memory tier is not touched"
        );
        // The evicted site's files go with it.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while big1_dir.exists() {
            assert!(
                std::time::Instant::now() < deadline,
                "{} still there",
                big1_dir.display()
            );
            tokio::task::yield_now().await;
        }
        drop(cache);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn a_forgotten_site_leaves_and_loads_again_when_asked() {
        let archives = Arc::new(Archives::with(&[("a", binary_site("a", 1024))]));
        let cache = cache(archives.clone(), 1024, None);
        cache.get(&key("a")).await.unwrap();
        cache.forget(&key("a"));
        assert!(!cache.contains(&key("a")));
        assert_eq!(cache.metrics().bytes(Tier::Memory), 0);
        assert_eq!(
            cache.metrics().evictions(Tier::Memory),
            0,
            "forgetting is not evicting"
        );
        cache.get(&key("a")).await.unwrap();
        assert_eq!(archives.fetches("a"), 2);
    }

    #[test]
    fn the_disk_tier_must_hold_the_largest_site() {
        let config = SiteCacheConfig {
            memory_bytes: 256 << 20,
            max_site_bytes: 512 << 20,
            disk: Some(DiskCacheConfig {
                dir: scratch(),
                bytes: 256 << 20,
            }),
        };
        assert!(
            config
                .check()
                .unwrap_err()
                .contains("must hold the largest site")
        );
        assert_eq!(config.limits().memory_site_bytes, 64 << 20);
    }
}
