//! What BREAKOUT's node side does with a package and a trace, outside any request: the
//! instrumented copy, a trace an instance sent (untrusted), its compilation, and what a miss
//! says.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use kiln_breakout::exec::{FastPathEngine, LoadError, Loaded};

use crate::function::{BreakoutConfig, InstanceSpec};

/// Why a revision's fast path could not be built; the revision then runs `ordinary`, with
/// this as the reason its status shows.
#[derive(Debug, thiserror::Error)]
pub(super) enum BuildError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("instrumenting the package failed: {0}")]
    Instrument(#[source] kiln_breakout::instrument::InstrumentError),
    #[error("trace refused: {0}")]
    Refused(#[source] kiln_breakout::trace::TraceError),
    #[error("the package's files could not be read: {0}")]
    Package(#[source] std::io::Error),
    #[error("the trace could not be compiled: {0}")]
    Compile(#[source] kiln_breakout::compile::CompileError),
    #[error("the compiled trace could not be loaded: {0}")]
    Load(#[source] LoadError),
    /// Shared: every revision on the node meets the same engine.
    #[error("the fast path's engine could not be made: {0}")]
    Engine(#[source] Arc<LoadError>),
    #[error("compiling failed: {0}")]
    Task(#[source] tokio::task::JoinError),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> BuildError + '_ {
    move |source| BuildError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Where the instrumented copy of a package lives: beside the package's code, per digest.
pub(super) fn instrumented_dir(code_dir: &Path, sha256: &str) -> PathBuf {
    let root = code_dir.parent().and_then(Path::parent).unwrap_or(code_dir);
    root.join("breakout").join(sha256)
}

/// Instruments `spec`'s package (once per digest) and says what the tracing instance runs.
pub(super) fn instrument(spec: &InstanceSpec) -> Result<(PathBuf, usize), BuildError> {
    let out = instrumented_dir(&spec.code_dir, &spec.code_sha256);
    let sites_file = out.with_extension("sites");
    if out.is_dir() {
        if let Ok(text) = std::fs::read_to_string(&sites_file) {
            if let Ok(sites) = text.trim().parse() {
                return Ok((out, sites));
            }
        }
        // Left half-made by a crash: made again.
        std::fs::remove_dir_all(&out).map_err(io(&out))?;
    }
    if let Some(parent) = out.parent() {
        std::fs::create_dir_all(parent).map_err(io(parent))?;
    }
    let partial = out.with_extension("partial");
    let _ = std::fs::remove_dir_all(&partial);
    let report = kiln_breakout::instrument::instrument_dir(&spec.code_dir, &partial)
        .map_err(BuildError::Instrument)?;
    let sites = report.sites.len();
    std::fs::rename(&partial, &out).map_err(io(&out))?;
    std::fs::write(&sites_file, sites.to_string()).map_err(io(&sites_file))?;
    Ok((out, sites))
}

/// Checks a trace tree a tracing instance sent: it is untrusted input.
pub(super) fn accept_trace(
    bytes: &[u8],
) -> Result<(kiln_breakout::trace::Trace, usize), BuildError> {
    let trace = kiln_breakout::trace::parse(bytes).map_err(BuildError::Refused)?;
    kiln_breakout::trace::validate(&trace).map_err(BuildError::Refused)?;
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
) -> Result<(Loaded, usize), BuildError> {
    let package =
        kiln_breakout::package::Package::read(&spec.code_dir).map_err(BuildError::Package)?;
    let options = kiln_breakout::compile::CompileOptions {
        // 64 KiB pages.
        memory_pages: config.fast_path_memory_mb * 16,
        package: Some(Arc::new(package)),
        env: Some(crate::runtime::breakout_environment(spec)),
        handler: Some(spec.handler.clone()),
    };
    let bytes = kiln_breakout::compile::compile(trace, &options).map_err(BuildError::Compile)?;
    let loaded = engine.load(&bytes).map_err(BuildError::Load)?;
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
        let refused = |e: BuildError| {
            matches!(e, BuildError::Refused(_)) && e.to_string().starts_with("trace refused: ")
        };
        assert!(refused(accept_trace(b"not json").unwrap_err()));
        assert!(refused(accept_trace(br#"{"version":1,"handlers":[{"id":5,"fn":"f","kind":"function","params":[],"body":[]}]}"#)
            .unwrap_err()));
        let ok = br#"{"version":1,"handlers":[{"id":0,"fn":"f","kind":"function","params":[],"body":[{"kind":"return","value":{"kind":"number","value":1}}]}]}"#;
        assert_eq!(accept_trace(ok).unwrap().1, 1);
    }
}
