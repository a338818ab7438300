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

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{forget, make_room, Inner, InstanceState, LiveInstance, StartError, StartPath};
use super::{AgentError, Instance, InvokeOutcome, InvokeRequest};
use crate::function::{BreakoutConfig, InstanceSpec, SharedSpec};
use crate::sync::LockExt;

/// How long a tracing instance may take to send its trace tree.
const DUMP_TIMEOUT: Duration = Duration::from_secs(10);

/// Where a revision is on its way to the fast path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BreakoutMode {
    /// Its package is being instrumented; requests take the ordinary path.
    Instrumenting,
    /// Requests that find the tracing instance idle run there and grow the trace.
    Tracing,
    /// The trace is being compiled.
    Compiling,
    /// Traced paths run in kiln; others in the sandbox.
    Decontainerized,
    /// Every request takes the ordinary path: the reason says why.
    Ordinary,
}

/// What `kiln get` and `kiln status --json` show of a function's fast path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct BreakoutStatus {
    pub function: String,
    pub revision: u64,
    pub mode: BreakoutMode,
    /// Why the revision is `ordinary`, with the source position when a construct is to blame.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Requests the tracing instance served.
    pub traced: u32,
    /// Nodes of the last trace tree pulled from the tracing instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_nodes: Option<usize>,
    /// Sites the instrumenter marked ☠ (constructs outside the subset) in the package.
    pub unsupported_sites: usize,
}

/// One revision's fast path.
pub(super) struct Breakout {
    config: BreakoutConfig,
    progress: Mutex<Progress>,
    /// The tracing instance; held while it serves a request (a request that finds it held
    /// takes the ordinary path).
    tracer: tokio::sync::Mutex<Option<Instance>>,
}

struct Progress {
    status: BreakoutStatus,
    /// The spec of the tracing instance: the function's, with the instrumented code.
    trace_spec: Option<SharedSpec>,
}

/// The fast paths of the node's functions, one revision each.
#[derive(Default)]
pub(super) struct Breakouts {
    by_function: Mutex<HashMap<String, Arc<Breakout>>>,
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
        let old = map.insert(spec.function.clone(), fresh.clone());
        (fresh, true, old)
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
                status: BreakoutStatus {
                    function: spec.function.clone(),
                    revision: spec.revision,
                    mode: BreakoutMode::Instrumenting,
                    reason: None,
                    traced: 0,
                    trace_nodes: None,
                    unsupported_sites: 0,
                },
                trace_spec: None,
            }),
            tracer: tokio::sync::Mutex::new(None),
        }
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
    }

    /// Takes the tracing instance out, to be destroyed, once the revision leaves `tracing`.
    async fn take_tracer(&self) -> Option<Instance> {
        self.tracer.lock().await.take()
    }
}

/// Where the instrumented copy of a package lives: beside the package's code, per digest.
fn instrumented_dir(code_dir: &Path, sha256: &str) -> PathBuf {
    let root = code_dir.parent().and_then(Path::parent).unwrap_or(code_dir);
    root.join("breakout").join(sha256)
}

/// Instruments `spec`'s package (once per digest) and says what the tracing instance runs.
fn instrument(spec: &InstanceSpec) -> Result<(PathBuf, usize), String> {
    let out = instrumented_dir(&spec.code_dir, &spec.code_sha256);
    let sites_file = out.with_extension("sites");
    if out.is_dir() {
        if let Ok(text) = std::fs::read_to_string(&sites_file) {
            if let Ok(sites) = text.trim().parse() {
                return Ok((out, sites));
            }
        }
        // Left half-made by a crash: made again.
        std::fs::remove_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    }
    if let Some(parent) = out.parent() {
        std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    }
    let partial = out.with_extension("partial");
    let _ = std::fs::remove_dir_all(&partial);
    let report = kiln_breakout::instrument::instrument_dir(&spec.code_dir, &partial)
        .map_err(|e| format!("instrumenting the package failed: {e}"))?;
    let sites = report.sites.len();
    std::fs::rename(&partial, &out).map_err(|e| format!("{}: {e}", out.display()))?;
    std::fs::write(&sites_file, sites.to_string())
        .map_err(|e| format!("{}: {e}", sites_file.display()))?;
    Ok((out, sites))
}

/// Checks a trace tree a tracing instance sent: it is untrusted input.
fn accept_trace(bytes: &[u8]) -> Result<(kiln_breakout::trace::Trace, usize), String> {
    let trace = kiln_breakout::trace::parse(bytes).map_err(|e| format!("trace refused: {e}"))?;
    kiln_breakout::trace::validate(&trace).map_err(|e| format!("trace refused: {e}"))?;
    let nodes = count_nodes(&trace);
    Ok((trace, nodes))
}

fn count_nodes(trace: &kiln_breakout::trace::Trace) -> usize {
    use kiln_breakout::trace::Node;
    fn body(nodes: &[Node]) -> usize {
        nodes.iter().map(node).sum()
    }
    fn opt(b: &Option<Vec<Node>>) -> usize {
        b.as_deref().map_or(0, body)
    }
    fn node(n: &Node) -> usize {
        1 + match n {
            Node::If {
                then, otherwise, ..
            } => opt(then) + opt(otherwise),
            Node::While { body, .. } | Node::Label { body, .. } | Node::Block { body } => opt(body),
            Node::Try { body, handler, .. } => opt(body) + opt(handler),
            Node::Named { body, .. } => opt(body),
            _ => 0,
        }
    }
    trace.handlers.iter().map(|h| body(&h.body)).sum()
}

/// Compiles a validated trace into the fast path's module.
fn compile(trace: &kiln_breakout::trace::Trace) -> Result<(), String> {
    let entry = trace
        .handlers
        .iter()
        .find(|h| h.kind == kiln_breakout::trace::HandlerKind::Function)
        .ok_or("the trace has no request handler")?;
    kiln_breakout::compile::compile_handler(trace, entry.id)
        .map(drop)
        .map_err(|e| format!("the trace could not be compiled: {e}"))
}

impl Inner {
    /// A request of a function with `KilnBreakout` `auto`: served here when the tracing
    /// instance is idle; `None` when the ordinary path serves it.
    pub(super) async fn invoke_breakout(
        self: &Arc<Self>,
        spec: &SharedSpec,
        config: &BreakoutConfig,
        request: &InvokeRequest,
    ) -> Option<Result<InvokeOutcome, AgentError>> {
        let breakout = self.breakout_of(spec, config);
        // Requests of a session hold its turn on its primary; the tracing instance is none.
        if breakout.mode() != BreakoutMode::Tracing || request.hints.session.is_some() {
            return None;
        }
        let mut slot = breakout.tracer.try_lock().ok()?;
        let trace_spec = breakout.progress.locked().trace_spec.clone()?;
        let mut cold = false;
        if slot.is_none() {
            *slot = Some(self.start_tracer(&breakout, &trace_spec).await?);
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
        let traced = {
            let mut progress = breakout.progress.locked();
            progress.status.traced += 1;
            progress.status.traced
        };
        let init_output = instance.init_output.take().unwrap_or_default();
        let max_memory_mb = invocation.max_memory_bytes.div_ceil(1024 * 1024);
        let init_duration = cold.then_some(instance.init_duration);
        let mut output = init_output;
        output.push_str(&invocation.output);
        let mut log = super::report(
            spec,
            &request.request_id,
            &output,
            duration,
            cold.then_some(StartPath::Coldest),
            init_duration,
            max_memory_mb,
        );
        super::report_field(&mut log, "Mode", "tracing");
        if request.shadow {
            super::report_field(&mut log, "Shadow", "true");
        }
        let outcome = InvokeOutcome {
            body: invocation.body,
            function_error: invocation.function_error,
            log,
            cold_start: cold.then_some(StartPath::Coldest),
            init_duration,
            duration,
            max_memory_mb,
            out_of_memory: invocation.out_of_memory,
            memory_limit_mb: None,
            limit_write: None,
        };
        if !invocation.healthy {
            // Its trace went with it; the next idle request starts another.
            self.let_tracer_go(instance);
            return Some(Ok(outcome));
        }
        if traced < self.tracing_goal(&breakout) {
            instance.last_used = Instant::now();
            if let Some(live) = self.state().live.get_mut(&instance.id) {
                live.state = InstanceState::Idle;
            }
            *slot = Some(instance);
            return Some(Ok(outcome));
        }
        drop(slot);
        // Enough was traced: the trace is pulled now, after the answer is known but before it
        // is returned, so the caller of the last traced request waits for the dump (bounded).
        let dumped = instance.dump_trace(DUMP_TIMEOUT).await;
        self.let_tracer_go(instance);
        match dumped.and_then(|bytes| accept_trace(&bytes).map(|(t, n)| (t, n, bytes))) {
            Ok((trace, nodes, bytes)) => {
                {
                    let mut progress = breakout.progress.locked();
                    progress.status.mode = BreakoutMode::Compiling;
                    progress.status.trace_nodes = Some(nodes);
                }
                let compiling = breakout.clone();
                // Kept beside the instrumented code, for `kiln breakout` and for inspection.
                let kept = trace_spec.code_dir.with_extension("trace.json");
                tokio::task::spawn_blocking(move || {
                    if let Err(e) = std::fs::write(&kept, &bytes) {
                        tracing::warn!("{}: {e}", kept.display());
                    }
                    match compile(&trace) {
                        Ok(()) => {
                            let mut progress = compiling.progress.locked();
                            progress.status.mode = BreakoutMode::Decontainerized;
                            progress.status.reason = None;
                        }
                        Err(reason) => compiling.set_ordinary(reason),
                    }
                });
            }
            Err(reason) => breakout.set_ordinary(reason),
        }
        Some(Ok(outcome))
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

    /// How many requests a revision traces before its trace is compiled.
    fn tracing_goal(&self, breakout: &Breakout) -> u32 {
        breakout.config.trace_requests
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
            state.next_id += 1;
            let id = state.next_id;
            state.memory_reserved_mb += u64::from(need);
            state.live.insert(
                id,
                LiveInstance {
                    function: trace_spec.function.clone(),
                    revision: trace_spec.revision,
                    state: InstanceState::Starting,
                    start_path: StartPath::Coldest,
                    created: Instant::now(),
                    memory_mb: need,
                    limit_mb: need,
                    cgroup: None,
                    pid: None,
                    sessions: 0,
                    pooled: false,
                },
            );
            id
        };
        match Instance::start_cold(&self.ctx, trace_spec, id).await {
            Ok(instance) => {
                if let Some(live) = self.state().live.get_mut(&id) {
                    live.state = InstanceState::Busy;
                    live.cgroup = Some(instance.cgroup.clone());
                    live.pid = instance.pid();
                }
                Some(instance)
            }
            Err(e) => {
                forget(&mut self.state(), id);
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
                breakout.progress.locked().status.traced = 0;
                self.let_tracer_go(instance);
            }
        }
    }

    fn let_tracer_go(&self, instance: Instance) {
        forget(&mut self.state(), instance.id);
        self.destroy_later(instance);
    }

    /// Ends a revision's tracing: its tracing instance goes.
    pub(super) async fn end_tracing(&self, breakout: &Breakout) {
        if let Some(instance) = breakout.take_tracer().await {
            self.let_tracer_go(instance);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instrumented_copies_live_beside_the_code_store() {
        assert_eq!(
            instrumented_dir(Path::new("/data/code/abc"), "abc"),
            PathBuf::from("/data/breakout/abc")
        );
    }

    #[test]
    fn a_forged_trace_is_refused_with_a_reason() {
        assert!(accept_trace(b"not json")
            .unwrap_err()
            .contains("trace refused"));
        assert!(accept_trace(br#"{"version":1,"handlers":[{"id":5,"fn":"f","kind":"function","params":[],"body":[]}]}"#)
            .unwrap_err()
            .contains("trace refused"));
        let ok = br#"{"version":1,"handlers":[{"id":0,"fn":"f","kind":"function","params":[],"body":[{"kind":"return","value":{"kind":"number","value":1}}]}]}"#;
        assert_eq!(accept_trace(ok).unwrap().1, 1);
    }
}
