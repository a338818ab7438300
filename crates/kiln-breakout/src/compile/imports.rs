//! The host functions the compiled module imports from `kiln_rt`, in the order of their
//! function indices. [`crate::exec`] defines each.

use wasm_encoder::ValType::{self, I32, I64};

/// The import module's name.
pub const MODULE: &str = "kiln_rt";

/// An import: its name, parameters and results.
pub struct Import {
    pub name: &'static str,
    pub params: &'static [ValType],
    pub results: &'static [ValType],
}

macro_rules! imports {
    ($($constant:ident = $name:literal ($($p:ident),*) -> ($($r:ident),*);)*) => {
        /// Every import, by index.
        pub const IMPORTS: &[Import] = &[
            $(Import { name: $name, params: &[$($p),*], results: &[$($r),*] },)*
        ];
        imports!(@index 0u32, $($constant)*);
    };
    (@index $i:expr, $first:ident $($rest:ident)*) => {
        pub const $first: u32 = $i;
        imports!(@index $i + 1, $($rest)*);
    };
    (@index $i:expr,) => {};
}

imports! {
    // (reason address, length): records the miss and traps; never returns.
    MISS = "miss"(I32, I32) -> ();
    // (operator, a, b) -> a OP b, the operator a number of `runtime::ops::BINARY`.
    BINARY = "binary"(I32, I64, I64) -> (I64);
    UNARY = "unary"(I32, I64) -> (I64);
    TRUTHY = "truthy"(I64) -> (I32);
    GET = "get"(I64, I64) -> (I64);
    SET = "set"(I64, I64, I64) -> ();
    OBJECT = "object"() -> (I64);
    ARRAY = "array"() -> (I64);
    PUSH = "push"(I64, I64) -> ();
    // (array, iterable): the iterable's elements pushed (`[...xs]`).
    SPREAD = "spread"(I64, I64) -> ();
    // (object, source): the source's own properties copied (`{...o}`).
    ASSIGN = "assign"(I64, I64) -> ();
    // (function index, cells) -> a closure whose environment the code then fills.
    CLOSURE = "closure"(I32, I32) -> (I64);
    CELL = "cell"(I64) -> (I32);
    // (callee, this, argc, a0..a3).
    CALL = "call"(I64, I64, I32, I64, I64, I64, I64) -> (I64);
    // (callee, this, arguments array).
    CALL_ARRAY = "call_array"(I64, I64, I64) -> (I64);
    // (callee, argc, a0..a3).
    CONSTRUCT = "construct"(I64, I32, I64, I64, I64, I64) -> (I64);
    CONSTRUCT_ARRAY = "construct_array"(I64, I64) -> (I64);
    GLOBAL = "global"(I64) -> (I64);
    SET_GLOBAL = "set_global"(I64, I64) -> ();
    // (UTF-8 address, length) -> the value.
    JSON_PARSE = "json_parse"(I32, I32) -> (I64);
    // (value) -> its JSON as UTF-8 in the arena: address << 32 | length.
    JSON_ANSWER = "json_answer"(I64) -> (I64);
    // (value): a throw no `try` catches; out of the handler a request called, the function's
    // error (`runtime::thrown`), anywhere else a miss. Never returns.
    UNCAUGHT = "uncaught"(I64) -> ();
    // (file number) -> the address of the file's module record, made on first use.
    MODULE_RECORD = "module_record"(I32) -> (I32);
    // (value) -> its function index if it is a closure, else -1.
    FUNCTION_OF = "function_of"(I64) -> (I32);
    // () -> the handler's `context`.
    CONTEXT = "context"() -> (I64);
}

/// How many imports there are: the first defined function's index.
pub const COUNT: u32 = IMPORTS.len() as u32;

/// The most arguments a call passes directly; more go in an array.
pub const DIRECT_ARGS: usize = 4;
