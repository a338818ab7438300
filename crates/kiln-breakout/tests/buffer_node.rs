//! `Buffer` basics on the fast path against Node: made from text in each encoding, from bytes
//! and from other buffers, read back, measured and joined; writing to one, and the lenient
//! decodings Node does, miss.

mod common;

use common::fast::*;
use common::*;
use kiln_breakout::exec::Outcome;
use serde_json::{json, Value};

const BUFFERS: &str = r#"
exports.handler = async ({ text, b64, hex, kind }) => {
  const a = Buffer.from(text);
  const b = Buffer.from(text, "utf8");
  const c = Buffer.from(b64, "base64");
  const d = Buffer.from(hex, "HEX");
  const joined = Buffer.concat([a, c, d]);
  if (kind === "json") { return JSON.stringify(a); }
  if (kind === "write") { a[0] = 1; }
  if (kind === "slice") { return a.slice(1).toString(); }
  return {
    len: a.length, byteLength: Buffer.byteLength(text), same: a.toString() === b.toString("utf-8"),
    base64: a.toString("base64"), hex: a.toString("hex"), decoded: c.toString(), d0: d[0],
    past: d[d.length], joined: joined.length, copy: Buffer.from(joined).toString("hex"),
    isBuf: Buffer.isBuffer(a), notBuf: Buffer.isBuffer(text),
    latin: Buffer.from([104, 233, 256 + 65]).toString("latin1"),
    back: Buffer.from(a.toString("base64"), "base64").toString("utf8"),
  };
};
"#;

#[test]
fn buffers_encode_and_decode_as_node_does() {
    if !node_available() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    stage(work.path(), &[("index.js", BUFFERS)]);
    let event = |text: &str, b64: &str, hex: &str| json!({"text": text, "b64": b64, "hex": hex});
    let training = json!([
        event("hi", "aGk=", "00ff"),
        {"text": "x", "b64": "", "hex": "", "kind": "json"},
        {"text": "x", "b64": "", "hex": "", "kind": "write"},
        {"text": "xy", "b64": "", "hex": "", "kind": "slice"},
    ]);
    let loaded = trace_and_load(work.path(), "program", &training, &[]).unwrap();
    let mut events: Vec<Value> = vec![
        event("", "", ""),
        event("héllo ☃ 😀", "4pyTIGNoZWNr", "deadBEEF"),
        event("a\nb", "YQ", "0a"),
        event("plain", "cGxhaW4=", "7f80"),
    ];
    let valid = events.len();
    events.push(event("x", "aGk", "0"));
    events.push(event("x", "a Gk=", "00"));
    for kind in ["json", "write", "slice"] {
        events.push(json!({"text": "xy", "b64": "", "hex": "", "kind": kind}));
    }
    let outcomes = compare(work.path(), "program", &loaded, &events, &[]);
    assert_eq!(served(&outcomes[..valid]), valid, "{outcomes:?}");
    let reasons: Vec<&str> = outcomes[valid..]
        .iter()
        .map(|o| match o {
            Outcome::Miss { reason, .. } => reason.as_str(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        reasons,
        [
            "hex text Node reads leniently not compiled",
            "base64 text Node reads leniently not compiled",
            "JSON.stringify of an object of a builtin class",
            "a write to a Buffer not compiled",
            "a Buffer's slice not compiled",
        ]
    );
}
