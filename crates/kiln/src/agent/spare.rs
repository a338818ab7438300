//! Spare forks: the hot path of runtimes that fork, made ahead of demand.
//!
//! Forking an instance from a zygote is quick; moving the fork into a cgroup of its own is not
//! (on cgroup v1 the first `cgroup.procs` write waits for an RCU grace period, several ms; see
//! bench/results/startpaths.md). So the agent keeps one fork per function ready, already in its
//! cgroup with the function's limits: a cold start takes it and is served at once, and the next
//! spare is forked once that start's first invocation has been answered
//! (`Inner::after_cold_start`), off the critical path. A function that allows warm-up
//! invocations gets one on its spare too, before the spare is offered. A spare belongs to its zygote's revision
//! and goes with it (update, eviction, a failed fork, shutdown).

use std::sync::Arc;

use super::instance::Instance;
use super::{Inner, SnapshotSlot};
use crate::function::SharedSpec;

/// The spare fork of one function.
pub(super) enum Spare {
    /// Being forked, as instance `id`.
    Forking(u64),
    Ready(Box<Instance>),
}

impl Spare {
    pub fn id(&self) -> u64 {
        match self {
            Spare::Forking(id) => *id,
            Spare::Ready(instance) => instance.id,
        }
    }
}

impl Inner {
    /// The function's spare fork, if one of `spec`'s revision is ready.
    pub(super) fn take_spare(&self, spec: &SharedSpec) -> Option<Box<Instance>> {
        let mut state = self.state();
        match state.spares.get(&spec.function) {
            Some(Spare::Ready(i)) if i.spec.revision == spec.revision => {
                match state.spares.remove(&spec.function) {
                    Some(Spare::Ready(instance)) => Some(instance),
                    _ => None,
                }
            }
            _ => None,
        }
    }

    /// Forks the function's next spare in the background, if its zygote is ready and it has
    /// none (ready or being forked).
    pub(super) fn refill_spare(self: &Arc<Self>, spec: &SharedSpec) {
        let Some(zygote) = self.ready_zygote(spec) else {
            return;
        };
        let id = {
            let mut state = self.state();
            if state.shutting_down
                || state.spares.contains_key(&spec.function)
                || super::outdated(&state, spec)
            {
                return;
            }
            state.next_id += 1;
            let id = state.next_id;
            state
                .spares
                .insert(spec.function.clone(), Spare::Forking(id));
            id
        };
        let inner = self.clone();
        let spec = spec.clone();
        tokio::spawn(async move {
            // A fork's first request copies every page it writes (reference counts, caches)
            // from the zygote. Where the function allows warm-up, the spare pays that with one
            // warm-up invocation before it is offered.
            let warm_up = spec.prebake.warmup_invocations > 0;
            let forked = Instance::fork(&inner.ctx, &zygote, &spec, id, warm_up).await;
            let leftover = {
                let mut state = inner.state();
                let mine =
                    matches!(state.spares.get(&spec.function), Some(Spare::Forking(f)) if *f == id);
                let current = !state.shutting_down
                    && matches!(state.zygotes.get(&spec.function), Some(SnapshotSlot::Ready(z)) if Arc::ptr_eq(z, &zygote));
                if mine {
                    state.spares.remove(&spec.function);
                }
                match forked {
                    Ok(instance) if mine && current => {
                        state
                            .spares
                            .insert(spec.function.clone(), Spare::Ready(Box::new(instance)));
                        None
                    }
                    Ok(instance) => Some(instance),
                    Err(reason) => {
                        tracing::warn!(function = %spec.function, "no spare fork: {reason}");
                        None
                    }
                }
            };
            if let Some(instance) = leftover {
                inner.destroy_later(instance);
            }
        });
    }

    /// Lets the spare of `function` go if `drop(its revision)` says so (a fork in progress,
    /// whose revision is not known yet, goes if `drop_forking`; its task destroys it when it
    /// finds itself replaced).
    pub(super) fn drop_spare(
        &self,
        function: &str,
        drop: impl Fn(u64) -> bool,
        drop_forking: bool,
    ) {
        let spare = {
            let mut state = self.state();
            let gone = match state.spares.get(function) {
                Some(Spare::Ready(i)) => drop(i.spec.revision),
                Some(Spare::Forking(_)) => drop_forking,
                None => false,
            };
            match gone.then(|| state.spares.remove(function)).flatten() {
                Some(Spare::Ready(instance)) => Some(instance),
                _ => None,
            }
        };
        if let Some(instance) = spare {
            self.destroy_later(*instance);
        }
    }

    /// Takes every ready spare out (at shutdown).
    pub(super) fn drain_spares(&self) -> Vec<Instance> {
        let mut state = self.state();
        state
            .spares
            .drain()
            .filter_map(|(_, spare)| match spare {
                Spare::Ready(instance) => Some(*instance),
                Spare::Forking(_) => None,
            })
            .collect()
    }
}
