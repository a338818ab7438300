//! The arena in linear memory, and the layout of what lives there. Everything is
//! little-endian and 8-aligned; nothing is freed (the instance is dropped after the request).
//!
//! - The header, at address 0: the heap's top at [`HEAP_TOP`], the global object at
//!   [`GLOBAL_OBJECT`], the modules' records at [`MODULES`]. The compiled module's data (string constants, miss reasons) starts at
//!   [`DATA_START`], and the heap after it.
//! - A string: its length in UTF-16 units (`u32`), its hash ([`string_hash`], `u32`), the
//!   units. Two strings are equal only if their first 8 bytes are, so a property lookup
//!   compares the units of a key only when it is found.
//! - An object or closure ([`OBJECT_SIZE`] bytes): its prototype (a value), the number of its
//!   properties, their capacity and the address of their entries (`u32`s), then for a closure
//!   its function's index plus one and the address of its environment; for an object of a
//!   builtin class (a host object, whose prototype is a builtin) its internal slot. An entry is a key (a
//!   string value) and a value, in insertion order.
//! - An environment: its length (`u32`), padding, then the address of each captured
//!   variable's cell (`u32`).
//! - An array: its length, capacity, head and the address of its slots (`u32`s). The slots
//!   are a ring, so `shift` and `unshift` are O(1); the capacity is 0 or a power of two.
//! - A cell: one value (a variable a closure captures).

use super::value::{Value, TAG_ARRAY, TAG_BUILTIN, TAG_CLOSURE, TAG_OBJECT, TAG_STRING};
use super::Miss;

/// Where the heap's top (the next free address) is kept.
pub const HEAP_TOP: u32 = 8;
/// Where the global object (a value, 0 until made) is kept.
pub const GLOBAL_OBJECT: u32 = 16;
/// Where the table of the package's module records (an array value, 0 until made) is kept.
pub const MODULES: u32 = 24;
/// Where the compiled module's data starts.
pub const DATA_START: u32 = 64;
/// An object's size.
pub const OBJECT_SIZE: u32 = 32;
/// The offset of a closure's function index (plus one).
pub const CLOSURE_FUNCTION: u32 = 24;
/// The offset of a closure's environment address.
pub const CLOSURE_ENVIRONMENT: u32 = 28;
/// The offset of a host object's internal slot (a value; a plain object leaves it unused).
pub const HOST_SLOT: u32 = 24;
/// The longest array or string the runtime makes.
pub const MAX_LENGTH: u32 = 1 << 26;

/// The arena: the instance's memory.
pub struct Heap<'m> {
    pub mem: &'m mut [u8],
}

/// A string's hash (FNV-1a over its UTF-16 units), kept in its header.
pub fn string_hash(units: impl IntoIterator<Item = u16>) -> u32 {
    units.into_iter().fold(0x811c_9dc5, |hash: u32, unit| {
        (hash ^ u32::from(unit)).wrapping_mul(0x0100_0193)
    })
}

fn bad() -> Miss {
    Miss::new("a reference outside the heap")
}

fn out_of_memory() -> Miss {
    Miss::new("out of memory")
}

impl<'m> Heap<'m> {
    pub fn new(mem: &'m mut [u8]) -> Heap<'m> {
        Heap { mem }
    }

    /// An empty heap in fresh memory: its top at [`DATA_START`] (a compiled module's data
    /// segment sets it past its own data instead).
    pub fn empty(mem: &'m mut [u8]) -> Result<Heap<'m>, Miss> {
        let mut heap = Heap { mem };
        heap.set_u32(HEAP_TOP, DATA_START)?;
        heap.set_value(GLOBAL_OBJECT, Value(0))?;
        heap.set_value(MODULES, Value(0))?;
        Ok(heap)
    }

    pub fn u32(&self, address: u32) -> Result<u32, Miss> {
        let a = address as usize;
        let bytes = self.mem.get(a..a + 4).ok_or_else(bad)?;
        Ok(u32::from_le_bytes(bytes.try_into().map_err(|_| bad())?))
    }

    pub fn set_u32(&mut self, address: u32, v: u32) -> Result<(), Miss> {
        let a = address as usize;
        self.mem
            .get_mut(a..a + 4)
            .ok_or_else(bad)?
            .copy_from_slice(&v.to_le_bytes());
        Ok(())
    }

    pub fn value(&self, address: u32) -> Result<Value, Miss> {
        let a = address as usize;
        let bytes = self.mem.get(a..a + 8).ok_or_else(bad)?;
        Ok(Value(u64::from_le_bytes(
            bytes.try_into().map_err(|_| bad())?,
        )))
    }

    pub fn set_value(&mut self, address: u32, v: Value) -> Result<(), Miss> {
        let a = address as usize;
        self.mem
            .get_mut(a..a + 8)
            .ok_or_else(bad)?
            .copy_from_slice(&v.0.to_le_bytes());
        Ok(())
    }

    /// The heap's top, the next free address.
    pub fn top(&self) -> Result<u32, Miss> {
        self.u32(HEAP_TOP)
    }

    /// `size` bytes, zeroed (memory past the top is never written), 8-aligned.
    pub fn alloc(&mut self, size: u32) -> Result<u32, Miss> {
        let top = self.top()?;
        let size = size.checked_add(7).ok_or_else(out_of_memory)? & !7;
        let end = top.checked_add(size).ok_or_else(out_of_memory)?;
        if end as usize > self.mem.len() {
            return Err(out_of_memory());
        }
        self.set_u32(HEAP_TOP, end)?;
        Ok(top)
    }

    // ------------------------------------------------------------------------------ strings

    pub fn string(&mut self, units: &[u16]) -> Result<Value, Miss> {
        let len = u32::try_from(units.len()).map_err(|_| out_of_memory())?;
        if len > MAX_LENGTH {
            return Err(out_of_memory());
        }
        let address = self.alloc(8 + 2 * len)?;
        self.set_u32(address, len)?;
        self.set_u32(address + 4, string_hash(units.iter().copied()))?;
        let start = address as usize + 8;
        let bytes = self
            .mem
            .get_mut(start..start + 2 * units.len())
            .ok_or_else(bad)?;
        for (pair, unit) in bytes.chunks_exact_mut(2).zip(units) {
            pair.copy_from_slice(&unit.to_le_bytes());
        }
        Ok(Value::reference(TAG_STRING, address))
    }

    /// `a` then `b` (two strings) as one string, copied in the arena: the hash goes on from
    /// `a`'s over `b`'s units.
    pub fn concat(&mut self, a: Value, b: Value) -> Result<Value, Miss> {
        let (la, lb) = (self.string_len(a)?, self.string_len(b)?);
        let len = la.checked_add(lb).ok_or_else(out_of_memory)?;
        if len > MAX_LENGTH {
            return Err(out_of_memory());
        }
        let (from_a, from_b) = (a.address() as usize + 8, b.address() as usize + 8);
        // Both strings must be in the memory before the copies.
        self.mem
            .get(from_a..from_a + 2 * la as usize)
            .ok_or_else(bad)?;
        let tail = self
            .mem
            .get(from_b..from_b + 2 * lb as usize)
            .ok_or_else(bad)?;
        let hash = tail
            .chunks_exact(2)
            .fold(self.u32(a.address() + 4)?, |hash: u32, c| {
                (hash ^ u32::from(u16::from_le_bytes([c[0], c[1]]))).wrapping_mul(0x0100_0193)
            });
        let address = self.alloc(8 + 2 * len)?;
        self.set_u32(address, len)?;
        self.set_u32(address + 4, hash)?;
        let start = address as usize + 8;
        self.mem
            .copy_within(from_a..from_a + 2 * la as usize, start);
        self.mem
            .copy_within(from_b..from_b + 2 * lb as usize, start + 2 * la as usize);
        Ok(Value::reference(TAG_STRING, address))
    }

    pub fn str(&mut self, s: &str) -> Result<Value, Miss> {
        let units: Vec<u16> = s.encode_utf16().collect();
        self.string(&units)
    }

    /// A string's length in UTF-16 units.
    pub fn string_len(&self, s: Value) -> Result<u32, Miss> {
        self.u32(s.address())
    }

    /// A string's units.
    pub fn units(&self, s: Value) -> Result<Vec<u16>, Miss> {
        let len = self.string_len(s)? as usize;
        let start = s.address() as usize + 8;
        let bytes = self.mem.get(start..start + 2 * len).ok_or_else(bad)?;
        let mut units = Vec::with_capacity(len);
        units.extend(
            bytes
                .chunks_exact(2)
                .map(|c| u16::from_le_bytes([c[0], c[1]])),
        );
        Ok(units)
    }

    pub fn unit(&self, s: Value, i: u32) -> Result<u16, Miss> {
        let a = (s.address() + 8 + 2 * i) as usize;
        let bytes = self.mem.get(a..a + 2).ok_or_else(bad)?;
        Ok(u16::from_le_bytes([bytes[0], bytes[1]]))
    }

    /// A string as Rust text (lone surrogates become U+FFFD).
    pub fn rust_string(&self, s: Value) -> Result<String, Miss> {
        Ok(String::from_utf16_lossy(&self.units(s)?))
    }

    pub fn string_eq(&self, a: Value, b: Value) -> Result<bool, Miss> {
        if a == b {
            return Ok(true);
        }
        // The length and the hash.
        if self.value(a.address())? != self.value(b.address())? {
            return Ok(false);
        }
        let len = self.string_len(a)?;
        let (x, y) = (a.address() as usize + 8, b.address() as usize + 8);
        let n = 2 * len as usize;
        Ok(self.mem.get(x..x + n).ok_or_else(bad)? == self.mem.get(y..y + n).ok_or_else(bad)?)
    }

    // ------------------------------------------------------------------------------ objects

    /// A plain object with prototype `proto` (a value: `null` or an object).
    pub fn object(&mut self, proto: Value) -> Result<Value, Miss> {
        let address = self.alloc(OBJECT_SIZE)?;
        self.set_value(address, proto)?;
        Ok(Value::reference(TAG_OBJECT, address))
    }

    /// A closure of function `function` with an environment of `cells` cells (filled by the
    /// compiled code).
    pub fn closure(&mut self, function: u32, cells: u32) -> Result<Value, Miss> {
        let address = self.alloc(OBJECT_SIZE)?;
        self.set_value(address, Value::NULL)?;
        let environment = self.alloc(8 + 4 * cells)?;
        self.set_u32(environment, cells)?;
        self.set_u32(address + CLOSURE_FUNCTION, function + 1)?;
        self.set_u32(address + CLOSURE_ENVIRONMENT, environment)?;
        Ok(Value::reference(TAG_CLOSURE, address))
    }

    /// A closure's function index.
    pub fn closure_function(&self, closure: Value) -> Result<u32, Miss> {
        Ok(self
            .u32(closure.address() + CLOSURE_FUNCTION)?
            .wrapping_sub(1))
    }

    pub fn proto(&self, object: Value) -> Result<Value, Miss> {
        self.value(object.address())
    }

    /// An object of a builtin class (a `Date`, an S3 client): its prototype is the builtin
    /// class's prototype (a builtin value), and its internal slot holds its state.
    pub fn host_object(&mut self, class_proto: Value, slot: Value) -> Result<Value, Miss> {
        let object = self.object(class_proto)?;
        self.set_value(object.address() + HOST_SLOT, slot)?;
        Ok(object)
    }

    /// Whether `v` is an object of a builtin class: its prototype chain ends in a builtin
    /// (a `Date`, or an instance of a class that extends `Error`).
    pub fn is_host(&self, v: Value) -> Result<bool, Miss> {
        Ok(v.tag() == TAG_OBJECT && self.chain_end(v)?.tag() == TAG_BUILTIN)
    }

    /// Where an object's prototype chain leaves the arena: `null`, or a builtin prototype.
    pub fn chain_end(&self, object: Value) -> Result<Value, Miss> {
        let mut current = self.proto(object)?;
        for _ in 0..10_000 {
            if !matches!(current.tag(), TAG_OBJECT | TAG_CLOSURE) {
                return Ok(current);
            }
            current = self.proto(current)?;
        }
        Err(Miss::new("a prototype chain too long"))
    }

    /// Replaces an object's prototype (`Object.setPrototypeOf`).
    pub fn set_proto(&mut self, object: Value, proto: Value) -> Result<(), Miss> {
        self.set_value(object.address(), proto)
    }

    /// A host object's internal slot.
    pub fn host_slot(&self, object: Value) -> Result<Value, Miss> {
        self.value(object.address() + HOST_SLOT)
    }

    /// The entry index of an own property, by key (a string).
    fn find(&self, object: Value, key: Value) -> Result<Option<u32>, Miss> {
        let a = object.address();
        let count = self.u32(a + 8)?;
        let entries = self.u32(a + 16)?;
        for i in 0..count {
            let k = self.value(entries + 16 * i)?;
            if self.string_eq(k, key)? {
                return Ok(Some(entries + 16 * i));
            }
        }
        Ok(None)
    }

    /// An own property's value, if the object (or closure) has it.
    pub fn get_own(&self, object: Value, key: Value) -> Result<Option<Value>, Miss> {
        match self.find(object, key)? {
            Some(entry) => Ok(Some(self.value(entry + 8)?)),
            None => Ok(None),
        }
    }

    /// A property's value through the prototype chain.
    pub fn lookup(&self, object: Value, key: Value) -> Result<Option<Value>, Miss> {
        let mut current = object;
        for _ in 0..10_000 {
            if let Some(v) = self.get_own(current, key)? {
                return Ok(Some(v));
            }
            let proto = self.proto(current)?;
            if !matches!(proto.tag(), TAG_OBJECT | TAG_CLOSURE) {
                return Ok(None);
            }
            current = proto;
        }
        Err(Miss::new("a prototype chain too long"))
    }

    /// Sets an own property, appending it if new.
    pub fn set_own(&mut self, object: Value, key: Value, value: Value) -> Result<(), Miss> {
        if let Some(entry) = self.find(object, key)? {
            return self.set_value(entry + 8, value);
        }
        let a = object.address();
        let count = self.u32(a + 8)?;
        let capacity = self.u32(a + 12)?;
        let mut entries = self.u32(a + 16)?;
        if count == capacity {
            let grown = (capacity * 2).max(4);
            let fresh = self.alloc(16 * grown)?;
            let (from, to, n) = (entries as usize, fresh as usize, 16 * count as usize);
            self.mem.copy_within(from..from + n, to);
            entries = fresh;
            self.set_u32(a + 12, grown)?;
            self.set_u32(a + 16, entries)?;
        }
        self.set_value(entries + 16 * count, key)?;
        self.set_value(entries + 16 * count + 8, value)?;
        self.set_u32(a + 8, count + 1)
    }

    /// Removes an own property, keeping the others' order.
    pub fn delete_own(&mut self, object: Value, key: Value) -> Result<(), Miss> {
        let Some(entry) = self.find(object, key)? else {
            return Ok(());
        };
        let a = object.address();
        let count = self.u32(a + 8)?;
        let entries = self.u32(a + 16)?;
        let end = (entries + 16 * count) as usize;
        self.mem
            .copy_within(entry as usize + 16..end, entry as usize);
        self.set_u32(a + 8, count - 1)
    }

    /// The own properties, in insertion order.
    pub fn entries(&self, object: Value) -> Result<Vec<(Value, Value)>, Miss> {
        let a = object.address();
        let count = self.u32(a + 8)?;
        let entries = self.u32(a + 16)?;
        (0..count)
            .map(|i| {
                Ok((
                    self.value(entries + 16 * i)?,
                    self.value(entries + 16 * i + 8)?,
                ))
            })
            .collect()
    }

    // ------------------------------------------------------------------------------ arrays

    pub fn array(&mut self, capacity: u32) -> Result<Value, Miss> {
        let address = self.alloc(16)?;
        if capacity > 0 {
            let capacity = capacity
                .checked_next_power_of_two()
                .ok_or_else(out_of_memory)?;
            if capacity > MAX_LENGTH {
                return Err(out_of_memory());
            }
            let slots = self.alloc(8 * capacity)?;
            self.set_u32(address + 4, capacity)?;
            self.set_u32(address + 12, slots)?;
        }
        Ok(Value::reference(TAG_ARRAY, address))
    }

    pub fn array_from(&mut self, items: &[Value]) -> Result<Value, Miss> {
        let array = self.array(items.len() as u32)?;
        for item in items {
            self.push(array, *item)?;
        }
        Ok(array)
    }

    pub fn len(&self, array: Value) -> Result<u32, Miss> {
        self.u32(array.address())
    }

    fn slot(&self, array: Value, i: u32) -> Result<u32, Miss> {
        let a = array.address();
        let capacity = self.u32(a + 4)?;
        let head = self.u32(a + 8)?;
        let slots = self.u32(a + 12)?;
        Ok(slots + 8 * ((head.wrapping_add(i)) & capacity.wrapping_sub(1)))
    }

    /// Element `i`; `undefined` past the end.
    pub fn element(&self, array: Value, i: u32) -> Result<Value, Miss> {
        if i >= self.len(array)? {
            return Ok(Value::UNDEFINED);
        }
        self.value(self.slot(array, i)?)
    }

    pub fn elements(&self, array: Value) -> Result<Vec<Value>, Miss> {
        (0..self.len(array)?)
            .map(|i| self.element(array, i))
            .collect()
    }

    /// Makes room for `needed` elements, the ring unrolled into fresh slots when it grows.
    fn reserve(&mut self, array: Value, needed: u32) -> Result<(), Miss> {
        let a = array.address();
        let capacity = self.u32(a + 4)?;
        if needed <= capacity {
            return Ok(());
        }
        if needed > MAX_LENGTH {
            return Err(out_of_memory());
        }
        let grown = needed.next_power_of_two().max(4);
        let fresh = self.alloc(8 * grown)?;
        let len = self.len(array)?;
        for i in 0..len {
            let v = self.value(self.slot(array, i)?)?;
            self.set_value(fresh + 8 * i, v)?;
        }
        self.set_u32(a + 4, grown)?;
        self.set_u32(a + 8, 0)?;
        self.set_u32(a + 12, fresh)
    }

    pub fn push(&mut self, array: Value, v: Value) -> Result<u32, Miss> {
        let len = self.len(array)?;
        self.reserve(array, len + 1)?;
        self.set_u32(array.address(), len + 1)?;
        let slot = self.slot(array, len)?;
        self.set_value(slot, v)?;
        Ok(len + 1)
    }

    pub fn pop(&mut self, array: Value) -> Result<Value, Miss> {
        let len = self.len(array)?;
        if len == 0 {
            return Ok(Value::UNDEFINED);
        }
        let v = self.element(array, len - 1)?;
        self.set_u32(array.address(), len - 1)?;
        Ok(v)
    }

    pub fn shift(&mut self, array: Value) -> Result<Value, Miss> {
        let a = array.address();
        let len = self.len(array)?;
        if len == 0 {
            return Ok(Value::UNDEFINED);
        }
        let v = self.element(array, 0)?;
        let capacity = self.u32(a + 4)?;
        let head = self.u32(a + 8)?;
        self.set_u32(a + 8, (head + 1) & (capacity - 1))?;
        self.set_u32(a, len - 1)?;
        Ok(v)
    }

    pub fn unshift(&mut self, array: Value, v: Value) -> Result<u32, Miss> {
        let a = array.address();
        let len = self.len(array)?;
        self.reserve(array, len + 1)?;
        let capacity = self.u32(a + 4)?;
        let head = self.u32(a + 8)?;
        self.set_u32(a + 8, head.wrapping_sub(1) & (capacity - 1))?;
        self.set_u32(a, len + 1)?;
        let slot = self.slot(array, 0)?;
        self.set_value(slot, v)?;
        Ok(len + 1)
    }

    /// Sets element `i`, the array growing with holes (`undefined`) up to it.
    pub fn set_element(&mut self, array: Value, i: u32, v: Value) -> Result<(), Miss> {
        let len = self.len(array)?;
        if i >= len {
            self.reserve(array, i + 1)?;
            for j in len..i {
                self.set_u32(array.address(), j + 1)?;
                let slot = self.slot(array, j)?;
                self.set_value(slot, Value::UNDEFINED)?;
            }
            self.set_u32(array.address(), i + 1)?;
        }
        let slot = self.slot(array, i)?;
        self.set_value(slot, v)
    }

    /// Sets the length: shorter drops elements, longer adds holes.
    pub fn set_len(&mut self, array: Value, n: u32) -> Result<(), Miss> {
        let len = self.len(array)?;
        if n > len {
            return self.set_element(array, n - 1, Value::UNDEFINED);
        }
        self.set_u32(array.address(), n)
    }

    // ------------------------------------------------------------------------------ cells

    pub fn cell(&mut self, v: Value) -> Result<u32, Miss> {
        let address = self.alloc(8)?;
        self.set_value(address, v)?;
        Ok(address)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memory() -> Vec<u8> {
        let mut mem = vec![0u8; 1 << 16];
        mem[HEAP_TOP as usize..HEAP_TOP as usize + 4].copy_from_slice(&DATA_START.to_le_bytes());
        mem
    }

    #[test]
    fn an_array_is_a_ring_that_shifts_and_unshifts() {
        let mut mem = memory();
        let mut heap = Heap::new(&mut mem);
        let array = heap.array(0).unwrap();
        for i in 0..10 {
            heap.push(array, Value::number(f64::from(i))).unwrap();
        }
        assert_eq!(heap.shift(array).unwrap(), Value::number(0.0));
        heap.unshift(array, Value::number(-1.0)).unwrap();
        heap.unshift(array, Value::number(-2.0)).unwrap();
        let got: Vec<f64> = heap
            .elements(array)
            .unwrap()
            .into_iter()
            .map(|v| v.as_number().unwrap())
            .collect();
        assert_eq!(
            got,
            [-2.0, -1.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]
        );
        heap.set_element(array, 13, Value::TRUE).unwrap();
        assert_eq!(heap.len(array).unwrap(), 14);
        assert_eq!(heap.element(array, 12).unwrap(), Value::UNDEFINED);
    }

    #[test]
    fn objects_keep_insertion_order_and_follow_prototypes() {
        let mut mem = memory();
        let mut heap = Heap::new(&mut mem);
        let proto = heap.object(Value::NULL).unwrap();
        let object = heap.object(proto).unwrap();
        let keys: Vec<Value> = ["b", "a", "c", "d", "e"]
            .iter()
            .map(|k| heap.str(k).unwrap())
            .collect();
        for (i, k) in keys.iter().enumerate() {
            heap.set_own(object, *k, Value::number(i as f64)).unwrap();
        }
        let inherited = heap.str("inherited").unwrap();
        heap.set_own(proto, inherited, Value::TRUE).unwrap();
        let a = heap.str("a").unwrap();
        assert_eq!(heap.lookup(object, a).unwrap(), Some(Value::number(1.0)));
        assert_eq!(heap.lookup(object, inherited).unwrap(), Some(Value::TRUE));
        heap.delete_own(object, a).unwrap();
        let order: Vec<String> = heap
            .entries(object)
            .unwrap()
            .into_iter()
            .map(|(k, _)| heap.rust_string(k).unwrap())
            .collect();
        assert_eq!(order, ["b", "c", "d", "e"]);
    }

    #[test]
    fn a_concatenation_is_the_string_of_both_units_with_their_hash() {
        let mut mem = memory();
        let mut heap = Heap::new(&mut mem);
        let (a, b) = (
            heap.str("ab\u{e9}").unwrap(),
            heap.str("\u{1F600}c").unwrap(),
        );
        let joined = heap.concat(a, b).unwrap();
        let expected = heap.str("ab\u{e9}\u{1F600}c").unwrap();
        assert!(heap.string_eq(joined, expected).unwrap());
        let empty = heap.str("").unwrap();
        let same = heap.concat(empty, a).unwrap();
        assert!(heap.string_eq(same, a).unwrap());
    }

    #[test]
    fn the_arena_runs_out_as_a_miss() {
        let mut mem = memory();
        let mut heap = Heap::new(&mut mem);
        assert_eq!(heap.alloc(1 << 20).unwrap_err().reason, "out of memory");
    }
}
