//! One file: parse it with oxc, resolve its scopes, and visit it for unsupported constructs.

use std::panic::{catch_unwind, AssertUnwindSafe};

use oxc_allocator::Allocator;
use oxc_ast_visit::Visit;
use oxc_parser::{ParseOptions, Parser};
use oxc_semantic::SemanticBuilder;
use oxc_span::SourceType;

use super::found::FileCheck;
use super::visit::Checker;
use super::MAX_NESTING;
use crate::position::LineIndex;
use crate::site::{Construct, Site};

/// How Node loads a file: as an ES module (`.mjs`, or `.js` under `"type": "module"`) or as
/// CommonJS (`.cjs`, other `.js`: sloppy mode unless `"use strict"`, `return` allowed at the
/// top level, `require` and `module` in scope). A CommonJS file that parses only as a module
/// is checked as one, as Node 22 detects it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceKind {
    Module,
    CommonJs,
}

impl SourceKind {
    /// How oxc parses a file of this kind: its source type, and the options every parse of it
    /// shares (a CommonJS module's top level is a function body, so `return` is allowed).
    pub(crate) fn parse_setup(self) -> (SourceType, ParseOptions) {
        let source_type = match self {
            SourceKind::Module => SourceType::mjs(),
            SourceKind::CommonJs => SourceType::cjs(),
        };
        let options = ParseOptions {
            allow_return_outside_function: self == SourceKind::CommonJs,
            ..ParseOptions::default()
        };
        (source_type, options)
    }
}

/// Checks one file's text; `file` is the name its sites carry.
///
/// Never panics: a file that does not parse, or that the parser gives up on, is one site. It
/// recurses up to [`MAX_NESTING`] levels (deeper files are one site, unparsed), which can take
/// more than a default thread's 2 MiB of stack: [`super::check_dir`] runs it on a thread of
/// 256 MiB.
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
    let check = || {
        let first = check_parsed(file, text, kind, &index);
        // A `.js` file with `import`/`export` outside a `"type": "module"` package: Node 22
        // loads it as an ES module (syntax detection); Node 20 cannot load it at all, so it is
        // dead code there (packages ship such files for bundlers). Either way, not an error.
        match first {
            Err(_) if kind == SourceKind::CommonJs => {
                check_parsed(file, text, SourceKind::Module, &index).or(first)
            }
            _ => first,
        }
    };
    match catch_unwind(AssertUnwindSafe(check)) {
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
    let (source_type, options) = kind.parse_setup();
    let options = ParseOptions {
        // A pattern Node would refuse is a syntax error here too.
        parse_regular_expression: true,
        // `require(('fs'))` is `require('fs')`.
        preserve_parens: false,
        ..options
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

/// The offset where the file first nests deeper than [`MAX_NESTING`], if it does.
///
/// The parser and every walk of the tree recurse once per level of brackets; once per prefix
/// operator (`!`, `~`, unary `+`/`-`, `typeof`, `void`, `await`, `new`, `delete`, `yield`) in
/// a row; and once per operator of a chain (`a + b + …` is a tree as deep as it is long,
/// `a ? b : c ? d : …`, `x = y = …`, `a => b => …`). A forged file of a million of them would
/// exhaust any stack. This counts levels the same way, skipping strings and comments, without
/// a full lexer: it may count an operator or two too many, never a level too few.
pub(crate) fn too_deep(text: &str) -> Option<u32> {
    let bytes = text.as_bytes();
    // Per enclosing bracket, the chain it interrupted and the levels it added; their sum.
    let mut outer: Vec<(usize, usize)> = Vec::new();
    let mut outer_levels = 0usize;
    // Operators since the last `,` or `;` at this bracket level.
    let mut chain = 0usize;
    // Prefix operators since the last operand.
    let mut prefix = 0usize;
    // The previous byte that is not white space: whether a `+` or `-` is a prefix operator.
    let mut previous = b';';
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let start = i;
        let next = bytes.get(i + 1).copied();
        match b {
            b'/' if next == Some(b'/') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            b'/' if next == Some(b'*') => {
                i += 2;
                while i < bytes.len() && !(bytes[i] == b'*' && bytes.get(i + 1) == Some(&b'/')) {
                    i += 1;
                }
                i += 2;
                continue;
            }
            b'\'' | b'"' | b'`' => {
                i += 1;
                while i < bytes.len() && bytes[i] != b {
                    if bytes[i] == b'\\' {
                        i += 1;
                    }
                    i += 1;
                }
                prefix = 0;
            }
            b'(' | b'[' | b'{' => {
                // The bracket's own level, and the chain and prefixes it sits in.
                let levels = chain + prefix + 1;
                outer.push((chain, levels));
                outer_levels += levels;
                chain = 0;
                prefix = 0;
            }
            b')' | b']' | b'}' => {
                let (restored, levels) = outer.pop().unwrap_or((0, 0));
                outer_levels -= levels;
                chain = restored;
                // The bracket was the operand of the prefixes before it.
                prefix = 0;
            }
            b',' | b';' => {
                chain = 0;
                prefix = 0;
            }
            b'!' | b'~' => prefix += 1,
            b'+' | b'-' if operand_expected(previous) => prefix += 1,
            b'?' | b'+' | b'-' | b'*' | b'/' | b'%' | b'&' | b'|' | b'^' | b'<' | b'>' => {
                chain += 1
            }
            b'=' => {
                let arrow = next == Some(b'>');
                let assignment =
                    next != Some(b'=') && !matches!(previous, b'=' | b'!' | b'<' | b'>');
                if arrow || assignment {
                    chain += 1;
                }
            }
            b if b.is_ascii_alphanumeric() || b == b'_' || b == b'$' => {
                while i + 1 < bytes.len()
                    && (bytes[i + 1].is_ascii_alphanumeric()
                        || bytes[i + 1] == b'_'
                        || bytes[i + 1] == b'$')
                {
                    i += 1;
                }
                match &bytes[start..=i] {
                    b"typeof" | b"void" | b"await" | b"new" | b"delete" | b"yield" => prefix += 1,
                    b"in" | b"instanceof" => chain += 1,
                    _ => prefix = 0,
                }
            }
            _ => {}
        }
        if outer_levels + chain + prefix > MAX_NESTING {
            return Some(u32::try_from(start).unwrap_or(u32::MAX));
        }
        if let Some(&last) = bytes.get(i) {
            if !last.is_ascii_whitespace() {
                previous = last;
            }
        }
        i += 1;
    }
    None
}

/// Whether, after `previous`, an operand (not an operator) comes next: a `+` or `-` there is
/// a prefix operator.
fn operand_expected(previous: u8) -> bool {
    matches!(
        previous,
        b'(' | b'['
            | b'{'
            | b','
            | b';'
            | b':'
            | b'?'
            | b'='
            | b'+'
            | b'-'
            | b'*'
            | b'/'
            | b'%'
            | b'!'
            | b'~'
            | b'&'
            | b'|'
            | b'^'
            | b'<'
            | b'>'
    )
}
