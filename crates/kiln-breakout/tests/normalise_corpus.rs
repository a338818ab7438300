//! The differential harness for normalisation: programs and the benchmark handlers run in Node
//! as written and normalised, and must print the same; the normalised text must be in the
//! normal form (no branch, call or function left inside an expression, no class, template
//! literal, arrow, `var` or function declaration). Property tests: normalisation never panics,
//! and what it returns parses again.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use kiln_breakout::normalise::normalise;
use kiln_breakout::SourceKind;
use oxc_allocator::Allocator;
use oxc_ast::ast::*;
use oxc_ast_visit::{walk, Visit};
use oxc_parser::Parser;
use oxc_semantic::ScopeFlags;
use oxc_span::SourceType;
use proptest::prelude::*;

fn node_available() -> bool {
    let found = Command::new("node").arg("--version").output().is_ok();
    if !found {
        eprintln!("skipped: `node` is not installed, so programs cannot be compared");
    }
    found
}

/// Runs `node ARGS` in `dir` and returns what it printed; panics when it fails.
fn node(dir: &Path, args: &[&str]) -> String {
    let output = Command::new("node")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("node runs");
    assert!(
        output.status.success(),
        "node {args:?} failed in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

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

fn source_type(kind: SourceKind) -> SourceType {
    match kind {
        SourceKind::Module => SourceType::mjs(),
        _ => SourceType::cjs(),
    }
}

/// Normalises `text`, asserting that the result parses and is in the normal form.
#[track_caller]
fn normal(text: &str, kind: SourceKind) -> String {
    let normalised = normalise(text, kind).unwrap();
    let allocator = Allocator::default();
    let parsed = Parser::new(&allocator, &normalised, source_type(kind)).parse();
    assert!(
        !parsed.diagnostics.has_errors(),
        "the normalised program does not parse: {:?}\n{normalised}",
        parsed
            .diagnostics
            .errors()
            .map(|e| e.message.to_string())
            .collect::<Vec<_>>()
    );
    let mut leftovers = Leftovers::default();
    leftovers.visit_program(&parsed.program);
    assert!(
        leftovers.found.is_empty(),
        "left in the normalised program: {:?}\n{normalised}",
        leftovers.found
    );
    normalised
}

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn corpus_programs_print_the_same_normalised() {
    if !node_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut programs = 0;
    for entry in fs::read_dir(crate_dir().join("tests/corpus")).unwrap() {
        let path = entry.unwrap().path();
        let text = fs::read_to_string(&path).unwrap();
        let normalised = normal(&text, SourceKind::CommonJs);
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
    assert!(programs >= 4);
}

/// The inputs each benchmark handler is driven with: on and off its usual paths.
fn benchmark_inputs(name: &str) -> &'static str {
    match name {
        "authorize" => r#"[{"username":"user3","password":"pw21"},{"username":"user3","password":"x"},{"username":"nobody","password":"pw0"},{"username":3},{}]"#,
        "upload" => r#"[{"name":"a.txt","body":"hello"},{"body":"no name"},{"name":"b"},{}]"#,
        "status" => r#"[{"repo":"kiln","sha":"abcdef1","state":"success","target_url":"u","context":"ci"},{"repo":"kiln","sha":"1234567","state":"failure","target_url":"u","context":"lint"},{"repo":"kiln","sha":"abcdef1","state":"odd","target_url":"u","context":"ci"},{"repo":"kiln","sha":"zz","state":"success","target_url":"u","context":"ci"},{"repo":"kiln","sha":"fffffff","state":"success","target_url":"u","context":"ci"},{"repo":1}]"#,
        "banking" => r#"[{"account":"a","op":"deposit","amount":500},{"account":"a","op":"withdraw","amount":200},{"account":"a","op":"withdraw","amount":900},{"account":"a","op":"balance"},{"account":"b","op":"steal","amount":1},{"account":"a","op":"deposit","amount":1.5}]"#,
        "autocomplete" => r#"[{"prefix":"ab"},{"prefix":"AC"},{"prefix":"zzz"},{}]"#,
        "maze" => r#"[{"x1":0,"y1":0,"x2":29,"y2":29},{"x1":0,"y1":0,"x2":0,"y2":0},{"x1":3,"y1":0,"x2":5,"y2":5},{"x1":-1,"y1":0,"x2":5,"y2":5},{"x1":2,"y1":10,"x2":28,"y2":1}]"#,
        "shift" => r#"[{"n":0},{"n":10},{"n":1000}]"#,
        _ => "[{}]",
    }
}

/// A copy of a benchmark package, normalised or not, with the S3 stand-in installed.
pub fn stage_benchmark(name: &str, into: &Path, transform: &dyn Fn(&str, SourceKind) -> String) {
    let from = crate_dir().join("tests/fixtures").join(name);
    copy_tree(&from, into, transform);
    let sdk = into.join("node_modules/@aws-sdk/client-s3");
    fs::create_dir_all(&sdk).unwrap();
    fs::copy(crate_dir().join("tests/support/client-s3.js"), sdk.join("index.js")).unwrap();
    fs::write(sdk.join("package.json"), r#"{"name":"@aws-sdk/client-s3","main":"index.js"}"#).unwrap();
    fs::copy(crate_dir().join("tests/support/drive.mjs"), into.join("drive.mjs")).unwrap();
}

fn copy_tree(from: &Path, to: &Path, transform: &dyn Fn(&str, SourceKind) -> String) {
    fs::create_dir_all(to).unwrap();
    let module_package = fs::read_to_string(from.join("package.json"))
        .map(|p| p.contains("\"module\""))
        .unwrap_or(false);
    for entry in fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let target = to.join(path.file_name().unwrap());
        if path.is_dir() {
            copy_tree(&path, &target, transform);
            continue;
        }
        let kind = match path.extension().and_then(|e| e.to_str()) {
            Some("mjs") => Some(SourceKind::Module),
            Some("cjs") => Some(SourceKind::CommonJs),
            Some("js") if module_package => Some(SourceKind::Module),
            Some("js") => Some(SourceKind::CommonJs),
            _ => None,
        };
        match kind {
            Some(kind) => {
                let text = fs::read_to_string(&path).unwrap();
                fs::write(&target, transform(&text, kind)).unwrap();
            }
            None => {
                fs::copy(&path, &target).unwrap();
            }
        }
    }
}

pub fn handler_file(name: &str) -> &'static str {
    match name {
        "status" => "index.cjs",
        _ => "index.js",
    }
}

pub const BENCHMARKS: [&str; 7] = ["authorize", "upload", "status", "banking", "autocomplete", "maze", "shift"];

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
        fs::write(dir.path().join("inputs.json"), benchmark_inputs(name)).unwrap();
        let inputs = dir.path().join("inputs.json");
        let inputs = inputs.to_str().unwrap();
        let expected = node(&plain, &["drive.mjs", handler_file(name), inputs]);
        let actual = node(&normalised, &["drive.mjs", handler_file(name), inputs]);
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
            inner.clone().prop_map(|x| format!("(class extends Object {{ async m() {{ return {x}; }} }})")),
            inner.clone().prop_map(|x| format!("({{ k: {x}, async m() {{ return {x}; }} }})")),
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

/// Expressions whose every operand logs when it is evaluated, so a difference in order or in
/// short-circuiting shows in the output.
fn logged_expression() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        (0..6u8).prop_map(|v| format!("f({v}, {v})")),
        Just("f(\"n\", null)".to_string()),
        Just("f(\"u\", undefined)".to_string()),
        Just("o.p".to_string()),
        Just("f(\"o\", o)".to_string()),
        Just("x".to_string()),
    ];
    leaf.prop_recursive(4, 24, 3, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a} && {b})")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a} || {b})")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a} ?? {b})")),
            (inner.clone(), inner.clone(), inner.clone())
                .prop_map(|(a, b, c)| format!("({a} ? {b} : {c})")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a} + {b})")),
            inner.clone().prop_map(|a| format!("({a})?.p")),
            inner.clone().prop_map(|a| format!("(x = {a})")),
            inner.clone().prop_map(|a| format!("(x += {a})")),
            inner.clone().prop_map(|a| format!("(o.p ||= {a})")),
            inner.clone().prop_map(|a| format!("[x++, {a}, x]")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("`<${{{a}}}|${{{b}}}>`")),
            inner.clone().prop_map(|a| format!("f(\"g\", {a})")),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn generated_expressions_evaluate_in_the_same_order(e in logged_expression(), s in logged_expression()) {
        if !node_available() {
            return Ok(());
        }
        let program = format!(
            "const log = []; let x = 1; const o = {{ p: 0 }};\n\
             function f(tag, value) {{ log.push(tag); return value; }}\n\
             let result; try {{ result = {e}; if ({s}) {{ log.push(\"then\"); }} }} catch (error) {{ result = error.constructor.name; }}\n\
             console.log([result, x, o.p, log].map((v) => typeof v === \"object\" && v !== null ? \"object\" : String(v)).join(\" \"));\n"
        );
        let normalised = normal(&program, SourceKind::CommonJs);
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("a.js"), &program).unwrap();
        fs::write(dir.path().join("b.js"), &normalised).unwrap();
        let expected = node(dir.path(), &["a.js"]);
        let actual = node(dir.path(), &["b.js"]);
        prop_assert_eq!(actual, expected, "normalised:\n{}", normalised);
    }
}
