//! The support check on whole packages: the benchmark handlers (tests/fixtures/) must be
//! clean, and which files of a package and its node_modules are read.

use std::fs;
use std::path::{Path, PathBuf};

use kiln_breakout::{check_dir, CheckError, Construct, ModuleRefusal, Report};

mod common;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn write(root: &Path, file: &str, text: &str) {
    let path = root.join(file);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
}

fn lines(report: &Report) -> Vec<String> {
    report.sites.iter().map(|s| s.to_string()).collect()
}

#[test]
fn the_benchmark_handlers_are_clean() {
    for name in common::BENCHMARKS {
        let report = check_dir(&fixtures().join(name)).unwrap();
        assert!(report.files_checked >= 1, "{name}: no files read");
        assert!(report.sites.is_empty(), "{name}: {:#?}", lines(&report));
    }
    // authorize's own module, required relatively, is read too.
    assert_eq!(
        check_dir(&fixtures().join("authorize"))
            .unwrap()
            .files_checked,
        2
    );
}

#[test]
fn sites_carry_paths_relative_to_the_package_and_come_sorted() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "z.js", "eval('1');");
    write(dir.path(), "lib/a.js", "\n\nconst p = new Proxy({}, {});");
    write(dir.path(), "a.js", "delete o.x; with (o) {}");
    let report = check_dir(dir.path()).unwrap();
    let found: Vec<String> = report
        .sites
        .iter()
        .map(|s| format!("{}:{}:{} {}", s.file, s.line, s.col, s.construct.name()))
        .collect();
    assert_eq!(
        found,
        [
            "a.js:1:1 delete",
            "a.js:1:13 with",
            "lib/a.js:3:15 Proxy",
            "z.js:1:1 eval"
        ]
    );
    assert_eq!(report.files_checked, 3);
}

#[test]
fn loaded_packages_are_checked_and_others_are_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(
        root,
        "index.js",
        "const clean = require('clean');\nconst dirty = require('dirty/sub');\n\
         const { S3Client } = require('@aws-sdk/client-s3');",
    );
    write(root, "node_modules/clean/package.json", "{}");
    write(
        root,
        "node_modules/clean/index.js",
        "module.exports = (x) => x + 1;",
    );
    write(
        root,
        "node_modules/dirty/sub.js",
        "module.exports = require('inner');",
    );
    // `inner` is found in dirty's own node_modules first, as Node does.
    write(
        root,
        "node_modules/dirty/node_modules/inner/index.js",
        "module.exports = eval('1');",
    );
    write(root, "node_modules/inner/index.js", "with (o) {}");
    // Never loaded: never read.
    write(root, "node_modules/unused/index.js", "eval('x');");
    // The SDK is an intrinsic: never read, whatever it holds.
    write(
        root,
        "node_modules/@aws-sdk/client-s3/index.js",
        "eval('x');",
    );
    write(root, "node_modules/@smithy/core/index.js", "eval('x');");
    let report = check_dir(root).unwrap();
    assert_eq!(
        lines(&report),
        ["node_modules/dirty/node_modules/inner/index.js:1:18: eval: eval runs code made at run time, which cannot be traced ahead"]
    );
    assert_eq!(report.files_checked, 4);
}

#[test]
fn a_package_that_is_not_there_or_a_native_addon_is_a_site() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(
        root,
        "index.js",
        "const sharp = require('sharp');\nconst x = require('missing');",
    );
    write(
        root,
        "node_modules/sharp/lib/index.js",
        "module.exports = 1;",
    );
    write(root, "node_modules/sharp/build/sharp.node", "\x7fELF");
    let report = check_dir(root).unwrap();
    let found: Vec<(String, Construct)> = report
        .sites
        .iter()
        .map(|s| {
            (
                format!("{}:{}:{}", s.file, s.line, s.col),
                s.construct.clone(),
            )
        })
        .collect();
    assert_eq!(found.len(), 2, "{found:?}");
    assert_eq!(found[0].0, "index.js:2:11");
    assert!(matches!(
        &found[0].1,
        Construct::Module { specifier, refusal: ModuleRefusal::Missing, .. } if specifier == "missing"
    ));
    assert_eq!(
        found[1],
        (
            "node_modules/sharp/build/sharp.node:1:1".into(),
            Construct::NativeAddon
        )
    );
}

#[test]
fn js_files_are_modules_when_their_package_json_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    // As CommonJS `with` parses (and is refused); as a module it is a syntax error.
    write(root, "cjs/a.js", "with (o) {}");
    write(root, "esm/package.json", r#"{"type": "module"}"#);
    write(root, "esm/deeper/a.js", "with (o) {}");
    write(root, "b.cjs", "with (o) {}");
    write(root, "c.mjs", "with (o) {}");
    let report = check_dir(root).unwrap();
    let kinds: Vec<(String, bool)> = report
        .sites
        .iter()
        .map(|s| (s.file.clone(), matches!(s.construct, Construct::Syntax(_))))
        .collect();
    assert_eq!(
        kinds,
        [
            ("b.cjs".to_string(), false),
            ("c.mjs".to_string(), true),
            ("cjs/a.js".to_string(), false),
            ("esm/deeper/a.js".to_string(), true),
        ]
    );
}

#[test]
fn a_file_that_is_not_utf8_is_a_site() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("a.js"), b"const s = '\xff\xfe';").unwrap();
    let report = check_dir(dir.path()).unwrap();
    assert_eq!(report.sites.len(), 1);
    assert_eq!(report.sites[0].construct, Construct::NotUtf8);
}

#[test]
fn a_path_that_is_not_a_directory_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a.js");
    fs::write(&file, "1;").unwrap();
    assert!(matches!(
        check_dir(&file),
        Err(CheckError::NotADirectory(_))
    ));
    let missing = dir.path().join("missing");
    let error = check_dir(&missing).unwrap_err();
    assert!(matches!(error, CheckError::Read { .. }));
    assert!(error.to_string().contains("missing"));
}

#[test]
fn the_report_serialises_to_json() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "index.js", "const fs = require('fs');");
    let report = check_dir(dir.path()).unwrap();
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["files_checked"], 1);
    assert_eq!(json["sites"][0]["file"], "index.js");
    assert_eq!(json["sites"][0]["line"], 1);
    assert_eq!(json["sites"][0]["col"], 12);
    assert_eq!(json["sites"][0]["construct"], "require('fs')");
    assert!(json["sites"][0]["reason"]
        .as_str()
        .unwrap()
        .contains("filesystem"));
}
