//! Node's `util.format`, which the shim's `console.log` calls, for the values the fast path
//! has: `%s`, `%d`, `%j`, `%c` and `%%`, and `util.inspect`'s defaults (depth 2, a break
//! length of 80, three inner levels on one line) for numbers, booleans, `null`,
//! `undefined`, strings, plain objects and arrays of up to six elements. What it lacks
//! (`%o`, `%O`, `%i`, `%f`, functions, class instances, longer arrays, which inspect lays out
//! in columns, strings it would escape) is a miss: the request runs in Node, which prints it.

use super::heap::Heap;
use super::json;
use super::ops;
use super::value::{Value, TAG_ARRAY, TAG_OBJECT, TAG_STRING};
use super::Miss;

/// `util.inspect`'s `breakLength`.
const BREAK_LENGTH: usize = 80;
/// Its `depth`: deeper objects print as `[Object]`.
const DEPTH: usize = 2;
/// Arrays longer than this are grouped in columns: not done here.
const MAX_ARRAY: u32 = 6;

fn lacks(what: &str) -> Miss {
    Miss::new(format!("console output of {what} not compiled"))
}

/// `util.format(...args)`, as the shim's `console.log` calls it (`console.log()` prints
/// `undefined` there).
pub fn format(heap: &mut Heap<'_>, args: &[Value]) -> Result<String, Miss> {
    let args: Vec<Value> = if args.is_empty() {
        vec![Value::UNDEFINED]
    } else {
        args.to_vec()
    };
    let mut out = String::new();
    let mut next = 0;
    let mut join = "";
    if args[0].is_string() {
        let first: Vec<u16> = heap.units(args[0])?;
        if args.len() == 1 {
            return Ok(String::from_utf16_lossy(&first));
        }
        let mut a = 0;
        let mut last = 0;
        let mut i = 0;
        while i + 1 < first.len() {
            if first[i] == u16::from(b'%') {
                i += 1;
                let c = first[i];
                if a + 1 != args.len() {
                    let piece = match u8::try_from(c).unwrap_or(0) {
                        b's' => {
                            a += 1;
                            specifier_string(heap, args[a])?
                        }
                        b'd' => {
                            a += 1;
                            if args[a].is_object() {
                                return Err(lacks("%d of an object"));
                            }
                            number(ops::to_number(heap, args[a])?)
                        }
                        b'j' => {
                            a += 1;
                            match json::stringify(heap, args[a])? {
                                Some(units) => String::from_utf16_lossy(&units),
                                None => "undefined".into(),
                            }
                        }
                        b'c' => {
                            a += 1;
                            String::new()
                        }
                        b'o' | b'O' | b'i' | b'f' => return Err(lacks("%o, %O, %i or %f")),
                        b'%' => {
                            out.push_str(&String::from_utf16_lossy(&first[last..i]));
                            last = i + 1;
                            i += 1;
                            continue;
                        }
                        _ => {
                            i += 1;
                            continue;
                        }
                    };
                    if last != i - 1 {
                        out.push_str(&String::from_utf16_lossy(&first[last..i - 1]));
                    }
                    out.push_str(&piece);
                    last = i + 1;
                } else if c == u16::from(b'%') {
                    out.push_str(&String::from_utf16_lossy(&first[last..i]));
                    last = i + 1;
                }
            }
            i += 1;
        }
        if last != 0 {
            next = a + 1;
            join = " ";
            if last < first.len() {
                out.push_str(&String::from_utf16_lossy(&first[last..]));
            }
        }
    }
    for &value in &args[next..] {
        out.push_str(join);
        if value.is_string() {
            out.push_str(&String::from_utf16_lossy(&heap.units(value)?));
        } else {
            out.push_str(&inspect(heap, value, 0, 0)?);
        }
        join = " ";
    }
    Ok(out)
}

/// `%s`: a primitive as `String` gives it (a number as inspect does, so `-0` stays).
fn specifier_string(heap: &mut Heap<'_>, value: Value) -> Result<String, Miss> {
    if let Some(n) = value.as_number() {
        return Ok(number(n));
    }
    if value.is_object() {
        return Err(lacks("%s of an object"));
    }
    ops::to_rust_string(heap, value)
}

/// A number as inspect prints it.
fn number(n: f64) -> String {
    if n == 0.0 && n.is_sign_negative() {
        "-0".into()
    } else {
        ops::number_to_string(n)
    }
}

/// `util.inspect(value)` at nesting `depth`, `indentation` columns in.
fn inspect(
    heap: &mut Heap<'_>,
    value: Value,
    depth: usize,
    indentation: usize,
) -> Result<String, Miss> {
    if let Some(n) = value.as_number() {
        return Ok(number(n));
    }
    match value {
        Value::UNDEFINED => return Ok("undefined".into()),
        Value::NULL => return Ok("null".into()),
        Value::TRUE => return Ok("true".into()),
        Value::FALSE => return Ok("false".into()),
        _ => {}
    }
    match value.tag() {
        TAG_STRING => quoted(&heap.units(value)?),
        TAG_ARRAY => {
            let len = heap.len(value)?;
            if len == 0 {
                return Ok("[]".into());
            }
            if depth > DEPTH {
                return Ok("[Array]".into());
            }
            if len > MAX_ARRAY {
                return Err(lacks("an array of more than six elements"));
            }
            let mut output = Vec::new();
            for item in heap.elements(value)? {
                output.push(inspect(heap, item, depth + 1, indentation + 2)?);
            }
            Ok(layout(output, ('[', ']'), indentation))
        }
        TAG_OBJECT => {
            if heap.is_host(value)? {
                return Err(lacks("an object of a builtin class"));
            }
            if heap.proto(value)?.tag() == TAG_OBJECT {
                return Err(lacks("an instance of a class"));
            }
            let entries = json::own_keys(heap, value)?;
            if entries.is_empty() {
                return Ok("{}".into());
            }
            if depth > DEPTH {
                return Ok("[Object]".into());
            }
            let mut output = Vec::new();
            for (key, item) in entries {
                let key = heap.units(key)?;
                let name = if is_identifier(&key) {
                    String::from_utf16_lossy(&key)
                } else {
                    quoted(&key)?
                };
                let text = inspect(heap, item, depth + 1, indentation + 2)?;
                output.push(format!("{name}: {text}"));
            }
            Ok(layout(output, ('{', '}'), indentation))
        }
        _ => Err(lacks("a function")),
    }
}

/// inspect's `reduceToSingleString` with `compact: 3`: one line when the entries fit in the
/// break length and none spans lines, else one entry a line.
fn layout(output: Vec<String>, braces: (char, char), indentation: usize) -> String {
    let start = output.len() + indentation + 1 + 10;
    let mut total = output.len() + start;
    let fits = total + output.len() <= BREAK_LENGTH
        && output.iter().all(|entry| {
            total += entry.encode_utf16().count();
            total <= BREAK_LENGTH
        });
    let joined = output.join(", ");
    if fits && !joined.contains('\n') {
        return format!("{} {joined} {}", braces.0, braces.1);
    }
    let newline = format!("\n{}", " ".repeat(indentation));
    format!(
        "{}{newline}  {}{newline}{}",
        braces.0,
        output.join(&format!(",{newline}  ")),
        braces.1
    )
}

/// A key inspect prints bare: `/^[a-zA-Z_][a-zA-Z_0-9]*$/`.
fn is_identifier(units: &[u16]) -> bool {
    let ok = |u: u16, first: bool| {
        u8::try_from(u)
            .is_ok_and(|c| c.is_ascii_alphabetic() || c == b'_' || (!first && c.is_ascii_digit()))
    };
    !units.is_empty() && ok(units[0], true) && units[1..].iter().all(|&u| ok(u, false))
}

/// A string quoted as inspect quotes it: `'…'`, or `"…"` or `` `…` `` when it holds the
/// quotes before them. A string inspect would escape is a miss.
fn quoted(units: &[u16]) -> Result<String, Miss> {
    if units.iter().any(|&u| {
        u < 0x20
            || (0x7F..=0x9F).contains(&u)
            || u == u16::from(b'\\')
            || (0xD800..0xE000).contains(&u)
    }) {
        return Err(lacks("a string with characters inspect escapes"));
    }
    let text = String::from_utf16_lossy(units);
    let quote = if !text.contains('\'') {
        '\''
    } else if !text.contains('"') {
        '"'
    } else if !text.contains('`') && !text.contains("${") {
        '`'
    } else {
        return Err(lacks("a string with every kind of quote"));
    };
    Ok(format!("{quote}{text}{quote}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::heap::{DATA_START, HEAP_TOP};

    fn with_heap<R>(f: impl FnOnce(&mut Heap<'_>) -> R) -> R {
        let mut mem = vec![0u8; 1 << 16];
        mem[HEAP_TOP as usize..HEAP_TOP as usize + 4].copy_from_slice(&DATA_START.to_le_bytes());
        let mut heap = Heap::new(&mut mem);
        f(&mut heap)
    }

    fn fmt(args: &[&str]) -> Result<String, Miss> {
        with_heap(|heap| {
            let values: Vec<Value> = args
                .iter()
                .map(|a| {
                    let units: Vec<u16> = a.encode_utf16().collect();
                    json::parse(heap, &units).unwrap()
                })
                .collect();
            format(heap, &values)
        })
    }

    #[test]
    fn specifiers_and_plain_values_print_as_util_format_does() {
        assert_eq!(fmt(&[]).unwrap(), "undefined");
        assert_eq!(fmt(&[r#""a%sb""#]).unwrap(), "a%sb");
        assert_eq!(fmt(&[r#""x=%s y=%d""#, "1", r#""2""#]).unwrap(), "x=1 y=2");
        assert_eq!(fmt(&[r#""%s%%""#, "5"]).unwrap(), "5%");
        assert_eq!(fmt(&[r#""100%%""#, "1"]).unwrap(), "100% 1");
        assert_eq!(fmt(&[r#""%j!""#, r#"{"a":[1]}"#]).unwrap(), r#"{"a":[1]}!"#);
        assert_eq!(fmt(&[r#""%x %s""#, "true"]).unwrap(), "%x true");
        assert_eq!(fmt(&[r#""%s""#, "1", "2"]).unwrap(), "1 2");
        assert_eq!(fmt(&["1", r#""a""#, "null"]).unwrap(), "1 a null");
        assert!(fmt(&[r#""%o""#, "1"]).is_err());
    }

    #[test]
    fn objects_and_arrays_print_as_inspect_does() {
        assert_eq!(
            fmt(&[r#"{"a":1,"b-c":"x","d":[true,null],"e":{}}"#]).unwrap(),
            "{ a: 1, 'b-c': 'x', d: [ true, null ], e: {} }"
        );
        assert_eq!(
            fmt(&[r#"{"a":{"b":{"c":{"d":1},"e":{}}}}"#]).unwrap(),
            "{ a: { b: { c: [Object], e: {} } } }"
        );
        assert_eq!(fmt(&[r#"["it's"]"#]).unwrap(), r#"[ "it's" ]"#);
        let long = format!(r#"{{"a":"{}","b":"{}"}}"#, "x".repeat(60), "y".repeat(60));
        assert_eq!(
            fmt(&[&long]).unwrap(),
            format!(
                "{{\n  a: '{}',\n  b: '{}'\n}}",
                "x".repeat(60),
                "y".repeat(60)
            )
        );
        assert!(fmt(&["[1,2,3,4,5,6,7]"]).is_err());
        assert!(fmt(&[r#"["a\nb"]"#]).is_err());
    }
}
