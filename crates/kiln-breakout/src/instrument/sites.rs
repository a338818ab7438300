//! Marking the support check's sites in a file's source before it is normalised, so that each
//! survives normalisation as a call `MARK(n);` that the instrumenter turns into ☠ with the
//! site's reason and source position.
//!
//! A site that starts an expression wraps it: `(MARK(n), eval(x))`, so the mark runs only when
//! the construct is evaluated and a site on a rare path costs only that path. Any other site
//! (a statement such as `with`, an `import`, a class member) marks the innermost statement of a
//! statement list around it, before it runs.

use std::collections::BTreeMap;

use oxc_allocator::Allocator;
use oxc_ast::ast::*;
use oxc_ast_visit::{walk, Visit};
use oxc_parser::Parser;
use oxc_span::{GetSpan, Span};

use crate::check::SourceKind;
use crate::position::LineIndex;

/// The source with its sites marked; `None` when it does not parse (the file is then left
/// uninstrumented).
pub(super) fn mark(
    text: &str,
    kind: SourceKind,
    positions: &[(u32, u32)],
    marker: &str,
) -> Option<String> {
    if positions.is_empty() {
        return Some(text.to_string());
    }
    let allocator = Allocator::default();
    let (source_type, options) = kind.parse_setup();
    let parsed = Parser::new(&allocator, text, source_type)
        .with_options(options)
        .parse();
    if parsed.panicked || parsed.diagnostics.has_errors() {
        return None;
    }
    let index = LineIndex::new(text);
    let wanted: BTreeMap<(u32, u32), usize> =
        positions.iter().enumerate().map(|(i, p)| (*p, i)).collect();
    let mut marker_visitor = Marker {
        index: &index,
        wanted,
        placed: BTreeMap::new(),
        statements: Vec::new(),
        inserts: Vec::new(),
        marker,
    };
    marker_visitor.visit_program(&parsed.program);
    // Sites no expression starts at: the innermost listed statement around them.
    let left: Vec<((u32, u32), usize)> = marker_visitor
        .wanted
        .iter()
        .filter(|(_, n)| !marker_visitor.placed.contains_key(n))
        .map(|(p, n)| (*p, *n))
        .collect();
    for (position, n) in left {
        let around = marker_visitor
            .statements
            .iter()
            .filter(|s| {
                let start = index.line_col(s.start);
                let end = index.line_col(s.end);
                start <= position && position < end
            })
            .min_by_key(|s| s.end - s.start)
            .copied()
            .or_else(|| marker_visitor.statements.first().copied());
        let at = around.map_or(0, |s| s.start);
        marker_visitor
            .inserts
            .push((at, 0, format!("{marker}({n});")));
    }
    let mut inserts = marker_visitor.inserts;
    // At one offset, a statement's mark comes before an expression's opening parenthesis.
    inserts.sort_by_key(|(at, order, _)| (*at, *order));
    let mut out = String::with_capacity(text.len() + inserts.len() * 16);
    let mut pos = 0usize;
    for (at, _, insert) in inserts {
        out.push_str(&text[pos..at as usize]);
        out.push_str(&insert);
        pos = at as usize;
    }
    out.push_str(&text[pos..]);
    Some(out)
}

struct Marker<'s> {
    index: &'s LineIndex<'s>,
    wanted: BTreeMap<(u32, u32), usize>,
    /// Site number → where it was marked.
    placed: BTreeMap<usize, u32>,
    /// Statements that sit in a statement list (where a mark can go before them).
    statements: Vec<Span>,
    /// (offset, order at that offset, text).
    inserts: Vec<(u32, u8, String)>,
    marker: &'s str,
}

impl<'a> Visit<'a> for Marker<'_> {
    fn visit_statements(&mut self, it: &oxc_allocator::Vec<'a, Statement<'a>>) {
        for statement in it {
            // An `export` must stay at the top level, and a mark before it is fine there;
            // hoisted declarations are marked before too.
            self.statements.push(statement.span());
        }
        walk::walk_statements(self, it);
    }

    fn visit_expression(&mut self, it: &Expression<'a>) {
        let span = it.span();
        let position = self.index.line_col(span.start);
        if let Some(&n) = self.wanted.get(&position) {
            if let std::collections::btree_map::Entry::Vacant(slot) = self.placed.entry(n) {
                slot.insert(span.start);
                self.inserts
                    .push((span.start, 1, format!("({}({n}), ", self.marker)));
                self.inserts.push((span.end, 2, ")".to_string()));
            }
        }
        walk::walk_expression(self, it);
    }
}
