//! The start of the trace compiler: one handler of a validated trace to a WebAssembly module,
//! with `wasm-encoder`, for the numeric fragment. What it takes:
//!
//! - values that are numbers (observed `int` or `number`, kept as `f64`) or booleans (observed
//!   `boolean`, kept as `i32`), each variable one kind, fixed by the types the trace observed;
//!   parameters observed as numbers only (the caller checks that before it calls);
//! - `let` and assignments to variables; constants, variables, `-`, `+`, `!`, arithmetic
//!   (`+ - * /`), comparisons and (strict) equality, with JavaScript's conversions between the
//!   two kinds (`true + 1` is 2, `1 === true` is false);
//! - `if`, `while`, labels, blocks, `break` and `return`, as wasm's structured control;
//! - inlined calls (`named`) of a closure without captures bound by a `let` of the handler;
//! - an `unknown` node or an untraced branch: a miss (☠), which returns with the status
//!   [`STATUS_MISS`] so the request can run in the sandbox.
//!
//! Anything else is refused with [`CompileError::Unsupported`]: objects, strings, calls, events
//! and the rest of `docs/breakout.md`'s plan are still to come.
//!
//! The module exports `run` (the handler's parameters as `f64`, an `f64` result) and the
//! mutable global `status`: [`STATUS_NUMBER`], [`STATUS_BOOLEAN`] (the result is 0 or 1),
//! [`STATUS_UNDEFINED`] or [`STATUS_MISS`].

use std::collections::HashMap;

use wasm_encoder::{
    BlockType, CodeSection, ConstExpr, ExportKind, ExportSection, Function, FunctionSection,
    GlobalSection, GlobalType, InstructionSink, Module, TypeSection, ValType,
};

use crate::trace::{Bind, Body, Expr, Node, Trace, Type};

/// `run` returned a number.
pub const STATUS_NUMBER: i32 = 0;
/// The trace met ☠: the request must run in the sandbox.
pub const STATUS_MISS: i32 = 1;
/// `run` returned `undefined`.
pub const STATUS_UNDEFINED: i32 = 2;
/// `run` returned a boolean, as 0 or 1.
pub const STATUS_BOOLEAN: i32 = 3;

/// Why a handler could not be compiled.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CompileError {
    /// The trace has no handler with this id.
    #[error("the trace has no handler {0}")]
    NoHandler(u32),
    /// The handler uses something the compiler does not take yet.
    #[error("not compiled yet: {0}")]
    Unsupported(String),
}

/// The kind of a value in the compiled code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Number,
    Boolean,
}

impl Kind {
    fn val_type(self) -> ValType {
        match self {
            Kind::Number => ValType::F64,
            Kind::Boolean => ValType::I32,
        }
    }

    /// The one kind a node's observed types allow.
    fn of(types: &[Type]) -> Result<Kind, CompileError> {
        let numbers = types.iter().all(|t| matches!(t, Type::Int | Type::Number));
        let booleans = types.iter().all(|t| *t == Type::Boolean);
        match (types.is_empty(), numbers, booleans) {
            (true, _, _) => Err(unsupported("a value whose type was never observed")),
            (false, true, _) => Ok(Kind::Number),
            (false, _, true) => Ok(Kind::Boolean),
            _ => Err(unsupported(format!("a value of types {types:?}"))),
        }
    }
}

fn unsupported(what: impl Into<String>) -> CompileError {
    CompileError::Unsupported(what.into())
}

/// Compiles handler `handler` of `trace` (validated) into a module's bytes.
pub fn compile_handler(trace: &Trace, handler: u32) -> Result<Vec<u8>, CompileError> {
    let h = trace
        .handlers
        .get(handler as usize)
        .ok_or(CompileError::NoHandler(handler))?;
    if h.rest.is_some() || h.is_async {
        return Err(unsupported("rest parameters and async handlers"));
    }
    // Two passes: the first, into a scratch function, finds the locals the code needs (their
    // kinds, in the order it allocates them); the second, identical, writes the real one.
    let params = h.params.len() as u32;
    let mut scratch = Function::new([]);
    let locals = generate(h, &mut scratch, None)?;
    let mut function = Function::new_with_locals_types(locals.iter().map(|k| k.val_type()));
    generate(h, &mut function, Some(&locals))?;
    let mut module = Module::new();
    let mut types = TypeSection::new();
    types
        .ty()
        .function(vec![ValType::F64; params as usize], [ValType::F64]);
    module.section(&types);
    let mut functions = FunctionSection::new();
    functions.function(0);
    module.section(&functions);
    let mut globals = GlobalSection::new();
    globals.global(
        GlobalType {
            val_type: ValType::I32,
            mutable: true,
            shared: false,
        },
        &ConstExpr::i32_const(STATUS_NUMBER),
    );
    module.section(&globals);
    let mut exports = ExportSection::new();
    exports.export("run", ExportKind::Func, 0);
    exports.export("status", ExportKind::Global, 0);
    module.section(&exports);
    let mut code = CodeSection::new();
    code.function(&function);
    module.section(&code);
    Ok(module.finish())
}

/// Generates the handler's code into `function`; returns the kinds of the locals it used
/// beyond the parameters. `expected`, on the second pass, is what the first one returned.
fn generate(
    h: &crate::trace::Handler,
    function: &mut Function,
    expected: Option<&[Kind]>,
) -> Result<Vec<Kind>, CompileError> {
    let params = h.params.len() as u32;
    // Every parameter was seen a number: the caller guards on that before it calls.
    for (i, param) in h.params.iter().enumerate() {
        let types = h.param_types.get(i).map(Vec::as_slice).unwrap_or_default();
        if Kind::of(types).ok() != Some(Kind::Number) {
            return Err(unsupported(format!(
                "the parameter `{param}`, seen as {types:?}, not only as a number"
            )));
        }
    }
    let mut generator = Generator {
        scopes: vec![h
            .params
            .iter()
            .enumerate()
            .map(|(i, p)| (p.clone(), Binding::Local(i as u32, Kind::Number)))
            .collect()],
        params,
        locals: Vec::new(),
        control: Vec::new(),
        inline_results: Vec::new(),
    };
    let mut sink = function.instructions();
    generator.body(&mut sink, &h.body)?;
    // Falling off the end returns `undefined`.
    sink.i32_const(STATUS_UNDEFINED)
        .global_set(0)
        .f64_const(f64::NAN.into())
        .end();
    if let Some(expected) = expected {
        debug_assert_eq!(expected, generator.locals.as_slice());
    }
    Ok(generator.locals)
}

/// What a name of the trace is in the compiled code.
#[derive(Debug, Clone)]
enum Binding {
    /// A wasm local of this kind.
    Local(u32, Kind),
    /// A closure without captures: only ever called, through inlined bodies (`named`).
    Closure(String),
}

/// A wasm control frame the generator is inside, for `br` depths.
enum Control {
    /// An `if`'s arms.
    If,
    /// An inlined call's body; its `return`s leave it.
    Inline,
    /// A labelled block; `break label` leaves it.
    Label(String),
    /// The block around a loop; `break` leaves it.
    LoopExit,
    /// The loop itself.
    Loop,
    /// A plain block.
    Block,
}

struct Generator {
    scopes: Vec<HashMap<String, Binding>>,
    params: u32,
    /// The locals allocated beyond the parameters, by kind.
    locals: Vec<Kind>,
    control: Vec<Control>,
    /// The innermost inlined call's result local and kind, where its `return`s go.
    inline_results: Vec<(u32, Kind)>,
}

impl Generator {
    fn binding(&self, name: &str) -> Result<&Binding, CompileError> {
        self.scopes
            .iter()
            .rev()
            .find_map(|s| s.get(name))
            .ok_or_else(|| unsupported(format!("the variable `{name}`")))
    }

    fn lookup(&self, name: &str) -> Result<(u32, Kind), CompileError> {
        match self.binding(name)? {
            Binding::Local(local, kind) => Ok((*local, *kind)),
            Binding::Closure(_) => Err(unsupported(format!("the function `{name}` as a value"))),
        }
    }

    fn allocate(&mut self, kind: Kind) -> u32 {
        self.locals.push(kind);
        self.params + self.locals.len() as u32 - 1
    }

    fn declare(&mut self, name: &str, binding: Binding) {
        self.scopes
            .last_mut()
            .expect("inside a body")
            .insert(name.to_string(), binding);
    }

    fn miss(sink: &mut InstructionSink<'_>) {
        sink.i32_const(STATUS_MISS)
            .global_set(0)
            .f64_const(f64::NAN.into())
            .return_();
    }

    fn nested(&mut self, sink: &mut InstructionSink<'_>, body: &Body) -> Result<(), CompileError> {
        match body {
            // A path never traced: ☠.
            None => {
                Self::miss(sink);
                Ok(())
            }
            Some(body) => self.body(sink, body),
        }
    }

    fn body(&mut self, sink: &mut InstructionSink<'_>, body: &[Node]) -> Result<(), CompileError> {
        self.scopes.push(HashMap::new());
        for node in body {
            self.node(sink, node)?;
        }
        self.scopes.pop();
        Ok(())
    }

    fn node(&mut self, sink: &mut InstructionSink<'_>, node: &Node) -> Result<(), CompileError> {
        match node {
            Node::Unknown | Node::Unsupported { .. } => Self::miss(sink),
            Node::Let {
                bind: Bind::Let(name),
                value:
                    Expr::Closure {
                        function,
                        captures,
                        is_async: false,
                    },
                ..
            } if captures.is_empty() => {
                self.declare(name, Binding::Closure(function.clone()));
            }
            Node::Let { bind, value, types } => {
                let kind = Kind::of(types)?;
                let (local, target) = match bind {
                    Bind::Let(name) => (self.allocate(kind), Some(name.clone())),
                    Bind::Set(Expr::Id { name }) => {
                        let (local, declared) = self.lookup(name)?;
                        if declared != kind {
                            return Err(unsupported(format!("`{name}` holding two kinds")));
                        }
                        (local, None)
                    }
                    Bind::Set(_) => return Err(unsupported("an assignment to a property")),
                };
                self.expr_as(sink, value, kind)?;
                sink.local_set(local);
                if let Some(name) = target {
                    self.declare(&name, Binding::Local(local, kind));
                }
            }
            Node::Named { .. } => self.inline(sink, node)?,
            Node::Expression { value, .. } => {
                self.expr(sink, value)?;
                sink.drop();
            }
            Node::If {
                test,
                then,
                otherwise,
            } => {
                self.condition(sink, test)?;
                sink.if_(BlockType::Empty);
                self.control.push(Control::If);
                self.nested(sink, then)?;
                sink.else_();
                self.nested(sink, otherwise)?;
                sink.end();
                self.control.pop();
            }
            Node::While { test, body } => {
                sink.block(BlockType::Empty);
                self.control.push(Control::LoopExit);
                sink.loop_(BlockType::Empty);
                self.control.push(Control::Loop);
                self.condition(sink, test)?;
                sink.i32_eqz().br_if(1);
                self.nested(sink, body)?;
                sink.br(0).end();
                self.control.pop();
                sink.end();
                self.control.pop();
            }
            Node::Label { label, body } => {
                sink.block(BlockType::Empty);
                self.control.push(Control::Label(label.clone()));
                self.nested(sink, body)?;
                sink.end();
                self.control.pop();
            }
            Node::Block { body } => {
                sink.block(BlockType::Empty);
                self.control.push(Control::Block);
                self.nested(sink, body)?;
                sink.end();
                self.control.pop();
            }
            Node::Break { label } => {
                let inner = self
                    .control
                    .iter()
                    .rev()
                    .position(|c| matches!(c, Control::Inline))
                    .unwrap_or(usize::MAX);
                let target = self
                    .control
                    .iter()
                    .rev()
                    .position(|c| match (c, label) {
                        (Control::Label(l), Some(wanted)) => l == wanted,
                        (Control::LoopExit, None) => true,
                        _ => false,
                    })
                    .filter(|depth| *depth < inner);
                match target {
                    Some(depth) => {
                        sink.br(depth as u32);
                    }
                    None => return Err(unsupported("a break to a target outside the handler")),
                }
            }
            Node::Return { value, .. } if !self.inline_results.is_empty() => {
                let (result, kind) = *self.inline_results.last().expect("checked");
                self.expr_as(sink, value, kind)?;
                sink.local_set(result);
                let depth = self
                    .control
                    .iter()
                    .rev()
                    .position(|c| matches!(c, Control::Inline))
                    .expect("an inlined body is open");
                sink.br(depth as u32);
            }
            Node::Return { value, types } => {
                if let Expr::Global { name } = value {
                    if name == "undefined" {
                        sink.i32_const(STATUS_UNDEFINED)
                            .global_set(0)
                            .f64_const(f64::NAN.into())
                            .return_();
                        return Ok(());
                    }
                }
                let kind = match Kind::of(types) {
                    Ok(kind) => kind,
                    Err(_) => self.expr_kind(value)?,
                };
                let status = match kind {
                    Kind::Number => STATUS_NUMBER,
                    Kind::Boolean => STATUS_BOOLEAN,
                };
                sink.i32_const(status).global_set(0);
                self.expr_as(sink, value, Kind::Number)?;
                sink.return_();
            }
            other => {
                return Err(unsupported(format!(
                    "a `{}` node",
                    serde_json::to_value(other)
                        .ok()
                        .and_then(|v| v.get("kind").and_then(|k| k.as_str()).map(String::from))
                        .unwrap_or_default()
                )))
            }
        }
        Ok(())
    }

    /// A `named` node: the callee's body inlined in a block its `return`s leave, its
    /// parameters new locals holding the arguments (evaluated in the caller's scope), its
    /// result in a local the binding then takes.
    fn inline(&mut self, sink: &mut InstructionSink<'_>, node: &Node) -> Result<(), CompileError> {
        let Node::Named {
            bind,
            callee,
            args,
            function,
            params,
            rest,
            body,
            types,
        } = node
        else {
            return Err(unsupported("a call that is not inlined"));
        };
        // The callee must be the closure the trace saw: a name bound to it, here.
        let Expr::Id { name } = callee else {
            return Err(unsupported("a call through an expression"));
        };
        match self.binding(name)? {
            Binding::Closure(id) if id == function => {}
            _ => {
                return Err(unsupported(format!(
                    "a call of `{name}`, not a known closure"
                )))
            }
        }
        if rest.is_some() || args.len() != params.len() {
            return Err(unsupported(
                "rest parameters, or arguments that are not the parameters",
            ));
        }
        let mut scope = HashMap::new();
        for (param, arg) in params.iter().zip(args) {
            let kind = self.expr_kind(arg)?;
            let local = self.allocate(kind);
            self.expr(sink, arg)?;
            sink.local_set(local);
            scope.insert(param.clone(), Binding::Local(local, kind));
        }
        let kind = Kind::of(types)?;
        let result = self.allocate(kind);
        // The body sees its parameters, not the caller's variables.
        let outer = std::mem::replace(&mut self.scopes, vec![scope]);
        self.inline_results.push((result, kind));
        sink.block(BlockType::Empty);
        self.control.push(Control::Inline);
        let generated = self.nested(sink, body);
        sink.end();
        self.control.pop();
        self.inline_results.pop();
        self.scopes = outer;
        generated?;
        match bind.as_ref() {
            None => {}
            Some(Bind::Let(name)) => self.declare(name, Binding::Local(result, kind)),
            Some(Bind::Set(Expr::Id { name })) => {
                let (local, declared) = self.lookup(name)?;
                if declared != kind {
                    return Err(unsupported(format!("`{name}` holding two kinds")));
                }
                sink.local_get(result).local_set(local);
            }
            Some(Bind::Set(_)) => return Err(unsupported("an assignment to a property")),
        }
        Ok(())
    }

    /// The kind an expression evaluates to.
    fn expr_kind(&self, e: &Expr) -> Result<Kind, CompileError> {
        Ok(match e {
            Expr::Number { .. } => Kind::Number,
            Expr::Boolean { .. } => Kind::Boolean,
            Expr::Id { name } => self.lookup(name)?.1,
            Expr::Unary { op, .. } if op == "!" => Kind::Boolean,
            Expr::Unary { .. } => Kind::Number,
            Expr::Binary { op, .. } => match op.as_str() {
                "+" | "-" | "*" | "/" => Kind::Number,
                _ => Kind::Boolean,
            },
            _ => return Err(unsupported("this expression")),
        })
    }

    /// Evaluates `e`, leaving a value of its own kind on the stack; returns the kind.
    fn expr(&self, sink: &mut InstructionSink<'_>, e: &Expr) -> Result<Kind, CompileError> {
        match e {
            Expr::Number { value } => {
                sink.f64_const((*value).into());
                Ok(Kind::Number)
            }
            Expr::Boolean { value } => {
                sink.i32_const(i32::from(*value));
                Ok(Kind::Boolean)
            }
            Expr::Id { name } => {
                let (local, kind) = self.lookup(name)?;
                sink.local_get(local);
                Ok(kind)
            }
            Expr::Unary { op, argument } => match op.as_str() {
                "!" => {
                    self.condition(sink, argument)?;
                    sink.i32_eqz();
                    Ok(Kind::Boolean)
                }
                "-" => {
                    self.expr_as(sink, argument, Kind::Number)?;
                    sink.f64_neg();
                    Ok(Kind::Number)
                }
                "+" => {
                    self.expr_as(sink, argument, Kind::Number)?;
                    Ok(Kind::Number)
                }
                other => Err(unsupported(format!("the operator `{other}`"))),
            },
            Expr::Binary { op, left, right } => self.binary(sink, op, left, right),
            _ => Err(unsupported("this expression")),
        }
    }

    fn binary(
        &self,
        sink: &mut InstructionSink<'_>,
        op: &str,
        left: &Expr,
        right: &Expr,
    ) -> Result<Kind, CompileError> {
        let strict = matches!(op, "===" | "!==");
        if strict && self.expr_kind(left)? != self.expr_kind(right)? {
            // Values of two kinds are never strictly equal.
            sink.i32_const(i32::from(op == "!=="));
            return Ok(Kind::Boolean);
        }
        let both_boolean =
            self.expr_kind(left)? == Kind::Boolean && self.expr_kind(right)? == Kind::Boolean;
        if both_boolean && matches!(op, "===" | "!==" | "==" | "!=") {
            self.expr(sink, left)?;
            self.expr(sink, right)?;
            if matches!(op, "===" | "==") {
                sink.i32_eq();
            } else {
                sink.i32_ne();
            }
            return Ok(Kind::Boolean);
        }
        // Everything else converts both sides to numbers (ToNumber of a boolean is 0 or 1).
        self.expr_as(sink, left, Kind::Number)?;
        self.expr_as(sink, right, Kind::Number)?;
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
            "!==" | "!=" => sink.f64_ne(),
            other => return Err(unsupported(format!("the operator `{other}`"))),
        };
        Ok(if matches!(op, "+" | "-" | "*" | "/") {
            Kind::Number
        } else {
            Kind::Boolean
        })
    }

    /// Evaluates `e` converted to `kind`.
    fn expr_as(
        &self,
        sink: &mut InstructionSink<'_>,
        e: &Expr,
        kind: Kind,
    ) -> Result<(), CompileError> {
        let got = self.expr(sink, e)?;
        match (got, kind) {
            (Kind::Boolean, Kind::Number) => {
                sink.f64_convert_i32_u();
            }
            (Kind::Number, Kind::Boolean) => Self::truthy(sink),
            _ => {}
        }
        Ok(())
    }

    /// Evaluates `e` as a condition: an `i32` that is 1 when `e` is truthy.
    fn condition(&self, sink: &mut InstructionSink<'_>, e: &Expr) -> Result<(), CompileError> {
        self.expr_as(sink, e, Kind::Boolean)
    }

    /// A number's truthiness: neither 0 nor NaN.
    fn truthy(sink: &mut InstructionSink<'_>) {
        sink.f64_abs().f64_const(0.0.into()).f64_gt();
    }
}
