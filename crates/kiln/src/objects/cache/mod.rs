//! The opportunistic object cache (OFC §6): object-store data in memory, in front of the
//! backing store, with write-back.
//!
//! ```text
//! s3s::S3Service ─▶ CachedStore (dyn s3s::S3)
//!                    ├─ reads:  Entries (memory) ─miss─▶ backend, then cached (≤ max object)
//!                    ├─ writes: Journal (fsync, group commit) ─▶ Entries (dirty) ─▶ acknowledged
//!                    │           └─ write-back workers ─▶ backend (in order per key, version
//!                    │              checked) ─▶ journal `done` ─▶ clean
//!                    └─ the rest: through to the backend, after the keys it touches are clean
//! ```
//!
//! Consistency through kiln: every reader sees the latest acknowledged version, because a key
//! with a version not yet in the backing store stays in memory (dirty entries are never
//! evicted), and every operation the cache does not answer itself (listings, copies, deletes,
//! multipart completion, conditional or encrypted writes) waits until the keys it touches are
//! clean and holds them while it runs. An outside client of the backing store sees a version
//! once its write-back finished (`kiln_object_cache_writeback_seconds`).

pub mod cost;
pub mod entries;
mod journal;
mod lists;
mod metrics;
mod peek;
mod runs;
pub mod sizing;
mod store;
mod writeback;

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use s3s::dto::*;
use s3s::{s3_error, S3Error, S3ErrorCode, S3Request, S3Result, S3};
use tokio::sync::{mpsc, Notify};

use cost::Costs;
pub use cost::IoTimes;
use entries::{Entries, Meta};
pub use entries::{ObjectKey, SweepRules, Usage};
use journal::Journal;
pub use metrics::{CacheMemory, CacheMetrics};
pub use store::CachedStore;
pub use writeback::{FailingWriteback, WritebackStatus};

use super::ObjectStoreError;
use crate::function::{InvocationTags, Stage, StorageTag};
use crate::objects::shared::internal;
use crate::sync::LockExt;

/// The user-metadata key that carries a version in the backing store. Reserved: it is not
/// accepted from clients nor shown to them through kiln.
pub const VERSION_METADATA: &str = "kiln-version";
/// The user-metadata key that carries an image's format and size (`png 640x480`), extracted when
/// it was written back. Reserved like [`VERSION_METADATA`].
pub const MEDIA_METADATA: &str = "kiln-media";
/// The user-metadata key that marks a shadow placeholder: an empty object that stands for a
/// version whose payload is still in the cache (`--object-cache-shadow BUCKET`). Reserved.
pub const SHADOW_METADATA: &str = "kiln-shadow";
/// Objects whose features (size, media metadata) the cache remembers, cached or not.
const KNOWN_OBJECTS: usize = 100_000;

/// What the cache knows of an object, for the memory and cache-benefit models (OFC §5.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectFeatures {
    pub size: u64,
    pub media: Option<super::media::Media>,
}

/// The features of the objects that passed through (bounded: the least recently written or
/// read is forgotten first).
struct Known {
    map: lru::LruCache<ObjectKey, ObjectFeatures>,
    /// Objects whose first bytes were looked at as they streamed through, and held no image
    /// header (or the one they held is in `map`): not worth another look.
    looked: HashSet<ObjectKey>,
}

impl Default for Known {
    fn default() -> Self {
        Self::bounded(KNOWN_OBJECTS)
    }
}

impl Known {
    fn bounded(objects: usize) -> Self {
        Self {
            map: lru::LruCache::new(
                std::num::NonZeroUsize::new(objects).unwrap_or(std::num::NonZeroUsize::MIN),
            ),
            looked: HashSet::new(),
        }
    }

    fn insert(&mut self, key: ObjectKey, features: ObjectFeatures) {
        self.looked.remove(&key);
        if let Some((old, _)) = self.map.push(key.clone(), features) {
            if old != key {
                self.looked.remove(&old);
            }
        }
    }
}

/// The cache's settings.
#[derive(Debug, Clone)]
pub struct CacheConfig {
    /// Memory for cached objects, in bytes.
    pub capacity_bytes: u64,
    /// Larger objects are not cached (OFC: 10 MB).
    pub max_object_bytes: u64,
    pub sweep: SweepRules,
    /// Concurrent write-backs.
    pub writeback_workers: usize,
    /// The longest an operation waits for a key's write-back (listings, deletes, copies and
    /// the other operations passed to the backing store) before it answers
    /// `ServiceUnavailable`; the write stays acknowledged and its write-back goes on.
    pub writeback_wait: Duration,
    /// Admit every object (up to the size limit) rather than what the functions' benefit
    /// models choose.
    pub admit_all: bool,
    /// Admit nothing (a draining cache).
    pub admit_none: bool,
    /// Buckets whose cached writes put a shadow placeholder in the backing store before they
    /// are acknowledged (OFC §6.2): outside readers see at once that a new version exists.
    pub shadow_buckets: HashSet<String>,
}

impl Default for CacheConfig {
    fn default() -> Self {
        Self {
            capacity_bytes: 512 * 1024 * 1024,
            max_object_bytes: 10 * 1024 * 1024,
            sweep: SweepRules {
                period: Duration::from_secs(300),
                min_accesses: 5,
                max_idle: Duration::from_secs(30 * 60),
            },
            writeback_workers: 8,
            writeback_wait: Duration::from_secs(10),
            admit_all: false,
            admit_none: false,
            shadow_buckets: HashSet::new(),
        }
    }
}

impl CacheConfig {
    /// A cache that only writes back what its journal holds: no capacity, nothing admitted
    /// (for a kiln started with the cache off over a journal that still holds writes).
    pub fn draining() -> Self {
        Self {
            capacity_bytes: 0,
            admit_none: true,
            ..Self::default()
        }
    }
}

/// Whether the journal in `dir` holds acknowledged writes not known to be in the backing store.
pub fn journal_holds_writes(dir: &std::path::Path) -> bool {
    journal::pending_writes(dir) > 0
}

/// Per-key locks: held by a cached write while it is journaled, and by an operation passed to
/// the backing store while it runs, so that the backing store sees a key's writes in the order
/// they were acknowledged.
#[derive(Default)]
struct KeyLocks {
    map: Mutex<std::collections::HashMap<ObjectKey, Arc<tokio::sync::Mutex<()>>>>,
}

struct KeyGuard<'a> {
    locks: &'a KeyLocks,
    key: ObjectKey,
    lock: Arc<tokio::sync::Mutex<()>>,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl Drop for KeyGuard<'_> {
    fn drop(&mut self) {
        self.guard.take();
        let mut map = self.locks.map.locked();
        // The map's reference and ours: nobody else holds or waits for the lock.
        if Arc::strong_count(&self.lock) == 2 {
            map.remove(&self.key);
        }
    }
}

impl KeyLocks {
    async fn lock(&self, key: &ObjectKey) -> KeyGuard<'_> {
        let lock = {
            let mut map = self.map.locked();
            map.entry(key.clone()).or_default().clone()
        };
        let guard = lock.clone().lock_owned().await;
        KeyGuard {
            locks: self,
            key: key.clone(),
            lock,
            guard: Some(guard),
        }
    }
}

/// The shared state of the cache: the S3 layer and the background tasks hold it.
pub struct ObjectCache {
    config: CacheConfig,
    backend: Box<dyn S3>,
    entries: Mutex<Entries>,
    journal: Journal,
    locks: KeyLocks,
    /// Woken whenever a version reaches the backing store.
    persisted: Notify,
    queue: mpsc::UnboundedSender<ObjectKey>,
    last_version: AtomicU64,
    /// Buckets known to exist in the backing store.
    buckets: Mutex<HashSet<String>>,
    /// Whether each bucket asked about has had its versioning set (asked of the backing store
    /// once, then kept up to date by PutBucketVersioning through the cache): the cache holds
    /// nothing of such a bucket, whose versions only the store can number.
    versioned: Mutex<std::collections::HashMap<String, bool>>,
    /// When each dirty key's oldest version not yet written back was acknowledged (and that
    /// version), for the write-back time: one entry per dirty key.
    acknowledged: Mutex<std::collections::HashMap<ObjectKey, (u64, Instant)>>,
    /// The backing store's latency, and each function's time in object-store calls.
    costs: Mutex<Costs>,
    /// Functions whose objects are not admitted (their benefit model says the cache would not
    /// pay off).
    refused: Mutex<HashSet<String>>,
    known: Mutex<Known>,
    /// Sequence runs whose intermediate outputs wait for a retry that resumes the run.
    kept_runs: Mutex<std::collections::HashMap<String, runs::Kept>>,
    /// Keys whose write-back is failing, with what it failed with.
    failing: Mutex<std::collections::HashMap<ObjectKey, writeback::Failure>>,
    metrics: CacheMetrics,
    journal_dir: PathBuf,
}

/// The cache's counters and gauges at one moment (the console's history of the cache).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheReading {
    pub hits: u64,
    pub misses: u64,
    /// Objects taken in: reads' objects kept, and writes acknowledged.
    pub admitted: u64,
    pub evictions: u64,
    pub written_back: u64,
    pub memory: CacheMemory,
    pub dirty_bytes: u64,
    /// How long the oldest acknowledged write not yet in the backing store has waited, in
    /// milliseconds (0 with none).
    pub lag_ms: u64,
    /// The write-back journal's segments on disk, in bytes.
    pub journal_bytes: u64,
}

impl std::fmt::Debug for ObjectCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectCache")
            .field("config", &self.config)
            .field("usage", &self.usage())
            .finish_non_exhaustive()
    }
}

fn now_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

impl ObjectCache {
    /// Opens the cache over `backend`: replays the journal in `dir` and starts writing back
    /// what it held. Needs a tokio runtime.
    pub fn open(
        dir: PathBuf,
        config: CacheConfig,
        backend: Box<dyn S3>,
    ) -> Result<Arc<Self>, ObjectStoreError> {
        let metrics = CacheMetrics::default();
        let journal_dir = dir.join("journal");
        let (journal, recovered) = Journal::open(&journal_dir, metrics.journal_syncs.clone())
            .map_err(|e| ObjectStoreError::Io(dir.clone(), e))?;
        let (queue, rx) = mpsc::unbounded_channel();
        metrics.capacity_bytes.set(config.capacity_bytes as i64);
        let cache = Arc::new(Self {
            entries: Mutex::new(Entries::new(config.capacity_bytes)),
            config,
            backend,
            journal,
            locks: KeyLocks::default(),
            persisted: Notify::new(),
            queue,
            last_version: AtomicU64::new(recovered.last_version),
            buckets: Mutex::new(HashSet::new()),
            versioned: Mutex::default(),
            acknowledged: Mutex::default(),
            costs: Mutex::default(),
            refused: Mutex::default(),
            known: Mutex::default(),
            kept_runs: Mutex::default(),
            failing: Mutex::default(),
            metrics,
            journal_dir,
        });
        if !recovered.pending.is_empty() {
            tracing::info!(
                "object cache: {} acknowledged writes to write back from the journal",
                recovered.pending.len()
            );
        }
        let now = Instant::now();
        for pending in recovered.pending {
            let key = pending.key.clone();
            let queue = cache.entries().write(
                pending.key,
                pending.body,
                pending.meta,
                pending.version,
                false,
                now,
            );
            if queue {
                let _ = cache.queue.send(key);
            }
        }
        cache.refresh_gauges();
        writeback::start(&cache, rx);
        Ok(cache)
    }

    fn entries(&self) -> MutexGuard<'_, Entries> {
        self.entries.locked()
    }

    pub fn metrics(&self) -> &CacheMetrics {
        &self.metrics
    }

    fn costs(&self) -> MutexGuard<'_, Costs> {
        self.costs.locked()
    }

    /// The time `function`'s object-store calls took so far, and what they would have taken at
    /// the backing store (monotonic; the controller takes differences around an invocation).
    pub fn io_times(&self, function: &str) -> IoTimes {
        self.costs().times(function)
    }

    /// Whether objects `function` reads or writes are admitted (by default they are): the
    /// decision of its cache-benefit model, for its current invocations.
    pub fn set_admission(&self, function: &str, admit: bool) {
        let mut refused = self.refused.locked();
        if admit {
            refused.remove(function);
        } else if !refused.contains(function) {
            refused.insert(function.to_string());
        }
    }

    /// What is known of an object: its size, and an image's format and dimensions (recorded
    /// when it was written back or read, without asking the backing store).
    pub fn object_features(&self, bucket: &str, key: &str) -> Option<ObjectFeatures> {
        let key = ObjectKey::new(bucket, key);
        if let Some(known) = self.known().map.get(&key) {
            // Asked for by an invocation: it stays known the longest.
            return Some(known.clone());
        }
        let entries = self.entries();
        let hit = entries.peek(&key)?;
        Some(ObjectFeatures {
            size: hit.size,
            media: None,
        })
    }

    fn known(&self) -> MutexGuard<'_, Known> {
        self.known.locked()
    }

    /// Records an object's features.
    fn learn_object(&self, key: ObjectKey, features: ObjectFeatures) {
        self.known().insert(key, features);
    }

    /// Records the features of a whole object the backing store answered for and the cache
    /// passed through (not admitted, or too large): its size, and the media metadata kiln
    /// stored with it when it wrote it back. Free: both are in the answer's headers. Call it
    /// before the reserved metadata is stripped.
    pub(super) fn learn_from_headers(
        &self,
        key: &ObjectKey,
        size: Option<i64>,
        metadata: Option<&s3s::dto::Metadata>,
    ) {
        let Some(size) = size.and_then(|s| u64::try_from(s).ok()) else {
            return;
        };
        let media = metadata
            .and_then(|m| m.get(MEDIA_METADATA))
            .and_then(|v| super::media::Media::decode(v));
        // What a read through the cache learnt from the bytes themselves is kept while the
        // size agrees: the headers only carry what kiln wrote.
        let mut known = self.known();
        if let Some(seen) = known.map.get(key) {
            if seen.size == size && (media.is_none() || seen.media == media) {
                return;
            }
        }
        known.insert(key.clone(), ObjectFeatures { size, media });
    }

    /// Whether the cache knows `key`'s size but not whether it is an image: a body streamed
    /// through is then worth a look at its first bytes.
    pub(super) fn wants_media(&self, key: &ObjectKey) -> bool {
        let known = self.known();
        known.map.peek(key).is_some_and(|k| k.media.is_none()) && !known.looked.contains(key)
    }

    /// Records what the first bytes of `key`'s body, of `size` bytes, held: an image's media
    /// metadata, or none.
    pub(super) fn learn_media(
        &self,
        key: &ObjectKey,
        size: u64,
        media: Option<super::media::Media>,
    ) {
        let mut known = self.known();
        let Some(features) = known.map.get_mut(key) else {
            return;
        };
        if features.size == size {
            if media.is_some() {
                features.media = media;
            }
            known.looked.insert(key.clone());
        }
    }

    /// The admission the configuration fixes for every object, if it does: all (up to the size
    /// limit), or none (a draining cache); else the functions' benefit models decide.
    pub fn configured_admission(&self) -> Option<bool> {
        if self.config.admit_none {
            Some(false)
        } else if self.config.admit_all {
            Some(true)
        } else {
            None
        }
    }

    /// Whether a request's objects are admitted: by the configuration, else by the decision its
    /// invocation carries (`invocation`), else by its function's latest one.
    fn admits(&self, function: Option<&str>, invocation: Option<bool>) -> bool {
        if let Some(fixed) = self.configured_admission() {
            return fixed;
        }
        invocation.unwrap_or_else(|| function.is_none_or(|f| !self.refused.locked().contains(f)))
    }

    pub fn usage(&self) -> Usage {
        self.entries().usage()
    }

    /// Sets the capacity (the sizing's decision), evicting clean objects to fit: persisted
    /// outputs first, then inputs by LRU. Dirty objects stay until written back.
    pub fn set_capacity(&self, bytes: u64) {
        let started = Instant::now();
        let evicted = self.entries().set_capacity(bytes);
        self.metrics
            .resize_seconds
            .observe(started.elapsed().as_secs_f64());
        self.metrics.capacity_bytes.set(bytes as i64);
        if evicted > 0 {
            self.refresh_gauges();
        }
    }

    /// Instances took memory back: the capacity falls to `bound` at once if it is above it
    /// (the next sizing tick may raise it again).
    pub fn give_back(&self, bound: u64) {
        let started = Instant::now();
        let evicted = {
            // Checked and lowered under one lock: a sizing tick cannot slip in between.
            let mut entries = self.entries();
            if bound >= entries.usage().capacity {
                return;
            }
            entries.set_capacity(bound)
        };
        let elapsed = started.elapsed().as_secs_f64();
        self.metrics.reclaim_seconds.observe(elapsed);
        self.metrics.resize_seconds.observe(elapsed);
        self.metrics.capacity_bytes.set(bound as i64);
        if evicted > 0 {
            self.refresh_gauges();
        }
    }

    /// One periodic sweep (OFC §6.3); returns how many objects went. Runs kept for a retry
    /// past their time end here.
    pub fn sweep(&self) -> usize {
        let now = Instant::now();
        self.end_expired_runs(now);
        let evicted = self.entries().sweep(&self.config.sweep, now);
        self.refresh_gauges();
        evicted
    }

    /// The counters and gauges now. Reads the journal's directory (a few segments): once a
    /// second at most, off any request's path.
    pub fn reading(&self) -> CacheReading {
        let m = &self.metrics;
        let now = Instant::now();
        let lag = self
            .acknowledged
            .locked()
            .values()
            .map(|(_, at)| now.saturating_duration_since(*at))
            .max()
            .unwrap_or_default();
        let journal_bytes = std::fs::read_dir(&self.journal_dir)
            .map(|dir| {
                dir.filter_map(Result::ok)
                    .filter_map(|e| e.metadata().ok())
                    .filter(|m| m.is_file())
                    .map(|m| m.len())
                    .sum()
            })
            .unwrap_or(0);
        CacheReading {
            hits: m.hits.get(),
            misses: m.misses.get(),
            admitted: m.admitted.get() + m.cached_writes.get(),
            evictions: m.evictions.get(),
            written_back: m.written_back.get(),
            memory: m.memory(),
            dirty_bytes: self.usage().dirty_bytes,
            lag_ms: lag.as_millis() as u64,
            journal_bytes,
        }
    }

    fn refresh_gauges(&self) {
        let (usage, evicted) = {
            let mut entries = self.entries();
            (entries.usage(), entries.drain_evicted())
        };
        self.metrics.evictions.inc_by(evicted);
        self.metrics.bytes.set(usage.bytes as i64);
        self.metrics.dirty_bytes.set(usage.dirty_bytes as i64);
    }

    /// The next version: above every earlier one, across restarts too (the clock, when the
    /// journal holds none).
    fn next_version(&self) -> u64 {
        let floor = now_micros();
        let previous = self
            .last_version
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| {
                Some((v + 1).max(floor))
            })
            .unwrap_or_default();
        (previous + 1).max(floor)
    }

    /// Makes the journal's records of past write-backs durable before something else changes
    /// the backing store: a restart must not write those versions back over it.
    pub(super) async fn sync_journal(&self) -> S3Result<()> {
        self.journal.sync().await.map_err(|e| {
            tracing::error!("object cache: syncing the journal: {e}");
            s3s::s3_error!(
                InternalError,
                "the object cache's journal could not be synced"
            )
        })
    }

    /// Runs an operation that changes `keys` on the backing store, then drops what the cache
    /// held of them.
    async fn write_through<T>(
        &self,
        keys: Vec<ObjectKey>,
        operation: impl std::future::Future<Output = S3Result<T>>,
    ) -> S3Result<T> {
        self.metrics.bypassed.inc();
        let guards = self.exclusive(keys.clone()).await?;
        self.sync_journal().await?;
        let result = operation.await;
        {
            let mut entries = self.entries();
            for key in &keys {
                entries.invalidate(key);
            }
        }
        drop(guards);
        self.refresh_gauges();
        result
    }

    /// Makes a checked write visible: an intermediate of a sequence run in memory only (true),
    /// or a version in the journal and then in memory, queued for write-back (false).
    async fn commit_write(
        self: Arc<Self>,
        key: ObjectKey,
        body: Bytes,
        meta: Meta,
        tag: Option<StorageTag>,
        length: u64,
    ) -> S3Result<bool> {
        let guard = self.locks.lock(&key).await;
        if let Some(StorageTag {
            run,
            stage: Stage::Intermediate,
        }) = &tag
        {
            // A sequence's intermediate output: in memory until the run ends, never written back.
            let kept = self.entries().write_ephemeral(
                key.clone(),
                body.clone(),
                meta.clone(),
                run,
                Instant::now(),
            );
            if kept {
                return Ok(true);
            }
        }
        let discard = matches!(
            tag,
            Some(StorageTag {
                stage: Stage::Final,
                ..
            })
        );
        let version = self.next_version();
        self.journal
            .put(&key, version, &meta, &body)
            .await
            .map_err(|e| internal("the object cache's journal", e))?;
        if self.config.shadow_buckets.contains(&key.bucket) {
            self.put_shadow(&key, &meta, version).await;
        }
        self.acknowledged
            .locked()
            .entry(key.clone())
            .or_insert((version, Instant::now()));
        self.learn_object(
            key.clone(),
            ObjectFeatures {
                size: length,
                media: None,
            },
        );
        let queue = self
            .entries()
            .write(key.clone(), body, meta, version, discard, Instant::now());
        drop(guard);
        if queue {
            let _ = self.queue.send(key);
        }
        Ok(false)
    }

    /// Writes the placeholder of `version` of `key`: an empty object carrying the version and
    /// the shadow mark, so that a reader of the backing store sees at once that a new version
    /// exists (OFC's synchronous shadow object). Its failure is counted, not returned: the write
    /// is durable in the journal either way.
    async fn put_shadow(&self, key: &ObjectKey, meta: &Meta, version: u64) {
        let mut metadata: Metadata = std::collections::HashMap::new();
        metadata.insert(VERSION_METADATA.into(), version.to_string());
        metadata.insert(SHADOW_METADATA.into(), "pending".into());
        let input = PutObjectInput {
            bucket: key.bucket.clone(),
            key: key.key.clone(),
            body: Some(StreamingBlob::from(s3s::Body::from(Bytes::new()))),
            content_length: Some(0),
            content_type: meta.attrs.content_type.clone(),
            metadata: Some(metadata),
            ..Default::default()
        };
        let mut request = internal_request(input);
        request.method = http::Method::PUT;
        match self.backend.put_object(request).await {
            Ok(_) => {
                self.metrics.shadows.inc();
            }
            Err(e) => {
                self.metrics.shadow_errors.inc();
                tracing::warn!(
                    "object cache: the shadow placeholder of {}/{} (version {version}): {e}",
                    key.bucket,
                    key.key
                );
            }
        }
    }

    /// Whether `bucket` exists in the backing store (asked once, then remembered).
    async fn require_bucket(&self, bucket: &str) -> S3Result<()> {
        if self.known_bucket(bucket) {
            return Ok(());
        }
        self.backend
            .head_bucket(internal_request(HeadBucketInput {
                bucket: bucket.to_string(),
                ..Default::default()
            }))
            .await
            .map_err(|e| {
                if is_not_found(&e) {
                    s3_error!(NoSuchBucket)
                } else {
                    e
                }
            })?;
        self.remember_bucket(bucket, true);
        Ok(())
    }

    /// Whether `bucket`'s versioning was ever set (Enabled or Suspended): then every request on
    /// its objects goes to the backing store, which alone numbers versions. A bucket that does
    /// not exist is not versioned (the operation's own answer says it does not exist).
    pub(super) async fn versioned(&self, bucket: &str) -> bool {
        if let Some(known) = self.versioned.locked().get(bucket) {
            return *known;
        }
        let asked = self
            .backend
            .get_bucket_versioning(internal_request(GetBucketVersioningInput {
                bucket: bucket.to_string(),
                ..Default::default()
            }))
            .await;
        let versioned = match asked {
            Ok(answer) => answer.output.status.is_some(),
            Err(e) if is_not_found(&e) => return false,
            // The store cannot be asked (it is down): the cache goes on as for a bucket never
            // versioned, which is what lets it acknowledge writes meanwhile, and asks again
            // next time. A write it takes for a versioned bucket is numbered by the store when
            // it is written back; only its answer lacks the id.
            Err(e) => {
                tracing::debug!(%bucket, "object cache: bucket versioning not known: {e}");
                return false;
            }
        };
        self.remember_versioned(bucket, Some(versioned));
        versioned
    }

    /// Records (or, with None, forgets) whether `bucket` is versioned.
    pub(super) fn remember_versioned(&self, bucket: &str, versioned: Option<bool>) {
        let mut known = self.versioned.locked();
        match versioned {
            Some(v) => known.insert(bucket.to_string(), v),
            None => known.remove(bucket),
        };
    }

    fn known_bucket(&self, bucket: &str) -> bool {
        self.buckets.locked().contains(bucket)
    }

    fn remember_bucket(&self, bucket: &str, exists: bool) {
        let mut buckets = self.buckets.locked();
        if exists {
            buckets.insert(bucket.to_string());
        } else {
            buckets.remove(bucket);
        }
    }
}

/// A request the cache itself sends to the backing store.
pub(crate) fn internal_request<T>(input: T) -> S3Request<T> {
    S3Request {
        input,
        method: http::Method::GET,
        uri: http::Uri::from_static("/"),
        headers: http::HeaderMap::new(),
        extensions: http::Extensions::new(),
        credentials: None,
        region: None,
        service: None,
        trailing_headers: None,
    }
}

/// The function whose key signed a request, if a function's did.
fn function_of<T>(req: &S3Request<T>) -> Option<String> {
    super::keys::function_named_by(&req.credentials.as_ref()?.access_key)
}

/// The admission decision that the invocation behind a sandbox's request carries, if any.
fn invocation_admits<T>(req: &S3Request<T>) -> Option<bool> {
    req.extensions.get::<InvocationTags>()?.admit
}

fn is_not_found(e: &S3Error) -> bool {
    matches!(e.code(), S3ErrorCode::NoSuchKey | S3ErrorCode::NoSuchBucket)
        || e.status_code() == Some(http::StatusCode::NOT_FOUND)
}

/// Removes the reserved keys from user metadata.
fn strip_reserved(metadata: &mut Option<Metadata>) {
    if let Some(m) = metadata {
        m.remove(VERSION_METADATA);
        m.remove(MEDIA_METADATA);
        m.remove(SHADOW_METADATA);
        if m.is_empty() {
            *metadata = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_objects_forget_the_least_recently_used_first() {
        let key = |k: &str| ObjectKey::new("b", k);
        let features = |size| ObjectFeatures { size, media: None };
        let mut known = Known::bounded(2);
        known.insert(key("a"), features(1));
        known.insert(key("b"), features(2));
        known.looked.insert(key("b"));
        // Read since: "a" outlives "b", which was written later.
        assert_eq!(known.map.get(&key("a")), Some(&features(1)));
        known.insert(key("c"), features(3));
        assert!(known.map.peek(&key("b")).is_none() && !known.looked.contains(&key("b")));
        assert_eq!(known.map.peek(&key("a")), Some(&features(1)));
        // Written again: the same entry, nothing forgotten.
        known.insert(key("c"), features(4));
        assert_eq!(known.map.len(), 2);
        assert_eq!(known.map.peek(&key("c")), Some(&features(4)));
    }
}
