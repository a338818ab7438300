//! The runtime's builtins, conversions and JSON against Node: each case is run by both, and
//! the runtime answers what Node answers, or misses where Node throws (a JavaScript error is
//! always Node's to report) or where a case is outside what the runtime compiles.

use std::fs;

mod common;

use common::*;
use kiln_breakout::runtime::builtins::{self, Builtin};
use kiln_breakout::runtime::heap::Heap;
use kiln_breakout::runtime::value::Value;
use kiln_breakout::runtime::{json, ops, Guest, Intrinsics, Miss, NoIntrinsics};
use serde_json::{json, Value as Json};

/// Memory with no compiled code: builtins that call back get builtins as callbacks only.
struct Memory(Vec<u8>, NoIntrinsics);

impl Guest for Memory {
    fn heap(&mut self) -> Heap<'_> {
        Heap::new(&mut self.0)
    }

    fn apply(&mut self, _: Value, _: Value, _: &[Value]) -> Result<Value, Miss> {
        Err(Miss::new("no compiled code"))
    }

    fn intrinsic(&mut self, name: &str, _: &[Value]) -> Result<Value, Miss> {
        Err(Miss::new(format!("intrinsic {name} not available")))
    }

    fn intrinsics(&mut self) -> &mut dyn Intrinsics {
        &mut self.1
    }
}

/// A JSON value on the heap; `{"$builtin": name}` is that builtin.
fn value(guest: &mut Memory, v: &Json) -> Value {
    if let Some(name) = v.get("$builtin").and_then(Json::as_str) {
        return Builtin::named(name).unwrap().value();
    }
    let units: Vec<u16> = v.to_string().encode_utf16().collect();
    json::parse(&mut guest.heap(), &units).unwrap()
}

/// `[result]` as JSON, as Node's `JSON.stringify([result])` writes it.
fn answer(guest: &mut Memory, v: Value) -> Result<String, Miss> {
    let mut heap = guest.heap();
    let wrapped = heap.array_from(&[v])?;
    let units = json::stringify(&mut heap, wrapped)?.unwrap();
    Ok(String::from_utf16(&units).unwrap())
}

/// Runs `[builtin, this, args]` cases in Node: each line `ok [result]` or `error`.
const NODE: &str = r#"
const cases = JSON.parse(require("fs").readFileSync(process.argv[2], "utf8"));
const resolve = (name) => name.split(".").reduce((o, k) => o[k], globalThis);
const revive = (v) => v && typeof v === "object" && "$builtin" in v ? resolve(v.$builtin) : v;
for (const [name, self, args] of cases) {
  try {
    const f = resolve(name);
    const result = f.apply(revive(self), args.map(revive));
    console.log("ok " + JSON.stringify([result]));
  } catch (e) {
    console.log("error");
  }
}
"#;

fn cases() -> Vec<(&'static str, Json, Json)> {
    let s = |t: &str| json!(t);
    let u = Json::Null;
    vec![
        (
            "JSON.parse",
            u.clone(),
            json!([r#"{"b":[1,2.5e3,"\u00e9\ud83d\ude00"],"a":{"1":true,"0":null}}"#]),
        ),
        ("JSON.parse", u.clone(), json!(["[1,]"])),
        ("JSON.parse", u.clone(), json!([" \"x\\u0041\" "])),
        (
            "JSON.stringify",
            u.clone(),
            json!([{"b": [1, -0.0, 1e21, 1e-7, "q\"\n\u{1}"], "2": "x", "a": null}]),
        ),
        ("JSON.stringify", u.clone(), json!(["plain"])),
        (
            "JSON.stringify",
            u.clone(),
            json!([[{"$builtin": "Math.floor"}]]),
        ),
        (
            "JSON.stringify",
            u.clone(),
            json!([{"$builtin": "Math.floor"}]),
        ),
        ("String", u.clone(), json!([0.1])),
        ("String", u.clone(), json!([123456789012345680000.0])),
        ("String", u.clone(), json!([[1, [2, 3], null]])),
        ("String", u.clone(), json!([{}])),
        ("String.prototype.indexOf", s("banana"), json!(["an"])),
        ("String.prototype.indexOf", s("banana"), json!(["an", 2])),
        ("String.prototype.indexOf", s("banana"), json!(["", 99])),
        ("String.prototype.indexOf", s("banana"), json!(["x"])),
        ("String.prototype.startsWith", s("banana"), json!(["ban"])),
        (
            "String.prototype.startsWith",
            s("banana"),
            json!(["nan", 2]),
        ),
        ("String.prototype.startsWith", s("banana"), json!(["", -5])),
        ("String.prototype.slice", s("héllo wörld"), json!([2])),
        ("String.prototype.slice", s("héllo wörld"), json!([-5, -1])),
        ("String.prototype.slice", s("héllo wörld"), json!([4, 2])),
        ("String.prototype.slice", s("😀ab"), json!([1])),
        ("String.prototype.substring", s("hello"), json!([4, 1])),
        ("String.prototype.substring", s("hello"), json!([-3, 2.7])),
        ("String.prototype.substring", s("hello"), json!([2])),
        ("String.prototype.split", s("a,b,,c"), json!([","])),
        ("String.prototype.split", s("a,b,,c"), json!([",", 2])),
        ("String.prototype.split", s("abc"), json!([""])),
        ("String.prototype.split", s("abc"), json!([])),
        ("String.prototype.split", s(""), json!([","])),
        ("String.prototype.toLowerCase", s("HeLLo ÄÖÜ İ"), json!([])),
        ("String.prototype.toUpperCase", s("straße ǆ ﬁ"), json!([])),
        (
            "String.prototype.trim",
            s(" \t\n\u{a0}\u{feff} x y \u{2028}"),
            json!([]),
        ),
        ("String.prototype.trim", s("   "), json!([])),
        ("String.prototype.toLowerCase", u.clone(), json!([])),
        ("Array.prototype.push", json!([1]), json!([2, "x"])),
        ("Array.prototype.pop", json!([1, 2]), json!([])),
        ("Array.prototype.pop", json!([]), json!([])),
        ("Array.prototype.shift", json!(["a", "b"]), json!([])),
        ("Array.prototype.shift", json!([]), json!([])),
        (
            "Array.prototype.join",
            json!([1, null, "x", [2, 3], true]),
            json!([]),
        ),
        ("Array.prototype.join", json!([1, 2]), json!([" - "])),
        ("Array.prototype.join", json!([]), json!([])),
        (
            "Array.prototype.indexOf",
            json!([1, "1", 1, null]),
            json!([1]),
        ),
        (
            "Array.prototype.indexOf",
            json!([1, "1", 1, null]),
            json!([1, 1]),
        ),
        (
            "Array.prototype.indexOf",
            json!([1, "1", 1, null]),
            json!([null, -1]),
        ),
        ("Array.prototype.indexOf", json!([1, 2]), json!(["2"])),
        ("Array.prototype.slice", json!([1, 2, 3, 4]), json!([1, -1])),
        ("Array.prototype.slice", json!([1, 2, 3, 4]), json!([])),
        ("Array.prototype.slice", json!([1, 2, 3, 4]), json!([-2])),
        ("Array.prototype.slice", json!([1, 2, 3, 4]), json!([3, 1])),
        (
            "Array.prototype.every",
            json!([1, 2, 3]),
            json!([{"$builtin": "Number.isInteger"}]),
        ),
        (
            "Array.prototype.every",
            json!([1, 2.5]),
            json!([{"$builtin": "Number.isInteger"}]),
        ),
        (
            "Array.prototype.map",
            json!([1.5, -2.5, "3.7"]),
            json!([{"$builtin": "Math.floor"}]),
        ),
        (
            "Object.keys",
            u.clone(),
            json!([{"b": 1, "10": 2, "a": 3, "2": 4}]),
        ),
        ("Object.keys", u.clone(), json!([["x", "y"]])),
        ("Object.keys", u.clone(), json!([null])),
        ("Math.floor", u.clone(), json!([-1.5])),
        ("Math.floor", u.clone(), json!(["7.9"])),
        ("Math.floor", u.clone(), json!([null])),
        ("Math.abs", u.clone(), json!([-3])),
        ("Math.abs", u.clone(), json!(["x"])),
        ("Math.min", u.clone(), json!([3, 1, 2])),
        ("Math.min", u.clone(), json!([])),
        ("Math.min", u.clone(), json!([0, -0.0])),
        ("Math.max", u.clone(), json!([3, "10", 2])),
        ("Math.max", u.clone(), json!([])),
        ("Math.max", u.clone(), json!([1, "x"])),
        ("parseInt", u.clone(), json!(["42px"])),
        ("parseInt", u.clone(), json!(["  -0x1F"])),
        ("parseInt", u.clone(), json!(["0x1F", 10])),
        ("parseInt", u.clone(), json!(["z", 36])),
        ("parseInt", u.clone(), json!(["12345678901234567890"])),
        ("parseInt", u.clone(), json!(["", 10])),
        ("parseInt", u.clone(), json!([3.99])),
        ("parseInt", u.clone(), json!(["11", 2])),
        ("parseInt", u.clone(), json!(["7", 1])),
    ]
}

#[test]
fn builtins_answer_as_node_does() {
    if !node_available() {
        return;
    }
    let cases = cases();
    let work = tempfile::tempdir().unwrap();
    let file = work.path().join("cases.json");
    let as_json: Vec<Json> = cases.iter().map(|(n, t, a)| json!([n, t, a])).collect();
    fs::write(&file, Json::from(as_json).to_string()).unwrap();
    fs::write(work.path().join("cases.js"), NODE).unwrap();
    let out = node(work.path(), &["cases.js", file.to_str().unwrap()]);
    let expected: Vec<&str> = out.lines().collect();
    assert_eq!(expected.len(), cases.len());
    let mut served = 0;
    for ((name, this, args), node) in cases.iter().zip(expected) {
        let mut guest = Memory(vec![0; 1 << 20], NoIntrinsics);
        Heap::empty(&mut guest.0).unwrap();
        let this = value(&mut guest, this);
        let args: Vec<Value> = args
            .as_array()
            .unwrap()
            .iter()
            .map(|a| value(&mut guest, a))
            .collect();
        let builtin = Builtin::named(name).unwrap();
        match builtins::call(&mut guest, builtin, this, &args).and_then(|v| answer(&mut guest, v)) {
            Ok(got) => {
                assert_eq!(format!("ok {got}"), node, "{name}({args:?})");
                served += 1;
            }
            Err(miss) => assert!(
                node == "error" || miss.reason.contains("not compiled"),
                "{name}: missed ({}) where Node answered {node}",
                miss.reason
            ),
        }
    }
    assert!(served * 10 >= cases.len() * 8, "only {served} served");
}

#[test]
fn numbers_print_as_node_prints_them() {
    if !node_available() {
        return;
    }
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut numbers = vec![
        0.0,
        -0.0,
        1e21,
        1e-7,
        123e-20,
        5e-324,
        f64::MAX,
        0.1 + 0.2,
        100.0,
        1.0 / 3.0,
    ];
    for i in 0..400 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let n = f64::from_bits(state);
        if n.is_finite() {
            numbers.push(n);
        }
        numbers.push((state % 1_000_000) as f64 / f64::from(1 << (i % 20)));
    }
    let work = tempfile::tempdir().unwrap();
    let text = Json::from(numbers.clone()).to_string();
    fs::write(work.path().join("numbers.json"), &text).unwrap();
    let out = node(
        work.path(),
        &["-e", "for (const n of JSON.parse(require('fs').readFileSync('numbers.json', 'utf8'))) console.log(String(n));"],
    );
    for (n, expected) in numbers.iter().zip(out.lines()) {
        assert_eq!(ops::number_to_string(*n), expected, "{:e}", n);
    }
}

#[test]
fn strings_convert_to_numbers_as_node_converts_them() {
    if !node_available() {
        return;
    }
    let texts = [
        "",
        " 12 ",
        "0x10",
        "0b101",
        "0o17",
        "1e3",
        "-1.5e-3",
        ".5",
        "5.",
        "+7",
        "Infinity",
        "-Infinity",
        "infinity",
        "1_000",
        "0x",
        "12px",
        "\u{a0}3\u{2028}",
        "NaN",
        "00012",
        "-0",
    ];
    let work = tempfile::tempdir().unwrap();
    fs::write(
        work.path().join("texts.json"),
        Json::from(texts.to_vec()).to_string(),
    )
    .unwrap();
    let out = node(
        work.path(),
        &["-e", "for (const t of JSON.parse(require('fs').readFileSync('texts.json', 'utf8'))) console.log(String(Number(t)));"],
    );
    for (text, expected) in texts.iter().zip(out.lines()) {
        let units: Vec<u16> = text.encode_utf16().collect();
        assert_eq!(
            ops::number_to_string(ops::string_to_number(&units)),
            expected,
            "{text:?}"
        );
    }
}
