//! The support check on single sources: each refused construct, and supported code that must
//! stay clean. (Whole packages and the benchmark handlers are in tests/check_packages.rs.)

use proptest::prelude::*;

use super::*;

/// The sites of a CommonJS source, as `line:col construct`.
fn sites(text: &str) -> Vec<String> {
    sites_of(text, SourceKind::CommonJs)
}

fn sites_of(text: &str, kind: SourceKind) -> Vec<String> {
    check_source("t.js", text, kind)
        .sites
        .iter()
        .map(|s| format!("{}:{} {}", s.line, s.col, s.construct.name()))
        .collect()
}

/// The construct names found in a CommonJS source.
fn constructs(text: &str) -> Vec<String> {
    check_source("t.js", text, SourceKind::CommonJs)
        .sites
        .iter()
        .map(|s| s.construct.name())
        .collect()
}

#[track_caller]
fn refused(text: &str, construct: &str) {
    let found = constructs(text);
    assert!(
        found.iter().any(|c| c == construct),
        "expected `{construct}` in {text:?}, found {found:?}"
    );
}

#[track_caller]
fn clean(text: &str, kind: SourceKind) {
    let found = check_source("t.js", text, kind);
    assert!(found.sites.is_empty(), "{text:?}: {:?}", found.sites);
}

#[test]
fn eval_and_the_function_constructor_are_refused() {
    assert_eq!(sites("let x = eval('1 + 1');"), ["1:9 eval"]);
    refused("const f = new Function('a', 'return a');", "Function");
    refused("const f = Function('return 1');", "Function");
    // Indirect eval is eval too.
    refused("const e = eval; e('1');", "eval");
}

#[test]
fn a_local_binding_shadows_a_refused_global() {
    clean(
        "function f(eval, Proxy) { return eval + Proxy; }\n\
         const Reflect = { ownKeys: () => [] };\n\
         module.exports = () => Reflect.ownKeys();",
        SourceKind::CommonJs,
    );
}

#[test]
fn meta_programming_is_refused() {
    refused("const p = new Proxy({}, {});", "Proxy");
    refused("Reflect.ownKeys({});", "Reflect");
    refused("const o = { get x() { return 1; } };", "getter");
    refused("const o = { set x(v) {} };", "setter");
    refused("class A { get x() { return 1; } }", "getter");
    refused("class A { static set x(v) {} }", "setter");
    refused(
        "Object.defineProperty(o, 'x', { get() { return 1; } });",
        "Object.defineProperty",
    );
    refused("Object.defineProperties(o, {});", "Object.defineProperties");
    refused(
        "const o = Object.create(p, { x: { value: 1 } });",
        "Object.create",
    );
    refused("o.__defineGetter__('x', () => 1);", "__defineGetter__");
    refused("o.__lookupSetter__('x');", "__lookupSetter__");
    refused("const p = o.__proto__;", "__proto__");
    refused("const p = o['__proto__'];", "__proto__");
    refused("const o = { __proto__: null };", "__proto__");
    refused("Object.freeze(o);", "Object.freeze");
    refused("const s = Symbol('x');", "Symbol");
    refused("const s = Symbol.asyncIterator;", "Symbol");
    clean(
        "const o = { [Symbol.iterator]() { return [][Symbol.iterator](); } };\n\
         const p = Object.create(null);",
        SourceKind::CommonJs,
    );
}

#[test]
fn with_generators_and_delete_are_refused() {
    // `with` parses only in sloppy mode: CommonJS without "use strict".
    assert_eq!(sites("with (o) { x = 1; }"), ["1:1 with"]);
    assert_eq!(
        sites("function* g() { yield 1; }"),
        ["1:1 generator", "1:17 yield"]
    );
    refused("const o = { *g() {} };", "generator");
    refused("async function* g() {}", "generator");
    assert_eq!(sites("delete o.x;"), ["1:1 delete"]);
}

#[test]
fn arguments_is_refused_but_a_parameter_named_so_is_not() {
    refused("function f() { return arguments.length; }", "arguments");
    refused("const f = () => arguments[0];", "arguments");
    clean(
        "function f(...args) { return args.length; }",
        SourceKind::CommonJs,
    );
}

#[test]
fn refused_modules_say_which_and_why() {
    let found = check_source(
        "t.js",
        "const cp = require('child_process');\nconst fs = require('node:fs');",
        SourceKind::CommonJs,
    );
    let text: Vec<String> = found.sites.iter().map(|s| s.to_string()).collect();
    assert_eq!(text.len(), 2, "{text:?}");
    assert!(text[0].starts_with("t.js:1:12: require('child_process'): "));
    assert!(text[0].contains("starts processes"));
    assert!(text[1].starts_with("t.js:2:12: require('node:fs'): "));
    assert!(text[1].contains("filesystem"));
    for module in ["fs", "http", "https", "net", "worker_threads", "vm"] {
        refused(
            &format!("require('{module}');"),
            &format!("require('{module}')"),
        );
    }
    let esm = sites_of(
        "import { readFileSync } from 'fs';\nexport * from 'node:http';",
        SourceKind::Module,
    );
    assert_eq!(esm, ["1:1 import 'fs'", "2:1 export … from 'node:http'"]);
}

#[test]
fn a_computed_module_name_or_require_as_a_value_is_refused() {
    refused("const m = require(name);", "require(non-literal)");
    refused("const m = require('a' + 'b');", "require(non-literal)");
    refused("const m = require(`./${name}`);", "require(non-literal)");
    refused("const r = require; r('fs');", "require");
    refused("const p = require.resolve('x');", "require");
    refused("const m = import('./x.js');", "import()");
}

#[test]
fn relative_modules_and_the_s3_client_are_supported_and_packages_are_listed() {
    let found = check_source(
        "t.js",
        "const a = require('./a');\nconst b = require(`../b.js`);\n\
         const { S3Client } = require('@aws-sdk/client-s3');\nconst u = require('uuid/v4');",
        SourceKind::CommonJs,
    );
    assert!(found.sites.is_empty(), "{:?}", found.sites);
    assert_eq!(found.packages.len(), 1);
    assert_eq!(found.packages[0].name, "uuid");
    assert_eq!(found.packages[0].specifier, "uuid/v4");
    assert_eq!((found.packages[0].line, found.packages[0].col), (4, 11));
}

#[test]
fn other_aws_sdk_clients_are_refused() {
    refused(
        "const { DynamoDB } = require('@aws-sdk/client-dynamodb');",
        "require('@aws-sdk/client-dynamodb')",
    );
}

#[test]
fn the_global_object_timers_and_network_are_refused() {
    refused("globalThis.x = 1;", "globalThis");
    refused("global.x = 1;", "global");
    refused("setTimeout(() => {}, 10);", "setTimeout");
    refused("queueMicrotask(() => {});", "queueMicrotask");
    refused("const r = fetch('http://x');", "fetch");
    refused("const m = new WebAssembly.Module(bytes);", "WebAssembly");
    refused("const w = new WeakRef(o);", "WeakRef");
    refused("const a = new SharedArrayBuffer(8);", "SharedArrayBuffer");
}

#[test]
fn process_env_is_allowed_but_the_rest_of_process_is_not() {
    clean("const b = process.env.BUCKET || 'x';", SourceKind::CommonJs);
    refused("process.exit(1);", "process");
    refused("process.on('exit', () => {});", "process");
}

#[test]
fn syntax_outside_the_subset_is_refused() {
    refused("const n = 10n;", "BigInt literal");
    refused("const n = BigInt(10);", "BigInt");
    refused("const s = tag`x${1}`;", "tagged template");
    refused("function F() { return new.target; }", "new.target");
    refused("for (const k in o) {}", "for…in");
    refused(
        "async function f(xs) { for await (const x of xs) {} }",
        "for await…of",
    );
    refused("try { f(); } finally { g(); }", "try…finally");
    refused(
        "class A { #x = 1; get() { return this.#x; } }",
        "private member",
    );
    refused("class A { static { init(); } }", "static block");
    refused("class A { static accessor x = 1; }", "accessor");
    refused("const o = { m() { return super.m(); } };", "super");
    let esm = sites_of("const u = import.meta.url;", SourceKind::Module);
    assert_eq!(esm, ["1:11 import.meta"]);
}

#[test]
fn regex_flags_outside_gimsu_are_refused() {
    clean("const r = /a+b/gimsu;", SourceKind::CommonJs);
    assert_eq!(sites("const r = /a/y;"), ["1:11 regex flag y"]);
    assert_eq!(sites("const r = /a/dg;"), ["1:11 regex flag d"]);
    assert_eq!(sites("const r = /[a]/v;"), ["1:11 regex flag v"]);
}

#[test]
fn a_file_that_does_not_parse_is_one_site_with_the_parsers_message() {
    let found = check_source("bad.js", "const x = ;\nconst y = (;", SourceKind::CommonJs);
    assert_eq!(found.sites.len(), 1, "{:?}", found.sites);
    let site = &found.sites[0];
    assert_eq!((site.line, site.col), (1, 11));
    assert!(matches!(&site.construct, Construct::Syntax(m) if !m.is_empty()));
    // An early error Node would refuse the file for is one too.
    let twice = check_source("t.js", "let a = 1;\nlet a = 2;", SourceKind::CommonJs);
    assert_eq!(twice.sites.len(), 1, "{:?}", twice.sites);
    assert!(matches!(twice.sites[0].construct, Construct::Syntax(_)));
    // `with` is a syntax error in a module (strict mode).
    let strict = check_source("t.mjs", "with (o) {}", SourceKind::Module);
    assert!(matches!(strict.sites[0].construct, Construct::Syntax(_)));
}

#[test]
fn a_commonjs_file_with_module_syntax_is_checked_as_a_module() {
    // Packages ship ES module builds as `.js` for bundlers; Node 22 detects them.
    let found = check_source(
        "dist-es/index.js",
        "export * from './a.js';\nimport fs from 'fs';\nexport const x = eval('1');",
        SourceKind::CommonJs,
    );
    let names: Vec<String> = found.sites.iter().map(|s| s.construct.name()).collect();
    assert_eq!(names, ["import 'fs'", "eval"]);
    // A file that parses neither way keeps the CommonJS parser's message.
    let broken = check_source("t.js", "export const = 1;", SourceKind::CommonJs);
    assert!(matches!(broken.sites[0].construct, Construct::Syntax(_)));
}

#[test]
fn brackets_nested_too_deep_are_one_site() {
    let text = format!(
        "x = {}1{};",
        "(".repeat(MAX_NESTING + 1),
        ")".repeat(MAX_NESTING + 1)
    );
    let found = check_source("t.js", &text, SourceKind::CommonJs);
    assert_eq!(found.sites.len(), 1);
    assert_eq!(found.sites[0].construct, Construct::TooDeep);
    // The assignment is one level, each bracket another: the 1000th bracket is one too many.
    assert_eq!(found.sites[0].col, 4 + MAX_NESTING as u32);
}

#[test]
fn long_chains_of_prefix_operators_ternaries_and_assignments_are_one_site() {
    for text in [
        format!("x = {}1;", "!".repeat(200_000)),
        format!("x = {}1;", "- ".repeat(200_000)),
        format!("x = {}1;", "a ? b : ".repeat(100_000)),
        format!("{}1;", "x = ".repeat(100_000)),
        format!("f = {}1;", "a => ".repeat(100_000)),
        format!("x = {}1;", "typeof ".repeat(100_000)),
        format!("s = 'a'{};", " + 'a'".repeat(100_000)),
        // Chains inside brackets add up.
        format!("x = {}1{};", "!!!(".repeat(300), ")".repeat(300)),
    ] {
        let found = check_source("t.js", &text, SourceKind::CommonJs);
        assert_eq!(found.sites.len(), 1, "{}", &text[..40]);
        assert_eq!(found.sites[0].construct, Construct::TooDeep);
    }
}

#[test]
fn long_flat_code_is_not_too_deep() {
    // Statements, arguments and elements do not nest; nor do strings and comments.
    let statements = "x = !a ? -b + 1 : c * 2;\n".repeat(10_000);
    let arguments = format!("f({});", "a + 1, ".repeat(10_000));
    let banner = format!(
        "/*{}*/\n// {}\nconst s = '{}';",
        "*".repeat(5_000),
        "-".repeat(5_000),
        "!".repeat(5_000)
    );
    for text in [statements, arguments, banner] {
        let found = check_source("t.js", &text, SourceKind::CommonJs);
        assert!(found.sites.is_empty(), "{:?}", found.sites);
    }
}

#[test]
fn supported_code_has_no_sites() {
    clean(
        r#""use strict";
const { a, b: [c, ...d] = [], ...rest } = require("./config");
let total = 0;
for (let i = 0; i < 10; i++) { if (i % 2) continue; total += i; }
for (const x of [1, 2, 3]) total += x;
let n = 3;
do { n--; } while (n > 0);
outer: for (const row of [[1], [2]]) { for (const v of row) { if (v > 1) continue outer; if (v < 0) break outer; } }
switch (total) { case 1: total++; case 2: break; default: total = 0; }
class Base { constructor(x) { this.x = x; } get_x() { return this.x; } static make() { return new Base(1); } }
class Derived extends Base { y = 2; constructor() { super(3); } get_x() { return super.get_x() + this.y; } }
const square = (v) => v * v;
const text = `total ${total} ${square(2)}`;
const maybe = rest?.deep?.value ?? "none";
const obj = { square, method() { return this; }, [text]: 1, ...rest };
const re = /^[a-z]+$/i;
async function main(event, context) {
  try { await context.session.get("k"); } catch { throw new Error("no"); }
  const [first = 1, second] = await Promise.all([1, 2]);
  return { first, second, ok: re.test(event.name), type: typeof event, has: "x" in obj, inst: obj instanceof Object };
}
exports.handler = main;
return;
"#,
        SourceKind::CommonJs,
    );
}

#[test]
fn positions_count_from_one_and_in_utf16() {
    let found = check_source(
        "t.js",
        "// é😀\nconst s = 'é😀'; eval(s);",
        SourceKind::CommonJs,
    );
    assert_eq!(found.sites[0].line, 2);
    // `const s = 'é😀'; ` is 17 UTF-16 units (the emoji counts two).
    assert_eq!(found.sites[0].col, 18);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Any text, however broken, gives sites and never a panic, in bounded time.
    #[test]
    fn arbitrary_ascii_never_panics(text in "[ -~\n\t]{0,400}") {
        let started = std::time::Instant::now();
        check_source("fuzz.js", &text, SourceKind::CommonJs);
        check_source("fuzz.mjs", &text, SourceKind::Module);
        // Generous: a hang or a blow-up, not a timing, is what this catches.
        prop_assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }

    /// JavaScript-flavoured tokens in random order reach deeper into the parser than random
    /// characters do.
    #[test]
    fn arbitrary_token_soup_never_panics(tokens in proptest::collection::vec(
        prop_oneof![
            Just("function"), Just("class"), Just("get"), Just("("), Just(")"), Just("{"),
            Just("}"), Just("["), Just("]"), Just("=>"), Just("`${"), Just("`"), Just("/a/y"),
            Just("async"), Just("await"), Just("yield"), Just("*"), Just("require"),
            Just("'fs'"), Just("eval"), Just("x"), Just("="), Just(";"), Just(","),
            Just("super"), Just("#p"), Just("new"), Just("."), Just("target"), Just("1n"),
            Just("with"), Just("delete"), Just("for"), Just("in"), Just("of"), Just("\n"),
        ],
        0..120,
    )) {
        let text = tokens.join(" ");
        check_source("fuzz.js", &text, SourceKind::CommonJs);
        check_source("fuzz.mjs", &text, SourceKind::Module);
    }

    /// Any bytes, decoded as Node would refuse or accept them, never panic the checker.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let text = String::from_utf8_lossy(&bytes);
        check_source("fuzz.js", &text, SourceKind::CommonJs);
    }
}
