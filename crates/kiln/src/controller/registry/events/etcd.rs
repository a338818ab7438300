//! The queue in etcd, cluster mode's: [`EtcdEvents`].
//!
//! Each accepted Event is `queue/<function>/<id>` (ids sort by acceptance time), its
//! payload inline up to [`INLINE_PAYLOAD`] bytes, else first written to the shared store
//! (`events/<id>`). Every node delivers the events it owns: the first of the live `up` nodes
//! in the event id's rendezvous order (so deliveries spread over the nodes without a claim
//! race). One node, elected with etcd's election API (`scheduler`), also delivers any event
//! still waiting [`STRAGGLER`] after it was due (its owner died, or the nodes disagreed about
//! the member list for a moment). Each delivery holds `claims/<id>` on the delivering node's
//! lease, so when that node dies its claims go with its lease and the event is delivered again:
//! at least once, as on a single node. A node that is fenced stops taking events at once. An
//! event that failed every attempt is recorded under `failures/<request id>`. A sequence's
//! event that stopped part way runs from the start on its retry (the run's intermediates live
//! in one node's memory).

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use base64::Engine;
use chrono::{DateTime, Utc};
use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use serde::{Deserialize, Serialize};

use super::super::{Progress, QueuedEvent, RegistryError, Requeue};
use super::EventQueue;
use crate::cluster::code::SharedCode;
use crate::cluster::etcd::Etcd;
use crate::cluster::Membership;
use crate::sync::LockExt;

/// Payloads up to this size are kept in the queue's record; larger ones in the shared store.
pub const INLINE_PAYLOAD: usize = 4096;

/// An event's record in etcd.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct EventRecord {
    request_id: String,
    function: String,
    /// The payload, base64, when it is small enough.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    payload: Option<String>,
    /// Else its key in the shared store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    payload_object: Option<String>,
    attempts: u32,
    throttles: u32,
    not_before: DateTime<Utc>,
    enqueued_at: DateTime<Utc>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct FailureRecord {
    function: String,
    error: String,
    failed_at: DateTime<Utc>,
}

/// How long a node works from one listing of the queue: each claim checks the event is still
/// as listed, so a stale listing costs a failed claim, never a wrong delivery.
const RELIST: Duration = Duration::from_millis(100);

/// How long past its time an event waits for its owner before the scheduler delivers it.
const STRAGGLER: chrono::Duration = chrono::Duration::seconds(1);

/// An event as the scheduler last listed it.
#[derive(Clone)]
struct Listed {
    id: String,
    key: String,
    mod_revision: i64,
    record: EventRecord,
}

/// A listing of the queue: when it was made, the events (oldest first), the live `up` nodes.
type Listing = (std::time::Instant, Vec<Listed>, Vec<String>);

/// An event this node claimed and is delivering.
struct Claimed {
    key: String,
    claim: String,
    record: EventRecord,
}

/// The queue in etcd (see the module's comment).
pub struct EtcdEvents {
    etcd: Etcd,
    /// The cluster's prefix and a `/`.
    root: String,
    shared: SharedCode,
    membership: OnceLock<Arc<Membership>>,
    /// The lease this node was elected scheduler with, while it is.
    scheduler: Mutex<Option<i64>>,
    claimed: Mutex<HashMap<i64, Claimed>>,
    /// This node's last listing of the queue (oldest first), when it was made, and the live
    /// `up` nodes then (who owns which event).
    listing: Mutex<Option<Listing>>,
    next_id: AtomicI64,
    /// Events in the queue at this node's last look.
    depth: AtomicU64,
}

/// The node that delivers event `id`: the first of `up` in the id's rendezvous order.
fn owner<'a>(id: &str, up: &'a [String]) -> Option<&'a str> {
    up.iter()
        .max_by_key(|node| crate::cluster::router::rendezvous(id, node))
        .map(String::as_str)
}

fn block<F: std::future::Future>(request: F) -> F::Output {
    tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(request))
}

impl EtcdEvents {
    pub fn new(etcd: Etcd, prefix: &str, shared: SharedCode) -> Self {
        Self {
            etcd,
            root: format!("{}/", prefix.trim_end_matches('/')),
            shared,
            membership: OnceLock::new(),
            scheduler: Mutex::new(None),
            claimed: Mutex::new(HashMap::new()),
            listing: Mutex::new(None),
            next_id: AtomicI64::new(1),
            depth: AtomicU64::new(0),
        }
    }

    /// Starts campaigning to be the scheduler, on this node's lease.
    pub fn attach(self: &Arc<Self>, membership: Arc<Membership>) {
        if self.membership.set(membership).is_err() {
            return;
        }
        let this = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                let Some(events) = this.upgrade() else { return };
                events.campaign_once().await;
            }
        });
    }

    fn membership(&self) -> Option<&Arc<Membership>> {
        self.membership.get()
    }

    /// One round of the election: waits for a live lease, campaigns until elected or the lease
    /// changes, then schedules until the lease is no longer live.
    async fn campaign_once(&self) {
        const POLL: Duration = Duration::from_millis(250);
        let Some(membership) = self.membership().cloned() else {
            return;
        };
        let Some(lease) = membership.live_lease() else {
            tokio::time::sleep(POLL).await;
            return;
        };
        let name = format!("{}scheduler", self.root);
        let lease_changes = async {
            while membership.live_lease() == Some(lease) {
                tokio::time::sleep(POLL).await;
            }
        };
        let leader = tokio::select! {
            leader = self.etcd.campaign(&name, membership.node_id(), lease) => leader,
            () = lease_changes => return,
        };
        let leader = match leader {
            Ok(leader) => leader,
            Err(e) => {
                tracing::debug!("scheduler election: {e}");
                tokio::time::sleep(POLL * 2).await;
                return;
            }
        };
        tracing::info!("this node schedules the cluster's async invocations");
        *self.scheduler.locked() = Some(lease);
        while membership.live_lease() == Some(lease) {
            tokio::time::sleep(POLL).await;
        }
        *self.scheduler.locked() = None;
        tracing::info!("this node no longer schedules async invocations (its lease changed)");
        let _ = self.etcd.resign(leader).await;
    }

    /// The lease this node delivers events on, while it can vouch for it.
    fn delivering(&self) -> Option<i64> {
        self.membership()?.live_lease()
    }

    /// This node's id and the lease it can vouch for, if it has joined and is not fenced.
    pub fn node_lease(&self) -> Option<(String, i64)> {
        let membership = self.membership()?;
        Some((membership.node_id().to_string(), membership.live_lease()?))
    }

    /// Whether this node is the scheduler and can vouch for the lease it was elected with.
    pub fn scheduling(&self) -> Option<i64> {
        let lease = (*self.scheduler.locked())?;
        let live = self.membership()?.live_lease();
        (live == Some(lease)).then_some(lease)
    }

    fn new_event_id() -> String {
        let micros = Utc::now().timestamp_micros().max(0) as u64;
        format!("{micros:016x}{:08x}", rand::random::<u32>())
    }

    fn decode(&self, key: &str, value: &[u8]) -> Option<EventRecord> {
        serde_json::from_slice(value)
            .map_err(|e| tracing::error!("unreadable queued event {key}: {e}"))
            .ok()
    }

    fn payload(&self, record: &EventRecord) -> Result<Vec<u8>, RegistryError> {
        match (&record.payload, &record.payload_object) {
            (Some(inline), _) => base64::engine::general_purpose::STANDARD
                .decode(inline)
                .map_err(|e| RegistryError::Corrupt(format!("event {}: {e}", record.request_id))),
            (None, Some(object)) => Ok(block(self.shared.get_object(object))?),
            (None, None) => Ok(Vec::new()),
        }
    }

    fn take_claimed(&self, id: i64) -> Option<Claimed> {
        self.claimed.locked().remove(&id)
    }

    fn forget_payload(&self, record: &EventRecord) {
        if let Some(object) = record.payload_object.clone() {
            let shared = self.shared.clone();
            tokio::spawn(async move {
                let _ = shared.delete_object(&object).await;
            });
        }
    }
}

impl EventQueue for EtcdEvents {
    fn enqueue(
        &self,
        request_id: &str,
        function: &str,
        payload: &[u8],
    ) -> Result<i64, RegistryError> {
        let id = Self::new_event_id();
        let now = Utc::now();
        let mut record = EventRecord {
            request_id: request_id.to_string(),
            function: function.to_string(),
            payload: None,
            payload_object: None,
            attempts: 0,
            throttles: 0,
            not_before: now,
            enqueued_at: now,
        };
        if payload.len() <= INLINE_PAYLOAD {
            record.payload = Some(base64::engine::general_purpose::STANDARD.encode(payload));
        } else {
            // The payload first: the record that refers to it is what acknowledges the event.
            let object = format!("events/{id}");
            block(
                self.shared
                    .put_object(&object, bytes::Bytes::copy_from_slice(payload)),
            )?;
            record.payload_object = Some(object);
        }
        let key = format!("{}queue/{function}/{id}", self.root);
        let value =
            serde_json::to_vec(&record).map_err(|e| RegistryError::Corrupt(e.to_string()))?;
        block(self.etcd.put(&key, value, 0))?;
        Ok(0)
    }

    fn due_events_capped(
        &self,
        limit: usize,
        busy: &[(i64, String)],
        cap: &dyn Fn(&str) -> usize,
    ) -> Result<Vec<QueuedEvent>, RegistryError> {
        let Some(lease) = self.delivering() else {
            return Ok(Vec::new());
        };
        if limit == 0 {
            return Ok(Vec::new());
        }
        let scheduler = self.scheduling().is_some();
        let node = self
            .membership()
            .map(|m| m.node_id().to_string())
            .unwrap_or_default();
        let fresh = self
            .listing
            .locked()
            .as_ref()
            .is_some_and(|(at, _, _)| at.elapsed() < RELIST);
        if !fresh {
            let up: Vec<String> = self
                .membership()
                .map(|m| m.status().nodes)
                .unwrap_or_default()
                .into_iter()
                .filter(|n| n.state == crate::cluster::NodeState::Up)
                .map(|n| n.id)
                .collect();
            let (entries, _) = block(self.etcd.list(&format!("{}queue/", self.root)))?;
            self.depth.store(entries.len() as u64, Ordering::Relaxed);
            let mut listed: Vec<Listed> = entries
                .iter()
                .filter_map(|e| {
                    Some(Listed {
                        id: e.key.rsplit('/').next()?.to_string(),
                        key: e.key.clone(),
                        mod_revision: e.mod_revision,
                        record: self.decode(&e.key, &e.value)?,
                    })
                })
                .collect();
            // Oldest first across functions: ids sort by acceptance time.
            listed.sort_by(|a, b| a.id.cmp(&b.id));
            *self.listing.locked() = Some((std::time::Instant::now(), listed, up));
        }
        let held: Vec<String> = self
            .claimed
            .locked()
            .values()
            .map(|c| c.key.clone())
            .collect();
        let now = Utc::now();
        let due: Vec<Listed> = self
            .listing
            .locked()
            .as_ref()
            .map(|(_, listed, up)| {
                listed
                    .iter()
                    .filter(|l| !held.contains(&l.key) && l.record.not_before <= now)
                    .filter(|l| {
                        owner(&l.id, up) == Some(node.as_str())
                            || (scheduler && l.record.not_before + STRAGGLER <= now)
                    })
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        let mut running: HashMap<String, usize> = HashMap::new();
        for (_, function) in busy {
            *running.entry(function.clone()).or_default() += 1;
        }
        let mut out = Vec::new();
        let mut tried = Vec::new();
        for Listed {
            id,
            key,
            mod_revision,
            record,
        } in due
        {
            if out.len() == limit {
                break;
            }
            let n = running.entry(record.function.clone()).or_default();
            if *n >= cap(&record.function) {
                continue;
            }
            let claim = format!("{}claims/{id}", self.root);
            tried.push(key.clone());
            // Still as listed (not delivered, nor written back by a retry) and unclaimed.
            let txn = Txn::new()
                .when([
                    Compare::mod_revision(key.as_str(), CompareOp::Equal, mod_revision),
                    Compare::version(claim.as_str(), CompareOp::Equal, 0),
                ])
                .and_then([TxnOp::put(
                    claim.as_str(),
                    node.clone(),
                    Some(etcd_client::PutOptions::new().with_lease(lease)),
                )]);
            if !block(self.etcd.txn("claim event", txn))?.succeeded() {
                // Delivered or claimed by another node meanwhile.
                continue;
            }
            let payload = match self.payload(&record) {
                Ok(payload) => payload,
                Err(e) => {
                    // Left claimed until this node's lease goes, then tried again.
                    tracing::error!("queued event {key}: {e}");
                    continue;
                }
            };
            *n += 1;
            let local = self.next_id.fetch_add(1, Ordering::Relaxed);
            out.push(QueuedEvent {
                id: local,
                request_id: record.request_id.clone(),
                function: record.function.clone(),
                payload,
                attempts: record.attempts,
                not_before: record.not_before,
                throttles: record.throttles,
                enqueued_at: record.enqueued_at,
                resume: None,
            });
            self.claimed
                .locked()
                .insert(local, Claimed { key, claim, record });
        }
        // Claimed or gone: either way not to be tried again from this listing.
        if let Some((_, listed, _)) = self.listing.locked().as_mut() {
            listed.retain(|l| !tried.contains(&l.key));
        }
        Ok(out)
    }

    fn complete_event(&self, id: i64) -> Result<(), RegistryError> {
        let Some(claimed) = self.take_claimed(id) else {
            return Ok(());
        };
        let txn = Txn::new().and_then([
            TxnOp::delete(claimed.key.as_str(), None),
            TxnOp::delete(claimed.claim.as_str(), None),
        ]);
        block(self.etcd.txn("complete event", txn))?;
        self.forget_payload(&claimed.record);
        Ok(())
    }

    fn retry_event(
        &self,
        id: i64,
        not_before: DateTime<Utc>,
        why: Requeue,
        _resume: Option<&Progress>,
    ) -> Result<(), RegistryError> {
        let Some(mut claimed) = self.take_claimed(id) else {
            return Ok(());
        };
        match why {
            Requeue::Failed => claimed.record.attempts += 1,
            Requeue::Throttled => claimed.record.throttles += 1,
            Requeue::Interrupted => {}
        }
        claimed.record.not_before = not_before;
        let value = serde_json::to_vec(&claimed.record)
            .map_err(|e| RegistryError::Corrupt(e.to_string()))?;
        // Not if the event went meanwhile (its function was deleted).
        let txn = Txn::new()
            .when([Compare::version(
                claimed.key.as_str(),
                CompareOp::Greater,
                0,
            )])
            .and_then([
                TxnOp::put(claimed.key.as_str(), value, None),
                TxnOp::delete(claimed.claim.as_str(), None),
            ])
            .or_else([TxnOp::delete(claimed.claim.as_str(), None)]);
        block(self.etcd.txn("retry event", txn))?;
        Ok(())
    }

    fn fail_event(&self, event: &QueuedEvent, error: &str) -> Result<(), RegistryError> {
        let Some(claimed) = self.take_claimed(event.id) else {
            return Ok(());
        };
        let failure = serde_json::to_vec(&FailureRecord {
            function: event.function.clone(),
            error: error.to_string(),
            failed_at: Utc::now(),
        })
        .map_err(|e| RegistryError::Corrupt(e.to_string()))?;
        let txn = Txn::new().and_then([
            TxnOp::put(
                format!("{}failures/{}", self.root, event.request_id),
                failure,
                None,
            ),
            TxnOp::delete(claimed.key.as_str(), None),
            TxnOp::delete(claimed.claim.as_str(), None),
        ]);
        block(self.etcd.txn("fail event", txn))?;
        self.forget_payload(&claimed.record);
        Ok(())
    }

    fn queue_depth(&self) -> Result<u64, RegistryError> {
        Ok(self.depth.load(Ordering::Relaxed))
    }

    fn failure(&self, request_id: &str) -> Result<Option<String>, RegistryError> {
        let key = format!("{}failures/{request_id}", self.root);
        let Some(entry) = block(self.etcd.get(&key))? else {
            return Ok(None);
        };
        let record: FailureRecord = serde_json::from_slice(&entry.value)
            .map_err(|e| RegistryError::Corrupt(format!("{key}: {e}")))?;
        Ok(Some(record.error))
    }

    fn resumes(&self) -> bool {
        // The run's intermediates are in this node's memory; the retry may run elsewhere.
        false
    }

    fn drop_events(&self, function: &str) -> Result<Vec<String>, RegistryError> {
        let prefix = format!("{}queue/{function}/", self.root);
        // Listed first: an Event accepted between the two is dropped too, and its payload
        // left to the shared store's sweep.
        let (entries, _) = block(self.etcd.list(&prefix))?;
        block(self.etcd.delete_prefix(&prefix))?;
        for entry in entries {
            if let Some(record) = self.decode(&entry.key, &entry.value) {
                self.forget_payload(&record);
            }
        }
        Ok(Vec::new())
    }
}
