//! Normalisation: a file rewritten, source to source, into the paper's Fig. 2 fragment, so
//! that the instrumenter has few forms to handle.
//!
//! Two passes, each parsing the previous one's output:
//! - `structure.rs` rewrites the control structures in place, copying the rest as written: loops
//!   become `while`, `switch` becomes `if`s, destructuring declarations and parameters become
//!   one declarator per name;
//! - `lower.rs` (with `expr.rs` and `class.rs`) prints the whole file again in A-normal form: every call, `new`, `await`,
//!   assignment and branch inside an expression is lifted into a statement of its own (`?:`,
//!   `&&`, `||`, `??` and `?.` become `if`s over temporaries, in evaluation order), functions
//!   become `let`s of function expressions, classes become constructor functions and
//!   prototypes, template literals become concatenation, destructuring assignments become one
//!   assignment per target, and `var` and function declarations are hoisted as `let`s.
//!
//! The result (the *normal form*) is what [`crate::instrument`] takes; `docs/breakout.md`
//! describes it and lists where the rewrite still differs from JavaScript.

mod assign;
mod chain;
mod class;
mod expr;
mod lower;
mod structure;

use oxc_allocator::Allocator;
use oxc_ast::ast::Program;
use oxc_parser::Parser;

use crate::check::SourceKind;
use structure::bound_names as structure_names;

/// Why a file could not be normalised.
#[derive(Debug, thiserror::Error)]
pub enum NormaliseError {
    /// The source does not parse.
    #[error("the source does not parse: {0}")]
    Parse(String),
    /// The source nests deeper than the rewrite follows (the support check's bound).
    #[error("the source nests deeper than {} levels", crate::check::MAX_NESTING)]
    TooDeep,
}

/// The file's text in the normal form.
pub fn normalise(text: &str, kind: SourceKind) -> Result<String, NormaliseError> {
    let structured = structure::structure(text, kind)?;
    lower::lower(&structured, kind)
}

/// `text` parsed as a file of `kind`, for either pass.
fn parse<'a>(
    allocator: &'a Allocator,
    text: &'a str,
    kind: SourceKind,
) -> Result<Program<'a>, NormaliseError> {
    let (source_type, options) = kind.parse_setup();
    let parsed = Parser::new(allocator, text, source_type)
        .with_options(options)
        .parse();
    if let Some(error) = parsed.diagnostics.errors().next() {
        return Err(NormaliseError::Parse(error.message.to_string()));
    }
    if parsed.panicked {
        return Err(NormaliseError::Parse("the parser gave up".into()));
    }
    Ok(parsed.program)
}

/// The prefix of every fresh name in a normalised `text`: `$kb`, with `_`s added until the
/// text holds no such string, so no fresh name can capture one of the source's.
pub fn fresh_prefix(text: &str) -> String {
    let mut prefix = String::from("$kb");
    while text.contains(prefix.as_str()) {
        prefix.push('_');
    }
    prefix
}
