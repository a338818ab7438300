//! Expressions: each leaves its value (an `i64`) on the stack. Numbers take the inline path
//! where an operator has one (both operands checked to be numbers, then `f64` code); every
//! other case calls the runtime.

use wasm_encoder::{BlockType, ValType};

use super::codegen::{mem32, Binding, Generator};
use super::imports::{self as rt, DIRECT_ARGS};
use crate::runtime::builtins::Builtin;
use crate::runtime::heap::CLOSURE_ENVIRONMENT;
use crate::runtime::ops::{BINARY, UNARY};
use crate::runtime::value::{Value, FALSE, TAGGED, TRUE};
use crate::trace::{Capture, Expr};

impl Generator<'_> {
    pub fn expr(&mut self, e: &Expr) {
        if self.module_expr(e) {
            return;
        }
        match e {
            Expr::Number { value } => self.value(Value::number(*value)),
            Expr::String { value } => {
                let v = self.shared.data.string(value);
                self.value(v);
            }
            Expr::Boolean { value } => self.value(Value::boolean(*value)),
            Expr::Null => self.value(Value::NULL),
            Expr::Hole => self.value(Value::UNDEFINED),
            Expr::Regex { source } => {
                // A literal makes a new object each time it is evaluated.
                self.value(Builtin::RegExpLiteral.value());
                self.value(Value::UNDEFINED);
                self.sink().i32_const(1);
                let text = self.shared.data.string(source);
                self.value(text);
                for _ in 0..3 {
                    self.value(Value::UNDEFINED);
                }
                self.sink().call(rt::CALL);
            }
            // Compiled by `module_expr` (modules.rs), which every expression meets first.
            Expr::Import { .. } => self.miss("an import not compiled", None),
            Expr::Spread { .. } => self.miss("a spread outside an array or call", None),
            Expr::Id { name } => match self.binding(name) {
                Some(Binding::Local(local)) => {
                    self.sink().local_get(local);
                }
                Some(Binding::Cell(cell)) => {
                    self.sink()
                        .local_get(cell)
                        .i64_load(super::codegen::mem64(0));
                }
                Some(Binding::Number(local)) => {
                    self.sink().local_get(local).i64_reinterpret_f64();
                }
                None => self.miss(&format!("the variable {name} not bound"), None),
            },
            Expr::From { name } => {
                if self.environment_cell(name) {
                    self.sink().i64_load(super::codegen::mem64(0));
                } else {
                    self.miss(&format!("the closure variable {name} not captured"), None);
                }
            }
            Expr::Global { name } => {
                if name == "undefined" {
                    self.value(Value::UNDEFINED);
                } else {
                    let name = self.shared.data.string(name);
                    self.value(name);
                    self.sink().call(rt::GLOBAL);
                }
            }
            Expr::This => match self.frame().this {
                Some(this) => {
                    self.sink().local_get(this);
                }
                None => self.value(Value::UNDEFINED),
            },
            Expr::Get { object, property } if property == "length" => {
                let key = self.shared.data.string(property);
                self.get_length(object, key.0);
            }
            Expr::Get { object, property } => self.get_named(object, property),
            Expr::Index { object, key } => self.get_index(object, key),
            Expr::Unary { op, argument } => self.unary(op, argument),
            Expr::Binary { op, left, right } => self.binary(op, left, right),
            Expr::Array { items } => {
                let array = self.local(ValType::I64);
                self.sink().call(rt::ARRAY).local_set(array);
                for item in items {
                    self.sink().local_get(array);
                    match item {
                        Expr::Spread { argument } => {
                            self.expr(argument);
                            self.sink().call(rt::SPREAD);
                        }
                        item => {
                            self.expr(item);
                            self.sink().call(rt::PUSH);
                        }
                    }
                }
                self.sink().local_get(array);
                self.free(ValType::I64, array);
            }
            Expr::Object { properties } if self.object_literal(properties) => {}
            Expr::Object { properties } => {
                let object = self.local(ValType::I64);
                self.sink().call(rt::OBJECT).local_set(object);
                for property in properties {
                    self.sink().local_get(object);
                    match (
                        &property.key,
                        &property.computed,
                        &property.spread,
                        &property.value,
                    ) {
                        (Some(key), _, _, Some(value)) => {
                            let key = self.shared.data.string(key);
                            self.value(key);
                            self.expr(value);
                            self.sink().call(rt::SET);
                        }
                        (None, Some(key), _, Some(value)) => {
                            self.expr(key);
                            self.expr(value);
                            self.sink().call(rt::SET);
                        }
                        (_, _, Some(spread), _) => {
                            self.expr(spread);
                            self.sink().call(rt::ASSIGN);
                        }
                        _ => {
                            self.sink().drop();
                            self.miss("a malformed object member", None);
                        }
                    }
                }
                self.sink().local_get(object);
                self.free(ValType::I64, object);
            }
            Expr::Closure {
                function, captures, ..
            } => self.closure(function, captures),
        }
    }

    /// A closure: made by the runtime, its environment filled here with the cells of what it
    /// captures (the maker's own cells, or those of the maker's environment).
    fn closure(&mut self, function: &str, captures: &[Capture]) {
        let Some(&index) = self.shared.functions.get(function) else {
            self.miss("a closure of a function the trace does not have", None);
            return;
        };
        let closure = self.local(ValType::I64);
        let environment = self.local(ValType::I32);
        self.sink()
            .i32_const(index as i32)
            .i32_const(captures.len() as i32)
            .call(rt::CLOSURE)
            .local_tee(closure)
            .i32_wrap_i64()
            .i32_load(mem32(u64::from(CLOSURE_ENVIRONMENT)))
            .local_set(environment);
        for (i, capture) in captures.iter().enumerate() {
            self.sink().local_get(environment);
            match capture {
                Capture::Ref { name } => match self.binding(name) {
                    Some(Binding::Cell(cell)) => {
                        self.sink().local_get(cell);
                    }
                    // A variable that is not a cell here is not shared: a fresh cell with its
                    // value keeps the closure correct as long as neither side assigns it.
                    Some(Binding::Local(local)) => {
                        self.sink().local_get(local).call(rt::CELL);
                    }
                    Some(Binding::Number(local)) => {
                        self.sink()
                            .local_get(local)
                            .i64_reinterpret_f64()
                            .call(rt::CELL);
                    }
                    None => {
                        self.sink().drop();
                        self.miss(&format!("a capture of {name}, which is not bound"), None);
                        continue;
                    }
                },
                Capture::From { name } => {
                    if !self.environment_cell(name) {
                        self.sink().drop();
                        self.miss(&format!("a capture of {name}, which is not captured"), None);
                        continue;
                    }
                }
            }
            self.sink().i32_store(mem32(8 + 4 * i as u64));
        }
        self.sink().local_get(closure);
        self.free(ValType::I64, closure);
        self.free(ValType::I32, environment);
    }

    /// Whether `e` is known to be a number here: a constant, a variable kept as a number, or
    /// an operator whose result is always one (no BigInt on the fast path).
    fn is_number(&self, e: &Expr) -> bool {
        match e {
            Expr::Number { .. } => true,
            Expr::Id { name } => matches!(self.binding(name), Some(Binding::Number(_))),
            Expr::Unary { op, .. } => matches!(op.as_str(), "-" | "+" | "~"),
            Expr::Binary { op, left, right } => match op.as_str() {
                "+" => self.is_number(left) && self.is_number(right),
                "-" | "*" | "/" | "%" | "**" | "&" | "|" | "^" | "<<" | ">>" | ">>>" => true,
                _ => false,
            },
            _ => false,
        }
    }

    /// Evaluates `e`, known to be a number, as an `f64`.
    fn number(&mut self, e: &Expr) {
        match e {
            Expr::Id { name } => match self.binding(name) {
                Some(Binding::Number(local)) => {
                    self.sink().local_get(local);
                }
                _ => {
                    self.expr(e);
                    self.sink().f64_reinterpret_i64();
                }
            },
            Expr::Number { value } => {
                self.sink().f64_const((*value).into());
            }
            _ => {
                self.expr(e);
                self.sink().f64_reinterpret_i64();
            }
        }
    }

    /// `left OP right` on two numbers, as `f64` code: an `f64` for arithmetic, an `i32` for
    /// a comparison; `None` when the operator has no inline form.
    fn number_op(&mut self, op: &str, left: &Expr, right: &Expr) -> Option<bool> {
        let comparison = match op {
            "+" | "-" | "*" | "/" => false,
            "<" | "<=" | ">" | ">=" | "===" | "==" | "!==" | "!=" => true,
            _ => return None,
        };
        self.number(left);
        self.number(right);
        let mut sink = self.sink();
        match op {
            "+" => sink.f64_add(),
            "-" => sink.f64_sub(),
            "*" => sink.f64_mul(),
            "/" => sink.f64_div(),
            "<" => sink.f64_lt(),
            "<=" => sink.f64_le(),
            ">" => sink.f64_gt(),
            ">=" => sink.f64_ge(),
            "===" | "==" => sink.f64_eq(),
            _ => sink.f64_ne(),
        };
        Some(comparison)
    }

    /// Evaluates `e` as a condition: an `i32`, 1 when it is truthy. Booleans are decided
    /// inline, comparisons of numbers known as such in `f64` code, other values by the runtime.
    pub fn condition(&mut self, e: &Expr) {
        if let Expr::Unary { op, argument } = e {
            if op == "!" {
                self.condition(argument);
                self.sink().i32_eqz();
                return;
            }
        }
        if let Expr::Binary { op, left, right } = e {
            if self.is_number(left)
                && self.is_number(right)
                && matches!(
                    op.as_str(),
                    "<" | "<=" | ">" | ">=" | "===" | "==" | "!==" | "!="
                )
            {
                self.number_op(op, left, right);
                return;
            }
        }
        self.expr(e);
        let value = self.local(ValType::I64);
        self.sink()
            .local_tee(value)
            .i64_const(TRUE as i64)
            .i64_eq()
            .if_(BlockType::Result(ValType::I32))
            .i32_const(1)
            .else_()
            .local_get(value)
            .i64_const(FALSE as i64)
            .i64_eq()
            .if_(BlockType::Result(ValType::I32))
            .i32_const(0)
            .else_()
            .local_get(value)
            .call(rt::TRUTHY)
            .end()
            .end();
        self.free(ValType::I64, value);
    }

    /// The `i32` on the stack as a boolean value.
    fn box_boolean(&mut self) {
        self.sink()
            .i64_extend_i32_u()
            .i64_const(FALSE as i64)
            .i64_add();
    }

    fn unary(&mut self, op: &str, argument: &Expr) {
        match op {
            "!" => {
                self.condition(argument);
                self.sink().i32_eqz();
                self.box_boolean();
            }
            _ => {
                let code = UNARY.iter().position(|o| *o == op).unwrap_or(usize::MAX);
                if code == usize::MAX {
                    self.miss(&format!("the operator {op} not compiled"), None);
                    return;
                }
                let inline = matches!(op, "-" | "+");
                self.expr(argument);
                if !inline {
                    let value = self.local(ValType::I64);
                    self.sink()
                        .local_set(value)
                        .i32_const(code as i32)
                        .local_get(value)
                        .call(rt::UNARY);
                    self.free(ValType::I64, value);
                    return;
                }
                let value = self.local(ValType::I64);
                self.sink()
                    .local_tee(value)
                    .i64_const(TAGGED as i64)
                    .i64_lt_u()
                    .if_(BlockType::Result(ValType::I64))
                    .local_get(value);
                if op == "-" {
                    self.sink()
                        .f64_reinterpret_i64()
                        .f64_neg()
                        .i64_reinterpret_f64();
                }
                self.sink()
                    .else_()
                    .i32_const(code as i32)
                    .local_get(value)
                    .call(rt::UNARY)
                    .end();
                self.free(ValType::I64, value);
            }
        }
    }

    fn binary(&mut self, op: &str, left: &Expr, right: &Expr) {
        let Some(code) = BINARY.iter().position(|o| *o == op) else {
            self.miss(&format!("the operator {op} not compiled"), None);
            return;
        };
        if self.is_number(left) && self.is_number(right) {
            match self.number_op(op, left, right) {
                Some(true) => {
                    self.box_boolean();
                    return;
                }
                Some(false) => {
                    self.sink().i64_reinterpret_f64();
                    return;
                }
                None => {}
            }
        }
        let (a, b) = (self.local(ValType::I64), self.local(ValType::I64));
        self.expr(left);
        self.sink().local_set(a);
        self.expr(right);
        self.sink().local_set(b);
        let inline = matches!(
            op,
            "+" | "-" | "*" | "/" | "<" | "<=" | ">" | ">=" | "===" | "!==" | "==" | "!="
        );
        if inline {
            // Both numbers: the f64 code.
            self.sink()
                .local_get(a)
                .i64_const(TAGGED as i64)
                .i64_lt_u()
                .local_get(b)
                .i64_const(TAGGED as i64)
                .i64_lt_u()
                .i32_and()
                .if_(BlockType::Result(ValType::I64))
                .local_get(a)
                .f64_reinterpret_i64()
                .local_get(b)
                .f64_reinterpret_i64();
            let comparison = match op {
                "+" => {
                    self.sink().f64_add();
                    false
                }
                "-" => {
                    self.sink().f64_sub();
                    false
                }
                "*" => {
                    self.sink().f64_mul();
                    false
                }
                "/" => {
                    self.sink().f64_div();
                    false
                }
                "<" => {
                    self.sink().f64_lt();
                    true
                }
                "<=" => {
                    self.sink().f64_le();
                    true
                }
                ">" => {
                    self.sink().f64_gt();
                    true
                }
                ">=" => {
                    self.sink().f64_ge();
                    true
                }
                "===" | "==" => {
                    self.sink().f64_eq();
                    true
                }
                _ => {
                    self.sink().f64_ne();
                    true
                }
            };
            if comparison {
                self.box_boolean();
            } else {
                self.sink().i64_reinterpret_f64();
            }
            self.sink().else_();
        }
        self.sink()
            .i32_const(code as i32)
            .local_get(a)
            .local_get(b)
            .call(rt::BINARY);
        if inline {
            self.sink().end();
        }
        self.free(ValType::I64, a);
        self.free(ValType::I64, b);
    }

    /// A call the trace did not see into (a builtin, or a function called as an event):
    /// the callee's value and `this`, then the runtime's `call` or `construct`. A global, a
    /// global's member or a method no builtin has is a miss here, unless the trace saw the
    /// call enter traced code. `intrinsic` is the builtin the trace saw the call reach every
    /// time it ran: the callee is guarded to be that builtin.
    pub fn call(
        &mut self,
        callee: &Expr,
        args: &[Expr],
        new: bool,
        calls_back: bool,
        intrinsic: Option<Builtin>,
    ) {
        if let (Expr::Get { object, property }, [arg], false) = (callee, args, new) {
            if property == "push" && !matches!(arg, Expr::Spread { .. }) {
                let key = self.shared.data.string(property);
                self.push(object, arg, key.0);
                return;
            }
            if property == "startsWith" && !matches!(arg, Expr::Spread { .. }) {
                let key = self.shared.data.string(property);
                self.starts_with(object, arg, key.0);
                return;
            }
        }
        if let (Expr::Get { object, property }, [], false) = (callee, args, new) {
            if property == "shift" {
                let key = self.shared.data.string(property);
                self.shift(object, key.0);
                return;
            }
        }
        if let (Expr::Get { object, property }, false, None) = (callee, new, intrinsic) {
            if self.array_callback(object, property, args) {
                return;
            }
        }
        if self.require(callee, args) {
            return;
        }
        if !calls_back {
            let missing = match callee {
                Expr::Get { object, property } => match object.as_ref() {
                    Expr::Global { name } => {
                        let full = format!("{name}.{property}");
                        Builtin::named(&full).is_none().then_some(full)
                    }
                    _ => (!Builtin::is_member_name(property)).then(|| format!(".{property}")),
                },
                Expr::Global { name } => Builtin::named(name).is_none().then(|| name.clone()),
                _ => None,
            };
            if let Some(name) = missing {
                self.miss(&format!("builtin {name} not compiled"), None);
                self.value(Value::UNDEFINED);
                return;
            }
        }
        let this = self.local(ValType::I64);
        let function = self.local(ValType::I64);
        match callee {
            Expr::Get { object, property } => {
                self.method(object, property, this);
                self.sink().local_set(function);
            }
            Expr::Index { object, key } => {
                self.expr(object);
                self.sink().local_tee(this);
                self.expr(key);
                self.sink().call(rt::GET).local_set(function);
            }
            _ => {
                self.value(Value::UNDEFINED);
                self.sink().local_set(this);
                self.expr(callee);
                self.sink().local_set(function);
            }
        }
        if let Some(builtin) = intrinsic {
            self.sink()
                .local_get(function)
                .i64_const(builtin.value().0 as i64)
                .i64_ne()
                .if_(BlockType::Empty);
            self.miss(
                &format!(
                    "a guard: the call of {} calls another function",
                    builtin.name()
                ),
                None,
            );
            self.sink().end();
        }
        let direct =
            args.len() <= DIRECT_ARGS && !args.iter().any(|a| matches!(a, Expr::Spread { .. }));
        self.sink().local_get(function);
        if !new {
            self.sink().local_get(this);
        }
        if direct {
            self.sink().i32_const(args.len() as i32);
            for arg in args {
                self.expr(arg);
            }
            for _ in args.len()..DIRECT_ARGS {
                self.value(Value::UNDEFINED);
            }
            // A closure is applied by the module's own helpers, anything else by the runtime.
            let helpers = self.shared.helpers;
            self.sink()
                .call(if new { helpers.construct } else { helpers.call });
        } else {
            self.expr(&Expr::Array {
                items: args.to_vec(),
            });
            self.sink().call(if new {
                rt::CONSTRUCT_ARRAY
            } else {
                rt::CALL_ARRAY
            });
        }
        self.free(ValType::I64, this);
        self.free(ValType::I64, function);
    }
}
