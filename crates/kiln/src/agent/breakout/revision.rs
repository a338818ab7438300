//! One revision's fast path (its mode, its compiled trace, its tracing instance's slot, its
//! counts and the bounce limit) and the node's table of them, one per function.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use kiln_breakout::exec::{FastPathEngine, Limits, Loaded};

use super::status::{BreakoutMode, BreakoutStatus};
use super::trace::miss_kind;
use crate::agent::Instance;
use crate::function::{BreakoutConfig, SharedSpec};
use crate::sync::LockExt;

/// The bounce limit looks at this many of the latest fast requests...
const BOUNCE_WINDOW: usize = 1000;
/// ...once it has at least this many...
const BOUNCE_MIN: usize = 100;
/// ...and gives up when more than this share of them missed.
const BOUNCE_SHARE: f64 = 0.10;

/// One revision's fast path.
pub(in crate::agent) struct Breakout {
    pub(super) config: BreakoutConfig,
    pub(super) progress: Mutex<Progress>,
    /// The tracing instance; held while it serves a request (a request that finds it held
    /// takes the ordinary path).
    pub(super) tracer: tokio::sync::Mutex<Option<Instance>>,
    /// Fast requests running now.
    pub(super) running: AtomicUsize,
}

pub(super) struct Progress {
    pub(super) status: BreakoutStatus,
    /// The spec of the tracing instance: the function's, with the instrumented code.
    pub(super) trace_spec: Option<SharedSpec>,
    /// The compiled trace, once `decontainerized`.
    pub(super) fast: Option<Arc<Loaded>>,
    /// When the trace was last pulled to be compiled.
    pub(super) last_compile: Option<Instant>,
    /// Whether each of the latest fast requests missed (the bounce limit's window).
    pub(super) recent: VecDeque<bool>,
    /// The tracing instance of a compiled revision went (idle, or it crashed): its misses
    /// are no longer retraced.
    pub(super) tracer_gone: bool,
}

/// The fast paths of the node's functions, one revision each.
#[derive(Default)]
pub(in crate::agent) struct Breakouts {
    pub(super) by_function: Mutex<HashMap<String, Arc<Breakout>>>,
    /// The node's engine for compiled traces, made on first use.
    pub(super) engine: OnceLock<Result<Arc<FastPathEngine>, Arc<kiln_breakout::exec::LoadError>>>,
}

impl Breakouts {
    /// The fast path of `spec`'s revision, made (and its instrumentation started) on first
    /// sight. An older revision's is replaced; its tracing instance is returned to be destroyed.
    pub(super) fn get(
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
    pub(super) fn engine(&self) -> Result<Arc<FastPathEngine>, super::trace::BuildError> {
        self.engine
            .get_or_init(|| {
                FastPathEngine::new(Limits {
                    max_memory_bytes: (crate::function::MAX_MEMORY_MB as usize) << 20,
                    ..Limits::default()
                })
                .map(Arc::new)
                .map_err(Arc::new)
            })
            .clone()
            .map_err(super::trace::BuildError::Engine)
    }

    /// Forgets a function's fast path (deleted, or its revision without one); its tracing
    /// instance, if any, is returned to be destroyed.
    pub(in crate::agent) fn remove(
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
    pub(in crate::agent) fn drain(&self) -> Vec<Arc<Breakout>> {
        self.by_function.locked().drain().map(|(_, b)| b).collect()
    }

    pub(in crate::agent) fn status(&self) -> Vec<BreakoutStatus> {
        let mut all: Vec<BreakoutStatus> = self
            .by_function
            .locked()
            .values()
            .map(|b| b.progress.locked().status.clone())
            .collect();
        all.sort_by(|a, b| a.function.cmp(&b.function));
        all
    }

    pub(in crate::agent) fn status_of(&self, function: &str) -> Option<BreakoutStatus> {
        self.by_function
            .locked()
            .get(function)
            .map(|b| b.progress.locked().status.clone())
    }
}

impl Breakout {
    pub(super) fn new(spec: &SharedSpec, config: &BreakoutConfig) -> Self {
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
    pub(super) fn count(&self, outcome: &str, miss: Option<&str>) {
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
    pub(super) fn observe(&self, missed: bool) {
        let mut progress = self.progress.locked();
        progress.recent.push_back(missed);
        if progress.recent.len() > BOUNCE_WINDOW {
            progress.recent.pop_front();
        }
    }

    /// The paper's bounce limit: after `MaxRetraces` recompiles, misses still over 10% of the
    /// latest requests make the revision ordinary. The reason, when that is so.
    pub(super) fn bounced(&self) -> Option<String> {
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

    pub(super) fn function_revision(&self) -> (String, u64) {
        let progress = self.progress.locked();
        (progress.status.function.clone(), progress.status.revision)
    }

    pub(super) fn mode(&self) -> BreakoutMode {
        self.progress.locked().status.mode
    }

    pub(super) fn set_ordinary(&self, reason: String) {
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
    pub(super) async fn take_tracer(&self) -> Option<Instance> {
        self.tracer.lock().await.take()
    }
}
