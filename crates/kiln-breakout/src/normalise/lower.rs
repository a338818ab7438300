//! Normalisation's second pass: the file printed again, statement by statement, in the normal
//! form. This file has the statements, functions and hoisting; `expr.rs` the expressions
//! (A-normal form); `class.rs` the classes.
//!
//! A construct outside the supported subset (the support check's sites) is printed as written:
//! the instrumenter makes it ☠, so its inside is never traced.

use oxc_allocator::Allocator;
use oxc_ast::ast::*;
use oxc_ast_visit::{walk, Visit};
use oxc_semantic::ScopeFlags;
use oxc_span::{GetSpan, Span};

use super::NormaliseError;
use crate::check::SourceKind;

/// Builds a derived class's instance: the base's constructor, on `self` when the base is a
/// normalised function, else (a built-in such as `Error`, or a class left as written) by `new`
/// with the derived prototype put on the result. Lowered with the file, so it is in normal form.
const SUPER_FUNCTION: &str = "\nfunction PREFIXsuper(base, self, args) {
  const text = Function.prototype.toString.call(base);
  if (text.startsWith(\"class\") || text.includes(\"[native code]\")) {
    const made = new base(...args);
    Object.setPrototypeOf(made, Object.getPrototypeOf(self));
    return made;
  }
  const made = base.apply(self, args);
  return made !== null && (typeof made === \"object\" || typeof made === \"function\") ? made : self;
}\n";

/// The second pass over `text` (the first pass's output).
pub(super) fn lower(text: &str, kind: SourceKind) -> Result<String, NormaliseError> {
    let prefix = super::fresh_prefix(text);
    let (out, needs_super) = lower_with(text, kind, &prefix)?;
    if !needs_super {
        return Ok(out);
    }
    let with_super = format!("{text}{}", SUPER_FUNCTION.replace("PREFIX", &prefix));
    Ok(lower_with(&with_super, kind, &prefix)?.0)
}

fn lower_with(
    text: &str,
    kind: SourceKind,
    prefix: &str,
) -> Result<(String, bool), NormaliseError> {
    let allocator = Allocator::default();
    let program = super::parse(&allocator, text, kind)?;
    let mut lowerer = Lowerer::new(text, prefix);
    let mut out = String::new();
    if let Some(hashbang) = &program.hashbang {
        out.push_str(&text[hashbang.span.start as usize..hashbang.span.end as usize]);
        out.push('\n');
    }
    for directive in &program.directives {
        out.push_str(lowerer.source(directive.span));
        out.push('\n');
    }
    lowerer.functions.push(FunctionContext::default());
    let mut body = lowerer.hoisted(&program.body, &[]);
    body.extend(lowerer.statements(&program.body));
    let context = lowerer.functions.pop().expect("pushed above");
    if let Some(name) = context.this_capture {
        out.push_str(&format!("let {name} = this;\n"));
    }
    for line in body {
        out.push_str(&line);
        out.push('\n');
    }
    out.push_str(&lowerer.exports.join("\n"));
    Ok((out, lowerer.needs_super))
}

/// What `this` and `super` mean in the function being printed.
#[derive(Default)]
pub(super) struct FunctionContext {
    pub arrow: bool,
    /// A derived constructor's instance variable, which stands for `this` there.
    pub self_name: Option<String>,
    /// The variable an arrow inside uses for this function's `this`, declared at its start.
    pub this_capture: Option<String>,
    /// What `super.x` reads from: the base's prototype in a method, the base in a static one.
    pub super_object: Option<String>,
    /// A derived constructor's base and the statements that initialise its fields, emitted
    /// after `super(…)`.
    pub super_call: Option<(String, Vec<String>)>,
}

pub(super) struct Lowerer<'s> {
    pub src: &'s str,
    pub prefix: String,
    next: u32,
    pub functions: Vec<FunctionContext>,
    /// `export { f };` for hoisted declarations that were exported, printed last.
    pub exports: Vec<String>,
    pub needs_super: bool,
}

impl<'s> Lowerer<'s> {
    fn new(src: &'s str, prefix: &str) -> Self {
        Lowerer {
            src,
            prefix: prefix.to_string(),
            next: 0,
            functions: Vec::new(),
            exports: Vec::new(),
            needs_super: false,
        }
    }

    pub fn fresh(&mut self, hint: &str) -> String {
        self.next += 1;
        format!("{}{}{}", self.prefix, hint, self.next)
    }

    pub fn source(&self, span: Span) -> &'s str {
        &self.src[span.start as usize..span.end as usize]
    }

    /// The `let`s a statement list starts with: its `var`s (for a function's or the file's
    /// body) and its function declarations, as JavaScript hoists them.
    pub fn hoisted(&mut self, body: &[Statement<'_>], params: &[String]) -> Vec<String> {
        let mut out = Vec::new();
        let mut declared: Vec<String> = params.to_vec();
        let mut functions = Vec::new();
        for statement in body {
            let function = match statement {
                Statement::FunctionDeclaration(f) => Some(&**f),
                Statement::ExportNamedDeclaration(_) => None,
                Statement::ExportDeclaration(e) => match &e.declaration {
                    Declaration::FunctionDeclaration(f) => Some(&**f),
                    _ => None,
                },
                Statement::ExportDefaultDeclaration(e) => match &e.declaration {
                    ExportDefaultDeclarationKind::FunctionDeclaration(f) if f.id.is_some() => {
                        Some(&**f)
                    }
                    _ => None,
                },
                _ => None,
            };
            if let Some(function) = function {
                if let Some(id) = &function.id {
                    functions.push((id.name.to_string(), function));
                }
            }
        }
        let mut vars = VarNames::default();
        for statement in body {
            vars.visit_statement(statement);
        }
        let mut names = Vec::new();
        for name in vars.0 {
            if !declared.contains(&name) && !functions.iter().any(|(f, _)| *f == name) {
                declared.push(name.clone());
                names.push(name);
            }
        }
        if !names.is_empty() {
            out.push(format!("let {};", names.join(", ")));
        }
        for (name, function) in functions {
            if function.generator {
                // A site: printed as written where it stands (JavaScript hoists it).
                continue;
            }
            let text = self.function(function);
            out.push(format!("let {name} = {text};"));
        }
        out
    }

    /// The statements of a list, hoisted function declarations left out (see [`Self::hoisted`]).
    pub fn statements(&mut self, body: &[Statement<'_>]) -> Vec<String> {
        let mut out = Vec::new();
        for statement in body {
            out.extend(self.statement(statement));
        }
        out
    }

    /// A block, with its own function declarations hoisted to its start.
    fn block(&mut self, body: &[Statement<'_>]) -> String {
        let mut lines = self.block_hoisted(body);
        lines.extend(self.statements(body));
        format!("{{ {} }}", lines.join(" "))
    }

    fn block_hoisted(&mut self, body: &[Statement<'_>]) -> Vec<String> {
        let mut out = Vec::new();
        for statement in body {
            if let Statement::FunctionDeclaration(f) = statement {
                if let (Some(id), false) = (&f.id, f.generator) {
                    let text = self.function(f);
                    out.push(format!("let {} = {text};", id.name));
                }
            }
        }
        out
    }

    /// A statement where JavaScript takes one (a branch, a loop's body): a block.
    fn nested(&mut self, statement: &Statement<'_>) -> String {
        match statement {
            Statement::BlockStatement(block) => self.block(&block.body),
            other => {
                let lines = self.statement(other);
                format!("{{ {} }}", lines.join(" "))
            }
        }
    }

    pub fn statement(&mut self, statement: &Statement<'_>) -> Vec<String> {
        match statement {
            Statement::BlockStatement(block) => vec![self.block(&block.body)],
            Statement::EmptyStatement(_) => Vec::new(),
            Statement::ExpressionStatement(s) => self.effect(&s.expression),
            Statement::VariableDeclaration(d) => self.declaration(d),
            Statement::FunctionDeclaration(f) if !f.generator => Vec::new(),
            Statement::ClassDeclaration(c) => match &c.id {
                Some(id) => {
                    let name = id.name.to_string();
                    self.class(c, &name)
                }
                None => vec![self.source(c.span).to_string()],
            },
            Statement::IfStatement(s) => {
                let test = self.expr(&s.test);
                let mut out = test.pre;
                let consequent = self.nested(&s.consequent);
                let mut text = format!("if ({}) {consequent}", test.text);
                if let Some(alternate) = &s.alternate {
                    text.push_str(&format!(" else {}", self.nested(alternate)));
                }
                out.push(text);
                out
            }
            Statement::WhileStatement(s) => {
                let test = self.expr(&s.test);
                let body = self.nested(&s.body);
                if test.pre.is_empty() {
                    vec![format!("while ({}) {body}", test.text)]
                } else {
                    vec![format!(
                        "while (true) {{ {} if (!({})) {{ break; }} {body} }}",
                        test.pre.join(" "),
                        test.text
                    )]
                }
            }
            Statement::LabeledStatement(s) => {
                let body = self.statement(&s.body);
                match body.as_slice() {
                    [single] if single.starts_with("while") || single.starts_with('{') => {
                        vec![format!("{}: {single}", s.label.name)]
                    }
                    _ => vec![format!("{}: {{ {} }}", s.label.name, body.join(" "))],
                }
            }
            Statement::BreakStatement(_) | Statement::ContinueStatement(_) => {
                vec![self.source(statement.span()).to_string()]
            }
            Statement::ReturnStatement(s) => {
                let self_name = self.functions.last().and_then(|f| f.self_name.clone());
                match (&s.argument, self_name) {
                    (None, Some(name)) => vec![format!("return {name};")],
                    (None, None) => vec!["return;".to_string()],
                    (Some(argument), _) => {
                        let value = self.expr(argument);
                        let mut out = value.pre;
                        out.push(format!("return {};", value.text));
                        out
                    }
                }
            }
            Statement::ThrowStatement(s) => {
                let value = self.expr(&s.argument);
                let mut out = value.pre;
                out.push(format!("throw {};", value.text));
                out
            }
            Statement::TryStatement(s) => vec![self.try_statement(s)],
            Statement::ExportDeclaration(e) => self.export_declaration(&e.declaration),
            Statement::ExportDefaultDeclaration(e) => match &e.declaration {
                ExportDefaultDeclarationKind::FunctionDeclaration(f) if f.id.is_some() => {
                    let name =
                        f.id.as_ref()
                            .map(|id| id.name.to_string())
                            .unwrap_or_default();
                    self.exports.push(format!("export default {name};"));
                    Vec::new()
                }
                ExportDefaultDeclarationKind::FunctionDeclaration(f) => {
                    let name = self.fresh("default");
                    let text = self.function(f);
                    vec![
                        format!("const {name} = {text};"),
                        format!("export default {name};"),
                    ]
                }
                ExportDefaultDeclarationKind::ClassDeclaration(c) => {
                    let name = match &c.id {
                        Some(id) => id.name.to_string(),
                        None => self.fresh("default"),
                    };
                    let mut out = self.class(c, &name);
                    out.push(format!("export default {name};"));
                    out
                }
                other => match other.as_expression() {
                    Some(expression) => {
                        let name = self.fresh("default");
                        let value = self.expr_top(expression);
                        let mut out = value.pre;
                        out.push(format!("const {name} = {};", value.text));
                        out.push(format!("export default {name};"));
                        out
                    }
                    None => vec![self.source(statement.span()).to_string()],
                },
            },
            // Imports, re-exports, `export { … }`, and the sites (`with`, `for…in`, …).
            other => vec![self.source(other.span()).to_string()],
        }
    }

    fn export_declaration(&mut self, declaration: &Declaration<'_>) -> Vec<String> {
        match declaration {
            Declaration::VariableDeclaration(d) => {
                let mut names = Vec::new();
                for declarator in &d.declarations {
                    super::structure_names(&declarator.id, &mut names);
                }
                let mut out = self.declaration(d);
                if d.kind == VariableDeclarationKind::Var {
                    self.exports
                        .push(format!("export {{ {} }};", names.join(", ")));
                } else {
                    out.push(format!("export {{ {} }};", names.join(", ")));
                }
                out
            }
            Declaration::FunctionDeclaration(f) => {
                if let Some(id) = &f.id {
                    self.exports.push(format!("export {{ {} }};", id.name));
                }
                Vec::new()
            }
            Declaration::ClassDeclaration(c) => match &c.id {
                Some(id) => {
                    let name = id.name.to_string();
                    let mut out = self.class(c, &name);
                    out.push(format!("export {{ {name} }};"));
                    out
                }
                None => vec![self.source(c.span).to_string()],
            },
            other => vec![self.source(other.span()).to_string()],
        }
    }

    fn declaration(&mut self, declaration: &VariableDeclaration<'_>) -> Vec<String> {
        let mut out = Vec::new();
        for declarator in &declaration.declarations {
            let BindingPattern::BindingIdentifier(id) = &declarator.id else {
                // The first pass expanded every pattern that has a value.
                out.push(format!("{};", self.source(declaration.span)));
                continue;
            };
            match (&declarator.init, declaration.kind) {
                (None, VariableDeclarationKind::Var) => {}
                (None, _) => out.push(format!("let {};", id.name)),
                (Some(init), kind) => {
                    let value = self.expr_top(init);
                    out.extend(value.pre);
                    let keyword = match kind {
                        VariableDeclarationKind::Var => "",
                        VariableDeclarationKind::Const => "const ",
                        _ => "let ",
                    };
                    out.push(format!("{keyword}{} = {};", id.name, value.text));
                }
            }
        }
        out
    }

    fn try_statement(&mut self, s: &TryStatement<'_>) -> String {
        let mut text = format!("try {}", self.block(&s.block.body));
        if let Some(handler) = &s.handler {
            let mut lines = Vec::new();
            let param = match &handler.param {
                None => String::new(),
                Some(p) => match &p.pattern {
                    BindingPattern::BindingIdentifier(id) => format!(" ({})", id.name),
                    pattern => {
                        let name = self.fresh("caught");
                        lines.extend(self.bind_pattern(pattern, &name));
                        format!(" ({name})")
                    }
                },
            };
            lines.extend(self.block_hoisted(&handler.body.body));
            lines.extend(self.statements(&handler.body.body));
            text.push_str(&format!(" catch{param} {{ {} }}", lines.join(" ")));
        }
        if let Some(finalizer) = &s.finalizer {
            text.push_str(&format!(" finally {}", self.block(&finalizer.body)));
        }
        text
    }

    /// `let`s binding the names of a pattern from the variable `from` (a catch parameter).
    fn bind_pattern(&mut self, pattern: &BindingPattern<'_>, from: &str) -> Vec<String> {
        let mut parts = Vec::new();
        self.pattern_parts(pattern, from.to_string(), &mut parts);
        parts
    }

    fn pattern_parts(
        &mut self,
        pattern: &BindingPattern<'_>,
        value: String,
        out: &mut Vec<String>,
    ) {
        match pattern {
            BindingPattern::BindingIdentifier(id) => {
                out.push(format!("let {} = {value};", id.name))
            }
            BindingPattern::AssignmentPattern(assign) => {
                let name = self.fresh("v");
                out.push(format!("let {name} = {value};"));
                let default = self.expr(&assign.right);
                out.push(format!(
                    "if ({name} === undefined) {{ {} {name} = {}; }}",
                    default.pre.join(" "),
                    default.text
                ));
                self.pattern_parts(&assign.left, name, out);
            }
            BindingPattern::ObjectPattern(object) => {
                let name = self.fresh("o");
                out.push(format!("const {name} = {value};"));
                for property in &object.properties {
                    let key = match &property.key {
                        PropertyKey::StaticIdentifier(id) if !property.computed => {
                            format!("{name}.{}", id.name)
                        }
                        other => format!("{name}[{}]", self.source(other.span())),
                    };
                    self.pattern_parts(&property.value, key, out);
                }
            }
            BindingPattern::ArrayPattern(array) => {
                let name = self.fresh("a");
                out.push(format!("const {name} = Array.from({value});"));
                for (i, element) in array.elements.iter().enumerate() {
                    if let Some(element) = element {
                        self.pattern_parts(element, format!("{name}[{i}]"), out);
                    }
                }
            }
        }
    }

    /// A function (declaration, expression or method) as a function expression.
    pub fn function(&mut self, f: &Function<'_>) -> String {
        if f.generator {
            return self.source(f.span).to_string();
        }
        let params = parameter_names(&f.params);
        let context = FunctionContext::default();
        let body = match &f.body {
            Some(body) => self.function_body(&body.directives, &body.statements, &params, context),
            None => "{}".to_string(),
        };
        let asynchronous = if f.r#async { "async " } else { "" };
        format!(
            "{asynchronous}function ({}) {body}",
            parameter_list(&f.params)
        )
    }

    /// An arrow as a function expression: its `this` becomes its enclosing function's.
    pub fn arrow(&mut self, f: &ArrowFunctionExpression<'_>) -> String {
        let params = parameter_names(&f.params);
        let context = FunctionContext {
            arrow: true,
            ..FunctionContext::default()
        };
        let body = match &f.body {
            ArrowFunctionBody::FunctionBody(body) => {
                self.function_body(&body.directives, &body.statements, &params, context)
            }
            other => {
                let expression = other.to_expression();
                self.functions.push(context);
                let value = self.expr(expression);
                self.functions.pop();
                let mut lines = value.pre;
                lines.push(format!("return {};", value.text));
                format!("{{ {} }}", lines.join(" "))
            }
        };
        let asynchronous = if f.r#async { "async " } else { "" };
        format!(
            "{asynchronous}function ({}) {body}",
            parameter_list(&f.params)
        )
    }

    pub fn function_body(
        &mut self,
        directives: &[Directive<'_>],
        statements: &[Statement<'_>],
        params: &[String],
        context: FunctionContext,
    ) -> String {
        self.functions.push(context);
        let mut lines: Vec<String> = directives
            .iter()
            .map(|d| self.source(d.span).to_string())
            .collect();
        let prologue = self
            .functions
            .last()
            .and_then(|c| c.self_name.clone())
            .map(|name| format!("let {name} = this;"));
        let hoisted = self.hoisted(statements, params);
        let mut body = self.statements(statements);
        let context = self.functions.pop().expect("pushed above");
        if let Some(name) = context.this_capture {
            lines.push(format!("let {name} = this;"));
        }
        lines.extend(prologue);
        lines.extend(hoisted);
        lines.append(&mut body);
        if let Some(name) = context.self_name {
            lines.push(format!("return {name};"));
        }
        format!("{{ {} }}", lines.join(" "))
    }

    /// What `this` is where an expression is printed: `this`, a derived constructor's
    /// instance, or in an arrow the variable holding its enclosing function's `this`.
    pub fn this_text(&mut self) -> String {
        let Some(at) = self.functions.iter().rposition(|f| !f.arrow) else {
            return "this".to_string();
        };
        if let Some(name) = &self.functions[at].self_name {
            return name.clone();
        }
        if at + 1 == self.functions.len() {
            return "this".to_string();
        }
        if let Some(name) = &self.functions[at].this_capture {
            return name.clone();
        }
        let name = self.fresh("this");
        self.functions[at].this_capture = Some(name.clone());
        name
    }
}

/// The plain names of a function's parameters (the first pass left only plain ones).
fn parameter_names(params: &FormalParameters<'_>) -> Vec<String> {
    let mut names = Vec::new();
    for param in &params.items {
        super::structure_names(&param.pattern, &mut names);
    }
    if let Some(rest) = &params.rest {
        super::structure_names(&rest.rest.argument, &mut names);
    }
    names
}

fn parameter_list(params: &FormalParameters<'_>) -> String {
    let mut parts: Vec<String> = params
        .items
        .iter()
        .map(|p| match &p.pattern {
            BindingPattern::BindingIdentifier(id) => id.name.to_string(),
            _ => "_".to_string(),
        })
        .collect();
    if let Some(rest) = &params.rest {
        if let BindingPattern::BindingIdentifier(id) = &rest.rest.argument {
            parts.push(format!("...{}", id.name));
        }
    }
    parts.join(", ")
}

/// The names `var` declares in a statement list, inner blocks included, inner functions not.
#[derive(Default)]
struct VarNames(Vec<String>);

impl<'a> Visit<'a> for VarNames {
    fn visit_variable_declaration(&mut self, it: &VariableDeclaration<'a>) {
        if it.kind == VariableDeclarationKind::Var {
            for declarator in &it.declarations {
                let mut names = Vec::new();
                super::structure_names(&declarator.id, &mut names);
                for name in names {
                    if !self.0.contains(&name) {
                        self.0.push(name);
                    }
                }
            }
        }
        walk::walk_variable_declaration(self, it);
    }
    fn visit_function(&mut self, _: &Function<'a>, _: ScopeFlags) {}
    fn visit_arrow_function_expression(&mut self, _: &ArrowFunctionExpression<'a>) {}
    fn visit_class(&mut self, _: &Class<'a>) {}
}
