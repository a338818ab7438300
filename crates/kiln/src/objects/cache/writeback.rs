//! Write-back: dirty versions to the backing store, in order per key, and the periodic sweep.
//!
//! A key is in the queue at most once, and is taken by one worker at a time, so the versions of
//! one key reach the backing store one after another; a worker always writes the latest
//! version (versions overtaken while queued are never written: OFC's coalescing). The version
//! travels as user metadata (`kiln-version`), and a worker does not overwrite a newer version
//! it finds there (the version check). A failed write-back is retried with backoff, for as long
//! as it takes: an acknowledged write is never dropped.
//!
//! A write-back that keeps failing is surfaced: logged when it starts failing and when it
//! recovers, counted in `kiln_object_cache_writebacks_failing`, listed by `kiln status`. An
//! operation that must wait for a key's write-back (a listing, a delete, a copy) waits at most
//! `writeback_wait`, then answers `ServiceUnavailable` naming the key: nothing waits forever
//! on a backing store that refuses a write.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use s3s::dto::*;
use s3s::{S3Error, S3Result};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use super::entries::{DirtyVersion, ObjectKey};
use super::{internal_request, is_not_found, KeyGuard, ObjectCache, VERSION_METADATA};
use crate::objects::shared::set_checksums;
use crate::sync::LockExt;

const FIRST_RETRY: Duration = Duration::from_millis(100);
const LAST_RETRY: Duration = Duration::from_secs(30);

/// Starts the workers and the sweep; they end when the cache is dropped.
pub(super) fn start(cache: &Arc<ObjectCache>, rx: mpsc::UnboundedReceiver<ObjectKey>) {
    let rx = Arc::new(tokio::sync::Mutex::new(rx));
    for _ in 0..cache.config.writeback_workers.max(1) {
        let (cache, rx) = (Arc::downgrade(cache), rx.clone());
        tokio::spawn(async move {
            loop {
                let Some(key) = rx.lock().await.recv().await else {
                    return;
                };
                let Some(cache) = cache.upgrade() else {
                    return;
                };
                cache.write_back(key).await;
            }
        });
    }
    let weak = Arc::downgrade(cache);
    let period = cache.config.sweep.period;
    tokio::spawn(async move {
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        loop {
            tick.tick().await;
            let Some(cache) = weak.upgrade() else {
                return;
            };
            let evicted = cache.sweep();
            if evicted > 0 {
                tracing::debug!("object cache: the sweep evicted {evicted} objects");
            }
        }
    });
}

/// A key whose write-back is failing.
#[derive(Debug, Clone)]
pub(super) struct Failure {
    since: SystemTime,
    attempts: u64,
    version: u64,
    error: String,
}

/// A write-back that is failing, as `kiln status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailingWriteback {
    pub bucket: String,
    pub key: String,
    pub version: u64,
    pub attempts: u64,
    /// When the first attempt of this spell failed, in milliseconds since the epoch.
    pub since_ms: u64,
    /// What the last attempt failed with.
    pub error: String,
}

/// What the cache has yet to write back, and what of it is failing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WritebackStatus {
    pub dirty_bytes: u64,
    pub failing: Vec<FailingWriteback>,
}

/// An S3 error in one line: its code and message.
fn describe(e: &S3Error) -> String {
    match e.message() {
        Some(m) if !m.is_empty() => format!("{}: {m}", e.code().as_str()),
        _ => e.code().as_str().to_string(),
    }
}

/// The version a backing-store object carries, if kiln wrote it.
fn version_of(metadata: Option<&Metadata>) -> Option<u64> {
    metadata?.get(VERSION_METADATA)?.parse().ok()
}

/// Whether a backing-store object is a shadow placeholder (its payload still to come).
fn is_shadow(metadata: Option<&Metadata>) -> bool {
    metadata.is_some_and(|m| m.contains_key(super::SHADOW_METADATA))
}

impl ObjectCache {
    /// Writes the latest dirty version of `key` back, then records it as done.
    pub(super) async fn write_back(&self, key: ObjectKey) {
        let mut retry = FIRST_RETRY;
        let dirty = loop {
            let Some(dirty) = self.entries().dirty_version(&key) else {
                self.entries().unqueue(&key);
                self.recovered(&key);
                return;
            };
            match self.persist(&key, &dirty).await {
                Ok(()) => break dirty,
                Err(e) => {
                    self.metrics.writeback_errors.inc();
                    self.failed(&key, dirty.version, &e, retry);
                    tokio::time::sleep(retry).await;
                    retry = (retry * 2).min(LAST_RETRY);
                }
            }
        };
        if let Err(e) = self.journal.done(&key, dirty.version).await {
            // The version is in the backing store; a restart would write it again, which the
            // version check makes harmless.
            tracing::error!("object cache: recording a write-back in the journal: {e}");
        }
        self.recovered(&key);
        let requeue = self.entries().persisted(&key, dirty.version);
        // From the oldest acknowledgement this write-back covers (it wrote the latest version).
        let covered = {
            let mut acknowledged = self.acknowledged.locked();
            match acknowledged.get(&key) {
                Some((oldest, _)) if *oldest <= dirty.version => acknowledged.remove(&key),
                _ => None,
            }
        };
        if let Some((_, at)) = covered {
            self.metrics
                .writeback_seconds
                .observe(at.elapsed().as_secs_f64());
        }
        self.metrics.written_back.inc();
        self.refresh_gauges();
        self.persisted.notify_waiters();
        if requeue {
            let _ = self.queue.send(key);
        }
    }

    /// Records a failed attempt; the first of a spell is logged as a warning.
    fn failed(&self, key: &ObjectKey, version: u64, e: &S3Error, retry: Duration) {
        let error = describe(e);
        let first = {
            let mut failing = self.failing();
            let first = !failing.contains_key(key);
            let failure = failing.entry(key.clone()).or_insert_with(|| Failure {
                since: SystemTime::now(),
                attempts: 0,
                version,
                error: String::new(),
            });
            failure.attempts += 1;
            failure.version = version;
            failure.error.clone_from(&error);
            self.metrics.writebacks_failing.set(failing.len() as i64);
            first
        };
        if first {
            tracing::warn!(
                "object cache: writing back {:?} in bucket {} (version {version}) failed; the write \
                 stays acknowledged and is retried until it succeeds (kiln status lists it): {error}",
                key.key,
                key.bucket,
            );
        } else {
            tracing::debug!(
                "object cache: writing back {:?} in bucket {} failed again, next try in {retry:?}: {error}",
                key.key,
                key.bucket,
            );
        }
    }

    /// Ends a spell of failures of `key`'s write-back, if there was one.
    fn recovered(&self, key: &ObjectKey) {
        let ended = {
            let mut failing = self.failing();
            let ended = failing.remove(key);
            if ended.is_some() {
                self.metrics.writebacks_failing.set(failing.len() as i64);
            }
            ended
        };
        if let Some(f) = ended {
            tracing::info!(
                "object cache: {:?} in bucket {} written back after {} failed attempts",
                key.key,
                key.bucket,
                f.attempts
            );
        }
    }

    fn failing(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectKey, Failure>> {
        self.failing.locked()
    }

    /// What is still to be written back, and the write-backs that are failing (oldest first).
    pub fn writeback_status(&self) -> WritebackStatus {
        let mut failing: Vec<FailingWriteback> = self
            .failing()
            .iter()
            .map(|(key, f)| FailingWriteback {
                bucket: key.bucket.clone(),
                key: key.key.clone(),
                version: f.version,
                attempts: f.attempts,
                since_ms: f
                    .since
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64),
                error: f.error.clone(),
            })
            .collect();
        failing
            .sort_by(|a, b| (a.since_ms, &a.bucket, &a.key).cmp(&(b.since_ms, &b.bucket, &b.key)));
        WritebackStatus {
            dirty_bytes: self.usage().dirty_bytes,
            failing,
        }
    }

    /// The error of an operation that waited for `key`'s write-back past its bound.
    fn not_written_back(&self, key: &ObjectKey) -> S3Error {
        let cause = match self.failing().get(key) {
            Some(f) => format!(
                "; it has failed {} times, last with {}",
                f.attempts, f.error
            ),
            None => String::new(),
        };
        let mut e = S3Error::with_message(
            s3s::S3ErrorCode::ServiceUnavailable,
            format!(
                "the object cache has not yet written {:?} in bucket {} back to the backing store \
                 within {:?}{cause}; the write is kept and retried, try again later",
                key.key, key.bucket, self.config.writeback_wait
            ),
        );
        e.set_status_code(http::StatusCode::SERVICE_UNAVAILABLE);
        e
    }

    fn wait_deadline(&self) -> tokio::time::Instant {
        tokio::time::Instant::now() + self.config.writeback_wait
    }

    /// Waits until `key` has no version that is not in the backing store, at most until
    /// `deadline`.
    async fn clean_by(&self, key: &ObjectKey, deadline: tokio::time::Instant) -> S3Result<()> {
        loop {
            let notified = self.persisted.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if !self.entries().is_dirty(key) {
                return Ok(());
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Err(self.not_written_back(key));
            }
        }
    }

    /// Waits until `key` has no version that is not in the backing store (within the bound).
    pub(super) async fn until_clean(&self, key: &ObjectKey) -> S3Result<()> {
        self.clean_by(key, self.wait_deadline()).await
    }

    /// Waits until every version of `bucket` acknowledged so far is in the backing store
    /// (within the bound).
    pub(super) async fn until_bucket_settled(&self, bucket: &str) -> S3Result<()> {
        let deadline = self.wait_deadline();
        let dirty = self.entries().dirty_in(bucket);
        for (key, version) in dirty {
            loop {
                let notified = self.persisted.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if self.entries().settled(&key, version) {
                    break;
                }
                if tokio::time::timeout_at(deadline, notified).await.is_err() {
                    return Err(self.not_written_back(&key));
                }
            }
        }
        Ok(())
    }

    /// Takes `keys` for an operation on the backing store: once none of them is dirty, holds
    /// them so that no cached write can be acknowledged until the operation ended.
    pub(super) async fn exclusive(&self, mut keys: Vec<ObjectKey>) -> S3Result<Vec<KeyGuard<'_>>> {
        keys.sort();
        keys.dedup();
        let deadline = self.wait_deadline();
        loop {
            for key in &keys {
                self.clean_by(key, deadline).await?;
            }
            let mut guards = Vec::with_capacity(keys.len());
            for key in &keys {
                guards.push(self.locks.lock(key).await);
            }
            let entries = self.entries();
            if keys.iter().all(|k| !entries.is_dirty(k)) {
                drop(entries);
                return Ok(guards);
            }
        }
    }

    /// One attempt: the version check, then the PUT.
    async fn persist(&self, key: &ObjectKey, dirty: &DirtyVersion) -> S3Result<()> {
        let head = self
            .backend
            .head_object(internal_request(HeadObjectInput {
                bucket: key.bucket.clone(),
                key: key.key.clone(),
                ..Default::default()
            }))
            .await;
        match head {
            Ok(found) => {
                // A newer version is there, or this one already (not merely its placeholder).
                let metadata = found.output.metadata.as_ref();
                let there = version_of(metadata).unwrap_or(0);
                if there > dirty.version || (there == dirty.version && !is_shadow(metadata)) {
                    self.metrics.superseded.inc();
                    return Ok(());
                }
            }
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(e),
        }
        let meta = &dirty.meta;
        let attrs = &meta.attrs;
        let mut metadata: Metadata = attrs.metadata.clone().into_iter().collect();
        metadata.insert(VERSION_METADATA.into(), dirty.version.to_string());
        // Media metadata, extracted here, in the background, and stored with the object.
        let media = crate::objects::media::Media::of(&dirty.body);
        if let Some(media) = &media {
            metadata.insert(super::MEDIA_METADATA.into(), media.encode());
        }
        self.learn_object(
            key.clone(),
            super::ObjectFeatures {
                size: dirty.body.len() as u64,
                media,
            },
        );
        let mut input = PutObjectInput {
            bucket: key.bucket.clone(),
            key: key.key.clone(),
            body: Some(StreamingBlob::from(s3s::Body::from(dirty.body.clone()))),
            content_length: Some(dirty.body.len() as i64),
            metadata: Some(metadata),
            ..Default::default()
        };
        crate::objects::shared::set_attrs!(input, attrs);
        set_checksums!(input, &meta.checksums);
        let mut request = internal_request(input);
        request.method = http::Method::PUT;
        let started = Instant::now();
        let out = self.backend.put_object(request).await?;
        self.costs().sample(
            super::cost::Op::Put,
            dirty.body.len() as u64,
            started.elapsed().as_nanos() as u64,
        );
        let etag = out.output.e_tag.as_ref().map(|e| e.value().to_string());
        if etag.as_deref().is_some_and(|e| e != meta.etag) {
            tracing::debug!(
                "object cache: the backing store gave {}/{} another ETag ({:?} for {}) after {:?}",
                key.bucket,
                key.key,
                etag,
                meta.etag,
                started.elapsed()
            );
        }
        Ok(())
    }
}
