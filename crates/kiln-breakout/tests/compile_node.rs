//! The start of the trace compiler, end to end: numeric functions are instrumented, traced in
//! Node on training inputs, their handlers compiled to wasm, and the modules run in Node's
//! WebAssembly against the JavaScript functions: on traced paths they answer the same, and on
//! paths the training never took they miss (☠).

use std::fs;

mod support;

use kiln_breakout::compile::{compile_handler, CompileError, STATUS_MISS};
use kiln_breakout::instrument::instrument_dir;
use support::*;

const PROGRAM: &str = r#"
exports.sumTo = (n) => { let total = 0; for (let i = 0; i < n; i++) { total += i; } return total; };
exports.clamp = (x, lo, hi) => { if (x < lo) { return lo; } if (x > hi) { return hi; } return x; };
exports.isSmall = (x) => x < 10 && x > -10;
exports.search = (n) => { let i = 0; found: { while (true) { if (i * i >= n) { break found; } i = i + 1; } } return i; };
exports.hyp = (a, b) => { const sq = (x) => { if (x < 0) { return -x * -x; } return x * x; }; return sq(a) + sq(b); };
"#;

/// Calls the functions in this order: handlers 1 to 5 (0 is the file's top level); `hyp`'s
/// `sq` is traced inline, not as a handler.
const TRAIN: &str = r#"
const f = require("./main.js");
for (const n of [0, 1, 5, 9]) f.sumTo(n);
for (const x of [-3, 4]) f.clamp(x, 0, 10);
for (const x of [3, 50]) f.isSmall(x);
for (const n of [0, 10, 17]) f.search(n);
for (const [a, b] of [[3, 4], [5, 12]]) f.hyp(a, b);
"#;

const RUN: &str = r#"
const fs = require("fs");
const f = require("./package/main.js");
const names = ["sumTo", "clamp", "isSmall", "search", "hyp"];
const inputs = {
  sumTo: [[0], [3], [7], [100], [2.5], [-4]],
  clamp: [[-1, 0, 10], [5, 0, 10], [0, 0, 10], [11, 0, 10], [NaN, 0, 10]],
  isSmall: [[0], [9.5], [-20], [10], [NaN]],
  search: [[0], [2], [50], [1e4]],
  hyp: [[3, 4], [1.5, 2], [0, 0], [-3, 4]],
};
for (let h = 0; h < names.length; h++) {
  const name = names[h];
  const module = new WebAssembly.Module(fs.readFileSync(`handler${h + 1}.wasm`));
  const { exports } = new WebAssembly.Instance(module, {});
  for (const args of inputs[name]) {
    const expected = f[name](...args);
    const result = exports.run(...args);
    const status = exports.status.value;
    const got = status === 3 ? result === 1 : status === 2 ? undefined : result;
    console.log(JSON.stringify({ name, args, status, same: Object.is(got, expected) }));
  }
}
"#;

#[test]
fn compiled_handlers_answer_as_javascript_on_traced_paths_and_miss_off_them() {
    if !node_available() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let source = work.path().join("source");
    fs::create_dir_all(&source).unwrap();
    fs::write(source.join("main.js"), PROGRAM).unwrap();
    let package = work.path().join("package");
    instrument_dir(&source, &package).unwrap();
    fs::write(package.join("train.js"), TRAIN).unwrap();
    let dump = work.path().join("trace.json");
    let runtime = crate_dir().join("../../runtimes/nodejs/breakout.js");
    node_with_env(
        &package,
        &["--require", runtime.to_str().unwrap(), "train.js"],
        &[("KILN_BREAKOUT_DUMP", &dump)],
    );
    let trace = kiln_breakout::trace::parse(&fs::read(&dump).unwrap()).unwrap();
    assert_eq!(trace.handlers.len(), 6, "{trace:?}");
    for id in 1..=5 {
        let bytes = compile_handler(&trace, id).unwrap_or_else(|e| panic!("handler {id}: {e}"));
        wasmparser::validate(&bytes).unwrap();
        fs::write(work.path().join(format!("handler{id}.wasm")), bytes).unwrap();
    }
    // The top level stores into `exports`: not in the compiled fragment yet.
    assert!(matches!(
        compile_handler(&trace, 0),
        Err(CompileError::Unsupported(_))
    ));
    assert_eq!(compile_handler(&trace, 9), Err(CompileError::NoHandler(9)));
    fs::write(work.path().join("run.js"), RUN).unwrap();
    // The real functions, without tracing, are the reference.
    fs::copy(source.join("main.js"), package.join("main.js")).unwrap();
    let out = node(work.path(), &["run.js"]);
    let (mut fast, mut missed) = (0, 0);
    for line in out.lines() {
        let row: serde_json::Value = serde_json::from_str(line).unwrap();
        if row["status"] == STATUS_MISS {
            missed += 1;
        } else {
            assert_eq!(row["same"], true, "{line}");
            fast += 1;
        }
    }
    // Off the traced paths: `clamp` above its range (training never took `x > hi`), `hyp` of
    // a negative number (its inlined `sq` never took `x < 0`). Every other input stays on
    // paths the training took, fractions and NaN included.
    assert!(
        out.contains(r#""name":"clamp","args":[11,0,10],"status":1"#),
        "{out}"
    );
    assert!(
        out.contains(r#""name":"hyp","args":[-3,4],"status":1"#),
        "{out}"
    );
    assert_eq!((fast, missed), (22, 2), "{out}");
}

#[test]
fn a_parameter_seen_other_than_a_number_is_refused() {
    let trace = kiln_breakout::trace::parse(
        br#"{"version": 1, "handlers": [{"id": 0, "fn": "main.js#1", "kind": "function",
            "params": ["x"], "param_types": [["int", "string"]], "async": false,
            "body": [{"kind": "return", "value": {"kind": "id", "name": "x"}, "types": ["int"]}]}]}"#,
    )
    .unwrap();
    let error = compile_handler(&trace, 0).unwrap_err().to_string();
    assert!(error.contains("`x`"), "{error}");
}
