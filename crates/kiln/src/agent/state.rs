//! The agent's tables, in parts that own their data: the instances (each function's pool and
//! every live instance, with the memory booked for them), what is made ahead of demand
//! (snapshots, standbys, spares), and the sessions (`sessions.rs`).
//!
//! One lock (`Inner::state`) guards the parts together, because the decisions that matter see
//! several at once: a request's acquisition reads its pool, its session's primary and the
//! budget, and books all three in one step; a release hands an instance to a session's waiter
//! or back to its pool; forgetting an instance wakes the requests queued on it for their
//! sessions. What needs one part takes that part (`&mut Instances`, `&MadeAhead`,
//! `&mut Sessions`); only those cross-part steps take the whole [`State`].

use std::collections::HashMap;

use super::pools::{LiveInstance, Pool};
use super::sessions::Sessions;
use super::snapshots::SnapshotSlot;
use super::spare::Spares;
use super::{warm, Instance, InstanceState};
use crate::function::SharedSpec;

/// Everything the agent keeps, under one lock.
#[derive(Default)]
pub(super) struct State {
    pub instances: Instances,
    pub ahead: MadeAhead,
    pub sessions: Sessions,
    /// The last instance id handed out (instances, standbys and spares share the sequence).
    next_id: u64,
    pub shutting_down: bool,
}

impl State {
    /// A new instance id.
    pub fn new_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Drops the bookkeeping of an instance that is gone or going. Requests queued on it for
    /// their session try again: their session is placed anew.
    pub fn forget(&mut self, id: u64) {
        self.sessions.wake_bound(id);
        self.instances.forget(id);
    }
}

/// Each function's pool and every live instance, with the node's memory they book.
#[derive(Default)]
pub(super) struct Instances {
    pub pools: HashMap<String, Pool>,
    pub live: HashMap<u64, LiveInstance>,
    /// The sum of live instances' bookings (and BREAKOUT's arenas), against the node's budget.
    pub reserved_mb: u64,
}

impl Instances {
    /// Books instance `id` of `spec` at `limit_mb`; a pooled one counts in its function's pool.
    pub fn book(&mut self, id: u64, spec: &SharedSpec, limit_mb: u32, pooled: bool) {
        self.reserved_mb += u64::from(limit_mb);
        if pooled {
            self.pools.entry(spec.function.clone()).or_default().live += 1;
        }
        self.live
            .insert(id, LiveInstance::starting(spec, limit_mb, pooled));
    }

    /// Drops instance `id`'s booking and its place in its pool's count.
    pub fn forget(&mut self, id: u64) {
        if let Some(live) = self.live.remove(&id) {
            self.reserved_mb = self.reserved_mb.saturating_sub(u64::from(live.limit_mb));
            if let Some(pool) = self.pools.get_mut(&live.function).filter(|_| live.pooled) {
                pool.live = pool.live.saturating_sub(1);
            }
        }
    }

    /// Whether an instance of `revision` of `function` is idle.
    pub fn has_idle(&self, function: &str, revision: u64) -> bool {
        self.pools
            .get(function)
            .is_some_and(|pool| pool.idle.iter().any(|i| i.spec.revision == revision))
    }

    /// Marks instance `id` as running what it was handed, with where it came from.
    pub fn started(&mut self, instance: &Instance) {
        if let Some(live) = self.live.get_mut(&instance.id) {
            live.state = InstanceState::Busy;
            live.cgroup = Some(instance.cgroup.clone());
            live.start_path = instance.start_path;
            live.pid = instance.pid();
        }
    }
}

/// What is made ahead of demand: function snapshots and standbys, runtime standbys, spares.
#[derive(Default)]
pub(super) struct MadeAhead {
    /// Each function's snapshot: a fork server, or a held-back instance (the hot path).
    pub zygotes: HashMap<String, SnapshotSlot>,
    /// Runtime-generic standbys, per runtime (the warm path).
    pub warm: HashMap<String, warm::WarmPool>,
    /// Instances made ahead of demand per function (the hot path): spare forks of runtimes
    /// that fork, standbys beside the snapshot of those that cannot.
    pub spares: HashMap<String, Spares>,
    /// The newest revision of each function the node was told of (by `prepare` or `retire`):
    /// nothing is built ahead of demand for an older one.
    pub newest: HashMap<String, u64>,
    /// Each function's provisioned concurrency: instances made ahead of demand at least.
    pub provisioned: HashMap<String, usize>,
    /// The revision of each function whose requests run on its compiled trace
    /// (`decontainerized`): nothing is made ahead of demand for it, as for prebaking off. A
    /// request that leaves the trace starts an instance on the warm path.
    pub fast: HashMap<String, u64>,
}

impl MadeAhead {
    /// Whether instances and snapshots of `spec` are made ahead of demand: prebaking is on and
    /// its requests do not run on a compiled trace.
    pub fn prebakes(&self, spec: &SharedSpec) -> bool {
        spec.prebake.mode != crate::function::PrebakeMode::Off
            && self.fast.get(&spec.function) != Some(&spec.revision)
    }

    /// Whether the node knows of a newer revision of `spec`'s function (a request of the old
    /// one may still be finishing; nothing should be built for it).
    pub fn outdated(&self, spec: &SharedSpec) -> bool {
        self.newest
            .get(&spec.function)
            .is_some_and(|newest| spec.revision < *newest)
    }

    /// The memory the node's snapshots and spares hold.
    pub fn snapshot_bytes(&self) -> u64 {
        let snapshots: u64 = self.zygotes.values().map(SnapshotSlot::memory_bytes).sum();
        let spares: u64 = self.spares.values().map(Spares::memory_bytes).sum();
        snapshots + spares
    }

    /// Removes ready snapshots of functions other than `keep`, least recently used first,
    /// until `needed` more bytes fit in the snapshot memory budget (which the spares share). A
    /// removed zygote lives on until its last fork is gone.
    pub fn evict_snapshots(
        &mut self,
        needed: u64,
        budget_mb: u64,
        keep: &str,
    ) -> Vec<SnapshotSlot> {
        let mut evicted = Vec::new();
        while self.snapshot_bytes() + needed > budget_mb * 1024 * 1024 {
            let Some(name) = self
                .zygotes
                .iter()
                .filter(|(name, _)| name.as_str() != keep)
                .filter_map(|(name, slot)| slot.last_used().map(|used| (used, name)))
                .min()
                .map(|(_, name)| name.clone())
            else {
                break;
            };
            if let Some(slot) = self.zygotes.remove(&name) {
                tracing::info!(function = %name, "snapshot evicted (snapshot memory budget)");
                evicted.push(slot);
            }
        }
        evicted
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::sync::oneshot;

    use super::*;
    use crate::agent::Wake;
    use crate::function::InstanceSpec;
    use crate::session::SessionConfig;

    fn spec(function: &str, memory_mb: u32) -> SharedSpec {
        Arc::new(InstanceSpec::example(function, memory_mb))
    }

    #[test]
    fn booking_counts_memory_and_pooled_instances_and_forgetting_undoes_it() {
        let (a, b) = (spec("a", 256), spec("b", 128));
        let mut instances = Instances::default();
        instances.book(1, &a, 256, true);
        instances.book(2, &a, 100, true);
        // A tracing instance books memory but holds no place in its function's pool.
        instances.book(3, &b, 128, false);
        assert_eq!(instances.reserved_mb, 484);
        assert_eq!(instances.pools["a"].live, 2);
        assert!(instances.pools.get("b").is_none_or(|p| p.live == 0));
        assert_eq!(instances.live[&2].limit_mb, 100);
        assert_eq!(instances.live[&2].memory_mb, 256);
        assert_eq!(instances.live[&1].state, InstanceState::Starting);

        instances.forget(2);
        instances.forget(3);
        // Forgetting twice (an instance gone on two paths) changes nothing more.
        instances.forget(3);
        assert_eq!(instances.reserved_mb, 256);
        assert_eq!(instances.pools["a"].live, 1);
        assert_eq!(instances.live.len(), 1);
        assert!(!instances.has_idle("a", 1));
    }

    #[test]
    fn ids_are_never_reused() {
        let mut state = State::default();
        let first = state.new_id();
        let second = state.new_id();
        assert!(second > first);
    }

    #[test]
    fn forgetting_an_instance_wakes_the_requests_bound_to_it() {
        let mut state = State::default();
        let f = spec("f", 128);
        let id = state.new_id();
        state.instances.book(id, &f, 128, true);
        let (tx, mut rx) = oneshot::channel();
        state.sessions.wait_for(id, tx);
        state.forget(id);
        assert!(matches!(rx.try_recv(), Ok(Wake::Retry)));
        assert_eq!(state.instances.reserved_mb, 0);
        assert!(state.sessions.bound_to(id).is_none());
    }

    #[test]
    fn a_session_follows_its_primary_and_a_standby_takes_over_a_reservation() {
        let dir = tempfile::tempdir().unwrap();
        let mut f = InstanceSpec::example("f", 128);
        f.max_instances = 4;
        f.sessions =
            Some(serde_json::from_str::<SessionConfig>(r#"{"Hint": "header:x-session"}"#).unwrap());
        let f = Arc::new(f);
        let config = f.sessions.clone().unwrap();
        let mut state = State::default();
        let (reserved, standby) = (state.new_id(), state.new_id());
        state.instances.book(reserved, &f, 128, true);
        let key = ("f".to_string(), "s-1".to_string());
        let log =
            Arc::new(super::super::sessions::log::SessionLog::open(dir.path(), "s-1").unwrap());
        state.sessions.insert(key.clone(), log, &config);
        let live = &mut state.instances.live;
        state.sessions.bind(live, &f, "s-1", reserved);
        assert_eq!(state.instances.live[&reserved].sessions, 1);
        let (tx, mut rx) = oneshot::channel();
        state.sessions.wait_for(reserved, tx);

        // The standby keeps its own id: the reservation's entry, sessions and waiters move.
        let entry = state.instances.live.remove(&reserved).unwrap();
        state.instances.live.insert(standby, entry);
        state.sessions.rebind(reserved, standby);
        let pool_live = state.instances.pools["f"].live;
        let target = state
            .sessions
            .target(&state.instances.live, pool_live, &f, "s-1", &config);
        assert!(matches!(target, super::super::sessions::Target::Instance(id) if id == standby));
        assert!(state
            .sessions
            .bound_to(standby)
            .is_some_and(|w| w.len() == 1));

        // Ending the session frees its place on the primary; its waiter is still woken by
        // the primary's end.
        let live = &mut state.instances.live;
        assert!(state.sessions.end(live, &key));
        assert_eq!(state.instances.live[&standby].sessions, 0);
        state.forget(standby);
        assert!(matches!(rx.try_recv(), Ok(Wake::Retry)));
    }

    #[test]
    fn a_newer_revision_outdates_the_older() {
        let mut ahead = MadeAhead::default();
        let f = spec("f", 128);
        assert!(!ahead.outdated(&f));
        ahead.newest.insert("f".into(), 2);
        assert!(ahead.outdated(&f));
        assert_eq!(ahead.snapshot_bytes(), 0);
        assert!(ahead.evict_snapshots(1024, 1, "f").is_empty());
    }
}
