//! ES modules on the fast path: `import … from` of the package's own modules and of the S3
//! client, `export` (named and default), and upload, each against Node.

mod common;

use common::fast::*;
use common::*;
use serde_json::{json, Value};

#[test]
fn upload_runs_fast_as_an_es_module() {
    if !node_available() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    stage_benchmark("upload", &work.path().join("plain"), &|text, _| {
        text.to_string()
    });
    let training = json!([
        {"name": "a.txt", "body": "hello"}, {"body": "no name"}, {"name": "b"}, {},
    ]);
    let loaded = trace_and_load(work.path(), "upload", &training, &[]).unwrap();
    let mut events: Vec<Value> = (0..40)
        .map(|i| json!({"name": format!("f{i}.txt"), "body": format!("body {i} ☃")}))
        .collect();
    events.push(json!({"body": "unnamed"}));
    let valid = events.len();
    events.push(json!({"name": "x"}));
    events.push(json!({"name": "x", "body": null}));
    // The SDK warns of an empty body in Node: Node's to answer.
    events.push(json!({"name": "x", "body": ""}));
    let outcomes = compare(work.path(), "upload", &loaded, &events, &[]);
    assert_eq!(served(&outcomes[..valid]), valid, "{outcomes:?}");
    assert_eq!(error(&outcomes[valid]), "error Error: No file to upload.");
    assert_eq!(
        error(&outcomes[valid + 1]),
        "error Error: No file to upload."
    );
    assert_eq!(
        miss(&outcomes[valid + 2]),
        "PutObject with an empty Body not compiled"
    );
}

const INDEX: &str = r#"
import { S3Client } from "@aws-sdk/client-s3";
import { double, LIMIT } from "./lib/math.mjs";
import named from "./lib/math.mjs";
import config from "./config.cjs";
import { bump, count } from "./counter.mjs";
const client = new S3Client({});
export async function handler(event) {
  if (event.count) { bump(); return count; }
  return { doubled: double(event.n), limit: LIMIT, named: named(), config, client: typeof client };
}
"#;

const MATH: &str = r#"
export const LIMIT = 10;
export function double(n) { return n * 2 > LIMIT ? LIMIT : n * 2; }
export default function () { return "default"; }
"#;

const COUNTER: &str = r#"
export let count = 0;
export function bump() { count += 1; }
"#;

#[test]
fn modules_import_and_export_as_node_links_them() {
    if !node_available() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    stage(
        work.path(),
        &[
            ("index.mjs", INDEX),
            ("lib/math.mjs", MATH),
            ("counter.mjs", COUNTER),
            ("config.cjs", "module.exports = { region: 'here' };"),
        ],
    );
    std::fs::rename(
        work.path().join("plain/index.mjs"),
        work.path().join("plain/index.js"),
    )
    .unwrap();
    std::fs::write(
        work.path().join("plain/package.json"),
        r#"{"type": "module"}"#,
    )
    .unwrap();
    // The stand-in S3 client is CommonJS under node_modules, as the SDK's is.
    let training = json!([{"n": 1}, {"n": 9}, {"n": 2, "count": true}]);
    let loaded = trace_and_load(work.path(), "program", &training, &[]).unwrap();
    let events: Vec<Value> = (0..12).map(|n| json!({ "n": n })).collect();
    let outcomes = compare(work.path(), "program", &loaded, &events, &[]);
    assert_eq!(served(&outcomes), events.len(), "{outcomes:?}");
    // An exported variable the module assigns again would be seen live by its importers.
    let outcome = &compare(
        work.path(),
        "program",
        &loaded,
        &[json!({"count": true})],
        &[],
    )[0];
    assert_eq!(
        miss(outcome),
        "an assignment to a variable an ES module exports not compiled"
    );
}
