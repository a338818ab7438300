//! The differential harness for normalisation: programs and the benchmark handlers run in Node
//! as written and normalised, and must print the same; the normalised text must be in the
//! normal form (no branch, call or function left inside an expression, no class, template
//! literal, arrow, `var` or function declaration). Property tests: normalisation never panics,
//! and what it returns parses again.

use std::fs;

mod common;

use common::*;

use kiln_breakout::normalise::normalise;
use kiln_breakout::SourceKind;
use oxc_allocator::Allocator;
use oxc_ast::ast::*;
use oxc_ast_visit::{walk, Visit};
use oxc_parser::Parser;
use oxc_semantic::ScopeFlags;
use oxc_span::SourceType;
use proptest::prelude::*;

/// Forms the normal form has no place for, found in a parsed program.
#[derive(Default)]
struct Leftovers {
    found: Vec<String>,
    /// Depth inside an expression that is not at a binding position.
    nested: u32,
}

impl Leftovers {
    fn note(&mut self, what: &str) {
        self.found.push(what.to_string());
    }
}

impl<'a> Visit<'a> for Leftovers {
    fn visit_conditional_expression(&mut self, it: &ConditionalExpression<'a>) {
        self.note("?:");
        walk::walk_conditional_expression(self, it);
    }
    fn visit_logical_expression(&mut self, it: &LogicalExpression<'a>) {
        self.note(it.operator.as_str());
        walk::walk_logical_expression(self, it);
    }
    fn visit_chain_expression(&mut self, it: &ChainExpression<'a>) {
        self.note("?.");
        walk::walk_chain_expression(self, it);
    }
    fn visit_template_literal(&mut self, it: &TemplateLiteral<'a>) {
        self.note("template literal");
        walk::walk_template_literal(self, it);
    }
    fn visit_class(&mut self, it: &Class<'a>) {
        self.note("class");
        walk::walk_class(self, it);
    }
    fn visit_arrow_function_expression(&mut self, it: &ArrowFunctionExpression<'a>) {
        self.note("arrow");
        walk::walk_arrow_function_expression(self, it);
    }
    fn visit_function(&mut self, it: &Function<'a>, flags: ScopeFlags) {
        if it.is_declaration() {
            self.note("function declaration");
        }
        let nested = std::mem::take(&mut self.nested);
        walk::walk_function(self, it, flags);
        self.nested = nested;
    }
    fn visit_variable_declaration(&mut self, it: &VariableDeclaration<'a>) {
        if it.kind == VariableDeclarationKind::Var {
            self.note("var");
        }
        walk::walk_variable_declaration(self, it);
    }
    fn visit_for_statement(&mut self, it: &ForStatement<'a>) {
        self.note("for");
        walk::walk_for_statement(self, it);
    }
    fn visit_switch_statement(&mut self, it: &SwitchStatement<'a>) {
        self.note("switch");
        walk::walk_switch_statement(self, it);
    }
    fn visit_assignment_target_pattern(&mut self, it: &AssignmentTargetPattern<'a>) {
        self.note("destructuring assignment");
        walk::walk_assignment_target_pattern(self, it);
    }
    fn visit_call_expression(&mut self, it: &CallExpression<'a>) {
        if self.nested > 0 {
            self.note("call inside an expression");
        }
        self.nested += 1;
        walk::walk_call_expression(self, it);
        self.nested -= 1;
    }
    fn visit_binary_expression(&mut self, it: &BinaryExpression<'a>) {
        self.nested += 1;
        walk::walk_binary_expression(self, it);
        self.nested -= 1;
    }
    fn visit_object_expression(&mut self, it: &ObjectExpression<'a>) {
        self.nested += 1;
        walk::walk_object_expression(self, it);
        self.nested -= 1;
    }
    fn visit_array_expression(&mut self, it: &ArrayExpression<'a>) {
        self.nested += 1;
        walk::walk_array_expression(self, it);
        self.nested -= 1;
    }
}

/// Normalises `text`, asserting that the result parses and is in the normal form.
#[track_caller]
fn normal(text: &str, kind: SourceKind) -> String {
    normalised_checked(text, kind, |program| {
        let mut leftovers = Leftovers::default();
        leftovers.visit_program(program);
        leftovers.found
    })
}

#[test]
fn corpus_programs_print_the_same_normalised() {
    if !node_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut programs = 0;
    for (path, in_subset) in corpus() {
        let text = fs::read_to_string(&path).unwrap();
        // Programs with sites keep them as written: only their behaviour is compared.
        let normalised = if in_subset {
            normal(&text, SourceKind::CommonJs)
        } else {
            normalise(&text, SourceKind::CommonJs).unwrap()
        };
        fs::write(dir.path().join("as-written.js"), &text).unwrap();
        fs::write(dir.path().join("normalised.js"), &normalised).unwrap();
        let expected = node(dir.path(), &["as-written.js"]);
        assert!(!expected.is_empty(), "{} printed nothing", path.display());
        let actual = node(dir.path(), &["normalised.js"]);
        assert_eq!(
            actual,
            expected,
            "{} differs; normalised:\n{normalised}",
            path.display()
        );
        programs += 1;
    }
    assert!(programs >= 5);
}

#[test]
fn benchmark_handlers_answer_the_same_normalised() {
    if !node_available() {
        return;
    }
    for name in BENCHMARKS {
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("plain");
        let normalised = dir.path().join("normalised");
        stage_benchmark(name, &plain, &|text, _| text.to_string());
        stage_benchmark(name, &normalised, &|text, kind| normal(text, kind));
        let expected = drive(dir.path(), &plain, name, &[]);
        let actual = drive(dir.path(), &normalised, name, &[]);
        assert_eq!(actual, expected, "{name} answers differently normalised");
        assert!(expected.lines().count() > 2, "{name}: {expected}");
    }
}

/// Small programs from a grammar of the forms normalisation rewrites.
fn expression() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just("a".to_string()),
        Just("b".to_string()),
        Just("o.p".to_string()),
        Just("1".to_string()),
        Just("null".to_string()),
        Just("\"s\"".to_string()),
        Just("f()".to_string()),
        Just("this".to_string()),
    ];
    leaf.prop_recursive(5, 40, 3, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(x, y)| format!("({x} && {y})")),
            (inner.clone(), inner.clone()).prop_map(|(x, y)| format!("({x} || {y})")),
            (inner.clone(), inner.clone()).prop_map(|(x, y)| format!("({x} ?? {y})")),
            (inner.clone(), inner.clone(), inner.clone())
                .prop_map(|(x, y, z)| format!("({x} ? {y} : {z})")),
            inner.clone().prop_map(|x| format!("({x})?.q")),
            inner.clone().prop_map(|x| format!("g({x})?.(1)")),
            (inner.clone(), inner.clone()).prop_map(|(x, y)| format!("`t${{{x}}}u${{{y}}}`")),
            (inner.clone(), inner.clone()).prop_map(|(x, y)| format!("({x} + {y})")),
            inner.clone().prop_map(|x| format!("(async (z) => {x})")),
            inner.clone().prop_map(|x| format!("(a = {x})")),
            inner.clone().prop_map(|x| format!("([a, b] = [{x}, a])")),
            inner
                .clone()
                .prop_map(|x| format!("(class extends Object {{ async m() {{ return {x}; }} }})")),
            inner
                .clone()
                .prop_map(|x| format!("({{ k: {x}, async m() {{ return {x}; }} }})")),
            inner.clone().prop_map(|x| format!("(await {x})")),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn generated_programs_normalise_into_the_normal_form(e in expression(), s in expression()) {
        let program = format!(
            "async function h(a, b) {{ var o = {{ p: 1 }}; let x = {e}; if ({s}) {{ x = {e}; }} while ({s}) {{ break; }} return {s}; }}"
        );
        let allocator = Allocator::default();
        let parses = !Parser::new(&allocator, &program, SourceType::cjs()).parse().diagnostics.has_errors();
        prop_assume!(parses);
        normal(&program, SourceKind::CommonJs);
    }

    #[test]
    fn normalisation_never_panics_and_its_output_parses(text in "\\PC{0,200}") {
        if let Ok(normalised) = normalise(&text, SourceKind::CommonJs) {
            let allocator = Allocator::default();
            let parsed = Parser::new(&allocator, &normalised, SourceType::cjs()).parse();
            prop_assert!(!parsed.diagnostics.has_errors(), "{text:?} normalised to {normalised:?}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn generated_expressions_evaluate_in_the_same_order(e in logged_expression(), s in logged_expression()) {
        if !node_available() {
            return Ok(());
        }
        let program = logged_program(&e, &s);
        let normalised = normal(&program, SourceKind::CommonJs);
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("a.js"), &program).unwrap();
        fs::write(dir.path().join("b.js"), &normalised).unwrap();
        let expected = node(dir.path(), &["a.js"]);
        let actual = node(dir.path(), &["b.js"]);
        prop_assert_eq!(actual, expected, "normalised:\n{}", normalised);
    }
}
