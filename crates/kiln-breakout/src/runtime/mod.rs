//! The fast path's runtime: what the compiled trace imports as `kiln_rt`, in safe Rust over
//! the instance's memory. The compiled code keeps values NaN-boxed ([`value`]) and does
//! control flow and the number cases inline; objects, strings, arrays and builtins live in
//! the arena ([`heap`]) and are worked on here. Every function answers a [`Miss`] where the
//! request must run in Node instead (a JavaScript error, a builtin not compiled, the arena
//! full), never a panic.

pub mod buffer;
pub mod builtin;
pub mod builtins;
pub mod date;
pub mod errors;
pub mod format;
pub mod heap;
pub mod intrinsics;
pub mod iteration;
pub mod json;
pub mod modules;
pub mod ops;
pub mod regexp;
pub mod s3;
pub mod session;
pub mod text;
pub mod thrown;
pub mod value;

use builtin::Builtin;
use heap::{Heap, GLOBAL_OBJECT};
pub use intrinsics::{Intrinsics, LogLevel, NoIntrinsics};
use value::{Value, TAG_ARRAY, TAG_BUILTIN, TAG_CLOSURE, TAG_OBJECT, TAG_STRING};

/// Why a request left the fast path: the reason, and the source position (`file:line:col`)
/// where the trace knew it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Miss {
    pub reason: String,
    pub at: Option<String>,
    /// The JavaScript error Node throws where this miss was met, when the runtime knows it
    /// exactly (its class and V8's message): uncaught in the handler a request called, it is
    /// the function's error (`crate::exec`), answered as Node's runtime answers it.
    pub raised: Option<Raised>,
}

/// An error the runtime raises as V8 does: its class and its message, byte for byte.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Raised {
    pub class: Builtin,
    pub message: String,
}

impl Miss {
    pub fn new(reason: impl Into<String>) -> Miss {
        Miss {
            reason: reason.into(),
            at: None,
            raised: None,
        }
    }

    /// This miss with the error Node throws here.
    fn raising(mut self, class: Builtin, message: String) -> Miss {
        self.raised = Some(Raised { class, message });
        self
    }
}

/// What the builtins need of the running instance: its memory, a way to call a closure back
/// (`Array.prototype.map`'s callback, say), and the intrinsics.
pub trait Guest {
    fn heap(&mut self) -> Heap<'_>;
    /// Calls `closure` with `this` and `args` (the compiled code's `apply`).
    fn apply(&mut self, closure: Value, this: Value, args: &[Value]) -> Result<Value, Miss>;
    fn intrinsic(&mut self, name: &str, args: &[Value]) -> Result<Value, Miss>;
    /// The platform's intrinsics for this request.
    fn intrinsics(&mut self) -> &mut dyn Intrinsics;
}

fn type_error(what: &str) -> Miss {
    Miss::new(format!("TypeError: {what}"))
}

/// V8's `TypeError` for reading (`reading`) or setting a property of `undefined` or `null`:
/// "Cannot read properties of undefined (reading 'x')". The key is shown as ToString makes it,
/// unquoted within the quotes; an object or a symbol as a key is shown otherwise and is a
/// plain miss.
fn nullish_error(
    heap: &mut Heap<'_>,
    object: Value,
    key: Value,
    reading: bool,
) -> Result<Miss, Miss> {
    let (verb, doing) = if reading {
        ("read", "reading")
    } else {
        ("set", "setting")
    };
    let miss = type_error(&format!("a property of undefined or null {verb}"));
    if key.is_object() {
        return Ok(miss);
    }
    let key = ops::to_string(heap, key)?;
    let Ok(key) = String::from_utf16(&heap.units(key)?) else {
        return Ok(miss);
    };
    let of = if object == Value::NULL {
        "null"
    } else {
        "undefined"
    };
    Ok(miss.raising(
        Builtin::TypeError,
        format!("Cannot {verb} properties of {of} ({doing} '{key}')"),
    ))
}

/// A property key: a string, or a number's string form.
fn property_key(heap: &mut Heap<'_>, key: Value) -> Result<Value, Miss> {
    if key.is_string() {
        return Ok(key);
    }
    if key.is_object() {
        return Err(Miss::new("an object used as a property key"));
    }
    ops::to_string(heap, key)
}

/// A property key's name as text: on the stack when it is short and ASCII, as the names of
/// methods and `length` are, so looking one up allocates nothing.
enum KeyName {
    Short([u8; SHORT_NAME], usize),
    Long(String),
}

const SHORT_NAME: usize = 24;

impl KeyName {
    fn as_str(&self) -> &str {
        match self {
            KeyName::Short(bytes, len) => std::str::from_utf8(&bytes[..*len]).unwrap_or_default(),
            KeyName::Long(text) => text,
        }
    }
}

/// A property key as text.
fn key_name(heap: &mut Heap<'_>, key: Value) -> Result<KeyName, Miss> {
    let key = property_key(heap, key)?;
    let len = heap.string_len(key)?;
    if len as usize <= SHORT_NAME {
        let mut bytes = [0u8; SHORT_NAME];
        let mut ascii = true;
        for (i, byte) in bytes.iter_mut().enumerate().take(len as usize) {
            let unit = heap.unit(key, i as u32)?;
            ascii &= unit < 0x80;
            *byte = unit as u8;
        }
        if ascii {
            return Ok(KeyName::Short(bytes, len as usize));
        }
    }
    Ok(KeyName::Long(heap.rust_string(key)?))
}

/// An integer index a key names, if it is one (`3` or `"3"`).
fn index_of_key(heap: &Heap<'_>, key: Value) -> Result<Option<u32>, Miss> {
    if let Some(n) = key.as_number() {
        let i = n as u32;
        return Ok((f64::from(i) == n && n >= 0.0 && i < u32::MAX).then_some(i));
    }
    if key.is_string() {
        let len = heap.string_len(key)? as usize;
        // No index has more than 10 digits.
        let mut units = [0u16; 10];
        if len > units.len() {
            return Ok(None);
        }
        for (i, unit) in units.iter_mut().enumerate().take(len) {
            *unit = heap.unit(key, i as u32)?;
        }
        return Ok(json::array_index(&units[..len]));
    }
    Ok(None)
}

/// `object[key]`.
pub fn get(heap: &mut Heap<'_>, object: Value, key: Value) -> Result<Value, Miss> {
    if key == Builtin::SymbolIterator.value() {
        return Ok(match object.tag() {
            TAG_ARRAY | TAG_STRING => Builtin::Values.value(),
            _ if object.is_nullish() => {
                return Err(type_error("a property of undefined or null read"))
            }
            _ => return Err(Miss::new("Symbol.iterator of this value not compiled")),
        });
    }
    match object.tag() {
        TAG_ARRAY => {
            if let Some(i) = index_of_key(heap, key)? {
                return heap.element(object, i);
            }
            let name = key_name(heap, key)?;
            if name.as_str() == "length" {
                return Ok(Value::number(f64::from(heap.len(object)?)));
            }
            Ok(builtin_member("Array.prototype", name.as_str()))
        }
        TAG_STRING => {
            if let Some(i) = index_of_key(heap, key)? {
                if i < heap.string_len(object)? {
                    let unit = heap.unit(object, i)?;
                    return heap.string(&[unit]);
                }
                return Ok(Value::UNDEFINED);
            }
            let name = key_name(heap, key)?;
            if name.as_str() == "length" {
                return Ok(Value::number(f64::from(heap.string_len(object)?)));
            }
            Ok(builtin_member("String.prototype", name.as_str()))
        }
        TAG_OBJECT | TAG_CLOSURE => {
            let key = property_key(heap, key)?;
            if let Some(v) = heap.lookup(object, key)? {
                return Ok(v);
            }
            let name = key_name(heap, key)?;
            if object.tag() == TAG_CLOSURE && name.as_str() == "prototype" {
                // A function's prototype object, made when first read.
                let proto = heap.object(Value::NULL)?;
                let constructor = heap.str("constructor")?;
                heap.set_own(proto, constructor, object)?;
                heap.set_own(object, key, proto)?;
                return Ok(proto);
            }
            let end = heap.chain_end(object)?;
            if end.tag() == TAG_BUILTIN {
                // An object of a builtin class: its methods are the class's; a record's fields
                // are its slot's; an error's message and name its own.
                let class = Builtin::from_value(end);
                if let Some(class) = class.filter(|c| errors::is_error_prototype(*c)) {
                    return errors::property(heap, object, class, name.as_str());
                }
                if class == Some(Builtin::BufferPrototype) {
                    return buffer::property(heap, object, name.as_str());
                }
                let method = builtin_member(class.map_or("", Builtin::name), name.as_str());
                if let Some(class) = class.filter(|c| {
                    method == Value::UNDEFINED
                        && matches!(c, Builtin::SessionPrototype | Builtin::TxnPrototype)
                }) {
                    return session::property(heap, object, class, name.as_str());
                }
                if method == Value::UNDEFINED && class.is_some_and(Builtin::is_record) {
                    if heap.proto(object)? != end {
                        return Err(Miss::new("an object inheriting from a record not compiled"));
                    }
                    let slot = heap.host_slot(object)?;
                    return get(heap, slot, key);
                }
                if method == Value::UNDEFINED && class == Some(Builtin::RegExpPrototype) {
                    return Err(Miss::new(format!(
                        "a regular expression's {} not compiled",
                        name.as_str()
                    )));
                }
                return Ok(method);
            }
            if object.tag() == TAG_CLOSURE && name.as_str() == "call" {
                return Ok(Builtin::FnCall.value());
            }
            Ok(builtin_member("Object.prototype", name.as_str()))
        }
        TAG_BUILTIN => {
            let name = key_name(heap, key)?;
            let Some(builtin) = Builtin::from_value(object) else {
                return Ok(Value::UNDEFINED);
            };
            if name.as_str() == "call" && builtin.is_function() {
                return Ok(Builtin::FnCall.value());
            }
            builtins::static_property(builtin, name.as_str())
        }
        _ if object.is_nullish() => Err(nullish_error(heap, object, key, true)?),
        _ if object.is_number() => {
            let name = key_name(heap, key)?;
            Ok(builtin_member("Number.prototype", name.as_str()))
        }
        _ => Ok(Value::UNDEFINED),
    }
}

/// The builtin `owner.member` as a value, or `undefined` when the runtime has none.
fn builtin_member(owner: &str, member: &str) -> Value {
    Builtin::member(owner, member).map_or(Value::UNDEFINED, Builtin::value)
}

/// `object[key] = value`.
pub fn set(heap: &mut Heap<'_>, object: Value, key: Value, value: Value) -> Result<(), Miss> {
    match object.tag() {
        TAG_OBJECT | TAG_CLOSURE => {
            let key = property_key(heap, key)?;
            if heap.chain_end(object)? == Builtin::BufferPrototype.value() {
                return Err(Miss::new("a write to a Buffer not compiled"));
            }
            if matches!(heap.string_len(key)?, 5 | 7) {
                let name = key_name(heap, key)?;
                errors::guard_set(heap, object, name.as_str())?;
            }
            heap.set_own(object, key, value)
        }
        TAG_ARRAY => {
            if let Some(i) = index_of_key(heap, key)? {
                return heap.set_element(object, i, value);
            }
            let key = property_key(heap, key)?;
            if heap.rust_string(key)? == "length" {
                let n = value.as_number().unwrap_or(f64::NAN);
                let len = n as u32;
                if f64::from(len) != n {
                    return Err(Miss::new("RangeError: an invalid array length"));
                }
                return heap.set_len(object, len);
            }
            Err(Miss::new("a named property set on an array"))
        }
        _ if object.is_nullish() => Err(nullish_error(heap, object, key, false)?),
        _ => Err(Miss::new("a property set on a primitive or builtin")),
    }
}

/// `key in object`.
pub fn has(heap: &mut Heap<'_>, key: Value, object: Value) -> Result<bool, Miss> {
    match object.tag() {
        TAG_OBJECT | TAG_CLOSURE => {
            let key = property_key(heap, key)?;
            if heap.lookup(object, key)?.is_some() {
                return Ok(true);
            }
            let proto = heap.proto(object)?;
            if Builtin::from_value(proto).is_some_and(Builtin::is_record) {
                let slot = heap.host_slot(object)?;
                return has(heap, key, slot);
            }
            if Builtin::from_value(heap.chain_end(object)?).is_some_and(errors::is_error_prototype)
            {
                let name = key_name(heap, key)?;
                return Ok(errors::is_error_property(name.as_str()));
            }
            Ok(false)
        }
        TAG_ARRAY => {
            if let Some(i) = index_of_key(heap, key)? {
                return Ok(i < heap.len(object)?);
            }
            Ok(key_name(heap, key)?.as_str() == "length")
        }
        _ => Err(type_error("`in` on a value that is not an object")),
    }
}

/// The global object (what the code assigns to globals), made when first needed. A file's
/// `module` and `exports` are its module record's ([`modules`]).
fn global_object(heap: &mut Heap<'_>) -> Result<Value, Miss> {
    let current = heap.value(GLOBAL_OBJECT)?;
    if current.tag() == TAG_OBJECT {
        return Ok(current);
    }
    let global = heap.object(Value::NULL)?;
    heap.set_value(GLOBAL_OBJECT, global)?;
    Ok(global)
}

/// A global variable's value.
pub fn global(heap: &mut Heap<'_>, name: Value) -> Result<Value, Miss> {
    let global = global_object(heap)?;
    if let Some(v) = heap.get_own(global, name)? {
        return Ok(v);
    }
    let text = heap.rust_string(name)?;
    match text.as_str() {
        "undefined" => Ok(Value::UNDEFINED),
        "NaN" => Ok(Value::number(f64::NAN)),
        "Infinity" => Ok(Value::number(f64::INFINITY)),
        "globalThis" => Ok(global),
        _ => Builtin::named(&text)
            .map(Builtin::value)
            .ok_or_else(|| Miss::new(format!("the global {text} not compiled"))),
    }
}

/// Assigns a global variable.
pub fn set_global(heap: &mut Heap<'_>, name: Value, value: Value) -> Result<(), Miss> {
    let global = global_object(heap)?;
    heap.set_own(global, name, value)
}

/// `callee(...args)` with `this`.
pub fn call(
    guest: &mut dyn Guest,
    callee: Value,
    this: Value,
    args: &[Value],
) -> Result<Value, Miss> {
    match callee.tag() {
        TAG_CLOSURE => guest.apply(callee, this, args),
        TAG_BUILTIN => match Builtin::from_value(callee) {
            Some(builtin) => builtins::call(guest, builtin, this, args),
            None => Err(type_error("a call of a value that is not a function")),
        },
        _ => Err(type_error("a call of a value that is not a function")),
    }
}

/// `new callee(...args)`.
pub fn construct(guest: &mut dyn Guest, callee: Value, args: &[Value]) -> Result<Value, Miss> {
    match callee.tag() {
        TAG_CLOSURE => {
            let mut heap = guest.heap();
            let key = heap.str("prototype")?;
            let proto = get(&mut heap, callee, key)?;
            if proto.tag() == TAG_BUILTIN {
                // An object made so would pass for one of the builtin class (a `Date`).
                return Err(Miss::new(
                    "new of a function whose prototype is a builtin's not compiled",
                ));
            }
            let proto = if proto.is_object() {
                proto
            } else {
                Value::NULL
            };
            let object = heap.object(proto)?;
            let result = guest.apply(callee, object, args)?;
            Ok(if result.is_object() { result } else { object })
        }
        TAG_BUILTIN if Builtin::from_value(callee) == Some(Builtin::Date) => {
            date::construct_date(guest, args)
        }
        TAG_BUILTIN => {
            let builtin = Builtin::from_value(callee);
            if let Some(made) = builtin.and_then(|b| s3::construct(guest, b, args)) {
                return made;
            }
            if let Some(made) = builtin.and_then(|b| errors::construct(&mut guest.heap(), b, args))
            {
                return made;
            }
            Err(Miss::new(format!(
                "builtin new {} not compiled",
                builtin.map_or("?", Builtin::name)
            )))
        }
        _ => Err(type_error("`new` of a value that is not a constructor")),
    }
}

/// `value instanceof constructor`.
pub fn instance_of(heap: &mut Heap<'_>, value: Value, constructor: Value) -> Result<bool, Miss> {
    if constructor.tag() == TAG_BUILTIN {
        return match Builtin::from_value(constructor) {
            Some(class) => errors::instance_of(heap, value, class),
            None => Err(Miss::new("instanceof of a builtin not compiled")),
        };
    }
    if constructor.tag() != TAG_CLOSURE {
        return Err(type_error("instanceof of a value that is not a function"));
    }
    if !matches!(value.tag(), TAG_OBJECT | TAG_CLOSURE) {
        return Ok(false);
    }
    let key = heap.str("prototype")?;
    let proto = get(heap, constructor, key)?;
    let mut current = heap.proto(value)?;
    for _ in 0..10_000 {
        if current == proto {
            return Ok(true);
        }
        if !matches!(current.tag(), TAG_OBJECT | TAG_CLOSURE) {
            return Ok(false);
        }
        current = heap.proto(current)?;
    }
    Err(Miss::new("a prototype chain too long"))
}

/// The handler's `context`: the platform's fields (`Intrinsics::context`) in a record whose
/// methods (`getRemainingTimeInMillis`) are the runtime's.
pub fn context(guest: &mut dyn Guest) -> Result<Value, Miss> {
    let fields = guest.intrinsics().context()?;
    let id = guest.intrinsics().session();
    let mut heap = guest.heap();
    let fields = from_json(&mut heap, &fields)?;
    let session = session::value(&mut heap, id.as_deref())?;
    let key = heap.str("session")?;
    heap.set_own(fields, key, session)?;
    heap.host_object(Builtin::ContextPrototype.value(), fields)
}

/// A value as JSON for an intrinsic (functions and `undefined` as `null`).
pub fn to_json(heap: &mut Heap<'_>, value: Value) -> Result<serde_json::Value, Miss> {
    match json::stringify(heap, value)? {
        Some(units) => serde_json::from_str(&String::from_utf16_lossy(&units))
            .map_err(|_| Miss::new("a value with no JSON form")),
        None => Ok(serde_json::Value::Null),
    }
}

/// A JSON value from an intrinsic, on the heap.
pub fn from_json(heap: &mut Heap<'_>, value: &serde_json::Value) -> Result<Value, Miss> {
    json::from_serde(heap, value)
}
