//! Optional chains in A-normal form: `a?.b.c()` becomes a labelled block that binds each link
//! to a temporary and leaves with `undefined` when an optional link's object is `null` or
//! `undefined`, so one `?.` short-circuits the rest of its chain.

use oxc_ast::ast::*;
use oxc_span::GetSpan;

use super::expr::{receiver, stable, Value};
use super::lower::Lowerer;

impl Lowerer<'_> {
    /// An `a?.b…` chain: each optional link checks its object and leaves the chain's block
    /// with `undefined` when it is `null` or `undefined`.
    pub fn chain(&mut self, c: &ChainExpression<'_>) -> Value {
        let label = self.fresh("chain");
        let result = self.fresh("t");
        let mut inner = Vec::new();
        let text = match &c.expression {
            ChainElement::CallExpression(call) => self.chain_call(call, &label, &mut inner),
            other => match other.as_member_expression() {
                Some(member) => self.chain_member(member, &label, &mut inner).0,
                None => format!("({})", self.source(other.span())),
            },
        };
        Value {
            pre: vec![format!(
                "let {result}; {label}: {{ {} {result} = {text}; }}",
                inner.join(" ")
            )],
            text: result,
        }
    }

    /// An object in a chain, bound to a temporary (and checked when its link is optional).
    fn chain_object(&mut self, e: &Expression<'_>, label: &str, pre: &mut Vec<String>) -> String {
        let text = match e {
            Expression::CallExpression(call) => self.chain_call(call, label, pre),
            Expression::StaticMemberExpression(_) | Expression::ComputedMemberExpression(_) => {
                let member = e.as_member_expression().expect("a member expression");
                self.chain_member(member, label, pre).0
            }
            Expression::ParenthesizedExpression(p) => {
                return self.chain_object(&p.expression, label, pre)
            }
            other => {
                let value = self.expr(other);
                pre.extend(value.pre);
                value.text
            }
        };
        if stable(&text, &self.prefix) {
            return text;
        }
        let name = self.fresh("t");
        pre.push(format!("const {name} = {text};"));
        name
    }

    fn null_check(name: &str, label: &str) -> String {
        format!("if ({name} == null) {{ break {label}; }}")
    }

    /// A member link of a chain: its text and its object's (a method call's receiver).
    fn chain_member(
        &mut self,
        member: &MemberExpression<'_>,
        label: &str,
        pre: &mut Vec<String>,
    ) -> (String, String) {
        let object = self.chain_object(member.object(), label, pre);
        if member.optional() {
            pre.push(Self::null_check(&object, label));
        }
        let text = match member {
            MemberExpression::StaticMemberExpression(m) => {
                format!("{}.{}", receiver(&object), m.property.name)
            }
            MemberExpression::ComputedMemberExpression(m) => {
                let key = self.expr(&m.expression);
                pre.extend(key.pre);
                format!("{}[{}]", receiver(&object), key.text)
            }
            other => format!("({})", self.source(other.span())),
        };
        (text, object)
    }

    fn chain_call(
        &mut self,
        call: &CallExpression<'_>,
        label: &str,
        pre: &mut Vec<String>,
    ) -> String {
        let (callee, receiver) = match call.callee.as_member_expression() {
            Some(member) => {
                let (callee, object) = self.chain_member(member, label, pre);
                (callee, Some(object))
            }
            None => (self.chain_object(&call.callee, label, pre), None),
        };
        let parts = self.arguments(&call.arguments);
        let (argument_pre, mut texts) = self.sequence(parts);
        if call.optional {
            let function = self.fresh("t");
            pre.push(format!("const {function} = {callee};"));
            pre.push(Self::null_check(&function, label));
            pre.extend(argument_pre);
            let call_text = match receiver {
                Some(receiver) => {
                    texts.insert(0, receiver);
                    format!("{function}.call({})", texts.join(", "))
                }
                None => format!("{function}({})", texts.join(", ")),
            };
            let name = self.fresh("t");
            pre.push(format!("const {name} = {call_text};"));
            return name;
        }
        pre.extend(argument_pre);
        let name = self.fresh("t");
        pre.push(format!("const {name} = {callee}({});", texts.join(", ")));
        name
    }
}
