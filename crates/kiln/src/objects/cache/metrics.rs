//! The object cache's Prometheus metrics (`kiln_object_cache_*`), registered next to kiln's own.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// The cache's metrics, registered next to kiln's own.
#[derive(Clone, Debug)]
pub struct CacheMetrics {
    pub hits: Counter,
    pub misses: Counter,
    /// Objects a read brought from the backing store that the cache kept (a write is taken
    /// in as it is acknowledged: `cached_writes`).
    pub admitted: Counter,
    /// Reads and writes the cache passed to the backing store.
    pub bypassed: Counter,
    pub cached_writes: Counter,
    /// Intermediate outputs of sequences, held until their run ended.
    pub ephemeral_writes: Counter,
    pub written_back: Counter,
    /// Write-backs that skipped a version because the backing store held a newer one.
    pub superseded: Counter,
    pub writeback_errors: Counter,
    /// Keys whose write-back is failing now (each retried until it succeeds).
    pub writebacks_failing: Gauge,
    /// Shadow placeholders written, and those that failed (the write stayed acknowledged).
    pub shadows: Counter,
    pub shadow_errors: Counter,
    pub evictions: Counter,
    /// `fdatasync`s of the write-back journal (a group of puts, or dones on their own).
    pub journal_syncs: Counter,
    /// Capacity changes made at once because instances took back memory they had lent, and
    /// their time (evictions included).
    pub reclaim_seconds: Histogram,
    pub bytes: Gauge,
    pub dirty_bytes: Gauge,
    pub capacity_bytes: Gauge,
    /// What the node could lend when the capacity was last set, and the slack kept from it.
    pub lendable_bytes: Gauge,
    pub slack_bytes: Gauge,
    /// Whether the capacity follows what instances lend (set by the sizing task), rather
    /// than staying as configured.
    pub lent: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Time from acknowledging a write to its version being in the backing store.
    pub writeback_seconds: Histogram,
    /// Time a capacity change took (evictions included).
    pub resize_seconds: Histogram,
}

impl Default for CacheMetrics {
    fn default() -> Self {
        Self {
            hits: Counter::default(),
            misses: Counter::default(),
            admitted: Counter::default(),
            bypassed: Counter::default(),
            cached_writes: Counter::default(),
            ephemeral_writes: Counter::default(),
            written_back: Counter::default(),
            superseded: Counter::default(),
            writeback_errors: Counter::default(),
            writebacks_failing: Gauge::default(),
            shadows: Counter::default(),
            shadow_errors: Counter::default(),
            evictions: Counter::default(),
            journal_syncs: Counter::default(),
            // 1 µs to ~1 s.
            reclaim_seconds: Histogram::new(exponential_buckets(0.000_001, 2.5, 16)),
            bytes: Gauge::default(),
            dirty_bytes: Gauge::default(),
            capacity_bytes: Gauge::default(),
            lendable_bytes: Gauge::default(),
            slack_bytes: Gauge::default(),
            lent: Default::default(),
            // 100 µs to ~100 s.
            writeback_seconds: Histogram::new(exponential_buckets(0.000_1, 2.5, 16)),
            // 1 µs to ~1 s.
            resize_seconds: Histogram::new(exponential_buckets(0.000_001, 2.5, 16)),
        }
    }
}

/// The cache's memory: what it may hold and holds, and, when instances lend it memory
/// (`lent`), what they could lend and the slack kept from it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CacheMemory {
    pub lent: bool,
    pub capacity_bytes: u64,
    pub used_bytes: u64,
    pub lendable_bytes: u64,
    pub slack_bytes: u64,
}

impl CacheMetrics {
    /// The gauges' values now.
    pub fn memory(&self) -> CacheMemory {
        let bytes = |g: &Gauge| g.get().max(0) as u64;
        CacheMemory {
            lent: self.lent.load(std::sync::atomic::Ordering::Relaxed),
            capacity_bytes: bytes(&self.capacity_bytes),
            used_bytes: bytes(&self.bytes),
            lendable_bytes: bytes(&self.lendable_bytes),
            slack_bytes: bytes(&self.slack_bytes),
        }
    }

    pub fn register(&self, registry: &mut Registry) {
        let counters = [
            ("object_cache_hits", "Reads answered from the object cache", &self.hits),
            ("object_cache_misses", "Cacheable reads that went to the backing store", &self.misses),
            ("object_cache_admitted", "Objects a read brought from the backing store that the object cache kept (writes are counted in object_cache_writes)", &self.admitted),
            ("object_cache_bypassed", "Requests the object cache passed to the backing store (ranges of uncached objects, encryption, versions, conditional writes, large objects)", &self.bypassed),
            ("object_cache_writes", "Writes acknowledged by the object cache (write-back)", &self.cached_writes),
            ("object_cache_ephemeral_writes", "Intermediate outputs of sequences, held in memory until their run ended and never written back", &self.ephemeral_writes),
            ("object_cache_written_back", "Versions the object cache wrote to the backing store", &self.written_back),
            ("object_cache_superseded", "Write-backs skipped because the backing store held a newer version", &self.superseded),
            ("object_cache_writeback_errors", "Failed write-back attempts (each is retried)", &self.writeback_errors),
            ("object_cache_shadows", "Shadow placeholders written to the backing store before acknowledging a cached write", &self.shadows),
            ("object_cache_shadow_errors", "Shadow placeholders that could not be written (the write was acknowledged all the same)", &self.shadow_errors),
            ("object_cache_evictions", "Objects evicted from the object cache", &self.evictions),
            ("object_cache_journal_syncs", "Syncs of the write-back journal: each commits a group of writes, or write-back records on their own", &self.journal_syncs),
        ];
        for (name, help, counter) in counters {
            registry.register(name, help, counter.clone());
        }
        registry.register(
            "object_cache_bytes",
            "Bytes held by the object cache",
            self.bytes.clone(),
        );
        registry.register(
            "object_cache_dirty_bytes",
            "Bytes held by the object cache that are not yet in the backing store",
            self.dirty_bytes.clone(),
        );
        registry.register(
            "object_cache_writebacks_failing",
            "Keys whose write-back to the backing store is failing now (retried until it succeeds; `kiln status` names them)",
            self.writebacks_failing.clone(),
        );
        registry.register(
            "object_cache_capacity_bytes",
            "The object cache's capacity",
            self.capacity_bytes.clone(),
        );
        registry.register(
            "object_cache_lendable_bytes",
            "Memory that live instances booked and their limits leave unused, as far as the node's budget allows: what the cache may borrow",
            self.lendable_bytes.clone(),
        );
        registry.register(
            "object_cache_slack_bytes",
            "The slack pool kept out of the lendable memory for instances coming, going and growing",
            self.slack_bytes.clone(),
        );
        registry.register(
            "object_cache_writeback_seconds",
            "Time from acknowledging a write to its version being in the backing store",
            self.writeback_seconds.clone(),
        );
        registry.register(
            "object_cache_reclaim_seconds",
            "Time the object cache took to give back memory at once because instances reserved more of their bookings (evictions included)",
            self.reclaim_seconds.clone(),
        );
        registry.register(
            "object_cache_resize_seconds",
            "Time a change of the object cache's capacity took",
            self.resize_seconds.clone(),
        );
    }
}
