//! The instrumenter proper (the paper's Fig. 5): calls into the tracing runtime inserted
//! around each statement of a normal-form file. The file's text is kept; the calls are
//! insertions, so what runs is the normalised program and, beside it, the tracing.
//!
//! The calls, on the runtime object `T` (`runtimes/nodejs/breakout.js`); `Q[i]` is the quoted
//! statement, built here:
//!
//! | statement | inserted |
//! |---|---|
//! | `let x = e;`, `x = e;` | after: `T.l(Q[i], x)` (the value, for its type) |
//! | `let x = f(a…);` (also `new`, and a call as a statement) | before: `T.c(Q[i], f)`; after: `T.d(x)` |
//! | `let x = await e;` | before: `k = T.s(Q[i])` (suspend); after: `T.r(k, x)` (resume) |
//! | `let f = function …` | after: `T.f(Q[i], f)` (a closure: its function and captured names) |
//! | `if (e) {A} else {B}` | `k = T.mk()`; `T.t(Q[i])` opening A, `T.e(Q[i])` opening B (added if missing); after: `T.x(k)` |
//! | `while (e) {B}` | before: `k = T.mk(); T.w(Q[i])`; `T.i()` opening each iteration; after: `T.x(k)` |
//! | `L: s`, `{…}` | before: `k = T.mk(); T.lb(Q[i])` (or `T.bk`); after: `T.x(k)` |
//! | `break L;`, `return e;`, `throw e;` | before: `T.b(Q[i])`, `T.rt(Q[i], e)`, `T.th(Q[i], e)` |
//! | `try {A} catch (x) {B}` | before: `k = T.ty(Q[i])`; `T.ca(k)` opening B; after: `T.x(k)` |
//! | a function's body | `F = T.en(Q[i]); try { … T.rt(implicit) } finally { T.lv(F) }` |
//! | a ☠ site's mark | replaced by `T.u(Q[i])` |
//!
//! `T.mk()` is the depth of the trace context; `T.x(k)` pops back to it, so a `break` needs no
//! `popTo` of its own: the code it jumps to pops.

use oxc_ast::ast::*;
use oxc_semantic::{ScopeId, Scoping};
use oxc_span::{GetSpan, Span};
use serde_json::{json, Value};

use super::quote::Names;
use crate::position::LineIndex;

/// A site's reason and source position, by its mark's number.
pub(super) struct SiteInfo {
    pub reason: String,
    pub at: String,
}

#[derive(Debug)]
struct Edit {
    at: u32,
    /// 0 closes (innermost first), 1 opens (outermost first).
    rank: u8,
    seq: u32,
    /// Replaces `at..end` when set.
    end: Option<u32>,
    text: String,
}

pub(super) struct Emitter<'s> {
    pub(super) src: &'s str,
    pub(super) names: Names<'s>,
    index: LineIndex<'s>,
    pub(super) file: &'s str,
    /// Runtime object, quoted table and fresh names share this prefix.
    pub(super) prefix: String,
    marker: Option<&'s str>,
    sites: &'s [SiteInfo],
    pub table: Vec<Value>,
    edits: Vec<Edit>,
    seq: u32,
    pub(super) functions: u32,
    /// The scope of the function whose body is being instrumented.
    pub(super) scope: Vec<ScopeId>,
}

impl<'s> Emitter<'s> {
    pub fn new(
        src: &'s str,
        scoping: &'s Scoping,
        file: &'s str,
        prefix: String,
        marker: Option<&'s str>,
        sites: &'s [SiteInfo],
    ) -> Self {
        Emitter {
            src,
            names: Names { scoping },
            index: LineIndex::new(src),
            file,
            prefix,
            marker,
            sites,
            table: Vec::new(),
            edits: Vec::new(),
            seq: 0,
            functions: 0,
            scope: Vec::new(),
        }
    }

    pub(super) fn q(&mut self, value: Value) -> String {
        self.table.push(value);
        format!("{}Q[{}]", self.prefix, self.table.len() - 1)
    }

    pub(super) fn t(&self) -> String {
        format!("{}T", self.prefix)
    }

    fn fresh_mark(&mut self) -> String {
        self.seq += 1;
        format!("{}k{}", self.prefix, self.seq)
    }

    pub(super) fn open(&mut self, at: u32, text: String) {
        self.seq += 1;
        self.edits.push(Edit {
            at,
            rank: 1,
            seq: self.seq,
            end: None,
            text,
        });
    }

    /// A number taken when a construct starts: its closing insertions sort by it, so at one
    /// offset an inner construct's close comes before an outer one's.
    pub(super) fn reserve(&mut self) -> u32 {
        self.seq += 1;
        self.seq
    }

    pub(super) fn close(&mut self, order: u32, at: u32, text: String) {
        self.edits.push(Edit {
            at,
            rank: 0,
            seq: order,
            end: None,
            text,
        });
    }

    fn replace(&mut self, span: Span, text: String) {
        self.seq += 1;
        self.edits.push(Edit {
            at: span.start,
            rank: 1,
            seq: self.seq,
            end: Some(span.end),
            text,
        });
    }

    /// The normal form's position of a node (not the source's: only ☠ sites carry those).
    fn position(&self, span: Span) -> String {
        let (line, col) = self.index.line_col(span.start);
        format!("{}:{line}:{col}", self.file)
    }

    pub(super) fn scope(&self) -> ScopeId {
        *self.scope.last().expect("inside the file's scope")
    }

    fn quote(&self, e: &Expression<'_>) -> Option<Value> {
        self.names.quote(e, self.scope(), self.src)
    }

    /// The instrumented text, with the prologue and epilogue given.
    pub fn finish(mut self, prologue_at: u32, prologue: String, epilogue: String) -> String {
        self.edits.push(Edit {
            at: prologue_at,
            rank: 1,
            seq: 0,
            end: None,
            text: prologue,
        });
        self.edits.push(Edit {
            at: self.src.len() as u32,
            rank: 0,
            seq: 0,
            end: None,
            text: epilogue,
        });
        self.edits.sort_by_key(|e| {
            let order = if e.rank == 0 { u32::MAX - e.seq } else { e.seq };
            (e.at, e.rank, order)
        });
        let mut out = String::with_capacity(self.src.len() * 2);
        let mut pos = 0u32;
        for edit in &self.edits {
            if edit.at < pos {
                continue;
            }
            out.push_str(&self.src[pos as usize..edit.at as usize]);
            out.push_str(&edit.text);
            out.push(' ');
            pos = edit.end.unwrap_or(edit.at);
        }
        out.push_str(&self.src[pos as usize..]);
        out
    }

    /// The instrumentation of a program's statements (the file's top level).
    pub fn program(&mut self, program: &Program<'_>) {
        let scope = program.scope_id.get().expect("scopes were built");
        self.scope.push(scope);
        self.statements(&program.body);
        self.scope.pop();
    }

    pub(super) fn statements(&mut self, body: &[Statement<'_>]) {
        for statement in body {
            self.statement(statement);
        }
    }

    /// A ☠ before `span`: the construct has no form in the trace language.
    fn unsupported_here(&mut self, span: Span, what: &str) {
        let at = self.position(span);
        let q = self.q(json!({
            "kind": "unsupported",
            "reason": format!("{what} is not in the trace language"),
            "at": at,
        }));
        let t = self.t();
        self.open(span.start, format!("{t}.u({q});"));
    }

    fn statement(&mut self, statement: &Statement<'_>) {
        let t = self.t();
        let order = self.reserve();
        match statement {
            Statement::VariableDeclaration(d) => self.declaration(d, statement.span()),
            Statement::ExportDeclaration(e) => {
                if let Declaration::VariableDeclaration(d) = &e.declaration {
                    self.declaration(d, statement.span());
                }
            }
            Statement::ExpressionStatement(s) => self.expression_statement(s),
            Statement::IfStatement(s) => {
                let Some(test) = self.quote(&s.test) else {
                    return self.unsupported_here(s.span, "this condition");
                };
                let q = self.q(json!({"kind": "if", "test": test}));
                let k = self.fresh_mark();
                self.open(s.span.start, format!("const {k} = {t}.mk();"));
                self.branch(&s.consequent, format!("{t}.t({q});"));
                match &s.alternate {
                    Some(alternate) => {
                        self.branch(alternate, format!("{t}.e({q});"));
                        self.close(order, s.span.end, format!("{t}.x({k});"));
                    }
                    // The false branch is recorded too: that it ran, and ran nothing.
                    None => self.close(
                        order,
                        s.span.end,
                        format!("else {{ {t}.e({q}); }} {t}.x({k});"),
                    ),
                }
            }
            Statement::WhileStatement(s) => {
                let Some(test) = self.quote(&s.test) else {
                    return self.unsupported_here(s.span, "this loop condition");
                };
                let q = self.q(json!({"kind": "while", "test": test}));
                let k = self.fresh_mark();
                self.open(s.span.start, format!("const {k} = {t}.mk(); {t}.w({q});"));
                self.branch(&s.body, format!("{t}.i();"));
                self.close(order, s.span.end, format!("{t}.x({k});"));
            }
            Statement::LabeledStatement(s) => {
                let q = self.q(json!({"kind": "label", "label": s.label.name.as_str()}));
                let k = self.fresh_mark();
                self.open(s.span.start, format!("const {k} = {t}.mk(); {t}.lb({q});"));
                let body = s.body.span();
                self.open(body.start, "{".to_string());
                self.statement(&s.body);
                self.close(order, body.end, format!("}} {t}.x({k});"));
            }
            Statement::BlockStatement(b) => {
                let q = self.q(json!({"kind": "block"}));
                let k = self.fresh_mark();
                self.open(b.span.start, format!("const {k} = {t}.mk(); {t}.bk({q});"));
                self.statements(&b.body);
                self.close(order, b.span.end, format!("{t}.x({k});"));
            }
            Statement::BreakStatement(s) => {
                let label = s.label.as_ref().map(|l| l.name.as_str());
                let q = self.q(json!({"kind": "break", "label": label}));
                self.open(s.span.start, format!("{t}.b({q});"));
            }
            Statement::ReturnStatement(s) => {
                let (value, text) = match &s.argument {
                    None => (
                        json!({"kind": "global", "name": "undefined"}),
                        String::new(),
                    ),
                    Some(argument) => match self.quote(argument) {
                        // The value again for its type, when reading it has no effect.
                        Some(value) if simple(argument) => {
                            (value, format!(", {}", self.source(argument.span())))
                        }
                        Some(value) => (value, String::new()),
                        None => return self.unsupported_here(s.span, "this return value"),
                    },
                };
                let q = self.q(json!({"kind": "return", "value": value}));
                self.open(s.span.start, format!("{t}.rt({q}{text});"));
            }
            Statement::ThrowStatement(s) => {
                let Some(value) = self.quote(&s.argument) else {
                    return self.unsupported_here(s.span, "this thrown value");
                };
                let q = self.q(json!({"kind": "throw", "value": value}));
                self.open(s.span.start, format!("{t}.th({q});"));
            }
            Statement::TryStatement(s) => {
                let param =
                    s.handler
                        .as_ref()
                        .and_then(|h| h.param.as_ref())
                        .and_then(|p| match &p.pattern {
                            BindingPattern::BindingIdentifier(id) => Some(id.name.to_string()),
                            _ => None,
                        });
                let q = self.q(json!({"kind": "try", "param": param}));
                let k = self.fresh_mark();
                self.open(s.span.start, format!("const {k} = {t}.ty({q});"));
                self.statements(&s.block.body);
                if let Some(handler) = &s.handler {
                    self.open(handler.body.span.start + 1, format!("{t}.ca({k});"));
                    self.statements(&handler.body.body);
                }
                self.close(order, s.span.end, format!("{t}.x({k});"));
            }
            Statement::ImportDeclaration(import) => {
                // An import binds names before the body runs: each is a `let` of the module's
                // export, where the import is written.
                let source = import.source.value.as_str();
                for specifier in import.specifiers.iter().flatten() {
                    let (local, imported) = match specifier {
                        ImportDeclarationSpecifier::ImportSpecifier(s) => {
                            (s.local.name.as_str(), s.imported.name().to_string())
                        }
                        ImportDeclarationSpecifier::ImportDefaultSpecifier(s) => {
                            (s.local.name.as_str(), "default".to_string())
                        }
                        ImportDeclarationSpecifier::ImportNamespaceSpecifier(s) => {
                            (s.local.name.as_str(), "*".to_string())
                        }
                    };
                    let q = self.q(json!({
                        "kind": "let",
                        "bind": {"let": local},
                        "value": {"kind": "import", "source": source, "name": imported},
                    }));
                    self.close(order, import.span.end, format!("{t}.l({q}, {local});"));
                }
            }
            // An export of a module (the normal form exports names, each once the name is
            // bound): recorded as the module's export taking the name's value there, which the
            // compiler turns into a write of the module's namespace. It changes nothing Node runs.
            Statement::ExportNamedDeclaration(e) => {
                for specifier in &e.specifiers {
                    let ModuleExportName::IdentifierReference(local) = &specifier.local else {
                        return self.unsupported_here(e.span, "this export");
                    };
                    self.export(order, e.span, local, specifier.exported.name().as_str());
                }
            }
            Statement::ExportDefaultDeclaration(e) => match e.declaration.as_expression() {
                Some(Expression::Identifier(local)) => self.export(order, e.span, local, "default"),
                _ => self.unsupported_here(e.span, "this default export"),
            },
            Statement::ExportFromDeclaration(e) => self.unsupported_here(e.span, "a re-export"),
            Statement::ExportAllDeclaration(e) => self.unsupported_here(e.span, "a re-export"),
            // The sites' statements (their mark runs first).
            _ => {}
        }
    }

    pub(super) fn source(&self, span: Span) -> &'s str {
        &self.src[span.start as usize..span.end as usize]
    }

    /// A branch or loop body (a block in the normal form), opened by `opening`.
    fn branch(&mut self, body: &Statement<'_>, opening: String) {
        match body {
            Statement::BlockStatement(block) => {
                self.open(block.span.start + 1, opening);
                self.statements(&block.body);
            }
            other => {
                let order = self.reserve();
                self.open(other.span().start, format!("{{ {opening}"));
                self.statement(other);
                self.close(order, other.span().end, "}".to_string());
            }
        }
    }

    /// `export { local as exported }`: a `let` of the module's export `exported` (the global
    /// named `export`, a reserved word no program can name).
    fn export(&mut self, order: u32, span: Span, local: &IdentifierReference<'_>, exported: &str) {
        let value = self.names.name(local, self.scope());
        let q = self.q(json!({
            "kind": "let",
            "bind": {"set": {"kind": "get", "object": {"kind": "global", "name": "export"}, "property": exported}},
            "value": value,
        }));
        let t = self.t();
        self.close(order, span.end, format!("{t}.l({q}, {});", local.name));
    }

    fn declaration(&mut self, d: &VariableDeclaration<'_>, span: Span) {
        let order = self.reserve();
        for declarator in &d.declarations {
            let BindingPattern::BindingIdentifier(id) = &declarator.id else {
                return self.unsupported_here(span, "a destructuring declaration");
            };
            let name = id.name.to_string();
            let bind = json!({"let": name});
            match &declarator.init {
                None => {
                    let q = self.q(json!({"kind": "let", "bind": bind, "value": {"kind": "global", "name": "undefined"}}));
                    let t = self.t();
                    self.close(order, span.end, format!("{t}.l({q});"));
                }
                Some(init) => self.binding(bind, &name, init, span),
            }
        }
    }

    fn expression_statement(&mut self, s: &ExpressionStatement<'_>) {
        let t = self.t();
        let order = self.reserve();
        match &s.expression {
            Expression::AssignmentExpression(a) => {
                let Some(target) = self.names.target(&a.left, self.scope(), self.src) else {
                    return self.unsupported_here(s.span, "this assignment");
                };
                // A property is not read again (a getter would run twice).
                let read = match &a.left {
                    AssignmentTarget::AssignmentTargetIdentifier(id) => id.name.to_string(),
                    _ => "undefined".to_string(),
                };
                self.binding(json!({"set": target}), &read, &a.right, s.span);
            }
            Expression::CallExpression(call) => {
                if let (Some(marker), Expression::Identifier(callee)) = (self.marker, &call.callee)
                {
                    if callee.name == marker {
                        let number = call
                            .arguments
                            .first()
                            .and_then(|a| a.as_expression())
                            .and_then(|e| match e {
                                Expression::NumericLiteral(n) => Some(n.value as usize),
                                _ => None,
                            });
                        let site = number.and_then(|n| self.sites.get(n));
                        let (reason, at) = match site {
                            Some(site) => (site.reason.clone(), site.at.clone()),
                            None => (
                                "an unsupported construct".to_string(),
                                self.file.to_string(),
                            ),
                        };
                        let q = self.q(json!({"kind": "unsupported", "reason": reason, "at": at}));
                        self.replace(s.span, format!("{t}.u({q});"));
                        return;
                    }
                }
                self.binding(Value::Null, "undefined", &s.expression, s.span);
            }
            Expression::NewExpression(_) | Expression::AwaitExpression(_) => {
                self.binding(Value::Null, "undefined", &s.expression, s.span);
            }
            other => match self.quote(other) {
                Some(value) => {
                    let q = self.q(json!({"kind": "expression", "value": value}));
                    self.close(order, s.span.end, format!("{t}.l({q});"));
                }
                None => self.unsupported_here(s.span, "this expression"),
            },
        }
    }

    /// `bind` (a `let`, a `set` or nothing) of `value` in the statement at `span`; `read`
    /// names what holds the value afterwards.
    fn binding(&mut self, bind: Value, read: &str, value: &Expression<'_>, span: Span) {
        let t = self.t();
        let order = self.reserve();
        match value {
            Expression::ParenthesizedExpression(p) => self.binding(bind, read, &p.expression, span),
            Expression::CallExpression(call) if !call.optional => {
                self.call(bind, read, &call.callee, &call.arguments, false, span)
            }
            Expression::NewExpression(new) => {
                self.call(bind, read, &new.callee, &new.arguments, true, span)
            }
            Expression::AwaitExpression(a) => {
                let Some(argument) = self.quote(&a.argument) else {
                    return self.unsupported_here(span, "this awaited value");
                };
                let q = self.q(json!({"kind": "await", "bind": bind, "value": argument}));
                let k = self.fresh_mark();
                self.open(span.start, format!("const {k} = {t}.s({q});"));
                self.close(order, span.end, format!("{t}.r({k}, {read});"));
            }
            Expression::FunctionExpression(f) => {
                // Wrapping the function would lose the name a `let` gives it; a property's
                // function has none to lose, and is not read back (a setter could run).
                let wrap = read == "undefined";
                let wrap_order = self.reserve();
                let (id, captures) = self.function(f);
                let q = self.q(json!({
                    "kind": "let",
                    "bind": bind,
                    "value": {"kind": "closure", "fn": id, "async": f.r#async, "captures": captures},
                }));
                if wrap {
                    self.open(f.span.start, format!("{t}.fv({q}, "));
                    self.close(wrap_order, f.span.end, ")".to_string());
                } else {
                    self.close(order, span.end, format!("{t}.f({q}, {read});"));
                }
            }
            other => match self.quote(other) {
                Some(value) => {
                    let q = self.q(json!({"kind": "let", "bind": bind, "value": value}));
                    self.close(order, span.end, format!("{t}.l({q}, {read});"));
                }
                None => self.unsupported_here(span, "this value"),
            },
        }
    }

    fn call(
        &mut self,
        bind: Value,
        read: &str,
        callee: &Expression<'_>,
        arguments: &[Argument<'_>],
        new: bool,
        span: Span,
    ) {
        let t = self.t();
        let order = self.reserve();
        let Some(callee_trace) = self.quote(callee) else {
            return self.unsupported_here(span, "this callee");
        };
        let mut args = Vec::new();
        for argument in arguments {
            let quoted = match argument {
                Argument::SpreadElement(s) => self
                    .quote(&s.argument)
                    .map(|a| json!({"kind": "spread", "argument": a})),
                other => self.quote(other.to_expression()),
            };
            match quoted {
                Some(quoted) => args.push(quoted),
                None => return self.unsupported_here(span, "this argument"),
            }
        }
        let q = self.q(json!({
            "kind": "call",
            "bind": bind,
            "callee": callee_trace,
            "args": args,
            "new": new,
        }));
        // The callee, for the runtime to tell a traced function from a built-in, read without
        // evaluating anything twice: a name, or an object held by a name and a key.
        let callee_text = match callee {
            Expression::Identifier(id) => format!(", {}", id.name),
            Expression::StaticMemberExpression(m) if simple(&m.object) => {
                format!(
                    ", undefined, {}, {:?}",
                    self.source(m.object.span()),
                    m.property.name.as_str()
                )
            }
            Expression::ComputedMemberExpression(m)
                if simple(&m.object) && simple(&m.expression) =>
            {
                format!(
                    ", undefined, {}, {}",
                    self.source(m.object.span()),
                    self.source(m.expression.span())
                )
            }
            _ => String::new(),
        };
        self.open(span.start, format!("{t}.c({q}{callee_text});"));
        self.close(order, span.end, format!("{t}.d({read});"));
    }
}

/// An expression whose evaluation has no effect and reads no property: a name, `this` or a
/// literal.
fn simple(e: &Expression<'_>) -> bool {
    matches!(
        e,
        Expression::Identifier(_)
            | Expression::ThisExpression(_)
            | Expression::NumericLiteral(_)
            | Expression::StringLiteral(_)
            | Expression::BooleanLiteral(_)
            | Expression::NullLiteral(_)
    )
}
