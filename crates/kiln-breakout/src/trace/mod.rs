//! The trace IR: the tree a tracing instance sends (`runtimes/nodejs/breakout.js` dumps it as
//! JSON), as serde types, and its validator. The paper's Fig. 3 with its event handlers (Fig. 8):
//! a tree per handler, functions inlined (`named`), built-ins and intrinsics as `call`s,
//! `await` as an event in place, and observed types on the nodes that bind values.
//!
//! The tree comes from inside the sandbox, so it is untrusted: [`parse`] bounds its size and
//! nesting before and while it is read, and [`validate`] checks what the compiler relies on
//! (handler ids, bindings, labels, where unknown and terminal nodes may stand). The format is
//! in `docs/breakout.md`.

mod validate;

use serde::{Deserialize, Serialize};

pub use validate::{parse, validate, TraceError, MAX_DEPTH, MAX_NODES, MAX_TRACE_BYTES};

/// The version [`Trace::version`] must hold.
pub const TRACE_VERSION: u32 = 1;

/// A trace tree with its handlers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Trace {
    pub version: u32,
    /// Handler `i` has id `i`.
    pub handlers: Vec<Handler>,
    /// Paths the tracer could not hold (a call site that called two functions, say).
    #[serde(default)]
    pub conflicts: Vec<String>,
}

/// What a handler is the body of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HandlerKind {
    /// A file's top level (`fn` is `init:<file>`).
    Module,
    /// A function called from outside the traced code: per request, as a callback of a
    /// built-in, or as an async function (its call is the event).
    Function,
}

/// A handler (Fig. 8): a function id, its parameters and its trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Handler {
    pub id: u32,
    #[serde(rename = "fn")]
    pub function: String,
    pub kind: HandlerKind,
    pub params: Vec<String>,
    #[serde(default)]
    pub rest: Option<String>,
    #[serde(default, rename = "async")]
    pub is_async: bool,
    /// The types each parameter was given, when the handler was entered from outside.
    #[serde(default)]
    pub param_types: Vec<Vec<Type>>,
    pub body: Vec<Node>,
}

/// A body: `None` where the path was never traced (☠ when reached).
pub type Body = Option<Vec<Node>>;

/// Where a statement's value goes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
pub enum Bind {
    /// A new variable of the enclosing body.
    Let(String),
    /// An assignment to a variable or property (`id`, `from`, `global`, `get` or `index`).
    Set(Expr),
}

/// A JavaScript type observed at a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Type {
    /// A number that is a 32-bit integer.
    Int,
    Number,
    String,
    Boolean,
    Undefined,
    Null,
    Array,
    Object,
    Function,
    Promise,
    Bigint,
    Symbol,
}

/// A statement of the trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum Node {
    /// Not traced yet: the rest of the body is ☠.
    Unknown,
    /// ☠ where a construct outside the subset ran; `at` is its `file:line:col`.
    Unsupported {
        reason: String,
        at: String,
    },
    /// `let x = e` or `lvalue = e` (a closure when `value` is one).
    Let {
        bind: Bind,
        value: Expr,
        #[serde(default)]
        types: Vec<Type>,
    },
    /// An expression evaluated for its effect (a read that may throw).
    Expression {
        value: Expr,
        #[serde(default)]
        types: Vec<Type>,
    },
    If {
        test: Expr,
        then: Body,
        #[serde(rename = "else")]
        otherwise: Body,
    },
    While {
        test: Expr,
        body: Body,
    },
    Label {
        label: String,
        body: Body,
    },
    Block {
        body: Body,
    },
    Try {
        param: Option<String>,
        body: Body,
        handler: Body,
    },
    /// Leaves the innermost `label` of that name, or without one the innermost `while`.
    Break {
        label: Option<String>,
    },
    /// Leaves the innermost function: its `named` node or its handler.
    Return {
        value: Expr,
        #[serde(default)]
        types: Vec<Type>,
    },
    Throw {
        value: Expr,
    },
    /// A call to a traced function, inlined: `body` binds `params` to `args`, and reads its
    /// closure's variables through `callee` (`from`).
    Named {
        bind: Option<Bind>,
        callee: Expr,
        args: Vec<Expr>,
        #[serde(rename = "fn")]
        function: String,
        #[serde(default)]
        params: Vec<String>,
        #[serde(default)]
        rest: Option<String>,
        body: Body,
        #[serde(default)]
        types: Vec<Type>,
    },
    /// A call the trace does not see into: a built-in, an intrinsic, or an async function
    /// (an event); `handlers` are the handlers it called back.
    Call {
        bind: Option<Bind>,
        callee: Expr,
        args: Vec<Expr>,
        new: bool,
        #[serde(default)]
        handlers: Vec<u32>,
        /// The intrinsic the call was (one of [`INTRINSICS`]): the compiled call guards that
        /// its callee is that intrinsic again.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        intrinsic: Option<String>,
        #[serde(default)]
        types: Vec<Type>,
    },
    /// `await`: an event whose handler is the rest of the function, in place.
    Await {
        bind: Option<Bind>,
        value: Expr,
        #[serde(default)]
        types: Vec<Type>,
    },
}

/// The intrinsics a `call` node may name: calls whose effects are the platform's (the
/// function's log, the clock, randomness, the object store), as the tracing runtime names
/// them.
pub const INTRINSICS: &[&str] = &[
    "console.log",
    "console.info",
    "console.warn",
    "console.error",
    "Date.now",
    "Date",
    "Math.random",
    "S3Client.prototype.send",
];

/// An expression of the trace: quoted from the code, never a value from a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum Expr {
    Number {
        value: f64,
    },
    String {
        value: String,
    },
    Boolean {
        value: bool,
    },
    Null,
    Regex {
        source: String,
    },
    /// A variable of the function being traced.
    Id {
        name: String,
    },
    /// A variable of an enclosing function, through the closure's environment (Fig. 3's `*t.x`).
    From {
        name: String,
    },
    Global {
        name: String,
    },
    This,
    Get {
        object: Box<Expr>,
        property: String,
    },
    Index {
        object: Box<Expr>,
        key: Box<Expr>,
    },
    Unary {
        op: String,
        argument: Box<Expr>,
    },
    Binary {
        op: String,
        left: Box<Expr>,
        right: Box<Expr>,
    },
    Array {
        items: Vec<Expr>,
    },
    /// An array's hole.
    Hole,
    Spread {
        argument: Box<Expr>,
    },
    Object {
        properties: Vec<Property>,
    },
    /// An ES module import: the export `name` (`default`, `*`) of `source`.
    Import {
        source: String,
        name: String,
    },
    /// A function value: its id and the addresses of what it captures (Fig. 3's `env`).
    Closure {
        #[serde(rename = "fn")]
        function: String,
        #[serde(default, rename = "async")]
        is_async: bool,
        captures: Vec<Capture>,
    },
}

/// A member of an object literal: `key` or `computed` with `value`, or `spread`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Property {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub computed: Option<Expr>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spread: Option<Expr>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Expr>,
}

/// A captured variable's address: `ref` a variable of the function making the closure, `from`
/// one of its own environment (Fig. 3's `&x` and `t.x`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum Capture {
    Ref { name: String },
    From { name: String },
}
