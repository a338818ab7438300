//! What a revision's fast path shows of itself: its mode on the way to the fast path and its
//! counts (`KilnBreakoutStatus` in GetFunction, `Breakout` in `kiln get` and `kiln status`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    /// Recompiles after misses so far (the bounce limit counts them).
    #[serde(default)]
    pub retraces: u32,
    /// The compiled module's size and how long the last compile and load took.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module_bytes: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compile_seconds: Option<f64>,
    /// The function's requests by where they ran (`fast`, `miss`, `tracing`, `ordinary`),
    /// counted since kiln started, over all its revisions.
    #[serde(default)]
    pub requests: BTreeMap<String, u64>,
    /// Its misses by kind (`untraced`, `unsupported`, `guard`, `throw`, `time`, `memory`,
    /// `builtin`, `intrinsic`, `commit`, `other`), likewise.
    #[serde(default)]
    pub misses: BTreeMap<String, u64>,
}

impl BreakoutStatus {
    /// A revision the node has not instrumented yet.
    pub fn new(function: &str, revision: u64) -> Self {
        Self {
            function: function.to_string(),
            revision,
            mode: BreakoutMode::Instrumenting,
            reason: None,
            traced: 0,
            trace_nodes: None,
            unsupported_sites: 0,
            retraces: 0,
            module_bytes: None,
            compile_seconds: None,
            requests: BTreeMap::new(),
            misses: BTreeMap::new(),
        }
    }
}
