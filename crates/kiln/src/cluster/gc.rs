//! Removing from the shared store what no one needs any more: packages no function refers to
//! (`sha256/<hex>.zip`) and the payloads of Events that are gone (`events/<id>`). See
//! docs/cluster.md, "Removing unused objects".
//!
//! One node sweeps: the elected scheduler of the async queue, every `--gc-interval` and soon
//! after a function is deleted. A sweep lists the bucket first, then etcd: an object is a
//! candidate only if it was last written more than `--gc-grace` before the bucket's listing.
//!
//! - **A package** goes if no function record (its `$LATEST` or a published version) names its
//!   digest and no upload of it is in flight. A node that uploads a package first writes
//!   `uploads/<digest>/<node>-<nonce>` on its lease, unless `gc/<digest>` exists, and deletes
//!   it once the function record that names the digest is committed (or the deployment
//!   failed). The sweeper writes `gc/<digest>` on its lease, in a transaction that holds only
//!   if no `uploads/<digest>/` key exists and no function record changed since its listing;
//!   then it deletes the object and its mark. So either the uploader's key came first (the
//!   sweeper's transaction fails) or the sweeper's mark did (the uploader waits until it is
//!   gone, then uploads the package again): a package is never removed under a deployment.
//! - **A payload** goes if no queued Event names it. Its object is written before the Event's
//!   record, with a key of its own (never written twice), so the grace covers the moment
//!   between the two.

use std::collections::HashSet;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use chrono::Utc;
use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use tokio::sync::Notify;

use super::code::package_digest;
use super::code::{SharedCode, SharedCodeError, PAYLOADS};
use super::etcd::{Etcd, EtcdError};
use crate::metrics::KindLabels;

/// How often a sweep runs, and how old an unused object must be to go.
#[derive(Debug, Clone, Copy)]
pub struct GcConfig {
    pub interval: Duration,
    pub grace: Duration,
}

impl Default for GcConfig {
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(300),
            grace: Duration::from_secs(600),
        }
    }
}

/// A sweep that could not be made.
#[derive(Debug, thiserror::Error)]
pub enum GcError {
    #[error(transparent)]
    Etcd(#[from] EtcdError),
    #[error(transparent)]
    Store(#[from] SharedCodeError),
    /// A function record the sweep cannot read: it cannot know what that function uses.
    #[error("the function record {0} cannot be read: nothing removed")]
    Unreadable(String),
}

/// What one sweep removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Swept {
    pub packages: u64,
    pub package_bytes: u64,
    pub payloads: u64,
    pub payload_bytes: u64,
}

/// The packages a function record (its JSON in etcd) uses; `None` if it cannot be read.
pub type References = fn(&[u8]) -> Option<Vec<String>>;

/// The shortest time between two sweeps woken by deletions.
const WAKE_GAP: Duration = Duration::from_secs(5);

/// How long a delete of the store may take: less than the 0.5 s margin within which a node
/// fences itself before its lease can expire, so the mark outlives the delete.
const DELETE_TIMEOUT: Duration = Duration::from_millis(400);

/// How long an upload waits for a sweep to be done with its package.
const MARK_WAIT: Duration = Duration::from_secs(15);

/// The sweeper (see the module's comment).
pub struct Collector {
    etcd: Etcd,
    /// The cluster's prefix and a `/`.
    root: String,
    shared: SharedCode,
    config: GcConfig,
    references: References,
    wake: Notify,
    removed_objects: Family<KindLabels, Counter>,
    removed_bytes: Family<KindLabels, Counter>,
}

/// An upload in flight: its key in etcd is deleted when this is dropped.
pub struct UploadPin {
    etcd: Etcd,
    key: String,
    lease: i64,
}

impl UploadPin {
    /// The lease the record lives on.
    pub fn lease(&self) -> i64 {
        self.lease
    }
}

impl Drop for UploadPin {
    fn drop(&mut self) {
        let (etcd, key) = (self.etcd.clone(), std::mem::take(&mut self.key));
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                // Left behind, it goes with the node's lease.
                if let Err(e) = etcd.delete(&key).await {
                    tracing::warn!("upload record {key}: {e}");
                }
            });
        }
    }
}

impl Collector {
    pub fn new(
        etcd: Etcd,
        prefix: &str,
        shared: SharedCode,
        config: GcConfig,
        references: References,
        removed_objects: Family<KindLabels, Counter>,
        removed_bytes: Family<KindLabels, Counter>,
    ) -> Self {
        Self {
            etcd,
            root: format!("{}/", prefix.trim_end_matches('/')),
            shared,
            config,
            references,
            wake: Notify::new(),
            removed_objects,
            removed_bytes,
        }
    }

    /// Asks for a sweep soon (a function was deleted); only the sweeping node acts on it.
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    fn mark_key(&self, digest: &str) -> String {
        format!("{}gc/{digest}", self.root)
    }

    fn uploads_prefix(&self, digest: &str) -> String {
        format!("{}uploads/{digest}/", self.root)
    }

    /// Records an upload of package `digest` by `node` on `lease`, once no sweep is removing
    /// it; the record lasts as long as the returned pin.
    pub async fn pin_upload(
        &self,
        digest: &str,
        node: &str,
        lease: i64,
    ) -> Result<UploadPin, String> {
        let key = format!(
            "{}{node}-{:016x}",
            self.uploads_prefix(digest),
            rand::random::<u64>()
        );
        let mark = self.mark_key(digest);
        let started = Instant::now();
        loop {
            let txn = Txn::new()
                .when([Compare::version(mark.as_str(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(
                    key.as_str(),
                    Vec::new(),
                    Some(etcd_client::PutOptions::new().with_lease(lease)),
                )]);
            let done = self
                .etcd
                .txn("record an upload", txn)
                .await
                .map_err(|e| e.to_string())?;
            if done.succeeded() {
                return Ok(UploadPin {
                    etcd: self.etcd.clone(),
                    key,
                    lease,
                });
            }
            if started.elapsed() > MARK_WAIT {
                return Err(format!(
                    "package {digest} is being removed from the shared store: try again"
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Sweeps every interval (and soon after a wake) while `scheduling` names the lease this
    /// node was elected scheduler with.
    pub fn start(self: &Arc<Self>, scheduling: impl Fn() -> Option<i64> + Send + Sync + 'static) {
        let this: Weak<Self> = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut last: Option<Instant> = None;
            loop {
                let Some(collector) = this.upgrade() else {
                    return;
                };
                let interval = collector.config.interval;
                let woken = tokio::select! {
                    () = tokio::time::sleep(interval) => false,
                    () = collector.wake.notified() => true,
                };
                let least = WAKE_GAP.min(interval);
                if woken {
                    if let Some(gap) = last.map(|at| at.elapsed()).filter(|e| *e < least) {
                        tokio::time::sleep(least - gap).await;
                    }
                }
                let Some(lease) = scheduling() else {
                    continue;
                };
                last = Some(Instant::now());
                let still = || scheduling() == Some(lease);
                match collector.sweep(lease, &still).await {
                    Ok(swept) => collector.report(swept),
                    Err(e) => tracing::warn!("shared store sweep: {e}"),
                }
            }
        });
    }

    fn report(&self, swept: Swept) {
        for (kind, n, bytes) in [
            ("package", swept.packages, swept.package_bytes),
            ("payload", swept.payloads, swept.payload_bytes),
        ] {
            let labels = KindLabels { kind: kind.into() };
            self.removed_objects.get_or_create(&labels).inc_by(n);
            self.removed_bytes.get_or_create(&labels).inc_by(bytes);
        }
        if swept != Swept::default() {
            tracing::info!(
                "removed from the shared store {} unused packages ({} bytes) and {} payloads of \
                 Events that are gone ({} bytes)",
                swept.packages,
                swept.package_bytes,
                swept.payloads,
                swept.payload_bytes
            );
        }
    }

    /// One sweep (see the module's comment), made while `still()` holds.
    pub async fn sweep(
        &self,
        lease: i64,
        still: &(dyn Fn() -> bool + Sync),
    ) -> Result<Swept, GcError> {
        let mut swept = Swept::default();
        // The bucket first: anything written after this is not a candidate.
        let listed_at = Utc::now();
        let objects = self.shared.list("").await?;
        let grace = chrono::Duration::from_std(self.config.grace)
            .unwrap_or_else(|_| chrono::Duration::days(365));
        let old: Vec<_> = objects
            .into_iter()
            .filter(|o| o.last_modified + grace < listed_at)
            .collect();
        if old.is_empty() {
            return Ok(swept);
        }
        let functions_prefix = format!("{}functions/", self.root);
        let (functions, revision) = self.etcd.list(&functions_prefix).await?;
        let mut used = HashSet::new();
        for entry in &functions {
            let digests = (self.references)(&entry.value)
                .ok_or_else(|| GcError::Unreadable(entry.key.clone()))?;
            used.extend(digests);
        }
        let (uploads, _) = self.etcd.list(&format!("{}uploads/", self.root)).await?;
        let uploading: HashSet<&str> = uploads
            .iter()
            .filter_map(|e| e.key.strip_prefix(&self.root)?.split('/').nth(1))
            .collect();
        let (queue, _) = self.etcd.list(&format!("{}queue/", self.root)).await?;
        let mut queued = HashSet::new();
        for entry in &queue {
            // An Event that cannot be read keeps every payload: it may name any of them.
            let value: serde_json::Value = match serde_json::from_slice(&entry.value) {
                Ok(value) => value,
                Err(_) => return Err(GcError::Unreadable(entry.key.clone())),
            };
            if let Some(object) = value.get("payloadObject").and_then(|o| o.as_str()) {
                queued.insert(object.to_string());
            }
        }
        let mut stale = false;
        for object in old {
            if !still() {
                break;
            }
            if let Some(digest) = package_digest(&object.key) {
                if stale || used.contains(digest) || uploading.contains(digest) {
                    continue;
                }
                let mark = self.mark_key(digest);
                let txn = Txn::new()
                    .when([
                        Compare::mod_revision(
                            functions_prefix.as_str(),
                            CompareOp::Less,
                            revision + 1,
                        )
                        .with_prefix(),
                        Compare::version(self.uploads_prefix(digest), CompareOp::Equal, 0)
                            .with_prefix(),
                    ])
                    .and_then([TxnOp::put(
                        mark.as_str(),
                        Vec::new(),
                        Some(etcd_client::PutOptions::new().with_lease(lease)),
                    )]);
                match self.etcd.txn("mark a package", txn).await {
                    Ok(marked) if marked.succeeded() => {}
                    Ok(_) => {
                        // An upload began, or a function changed: the next sweep looks again.
                        stale = true;
                        continue;
                    }
                    Err(e) => {
                        // What was removed so far is still reported.
                        tracing::warn!("shared store sweep: {e}");
                        stale = true;
                        continue;
                    }
                }
                if still() && self.delete(&object.key).await {
                    swept.packages += 1;
                    swept.package_bytes += object.size;
                }
                self.unmark(mark);
            } else if object.key.starts_with(PAYLOADS) {
                if queued.contains(&object.key) {
                    continue;
                }
                if self.delete(&object.key).await {
                    swept.payloads += 1;
                    swept.payload_bytes += object.size;
                }
            }
        }
        Ok(swept)
    }

    /// Deletes a mark, trying again until etcd takes it: uploads of its package wait for it
    /// (it would also go with this node's lease).
    fn unmark(&self, mark: String) {
        let etcd = self.etcd.clone();
        tokio::spawn(async move {
            while let Err(e) = etcd.delete(&mark).await {
                tracing::warn!("sweep mark {mark}: {e}");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
    }

    /// Deletes an object within [`DELETE_TIMEOUT`]; whether it went.
    async fn delete(&self, key: &str) -> bool {
        match tokio::time::timeout(DELETE_TIMEOUT, self.shared.delete_object(key)).await {
            Ok(Ok(())) => true,
            Ok(Err(e)) => {
                tracing::warn!("shared store sweep: {e}");
                false
            }
            Err(_) => {
                tracing::warn!("shared store sweep: the delete of {key} took too long");
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::package_digest;

    #[test]
    fn only_package_keys_name_a_digest() {
        assert_eq!(package_digest("sha256/abc.zip"), Some("abc"));
        assert_eq!(package_digest("events/0123"), None);
        assert_eq!(package_digest("sha256/abc"), None);
    }
}
