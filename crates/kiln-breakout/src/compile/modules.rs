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
use super::imports as rt;
use crate::package::{EnvRead, Resolved};
use crate::runtime::builtins::Builtin;
use crate::runtime::modules::{RECORD_EXPORTS, RECORD_STATE, RECORD_VARIABLE};
use crate::runtime::value::Value;
use crate::trace::{Bind, Expr};

/// The package file a function id (`lib/users.js#1`, `init:lib/users.js`) belongs to.
pub fn file_of(function: &str) -> &str {
    match function.strip_prefix("init:") {
        Some(file) => file,
        None => function.rsplit_once('#').map_or(function, |(file, _)| file),
    }
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
        let Expr::Global { name } = e else {
            return false;
        };
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_function_id_names_its_file() {
        assert_eq!(file_of("init:lib/users.js"), "lib/users.js");
        assert_eq!(file_of("lib/users.js#3"), "lib/users.js");
        assert_eq!(file_of("a#b.js#1"), "a#b.js");
    }
}
