//! The member list every node keeps in memory, fed by its watch of `nodes/` (pure).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// What a node writes about itself in `<prefix>/nodes/<id>`, bound to its lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeRecord {
    pub id: String,
    /// The API address (`--advertise`).
    pub api: String,
    /// The peer port (`--peer-listen`).
    pub peer: String,
    /// This node's own S3 endpoint.
    pub s3: String,
    pub version: String,
    /// RFC 3339.
    pub started_at: String,
    pub state: RecordState,
}

/// The state a node writes in its record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RecordState {
    /// Takes new placements.
    Up,
    /// Takes no new placements (`kiln cluster drain`); serves what it has.
    Draining,
    /// Shutting down: finishing in-flight work, then revoking its lease.
    Leaving,
}

/// A node's state as `kiln cluster status` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeState {
    Up,
    Draining,
    Leaving,
    /// This node, whose lease it can no longer vouch for.
    Fenced,
    /// Its record disappeared without it leaving: its lease expired.
    Gone,
    /// Its record disappeared after it said it was leaving.
    Left,
}

impl NodeState {
    pub fn as_str(self) -> &'static str {
        match self {
            NodeState::Up => "up",
            NodeState::Draining => "draining",
            NodeState::Leaving => "leaving",
            NodeState::Fenced => "fenced",
            NodeState::Gone => "gone",
            NodeState::Left => "left",
        }
    }

    pub const ALL: [NodeState; 6] = [
        NodeState::Up,
        NodeState::Draining,
        NodeState::Leaving,
        NodeState::Fenced,
        NodeState::Gone,
        NodeState::Left,
    ];
}

/// One node in `kiln cluster status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeView {
    pub id: String,
    pub state: NodeState,
    pub api: String,
    pub peer: String,
    pub s3: String,
    pub version: String,
    pub started_at: String,
    /// The lease its record lives on, in hex as etcdctl prints it; empty once it is gone.
    pub lease: String,
    /// When its record disappeared (ms since the epoch), for gone and left nodes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub departed_ms: Option<u64>,
    /// Whether this is the node that answered.
    pub this_node: bool,
}

#[derive(Debug, Clone)]
struct Live {
    record: NodeRecord,
    lease: i64,
}

#[derive(Debug, Clone)]
struct Departed {
    record: NodeRecord,
    at_ms: u64,
    left: bool,
}

/// How long a departed node stays listed.
pub const DEPARTED_KEPT_MS: u64 = 10 * 60 * 1000;

/// The nodes with a record, and those whose record went lately.
#[derive(Debug, Default)]
pub struct Members {
    live: BTreeMap<String, Live>,
    departed: BTreeMap<String, Departed>,
}

impl Members {
    /// Every record there is now (after a full list): those missing are gone.
    pub fn reset(&mut self, records: Vec<(NodeRecord, i64)>, now_ms: u64) {
        let mut live = BTreeMap::new();
        for (record, lease) in records {
            live.insert(record.id.clone(), Live { record, lease });
        }
        let missing: Vec<String> = self
            .live
            .keys()
            .filter(|id| !live.contains_key(*id))
            .cloned()
            .collect();
        for id in missing {
            self.remove(&id, now_ms);
        }
        for id in live.keys() {
            self.departed.remove(id);
        }
        self.live = live;
    }

    pub fn put(&mut self, record: NodeRecord, lease: i64) {
        self.departed.remove(&record.id);
        self.live.insert(record.id.clone(), Live { record, lease });
    }

    /// The record of `id` was deleted (its lease expired or was revoked).
    pub fn remove(&mut self, id: &str, now_ms: u64) {
        if let Some(Live { record, .. }) = self.live.remove(id) {
            let left = record.state == RecordState::Leaving;
            self.departed.insert(
                id.to_string(),
                Departed {
                    record,
                    at_ms: now_ms,
                    left,
                },
            );
        }
    }

    pub fn knows(&self, id: &str) -> bool {
        self.live.contains_key(id) || self.departed.contains_key(id)
    }

    pub fn is_live(&self, id: &str) -> bool {
        self.live.contains_key(id)
    }

    /// The list `kiln cluster status` shows, as seen by `this_node` (fenced or not), live
    /// nodes first, each group by id.
    pub fn view(&mut self, this_node: &str, fenced: bool, now_ms: u64) -> Vec<NodeView> {
        self.departed
            .retain(|_, d| now_ms.saturating_sub(d.at_ms) < DEPARTED_KEPT_MS);
        let live = self.live.values().map(|l| {
            let is_self = l.record.id == this_node;
            let state = match l.record.state {
                _ if is_self && fenced => NodeState::Fenced,
                RecordState::Up => NodeState::Up,
                RecordState::Draining => NodeState::Draining,
                RecordState::Leaving => NodeState::Leaving,
            };
            view(&l.record, state, format!("{:x}", l.lease), None, is_self)
        });
        let departed = self.departed.values().map(|d| {
            let is_self = d.record.id == this_node;
            let state = match () {
                _ if is_self && fenced => NodeState::Fenced,
                _ if d.left => NodeState::Left,
                _ => NodeState::Gone,
            };
            view(&d.record, state, String::new(), Some(d.at_ms), is_self)
        });
        live.chain(departed).collect()
    }
}

fn view(
    record: &NodeRecord,
    state: NodeState,
    lease: String,
    departed_ms: Option<u64>,
    this_node: bool,
) -> NodeView {
    NodeView {
        id: record.id.clone(),
        state,
        api: record.api.clone(),
        peer: record.peer.clone(),
        s3: record.s3.clone(),
        version: record.version.clone(),
        started_at: record.started_at.clone(),
        lease,
        departed_ms,
        this_node,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str, state: RecordState) -> NodeRecord {
        NodeRecord {
            id: id.into(),
            api: format!("{id}:9000"),
            peer: format!("{id}:9100"),
            s3: format!("http://{id}:9001"),
            version: "0.1.0".into(),
            started_at: "2025-01-01T00:00:00Z".into(),
            state,
        }
    }

    fn states(members: &mut Members, me: &str, fenced: bool, now: u64) -> Vec<(String, NodeState)> {
        members
            .view(me, fenced, now)
            .into_iter()
            .map(|v| (v.id, v.state))
            .collect()
    }

    #[test]
    fn a_deleted_record_is_gone_unless_the_node_said_it_was_leaving() {
        let mut m = Members::default();
        m.put(record("a", RecordState::Up), 1);
        m.put(record("b", RecordState::Up), 2);
        m.put(record("b", RecordState::Leaving), 2);
        m.remove("a", 1000);
        m.remove("b", 1000);
        assert_eq!(
            states(&mut m, "c", false, 1000),
            [("a".into(), NodeState::Gone), ("b".into(), NodeState::Left)]
        );
    }

    #[test]
    fn a_node_that_comes_back_is_live_again_and_departed_nodes_are_forgotten() {
        let mut m = Members::default();
        m.put(record("a", RecordState::Up), 1);
        m.remove("a", 0);
        m.put(record("a", RecordState::Draining), 7);
        let view = m.view("b", false, 10);
        assert_eq!(view.len(), 1);
        assert_eq!(view[0].state, NodeState::Draining);
        assert_eq!(view[0].lease, "7");
        m.remove("a", 10);
        assert!(m.view("b", false, 10 + DEPARTED_KEPT_MS).is_empty());
    }

    #[test]
    fn a_reset_marks_the_missing_gone_and_keeps_the_rest() {
        let mut m = Members::default();
        m.put(record("a", RecordState::Up), 1);
        m.put(record("b", RecordState::Up), 2);
        m.reset(
            vec![
                (record("b", RecordState::Up), 2),
                (record("c", RecordState::Up), 3),
            ],
            5,
        );
        assert_eq!(
            states(&mut m, "b", false, 5),
            [
                ("b".into(), NodeState::Up),
                ("c".into(), NodeState::Up),
                ("a".into(), NodeState::Gone)
            ]
        );
    }

    #[test]
    fn only_this_node_shows_as_fenced() {
        let mut m = Members::default();
        m.put(record("a", RecordState::Up), 1);
        m.put(record("b", RecordState::Draining), 2);
        let view = m.view("b", true, 0);
        assert_eq!(view[0].state, NodeState::Up);
        assert_eq!(view[1].state, NodeState::Fenced);
        assert!(view[1].this_node && !view[0].this_node);
    }
}
