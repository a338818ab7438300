//! A function's instrumentation: its entry and exit around its body, and what its closure
//! captures (Fig. 5's environment: each free name with the address the enclosing function has
//! for it).

use std::collections::BTreeSet;

use oxc_ast::ast::*;
use oxc_ast_visit::{walk, Visit};
use oxc_semantic::{ScopeFlags, ScopeId};
use serde_json::{json, Value};

use super::emit::Emitter;
use super::quote::{Binding, Names};

impl Emitter<'_> {
    /// Instruments a function expression's body; returns its id and what it captures.
    pub(super) fn function(&mut self, f: &Function<'_>) -> (String, Vec<Value>) {
        self.functions += 1;
        let id = format!("{}#{}", self.file, self.functions);
        let (Some(body), Some(scope), false) = (&f.body, f.scope_id.get(), f.generator) else {
            return (id, Vec::new());
        };
        let captures = self.captures(f, scope);
        let mut params = Vec::new();
        for param in &f.params.items {
            if let BindingPattern::BindingIdentifier(p) = &param.pattern {
                params.push(p.name.to_string());
            }
        }
        let rest = f.params.rest.as_ref().and_then(|r| match &r.rest.argument {
            BindingPattern::BindingIdentifier(p) => Some(p.name.to_string()),
            _ => None,
        });
        let t = self.t();
        let order = self.reserve();
        let q = self.q(json!({
            "kind": "function",
            "fn": id,
            "params": params,
            "rest": rest,
            "async": f.r#async,
        }));
        let implicit = self.q(json!({
            "kind": "return",
            "value": {"kind": "global", "name": "undefined"},
            "implicit": true,
        }));
        let start = body
            .directives
            .last()
            .map_or(body.span.start + 1, |d| d.span.end);
        let frame = format!("{}F", self.prefix);
        // `arguments`, read only for the types of what the function was given.
        self.open(
            start,
            format!("const {frame} = {t}.en({q}, arguments); try {{"),
        );
        self.scope.push(scope);
        self.statements(&body.statements);
        self.scope.pop();
        self.close(
            order,
            body.span.end - 1,
            format!("{t}.rt({implicit}); }} finally {{ {t}.lv({frame}); }}"),
        );
        (id, captures)
    }

    /// The names a function reads from enclosing functions: its closure's environment, each
    /// as the address the enclosing function has for it.
    fn captures(&self, f: &Function<'_>, scope: ScopeId) -> Vec<Value> {
        let mut finder = FreeNames {
            names: &self.names,
            function: scope,
            found: BTreeSet::new(),
        };
        finder.visit_function(f, ScopeFlags::Function);
        let here = self.scope();
        finder
            .found
            .into_iter()
            .map(|(name, declared)| {
                let kind = if declared == here { "ref" } else { "from" };
                json!({"kind": kind, "name": name})
            })
            .collect()
    }
}

/// Names referenced in a function (nested functions included) that an enclosing function
/// declares, with the function scope that declares each.
struct FreeNames<'n, 's> {
    names: &'n Names<'s>,
    function: ScopeId,
    found: BTreeSet<(String, ScopeId)>,
}

impl<'a> Visit<'a> for FreeNames<'_, '_> {
    fn visit_identifier_reference(&mut self, it: &IdentifierReference<'a>) {
        if let Binding::Global = self.names.binding(it, self.function) {
            return;
        }
        let symbol = it
            .reference_id
            .get()
            .and_then(|r| self.names.scoping.get_reference(r).symbol_id());
        if let Some(symbol) = symbol {
            let declared = self
                .names
                .function_scope(self.names.scoping.symbol_scope_id(symbol));
            // Declared outside this function: an ancestor of its scope.
            let mut scope = self.names.scoping.scope_parent_id(self.function);
            while let Some(s) = scope {
                if s == declared {
                    self.found.insert((it.name.to_string(), declared));
                    break;
                }
                scope = self.names.scoping.scope_parent_id(s);
            }
        }
        walk::walk_identifier_reference(self, it);
    }
}
