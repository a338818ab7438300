//! Instrumentation and the tracing runtime together: each benchmark package, instrumented and
//! run under `runtimes/nodejs/breakout.js`, answers exactly as written, and the trace tree it
//! dumps holds code and types, never a value from an event or the store. A ☠ site costs only
//! the path it is on.

use std::fs;
use std::path::{Path, PathBuf};

mod common;

use common::*;
use kiln_breakout::instrument::instrument_dir;
use proptest::prelude::*;
use serde_json::Value;

fn runtime() -> PathBuf {
    crate_dir().join("../../runtimes/nodejs/breakout.js")
}

/// Runs benchmark `name` plain and instrumented; returns both outputs and the dumped tree.
fn plain_and_traced(work: &Path, name: &str) -> (String, String, String) {
    let plain = work.join("plain");
    stage_benchmark(name, &plain, &|text, _| text.to_string());
    let traced = work.join("traced");
    let report = instrument_dir(&plain, &traced).unwrap();
    assert!(
        report.left.is_empty(),
        "{name}: files left: {:?}",
        report.left
    );
    let expected = drive(work, &plain, name, &[]);
    let dump = work.join("trace.json");
    let runtime = runtime();
    let actual = drive_with_env(
        work,
        &traced,
        name,
        &["--require", runtime.to_str().unwrap()],
        &[("KILN_BREAKOUT_DUMP", &dump)],
    );
    (expected, actual, fs::read_to_string(&dump).unwrap())
}

/// Counts the nodes of a dumped tree by kind.
fn count(value: &Value, kind: &str) -> usize {
    match value {
        Value::Object(map) => {
            let here = usize::from(map.get("kind").and_then(Value::as_str) == Some(kind));
            here + map.values().map(|v| count(v, kind)).sum::<usize>()
        }
        Value::Array(items) => items.iter().map(|v| count(v, kind)).sum(),
        _ => 0,
    }
}

/// Whether some `if` of the tree has both branches traced.
fn both_branches(value: &Value) -> bool {
    match value {
        Value::Object(map) => {
            let here = map.get("kind").and_then(Value::as_str) == Some("if")
                && map.get("then").is_some_and(|t| !t.is_null())
                && map.get("else").is_some_and(|e| !e.is_null());
            here || map.values().any(both_branches)
        }
        Value::Array(items) => items.iter().any(both_branches),
        _ => false,
    }
}

#[test]
fn instrumented_benchmarks_answer_as_written_and_dump_a_tree() {
    if !node_available() {
        return;
    }
    for name in BENCHMARKS {
        let work = tempfile::tempdir().unwrap();
        let (expected, actual, dump) = plain_and_traced(work.path(), name);
        assert_eq!(
            actual, expected,
            "{name}: tracing changed what the handler did"
        );
        if let Err(error) = kiln_breakout::trace::parse(dump.as_bytes()) {
            panic!("{name}: the validator refuses the tree: {error}\n{dump}");
        }
        let tree: Value = serde_json::from_str(&dump).unwrap();
        assert_eq!(tree["version"], 1);
        let handlers = tree["handlers"].as_array().unwrap();
        assert!(
            handlers
                .iter()
                .any(|h| h["fn"].as_str().unwrap().starts_with("init:")),
            "{name}: no module handler"
        );
        assert!(handlers.len() >= 2, "{name}: no request handler: {dump}");
        assert!(count(&tree, "return") > 0, "{name}: {dump}");
        assert_eq!(tree["conflicts"], Value::Array(vec![]), "{name}: {dump}");
        // Runs merge into one tree (Fig. 7): inputs on both sides of a branch trace both.
        assert!(
            both_branches(&tree),
            "{name}: no `if` traced both ways: {dump}"
        );
        // Values from events and from the store never reach the tree.
        for secret in ["event-secret", "store-secret", "no name"] {
            assert!(!dump.contains(secret), "{name}: the trace holds {secret:?}");
        }
    }
}

#[test]
fn a_site_on_a_rare_path_is_unsupported_only_on_that_path() {
    if !node_available() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let package = work.path().join("package");
    fs::create_dir_all(&package).unwrap();
    fs::write(
        package.join("index.js"),
        "exports.handler = async (event) => {\n  if (event.debug) {\n    return eval(event.debug);\n  }\n  return event.n * 2;\n};\n",
    )
    .unwrap();
    let traced = work.path().join("traced");
    let report = instrument_dir(&package, &traced).unwrap();
    assert_eq!(report.sites.len(), 1);
    let runtime = runtime();
    let run = |inputs: &str| {
        let dump = work.path().join("trace.json");
        fs::write(
            work.path().join("run.js"),
            format!(
                "const {{ handler }} = require({:?});\n(async () => {{ for (const e of {inputs}) console.log(await handler(e)); }})();\n",
                traced.join("index.js")
            ),
        )
        .unwrap();
        let out = node_with_env(
            work.path(),
            &["--require", runtime.to_str().unwrap(), "run.js"],
            &[("KILN_BREAKOUT_DUMP", &dump)],
        );
        (out, fs::read_to_string(&dump).unwrap())
    };
    let (out, dump) = run(r#"[{"n": 2}, {"n": 5}]"#);
    assert_eq!(out, "4\n10\n");
    assert!(!dump.contains("unsupported"), "{dump}");
    let (out, dump) = run(r#"[{"n": 2}, {"debug": "40 + 2"}]"#);
    assert_eq!(out, "4\n42\n");
    assert!(
        dump.contains(r#""kind":"unsupported","reason":"eval: "#),
        "{dump}"
    );
    assert!(dump.contains(r#""at":"index.js:3:12""#), "{dump}");
    assert!(!dump.contains("40 + 2"), "{dump}");
}

/// Runs `program` as written and instrumented under the runtime; returns both outputs and the
/// dumped tree (which must validate).
fn program_plain_and_traced(program: &str) -> (String, String, String) {
    let work = tempfile::tempdir().unwrap();
    let package = work.path().join("package");
    fs::create_dir_all(&package).unwrap();
    fs::write(package.join("main.js"), program).unwrap();
    let traced = work.path().join("traced");
    instrument_dir(&package, &traced).unwrap();
    let expected = node(&package, &["main.js"]);
    let dump = work.path().join("trace.json");
    let runtime = runtime();
    let actual = node_with_env(
        &traced,
        &["--require", runtime.to_str().unwrap(), "main.js"],
        &[("KILN_BREAKOUT_DUMP", &dump)],
    );
    let dump = fs::read_to_string(&dump).unwrap();
    if let Err(error) = kiln_breakout::trace::parse(dump.as_bytes()) {
        panic!("the validator refuses the tree: {error}\n{dump}");
    }
    (expected, actual, dump)
}

#[test]
fn corpus_programs_print_the_same_traced() {
    if !node_available() {
        return;
    }
    for (path, _) in corpus() {
        let program = fs::read_to_string(&path).unwrap();
        let (expected, actual, _) = program_plain_and_traced(&program);
        assert_eq!(actual, expected, "{} differs traced", path.display());
    }
}

#[test]
fn a_call_site_that_calls_two_functions_is_a_conflict_and_behaves_the_same() {
    if !node_available() {
        return;
    }
    let program = "function double(x) { return x * 2; }\nfunction negate(x) { return -x; }\n\
                   const out = [];\nfor (const f of [double, negate, double, Math.abs]) { out.push(f(-3)); }\n\
                   console.log(out.join());\n";
    let (expected, actual, dump) = program_plain_and_traced(program);
    assert_eq!(actual, expected);
    let tree: Value = serde_json::from_str(&dump).unwrap();
    let conflicts = tree["conflicts"].as_array().unwrap();
    assert!(!conflicts.is_empty(), "{dump}");
    // The first call's inlined body, with the type its result had.
    assert!(dump.contains(r#""fn":"main.js#1""#), "{dump}");
    assert!(count(&tree, "named") >= 1, "{dump}");
}

#[test]
fn deeply_nested_code_is_instrumented_on_a_large_stack_and_behaves_the_same() {
    if !node_available() {
        return;
    }
    let program = format!(
        "const x = {}1{};\nlet y = 1;\n{}y = 2;{}\nconsole.log(JSON.stringify(x).length, y);\n",
        "[".repeat(900),
        "]".repeat(900),
        "if (y) {".repeat(200),
        "}".repeat(200)
    );
    let work = tempfile::tempdir().unwrap();
    let package = work.path().join("package");
    fs::create_dir_all(&package).unwrap();
    fs::write(package.join("main.js"), &program).unwrap();
    let traced = work.path().join("traced");
    instrument_dir(&package, &traced).unwrap();
    let runtime = runtime();
    let expected = node(&package, &["main.js"]);
    let actual = node(
        &traced,
        &["--require", runtime.to_str().unwrap(), "main.js"],
    );
    assert_eq!(actual, expected);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    #[test]
    fn generated_programs_behave_the_same_traced(e in logged_expression(), s in logged_expression()) {
        if !node_available() {
            return Ok(());
        }
        let (expected, actual, _) = program_plain_and_traced(&logged_program(&e, &s));
        prop_assert_eq!(actual, expected);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn instrumenting_any_text_never_panics_and_yields_code_that_parses(text in "\\PC{0,200}") {
        use kiln_breakout::SourceKind;
        if let Ok(out) = kiln_breakout::instrument::instrument_source("a.js", &text, SourceKind::CommonJs, &[]) {
            let allocator = oxc_allocator::Allocator::default();
            let parsed = oxc_parser::Parser::new(&allocator, &out, oxc_span::SourceType::cjs()).parse();
            prop_assert!(!parsed.diagnostics.has_errors(), "{text:?} instrumented to {out:?}");
        }
    }

    #[test]
    fn generated_programs_instrument_into_code_that_parses(e in logged_expression(), s in logged_expression()) {
        use kiln_breakout::SourceKind;
        let program = logged_program(&e, &s);
        let out = kiln_breakout::instrument::instrument_source("a.js", &program, SourceKind::CommonJs, &[]).unwrap();
        let allocator = oxc_allocator::Allocator::default();
        let parsed = oxc_parser::Parser::new(&allocator, &out, oxc_span::SourceType::cjs()).parse();
        prop_assert!(!parsed.diagnostics.has_errors(), "{out}");
    }
}

#[test]
fn a_hashbang_stays_the_first_line() {
    use kiln_breakout::SourceKind;
    for text in [
        "#!",
        "#!/usr/bin/env node\nexports.x = 1;\n",
        "#!node\n'use strict';\nlet a = 1;\n",
    ] {
        let out =
            kiln_breakout::instrument::instrument_source("a.js", text, SourceKind::CommonJs, &[])
                .unwrap();
        assert!(out.starts_with("#!"), "{out}");
        let allocator = oxc_allocator::Allocator::default();
        let parsed = oxc_parser::Parser::new(&allocator, &out, oxc_span::SourceType::cjs()).parse();
        assert!(
            !parsed.diagnostics.has_errors(),
            "{text:?} instrumented to {out:?}"
        );
    }
}
