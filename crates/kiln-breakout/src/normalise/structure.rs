//! Normalisation's first pass, over the source text: the control structures.
//!
//! What is rewritten here:
//! - `for`, `for…of` and `do…while` become `while`; a `continue` becomes a `break` out of a
//!   labelled block around the loop's body (Fig. 2 has labels and `break`, no `continue`);
//! - `switch` becomes `if`s over the index of the matching case, fall-through included;
//! - destructuring declarations (`const {a, b: [c = 1, ...d]} = e`, and in `for…of` heads)
//!   become one declarator per name;
//! - parameters with a pattern or a default become plain ones, destructured by a `let` at the
//!   start of the body (an arrow's expression body becomes a block).
//!
//! A `for (let …)` loop whose body makes closures keeps JavaScript's per-iteration copies of
//! its variables.
//!
//! The second pass (`lower.rs`) does the rest. Where this rewrite still differs from JavaScript
//! (`docs/breakout.md` lists it): leaving a `for…of` early does not call the iterator's
//! `return`; a case's `let` read in another case before it ran is `undefined`, not an error.
//!
//! The rewrite works on the source text: each rewritten node's new text is built from its
//! children's text (rewritten first, bottom-up) and the rest is copied as written, comments and
//! layout included, so positions outside rewritten nodes stay meaningful.

use oxc_allocator::Allocator;
use oxc_ast::ast::*;
use oxc_ast_visit::{walk, Visit};
use oxc_semantic::ScopeFlags;
use oxc_span::{GetSpan, Span};

use super::NormaliseError;
use crate::check::SourceKind;

/// The file's text with its loops, `switch`es and destructuring declarations rewritten.
pub(super) fn structure(text: &str, kind: SourceKind) -> Result<String, NormaliseError> {
    if crate::check::too_deep(text).is_some() {
        return Err(NormaliseError::TooDeep);
    }
    let allocator = Allocator::default();
    let program = super::parse(&allocator, text, kind)?;
    let mut rewriter = Rewriter::new(text);
    rewriter.visit_program(&program);
    let mut out = rewriter.text(Span::new(0, text.len() as u32));
    if rewriter.rest_helper {
        // Function declarations are hoisted: at the end, the helper disturbs no directive.
        out.push_str(&format!(
            "\nfunction {p}rest(o, keys) {{ const r = {{}}; const ks = Object.keys(o); let i = 0; \
             while (i < ks.length) {{ if (!keys.includes(ks[i])) {{ r[ks[i]] = o[ks[i]]; }} i = i + 1; }} \
             return r; }}\n",
            p = rewriter.prefix
        ));
    }
    Ok(out)
}

/// A replacement of the source between two offsets.
#[derive(Debug)]
struct Edit {
    start: u32,
    end: u32,
    text: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TargetKind {
    /// A loop that becomes `while`: its `continue`s become breaks out of its body.
    Loop,
    /// A loop left as it is (`for…in`, `for await`): its `continue`s stay.
    KeptLoop,
    Switch,
    /// `break` and `continue` never cross a function.
    Function,
}

/// Where a `break` or `continue` may go.
#[derive(Debug)]
struct JumpTarget {
    kind: TargetKind,
    /// The source's labels on the statement.
    labels: Vec<String>,
    /// The fresh label the rewrite gives it (the body's for a loop, the whole for a switch).
    name: String,
    used: bool,
}

struct Rewriter<'s> {
    src: &'s str,
    /// Non-overlapping, sorted by start.
    edits: Vec<Edit>,
    /// A prefix no name of the source starts with: fresh names are it plus a number.
    prefix: String,
    next: u32,
    targets: Vec<JumpTarget>,
    /// Labels seen on the way to the statement being visited.
    pending_labels: Vec<String>,
    rest_helper: bool,
    /// Functions (and arrows) visited so far: whether a loop's body made closures.
    functions: usize,
}

impl<'s> Rewriter<'s> {
    fn new(src: &'s str) -> Self {
        let mut prefix = String::from("$kb");
        while src.contains(prefix.as_str()) {
            prefix.push('_');
        }
        Rewriter {
            src,
            edits: Vec::new(),
            prefix,
            next: 0,
            targets: Vec::new(),
            pending_labels: Vec::new(),
            rest_helper: false,
            functions: 0,
        }
    }

    fn fresh(&mut self, hint: &str) -> String {
        self.next += 1;
        format!("{}{}{}", self.prefix, hint, self.next)
    }

    /// The text of `span` with the edits inside it applied.
    fn text(&self, span: Span) -> String {
        let mut out = String::new();
        let mut pos = span.start;
        for edit in &self.edits {
            if edit.start >= span.start && edit.end <= span.end {
                out.push_str(&self.src[pos as usize..edit.start as usize]);
                out.push_str(&edit.text);
                pos = edit.end;
            }
        }
        out.push_str(&self.src[pos as usize..span.end as usize]);
        out
    }

    /// Replaces `span`, absorbing the edits inside it (its text was built from them).
    fn replace(&mut self, span: Span, text: String) {
        self.edits
            .retain(|e| !(e.start >= span.start && e.end <= span.end));
        let at = self.edits.partition_point(|e| e.start < span.start);
        self.edits.insert(
            at,
            Edit {
                start: span.start,
                end: span.end,
                text,
            },
        );
    }

    /// Visits a loop or switch as a jump target; returns the target after its body was visited.
    fn with_target(&mut self, kind: TargetKind, visit: impl FnOnce(&mut Self)) -> JumpTarget {
        let labels = std::mem::take(&mut self.pending_labels);
        let name = self.fresh(if kind == TargetKind::Switch {
            "switch"
        } else {
            "body"
        });
        self.targets.push(JumpTarget {
            kind,
            labels,
            name,
            used: false,
        });
        visit(self);
        self.targets.pop().expect("pushed above")
    }

    /// A loop body: as written, or inside a labelled block its `continue`s break out of.
    fn body(&self, body: &Statement<'_>, target: &JumpTarget) -> String {
        let text = self.text(body.span());
        if target.used {
            format!("{}: {{ {text} }}", target.name)
        } else {
            text
        }
    }

    /// `kind d1, d2, …` for a declarator whose binding may be a pattern, `init` its value.
    fn declarators(&mut self, pattern: &BindingPattern<'_>, init: String, out: &mut Vec<String>) {
        match pattern {
            BindingPattern::BindingIdentifier(ident) => {
                out.push(format!("{} = {init}", ident.name))
            }
            BindingPattern::AssignmentPattern(assign) => {
                let value = self.fresh("v");
                out.push(format!("{value} = {init}"));
                let default = self.text(assign.right.span());
                self.declarators(
                    &assign.left,
                    format!("({value} === undefined ? ({default}) : {value})"),
                    out,
                );
            }
            BindingPattern::ObjectPattern(object) => {
                let from = self.fresh("o");
                out.push(format!("{from} = {init}"));
                let mut keys = Vec::new();
                for property in &object.properties {
                    let key = match &property.key {
                        PropertyKey::StaticIdentifier(id) if !property.computed => {
                            keys.push(format!("\"{}\"", id.name));
                            format!("{from}.{}", id.name)
                        }
                        other => {
                            let key = self.text(other.span());
                            keys.push(key.clone());
                            format!("{from}[{key}]")
                        }
                    };
                    self.declarators(&property.value, key, out);
                }
                if let Some(rest) = &object.rest {
                    self.rest_helper = true;
                    let value = format!("{}rest({from}, [{}])", self.prefix, keys.join(", "));
                    self.declarators(&rest.argument, value, out);
                }
            }
            BindingPattern::ArrayPattern(array) => {
                let from = self.fresh("a");
                out.push(format!("{from} = Array.from({init})"));
                for (i, element) in array.elements.iter().enumerate() {
                    if let Some(element) = element {
                        self.declarators(element, format!("{from}[{i}]"), out);
                    }
                }
                if let Some(rest) = &array.rest {
                    let at = array.elements.len();
                    self.declarators(&rest.argument, format!("{from}.slice({at})"), out);
                }
            }
        }
    }
}

impl Rewriter<'_> {
    /// Parameters with a pattern or a default become fresh names; returns the `let` that
    /// binds what they held, for the start of the body (empty when every parameter is plain).
    fn parameters(&mut self, params: &FormalParameters<'_>) -> String {
        let mut parts = Vec::new();
        let mut renamed = Vec::new();
        for param in &params.items {
            let plain = matches!(param.pattern, BindingPattern::BindingIdentifier(_));
            if plain && param.initializer.is_none() {
                continue;
            }
            let name = self.fresh("p");
            let value = match &param.initializer {
                Some(default) => {
                    format!(
                        "({name} === undefined ? ({}) : {name})",
                        self.text(default.span())
                    )
                }
                None => name.clone(),
            };
            self.declarators(&param.pattern, value, &mut parts);
            renamed.push((param.span, name));
        }
        if let Some(rest) = &params.rest {
            let argument = &rest.rest.argument;
            if !matches!(argument, BindingPattern::BindingIdentifier(_)) {
                let name = self.fresh("p");
                self.declarators(argument, name.clone(), &mut parts);
                renamed.push((argument.span(), name));
            }
        }
        for (span, name) in renamed {
            self.replace(span, name);
        }
        if parts.is_empty() {
            String::new()
        } else {
            format!("let {};", parts.join(", "))
        }
    }
}

/// The names a binding pattern declares.
pub(super) fn bound_names(pattern: &BindingPattern<'_>, out: &mut Vec<String>) {
    match pattern {
        BindingPattern::BindingIdentifier(ident) => out.push(ident.name.to_string()),
        BindingPattern::AssignmentPattern(assign) => bound_names(&assign.left, out),
        BindingPattern::ObjectPattern(object) => {
            for property in &object.properties {
                bound_names(&property.value, out);
            }
            if let Some(rest) = &object.rest {
                bound_names(&rest.argument, out);
            }
        }
        BindingPattern::ArrayPattern(array) => {
            for element in array.elements.iter().flatten() {
                bound_names(element, out);
            }
            if let Some(rest) = &array.rest {
                bound_names(&rest.argument, out);
            }
        }
    }
}

fn kind_text(kind: VariableDeclarationKind) -> &'static str {
    match kind {
        VariableDeclarationKind::Var => "var",
        VariableDeclarationKind::Let => "let",
        VariableDeclarationKind::Const => "const",
        // `using` declarations do not parse in the supported subset's files.
        _ => "const",
    }
}

fn is_jump_target(statement: &Statement<'_>) -> bool {
    matches!(
        statement,
        Statement::ForStatement(_)
            | Statement::ForOfStatement(_)
            | Statement::ForInStatement(_)
            | Statement::WhileStatement(_)
            | Statement::DoWhileStatement(_)
            | Statement::SwitchStatement(_)
            | Statement::LabeledStatement(_)
    )
}

impl<'a> Visit<'a> for Rewriter<'_> {
    fn visit_labeled_statement(&mut self, it: &LabeledStatement<'a>) {
        self.pending_labels.push(it.label.name.to_string());
        if !is_jump_target(&it.body) {
            self.pending_labels.clear();
        }
        walk::walk_labeled_statement(self, it);
    }

    fn visit_function(&mut self, it: &Function<'a>, flags: ScopeFlags) {
        self.functions += 1;
        self.pending_labels.clear();
        self.with_target(TargetKind::Function, |this| {
            walk::walk_function(this, it, flags)
        });
        if let Some(body) = &it.body {
            let declarations = self.parameters(&it.params);
            if !declarations.is_empty() {
                // After the `{`: a function with such parameters cannot have a directive.
                let at = body.span.start + 1;
                self.replace(Span::new(at, at), format!(" {declarations}"));
            }
        }
    }

    fn visit_arrow_function_expression(&mut self, it: &ArrowFunctionExpression<'a>) {
        self.functions += 1;
        self.pending_labels.clear();
        self.with_target(TargetKind::Function, |this| {
            walk::walk_arrow_function_expression(this, it)
        });
        let declarations = self.parameters(&it.params);
        if declarations.is_empty() {
            return;
        }
        match &it.body {
            ArrowFunctionBody::FunctionBody(body) => {
                let at = body.span.start + 1;
                self.replace(Span::new(at, at), format!(" {declarations}"));
            }
            expression => {
                let span = expression.span();
                let value = self.text(span);
                self.replace(span, format!("{{ {declarations} return ({value}); }}"));
            }
        }
    }

    fn visit_continue_statement(&mut self, it: &ContinueStatement<'a>) {
        let label = it.label.as_ref().map(|l| l.name.as_str());
        let target = self.targets.iter_mut().rev().find(|t| {
            t.kind == TargetKind::Function
                || (matches!(t.kind, TargetKind::Loop | TargetKind::KeptLoop)
                    && label.is_none_or(|l| t.labels.iter().any(|m| m == l)))
        });
        if let Some(target) = target {
            if target.kind == TargetKind::Loop {
                target.used = true;
                let text = format!("break {};", target.name);
                self.replace(it.span, text);
            }
        }
    }

    fn visit_break_statement(&mut self, it: &BreakStatement<'a>) {
        if it.label.is_some() {
            return;
        }
        // An unlabelled `break` leaves the innermost loop or switch: the innermost target.
        if let Some(target) = self.targets.last_mut() {
            if target.kind == TargetKind::Switch {
                target.used = true;
                let text = format!("break {};", target.name);
                self.replace(it.span, text);
            }
        }
    }

    fn visit_while_statement(&mut self, it: &WhileStatement<'a>) {
        let target = self.with_target(TargetKind::Loop, |this| {
            walk::walk_while_statement(this, it)
        });
        if target.used {
            let test = self.text(it.test.span());
            let body = self.body(&it.body, &target);
            self.replace(it.span, format!("while ({test}) {{ {body} }}"));
        }
    }

    fn visit_for_statement(&mut self, it: &ForStatement<'a>) {
        let functions = self.functions;
        let target = self.with_target(TargetKind::Loop, |this| walk::walk_for_statement(this, it));
        let init = it
            .init
            .as_ref()
            .map(|i| self.text(i.span()))
            .unwrap_or_default();
        let test = it
            .test
            .as_ref()
            .map_or("true".to_string(), |t| self.text(t.span()));
        let update = it
            .update
            .as_ref()
            .map(|u| format!("{};", self.text(u.span())))
            .unwrap_or_default();
        let body = self.body(&it.body, &target);
        // A closure made in the loop sees its iteration's copy of a `let` of the head: each
        // iteration gets fresh bindings, copied from the last before the update runs.
        let mut names = Vec::new();
        if let Some(ForStatementInit::VariableDeclaration(declaration)) = &it.init {
            if declaration.kind == VariableDeclarationKind::Let && self.functions > functions {
                for declarator in &declaration.declarations {
                    bound_names(&declarator.id, &mut names);
                }
            }
        }
        if names.is_empty() {
            self.replace(
                it.span,
                format!("{{ {init}; while ({test}) {{ {body} {update} }} }}"),
            );
            return;
        }
        let carried: Vec<String> = names.iter().map(|_| self.fresh("carried")).collect();
        let first = self.fresh("first");
        let assign = |from: &[String], to: &[String]| -> String {
            from.iter()
                .zip(to)
                .map(|(f, t)| format!("{t} = {f};"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let declare_carried = names
            .iter()
            .zip(&carried)
            .map(|(n, c)| format!("{c} = {n}"))
            .collect::<Vec<_>>()
            .join(", ");
        let fresh_copies = carried
            .iter()
            .zip(&names)
            .map(|(c, n)| format!("{n} = {c}"))
            .collect::<Vec<_>>()
            .join(", ");
        let carry_out = assign(&names, &carried);
        self.replace(
            it.span,
            format!(
                "{{ {init}; let {declare_carried}; let {first} = true; while (true) {{ \
                 let {fresh_copies}; if ({first}) {{ {first} = false; }} else {{ {update} }} \
                 if (!({test})) {{ break; }} {body} {carry_out} }} }}"
            ),
        );
    }

    fn visit_do_while_statement(&mut self, it: &DoWhileStatement<'a>) {
        let target = self.with_target(TargetKind::Loop, |this| {
            walk::walk_do_while_statement(this, it)
        });
        let first = self.fresh("first");
        let test = self.text(it.test.span());
        let body = self.body(&it.body, &target);
        self.replace(
            it.span,
            format!("{{ let {first} = true; while ({first} || ({test})) {{ {first} = false; {body} }} }}"),
        );
    }

    fn visit_for_of_statement(&mut self, it: &ForOfStatement<'a>) {
        if it.r#await {
            self.with_target(TargetKind::KeptLoop, |this| {
                walk::walk_for_of_statement(this, it)
            });
            return;
        }
        let target = self.with_target(TargetKind::Loop, |this| {
            walk::walk_for_of_statement(this, it)
        });
        let iterator = self.fresh("iterator");
        let step = self.fresh("step");
        let right = self.text(it.right.span());
        let value = format!("{step}.value");
        let head = match &it.left {
            ForStatementLeft::VariableDeclaration(declaration) => {
                let mut parts = Vec::new();
                if let Some(declarator) = declaration.declarations.first() {
                    self.declarators(&declarator.id, value, &mut parts);
                }
                format!("{} {};", kind_text(declaration.kind), parts.join(", "))
            }
            target => format!("{} = {value};", self.text(target.span())),
        };
        let body = self.body(&it.body, &target);
        self.replace(
            it.span,
            format!(
                "{{ const {iterator} = ({right})[Symbol.iterator](); let {step}; \
                 while (!({step} = {iterator}.next()).done) {{ {head} {body} }} }}"
            ),
        );
    }

    fn visit_for_in_statement(&mut self, it: &ForInStatement<'a>) {
        self.with_target(TargetKind::KeptLoop, |this| {
            walk::walk_for_in_statement(this, it)
        });
    }

    fn visit_switch_statement(&mut self, it: &SwitchStatement<'a>) {
        let target = self.with_target(TargetKind::Switch, |this| {
            walk::walk_switch_statement(this, it)
        });
        let value = self.fresh("value");
        let case = self.fresh("case");
        let discriminant = self.text(it.discriminant.span());
        let cases = it.cases.len();
        let default = it
            .cases
            .iter()
            .position(|c| c.test.is_none())
            .unwrap_or(cases);
        let mut chain = String::new();
        for (i, c) in it.cases.iter().enumerate() {
            if let Some(test) = &c.test {
                chain.push_str(&format!(
                    "if ({value} === ({})) {case} = {i}; else ",
                    self.text(test.span())
                ));
            }
        }
        chain.push_str(&format!("{case} = {default};"));
        // The cases share one scope: their `let`s and `const`s are declared before the first
        // and assigned where they stood, so a later case sees them.
        let mut shared = Vec::new();
        let mut bodies = String::new();
        for (i, c) in it.cases.iter().enumerate() {
            let mut statements = Vec::new();
            for statement in &c.consequent {
                match statement {
                    Statement::VariableDeclaration(d) if d.kind != VariableDeclarationKind::Var => {
                        let mut parts = Vec::new();
                        for declarator in &d.declarations {
                            match &declarator.init {
                                Some(init) => {
                                    let init = self.text(init.span());
                                    self.declarators(
                                        &declarator.id,
                                        format!("({init})"),
                                        &mut parts,
                                    );
                                }
                                None => {
                                    let mut names = Vec::new();
                                    bound_names(&declarator.id, &mut names);
                                    parts.extend(
                                        names.into_iter().map(|n| format!("{n} = undefined")),
                                    );
                                }
                            }
                        }
                        for part in &parts {
                            if let Some((name, _)) = part.split_once(" = ") {
                                shared.push(name.to_string());
                            }
                        }
                        statements.push(format!("{};", parts.join(", ")));
                    }
                    other => statements.push(self.text(other.span())),
                }
            }
            bodies.push_str(&format!(
                " if ({case} <= {i}) {{ {} }}",
                statements.join(" ")
            ));
        }
        let shared = if shared.is_empty() {
            String::new()
        } else {
            format!(" let {};", shared.join(", "))
        };
        self.replace(
            it.span,
            format!(
                "{}: {{ const {value} = ({discriminant}); let {case};{shared} {chain}{bodies} }}",
                target.name
            ),
        );
    }

    fn visit_variable_declaration(&mut self, it: &VariableDeclaration<'a>) {
        walk::walk_variable_declaration(self, it);
        let destructures = it
            .declarations
            .iter()
            .any(|d| d.init.is_some() && !matches!(d.id, BindingPattern::BindingIdentifier(_)));
        if !destructures {
            return;
        }
        let mut parts = Vec::new();
        for declarator in &it.declarations {
            match &declarator.init {
                Some(init) => {
                    let init = self.text(init.span());
                    self.declarators(&declarator.id, format!("({init})"), &mut parts);
                }
                None => parts.push(self.text(declarator.span)),
            }
        }
        let original = &self.src[it.span.start as usize..it.span.end as usize];
        let semicolon = if original.trim_end().ends_with(';') {
            ";"
        } else {
            ""
        };
        self.replace(
            it.span,
            format!("{} {}{semicolon}", kind_text(it.kind), parts.join(", ")),
        );
    }
}
