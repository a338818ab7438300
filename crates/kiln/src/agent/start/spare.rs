//! Instances made ahead of demand (the hot path), as many per function as its demand predicts.
//!
//! A cold start that finds one ready takes it and is served at once. Runtimes that fork make
//! them by forking the function's zygote (spare forks: the fork and its move into a cgroup of
//! its own, several ms on cgroup v1, see bench/results/startpaths.md, happen before the
//! request); runtimes that cannot fork boot and warm up whole instances (standbys), the first
//! of which is the function's snapshot (`SnapshotSlot::Standby`). A function that allows
//! warm-up invocations gets one on each spare fork before it is offered.
//!
//! How many: [`demand::standbys`]: the instances the function's recent peak concurrency
//! predicts and it does not have, at least its `KilnPrebake.Standbys` and at least one, at most
//! the node's cap, within the snapshot memory budget. They are made in the background, a few
//! at a time node-wide, in cgroups at the lowest CPU share, so that making them never slows the
//! requests being served (the one taken joins its function's share). The reaper's tick tops
//! them up as instances go and lets the surplus go as the predicted demand decays. They belong
//! to one revision and go with it (update, eviction, a failed fork, shutdown).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::demand;
use super::snapshots::SnapshotSlot;
use super::zygote::{self, Zygote};
use crate::agent::instance::{Instance, Priority};
use crate::agent::state::State;
use crate::agent::Inner;
use crate::function::SharedSpec;

/// The instances made ahead of demand for one function.
pub(in crate::agent) struct Spares {
    /// The revision they are made of.
    pub spec: SharedSpec,
    /// Ready, oldest first, with the memory each held once made.
    pub ready: VecDeque<(Box<Instance>, u64)>,
    /// Ids of those being made.
    pub making: Vec<u64>,
    /// How long the last one took to make.
    pub last_made: Option<Duration>,
    /// Makes that failed in a row, and when the next may be tried: a function whose spares
    /// cannot be made (its init fails, its code is gone) is not retried every tick.
    failures: u32,
    retry_at: Option<Instant>,
}

impl Spares {
    fn new(spec: &SharedSpec) -> Self {
        Self {
            spec: spec.clone(),
            ready: VecDeque::new(),
            making: Vec::new(),
            last_made: None,
            failures: 0,
            retry_at: None,
        }
    }

    pub fn memory_bytes(&self) -> u64 {
        self.ready.iter().map(|(_, bytes)| bytes).sum()
    }

    /// Adds the ready and making ones to their function's snapshot status.
    fn report(&self, status: &mut crate::agent::SnapshotStatus) {
        status.spare = self
            .ready
            .front()
            .map(|(i, _)| i.id)
            .or(self.making.first().copied());
        status.spare_ready = !self.ready.is_empty();
        status.standbys_ready += self.ready.len();
        status.standbys_making = self.making.len();
        status.standbys_memory_bytes += self
            .ready
            .iter()
            .map(|(i, _)| i.cgroup.memory_current())
            .sum::<u64>();
        status.refill_ms = self.last_made.map(|d| d.as_secs_f64() * 1000.0);
        status.standby_ids = (self.ready.iter().map(|(i, _)| i.id))
            .chain(self.making.iter().copied())
            .collect();
    }
}

/// How a function's spares are made.
enum Maker {
    Fork(Arc<Zygote>),
    /// A whole instance, booted and warmed up (runtimes that cannot fork).
    Boot,
}

impl Inner {
    /// Adds what is made ahead of `function`'s demand to its snapshot status: the target its
    /// demand sets now (for `spec`, the revision of its snapshot, else of its spares) and the
    /// spares of that revision.
    pub(in crate::agent) fn report_made_ahead(
        &self,
        state: &State,
        function: &str,
        spec: Option<&SharedSpec>,
        status: &mut crate::agent::SnapshotStatus,
    ) {
        let spares = state.ahead.spares.get(function);
        let Some(spec) = spec.or(spares.map(|s| &s.spec)) else {
            return;
        };
        status.standbys_target = self.spare_target(state, spec, Instant::now()).0;
        if let Some(spares) = spares.filter(|s| s.spec.revision == spec.revision) {
            spares.report(status);
        }
    }

    /// A ready spare of `spec`'s revision, if there is one.
    pub(in crate::agent) fn take_spare(&self, spec: &SharedSpec) -> Option<Box<Instance>> {
        let mut state = self.state();
        let spares = state.ahead.spares.get_mut(&spec.function)?;
        if spares.spec.revision != spec.revision {
            return None;
        }
        spares.ready.pop_front().map(|(instance, _)| instance)
    }

    /// How many spares of `spec`'s function to keep now: where its runtime cannot fork, its
    /// standby snapshot (ready or being built) is one of the instances made ahead.
    /// Returns the target of instances made ahead and how many of them are spares.
    fn spare_target(&self, state: &State, spec: &SharedSpec, now: Instant) -> (usize, usize) {
        if !state.ahead.prebakes(spec) {
            return (0, 0);
        }
        let (predicted, live) = state
            .instances
            .pools
            .get(&spec.function)
            .map_or((0, 0), |pool| {
                (
                    pool.demand.predicted(now, self.config.standby_window),
                    pool.live,
                )
            });
        let provisioned = state.ahead.provisioned.get(&spec.function).copied();
        let target = demand::standbys(
            (spec.prebake.standbys as usize).max(provisioned.unwrap_or(0)),
            predicted,
            live,
            self.config.max_standbys,
        );
        let standby = match state.ahead.zygotes.get(&spec.function) {
            Some(SnapshotSlot::Standby(i, _)) => i.spec.revision == spec.revision,
            Some(SnapshotSlot::Building { revision, .. }) => {
                *revision == spec.revision
                    && self
                        .ctx
                        .runtimes
                        .get(&spec.runtime)
                        .is_some_and(|r| !r.can_fork())
            }
            _ => false,
        };
        (target, target - usize::from(standby))
    }

    /// Whether a request of `spec` that finds no idle instance and no hot start ready should
    /// wait for the first of an instance of its revision freed (one is live) and a standby
    /// made for it in the background, rather than start one on a slower path itself. Only
    /// runtimes that cannot fork: a fork is hot on the spot. Not while the function's standbys
    /// fail to be made, and not when nothing live could free.
    pub(in crate::agent) fn waits_for_made_ahead(
        &self,
        state: &State,
        spec: &SharedSpec,
        now: Instant,
    ) -> bool {
        if !state.ahead.prebakes(spec)
            || state.ahead.newest.get(&spec.function) != Some(&spec.revision)
            || self
                .ctx
                .runtimes
                .get(&spec.runtime)
                .is_none_or(|r| r.can_fork())
        {
            return false;
        }
        match state.ahead.zygotes.get(&spec.function) {
            // Ready: the start takes it. Failed: standbys of this revision cannot be made.
            Some(SnapshotSlot::Standby(i, _)) if i.spec.revision == spec.revision => return false,
            Some(SnapshotSlot::Failed { revision, .. }) if *revision == spec.revision => {
                return false
            }
            _ => {}
        }
        if let Some(spares) = state.ahead.spares.get(&spec.function) {
            if spares.spec.revision == spec.revision
                && (!spares.ready.is_empty() || spares.retry_at.is_some_and(|at| now < at))
            {
                return false;
            }
        }
        state.instances.live.values().any(|live| {
            live.pooled && live.revision == spec.revision && live.function == spec.function
        })
    }

    /// Whether the standbys of `spec` ready or being made (its snapshot's among them) cover
    /// `waiting` requests.
    pub(in crate::agent) fn made_ahead_cover(&self, spec: &SharedSpec, waiting: usize) -> bool {
        let state = self.state();
        let building = matches!(
            state.ahead.zygotes.get(&spec.function),
            Some(SnapshotSlot::Building { revision, .. }) if *revision == spec.revision
        );
        let spares = state
            .ahead
            .spares
            .get(&spec.function)
            .filter(|s| s.spec.revision == spec.revision)
            .map_or(0, |s| s.ready.len() + s.making.len());
        spares + usize::from(building) >= waiting
    }

    /// How `spec`'s spares are made now, if they can be: from its ready zygote, or by booting
    /// whole instances where its runtime cannot fork and its snapshot did not fail.
    fn maker(&self, spec: &SharedSpec) -> Option<Maker> {
        let state = self.state();
        if !state.ahead.prebakes(spec) {
            return None;
        }
        if self.ctx.runtimes.get(&spec.runtime)?.can_fork() {
            drop(state);
            return self.ready_zygote(spec).map(Maker::Fork);
        }
        match state.ahead.zygotes.get(&spec.function) {
            Some(SnapshotSlot::Failed { revision, .. }) if *revision == spec.revision => None,
            _ => Some(Maker::Boot),
        }
    }

    /// Makes as many spares of `spec` in the background as its target lacks, within the
    /// snapshot memory budget.
    pub(in crate::agent) fn refill_spare(self: &Arc<Self>, spec: &SharedSpec) {
        let Some(maker) = self.maker(spec) else {
            return;
        };
        let maker = Arc::new(maker);
        let mut evicted = Vec::new();
        let (ids, replaced) = {
            let mut guard = self.state();
            let state = &mut *guard;
            // Only for the function's newest revision (not for one deleted meanwhile).
            if state.shutting_down || state.ahead.newest.get(&spec.function) != Some(&spec.revision)
            {
                return;
            }
            let now = Instant::now();
            let (_, spare_target) = self.spare_target(state, spec, now);
            let spares = state
                .ahead
                .spares
                .entry(spec.function.clone())
                .or_insert_with(|| Spares::new(spec));
            let mut replaced = VecDeque::new();
            if spares.spec.revision != spec.revision {
                // The makers of the old revision find themselves replaced and let theirs go.
                replaced = std::mem::take(&mut spares.ready);
                *spares = Spares::new(spec);
            }
            if spares.retry_at.is_some_and(|at| now < at) {
                return;
            }
            let have = spares.ready.len() + spares.making.len();
            let mut wanted = spare_target.saturating_sub(have);
            // Each is about as large as the last one made; the first is not limited. A function
            // short of them is in demand now: the snapshots of others, least recently used
            // first, make room (with their spares) before its refill is cut.
            let unit = spares
                .ready
                .back()
                .map(|(_, bytes)| *bytes)
                .filter(|b| *b > 0);
            if let Some(unit) = unit {
                let budget_mb = self.config.snapshot_memory_mb;
                evicted =
                    state
                        .ahead
                        .evict_snapshots(wanted as u64 * unit, budget_mb, &spec.function);
                let room = (budget_mb * 1024 * 1024).saturating_sub(state.ahead.snapshot_bytes());
                wanted = wanted.min((room / unit) as usize);
            }
            let mut ids = Vec::with_capacity(wanted);
            for _ in 0..wanted {
                ids.push(state.new_id());
            }
            let spares = state
                .ahead
                .spares
                .get_mut(&spec.function)
                .expect("inserted above");
            spares.making.extend(&ids);
            (ids, replaced)
        };
        for (instance, _) in replaced {
            self.destroy_later(*instance);
        }
        // Outside the lock: the last reference to a zygote tears its sandbox down.
        for slot in evicted {
            self.discard(slot);
        }
        for id in ids {
            let inner = self.clone();
            let spec = spec.clone();
            let maker = maker.clone();
            tokio::spawn(async move { inner.make_spare(&spec, &maker, id).await });
        }
    }

    /// Makes spare `id` of `spec` and offers it, unless it is no longer wanted.
    async fn make_spare(self: Arc<Self>, spec: &SharedSpec, maker: &Maker, id: u64) {
        // A few at a time node-wide: each boots a runtime or copies a zygote's pages.
        let Ok(_permit) = self.makers.acquire().await else {
            return;
        };
        let wanted = |state: &State| {
            state
                .ahead
                .spares
                .get(&spec.function)
                .is_some_and(|s| s.spec.revision == spec.revision && s.making.contains(&id))
        };
        if !wanted(&self.state()) {
            return;
        }
        let begin = Instant::now();
        let made = match maker {
            Maker::Fork(zygote) => {
                let warm_up = spec.prebake.warmups(spec.network) > 0;
                Instance::fork(&self.ctx, zygote, spec, id, warm_up, Priority::Ahead).await
            }
            Maker::Boot => zygote::warmed_up(&self.ctx, spec, id, Priority::Ahead)
                .await
                .map(|(instance, _)| instance),
        };
        let took = begin.elapsed();
        let failed = made.is_err();
        let leftover = {
            let mut state = self.state();
            let mine = wanted(&state);
            // A fork is offered only while its zygote is the function's snapshot.
            let current = !state.shutting_down
                && match maker {
                    Maker::Fork(zygote) => matches!(
                        state.ahead.zygotes.get(&spec.function),
                        Some(SnapshotSlot::Ready(z)) if Arc::ptr_eq(z, zygote)
                    ),
                    Maker::Boot => true,
                };
            let spares = state
                .ahead
                .spares
                .get_mut(&spec.function)
                .filter(|s| s.spec.revision == spec.revision);
            if let Some(spares) = spares {
                spares.making.retain(|m| *m != id);
                match &made {
                    Ok(_) => {
                        spares.failures = 0;
                        spares.retry_at = None;
                    }
                    Err(_) => {
                        spares.failures += 1;
                        let backoff = Duration::from_secs(1 << spares.failures.min(8));
                        spares.retry_at = Some(Instant::now() + backoff);
                    }
                }
            }
            match made {
                Ok(instance) if mine && current => {
                    let bytes = instance.cgroup.memory_current();
                    let spares = state.ahead.spares.get_mut(&spec.function).expect("mine");
                    spares.ready.push_back((Box::new(instance), bytes));
                    spares.last_made = Some(took);
                    None
                }
                Ok(instance) => Some(instance),
                Err(reason) => {
                    tracing::warn!(function = %spec.function, "no spare: {reason}");
                    None
                }
            }
        };
        // A request waiting for a start takes this one; if it failed, every one waiting starts
        // its own.
        self.offer_start(spec, failed);
        if let Some(instance) = leftover {
            self.destroy_later(instance);
        }
    }

    /// Brings every function's spares to its target as demand changes (the reaper's tick):
    /// lets the surplus go, newest first, and makes what is missing.
    pub(in crate::agent) fn rebalance_spares(self: &Arc<Self>) {
        let now = Instant::now();
        let (surplus, short) = {
            let mut guard = self.state();
            let state = &mut *guard;
            if state.shutting_down {
                return;
            }
            let mut surplus = Vec::new();
            let mut short = Vec::new();
            let functions: Vec<String> = state.ahead.spares.keys().cloned().collect();
            for function in functions {
                let spec = state.ahead.spares[&function].spec.clone();
                let (_, spare_target) = self.spare_target(state, &spec, now);
                let spares = state.ahead.spares.get_mut(&function).expect("listed");
                while spares.ready.len() + spares.making.len() > spare_target {
                    let Some((instance, _)) = spares.ready.pop_back() else {
                        break;
                    };
                    surplus.push(*instance);
                }
                if spares.ready.len() + spares.making.len() < spare_target {
                    short.push(spec);
                }
            }
            (surplus, short)
        };
        for instance in surplus {
            self.destroy_later(instance);
        }
        for spec in short {
            self.refill_spare(&spec);
        }
    }

    /// Lets the spares of `function` go if `drop(their revision)` says so (those being made go
    /// too: their makers destroy them when they find themselves replaced).
    pub(in crate::agent) fn drop_spare(&self, function: &str, drop: impl Fn(u64) -> bool) {
        let gone = {
            let mut state = self.state();
            match state.ahead.spares.get(function) {
                Some(spares) if drop(spares.spec.revision) => state.ahead.spares.remove(function),
                _ => None,
            }
        };
        for (instance, _) in gone.map(|s| s.ready).unwrap_or_default() {
            self.destroy_later(*instance);
        }
    }

    /// Takes every ready spare out (at shutdown).
    pub(in crate::agent) fn drain_spares(&self) -> Vec<Instance> {
        let mut state = self.state();
        state
            .ahead
            .spares
            .drain()
            .flat_map(|(_, spares)| spares.ready)
            .map(|(instance, _)| *instance)
            .collect()
    }
}
