//! The `Error` global on the fast path, and status: errors made, read, caught and tested with
//! `instanceof`, classes that extend `Error`, and regular expression literals' `test`, each
//! against Node. An error no `try` catches is the function's error, answered as Node's
//! runtime answers it.

use std::time::Duration;

mod common;

use common::fast::*;
use common::*;
use kiln_breakout::exec::Outcome;
use serde_json::{json, Value};

#[test]
fn status_runs_fast_and_answers_its_errors() {
    if !node_available() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    stage_benchmark("status", &work.path().join("plain"), &|text, _| {
        text.to_string()
    });
    let ok = |sha: &str, state: &str, context: &str| json!({"repo": "kiln", "sha": sha, "state": state, "target_url": "u", "context": context});
    let training = json!([
        ok("abcdef1", "success", "ci"),
        ok("1234567", "failure", "lint"),
        ok("abcdef1", "odd", "ci"),
        ok("zz", "success", "ci"),
        {"repo": 1},
    ]);
    let loaded = trace_and_load(work.path(), "status", &training, &[]).unwrap();
    let mut events: Vec<Value> = Vec::new();
    for (i, state) in ["error", "failure", "pending", "success"]
        .iter()
        .enumerate()
    {
        for context in ["ci", "lint", "a b"] {
            events.push(ok("abcdef1", state, context));
            events.push(ok(["1234567", "abcdef1"][i % 2], state, context));
        }
    }
    let valid = events.len();
    // Off the happy path: each throws an InputError in Node.
    events.push(ok("abcdef1", "odd", "ci"));
    events.push(ok("xyz1234", "success", "ci"));
    events.push(ok("abcdef", "success", "ci"));
    events.push(json!({"repo": "kiln"}));
    let outcomes = compare(work.path(), "status", &loaded, &events, &[]);
    assert_eq!(served(&outcomes[..valid]), valid, "{outcomes:?}");
    // Each is the function's error, answered on the fast path as Node answers it.
    let errors: Vec<String> = outcomes[valid..].iter().map(error).collect();
    assert_eq!(
        errors,
        [
            "error InputError: invalid state",
            "error InputError: invalid sha",
            "error InputError: invalid sha",
            "error InputError: invalid sha",
        ]
    );
    // Its write is the answer's JSON, under the status's key.
    let mut store = Store::new(0);
    store.request = 7;
    let outcome = loaded.run(
        ok("abcdef1", "pending", "ci").to_string().as_bytes(),
        Box::new(store),
        Duration::from_secs(20),
    );
    let Outcome::Answer(answer) = outcome else {
        panic!("{outcome:?}")
    };
    let answer: Value = serde_json::from_slice(&answer).unwrap();
    assert_eq!(answer["request"], "req-7");
    assert_eq!(answer["description"], "ci is pending for fix");
}

const ERRORS: &str = r#"
class Invalid extends Error {
  constructor(field) {
    super(`invalid ${field}`);
    this.name = "Invalid";
    this.field = field;
  }
}
const hex = /^[0-9a-f]+$/i;
function check(x) {
  if (typeof x !== "number") { throw new TypeError("not a number: " + typeof x); }
  if (x < 0) { throw new RangeError("negative"); }
  if (x > 100) { throw new Invalid("x"); }
  return x;
}
exports.handler = async ({ x, word, kind }) => {
  const made = new Error("made");
  const plain = Error("called");
  const empty = new Error();
  let caught = null;
  try { check(x); } catch (e) {
    caught = { name: e.name, message: e.message, isError: e instanceof Error, isType: e instanceof TypeError,
      isRange: e instanceof RangeError, isInvalid: e instanceof Invalid, field: e.field, ctor: e.constructor === Error };
  }
  if (kind === "stack") { return made.stack; }
  if (kind === "json") { return JSON.stringify(made); }
  if (kind === "set") { made.message = "changed"; }
  if (kind === "throw") { throw new Error("out"); }
  return {
    made: [made.message, made.name, made instanceof Error, made instanceof TypeError],
    plain: [plain.message, plain.name], empty: [empty.message, "message" in empty],
    caught, hex: hex.test(word), dots: /^a.c$/.test(word), digits: /\d{2,3}/.test(word),
    notError: [({}) instanceof Error, "x" instanceof Error],
  };
};
"#;

#[test]
fn errors_are_made_read_caught_and_tested_as_node_does() {
    if !node_available() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    stage(work.path(), &[("index.js", ERRORS)]);
    let training = json!([
        {"x": 1, "word": "abc"}, {"x": "s", "word": "a.c"}, {"x": -1, "word": "12"},
        {"x": 101, "word": "FF"}, {"x": 1, "word": "a", "kind": "stack"},
        {"x": 1, "word": "a", "kind": "json"}, {"x": 1, "word": "a", "kind": "set"},
        {"x": 1, "word": "a", "kind": "throw"},
    ]);
    let loaded = trace_and_load(work.path(), "program", &training, &[]).unwrap();
    let mut events = Vec::new();
    for (x, word) in [
        (json!(5), "deadBEEF"),
        (json!("t"), "abc"),
        (json!(null), "a\nc"),
        (json!(-3), "a-c"),
        (json!(500), "1234"),
        (json!(true), "g"),
        (json!(7.5), "x12y"),
        (json!(0), "é"),
    ] {
        events.push(json!({"x": x, "word": word}));
    }
    let plain_events = events.len();
    for kind in ["stack", "json", "set", "throw"] {
        events.push(json!({"x": 1, "word": "a", "kind": kind}));
    }
    events.push(json!({"x": 1, "word": "\u{1F600}"}));
    let outcomes = compare(work.path(), "program", &loaded, &events, &[]);
    assert_eq!(
        served(&outcomes[..plain_events]),
        plain_events,
        "{outcomes:?}"
    );
    let rest = &outcomes[plain_events..];
    assert_eq!(miss(&rest[0]), "an error's stack not compiled");
    assert_eq!(
        miss(&rest[1]),
        "JSON.stringify of an object of a builtin class"
    );
    assert_eq!(miss(&rest[2]), "an error's message set not compiled");
    assert_eq!(error(&rest[3]), "error Error: out");
    assert!(miss(&rest[4]).contains("surrogates"), "{:?}", rest[4]);
}

const RAISED: &str = r#"
exports.handler = async (event) => {
  const o = event.obj;
  if (event.kind === "deep") { return { v: o.inner.leaf }; }
  if (event.kind === "key") { return { v: o[event.key] }; }
  if (event.kind === "method") { return { v: o.label.trim() }; }
  if (event.kind === "set") { o.count = 1; return { set: true }; }
  if (event.kind === "map") { return event.list.map((x) => x.y); }
  if (event.kind === "throw") { throw event.thrown; }
  return { v: o.x };
};
"#;

#[test]
fn a_property_of_undefined_or_null_is_the_functions_error_as_node_words_it() {
    if !node_available() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    stage(work.path(), &[("index.js", RAISED)]);
    let training = json!([
        {"obj": {"x": 1}}, {"kind": "deep", "obj": {"inner": {"leaf": 2}}},
        {"kind": "key", "obj": {"a": 3}, "key": "a"}, {"kind": "method", "obj": {"label": " l "}},
        {"kind": "set", "obj": {}}, {"kind": "map", "list": [{"y": 4}]},
        {"kind": "throw", "thrown": "text"},
    ]);
    let loaded = trace_and_load(work.path(), "program", &training, &[]).unwrap();
    let events = [
        json!({}),
        json!({"obj": null}),
        json!({"kind": "deep", "obj": {}}),
        json!({"kind": "deep", "obj": {"inner": null}}),
        json!({"kind": "key", "obj": null, "key": "it's"}),
        json!({"kind": "key", "key": 1.5}),
        json!({"kind": "key", "key": true}),
        json!({"kind": "key", "key": "\u{e9}\u{1F600}"}),
        json!({"kind": "method", "obj": {}}),
        json!({"kind": "set", "obj": null}),
        json!({"kind": "set"}),
        json!({"obj": {"x": 5}}),
    ];
    let outcomes = compare(work.path(), "program", &loaded, &events, &[]);
    assert_eq!(served(&outcomes), events.len(), "{outcomes:?}");
    assert_eq!(
        error(&outcomes[0]),
        "error TypeError: Cannot read properties of undefined (reading 'x')"
    );
    assert_eq!(
        error(&outcomes[4]),
        "error TypeError: Cannot read properties of null (reading 'it's')"
    );
    assert_eq!(
        error(&outcomes[9]),
        "error TypeError: Cannot set properties of null (setting 'count')"
    );
    let Outcome::Error(raised) = &outcomes[0] else {
        unreachable!()
    };
    let body: Value = serde_json::from_str(&raised.body).unwrap();
    assert_eq!(
        body,
        json!({"errorType": "TypeError",
               "errorMessage": "Cannot read properties of undefined (reading 'x')",
               "trace": ["TypeError: Cannot read properties of undefined (reading 'x')"]})
    );

    // In a callback the error would pass through the builtin: a miss. So are `undefined` and
    // `null` thrown (the shim answers them by the handler's async-ness).
    let run = |event: Value| {
        loaded.run(
            event.to_string().as_bytes(),
            Box::new(Store::new(0)),
            Duration::from_secs(20),
        )
    };
    assert_eq!(
        miss(&run(json!({"kind": "map", "list": [null]}))),
        "TypeError: a property of undefined or null read"
    );
    assert_eq!(
        miss(&run(json!({"kind": "throw"}))),
        "a thrown undefined or null not compiled"
    );
    assert_eq!(
        miss(&run(json!({"kind": "throw", "thrown": null}))),
        "a thrown undefined or null not compiled"
    );
}

#[test]
fn a_try_or_a_destructuring_in_the_trace_makes_the_runtimes_errors_misses() {
    if !node_available() {
        return;
    }
    for (program, training) in [
        (
            r#"exports.handler = async (event) => {
  const o = event.obj;
  if (event.guard) { try { return o.x; } catch (e) { return "caught"; } }
  return { v: o.x };
};"#,
            json!([{"obj": {"x": 1}}, {"guard": true, "obj": {"x": 2}}]),
        ),
        (
            r#"exports.handler = async ({ obj }) => ({ v: obj.x });"#,
            json!([{"obj": {"x": 1}}]),
        ),
    ] {
        let work = tempfile::tempdir().unwrap();
        stage(work.path(), &[("index.js", program)]);
        let loaded = trace_and_load(work.path(), "program", &training, &[]).unwrap();
        let outcomes = compare(
            work.path(),
            "program",
            &loaded,
            &[json!({}), json!({"obj": {"x": 3}})],
            &[],
        );
        assert_eq!(
            miss(&outcomes[0]),
            "TypeError: a property of undefined or null read"
        );
        assert_eq!(served(&outcomes[1..]), 1, "{outcomes:?}");
    }
}
