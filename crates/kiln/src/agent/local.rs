//! [`LocalAgent`] as the controller sees it: the [`NodeAgent`] calls (invoke, retire, prepare,
//! status, sessions, shutdown) carried out on this host.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use kiln_sandbox::Cgroup;
use tokio::sync::oneshot;

use super::snapshots::SnapshotSlot;
use super::{
    memory, sessions, AgentError, Instance, InvokeOutcome, InvokeRequest, LocalAgent, MemoryLender,
    NodeAgent, NodeStatus, Placement, SessionStatus,
};
use crate::function::SharedSpec;

/// A future that, dropped before it is done, finishes on a task of its own.
struct RunsToCompletion<F: Future<Output: Send + 'static> + Send + 'static>(Option<Pin<Box<F>>>);

impl<F: Future<Output: Send + 'static> + Send + 'static> Future for RunsToCompletion<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let future = self.0.as_mut().expect("polled after completion");
        let output = std::task::ready!(future.as_mut().poll(cx));
        self.0 = None;
        Poll::Ready(output)
    }
}

impl<F: Future<Output: Send + 'static> + Send + 'static> Drop for RunsToCompletion<F> {
    fn drop(&mut self) {
        if let (Some(future), Ok(runtime)) = (self.0.take(), tokio::runtime::Handle::try_current())
        {
            runtime.spawn(future);
        }
    }
}

impl LocalAgent {
    fn run(
        &self,
        spec: SharedSpec,
        request: InvokeRequest,
        placement: Placement,
        accepted: Option<oneshot::Sender<()>>,
    ) -> BoxFuture<'static, Result<InvokeOutcome, AgentError>> {
        // The invocation runs to completion even if the caller goes away, as on Lambda; the
        // instance is then returned to its pool instead of being lost with the future. It runs
        // in the caller's task (no task of its own, no wake-up to hand its answer back) and
        // moves to a task of its own only if the caller drops it unfinished.
        let invocation = AssertUnwindSafe(
            self.inner
                .clone()
                .invoke(spec, request, placement, accepted),
        )
        .catch_unwind();
        Box::pin(async move {
            match (RunsToCompletion(Some(Box::pin(invocation)))).await {
                Ok(result) => result,
                Err(_) => Err(AgentError::Sandbox("the invocation panicked".into())),
            }
        })
    }
}

impl NodeAgent for LocalAgent {
    fn invoke(
        &self,
        spec: SharedSpec,
        request: InvokeRequest,
    ) -> BoxFuture<'static, Result<InvokeOutcome, AgentError>> {
        self.run(spec, request, Placement::Any, None)
    }

    fn invoke_placed(
        &self,
        spec: SharedSpec,
        request: InvokeRequest,
        placement: Placement,
        accepted: oneshot::Sender<()>,
    ) -> BoxFuture<'static, Result<InvokeOutcome, AgentError>> {
        self.run(spec, request, placement, Some(accepted))
    }

    fn has_idle(&self, function: &str, revision: u64) -> bool {
        self.inner.has_idle(function, revision)
    }

    fn warm_with(&self, spec: SharedSpec, events: Vec<bytes::Bytes>) {
        self.inner.ctx.replays.set(&spec.function, events);
        self.inner.rebuild_snapshot(&spec);
    }

    fn retire(&self, function: &str, keep_revision: Option<u64>) {
        if keep_revision.is_none() {
            self.inner.preparations.forget(function);
        }
        if let Some(old) = self.inner.breakouts.remove(function, keep_revision) {
            let inner = self.inner.clone();
            tokio::spawn(async move { inner.end_tracing(&old).await });
        }
        if let Some(host) = &self.inner.ctx.wasm {
            host.retire(function, keep_revision);
        }
        let (victims, zygote) = {
            let mut guard = self.inner.state();
            let state = &mut *guard;
            match keep_revision {
                None => {
                    state.sessions.end_all(&mut state.instances.live, function);
                    state.ahead.newest.remove(function);
                    state.ahead.provisioned.remove(function);
                    state.ahead.fast.remove(function);
                    // A function made again under its name starts with no demand of its own.
                    if let Some(pool) = state.instances.pools.get_mut(function) {
                        pool.demand = Default::default();
                    }
                }
                Some(revision) => {
                    let newest = state.ahead.newest.entry(function.to_string()).or_default();
                    *newest = (*newest).max(revision);
                }
            }
            let zygote = match state.ahead.zygotes.get(function) {
                Some(slot) if Some(slot.revision()) != keep_revision => {
                    state.ahead.zygotes.remove(function)
                }
                _ => None,
            };
            let mut retire = Vec::new();
            if let Some(pool) = state.instances.pools.get_mut(function) {
                let (keep, old): (Vec<_>, Vec<_>) = pool
                    .idle
                    .drain(..)
                    .partition(|i| Some(i.spec.revision) == keep_revision);
                pool.idle = keep;
                retire = old;
            }
            for instance in &retire {
                state.forget(instance.id);
            }
            (retire, zygote)
        };
        if let Some(slot) = zygote {
            self.inner.discard(slot);
        }
        if keep_revision.is_none() {
            // The function is gone, and the state of its sessions with it.
            let dir = self.inner.config.session_dir.join(function);
            if let Err(e) = std::fs::remove_dir_all(&dir) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!(function, "its sessions' logs could not be removed: {e}");
                }
            }
        }
        self.inner
            .drop_spare(function, |r| Some(r) != keep_revision);
        for victim in victims {
            self.inner.destroy_later(victim);
        }
    }

    fn provision(&self, spec: SharedSpec, instances: u32) {
        {
            let mut state = self.inner.state();
            let provisioned = &mut state.ahead.provisioned;
            let before = match instances {
                0 => provisioned.remove(&spec.function),
                n => provisioned.insert(spec.function.clone(), n as usize),
            };
            if before.unwrap_or(0) == instances as usize {
                return;
            }
        }
        // More are made now; a surplus goes at the reaper's next tick.
        self.inner.refill_spare(&spec);
    }

    fn initialised(&self, spec: &SharedSpec) -> Option<super::Initialised> {
        use crate::agent::InstanceState;
        if self.inner.wasm_host(spec).is_some() {
            return None;
        }
        let state = self.inner.state();
        let (mut all, mut idle) = (0, 0);
        for i in state.instances.live.values() {
            if i.function == spec.function && i.revision == spec.revision {
                all += usize::from(i.state != InstanceState::Starting);
                idle += usize::from(i.state == InstanceState::Idle);
            }
        }
        let spares = state
            .ahead
            .spares
            .get(&spec.function)
            .filter(|s| s.spec.revision == spec.revision)
            .map_or(0, |s| s.ready.len());
        let standby = matches!(
            state.ahead.zygotes.get(&spec.function),
            Some(slot @ SnapshotSlot::Standby(..)) if slot.revision() == spec.revision
        );
        let ahead = spares + usize::from(standby);
        Some(super::Initialised {
            all: all + ahead,
            idle: idle + ahead,
        })
    }

    fn expect(&self, spec: SharedSpec, concurrency: u32) {
        {
            let mut state = self.inner.state();
            let pool = state
                .instances
                .pools
                .entry(spec.function.clone())
                .or_default();
            pool.demand.observe(
                std::time::Instant::now(),
                concurrency as usize,
                self.inner.config.standby_window,
            );
        }
        self.inner.refill_spare(&spec);
    }

    fn prepare(&self, spec: SharedSpec) {
        use crate::function::PrebakeMode;
        // Done when the builds started below end (or at once, if none is).
        let preparing = self.inner.preparations.begin(&spec.function, spec.revision);
        if let Some(config) = &spec.breakout {
            // The package is instrumented at deploy time, off the request path.
            self.inner.breakout_of(&spec, config);
        }
        let open_logs: Vec<String> = {
            let mut state = self.inner.state();
            let newest = state.ahead.newest.entry(spec.function.clone()).or_default();
            *newest = (*newest).max(spec.revision);
            state
                .sessions
                .ids(&spec.function)
                .iter()
                .map(|id| sessions::log::file_name(id))
                .collect()
        };
        if let Some(config) = &spec.sessions {
            // Sessions that expired while kiln was down (their logs were not used for a TTL).
            let dir = self.inner.config.session_dir.join(&spec.function);
            let ttl = Duration::from_secs(u64::from(config.idle_ttl_seconds));
            tokio::task::spawn_blocking(move || sessions::sweep(&dir, &open_logs, ttl));
        }
        match self.inner.wasm_host(&spec) {
            // A plain module is compiled at deploy time too: only its snapshot is off.
            Some(Ok(host)) if spec.prebake.mode != PrebakeMode::Lazy => {
                host.prepare(spec, Some(preparing))
            }
            Some(_) => {}
            None if spec.prebake.mode == PrebakeMode::Deploy => {
                self.inner.build_snapshot(&spec, Some(preparing))
            }
            None => {}
        }
    }

    fn prepared(&self, function: &str, revision: u64) -> super::Prepared {
        self.inner.preparations.of(function, revision)
    }

    fn lendable_memory_mb(&self) -> u64 {
        memory::lendable_mb(
            &self.inner.state().instances,
            self.inner.config.memory_budget_mb,
        )
    }

    fn status(&self) -> NodeStatus {
        self.inner.status()
    }

    fn lend_to(&self, lender: Arc<dyn MemoryLender>) {
        if self.inner.lender.set(lender).is_err() {
            tracing::warn!("the node's memory is already lent; a second lender is ignored");
        }
    }

    fn breakout_status(&self, function: &str) -> Option<super::BreakoutStatus> {
        self.inner.breakouts.status_of(function)
    }

    fn sessions(&self, function: &str) -> Vec<SessionStatus> {
        let state = self.inner.state();
        state
            .sessions
            .list(&state.instances.live, function, Instant::now())
    }

    fn end_session(&self, function: &str, session: &str) -> bool {
        let ended = {
            let mut guard = self.inner.state();
            let state = &mut *guard;
            state.sessions.end(
                &mut state.instances.live,
                &(function.to_string(), session.to_string()),
            )
        };
        // A session not used since kiln started has only its log on disk.
        let path = self
            .inner
            .config
            .session_dir
            .join(function)
            .join(sessions::log::file_name(session));
        ended || std::fs::remove_file(path).is_ok()
    }

    fn shutdown(&self, grace: Duration) -> BoxFuture<'static, ()> {
        let inner = self.inner.clone();
        Box::pin(async move {
            let (idle, zygotes): (Vec<Instance>, Vec<Arc<super::zygote::Zygote>>) = {
                let mut state = inner.state();
                state.shutting_down = true;
                let mut idle = Vec::new();
                for pool in state.instances.pools.values_mut() {
                    idle.append(&mut pool.idle);
                    pool.waiters.clear();
                }
                for instance in &idle {
                    state.forget(instance.id);
                }
                // A zygote goes once its last fork is gone (kept here until then); standby
                // instances go with the idle ones.
                let mut zygotes = Vec::new();
                for (_, slot) in state.ahead.zygotes.drain() {
                    match slot {
                        SnapshotSlot::Standby(instance, _) => idle.push(*instance),
                        SnapshotSlot::Ready(zygote) => zygotes.push(zygote),
                        _ => {}
                    }
                }
                (idle, zygotes)
            };
            let mut idle = idle;
            for breakout in inner.breakouts.drain() {
                inner.end_tracing(&breakout).await;
            }
            idle.extend(inner.drain_standbys());
            idle.extend(inner.drain_spares());
            futures_util::future::join_all(idle.into_iter().map(Instance::destroy)).await;
            let deadline = Instant::now() + grace;
            while Instant::now() < deadline && !inner.state().instances.live.is_empty() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            // Whatever is still running is killed through its cgroup.
            let stragglers: Vec<Arc<Cgroup>> = inner
                .state()
                .instances
                .live
                .values()
                .filter_map(|l| l.cgroup.clone())
                .collect();
            for cgroup in stragglers {
                cgroup.kill_all();
                let _ = tokio::task::spawn_blocking(move || cgroup.remove()).await;
            }
            // The forks killed above let go of their zygotes as their invocations end; the last
            // reference is then this one, whose drop tears the zygote down (counted below).
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline && zygotes.iter().any(|z| Arc::strong_count(z) > 1) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            drop(zygotes);
            // Instances that finished or failed meanwhile are being destroyed in the background.
            let deadline = Instant::now() + Duration::from_secs(30);
            while Instant::now() < deadline && inner.destroying.load(Ordering::SeqCst) > 0 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            inner.ctx.cgroups.remove_parents();
            if let Some(slots) = &inner.ctx.code_slots {
                slots.close();
            }
        })
    }
}
