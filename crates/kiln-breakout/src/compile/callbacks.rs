//! The array methods that call back (`map`, `filter`, `forEach`, `every`, `some`, `find`)
//! as loops of the module when `this` is an array and the callback a closure: each element
//! is passed to the closure's function through `apply` (a wasm call, counted in `depth` as
//! `objects.rs` says), with no host call between the elements. The loop is the runtime's
//! (`runtime::builtins::call`): the length is read once, and an array that becomes shorter
//! than the element the loop is at misses (JavaScript goes on with holes). Any other `this` or
//! callback (a builtin such as `Number.isInteger`) calls the runtime.

use wasm_encoder::{BlockType, InstructionSink, ValType};

use super::codegen::{mem32, mem64, Generator};
use super::imports::{self as rt, DIRECT_ARGS};
use super::objects::DEPTH_GLOBAL;
use crate::runtime::builtins::SHRANK;
use crate::runtime::value::{Value, FALSE, TAG_ARRAY, TAG_CLOSURE, TAG_MASK, TRUE};
use crate::trace::Expr;

/// What a method does with the callback's answers.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Map,
    Filter,
    ForEach,
    Every,
    Some,
    Find,
}

impl Kind {
    fn of(property: &str) -> Option<Kind> {
        Some(match property {
            "map" => Kind::Map,
            "filter" => Kind::Filter,
            "forEach" => Kind::ForEach,
            "every" => Kind::Every,
            "some" => Kind::Some,
            "find" => Kind::Find,
            _ => return None,
        })
    }
}

/// Pushes the `i32` 1 when the value in local `v` is truthy: booleans inline, any other value
/// by the runtime.
pub fn truthy(sink: &mut InstructionSink<'_>, v: u32) {
    sink.local_get(v)
        .i64_const(TRUE as i64)
        .i64_eq()
        .if_(BlockType::Result(ValType::I32))
        .i32_const(1)
        .else_()
        .local_get(v)
        .i64_const(FALSE as i64)
        .i64_eq()
        .if_(BlockType::Result(ValType::I32))
        .i32_const(0)
        .else_()
        .local_get(v)
        .call(rt::TRUTHY)
        .end()
        .end();
}

impl Generator<'_> {
    /// `object.property(callback[, thisArg])` for the methods above: the result on the stack;
    /// `false` (nothing emitted) for any other call.
    pub fn array_callback(&mut self, object: &Expr, property: &str, args: &[Expr]) -> bool {
        let Some(kind) = Kind::of(property) else {
            return false;
        };
        if args.is_empty()
            || args.len() > 2
            || args.iter().any(|a| matches!(a, Expr::Spread { .. }))
        {
            return false;
        }
        let key = self.shared.data.string(property);
        let shrank = self.shared.data.reason(SHRANK, None);
        let helpers = self.shared.helpers;
        let (array, f, this_arg) = (
            self.local(ValType::I64),
            self.local(ValType::I64),
            self.local(ValType::I64),
        );
        let (out, item, result) = (
            self.local(ValType::I64),
            self.local(ValType::I64),
            self.local(ValType::I64),
        );
        let (address, len, i, slot) = (
            self.local(ValType::I32),
            self.local(ValType::I32),
            self.local(ValType::I32),
            self.local(ValType::I32),
        );
        self.expr(object);
        self.sink().local_set(array);
        self.expr(&args[0]);
        self.sink().local_set(f);
        match args.get(1) {
            Some(a) => self.expr(a),
            None => self.value(Value::UNDEFINED),
        }
        self.sink().local_set(this_arg);
        let mut s = self.sink();
        s.block(BlockType::Result(ValType::I64)) // the result
            .block(BlockType::Empty) // the runtime's
            .local_get(array)
            .i64_const(TAG_MASK as i64)
            .i64_and()
            .i64_const(TAG_ARRAY as i64)
            .i64_ne()
            .local_get(f)
            .i64_const(TAG_MASK as i64)
            .i64_and()
            .i64_const(TAG_CLOSURE as i64)
            .i64_ne()
            .i32_or()
            .br_if(0)
            .local_get(array)
            .i32_wrap_i64()
            .local_tee(address)
            .i32_load(mem32(0))
            .local_set(len);
        match kind {
            Kind::Map => {
                s.local_get(len).call(helpers.array).local_set(out);
            }
            Kind::Filter => {
                s.i32_const(0).call(helpers.array).local_set(out);
            }
            _ => {}
        }
        s.i32_const(0)
            .local_set(i)
            .block(BlockType::Empty) // the loop's end
            .loop_(BlockType::Empty)
            .local_get(i)
            .local_get(len)
            .i32_ge_u()
            .br_if(1)
            .local_get(i)
            .local_get(address)
            .i32_load(mem32(0))
            .i32_ge_u()
            .if_(BlockType::Empty)
            .i32_const(shrank.0 as i32)
            .i32_const(shrank.1 as i32)
            .call(rt::MISS)
            .unreachable()
            .end();
        super::access::ring_slot(&mut s, address, i);
        s.i64_load(mem64(0))
            .local_set(item)
            // callback(item, i, array) with `this` the second argument.
            .global_get(DEPTH_GLOBAL)
            .i32_const(1)
            .i32_add()
            .global_set(DEPTH_GLOBAL)
            .local_get(f)
            .local_get(this_arg)
            .i32_const(3)
            .local_get(item)
            .local_get(i)
            .f64_convert_i32_u()
            .i64_reinterpret_f64()
            .local_get(array);
        for _ in 3..DIRECT_ARGS {
            s.i64_const(Value::UNDEFINED.0 as i64);
        }
        s.call(helpers.apply)
            .local_set(result)
            .global_get(DEPTH_GLOBAL)
            .i32_const(1)
            .i32_sub()
            .global_set(DEPTH_GLOBAL);
        match kind {
            Kind::Map => {
                // `out` is fresh, its head 0 and its capacity the length: slot i, then the
                // length i + 1.
                s.local_get(out)
                    .i32_wrap_i64()
                    .local_tee(slot)
                    .i32_load(mem32(12))
                    .local_get(i)
                    .i32_const(3)
                    .i32_shl()
                    .i32_add()
                    .local_get(result)
                    .i64_store(mem64(0))
                    .local_get(slot)
                    .local_get(i)
                    .i32_const(1)
                    .i32_add()
                    .i32_store(mem32(0));
            }
            Kind::ForEach => {}
            _ => {
                truthy(&mut s, result);
                match kind {
                    Kind::Filter => {
                        s.if_(BlockType::Empty)
                            .local_get(out)
                            .local_get(item)
                            .call(rt::PUSH)
                            .end();
                    }
                    Kind::Every => {
                        s.i32_eqz()
                            .if_(BlockType::Empty)
                            .i64_const(FALSE as i64)
                            .br(4)
                            .end();
                    }
                    Kind::Some => {
                        s.if_(BlockType::Empty).i64_const(TRUE as i64).br(4).end();
                    }
                    Kind::Find => {
                        s.if_(BlockType::Empty).local_get(item).br(4).end();
                    }
                    Kind::Map | Kind::ForEach => {}
                }
            }
        }
        s.local_get(i)
            .i32_const(1)
            .i32_add()
            .local_set(i)
            .br(0)
            .end()
            .end();
        match kind {
            Kind::Map | Kind::Filter => s.local_get(out),
            Kind::Every => s.i64_const(TRUE as i64),
            Kind::Some => s.i64_const(FALSE as i64),
            Kind::ForEach | Kind::Find => s.i64_const(Value::UNDEFINED.0 as i64),
        };
        s.br(1)
            .end()
            // The runtime's: the method read, then called.
            .local_get(array)
            .i64_const(key.0 as i64)
            .call(rt::GET)
            .local_get(array)
            .i32_const(args.len() as i32)
            .local_get(f)
            .local_get(this_arg);
        for _ in 2..DIRECT_ARGS {
            s.i64_const(Value::UNDEFINED.0 as i64);
        }
        s.call(helpers.call).end();
        for local in [array, f, this_arg, out, item, result] {
            self.free(ValType::I64, local);
        }
        for local in [address, len, i, slot] {
            self.free(ValType::I32, local);
        }
        true
    }
}
