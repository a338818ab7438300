//! Element and length access with the array case inline: `a[i]` and `a[i] = v` on an array
//! with a number index below its length, and `.length` of an array or string, read or write
//! the arena directly (layouts in [`crate::runtime::heap`]), and so does `a.push(v)` while
//! the array has room, and `a.shift()` while it has an element (an array has no own named
//! properties and its prototype's methods cannot be replaced, so its `push` and `shift` are
//! the builtins), and `s.startsWith(p)` of two strings compares their units here; every other
//! case (a property, a hole past the end, a string index, a key that is not an integer, a full
//! array, an empty one, a receiver or argument of another type) calls the runtime.

use wasm_encoder::{BlockType, InstructionSink, MemArg, ValType};

use super::codegen::{mem32, mem64, Generator};
use super::imports::{self as rt, DIRECT_ARGS};
use crate::runtime::value::{Value, FALSE, TAGGED, TAG_ARRAY, TAG_MASK, TAG_STRING, TRUE};
use crate::trace::Expr;

impl Generator<'_> {
    /// `object[key]`: the value on the stack.
    pub fn get_index(&mut self, object: &Expr, key: &Expr) {
        let (o, k) = (self.local(ValType::I64), self.local(ValType::I64));
        self.expr(object);
        self.sink().local_set(o);
        self.expr(key);
        self.sink().local_set(k);
        let slot = self.local(ValType::I32);
        self.sink()
            .block(BlockType::Result(ValType::I64))
            .block(BlockType::Empty);
        self.array_slot(o, k, slot);
        self.sink()
            .local_get(slot)
            .i64_load(mem64(0))
            .br(1)
            .end()
            .local_get(o)
            .local_get(k)
            .call(rt::GET)
            .end();
        self.free(ValType::I32, slot);
        self.free(ValType::I64, o);
        self.free(ValType::I64, k);
    }

    /// `object[key] = value`, the value what `emit` leaves on the stack.
    pub fn set_index(&mut self, object: &Expr, key: &Expr, emit: &mut dyn FnMut(&mut Self)) {
        let (o, k, v) = (
            self.local(ValType::I64),
            self.local(ValType::I64),
            self.local(ValType::I64),
        );
        self.expr(object);
        self.sink().local_set(o);
        self.expr(key);
        self.sink().local_set(k);
        emit(self);
        self.sink().local_set(v);
        let slot = self.local(ValType::I32);
        self.sink().block(BlockType::Empty).block(BlockType::Empty);
        self.array_slot(o, k, slot);
        self.sink()
            .local_get(slot)
            .local_get(v)
            .i64_store(mem64(0))
            .br(1)
            .end()
            .local_get(o)
            .local_get(k)
            .local_get(v)
            .call(rt::SET)
            .end();
        self.free(ValType::I32, slot);
        self.free(ValType::I64, o);
        self.free(ValType::I64, k);
        self.free(ValType::I64, v);
    }

    /// Inside two blocks, the inner the slow path: leaves the inner one unless `o` is an
    /// array and `k` a number that is an index below its length, and sets `slot` to the
    /// address of that element.
    fn array_slot(&mut self, o: u32, k: u32, slot: u32) {
        let (address, index) = (self.local(ValType::I32), self.local(ValType::I32));
        leave_unless_array(&mut self.sink(), o);
        self.sink()
            // A number.
            .local_get(k)
            .i64_const(TAGGED as i64)
            .i64_ge_u()
            .br_if(0)
            // An integer (`-0` is `0`, as its key "0" is).
            .local_get(k)
            .f64_reinterpret_i64()
            .i32_trunc_sat_f64_u()
            .local_tee(index)
            .f64_convert_i32_u()
            .local_get(k)
            .f64_reinterpret_i64()
            .f64_ne()
            .br_if(0)
            // Below the length.
            .local_get(o)
            .i32_wrap_i64()
            .local_tee(address)
            .i32_load(mem32(0))
            .local_get(index)
            .i32_le_u()
            .br_if(0);
        ring_slot(&mut self.sink(), address, index);
        self.sink().local_set(slot);
        self.free(ValType::I32, address);
        self.free(ValType::I32, index);
    }

    /// `object.length`: an array's or a string's read inline, any other's by the runtime.
    pub fn get_length(&mut self, object: &Expr, key: u64) {
        let (o, tag) = (self.local(ValType::I64), self.local(ValType::I64));
        self.expr(object);
        self.sink()
            .local_tee(o)
            .i64_const(TAG_MASK as i64)
            .i64_and()
            .local_set(tag)
            .block(BlockType::Result(ValType::I64))
            .block(BlockType::Empty)
            .local_get(tag)
            .i64_const(TAG_ARRAY as i64)
            .i64_ne()
            .local_get(tag)
            .i64_const(TAG_STRING as i64)
            .i64_ne()
            .i32_and()
            .br_if(0)
            // Both keep their length in their header's first word.
            .local_get(o)
            .i32_wrap_i64()
            .i32_load(mem32(0))
            .f64_convert_i32_u()
            .i64_reinterpret_f64()
            .br(1)
            .end()
            .local_get(o)
            .i64_const(key as i64)
            .call(rt::GET)
            .end();
        self.free(ValType::I64, o);
        self.free(ValType::I64, tag);
    }

    /// `object.push(arg)` (`key` is the constant `"push"`): the new length on the stack.
    pub fn push(&mut self, object: &Expr, arg: &Expr, key: u64) {
        let (o, v) = (self.local(ValType::I64), self.local(ValType::I64));
        let (address, len, capacity) = (
            self.local(ValType::I32),
            self.local(ValType::I32),
            self.local(ValType::I32),
        );
        self.expr(object);
        self.sink().local_set(o);
        self.expr(arg);
        self.sink()
            .local_set(v)
            .block(BlockType::Result(ValType::I64))
            .block(BlockType::Empty);
        array_length(&mut self.sink(), o, address, len);
        // Room for one more.
        self.sink()
            .local_get(address)
            .i32_load(mem32(4))
            .local_tee(capacity)
            .i32_ge_u()
            .br_if(0);
        // The slot after the last = v.
        ring_slot(&mut self.sink(), address, len);
        self.sink()
            .local_get(v)
            .i64_store(mem64(0))
            .local_get(address)
            .local_get(len)
            .i32_const(1)
            .i32_add()
            .local_tee(len)
            .i32_store(mem32(0))
            .local_get(len)
            .f64_convert_i32_u()
            .i64_reinterpret_f64()
            .br(1)
            .end()
            // The general call: the method read, then called with `this`.
            .local_get(o)
            .i64_const(key as i64)
            .call(rt::GET)
            .local_get(o)
            .i32_const(1)
            .local_get(v);
        for _ in 1..DIRECT_ARGS {
            self.value(Value::UNDEFINED);
        }
        self.sink().call(rt::CALL).end();
        self.free(ValType::I64, o);
        self.free(ValType::I64, v);
        self.free(ValType::I32, address);
        self.free(ValType::I32, len);
        self.free(ValType::I32, capacity);
    }
}

impl Generator<'_> {
    /// `object.startsWith(arg)` (`key` is the constant `"startsWith"`): on two strings, their
    /// units compared inline; any other case by the runtime.
    pub fn starts_with(&mut self, object: &Expr, arg: &Expr, key: u64) {
        let (o, p) = (self.local(ValType::I64), self.local(ValType::I64));
        let (a, b, len, i) = (
            self.local(ValType::I32),
            self.local(ValType::I32),
            self.local(ValType::I32),
            self.local(ValType::I32),
        );
        let unit = MemArg {
            align: 1,
            ..mem32(8)
        };
        self.expr(object);
        self.sink().local_set(o);
        self.expr(arg);
        self.sink()
            .local_set(p)
            .block(BlockType::Result(ValType::I64))
            .block(BlockType::Empty)
            .local_get(o)
            .i64_const(TAG_MASK as i64)
            .i64_and()
            .i64_const(TAG_STRING as i64)
            .i64_ne()
            .local_get(p)
            .i64_const(TAG_MASK as i64)
            .i64_and()
            .i64_const(TAG_STRING as i64)
            .i64_ne()
            .i32_or()
            .br_if(0)
            .i64_const(FALSE as i64)
            .local_get(p)
            .i32_wrap_i64()
            .local_tee(b)
            .i32_load(mem32(0))
            .local_tee(len)
            .local_get(o)
            .i32_wrap_i64()
            .local_tee(a)
            .i32_load(mem32(0))
            .i32_gt_u()
            .br_if(1)
            .drop()
            .i32_const(0)
            .local_set(i)
            .loop_(BlockType::Empty)
            .i64_const(TRUE as i64)
            .local_get(i)
            .local_get(len)
            .i32_ge_u()
            .br_if(2)
            .drop()
            .i64_const(FALSE as i64)
            .local_get(a)
            .local_get(i)
            .i32_const(1)
            .i32_shl()
            .i32_add()
            .i32_load16_u(unit)
            .local_get(b)
            .local_get(i)
            .i32_const(1)
            .i32_shl()
            .i32_add()
            .i32_load16_u(unit)
            .i32_ne()
            .br_if(2)
            .drop()
            .local_get(i)
            .i32_const(1)
            .i32_add()
            .local_set(i)
            .br(0)
            .end()
            .unreachable()
            .end()
            .local_get(o)
            .i64_const(key as i64)
            .call(rt::GET)
            .local_get(o)
            .i32_const(1)
            .local_get(p);
        for _ in 1..DIRECT_ARGS {
            self.value(Value::UNDEFINED);
        }
        let call = self.shared.helpers.call;
        self.sink().call(call).end();
        self.free(ValType::I64, o);
        self.free(ValType::I64, p);
        for local in [a, b, len, i] {
            self.free(ValType::I32, local);
        }
    }

    /// `object.shift()` (`key` is the constant `"shift"`): the first element, taken inline
    /// from an array that has one (the ring's head moves on), any other case by the runtime.
    pub fn shift(&mut self, object: &Expr, key: u64) {
        let o = self.local(ValType::I64);
        let (address, len, zero) = (
            self.local(ValType::I32),
            self.local(ValType::I32),
            self.local(ValType::I32),
        );
        self.expr(object);
        self.sink()
            .local_set(o)
            .block(BlockType::Result(ValType::I64))
            .block(BlockType::Empty);
        array_length(&mut self.sink(), o, address, len);
        self.sink().i32_eqz().br_if(0).i32_const(0).local_set(zero);
        ring_slot(&mut self.sink(), address, zero);
        self.sink()
            .i64_load(mem64(0))
            // head = (head + 1) & (capacity - 1); length - 1.
            .local_get(address)
            .local_get(address)
            .i32_load(mem32(8))
            .i32_const(1)
            .i32_add()
            .local_get(address)
            .i32_load(mem32(4))
            .i32_const(1)
            .i32_sub()
            .i32_and()
            .i32_store(mem32(8))
            .local_get(address)
            .local_get(len)
            .i32_const(1)
            .i32_sub()
            .i32_store(mem32(0))
            .br(1)
            .end()
            .local_get(o)
            .i64_const(key as i64)
            .call(rt::GET)
            .local_get(o)
            .i32_const(0);
        for _ in 0..DIRECT_ARGS {
            self.value(Value::UNDEFINED);
        }
        self.sink().call(rt::CALL).end();
        self.free(ValType::I64, o);
        self.free(ValType::I32, address);
        self.free(ValType::I32, len);
        self.free(ValType::I32, zero);
    }
}

/// Inside two blocks, the inner the slow path: leaves the inner one unless the `i64` local `o`
/// is an array.
fn leave_unless_array(sink: &mut InstructionSink<'_>, o: u32) {
    sink.local_get(o)
        .i64_const(TAG_MASK as i64)
        .i64_and()
        .i64_const(TAG_ARRAY as i64)
        .i64_ne()
        .br_if(0);
}

/// As [`leave_unless_array`], then pushes the array's length, also set in the `i32` local
/// `len`, with its header's address in the `i32` local `address`.
fn array_length(sink: &mut InstructionSink<'_>, o: u32, address: u32, len: u32) {
    leave_unless_array(sink, o);
    sink.local_get(o)
        .i32_wrap_i64()
        .local_tee(address)
        .i32_load(mem32(0))
        .local_tee(len);
}

/// Pushes the address of slot `index` of the array whose header is at `address` (both `i32`
/// locals): `slots + 8 * ((head + index) & (capacity - 1))`, the ring buffer's capacity being
/// a power of two.
pub(super) fn ring_slot(sink: &mut InstructionSink<'_>, address: u32, index: u32) {
    sink.local_get(address)
        .i32_load(mem32(12))
        .local_get(address)
        .i32_load(mem32(8))
        .local_get(index)
        .i32_add()
        .local_get(address)
        .i32_load(mem32(4))
        .i32_const(1)
        .i32_sub()
        .i32_and()
        .i32_const(3)
        .i32_shl()
        .i32_add();
}
