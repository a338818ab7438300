//! Quoting a normal-form expression (the paper's ⟦e⟧): its trace, as JSON, built when the
//! file is instrumented. A name is quoted by where it is bound, as Fig. 5's ρ does: a
//! variable of the function being traced (`id`), one of an enclosing function's, read through
//! the closure's environment (`from`), or a global (`global`).

use oxc_ast::ast::*;
use oxc_semantic::{ScopeId, Scoping};
use oxc_span::GetSpan;
use serde_json::{json, Value};

/// Where a name is bound, relative to the function being instrumented.
pub(super) enum Binding {
    Local,
    Free,
    Global,
}

/// Resolves names against the file's scopes.
pub(super) struct Names<'s> {
    pub scoping: &'s Scoping,
}

impl Names<'_> {
    /// The function (or file) scope that holds `scope`.
    pub fn function_scope(&self, mut scope: ScopeId) -> ScopeId {
        loop {
            let flags = self.scoping.scope_flags(scope);
            if flags.is_function() || flags.is_top() {
                return scope;
            }
            match self.scoping.scope_parent_id(scope) {
                Some(parent) => scope = parent,
                None => return scope,
            }
        }
    }

    pub fn binding(&self, ident: &IdentifierReference<'_>, function: ScopeId) -> Binding {
        let symbol = ident
            .reference_id
            .get()
            .and_then(|r| self.scoping.get_reference(r).symbol_id());
        match symbol {
            None => Binding::Global,
            Some(symbol) => {
                let declared = self.function_scope(self.scoping.symbol_scope_id(symbol));
                if declared == function {
                    Binding::Local
                } else {
                    Binding::Free
                }
            }
        }
    }

    pub fn name(&self, ident: &IdentifierReference<'_>, function: ScopeId) -> Value {
        let kind = match self.binding(ident, function) {
            Binding::Local => "id",
            Binding::Free => "from",
            Binding::Global => "global",
        };
        json!({"kind": kind, "name": ident.name.as_str()})
    }

    /// The trace of a pure expression; `None` for a form the trace language lacks.
    pub fn quote(&self, e: &Expression<'_>, function: ScopeId, src: &str) -> Option<Value> {
        Some(match e {
            Expression::NumericLiteral(n) => json!({"kind": "number", "value": n.value}),
            Expression::StringLiteral(s) => json!({"kind": "string", "value": s.value.as_str()}),
            Expression::BooleanLiteral(b) => json!({"kind": "boolean", "value": b.value}),
            Expression::NullLiteral(_) => json!({"kind": "null"}),
            Expression::RegExpLiteral(r) => {
                let text = &src[r.span.start as usize..r.span.end as usize];
                json!({"kind": "regex", "source": text})
            }
            Expression::Identifier(id) => self.name(id, function),
            Expression::ThisExpression(_) => json!({"kind": "this"}),
            Expression::ParenthesizedExpression(p) => self.quote(&p.expression, function, src)?,
            Expression::StaticMemberExpression(m) if !m.optional => json!({
                "kind": "get",
                "object": self.quote(&m.object, function, src)?,
                "property": m.property.name.as_str(),
            }),
            Expression::ComputedMemberExpression(m) if !m.optional => json!({
                "kind": "index",
                "object": self.quote(&m.object, function, src)?,
                "key": self.quote(&m.expression, function, src)?,
            }),
            Expression::UnaryExpression(u) if u.operator.as_str() != "delete" => json!({
                "kind": "unary",
                "op": u.operator.as_str(),
                "argument": self.quote(&u.argument, function, src)?,
            }),
            Expression::BinaryExpression(b) => json!({
                "kind": "binary",
                "op": b.operator.as_str(),
                "left": self.quote(&b.left, function, src)?,
                "right": self.quote(&b.right, function, src)?,
            }),
            Expression::ArrayExpression(array) => {
                let mut items = Vec::new();
                for element in &array.elements {
                    items.push(match element {
                        ArrayExpressionElement::Elision(_) => json!({"kind": "hole"}),
                        ArrayExpressionElement::SpreadElement(s) => json!({
                            "kind": "spread",
                            "argument": self.quote(&s.argument, function, src)?,
                        }),
                        other => self.quote(other.to_expression(), function, src)?,
                    });
                }
                json!({"kind": "array", "items": items})
            }
            Expression::ObjectExpression(object) => {
                let mut properties = Vec::new();
                for property in &object.properties {
                    properties.push(match property {
                        ObjectPropertyKind::SpreadProperty(s) => json!({
                            "spread": self.quote(&s.argument, function, src)?,
                        }),
                        ObjectPropertyKind::ObjectProperty(p) => {
                            if p.kind != PropertyKind::Init || p.method {
                                return None;
                            }
                            let value = self.quote(&p.value, function, src)?;
                            match &p.key {
                                PropertyKey::StaticIdentifier(id) if !p.computed => {
                                    json!({"key": id.name.as_str(), "value": value})
                                }
                                PropertyKey::StringLiteral(s) if !p.computed => {
                                    json!({"key": s.value.as_str(), "value": value})
                                }
                                PropertyKey::NumericLiteral(n) if !p.computed => {
                                    json!({"key": format!("{}", n.value), "value": value})
                                }
                                key => {
                                    let key = key.as_expression()?;
                                    json!({
                                        "computed": self.quote(key, function, src)?,
                                        "value": value,
                                    })
                                }
                            }
                        }
                    });
                }
                json!({"kind": "object", "properties": properties})
            }
            _ => return None,
        })
    }

    /// The trace of an assignment's target.
    pub fn target(
        &self,
        target: &AssignmentTarget<'_>,
        function: ScopeId,
        src: &str,
    ) -> Option<Value> {
        match target.as_simple_assignment_target()? {
            SimpleAssignmentTarget::AssignmentTargetIdentifier(id) => Some(self.name(id, function)),
            SimpleAssignmentTarget::StaticMemberExpression(m) => Some(json!({
                "kind": "get",
                "object": self.quote(&m.object, function, src)?,
                "property": m.property.name.as_str(),
            })),
            SimpleAssignmentTarget::ComputedMemberExpression(m) => Some(json!({
                "kind": "index",
                "object": self.quote(&m.object, function, src)?,
                "key": self.quote(&m.expression, function, src)?,
            })),
            other => {
                let _ = other.span();
                None
            }
        }
    }
}
