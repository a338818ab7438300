//! The cache's table: objects in memory, their versions, and what may be evicted.
//!
//! Pure bookkeeping under one lock, no I/O: the S3 layer ([`super::CachedStore`]) and the
//! write-back workers decide, this table remembers. An entry is *dirty* while its latest
//! acknowledged version has not reached the backing store; dirty entries are never evicted.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::objects::checksum::Checksums;
use crate::objects::shared::ObjectAttrs;

/// An object's address.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ObjectKey {
    pub bucket: String,
    pub key: String,
}

impl ObjectKey {
    pub fn new(bucket: impl Into<String>, key: impl Into<String>) -> Self {
        Self {
            bucket: bucket.into(),
            key: key.into(),
        }
    }
}

/// What a GET or HEAD answers besides the bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    /// Without quotes.
    pub etag: String,
    pub modified_ms: i64,
    pub size: u64,
    pub attrs: ObjectAttrs,
    pub checksums: Checksums,
}

impl Meta {
    /// What GetObject, HeadObject and listings answer of it.
    pub(crate) fn stored(&self) -> crate::objects::shared::StoredObject<'_> {
        crate::objects::shared::StoredObject {
            etag: &self.etag,
            modified_ms: self.modified_ms,
            size: self.size,
            attrs: &self.attrs,
            checksums: &self.checksums,
        }
    }
}

/// How an object came into the cache: shrinking evicts persisted outputs before inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Read from the backing store on a miss.
    Input,
    /// Written through the cache.
    Output,
}

struct Entry {
    body: Bytes,
    meta: Arc<Meta>,
    /// The latest acknowledged version (0 for an object read from the backing store).
    version: u64,
    /// The latest version known to be in the backing store.
    persisted: u64,
    /// Queued for (or in) write-back.
    queued: bool,
    origin: Origin,
    /// An intermediate output of this sequence run: never written back, dropped when the run
    /// ends (OFC §6.3).
    run: Option<String>,
    /// A sequence's final output: dropped once written back.
    discard: bool,
    accesses: u32,
    inserted: Instant,
    last_access: Instant,
    /// Its place in the eviction order: the table's clock at its last access.
    seq: u64,
}

/// Persisted outputs are evicted before inputs (OFC §6.4).
fn rank(origin: Origin) -> u8 {
    match origin {
        Origin::Output => 0,
        Origin::Input => 1,
    }
}

impl Entry {
    /// Its key in [`Entries::evictable`].
    fn order(&self) -> (u8, u64) {
        (rank(self.origin), self.seq)
    }

    fn dirty(&self) -> bool {
        self.persisted < self.version
    }

    /// Not evictable: dirty, or an intermediate output of a run in progress.
    fn pinned(&self) -> bool {
        self.dirty() || self.run.is_some()
    }
}

/// A hit.
pub struct Hit {
    pub body: Bytes,
    pub meta: Arc<Meta>,
}

/// A dirty version for the write-back workers.
pub struct DirtyVersion {
    pub body: Bytes,
    pub meta: Arc<Meta>,
    pub version: u64,
}

/// The rules of the periodic sweep (OFC §6.3).
#[derive(Debug, Clone, Copy)]
pub struct SweepRules {
    /// Entries older than this with fewer than `min_accesses` reads go.
    pub period: Duration,
    pub min_accesses: u32,
    /// Entries not read for this long go.
    pub max_idle: Duration,
}

/// Sizes, for status and metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub entries: usize,
    pub bytes: u64,
    pub dirty_bytes: u64,
    /// Sequences' intermediate outputs.
    pub ephemeral_bytes: u64,
    pub capacity: u64,
}

pub struct Entries {
    map: HashMap<ObjectKey, Entry>,
    bytes: u64,
    dirty_bytes: u64,
    ephemeral_bytes: u64,
    capacity: u64,
    /// Bumped by every change of a key's contents, so that a miss that started before it
    /// cannot insert what it read.
    generation: u64,
    misses_in_flight: usize,
    /// Keys changed while misses were in flight, with the generation of the change.
    changed: HashMap<ObjectKey, u64>,
    /// Counts accesses: an entry's `seq`.
    clock: u64,
    /// Entries evicted since [`Entries::drain_evicted`] last asked.
    evicted: u64,
    /// The entries that may be evicted (not pinned), in eviction order: persisted outputs
    /// before inputs, each least recently used first. Eviction takes from the front, so its
    /// cost follows what it evicts, not the table's size.
    evictable: BTreeMap<(u8, u64), ObjectKey>,
    /// The keys of sequences' intermediate outputs, in order, for listings and `end_run`.
    intermediates: BTreeSet<ObjectKey>,
    /// The keys with a version not yet written back, in order: a listing waits for its
    /// bucket's without looking at every entry.
    dirty: BTreeSet<ObjectKey>,
}

impl Entries {
    pub fn new(capacity: u64) -> Self {
        Self {
            map: HashMap::new(),
            bytes: 0,
            dirty_bytes: 0,
            ephemeral_bytes: 0,
            capacity,
            generation: 0,
            misses_in_flight: 0,
            changed: HashMap::new(),
            clock: 0,
            evicted: 0,
            evictable: BTreeMap::new(),
            intermediates: BTreeSet::new(),
            dirty: BTreeSet::new(),
        }
    }

    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    pub fn usage(&self) -> Usage {
        Usage {
            entries: self.map.len(),
            bytes: self.bytes,
            dirty_bytes: self.dirty_bytes,
            ephemeral_bytes: self.ephemeral_bytes,
            capacity: self.capacity,
        }
    }

    /// A read: counts the access.
    pub fn get(&mut self, key: &ObjectKey, now: Instant) -> Option<Hit> {
        self.clock += 1;
        let entry = self.map.get_mut(key)?;
        entry.accesses = entry.accesses.saturating_add(1);
        entry.last_access = now;
        let before = entry.order();
        entry.seq = self.clock;
        if let Some(key) = self.evictable.remove(&before) {
            self.evictable.insert(entry.order(), key);
        }
        Some(Hit {
            body: entry.body.clone(),
            meta: entry.meta.clone(),
        })
    }

    /// An entry's metadata, without counting an access.
    pub fn peek(&self, key: &ObjectKey) -> Option<Arc<Meta>> {
        self.map.get(key).map(|e| e.meta.clone())
    }

    /// Whether `key` has a version not yet in the backing store.
    pub fn is_dirty(&self, key: &ObjectKey) -> bool {
        self.map.get(key).is_some_and(Entry::dirty)
    }

    /// The dirty keys of `bucket` with their latest versions.
    pub fn dirty_in(&self, bucket: &str) -> Vec<(ObjectKey, u64)> {
        self.dirty
            .range(ObjectKey::new(bucket, "")..)
            .take_while(|k| k.bucket == bucket)
            .filter_map(|k| self.map.get(k).map(|e| (k.clone(), e.version)))
            .collect()
    }

    /// Whether version `version` of `key` (or a later one) has reached the backing store, or
    /// the key has left the cache.
    pub fn settled(&self, key: &ObjectKey, version: u64) -> bool {
        self.map.get(key).is_none_or(|e| e.persisted >= version)
    }

    /// A miss is about to read the backing store; returns the generation it starts at.
    pub fn begin_miss(&mut self) -> u64 {
        self.misses_in_flight += 1;
        self.generation
    }

    /// Ends a miss, inserting what it read unless the key changed since `since`, or it does
    /// not fit. Returns whether it was inserted.
    pub fn end_miss(
        &mut self,
        since: u64,
        fetched: Option<(ObjectKey, Bytes, Meta)>,
        now: Instant,
    ) -> bool {
        let inserted = match fetched {
            Some((key, body, meta)) => {
                let fresh = !self.map.contains_key(&key)
                    && self.changed.get(&key).is_none_or(|g| *g <= since);
                if fresh && self.make_room(body.len() as u64) {
                    self.bytes += body.len() as u64;
                    let seq = self.tick();
                    self.evictable
                        .insert((rank(Origin::Input), seq), key.clone());
                    self.map.insert(
                        key,
                        Entry {
                            body,
                            meta: Arc::new(meta),
                            version: 0,
                            persisted: 0,
                            queued: false,
                            origin: Origin::Input,
                            run: None,
                            discard: false,
                            accesses: 1,
                            inserted: now,
                            last_access: now,
                            seq,
                        },
                    );
                    true
                } else {
                    false
                }
            }
            None => false,
        };
        self.misses_in_flight -= 1;
        if self.misses_in_flight == 0 {
            self.changed.clear();
        }
        inserted
    }

    /// Whether `size` more bytes could be held, evicting clean entries if need be (nothing is
    /// evicted by asking).
    pub fn could_hold(&self, key: &ObjectKey, size: u64) -> bool {
        let replaced = self
            .map
            .get(key)
            .filter(|e| e.pinned())
            .map_or(0, |e| e.body.len() as u64);
        let pinned = self.dirty_bytes + self.ephemeral_bytes + size;
        pinned.saturating_sub(replaced) <= self.capacity
    }

    /// Removes `key`'s entry, whatever its state, and its bytes from every count.
    fn take(&mut self, key: &ObjectKey) -> Option<Entry> {
        let entry = self.map.remove(key)?;
        self.evictable.remove(&entry.order());
        let size = entry.body.len() as u64;
        self.bytes -= size;
        if entry.dirty() {
            self.dirty_bytes -= size;
            self.dirty.remove(key);
        }
        if entry.run.is_some() {
            self.ephemeral_bytes -= size;
            self.intermediates.remove(key);
        }
        Some(entry)
    }

    /// A write acknowledged as `version`: the entry becomes dirty. `discard`: drop it once
    /// written back (a sequence's final output). Returns whether the key must be queued for
    /// write-back (it was not already).
    pub fn write(
        &mut self,
        key: ObjectKey,
        body: Bytes,
        meta: Meta,
        version: u64,
        discard: bool,
        now: Instant,
    ) -> bool {
        self.generation += 1;
        let size = body.len() as u64;
        let (persisted, queued) = self
            .take(&key)
            .map_or((0, false), |old| (old.persisted, old.queued));
        self.note_change(&key);
        self.make_room(size);
        self.bytes += size;
        self.dirty_bytes += size;
        self.dirty.insert(key.clone());
        let seq = self.tick();
        self.map.insert(
            key,
            Entry {
                body,
                meta: Arc::new(meta),
                version,
                persisted,
                queued: true,
                origin: Origin::Output,
                run: None,
                discard,
                accesses: 0,
                inserted: now,
                last_access: now,
                seq,
            },
        );
        !queued
    }

    /// An intermediate output of sequence run `run`: held in memory only, until the run ends.
    /// Refused (false) when `key` has a version not yet written back, which must not be
    /// overtaken by one that will never be: the caller writes it durably instead.
    pub fn write_ephemeral(
        &mut self,
        key: ObjectKey,
        body: Bytes,
        meta: Meta,
        run: &str,
        now: Instant,
    ) -> bool {
        if self.is_dirty(&key) {
            return false;
        }
        self.generation += 1;
        let size = body.len() as u64;
        let persisted = self.take(&key).map_or(0, |old| old.persisted);
        self.note_change(&key);
        self.make_room(size);
        self.bytes += size;
        self.ephemeral_bytes += size;
        self.intermediates.insert(key.clone());
        let seq = self.tick();
        self.map.insert(
            key,
            Entry {
                body,
                meta: Arc::new(meta),
                version: persisted,
                persisted,
                queued: false,
                origin: Origin::Output,
                run: Some(run.to_string()),
                discard: false,
                accesses: 0,
                inserted: now,
                last_access: now,
                seq,
            },
        );
        true
    }

    /// Sequence run `run` ended: its intermediate outputs go. Returns how many.
    pub fn end_run(&mut self, run: &str) -> usize {
        let keys: Vec<ObjectKey> = self
            .intermediates
            .iter()
            .filter(|k| {
                self.map
                    .get(k)
                    .is_some_and(|e| e.run.as_deref() == Some(run))
            })
            .cloned()
            .collect();
        for key in &keys {
            self.generation += 1;
            self.note_change(key);
            self.take(key);
        }
        keys.len()
    }

    /// The intermediate outputs of sequence runs in `bucket` whose keys start with `prefix`, in
    /// key order, for listings: they are nowhere else.
    pub fn intermediates(&self, bucket: &str, prefix: &str) -> Vec<(String, Arc<Meta>)> {
        let from = ObjectKey::new(bucket, prefix);
        self.intermediates
            .range(from..)
            .take_while(|k| k.bucket == bucket && k.key.starts_with(prefix))
            .filter_map(|k| self.map.get(k).map(|e| (k.key.clone(), e.meta.clone())))
            .collect()
    }

    /// How many intermediate outputs sequence run `run` holds, and their bytes.
    pub fn run_footprint(&self, run: &str) -> (usize, u64) {
        self.intermediates
            .iter()
            .filter_map(|k| self.map.get(k))
            .filter(|e| e.run.as_deref() == Some(run))
            .fold((0, 0), |(n, bytes), e| (n + 1, bytes + e.body.len() as u64))
    }

    /// `key`'s contents if it is a sequence's intermediate output (no access is counted).
    pub fn intermediate(&self, key: &ObjectKey) -> Option<Hit> {
        self.map.get(key).filter(|e| e.run.is_some()).map(|e| Hit {
            body: e.body.clone(),
            meta: e.meta.clone(),
        })
    }

    /// The latest dirty version of `key`, for write-back.
    pub fn dirty_version(&self, key: &ObjectKey) -> Option<DirtyVersion> {
        self.map
            .get(key)
            .filter(|e| e.dirty())
            .map(|e| DirtyVersion {
                body: e.body.clone(),
                meta: e.meta.clone(),
                version: e.version,
            })
    }

    /// `version` of `key` is in the backing store. Returns whether the key must be queued
    /// again (a later version arrived meanwhile).
    pub fn persisted(&mut self, key: &ObjectKey, version: u64) -> bool {
        let Some(entry) = self.map.get_mut(key) else {
            return false;
        };
        if version > entry.persisted {
            let was_pinned = entry.pinned();
            let was_dirty = entry.dirty();
            entry.persisted = version;
            if was_dirty && !entry.dirty() {
                self.dirty_bytes -= entry.body.len() as u64;
                self.dirty.remove(key);
            }
            if was_pinned && !entry.pinned() {
                self.evictable.insert(entry.order(), key.clone());
            }
        }
        entry.queued = entry.dirty();
        if !entry.dirty() && entry.discard {
            self.take(key);
            return false;
        }
        entry.queued
    }

    /// The write-back of `key` gave up for now (it is retried later): the key leaves the
    /// queue's bookkeeping so that it can be queued again.
    pub fn unqueue(&mut self, key: &ObjectKey) {
        if let Some(entry) = self.map.get_mut(key) {
            entry.queued = false;
        }
    }

    /// Drops a clean entry (its key was written or deleted past the cache).
    pub fn invalidate(&mut self, key: &ObjectKey) {
        self.generation += 1;
        self.note_change(key);
        if self.map.get(key).is_some_and(|e| !e.dirty()) {
            self.take(key);
        }
    }

    /// Drops every clean entry of `bucket`.
    pub fn invalidate_bucket(&mut self, bucket: &str) {
        let keys: Vec<ObjectKey> = self
            .map
            .keys()
            .filter(|k| k.bucket == bucket)
            .cloned()
            .collect();
        for key in keys {
            self.invalidate(&key);
        }
    }

    fn note_change(&mut self, key: &ObjectKey) {
        if self.misses_in_flight > 0 {
            self.changed.insert(key.clone(), self.generation);
        }
    }

    /// Sets the capacity, evicting clean entries to fit: persisted outputs first, then
    /// inputs, each least recently used first. Returns the bytes evicted.
    pub fn set_capacity(&mut self, capacity: u64) -> u64 {
        self.capacity = capacity;
        let before = self.bytes;
        self.make_room(0);
        before - self.bytes
    }

    /// Evicts clean entries until `size` more bytes fit. Returns whether they do.
    fn make_room(&mut self, size: u64) -> bool {
        if self.bytes + size <= self.capacity {
            return true;
        }
        while self.bytes + size > self.capacity {
            let Some((_, key)) = self.evictable.pop_first() else {
                break;
            };
            self.remove_clean(&key);
        }
        self.bytes + size <= self.capacity
    }

    /// How many entries were evicted (to fit, or by the sweep) since the last call.
    pub fn drain_evicted(&mut self) -> u64 {
        std::mem::take(&mut self.evicted)
    }

    fn remove_clean(&mut self, key: &ObjectKey) {
        if self.take(key).is_some() {
            self.evicted += 1;
            self.generation += 1;
            self.note_change(key);
        }
    }

    /// The periodic sweep: evicts clean entries read fewer than `min_accesses` times in their
    /// first period, or idle longer than `max_idle`. Returns how many went.
    pub fn sweep(&mut self, rules: &SweepRules, now: Instant) -> usize {
        let doomed: Vec<ObjectKey> = self
            .map
            .iter()
            .filter(|(_, e)| !e.pinned())
            .filter(|(_, e)| {
                let age = now.saturating_duration_since(e.inserted);
                let idle = now.saturating_duration_since(e.last_access);
                (age >= rules.period && e.accesses < rules.min_accesses) || idle > rules.max_idle
            })
            .map(|(k, _)| k.clone())
            .collect();
        for key in &doomed {
            self.remove_clean(key);
        }
        doomed.len()
    }
}

#[cfg(test)]
mod tests;
