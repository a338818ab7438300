//! What the compiler knows of a function's package beyond its trace: which files it holds and
//! the text of its JSON files, so a `require('./x')` is resolved as Node resolves it (the file
//! system is fixed for a revision), and the environment its handler sees in `process.env`.
//!
//! Resolution follows Node's `require` for a relative specifier (`./`, `../`, `.`, `..`):
//! the path as a file (`X`, `X.js`, `X.json`, `X.node`), then as a directory (its
//! `package.json`'s `main`, then `index.js`, `index.json`, `index.node`). Only files inside
//! the package resolve; anything else is an error the compiler turns into a miss.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::Path;

/// JSON files larger than this are not kept: a `require` of one misses.
pub const MAX_JSON_BYTES: u64 = 4 * 1024 * 1024;
/// A package with more files than this is described only up to it (the rest resolve to
/// nothing, so a `require` of one misses).
pub const MAX_FILES: usize = 20_000;

/// A package's files (paths relative to its root, `/`-separated) and its JSON files' text.
#[derive(Debug, Clone, Default)]
pub struct Package {
    files: BTreeSet<String>,
    json: BTreeMap<String, String>,
}

/// What a relative `require` loads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolved {
    /// A CommonJS file: its top level runs once, and its `module.exports` is the value.
    Script(String),
    /// A JSON file: its text, parsed once (a byte order mark removed, as Node does).
    Json(String, String),
}

impl Package {
    /// Reads the files of the package at `dir` (not `node_modules`, `.git`, or what symbolic
    /// links point to).
    pub fn read(dir: &Path) -> io::Result<Package> {
        let mut package = Package::default();
        package.walk(dir, "")?;
        Ok(package)
    }

    fn walk(&mut self, dir: &Path, prefix: &str) -> io::Result<()> {
        let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            if self.files.len() >= MAX_FILES {
                return Ok(());
            }
            let Some(name) = entry.file_name().to_str().map(String::from) else {
                continue;
            };
            let file_type = entry.file_type()?;
            let path = format!("{prefix}{name}");
            if file_type.is_dir() {
                if name != "node_modules" && name != ".git" {
                    self.walk(&entry.path(), &format!("{path}/"))?;
                }
            } else if file_type.is_file() {
                if name.ends_with(".json") && entry.metadata()?.len() <= MAX_JSON_BYTES {
                    if let Ok(text) = std::fs::read_to_string(entry.path()) {
                        self.json.insert(path.clone(), text);
                    }
                }
                self.files.insert(path);
            }
        }
        Ok(())
    }

    /// Adds a file (tests, and packages described without a disk).
    pub fn insert(&mut self, path: &str, json: Option<&str>) {
        self.files.insert(path.to_string());
        if let Some(text) = json {
            self.json.insert(path.to_string(), text.to_string());
        }
    }

    fn is_file(&self, path: &str) -> bool {
        self.files.contains(path)
    }

    fn is_dir(&self, path: &str) -> bool {
        let prefix = format!("{path}/");
        path.is_empty()
            || self
                .files
                .range(prefix.clone()..)
                .next()
                .is_some_and(|f| f.starts_with(&prefix))
    }

    /// Whether a `.js` file is an ES module: the nearest `package.json` above it says
    /// `"type": "module"`.
    fn module_scope(&self, file: &str) -> bool {
        let mut dir = parent(file);
        loop {
            let manifest = join_dir(dir, "package.json");
            if let Some(text) = self.json.get(&manifest) {
                return serde_json::from_str::<serde_json::Value>(text)
                    .ok()
                    .and_then(|v| v.get("type").and_then(|t| t.as_str()).map(String::from))
                    .as_deref()
                    == Some("module");
            }
            if self.is_file(&manifest) || dir.is_empty() {
                return false;
            }
            dir = parent(dir);
        }
    }

    /// What `require(specifier)` in the package's file `from` loads.
    pub fn resolve(&self, from: &str, specifier: &str) -> Result<Resolved, String> {
        let relative = specifier == "."
            || specifier == ".."
            || specifier.starts_with("./")
            || specifier.starts_with("../");
        if !relative {
            return Err(format!("{specifier:?} is not a relative path"));
        }
        let joined = normalise(&format!("{}/{specifier}", parent(from)))
            .ok_or_else(|| format!("{specifier:?} leaves the package"))?;
        let as_directory_only = specifier.ends_with('/') || specifier == "." || specifier == "..";
        let found = if as_directory_only {
            None
        } else {
            self.as_file(&joined)
        };
        let found = match found {
            Some(found) => Some(found),
            None => self.as_directory(&joined)?,
        };
        let path = found.ok_or_else(|| format!("{specifier:?} names no file of the package"))?;
        self.load(&path, specifier)
    }

    fn load(&self, path: &str, specifier: &str) -> Result<Resolved, String> {
        let name = path.rsplit('/').next().unwrap_or(path);
        match name.rsplit_once('.').map(|(_, e)| e) {
            Some("json") => {
                let text = self
                    .json
                    .get(path)
                    .ok_or_else(|| format!("{path} was not read"))?;
                let text = text.strip_prefix('\u{feff}').unwrap_or(text);
                Ok(Resolved::Json(path.to_string(), text.to_string()))
            }
            Some("cjs") => Ok(Resolved::Script(path.to_string())),
            Some("mjs") => Err(format!("{specifier:?} is an ES module ({path})")),
            Some("node") => Err(format!("{specifier:?} is a native addon")),
            // `.js`, and any other name, Node loads as CommonJS unless its scope is ES modules.
            _ if self.module_scope(path) => Err(format!("{specifier:?} is an ES module ({path})")),
            _ => Ok(Resolved::Script(path.to_string())),
        }
    }

    /// Whether a file of the package is an ES module: `.mjs`, or `.js` under a `package.json`
    /// that says `"type": "module"`.
    pub fn is_module(&self, file: &str) -> bool {
        match file.rsplit_once('.').map(|(_, e)| e) {
            Some("mjs") => true,
            Some("js") => self.module_scope(file),
            _ => false,
        }
    }

    /// The file an ES module's `import … from specifier` in `from` loads: a relative path
    /// names a file exactly (no extensions added, no directory index), as Node's ES module
    /// resolution has it.
    pub fn resolve_import(&self, from: &str, specifier: &str) -> Result<String, String> {
        if !(specifier.starts_with("./") || specifier.starts_with("../")) {
            return Err(format!("{specifier:?} is not a relative path"));
        }
        let path = normalise(&format!("{}/{specifier}", parent(from)))
            .ok_or_else(|| format!("{specifier:?} leaves the package"))?;
        if specifier.contains(['?', '#', '%']) || !self.is_file(&path) {
            return Err(format!("{specifier:?} names no file of the package"));
        }
        Ok(path)
    }

    fn as_file(&self, path: &str) -> Option<String> {
        if self.is_file(path) {
            return Some(path.to_string());
        }
        ["js", "json", "node"]
            .iter()
            .map(|e| format!("{path}.{e}"))
            .find(|p| self.is_file(p))
    }

    fn as_index(&self, dir: &str) -> Option<String> {
        ["index.js", "index.json", "index.node"]
            .iter()
            .map(|f| join_dir(dir, f))
            .find(|p| self.is_file(p))
    }

    fn as_directory(&self, dir: &str) -> Result<Option<String>, String> {
        if !self.is_dir(dir) {
            return Ok(None);
        }
        let manifest = join_dir(dir, "package.json");
        if let Some(text) = self.json.get(&manifest) {
            let value: serde_json::Value = serde_json::from_str(text)
                .map_err(|e| format!("{manifest} is not valid JSON: {e}"))?;
            if let Some(main) = value.get("main").and_then(|m| m.as_str()) {
                if !main.is_empty() {
                    let target = normalise(&format!("{dir}/{main}"))
                        .ok_or_else(|| format!("{manifest}'s main leaves the package"))?;
                    if let Some(found) = self.as_file(&target).or_else(|| self.as_index(&target)) {
                        return Ok(Some(found));
                    }
                }
            }
        } else if self.is_file(&manifest) {
            return Err(format!("{manifest} was not read"));
        }
        Ok(self.as_index(dir))
    }
}

/// The directory of a package path (`""` for the root).
fn parent(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(dir, _)| dir)
}

fn join_dir(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

/// `a/./b/../c` as `a/c`, without a trailing `/`; `None` when it climbs above the root.
fn normalise(path: &str) -> Option<String> {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            part => parts.push(part),
        }
    }
    Some(parts.join("/"))
}

/// The function's environment as its handler reads it in `process.env`: fixed for a revision
/// (a change of the environment is a new revision, traced and compiled again).
#[derive(Debug, Clone, Default)]
pub struct Environment {
    /// The variables whose values are the function's own.
    pub vars: BTreeMap<String, String>,
    /// Names the platform sets (or may set) per instance or per request, and prefixes of
    /// such names ending in `*`: reading one that is not in `vars` misses.
    pub platform: Vec<String>,
}

/// What `process.env.NAME` reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvRead {
    Value(String),
    /// Not set: `undefined`.
    Absent,
    /// The platform's: the fast path does not know it.
    Unknown,
}

impl Environment {
    pub fn read(&self, name: &str) -> EnvRead {
        if let Some(value) = self.vars.get(name) {
            return EnvRead::Value(value.clone());
        }
        let platform = self.platform.iter().any(|p| match p.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => p == name,
        });
        if platform {
            EnvRead::Unknown
        } else {
            EnvRead::Absent
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn package(files: &[(&str, Option<&str>)]) -> Package {
        let mut p = Package::default();
        for (path, json) in files {
            p.insert(path, *json);
        }
        p
    }

    fn script(path: &str) -> Result<Resolved, String> {
        Ok(Resolved::Script(path.to_string()))
    }

    #[test]
    fn files_resolve_in_node_order() {
        let p = package(&[
            ("index.js", None),
            ("lib/users.js", None),
            ("lib/users.json", Some("[]")),
            ("lib/data.json", Some("\u{feff}{\"a\":1}")),
            ("lib/plain", None),
            ("lib/plain.js", None),
            ("lib/x.cjs", None),
        ]);
        assert_eq!(p.resolve("index.js", "./lib/users"), script("lib/users.js"));
        assert_eq!(
            p.resolve("index.js", "./lib/users.js"),
            script("lib/users.js")
        );
        assert_eq!(
            p.resolve("index.js", "./lib/users.json"),
            Ok(Resolved::Json("lib/users.json".into(), "[]".into()))
        );
        // The byte order mark goes, as Node strips it.
        assert_eq!(
            p.resolve("lib/users.js", "./data"),
            Ok(Resolved::Json("lib/data.json".into(), "{\"a\":1}".into()))
        );
        // A file named exactly wins over one with an extension added.
        assert_eq!(p.resolve("index.js", "./lib/plain"), script("lib/plain"));
        assert_eq!(p.resolve("lib/users.js", "../index"), script("index.js"));
        assert_eq!(p.resolve("lib/users.js", "./x.cjs"), script("lib/x.cjs"));
        assert_eq!(
            p.resolve("lib/a/../users.js", "./users"),
            script("lib/users.js")
        );
    }

    #[test]
    fn directories_resolve_through_main_then_index() {
        let p = package(&[
            ("index.js", None),
            ("lib/index.js", None),
            ("pkg/package.json", Some(r#"{"main": "src/start"}"#)),
            ("pkg/src/start.js", None),
            ("nomain/package.json", Some(r#"{"name": "x"}"#)),
            ("nomain/index.json", Some("1")),
            ("broken/package.json", Some("{")),
            ("broken/index.js", None),
        ]);
        assert_eq!(p.resolve("index.js", "./lib"), script("lib/index.js"));
        assert_eq!(p.resolve("index.js", "./lib/"), script("lib/index.js"));
        assert_eq!(p.resolve("lib/index.js", "."), script("lib/index.js"));
        assert_eq!(p.resolve("lib/index.js", ".."), script("index.js"));
        assert_eq!(p.resolve("index.js", "./pkg"), script("pkg/src/start.js"));
        assert_eq!(
            p.resolve("index.js", "./nomain"),
            Ok(Resolved::Json("nomain/index.json".into(), "1".into()))
        );
        assert!(p.resolve("index.js", "./broken").is_err());
    }

    #[test]
    fn what_node_would_refuse_or_load_otherwise_is_an_error() {
        let p = package(&[
            ("index.js", None),
            ("esm/package.json", Some(r#"{"type": "module"}"#)),
            ("esm/a.js", None),
            ("b.mjs", None),
            ("addon.node", None),
        ]);
        assert!(p.resolve("index.js", "./missing").is_err());
        assert!(p.resolve("index.js", "../outside").is_err());
        assert!(p.resolve("index.js", "lodash").is_err());
        assert!(p.resolve("index.js", "/etc/passwd").is_err());
        assert!(p.resolve("index.js", "./esm/a").is_err());
        assert!(p.resolve("index.js", "./b.mjs").is_err());
        assert!(p.resolve("index.js", "./addon").is_err());
    }

    #[test]
    fn the_environment_answers_the_functions_variables_and_misses_the_platforms() {
        let env = Environment {
            vars: [("BUCKET".to_string(), "users".to_string())].into(),
            platform: vec!["AWS_*".into(), "TZ".into()],
        };
        assert_eq!(env.read("BUCKET"), EnvRead::Value("users".into()));
        assert_eq!(env.read("OTHER"), EnvRead::Absent);
        assert_eq!(env.read("AWS_REGION"), EnvRead::Unknown);
        assert_eq!(env.read("TZ"), EnvRead::Unknown);
        assert_eq!(env.read("TZX"), EnvRead::Absent);
    }

    #[test]
    fn imports_name_files_exactly() {
        let p = package(&[
            ("package.json", Some(r#"{"type": "module"}"#)),
            ("index.js", None),
            ("lib/a.js", None),
            ("lib/b.cjs", None),
            ("c.mjs", None),
        ]);
        assert_eq!(
            p.resolve_import("index.js", "./lib/a.js"),
            Ok("lib/a.js".into())
        );
        assert_eq!(p.resolve_import("lib/a.js", "../c.mjs"), Ok("c.mjs".into()));
        assert!(p.resolve_import("index.js", "./lib/a").is_err());
        assert!(p.resolve_import("index.js", "./lib").is_err());
        assert!(p.resolve_import("index.js", "lodash").is_err());
        assert!(p.is_module("index.js") && p.is_module("c.mjs") && !p.is_module("lib/b.cjs"));
        assert!(!package(&[("index.js", None)]).is_module("index.js"));
    }

    #[test]
    fn a_package_is_read_from_disk_without_node_modules() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("lib")).unwrap();
        std::fs::create_dir_all(dir.path().join("node_modules/x")).unwrap();
        std::fs::write(dir.path().join("index.js"), "").unwrap();
        std::fs::write(dir.path().join("lib/conf.json"), "{\"k\":2}").unwrap();
        std::fs::write(dir.path().join("node_modules/x/index.js"), "").unwrap();
        let p = Package::read(dir.path()).unwrap();
        assert_eq!(
            p.resolve("index.js", "./lib/conf"),
            Ok(Resolved::Json("lib/conf.json".into(), "{\"k\":2}".into()))
        );
        assert!(p.resolve("index.js", "./node_modules/x").is_err());
    }
}
