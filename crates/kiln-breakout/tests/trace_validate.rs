//! The trace validator takes untrusted input: it must refuse each malformed tree with its
//! reason, and never panic or overflow its stack on any input (property tests and mutations
//! of a valid tree).

use std::sync::OnceLock;
use std::time::Duration;

use kiln_breakout::compile::{compile, CompileOptions};
use kiln_breakout::exec::{FastPathEngine, Limits};
use kiln_breakout::runtime::NoIntrinsics;
use kiln_breakout::trace::{parse, validate, Trace, TraceError, MAX_NODES};
use proptest::prelude::*;
use serde_json::{json, Value};

/// A valid tree: a module that binds a closure, and a request handler with a loop, a label, an
/// inlined call, a built-in call with a callback handler, an await and a try.
fn sample() -> Value {
    json!({
        "version": 1,
        "handlers": [
            {"id": 0, "fn": "init:index.js", "kind": "module", "params": [], "async": false, "body": [
                {"kind": "let", "bind": {"let": "limit"}, "value": {"kind": "number", "value": 3}, "types": ["int"]},
                {"kind": "let", "bind": {"let": "double"}, "value": {"kind": "closure", "fn": "index.js#1", "async": false, "captures": [{"kind": "ref", "name": "limit"}]}},
                {"kind": "let", "bind": {"set": {"kind": "get", "object": {"kind": "global", "name": "exports"}, "property": "handler"}},
                 "value": {"kind": "closure", "fn": "index.js#2", "async": true, "captures": [{"kind": "ref", "name": "double"}]}}
            ]},
            {"id": 1, "fn": "index.js#2", "kind": "function", "params": ["event"], "async": true, "body": [
                {"kind": "let", "bind": {"let": "i"}, "value": {"kind": "number", "value": 0}, "types": ["int"]},
                {"kind": "while", "test": {"kind": "binary", "op": "<", "left": {"kind": "id", "name": "i"}, "right": {"kind": "from", "name": "limit"}}, "body": [
                    {"kind": "label", "label": "next", "body": [
                        {"kind": "if", "test": {"kind": "id", "name": "i"}, "then": [{"kind": "break", "label": "next"}], "else": null}
                    ]},
                    {"kind": "let", "bind": {"set": {"kind": "id", "name": "i"}}, "value": {"kind": "binary", "op": "+", "left": {"kind": "id", "name": "i"}, "right": {"kind": "number", "value": 1}}}
                ]},
                {"kind": "named", "bind": {"let": "d"}, "callee": {"kind": "from", "name": "double"}, "args": [{"kind": "id", "name": "i"}], "fn": "index.js#1", "params": ["x"], "body": [
                    {"kind": "return", "value": {"kind": "binary", "op": "*", "left": {"kind": "id", "name": "x"}, "right": {"kind": "from", "name": "limit"}}, "types": ["int"]}
                ], "types": ["int"]},
                {"kind": "call", "bind": {"let": "items"}, "callee": {"kind": "get", "object": {"kind": "array", "items": [{"kind": "id", "name": "d"}, {"kind": "hole"}]}, "property": "map"}, "args": [{"kind": "from", "name": "double"}], "new": false, "handlers": [2], "types": ["array"]},
                {"kind": "call", "bind": null, "callee": {"kind": "get", "object": {"kind": "global", "name": "console"}, "property": "log"}, "args": [{"kind": "object", "properties": [{"key": "a", "value": {"kind": "id", "name": "d"}}, {"spread": {"kind": "id", "name": "items"}}]}], "new": false, "intrinsic": "console.log"},
                {"kind": "await", "bind": {"let": "got"}, "value": {"kind": "id", "name": "items"}, "types": ["array"]},
                {"kind": "try", "param": "error", "body": [
                    {"kind": "throw", "value": {"kind": "string", "value": "x"}}
                ], "handler": [
                    {"kind": "expression", "value": {"kind": "id", "name": "error"}}, {"kind": "unknown"}
                ]},
                {"kind": "return", "value": {"kind": "id", "name": "got"}, "types": ["array"]}
            ]},
            {"id": 2, "fn": "index.js#1", "kind": "function", "params": ["x"], "async": false, "body": [
                {"kind": "unsupported", "reason": "eval: code made at run time", "at": "index.js:4:5"}
            ]}
        ],
        "conflicts": []
    })
}

fn engine() -> &'static FastPathEngine {
    static ENGINE: OnceLock<FastPathEngine> = OnceLock::new();
    ENGINE.get_or_init(|| FastPathEngine::new(Limits::default()).unwrap())
}

fn check(value: &Value) -> Result<Trace, TraceError> {
    parse(serde_json::to_string(value).unwrap().as_bytes())
}

#[test]
fn the_sample_is_valid_and_round_trips() {
    let trace = check(&sample()).unwrap();
    let again = serde_json::to_string(&trace).unwrap();
    assert_eq!(parse(again.as_bytes()).unwrap(), trace);
}

/// The sample with one change made at a JSON pointer.
fn with(pointer: &str, value: Value) -> Value {
    let mut tree = sample();
    *tree
        .pointer_mut(pointer)
        .unwrap_or_else(|| panic!("no {pointer}")) = value;
    tree
}

#[test]
fn malformed_trees_are_refused_with_their_reason() {
    let body = "/handlers/1/body";
    let cases: Vec<(Value, &str)> = vec![
        (with("/version", json!(2)), "version 2"),
        (with("/handlers/1/id", json!(7)), "handler 1 has id 7"),
        (
            with("/handlers/2/fn", json!("index.js#2")),
            "two handlers trace index.js#2",
        ),
        (
            with(&format!("{body}/3/handlers/0"), json!(9)),
            "calls back handler 9",
        ),
        (
            with(&format!("{body}/4/intrinsic"), json!("fs.writeFileSync")),
            "calls an unknown intrinsic",
        ),
        (
            with(
                &format!("{body}/0/value"),
                json!({"kind": "id", "name": "nowhere"}),
            ),
            "uses `nowhere`",
        ),
        (
            with(
                &format!("{body}/1/body/0/body/0/then/0/label"),
                json!("elsewhere"),
            ),
            "breaks to elsewhere",
        ),
        (
            with(
                &format!("{body}/2/body/0"),
                json!({"kind": "break", "label": null}),
            ),
            "breaks to the enclosing loop",
        ),
        (
            with(
                &format!("{body}/2/body/0/value/left"),
                json!({"kind": "id", "name": "i"}),
            ),
            "uses `i`",
        ),
        (
            with(
                "/handlers/0/body/0/value",
                json!({"kind": "from", "name": "x"}),
            ),
            "environment it does not have",
        ),
        (
            with(&format!("{body}/0"), json!({"kind": "unknown"})),
            "unknown node before the end",
        ),
        (
            with(&format!("{body}/6/handler/0"), json!({"kind": "unknown"})),
            "unknown node before the end",
        ),
        (
            with(
                &format!("{body}/5/value"),
                json!({"kind": "binary", "op": "=>", "left": {"kind": "null"}, "right": {"kind": "null"}}),
            ),
            "name that is empty",
        ),
        (
            with(
                &format!("{body}/4/args/0/properties/0"),
                json!({"key": "a"}),
            ),
            "malformed object member",
        ),
        (
            with(&format!("{body}/0/bind"), json!({"let": ""})),
            "name that is empty",
        ),
        (
            with(
                &format!("{body}/0/value"),
                json!({"kind": "eval", "code": "1"}),
            ),
            "not in the trace format",
        ),
        (
            with(
                &format!("{body}/0/value"),
                json!({"kind": "number", "value": 1, "extra": 1}),
            ),
            "not in the trace format",
        ),
    ];
    for (tree, expected) in cases {
        let error = check(&tree).expect_err(expected).to_string();
        assert!(
            error.contains(expected),
            "{error:?} does not say {expected:?}"
        );
    }
    // A node after a return in the same body.
    let mut tree = sample();
    tree.pointer_mut(body)
        .unwrap()
        .as_array_mut()
        .unwrap()
        .push(json!({"kind": "expression", "value": {"kind": "null"}}));
    let error = check(&tree).unwrap_err().to_string();
    assert!(error.contains("after a return"), "{error}");
}

#[test]
fn deep_and_large_input_is_refused_without_exhausting_the_stack() {
    let deep = format!("{}{}", "[".repeat(200_000), "]".repeat(200_000));
    assert!(matches!(parse(deep.as_bytes()), Err(TraceError::Format(_))));
    // Statements nested past the limit, in a tree JSON can still read.
    let mut node = json!({"kind": "return", "value": {"kind": "null"}});
    for _ in 0..62 {
        node = json!({"kind": "block", "body": [node]});
    }
    let tree = with("/handlers/2/body/0", node);
    assert!(check(&tree).is_err());
    // More nodes than accepted.
    let many = vec![json!({"kind": "expression", "value": {"kind": "null"}}); MAX_NODES];
    let tree = with("/handlers/2/body", Value::Array(many));
    assert!(matches!(check(&tree), Err(TraceError::TooManyNodes)));
    let huge = vec![b' '; kiln_breakout::trace::MAX_TRACE_BYTES + 1];
    assert!(matches!(parse(&huge), Err(TraceError::TooLarge(_))));
}

/// Every JSON value position of the sample, as pointers.
fn pointers(value: &Value, at: String, out: &mut Vec<String>) {
    out.push(at.clone());
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                pointers(
                    v,
                    format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")),
                    out,
                );
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                pointers(v, format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i32>().prop_map(|n| json!(n)),
        "[a-z#:]{0,6}".prop_map(Value::String),
        prop_oneof![
            Just("id"),
            Just("from"),
            Just("break"),
            Just("unknown"),
            Just("named"),
            Just("label")
        ]
        .prop_map(|k| json!({"kind": k, "name": "i", "label": "next"})),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z]{1,6}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_bytes_are_refused_or_accepted_without_panicking(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = parse(&bytes);
    }

    #[test]
    fn mutated_trees_are_refused_or_accepted_without_panicking(
        picks in prop::collection::vec((any::<prop::sample::Index>(), any_json()), 1..4)
    ) {
        let mut tree = sample();
        for (pick, replacement) in picks {
            let mut all = Vec::new();
            pointers(&tree, String::new(), &mut all);
            let pointer = pick.get(&all).clone();
            if pointer.is_empty() {
                continue;
            }
            *tree.pointer_mut(&pointer).unwrap() = replacement;
        }
        if let Ok(trace) = check(&tree) {
            // Whatever is accepted stays accepted once written again, compiles to a valid
            // module, and that module loads and runs (answering or missing) without a panic.
            prop_assert!(validate(&trace).is_ok());
            let bytes = compile(&trace, &CompileOptions { memory_pages: 16, ..Default::default() }).unwrap();
            prop_assert!(wasmparser::validate(&bytes).is_ok());
            if let Ok(loaded) = engine().load(&bytes) {
                let _ = loaded.run(br#"{"a": [1, "x"]}"#, Box::new(NoIntrinsics), Duration::from_millis(200));
            }
        }
    }
}
