//! The tracing instance of a revision (started on first use, kept idle, let go), the trace
//! pulled from it and compiled off the request path, and instrumenting a revision's package.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::revision::Breakout;
use super::status::BreakoutMode;
use super::trace::{accept_trace, compile, instrument, BuildError};
use crate::agent::instance::SessionCtx;
use crate::agent::memory::make_room;
use crate::agent::{Inner, InstanceState, StartError};
use crate::agent::{Instance, InvokeOutcome, InvokeRequest};
use crate::function::{BreakoutConfig, SharedSpec};
use crate::sync::LockExt;

/// How long a tracing instance may take to send its trace tree.
const DUMP_TIMEOUT: Duration = Duration::from_secs(10);
/// A retrace is compiled at most this often.
const RECOMPILE_INTERVAL: Duration = Duration::from_secs(1);

impl Inner {
    /// Runs a request on the tracing instance if it is idle (started on first use); `None`
    /// when it is busy, could not start, or the runtime was gone before it took the event.
    /// A request of a session (whose turn the caller holds) has the session loaded into the
    /// instance and its writes committed to the session's log, as on a primary.
    /// Once enough is traced (or, after a miss, at most once a second) the trace is pulled and
    /// compiled off the request's path.
    pub(super) async fn on_tracer(
        self: &Arc<Self>,
        spec: &SharedSpec,
        breakout: &Arc<Breakout>,
        request: &InvokeRequest,
        miss: Option<&str>,
        session: Option<&SessionCtx>,
    ) -> Option<InvokeOutcome> {
        let mut slot = breakout.tracer.try_lock().ok()?;
        let trace_spec = breakout.progress.locked().trace_spec.clone()?;
        let mut cold = false;
        if slot.is_none() && miss.is_some() {
            // A new tracing instance would trace only the misses, not the paths compiled
            // already: a compiled revision retraces only on the instance it was traced on.
            breakout.progress.locked().tracer_gone = true;
            return None;
        }
        if slot.is_none() {
            *slot = Some(self.start_tracer(breakout, &trace_spec).await?);
            cold = true;
        }
        let mut instance = slot.take().expect("just filled");
        let begin = Instant::now();
        let invocation = instance.invoke(request, session, Box::new(|| {})).await;
        let duration = begin.elapsed();
        if !invocation.delivered {
            // The runtime was gone before it took the event: the ordinary path runs it.
            self.let_tracer_go(instance);
            return None;
        }
        breakout.count("tracing", None);
        let traced = {
            let mut progress = breakout.progress.locked();
            progress.status.traced += 1;
            progress.status.traced
        };
        let healthy = invocation.healthy;
        let outcome = crate::agent::outcome(
            spec,
            request,
            &mut instance,
            invocation,
            cold,
            duration,
            Some(("tracing", miss)),
        );
        if !healthy {
            // Its trace went with it; while tracing, the next idle request starts another.
            self.let_tracer_go(instance);
            return Some(outcome);
        }
        let compile_now = {
            let mut progress = breakout.progress.locked();
            let due = match progress.status.mode {
                BreakoutMode::Tracing => traced >= breakout.config.trace_requests,
                BreakoutMode::Decontainerized => {
                    progress.status.retraces < breakout.config.max_retraces
                        && progress
                            .last_compile
                            .is_none_or(|t| t.elapsed() >= RECOMPILE_INTERVAL)
                }
                _ => false,
            };
            if due {
                progress.last_compile = Some(Instant::now());
            }
            due
        };
        if !compile_now {
            self.keep_tracer(&mut slot, instance);
            return Some(outcome);
        }
        // The trace is pulled after the answer is known but before it is returned, so the
        // caller of this request waits for the dump (bounded).
        let dumped = instance.dump_trace(DUMP_TIMEOUT).await;
        match dumped {
            Ok(bytes) => {
                self.keep_tracer(&mut slot, instance);
                drop(slot);
                self.compile_later(breakout.clone(), trace_spec, bytes);
            }
            Err(reason) => {
                drop(slot);
                self.let_tracer_go(instance);
                breakout.set_ordinary(reason.to_string());
            }
        }
        Some(outcome)
    }

    /// Puts the tracing instance back, idle.
    fn keep_tracer(&self, slot: &mut Option<Instance>, mut instance: Instance) {
        instance.last_used = Instant::now();
        if let Some(live) = self.state().instances.live.get_mut(&instance.id) {
            live.state = InstanceState::Idle;
        }
        *slot = Some(instance);
    }

    /// Validates a trace the tracing instance sent, keeps it, compiles and loads it on a
    /// blocking thread, and puts the module in place (`decontainerized`), or makes the revision
    /// `ordinary` with the reason.
    fn compile_later(
        self: &Arc<Self>,
        breakout: Arc<Breakout>,
        trace_spec: SharedSpec,
        bytes: bytes::Bytes,
    ) {
        let engine = self.breakouts.engine();
        let retrace = breakout.mode() == BreakoutMode::Decontainerized;
        if !retrace {
            breakout.progress.locked().status.mode = BreakoutMode::Compiling;
        }
        let inner = self.clone();
        tokio::spawn(async move {
            let config = breakout.config.clone();
            let kept = trace_spec.code_dir.with_extension("trace.json");
            let spec = trace_spec.clone();
            let built = tokio::task::spawn_blocking(move || {
                let (trace, nodes) = accept_trace(&bytes)?;
                // Kept beside the instrumented code, for inspection.
                if let Err(e) = std::fs::write(&kept, &bytes) {
                    tracing::warn!("{}: {e}", kept.display());
                }
                let begin = Instant::now();
                let module = compile(&trace, &config, &spec, engine?)?;
                Ok::<_, BuildError>((module, nodes, begin.elapsed()))
            })
            .await
            .unwrap_or_else(|e| Err(BuildError::Task(e)));
            match built {
                Ok(((loaded, module_bytes), nodes, took)) => {
                    let mut progress = breakout.progress.locked();
                    if progress.status.mode == BreakoutMode::Ordinary {
                        return;
                    }
                    progress.fast = Some(Arc::new(loaded));
                    progress.status.trace_nodes = Some(nodes);
                    progress.status.module_bytes = Some(module_bytes);
                    progress.status.compile_seconds = Some(took.as_secs_f64());
                    if retrace {
                        progress.status.retraces += 1;
                    }
                    progress.status.mode = BreakoutMode::Decontainerized;
                    progress.status.reason = None;
                    tracing::info!(
                        function = %progress.status.function,
                        revision = progress.status.revision,
                        nodes,
                        module_bytes,
                        "[kiln] breakout: decontainerized (compiled in {:.1} ms)",
                        took.as_secs_f64() * 1000.0
                    );
                    let (function, revision) =
                        (progress.status.function.clone(), progress.status.revision);
                    drop(progress);
                    inner.runs_fast(&function, revision);
                }
                // A retrace that fails to compile keeps the module in place.
                Err(reason) if retrace => {
                    tracing::warn!("[kiln] breakout: a retrace was not compiled: {reason}");
                    breakout.progress.locked().status.retraces += 1;
                }
                Err(reason) => {
                    breakout.set_ordinary(reason.to_string());
                    inner.end_tracing(&breakout).await;
                }
            }
        });
    }

    /// The fast path of `spec`'s revision; instrumenting starts on first sight, and an older
    /// revision's tracing instance goes.
    pub(in crate::agent) fn breakout_of(
        self: &Arc<Self>,
        spec: &SharedSpec,
        config: &BreakoutConfig,
    ) -> Arc<Breakout> {
        let (breakout, fresh, old) = self.breakouts.get(spec, config);
        if let Some(old) = old {
            let inner = self.clone();
            tokio::spawn(async move { inner.end_tracing(&old).await });
        }
        if fresh {
            self.start_instrumenting(spec.clone(), breakout.clone());
        }
        breakout
    }

    fn start_instrumenting(self: &Arc<Self>, spec: SharedSpec, breakout: Arc<Breakout>) {
        tokio::task::spawn_blocking(move || match instrument(&spec) {
            Ok((dir, sites)) => {
                let mut trace_spec = (*spec).clone();
                trace_spec.code_dir = dir;
                trace_spec
                    .env
                    .insert("KILN_BREAKOUT_TRACE".into(), "1".into());
                // One instance, with nothing built ahead of it.
                trace_spec.max_instances = 1;
                trace_spec.breakout = None;
                let mut progress = breakout.progress.locked();
                if progress.status.mode == BreakoutMode::Instrumenting {
                    progress.status.mode = BreakoutMode::Tracing;
                    progress.status.unsupported_sites = sites;
                    progress.trace_spec = Some(Arc::new(trace_spec));
                }
            }
            Err(reason) => breakout.set_ordinary(reason.to_string()),
        });
    }

    /// Starts the tracing instance on the coldest path, its memory booked like any instance's
    /// (it does not count against the function's pool). `None` when the node has no room for
    /// it now, or it could not start.
    async fn start_tracer(
        self: &Arc<Self>,
        breakout: &Breakout,
        trace_spec: &SharedSpec,
    ) -> Option<Instance> {
        let id = {
            let mut guard = self.state();
            let state = &mut *guard;
            let need = trace_spec.memory_mb;
            let (victims, fits) = make_room(state, u64::from(need), self.config.memory_budget_mb);
            for victim in victims {
                self.destroy_later(victim);
            }
            if !fits {
                return None;
            }
            let id = state.new_id();
            state.instances.book(id, trace_spec, need, false);
            id
        };
        match Instance::start_cold(&self.ctx, trace_spec, id).await {
            Ok(instance) => {
                self.state().instances.started(&instance);
                Some(instance)
            }
            Err(e) => {
                self.state().forget(id);
                let reason = match e {
                    StartError::Function { body, .. } => format!(
                        "the instrumented code failed to start: {}",
                        String::from_utf8_lossy(&body)
                    ),
                    StartError::Platform(reason) => {
                        format!("the tracing instance could not start: {reason}")
                    }
                };
                breakout.set_ordinary(reason);
                None
            }
        }
    }

    /// Tracing instances idle for longer than instances are kept go like idle instances (their
    /// trace with them: tracing starts again with the next request), and so do a compiled
    /// trace's idle wasm instances (the memory their requests touched with them).
    pub(in crate::agent) fn reap_idle_tracers(&self, now: Instant) {
        let ttl = self.config.idle_ttl;
        let all: Vec<Arc<Breakout>> = self
            .breakouts
            .by_function
            .locked()
            .values()
            .cloned()
            .collect();
        for breakout in all {
            let fast = breakout.progress.locked().fast.clone();
            if let Some(fast) = fast {
                fast.release_idle(ttl);
            }
            let Ok(mut slot) = breakout.tracer.try_lock() else {
                continue;
            };
            if slot
                .as_ref()
                .is_some_and(|i| now.duration_since(i.last_used) >= ttl)
            {
                let instance = slot.take().expect("checked");
                {
                    let mut progress = breakout.progress.locked();
                    if progress.status.mode == BreakoutMode::Tracing {
                        // Tracing starts again with the next request.
                        progress.status.traced = 0;
                    } else {
                        // The trace retraces would grow went with it: no more retracing.
                        progress.tracer_gone = true;
                    }
                }
                self.let_tracer_go(instance);
            }
        }
    }

    fn let_tracer_go(&self, instance: Instance) {
        self.state().forget(instance.id);
        self.destroy_later(instance);
    }

    /// Ends a revision's tracing: its tracing instance goes.
    pub(in crate::agent) async fn end_tracing(&self, breakout: &Breakout) {
        if let Some(instance) = breakout.take_tracer().await {
            self.let_tracer_go(instance);
        }
    }
}
