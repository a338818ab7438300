//! The trace compiler end to end: each pure-compute benchmark is instrumented, traced in Node
//! on a training set, compiled, and run on the fast path over many events, on and off the
//! traced paths. Every answer is Node's, byte for byte, or a miss; events on the traced
//! paths are served.

use std::fs;
use std::path::Path;
use std::time::Duration;

mod support;

use kiln_breakout::compile::{compile, CompileOptions};
use kiln_breakout::exec::{FastPathEngine, Limits, Loaded, Outcome};
use kiln_breakout::instrument::instrument_dir;
use kiln_breakout::runtime::NoIntrinsics;
use serde_json::{json, Value};
use support::*;

/// A small deterministic generator (xorshift), so a failure names its events.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Traces benchmark `name` on `training`, compiles the trace and loads the module.
fn trace_and_load(work: &Path, name: &str, training: &Value) -> Loaded {
    let plain = work.join("plain");
    stage_benchmark(name, &plain, &|text, _| text.to_string());
    let traced = work.join("traced");
    instrument_dir(&plain, &traced).unwrap();
    let dump = work.join("trace.json");
    let runtime = crate_dir().join("../../runtimes/nodejs/breakout.js");
    drive_inputs(
        work,
        &traced,
        name,
        &training.to_string(),
        &["--require", runtime.to_str().unwrap()],
        &[("KILN_BREAKOUT_DUMP", &dump)],
    );
    let trace = kiln_breakout::trace::parse(&fs::read(&dump).unwrap()).unwrap();
    let bytes = compile(&trace, &CompileOptions::default()).unwrap();
    wasmparser::validate(&bytes).unwrap();
    let engine = FastPathEngine::new(Limits::default()).unwrap();
    engine.load(&bytes).unwrap()
}

/// What Node answers to each event: the line `drive.mjs` prints (the answer's JSON, or the
/// error).
fn node_answers(work: &Path, name: &str, events: &[Value]) -> Vec<String> {
    let plain = work.join("plain");
    let out = drive_inputs(
        work,
        &plain,
        name,
        &Value::from(events.to_vec()).to_string(),
        &[],
        &[],
    );
    out.lines().take(events.len()).map(String::from).collect()
}

/// Runs every event on the fast path against Node: every answer must be Node's, and at least
/// 90% of the events `on_trace` picks must be served.
fn compare(name: &str, training: Value, events: Vec<Value>, on_trace: &dyn Fn(&Value) -> bool) {
    if !node_available() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let loaded = trace_and_load(work.path(), name, &training);
    let expected = node_answers(work.path(), name, &events);
    assert_eq!(expected.len(), events.len());
    let (mut on, mut served_on, mut served) = (0, 0, 0);
    for (event, node) in events.iter().zip(&expected) {
        let outcome = loaded.run(
            event.to_string().as_bytes(),
            Box::new(NoIntrinsics),
            Duration::from_secs(20),
        );
        let hit = match &outcome {
            Outcome::Answer(bytes) => {
                assert_eq!(
                    String::from_utf8_lossy(bytes),
                    *node,
                    "{name}: the fast path answered {event} differently"
                );
                true
            }
            Outcome::Miss { .. } => false,
        };
        served += usize::from(hit);
        if on_trace(event) {
            on += 1;
            served_on += usize::from(hit);
        }
    }
    eprintln!(
        "{name}: {served} of {} events served, {served_on} of {on} on the traced paths",
        events.len()
    );
    assert!(on > 0, "{name}: no event on the traced paths");
    assert!(
        served_on * 10 >= on * 9,
        "{name}: only {served_on} of {on} events on the traced paths were served"
    );
}

#[test]
fn autocomplete_answers_as_node_or_misses() {
    let training = json!([{"prefix": "ab"}, {"prefix": "AC"}, {"prefix": "zzz"}, {}]);
    let mut rng = Rng(7);
    let letters = ['a', 'b', 'c', 'd', 'A', 'C', 'z', 'ä', 'İ'];
    let mut events = Vec::new();
    for _ in 0..150 {
        let len = rng.below(4) as usize;
        let prefix: String = (0..len)
            .map(|_| letters[rng.below(letters.len() as u64) as usize])
            .collect();
        events.push(json!({ "prefix": prefix }));
    }
    // Off the traced paths, or errors in Node.
    events.extend([
        json!({}),
        json!({"prefix": 5}),
        json!({"prefix": null}),
        json!({"prefix": ["a"]}),
        json!({"other": 1}),
    ]);
    compare("autocomplete", training, events, &|e| {
        e["prefix"].is_string()
    });
}

#[test]
fn maze_answers_as_node_or_misses() {
    let training = json!([
        {"x1": 0, "y1": 0, "x2": 29, "y2": 29},
        {"x1": 0, "y1": 0, "x2": 0, "y2": 0},
        {"x1": 3, "y1": 0, "x2": 5, "y2": 5},
        {"x1": -1, "y1": 0, "x2": 5, "y2": 5},
        {"x1": 2, "y1": 10, "x2": 28, "y2": 1},
        {"x1": 5, "y1": 5, "x2": 2, "y2": 3}
    ]);
    let mut rng = Rng(11);
    let mut events = Vec::new();
    for _ in 0..60 {
        let mut c = || rng.below(30) as i64;
        events.push(json!({"x1": c(), "y1": c(), "x2": c(), "y2": c()}));
    }
    events.extend([
        json!({"x1": 40, "y1": 0, "x2": 1, "y2": 1}),
        json!({"x1": 1.5, "y1": 0, "x2": 1, "y2": 1}),
        json!({"x1": "1", "y1": 0, "x2": 1, "y2": 1}),
        json!({}),
    ]);
    // In the grid and off its walls (every fourth column, but for one gap a column).
    let open = |x: &Value, y: &Value| {
        let (x, y) = (x.as_i64().unwrap_or(-1), y.as_i64().unwrap_or(-1));
        (0..30).contains(&x) && (0..30).contains(&y) && !(x % 4 == 3 && y != (x * 7) % 30)
    };
    compare("maze", training, events, &|e| {
        open(&e["x1"], &e["y1"]) && open(&e["x2"], &e["y2"])
    });
}

#[test]
fn shift_answers_as_node_or_misses() {
    let training = json!([{"n": 0}, {"n": 10}, {"n": 1000}]);
    let events = vec![
        json!({"n": 0}),
        json!({"n": 1}),
        json!({"n": 99_999}),
        json!({"n": 100_000}),
        json!({"n": 250_000}),
        json!({"n": 2.5}),
        json!({"n": "7"}),
        json!({}),
    ];
    compare("shift", training, events, &|e| e["n"].is_u64());
}
