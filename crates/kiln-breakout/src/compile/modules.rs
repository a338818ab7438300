//! The package's own modules and the function's environment in compiled code: `require` of a
//! relative path (resolved at compile time, as the package's files are fixed for a
//! revision), `module.exports` and `exports` per file, and `process.env.NAME` read-only.
//!
//! Each file the code names gets a record in the arena ([`crate::runtime::modules`]). A file's
//! top level is a function that runs once: its record's state says whether it has started, so
//! a second `require` (or a cycle back to a file still running) answers the `module.exports`
//! it has, as Node's module cache does. A JSON file's text is in the module's data and parsed
//! on its first `require`.

use wasm_encoder::{BlockType, ValType};

use super::codegen::{mem64, Generator};
use super::function_id::file_of;
use super::imports as rt;
use crate::package::{EnvRead, Resolved};
use crate::runtime::builtins::Builtin;
use crate::runtime::modules::{RECORD_EXPORTS, RECORD_STATE, RECORD_VARIABLE};
use crate::runtime::value::Value;
use std::collections::HashSet;

use crate::trace::{Bind, Expr, Node, Trace};

/// The S3 client's package: its imports are the intrinsic namespace's members.
const S3_PACKAGE: &str = "@aws-sdk/client-s3";

/// The variables ES modules export, as `(file, name)`: the trace's `export` lets at a file's
/// top level. Assigning one misses (importers would see the binding change), so the value an
/// export took is the value for good.
pub fn exported(trace: &Trace) -> HashSet<(String, String)> {
    fn walk(file: &str, body: &[Node], out: &mut HashSet<(String, String)>) {
        for node in body {
            match node {
                Node::Let {
                    bind: Bind::Set(Expr::Get { object, .. }),
                    value: Expr::Id { name },
                    ..
                } if matches!(object.as_ref(), Expr::Global { name } if name == "export") => {
                    out.insert((file.to_string(), name.clone()));
                }
                Node::If {
                    then, otherwise, ..
                } => {
                    walk(file, then.as_deref().unwrap_or_default(), out);
                    walk(file, otherwise.as_deref().unwrap_or_default(), out);
                }
                Node::Block { body } | Node::Label { body, .. } => {
                    walk(file, body.as_deref().unwrap_or_default(), out)
                }
                _ => {}
            }
        }
    }
    let mut out = HashSet::new();
    for handler in trace
        .handlers
        .iter()
        .filter(|h| h.function.starts_with("init:"))
    {
        walk(file_of(&handler.function), &handler.body, &mut out);
    }
    out
}

/// `module.exports` as an expression.
fn is_module_exports(e: &Expr) -> bool {
    matches!(e, Expr::Get { object, property }
        if property == "exports" && matches!(object.as_ref(), Expr::Global { name } if name == "module"))
}

/// The variable name `process.env.NAME` or `process.env["NAME"]` reads.
fn env_name(e: &Expr) -> Option<&str> {
    let (object, name) = match e {
        Expr::Get { object, property } => (object, property.as_str()),
        Expr::Index { object, key } => match key.as_ref() {
            Expr::String { value } => (object, value.as_str()),
            _ => return None,
        },
        _ => return None,
    };
    matches!(object.as_ref(), Expr::Get { object, property }
        if property == "env" && matches!(object.as_ref(), Expr::Global { name } if name == "process"))
    .then_some(name)
}

impl Generator<'_> {
    /// The record number of a package file, given on first use.
    pub fn record_index(&mut self, file: &str) -> u32 {
        let next = self.shared.records.len() as u32;
        *self.shared.records.entry(file.to_string()).or_insert(next)
    }

    /// Leaves the address of `file`'s record on the stack.
    pub fn record_address(&mut self, file: &str) {
        let index = self.record_index(file);
        self.sink().i32_const(index as i32).call(rt::MODULE_RECORD);
    }

    /// The expressions this file compiles: `module.exports`, `exports`, `process.env.NAME`
    /// and the globals `module` and `process` otherwise (a miss). False for any other.
    pub fn module_expr(&mut self, e: &Expr) -> bool {
        if is_module_exports(e) {
            let file = self.frame().file.clone();
            self.record_address(&file);
            self.sink().i64_load(mem64(u64::from(RECORD_EXPORTS)));
            return true;
        }
        if let Some(name) = env_name(e) {
            match self.shared.env.as_ref().map(|env| env.read(name)) {
                Some(EnvRead::Value(text)) => {
                    let v = self.shared.data.string(&text);
                    self.value(v);
                }
                Some(EnvRead::Absent) => self.value(Value::UNDEFINED),
                Some(EnvRead::Unknown) => {
                    self.miss(&format!("process.env.{name} is the platform's"), None);
                    self.value(Value::UNDEFINED);
                }
                None => {
                    self.miss("process.env not available", None);
                    self.value(Value::UNDEFINED);
                }
            }
            return true;
        }
        if let Expr::Import { source, name } = e {
            self.import(source, name);
            return true;
        }
        let Expr::Global { name } = e else {
            return false;
        };
        if matches!(name.as_str(), "exports" | "module" | "require") && self.in_es_module() {
            self.miss(
                &format!("ReferenceError: {name} is not defined in an ES module"),
                None,
            );
            self.value(Value::UNDEFINED);
            return true;
        }
        match name.as_str() {
            "exports" => {
                let file = self.frame().file.clone();
                self.record_address(&file);
                self.sink().i64_load(mem64(u64::from(RECORD_VARIABLE)));
            }
            "module" | "process" => {
                self.miss(
                    &format!("{name} other than module.exports and process.env.NAME not compiled"),
                    None,
                );
                self.value(Value::UNDEFINED);
            }
            _ => return false,
        }
        true
    }

    /// Assignments to `module.exports`, `exports` and `process.env` (a miss: it is read-only
    /// here). False for any other target.
    pub fn module_assign(&mut self, bind: &Bind, emit: &mut dyn FnMut(&mut Self)) -> bool {
        let Bind::Set(target) = bind else {
            return false;
        };
        if let Expr::Get { object, property } = target {
            if matches!(object.as_ref(), Expr::Global { name } if name == "export") {
                self.export(property, emit);
                return true;
            }
        }
        if self.assigns_export(target) {
            self.miss(
                "an assignment to a variable an ES module exports not compiled",
                None,
            );
            return true;
        }
        let offset = if is_module_exports(target) {
            RECORD_EXPORTS
        } else if matches!(target, Expr::Global { name } if name == "exports") {
            RECORD_VARIABLE
        } else if env_name(target).is_some()
            || matches!(target, Expr::Global { name } if name == "module" || name == "process")
        {
            self.miss(
                "an assignment to module, process or process.env not compiled",
                None,
            );
            return true;
        } else {
            return false;
        };
        let file = self.frame().file.clone();
        self.record_address(&file);
        emit(self);
        self.sink().i64_store(mem64(u64::from(offset)));
        true
    }

    /// `require('./x')`: the file resolved in the package, its top level run on the first
    /// `require`, its `module.exports` the value. False when the call is not a `require` of
    /// a relative path (the S3 client's package is an intrinsic, elsewhere).
    pub fn require(&mut self, callee: &Expr, args: &[Expr]) -> bool {
        if !matches!(callee, Expr::Global { name } if name == "require") {
            return false;
        }
        let [Expr::String { value: specifier }] = args else {
            return false;
        };
        if self.in_es_module() {
            self.miss(
                "ReferenceError: require is not defined in an ES module",
                None,
            );
            self.value(Value::UNDEFINED);
            return true;
        }
        if !(specifier.starts_with('.')) {
            return false;
        }
        let from = self.frame().file.clone();
        let resolved = match &self.shared.package {
            Some(package) => package.resolve(&from, specifier),
            None => Err("the package's files are not known".to_string()),
        };
        match resolved {
            Ok(Resolved::Script(file)) => match self.shared.tops.get(&file) {
                Some(&function) => {
                    self.sink().call(function);
                    self.record_address(&file);
                    self.sink().i64_load(mem64(u64::from(RECORD_EXPORTS)));
                }
                None => {
                    self.miss(
                        &format!("require of {specifier:?}: {file} was not traced"),
                        None,
                    );
                    self.value(Value::UNDEFINED);
                }
            },
            Ok(Resolved::Json(file, text)) => {
                let record = self.local(ValType::I32);
                self.record_address(&file);
                self.sink()
                    .local_tee(record)
                    .i64_load(mem64(u64::from(RECORD_STATE)))
                    .i64_eqz()
                    .if_(BlockType::Empty)
                    .local_get(record)
                    .i64_const(1)
                    .i64_store(mem64(u64::from(RECORD_STATE)))
                    .local_get(record);
                self.value(Builtin::JsonParse.value());
                self.value(Value::UNDEFINED);
                self.sink().i32_const(1);
                let text = self.shared.data.string(&text);
                self.value(text);
                for _ in 0..3 {
                    self.value(Value::UNDEFINED);
                }
                self.sink()
                    .call(rt::CALL)
                    .i64_store(mem64(u64::from(RECORD_EXPORTS)))
                    .end()
                    .local_get(record)
                    .i64_load(mem64(u64::from(RECORD_EXPORTS)));
                self.free(ValType::I32, record);
            }
            Err(reason) => {
                self.miss(
                    &format!("require of {specifier:?} not compiled: {reason}"),
                    None,
                );
                self.value(Value::UNDEFINED);
            }
        }
        true
    }

    /// Whether an assignment is to a variable its ES module exports.
    fn assigns_export(&self, target: &Expr) -> bool {
        let name = match target {
            Expr::Id { name } if self.frame().function.is_none() => name,
            Expr::From { name } => name,
            _ => return false,
        };
        self.shared
            .exported
            .contains(&(self.frame().file.clone(), name.clone()))
    }

    /// Whether the current file is an ES module (`.mjs`, or `.js` under `"type": "module"`).
    fn in_es_module(&self) -> bool {
        let file = &self.frame().file;
        self.shared
            .package
            .as_ref()
            .is_some_and(|p| p.is_module(file))
    }

    /// `import { name } from source` (`default` for a default import, `*` for a namespace):
    /// a member of the S3 client's namespace, or an export of another ES module of the package
    /// (the default of a CommonJS file, its `module.exports`), read where the import stands,
    /// after the file it names has run (Node evaluates imports first).
    fn import(&mut self, source: &str, name: &str) {
        if source == S3_PACKAGE {
            self.value(Builtin::S3Module.value());
            if name == "*" {
                self.miss("a namespace import of the S3 client not compiled", None);
            } else if name != "default" {
                let key = self.shared.data.string(name);
                self.value(key);
                self.sink().call(rt::GET);
            }
            return;
        }
        let from = self.frame().file.clone();
        let resolved = match &self.shared.package {
            Some(package) => package.resolve_import(&from, source).and_then(|file| {
                match (package.is_module(&file), name) {
                    (_, "*") => Err("a namespace import not compiled".to_string()),
                    (true, _) | (false, "default") => Ok(file),
                    (false, _) => Err(format!("a named import of the CommonJS file {file}")),
                }
            }),
            None => Err("the package's files are not known".to_string()),
        };
        let top = resolved
            .as_ref()
            .ok()
            .and_then(|file| self.shared.tops.get(file).copied());
        match (resolved, top) {
            (Ok(file), Some(function)) => {
                self.sink().call(function);
                self.record_address(&file);
                self.sink().i64_load(mem64(u64::from(RECORD_EXPORTS)));
                let esm = self
                    .shared
                    .package
                    .as_ref()
                    .is_some_and(|p| p.is_module(&file));
                if esm {
                    let key = self.shared.data.string(name);
                    self.value(key);
                    self.sink().call(rt::GET);
                }
            }
            (Ok(file), None) => {
                self.miss(
                    &format!("import from {source:?}: {file} was not traced"),
                    None,
                );
                self.value(Value::UNDEFINED);
            }
            (Err(reason), _) => {
                self.miss(
                    &format!("import from {source:?} not compiled: {reason}"),
                    None,
                );
                self.value(Value::UNDEFINED);
            }
        }
    }

    /// An ES module's `export { local as name }`: the module's namespace (its record's
    /// exports) takes the value where the export stands (an assignment to the variable
    /// later misses).
    fn export(&mut self, name: &str, emit: &mut dyn FnMut(&mut Self)) {
        let file = self.frame().file.clone();
        self.record_address(&file);
        self.sink().i64_load(mem64(u64::from(RECORD_EXPORTS)));
        let key = self.shared.data.string(name);
        self.value(key);
        let local = self.local(ValType::I64);
        emit(self);
        self.sink().local_set(local);
        self.sink().local_get(local).call(rt::SET);
        self.free(ValType::I64, local);
    }

    /// The start of a file's top level: it runs once (a `require` of a file that has started
    /// answers its `module.exports` as it stands).
    pub fn top_level_once(&mut self) {
        let file = self.frame().file.clone();
        let record = self.local(ValType::I32);
        self.record_address(&file);
        self.sink()
            .local_tee(record)
            .i64_load(mem64(u64::from(RECORD_STATE)))
            .i64_const(0)
            .i64_ne()
            .if_(BlockType::Empty)
            .return_()
            .end()
            .local_get(record)
            .i64_const(1)
            .i64_store(mem64(u64::from(RECORD_STATE)))
            .global_get(0)
            .if_(BlockType::Empty);
        // Node loads a file once per instance: a request that loads one would run its top
        // level on every fast request.
        self.miss("a file first loaded by a request not compiled", None);
        self.sink().end();
        self.free(ValType::I32, record);
    }
}
