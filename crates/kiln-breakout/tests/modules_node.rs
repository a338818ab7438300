//! A package's own modules on the fast path: a relative `require` (Node's resolution, one
//! instance per resolved file, `module.exports` and `exports`, JSON files, a cycle), and
//! `process.env`. Each package is traced in Node, compiled with its files and environment,
//! and run on the fast path against Node's answers.

use std::fs;

mod common;

use common::fast::*;
use common::*;
use kiln_breakout::compile::{compile, CompileOptions};
use kiln_breakout::exec::{FastPathEngine, Limits, Outcome};
use kiln_breakout::instrument::instrument_dir;
use serde_json::json;

#[test]
fn authorize_loads_its_own_module_and_runs_fast() {
    if !node_available() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    stage_benchmark("authorize", &work.path().join("plain"), &|text, _| {
        text.to_string()
    });
    let training = json!([
        {"username": "user3", "password": "store-secret-21"},
        {"username": "user4", "password": "nope"},
        {"username": "nobody", "password": "x"},
        {"username": 3},
    ]);
    let loaded = trace_and_load(work.path(), "authorize", &training, &[]).unwrap();
    let mut events = Vec::new();
    for i in 0..60 {
        events.push(
            json!({"username": format!("user{i}"), "password": format!("store-secret-{}", i * 7)}),
        );
        events.push(json!({"username": format!("user{i}"), "password": "wrong"}));
    }
    events.push(json!({"username": "user1"}));
    events.push(json!({}));
    let outcomes = compare(work.path(), "authorize", &loaded, &events, &[]);
    assert_eq!(served(&outcomes), events.len(), "{outcomes:?}");
}

const MODULES_INDEX: &str = r#"
const counter = require("./lib/counter");
const again = require("./lib/counter.js");
const lib = require("./lib");
const config = require("./config.json");
const same = require("./config");
const a = require("./cycle/a");
exports.handler = async (event) => {
  // One instance: the three bumps land on one counter (which requests share in Node).
  const before = counter.count();
  counter.bump();
  lib.bumpTwice();
  const greeting = process.env.GREETING || "hello";
  const region = event.region ? process.env.AWS_REGION : "none";
  return {
    n: counter.count() - before, same: counter === again && lib.counter === counter,
    config, sameConfig: config === same, cycle: a.seen, greeting, missing: process.env.NOT_SET,
    region, name: lib.name,
  };
};
"#;

const MODULES_COUNTER: &str = r#"
let n = 0;
exports.bump = function () { n += 1; return n; };
exports.count = () => n;
"#;

const MODULES_LIB: &str = r#"
const counter = require("./counter");
module.exports = { counter, bumpTwice() { counter.bump(); counter.bump(); }, name: "lib" };
"#;

const CYCLE_A: &str = r#"
exports.early = "a-early";
const b = require("./b");
exports.seen = b.seen;
"#;

const CYCLE_B: &str = r#"
const a = require("./a");
exports.seen = [a.early, a.seen === undefined];
"#;

#[test]
fn modules_load_once_per_resolved_file_as_node_loads_them() {
    if !node_available() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    stage(
        work.path(),
        &[
            ("index.js", MODULES_INDEX),
            ("lib/index.js", MODULES_LIB),
            ("lib/counter.js", MODULES_COUNTER),
            (
                "config.json",
                "\u{feff}{\"limit\": 3, \"names\": [\"a\", \"b\"]}",
            ),
            ("cycle/a.js", CYCLE_A),
            ("cycle/b.js", CYCLE_B),
        ],
    );
    let env = [("GREETING", "hi there")];
    let loaded = trace_and_load(work.path(), "program", &json!([{}, {"region": 1}]), &env).unwrap();
    let events = [json!({}), json!({}), json!({"region": true})];
    let outcomes = compare(work.path(), "program", &loaded, &events, &env);
    assert_eq!(served(&outcomes[..2]), 2, "{outcomes:?}");
    // A variable the platform sets is not the fast path's to answer.
    match &outcomes[2] {
        Outcome::Miss { reason, .. } => assert!(reason.contains("AWS_REGION"), "{reason}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_require_the_package_cannot_satisfy_or_made_by_a_request_misses() {
    if !node_available() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    stage(
        work.path(),
        &[
            (
                "index.js",
                r#"exports.handler = async (event) => {
  if (event.lazy) { return require("./lazy").value; }
  return "eager";
};"#,
            ),
            ("lazy.js", "exports.value = 'lazy';"),
        ],
    );
    let loaded = trace_and_load(work.path(), "program", &json!([{}, {"lazy": true}]), &[]).unwrap();
    let outcomes = compare(
        work.path(),
        "program",
        &loaded,
        &[json!({}), json!({"lazy": 1})],
        &[],
    );
    assert!(matches!(outcomes[0], Outcome::Answer(_)));
    match &outcomes[1] {
        Outcome::Miss { reason, .. } => {
            assert!(reason.contains("first loaded by a request"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    // Without the package's files, a relative require misses where it runs (here: at load).
    let work = tempfile::tempdir().unwrap();
    stage(
        work.path(),
        &[
            (
                "index.js",
                "const x = require('./x'); exports.handler = async () => x;",
            ),
            ("x.js", "module.exports = 1;"),
        ],
    );
    let plain = work.path().join("plain");
    let traced = work.path().join("traced");
    instrument_dir(&plain, &traced).unwrap();
    let dump = work.path().join("trace.json");
    let runtime = crate_dir().join("../../runtimes/nodejs/breakout.js");
    drive_inputs(
        work.path(),
        &traced,
        "program",
        "[{}]",
        &["--require", runtime.to_str().unwrap()],
        &[("KILN_BREAKOUT_DUMP", &dump)],
    );
    let trace = kiln_breakout::trace::parse(&fs::read(&dump).unwrap()).unwrap();
    let bytes = compile(&trace, &CompileOptions::default()).unwrap();
    let engine = FastPathEngine::new(Limits::default()).unwrap();
    let error = engine
        .load(&bytes)
        .err()
        .expect("a miss at load")
        .to_string();
    assert!(
        error.contains("the package's files are not known"),
        "{error}"
    );
}
