//! The trace compiler end to end: each pure-compute benchmark is instrumented, traced in Node
//! on a training set, compiled, and run on the fast path over many events, on and off the
//! traced paths. Every answer is Node's, byte for byte, or a miss; events on the traced
//! paths are served.

use std::fs;
use std::path::Path;
use std::time::Duration;

mod common;

use common::*;
use kiln_breakout::compile::CompileOptions;
use kiln_breakout::exec::{Loaded, Outcome};
use kiln_breakout::runtime::{Intrinsics, LogLevel, Miss, NoIntrinsics};
use serde_json::{json, Value};

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

/// A package staged in `plain`: a benchmark, or a program of one file.
enum Source {
    Benchmark(&'static str),
    Program(&'static str),
}

/// Traces the package on `training`, compiles the trace and loads the module.
fn trace_and_load(
    work: &Path,
    source: &Source,
    training: &Value,
    options: &CompileOptions,
) -> Loaded {
    let plain = work.join("plain");
    let name = match source {
        Source::Benchmark(name) => {
            stage_benchmark(name, &plain, &|text, _| text.to_string());
            name
        }
        Source::Program(text) => {
            // The S3 stand-in is installed too (a program that does not load it never reads it).
            install_s3_stand_in(&plain);
            fs::write(plain.join("index.js"), text).unwrap();
            "program"
        }
    };
    let trace = trace_in_node(work, name, training, &[]);
    compile_and_load(&trace, options).unwrap()
}

/// Runs every event on the fast path against Node: every answer must be Node's, and at least
/// 90% of the events `on_trace` picks must be served.
fn compare(
    name: &'static str,
    training: Value,
    events: Vec<Value>,
    on_trace: &dyn Fn(&Value) -> bool,
) {
    if !node_available() {
        return;
    }
    compare_source(
        &Source::Benchmark(name),
        training,
        events,
        on_trace,
        &CompileOptions::default(),
    );
}

/// [`compare`] for any package; returns each event's outcome.
fn compare_source(
    source: &Source,
    training: Value,
    events: Vec<Value>,
    on_trace: &dyn Fn(&Value) -> bool,
    options: &CompileOptions,
) -> Vec<Outcome> {
    let name = match source {
        Source::Benchmark(name) => name,
        Source::Program(_) => "program",
    };
    let work = tempfile::tempdir().unwrap();
    let loaded = trace_and_load(work.path(), source, &training, options);
    let expected = node_answers(work.path(), name, &events, &[]);
    assert_eq!(expected.len(), events.len());
    let (mut on, mut served_on, mut served) = (0, 0, 0);
    let mut outcomes = Vec::new();
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
            Outcome::Error(error) => {
                assert_eq!(
                    error_line(error),
                    *node,
                    "{name}: the fast path's error for {event} differs"
                );
                true
            }
            Outcome::Miss { .. } => false,
        };
        served += usize::from(hit);
        outcomes.push(outcome);
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
    outcomes
}

const CLOSURES: &str = r#"
exports.handler = async ({ n }) => {
  let count = 0;
  const bump = () => { count += 1; return count; };
  for (let i = 0; i < n; i++) bump();
  const adders = [];
  for (let i = 0; i < 3; i++) adders.push((x) => x + i);
  const sums = adders.map((f) => f(10));
  return { count, sums, last: bump() };
};
"#;

#[test]
fn closures_share_their_variables_with_their_makers() {
    if !node_available() {
        return;
    }
    let training = json!([{"n": 0}, {"n": 3}]);
    let events: Vec<Value> = (0..20).map(|n| json!({ "n": n })).collect();
    compare_source(
        &Source::Program(CLOSURES),
        training,
        events,
        &|_| true,
        &CompileOptions::default(),
    );
}

const OBJECTS: &str = r#"
function Account(owner) { this.owner = owner; this.items = []; }
Account.prototype.add = function (v) { this.items.push(v); return this; };
Account.prototype.total = function () { let t = 0; for (const v of this.items) { t += v; } return t; };
const proto = { greet() { return "hi " + this.name; } };
exports.handler = async ({ owner, values }) => {
  const a = new Account(owner.trim().toUpperCase());
  for (const v of values) { a.add(v); }
  const o = Object.create(proto);
  o.name = owner;
  const text = `${owner}:${values.length}:${values.slice(1).join("+")}`;
  return {
    owner: a.owner, total: a.total(), keys: Object.keys(a), greeting: o.greet(), text,
    parts: owner.split(" ").map((p) => p.length), at: owner.indexOf("b"), first: owner[0],
    kinds: [typeof a, typeof owner, typeof a.add, typeof null, typeof values[9]],
    loose: [1 == "1", null == undefined, 0 === -0, "a" < "b", "B" < "a", 10 < 9, "10" < "9"],
    bits: [5 & 3, 5 | 3, 5 ^ 3, ~5, -7 >> 1, -7 >>> 28, 1 << 31, 7 % -3, -7 % 3, 2 ** 10],
    has: ["owner" in a, "add" in a, "nope" in a], inst: a instanceof Account,
  };
};
"#;

#[test]
fn objects_prototypes_strings_and_operators_answer_as_node() {
    if !node_available() {
        return;
    }
    let training =
        json!([{"owner": " bob ", "values": [1, 2, 3]}, {"owner": "ann b", "values": []}]);
    let mut events = vec![
        json!({"owner": "carl", "values": [0.5, 1e21, -3]}),
        json!({"owner": " élan vital ", "values": [1, "2"]}),
        json!({"owner": "", "values": [7]}),
        json!({"owner": "x y z", "values": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]}),
    ];
    events.push(json!({"owner": 5, "values": []}));
    events.push(json!({"values": []}));
    let outcomes = compare_source(
        &Source::Program(OBJECTS),
        training,
        events,
        &|e| {
            // A string among the values breaks a guard: the sum held only numbers in training.
            e["owner"].is_string() && e["values"].as_array().unwrap().iter().all(Value::is_number)
        },
        &CompileOptions::default(),
    );
    let reason = miss_reason(&outcomes[1]).unwrap_or_default();
    assert!(reason.starts_with("a guard: "), "{reason}");
}

const THROWS: &str = r#"
exports.handler = async ({ x }) => {
  try {
    if (x > 5) { throw { big: x }; }
    if (x < 0) { return "negative"; }
  } catch (e) {
    return "caught " + e.big;
  }
  if (x === 3) { throw "three"; }
  return "small";
};
"#;

#[test]
fn a_throw_is_caught_by_its_try_and_an_uncaught_one_is_the_functions_error() {
    if !node_available() {
        return;
    }
    let training = json!([{"x": 1}, {"x": 9}, {"x": 3}]);
    let events = vec![
        json!({"x": 2}),
        json!({"x": 7}),
        json!({"x": 3}),
        json!({"x": -1}),
    ];
    let outcomes = compare_source(
        &Source::Program(THROWS),
        training,
        events,
        &|e| e["x"] != -1,
        &CompileOptions::default(),
    );
    // Thrown out of the handler: the function's error, as the runtime answers a string.
    let Outcome::Error(error) = &outcomes[2] else {
        panic!("{:?}", outcomes[2])
    };
    assert_eq!(
        error.body,
        r#"{"errorType":"string","errorMessage":"three","trace":[]}"#
    );
    // `x < 0` was never true in training.
    assert_eq!(miss_reason(&outcomes[3]), Some("a path not traced"));
}

const LIMITS: &str = r#"
exports.handler = async ({ n, spin, kind }) => {
  if (kind === "log") { return Math.log(2) > 0; }
  if (kind === "regex") { return /a+/g.test("aa"); }
  const xs = [];
  for (let i = 0; i < n; i++) { xs.push([i, i]); }
  let j = 0;
  while (j < spin) { j += 1; }
  return xs.length + j;
};
"#;

#[test]
fn memory_time_and_builtins_not_compiled_are_misses_with_their_reason() {
    if !node_available() {
        return;
    }
    let training = json!([{"n": 2, "spin": 2}, {"n": 0, "spin": 0, "kind": "log"}, {"n": 0, "spin": 0, "kind": "regex"}]);
    let events = vec![
        json!({"n": 3, "spin": 5}),
        json!({"n": 1_000_000, "spin": 0}),
        json!({"n": 0, "spin": 0, "kind": "log"}),
        json!({"n": 0, "spin": 0, "kind": "regex"}),
    ];
    let options = CompileOptions {
        memory_pages: 64,
        ..Default::default()
    };
    let outcomes = compare_source(
        &Source::Program(LIMITS),
        training.clone(),
        events,
        &|e| e["n"] == 3,
        &options,
    );
    assert_eq!(miss_reason(&outcomes[1]), Some("out of memory"));
    assert_eq!(
        miss_reason(&outcomes[2]),
        Some("builtin Math.log not compiled")
    );
    assert_eq!(
        miss_reason(&outcomes[3]),
        Some("a regular expression with the flag g or y (lastIndex) not compiled")
    );
    // A loop past the deadline.
    let work = tempfile::tempdir().unwrap();
    let loaded = trace_and_load(work.path(), &Source::Program(LIMITS), &training, &options);
    let outcome = loaded.run(
        br#"{"n": 0, "spin": 1e12}"#,
        Box::new(NoIntrinsics),
        Duration::from_millis(50),
    );
    assert_eq!(miss_reason(&outcome), Some("out of time"));
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

/// Keeps each log line as `LEVEL message`; the clock stands still at `NOW`.
struct Recorder(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

const NOW: f64 = 1_795_000_000_123.0;

impl Intrinsics for Recorder {
    fn log(&mut self, level: LogLevel, message: &str) -> Result<(), Miss> {
        self.0
            .lock()
            .unwrap()
            .push(format!("{} {message}", level.as_str()));
        Ok(())
    }

    fn now(&mut self) -> f64 {
        NOW
    }

    fn context(&mut self) -> Result<Value, Miss> {
        Ok(json!({"awsRequestId": "r-1", "functionName": "f"}))
    }
}

/// Every console call and argument kind the runtime formats; `event.kind` picks a line
/// the runtime does not format (a class instance), so that path misses.
const LOGS: &str = r#"
class Point { constructor(x) { this.x = x; } }
exports.handler = async (event) => {
  const who = event.who;
  console.log("hello", who, { n: 1, "a-b": [true, null, undefined], deep: { a: { b: { c: 1 } } } });
  console.info("%s has %d items (%j) at 100%%", who, "3", { k: [1] }, -0, "it's");
  console.warn(["x", 2.5, -0], {}, [], 'q"\'');
  console.error({ long: "yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy", other: "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz" });
  console.log();
  console.log("%c%s", "color: red", 7, "%x");
  const started = Date.now();
  const when = new Date(started - 86400000);
  const random = Math.random();
  if (event.kind) console.log(new Point(1));
  if (event.fake) { const F = function () {}; F.prototype = Date.prototype; return new F().getTime(); }
  return { who, iso: when.toISOString(), t: when.getTime(), json: JSON.stringify({ when }),
           random: random >= 0 && random < 1, invalid: new Date(NaN).toJSON() };
};
"#;

#[test]
fn console_date_and_random_go_to_the_intrinsics_as_node_prints_them() {
    if !node_available() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let loaded = trace_and_load(
        work.path(),
        &Source::Program(LOGS),
        &json!([{"who": "x"}, {"who": "y", "kind": 1}, {"who": "z", "fake": 1}]),
        &CompileOptions::default(),
    );
    let trace = fs::read_to_string(work.path().join("trace.json")).unwrap();
    for name in [
        "console.log",
        "console.info",
        "console.warn",
        "console.error",
        "Date.now",
        "Date",
        "Math.random",
    ] {
        assert!(
            trace.contains(&format!(r#""intrinsic":"{name}""#)),
            "{name} in {trace}"
        );
    }
    // Node's own console, its levels as the shim writes them.
    let script = work.path().join("print.js");
    fs::write(
        &script,
        format!(
            "for (const [m, l] of [['log','INFO'],['info','INFO'],['warn','WARN'],['error','ERROR']]) {{\n\
             const f = require('util').format; console[m] = (msg, ...a) => process.stdout.write(l + ' ' + f(msg, ...a) + '\\n'); }}\n\
             Date.now = () => {NOW};\n{LOGS}\nexports.handler({{ who: 'ann' }}).then((r) => process.stdout.write(JSON.stringify(r)));"
        ),
    )
    .unwrap();
    let printed = node(work.path(), &["print.js"]);
    let (lines, answer) = printed.rsplit_once('\n').unwrap();

    let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let event = br#"{"who": "ann"}"#;
    let outcome = loaded.run(
        event,
        Box::new(Recorder(log.clone())),
        Duration::from_secs(5),
    );
    assert_eq!(outcome, Outcome::Answer(answer.as_bytes().to_vec()));
    assert_eq!(log.lock().unwrap().join("\n"), lines);

    // A value the runtime does not format misses (Node prints it), as does a log line
    // without the platform's intrinsics.
    let outcome = loaded.run(
        br#"{"who": "ann", "kind": 1}"#,
        Box::new(Recorder(log.clone())),
        Duration::from_secs(5),
    );
    assert_eq!(
        miss_reason(&outcome),
        Some("console output of an instance of a class not compiled")
    );
    let outcome = loaded.run(event, Box::new(NoIntrinsics), Duration::from_secs(5));
    assert_eq!(
        miss_reason(&outcome),
        Some("intrinsic console (INFO) not available")
    );
    // An object made with a builtin's prototype would pass for a `Date`; Node throws on it.
    let outcome = loaded.run(
        br#"{"who": "ann", "fake": 1}"#,
        Box::new(Recorder(log.clone())),
        Duration::from_secs(5),
    );
    assert_eq!(
        miss_reason(&outcome),
        Some("new of a function whose prototype is a builtin's not compiled")
    );
}

/// The handler's context: fields read from the platform's, enumerating it misses.
const CONTEXT: &str = r#"
exports.handler = async (event, context) => {
  if (event.keys) return Object.keys(context);
  return { id: context.awsRequestId, has: "awsRequestId" in context, no: "nothing" in context };
};
"#;

#[test]
fn the_context_is_the_platforms_and_is_not_enumerated() {
    if !node_available() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let loaded = trace_and_load(
        work.path(),
        &Source::Program(CONTEXT),
        &json!([{}, {"keys": 1}]),
        &CompileOptions::default(),
    );
    let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let outcome = loaded.run(
        b"{}",
        Box::new(Recorder(log.clone())),
        Duration::from_secs(5),
    );
    assert_eq!(
        outcome,
        Outcome::Answer(br#"{"id":"r-1","has":true,"no":false}"#.to_vec())
    );
    let outcome = loaded.run(
        br#"{"keys": 1}"#,
        Box::new(Recorder(log.clone())),
        Duration::from_secs(5),
    );
    assert_eq!(
        miss_reason(&outcome),
        Some("the keys of an object of a builtin class not compiled")
    );
}

/// One call site, no branch: which function it calls comes from the event.
const PICKED: &str = r#"
exports.handler = async (event) => {
  const fns = [console.log, Math.random];
  const f = fns[event.i];
  const r = f("picked");
  return typeof r;
};
"#;

#[test]
fn the_tracer_marks_intrinsic_calls_and_the_compiled_call_guards_its_callee() {
    if !node_available() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let loaded = trace_and_load(
        work.path(),
        &Source::Program(PICKED),
        &json!([{"i": 0}]),
        &CompileOptions::default(),
    );
    let trace = fs::read_to_string(work.path().join("trace.json")).unwrap();
    assert!(trace.contains(r#""intrinsic":"console.log""#), "{trace}");
    let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let outcome = loaded.run(
        br#"{"i": 0}"#,
        Box::new(Recorder(log.clone())),
        Duration::from_secs(5),
    );
    assert_eq!(outcome, Outcome::Answer(br#""undefined""#.to_vec()));
    assert_eq!(*log.lock().unwrap(), ["INFO picked"]);
    // The same site calling Math.random is not the call the trace saw.
    let outcome = loaded.run(
        br#"{"i": 1}"#,
        Box::new(Recorder(log.clone())),
        Duration::from_secs(5),
    );
    assert_eq!(
        miss_reason(&outcome),
        Some("a guard: the call of console.log calls another function")
    );
}

/// The S3 client, as the tracing runtime sees it (the stand-in SDK in Node) and as the fast
/// path calls it: one intrinsic call per `send`, its input checked, its answer the output.
const S3_PROGRAM: &str = r#"
const { S3Client, GetObjectCommand, PutObjectCommand } = require("@aws-sdk/client-s3");
const s3 = new S3Client({ region: "x" });
exports.handler = async (event) => {
  const input = { Bucket: "b", Key: event.key, Body: event.text };
  if (event.range) input.Range = "bytes=0-1";
  const put = await s3.send(new PutObjectCommand(input));
  const got = await s3.send(new GetObjectCommand({ Bucket: "b", Key: event.key }));
  const text = await got.Body.transformToString();
  return { etag: put.ETag, text };
};
"#;

/// A store of one object at a time, for the fast path's side of the boundary.
struct OneObject(std::sync::Arc<std::sync::Mutex<Vec<String>>>, Option<Value>);

impl Intrinsics for OneObject {
    fn call(&mut self, name: &str, args: &[Value]) -> Result<Value, Miss> {
        self.0.lock().unwrap().push(format!("{name} {}", args[0]));
        match name {
            "s3.PutObject" => {
                self.1 = Some(args[0]["Body"].clone());
                Ok(json!({"ETag": "\"e\""}))
            }
            "s3.GetObject" => match &self.1 {
                Some(body) => Ok(json!({"Body": body, "LastModified": NOW})),
                None => Err(Miss::new("NoSuchKey")),
            },
            _ => Err(Miss::new("not here")),
        }
    }
}

#[test]
fn s3_sends_are_one_intrinsic_call_each_with_their_input_checked() {
    if !node_available() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let loaded = trace_and_load(
        work.path(),
        &Source::Program(S3_PROGRAM),
        &json!([{"key": "k", "text": "hi"}, {"key": "k", "text": "x", "range": true}]),
        &CompileOptions::default(),
    );
    let trace = fs::read_to_string(work.path().join("trace.json")).unwrap();
    assert!(
        trace.contains(r#""intrinsic":"S3Client.prototype.send""#),
        "{trace}"
    );
    let calls = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let outcome = loaded.run(
        br#"{"key": "a/b", "text": "hello"}"#,
        Box::new(OneObject(calls.clone(), None)),
        Duration::from_secs(5),
    );
    assert_eq!(
        outcome,
        Outcome::Answer(br#"{"etag":"\"e\"","text":"hello"}"#.to_vec())
    );
    assert_eq!(
        *calls.lock().unwrap(),
        [
            r#"s3.PutObject {"Body":"hello","Bucket":"b","Key":"a/b"}"#,
            r#"s3.GetObject {"Bucket":"b","Key":"a/b"}"#
        ]
    );
    // An input field the fast path does not model misses before any call.
    calls.lock().unwrap().clear();
    let outcome = loaded.run(
        br#"{"key": "k", "text": "x", "range": true}"#,
        Box::new(OneObject(calls.clone(), None)),
        Duration::from_secs(5),
    );
    assert_eq!(
        miss_reason(&outcome),
        Some("PutObject with Range not compiled")
    );
    assert!(calls.lock().unwrap().is_empty());
    // A body that is not a string, likewise; and without the platform's store, a send misses.
    let outcome = loaded.run(
        br#"{"key": "k", "text": 5}"#,
        Box::new(OneObject(calls.clone(), None)),
        Duration::from_secs(5),
    );
    assert!(miss_reason(&outcome)
        .unwrap()
        .contains("a Body must be a string"));
    let outcome = loaded.run(
        br#"{"key": "k", "text": "x"}"#,
        Box::new(NoIntrinsics),
        Duration::from_secs(5),
    );
    assert_eq!(
        miss_reason(&outcome),
        Some("intrinsic s3.PutObject not available")
    );
}

/// Named reads and writes the module does itself (`compile/objects.rs`): one site meets
/// objects of several layouts (its cache hit, missed, and the key elsewhere or absent), keys
/// of the same text at another address (the event's, a computed one), inherited and shadowed
/// properties, writes that append (with room, and past it), `new` of constructors (a
/// returned object, a replaced `prototype`, classes), closures called from the module, and the
/// methods of strings and arrays known without a lookup.
const INLINE_OBJECTS: &str = r#"
class Shape { constructor(n) { this.n = n; } area() { return 0; } }
class Square { constructor(s) { this.kind = "square"; this.s = s; } area() { return this.s * this.s; } describe() { return this.kind + ":" + this.area(); } }
function Boxed(v) { this.v = v; return { boxed: v }; }
function Plain(v) { this.v = v; }
Plain.prototype = { twice() { return this.v * 2; } };
function Thrower(v) { if (v > 1) { throw new Error("too big"); } this.v = v; }
async function later(x) { return x + 1; }
const base = { x: "from the prototype" };
exports.handler = async (event) => {
  const inherited = Object.create(base);
  const computed = {};
  computed["x" + ""] = "computed";
  const objects = [
    { x: 1, y: 2 }, { y: 3, x: 4 }, { a: 1, b: 2, c: 3, x: 5 }, inherited, { y: 6 },
    event.point, computed, { x: 7, y: 8 },
  ];
  const read = [];
  for (const o of objects) { read.push(o.x); }
  for (const o of objects) { o.x = "set"; o.z = read.length; }
  const after = objects.map((o) => Object.keys(o).join(",") + "=" + o.x + "/" + o.z);
  const shapes = [new Square(3), new Square(event.side)];
  const described = shapes.map((s) => s.describe()).concat([new Shape(2).area(), new Shape(1).n]);
  const shadow = new Square(2);
  shadow.area = () => -1;
  let caught = "no";
  try { new Thrower(event.side); } catch (e) { caught = e.message; }
  const wide = { a: 1, b: 2 };
  wide.c = 3; wide.d = 4; wide.e = 5; wide.a = 0;
  const fake = { indexOf: (v) => "own " + v };
  return {
    read, after, described, shadowed: shadow.describe(), caught, wide,
    boxed: new Boxed(event.side), plain: new Plain(event.side).twice(),
    later: await later(event.side), words: event.text.toUpperCase().split(" ").reverse(),
    found: [[1, 2, 3].indexOf(event.side), fake.indexOf(2), "abc".indexOf("c")],
    proto: Object.getPrototypeOf(new Plain(1)) === Plain.prototype,
    json: JSON.stringify(objects[1]),
  };
};
"#;

#[test]
fn named_properties_and_constructors_in_the_module_answer_as_node() {
    if !node_available() {
        return;
    }
    let training = json!([
        {"point": {"x": 9, "y": 9}, "side": 1, "text": "a b"},
        {"point": {"y": 1}, "side": 0, "text": "hello"},
        {"point": {"x": 1}, "side": 3, "text": "x"}
    ]);
    let events = vec![
        json!({"point": {"x": 9, "y": 9}, "side": 1, "text": "a b"}),
        json!({"point": {"y": 1, "x": "x"}, "side": 0, "text": "one two three"}),
        json!({"point": {}, "side": 1.5, "text": ""}),
        // A constructor that throws in a `try` of its caller: caught, or a miss, never the
        // function's error.
        json!({"point": {"x": 1}, "side": 3, "text": "x"}),
        // Not an object where one is read: the runtime's TypeError, or a miss.
        json!({"side": 1, "text": "x"}),
    ];
    let outcomes = compare_source(
        &Source::Program(INLINE_OBJECTS),
        training,
        events,
        &|e| e["side"].as_f64().is_some_and(|s| s <= 1.0) && e["point"].is_object(),
        &CompileOptions::default(),
    );
    assert!(
        !matches!(outcomes[3], Outcome::Error(_)),
        "a throw the caller catches answered as the function's error"
    );
}

/// The guards of the module's own paths: an object whose layout at a site differs from the
/// one its cache holds, a write the runtime must refuse (an error's `message`), a `new` of a
/// builtin's prototype, all as the runtime answers them.
const INLINE_GUARDS: &str = r#"
function F() { this.made = true; }
exports.handler = async ({ kind, keys }) => {
  const o = {};
  for (const k of keys) { o[k] = k.length; }
  let seen = [];
  for (let i = 0; i < 3; i++) { seen.push(o.b); o.b = i; }
  if (kind === "message") { const e = new Error("m"); e.message = "changed"; return e.message; }
  if (kind === "date") { F.prototype = Date.prototype; return new F().made; }
  if (kind === "array") { const a = []; a.name = "n"; return a.name; }
  return { seen, o, b: o.b };
};
"#;

#[test]
fn the_module_s_own_paths_give_way_to_the_runtime_where_their_guards_fail() {
    if !node_available() {
        return;
    }
    let training = json!([
        {"kind": "", "keys": ["a", "b"]}, {"kind": "", "keys": ["b"]},
        {"kind": "message", "keys": []}, {"kind": "date", "keys": []},
        {"kind": "array", "keys": []}
    ]);
    let events = vec![
        json!({"kind": "", "keys": ["a", "b"]}),
        json!({"kind": "", "keys": ["b", "a"]}),
        json!({"kind": "", "keys": ["c", "d", "e", "f", "g", "b"]}),
        json!({"kind": "", "keys": []}),
        json!({"kind": "message", "keys": []}),
        json!({"kind": "date", "keys": []}),
        json!({"kind": "array", "keys": []}),
    ];
    let outcomes = compare_source(
        &Source::Program(INLINE_GUARDS),
        training,
        events,
        &|e| e["kind"] == "",
        &CompileOptions::default(),
    );
    for (i, reason) in [
        (4, "an error's message set not compiled"),
        (
            5,
            "new of a function whose prototype is a builtin's not compiled",
        ),
        (6, "a named property set on an array"),
    ] {
        assert_eq!(miss_reason(&outcomes[i]), Some(reason), "event {i}");
    }
}

/// The array methods that call back, as loops of the module (`compile/callbacks.rs`): a
/// closure for each element with its index and the array, `this` given, answers of every
/// type (truthiness decided inline for booleans, by the runtime otherwise), the early ends of
/// `every`, `some` and `find`, an array that shrinks under its loop, and a builtin callback
/// and a receiver that is not an array, which the runtime takes; `shift` of an array, empty
/// or not.
const CALLBACKS: &str = r#"
exports.handler = async ({ xs, cut }) => {
  const scale = { by: 3 };
  const mapped = xs.map(function (x, i, all) { return x * this.by + i + all.length; }, scale);
  const kept = xs.filter((x) => x % 2);
  const firstBig = xs.find((x) => x > 4);
  const every = [xs.every((x) => x > 0), xs.every((x) => typeof x === "number")];
  const some = [xs.some((x) => x > 100), xs.some((x) => x === 2 ? "yes" : 0)];
  const seen = [];
  xs.forEach((x, i) => { seen.push(i + ":" + x); });
  const shrinking = xs.slice();
  const visited = shrinking.map((x) => { if (cut) { shrinking.pop(); } return x; });
  const integers = xs.every(Number.isInteger);
  const queue = xs.slice();
  const taken = [queue.shift(), queue.shift()];
  const empty = [];
  taken.push(empty.shift());
  const notArray = { map: (f) => f(1) };
  return { mapped, kept, firstBig, every, some, seen, visited, integers, taken, left: queue,
           notArray: notArray.map((x) => x + 1) };
};
"#;

#[test]
fn array_callbacks_and_shift_in_the_module_answer_as_node() {
    if !node_available() {
        return;
    }
    let training = json!([{"xs": [1, 2, 3], "cut": false}, {"xs": [5, 6, 7, 8], "cut": true}]);
    let events = vec![
        json!({"xs": [1, 2, 3], "cut": false}),
        json!({"xs": [], "cut": false}),
        json!({"xs": [9], "cut": true}),
        json!({"xs": [4, 5, 6, 7, 8, 9, 10], "cut": true}),
        json!({"xs": [0.5, -1, 2], "cut": false}),
    ];
    let outcomes = compare_source(
        &Source::Program(CALLBACKS),
        training,
        events,
        &|e| e["cut"] == false || e["xs"].as_array().unwrap().len() <= 1,
        &CompileOptions::default(),
    );
    assert_eq!(
        miss_reason(&outcomes[3]),
        Some("an array that shrank under its callback not compiled")
    );
}

/// `startsWith` of two strings compared in the module, and given other types (the runtime's).
const STARTS_WITH: &str = r#"
exports.handler = async ({ words, prefix }) => {
  const hits = words.filter((w) => w.startsWith(prefix));
  const odd = [["x"].indexOf("x"), "12".startsWith(1), "".startsWith(""), "a".startsWith("ab")];
  return { hits, odd, all: words.map((w) => w.startsWith(prefix)) };
};
"#;

#[test]
fn starts_with_compares_units_in_the_module_as_node_does() {
    if !node_available() {
        return;
    }
    let training = json!([{"words": ["ab", "b"], "prefix": "a"}]);
    let events = vec![
        json!({"words": ["ab", "b", "", "a\u{e9}", "\u{1F600}x"], "prefix": "a"}),
        json!({"words": ["ab", "abc"], "prefix": ""}),
        json!({"words": ["\u{1F600}x", "\u{1F601}"], "prefix": "\u{1F600}"}),
        json!({"words": ["ab"], "prefix": "abc"}),
    ];
    compare_source(
        &Source::Program(STARTS_WITH),
        training,
        events,
        &|_| true,
        &CompileOptions::default(),
    );
}

/// A session for the fast path's side of the boundary: its state (JSON text per key), and
/// the request's writes, as kiln's `Txn` holds them, committed by the test when the request
/// answered (a miss commits nothing: Node runs it).
#[derive(Default)]
struct SessionStore {
    state: std::collections::BTreeMap<String, String>,
    writes: std::collections::BTreeMap<String, Option<String>>,
    saved: Option<std::collections::BTreeMap<String, Option<String>>>,
    calls: Vec<String>,
}

struct OneSession(std::sync::Arc<std::sync::Mutex<SessionStore>>);

impl Intrinsics for OneSession {
    fn session(&mut self) -> Option<String> {
        Some("s-1".into())
    }

    fn call(&mut self, name: &str, args: &[Value]) -> Result<Value, Miss> {
        let mut s = self.0.lock().unwrap();
        s.calls.push(name.to_string());
        let key = || args[0].as_str().unwrap().to_string();
        match name {
            "session.get" => {
                let key = key();
                Ok(match s.writes.get(&key) {
                    Some(write) => write.clone().map_or(Value::Null, Value::String),
                    None => s
                        .state
                        .get(&key)
                        .cloned()
                        .map_or(Value::Null, Value::String),
                })
            }
            "session.put" => {
                let value = args[1].as_str().unwrap().to_string();
                s.writes.insert(key(), Some(value));
                Ok(Value::Null)
            }
            "session.delete" => {
                s.writes.insert(key(), None);
                Ok(Value::Null)
            }
            "session.begin" => {
                if s.saved.is_some() {
                    return Err(Miss::new("transactions do not nest"));
                }
                s.saved = Some(s.writes.clone());
                Ok(Value::Null)
            }
            "session.end" => {
                s.saved = None;
                Ok(Value::Null)
            }
            _ => Err(Miss::new("not here")),
        }
    }
}

impl SessionStore {
    /// The request's writes: applied when it answered, dropped when it missed.
    fn settle(&mut self, answered: bool) {
        let writes = std::mem::take(&mut self.writes);
        self.saved = None;
        if answered {
            for (key, write) in writes {
                match write {
                    Some(value) => self.state.insert(key, value),
                    None => self.state.remove(&key),
                };
            }
        }
    }
}

#[test]
fn banking_transacts_on_the_session_through_intrinsics_as_node_does() {
    if !node_available() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let training = json!([
        {"account": "a", "op": "deposit", "amount": 500},
        {"account": "a", "op": "withdraw", "amount": 200},
        {"account": "a", "op": "withdraw", "amount": 9000},
        {"account": "a", "op": "balance"},
        {"account": "a", "op": "steal", "amount": 1},
        {"account": "a", "op": "deposit", "amount": -1},
        {"account": "a", "op": "deposit", "amount": 0.5},
    ]);
    let loaded = trace_and_load(
        work.path(),
        &Source::Benchmark("banking"),
        &training,
        &CompileOptions::default(),
    );
    let mut rng = Rng(0x5e55_1014);
    let accounts = ["alice", "bob", "carol"];
    let ops = [
        "deposit", "withdraw", "balance", "deposit", "withdraw", "audit",
    ];
    let events: Vec<Value> = (0..300)
        .map(|_| {
            let account = accounts[rng.below(3) as usize];
            let op = ops[rng.below(ops.len() as u64) as usize];
            match rng.below(10) {
                0 => json!({"account": account, "op": op, "amount": 2.5}),
                _ => json!({"account": account, "op": op, "amount": rng.below(400)}),
            }
        })
        .collect();
    let expected = node_answers(work.path(), "banking", &events, &[]);
    let store = std::sync::Arc::new(std::sync::Mutex::new(SessionStore::default()));
    let mut served = 0;
    for (event, node) in events.iter().zip(&expected) {
        let outcome = loaded.run(
            event.to_string().as_bytes(),
            Box::new(OneSession(store.clone())),
            Duration::from_secs(5),
        );
        let answered = match &outcome {
            Outcome::Answer(bytes) => {
                assert_eq!(String::from_utf8_lossy(bytes), *node, "{event}");
                true
            }
            other => panic!("{event}: {other:?}"),
        };
        served += usize::from(answered);
        store.lock().unwrap().settle(answered);
    }
    assert_eq!(served, events.len());
    let s = store.lock().unwrap();
    // What is stored is JSON.stringify's text; the balances are Node's.
    let last = |account: &str| {
        events
            .iter()
            .zip(&expected)
            .filter(|(e, _)| e["account"] == account)
            .filter_map(|(_, n)| serde_json::from_str::<Value>(n).ok()?["balance"].as_i64())
            .next_back()
    };
    for account in accounts {
        if let Some(balance) = last(account) {
            assert_eq!(
                s.state.get(account),
                Some(&balance.to_string()),
                "{account}"
            );
        }
    }
    assert!(s.calls.iter().any(|c| c == "session.begin"));
    // Without a session, `context.session` is null, as in Node: reading `transact` of it
    // is a TypeError, which Node answers.
    let outcome = loaded.run(
        br#"{"account": "a", "op": "balance"}"#,
        Box::new(NoIntrinsics),
        Duration::from_secs(5),
    );
    assert!(miss(&outcome).starts_with("TypeError"), "{outcome:?}");
}

#[test]
fn idle_instances_go_after_a_quiet_spell_and_the_next_request_makes_one() {
    if !node_available() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let training = json!([{"n": 0}, {"n": 3}]);
    let loaded = trace_and_load(
        work.path(),
        &Source::Program(CLOSURES),
        &training,
        &CompileOptions::default(),
    );
    let answer = |n: i64| match loaded.run(
        json!({ "n": n }).to_string().as_bytes(),
        Box::new(NoIntrinsics),
        Duration::from_secs(1),
    ) {
        Outcome::Answer(json) => String::from_utf8(json).unwrap(),
        other => panic!("{other:?}"),
    };
    let first = answer(5);
    assert_eq!(loaded.idle_instances(), 1, "kept for the next request");
    assert_eq!(
        loaded.release_idle(Duration::from_secs(60)),
        0,
        "not idle long enough"
    );
    assert_eq!(loaded.idle_instances(), 1);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(loaded.release_idle(Duration::from_millis(10)), 1);
    assert_eq!(loaded.idle_instances(), 0);
    // A fresh instance from the image answers as the kept one did.
    assert_eq!(answer(5), first);
    assert_eq!(loaded.idle_instances(), 1);
}
