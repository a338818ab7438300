//! The JavaScript builtins the fast path has, as host functions over the heap: each a
//! [`Builtin`], a value of its own (`Math.floor` can be passed as a callback) with a call.
//! A builtin the runtime lacks is never a value: reading it gives `undefined` and calling
//! that misses.

pub use super::builtin::Builtin;
use super::heap::Heap;
use super::iteration::{code_points, iterator, iterator_next};
use super::json;
use super::ops::{self, is_js_whitespace, to_number, to_rust_string};
use super::text::{change_case, parse_float, parse_int};
use super::value::{Value, TAG_ARRAY, TAG_BUILTIN, TAG_CLOSURE, TAG_OBJECT};
use super::{call as call_value, Guest, Miss};

/// A property of a builtin namespace (`Math.PI`, `JSON.parse`).
pub fn static_property(builtin: Builtin, name: &str) -> Result<Value, Miss> {
    Ok(match (builtin, name) {
        (Builtin::Math, "PI") => Value::number(std::f64::consts::PI),
        (Builtin::Number, "MAX_SAFE_INTEGER") => Value::number(9_007_199_254_740_991.0),
        (Builtin::Number, "MIN_SAFE_INTEGER") => Value::number(-9_007_199_254_740_991.0),
        (Builtin::Number, "EPSILON") => Value::number(f64::EPSILON),
        (class, name) if super::errors::is_error_prototype(class) => {
            return super::errors::prototype_property(class, name)
        }
        _ => Builtin::member(builtin.name(), name).map_or(Value::UNDEFINED, Builtin::value),
    })
}

fn arg(args: &[Value], i: usize) -> Value {
    args.get(i).copied().unwrap_or(Value::UNDEFINED)
}

/// ToIntegerOrInfinity.
fn integer(heap: &mut Heap<'_>, v: Value) -> Result<f64, Miss> {
    let n = to_number(heap, v)?;
    Ok(if n.is_nan() { 0.0 } else { n.trunc() })
}

/// A relative index (`slice`'s): negative from the end, clamped to `0..=len`.
fn relative(heap: &mut Heap<'_>, v: Value, len: u32, default: u32) -> Result<u32, Miss> {
    if v == Value::UNDEFINED {
        return Ok(default);
    }
    let n = integer(heap, v)?;
    let len = f64::from(len);
    Ok(if n < 0.0 {
        (len + n).max(0.0)
    } else {
        n.min(len)
    } as u32)
}

/// A clamped index (`substring`'s, `startsWith`'s): `0..=len`.
fn clamped(heap: &mut Heap<'_>, v: Value, len: u32, default: u32) -> Result<u32, Miss> {
    if v == Value::UNDEFINED {
        return Ok(default);
    }
    Ok(integer(heap, v)?.clamp(0.0, f64::from(len)) as u32)
}

fn find(haystack: &[u16], needle: &[u16], from: usize) -> Option<usize> {
    if needle.is_empty() {
        return (from <= haystack.len()).then_some(from);
    }
    (from..=haystack.len().saturating_sub(needle.len()))
        .find(|&i| haystack.get(i..i + needle.len()) == Some(needle))
}

fn this_string(heap: &mut Heap<'_>, this: Value) -> Result<Vec<u16>, Miss> {
    if this.is_nullish() {
        return Err(Miss::new(
            "TypeError: a string method called on undefined or null",
        ));
    }
    let s = ops::to_string(heap, this)?;
    heap.units(s)
}

fn this_array(this: Value) -> Result<Value, Miss> {
    if this.tag() == TAG_ARRAY {
        Ok(this)
    } else {
        Err(Miss::new(
            "an array method called on a value that is not an array",
        ))
    }
}

/// The miss of an array method whose array became shorter than its loop under a callback.
pub const SHRANK: &str = "an array that shrank under its callback not compiled";

fn callback(f: Value) -> Result<Value, Miss> {
    if matches!(f.tag(), TAG_CLOSURE | TAG_BUILTIN) {
        Ok(f)
    } else {
        Err(Miss::new("TypeError: a callback that is not a function"))
    }
}

/// Calls `builtin` with `this` and `args`.
pub fn call(
    guest: &mut dyn Guest,
    builtin: Builtin,
    this: Value,
    args: &[Value],
) -> Result<Value, Miss> {
    use Builtin as B;
    if let Some(result) = super::errors::call(guest, builtin, this, args) {
        return result;
    }
    if let Some(result) = super::buffer::call(guest, builtin, this, args) {
        return result;
    }
    if let Some(result) = super::intrinsics::call(guest, builtin, this, args) {
        return result;
    }
    if let Some(result) = super::session::call(guest, builtin, this, args) {
        return result;
    }
    let a0 = arg(args, 0);
    let a1 = arg(args, 1);
    // The builtins that call back into the compiled code.
    match builtin {
        B::ArrMap | B::ArrFilter | B::ArrForEach | B::ArrEvery | B::ArrSome | B::ArrFind => {
            let array = this_array(this)?;
            let f = callback(a0)?;
            let mut heap = guest.heap();
            let len = heap.len(array)?;
            let out = match builtin {
                B::ArrMap => heap.array(len)?,
                B::ArrFilter => heap.array(0)?,
                _ => Value::UNDEFINED,
            };
            for i in 0..len {
                let heap = guest.heap();
                if i >= heap.len(array)? {
                    // JavaScript goes on past the end (holes, skipped or read as
                    // `undefined` as the method says): Node's to answer.
                    return Err(Miss::new(SHRANK));
                }
                let item = heap.element(array, i)?;
                let result = call_value(guest, f, a1, &[item, Value::number(f64::from(i)), array])?;
                let mut heap = guest.heap();
                let yes = ops::truthy(&heap, result)?;
                match builtin {
                    B::ArrMap => heap.set_element(out, i, result)?,
                    B::ArrFilter if yes => {
                        heap.push(out, item)?;
                    }
                    B::ArrEvery if !yes => return Ok(Value::FALSE),
                    B::ArrSome if yes => return Ok(Value::TRUE),
                    B::ArrFind if yes => return Ok(item),
                    _ => {}
                }
            }
            return Ok(match builtin {
                B::ArrEvery => Value::TRUE,
                B::ArrSome => Value::FALSE,
                B::ArrMap | B::ArrFilter => out,
                _ => Value::UNDEFINED,
            });
        }
        B::Values => return iterator(&mut guest.heap(), this),
        B::IteratorNext => return iterator_next(&mut guest.heap(), this),
        B::ArrayFrom if a1 != Value::UNDEFINED => {
            return Err(Miss::new(
                "builtin Array.from with a map function not compiled",
            ))
        }
        _ => {}
    }
    let mut heap = guest.heap();
    let heap = &mut heap;
    let number = |heap: &mut Heap<'_>, f: fn(f64) -> f64| -> Result<Value, Miss> {
        Ok(Value::number(f(to_number(heap, a0)?)))
    };
    let string = |heap: &mut Heap<'_>, v: Value| -> Result<Vec<u16>, Miss> {
        let s = ops::to_string(heap, v)?;
        heap.units(s)
    };
    Ok(match builtin {
        B::MathFloor => number(heap, f64::floor)?,
        B::MathCeil => number(heap, f64::ceil)?,
        B::MathTrunc => number(heap, f64::trunc)?,
        B::MathAbs => number(heap, f64::abs)?,
        B::MathSqrt => number(heap, f64::sqrt)?,
        B::MathRound => number(heap, |n| {
            if !n.is_finite() || n == 0.0 {
                return n;
            }
            let r = (n + 0.5).floor();
            if r == 0.0 && n < 0.0 {
                -0.0
            } else {
                r
            }
        })?,
        B::MathPow => Value::number(ops::power(to_number(heap, a0)?, to_number(heap, a1)?)),
        B::MathMin | B::MathMax => {
            let max = builtin == B::MathMax;
            let mut best = if max {
                f64::NEG_INFINITY
            } else {
                f64::INFINITY
            };
            for &a in args {
                let n = to_number(heap, a)?;
                if n.is_nan() || best.is_nan() {
                    best = f64::NAN;
                } else if (max
                    && (n > best || (n == 0.0 && best == 0.0 && best.is_sign_negative())))
                    || (!max && (n < best || (n == 0.0 && best == 0.0 && n.is_sign_negative())))
                {
                    best = n;
                }
            }
            Value::number(best)
        }
        B::ParseInt | B::NumberParseInt => {
            let text = string(heap, a0)?;
            let radix = if a1 == Value::UNDEFINED {
                None
            } else {
                Some(ops::to_int32(to_number(heap, a1)?))
            };
            Value::number(parse_int(&text, radix))
        }
        B::ParseFloat | B::NumberParseFloat => {
            let text = string(heap, a0)?;
            Value::number(parse_float(&text))
        }
        B::IsNaN => Value::boolean(to_number(heap, a0)?.is_nan()),
        B::NumberIsInteger => Value::boolean(
            a0.as_number()
                .is_some_and(|n| n.is_finite() && n.trunc() == n),
        ),
        B::NumberIsFinite => Value::boolean(a0.as_number().is_some_and(f64::is_finite)),
        B::NumberIsNaN => Value::boolean(a0.as_number().is_some_and(f64::is_nan)),
        B::Number => Value::number(if args.is_empty() {
            0.0
        } else {
            ops::to_numeric(heap, a0)?
        }),
        B::String => {
            if args.is_empty() {
                heap.str("")?
            } else {
                let p = ops::to_primitive(heap, a0)?;
                ops::to_string(heap, p)?
            }
        }
        B::Boolean => Value::boolean(ops::truthy(heap, a0)?),
        B::StringFromCharCode => {
            let mut units = Vec::new();
            for &a in args {
                units.push(ops::to_uint32(to_number(heap, a)?) as u16);
            }
            heap.string(&units)?
        }
        B::JsonParse => {
            if a1 != Value::UNDEFINED {
                return Err(Miss::new("builtin JSON.parse with a reviver not compiled"));
            }
            let text = string(heap, a0)?;
            json::parse(heap, &text)?
        }
        B::JsonStringify => {
            if args.len() > 1 && !args[1..].iter().all(|a| a.is_nullish()) {
                return Err(Miss::new(
                    "builtin JSON.stringify with a replacer or indentation not compiled",
                ));
            }
            match json::stringify(heap, a0)? {
                Some(units) => heap.string(&units)?,
                None => Value::UNDEFINED,
            }
        }
        B::ObjectKeys | B::ObjectValues | B::ObjectEntries => {
            let entries = match a0.tag() {
                TAG_OBJECT | TAG_CLOSURE => json::own_keys(heap, a0)?,
                TAG_ARRAY => {
                    let items = heap.elements(a0)?;
                    let mut out = Vec::new();
                    for (i, item) in items.into_iter().enumerate() {
                        out.push((heap.str(&i.to_string())?, item));
                    }
                    out
                }
                _ if a0.is_nullish() => {
                    return Err(Miss::new("TypeError: Object.keys of undefined or null"))
                }
                _ => return Err(Miss::new("builtin Object.keys of a primitive not compiled")),
            };
            let mut items = Vec::new();
            for (k, v) in entries {
                items.push(match builtin {
                    B::ObjectKeys => k,
                    B::ObjectValues => v,
                    _ => heap.array_from(&[k, v])?,
                });
            }
            heap.array_from(&items)?
        }
        B::ObjectAssign => {
            if a0.tag() != TAG_OBJECT {
                return Err(Miss::new(
                    "builtin Object.assign to a non-object not compiled",
                ));
            }
            for &source in &args[1..] {
                assign(heap, a0, source)?;
            }
            a0
        }
        B::ObjectCreate => {
            if !(a0 == Value::NULL || matches!(a0.tag(), TAG_OBJECT | TAG_CLOSURE))
                || args.len() > 1
            {
                return Err(Miss::new(
                    "builtin Object.create of this prototype not compiled",
                ));
            }
            heap.object(a0)?
        }
        B::ArrayIsArray => Value::boolean(a0.tag() == TAG_ARRAY),
        B::ArrayFrom => {
            if a0.tag() == TAG_ARRAY {
                let items = heap.elements(a0)?;
                heap.array_from(&items)?
            } else if a0.is_string() {
                code_points(heap, a0)?
            } else {
                return Err(Miss::new("builtin Array.from of this value not compiled"));
            }
        }
        B::StrIndexOf | B::StrIncludes | B::StrLastIndexOf => {
            let s = this_string(heap, this)?;
            let needle = string(heap, a0)?;
            let len = s.len() as u32;
            if builtin == B::StrLastIndexOf {
                let n = to_number(heap, a1)?;
                let from = if n.is_nan() {
                    len
                } else {
                    n.trunc().clamp(0.0, f64::from(len)) as u32
                } as usize;
                let found = (0..=from.min(s.len().saturating_sub(needle.len())))
                    .rev()
                    .find(|&i| s.get(i..i + needle.len()) == Some(&needle[..]));
                Value::number(found.map_or(-1.0, |i| i as f64))
            } else {
                let from = clamped(heap, a1, len, 0)? as usize;
                let found = find(&s, &needle, from);
                if builtin == B::StrIncludes {
                    Value::boolean(found.is_some())
                } else {
                    Value::number(found.map_or(-1.0, |i| i as f64))
                }
            }
        }
        B::StrStartsWith | B::StrEndsWith => {
            let s = this_string(heap, this)?;
            let needle = string(heap, a0)?;
            let len = s.len() as u32;
            if builtin == B::StrStartsWith {
                let from = clamped(heap, a1, len, 0)? as usize;
                Value::boolean(s[from..].starts_with(&needle))
            } else {
                let end = clamped(heap, a1, len, len)? as usize;
                Value::boolean(s[..end].ends_with(&needle))
            }
        }
        B::StrSlice => {
            let s = this_string(heap, this)?;
            let len = s.len() as u32;
            let start = relative(heap, a0, len, 0)?;
            let end = relative(heap, a1, len, len)?;
            heap.string(&s[start as usize..end.max(start) as usize])?
        }
        B::StrSubstring => {
            let s = this_string(heap, this)?;
            let len = s.len() as u32;
            let a = clamped(heap, a0, len, 0)?;
            let b = clamped(heap, a1, len, len)?;
            heap.string(&s[a.min(b) as usize..a.max(b) as usize])?
        }
        B::StrCharAt | B::StrCharCodeAt => {
            let s = this_string(heap, this)?;
            let i = integer(heap, a0)?;
            let unit = (i >= 0.0 && i < s.len() as f64).then(|| s[i as usize]);
            match (builtin, unit) {
                (B::StrCharAt, Some(u)) => heap.string(&[u])?,
                (B::StrCharAt, None) => heap.string(&[])?,
                (_, Some(u)) => Value::number(f64::from(u)),
                (_, None) => Value::number(f64::NAN),
            }
        }
        B::StrSplit => {
            let s = this_string(heap, this)?;
            let limit = if a1 == Value::UNDEFINED {
                u32::MAX
            } else {
                ops::to_uint32(to_number(heap, a1)?)
            };
            let mut parts: Vec<Vec<u16>> = Vec::new();
            if a0 == Value::UNDEFINED {
                parts.push(s);
            } else {
                if !a0.is_string() {
                    return Err(Miss::new(
                        "builtin String.prototype.split by a non-string not compiled",
                    ));
                }
                let sep = heap.units(a0)?;
                if sep.is_empty() {
                    parts.extend(s.iter().map(|u| vec![*u]));
                } else {
                    let mut start = 0;
                    while let Some(i) = find(&s, &sep, start) {
                        parts.push(s[start..i].to_vec());
                        start = i + sep.len();
                    }
                    parts.push(s[start..].to_vec());
                }
            }
            parts.truncate(limit as usize);
            let mut items = Vec::new();
            for p in parts {
                items.push(heap.string(&p)?);
            }
            heap.array_from(&items)?
        }
        B::StrToLowerCase | B::StrToUpperCase => {
            let s = this_string(heap, this)?;
            heap.string(&change_case(&s, builtin == B::StrToUpperCase))?
        }
        B::StrTrim => {
            let s = this_string(heap, this)?;
            let ws = |u: &u16| char::from_u32(u32::from(*u)).is_some_and(is_js_whitespace);
            let start = s.iter().position(|u| !ws(u)).unwrap_or(s.len());
            let end = s.iter().rposition(|u| !ws(u)).map_or(start, |i| i + 1);
            heap.string(&s[start..end])?
        }
        B::StrToString => {
            if !this.is_string() {
                return Err(Miss::new("String.prototype.toString of a non-string"));
            }
            this
        }
        B::ArrPush => {
            let array = this_array(this)?;
            let mut len = heap.len(array)?;
            for &a in args {
                len = heap.push(array, a)?;
            }
            Value::number(f64::from(len))
        }
        B::ArrUnshift => {
            let array = this_array(this)?;
            let mut len = heap.len(array)?;
            for &a in args.iter().rev() {
                len = heap.unshift(array, a)?;
            }
            Value::number(f64::from(len))
        }
        B::ArrPop => heap.pop(this_array(this)?)?,
        B::ArrShift => heap.shift(this_array(this)?)?,
        B::ArrJoin => {
            let array = this_array(this)?;
            let sep = if a0 == Value::UNDEFINED {
                vec![u16::from(b',')]
            } else {
                string(heap, a0)?
            };
            let mut out = Vec::new();
            for (i, item) in heap.elements(array)?.into_iter().enumerate() {
                if i > 0 {
                    out.extend_from_slice(&sep);
                }
                if !item.is_nullish() {
                    out.extend(to_rust_string(heap, item)?.encode_utf16());
                }
            }
            heap.string(&out)?
        }
        B::ArrIndexOf | B::ArrIncludes => {
            let array = this_array(this)?;
            let items = heap.elements(array)?;
            let from = relative(heap, a1, items.len() as u32, 0)? as usize;
            let mut found = None;
            for (i, item) in items.iter().enumerate().skip(from) {
                let same = if builtin == B::ArrIncludes {
                    // SameValueZero: NaN finds NaN.
                    ops::strict_equals(heap, *item, a0)?
                        || (item.as_number().is_some_and(f64::is_nan)
                            && a0.as_number().is_some_and(f64::is_nan))
                } else {
                    ops::strict_equals(heap, *item, a0)?
                };
                if same {
                    found = Some(i);
                    break;
                }
            }
            if builtin == B::ArrIncludes {
                Value::boolean(found.is_some())
            } else {
                Value::number(found.map_or(-1.0, |i| i as f64))
            }
        }
        B::ArrSlice => {
            let array = this_array(this)?;
            let items = heap.elements(array)?;
            let len = items.len() as u32;
            let start = relative(heap, a0, len, 0)?;
            let end = relative(heap, a1, len, len)?;
            heap.array_from(&items[start as usize..end.max(start) as usize])?
        }
        B::ArrConcat => {
            let array = this_array(this)?;
            let mut items = heap.elements(array)?;
            for &a in args {
                if a.tag() == TAG_ARRAY {
                    items.extend(heap.elements(a)?);
                } else {
                    items.push(a);
                }
            }
            heap.array_from(&items)?
        }
        B::ArrReverse => {
            let array = this_array(this)?;
            let items = heap.elements(array)?;
            for (i, item) in items.into_iter().rev().enumerate() {
                heap.set_element(array, i as u32, item)?;
            }
            array
        }
        B::ObjHasOwnProperty => {
            if !matches!(this.tag(), TAG_OBJECT | TAG_CLOSURE) {
                return Err(Miss::new(
                    "builtin hasOwnProperty of a non-object not compiled",
                ));
            }
            let key = if a0.is_string() {
                a0
            } else {
                ops::to_string(heap, a0)?
            };
            Value::boolean(heap.get_own(this, key)?.is_some())
        }
        B::NumToString => {
            let Some(n) = this.as_number() else {
                return Err(Miss::new("Number.prototype.toString of a non-number"));
            };
            if a0 != Value::UNDEFINED && a0 != Value::number(10.0) {
                return Err(Miss::new(
                    "builtin Number.prototype.toString with a radix not compiled",
                ));
            }
            heap.str(&ops::number_to_string(n))?
        }
        other => return Err(Miss::new(format!("builtin {} not compiled", other.name()))),
    })
}

/// `Object.assign`'s copy, and an object literal's spread.
pub fn assign(heap: &mut Heap<'_>, target: Value, source: Value) -> Result<(), Miss> {
    match source.tag() {
        TAG_OBJECT | TAG_CLOSURE => {
            for (k, v) in json::own_keys(heap, source)? {
                heap.set_own(target, k, v)?;
            }
        }
        TAG_ARRAY => {
            for (i, v) in heap.elements(source)?.into_iter().enumerate() {
                let k = heap.str(&i.to_string())?;
                heap.set_own(target, k, v)?;
            }
        }
        _ if source.is_string() => {
            return Err(Miss::new(
                "a spread of a string into an object not compiled",
            ))
        }
        _ => {}
    }
    Ok(())
}
