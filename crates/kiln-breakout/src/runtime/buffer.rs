//! `Buffer` basics: `Buffer.from` of a string (`utf8`, `hex`, `base64`, `latin1`), of an
//! array of numbers or of another buffer; `Buffer.byteLength`, `Buffer.concat`,
//! `Buffer.isBuffer`; a buffer's `length`, its bytes by index, and `toString` in the same
//! encodings.
//!
//! A buffer is a host object whose slot is a string of its bytes (each UTF-16 unit one byte,
//! below 256). Buffers are read-only here: writing to one misses, as does every method and
//! property not listed, and decoding text Node would read leniently (base64 with whitespace
//! or the URL alphabet, hex with an odd length or a bad digit).

use base64::Engine;

use super::builtin::Builtin;
use super::heap::Heap;
use super::value::{Value, TAG_ARRAY, TAG_OBJECT};
use super::{Guest, Miss};

fn refuse(what: &str) -> Miss {
    Miss::new(format!("{what} not compiled"))
}

/// Whether `v` is a buffer (made here: its prototype is `Buffer.prototype`).
pub fn is_buffer(heap: &Heap<'_>, v: Value) -> Result<bool, Miss> {
    Ok(v.tag() == TAG_OBJECT && heap.proto(v)? == Builtin::BufferPrototype.value())
}

/// A buffer's bytes.
pub fn bytes(heap: &Heap<'_>, buffer: Value) -> Result<Vec<u8>, Miss> {
    let slot = heap.host_slot(buffer)?;
    Ok(heap.units(slot)?.into_iter().map(|u| u as u8).collect())
}

fn make(heap: &mut Heap<'_>, bytes: &[u8]) -> Result<Value, Miss> {
    let units: Vec<u16> = bytes.iter().map(|&b| u16::from(b)).collect();
    let slot = heap.string(&units)?;
    heap.host_object(Builtin::BufferPrototype.value(), slot)
}

/// The encoding an argument names (`undefined` is UTF-8), lower-cased as Node reads it.
fn encoding(heap: &mut Heap<'_>, v: Value) -> Result<&'static str, Miss> {
    if v == Value::UNDEFINED {
        return Ok("utf8");
    }
    if !v.is_string() {
        return Err(refuse("a Buffer encoding that is not a string"));
    }
    match heap.rust_string(v)?.to_ascii_lowercase().as_str() {
        "utf8" | "utf-8" => Ok("utf8"),
        "hex" => Ok("hex"),
        "base64" => Ok("base64"),
        "latin1" | "binary" => Ok("latin1"),
        other => Err(refuse(&format!("the Buffer encoding {other:?}"))),
    }
}

/// A string's bytes in an encoding.
fn encode(units: &[u16], encoding: &str) -> Result<Vec<u8>, Miss> {
    match encoding {
        // Lone surrogates become U+FFFD, as Node writes them.
        "utf8" => Ok(String::from_utf16_lossy(units).into_bytes()),
        "latin1" => Ok(units.iter().map(|&u| u as u8).collect()),
        "hex" => {
            let text = String::from_utf16(units).map_err(|_| refuse("hex with surrogates"))?;
            if text.len() % 2 != 0 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(refuse("hex text Node reads leniently"));
            }
            (0..text.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&text[i..i + 2], 16).map_err(|_| refuse("hex")))
                .collect()
        }
        _ => {
            let text = String::from_utf16(units).map_err(|_| refuse("base64 with surrogates"))?;
            let engine = if text.ends_with('=') || text.len() % 4 == 0 {
                &base64::engine::general_purpose::STANDARD
            } else {
                &base64::engine::general_purpose::STANDARD_NO_PAD
            };
            engine
                .decode(text.as_bytes())
                .map_err(|_| refuse("base64 text Node reads leniently"))
        }
    }
}

/// Bytes as text in an encoding.
fn decode(bytes: &[u8], encoding: &str) -> Vec<u16> {
    let text = match encoding {
        "utf8" => String::from_utf8_lossy(bytes).into_owned(),
        "latin1" => return bytes.iter().map(|&b| u16::from(b)).collect(),
        "hex" => bytes.iter().map(|b| format!("{b:02x}")).collect(),
        _ => base64::engine::general_purpose::STANDARD.encode(bytes),
    };
    text.encode_utf16().collect()
}

/// `Buffer.from(value[, encoding])`.
fn from(heap: &mut Heap<'_>, value: Value, enc: Value, more: bool) -> Result<Value, Miss> {
    if more {
        return Err(refuse("Buffer.from with an offset"));
    }
    if value.is_string() {
        let enc = encoding(heap, enc)?;
        let units = heap.units(value)?;
        let bytes = encode(&units, enc)?;
        return make(heap, &bytes);
    }
    if is_buffer(heap, value)? {
        let bytes = bytes(heap, value)?;
        return make(heap, &bytes);
    }
    if value.tag() == TAG_ARRAY {
        let mut bytes = Vec::new();
        for item in heap.elements(value)? {
            let Some(n) = item.as_number() else {
                return Err(refuse("Buffer.from of an array holding other than numbers"));
            };
            // ToUint8: modulo 256, NaN and infinities as 0.
            let n = if n.is_finite() {
                n.trunc().rem_euclid(256.0)
            } else {
                0.0
            };
            bytes.push(n as u8);
        }
        return make(heap, &bytes);
    }
    Err(refuse("Buffer.from of this value"))
}

/// A property of a buffer: `length`, a byte by index, `toString`.
pub fn property(heap: &mut Heap<'_>, object: Value, name: &str) -> Result<Value, Miss> {
    if !is_buffer(heap, object)? {
        return Err(refuse("an object inheriting from a Buffer"));
    }
    let slot = heap.host_slot(object)?;
    if name == "length" {
        return Ok(Value::number(f64::from(heap.string_len(slot)?)));
    }
    if let Some(i) = super::json::array_index(&name.encode_utf16().collect::<Vec<u16>>()) {
        if i < heap.string_len(slot)? {
            return Ok(Value::number(f64::from(heap.unit(slot, i)?)));
        }
        return Ok(Value::UNDEFINED);
    }
    match name {
        "toString" => Ok(Builtin::BufferToString.value()),
        _ => Err(refuse(&format!("a Buffer's {name}"))),
    }
}

/// The builtins of this file, or `None` for any other.
pub fn call(
    guest: &mut dyn Guest,
    builtin: Builtin,
    this: Value,
    args: &[Value],
) -> Option<Result<Value, Miss>> {
    let a0 = args.first().copied().unwrap_or(Value::UNDEFINED);
    let a1 = args.get(1).copied().unwrap_or(Value::UNDEFINED);
    let mut heap = guest.heap();
    let heap = &mut heap;
    Some(match builtin {
        Builtin::BufferFrom => from(heap, a0, a1, args.len() > 2),
        Builtin::BufferIsBuffer => is_buffer(heap, a0).map(Value::boolean),
        Builtin::BufferByteLength => (|| {
            if is_buffer(heap, a0)? {
                return Ok(Value::number(f64::from(
                    heap.string_len(heap.host_slot(a0)?)?,
                )));
            }
            if !a0.is_string() {
                return Err(refuse("Buffer.byteLength of this value"));
            }
            let enc = encoding(heap, a1)?;
            let units = heap.units(a0)?;
            Ok(Value::number(encode(&units, enc)?.len() as f64))
        })(),
        Builtin::BufferConcat => (|| {
            if a0.tag() != TAG_ARRAY || args.len() > 1 {
                return Err(refuse("Buffer.concat of this list"));
            }
            let mut all = Vec::new();
            for item in heap.elements(a0)? {
                if !is_buffer(heap, item)? {
                    return Err(refuse("Buffer.concat of a list holding other than buffers"));
                }
                all.extend(bytes(heap, item)?);
            }
            make(heap, &all)
        })(),
        Builtin::BufferToString => (|| {
            if !is_buffer(heap, this)? {
                return Err(refuse("Buffer.prototype.toString of this value"));
            }
            if args.len() > 1 {
                return Err(refuse("Buffer.prototype.toString with a range"));
            }
            let enc = encoding(heap, a0)?;
            let units = decode(&bytes(heap, this)?, enc);
            heap.string(&units)
        })(),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn units(s: &str) -> Vec<u16> {
        s.encode_utf16().collect()
    }

    #[test]
    fn text_round_trips_as_node_encodes_it() {
        // Each against Node: Buffer.from(text, enc) and back.
        assert_eq!(encode(&units("h☃"), "utf8").unwrap(), b"h\xe2\x98\x83");
        assert_eq!(encode(&[0xD800], "utf8").unwrap(), b"\xef\xbf\xbd");
        assert_eq!(encode(&units("aGk="), "base64").unwrap(), b"hi");
        assert_eq!(encode(&units("aGk"), "base64").unwrap(), b"hi");
        assert_eq!(encode(&units("00ff"), "hex").unwrap(), [0, 255]);
        assert!(encode(&units("0f0"), "hex").is_err());
        assert!(encode(&units("zz"), "hex").is_err());
        assert!(encode(&units("a Gk="), "base64").is_err());
        assert!(encode(&units("aGk_"), "base64").is_err());
        assert_eq!(
            String::from_utf16(&decode(b"hi", "base64")).unwrap(),
            "aGk="
        );
        assert_eq!(
            String::from_utf16(&decode(&[0, 255], "hex")).unwrap(),
            "00ff"
        );
        assert_eq!(
            String::from_utf16(&decode(b"\xe2\x98", "utf8")).unwrap(),
            "\u{fffd}"
        );
        assert_eq!(decode(&[0xe9], "latin1"), [0xe9]);
    }

    #[test]
    fn a_buffer_is_read_only_and_answers_its_length_and_bytes() {
        let mut mem = vec![0u8; 1 << 16];
        let mut heap = Heap::empty(&mut mem).unwrap();
        let text = heap.str("hé").unwrap();
        let b = from(&mut heap, text, Value::UNDEFINED, false).unwrap();
        assert_eq!(
            property(&mut heap, b, "length").unwrap(),
            Value::number(3.0)
        );
        assert_eq!(property(&mut heap, b, "1").unwrap(), Value::number(195.0));
        assert_eq!(property(&mut heap, b, "3").unwrap(), Value::UNDEFINED);
        assert!(property(&mut heap, b, "slice").is_err());
        let array = heap
            .array_from(&[Value::number(257.0), Value::number(-1.0)])
            .unwrap();
        let c = from(&mut heap, array, Value::UNDEFINED, false).unwrap();
        assert_eq!(bytes(&heap, c).unwrap(), [1, 255]);
        let ucs2 = heap.str("ucs2").unwrap();
        assert!(from(&mut heap, text, ucs2, false).is_err());
    }
}
