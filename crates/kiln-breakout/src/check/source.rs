//! One file: parse it with oxc, resolve its scopes, and visit it for unsupported constructs.

use std::panic::{catch_unwind, AssertUnwindSafe};

use oxc_allocator::Allocator;
use oxc_ast_visit::Visit;
use oxc_parser::{ParseOptions, Parser};
use oxc_semantic::SemanticBuilder;
use oxc_span::SourceType;

use super::visit::Checker;
use super::MAX_NESTING;
use crate::position::LineIndex;
use crate::site::{Construct, ModuleSyntax, Site};

/// How Node loads a file: as an ES module (`.mjs`, or `.js` under `"type": "module"`) or as
/// CommonJS (`.cjs`, other `.js`: sloppy mode unless `"use strict"`, `return` allowed at the
/// top level, `require` and `module` in scope).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceKind {
    Module,
    CommonJs,
}

/// What checking one file found.
#[derive(Debug, Default)]
pub struct FileCheck {
    /// Unsupported constructs, in source order.
    pub sites: Vec<Site>,
    /// Packages the file loads by a bare name: they are checked in turn.
    pub packages: Vec<PackageUse>,
}

/// A package loaded by a bare name, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackageUse {
    /// The package: `uuid`, `@scope/name`.
    pub name: String,
    /// As written: `uuid/v4`.
    pub specifier: String,
    pub syntax: ModuleSyntax,
    pub file: String,
    pub line: u32,
    pub col: u32,
}

/// Checks one file's text; `file` is the name its sites carry.
///
/// Never panics: a file that does not parse, or that the parser gives up on, is one site.
pub fn check_source(file: &str, text: &str, kind: SourceKind) -> FileCheck {
    // A byte-order mark is not part of the source (and editors do not count it as a column).
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let index = LineIndex::new(text);
    let one_site = |offset: u32, construct| {
        let (line, col) = index.line_col(offset);
        FileCheck {
            sites: vec![Site {
                file: file.to_string(),
                line,
                col,
                construct,
            }],
            packages: Vec::new(),
        }
    };
    if let Some(offset) = too_deep(text) {
        return one_site(offset, Construct::TooDeep);
    }
    match catch_unwind(AssertUnwindSafe(|| check_parsed(file, text, kind, &index))) {
        Ok(Ok(found)) => found,
        Ok(Err((offset, message))) => one_site(offset, Construct::Syntax(message)),
        Err(_) => one_site(
            0,
            Construct::Syntax("the parser failed on this file".into()),
        ),
    }
}

/// The visit of a file that parses; `Err` holds the first error's offset and message.
fn check_parsed(
    file: &str,
    text: &str,
    kind: SourceKind,
    index: &LineIndex<'_>,
) -> Result<FileCheck, (u32, String)> {
    let allocator = Allocator::default();
    let source_type = match kind {
        SourceKind::Module => SourceType::mjs(),
        SourceKind::CommonJs => SourceType::cjs(),
    };
    let options = ParseOptions {
        allow_return_outside_function: kind == SourceKind::CommonJs,
        // A pattern Node would refuse is a syntax error here too.
        parse_regular_expression: true,
        // `require(('fs'))` is `require('fs')`.
        preserve_parens: false,
        ..ParseOptions::default()
    };
    let parsed = Parser::new(&allocator, text, source_type)
        .with_options(options)
        .parse();
    if let Some(error) = parsed.diagnostics.errors().next() {
        return Err(diagnostic(error));
    }
    if parsed.panicked {
        return Err((0, "the parser gave up on this file".into()));
    }
    // Scopes tell a global `eval` from a local one; the syntax checks are the early errors
    // Node would refuse the file for (a `let` declared twice, say).
    let semantic = SemanticBuilder::new()
        .with_check_syntax_error(true)
        .build(&parsed.program);
    if let Some(error) = semantic.diagnostics.errors().next() {
        return Err(diagnostic(error));
    }
    let scoping = semantic.semantic.scoping();
    let mut checker = Checker::new(file, index, scoping);
    checker.visit_program(&parsed.program);
    Ok(checker.finish())
}

/// An oxc diagnostic's offset (its first label's) and message.
fn diagnostic(error: &oxc_diagnostics::OxcDiagnostic) -> (u32, String) {
    let offset = error.labels.first().map_or(0, |label| label.offset());
    (offset, error.message.to_string())
}

/// The offset where brackets first nest deeper than [`MAX_NESTING`], if they do. Brackets in
/// strings and comments count too: a file that trips this on its strings alone is rare enough.
fn too_deep(text: &str) -> Option<u32> {
    let mut depth = 0usize;
    for (i, b) in text.bytes().enumerate() {
        match b {
            b'(' | b'[' | b'{' => {
                depth += 1;
                if depth > MAX_NESTING {
                    return Some(u32::try_from(i).unwrap_or(u32::MAX));
                }
            }
            b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    None
}
