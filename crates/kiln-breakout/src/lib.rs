//! BREAKOUT for kiln: trace-compiled fast paths for Node functions (Herbert and Guha, "A
//! Language-based Serverless Function Accelerator"). A function is instrumented, traced while
//! it runs in its sandbox, and the trace compiled; later requests run the compiled trace, and a
//! request that leaves the traced paths (☠, "unknown behaviour") runs in the sandbox.
//!
//! This crate takes untrusted input (a tenant's package, and the traces its instance sends), so
//! it is pure, safe Rust, and its parsers are fuzzed. What is here so far:
//! - [`check`]: the support check. It parses every JavaScript file of a package with oxc and
//!   lists each construct outside the supported subset as a [`Site`]: `kiln breakout check`.
//! - [`normalise`]: a file rewritten into the paper's Fig. 2 fragment, in A-normal form.
//! - [`instrument`]: a package rewritten to build its own trace tree under the tracing runtime
//!   (`runtimes/nodejs/breakout.js`), each site a ☠ where it runs.
//! - [`trace`]: the trace tree's types and the validator of a tree an instance sends.
//!
//! - [`compile`]: the start of the trace compiler to wasm (the numeric fragment).

#![forbid(unsafe_code)]

pub mod check;
pub mod compile;
pub mod exec;
pub mod instrument;
pub mod normalise;
pub mod package;
mod position;
pub mod runtime;
mod site;
pub mod trace;

pub use check::{check_dir, check_source, CheckError, CheckedFile, Report, SourceKind};
pub use site::{Construct, ModuleRefusal, ModuleSyntax, Site};
