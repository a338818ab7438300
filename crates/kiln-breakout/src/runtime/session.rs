//! `context.session` as intrinsics: the Node shim's `Session` (`get`, `put`, `delete`, `keys`,
//! `transact`, `id`) and the `Transaction` view `transact` hands its function (`get`, `put`,
//! `delete`, `keys`), as host objects whose methods are host calls into the request's session
//! (`Intrinsics::call("session.get", …)`). The platform holds the request's writes in the
//! session's transaction and commits them with the answer (kiln's `agent/breakout/effects.rs`).
//!
//! Values cross as JSON text, encoded here as `JSON.stringify` encodes them and decoded as
//! `JSON.parse` decodes them, so what is stored is byte for byte what Node stores. What Node
//! answers with an error misses, so Node answers it: a key that is not 1 to 1024 bytes of
//! UTF-8, a value with no JSON form or over the limits, bytes (`Buffer`) as values, a
//! transaction inside a transaction, a throw out of `transact`'s function.

use super::builtin::Builtin;
use super::heap::Heap;
use super::value::{Value, TAG_CLOSURE};
use super::{json, Guest, Miss};

/// A session key's longest UTF-8 encoding, as the shims check it.
const MAX_KEY_BYTES: usize = 1024;

/// `context.session`: the request's session as a host object (its slot is the session's
/// id), or `null` when the request has none, as in Node.
pub fn value(heap: &mut Heap<'_>, id: Option<&str>) -> Result<Value, Miss> {
    match id {
        Some(id) => {
            let id = heap.str(id)?;
            heap.host_object(Builtin::SessionPrototype.value(), id)
        }
        None => Ok(Value::NULL),
    }
}

/// A property of a session or transaction object that is not one of its methods: the
/// session's `id`; anything else misses (Node's objects have more).
pub fn property(heap: &Heap<'_>, object: Value, class: Builtin, name: &str) -> Result<Value, Miss> {
    if class == Builtin::SessionPrototype && name == "id" {
        return heap.host_slot(object);
    }
    Err(Miss::new(format!("a session's {name} not compiled")))
}

/// Calls the session builtin `builtin`, or `None` when it is not one.
pub fn call(
    guest: &mut dyn Guest,
    builtin: Builtin,
    this: Value,
    args: &[Value],
) -> Option<Result<Value, Miss>> {
    use Builtin as B;
    let class = match builtin {
        B::SessionGet | B::SessionPut | B::SessionDelete | B::SessionKeys | B::SessionTransact => {
            B::SessionPrototype
        }
        B::TxnGet | B::TxnPut | B::TxnDelete | B::TxnKeys => B::TxnPrototype,
        _ => return None,
    };
    let arg = |i: usize| args.get(i).copied().unwrap_or(Value::UNDEFINED);
    Some((|| {
        {
            let heap = guest.heap();
            if !heap.is_host(this)? || heap.proto(this)? != class.value() {
                return Err(Miss::new(format!(
                    "{} called on another object",
                    builtin.name()
                )));
            }
        }
        match builtin {
            B::SessionGet | B::TxnGet => get(guest, arg(0), arg(1)),
            B::SessionPut | B::TxnPut => put(guest, arg(0), arg(1)),
            B::SessionDelete | B::TxnDelete => delete(guest, arg(0)),
            B::SessionKeys | B::TxnKeys => keys(guest),
            _ => transact(guest, arg(0)),
        }
    })())
}

/// `get(key, dflt)`: the value decoded, or `dflt` when the key has none (a key that is not a
/// string never has one, as in the shim's `Map`).
fn get(guest: &mut dyn Guest, key: Value, default: Value) -> Result<Value, Miss> {
    if !key.is_string() {
        return Ok(default);
    }
    let key = text(&guest.heap(), key)?;
    let answer = guest
        .intrinsics()
        .call("session.get", &[serde_json::Value::String(key)])?;
    match answer {
        serde_json::Value::String(encoded) => {
            let units: Vec<u16> = encoded.encode_utf16().collect();
            json::parse(&mut guest.heap(), &units)
        }
        serde_json::Value::Null => Ok(default),
        _ => Err(Miss::new("a session answer not compiled")),
    }
}

/// `put(key, value)`: the value as `JSON.stringify` encodes it.
fn put(guest: &mut dyn Guest, key: Value, value: Value) -> Result<Value, Miss> {
    let key = checked_key(&guest.heap(), key)?;
    let encoded = {
        let mut heap = guest.heap();
        if value.is_object() && heap.is_host(value)? {
            // A Buffer is stored as bytes, a Date through its `toJSON`: Node's to encode.
            return Err(Miss::new("a session value of a builtin class not compiled"));
        }
        match json::stringify(&mut heap, value)? {
            Some(units) => String::from_utf16(&units)
                .map_err(|_| Miss::new("a session value that is not well-formed text"))?,
            None => return Err(Miss::new("a session value with no JSON form")),
        }
    };
    guest.intrinsics().call(
        "session.put",
        &[
            serde_json::Value::String(key),
            serde_json::Value::String(encoded),
        ],
    )?;
    Ok(Value::UNDEFINED)
}

fn delete(guest: &mut dyn Guest, key: Value) -> Result<Value, Miss> {
    let key = checked_key(&guest.heap(), key)?;
    guest
        .intrinsics()
        .call("session.delete", &[serde_json::Value::String(key)])?;
    Ok(Value::UNDEFINED)
}

/// `keys()`: sorted as JavaScript's `sort` sorts strings, by UTF-16 code units.
fn keys(guest: &mut dyn Guest) -> Result<Value, Miss> {
    let answer = guest.intrinsics().call("session.keys", &[])?;
    let serde_json::Value::Array(keys) = answer else {
        return Err(Miss::new("a session answer not compiled"));
    };
    let mut units: Vec<Vec<u16>> = keys
        .iter()
        .map(|k| k.as_str().map(|k| k.encode_utf16().collect()))
        .collect::<Option<_>>()
        .ok_or_else(|| Miss::new("a session answer not compiled"))?;
    units.sort();
    let mut heap = guest.heap();
    let items = units
        .iter()
        .map(|k| heap.string(k))
        .collect::<Result<Vec<_>, _>>()?;
    heap.array_from(&items)
}

/// `transact(fn)`: `fn(tx)` with the writes from here on standing or falling together. The
/// fast path's calls are synchronous, so an async function's result is its value; a throw out
/// of it is a miss (the runtime's), which drops the request's writes, transaction and all.
fn transact(guest: &mut dyn Guest, f: Value) -> Result<Value, Miss> {
    if f.tag() != TAG_CLOSURE {
        return Err(Miss::new(
            "transact of something other than a compiled function",
        ));
    }
    guest.intrinsics().call("session.begin", &[])?;
    let tx = guest
        .heap()
        .host_object(Builtin::TxnPrototype.value(), Value::UNDEFINED)?;
    let result = guest.apply(f, Value::UNDEFINED, &[tx])?;
    guest
        .intrinsics()
        .call("session.end", &[serde_json::Value::Bool(true)])?;
    Ok(result)
}

/// A key as the shim checks it: a string of 1 to 1024 bytes of UTF-8. Anything else is the
/// shim's `SessionError`, which Node answers.
fn checked_key(heap: &Heap<'_>, key: Value) -> Result<String, Miss> {
    if !key.is_string() {
        return Err(Miss::new("a session key that is not a string"));
    }
    let key = text(heap, key)?;
    if key.is_empty() || key.len() > MAX_KEY_BYTES {
        return Err(Miss::new(format!("a session key of {} bytes", key.len())));
    }
    Ok(key)
}

/// A string's text; one with a lone surrogate misses (Node would store its replacement).
fn text(heap: &Heap<'_>, s: Value) -> Result<String, Miss> {
    String::from_utf16(&heap.units(s)?)
        .map_err(|_| Miss::new("a session key that is not well-formed text"))
}
