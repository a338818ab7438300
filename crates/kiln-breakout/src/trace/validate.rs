//! Reading and validating an untrusted trace. Everything is bounded before it is walked: the
//! text's size, its JSON nesting (serde_json's recursion limit, 128), the number of nodes and
//! the depth of statements; the walk is linear in the nodes (times the depth, for names).

use std::collections::HashSet;

use super::{Bind, Body, Capture, Expr, Handler, HandlerKind, Node, Trace, TRACE_VERSION};

/// The largest trace text accepted.
pub const MAX_TRACE_BYTES: usize = 16 * 1024 * 1024;
/// The most nodes (statements and expressions) a trace may hold; the tracer stops near this.
pub const MAX_NODES: usize = 250_000;
/// The deepest nesting of statements (bodies within bodies) accepted. serde_json refuses JSON
/// nested deeper than 128 levels before this is checked; a statement takes at least two.
pub const MAX_DEPTH: usize = 60;
/// The longest name, label, function id or reason accepted.
const MAX_NAME_BYTES: usize = 4096;

/// Why a trace was refused.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The text is larger than [`MAX_TRACE_BYTES`].
    #[error("the trace is {0} bytes, more than the {MAX_TRACE_BYTES} accepted")]
    TooLarge(usize),
    /// The text is not a trace in the JSON format (or nests deeper than JSON is read).
    #[error("the trace is not in the trace format")]
    Format(#[source] serde_json::Error),
    /// The version is not [`TRACE_VERSION`].
    #[error("the trace has version {0}, not {TRACE_VERSION}")]
    Version(u32),
    /// More nodes than [`MAX_NODES`].
    #[error("the trace has more than {MAX_NODES} nodes")]
    TooManyNodes,
    /// Statements nested deeper than [`MAX_DEPTH`].
    #[error("handler {handler} nests statements deeper than {MAX_DEPTH}")]
    TooDeep { handler: usize },
    /// A handler's id is not its index.
    #[error("handler {index} has id {id}")]
    HandlerId { index: usize, id: u32 },
    /// Two handlers trace one function.
    #[error("two handlers trace {0}")]
    DuplicateHandler(String),
    /// A call names a handler that does not exist.
    #[error("handler {handler} calls back handler {id}, which does not exist")]
    UnknownHandler { handler: usize, id: u32 },
    /// A variable is used where nothing binds it.
    #[error("handler {handler} uses `{name}`, which nothing binds there")]
    Unbound { handler: usize, name: String },
    /// A closure's variable read where there is no closure (a file's top level).
    #[error("handler {handler} reads `{name}` from an environment it does not have")]
    NoEnvironment { handler: usize, name: String },
    /// A `break` with no enclosing target of its kind in its function.
    #[error("handler {handler} breaks to {label}, which does not enclose it")]
    BreakTarget { handler: usize, label: String },
    /// An `unknown` that is not the last node of its body.
    #[error("handler {handler} has an unknown node before the end of a body")]
    UnknownNotLast { handler: usize },
    /// A node after a `break`, `return`, `throw` or ☠ in the same body.
    #[error("handler {handler} has a node after a {kind} in the same body")]
    AfterTerminal { handler: usize, kind: &'static str },
    /// A name, label, id or reason longer than accepted, or empty.
    #[error("handler {handler} has a name that is empty or longer than {MAX_NAME_BYTES} bytes")]
    BadName { handler: usize },
    /// An object member that is not exactly a keyed, computed or spread member.
    #[error("handler {handler} has a malformed object member")]
    BadProperty { handler: usize },
    /// A number that is not finite.
    #[error("handler {handler} has a number that is not finite")]
    BadNumber { handler: usize },
    /// A call names an intrinsic kiln does not have.
    #[error("handler {handler} calls an unknown intrinsic")]
    UnknownIntrinsic { handler: usize },
}

/// Reads and validates a trace sent by a tracing instance.
pub fn parse(text: &[u8]) -> Result<Trace, TraceError> {
    if text.len() > MAX_TRACE_BYTES {
        return Err(TraceError::TooLarge(text.len()));
    }
    let trace: Trace = serde_json::from_slice(text).map_err(TraceError::Format)?;
    validate(&trace)?;
    Ok(trace)
}

/// Checks a trace: handler ids, sizes, bindings, break targets, and where unknown and
/// terminal nodes stand.
pub fn validate(trace: &Trace) -> Result<(), TraceError> {
    if trace.version != TRACE_VERSION {
        return Err(TraceError::Version(trace.version));
    }
    let mut functions = HashSet::new();
    for (index, handler) in trace.handlers.iter().enumerate() {
        if handler.id as usize != index {
            return Err(TraceError::HandlerId {
                index,
                id: handler.id,
            });
        }
        if !functions.insert(handler.function.as_str()) {
            return Err(TraceError::DuplicateHandler(handler.function.clone()));
        }
    }
    let mut nodes = 0usize;
    for (index, handler) in trace.handlers.iter().enumerate() {
        Checker {
            handler: index,
            handlers: trace.handlers.len(),
            nodes: &mut nodes,
            scopes: Vec::new(),
            targets: Vec::new(),
            environment: Vec::new(),
        }
        .handler(handler)?;
    }
    Ok(())
}

/// What a `break` may leave.
enum Target {
    Label(String),
    Loop,
    /// A function boundary: no `break` crosses it.
    Function,
}

struct Checker<'n> {
    handler: usize,
    handlers: usize,
    nodes: &'n mut usize,
    /// Names bound, innermost body last; a function's body starts a fresh stack (see `named`).
    scopes: Vec<Vec<String>>,
    targets: Vec<Target>,
    /// Whether the innermost function has a closure environment (not a file's top level).
    environment: Vec<bool>,
}

impl Checker<'_> {
    fn count(&mut self) -> Result<(), TraceError> {
        *self.nodes += 1;
        if *self.nodes > MAX_NODES {
            return Err(TraceError::TooManyNodes);
        }
        Ok(())
    }

    fn name(&self, name: &str) -> Result<(), TraceError> {
        if name.is_empty() || name.len() > MAX_NAME_BYTES {
            return Err(TraceError::BadName {
                handler: self.handler,
            });
        }
        Ok(())
    }

    fn handler(mut self, handler: &Handler) -> Result<(), TraceError> {
        self.name(&handler.function)?;
        let mut params = handler.params.clone();
        params.extend(handler.rest.clone());
        for param in &params {
            self.name(param)?;
        }
        if handler.param_types.len() > handler.params.len() {
            return Err(TraceError::BadName {
                handler: self.handler,
            });
        }
        self.environment.push(handler.kind == HandlerKind::Function);
        self.targets.push(Target::Function);
        self.scopes.push(params);
        self.body(&handler.body, 0)?;
        Ok(())
    }

    fn bound(&self, name: &str) -> bool {
        // Only the innermost function's scopes: `scopes` is cut at each function (see `named`).
        self.scopes
            .iter()
            .rev()
            .any(|s| s.iter().any(|n| n == name))
    }

    fn body(&mut self, body: &[Node], depth: usize) -> Result<(), TraceError> {
        if depth > MAX_DEPTH {
            return Err(TraceError::TooDeep {
                handler: self.handler,
            });
        }
        self.scopes.push(Vec::new());
        let last = body.len().saturating_sub(1);
        for (i, node) in body.iter().enumerate() {
            self.count()?;
            let terminal = match node {
                Node::Unknown => {
                    if i != last {
                        return Err(TraceError::UnknownNotLast {
                            handler: self.handler,
                        });
                    }
                    None
                }
                Node::Unsupported { reason, at } => {
                    self.name(reason)?;
                    self.name(at)?;
                    Some("☠")
                }
                Node::Let { bind, value, .. } => {
                    self.expr(value, 0)?;
                    self.bind(Some(bind))?;
                    None
                }
                Node::Expression { value, .. } => {
                    self.expr(value, 0)?;
                    None
                }
                Node::If {
                    test,
                    then,
                    otherwise,
                } => {
                    self.expr(test, 0)?;
                    self.nested(then, depth)?;
                    self.nested(otherwise, depth)?;
                    None
                }
                Node::While { test, body } => {
                    self.expr(test, 0)?;
                    self.targets.push(Target::Loop);
                    self.nested(body, depth)?;
                    self.targets.pop();
                    None
                }
                Node::Label { label, body } => {
                    self.name(label)?;
                    self.targets.push(Target::Label(label.clone()));
                    self.nested(body, depth)?;
                    self.targets.pop();
                    None
                }
                Node::Block { body } => {
                    self.nested(body, depth)?;
                    None
                }
                Node::Try {
                    param,
                    body,
                    handler,
                } => {
                    self.nested(body, depth)?;
                    if let Some(param) = param {
                        self.name(param)?;
                        self.scopes.push(vec![param.clone()]);
                    } else {
                        self.scopes.push(Vec::new());
                    }
                    self.nested(handler, depth)?;
                    self.scopes.pop();
                    None
                }
                Node::Break { label } => {
                    self.break_target(label.as_deref())?;
                    Some("break")
                }
                Node::Return { value, .. } => {
                    self.expr(value, 0)?;
                    Some("return")
                }
                Node::Throw { value } => {
                    self.expr(value, 0)?;
                    Some("throw")
                }
                Node::Named {
                    bind,
                    callee,
                    args,
                    function,
                    params,
                    rest,
                    body,
                    ..
                } => {
                    self.name(function)?;
                    self.expr(callee, 0)?;
                    for arg in args {
                        self.expr(arg, 0)?;
                    }
                    // The callee's body sees its parameters and its environment, not the
                    // caller's variables: a fresh scope stack, restored after.
                    let mut inner = params.clone();
                    inner.extend(rest.clone());
                    for param in &inner {
                        self.name(param)?;
                    }
                    let outer = std::mem::replace(&mut self.scopes, vec![inner]);
                    self.targets.push(Target::Function);
                    self.environment.push(true);
                    let result = self.nested(body, depth);
                    self.environment.pop();
                    self.targets.pop();
                    self.scopes = outer;
                    result?;
                    self.bind(bind.as_ref())?;
                    None
                }
                Node::Call {
                    bind,
                    callee,
                    args,
                    handlers,
                    intrinsic,
                    ..
                } => {
                    if intrinsic
                        .as_deref()
                        .is_some_and(|name| !super::INTRINSICS.contains(&name))
                    {
                        return Err(TraceError::UnknownIntrinsic {
                            handler: self.handler,
                        });
                    }
                    self.expr(callee, 0)?;
                    for arg in args {
                        self.expr(arg, 0)?;
                    }
                    for &id in handlers {
                        if id as usize >= self.handlers {
                            return Err(TraceError::UnknownHandler {
                                handler: self.handler,
                                id,
                            });
                        }
                    }
                    self.bind(bind.as_ref())?;
                    None
                }
                Node::Await { bind, value, .. } => {
                    self.expr(value, 0)?;
                    self.bind(bind.as_ref())?;
                    None
                }
            };
            if let Some(kind) = terminal {
                if i != last {
                    return Err(TraceError::AfterTerminal {
                        handler: self.handler,
                        kind,
                    });
                }
            }
        }
        self.scopes.pop();
        Ok(())
    }

    fn nested(&mut self, body: &Body, depth: usize) -> Result<(), TraceError> {
        match body {
            Some(body) => self.body(body, depth + 1),
            None => Ok(()),
        }
    }

    fn bind(&mut self, bind: Option<&Bind>) -> Result<(), TraceError> {
        match bind {
            None => Ok(()),
            Some(Bind::Let(name)) => {
                self.name(name)?;
                self.scopes
                    .last_mut()
                    .expect("inside a body")
                    .push(name.clone());
                Ok(())
            }
            Some(Bind::Set(target)) => match target {
                Expr::Id { .. }
                | Expr::From { .. }
                | Expr::Global { .. }
                | Expr::Get { .. }
                | Expr::Index { .. } => self.expr(target, 0),
                _ => Err(TraceError::BadProperty {
                    handler: self.handler,
                }),
            },
        }
    }

    fn break_target(&self, label: Option<&str>) -> Result<(), TraceError> {
        for target in self.targets.iter().rev() {
            match (target, label) {
                (Target::Function, _) => break,
                (Target::Loop, None) => return Ok(()),
                (Target::Label(l), Some(wanted)) if l == wanted => return Ok(()),
                _ => {}
            }
        }
        Err(TraceError::BreakTarget {
            handler: self.handler,
            label: label.unwrap_or("the enclosing loop").to_string(),
        })
    }

    fn expr(&mut self, e: &Expr, depth: usize) -> Result<(), TraceError> {
        self.count()?;
        // serde_json's nesting limit already bounds this; the check keeps the walk's bound
        // visible here.
        if depth > 128 {
            return Err(TraceError::TooDeep {
                handler: self.handler,
            });
        }
        let handler = self.handler;
        match e {
            Expr::Number { value } => {
                if !value.is_finite() {
                    return Err(TraceError::BadNumber { handler });
                }
            }
            Expr::String { .. } | Expr::Boolean { .. } | Expr::Null | Expr::This | Expr::Hole => {}
            Expr::Regex { source } => self.name(source)?,
            Expr::Id { name } => {
                self.name(name)?;
                if !self.bound(name) {
                    return Err(TraceError::Unbound {
                        handler,
                        name: name.clone(),
                    });
                }
            }
            Expr::From { name } => {
                self.name(name)?;
                if !self.environment.last().copied().unwrap_or(false) {
                    return Err(TraceError::NoEnvironment {
                        handler,
                        name: name.clone(),
                    });
                }
            }
            Expr::Global { name } => self.name(name)?,
            Expr::Import { source, name } => {
                self.name(source)?;
                self.name(name)?;
            }
            Expr::Get { object, property } => {
                self.name(property)?;
                self.expr(object, depth + 1)?;
            }
            Expr::Index { object, key } => {
                self.expr(object, depth + 1)?;
                self.expr(key, depth + 1)?;
            }
            Expr::Unary { op, argument } => {
                if !matches!(op.as_str(), "!" | "-" | "+" | "~" | "typeof" | "void") {
                    return Err(TraceError::BadName { handler });
                }
                self.expr(argument, depth + 1)?;
            }
            Expr::Binary { op, left, right } => {
                const OPERATORS: [&str; 21] = [
                    "+", "-", "*", "/", "%", "**", "==", "!=", "===", "!==", "<", "<=", ">", ">=",
                    "<<", ">>", ">>>", "&", "|", "^", "in",
                ];
                if !OPERATORS.contains(&op.as_str()) && op != "instanceof" {
                    return Err(TraceError::BadName { handler });
                }
                self.expr(left, depth + 1)?;
                self.expr(right, depth + 1)?;
            }
            Expr::Array { items } => {
                for item in items {
                    self.expr(item, depth + 1)?;
                }
            }
            Expr::Spread { argument } => self.expr(argument, depth + 1)?,
            Expr::Object { properties } => {
                for property in properties {
                    match (
                        &property.key,
                        &property.computed,
                        &property.spread,
                        &property.value,
                    ) {
                        (Some(_), None, None, Some(value)) => self.expr(value, depth + 1)?,
                        (None, Some(key), None, Some(value)) => {
                            self.expr(key, depth + 1)?;
                            self.expr(value, depth + 1)?;
                        }
                        (None, None, Some(spread), None) => self.expr(spread, depth + 1)?,
                        _ => return Err(TraceError::BadProperty { handler }),
                    }
                }
            }
            Expr::Closure {
                function, captures, ..
            } => {
                self.name(function)?;
                for capture in captures {
                    match capture {
                        Capture::Ref { name } => {
                            self.name(name)?;
                            if !self.bound(name) {
                                // A capture of a variable declared later in the same body
                                // (a hoisted function reading a later `let`) is bound by
                                // then: only its name is checked here.
                            }
                        }
                        Capture::From { name } => {
                            self.name(name)?;
                            if !self.environment.last().copied().unwrap_or(false) {
                                return Err(TraceError::NoEnvironment {
                                    handler,
                                    name: name.clone(),
                                });
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }
}
