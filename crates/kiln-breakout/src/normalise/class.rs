//! Classes as constructor functions and prototypes.
//!
//! `class A extends B { f = 1; constructor(x) { super(x); … } m() { super.m(); } static s() {} }`
//! becomes
//!
//! ```text
//! const base = B;
//! let A = function (x) { let self = this; self = super(base, self, [x]); self.f = 1; …; return self; };
//! Object.setPrototypeOf(A.prototype, base.prototype); Object.setPrototypeOf(A, base);
//! A.prototype.m = function () { base.prototype.m.call(this); };
//! A.s = function () {};
//! ```
//!
//! where `super` is a function appended to the file (`lower.rs`) that runs a normalised base on the instance and
//! constructs a built-in base (`Error`) with `new`. Differences from JavaScript, in
//! `docs/breakout.md`: methods are enumerable, and a class can be called without `new`.

use oxc_ast::ast::*;
use oxc_span::GetSpan;

use super::expr::Value;
use super::lower::{FunctionContext, Lowerer};

impl Lowerer<'_> {
    /// The statements that define the class as `name` (a `let`).
    pub fn class(&mut self, class: &Class<'_>, name: &str) -> Vec<String> {
        if !lowerable(class) {
            // A site (an accessor, a static block, a private member): kept as written, so the
            // program still behaves as before; the instrumenter leaves it untraced.
            let text = self.source(class.span);
            return vec![format!("let {name} = {text};")];
        }
        let mut out = Vec::new();
        let base = match &class.heritage {
            Some(heritage) => {
                let value = self.expr(&heritage.expression);
                out.extend(value.pre);
                let base = self.fresh("base");
                out.push(format!("const {base} = {};", value.text));
                Some(base)
            }
            None => None,
        };
        let mut constructor = None;
        let mut instance_fields = Vec::new();
        let mut members = Vec::new();
        for element in &class.body.body {
            match element {
                ClassElement::MethodDefinition(m)
                    if m.kind == MethodDefinitionKind::Constructor =>
                {
                    constructor = Some(&**m);
                }
                ClassElement::PropertyDefinition(p) if !p.r#static => instance_fields.push(&**p),
                other => members.push(other),
            }
        }
        // The constructor, with the fields set at its start (or after `super(…)`).
        let derived = base.is_some();
        let self_name = if derived {
            Some(self.fresh("self"))
        } else {
            None
        };
        let context = FunctionContext {
            self_name: self_name.clone(),
            super_object: base.as_ref().map(|b| format!("{b}.prototype")),
            ..FunctionContext::default()
        };
        self.functions.push(context);
        let field_statements = self.fields(&instance_fields);
        self.functions.pop();
        let (params, body) = match constructor {
            Some(m) => {
                let params = m
                    .value
                    .params
                    .items
                    .iter()
                    .filter_map(|p| match &p.pattern {
                        BindingPattern::BindingIdentifier(id) => Some(id.name.to_string()),
                        _ => None,
                    })
                    .collect::<Vec<_>>();
                let mut list = params.clone();
                if let Some(rest) = &m.value.params.rest {
                    if let BindingPattern::BindingIdentifier(id) = &rest.rest.argument {
                        list.push(format!("...{}", id.name));
                    }
                }
                let context = FunctionContext {
                    self_name: self_name.clone(),
                    super_object: base.as_ref().map(|b| format!("{b}.prototype")),
                    super_call: base.clone().map(|b| (b, field_statements.clone())),
                    ..FunctionContext::default()
                };
                let statements = m
                    .value
                    .body
                    .as_ref()
                    .map(|b| (&b.directives[..], &b.statements[..]));
                let body = match statements {
                    Some((directives, statements)) => {
                        let body = self.function_body(directives, statements, &params, context);
                        if derived {
                            body
                        } else {
                            // A base class sets its fields before the constructor's body.
                            format!("{{ {} {}", field_statements.join(" "), &body[1..])
                        }
                    }
                    None => "{}".to_string(),
                };
                (list.join(", "), body)
            }
            None => match (&base, &self_name) {
                (Some(base), Some(self_name)) => {
                    self.needs_super = true;
                    (
                        "...args".to_string(),
                        format!(
                            "{{ let {self_name} = this; {self_name} = {p}super({base}, {self_name}, args); {} return {self_name}; }}",
                            field_statements.join(" "),
                            p = self.prefix
                        ),
                    )
                }
                _ => (
                    String::new(),
                    format!("{{ {} }}", field_statements.join(" ")),
                ),
            },
        };
        out.push(format!("let {name} = function ({params}) {body};"));
        if let Some(base) = &base {
            out.push(format!(
                "Object.setPrototypeOf({name}.prototype, {base}.prototype);"
            ));
            out.push(format!("Object.setPrototypeOf({name}, {base});"));
        }
        for member in members {
            match member {
                ClassElement::MethodDefinition(m) if m.kind == MethodDefinitionKind::Method => {
                    let owner = if m.r#static {
                        name.to_string()
                    } else {
                        format!("{name}.prototype")
                    };
                    let key = self.member_key(&m.key, m.computed, &mut out);
                    let super_object = base.as_ref().map(|b| {
                        if m.r#static {
                            b.clone()
                        } else {
                            format!("{b}.prototype")
                        }
                    });
                    let text = self.method(&m.value, super_object);
                    out.push(format!("{owner}{key} = {text};"));
                }
                ClassElement::PropertyDefinition(p) => {
                    // A static field, in order, with `this` the class.
                    let key = self.member_key(&p.key, p.computed, &mut out);
                    let value = match &p.value {
                        Some(value) => {
                            let value = self.expr_top(value);
                            out.extend(value.pre);
                            value.text
                        }
                        None => "undefined".to_string(),
                    };
                    out.push(format!("{name}{key} = {value};"));
                }
                // Accessors, static blocks, private members: sites, left as written.
                other => out.push(format!(
                    "/* {} */",
                    self.source(other.span()).replace("*/", "* /")
                )),
            }
        }
        out
    }

    /// `.name` or `[key]` for a member's key, a computed key evaluated into `out` first.
    fn member_key(
        &mut self,
        key: &PropertyKey<'_>,
        computed: bool,
        out: &mut Vec<String>,
    ) -> String {
        match key {
            PropertyKey::StaticIdentifier(id) if !computed => format!(".{}", id.name),
            key if !computed => format!("[{}]", self.source(key.span())),
            key => match key.as_expression() {
                Some(expression) => {
                    let value = self.expr(expression);
                    out.extend(value.pre);
                    format!("[{}]", value.text)
                }
                None => format!("[{}]", self.source(key.span())),
            },
        }
    }

    fn method(&mut self, f: &Function<'_>, super_object: Option<String>) -> String {
        let mut params = Vec::new();
        for p in &f.params.items {
            if let BindingPattern::BindingIdentifier(id) = &p.pattern {
                params.push(id.name.to_string());
            }
        }
        let mut list = params.clone();
        if let Some(rest) = &f.params.rest {
            if let BindingPattern::BindingIdentifier(id) = &rest.rest.argument {
                list.push(format!("...{}", id.name));
            }
        }
        let context = FunctionContext {
            super_object,
            ..FunctionContext::default()
        };
        let body = match &f.body {
            Some(b) => self.function_body(&b.directives, &b.statements, &params, context),
            None => "{}".to_string(),
        };
        let asynchronous = if f.r#async { "async " } else { "" };
        format!("{asynchronous}function ({}) {body}", list.join(", "))
    }

    /// `this.f = …;` for each instance field, in order.
    fn fields(&mut self, fields: &[&PropertyDefinition<'_>]) -> Vec<String> {
        let mut out = Vec::new();
        for field in fields {
            let key = self.member_key(&field.key, field.computed, &mut out);
            let value = match &field.value {
                Some(value) => {
                    let value = self.expr_top(value);
                    out.extend(value.pre);
                    value.text
                }
                None => "undefined".to_string(),
            };
            let this = self.this_text();
            out.push(format!("{this}{key} = {value};"));
        }
        out
    }

    /// What `super.x` reads from where an expression is printed.
    pub fn super_object(&mut self) -> String {
        self.functions
            .iter()
            .rev()
            .find_map(|f| f.super_object.clone())
            .unwrap_or_else(|| "Object.prototype".to_string())
    }

    /// `super(…)` in a derived constructor: the instance made by the base, then the fields.
    pub fn super_call(&mut self, arguments: &[Argument<'_>]) -> Value {
        let Some(at) = self.functions.iter().rposition(|f| f.super_call.is_some()) else {
            return Value {
                pre: Vec::new(),
                text: "undefined".to_string(),
            };
        };
        let (base, fields) = self.functions[at].super_call.clone().expect("found above");
        let self_name = self.functions[at].self_name.clone().unwrap_or_default();
        let parts = self.arguments(arguments);
        let (mut pre, texts) = self.sequence(parts);
        self.needs_super = true;
        pre.push(format!(
            "{self_name} = {}super({base}, {self_name}, [{}]);",
            self.prefix,
            texts.join(", ")
        ));
        pre.extend(fields);
        Value {
            pre,
            text: self_name,
        }
    }
}

/// Whether every member of a class has a prototype form here: a constructor, methods and
/// fields, static or not, with public keys.
fn lowerable(class: &Class<'_>) -> bool {
    class.decorators.is_empty()
        && class.body.body.iter().all(|element| match element {
            ClassElement::MethodDefinition(m) => {
                matches!(
                    m.kind,
                    MethodDefinitionKind::Method | MethodDefinitionKind::Constructor
                ) && !matches!(m.key, PropertyKey::PrivateIdentifier(_))
                    && !m.value.generator
                    && m.decorators.is_empty()
            }
            ClassElement::PropertyDefinition(p) => {
                !matches!(p.key, PropertyKey::PrivateIdentifier(_)) && p.decorators.is_empty()
            }
            _ => false,
        })
}
