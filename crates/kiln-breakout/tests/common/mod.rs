//! Shared by the tests: the benchmark packages staged with a stand-in S3 client, a driver that
//! feeds each handler its inputs in Node, a package traced in Node and its trace compiled and
//! loaded, an outcome's miss or error, and a normalised text checked for its form. `fast.rs`
//! runs packages of several files with a store against Node.
#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

pub mod fast;

use kiln_breakout::compile::{compile, CompileOptions};
use kiln_breakout::exec::{FastPathEngine, Limits, Loaded, Outcome};
use kiln_breakout::instrument::instrument_dir;
use kiln_breakout::normalise::normalise;
use kiln_breakout::trace::Trace;
use kiln_breakout::SourceKind;
use oxc_allocator::Allocator;
use oxc_ast::ast::Program;
use oxc_parser::Parser;
use oxc_span::SourceType;
use proptest::prelude::*;
use serde_json::Value;

pub fn node_available() -> bool {
    let found = Command::new("node").arg("--version").output().is_ok();
    if !found {
        eprintln!("skipped: `node` is not installed, so programs cannot be compared");
    }
    found
}

/// Runs `node ARGS` in `dir` and returns what it printed; panics when it fails.
pub fn node(dir: &Path, args: &[&str]) -> String {
    node_with_env(dir, args, &[])
}

/// [`node`] with environment variables set.
pub fn node_with_env(dir: &Path, args: &[&str], env: &[(&str, &Path)]) -> String {
    let output = Command::new("node")
        .args(args)
        .envs(env.iter().map(|(k, v)| (*k, *v)))
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

/// The line `drive.mjs` prints for a function error: `error NAME: MESSAGE` (a thrown value
/// that is not an error has neither).
pub fn error_line(error: &kiln_breakout::runtime::thrown::FunctionError) -> String {
    let body: serde_json::Value = serde_json::from_str(&error.body).unwrap();
    if body["trace"].as_array().is_some_and(|t| t.is_empty()) {
        return "error undefined: undefined".to_string();
    }
    format!(
        "error {}: {}",
        body["errorType"].as_str().unwrap(),
        body["errorMessage"].as_str().unwrap()
    )
}

pub fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs benchmark `name`'s handler, staged in `package`, over its inputs; `node_args` go
/// before the driver (`--require` the tracing runtime, say). Returns what the driver printed.
pub fn drive(work: &Path, package: &Path, name: &str, node_args: &[&str]) -> String {
    drive_with_env(work, package, name, node_args, &[])
}

/// [`drive`] with environment variables set.
pub fn drive_with_env(
    work: &Path,
    package: &Path,
    name: &str,
    node_args: &[&str],
    env: &[(&str, &Path)],
) -> String {
    drive_inputs(work, package, name, benchmark_inputs(name), node_args, env)
}

/// [`drive_with_env`] over the given inputs (a JSON array of events).
pub fn drive_inputs(
    work: &Path,
    package: &Path,
    name: &str,
    inputs_json: &str,
    node_args: &[&str],
    env: &[(&str, &Path)],
) -> String {
    let inputs = work.join("inputs.json");
    fs::write(&inputs, inputs_json).unwrap();
    let driver = work.join("drive.mjs");
    fs::copy(crate_dir().join("tests/common/drive.mjs"), &driver).unwrap();
    let handler = package.join(handler_file(name));
    let mut args: Vec<&str> = node_args.to_vec();
    args.extend([
        driver.to_str().unwrap(),
        handler.to_str().unwrap(),
        inputs.to_str().unwrap(),
    ]);
    node_with_env(work, &args, env)
}

/// Instruments the package in `work/plain` into `work/traced` and runs `name`'s handler there
/// under the tracing runtime over `training`, with `env` set: the trace tree it dumped.
pub fn trace_in_node(work: &Path, name: &str, training: &Value, env: &[(&str, &Path)]) -> Trace {
    let plain = work.join("plain");
    let traced = work.join("traced");
    instrument_dir(&plain, &traced).unwrap();
    let dump = work.join("trace.json");
    let runtime = crate_dir().join("../../runtimes/nodejs/breakout.js");
    let mut vars = env.to_vec();
    vars.push(("KILN_BREAKOUT_DUMP", &dump));
    drive_inputs(
        work,
        &traced,
        name,
        &training.to_string(),
        &["--require", runtime.to_str().unwrap()],
        &vars,
    );
    kiln_breakout::trace::parse(&fs::read(&dump).unwrap()).unwrap()
}

/// Compiles `trace`, checks that the module is valid, and loads it with the default limits.
pub fn compile_and_load(trace: &Trace, options: &CompileOptions) -> Result<Loaded, String> {
    let bytes = compile(trace, options).unwrap();
    wasmparser::validate(&bytes).unwrap();
    let engine = FastPathEngine::new(Limits::default()).unwrap();
    engine.load(&bytes).map_err(|e| e.to_string())
}

/// What Node answers to each event, the package in `work/plain` run with `env` set: the line
/// `drive.mjs` prints (the answer's JSON, or the error).
pub fn node_answers(
    work: &Path,
    name: &str,
    events: &[Value],
    env: &[(&str, &str)],
) -> Vec<String> {
    let vars: Vec<(&str, &Path)> = env.iter().map(|(k, v)| (*k, Path::new(*v))).collect();
    let out = drive_inputs(
        work,
        &work.join("plain"),
        name,
        &Value::from(events.to_vec()).to_string(),
        &[],
        &vars,
    );
    out.lines().take(events.len()).map(String::from).collect()
}

/// Why the fast path missed, if it did.
pub fn miss_reason(outcome: &Outcome) -> Option<&str> {
    match outcome {
        Outcome::Miss { reason, .. } => Some(reason),
        Outcome::Answer(_) | Outcome::Error(_) => None,
    }
}

/// Why the fast path missed; panics when it did not.
pub fn miss(outcome: &Outcome) -> &str {
    miss_reason(outcome).unwrap_or_else(|| panic!("{outcome:?}"))
}

/// The function error the fast path answered, as [`error_line`]; panics when it did not.
pub fn error(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Error(error) => error_line(error),
        other => panic!("{other:?}"),
    }
}

/// Normalises `text`, asserting that the result parses and that `leftovers` finds nothing in
/// it (what the normal form should not hold); the normalised text.
#[track_caller]
pub fn normalised_checked(
    text: &str,
    kind: SourceKind,
    leftovers: impl FnOnce(&Program) -> Vec<String>,
) -> String {
    let normalised = normalise(text, kind).unwrap();
    let source_type = match kind {
        SourceKind::CommonJs => SourceType::cjs(),
        SourceKind::Module => SourceType::mjs(),
    };
    let allocator = Allocator::default();
    let parsed = Parser::new(&allocator, &normalised, source_type).parse();
    assert!(
        !parsed.diagnostics.has_errors(),
        "the normalised program does not parse: {:?}\n{normalised}",
        parsed
            .diagnostics
            .errors()
            .map(|e| e.message.to_string())
            .collect::<Vec<_>>()
    );
    let found = leftovers(&parsed.program);
    assert!(
        found.is_empty(),
        "left in the normalised program: {found:?}\n{normalised}"
    );
    normalised
}

/// The inputs each benchmark handler is driven with: on and off its usual paths.
fn benchmark_inputs(name: &str) -> &'static str {
    match name {
        "authorize" => {
            r#"[{"username":"user3","password":"store-secret-21"},{"username":"user4","password":"event-secret-4711"},{"username":"user3","password":"x"},{"username":"nobody","password":"pw0"},{"username":3},{}]"#
        }
        "upload" => {
            r#"[{"name":"a.txt","body":"event-secret-body"},{"body":"no name"},{"name":"b"},{}]"#
        }
        "status" => {
            r#"[{"repo":"kiln","sha":"abcdef1","state":"success","target_url":"u","context":"ci"},{"repo":"kiln","sha":"1234567","state":"failure","target_url":"u","context":"lint"},{"repo":"kiln","sha":"abcdef1","state":"odd","target_url":"u","context":"ci"},{"repo":"kiln","sha":"zz","state":"success","target_url":"u","context":"ci"},{"repo":"kiln","sha":"fffffff","state":"success","target_url":"u","context":"ci"},{"repo":1}]"#
        }
        "banking" => {
            r#"[{"account":"a","op":"deposit","amount":500},{"account":"a","op":"withdraw","amount":200},{"account":"a","op":"withdraw","amount":900},{"account":"a","op":"balance"},{"account":"b","op":"steal","amount":1},{"account":"a","op":"deposit","amount":1.5}]"#
        }
        "autocomplete" => r#"[{"prefix":"ab"},{"prefix":"AC"},{"prefix":"zzz"},{}]"#,
        "maze" => {
            r#"[{"x1":0,"y1":0,"x2":29,"y2":29},{"x1":0,"y1":0,"x2":0,"y2":0},{"x1":3,"y1":0,"x2":5,"y2":5},{"x1":-1,"y1":0,"x2":5,"y2":5},{"x1":2,"y1":10,"x2":28,"y2":1}]"#
        }
        "shift" => r#"[{"n":0},{"n":10},{"n":1000}]"#,
        _ => "[{}]",
    }
}

/// A copy of a benchmark package, normalised or not, with the S3 stand-in installed.
pub fn stage_benchmark(name: &str, into: &Path, transform: &dyn Fn(&str, SourceKind) -> String) {
    let from = crate_dir().join("tests/fixtures").join(name);
    copy_tree(&from, into, transform);
    install_s3_stand_in(into);
}

/// The S3 stand-in as `node_modules/@aws-sdk/client-s3` of the package in `into`.
pub fn install_s3_stand_in(into: &Path) {
    let sdk = into.join("node_modules/@aws-sdk/client-s3");
    fs::create_dir_all(&sdk).unwrap();
    fs::copy(
        crate_dir().join("tests/common/client-s3.js"),
        sdk.join("index.js"),
    )
    .unwrap();
    fs::write(
        sdk.join("package.json"),
        r#"{"name":"@aws-sdk/client-s3","main":"index.js"}"#,
    )
    .unwrap();
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

pub const BENCHMARKS: [&str; 7] = [
    "authorize",
    "upload",
    "status",
    "banking",
    "autocomplete",
    "maze",
    "shift",
];

/// The corpus programs: each path, and whether it is in the supported subset (`sites/` holds
/// programs with constructs outside it).
pub fn corpus() -> Vec<(PathBuf, bool)> {
    let mut out = Vec::new();
    for (dir, in_subset) in [("tests/corpus", true), ("tests/corpus/sites", false)] {
        let mut paths: Vec<PathBuf> = fs::read_dir(crate_dir().join(dir))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "js"))
            .collect();
        paths.sort();
        out.extend(paths.into_iter().map(|p| (p, in_subset)));
    }
    out
}

/// A program that evaluates two generated expressions with logged operands and prints what
/// happened: the harness of the property tests that compare runs.
pub fn logged_program(e: &str, s: &str) -> String {
    format!(
        "const log = []; let x = 1; const o = {{ p: 0 }};\n\
         function f(tag, value) {{ log.push(tag); return value; }}\n\
         let result; try {{ result = {e}; if ({s}) {{ log.push(\"then\"); }} }} catch (error) {{ result = error.constructor.name; }}\n\
         console.log([result, x, o.p, log].map((v) => typeof v === \"object\" && v !== null ? \"object\" : String(v)).join(\" \"));\n"
    )
}

/// Expressions whose every operand logs when it is evaluated, so a difference in order or in
/// short-circuiting shows in the output.
pub fn logged_expression() -> impl Strategy<Value = String> {
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
            inner.clone().prop_map(|a| format!("((y) => y ?? {a})(x)")),
            inner
                .clone()
                .prop_map(|a| format!("({{ k: {a}, m() {{ return this.k; }} }}).m()")),
            inner
                .clone()
                .prop_map(|a| format!("new (class {{ constructor(v) {{ this.v = v; }} }})({a}).v")),
        ]
    })
}
