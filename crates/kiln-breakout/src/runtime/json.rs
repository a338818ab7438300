//! `JSON.parse` and `JSON.stringify` over the heap, with JavaScript's rules: UTF-16 strings
//! (lone surrogates kept, and escaped when printed), property order (integer keys first,
//! ascending, then insertion order), and numbers printed as `Number::toString` prints them.

use std::borrow::Cow;

use super::heap::Heap;
use super::ops::number_to_string;
use super::value::{Value, TAG_ARRAY, TAG_OBJECT, TAG_STRING};
use super::Miss;

/// The deepest nesting either direction accepts: deeper is a miss, not a stack overflow.
const MAX_DEPTH: usize = 512;

fn invalid() -> Miss {
    Miss::new("JSON.parse of text that is not JSON")
}

/// `JSON.parse(text)` without a reviver.
pub fn parse(heap: &mut Heap<'_>, text: &[u16]) -> Result<Value, Miss> {
    let mut parser = Parser { text, at: 0 };
    parser.space();
    let value = parser.value(heap, 0)?;
    parser.space();
    if parser.at != text.len() {
        return Err(invalid());
    }
    Ok(value)
}

/// A JSON value from the host (an intrinsic's answer), on the heap: what `parse` makes of its
/// text, without printing and parsing it (object keys in the map's order, numbers as `f64`).
pub fn from_serde(heap: &mut Heap<'_>, value: &serde_json::Value) -> Result<Value, Miss> {
    let mut units = Vec::new();
    from_serde_at(heap, value, &mut units, 0)
}

fn from_serde_at(
    heap: &mut Heap<'_>,
    value: &serde_json::Value,
    units: &mut Vec<u16>,
    depth: usize,
) -> Result<Value, Miss> {
    use serde_json::Value as Json;
    if depth > MAX_DEPTH {
        return Err(Miss::new("JSON nested too deeply"));
    }
    match value {
        Json::Null => Ok(Value::NULL),
        Json::Bool(b) => Ok(Value::boolean(*b)),
        Json::Number(n) => n.as_f64().map(Value::number).ok_or_else(invalid),
        Json::String(text) => {
            utf16_into(text, units);
            heap.string(units)
        }
        Json::Array(items) => {
            let array = heap.array(0)?;
            for item in items {
                let item = from_serde_at(heap, item, units, depth + 1)?;
                heap.push(array, item)?;
            }
            Ok(array)
        }
        Json::Object(fields) => {
            let object = heap.object(Value::NULL)?;
            for (key, field) in fields {
                utf16_into(key, units);
                let key = heap.string(units)?;
                let field = from_serde_at(heap, field, units, depth + 1)?;
                heap.set_own(object, key, field)?;
            }
            Ok(object)
        }
    }
}

/// `text`'s UTF-16 units in `units` (cleared first); ASCII, the usual case, a unit per byte.
fn utf16_into(text: &str, units: &mut Vec<u16>) {
    units.clear();
    if text.is_ascii() {
        units.extend(text.bytes().map(u16::from));
    } else {
        units.reserve(text.len());
        units.extend(text.encode_utf16());
    }
}

struct Parser<'t> {
    text: &'t [u16],
    at: usize,
}

impl<'t> Parser<'t> {
    fn peek(&self) -> Option<u16> {
        self.text.get(self.at).copied()
    }

    fn space(&mut self) {
        while matches!(self.peek(), Some(0x20 | 0x09 | 0x0A | 0x0D)) {
            self.at += 1;
        }
    }

    fn expect(&mut self, word: &str) -> Result<(), Miss> {
        for unit in word.encode_utf16() {
            if self.peek() != Some(unit) {
                return Err(invalid());
            }
            self.at += 1;
        }
        Ok(())
    }

    fn value(&mut self, heap: &mut Heap<'_>, depth: usize) -> Result<Value, Miss> {
        if depth > MAX_DEPTH {
            return Err(Miss::new("JSON nested too deeply"));
        }
        match self.peek().ok_or_else(invalid)? {
            0x7B => {
                self.at += 1;
                let object = heap.object(Value::NULL)?;
                self.space();
                if self.peek() == Some(0x7D) {
                    self.at += 1;
                    return Ok(object);
                }
                loop {
                    self.space();
                    if self.peek() != Some(0x22) {
                        return Err(invalid());
                    }
                    let key = self.string()?;
                    let key = heap.string(&key)?;
                    self.space();
                    self.expect(":")?;
                    self.space();
                    let value = self.value(heap, depth + 1)?;
                    heap.set_own(object, key, value)?;
                    self.space();
                    match self.peek() {
                        Some(0x2C) => self.at += 1,
                        Some(0x7D) => {
                            self.at += 1;
                            return Ok(object);
                        }
                        _ => return Err(invalid()),
                    }
                }
            }
            0x5B => {
                self.at += 1;
                let array = heap.array(0)?;
                self.space();
                if self.peek() == Some(0x5D) {
                    self.at += 1;
                    return Ok(array);
                }
                loop {
                    self.space();
                    let value = self.value(heap, depth + 1)?;
                    heap.push(array, value)?;
                    self.space();
                    match self.peek() {
                        Some(0x2C) => self.at += 1,
                        Some(0x5D) => {
                            self.at += 1;
                            return Ok(array);
                        }
                        _ => return Err(invalid()),
                    }
                }
            }
            0x22 => {
                let units = self.string()?;
                heap.string(&units)
            }
            0x74 => self.expect("true").map(|_| Value::TRUE),
            0x66 => self.expect("false").map(|_| Value::FALSE),
            0x6E => self.expect("null").map(|_| Value::NULL),
            _ => self.number(),
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.at;
        while matches!(self.peek(), Some(0x30..=0x39)) {
            self.at += 1;
        }
        self.at - start
    }

    fn number(&mut self) -> Result<Value, Miss> {
        let start = self.at;
        if self.peek() == Some(0x2D) {
            self.at += 1;
        }
        match self.peek() {
            Some(0x30) => self.at += 1,
            Some(0x31..=0x39) => {
                self.digits();
            }
            _ => return Err(invalid()),
        }
        if self.peek() == Some(0x2E) {
            self.at += 1;
            if self.digits() == 0 {
                return Err(invalid());
            }
        }
        if matches!(self.peek(), Some(0x65 | 0x45)) {
            self.at += 1;
            if matches!(self.peek(), Some(0x2B | 0x2D)) {
                self.at += 1;
            }
            if self.digits() == 0 {
                return Err(invalid());
            }
        }
        let text: String = self.text[start..self.at]
            .iter()
            .map(|&u| char::from(u as u8))
            .collect();
        text.parse::<f64>()
            .map(Value::number)
            .map_err(|_| invalid())
    }

    /// A string literal at the cursor, its escapes decoded: the text itself when it has none.
    fn string(&mut self) -> Result<Cow<'t, [u16]>, Miss> {
        self.at += 1;
        let text = self.text;
        let start = self.at;
        let plain = text[start..]
            .iter()
            .position(|&u| u == 0x22 || u == 0x5C || u < 0x20)
            .ok_or_else(invalid)?;
        self.at += plain;
        if text[self.at] == 0x22 {
            self.at += 1;
            return Ok(Cow::Borrowed(&text[start..self.at - 1]));
        }
        let mut out = text[start..self.at].to_vec();
        loop {
            let unit = self.peek().ok_or_else(invalid)?;
            self.at += 1;
            match unit {
                0x22 => return Ok(Cow::Owned(out)),
                0x5C => {
                    let escape = self.peek().ok_or_else(invalid)?;
                    self.at += 1;
                    out.push(match escape {
                        0x22 => 0x22,
                        0x5C => 0x5C,
                        0x2F => 0x2F,
                        0x62 => 0x08,
                        0x66 => 0x0C,
                        0x6E => 0x0A,
                        0x72 => 0x0D,
                        0x74 => 0x09,
                        0x75 => {
                            let hex = self.text.get(self.at..self.at + 4).ok_or_else(invalid)?;
                            self.at += 4;
                            hex.iter().try_fold(0u16, |acc, &h| {
                                char::from_u32(u32::from(h))
                                    .and_then(|c| c.to_digit(16))
                                    .map(|d| acc * 16 + d as u16)
                                    .ok_or_else(invalid)
                            })?
                        }
                        _ => return Err(invalid()),
                    });
                }
                0x00..=0x1F => return Err(invalid()),
                other => out.push(other),
            }
        }
    }
}

/// The array index a property key spells (`"0"`, `"17"`, not `"01"`), if any.
pub fn array_index(units: &[u16]) -> Option<u32> {
    if units.is_empty() || units.len() > 10 || (units.len() > 1 && units[0] == 0x30) {
        return None;
    }
    let mut n: u64 = 0;
    for &u in units {
        if !(0x30..=0x39).contains(&u) {
            return None;
        }
        n = n * 10 + u64::from(u - 0x30);
    }
    (n < u64::from(u32::MAX)).then_some(n as u32)
}

/// An object's own keys in JavaScript's order: array indices ascending, then the rest in
/// insertion order.
pub fn own_keys(heap: &Heap<'_>, object: Value) -> Result<Vec<(Value, Value)>, Miss> {
    if heap.is_host(object)? {
        return Err(Miss::new(
            "the keys of an object of a builtin class not compiled",
        ));
    }
    let entries = heap.entries(object)?;
    let mut indexed = Vec::new();
    let mut named = Vec::new();
    for (key, value) in entries {
        match array_index(&heap.units(key)?) {
            Some(i) => indexed.push((i, key, value)),
            None => named.push((key, value)),
        }
    }
    indexed.sort_by_key(|(i, _, _)| *i);
    Ok(indexed
        .into_iter()
        .map(|(_, k, v)| (k, v))
        .chain(named)
        .collect())
}

/// `JSON.stringify(value)` without a replacer or indentation: `None` where JavaScript
/// answers `undefined` (a function or `undefined` itself).
pub fn stringify(heap: &mut Heap<'_>, value: Value) -> Result<Option<Vec<u16>>, Miss> {
    let mut out = Vec::new();
    Ok(write(heap, value, &mut out, 0)?.then_some(out))
}

fn push_str(out: &mut Vec<u16>, s: &str) {
    out.extend(s.encode_utf16());
}

/// A string quoted as `JSON.stringify` quotes it.
pub fn quote(units: &[u16], out: &mut Vec<u16>) {
    out.push(0x22);
    let mut i = 0;
    while i < units.len() {
        let u = units[i];
        match u {
            0x22 => push_str(out, "\\\""),
            0x5C => push_str(out, "\\\\"),
            0x08 => push_str(out, "\\b"),
            0x0C => push_str(out, "\\f"),
            0x0A => push_str(out, "\\n"),
            0x0D => push_str(out, "\\r"),
            0x09 => push_str(out, "\\t"),
            0x00..=0x1F => push_str(out, &format!("\\u{u:04x}")),
            0xD800..=0xDBFF if matches!(units.get(i + 1), Some(0xDC00..=0xDFFF)) => {
                out.push(u);
                out.push(units[i + 1]);
                i += 1;
            }
            0xD800..=0xDFFF => push_str(out, &format!("\\u{u:04x}")),
            _ => out.push(u),
        }
        i += 1;
    }
    out.push(0x22);
}

/// Writes `value`; false when it has no JSON form (and nothing was written).
fn write(
    heap: &mut Heap<'_>,
    value: Value,
    out: &mut Vec<u16>,
    depth: usize,
) -> Result<bool, Miss> {
    if depth > MAX_DEPTH {
        return Err(Miss::new(
            "JSON.stringify of a value nested too deeply or cyclic",
        ));
    }
    if let Some(n) = value.as_number() {
        push_str(
            out,
            &if n.is_finite() {
                number_to_string(n)
            } else {
                "null".into()
            },
        );
        return Ok(true);
    }
    match value {
        Value::UNDEFINED => return Ok(false),
        Value::NULL => push_str(out, "null"),
        Value::TRUE => push_str(out, "true"),
        Value::FALSE => push_str(out, "false"),
        _ => match value.tag() {
            TAG_STRING => quote(&heap.units(value)?, out),
            TAG_ARRAY => {
                out.push(0x5B);
                for (i, item) in heap.elements(value)?.into_iter().enumerate() {
                    if i > 0 {
                        out.push(0x2C);
                    }
                    if !write(heap, item, out, depth + 1)? {
                        push_str(out, "null");
                    }
                }
                out.push(0x5D);
            }
            TAG_OBJECT if heap.is_host(value)? => match super::date::host_json(heap, value)? {
                Some(text) => quote(&text.encode_utf16().collect::<Vec<u16>>(), out),
                None => push_str(out, "null"),
            },
            TAG_OBJECT => {
                let to_json = heap.str("toJSON")?;
                if heap.lookup(value, to_json)?.is_some() {
                    return Err(Miss::new("JSON.stringify of an object with toJSON"));
                }
                out.push(0x7B);
                let mut first = true;
                for (key, item) in own_keys(heap, value)? {
                    let mark = out.len();
                    if !first {
                        out.push(0x2C);
                    }
                    quote(&heap.units(key)?, out);
                    out.push(0x3A);
                    if write(heap, item, out, depth + 1)? {
                        first = false;
                    } else {
                        out.truncate(mark);
                    }
                }
                out.push(0x7D);
            }
            // Functions have no JSON form.
            _ => return Ok(false),
        },
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::heap::{DATA_START, HEAP_TOP};

    fn round_trip(text: &str) -> String {
        let mut mem = vec![0u8; 1 << 20];
        mem[HEAP_TOP as usize..HEAP_TOP as usize + 4].copy_from_slice(&DATA_START.to_le_bytes());
        let mut heap = Heap::new(&mut mem);
        let units: Vec<u16> = text.encode_utf16().collect();
        let value = parse(&mut heap, &units).unwrap();
        String::from_utf16(&stringify(&mut heap, value).unwrap().unwrap()).unwrap()
    }

    #[test]
    fn json_round_trips_as_javascript_does() {
        assert_eq!(
            round_trip(
                r#" {"b": [1, 2.50, -0, 1e21, "x\u0001\ud800"], "a": null, "2": true, "1": {}} "#
            ),
            r#"{"1":{},"2":true,"b":[1,2.5,0,1e+21,"x\u0001\ud800"],"a":null}"#
        );
        assert_eq!(round_trip(r#"{"a":1,"a":2,"b":3}"#), r#"{"a":2,"b":3}"#);
    }

    #[test]
    fn a_host_value_is_on_the_heap_as_its_text_parses() {
        let values = [
            serde_json::json!({"b": [1, 2.5, -0.0, 1e21, "x\u{1}é😀"], "a": null, "2": true, "1": {},
                               "big": 12345678901234567890u64, "neg": -17, "esc": "a\"b\\c\n"}),
            serde_json::json!([[], [[]], "", 0.1, false]),
            serde_json::json!("only a string"),
            serde_json::json!(3),
        ];
        for value in values {
            let mut mem = vec![0u8; 1 << 20];
            mem[HEAP_TOP as usize..HEAP_TOP as usize + 4]
                .copy_from_slice(&DATA_START.to_le_bytes());
            let mut heap = Heap::new(&mut mem);
            let direct = from_serde(&mut heap, &value).unwrap();
            let units: Vec<u16> = value.to_string().encode_utf16().collect();
            let parsed = parse(&mut heap, &units).unwrap();
            let direct = stringify(&mut heap, direct).unwrap().unwrap();
            let parsed = stringify(&mut heap, parsed).unwrap().unwrap();
            assert_eq!(
                String::from_utf16_lossy(&direct),
                String::from_utf16_lossy(&parsed),
                "{value}"
            );
        }
    }

    #[test]
    fn strings_with_and_without_escapes_parse_alike() {
        assert_eq!(
            round_trip(r#"["plain", "tab\tend", "\u0041BC", "", "q\""]"#),
            r#"["plain","tab\tend","ABC","","q\""]"#
        );
    }

    #[test]
    fn invalid_json_is_a_miss() {
        let mut mem = vec![0u8; 1 << 16];
        mem[HEAP_TOP as usize..HEAP_TOP as usize + 4].copy_from_slice(&DATA_START.to_le_bytes());
        let mut heap = Heap::new(&mut mem);
        for text in [
            "",
            "01",
            "[1,]",
            "{'a':1}",
            "1 2",
            "\"\u{1}\"",
            "-",
            "1.",
            "nul",
        ] {
            let units: Vec<u16> = text.encode_utf16().collect();
            assert!(parse(&mut heap, &units).is_err(), "{text}");
        }
    }
}
