//! What BREAKOUT's node side does with a package and a trace, outside any request: the
//! instrumented copy, a trace an instance sent (untrusted), its compilation, and what a miss
//! says.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use kiln_breakout::exec::{FastPathEngine, Loaded};

use crate::function::{BreakoutConfig, InstanceSpec};

/// Where the instrumented copy of a package lives: beside the package's code, per digest.
pub(super) fn instrumented_dir(code_dir: &Path, sha256: &str) -> PathBuf {
    let root = code_dir.parent().and_then(Path::parent).unwrap_or(code_dir);
    root.join("breakout").join(sha256)
}

/// Instruments `spec`'s package (once per digest) and says what the tracing instance runs.
pub(super) fn instrument(spec: &InstanceSpec) -> Result<(PathBuf, usize), String> {
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
pub(super) fn accept_trace(bytes: &[u8]) -> Result<(kiln_breakout::trace::Trace, usize), String> {
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

/// Compiles a validated trace into the fast path's module and loads it (its top level run
/// once): the module and its size. `spec` is the tracing instance's: its code is the
/// instrumented copy (the package's files, for a relative `require`), its environment the
/// function's.
pub(super) fn compile(
    trace: &kiln_breakout::trace::Trace,
    config: &BreakoutConfig,
    spec: &InstanceSpec,
    engine: Arc<FastPathEngine>,
) -> Result<(Loaded, usize), String> {
    let package = kiln_breakout::package::Package::read(&spec.code_dir)
        .map_err(|e| format!("the package's files could not be read: {e}"))?;
    let options = kiln_breakout::compile::CompileOptions {
        // 64 KiB pages.
        memory_pages: config.fast_path_memory_mb * 16,
        package: Some(Arc::new(package)),
        env: Some(crate::runtime::breakout_environment(spec)),
        handler: Some(spec.handler.clone()),
    };
    let bytes = kiln_breakout::compile::compile(trace, &options)
        .map_err(|e| format!("the trace could not be compiled: {e}"))?;
    let loaded = engine
        .load(&bytes)
        .map_err(|e| format!("the compiled trace could not be loaded: {e}"))?;
    Ok((loaded, bytes.len()))
}

/// Whether a miss is the function throwing (its error, which Node answers by design) rather
/// than the fast path failing to follow it: a JavaScript error the runtime raised
/// (`TypeError: …`) or an uncaught `throw`.
pub(super) fn is_throw(reason: &str) -> bool {
    reason.contains("uncaught throw")
        || [
            "TypeError",
            "RangeError",
            "SyntaxError",
            "ReferenceError",
            "Error",
        ]
        .iter()
        .any(|e| reason.starts_with(&format!("{e}: ")))
}

/// A miss's kind, for metrics: a few fixed words, whatever the reason's text.
pub(super) fn miss_kind(reason: &str) -> &'static str {
    let r = reason.to_ascii_lowercase();
    if is_throw(reason) {
        "throw"
    } else if r.starts_with("the commit failed") {
        "commit"
    } else if r.contains("untraced") || r.contains("not traced") || r.contains("unknown") {
        "untraced"
    } else if r.contains("unsupported") || r.contains("☠") {
        "unsupported"
    } else if r.contains("guard") || r.contains("type") {
        "guard"
    } else if r.contains("time") {
        "time"
    } else if r.contains("memory") {
        "memory"
    } else if r.contains("builtin") || r.contains("not compiled") {
        "builtin"
    } else if r.contains("intrinsic") {
        "intrinsic"
    } else {
        "other"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intrinsic_and_commit_misses_have_their_kinds() {
        assert_eq!(
            miss_kind("the commit failed: the store answered NoSuchBucket"),
            "commit"
        );
        assert_eq!(
            miss_kind("intrinsic S3: NoSuchKey (Node answers it)"),
            "intrinsic"
        );
        assert_eq!(
            miss_kind("intrinsic S3: a second object write in one request"),
            "intrinsic"
        );
    }

    #[test]
    fn a_function_error_is_not_a_bounce() {
        assert_eq!(
            miss_kind("TypeError: Cannot read properties of null"),
            "throw"
        );
        assert_eq!(miss_kind("uncaught throw"), "throw");
        assert_eq!(miss_kind("the global Symbol not compiled"), "builtin");
        assert_eq!(miss_kind("out of memory"), "memory");
        assert!(!is_throw("a type guard failed"));
    }

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
