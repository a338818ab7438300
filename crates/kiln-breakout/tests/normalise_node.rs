//! Normalisation keeps behaviour: each program here runs in Node as written and normalised, on
//! the same inputs, and must print the same; the normalised text must hold no loop but
//! `while`, no `switch` and no destructuring declaration.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use kiln_breakout::normalise::normalise;
use kiln_breakout::SourceKind;
use oxc_allocator::Allocator;
use oxc_ast::ast::*;
use oxc_ast_visit::{walk, Visit};
use oxc_parser::Parser;
use oxc_span::SourceType;
use proptest::prelude::*;

mod common;

use common::normalised_checked;

/// Runs a CommonJS program in Node (from stdin) and returns what it printed.
fn run_node(program: &str) -> String {
    let mut child = Command::new("node")
        .arg("-")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("node must be installed to test normalisation");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(program.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "node failed: {}\n--- program ---\n{program}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// Forms normalisation removes, as found in a parsed program.
#[derive(Default)]
struct Leftovers(Vec<&'static str>);

impl<'a> Visit<'a> for Leftovers {
    fn visit_for_statement(&mut self, it: &ForStatement<'a>) {
        self.0.push("for");
        walk::walk_for_statement(self, it);
    }
    fn visit_for_of_statement(&mut self, it: &ForOfStatement<'a>) {
        self.0.push("for…of");
        walk::walk_for_of_statement(self, it);
    }
    fn visit_do_while_statement(&mut self, it: &DoWhileStatement<'a>) {
        self.0.push("do…while");
        walk::walk_do_while_statement(self, it);
    }
    fn visit_switch_statement(&mut self, it: &SwitchStatement<'a>) {
        self.0.push("switch");
        walk::walk_switch_statement(self, it);
    }
    fn visit_continue_statement(&mut self, it: &ContinueStatement<'a>) {
        self.0.push("continue");
        walk::walk_continue_statement(self, it);
    }
    fn visit_formal_parameter(&mut self, it: &FormalParameter<'a>) {
        if it.initializer.is_some() || !matches!(it.pattern, BindingPattern::BindingIdentifier(_)) {
            self.0.push("parameter pattern or default");
        }
        walk::walk_formal_parameter(self, it);
    }
    fn visit_variable_declarator(&mut self, it: &VariableDeclarator<'a>) {
        if it.init.is_some() && !matches!(it.id, BindingPattern::BindingIdentifier(_)) {
            self.0.push("destructuring");
        }
        walk::walk_variable_declarator(self, it);
    }
}

/// Normalises `program`, checks what is left, and compares the two runs' output.
#[track_caller]
fn same_in_node(program: &str) -> String {
    let normalised = normalised_checked(program, SourceKind::CommonJs, |parsed| {
        let mut leftovers = Leftovers::default();
        leftovers.visit_program(parsed);
        leftovers.0.iter().map(|s| s.to_string()).collect()
    });
    let expected = run_node(program);
    assert!(!expected.is_empty(), "the program printed nothing");
    let actual = run_node(&normalised);
    assert_eq!(actual, expected, "--- normalised ---\n{normalised}");
    normalised
}

#[test]
fn for_loops_with_continue_and_break() {
    same_in_node(
        r#"
const out = [];
for (let i = 0; i < 10; i++) {
  if (i % 3 === 0) continue;
  if (i > 7) break;
  out.push(i);
}
let j = 0;
for (; j < 5; ) { j += 2; }
outer: for (let a = 0; a < 4; a++) {
  for (let b = 0; b < 4; b++) {
    if (b > a) continue outer;
    if (a === 3) break outer;
    out.push(`${a}${b}`);
  }
}
let n = 0;
while (n < 6) { n++; if (n % 2) continue; out.push(n); }
console.log(JSON.stringify(out), j);
"#,
    );
}

#[test]
fn closures_made_in_a_for_let_loop_see_their_iterations_copy() {
    same_in_node(
        r#"
const fns = [];
for (let i = 0, j = 10; i < 4; i++, j--) {
  if (i === 1) continue;
  fns.push(() => [i, j]);
  i += 0;
}
const later = [];
for (let k = 0; k < 3; k++) {
  later.push(() => k);
  if (k === 1) break;
}
for (let [a, b] = [0, 1]; a < 2; a++) later.push(() => a + b);
console.log(JSON.stringify(fns.map((f) => f())), later.map((f) => f()).join());
"#,
    );
}

#[test]
fn do_while_runs_its_body_once_and_continue_goes_to_the_test() {
    same_in_node(
        r#"
const out = [];
let i = 10;
do { out.push(i); } while (i < 5);
let k = 0;
do { k++; if (k === 2) continue; out.push(k); } while (k < 4);
console.log(out.join(","));
"#,
    );
}

#[test]
fn for_of_over_arrays_strings_maps_with_destructuring() {
    same_in_node(
        r#"
const out = [];
for (const x of [1, 2, 3]) { if (x === 2) continue; out.push(x); }
for (const c of "héllo😀") out.push(c);
for (const [k, { v = 9 }] of new Map([["a", { v: 1 }], ["b", {}]])) out.push(k + v);
let last;
for (last of [7, 8]) {}
const fns = [];
for (const f of [1, 2]) fns.push(() => f);
console.log(out.join("|"), last, fns.map((f) => f()).join());
"#,
    );
}

#[test]
fn switch_with_fall_through_default_in_the_middle_and_breaks() {
    same_in_node(
        r#"
function classify(x) {
  const out = [];
  switch (x) {
    case 1:
      out.push("one");
    case 2:
      out.push("two");
      break;
    default:
      out.push("default");
    case 3:
      out.push("three");
      break;
    case "4":
      out.push("string four");
  }
  return out.join("+");
}
const seen = [];
for (const x of [1, 2, 3, "4", 4, 5]) {
  switch (typeof x) {
    case "string":
      continue;
  }
  seen.push(classify(x));
}
let evaluated = [];
switch (2) { case (evaluated.push("a"), 1): case (evaluated.push("b"), 2): case (evaluated.push("c"), 3): }
console.log(seen.join(" "), classify("4"), evaluated.join(""));
"#,
    );
}

#[test]
fn destructuring_declarations_become_one_declarator_per_name() {
    let normalised = same_in_node(
        r#"
const source = { a: 1, b: [2, 3, 4], c: { d: "x" }, "e-f": 5, g: undefined, extra: 6 };
const { a, b: [first, , third = 30, ...others], c: { d }, "e-f": ef, g = "default", ...rest } = source;
let [p, q = p + 1] = [10];
var { [`${"a"}`]: computed } = source;
const [h, i] = "hi";
console.log(a, first, third, others.length, d, ef, g, JSON.stringify(rest), p, q, computed, h, i);
"#,
    );
    assert!(normalised.contains("rest("), "{normalised}");
}

#[test]
fn parameters_with_patterns_and_defaults_become_plain() {
    same_in_node(
        r#"
function f({ a, b: [c, d = 4] = [] }, e = a + 1, ...[g, h]) {
  return [a, c, d, e, g, h].join();
}
const arrow = async ({ prefix = "x" } = {}) => prefix.toUpperCase();
const object = ({ x }) => ({ x, twice: x * 2 });
const plain = (a, b) => a + b;
class K { m({ v } = { v: "m" }) { return v; } }
(async () => {
  console.log(f({ a: 1, b: [2] }), f({ a: 5 }, 0, 7, 8), await arrow(), await arrow({ prefix: "ab" }));
  console.log(JSON.stringify(object({ x: 3 })), plain(1, 2), new K().m(), new K().m({ v: 9 }));
})();
"#,
    );
}

#[test]
fn the_maze_autocomplete_and_shift_handlers_answer_the_same() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    for (name, inputs) in [
        (
            "maze",
            r#"[{"x1":0,"y1":0,"x2":29,"y2":29},{"x1":0,"y1":0,"x2":2,"y2":0},{"x1":3,"y1":0,"x2":0,"y2":0},{"x1":-1,"y1":0,"x2":0,"y2":0},{"x1":0,"y1":0,"x2":0,"y2":28},{"x1":0,"y1":5,"x2":8,"y2":9}]"#,
        ),
        (
            "autocomplete",
            r#"[{"prefix":"ab"},{"prefix":"AC"},{"prefix":"z"},{}]"#,
        ),
        ("shift", r#"[{"n":0},{"n":10},{"n":1000}]"#),
    ] {
        let code = std::fs::read_to_string(fixtures.join(name).join("index.js")).unwrap();
        let normalised = normalise(&code, SourceKind::CommonJs).unwrap();
        let harness = |code: &str| {
            format!(
                "const loaded = {{ exports: {{}} }};\n(function (module, exports) {{\n{code}\n}})(loaded, loaded.exports);\n\
                 (async () => {{ for (const input of {inputs}) console.log(JSON.stringify(await loaded.exports.handler(input))); }})();\n"
            )
        };
        let expected = run_node(&harness(&code));
        assert_eq!(
            run_node(&harness(&normalised)),
            expected,
            "{name}: --- normalised ---\n{normalised}"
        );
    }
}

#[test]
fn function_declarations_are_hoisted_and_bad_input_is_refused() {
    let code = "// a comment\nconst x = 1; /* dropped */\nfunction f(a) { return a * 2; }\n";
    assert_eq!(
        normalise(code, SourceKind::CommonJs).unwrap(),
        "let f = function (a) { return (a * 2); };\nconst x = 1;\n"
    );
    assert!(normalise("const = ;", SourceKind::CommonJs).is_err());
    let deep = format!("x = {}1;", "!".repeat(100_000));
    assert!(matches!(
        normalise(&deep, SourceKind::CommonJs),
        Err(kiln_breakout::normalise::NormaliseError::TooDeep)
    ));
}

#[test]
fn fresh_names_never_collide_with_the_sources() {
    let code = "const $kb = 1; let n = 0; for (;;) { n++; if (n > 2) break; else continue; }";
    let normalised = normalise(code, SourceKind::CommonJs).unwrap();
    assert!(normalised.contains("$kb_body"), "{normalised}");
    assert!(!normalised.contains("$kbbody"), "{normalised}");
}

/// Random programs of nested loops, switches, jumps and destructuring, always inside a loop
/// labelled `L` so that every `break` and `continue` has a target.
fn programs() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just("x++;"),
        Just("break;"),
        Just("continue;"),
        Just("continue L;"),
        Just("break L;"),
        Just("const { p, ...q } = o;"),
        Just("let [m = 1, , ...n] = xs;"),
        Just("f(() => { for (;;) break; });"),
    ]
    .prop_map(String::from);
    let statements = leaf.prop_recursive(4, 48, 4, |inner| {
        let block = proptest::collection::vec(inner, 0..4).prop_map(|v| v.join("\n"));
        prop_oneof![
            block
                .clone()
                .prop_map(|b| format!("for (let i = 0; i < 3; i++) {{\n{b}\n}}")),
            block
                .clone()
                .prop_map(|b| format!("for (const [a, {{ b = 1 }}] of xs) {{\n{b}\n}}")),
            block
                .clone()
                .prop_map(|b| format!("do {{\n{b}\n}} while (x);")),
            block.clone().prop_map(|b| format!("while (y) {{\n{b}\n}}")),
            (block.clone(), block.clone())
                .prop_map(|(a, b)| format!("switch (x) {{ case 1:\n{a}\ndefault:\n{b}\n}}")),
            block.prop_map(|b| format!("if (x) {{\n{b}\n}}")),
        ]
    });
    proptest::collection::vec(statements, 0..4)
        .prop_map(|v| format!("L: while (y) {{\n{}\n}}", v.join("\n")))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// A program that parses still parses once normalised, with none of the rewritten forms
    /// left, and nothing panics.
    #[test]
    fn normalised_programs_still_parse(code in programs()) {
        let allocator = Allocator::default();
        let parsed = Parser::new(&allocator, &code, SourceType::cjs()).parse();
        prop_assert!(!parsed.diagnostics.has_errors(), "the generator made {code}");
        let normalised = normalise(&code, SourceKind::CommonJs).unwrap();
        let allocator = Allocator::default();
        let again = Parser::new(&allocator, &normalised, SourceType::cjs()).parse();
        prop_assert!(
            !again.diagnostics.has_errors(),
            "{code}\n--- normalised ---\n{normalised}"
        );
        let mut leftovers = Leftovers::default();
        leftovers.visit_program(&again.program);
        prop_assert!(leftovers.0.is_empty(), "{:?} left in\n{normalised}", leftovers.0);
    }
}

/// Random terminating programs (every loop's test calls `tick`, which stops after 100 steps)
/// that record what they do in `out`.
fn running_programs() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just("out.push(x++);"),
        Just("if (x % 3 === 0) continue;"),
        Just("if (x % 4 === 1) break;"),
        Just("if (x % 5 === 2) continue L;"),
        Just("if (x % 7 === 3) break L;"),
        Just("{ const { p, ...q } = o; out.push(p, Object.keys(q).join()); }"),
        Just("{ let [m = 1, , ...n] = xs; out.push(m.length, n.length); }"),
        Just("f(() => { for (;;) { out.push('f'); break; } });"),
        Just("out.push((({ p: z }, [w = 2] = [], k = z) => z + w + k)(o));"),
    ]
    .prop_map(String::from);
    let statements = leaf.prop_recursive(3, 32, 4, |inner| {
        let block = proptest::collection::vec(inner, 1..4).prop_map(|v| v.join("\n"));
        prop_oneof![
            block.clone().prop_map(|b| format!(
                "for (let i = 0; i < 3 && tick(); i++) {{\nout.push('i' + i);\n{b}\n}}"
            )),
            block.clone().prop_map(|b| format!(
                "for (const [a, {{ b = 1 }}] of xs) {{\nout.push(a, b);\n{b}\n}}"
            )),
            block
                .clone()
                .prop_map(|b| format!("do {{\n{b}\n}} while (tick() && x % 4);")),
            block
                .clone()
                .prop_map(|b| format!("while (tick() && x % 5) {{\n{b}\n}}")),
            (block.clone(), block.clone())
                .prop_map(|(a, b)| format!("switch (x % 3) {{ case 1:\n{a}\ndefault:\n{b}\n}}")),
            block.prop_map(|b| format!("if (x % 2) {{\n{b}\n}}")),
        ]
    });
    proptest::collection::vec(statements, 1..4).prop_map(|v| {
        format!(
            "let x = 0, steps = 0;\nconst out = [];\nconst o = {{ p: 1, r: 2, s: 3 }};\n\
             const xs = [[1, {{}}], [2, {{ b: 5 }}], [3, {{ b: undefined }}]];\n\
             function tick() {{ return ++steps < 100; }}\nfunction f(g) {{ g(); }}\n\
             L: while (tick()) {{\n{}\n}}\nconsole.log(JSON.stringify(out), x, steps);\n",
            v.join("\n")
        )
    })
}

proptest! {
    // Two Node runs per case: a few cases keep the test to seconds.
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// Random programs print the same in Node as written and normalised.
    #[test]
    fn normalised_programs_behave_the_same(code in running_programs()) {
        same_in_node(&code);
    }
}
