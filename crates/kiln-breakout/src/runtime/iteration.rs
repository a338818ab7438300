//! Iteration as `for ... of` does it over arrays and strings: `array[Symbol.iterator]()` and
//! its iterator's `next`.

use super::builtin::Builtin;
use super::heap::Heap;
use super::value::{Value, TAG_ARRAY, TAG_OBJECT};
use super::Miss;

/// The keys of an iterator's hidden state (a NUL no property name of the code has).
const ITERATED: &str = "\0iterated";
const NEXT_INDEX: &str = "\0index";

/// `array[Symbol.iterator]()` (and a string's): an object whose `next` walks the elements
/// (a string's code points), as `for ... of` does.
pub fn iterator(heap: &mut Heap<'_>, this: Value) -> Result<Value, Miss> {
    let iterated = if this.tag() == TAG_ARRAY {
        this
    } else if this.is_string() {
        code_points(heap, this)?
    } else {
        return Err(Miss::new(
            "an iterator of a value that is not an array or string not compiled",
        ));
    };
    let object = heap.object(Value::NULL)?;
    let key = heap.str(ITERATED)?;
    heap.set_own(object, key, iterated)?;
    let key = heap.str(NEXT_INDEX)?;
    heap.set_own(object, key, Value::number(0.0))?;
    let key = heap.str("next")?;
    heap.set_own(object, key, Builtin::IteratorNext.value())?;
    Ok(object)
}

/// An array of the code points of the string `s`, each a string (a lone surrogate one of its
/// own), as `for ... of` and `Array.from` take them.
pub fn code_points(heap: &mut Heap<'_>, s: Value) -> Result<Value, Miss> {
    let units = heap.units(s)?;
    let mut items = Vec::new();
    for c in char::decode_utf16(units.iter().copied()) {
        let mut buffer = [0u16; 2];
        let unit = match c {
            Ok(c) => c.encode_utf16(&mut buffer).to_vec(),
            Err(e) => vec![e.unpaired_surrogate()],
        };
        items.push(heap.string(&unit)?);
    }
    heap.array_from(&items)
}

pub fn iterator_next(heap: &mut Heap<'_>, this: Value) -> Result<Value, Miss> {
    let state = |heap: &mut Heap<'_>, name: &str| -> Result<Option<Value>, Miss> {
        if this.tag() != TAG_OBJECT {
            return Ok(None);
        }
        let key = heap.str(name)?;
        heap.get_own(this, key)
    };
    let (Some(array), Some(index)) = (state(heap, ITERATED)?, state(heap, NEXT_INDEX)?) else {
        return Err(Miss::new(
            "TypeError: next called on a value that is not an iterator",
        ));
    };
    let i = index.as_number().unwrap_or(f64::MAX);
    let len = f64::from(heap.len(array)?);
    let result = heap.object(Value::NULL)?;
    let (value, done) = if i < len {
        let key = heap.str(NEXT_INDEX)?;
        heap.set_own(this, key, Value::number(i + 1.0))?;
        (heap.element(array, i as u32)?, false)
    } else {
        (Value::UNDEFINED, true)
    };
    let key = heap.str("value")?;
    heap.set_own(result, key, value)?;
    let key = heap.str("done")?;
    heap.set_own(result, key, Value::boolean(done))?;
    Ok(result)
}
