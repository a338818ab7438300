//! One wasm function from a handler's body: statements, variables and control. Every value
//! is an `i64` (NaN-boxed); a variable a closure captures lives in a heap cell (its local
//! holds the cell's address), any other in a local. Expressions are in `expr.rs`.

use std::collections::{HashMap, HashSet};

use wasm_encoder::{BlockType, Function, InstructionSink, MemArg, MemArgTarget, ValType};

use super::captures;
use super::data::Data;
use super::imports as rt;
use crate::runtime::builtins::Builtin;
use crate::runtime::value::{Value, TAGGED};
use crate::trace::{Bind, Body, Expr, Node, Type};

/// Whether observed types are all numbers (and there are some).
fn numeric(types: &[Type]) -> bool {
    !types.is_empty() && types.iter().all(|t| matches!(t, Type::Int | Type::Number))
}

/// Whether every assignment to `name` in `nodes` (in this function: not inside inlined
/// bodies) was seen to assign numbers, and no body declares the name again.
fn assigned_numbers(nodes: &[Node], name: &str) -> bool {
    let target = |bind: &Option<Bind>| match bind {
        Some(Bind::Set(Expr::Id { name: n })) => n == name,
        Some(Bind::Let(n)) => n == name,
        _ => false,
    };
    let nested = |body: &Body| body.as_deref().is_none_or(|b| assigned_numbers(b, name));
    nodes.iter().all(|node| match node {
        Node::Let { bind, types, .. } => {
            !target(&Some(bind.clone())) || (matches!(bind, Bind::Set(_)) && numeric(types))
        }
        Node::Named { bind, types, .. }
        | Node::Call { bind, types, .. }
        | Node::Await { bind, types, .. } => {
            !target(bind) || (matches!(bind, Some(Bind::Set(_))) && numeric(types))
        }
        Node::If {
            then, otherwise, ..
        } => nested(then) && nested(otherwise),
        Node::While { body, .. } | Node::Label { body, .. } | Node::Block { body } => nested(body),
        Node::Try {
            param,
            body,
            handler,
        } => param.as_deref() != Some(name) && nested(body) && nested(handler),
        _ => true,
    })
}

/// The most locals a function may have (wasmtime's limit is 50 000).
const MAX_LOCALS: usize = 40_000;

/// What the generators of a module share: its data and the functions' numbering.
pub struct Shared {
    pub data: Data,
    /// Every function id of the trace, numbered.
    pub functions: HashMap<String, u32>,
    /// Each closure function's captured names, in environment order.
    pub environments: HashMap<String, Vec<String>>,
    /// The package's files, for `require` of a relative path.
    pub package: Option<std::sync::Arc<crate::package::Package>>,
    /// The function's environment, for `process.env`.
    pub env: Option<crate::package::Environment>,
    /// Each package file's module record number, given on first use.
    pub records: HashMap<String, u32>,
    /// The wasm function of each file's top level the trace has.
    pub tops: HashMap<String, u32>,
    /// The variables ES modules export (`modules::exported`).
    pub exported: HashSet<(String, String)>,
    /// The module's own helpers for objects and calls (`objects.rs`).
    pub helpers: super::objects::Helpers,
    /// How many site caches (globals) the code has.
    pub sites: u32,
}

/// What a name of the trace is in the compiled code.
#[derive(Debug, Clone, Copy)]
pub enum Binding {
    /// An `i64` local holding the value.
    Local(u32),
    /// An `i32` local holding the address of the value's cell.
    Cell(u32),
    /// An `f64` local: a variable the trace saw hold only numbers, guarded where it is set.
    Number(u32),
}

/// A wasm control frame the generator is inside, for `br` depths.
pub enum Control {
    If,
    /// An inlined call's body; its `return`s leave it.
    Inline,
    Label(String),
    /// The block around a loop; `break` leaves it.
    LoopExit,
    Loop,
    Block,
    /// A `try` body; a `throw` stores its value in the local and leaves it.
    Try(u32),
}

/// A function being generated: the handler's own, or one inlined in it.
pub struct Frame {
    /// The function id (none at a file's top level).
    pub function: Option<String>,
    /// The package file the function is in.
    pub file: String,
    /// The `i32` local holding the closure's environment address.
    pub environment: Option<u32>,
    /// The `i64` local holding `this`.
    pub this: Option<u32>,
    /// The names of this function that closures capture.
    pub captured: HashSet<String>,
    /// An inlined function's result local.
    pub result: Option<u32>,
}

pub struct Generator<'s> {
    pub shared: &'s mut Shared,
    code: Vec<u8>,
    params: u32,
    locals: Vec<ValType>,
    free: Vec<(ValType, u32)>,
    /// The current function's body scopes, innermost last.
    pub scopes: Vec<Vec<(String, Binding)>>,
    pub frames: Vec<Frame>,
    pub control: Vec<Control>,
    too_many_locals: bool,
}

pub const fn mem64(offset: u64) -> MemArg {
    MemArg {
        offset,
        align: 3,
        target: MemArgTarget::Memory(0),
        ordering: None,
    }
}

pub const fn mem32(offset: u64) -> MemArg {
    MemArg {
        offset,
        align: 2,
        target: MemArgTarget::Memory(0),
        ordering: None,
    }
}

impl<'s> Generator<'s> {
    pub fn new(shared: &'s mut Shared, params: u32) -> Generator<'s> {
        Generator {
            shared,
            code: Vec::new(),
            params,
            locals: Vec::new(),
            free: Vec::new(),
            scopes: Vec::new(),
            frames: Vec::new(),
            control: Vec::new(),
            too_many_locals: false,
        }
    }

    /// The finished function, or `None` when it needs more locals than wasm allows.
    pub fn finish(mut self) -> Option<Function> {
        self.sink().end();
        if self.too_many_locals {
            return None;
        }
        let mut function = Function::new_with_locals_types(self.locals.iter().copied());
        function.raw(self.code.iter().copied());
        Some(function)
    }

    pub fn sink(&mut self) -> InstructionSink<'_> {
        InstructionSink::new(&mut self.code)
    }

    /// A local of type `ty`, reused once freed.
    pub fn local(&mut self, ty: ValType) -> u32 {
        if let Some(i) = self.free.iter().position(|(t, _)| *t == ty) {
            return self.free.swap_remove(i).1;
        }
        if self.locals.len() >= MAX_LOCALS {
            self.too_many_locals = true;
        }
        self.locals.push(ty);
        self.params + self.locals.len() as u32 - 1
    }

    pub fn free(&mut self, ty: ValType, local: u32) {
        self.free.push((ty, local));
    }

    pub fn value(&mut self, v: Value) {
        self.sink().i64_const(v.0 as i64);
    }

    /// ☠: records the reason and traps.
    pub fn miss(&mut self, reason: &str, at: Option<&str>) {
        let (address, len) = self.shared.data.reason(reason, at);
        self.sink()
            .i32_const(address as i32)
            .i32_const(len as i32)
            .call(rt::MISS)
            .unreachable();
    }

    pub fn frame(&self) -> &Frame {
        self.frames.last().expect("inside a function")
    }

    pub fn binding(&self, name: &str) -> Option<Binding> {
        self.scopes
            .iter()
            .rev()
            .find_map(|s| s.iter().rev().find(|(n, _)| n == name).map(|(_, b)| *b))
    }

    pub fn declare(&mut self, name: &str, binding: Binding) {
        self.scopes
            .last_mut()
            .expect("inside a body")
            .push((name.to_string(), binding));
    }

    /// Ends a scope: its locals are free again (closures hold cells, never locals).
    pub fn pop_scope(&mut self) {
        for (_, binding) in self.scopes.pop().unwrap_or_default() {
            match binding {
                Binding::Local(l) => self.free(ValType::I64, l),
                Binding::Cell(l) => self.free(ValType::I32, l),
                Binding::Number(l) => self.free(ValType::F64, l),
            }
        }
    }

    /// Binds `name` to the value on the stack, in a cell if a closure captures it.
    pub fn bind_new(&mut self, name: &str) {
        if self.frame().captured.contains(name) {
            let cell = self.local(ValType::I32);
            self.sink().call(rt::CELL).local_set(cell);
            self.declare(name, Binding::Cell(cell));
        } else {
            let local = self.local(ValType::I64);
            self.sink().local_set(local);
            self.declare(name, Binding::Local(local));
        }
    }

    /// The address of the cell of a variable from the closure's environment, on the stack.
    pub fn environment_cell(&mut self, name: &str) -> bool {
        let frame = self.frame();
        let (Some(environment), Some(function)) = (frame.environment, &frame.function) else {
            return false;
        };
        let Some(index) = self
            .shared
            .environments
            .get(function)
            .and_then(|names| names.iter().position(|n| n == name))
        else {
            return false;
        };
        self.sink()
            .local_get(environment)
            .i32_load(mem32(8 + 4 * index as u64));
        true
    }

    pub fn nested(&mut self, body: &Body) {
        match body {
            None => self.miss("a path not traced", None),
            Some(body) => self.body(body),
        }
    }

    /// A body: its captured `let`s get their cells first (a closure made earlier in the body
    /// may capture a variable declared later), then its statements.
    pub fn body(&mut self, body: &[Node]) {
        self.scopes.push(Vec::new());
        for node in body {
            let name = match node {
                Node::Let {
                    bind: Bind::Let(name),
                    ..
                } => name,
                Node::Named {
                    bind: Some(Bind::Let(name)),
                    ..
                }
                | Node::Call {
                    bind: Some(Bind::Let(name)),
                    ..
                }
                | Node::Await {
                    bind: Some(Bind::Let(name)),
                    ..
                } => name,
                _ => continue,
            };
            if self.frame().captured.contains(name)
                && self
                    .scopes
                    .last()
                    .is_some_and(|s| !s.iter().any(|(n, _)| n == name))
            {
                self.value(Value::UNDEFINED);
                let cell = self.local(ValType::I32);
                self.sink().call(rt::CELL).local_set(cell);
                self.declare(name, Binding::Cell(cell));
            }
        }
        for (i, node) in body.iter().enumerate() {
            match node {
                Node::Let {
                    bind: Bind::Let(name),
                    value,
                    types,
                } if numeric(types)
                    && !self.frame().captured.contains(name)
                    && assigned_numbers(&body[i + 1..], name) =>
                {
                    self.expr(value);
                    let local = self.local(ValType::F64);
                    self.guard_number(name, local);
                    self.declare(name, Binding::Number(local));
                }
                _ => self.node(node),
            }
        }
        self.pop_scope();
    }

    /// Stores the value on the stack in the `f64` local, or misses if it is not a number.
    pub fn guard_number(&mut self, name: &str, local: u32) {
        let value = self.local(ValType::I64);
        self.sink()
            .local_tee(value)
            .i64_const(TAGGED as i64)
            .i64_ge_u()
            .if_(BlockType::Empty);
        self.miss(
            &format!("a guard: {name} held a value other than the numbers the trace saw"),
            None,
        );
        self.sink()
            .end()
            .local_get(value)
            .f64_reinterpret_i64()
            .local_set(local);
        self.free(ValType::I64, value);
    }

    /// Stores the value `emit` leaves on the stack into `bind`.
    pub fn assign(&mut self, bind: &Bind, emit: &mut dyn FnMut(&mut Self)) {
        if self.module_assign(bind, emit) {
            return;
        }
        match bind {
            Bind::Let(name) => match self
                .scopes
                .last()
                .and_then(|s| s.iter().rev().find(|(n, _)| n == name).map(|(_, b)| *b))
            {
                // Declared at the body's start, for its closures.
                Some(Binding::Cell(cell)) => {
                    self.sink().local_get(cell);
                    emit(self);
                    self.sink().i64_store(mem64(0));
                }
                _ => {
                    emit(self);
                    self.bind_new(name);
                }
            },
            Bind::Set(Expr::Id { name }) => match self.binding(name) {
                Some(Binding::Number(local)) => {
                    emit(self);
                    self.guard_number(name, local);
                }
                Some(Binding::Local(local)) => {
                    emit(self);
                    self.sink().local_set(local);
                }
                Some(Binding::Cell(cell)) => {
                    self.sink().local_get(cell);
                    emit(self);
                    self.sink().i64_store(mem64(0));
                }
                None => self.miss(&format!("the variable {name} not bound"), None),
            },
            Bind::Set(Expr::From { name }) => {
                if self.environment_cell(name) {
                    emit(self);
                    self.sink().i64_store(mem64(0));
                } else {
                    self.miss(&format!("the closure variable {name} not captured"), None);
                }
            }
            Bind::Set(Expr::Global { name }) => {
                let name = self.shared.data.string(name);
                self.value(name);
                emit(self);
                self.sink().call(rt::SET_GLOBAL);
            }
            Bind::Set(Expr::Get { object, property }) => self.set_named(object, property, emit),
            Bind::Set(Expr::Index { object, key }) => self.set_index(object, key, emit),
            Bind::Set(_) => self.miss("an assignment to this target not compiled", None),
        }
    }

    /// Stores the value in `local` into an optional binding.
    pub fn bind_local(&mut self, bind: Option<&Bind>, local: u32) {
        if let Some(bind) = bind {
            self.assign(bind, &mut |g| {
                g.sink().local_get(local);
            });
        }
    }

    fn depth_of(&self, wanted: impl Fn(&Control) -> bool, cross_inline: bool) -> Option<u32> {
        for (depth, control) in self.control.iter().rev().enumerate() {
            if wanted(control) {
                return Some(depth as u32);
            }
            if !cross_inline && matches!(control, Control::Inline) {
                return None;
            }
        }
        None
    }

    fn enter(&mut self, control: Control, ty: BlockType, looping: bool) {
        if looping {
            self.sink().loop_(ty);
        } else {
            self.sink().block(ty);
        }
        self.control.push(control);
    }

    fn leave(&mut self) {
        self.sink().end();
        self.control.pop();
    }

    pub fn node(&mut self, node: &Node) {
        match node {
            Node::Unknown => self.miss("a path not traced", None),
            Node::Unsupported { reason, at } => self.miss(reason, Some(at)),
            Node::Let { bind, value, .. } => self.assign(bind, &mut |g| g.expr(value)),
            Node::Expression { value, .. } => {
                self.expr(value);
                self.sink().drop();
            }
            Node::If {
                test,
                then,
                otherwise,
            } => {
                self.condition(test);
                self.sink().if_(BlockType::Empty);
                self.control.push(Control::If);
                self.nested(then);
                self.sink().else_();
                self.nested(otherwise);
                self.leave();
            }
            Node::While { test, body } => {
                self.enter(Control::LoopExit, BlockType::Empty, false);
                self.enter(Control::Loop, BlockType::Empty, true);
                self.condition(test);
                self.sink().i32_eqz().br_if(1);
                self.nested(body);
                self.sink().br(0);
                self.leave();
                self.leave();
            }
            Node::Label { label, body } => {
                self.enter(Control::Label(label.clone()), BlockType::Empty, false);
                self.nested(body);
                self.leave();
            }
            Node::Block { body } => {
                self.enter(Control::Block, BlockType::Empty, false);
                self.nested(body);
                self.leave();
            }
            Node::Try {
                param,
                body,
                handler,
            } => {
                let exception = self.local(ValType::I64);
                self.enter(Control::Block, BlockType::Empty, false);
                self.enter(Control::Try(exception), BlockType::Empty, false);
                self.nested(body);
                self.sink().br(1);
                self.leave();
                self.scopes.push(Vec::new());
                if let Some(param) = param {
                    self.sink().local_get(exception);
                    self.bind_new(param);
                }
                self.nested(handler);
                self.pop_scope();
                self.leave();
                self.free(ValType::I64, exception);
            }
            Node::Break { label } => {
                let depth = self.depth_of(
                    |c| match (c, label) {
                        (Control::Label(l), Some(wanted)) => l == wanted,
                        (Control::LoopExit, None) => true,
                        _ => false,
                    },
                    false,
                );
                match depth {
                    Some(depth) => {
                        self.sink().br(depth);
                    }
                    None => self.miss("a break to a target outside its function", None),
                }
            }
            Node::Return { value, .. } => match self.frame().result {
                Some(result) => {
                    self.expr(value);
                    self.sink().local_set(result);
                    let depth = self
                        .depth_of(|c| matches!(c, Control::Inline), true)
                        .expect("an inlined body is open");
                    self.sink().br(depth);
                }
                None if self.frame().function.is_some() => {
                    self.expr(value);
                    self.sink().return_();
                }
                None => self.miss("a return at a file's top level", None),
            },
            Node::Throw { value } => {
                self.expr(value);
                let target = self
                    .control
                    .iter()
                    .rev()
                    .enumerate()
                    .find_map(|(d, c)| match c {
                        Control::Try(local) => Some((d as u32, *local)),
                        _ => None,
                    });
                match target {
                    Some((depth, local)) => {
                        self.sink().local_set(local).br(depth);
                    }
                    None => {
                        self.sink().call(rt::UNCAUGHT).unreachable();
                    }
                }
            }
            Node::Named { .. } => self.inline(node),
            Node::Call {
                bind,
                callee,
                args,
                new,
                handlers,
                intrinsic,
                ..
            } => {
                let intrinsic = intrinsic.as_deref().and_then(Builtin::named);
                self.call(callee, args, *new, !handlers.is_empty(), intrinsic);
                let result = self.local(ValType::I64);
                self.sink().local_set(result);
                self.bind_local(bind.as_ref(), result);
                self.free(ValType::I64, result);
            }
            // The fast path's calls are synchronous: an awaited value is the value.
            Node::Await { bind, value, .. } => {
                self.expr(value);
                let result = self.local(ValType::I64);
                self.sink().local_set(result);
                self.bind_local(bind.as_ref(), result);
                self.free(ValType::I64, result);
            }
        }
    }

    /// A `named` node: the callee's body inlined in a block its `return`s leave. The callee
    /// must be the closure the trace saw (a guard: another function is a miss); its
    /// environment and `this` are the body's; the arguments, evaluated in the caller's
    /// scope, are its parameters.
    fn inline(&mut self, node: &Node) {
        let Node::Named {
            bind,
            callee,
            args,
            function,
            params,
            rest,
            body,
            ..
        } = node
        else {
            return;
        };
        let this = self.local(ValType::I64);
        let closure = self.local(ValType::I64);
        match callee {
            Expr::Get { object, property } => {
                self.method(object, property, this);
                self.sink().local_set(closure);
            }
            _ => {
                self.value(Value::UNDEFINED);
                self.sink().local_set(this);
                self.expr(callee);
                self.sink().local_set(closure);
            }
        }
        let values: Vec<u32> = args
            .iter()
            .map(|arg| {
                self.expr(arg);
                let local = self.local(ValType::I64);
                self.sink().local_set(local);
                local
            })
            .collect();
        let Some(&index) = self.shared.functions.get(function) else {
            self.miss("a call of a function the trace does not have", None);
            return;
        };
        // The guard: the callee is the closure of the traced function.
        let function_of = self.shared.helpers.function_of;
        self.sink()
            .local_get(closure)
            .call(function_of)
            .i32_const(index as i32)
            .i32_ne()
            .if_(BlockType::Empty);
        self.miss(
            "a call site called another function than the traced one",
            None,
        );
        self.sink().end();
        if rest.is_some() {
            self.miss("rest parameters not compiled", None);
            return;
        }
        let environment = self.local(ValType::I32);
        self.sink()
            .local_get(closure)
            .i32_wrap_i64()
            .i32_load(mem32(u64::from(crate::runtime::heap::CLOSURE_ENVIRONMENT)))
            .local_set(environment);
        let result = self.local(ValType::I64);
        self.value(Value::UNDEFINED);
        self.sink().local_set(result);
        let body_nodes = body.as_deref().unwrap_or_default();
        self.frames.push(Frame {
            function: Some(function.clone()),
            file: super::function_id::file_of(function).to_string(),
            environment: Some(environment),
            this: Some(this),
            captured: captures::captured(body_nodes),
            result: Some(result),
        });
        let outer = std::mem::replace(&mut self.scopes, vec![Vec::new()]);
        for (i, param) in params.iter().enumerate() {
            match values.get(i) {
                Some(&local) => {
                    self.sink().local_get(local);
                }
                None => self.value(Value::UNDEFINED),
            }
            self.bind_new(param);
        }
        self.enter(Control::Inline, BlockType::Empty, false);
        self.nested(body);
        self.leave();
        while !self.scopes.is_empty() {
            self.pop_scope();
        }
        self.scopes = outer;
        self.frames.pop();
        for local in values {
            self.free(ValType::I64, local);
        }
        self.bind_local(bind.as_ref(), result);
        self.free(ValType::I64, result);
        self.free(ValType::I64, this);
        self.free(ValType::I64, closure);
        self.free(ValType::I32, environment);
    }
}
