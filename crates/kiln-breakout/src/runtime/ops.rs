//! JavaScript's conversions and operators on boxed values: the general cases the compiled
//! code calls when its inline number paths do not apply.

use super::heap::Heap;
use super::value::{Value, TAG_ARRAY, TAG_BUILTIN, TAG_CLOSURE, TAG_OBJECT, TAG_STRING};
use super::Miss;

/// The binary operators, by the number the compiled code passes.
pub const BINARY: [&str; 22] = [
    "+",
    "-",
    "*",
    "/",
    "%",
    "**",
    "==",
    "!=",
    "===",
    "!==",
    "<",
    "<=",
    ">",
    ">=",
    "<<",
    ">>",
    ">>>",
    "&",
    "|",
    "^",
    "in",
    "instanceof",
];
/// The unary operators, by number.
pub const UNARY: [&str; 6] = ["!", "-", "+", "~", "typeof", "void"];

/// JavaScript's `Number.prototype.toString()` (radix 10).
pub fn number_to_string(n: f64) -> String {
    let mut buffer = ryu_js::Buffer::new();
    buffer.format(n).to_string()
}

/// ToString, as a string value.
pub fn to_string(heap: &mut Heap<'_>, v: Value) -> Result<Value, Miss> {
    if v.is_string() {
        return Ok(v);
    }
    let text = to_rust_string(heap, v)?;
    heap.str(&text)
}

/// ToString, as Rust text (for non-strings; strings are read lossily).
pub fn to_rust_string(heap: &mut Heap<'_>, v: Value) -> Result<String, Miss> {
    if let Some(n) = v.as_number() {
        return Ok(number_to_string(n));
    }
    Ok(match v {
        Value::UNDEFINED => "undefined".into(),
        Value::NULL => "null".into(),
        Value::TRUE => "true".into(),
        Value::FALSE => "false".into(),
        _ => match v.tag() {
            TAG_STRING => heap.rust_string(v)?,
            TAG_OBJECT if heap.is_host(v)? => {
                return Err(Miss::new(
                    "an object of a builtin class converted to a string",
                ))
            }
            TAG_OBJECT => "[object Object]".into(),
            TAG_ARRAY => {
                let mut parts = Vec::new();
                for item in heap.elements(v)? {
                    parts.push(if item.is_nullish() {
                        String::new()
                    } else {
                        to_rust_string(heap, item)?
                    });
                }
                parts.join(",")
            }
            _ => return Err(Miss::new("a function converted to a string")),
        },
    })
}

/// StringToNumber over UTF-16 text.
pub fn string_to_number(units: &[u16]) -> f64 {
    let text = String::from_utf16_lossy(units);
    let trimmed = text.trim_matches(is_js_whitespace);
    if trimmed.is_empty() {
        return 0.0;
    }
    let radix = |prefix: &[&str], radix: u32| {
        prefix
            .iter()
            .find_map(|p| trimmed.strip_prefix(p))
            .map(|digits| {
                if digits.is_empty() {
                    return f64::NAN;
                }
                digits
                    .chars()
                    .try_fold(0.0f64, |acc, c| {
                        c.to_digit(radix)
                            .map(|d| acc * f64::from(radix) + f64::from(d))
                    })
                    .unwrap_or(f64::NAN)
            })
    };
    if let Some(n) = radix(&["0x", "0X"], 16)
        .or_else(|| radix(&["0o", "0O"], 8))
        .or_else(|| radix(&["0b", "0B"], 2))
    {
        return n;
    }
    match trimmed {
        "Infinity" | "+Infinity" => return f64::INFINITY,
        "-Infinity" => return f64::NEG_INFINITY,
        _ => {}
    }
    // Rust's float syntax is JavaScript's decimal literal, less its spellings of infinity
    // and NaN (refused above or here).
    let ok = trimmed
        .bytes()
        .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-'));
    if !ok {
        return f64::NAN;
    }
    trimmed.parse::<f64>().unwrap_or(f64::NAN)
}

/// JavaScript's WhiteSpace and LineTerminator characters (what `trim` removes).
pub fn is_js_whitespace(c: char) -> bool {
    matches!(
        c,
        '\u{9}' | '\u{A}' | '\u{B}' | '\u{C}' | '\u{D}' | ' ' | '\u{A0}' | '\u{1680}' | '\u{2000}'
            ..='\u{200A}'
                | '\u{2028}'
                | '\u{2029}'
                | '\u{202F}'
                | '\u{205F}'
                | '\u{3000}'
                | '\u{FEFF}'
    )
}

/// ToNumber.
pub fn to_number(heap: &mut Heap<'_>, v: Value) -> Result<f64, Miss> {
    if let Some(n) = v.as_number() {
        return Ok(n);
    }
    Ok(match v {
        Value::UNDEFINED => f64::NAN,
        Value::NULL | Value::FALSE => 0.0,
        Value::TRUE => 1.0,
        _ => match v.tag() {
            TAG_STRING => string_to_number(&heap.units(v)?),
            TAG_ARRAY => {
                let s = to_rust_string(heap, v)?;
                string_to_number(&s.encode_utf16().collect::<Vec<_>>())
            }
            _ => f64::NAN,
        },
    })
}

/// ToNumber of ToPrimitive: what arithmetic takes of an operand.
pub fn to_numeric(heap: &mut Heap<'_>, v: Value) -> Result<f64, Miss> {
    let p = to_primitive(heap, v)?;
    to_number(heap, p)
}

/// ToPrimitive with no hint, for the objects the runtime has (no `valueOf` or `toString`
/// of their own is called: an object that has one is a miss).
pub fn to_primitive(heap: &mut Heap<'_>, v: Value) -> Result<Value, Miss> {
    match v.tag() {
        TAG_OBJECT if heap.is_host(v)? => Err(Miss::new(
            "an object of a builtin class converted to a primitive",
        )),
        TAG_OBJECT => {
            for name in ["valueOf", "toString", "toJSON"] {
                let key = heap.str(name)?;
                if heap.lookup(v, key)?.is_some() {
                    return Err(Miss::new(format!("an object with its own {name}")));
                }
            }
            to_string(heap, v)
        }
        TAG_ARRAY => to_string(heap, v),
        TAG_CLOSURE | TAG_BUILTIN => Err(Miss::new("a function converted to a primitive")),
        _ => Ok(v),
    }
}

pub fn truthy(heap: &Heap<'_>, v: Value) -> Result<bool, Miss> {
    if let Some(n) = v.as_number() {
        return Ok(n != 0.0 && !n.is_nan());
    }
    Ok(match v {
        Value::UNDEFINED | Value::NULL | Value::FALSE => false,
        Value::TRUE => true,
        _ if v.is_string() => heap.string_len(v)? > 0,
        _ => true,
    })
}

pub fn type_of(v: Value) -> &'static str {
    if v.is_number() {
        return "number";
    }
    match v {
        Value::UNDEFINED => "undefined",
        Value::NULL => "object",
        Value::TRUE | Value::FALSE => "boolean",
        _ => match v.tag() {
            TAG_STRING => "string",
            TAG_CLOSURE | TAG_BUILTIN => "function",
            _ => "object",
        },
    }
}

/// `===`.
pub fn strict_equals(heap: &Heap<'_>, a: Value, b: Value) -> Result<bool, Miss> {
    if let (Some(x), Some(y)) = (a.as_number(), b.as_number()) {
        return Ok(x == y);
    }
    if a.is_string() && b.is_string() {
        return heap.string_eq(a, b);
    }
    Ok(a == b)
}

/// `==`.
pub fn loose_equals(heap: &mut Heap<'_>, a: Value, b: Value) -> Result<bool, Miss> {
    if a.is_nullish() || b.is_nullish() {
        return Ok(a.is_nullish() && b.is_nullish());
    }
    let primitive = |v: Value| !v.is_object();
    if primitive(a) && primitive(b) {
        if a.is_string() && b.is_string() {
            return heap.string_eq(a, b);
        }
        return Ok(to_number(heap, a)? == to_number(heap, b)?);
    }
    if a.is_object() && b.is_object() {
        return Ok(a == b);
    }
    let a = to_primitive(heap, a)?;
    let b = to_primitive(heap, b)?;
    loose_equals(heap, a, b)
}

pub fn to_int32(n: f64) -> i32 {
    to_uint32(n) as i32
}

pub fn to_uint32(n: f64) -> u32 {
    if !n.is_finite() {
        return 0;
    }
    let n = n.trunc() % 4_294_967_296.0;
    let n = if n < 0.0 { n + 4_294_967_296.0 } else { n };
    n as u32
}

/// The relational comparison `a < b`: `None` when either side is NaN (`undefined`).
fn less_than(heap: &mut Heap<'_>, a: Value, b: Value) -> Result<Option<bool>, Miss> {
    let a = to_primitive(heap, a)?;
    let b = to_primitive(heap, b)?;
    if a.is_string() && b.is_string() {
        // Code-unit order, as JavaScript compares strings.
        return Ok(Some(heap.units(a)? < heap.units(b)?));
    }
    let (x, y) = (to_number(heap, a)?, to_number(heap, b)?);
    if x.is_nan() || y.is_nan() {
        return Ok(None);
    }
    Ok(Some(x < y))
}

/// `a + b`.
pub fn add(heap: &mut Heap<'_>, a: Value, b: Value) -> Result<Value, Miss> {
    if let (Some(x), Some(y)) = (a.as_number(), b.as_number()) {
        return Ok(Value::number(x + y));
    }
    let a = to_primitive(heap, a)?;
    let b = to_primitive(heap, b)?;
    if a.is_string() || b.is_string() {
        let a = to_string(heap, a)?;
        let b = to_string(heap, b)?;
        return concat(heap, a, b);
    }
    Ok(Value::number(to_number(heap, a)? + to_number(heap, b)?))
}

/// Two strings joined.
pub fn concat(heap: &mut Heap<'_>, a: Value, b: Value) -> Result<Value, Miss> {
    heap.concat(a, b)
}

/// JavaScript's `%` on numbers (the sign of the dividend, as `fmod`).
pub fn remainder(x: f64, y: f64) -> f64 {
    if y.is_infinite() && x.is_finite() {
        return x;
    }
    x % y
}

/// `a OP b` for operator number `op` of [`BINARY`].
pub fn binary(heap: &mut Heap<'_>, op: u32, a: Value, b: Value) -> Result<Value, Miss> {
    let name = BINARY.get(op as usize).copied().unwrap_or("?");
    let numeric = |heap: &mut Heap<'_>, f: fn(f64, f64) -> f64| -> Result<Value, Miss> {
        let x = to_numeric(heap, a)?;
        let y = to_numeric(heap, b)?;
        Ok(Value::number(f(x, y)))
    };
    let int32 = |heap: &mut Heap<'_>, f: fn(i32, u32) -> f64| -> Result<Value, Miss> {
        let x = to_numeric(heap, a)?;
        let y = to_numeric(heap, b)?;
        Ok(Value::number(f(to_int32(x), to_uint32(y))))
    };
    Ok(match name {
        "+" => add(heap, a, b)?,
        "-" => numeric(heap, |x, y| x - y)?,
        "*" => numeric(heap, |x, y| x * y)?,
        "/" => numeric(heap, |x, y| x / y)?,
        "%" => numeric(heap, remainder)?,
        "**" => numeric(heap, power)?,
        "==" => Value::boolean(loose_equals(heap, a, b)?),
        "!=" => Value::boolean(!loose_equals(heap, a, b)?),
        "===" => Value::boolean(strict_equals(heap, a, b)?),
        "!==" => Value::boolean(!strict_equals(heap, a, b)?),
        "<" => Value::boolean(less_than(heap, a, b)? == Some(true)),
        ">" => Value::boolean(less_than(heap, b, a)? == Some(true)),
        "<=" => Value::boolean(less_than(heap, b, a)? == Some(false)),
        ">=" => Value::boolean(less_than(heap, a, b)? == Some(false)),
        "<<" => int32(heap, |x, y| f64::from(x.wrapping_shl(y & 31)))?,
        ">>" => int32(heap, |x, y| f64::from(x >> (y & 31)))?,
        ">>>" => int32(heap, |x, y| f64::from((x as u32) >> (y & 31)))?,
        "&" => int32(heap, |x, y| f64::from(x & y as i32))?,
        "|" => int32(heap, |x, y| f64::from(x | y as i32))?,
        "^" => int32(heap, |x, y| f64::from(x ^ y as i32))?,
        other => return Err(Miss::new(format!("the operator `{other}` not compiled"))),
    })
}

/// `x ** y`, with JavaScript's cases where it differs from `powf` (a NaN exponent, and ±1 to
/// an infinite power, are NaN).
pub fn power(x: f64, y: f64) -> f64 {
    if y.is_nan() || (x.abs() == 1.0 && y.is_infinite()) {
        return f64::NAN;
    }
    x.powf(y)
}

/// `OP a` for operator number `op` of [`UNARY`].
pub fn unary(heap: &mut Heap<'_>, op: u32, a: Value) -> Result<Value, Miss> {
    Ok(match UNARY.get(op as usize).copied().unwrap_or("?") {
        "!" => Value::boolean(!truthy(heap, a)?),
        "-" => Value::number(-to_numeric(heap, a)?),
        "+" => Value::number(to_numeric(heap, a)?),
        "~" => Value::number(f64::from(!to_int32(to_numeric(heap, a)?))),
        "typeof" => heap.str(type_of(a))?,
        "void" => Value::UNDEFINED,
        other => return Err(Miss::new(format!("the operator `{other}` not compiled"))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_print_as_javascript_prints_them() {
        for (n, s) in [
            (0.0, "0"),
            (-0.0, "0"),
            (1.5, "1.5"),
            (1e21, "1e+21"),
            (123456789012345680000.0, "123456789012345680000"),
            (1e-7, "1e-7"),
            (0.000001, "0.000001"),
            (f64::NAN, "NaN"),
            (f64::NEG_INFINITY, "-Infinity"),
            (0.1 + 0.2, "0.30000000000000004"),
        ] {
            assert_eq!(number_to_string(n), s);
        }
    }

    #[test]
    fn strings_convert_to_numbers_as_javascript_converts_them() {
        let cases = [
            (" 42 ", 42.0),
            ("", 0.0),
            ("0x1F", 31.0),
            ("1e3", 1000.0),
            ("-Infinity", f64::NEG_INFINITY),
            (".5", 0.5),
        ];
        for (s, n) in cases {
            let units: Vec<u16> = s.encode_utf16().collect();
            assert_eq!(string_to_number(&units), n, "{s}");
        }
        for s in ["abc", "1x", "inf", "NaN", "0x"] {
            let units: Vec<u16> = s.encode_utf16().collect();
            assert!(string_to_number(&units).is_nan(), "{s}");
        }
    }

    #[test]
    fn int32_conversion_wraps() {
        assert_eq!(to_int32(4_294_967_296.0 + 5.0), 5);
        assert_eq!(to_int32(2_147_483_648.0), i32::MIN);
        assert_eq!(to_int32(-1.5), -1);
        assert_eq!(to_uint32(-1.0), u32::MAX);
    }
}
