//! Objects without the runtime: named property reads and writes, object literals, `new` of a
//! traced constructor and calls of closures, done in the module itself over the arena's
//! layout ([`crate::runtime::heap`]), each falling back to the runtime's host call for every
//! case it does not take.
//!
//! An object is a prototype and a list of (key, value) entries in insertion order. A named
//! access at a site (`o.p`, `o.p = v`) has a constant key, a string of the module's data, and
//! a *cache*: a mutable global holding the entry index where the site last found its key in
//! the object itself. The guard of the cache is the object's layout at that index: an entry
//! there whose key is that very string (the same address; the module's data holds each text
//! once, and the code stores its keys as it names them). A hit reads or writes the value
//! with no call at all; a miss of the cache calls [`Helpers::lookup`] (or
//! [`Helpers::set_own`]), which scans the entries as `Heap::lookup` does: a key at another
//! address equal to the constant would need its units compared, so an entry whose length and
//! hash (the first 8 bytes of a string) are the key's sends the access to the runtime, as do
//! a prototype chain that leaves the arena (a builtin's members, a record's fields, an
//! error's `message`) and a key not found. The runtime then answers as before.
//!
//! The helpers are functions of the module (wasm calls, not host calls), after `run`:
//! - `lookup(object, key) -> (value, own index)`: the property through the prototype chain;
//!   [`MISSED`] when the runtime must answer; the index is -1 unless it is the object's own;
//! - `set_own(object, key, value) -> index`: an existing own property written, or a new one
//!   appended while the entries have room; -1 when the runtime must (the entries full, a
//!   `Buffer`, a key compared only by its units);
//! - `alloc(size) -> address`: bump allocation in the arena (the memory past the heap's top
//!   is zero), "out of memory" when it does not fit;
//! - `object(proto, capacity) -> object`: an object with room for `capacity` entries;
//! - `construct(callee, argc, a0..a3)`: `new` of a closure (its `prototype` read, an object
//!   made, the closure applied with it as `this`), any other callee by the runtime;
//! - `call(callee, this, argc, a0..a3)`: a closure applied directly, any other by the runtime;
//! - `function_of(value) -> index`: a closure's function index, -1 for any other value;
//! - `array(capacity) -> array`: an empty array with room for `capacity` elements (a power
//!   of two, as the runtime's).
//!
//! A closure applied from the module counts in the exported global `depth`, which the host
//! adds to its own nesting: an error raised or a value thrown below the handler a request
//! called is not the function's error, as when the runtime applies it.

use wasm_encoder::{BlockType, Function, InstructionSink, ValType};

use super::codegen::{mem32, mem64, Generator};
use super::imports::{self as rt, DIRECT_ARGS};
use crate::runtime::builtins::Builtin;
use crate::runtime::heap::{CLOSURE_FUNCTION, HEAP_TOP, MAX_LENGTH, OBJECT_SIZE};
use crate::runtime::value::{
    Value, NULL, TAG_ARRAY, TAG_BUILTIN, TAG_CLOSURE, TAG_MASK, TAG_OBJECT,
};
use crate::trace::{Expr, Property};

/// What `lookup` answers when the runtime must: a tag no value has.
pub const MISSED: i64 = (0xFFFFu64 << 48) as i64;

/// The global counting closures applied from the module, exported as `depth`.
pub const DEPTH_GLOBAL: u32 = 2;
/// The first site cache's global.
pub const FIRST_SITE_GLOBAL: u32 = 3;

/// How many prototypes a lookup follows before the runtime takes over (as `Heap::lookup`).
const MAX_CHAIN: i32 = 10_000;

/// The entries an object made by `new` has room for before its first growth.
const CONSTRUCTED_CAPACITY: i32 = 4;

/// The helpers' function indices.
#[derive(Debug, Clone, Copy)]
pub struct Helpers {
    pub lookup: u32,
    pub set_own: u32,
    pub alloc: u32,
    pub object: u32,
    pub construct: u32,
    pub call: u32,
    pub function_of: u32,
    pub array: u32,
    /// `apply`, the module's way into a closure's function.
    pub apply: u32,
}

impl Helpers {
    /// The helpers, numbered from `first`.
    pub fn at(first: u32) -> Helpers {
        Helpers {
            lookup: first,
            set_own: first + 1,
            alloc: first + 2,
            object: first + 3,
            construct: first + 4,
            call: first + 5,
            function_of: first + 6,
            array: first + 7,
            apply: first - 3,
        }
    }

    /// Each helper's parameters and results, in index order.
    pub fn signatures() -> [(Vec<ValType>, Vec<ValType>); 8] {
        use ValType::{I32, I64};
        let call_params = vec![I64, I64, I32, I64, I64, I64, I64];
        [
            (vec![I64, I64], vec![I64, I32]),
            (vec![I64, I64, I64], vec![I32]),
            (vec![I32], vec![I32]),
            (vec![I64, I32], vec![I64]),
            (vec![I64, I32, I64, I64, I64, I64], vec![I64]),
            (call_params, vec![I64]),
            (vec![I64], vec![I32]),
            (vec![I32], vec![I64]),
        ]
    }
}

/// Pushes 1 when the `i64` local `v` is a plain object or a closure.
fn is_object_or_closure(sink: &mut InstructionSink<'_>, v: u32) {
    sink.local_get(v)
        .i64_const(TAG_MASK as i64)
        .i64_and()
        .i64_const(TAG_OBJECT as i64)
        .i64_eq()
        .local_get(v)
        .i64_const(TAG_MASK as i64)
        .i64_and()
        .i64_const(TAG_CLOSURE as i64)
        .i64_eq()
        .i32_or();
}

/// A named access's site cache, inside two blocks (the outer one the access's, the inner one
/// its slow path), for the site's global and key `(site, key)` on the `i64` local `o`: leaves
/// the inner block unless `o` is a plain object or a closure; then, when the entry at the
/// index in the site's global is one of the object's and holds the key (the very string),
/// `hit` emits the access with that entry's address in the `i32` local `entry` and the code
/// leaves the outer block; else it goes on to the slow path. The `i32` local `index` is
/// scratch.
fn cached_entry(
    s: &mut InstructionSink<'_>,
    o: u32,
    (site, key): (u32, Value),
    (entry, index): (u32, u32),
    hit: impl FnOnce(&mut InstructionSink<'_>),
) {
    is_object_or_closure(s, o);
    s.i32_eqz()
        .br_if(0)
        .local_get(o)
        .i32_wrap_i64()
        .local_tee(entry)
        .i32_load(mem32(8))
        .global_get(site)
        .local_tee(index)
        .i32_gt_u()
        .if_(BlockType::Empty)
        .local_get(entry)
        .i32_load(mem32(16))
        .local_get(index)
        .i32_const(4)
        .i32_shl()
        .i32_add()
        .local_tee(entry)
        .i64_load(mem64(0))
        .i64_const(key.0 as i64)
        .i64_eq()
        .if_(BlockType::Empty);
    hit(s);
    s.br(3).end().end();
}

/// The scan of an object's own entries (the `i32` locals `count` and `entries`, from the index
/// in `i`) for the key in the `i64` local `k`, whose header (length and hash) is in `header`;
/// `entry_key` is scratch. At the entry that holds the key, `found` emits the access with the
/// entry's address on the stack and returns; at one whose key has the same length and hash at
/// another address (whose units only the runtime compares), `other` takes that condition and
/// returns or leaves; past the last entry the code leaves the scan's block.
fn own_entries(
    s: &mut InstructionSink<'_>,
    (k, header, entry_key): (u32, u32, u32),
    (count, entries, i): (u32, u32, u32),
    found: impl FnOnce(&mut InstructionSink<'_>),
    other: impl FnOnce(&mut InstructionSink<'_>),
) {
    s.block(BlockType::Empty)
        .loop_(BlockType::Empty)
        .local_get(i)
        .local_get(count)
        .i32_ge_u()
        .br_if(1)
        .local_get(entries)
        .local_get(i)
        .i32_const(4)
        .i32_shl()
        .i32_add()
        .i64_load(mem64(0))
        .local_tee(entry_key)
        .local_get(k)
        .i64_eq()
        .if_(BlockType::Empty)
        .local_get(entries)
        .local_get(i)
        .i32_const(4)
        .i32_shl()
        .i32_add();
    found(s);
    s.end()
        .local_get(entry_key)
        .i32_wrap_i64()
        .i64_load(mem64(0))
        .local_get(header)
        .i64_eq();
    other(s);
    s.local_get(i)
        .i32_const(1)
        .i32_add()
        .local_set(i)
        .br(0)
        .end()
        .end();
}

/// `lookup(object, key) -> (value, own index)`, `object` a plain object or a closure.
pub fn lookup_function() -> Function {
    // Locals: 2 current, 3 header, 4 entry key (i64); 5 address, 6 count, 7 entries, 8 i,
    // 9 hops (i32).
    let (o, k, current, header, entry_key) = (0, 1, 2, 3, 4);
    let (address, count, entries, i, hops) = (5, 6, 7, 8, 9);
    let mut f = Function::new([(3, ValType::I64), (5, ValType::I32)]);
    let mut s = f.instructions();
    s.local_get(k)
        .i32_wrap_i64()
        .i64_load(mem64(0))
        .local_set(header)
        .local_get(o)
        .local_set(current)
        .block(BlockType::Empty) // the runtime's
        .loop_(BlockType::Empty) // each object of the chain
        .local_get(current)
        .i32_wrap_i64()
        .local_tee(address)
        .i32_load(mem32(8))
        .local_set(count)
        .local_get(address)
        .i32_load(mem32(16))
        .local_set(entries)
        .i32_const(0)
        .local_set(i);
    own_entries(
        &mut s,
        (k, header, entry_key),
        (count, entries, i),
        |s| {
            s.i64_load(mem64(8))
                .local_get(i)
                .i32_const(-1)
                .local_get(current)
                .local_get(o)
                .i64_eq()
                .select()
                .return_();
        },
        // The units decide, in the runtime.
        |s| {
            s.br_if(3);
        },
    );
    // The prototype, while it is in the arena.
    s.local_get(address).i64_load(mem64(0)).local_set(current);
    is_object_or_closure(&mut s, current);
    s.i32_eqz()
        .br_if(1)
        .local_get(hops)
        .i32_const(1)
        .i32_add()
        .local_tee(hops)
        .i32_const(MAX_CHAIN)
        .i32_gt_u()
        .br_if(1)
        .br(0)
        .end()
        .end()
        .i64_const(MISSED)
        .i32_const(-1)
        .end();
    f
}

/// `set_own(object, key, value) -> index`, `object` a plain object or a closure and `key` not
/// one an error guards (`message`, `stack`): -1 when the runtime must write it.
pub fn set_own_function() -> Function {
    // Locals: 3 header, 4 entry key, 5 current (i64); 6 address, 7 count, 8 entries, 9 i,
    // 10 hops (i32).
    let (o, k, v, header, entry_key, current) = (0, 1, 2, 3, 4, 5);
    let (address, count, entries, i, hops) = (6, 7, 8, 9, 10);
    let mut f = Function::new([(3, ValType::I64), (5, ValType::I32)]);
    let mut s = f.instructions();
    // A `Buffer` (its chain ends in the builtin prototype) is the runtime's to refuse.
    s.local_get(o)
        .local_set(current)
        .block(BlockType::Empty)
        .loop_(BlockType::Empty)
        .local_get(current)
        .i32_wrap_i64()
        .i64_load(mem64(0))
        .local_set(current);
    is_object_or_closure(&mut s, current);
    s.i32_eqz()
        .br_if(1)
        .local_get(hops)
        .i32_const(1)
        .i32_add()
        .local_tee(hops)
        .i32_const(MAX_CHAIN)
        .i32_gt_u()
        .if_(BlockType::Empty)
        .i32_const(-1)
        .return_()
        .end()
        .br(0)
        .end()
        .end()
        .local_get(current)
        .i64_const(Builtin::BufferPrototype.value().0 as i64)
        .i64_eq()
        .if_(BlockType::Empty)
        .i32_const(-1)
        .return_()
        .end()
        .local_get(k)
        .i32_wrap_i64()
        .i64_load(mem64(0))
        .local_set(header)
        .local_get(o)
        .i32_wrap_i64()
        .local_tee(address)
        .i32_load(mem32(8))
        .local_set(count)
        .local_get(address)
        .i32_load(mem32(16))
        .local_set(entries);
    own_entries(
        &mut s,
        (k, header, entry_key),
        (count, entries, i),
        |s| {
            s.local_get(v).i64_store(mem64(8)).local_get(i).return_();
        },
        |s| {
            s.if_(BlockType::Empty).i32_const(-1).return_().end();
        },
    );
    // A new property, while the entries have room.
    s.local_get(count)
        .local_get(address)
        .i32_load(mem32(12))
        .i32_ge_u()
        .if_(BlockType::Empty)
        .i32_const(-1)
        .return_()
        .end()
        .local_get(entries)
        .local_get(count)
        .i32_const(4)
        .i32_shl()
        .i32_add()
        .local_tee(i)
        .local_get(k)
        .i64_store(mem64(0))
        .local_get(i)
        .local_get(v)
        .i64_store(mem64(8))
        .local_get(address)
        .local_get(count)
        .i32_const(1)
        .i32_add()
        .i32_store(mem32(8))
        .local_get(count)
        .end();
    f
}

/// `alloc(size) -> address`: `size` bytes past the heap's top, 8-aligned; the memory there is
/// zero (the runtime never writes past the top, and a reused instance's arena is zeroed).
pub fn alloc_function(memory_bytes: u64, out_of_memory: (u32, u32)) -> Function {
    let (size, top, end) = (0, 1, 2);
    let mut f = Function::new([(1, ValType::I32), (1, ValType::I64)]);
    let mut s = f.instructions();
    s.i32_const(HEAP_TOP as i32)
        .i32_load(mem32(0))
        .local_tee(top)
        .i64_extend_i32_u()
        .local_get(size)
        .i64_extend_i32_u()
        .i64_const(7)
        .i64_add()
        .i64_const(!7)
        .i64_and()
        .i64_add()
        .local_tee(end)
        .i64_const(memory_bytes as i64)
        .i64_gt_u()
        .if_(BlockType::Empty)
        .i32_const(out_of_memory.0 as i32)
        .i32_const(out_of_memory.1 as i32)
        .call(rt::MISS)
        .unreachable()
        .end()
        .i32_const(HEAP_TOP as i32)
        .local_get(end)
        .i32_wrap_i64()
        .i32_store(mem32(0))
        .local_get(top)
        .end();
    f
}

/// `object(proto, capacity) -> object`: its entries right after its header.
pub fn object_function(alloc: u32) -> Function {
    let (proto, capacity, address) = (0, 1, 2);
    let mut f = Function::new([(1, ValType::I32)]);
    let mut s = f.instructions();
    s.local_get(capacity)
        .i32_const(4)
        .i32_shl()
        .i32_const(OBJECT_SIZE as i32)
        .i32_add()
        .call(alloc)
        .local_tee(address)
        .local_get(proto)
        .i64_store(mem64(0))
        .local_get(address)
        .local_get(capacity)
        .i32_store(mem32(12))
        .local_get(address)
        .local_get(address)
        .i32_const(OBJECT_SIZE as i32)
        .i32_add()
        .i32_store(mem32(16))
        .local_get(address)
        .i64_extend_i32_u()
        .i64_const(TAG_OBJECT as i64)
        .i64_or()
        .end();
    f
}

/// Applies the closure in local 0 with `this` on the stack and the arguments in locals
/// `args..args + 5` (count, a0..a3), counted in `depth`.
fn apply_counted(s: &mut InstructionSink<'_>, apply: u32, args: u32) {
    s.global_get(DEPTH_GLOBAL)
        .i32_const(1)
        .i32_add()
        .global_set(DEPTH_GLOBAL);
    for i in 0..=DIRECT_ARGS as u32 {
        s.local_get(args + i);
    }
    s.call(apply)
        .global_get(DEPTH_GLOBAL)
        .i32_const(1)
        .i32_sub()
        .global_set(DEPTH_GLOBAL);
}

/// In `construct`, when the condition on the stack holds: the runtime's `construct` of the
/// same callee and arguments, its answer returned.
fn construct_in_runtime_if(s: &mut InstructionSink<'_>) {
    s.if_(BlockType::Empty);
    for i in 0..=5 {
        s.local_get(i);
    }
    s.call(rt::CONSTRUCT).return_().end();
}

/// `construct(callee, argc, a0..a3)`: as the runtime's `construct` for a closure.
pub fn construct_function(helpers: Helpers, apply: u32, prototype_key: Value) -> Function {
    // Locals: 6 proto, 7 object.
    let (callee, proto, object) = (0, 6, 7);
    let mut f = Function::new([(2, ValType::I64)]);
    let mut s = f.instructions();
    s.local_get(callee)
        .i64_const(TAG_MASK as i64)
        .i64_and()
        .i64_const(TAG_CLOSURE as i64)
        .i64_ne();
    construct_in_runtime_if(&mut s);
    // Its `prototype`, made by the runtime when first read.
    s.local_get(callee)
        .i64_const(prototype_key.0 as i64)
        .call(helpers.lookup)
        .drop()
        .local_tee(proto)
        .i64_const(MISSED)
        .i64_eq()
        .if_(BlockType::Empty)
        .local_get(callee)
        .i64_const(prototype_key.0 as i64)
        .call(rt::GET)
        .local_set(proto)
        .end()
        // A builtin's prototype (a `Date`'s) is the runtime's to refuse.
        .local_get(proto)
        .i64_const(TAG_MASK as i64)
        .i64_and()
        .i64_const(TAG_BUILTIN as i64)
        .i64_eq();
    construct_in_runtime_if(&mut s);
    s.local_get(proto)
        .i64_const(NULL as i64)
        .local_get(proto)
        .i64_const(TAG_OBJECT as i64)
        .i64_ge_u()
        .select()
        .i32_const(CONSTRUCTED_CAPACITY)
        .call(helpers.object)
        .local_set(object)
        .local_get(callee)
        .local_get(object);
    apply_counted(&mut s, apply, 1);
    // An object the constructor returns replaces the one made.
    s.local_tee(proto)
        .local_get(object)
        .local_get(proto)
        .i64_const(TAG_OBJECT as i64)
        .i64_ge_u()
        .select()
        .end();
    f
}

/// `call(callee, this, argc, a0..a3)`.
pub fn call_function(apply: u32) -> Function {
    let mut f = Function::new([]);
    let mut s = f.instructions();
    s.local_get(0)
        .i64_const(TAG_MASK as i64)
        .i64_and()
        .i64_const(TAG_CLOSURE as i64)
        .i64_eq()
        .if_(BlockType::Result(ValType::I64))
        .local_get(0)
        .local_get(1);
    apply_counted(&mut s, apply, 2);
    s.else_();
    for i in 0..7 {
        s.local_get(i);
    }
    s.call(rt::CALL).end().end();
    f
}

/// `function_of(value) -> index`.
pub fn function_of_function() -> Function {
    let mut f = Function::new([]);
    let mut s = f.instructions();
    s.local_get(0)
        .i64_const(TAG_MASK as i64)
        .i64_and()
        .i64_const(TAG_CLOSURE as i64)
        .i64_eq()
        .if_(BlockType::Result(ValType::I32))
        .local_get(0)
        .i32_wrap_i64()
        .i32_load(mem32(u64::from(CLOSURE_FUNCTION)))
        .i32_const(1)
        .i32_sub()
        .else_()
        .i32_const(-1)
        .end()
        .end();
    f
}

/// `array(capacity) -> array`: as `Heap::array`, its slots right after its header.
pub fn array_function(alloc: u32, out_of_memory: (u32, u32)) -> Function {
    let (capacity, address) = (0, 1);
    let mut f = Function::new([(1, ValType::I32)]);
    let mut s = f.instructions();
    s.local_get(capacity)
        .i32_const(MAX_LENGTH as i32)
        .i32_gt_u()
        .if_(BlockType::Empty)
        .i32_const(out_of_memory.0 as i32)
        .i32_const(out_of_memory.1 as i32)
        .call(rt::MISS)
        .unreachable()
        .end()
        // The next power of two (0 stays 0).
        .local_get(capacity)
        .if_(BlockType::Empty)
        .i32_const(1)
        .i32_const(32)
        .local_get(capacity)
        .i32_const(1)
        .i32_sub()
        .i32_clz()
        .i32_sub()
        .i32_shl()
        .local_set(capacity)
        .end()
        .local_get(capacity)
        .i32_const(3)
        .i32_shl()
        .i32_const(16)
        .i32_add()
        .call(alloc)
        .local_tee(address)
        .local_get(capacity)
        .i32_store(mem32(4))
        .local_get(address)
        .local_get(address)
        .i32_const(16)
        .i32_add()
        .i32_store(mem32(12))
        .local_get(address)
        .i64_extend_i32_u()
        .i64_const(TAG_ARRAY as i64)
        .i64_or()
        .end();
    f
}

/// Whether a write of `key` must go to the runtime: an error's `message` and `stack` are
/// guarded there.
fn guarded_key(key: &str) -> bool {
    matches!(key, "message" | "stack")
}

impl Generator<'_> {
    /// A fresh site cache: the global's index.
    fn site(&mut self) -> u32 {
        let global = FIRST_SITE_GLOBAL + self.shared.sites;
        self.shared.sites += 1;
        global
    }

    /// `object.property` with the object's value in the `i64` local `o`: the value on the
    /// stack.
    pub fn get_named_local(&mut self, o: u32, property: &str) {
        let key = self.shared.data.string(property);
        let site = self.site();
        let helpers = self.shared.helpers;
        let (address, index) = (self.local(ValType::I32), self.local(ValType::I32));
        let value = self.local(ValType::I64);
        let mut s = self.sink();
        s.block(BlockType::Result(ValType::I64))
            .block(BlockType::Empty);
        cached_entry(&mut s, o, (site, key), (address, index), |s| {
            s.local_get(address).i64_load(mem64(8));
        });
        s.local_get(o)
            .i64_const(key.0 as i64)
            .call(helpers.lookup)
            .local_set(index)
            .local_tee(value)
            .i64_const(MISSED)
            .i64_eq()
            .br_if(0)
            .local_get(index)
            .i32_const(0)
            .i32_ge_s()
            .if_(BlockType::Empty)
            .local_get(index)
            .global_set(site)
            .end()
            .local_get(value)
            .br(1)
            .end()
            .local_get(o)
            .i64_const(key.0 as i64)
            .call(rt::GET)
            .end();
        self.free(ValType::I32, address);
        self.free(ValType::I32, index);
        self.free(ValType::I64, value);
    }

    /// `object.property`: the value on the stack.
    pub fn get_named(&mut self, object: &Expr, property: &str) {
        let o = self.local(ValType::I64);
        self.expr(object);
        self.sink().local_set(o);
        self.get_named_local(o, property);
        self.free(ValType::I64, o);
    }

    /// `object.property = value`, the value what `emit` leaves on the stack.
    pub fn set_named(&mut self, object: &Expr, property: &str, emit: &mut dyn FnMut(&mut Self)) {
        let key = self.shared.data.string(property);
        let (o, v) = (self.local(ValType::I64), self.local(ValType::I64));
        self.expr(object);
        self.sink().local_set(o);
        emit(self);
        self.sink().local_set(v);
        if guarded_key(property) {
            self.sink()
                .local_get(o)
                .i64_const(key.0 as i64)
                .local_get(v)
                .call(rt::SET);
            self.free(ValType::I64, o);
            self.free(ValType::I64, v);
            return;
        }
        let site = self.site();
        let helpers = self.shared.helpers;
        let (address, index) = (self.local(ValType::I32), self.local(ValType::I32));
        let mut s = self.sink();
        s.block(BlockType::Empty).block(BlockType::Empty);
        // An existing own property written in place. (A `Buffer` never has own properties the
        // code could have written.)
        cached_entry(&mut s, o, (site, key), (address, index), |s| {
            s.local_get(address).local_get(v).i64_store(mem64(8));
        });
        s.local_get(o)
            .i64_const(key.0 as i64)
            .local_get(v)
            .call(helpers.set_own)
            .local_tee(index)
            .i32_const(0)
            .i32_lt_s()
            .br_if(0)
            .local_get(index)
            .global_set(site)
            .br(1)
            .end()
            .local_get(o)
            .i64_const(key.0 as i64)
            .local_get(v)
            .call(rt::SET)
            .end();
        self.free(ValType::I32, address);
        self.free(ValType::I32, index);
        self.free(ValType::I64, o);
        self.free(ValType::I64, v);
    }

    /// An object literal whose keys are all named, distinct and plain (no `__proto__`), made
    /// here with room for exactly them; `false` (nothing emitted) for any other.
    pub fn object_literal(&mut self, properties: &[Property]) -> bool {
        let mut keys = Vec::new();
        for property in properties {
            match (
                &property.key,
                &property.computed,
                &property.spread,
                &property.value,
            ) {
                (Some(key), None, None, Some(_))
                    if key != "__proto__" && !keys.contains(&key.as_str()) =>
                {
                    keys.push(key.as_str())
                }
                _ => return false,
            }
        }
        let helpers = self.shared.helpers;
        let (object, entries) = (self.local(ValType::I64), self.local(ValType::I32));
        self.sink()
            .i64_const(NULL as i64)
            .i32_const(keys.len() as i32)
            .call(helpers.object)
            .local_tee(object)
            .i32_wrap_i64()
            .i32_load(mem32(16))
            .local_set(entries);
        for (i, property) in properties.iter().enumerate() {
            let key = self.shared.data.string(keys[i]);
            self.sink()
                .local_get(entries)
                .i64_const(key.0 as i64)
                .i64_store(mem64(16 * i as u64))
                .local_get(entries);
            if let Some(value) = &property.value {
                self.expr(value);
            }
            self.sink().i64_store(mem64(16 * i as u64 + 8));
        }
        self.sink()
            .local_get(object)
            .i32_wrap_i64()
            .i32_const(keys.len() as i32)
            .i32_store(mem32(8))
            .local_get(object);
        self.free(ValType::I64, object);
        self.free(ValType::I32, entries);
        true
    }

    /// The callee of a method call `object.property(…)`: `this` in the local `this`, the
    /// method on the stack. On an array or a string a method the builtins have is known
    /// without a lookup (an array or a string has no own named properties, and the
    /// prototypes' methods cannot be replaced); on an object it is read as `o.p` is.
    pub fn method(&mut self, object: &Expr, property: &str, this: u32) {
        self.expr(object);
        self.sink().local_set(this);
        let array = Builtin::member("Array.prototype", property).filter(|_| property != "length");
        let string = Builtin::member("String.prototype", property).filter(|_| property != "length");
        let mut open = 0;
        for (tag, member) in [
            (TAG_ARRAY, array),
            (crate::runtime::value::TAG_STRING, string),
        ] {
            if let Some(member) = member {
                self.sink()
                    .local_get(this)
                    .i64_const(TAG_MASK as i64)
                    .i64_and()
                    .i64_const(tag as i64)
                    .i64_eq()
                    .if_(BlockType::Result(ValType::I64))
                    .i64_const(member.value().0 as i64)
                    .else_();
                open += 1;
            }
        }
        self.get_named_local(this, property);
        for _ in 0..open {
            self.sink().end();
        }
    }
}
