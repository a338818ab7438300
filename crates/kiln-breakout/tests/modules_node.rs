//! A package's own modules on the fast path: a relative `require` (Node's resolution, one
//! instance per resolved file, `module.exports` and `exports`, JSON files, a cycle), and
//! `process.env`. Each package is traced in Node, compiled with its files and environment,
//! and run on the fast path against Node's answers.

use std::collections::HashMap;
use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

mod support;

use kiln_breakout::compile::{compile, CompileOptions};
use kiln_breakout::exec::{FastPathEngine, Limits, Loaded, Outcome};
use kiln_breakout::instrument::instrument_dir;
use kiln_breakout::package::{Environment, Package};
use kiln_breakout::runtime::{Intrinsics, Miss};
use serde_json::{json, Value};
use support::*;

/// The objects `drive.mjs` puts in its stand-in store, for the fast path's side.
struct Store {
    objects: HashMap<String, String>,
    request: usize,
}

impl Store {
    fn new(request: usize) -> Store {
        let users: Vec<Value> = (0..50)
            .map(|i| json!({"username": format!("user{i}"), "password": format!("store-secret-{}", i * 7)}))
            .collect();
        let mut objects = HashMap::new();
        objects.insert(
            "users/users.json".to_string(),
            Value::from(users).to_string(),
        );
        Store { objects, request }
    }
}

impl Intrinsics for Store {
    fn call(&mut self, name: &str, args: &[Value]) -> Result<Value, Miss> {
        let path = format!(
            "{}/{}",
            args[0]["Bucket"].as_str().unwrap_or_default(),
            args[0]["Key"].as_str().unwrap_or_default()
        );
        match name {
            "s3.GetObject" => match self.objects.get(&path) {
                Some(body) => Ok(json!({"Body": body, "LastModified": "2024-01-01T00:00:00.000Z"})),
                None => Err(Miss::new("NoSuchKey")),
            },
            _ => Err(Miss::new(format!("{name} not in this store"))),
        }
    }

    fn context(&mut self) -> Result<Value, Miss> {
        Ok(json!({"awsRequestId": format!("req-{}", self.request)}))
    }
}

/// Stages `files` (with the S3 stand-in) as a package in `work/plain`.
fn stage(work: &Path, files: &[(&str, &str)]) {
    let plain = work.join("plain");
    install_s3_stand_in(&plain);
    for (path, text) in files {
        let file = plain.join(path);
        fs::create_dir_all(file.parent().unwrap()).unwrap();
        fs::write(file, text).unwrap();
    }
}

/// Instruments and traces the package in `work/plain` on `training`, then compiles it with
/// its files and `env` (also the environment Node runs with).
fn trace_and_load(
    work: &Path,
    name: &str,
    training: &Value,
    env: &[(&str, &str)],
) -> Result<Loaded, String> {
    let plain = work.join("plain");
    let traced = work.join("traced");
    instrument_dir(&plain, &traced).unwrap();
    let dump = work.join("trace.json");
    let runtime = crate_dir().join("../../runtimes/nodejs/breakout.js");
    let mut vars: Vec<(&str, &Path)> = env.iter().map(|(k, v)| (*k, Path::new(*v))).collect();
    vars.push(("KILN_BREAKOUT_DUMP", &dump));
    drive_inputs(
        work,
        &traced,
        name,
        &training.to_string(),
        &["--require", runtime.to_str().unwrap()],
        &vars,
    );
    let trace = kiln_breakout::trace::parse(&fs::read(&dump).unwrap()).unwrap();
    let options = CompileOptions {
        package: Some(Arc::new(Package::read(&traced).unwrap())),
        env: Some(Environment {
            vars: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            platform: vec!["AWS_*".into()],
        }),
        ..CompileOptions::default()
    };
    let bytes = compile(&trace, &options).unwrap();
    wasmparser::validate(&bytes).unwrap();
    let engine = FastPathEngine::new(Limits::default()).unwrap();
    engine.load(&bytes).map_err(|e| e.to_string())
}

/// Node's answer to each event (`drive.mjs`'s lines).
fn node_answers(work: &Path, name: &str, events: &[Value], env: &[(&str, &str)]) -> Vec<String> {
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

/// Runs each event on the fast path: an answer must be Node's. Returns the outcomes.
fn compare(
    work: &Path,
    name: &str,
    loaded: &Loaded,
    events: &[Value],
    env: &[(&str, &str)],
) -> Vec<Outcome> {
    let expected = node_answers(work, name, events, env);
    assert_eq!(expected.len(), events.len());
    let mut outcomes = Vec::new();
    for (i, (event, node)) in events.iter().zip(&expected).enumerate() {
        let outcome = loaded.run(
            event.to_string().as_bytes(),
            Box::new(Store::new(i)),
            Duration::from_secs(20),
        );
        if let Outcome::Answer(bytes) = &outcome {
            assert_eq!(
                String::from_utf8_lossy(bytes),
                *node,
                "{name}: the fast path answered {event} differently"
            );
        }
        outcomes.push(outcome);
    }
    outcomes
}

fn served(outcomes: &[Outcome]) -> usize {
    outcomes
        .iter()
        .filter(|o| matches!(o, Outcome::Answer(_)))
        .count()
}

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
