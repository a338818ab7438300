//! Routing across nodes: [`ClusterAgent`] is the controller's [`NodeAgent`] in cluster mode.
//! It runs an invocation on this node when an instance here is idle, else forwards it to a node
//! that holds a warm pool of the function's revision (in the function's rendezvous order), else
//! starts it on whichever of the function's two rendezvous nodes has the most free memory, and
//! else runs it here (queue, then 429). What it decides from is in memory, fed by watches of
//! `pools/` and `load/`: no etcd request on an invocation.
//!
//! Each node publishes `pools/<fn>/<revision>/<node>` while it has instances of that revision
//! and `load/<node>` (its free memory in MB), both on its lease, from a loop that reads the
//! local agent twice a second and writes only what changed (`load/` at most once a second).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::future::BoxFuture;
use tokio::sync::oneshot;

use super::etcd::{Etcd, WatchUpdate};
use super::peer::{self, Forward, Forwarded, PeerClient, PeerHandler, PeerKey};
use super::{Membership, NodeState};
use crate::agent::{
    AgentError, InvokeOutcome, InvokeRequest, MemoryLender, NodeAgent, NodeStatus, Placement,
    SessionStatus,
};
use crate::function::SharedSpec;
use crate::sync::{LockExt, RwLockExt};

/// How often a node reads its agent and publishes what changed.
const PUBLISH_EVERY: Duration = Duration::from_millis(500);
/// `load/<node>` is rewritten at most this often.
const LOAD_EVERY: Duration = Duration::from_secs(1);
/// How many of a function's nodes, in rendezvous order, a cold start may go to.
const COLD_CANDIDATES: usize = 2;

/// What the router knows of the other nodes, from watches and the member list.
#[derive(Debug, Default)]
pub struct RouteView {
    /// Live nodes taking placements (`up`), other than this one: their peer addresses.
    peers: BTreeMap<String, String>,
    /// Nodes with instances of each function revision.
    pools: HashMap<(String, u64), BTreeSet<String>>,
    /// Free memory per node, in MB, as each last published it (this node's included).
    free_mb: HashMap<String, u64>,
    /// This node is draining (or leaving): it takes no new placements, so a cold start goes to
    /// any peer with room.
    draining: bool,
}

/// Where an invocation should go, and why (the metric's labels).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    Local(&'static str),
    /// Try these nodes in order with `Placement::Idle`.
    Warm(Vec<String>),
    /// Start it on this node with `Placement::NoQueue`.
    Cold(String),
}

impl RouteView {
    /// The decision for `function`'s `revision` needing `memory_mb`, made on `node`.
    pub fn route(
        &self,
        node: &str,
        function: &str,
        revision: u64,
        memory_mb: u32,
        idle_here: bool,
    ) -> (Route, Option<Route>) {
        if idle_here {
            return (Route::Local("local-warm"), None);
        }
        let warm: Vec<String> = match self.pools.get(&(function.to_string(), revision)) {
            Some(nodes) => {
                let mut nodes: Vec<&String> = nodes
                    .iter()
                    .filter(|n| self.peers.contains_key(*n))
                    .collect();
                nodes.sort_by_key(|n| std::cmp::Reverse(rendezvous(function, n)));
                nodes.into_iter().cloned().collect()
            }
            None => Vec::new(),
        };
        let cold = self.cold_target(node, function, memory_mb);
        match (warm.is_empty(), cold) {
            (false, cold) => (Route::Warm(warm), cold.map(Route::Cold)),
            (true, Some(target)) => (Route::Cold(target), None),
            (true, None) => (Route::Local("cold-local"), None),
        }
    }

    /// The function's top rendezvous nodes (this one and the live peers), the one with the most
    /// free memory for it, if that is a peer with room for one more instance beyond what this
    /// node has free (so that small differences, a spare fork here, move nothing).
    fn cold_target(&self, node: &str, function: &str, memory_mb: u32) -> Option<String> {
        if self.draining {
            // A peer whose load is not known yet (it has not published it, or a watch is being
            // reset) is tried before a start here: the forward's placement refuses the queue,
            // so a peer without room answers at once and the start falls back here.
            let with_room = self
                .peers
                .keys()
                .filter_map(|n| self.free_mb.get(n).map(|free| (n, *free)))
                .filter(|(_, free)| *free >= u64::from(memory_mb))
                .max_by_key(|(n, free)| (*free, rendezvous(function, n)))
                .map(|(n, _)| n.clone());
            return with_room.or_else(|| {
                self.peers
                    .keys()
                    .filter(|n| !self.free_mb.contains_key(*n))
                    .max_by_key(|n| rendezvous(function, n))
                    .cloned()
            });
        }
        let mut nodes: Vec<&str> = self.peers.keys().map(String::as_str).collect();
        nodes.push(node);
        nodes.sort_by_key(|n| std::cmp::Reverse(rendezvous(function, n)));
        let here = self.free_mb.get(node).copied().unwrap_or(u64::MAX);
        nodes
            .into_iter()
            .take(COLD_CANDIDATES)
            .filter(|n| *n != node)
            .filter_map(|n| self.free_mb.get(n).map(|free| (n, *free)))
            .filter(|(_, free)| {
                *free >= u64::from(memory_mb) && *free > here.saturating_add(u64::from(memory_mb))
            })
            .max_by_key(|(_, free)| *free)
            .map(|(n, _)| n.to_string())
    }
}

/// A node's weight for a function: every node ranks nodes the same way (FNV-1a, stable across
/// processes and versions).
pub fn rendezvous(function: &str, node: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in function.bytes().chain([0u8]).chain(node.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// Counters of `kiln_cluster_routed_total{target,reason}` and the forwards.
#[derive(Default)]
struct RouteMetrics {
    routed: std::sync::Mutex<BTreeMap<(&'static str, &'static str), u64>>,
    forward_count: AtomicU64,
    forward_micros: AtomicU64,
    errors: std::sync::Mutex<BTreeMap<&'static str, u64>>,
    /// Other nodes' pools this node knows of: (function, revision, node) entries.
    known_pools: AtomicU64,
}

static METRICS: OnceLock<RouteMetrics> = OnceLock::new();

fn metrics() -> &'static RouteMetrics {
    METRICS.get_or_init(RouteMetrics::default)
}

fn routed(target: &'static str, reason: &'static str) {
    *metrics()
        .routed
        .locked()
        .entry((target, reason))
        .or_default() += 1;
}

fn forward_error(phase: &'static str) {
    *metrics().errors.locked().entry(phase).or_default() += 1;
}

/// Appends the router's series to `/metrics` (Prometheus text).
pub fn render_metrics(text: &mut String) {
    use std::fmt::Write;
    let m = metrics();
    text.push_str("# HELP kiln_cluster_routed_total Invocations by the node that ran them (local or a peer) and why.\n# TYPE kiln_cluster_routed_total counter\n");
    for ((target, reason), n) in m.routed.locked().iter() {
        let _ = writeln!(
            text,
            "kiln_cluster_routed_total{{target=\"{target}\",reason=\"{reason}\"}} {n}"
        );
    }
    text.push_str("# HELP kiln_cluster_forward_seconds Time of invocations forwarded to a peer, from sending to the answer.\n# TYPE kiln_cluster_forward_seconds summary\n");
    let _ = writeln!(
        text,
        "kiln_cluster_forward_seconds_sum {}\nkiln_cluster_forward_seconds_count {}",
        m.forward_micros.load(Ordering::Relaxed) as f64 / 1e6,
        m.forward_count.load(Ordering::Relaxed)
    );
    let _ = writeln!(
        text,
        "# HELP kiln_cluster_route_pools Pools (a function revision on another node) this node may route to, as its watch of pools/ has them.\n# TYPE kiln_cluster_route_pools gauge\nkiln_cluster_route_pools {}",
        m.known_pools.load(Ordering::Relaxed)
    );
    text.push_str("# HELP kiln_cluster_forward_errors_total Forwards that failed, by phase: before the peer accepted (retried elsewhere) or after (answered 500).\n# TYPE kiln_cluster_forward_errors_total counter\n");
    for (phase, n) in m.errors.locked().iter() {
        let _ = writeln!(
            text,
            "kiln_cluster_forward_errors_total{{phase=\"{phase}\"}} {n}"
        );
    }
}

/// The controller's agent in cluster mode: this node's agent, and the route to the others.
pub struct ClusterAgent {
    router: Arc<Router>,
}

struct Router {
    local: Arc<dyn NodeAgent>,
    node: String,
    view: Arc<RwLock<RouteView>>,
    client: OnceLock<PeerClient>,
}

impl ClusterAgent {
    pub fn new(local: Arc<dyn NodeAgent>, node: String) -> Self {
        Self {
            router: Arc::new(Router {
                local,
                node,
                view: Arc::default(),
                client: OnceLock::new(),
            }),
        }
    }

    /// Starts routing: serves the peer port, follows `pools/` and `load/`, and publishes this
    /// node's. Until then every invocation runs here.
    pub fn start(
        &self,
        membership: Arc<Membership>,
        etcd: Etcd,
        prefix: &str,
        key: PeerKey,
        listener: tokio::net::TcpListener,
        handler: Arc<dyn PeerHandler>,
    ) {
        let router = &self.router;
        peer::serve(listener, router.node.clone(), key.clone(), handler);
        let _ = router.client.set(PeerClient::new(router.node.clone(), key));
        let pools = format!("{prefix}/pools/");
        let load = format!("{prefix}/load/");
        follow(
            router.view.clone(),
            etcd.watch_prefix(pools.clone()),
            Watched::Pools(pools.clone()),
            router.node.clone(),
        );
        follow(
            router.view.clone(),
            etcd.watch_prefix(load.clone()),
            Watched::Load(load.clone()),
            router.node.clone(),
        );
        tokio::spawn(publish(router.clone(), membership, etcd, pools, load));
    }
}

impl Router {
    async fn route(
        &self,
        spec: SharedSpec,
        request: InvokeRequest,
    ) -> Result<InvokeOutcome, AgentError> {
        let client = self.client.get().expect("routing started");
        let idle_here = self.local.has_idle(&spec.function, spec.revision);
        let (first, then) = self.view.read_locked().route(
            &self.node,
            &spec.function,
            spec.revision,
            request.hints.memory_mb.unwrap_or(spec.memory_mb),
            idle_here,
        );
        let forward = |placement| Forward {
            function: spec.function.clone(),
            revision: spec.revision,
            placement,
            request_id: request.request_id.clone(),
            trace_id: request.trace_id.clone(),
            client_context: request.client_context.clone(),
            hints: request.hints.clone(),
            admit_objects: request.tags.admit,
            shadow: request.is_shadow(),
            timeout_s: spec.timeout_s,
        };
        for route in [Some(first), then].into_iter().flatten() {
            let (targets, placement, reason) = match route {
                Route::Local(reason) => {
                    routed("local", reason);
                    return self.local.invoke(spec, request).await;
                }
                Route::Warm(nodes) => (nodes, Placement::Idle, "warm"),
                Route::Cold(node) => (vec![node], Placement::NoQueue, "cold"),
            };
            for target in targets {
                let Some(address) = self.view.read_locked().peers.get(&target).cloned() else {
                    continue;
                };
                let begin = Instant::now();
                match client
                    .invoke(&target, &address, &forward(placement), &request.payload)
                    .await
                {
                    Forwarded::Done(result) => {
                        let m = metrics();
                        m.forward_count.fetch_add(1, Ordering::Relaxed);
                        m.forward_micros
                            .fetch_add(begin.elapsed().as_micros() as u64, Ordering::Relaxed);
                        if matches!(result, Err(AgentError::PeerLost(_))) {
                            forward_error("after-accepted");
                        }
                        routed("peer", reason);
                        return result;
                    }
                    Forwarded::Busy => {}
                    Forwarded::NotSent(why) => {
                        tracing::debug!(peer = %target, "forward not sent: {why}");
                        forward_error("before-accepted");
                        client.forget(&address);
                    }
                }
            }
        }
        routed("local", "fallback");
        self.local.invoke(spec, request).await
    }
}

impl NodeAgent for ClusterAgent {
    fn invoke(
        &self,
        spec: SharedSpec,
        request: InvokeRequest,
    ) -> BoxFuture<'static, Result<InvokeOutcome, AgentError>> {
        // Sessions, sequences' stages and ledgers stay on the node that has their state; until
        // routing starts, everything does.
        let stays = request.hints.session.is_some()
            || request.tags.storage.is_some()
            || request.tags.ledger.is_some()
            || self.router.client.get().is_none();
        if stays {
            return self.router.local.invoke(spec, request);
        }
        let router = self.router.clone();
        Box::pin(async move { router.route(spec, request).await })
    }

    fn invoke_placed(
        &self,
        spec: SharedSpec,
        request: InvokeRequest,
        placement: Placement,
        accepted: oneshot::Sender<()>,
    ) -> BoxFuture<'static, Result<InvokeOutcome, AgentError>> {
        self.router
            .local
            .invoke_placed(spec, request, placement, accepted)
    }

    fn has_idle(&self, function: &str, revision: u64) -> bool {
        self.router.local.has_idle(function, revision)
    }

    fn retire(&self, function: &str, keep_revision: Option<u64>) {
        self.router.local.retire(function, keep_revision)
    }

    fn prepare(&self, spec: SharedSpec) {
        self.router.local.prepare(spec)
    }

    fn prepared(&self, function: &str, revision: u64) -> crate::agent::Prepared {
        self.router.local.prepared(function, revision)
    }

    fn warm_with(&self, spec: SharedSpec, events: Vec<Bytes>) {
        self.router.local.warm_with(spec, events)
    }

    fn expect(&self, spec: SharedSpec, concurrency: u32) {
        self.router.local.expect(spec, concurrency)
    }

    fn status(&self) -> NodeStatus {
        self.router.local.status()
    }

    fn lendable_memory_mb(&self) -> u64 {
        self.router.local.lendable_memory_mb()
    }

    fn lend_to(&self, lender: Arc<dyn MemoryLender>) {
        self.router.local.lend_to(lender)
    }

    fn breakout_status(&self, function: &str) -> Option<crate::agent::BreakoutStatus> {
        self.router.local.breakout_status(function)
    }

    fn sessions(&self, function: &str) -> Vec<SessionStatus> {
        self.router.local.sessions(function)
    }

    fn end_session(&self, function: &str, session: &str) -> bool {
        self.router.local.end_session(function, session)
    }

    fn shutdown(&self, grace: Duration) -> BoxFuture<'static, ()> {
        self.router.local.shutdown(grace)
    }
}

/// Serves invocations other nodes forward here: the function's current spec on this node, run
/// by this node's own agent within the request's placement.
pub struct ServeForwarded {
    pub controller: Arc<crate::controller::Controller>,
    pub local: Arc<dyn NodeAgent>,
}

impl PeerHandler for ServeForwarded {
    fn invoke(
        &self,
        forward: Forward,
        payload: Bytes,
        accepted: oneshot::Sender<()>,
    ) -> BoxFuture<'static, Result<InvokeOutcome, AgentError>> {
        match self.controller.current_spec(&forward.function) {
            // Not this revision yet (the registry's watch is behind) or no package: the sender
            // tries elsewhere.
            Some(spec) if spec.revision == forward.revision => {
                let request = forward.request(payload);
                self.local
                    .invoke_placed(spec, request, forward.placement, accepted)
            }
            _ => Box::pin(async { Err(AgentError::Busy) }),
        }
    }
}

impl ClusterAgent {
    /// This node's own agent, which serves what other nodes forward.
    pub fn local(&self) -> Arc<dyn NodeAgent> {
        self.router.local.clone()
    }
}

enum Watched {
    Pools(String),
    Load(String),
}

/// Applies a watch of `pools/` or `load/` to the view.
fn follow(
    view: Arc<RwLock<RouteView>>,
    mut updates: tokio::sync::mpsc::UnboundedReceiver<WatchUpdate>,
    watched: Watched,
    this_node: String,
) {
    tokio::spawn(async move {
        while let Some(update) = updates.recv().await {
            let mut view = view.write_locked();
            match update {
                WatchUpdate::Reset { entries, .. } => {
                    match &watched {
                        Watched::Pools(_) => view.pools.clear(),
                        Watched::Load(_) => view.free_mb.clear(),
                    }
                    for entry in entries {
                        view.apply(&watched, &entry.key, Some(&entry.value));
                    }
                }
                WatchUpdate::Put(entry) => view.apply(&watched, &entry.key, Some(&entry.value)),
                WatchUpdate::Delete { key, .. } => view.apply(&watched, &key, None),
            }
            let known = view
                .pools
                .values()
                .map(|nodes| nodes.iter().filter(|n| **n != this_node).count() as u64)
                .sum();
            metrics().known_pools.store(known, Ordering::Relaxed);
        }
    });
}

impl RouteView {
    /// One key of `pools/` (`<fn>/<revision>/<node>`) or `load/` (`<node>` = free MB), put
    /// (`Some`) or deleted.
    fn apply(&mut self, watched: &Watched, key: &str, value: Option<&[u8]>) {
        match watched {
            Watched::Pools(prefix) => {
                let Some(rest) = key.strip_prefix(prefix.as_str()) else {
                    return;
                };
                let mut parts = rest.splitn(3, '/');
                let (Some(function), Some(revision), Some(node)) =
                    (parts.next(), parts.next(), parts.next())
                else {
                    return;
                };
                let Ok(revision) = revision.parse::<u64>() else {
                    return;
                };
                let pool = (function.to_string(), revision);
                if value.is_some() {
                    self.pools.entry(pool).or_default().insert(node.to_string());
                } else if let Some(nodes) = self.pools.get_mut(&pool) {
                    nodes.remove(node);
                    if nodes.is_empty() {
                        self.pools.remove(&pool);
                    }
                }
            }
            Watched::Load(prefix) => {
                let Some(node) = key.strip_prefix(prefix.as_str()) else {
                    return;
                };
                match value.and_then(|v| std::str::from_utf8(v).ok()?.parse::<u64>().ok()) {
                    Some(free) => {
                        self.free_mb.insert(node.to_string(), free);
                    }
                    None => {
                        self.free_mb.remove(node);
                    }
                }
            }
        }
    }
}

/// Publishes this node's pools and free memory on its lease, and keeps the view's peers in
/// step with the member list.
async fn publish(
    router: Arc<Router>,
    membership: Arc<Membership>,
    etcd: Etcd,
    pools: String,
    load: String,
) {
    let node = router.node.clone();
    let mut published: BTreeSet<(String, u64)> = BTreeSet::new();
    let mut lease_seen = 0;
    let mut last_load: Option<(Instant, u64)> = None;
    let mut tick = tokio::time::interval(PUBLISH_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let members = membership.status();
        let peers: BTreeMap<String, String> = members
            .nodes
            .iter()
            .filter(|n| !n.this_node && n.state == NodeState::Up)
            .map(|n| (n.id.clone(), n.peer.clone()))
            .collect();
        let draining = members
            .nodes
            .iter()
            .any(|n| n.this_node && matches!(n.state, NodeState::Draining | NodeState::Leaving));
        {
            let mut view = router.view.write_locked();
            view.peers = peers;
            view.draining = draining;
        }
        let Some(lease) = membership.live_lease() else {
            continue; // fenced: what it wrote goes with its lease
        };
        if lease != lease_seen {
            // A new lease (after a heal): the old one took every key with it.
            published.clear();
            last_load = None;
            lease_seen = lease;
        }
        let status = router.local.status();
        let now: BTreeSet<(String, u64)> = status
            .instances
            .iter()
            .map(|i| (i.function.clone(), i.revision))
            .collect();
        for (function, revision) in now.difference(&published.clone()) {
            let key = format!("{pools}{function}/{revision}/{node}");
            match etcd.put(&key, Vec::new(), lease).await {
                Ok(()) => {
                    published.insert((function.clone(), *revision));
                }
                Err(e) => tracing::debug!("cannot publish {key}: {e}"),
            }
        }
        for (function, revision) in published.clone().difference(&now) {
            let key = format!("{pools}{function}/{revision}/{node}");
            match etcd.delete(&key).await {
                Ok(()) => {
                    published.remove(&(function.clone(), *revision));
                }
                Err(e) => tracing::debug!("cannot withdraw {key}: {e}"),
            }
        }
        let free = status
            .memory_budget_mb
            .saturating_sub(status.memory_reserved_mb);
        router
            .view
            .write_locked()
            .free_mb
            .insert(node.clone(), free);
        let due = last_load.is_none_or(|(at, was)| was != free && at.elapsed() >= LOAD_EVERY);
        if due {
            match etcd
                .put(
                    &format!("{load}{node}"),
                    free.to_string().into_bytes(),
                    lease,
                )
                .await
            {
                Ok(()) => last_load = Some((Instant::now(), free)),
                Err(e) => tracing::debug!("cannot publish this node's load: {e}"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(peers: &[&str], pools: &[(&str, u64, &str)], free: &[(&str, u64)]) -> RouteView {
        RouteView {
            peers: peers
                .iter()
                .map(|p| (p.to_string(), format!("{p}:7000")))
                .collect(),
            pools: pools.iter().fold(HashMap::new(), |mut m, (f, r, n)| {
                m.entry((f.to_string(), *r))
                    .or_insert_with(BTreeSet::new)
                    .insert(n.to_string());
                m
            }),
            free_mb: free.iter().map(|(n, f)| (n.to_string(), *f)).collect(),
            draining: false,
        }
    }

    #[test]
    fn a_draining_node_starts_nothing_new_while_a_peer_has_room() {
        let mut v = view(&["b", "c"], &[], &[("a", 5000), ("b", 300), ("c", 900)]);
        v.draining = true;
        assert_eq!(v.route("a", "f", 1, 128, false).0, Route::Cold("c".into()));
        // Its idle instances still serve; with no peer able to take it, it starts here.
        assert_eq!(
            v.route("a", "f", 1, 128, true).0,
            Route::Local("local-warm")
        );
        let mut v = view(&["b"], &[], &[("a", 5000), ("b", 100)]);
        v.draining = true;
        assert_eq!(
            v.route("a", "f", 1, 128, false).0,
            Route::Local("cold-local")
        );
        // A peer whose load is not known yet is tried before a start here.
        let mut v = view(&["b", "c"], &[], &[("a", 5000), ("b", 100)]);
        v.draining = true;
        assert_eq!(v.route("a", "f", 1, 128, false).0, Route::Cold("c".into()));
    }

    #[test]
    fn an_idle_instance_here_wins() {
        let v = view(&["b"], &[("f", 1, "b")], &[("a", 0), ("b", 9000)]);
        assert_eq!(
            v.route("a", "f", 1, 128, true).0,
            Route::Local("local-warm")
        );
    }

    #[test]
    fn warm_pools_elsewhere_come_before_a_cold_start_here() {
        let v = view(
            &["b", "c"],
            &[("f", 1, "b"), ("f", 1, "c"), ("f", 1, "a")],
            &[],
        );
        let (first, _) = v.route("a", "f", 1, 128, false);
        let Route::Warm(nodes) = first else {
            panic!("{first:?}")
        };
        // Both peers, in the function's rendezvous order; never this node itself.
        let mut expected = vec!["b".to_string(), "c".to_string()];
        expected.sort_by_key(|n| std::cmp::Reverse(rendezvous("f", n)));
        assert_eq!(nodes, expected);
    }

    #[test]
    fn another_revisions_pool_and_a_gone_node_do_not_count() {
        let v = view(&["b"], &[("f", 1, "b"), ("f", 2, "c")], &[]);
        assert_eq!(
            v.route("a", "f", 2, 128, false).0,
            Route::Local("cold-local")
        );
    }

    #[test]
    fn a_cold_start_goes_to_the_top_node_with_more_free_memory() {
        // Two nodes: both are the function's candidates.
        let v = view(&["b"], &[], &[("a", 100), ("b", 5000)]);
        assert_eq!(v.route("a", "f", 1, 128, false).0, Route::Cold("b".into()));
        // Not when this node has as much, nor when the peer's memory cannot hold it.
        let v = view(&["b"], &[], &[("a", 5000), ("b", 5000)]);
        assert_eq!(
            v.route("a", "f", 1, 128, false).0,
            Route::Local("cold-local")
        );
        let v = view(&["b"], &[], &[("a", 10), ("b", 100)]);
        assert_eq!(
            v.route("a", "f", 1, 128, false).0,
            Route::Local("cold-local")
        );
    }

    #[test]
    fn every_node_ranks_nodes_alike_and_spreads_functions() {
        assert_eq!(rendezvous("f", "a"), rendezvous("f", "a"));
        let firsts: BTreeSet<&str> = (0..50)
            .map(|i| {
                let f = format!("fn-{i}");
                ["a", "b", "c"]
                    .into_iter()
                    .max_by_key(|n| rendezvous(&f, n))
                    .unwrap()
            })
            .collect();
        assert_eq!(firsts.len(), 3, "fifty functions all ranked one node first");
    }

    #[test]
    fn watch_keys_fill_and_empty_the_view() {
        let mut v = RouteView::default();
        let pools = Watched::Pools("/kiln/pools/".into());
        let load = Watched::Load("/kiln/load/".into());
        v.apply(&pools, "/kiln/pools/f/3/b", Some(b""));
        v.apply(&pools, "/kiln/pools/f/x/b", Some(b""));
        v.apply(&load, "/kiln/load/b", Some(b"2048"));
        assert!(v.pools[&("f".to_string(), 3)].contains("b"));
        assert_eq!(v.pools.len(), 1);
        assert_eq!(v.free_mb["b"], 2048);
        v.apply(&pools, "/kiln/pools/f/3/b", None);
        v.apply(&load, "/kiln/load/b", None);
        assert!(v.pools.is_empty() && v.free_mb.is_empty());
    }
}
