//! Assignments in A-normal form: plain, compound (`+=`) and logical (`||=`) assignments, updates
//! (`i++`), and destructuring assignments as one assignment per target. A target's object and
//! key are bound first, so it is read and written once each, in JavaScript's order.

use oxc_ast::ast::*;
use oxc_span::GetSpan;

use super::expr::{is_name, stable, Value};
use super::lower::Lowerer;

impl Lowerer<'_> {
    /// An assignment target: its object and key bound, so it can be read and written.
    fn target(&mut self, target: &SimpleAssignmentTarget<'_>) -> (Vec<String>, String) {
        match target {
            SimpleAssignmentTarget::AssignmentTargetIdentifier(id) => {
                (Vec::new(), id.name.to_string())
            }
            SimpleAssignmentTarget::StaticMemberExpression(m) => {
                let object = self.expr(&m.object);
                let bound = self.bind_unstable(object);
                (bound.pre, format!("{}.{}", bound.text, m.property.name))
            }
            SimpleAssignmentTarget::ComputedMemberExpression(m) => {
                let object = self.expr(&m.object);
                let object = self.bind_unstable(object);
                let key = self.expr(&m.expression);
                let key = self.bind_unstable(key);
                let mut pre = object.pre;
                pre.extend(key.pre);
                (pre, format!("{}[{}]", object.text, key.text))
            }
            other => (Vec::new(), format!("({})", self.source(other.span()))),
        }
    }

    fn bind_unstable(&mut self, value: Value) -> Value {
        if stable(&value.text, &self.prefix) || is_name(&value.text) {
            value
        } else {
            self.bind(value)
        }
    }

    /// `a = b`, `a += b`, `a ||= b`, `[a, b] = c`: the statements, and the expression's value.
    pub fn assignment(&mut self, a: &AssignmentExpression<'_>, value_used: bool) -> Value {
        match &a.left {
            AssignmentTarget::ArrayAssignmentTarget(_)
            | AssignmentTarget::ObjectAssignmentTarget(_) => {
                // The destructured value and its parts take the hint `d`: a read of them is
                // a destructuring, which V8 words otherwise when it fails (`compile`'s
                // `errors_exact` tells them from other temporaries).
                let right = self.expr(&a.right);
                let name = self.fresh("d");
                let mut value = right;
                value.pre.push(format!("const {name} = {};", value.text));
                value.text = name;
                let mut pre = value.pre;
                self.destructure(&a.left, &value.text, &mut pre);
                return Value {
                    pre,
                    text: value.text,
                };
            }
            _ => {}
        }
        let simple = a.left.as_simple_assignment_target().expect("not a pattern");
        let (mut pre, target) = self.target(simple);
        let logical = match a.operator {
            AssignmentOperator::LogicalAnd => Some(target.clone()),
            AssignmentOperator::LogicalOr => Some(format!("!{target}")),
            AssignmentOperator::LogicalNullish => Some(format!("{target} == null")),
            _ => None,
        };
        if let Some(test) = logical {
            let name = self.fresh("t");
            let right = self.expr_top(&a.right);
            pre.push(format!(
                "let {name} = {target}; if ({test}) {{ {} {name} = {}; {target} = {name}; }}",
                right.pre.join(" "),
                right.text
            ));
            return Value { pre, text: name };
        }
        let right = if a.operator == AssignmentOperator::Assign {
            self.expr_top(&a.right)
        } else {
            let operator = a.operator.to_binary_operator().map_or("+", |o| o.as_str());
            let right = self.expr(&a.right);
            // The target is read before the right side runs.
            let (mut read_pre, old) = if right.pre.is_empty() {
                (Vec::new(), target.clone())
            } else {
                let old = self.fresh("t");
                (vec![format!("const {old} = {target};")], old)
            };
            read_pre.extend(right.pre);
            Value {
                pre: read_pre,
                text: format!("{old} {operator} {}", right.text),
            }
        };
        pre.extend(right.pre);
        if !value_used {
            pre.push(format!("{target} = {};", right.text));
            return Value { pre, text: target };
        }
        let name = self.fresh("t");
        pre.push(format!("const {name} = {};", right.text));
        pre.push(format!("{target} = {name};"));
        Value { pre, text: name }
    }

    pub fn update(&mut self, u: &UpdateExpression<'_>, value_used: bool) -> Value {
        let (mut pre, target) = self.target(&u.argument);
        let operator = if u.operator == UpdateOperator::Increment {
            "+"
        } else {
            "-"
        };
        let old = self.fresh("t");
        pre.push(format!("const {old} = +{target};"));
        pre.push(format!("{target} = {old} {operator} 1;"));
        let text = if !value_used || !u.prefix {
            old
        } else {
            format!("({old} {operator} 1)")
        };
        Value { pre, text }
    }

    /// One assignment per target of a destructuring assignment, from the variable `from`.
    fn destructure(&mut self, target: &AssignmentTarget<'_>, from: &str, pre: &mut Vec<String>) {
        match target {
            AssignmentTarget::ArrayAssignmentTarget(array) => {
                let items = self.fresh("a");
                pre.push(format!("const {items} = Array.from({from});"));
                for (i, element) in array.elements.iter().enumerate() {
                    if let Some(element) = element {
                        self.destructure_default(element, format!("{items}[{i}]"), pre);
                    }
                }
                if let Some(rest) = &array.rest {
                    let value = self.fresh("d");
                    let at = array.elements.len();
                    pre.push(format!("const {value} = {items}.slice({at});"));
                    self.destructure(&rest.target, &value, pre);
                }
            }
            AssignmentTarget::ObjectAssignmentTarget(object) => {
                let mut keys = Vec::new();
                for property in &object.properties {
                    match property {
                        AssignmentTargetProperty::AssignmentTargetPropertyIdentifier(p) => {
                            keys.push(format!("\"{}\"", p.binding.name));
                            let read = format!("{from}.{}", p.binding.name);
                            let value = self.with_default(read, p.init.as_ref(), pre);
                            pre.push(format!("{} = {value};", p.binding.name));
                        }
                        AssignmentTargetProperty::AssignmentTargetPropertyProperty(p) => {
                            let read = match &p.name {
                                PropertyKey::StaticIdentifier(id) if !p.computed => {
                                    keys.push(format!("\"{}\"", id.name));
                                    format!("{from}.{}", id.name)
                                }
                                key if !p.computed => {
                                    let text = self.source(key.span()).to_string();
                                    keys.push(text.clone());
                                    format!("{from}[{text}]")
                                }
                                key => {
                                    let value = self.expr(key.to_expression());
                                    let value = self.bind(value);
                                    pre.extend(value.pre);
                                    keys.push(value.text.clone());
                                    format!("{from}[{}]", value.text)
                                }
                            };
                            self.destructure_default(&p.binding, read, pre);
                        }
                    }
                }
                if let Some(rest) = &object.rest {
                    let value = self.fresh("d");
                    pre.push(format!(
                        "const {value} = Object.fromEntries(Object.entries({from}).filter(({}) => ![{}].includes({}[0])));",
                        "e",
                        keys.join(", "),
                        "e"
                    ));
                    self.destructure(&rest.target, &value, pre);
                }
            }
            simple => {
                if let Some(simple) = simple.as_simple_assignment_target() {
                    let (target_pre, target) = self.target(simple);
                    pre.extend(target_pre);
                    pre.push(format!("{target} = {from};"));
                }
            }
        }
    }

    fn destructure_default(
        &mut self,
        element: &AssignmentTargetMaybeDefault<'_>,
        read: String,
        pre: &mut Vec<String>,
    ) {
        match element {
            AssignmentTargetMaybeDefault::AssignmentTargetWithDefault(d) => {
                let value = self.with_default(read, Some(&d.init), pre);
                self.destructure(&d.binding, &value, pre);
            }
            other => {
                let target = other.as_assignment_target().expect("not a default");
                let value = self.fresh("d");
                pre.push(format!("const {value} = {read};"));
                self.destructure(target, &value, pre);
            }
        }
    }

    /// `read` into a fresh variable, replaced by `default` (evaluated only then) when undefined.
    fn with_default(
        &mut self,
        read: String,
        default: Option<&Expression<'_>>,
        pre: &mut Vec<String>,
    ) -> String {
        let name = self.fresh("d");
        match default {
            None => pre.push(format!("const {name} = {read};")),
            Some(default) => {
                let value = self.expr(default);
                pre.push(format!(
                    "let {name} = {read}; if ({name} === undefined) {{ {} {name} = {}; }}",
                    value.pre.join(" "),
                    value.text
                ));
            }
        }
        name
    }
}
