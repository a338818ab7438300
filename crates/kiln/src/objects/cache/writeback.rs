//! Write-back: dirty versions to the backing store, in order per key, and the periodic sweep.
//!
//! A key is in the queue at most once, and is taken by one worker at a time, so the versions of
//! one key reach the backing store one after another; a worker always writes the latest
//! version (versions overtaken while queued are never written: OFC's coalescing). The version
//! travels as user metadata (`kiln-version`), and a worker does not overwrite a newer version
//! it finds there (the version check). A failed write-back is retried with backoff, for as long
//! as it takes: an acknowledged write is never dropped.

use std::sync::Arc;
use std::time::{Duration, Instant};

use s3s::dto::*;
use s3s::S3Result;
use tokio::sync::mpsc;

use super::entries::{DirtyVersion, ObjectKey};
use super::{internal_request, is_not_found, ObjectCache, VERSION_METADATA};
use crate::objects::local::set_checksums;

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
                return;
            };
            match self.persist(&key, &dirty).await {
                Ok(()) => break dirty,
                Err(e) => {
                    self.metrics.writeback_errors.inc();
                    tracing::warn!(
                        "object cache: writing back {}/{} (version {}) failed, retrying in {:?}: {e}",
                        key.bucket,
                        key.key,
                        dirty.version,
                        retry
                    );
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
        let requeue = self.entries().persisted(&key, dirty.version);
        // From the oldest acknowledgement this write-back covers (it wrote the latest version).
        let covered = {
            let mut acknowledged = self.acknowledged.lock().unwrap_or_else(|p| p.into_inner());
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
        crate::objects::local::set_attrs!(input, attrs);
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
