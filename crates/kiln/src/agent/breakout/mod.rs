//! BREAKOUT on the node (docs/breakout.md): per function revision with `KilnBreakout` `auto`,
//! the instrumented copy of its code, its one tracing instance, and the mode machine.
//!
//! A revision starts by instrumenting its package off the request path. While it is `tracing`,
//! a request that finds the tracing instance idle runs there (an ordinary Node instance running
//! the instrumented code under `breakout.js`, whose answers are the real ones); any other
//! request takes the ordinary path. After `TraceRequests` traced requests the agent asks the
//! instance for its trace tree, validates it (it comes from inside the sandbox), lets the
//! instance go and compiles the trace off the request path. A revision that cannot take the
//! fast path is `ordinary`, with the reason, and every request takes the ordinary path.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use kiln_breakout::exec::{FastPathEngine, Limits, Loaded};

mod effects;
mod status;
mod store;
mod trace;
use effects::{ContextFields, FastEffects};
pub use status::{BreakoutMode, BreakoutStatus};
use store::FastStore;
use trace::{accept_trace, compile, instrument, is_throw, miss_kind};

use super::memory::make_room;
use super::{AgentError, Instance, InvokeOutcome, InvokeRequest};
use super::{Inner, InstanceState, StartError};
use crate::function::{BreakoutConfig, SharedSpec};
use crate::sync::LockExt;

/// How long a tracing instance may take to send its trace tree.
const DUMP_TIMEOUT: Duration = Duration::from_secs(10);
/// A retrace is compiled at most this often.
const RECOMPILE_INTERVAL: Duration = Duration::from_secs(1);
/// The bounce limit looks at this many of the latest fast requests...
const BOUNCE_WINDOW: usize = 1000;
/// ...once it has at least this many...
const BOUNCE_MIN: usize = 100;
/// ...and gives up when more than this share of them missed.
const BOUNCE_SHARE: f64 = 0.10;

/// One revision's fast path.
pub(super) struct Breakout {
    config: BreakoutConfig,
    progress: Mutex<Progress>,
    /// The tracing instance; held while it serves a request (a request that finds it held
    /// takes the ordinary path).
    tracer: tokio::sync::Mutex<Option<Instance>>,
    /// Fast requests running now.
    running: AtomicUsize,
}

struct Progress {
    status: BreakoutStatus,
    /// The spec of the tracing instance: the function's, with the instrumented code.
    trace_spec: Option<SharedSpec>,
    /// The compiled trace, once `decontainerized`.
    fast: Option<Arc<Loaded>>,
    /// When the trace was last pulled to be compiled.
    last_compile: Option<Instant>,
    /// Whether each of the latest fast requests missed (the bounce limit's window).
    recent: VecDeque<bool>,
    /// The tracing instance of a compiled revision went (idle, or it crashed): its misses
    /// are no longer retraced.
    tracer_gone: bool,
}

/// The fast paths of the node's functions, one revision each.
#[derive(Default)]
pub(super) struct Breakouts {
    by_function: Mutex<HashMap<String, Arc<Breakout>>>,
    /// The node's engine for compiled traces, made on first use.
    engine: OnceLock<Result<Arc<FastPathEngine>, String>>,
}

impl Breakouts {
    /// The fast path of `spec`'s revision, made (and its instrumentation started) on first
    /// sight. An older revision's is replaced; its tracing instance is returned to be destroyed.
    fn get(
        &self,
        spec: &SharedSpec,
        config: &BreakoutConfig,
    ) -> (Arc<Breakout>, bool, Option<Arc<Breakout>>) {
        let mut map = self.by_function.locked();
        if let Some(b) = map.get(&spec.function) {
            let revision = b.progress.locked().status.revision;
            if revision == spec.revision {
                return (b.clone(), false, None);
            }
            if revision > spec.revision {
                // A request of an older revision still finishing: it takes the ordinary path.
                let old = Arc::new(Breakout::new(spec, config));
                old.set_ordinary("a newer revision of the function is deployed".into());
                return (old, false, None);
            }
        }
        let fresh = Arc::new(Breakout::new(spec, config));
        if let Some(old) = map.get(&spec.function) {
            // The counts are the function's, over its revisions.
            let old = old.progress.locked();
            let mut progress = fresh.progress.locked();
            progress.status.requests = old.status.requests.clone();
            progress.status.misses = old.status.misses.clone();
        }
        let old = map.insert(spec.function.clone(), fresh.clone());
        (fresh, true, old)
    }

    /// The node's engine for compiled traces.
    fn engine(&self) -> Result<Arc<FastPathEngine>, String> {
        self.engine
            .get_or_init(|| {
                FastPathEngine::new(Limits {
                    max_memory_bytes: (crate::function::MAX_MEMORY_MB as usize) << 20,
                    ..Limits::default()
                })
                .map(Arc::new)
                .map_err(|e| format!("the fast path's engine could not be made: {e}"))
            })
            .clone()
    }

    /// Forgets a function's fast path (deleted, or its revision without one); its tracing
    /// instance, if any, is returned to be destroyed.
    pub(super) fn remove(
        &self,
        function: &str,
        keep_revision: Option<u64>,
    ) -> Option<Arc<Breakout>> {
        let mut map = self.by_function.locked();
        let stale = map
            .get(function)
            .is_some_and(|b| Some(b.progress.locked().status.revision) != keep_revision);
        stale.then(|| map.remove(function)).flatten()
    }

    /// Every function's fast path, taken out (at shutdown).
    pub(super) fn drain(&self) -> Vec<Arc<Breakout>> {
        self.by_function.locked().drain().map(|(_, b)| b).collect()
    }

    pub(super) fn status(&self) -> Vec<BreakoutStatus> {
        let mut all: Vec<BreakoutStatus> = self
            .by_function
            .locked()
            .values()
            .map(|b| b.progress.locked().status.clone())
            .collect();
        all.sort_by(|a, b| a.function.cmp(&b.function));
        all
    }

    pub(super) fn status_of(&self, function: &str) -> Option<BreakoutStatus> {
        self.by_function
            .locked()
            .get(function)
            .map(|b| b.progress.locked().status.clone())
    }
}

impl Breakout {
    fn new(spec: &SharedSpec, config: &BreakoutConfig) -> Self {
        Self {
            config: config.clone(),
            progress: Mutex::new(Progress {
                status: BreakoutStatus::new(&spec.function, spec.revision),
                trace_spec: None,
                fast: None,
                last_compile: None,
                recent: VecDeque::new(),
                tracer_gone: false,
            }),
            tracer: tokio::sync::Mutex::new(None),
            running: AtomicUsize::new(0),
        }
    }

    /// Counts a request by where it ran, and a miss by its kind.
    fn count(&self, outcome: &str, miss: Option<&str>) {
        let mut progress = self.progress.locked();
        *progress
            .status
            .requests
            .entry(outcome.to_string())
            .or_default() += 1;
        if let Some(reason) = miss {
            *progress
                .status
                .misses
                .entry(miss_kind(reason).to_string())
                .or_default() += 1;
        }
    }

    /// Records whether a fast request missed, for the bounce limit.
    fn observe(&self, missed: bool) {
        let mut progress = self.progress.locked();
        progress.recent.push_back(missed);
        if progress.recent.len() > BOUNCE_WINDOW {
            progress.recent.pop_front();
        }
    }

    /// The paper's bounce limit: after `MaxRetraces` recompiles, misses still over 10% of the
    /// latest requests make the revision ordinary. The reason, when that is so.
    fn bounced(&self) -> Option<String> {
        let progress = self.progress.locked();
        let n = progress.recent.len();
        let misses = progress.recent.iter().filter(|m| **m).count();
        let retraced = progress.status.retraces >= self.config.max_retraces || progress.tracer_gone;
        (retraced
            && n >= BOUNCE_MIN
            && misses as f64 > BOUNCE_SHARE * n as f64)
            .then(|| {
                format!(
                    "the bounce limit: {misses} of the latest {n} fast requests missed after {} recompiles",
                    progress.status.retraces
                )
            })
    }

    fn mode(&self) -> BreakoutMode {
        self.progress.locked().status.mode
    }

    fn set_ordinary(&self, reason: String) {
        let mut progress = self.progress.locked();
        tracing::info!(
            function = %progress.status.function,
            revision = progress.status.revision,
            "[kiln] breakout: ordinary: {reason}"
        );
        progress.status.mode = BreakoutMode::Ordinary;
        progress.status.reason = Some(reason);
        progress.trace_spec = None;
        progress.fast = None;
    }

    /// Takes the tracing instance out, to be destroyed, once the revision leaves `tracing`.
    async fn take_tracer(&self) -> Option<Instance> {
        self.tracer.lock().await.take()
    }
}

/// What the fast path made of a request.
pub(super) enum Served {
    /// Answered here: on the fast path or by the tracing instance.
    Done(Result<InvokeOutcome, AgentError>),
    /// The ordinary path serves it; `miss` is why the fast path let it go, for its REPORT.
    Ordinary { miss: Option<String> },
}

/// How a fast request ended.
enum Fast {
    Answer(InvokeOutcome),
    Miss(String),
    /// Not tried: no room in the node's memory or the function's concurrency.
    Skipped,
}

impl Inner {
    /// A request of a function with `KilnBreakout` `auto`: on the fast path when it is
    /// compiled, on the tracing instance when that is idle and the trace is still growing, else
    /// on the ordinary path.
    pub(super) async fn invoke_breakout(
        self: &Arc<Self>,
        spec: &SharedSpec,
        config: &BreakoutConfig,
        request: &InvokeRequest,
    ) -> Served {
        let breakout = self.breakout_of(spec, config);
        // Requests of a session hold its turn on its primary; neither path here is that.
        if request.hints.session.is_some() {
            breakout.count("ordinary", None);
            return Served::Ordinary { miss: None };
        }
        match breakout.mode() {
            BreakoutMode::Tracing => match self.on_tracer(spec, &breakout, request, None).await {
                Some(outcome) => Served::Done(Ok(outcome)),
                None => {
                    breakout.count("ordinary", None);
                    Served::Ordinary { miss: None }
                }
            },
            BreakoutMode::Decontainerized => {
                let miss = match self.run_fast(spec, &breakout, request).await {
                    Fast::Answer(outcome) => return Served::Done(Ok(outcome)),
                    Fast::Skipped => None,
                    Fast::Miss(miss) => Some(miss),
                };
                // A miss goes to the tracing instance when it is idle, so that its path is
                // traced too (retracing).
                if let Some(miss) = &miss {
                    if let Some(outcome) =
                        self.on_tracer(spec, &breakout, request, Some(miss)).await
                    {
                        return Served::Done(Ok(outcome));
                    }
                }
                breakout.count("ordinary", None);
                Served::Ordinary { miss }
            }
            _ => {
                breakout.count("ordinary", None);
                Served::Ordinary { miss: None }
            }
        }
    }

    /// Runs a request on the compiled trace, in a blocking thread, its arena booked in the
    /// node's memory and its run counted against the function's concurrency.
    async fn run_fast(
        self: &Arc<Self>,
        spec: &SharedSpec,
        breakout: &Arc<Breakout>,
        request: &InvokeRequest,
    ) -> Fast {
        let Some(loaded) = breakout.progress.locked().fast.clone() else {
            return Fast::Skipped;
        };
        let arena_mb = u64::from(breakout.config.fast_path_memory_mb);
        {
            let mut state = self.state();
            let live = state
                .instances
                .pools
                .get(&spec.function)
                .map_or(0, |p| p.live);
            let running = breakout.running.load(Ordering::SeqCst);
            if live + running >= spec.max_instances as usize
                || state.instances.reserved_mb + arena_mb > self.config.memory_budget_mb
            {
                return Fast::Skipped;
            }
            state.instances.reserved_mb += arena_mb;
            breakout.running.fetch_add(1, Ordering::SeqCst);
        }
        let payload = request.payload.clone();
        let deadline = Duration::from_millis(u64::from(breakout.config.fast_path_timeout_ms));
        let store = self.ctx.objects.as_ref().and_then(|objects| {
            let direct = objects.direct()?;
            let credentials = objects.function_credentials(spec.name());
            let store = FastStore::new(
                direct,
                objects.atomic(),
                spec.name(),
                credentials,
                request.tags(),
            );
            Some((store, tokio::runtime::Handle::current()))
        });
        let committer = store.as_ref().map(|(store, _)| store.clone());
        let context = ContextFields {
            request_id: &request.request_id,
            function: spec.name(),
            version: &spec.version,
            arn: &spec.arn,
            memory_mb: spec.memory_mb,
            client_context: request.client_context.as_deref(),
        };
        // The function's timeout, as its handler sees it in Node (`getRemainingTimeInMillis`).
        let function_deadline = Instant::now() + Duration::from_secs(u64::from(spec.timeout_s));
        let (effects, held) = FastEffects::new(&context, &spec.env, store, function_deadline);
        let begin = Instant::now();
        let outcome =
            tokio::task::spawn_blocking(move || loaded.run(&payload, Box::new(effects), deadline))
                .await;
        let duration = begin.elapsed();
        {
            let mut state = self.state();
            state.instances.reserved_mb = state.instances.reserved_mb.saturating_sub(arena_mb);
            breakout.running.fetch_sub(1, Ordering::SeqCst);
        }
        let mut outcome = match outcome {
            Ok(outcome) => outcome,
            Err(e) => kiln_breakout::exec::Outcome::Miss {
                reason: format!("the fast path failed: {e}"),
                at: None,
            },
        };
        // The run answered: its staged writes are committed now, all or none (none: Node runs
        // the request, as after any miss).
        let staged = std::mem::take(&mut held.locked().staged);
        // A handler that threw after its writes made them, as in Node: they are committed too.
        let answered = matches!(
            outcome,
            kiln_breakout::exec::Outcome::Answer(_) | kiln_breakout::exec::Outcome::Error(_)
        );
        if answered && !staged.is_empty() {
            let committed = match &committer {
                Some(store) => effects::commit(staged, store)
                    .await
                    .map_err(|e| e.to_string()),
                None => Err("the store is not reachable".to_string()),
            };
            if let Err(reason) = committed {
                outcome = kiln_breakout::exec::Outcome::Miss {
                    reason: format!("the commit failed: {reason}"),
                    at: None,
                };
            }
        }
        let (body, function_error) = match outcome {
            kiln_breakout::exec::Outcome::Answer(body) => (body, false),
            kiln_breakout::exec::Outcome::Error(error) => {
                // The runtime's `Invoke Error` line, after the function's own (never filtered
                // by the log level: the shim writes it directly).
                held.locked()
                    .output
                    .push_str(&effects::invoke_error_line(&request.request_id, &error.log));
                (error.body.into_bytes(), true)
            }
            kiln_breakout::exec::Outcome::Miss { reason, at } => {
                return self.fast_missed(breakout, reason, at).await;
            }
        };
        breakout.count("fast", None);
        breakout.observe(false);
        // The log lines it held are written now, with the answer.
        let output = std::mem::take(&mut held.locked().output);
        let mut log = super::report(spec, &request.request_id, &output, duration, None, None, 0);
        super::report_field(&mut log, "Mode", "decontainerized");
        if request.shadow {
            super::report_field(&mut log, "Shadow", "true");
        }
        Fast::Answer(InvokeOutcome {
            body: body.into(),
            function_error,
            log,
            cold_start: None,
            init_duration: None,
            duration,
            max_memory_mb: 0,
            out_of_memory: false,
            memory_limit_mb: None,
            limit_write: None,
        })
    }

    /// A fast run that missed: counted, and the bounce limit checked.
    async fn fast_missed(
        self: &Arc<Self>,
        breakout: &Arc<Breakout>,
        reason: String,
        at: Option<String>,
    ) -> Fast {
        let text = match at {
            Some(at) => format!("{reason} at {at}"),
            None => reason.clone(),
        };
        breakout.count("miss", Some(&reason));
        // The function's own errors are not the fast path bouncing.
        if !is_throw(&reason) {
            breakout.observe(true);
        }
        if let Some(reason) = breakout.bounced() {
            breakout.set_ordinary(reason);
            self.end_tracing(breakout).await;
        }
        Fast::Miss(text)
    }

    /// Runs a request on the tracing instance if it is idle (started on first use); `None`
    /// when it is busy, could not start, or the runtime was gone before it took the event.
    /// Once enough is traced (or, after a miss, at most once a second) the trace is pulled and
    /// compiled off the request's path.
    async fn on_tracer(
        self: &Arc<Self>,
        spec: &SharedSpec,
        breakout: &Arc<Breakout>,
        request: &InvokeRequest,
        miss: Option<&str>,
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
        let invocation = instance.invoke(request, None, Box::new(|| {})).await;
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
        let outcome = super::outcome(
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
                breakout.set_ordinary(reason);
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
                Ok::<_, String>((module, nodes, begin.elapsed()))
            })
            .await
            .unwrap_or_else(|e| Err(format!("compiling failed: {e}")));
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
                }
                // A retrace that fails to compile keeps the module in place.
                Err(reason) if retrace => {
                    tracing::warn!("[kiln] breakout: a retrace was not compiled: {reason}");
                    breakout.progress.locked().status.retraces += 1;
                }
                Err(reason) => {
                    breakout.set_ordinary(reason);
                    inner.end_tracing(&breakout).await;
                }
            }
        });
    }

    /// The fast path of `spec`'s revision; instrumenting starts on first sight, and an older
    /// revision's tracing instance goes.
    pub(super) fn breakout_of(
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
            Err(reason) => breakout.set_ordinary(reason),
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
    /// trace with them: tracing starts again with the next request).
    pub(super) fn reap_idle_tracers(&self, now: Instant) {
        let ttl = self.config.idle_ttl;
        let all: Vec<Arc<Breakout>> = self
            .breakouts
            .by_function
            .locked()
            .values()
            .cloned()
            .collect();
        for breakout in all {
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
    pub(super) async fn end_tracing(&self, breakout: &Breakout) {
        if let Some(instance) = breakout.take_tracer().await {
            self.let_tracer_go(instance);
        }
    }
}
