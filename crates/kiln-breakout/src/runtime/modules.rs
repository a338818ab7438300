//! The package's modules in the arena: a record per file the compiled code loads, numbered by
//! the compiler. A record holds the file's `module.exports`, its `exports` variable (the
//! object `module.exports` starts as, unless the file assigns the variable) and whether its
//! top level has started: the module cache (one instance per resolved path), kept in the
//! image the module's top levels leave, so every request sees the modules loaded once.

use super::heap::{Heap, MODULES};
use super::value::{Value, TAG_ARRAY};
use super::Miss;

/// A record's `module.exports` (a value).
pub const RECORD_EXPORTS: u32 = 0;
/// A record's `exports` variable (a value).
pub const RECORD_VARIABLE: u32 = 8;
/// A record's state (an `i64`): 0 before its top level runs, 1 once it has started.
pub const RECORD_STATE: u32 = 16;
const RECORD_SIZE: u32 = 24;
/// The most records (files) a module has.
pub const MAX_RECORDS: u32 = 1 << 16;

/// The address of file `index`'s record, made on first use with an empty `exports`.
pub fn record(heap: &mut Heap<'_>, index: u32) -> Result<u32, Miss> {
    if index >= MAX_RECORDS {
        return Err(Miss::new("a module number out of range"));
    }
    let mut table = heap.value(MODULES)?;
    if table.tag() != TAG_ARRAY {
        table = heap.array(0)?;
        heap.set_value(MODULES, table)?;
    }
    if let Some(address) = heap.element(table, index)?.as_number() {
        return Ok(address as u32);
    }
    let address = heap.alloc(RECORD_SIZE)?;
    let exports = heap.object(Value::NULL)?;
    heap.set_value(address + RECORD_EXPORTS, exports)?;
    heap.set_value(address + RECORD_VARIABLE, exports)?;
    heap.set_element(table, index, Value::number(f64::from(address)))?;
    Ok(address)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_is_made_once_per_file_with_one_exports_object() {
        let mut mem = vec![0u8; 1 << 16];
        let mut heap = Heap::empty(&mut mem).unwrap();
        let a = record(&mut heap, 3).unwrap();
        let b = record(&mut heap, 0).unwrap();
        assert_ne!(a, b);
        assert_eq!(record(&mut heap, 3).unwrap(), a);
        let exports = heap.value(a + RECORD_EXPORTS).unwrap();
        assert!(exports.is_object());
        assert_eq!(heap.value(a + RECORD_VARIABLE).unwrap(), exports);
        assert_eq!(heap.value(a + RECORD_STATE).unwrap(), Value(0));
        assert!(record(&mut heap, MAX_RECORDS).is_err());
    }
}
