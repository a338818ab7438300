//! S3 event notifications to Lambda functions.
//!
//! ```text
//! PUT ?notification ──▶ store.rs ── config.rs (validate) ──▶ saved.rs (with the bucket)
//!                                                         └─▶ Notifier's map (bucket → rules)
//! PutObject, CopyObject, ... ──▶ store.rs ──▶ the store behind (cache / local / remote)
//!                                   │ acknowledged
//!                                   ▼
//!                  Notifier: matching rules ──▶ event.rs (record) ──▶ EventSink (the
//!                  controller's durable async queue, as an `InvocationType=Event` invoke)
//! ```
//!
//! The event is queued after the store committed the write and before its answer is sent: a
//! crash between the two loses the event of a write that happened (documented in
//! `docs/object-store.md`); an acknowledged write's event is in the queue.

pub mod config;
pub mod event;
pub mod saved;
mod store;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

use s3s::S3Result;

use crate::sync::RwLockExt;
pub use config::{EventKind, FunctionRule};
pub use event::Origin;
use event::{Change, Sequencer, Writer};
use saved::{SaveError, SavedConfigs};
pub use store::{NotifyingStore, NotifyingWrites};

/// Where events go: kiln's functions and their async queue (the controller).
pub trait EventSink: Send + Sync {
    /// What the queue calls the function an ARN names (`name`, or `name:qualifier`), if it
    /// exists.
    fn target(&self, function_arn: &str) -> Option<String>;
    /// Queues `payload` as an Event invocation of `target`, durably, as `Invoke` does.
    fn enqueue(
        &self,
        target: &str,
        payload: &[u8],
    ) -> Result<(), crate::controller::ControllerError>;
}

impl Origin {
    /// The origin of a write kiln made itself (a function's fast path): no request of its own.
    pub fn internal() -> Self {
        Self {
            request_id: rand::random::<u64>() >> 1,
            source_ip: std::net::Ipv4Addr::LOCALHOST.into(),
        }
    }
}

/// Every bucket's rules, and where their events go.
pub struct Notifier {
    rules: RwLock<HashMap<String, Arc<[FunctionRule]>>>,
    /// Whether any bucket has rules: a write to a store without any takes no lock.
    any: AtomicBool,
    saved: Arc<dyn SavedConfigs>,
    /// Serializes configuration changes: each saves, then publishes.
    changes: tokio::sync::Mutex<()>,
    sink: OnceLock<Arc<dyn EventSink>>,
    region: String,
    host_id: &'static str,
    sequencer: Sequencer,
}

impl Notifier {
    /// The notifier of buckets whose configurations `saved` keeps.
    pub fn open(
        saved: Arc<dyn SavedConfigs>,
        region: &str,
        host_id: &'static str,
    ) -> Result<Self, SaveError> {
        let mut rules = HashMap::new();
        for (bucket, json) in saved.load()? {
            match serde_json::from_str::<Vec<FunctionRule>>(&json) {
                Ok(found) if !found.is_empty() => {
                    rules.insert(bucket, found.into());
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::error!(%bucket, "the bucket's notification configuration is unreadable, and ignored: {e}")
                }
            }
        }
        Ok(Self {
            any: AtomicBool::new(!rules.is_empty()),
            rules: RwLock::new(rules),
            saved,
            changes: tokio::sync::Mutex::new(()),
            sink: OnceLock::new(),
            region: region.to_string(),
            host_id,
            sequencer: Sequencer::default(),
        })
    }

    /// Sends events to `sink` from now on (the controller starts after the store).
    pub fn deliver_to(&self, sink: Arc<dyn EventSink>) {
        if self.sink.set(sink).is_err() {
            tracing::warn!("bucket notifications already have somewhere to go");
        }
    }

    /// A bucket's rules, if it has any.
    pub fn rules(&self, bucket: &str) -> Option<Arc<[FunctionRule]>> {
        if !self.any.load(Ordering::Relaxed) {
            return None;
        }
        self.rules.read_locked().get(bucket).cloned()
    }

    /// A bucket's rules when one of them sends a write of one of `kinds` to `key`.
    pub fn sending(
        &self,
        bucket: &str,
        key: &str,
        kinds: &[EventKind],
    ) -> Option<Arc<[FunctionRule]>> {
        self.rules(bucket).filter(|rules| {
            rules
                .iter()
                .any(|r| kinds.iter().any(|k| r.matches(*k, key)))
        })
    }

    fn target(&self, function_arn: &str) -> Option<String> {
        self.sink.get()?.target(function_arn)
    }

    /// Keeps a bucket's rules (none: removes its configuration), then uses them.
    async fn set(&self, bucket: &str, rules: Vec<FunctionRule>) -> S3Result<()> {
        let _held = self.changes.lock().await;
        let json = if rules.is_empty() {
            None
        } else {
            Some(serde_json::to_string(&rules).map_err(store::not_kept)?)
        };
        let saved = self.saved.clone();
        let name = bucket.to_string();
        tokio::task::spawn_blocking(move || saved.save(&name, json.as_deref()))
            .await
            .map_err(store::not_kept)?
            .map_err(store::not_kept)?;
        let mut all = self.rules.write_locked();
        if rules.is_empty() {
            all.remove(bucket);
        } else {
            all.insert(bucket.to_string(), rules.into());
        }
        self.any.store(!all.is_empty(), Ordering::Relaxed);
        Ok(())
    }

    /// Removes the configuration of a bucket that was deleted or created, if it has one.
    async fn forget(&self, bucket: &str) -> S3Result<()> {
        if self.rules(bucket).is_none() {
            return Ok(());
        }
        self.set(bucket, Vec::new()).await
    }

    /// Queues the event of `change` for each rule that sends it. The write is done: a rule
    /// whose function is gone, or a queue that fails, loses that event (logged).
    fn send(
        &self,
        bucket: &str,
        rules: &[FunctionRule],
        change: &Change,
        principal: &str,
        origin: Origin,
    ) {
        let Some(sink) = self.sink.get() else {
            return;
        };
        let writer = Writer {
            region: &self.region,
            bucket,
            principal,
            host_id: self.host_id,
        };
        for rule in rules.iter().filter(|r| r.matches(change.kind, &change.key)) {
            let Some(target) = sink.target(&rule.function_arn) else {
                tracing::warn!(%bucket, function = %rule.function_arn, key = %change.key, "bucket notification not sent: no such function");
                continue;
            };
            let now = chrono::Utc::now();
            let sequencer = self.sequencer.next(now);
            let record = event::record(rule, change, &writer, &origin, now, &sequencer);
            let payload = record.to_string();
            if let Err(e) = sink.enqueue(&target, payload.as_bytes()) {
                tracing::error!(%bucket, function = %rule.function_arn, key = %change.key, "bucket notification not queued: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests;
