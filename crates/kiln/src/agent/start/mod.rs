//! Start paths: starting an instance by the most advanced path that exists for its function
//! (hot, warm, coldest), and handing instances made ahead of demand to the cold starts that
//! take them. What is made ahead lives beside this file: each function's snapshot
//! (`snapshots.rs`: a fork server, `zygote.rs`, or a standby instance), its spares sized by
//! demand (`spare.rs`, `demand.rs`), the runtime-generic standbys (`warm.rs`), and whether a
//! revision's start paths are built yet (`preparations.rs`).

pub(super) mod demand;
pub(super) mod preparations;
pub(super) mod snapshots;
pub(super) mod spare;
pub(super) mod warm;
pub(super) mod zygote;

use std::sync::Arc;
use std::time::Instant;

use crate::agent::{Inner, Instance, Priority, StartError, StartPath};
use crate::function::SharedSpec;
use snapshots::SnapshotSlot;

impl Inner {
    /// Starts a new instance by the most advanced path that exists for `spec`: its standby or a
    /// fork of its zygote (hot), else a runtime-generic standby (warm), else the coldest path.
    /// The caller calls [`Inner::after_cold_start`] once the first invocation is answered.
    /// A broken snapshot falls back to the next path, with the reason logged.
    pub(in crate::agent) async fn start(
        self: &Arc<Self>,
        spec: &SharedSpec,
        id: u64,
    ) -> Result<Instance, StartError> {
        let begin = Instant::now();
        let made = |instance: Option<Box<Instance>>, what| {
            instance.and_then(|i| self.adopt_made_ahead(i, what, id, begin))
        };
        if let Some(instance) = made(self.take_standby(spec), "standby instance") {
            return Ok(instance);
        }
        if let Some(instance) = made(self.take_spare(spec), "spare fork") {
            return Ok(instance);
        }
        if let Some(zygote) = self.ready_zygote(spec) {
            match Instance::fork(&self.ctx, &zygote, spec, id, false, Priority::Request).await {
                Ok(instance) => return Ok(instance),
                Err(reason) => {
                    tracing::warn!(
                        function = %spec.function,
                        "hot start failed, falling back to the coldest path: {reason}"
                    );
                    self.drop_zygote(&spec.function, &zygote);
                }
            }
        }
        match self.start_warm(spec).await {
            Some(Ok(instance)) => {
                self.move_reservation(id, instance.id);
                return Ok(instance);
            }
            // The function's own init failed: running it again on another path would repeat
            // its side effects, and fail the same way.
            Some(Err(e @ StartError::Function { .. })) => return Err(e),
            Some(Err(StartError::Platform(reason))) => tracing::warn!(
                function = %spec.function,
                "warm start failed, falling back to the coldest path: {reason}"
            ),
            None => {}
        }
        Instance::start_cold(&self.ctx, spec, id).await
    }

    /// What a cold start used up is rebuilt once its first invocation is answered, not while
    /// it runs: the function's snapshot (unless prebaking is off) and the runtime standbys.
    /// Both boot a runtime, which on a small node would take CPU from that first invocation.
    pub(in crate::agent) fn after_cold_start(self: &Arc<Self>, spec: &SharedSpec) {
        self.build_zygote(spec);
        self.refill_spare(spec);
        self.refill_standbys();
    }

    /// Hands a hot instance made ahead of demand (a function's standby or spare fork) to the
    /// cold start that reserved `id`, if it is still alive; else lets it go.
    pub(in crate::agent) fn adopt_made_ahead(
        &self,
        mut instance: Box<Instance>,
        what: &str,
        id: u64,
        begin: Instant,
    ) -> Option<Instance> {
        if !instance.alive() {
            tracing::warn!(function = %instance.spec.function, "the {what} was gone; falling back");
            self.destroy_later(*instance);
            return None;
        }
        instance.join_requests();
        instance.start_path = StartPath::Hot;
        instance.init_duration = begin.elapsed();
        instance.last_used = Instant::now();
        self.move_reservation(id, instance.id);
        Some(*instance)
    }

    /// An instance that keeps an id of its own (a standby) takes over the reservation made for
    /// the new instance `reserved`.
    pub(in crate::agent) fn move_reservation(&self, reserved: u64, id: u64) {
        let mut state = self.state();
        if let Some(entry) = state.instances.live.remove(&reserved) {
            state.instances.live.insert(id, entry);
        }
        state.sessions.rebind(reserved, id);
    }

    pub(in crate::agent) fn take_standby(&self, spec: &SharedSpec) -> Option<Box<Instance>> {
        let mut state = self.state();
        match state.ahead.zygotes.get(&spec.function) {
            Some(SnapshotSlot::Standby(i, _)) if i.spec.revision == spec.revision => {
                match state.ahead.zygotes.remove(&spec.function) {
                    Some(SnapshotSlot::Standby(instance, _)) => Some(instance),
                    _ => None,
                }
            }
            _ => None,
        }
    }
}
