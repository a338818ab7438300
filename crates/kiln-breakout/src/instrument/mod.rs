//! Instrumentation (the paper's §3.3 and Figs. 5, 6 and 8): a package rewritten so that, run
//! under the tracing runtime (`runtimes/nodejs/breakout.js`), it builds its own trace tree
//! while behaving as before.
//!
//! Per file: the support check's sites are marked in the source (`sites.rs`), the file is
//! normalised ([`crate::normalise`]), and calls into the runtime are inserted around each
//! statement (`emit.rs`). Each site becomes `unsupported(reason, "file:line:col")` where it
//! runs, so a site on a rare path costs only that path.
//!
//! A file that cannot be normalised is copied as it is; its functions are then not
//! instrumented, and the runtime records a call into one of them as ☠.

mod emit;
mod functions;
mod quote;
mod sites;

use std::io;
use std::path::{Path, PathBuf};

use oxc_allocator::Allocator;
use oxc_parser::Parser;
use oxc_semantic::SemanticBuilder;
use serde::Serialize;

use crate::check::{check_dir, CheckError, SourceKind};
use crate::normalise::{fresh_prefix, normalise, NormaliseError};
use crate::site::Site;
use emit::{Emitter, SiteInfo};

/// The global the tracing runtime installs itself as; instrumented files read it.
pub const RUNTIME_GLOBAL: &str = "__kilnBreakout";

/// Why a package could not be instrumented (a file that cannot be is not an error: it is
/// copied, and listed in the report).
#[derive(Debug, thiserror::Error)]
pub enum InstrumentError {
    /// The package could not be checked.
    #[error("cannot check the package")]
    Check(#[from] CheckError),
    /// A file of the package could not be read or written.
    #[error("cannot copy {}", .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The output directory is inside the package.
    #[error("the output directory {} is inside the package", .0.display())]
    OutputInside(PathBuf),
}

/// What instrumenting a package did.
#[derive(Debug, Clone, Serialize)]
pub struct InstrumentReport {
    /// Files rewritten.
    pub instrumented: Vec<String>,
    /// Files copied as they were, with why.
    pub left: Vec<(String, String)>,
    /// The support check's sites, each now a ☠ where it runs.
    pub sites: Vec<Site>,
}

/// One file instrumented: `sites` are the check's sites in this file.
pub fn instrument_source(
    file: &str,
    text: &str,
    kind: SourceKind,
    sites: &[Site],
) -> Result<String, NormaliseError> {
    let marker = format!("{}site", fresh_prefix(text));
    let positions: Vec<(u32, u32)> = sites.iter().map(|s| (s.line, s.col)).collect();
    let marked = sites::mark(text, kind, &positions, &marker)
        .ok_or_else(|| NormaliseError::Parse("the source does not parse".into()))?;
    let normal = normalise(&marked, kind)?;
    let infos: Vec<SiteInfo> = sites
        .iter()
        .map(|s| SiteInfo {
            reason: format!("{}: {}", s.construct.name(), s.construct.reason()),
            at: format!("{}:{}:{}", s.file, s.line, s.col),
        })
        .collect();
    let allocator = Allocator::default();
    let (source_type, options) = kind.parse_setup();
    let parsed = Parser::new(&allocator, &normal, source_type)
        .with_options(options)
        .parse();
    if let Some(error) = parsed.diagnostics.errors().next() {
        return Err(NormaliseError::Parse(error.message.to_string()));
    }
    let semantic = SemanticBuilder::new().build(&parsed.program);
    let scoping = semantic.semantic.scoping();
    let prefix = fresh_prefix(&normal);
    let marker = (!sites.is_empty()).then_some(marker.as_str());
    let mut emitter = Emitter::new(&normal, scoping, file, prefix.clone(), marker, &infos);
    emitter.program(&parsed.program);
    let module = serde_json::json!({"kind": "module", "fn": format!("init:{file}"), "params": [], "rest": null, "async": false});
    emitter.table.push(module);
    let module_q = emitter.table.len() - 1;
    let table = serde_json::to_string(&emitter.table).expect("JSON values serialise");
    let table_literal = serde_json::to_string(&table).expect("a string serialises");
    // After the directives, and after a hashbang, which must stay the file's first line.
    let prologue_at = parsed
        .program
        .directives
        .last()
        .map(|d| d.span.end)
        .or(parsed.program.hashbang.as_ref().map(|h| h.span.end))
        .unwrap_or(0);
    // A mark left in code kept as written (a site's own inside, an accessor's body, say) runs
    // as a call: the function records the site's ☠.
    let site_marks = if marker.is_some() {
        let table: Vec<serde_json::Value> = infos
            .iter()
            .map(|i| serde_json::json!({"kind": "unsupported", "reason": i.reason, "at": i.at}))
            .collect();
        let table = serde_json::to_string(&table).expect("JSON values serialise");
        let literal = serde_json::to_string(&table).expect("a string serialises");
        format!(
            " const {p}S = JSON.parse({literal}); const {mark} = (n) => {p}T.u({p}S[n]);",
            p = prefix,
            mark = marker.unwrap_or_default()
        )
    } else {
        String::new()
    };
    let prologue = format!(
        "\nconst {p}T = globalThis.{RUNTIME_GLOBAL}; const {p}Q = JSON.parse({table_literal});{site_marks} \
         const {p}M = {p}T.en({p}Q[{module_q}]);\n",
        p = prefix
    );
    let epilogue = format!("\n{p}T.end(); {p}T.lv({p}M);\n", p = prefix);
    Ok(emitter.finish(prologue_at, prologue, epilogue))
}

/// Instruments the package in `src` into `out` (created; it must not be inside `src`): every
/// file the support check reads is rewritten, everything else copied.
pub fn instrument_dir(src: &Path, out: &Path) -> Result<InstrumentReport, InstrumentError> {
    let report = check_dir(src)?;
    let src_abs = src.canonicalize().map_err(|source| InstrumentError::Io {
        path: src.to_path_buf(),
        source,
    })?;
    if let Some(parent) = out.parent() {
        let parent_abs = parent
            .canonicalize()
            .unwrap_or_else(|_| parent.to_path_buf());
        if parent_abs.starts_with(&src_abs) {
            return Err(InstrumentError::OutputInside(out.to_path_buf()));
        }
    }
    copy_tree(src, out)?;
    let mut instrumented = Vec::new();
    let mut left = Vec::new();
    for file in &report.files {
        let path = src.join(&file.path);
        let text = std::fs::read_to_string(&path).map_err(|source| InstrumentError::Io {
            path: path.clone(),
            source,
        })?;
        let sites: Vec<Site> = report
            .sites
            .iter()
            .filter(|s| s.file == file.path)
            .cloned()
            .collect();
        // The rewrite recurses once per level of nesting, as the check does: on a thread
        // with the check's stack.
        let (name, kind) = (file.path.clone(), file.kind);
        let worker = std::thread::Builder::new()
            .name("breakout-instrument".into())
            .stack_size(crate::check::CHECK_STACK_BYTES)
            .spawn(move || instrument_source(&name, &text, kind, &sites))
            .map_err(|source| InstrumentError::Io {
                path: path.clone(),
                source,
            })?;
        let result = match worker.join() {
            Ok(result) => result,
            Err(panic) => std::panic::resume_unwind(panic),
        };
        match result {
            Ok(rewritten) => {
                let target = out.join(&file.path);
                std::fs::write(&target, rewritten).map_err(|source| InstrumentError::Io {
                    path: target.clone(),
                    source,
                })?;
                instrumented.push(file.path.clone());
            }
            Err(error) => left.push((file.path.clone(), error.to_string())),
        }
    }
    Ok(InstrumentReport {
        instrumented,
        left,
        sites: report.sites,
    })
}

/// Copies a directory tree, without following symbolic links or copying `.git`.
fn copy_tree(from: &Path, to: &Path) -> Result<(), InstrumentError> {
    let io_error = |path: &Path| {
        let path = path.to_path_buf();
        move |source| InstrumentError::Io { path, source }
    };
    std::fs::create_dir_all(to).map_err(io_error(to))?;
    for entry in std::fs::read_dir(from).map_err(io_error(from))? {
        let entry = entry.map_err(io_error(from))?;
        let path = entry.path();
        let target = to.join(entry.file_name());
        let file_type = entry.file_type().map_err(io_error(&path))?;
        if file_type.is_dir() {
            if entry.file_name() != ".git" {
                copy_tree(&path, &target)?;
            }
        } else if file_type.is_file() {
            std::fs::copy(&path, &target).map_err(io_error(&path))?;
        }
    }
    Ok(())
}
