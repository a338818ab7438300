//! Expressions in A-normal form. An expression becomes statements that must run first (`pre`)
//! and a *pure* rest (`text`): constants, names, member reads, operators and literals, with no
//! call, `new`, `await`, assignment, function or branch left inside. In a binding position (a
//! `let`'s value, an assignment's right side, an expression statement) one call, `new` or
//! `await` may stay at the top.
//!
//! Evaluation order is kept: when a later operand needs statements first, every earlier operand
//! that is not a constant is bound to a temporary before them.

use oxc_ast::ast::*;
use oxc_span::GetSpan;

use super::lower::Lowerer;

/// An expression lowered: statements to run first, then a pure expression.
#[derive(Debug, Default)]
pub(super) struct Value {
    pub pre: Vec<String>,
    pub text: String,
}

impl Value {
    fn pure(text: String) -> Self {
        Value {
            pre: Vec::new(),
            text,
        }
    }
}

/// Whether an operand's text can be read later with the same result: a literal or a temporary.
pub(super) fn stable(text: &str, prefix: &str) -> bool {
    let literal = text.starts_with('"')
        || text.starts_with('\'')
        || text.chars().next().is_some_and(|c| c.is_ascii_digit())
        || matches!(text, "true" | "false" | "null" | "undefined" | "this");
    let temporary = text.starts_with(prefix)
        && text[prefix.len()..]
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_');
    literal || temporary
}

impl Lowerer<'_> {
    /// Operands evaluated left to right: their statements in order, each operand bound to a
    /// temporary when a later one has statements.
    pub fn sequence(&mut self, parts: Vec<Value>) -> (Vec<String>, Vec<String>) {
        let last_with_pre = parts.iter().rposition(|p| !p.pre.is_empty());
        let mut pre = Vec::new();
        let mut texts = Vec::new();
        for (i, part) in parts.into_iter().enumerate() {
            pre.extend(part.pre);
            if last_with_pre.is_some_and(|last| i < last) && !stable(&part.text, &self.prefix) {
                let name = self.fresh("t");
                pre.push(format!("const {name} = {};", part.text));
                texts.push(name);
            } else {
                texts.push(part.text);
            }
        }
        (pre, texts)
    }

    /// `text` bound to a fresh `const`, the name as the value.
    pub fn bind(&mut self, mut value: Value) -> Value {
        let name = self.fresh("t");
        value.pre.push(format!("const {name} = {};", value.text));
        value.text = name;
        value
    }

    pub fn arguments(&mut self, arguments: &[Argument<'_>]) -> Vec<Value> {
        arguments
            .iter()
            .map(|argument| match argument {
                Argument::SpreadElement(spread) => {
                    let mut value = self.expr(&spread.argument);
                    value.text = format!("...{}", value.text);
                    value
                }
                other => self.expr(other.to_expression()),
            })
            .collect()
    }

    /// An expression in a binding position: a call, `new` or `await` may stay at the top, and a
    /// function keeps the name JavaScript infers for it from the binding.
    pub fn expr_top(&mut self, e: &Expression<'_>) -> Value {
        match e {
            Expression::ParenthesizedExpression(p) => self.expr_top(&p.expression),
            Expression::CallExpression(call) if !call.optional => self.call(call),
            Expression::NewExpression(new) => {
                let mut parts = vec![self.expr(&new.callee)];
                parts.extend(self.arguments(&new.arguments));
                let (pre, texts) = self.sequence(parts);
                Value {
                    pre,
                    text: format!("new {}({})", texts[0], texts[1..].join(", ")),
                }
            }
            Expression::AwaitExpression(a) => {
                let value = self.expr(&a.argument);
                Value {
                    pre: value.pre,
                    text: format!("await {}", value.text),
                }
            }
            Expression::FunctionExpression(f) if f.id.is_none() => Value::pure(self.function(f)),
            Expression::ArrowFunctionExpression(f) => Value::pure(self.arrow(f)),
            _ => self.expr(e),
        }
    }

    fn call(&mut self, call: &CallExpression<'_>) -> Value {
        match &call.callee {
            Expression::Super(_) => return self.super_call(&call.arguments),
            Expression::StaticMemberExpression(m) if matches!(m.object, Expression::Super(_)) => {
                let this = self.this_text();
                let object = self.super_object();
                let (pre, texts) = {
                    let parts = self.arguments(&call.arguments);
                    self.sequence(parts)
                };
                let mut arguments = vec![this];
                arguments.extend(texts);
                return Value {
                    pre,
                    text: format!(
                        "{object}.{}.call({})",
                        m.property.name,
                        arguments.join(", ")
                    ),
                };
            }
            _ => {}
        }
        // A method call keeps its receiver: `o.m(…)` with `o` (and a computed key) evaluated first.
        let (callee_parts, shape): (Vec<Value>, usize) = match &call.callee {
            Expression::StaticMemberExpression(m) if !m.optional => (vec![self.expr(&m.object)], 1),
            Expression::ComputedMemberExpression(m) if !m.optional => {
                (vec![self.expr(&m.object), self.expr(&m.expression)], 2)
            }
            other => (vec![self.expr(other)], 0),
        };
        let mut parts = callee_parts;
        parts.extend(self.arguments(&call.arguments));
        let (pre, texts) = self.sequence(parts);
        let (callee, rest) = match (&call.callee, shape) {
            (Expression::StaticMemberExpression(m), 1) => (
                format!("{}.{}", receiver(&texts[0]), m.property.name),
                &texts[1..],
            ),
            (_, 2) => (
                format!("{}[{}]", receiver(&texts[0]), texts[1]),
                &texts[2..],
            ),
            _ => (texts[0].clone(), &texts[1..]),
        };
        Value {
            pre,
            text: format!("{callee}({})", rest.join(", ")),
        }
    }

    /// An expression whose result is pure.
    pub fn expr(&mut self, e: &Expression<'_>) -> Value {
        match e {
            Expression::BooleanLiteral(_)
            | Expression::NullLiteral(_)
            | Expression::NumericLiteral(_)
            | Expression::StringLiteral(_)
            | Expression::RegExpLiteral(_)
            | Expression::BigIntLiteral(_) => Value::pure(self.source(e.span()).to_string()),
            Expression::Identifier(id) => Value::pure(id.name.to_string()),
            Expression::ThisExpression(_) => Value::pure(self.this_text()),
            Expression::ParenthesizedExpression(p) => self.expr(&p.expression),
            Expression::TemplateLiteral(t) => self.template(t),
            Expression::ArrayExpression(array) => {
                let mut parts = Vec::new();
                let mut holes = Vec::new();
                for element in &array.elements {
                    match element {
                        ArrayExpressionElement::Elision(_) => {
                            holes.push(parts.len());
                            parts.push(Value::pure(String::new()));
                        }
                        ArrayExpressionElement::SpreadElement(spread) => {
                            let mut value = self.expr(&spread.argument);
                            value.text = format!("...{}", value.text);
                            parts.push(value);
                        }
                        other => parts.push(self.expr(other.to_expression())),
                    }
                }
                let (pre, texts) = self.sequence(parts);
                let trailing = if !texts.is_empty() && holes.last() == Some(&(texts.len() - 1)) {
                    ","
                } else {
                    ""
                };
                Value {
                    pre,
                    text: format!("[{}{trailing}]", texts.join(", ")),
                }
            }
            Expression::ObjectExpression(object) => self.object(object),
            Expression::UnaryExpression(u) => {
                let value = self.expr(&u.argument);
                let operator = u.operator.as_str();
                let space = if operator.chars().all(|c| c.is_alphabetic()) {
                    " "
                } else {
                    ""
                };
                Value {
                    pre: value.pre,
                    text: format!("({operator}{space}{})", value.text),
                }
            }
            Expression::BinaryExpression(b) => {
                let parts = vec![self.expr(&b.left), self.expr(&b.right)];
                let (pre, texts) = self.sequence(parts);
                Value {
                    pre,
                    text: format!("({} {} {})", texts[0], b.operator.as_str(), texts[1]),
                }
            }
            Expression::LogicalExpression(l) => {
                let left = self.expr(&l.left);
                let name = self.fresh("t");
                let mut pre = left.pre;
                pre.push(format!("let {name} = {};", left.text));
                let right = self.expr(&l.right);
                let test = match l.operator {
                    LogicalOperator::And => name.clone(),
                    LogicalOperator::Or => format!("!{name}"),
                    LogicalOperator::Coalesce => format!("{name} == null"),
                };
                pre.push(format!(
                    "if ({test}) {{ {} {name} = {}; }}",
                    right.pre.join(" "),
                    right.text
                ));
                Value { pre, text: name }
            }
            Expression::ConditionalExpression(c) => {
                let test = self.expr(&c.test);
                let name = self.fresh("t");
                let mut pre = test.pre;
                let consequent = self.expr(&c.consequent);
                let alternate = self.expr(&c.alternate);
                pre.push(format!(
                    "let {name}; if ({}) {{ {} {name} = {}; }} else {{ {} {name} = {}; }}",
                    test.text,
                    consequent.pre.join(" "),
                    consequent.text,
                    alternate.pre.join(" "),
                    alternate.text
                ));
                Value { pre, text: name }
            }
            Expression::SequenceExpression(s) => {
                let mut pre = Vec::new();
                let count = s.expressions.len();
                for expression in &s.expressions[..count - 1] {
                    pre.extend(self.effect(expression));
                }
                let last = self.expr(&s.expressions[count - 1]);
                pre.extend(last.pre);
                Value {
                    pre,
                    text: last.text,
                }
            }
            Expression::CallExpression(_)
            | Expression::NewExpression(_)
            | Expression::AwaitExpression(_) => {
                let value = self.expr_top(e);
                self.bind(value)
            }
            Expression::FunctionExpression(f) => {
                let text = self.function(f);
                let name = self.fresh("fn");
                // A named function expression's name is bound inside it alone: in a block.
                let statement = match &f.id {
                    Some(id) => format!(
                        "let {name}; {{ let {inner} = {text}; {name} = {inner}; }}",
                        inner = id.name
                    ),
                    None => format!("const {name} = {text};"),
                };
                Value {
                    pre: vec![statement],
                    text: name,
                }
            }
            Expression::ArrowFunctionExpression(f) => {
                let text = self.arrow(f);
                let name = self.fresh("fn");
                Value {
                    pre: vec![format!("const {name} = {text};")],
                    text: name,
                }
            }
            Expression::ClassExpression(c) => {
                let name = match &c.id {
                    Some(id) => id.name.to_string(),
                    None => self.fresh("class"),
                };
                let statements = self.class(c, &name);
                let value = self.fresh("t");
                Value {
                    pre: vec![format!(
                        "let {value}; {{ {} {value} = {name}; }}",
                        statements.join(" ")
                    )],
                    text: value,
                }
            }
            Expression::AssignmentExpression(a) => self.assignment(a, true),
            Expression::UpdateExpression(u) => self.update(u, true),
            Expression::ChainExpression(c) => self.chain(c),
            Expression::StaticMemberExpression(m) => {
                if matches!(m.object, Expression::Super(_)) {
                    let object = self.super_object();
                    return Value::pure(format!("{object}.{}", m.property.name));
                }
                let object = self.expr(&m.object);
                Value {
                    pre: object.pre,
                    text: format!("{}.{}", receiver(&object.text), m.property.name),
                }
            }
            Expression::ComputedMemberExpression(m) => {
                let parts = vec![self.expr(&m.object), self.expr(&m.expression)];
                let (pre, texts) = self.sequence(parts);
                Value {
                    pre,
                    text: format!("{}[{}]", receiver(&texts[0]), texts[1]),
                }
            }
            // Sites and forms the subset does not have: as written.
            other => Value::pure(format!("({})", self.source(other.span()))),
        }
    }

    fn template(&mut self, t: &TemplateLiteral<'_>) -> Value {
        // `${x}` converts with ToString, as `String(x)` does (`+` would call `valueOf` first).
        let mut parts = Vec::new();
        for (i, quasi) in t.quasis.iter().enumerate() {
            let cooked = quasi.value.cooked.as_deref().unwrap_or_default();
            if !cooked.is_empty() || i == 0 {
                parts.push(Value::pure(
                    serde_json::to_string(cooked).expect("a string serialises"),
                ));
            }
            if let Some(expression) = t.expressions.get(i) {
                let value = self.expr(expression);
                let converted = Value {
                    pre: value.pre,
                    text: format!("String({})", value.text),
                };
                parts.push(self.bind(converted));
            }
        }
        let (pre, texts) = self.sequence(parts);
        Value {
            pre,
            text: format!("({})", texts.join(" + ")),
        }
    }

    fn object(&mut self, object: &ObjectExpression<'_>) -> Value {
        let mut parts = Vec::new();
        let mut shapes = Vec::new();
        for property in &object.properties {
            match property {
                ObjectPropertyKind::SpreadProperty(spread) => {
                    let mut value = self.expr(&spread.argument);
                    value.text = format!("...{}", value.text);
                    parts.push(value);
                    shapes.push(Shape::Whole);
                }
                ObjectPropertyKind::ObjectProperty(p) => {
                    if p.kind != PropertyKind::Init {
                        // A getter or setter: a site, kept as written.
                        parts.push(Value::pure(self.source(p.span).to_string()));
                        shapes.push(Shape::Whole);
                        continue;
                    }
                    let key = match &p.key {
                        PropertyKey::StaticIdentifier(id) if !p.computed => {
                            Some(id.name.to_string())
                        }
                        key if !p.computed => Some(self.source(key.span()).to_string()),
                        key => {
                            let value = match key.as_expression() {
                                Some(expression) => self.expr(expression),
                                None => Value::pure(self.source(key.span()).to_string()),
                            };
                            parts.push(value);
                            None
                        }
                    };
                    let value = if p.method {
                        match &p.value {
                            Expression::FunctionExpression(f) => {
                                let text = self.function(f);
                                let name = self.fresh("fn");
                                Value {
                                    pre: vec![format!("const {name} = {text};")],
                                    text: name,
                                }
                            }
                            other => self.expr(other),
                        }
                    } else {
                        self.expr(&p.value)
                    };
                    parts.push(value);
                    shapes.push(match key {
                        Some(key) => Shape::Keyed(key),
                        None => Shape::Computed,
                    });
                }
            }
        }
        let (pre, texts) = self.sequence(parts);
        let mut fields = Vec::new();
        let mut at = 0;
        for shape in shapes {
            match shape {
                Shape::Whole => {
                    fields.push(texts[at].clone());
                    at += 1;
                }
                Shape::Keyed(key) => {
                    fields.push(format!("{key}: {}", texts[at]));
                    at += 1;
                }
                Shape::Computed => {
                    fields.push(format!("[{}]: {}", texts[at], texts[at + 1]));
                    at += 2;
                }
            }
        }
        Value {
            pre,
            text: format!("({{ {} }})", fields.join(", ")),
        }
    }

    /// An expression evaluated for its effects only: statements.
    pub fn effect(&mut self, e: &Expression<'_>) -> Vec<String> {
        match e {
            Expression::ParenthesizedExpression(p) => self.effect(&p.expression),
            Expression::AssignmentExpression(a) => self.assignment(a, false).pre,
            Expression::UpdateExpression(u) => self.update(u, false).pre,
            Expression::SequenceExpression(s) => {
                s.expressions.iter().flat_map(|e| self.effect(e)).collect()
            }
            Expression::LogicalExpression(l) => {
                let left = self.expr(&l.left);
                let mut pre = left.pre;
                let right = self.effect(&l.right);
                let test = match l.operator {
                    LogicalOperator::And => left.text,
                    LogicalOperator::Or => format!("!{}", left.text),
                    LogicalOperator::Coalesce => {
                        let name = self.fresh("t");
                        pre.push(format!("const {name} = {};", left.text));
                        format!("{name} == null")
                    }
                };
                pre.push(format!("if ({test}) {{ {} }}", right.join(" ")));
                pre
            }
            Expression::ConditionalExpression(c) => {
                let test = self.expr(&c.test);
                let mut pre = test.pre;
                let consequent = self.effect(&c.consequent);
                let alternate = self.effect(&c.alternate);
                pre.push(format!(
                    "if ({}) {{ {} }} else {{ {} }}",
                    test.text,
                    consequent.join(" "),
                    alternate.join(" ")
                ));
                pre
            }
            Expression::CallExpression(call) if !call.optional => {
                if matches!(call.callee, Expression::Super(_)) {
                    return self.call(call).pre;
                }
                let value = self.call(call);
                let mut pre = value.pre;
                pre.push(format!("{};", value.text));
                pre
            }
            Expression::NewExpression(_) | Expression::AwaitExpression(_) => {
                let value = self.expr_top(e);
                let mut pre = value.pre;
                pre.push(format!("{};", value.text));
                pre
            }
            other => {
                let value = self.expr(other);
                let mut pre = value.pre;
                if !stable(&value.text, &self.prefix) {
                    pre.push(format!("{};", value.text));
                }
                pre
            }
        }
    }
}

/// An object's text before `.` or `[`: a number literal in parentheses (`1.q` would not parse).
pub(super) fn receiver(text: &str) -> String {
    if text.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
        format!("({text})")
    } else {
        text.to_string()
    }
}

/// How an object literal's member is printed from its lowered parts.
enum Shape {
    /// One part, printed as it is (a spread, an accessor).
    Whole,
    /// A written key and one part, the value.
    Keyed(String),
    /// Two parts: the computed key and the value.
    Computed,
}

pub(super) fn is_name(text: &str) -> bool {
    text.chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$')
        && !text.chars().next().is_some_and(|c| c.is_ascii_digit())
}
