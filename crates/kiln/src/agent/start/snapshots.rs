//! Function-specific snapshots (the hot path): a fork server (Python) or a held-back, warmed-up
//! instance (runtimes that cannot fork) per function, built ahead of demand, and evicted least
//! recently used first beyond the snapshot memory budget.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::zygote::{self, Zygote};
use crate::agent::instance::Priority;
use crate::agent::{Inner, Instance};
use crate::function::SharedSpec;
use crate::sync::LockExt;

/// The function-specific snapshot of one function.
pub(in crate::agent) enum SnapshotSlot {
    Building {
        revision: u64,
        id: u64,
    },
    /// A fork server (runtimes that can fork).
    Ready(Arc<Zygote>),
    /// An initialised, warmed-up instance held back for the next cold start (runtimes that
    /// cannot fork), with the time it took to build.
    Standby(Box<Instance>, Duration),
    Failed {
        revision: u64,
        error: String,
    },
}

impl SnapshotSlot {
    pub(in crate::agent) fn revision(&self) -> u64 {
        match self {
            SnapshotSlot::Building { revision, .. } | SnapshotSlot::Failed { revision, .. } => {
                *revision
            }
            SnapshotSlot::Ready(z) => z.spec.revision,
            SnapshotSlot::Standby(i, _) => i.spec.revision,
        }
    }

    pub(in crate::agent) fn memory_bytes(&self) -> u64 {
        match self {
            SnapshotSlot::Ready(z) => z.memory_bytes(),
            SnapshotSlot::Standby(i, _) => i.cgroup.memory_current(),
            _ => 0,
        }
    }

    pub(in crate::agent) fn last_used(&self) -> Option<Instant> {
        match self {
            SnapshotSlot::Ready(z) => Some(z.last_used()),
            SnapshotSlot::Standby(i, _) => Some(i.last_used),
            _ => None,
        }
    }
}

impl Inner {
    /// Lets a snapshot go: a standby instance is destroyed, a zygote goes with its last fork.
    pub(in crate::agent) fn discard(&self, slot: SnapshotSlot) {
        match slot {
            SnapshotSlot::Standby(instance, _) => self.destroy_later(*instance),
            SnapshotSlot::Ready(zygote) => {
                let revision = zygote.spec.revision;
                self.drop_spare(&zygote.spec.function, |r| r == revision);
            }
            _ => {}
        }
    }

    /// `revision` of `function` runs on its compiled trace: its snapshot and the instances
    /// made ahead of it go, and none are made while it does (a request that leaves the trace
    /// starts on the warm path, as a container starts in BREAKOUT).
    pub(in crate::agent) fn runs_fast(&self, function: &str, revision: u64) {
        let slot = {
            let mut state = self.state();
            state.ahead.fast.insert(function.to_string(), revision);
            match state.ahead.zygotes.get(function) {
                Some(slot) if slot.revision() == revision => state.ahead.zygotes.remove(function),
                _ => None,
            }
        };
        if let Some(slot) = slot {
            self.discard(slot);
        }
        self.drop_spare(function, |r| r == revision);
    }

    /// `revision` of `function` no longer runs on a compiled trace: its next cold start builds
    /// its snapshot again.
    pub(in crate::agent) fn runs_ordinary(&self, function: &str, revision: u64) {
        let mut state = self.state();
        if state.ahead.fast.get(function) == Some(&revision) {
            state.ahead.fast.remove(function);
        }
    }

    pub(in crate::agent) fn ready_zygote(&self, spec: &SharedSpec) -> Option<Arc<Zygote>> {
        match self.state().ahead.zygotes.get(&spec.function) {
            Some(SnapshotSlot::Ready(z)) if z.spec.revision == spec.revision && z.alive() => {
                Some(z.clone())
            }
            _ => None,
        }
    }

    /// Forgets a zygote that failed; the next cold start builds a new one.
    pub(in crate::agent) fn drop_zygote(&self, function: &str, zygote: &Arc<Zygote>) {
        let mut state = self.state();
        if matches!(state.ahead.zygotes.get(function), Some(SnapshotSlot::Ready(z)) if Arc::ptr_eq(z, zygote))
        {
            state.ahead.zygotes.remove(function);
        }
        drop(state);
        let revision = zygote.spec.revision;
        self.drop_spare(function, |r| r == revision);
    }

    /// Builds the function-specific snapshot of `spec` in the background (a fork server where
    /// the runtime can fork, else a standby instance), unless it exists, is being built, failed
    /// for this revision, or prebaking is off.
    pub(in crate::agent) fn build_zygote(self: &Arc<Self>, spec: &SharedSpec) {
        self.build_snapshot(spec, None)
    }

    /// [`Self::build_zygote`], holding `preparing` until the build ends.
    pub(in crate::agent) fn build_snapshot(
        self: &Arc<Self>,
        spec: &SharedSpec,
        preparing: Option<crate::agent::Preparing>,
    ) {
        self.make_snapshot(spec, preparing, false)
    }

    /// Builds `spec`'s snapshot again (its warm-up replays have changed), while the one there
    /// is goes on serving; the new one replaces it when ready. Nothing if the function has no
    /// ready snapshot of this revision, or one is being built.
    pub(in crate::agent) fn rebuild_snapshot(self: &Arc<Self>, spec: &SharedSpec) {
        self.make_snapshot(spec, None, true)
    }

    fn make_snapshot(
        self: &Arc<Self>,
        spec: &SharedSpec,
        preparing: Option<crate::agent::Preparing>,
        rebuild: bool,
    ) {
        let Some(can_fork) = self.ctx.runtimes.get(&spec.runtime).map(|r| r.can_fork()) else {
            return;
        };
        let id = {
            let mut state = self.state();
            if state.shutting_down || state.ahead.outdated(spec) || !state.ahead.prebakes(spec) {
                return;
            }
            if rebuild {
                let serving = matches!(
                    state.ahead.zygotes.get(&spec.function),
                    Some(slot @ (SnapshotSlot::Ready(_) | SnapshotSlot::Standby(..)))
                        if slot.revision() == spec.revision
                );
                if !serving || !self.rebuilding.locked().insert(spec.function.clone()) {
                    return;
                }
                state.new_id()
            } else {
                match state.ahead.zygotes.get(&spec.function) {
                    Some(SnapshotSlot::Ready(z))
                        if z.spec.revision == spec.revision && z.alive() =>
                    {
                        return
                    }
                    Some(
                        slot @ (SnapshotSlot::Building { .. }
                        | SnapshotSlot::Failed { .. }
                        | SnapshotSlot::Standby(..)),
                    ) if slot.revision() == spec.revision => return,
                    _ => {}
                }
                let id = state.new_id();
                state.ahead.zygotes.insert(
                    spec.function.clone(),
                    SnapshotSlot::Building {
                        revision: spec.revision,
                        id,
                    },
                );
                id
            }
        };
        let inner = self.clone();
        let spec = spec.clone();
        tokio::spawn(async move {
            let _preparing = preparing;
            let begin = Instant::now();
            let built = if can_fork {
                Zygote::build(&inner.ctx, &spec, id, inner.destroying.clone())
                    .await
                    .map(|zygote| {
                        // Every fork alive at once: the function's instances and its spares.
                        let forks =
                            u64::from(spec.max_instances) + inner.config.max_standbys as u64;
                        zygote.allow_fork_charges(forks);
                        SnapshotSlot::Ready(zygote)
                    })
            } else {
                zygote::warmed_up(&inner.ctx, &spec, id, Priority::Ahead)
                    .await
                    .map(|(i, _)| SnapshotSlot::Standby(Box::new(i), begin.elapsed()))
            };
            let mut evicted = Vec::new();
            let mut installed = false;
            {
                let mut state = inner.state();
                let current = if rebuild {
                    inner.rebuilding.locked().remove(&spec.function);
                    // Replaces the one that served meanwhile, if it is still this revision's.
                    matches!(
                        state.ahead.zygotes.get(&spec.function),
                        Some(slot @ (SnapshotSlot::Ready(_) | SnapshotSlot::Standby(..)))
                            if slot.revision() == spec.revision
                    )
                } else {
                    matches!(
                        state.ahead.zygotes.get(&spec.function),
                        Some(SnapshotSlot::Building { revision, id: building }) if *revision == spec.revision && *building == id
                    )
                };
                match built {
                    Ok(slot) if current && !state.shutting_down && state.ahead.prebakes(&spec) => {
                        tracing::info!(
                            function = %spec.function,
                            revision = spec.revision,
                            "snapshot ready ({}, built in {:.1} ms)",
                            if can_fork { "fork server" } else { "standby instance" },
                            begin.elapsed().as_secs_f64() * 1000.0
                        );
                        evicted = state.ahead.evict_snapshots(
                            slot.memory_bytes(),
                            inner.config.snapshot_memory_mb,
                            &spec.function,
                        );
                        // A rebuilt snapshot's predecessor goes with its spares.
                        evicted.extend(state.ahead.zygotes.insert(spec.function.clone(), slot));
                        installed = true;
                    }
                    Ok(outdated) => evicted.push(outdated),
                    Err(error) if rebuild => {
                        tracing::warn!(
                            function = %spec.function,
                            "the snapshot could not be built again with recent requests; the one there serves on: {error}"
                        );
                    }
                    Err(error) => {
                        tracing::warn!(
                            function = %spec.function,
                            "no snapshot, cold starts take the coldest path: {error}"
                        );
                        if current {
                            state.ahead.zygotes.insert(
                                spec.function.clone(),
                                SnapshotSlot::Failed {
                                    revision: spec.revision,
                                    error: error.to_string(),
                                },
                            );
                        }
                    }
                }
            }
            // Outside the lock: the last reference to a zygote tears its sandbox down.
            for slot in evicted {
                inner.discard(slot);
            }
            if installed {
                inner.refill_spare(&spec);
            }
            if !can_fork {
                inner.offer_start(&spec, !installed);
            }
        });
    }
}
