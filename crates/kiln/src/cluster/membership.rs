//! Membership: this node's record on a lease, its keep-alives and fencing, the member list.
//!
//! - **Join.** A lease of `--node-lease-ttl` seconds, then `<prefix>/nodes/<id>` bound to it.
//! - **Keep-alive** every TTL/3 but at least every second (every 250 ms after a failure). The send time of the last
//!   acknowledged keep-alive is what fencing is judged by: etcd renews a lease for a full TTL
//!   from when it *received* the keep-alive, which is after it was sent.
//! - **Fencing.** Once TTL − 0.5 s have passed since that send time, the lease may have expired
//!   without this node knowing: it reports `fenced`. The next keep-alive that gets through is
//!   not trusted; the node takes a new lease, moves its record onto it and revokes the old one.
//! - **Death** of another node: its record disappears when its lease expires, and every
//!   node's watch of `nodes/` reports it gone.
//! - **Drain.** `<prefix>/drain/<id>` (no lease: it outlives restarts) asks node `id` to take
//!   no new placements; the node itself writes `draining` in its record, as only it writes it.
//! - **Leave.** On shutdown the record says `leaving`; once in-flight work has finished the
//!   lease is revoked and the record goes with it.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::etcd::{Entry, Etcd, EtcdError, WatchUpdate};
use super::members::{Members, NodeRecord, NodeState, NodeView, RecordState};
use super::{ClusterConfig, ClusterError};
use crate::sync::LockExt;

/// A node is fenced this long before its lease could have expired.
pub const FENCE_MARGIN: Duration = Duration::from_millis(500);
/// Keep-alives are tried this often after one failed.
const RETRY_PERIOD: Duration = Duration::from_millis(250);
/// Keep-alives are sent at least this often, whatever the lease: when etcd loses its leader,
/// the election (about 1 s, 2–3 s on a loaded machine) must fit in what is left of the lease.
const MAX_KEEP_ALIVE_PERIOD: Duration = Duration::from_secs(1);

/// How often a lease of `ttl` is kept alive, and how long one keep-alive may take.
pub fn keep_alive_period(ttl: Duration) -> Duration {
    (ttl / 3).min(MAX_KEEP_ALIVE_PERIOD)
}

/// This node's lease, as far as it can vouch for it.
#[derive(Debug, Clone, Copy)]
struct Lease {
    id: i64,
    /// When the last keep-alive that etcd acknowledged (or the grant) was sent.
    acknowledged_sent_at: Instant,
}

/// Whether a node whose last acknowledged keep-alive was sent at `sent_at` is fenced at `now`.
pub fn fenced(sent_at: Instant, now: Instant, ttl: Duration) -> bool {
    now.saturating_duration_since(sent_at) > ttl.saturating_sub(FENCE_MARGIN)
}

/// The answer of `kiln cluster status`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    pub node_id: String,
    pub fenced: bool,
    /// This node's lease, in hex.
    pub lease: String,
    pub lease_ttl_s: u64,
    /// How long ago the last acknowledged keep-alive was sent.
    pub last_keep_alive_ms: u64,
    pub nodes: Vec<NodeView>,
    pub etcd: Vec<EndpointView>,
}

#[derive(Debug, Clone, Serialize)]
pub struct EndpointView {
    pub endpoint: String,
    pub healthy: bool,
}

/// This node's membership of the cluster.
pub struct Membership {
    etcd: Etcd,
    config: ClusterConfig,
    record: Mutex<NodeRecord>,
    lease: Mutex<Lease>,
    members: Mutex<Members>,
    drained: Mutex<BTreeSet<String>>,
    /// Serialises writes of this node's record, so that they land in the order they were made.
    writing: tokio::sync::Mutex<()>,
    stopping: AtomicBool,
}

fn now_ms() -> u64 {
    chrono::Utc::now().timestamp_millis().max(0) as u64
}

impl Membership {
    fn node_key(&self, id: &str) -> String {
        format!("{}/nodes/{id}", self.config.prefix)
    }

    fn drain_key(&self, id: &str) -> String {
        format!("{}/drain/{id}", self.config.prefix)
    }

    /// Registers this node and starts its keep-alives and watches.
    pub async fn join(
        etcd: Etcd,
        config: ClusterConfig,
        record: NodeRecord,
    ) -> Result<Arc<Self>, ClusterError> {
        let ttl = config.lease_ttl;
        let membership = Arc::new(Self {
            etcd,
            record: Mutex::new(record),
            lease: Mutex::new(Lease {
                id: 0,
                acknowledged_sent_at: Instant::now(),
            }),
            members: Mutex::new(Members::default()),
            drained: Mutex::new(BTreeSet::new()),
            writing: tokio::sync::Mutex::new(()),
            stopping: AtomicBool::new(false),
            config,
        });
        let me = membership.config.node_id.clone();
        // Another live node under the same id would have its record overwritten: refuse,
        // unless it is this node's own earlier run (same address), killed within a TTL.
        if let Some(existing) = membership.etcd.get(&membership.node_key(&me)).await? {
            if let Ok(other) = serde_json::from_slice::<NodeRecord>(&existing.value) {
                if other.api != membership.record.locked().api {
                    return Err(ClusterError::NodeIdTaken {
                        id: me,
                        api: other.api,
                        ttl: ttl.as_secs(),
                    });
                }
            }
        }
        if membership
            .etcd
            .get(&membership.drain_key(&me))
            .await?
            .is_some()
        {
            membership.record.locked().state = RecordState::Draining;
            membership.drained.locked().insert(me);
        }
        membership.take_new_lease().await?;
        tokio::spawn(membership.clone().keep_alive_loop());
        membership.clone().watch_nodes();
        membership.clone().watch_drains();
        Ok(membership)
    }

    /// Grants a lease, moves this node's record onto it, and revokes the one it replaces.
    async fn take_new_lease(&self) -> Result<(), EtcdError> {
        let sent = Instant::now();
        let id = self
            .etcd
            .grant(self.config.lease_ttl.as_secs() as i64)
            .await?;
        let old = {
            let mut lease = self.lease.locked();
            let old = lease.id;
            *lease = Lease {
                id,
                acknowledged_sent_at: sent,
            };
            old
        };
        if let Err(e) = self.write_record().await {
            // The new lease is in place; the next round writes the record again.
            self.lease.locked().acknowledged_sent_at = sent - self.config.lease_ttl;
            return Err(e);
        }
        if old != 0 && old != id {
            if let Err(e) = self.etcd.revoke(old).await {
                tracing::debug!("revoking lease {old:x}: {e}");
            }
        }
        Ok(())
    }

    /// Writes this node's record, bound to its current lease.
    async fn write_record(&self) -> Result<(), EtcdError> {
        let _order = self.writing.lock().await;
        let (record, lease) = (self.record.locked().clone(), self.lease.locked().id);
        let value = serde_json::to_vec(&record).expect("a node record serialises");
        self.etcd
            .put(&self.node_key(&record.id), value, lease)
            .await
    }

    async fn keep_alive_loop(self: Arc<Self>) {
        let ttl = self.config.lease_ttl;
        let period = keep_alive_period(ttl);
        let mut reported_fenced = false;
        while !self.stopping.load(Ordering::Relaxed) {
            let lease = *self.lease.locked();
            let sent = Instant::now();
            let is_fenced = fenced(lease.acknowledged_sent_at, sent, ttl);
            if is_fenced && !reported_fenced {
                reported_fenced = true;
                tracing::warn!(
                    "fenced: no keep-alive of lease {:x} acknowledged for {:.1}s",
                    lease.id,
                    sent.duration_since(lease.acknowledged_sent_at)
                        .as_secs_f64()
                );
            }
            // A fenced node does not trust its old lease even if etcd still has it.
            let renewed = if is_fenced {
                Ok(false)
            } else {
                self.etcd.keep_alive(lease.id, period).await
            };
            let wait = match renewed {
                Ok(true) => {
                    let mut current = self.lease.locked();
                    if current.id == lease.id {
                        current.acknowledged_sent_at = sent;
                    }
                    period.saturating_sub(sent.elapsed())
                }
                Ok(false) => match self.take_new_lease().await {
                    Ok(()) => {
                        reported_fenced = false;
                        tracing::info!("joined again with lease {:x}", self.lease.locked().id);
                        period
                    }
                    Err(e) => {
                        tracing::debug!("taking a new lease: {e}");
                        RETRY_PERIOD
                    }
                },
                Err(e) => {
                    tracing::debug!("keep-alive: {e}");
                    RETRY_PERIOD
                }
            };
            tokio::time::sleep(wait).await;
        }
    }

    fn watch_nodes(self: Arc<Self>) {
        let prefix = format!("{}/nodes/", self.config.prefix);
        let mut updates = self.etcd.watch_prefix(prefix.clone());
        let weak = Arc::downgrade(&self);
        drop(self);
        tokio::spawn(async move {
            while let Some(update) = updates.recv().await {
                let Some(this) = weak.upgrade() else { return };
                let record = |entry: &Entry| {
                    serde_json::from_slice::<NodeRecord>(&entry.value)
                        .map_err(|e| tracing::warn!("unreadable node record {}: {e}", entry.key))
                        .ok()
                };
                let mut members = this.members.locked();
                match update {
                    WatchUpdate::Reset { entries, .. } => members.reset(
                        entries
                            .iter()
                            .filter_map(|e| record(e).map(|r| (r, e.lease)))
                            .collect(),
                        now_ms(),
                    ),
                    WatchUpdate::Put(entry) => {
                        if let Some(r) = record(&entry) {
                            members.put(r, entry.lease);
                        }
                    }
                    WatchUpdate::Delete { key, .. } => {
                        if let Some(id) = key.strip_prefix(&prefix) {
                            members.remove(id, now_ms());
                        }
                    }
                }
            }
        });
    }

    fn watch_drains(self: Arc<Self>) {
        let prefix = format!("{}/drain/", self.config.prefix);
        let mut updates = self.etcd.watch_prefix(prefix.clone());
        let weak = Arc::downgrade(&self);
        drop(self);
        tokio::spawn(async move {
            while let Some(update) = updates.recv().await {
                let Some(this) = weak.upgrade() else { return };
                {
                    let mut drained = this.drained.locked();
                    let id = |key: &str| key.strip_prefix(&prefix).map(str::to_string);
                    match update {
                        WatchUpdate::Reset { entries, .. } => {
                            *drained = entries.iter().filter_map(|e| id(&e.key)).collect();
                        }
                        WatchUpdate::Put(entry) => drained.extend(id(&entry.key)),
                        WatchUpdate::Delete { key, .. } => {
                            if let Some(id) = id(&key) {
                                drained.remove(&id);
                            }
                        }
                    }
                }
                this.follow_drain().await;
            }
        });
    }

    /// Writes `draining` or `up` in this node's record when its drain marker came or went.
    async fn follow_drain(&self) {
        let wanted = self.drained.locked().contains(&self.config.node_id);
        let changed = {
            let mut record = self.record.locked();
            let next = match (record.state, wanted) {
                (RecordState::Up, true) => RecordState::Draining,
                (RecordState::Draining, false) => RecordState::Up,
                (state, _) => state,
            };
            let changed = next != record.state;
            record.state = next;
            changed
        };
        if changed {
            if let Err(e) = self.write_record().await {
                // The keep-alive loop's next new lease writes the record again; meanwhile
                // the state in memory is the one status shows for this node.
                tracing::warn!("writing this node's state: {e}");
            }
        }
    }

    /// `kiln cluster drain NODE` (`drain` true) or `undrain NODE`.
    pub async fn set_drain(&self, node: &str, drain: bool) -> Result<(), ClusterError> {
        if !self.members.locked().knows(node)
            && self.etcd.get(&self.node_key(node)).await?.is_none()
        {
            return Err(ClusterError::UnknownNode(node.to_string()));
        }
        let key = self.drain_key(node);
        if drain {
            self.etcd.put(&key, b"{}".to_vec(), 0).await?;
        } else {
            self.etcd.delete(&key).await?;
        }
        Ok(())
    }

    /// This node's id.
    pub fn node_id(&self) -> &str {
        &self.config.node_id
    }

    /// The lease this node can vouch for: `None` while it is fenced.
    pub fn live_lease(&self) -> Option<i64> {
        let lease = *self.lease.locked();
        let live = lease.id != 0
            && !fenced(
                lease.acknowledged_sent_at,
                Instant::now(),
                self.config.lease_ttl,
            );
        live.then_some(lease.id)
    }

    pub fn is_fenced(&self) -> bool {
        let lease = *self.lease.locked();
        fenced(
            lease.acknowledged_sent_at,
            Instant::now(),
            self.config.lease_ttl,
        )
    }

    pub fn status(&self) -> ClusterStatus {
        let lease = *self.lease.locked();
        let fenced = fenced(
            lease.acknowledged_sent_at,
            Instant::now(),
            self.config.lease_ttl,
        );
        let me = &self.config.node_id;
        let mut nodes = self.members.locked().view(me, fenced, now_ms());
        // This node before its own record has come back through the watch (or while fenced,
        // when its watch may be silent): what it knows of itself.
        let record = self.record.locked().clone();
        match nodes.iter_mut().find(|n| n.this_node) {
            Some(view) if !fenced => view.state = record_state(record.state),
            Some(_) => {}
            None => nodes.insert(
                0,
                NodeView {
                    id: record.id.clone(),
                    state: if fenced {
                        NodeState::Fenced
                    } else {
                        record_state(record.state)
                    },
                    api: record.api.clone(),
                    peer: record.peer.clone(),
                    s3: record.s3.clone(),
                    version: record.version.clone(),
                    started_at: record.started_at.clone(),
                    lease: format!("{:x}", lease.id),
                    departed_ms: None,
                    this_node: true,
                },
            ),
        }
        ClusterStatus {
            node_id: me.clone(),
            fenced,
            lease: format!("{:x}", lease.id),
            lease_ttl_s: self.config.lease_ttl.as_secs(),
            last_keep_alive_ms: lease.acknowledged_sent_at.elapsed().as_millis() as u64,
            nodes,
            etcd: self
                .etcd
                .endpoint_health()
                .into_iter()
                .map(|(endpoint, healthy)| EndpointView { endpoint, healthy })
                .collect(),
        }
    }

    /// Appends `kiln_cluster_*` to an OpenMetrics exposition (before its `# EOF`).
    pub fn render_metrics(&self, text: &mut String) {
        let status = self.status();
        let had_eof = text.ends_with("# EOF\n");
        if had_eof {
            text.truncate(text.len() - "# EOF\n".len());
        }
        let _ = writeln!(
            text,
            "# HELP kiln_cluster_fenced Whether this node is fenced: its lease may have expired.\n\
             # TYPE kiln_cluster_fenced gauge\nkiln_cluster_fenced {}",
            u8::from(status.fenced)
        );
        let _ = writeln!(
            text,
            "# HELP kiln_cluster_nodes Nodes this node knows of, by state.\n\
             # TYPE kiln_cluster_nodes gauge"
        );
        for state in NodeState::ALL {
            let count = status.nodes.iter().filter(|n| n.state == state).count();
            let _ = writeln!(
                text,
                "kiln_cluster_nodes{{state=\"{}\"}} {count}",
                state.as_str()
            );
        }
        let healthy = status.etcd.iter().filter(|e| e.healthy).count();
        let _ = writeln!(
            text,
            "# HELP kiln_cluster_etcd_endpoints_healthy etcd endpoints whose last health check passed.\n\
             # TYPE kiln_cluster_etcd_endpoints_healthy gauge\nkiln_cluster_etcd_endpoints_healthy {healthy}"
        );
        if had_eof {
            text.push_str("# EOF\n");
        }
        super::router::render_metrics(text);
    }

    /// Shutdown begins: the record says `leaving`, so no new placements come.
    pub async fn leaving(&self) {
        self.record.locked().state = RecordState::Leaving;
        if let Err(e) = self.write_record().await {
            tracing::warn!("writing this node's state: {e}");
        }
    }

    /// Shutdown ends: stops the keep-alives and revokes the lease, deleting the record.
    pub async fn leave(&self) {
        self.stopping.store(true, Ordering::Relaxed);
        let id = self.lease.locked().id;
        if let Err(e) = self.etcd.revoke(id).await {
            tracing::warn!("revoking this node's lease: {e}; its record expires with it");
        }
    }
}

fn record_state(state: RecordState) -> NodeState {
    match state {
        RecordState::Up => NodeState::Up,
        RecordState::Draining => NodeState::Draining,
        RecordState::Leaving => NodeState::Leaving,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_is_fenced_half_a_second_before_its_lease_could_expire() {
        let ttl = Duration::from_secs(5);
        let sent = Instant::now();
        assert!(!fenced(sent, sent + Duration::from_millis(4500), ttl));
        assert!(fenced(sent, sent + Duration::from_millis(4501), ttl));
        // A clock read before the send (another thread's) is not fenced.
        assert!(!fenced(sent + Duration::from_secs(1), sent, ttl));
    }

    #[test]
    fn keep_alives_leave_most_of_a_long_lease_to_an_election() {
        let second = Duration::from_secs(1);
        assert_eq!(keep_alive_period(2 * second), 2 * second / 3);
        for ttl in [3, 5, 3600] {
            assert_eq!(keep_alive_period(ttl * second), second);
        }
    }
}
