//! The value representation the compiled code and the runtime share: a NaN-boxed `i64`.
//!
//! A number is its `f64` bits. Every other value is a quiet NaN whose top 16 bits are at
//! least [`TAGGED`] and name its kind; the low 48 bits hold the heap address (or, for the
//! special values and builtins, a small integer). Arithmetic on numbers never produces a
//! NaN in the tagged range: wasm's NaNs from canonical inputs are canonical (`0x7FF8…` or
//! `0xFFF8…`), and the runtime canonicalises every NaN it writes.

/// The smallest tagged value: anything below it (as `u64`) is a number.
pub const TAGGED: u64 = 0xFFF9 << 48;
const SPECIAL: u64 = 0xFFF9 << 48;
/// `undefined`.
pub const UNDEFINED: u64 = SPECIAL;
/// `null`.
pub const NULL: u64 = SPECIAL | 1;
/// `false`.
pub const FALSE: u64 = SPECIAL | 2;
/// `true`.
pub const TRUE: u64 = SPECIAL | 3;
/// A string: the address of its header.
pub const TAG_STRING: u64 = 0xFFFA << 48;
/// A plain object: the address of its header.
pub const TAG_OBJECT: u64 = 0xFFFB << 48;
/// An array: the address of its header.
pub const TAG_ARRAY: u64 = 0xFFFC << 48;
/// A closure (an object with a function index and an environment).
pub const TAG_CLOSURE: u64 = 0xFFFD << 48;
/// A builtin function or namespace: its [`crate::runtime::builtin::Builtin`] number.
pub const TAG_BUILTIN: u64 = 0xFFFE << 48;
/// The mask of a value's tag.
pub const TAG_MASK: u64 = 0xFFFF << 48;
/// The mask of a reference's address.
pub const ADDRESS_MASK: u64 = (1 << 48) - 1;

/// A JavaScript value as the compiled code holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Value(pub u64);

impl Value {
    pub const UNDEFINED: Value = Value(UNDEFINED);
    pub const NULL: Value = Value(NULL);
    pub const TRUE: Value = Value(TRUE);
    pub const FALSE: Value = Value(FALSE);

    /// A number, its NaNs canonical.
    pub fn number(n: f64) -> Value {
        if n.is_nan() {
            Value(f64::NAN.to_bits())
        } else {
            Value(n.to_bits())
        }
    }

    pub fn boolean(b: bool) -> Value {
        if b {
            Value::TRUE
        } else {
            Value::FALSE
        }
    }

    pub fn reference(tag: u64, address: u32) -> Value {
        Value(tag | u64::from(address))
    }

    pub fn is_number(self) -> bool {
        self.0 < TAGGED
    }

    pub fn as_number(self) -> Option<f64> {
        self.is_number().then(|| f64::from_bits(self.0))
    }

    pub fn tag(self) -> u64 {
        self.0 & TAG_MASK
    }

    /// The heap address of a string, object, array or closure.
    pub fn address(self) -> u32 {
        (self.0 & ADDRESS_MASK) as u32
    }

    pub fn is_string(self) -> bool {
        self.tag() == TAG_STRING
    }

    /// Whether the value is an object of any kind (plain, array, closure or builtin).
    pub fn is_object(self) -> bool {
        matches!(
            self.tag(),
            TAG_OBJECT | TAG_ARRAY | TAG_CLOSURE | TAG_BUILTIN
        )
    }

    pub fn is_nullish(self) -> bool {
        self == Value::UNDEFINED || self == Value::NULL
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_tagged_values_do_not_overlap() {
        for n in [
            0.0,
            -0.0,
            1.5,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            -f64::NAN,
        ] {
            assert!(Value::number(n).is_number());
        }
        assert!(f64::from_bits(0xFFF8 << 48).is_nan() && (0xFFF8u64 << 48) < TAGGED);
        for v in [UNDEFINED, NULL, TRUE, FALSE, TAG_STRING | 64, TAG_BUILTIN] {
            assert!(!Value(v).is_number());
        }
    }
}
