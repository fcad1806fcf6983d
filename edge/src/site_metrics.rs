//! Prometheus metrics of the static-site cache, by tier (`memory`, `disk`): what it holds against its cap, how
//! requests found it (hits and misses), and what it loaded, failed to load and evicted.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Where a cached site's files are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tier {
    /// In memory, with their compressed forms.
    Memory,
    /// In the disk cache directory.
    Disk,
}

impl Tier {
    fn label(self) -> &'static str {
        match self {
            Tier::Memory => "memory",
            Tier::Disk => "disk",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TierLabels {
    tier: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

type TierGauge = Family<TierLabels, Gauge>;

fn signed(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The cache's metric families.
#[derive(Default)]
pub struct SiteCacheMetrics {
    bytes: TierGauge,
    capacity: TierGauge,
    entries: TierGauge,
    hits: Family<TierLabels, Counter>,
    misses: Counter,
    evictions: Family<TierLabels, Counter>,
    loads: Family<TierLabels, Counter>,
    failures: Family<ReasonLabels, Counter>,
}

fn tier(tier: Tier) -> TierLabels {
    TierLabels { tier: tier.label() }
}

impl SiteCacheMetrics {
    /// Creates the families and registers them in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "slipway_edge_site_cache_bytes",
            "Bytes the cached static sites count against their tier's cap (memory: files and their gzip and brotli \
             forms; disk: files in 4 KiB blocks)",
            metrics.bytes.clone(),
        );
        registry.register(
            "slipway_edge_site_cache_capacity_bytes",
            "The cap of each tier of the static-site cache",
            metrics.capacity.clone(),
        );
        registry.register(
            "slipway_edge_site_cache_entries",
            "Static sites in each tier of the cache",
            metrics.entries.clone(),
        );
        registry.register(
            "slipway_edge_site_cache_hits",
            "Requests that found their static site in the cache, by tier",
            metrics.hits.clone(),
        );
        registry.register(
            "slipway_edge_site_cache_misses",
            "Requests whose static site was not in the cache (they waited for its load, or joined one)",
            metrics.misses.clone(),
        );
        registry.register(
            "slipway_edge_site_cache_evictions",
            "Static sites evicted to keep a tier under its cap, least recently used first",
            metrics.evictions.clone(),
        );
        registry.register(
            "slipway_edge_site_loads",
            "Static sites fetched and loaded, by the tier they went to",
            metrics.loads.clone(),
        );
        registry.register(
            "slipway_edge_site_load_failures",
            "Static-site loads that failed, by reason: fetch, too_large, archive, disk",
            metrics.failures.clone(),
        );
        metrics
    }

    /// Sets a tier's cap.
    pub fn set_capacity(&self, t: Tier, bytes: u64) {
        self.capacity.get_or_create(&tier(t)).set(signed(bytes));
    }

    /// A site of `bytes` entered a tier.
    pub fn added(&self, t: Tier, bytes: u64) {
        self.bytes.get_or_create(&tier(t)).inc_by(signed(bytes));
        self.entries.get_or_create(&tier(t)).inc();
    }

    /// A site of `bytes` left a tier; `evicted` when to make room.
    pub fn removed(&self, t: Tier, bytes: u64, evicted: bool) {
        self.bytes.get_or_create(&tier(t)).dec_by(signed(bytes));
        self.entries.get_or_create(&tier(t)).dec();
        if evicted {
            self.evictions.get_or_create(&tier(t)).inc();
        }
    }

    /// A request found its site in a tier.
    pub fn hit(&self, t: Tier) {
        self.hits.get_or_create(&tier(t)).inc();
    }

    /// A request did not find its site.
    pub fn miss(&self) {
        self.misses.inc();
    }

    /// A site was loaded into a tier.
    pub fn loaded(&self, t: Tier) {
        self.loads.get_or_create(&tier(t)).inc();
    }

    /// A load failed.
    pub fn failed(&self, reason: &'static str) {
        self.failures.get_or_create(&ReasonLabels { reason }).inc();
    }

    /// Bytes a tier holds.
    pub fn bytes(&self, t: Tier) -> i64 {
        self.bytes.get_or_create(&tier(t)).get()
    }

    /// Sites a tier holds.
    pub fn entries(&self, t: Tier) -> i64 {
        self.entries.get_or_create(&tier(t)).get()
    }

    /// Requests that found their site in a tier.
    pub fn hits(&self, t: Tier) -> u64 {
        self.hits.get_or_create(&tier(t)).get()
    }

    /// Requests that did not find their site.
    pub fn misses(&self) -> u64 {
        self.misses.get()
    }

    /// Sites evicted from a tier.
    pub fn evictions(&self, t: Tier) -> u64 {
        self.evictions.get_or_create(&tier(t)).get()
    }

    /// Sites loaded into a tier.
    pub fn loads(&self, t: Tier) -> u64 {
        self.loads.get_or_create(&tier(t)).get()
    }

    /// Loads that failed, all reasons.
    pub fn failures(&self) -> u64 {
        ["fetch", "too_large", "archive", "disk"]
            .into_iter()
            .map(|reason| self.failures.get_or_create(&ReasonLabels { reason }).get())
            .sum()
    }
}
