//! `Error` and its subclasses, prototypes set and read (`Object.setPrototypeOf`,
//! `Object.getPrototypeOf`, what a normalised `class … extends Error` does), and
//! `Function.prototype.toString` and `call` as the normalised `super(…)` uses them.
//!
//! An error is a host object: its prototype is its class's (`TypeError.prototype`, a builtin)
//! and its slot holds its message (a string, or `undefined` when it was made without one).
//! Its message and stack are not own enumerable properties, as in V8: enumerating an error
//! (JSON, `Object.keys`, `console.log`) misses as for every object of a builtin class, its
//! `stack` misses (the fast path has no V8 stack), and so does writing `message` or `stack`.

use super::builtin::Builtin;
use super::heap::{Heap, HOST_SLOT};
use super::value::{Value, TAG_BUILTIN, TAG_CLOSURE, TAG_OBJECT};
use super::{call as call_value, ops, Guest, Miss};

/// Each error class: its constructor, its prototype, its name.
const CLASSES: [(Builtin, Builtin, &str); 7] = [
    (Builtin::Error, Builtin::ErrorPrototype, "Error"),
    (Builtin::TypeError, Builtin::TypeErrorPrototype, "TypeError"),
    (
        Builtin::RangeError,
        Builtin::RangeErrorPrototype,
        "RangeError",
    ),
    (
        Builtin::SyntaxError,
        Builtin::SyntaxErrorPrototype,
        "SyntaxError",
    ),
    (
        Builtin::ReferenceError,
        Builtin::ReferenceErrorPrototype,
        "ReferenceError",
    ),
    (Builtin::EvalError, Builtin::EvalErrorPrototype, "EvalError"),
    (Builtin::UriError, Builtin::UriErrorPrototype, "URIError"),
];

fn class_of_constructor(b: Builtin) -> Option<(Builtin, Builtin, &'static str)> {
    CLASSES.iter().copied().find(|c| c.0 == b)
}

fn class_of_prototype(b: Builtin) -> Option<(Builtin, Builtin, &'static str)> {
    CLASSES.iter().copied().find(|c| c.1 == b)
}

/// Whether `b` is the prototype of an error class.
pub fn is_error_prototype(b: Builtin) -> bool {
    class_of_prototype(b).is_some()
}

/// Whether an error has a property of this name (its own message and stack, or its class's).
pub fn is_error_property(name: &str) -> bool {
    matches!(
        name,
        "message" | "name" | "stack" | "constructor" | "toString"
    )
}

/// Whether `v`'s prototype chain ends in an error class's prototype.
fn is_error(heap: &Heap<'_>, v: Value) -> Result<bool, Miss> {
    if !matches!(v.tag(), TAG_OBJECT | TAG_CLOSURE) {
        return Ok(false);
    }
    Ok(Builtin::from_value(heap.chain_end(v)?).is_some_and(is_error_prototype))
}

/// `new E(message)` or `E(message)` for an error class `E`; `None` for other builtins.
pub fn construct(heap: &mut Heap<'_>, b: Builtin, args: &[Value]) -> Option<Result<Value, Miss>> {
    let (_, prototype, _) = class_of_constructor(b)?;
    Some((|| {
        if args.get(1).is_some_and(|o| *o != Value::UNDEFINED) {
            return Err(Miss::new("an error's options (cause) not compiled"));
        }
        let message = match args.first() {
            None => Value::UNDEFINED,
            Some(&m) if m == Value::UNDEFINED => Value::UNDEFINED,
            Some(&m) => ops::to_string(heap, m)?,
        };
        heap.host_object(prototype.value(), message)
    })())
}

/// `new E(message)` for an error class `E`: an error the runtime raises as V8 does.
pub fn raise(heap: &mut Heap<'_>, class: Builtin, message: &str) -> Result<Value, Miss> {
    let message = heap.str(message)?;
    construct(heap, class, &[message])
        .unwrap_or_else(|| Err(Miss::new(format!("{} is not an error class", class.name()))))
}

/// A property an error has from its class: `message`, `name`, `constructor`.
pub fn property(
    heap: &mut Heap<'_>,
    object: Value,
    class: Builtin,
    name: &str,
) -> Result<Value, Miss> {
    let Some((constructor, _, class_name)) = class_of_prototype(class) else {
        return Err(Miss::new("not an error class"));
    };
    match name {
        "message" => {
            let slot = if object.tag() == TAG_OBJECT {
                heap.value(object.address() + HOST_SLOT)?
            } else {
                Value::UNDEFINED
            };
            if slot.is_string() {
                Ok(slot)
            } else {
                heap.str("")
            }
        }
        "name" => heap.str(class_name),
        "constructor" => Ok(constructor.value()),
        "stack" => Err(Miss::new("an error's stack not compiled")),
        "toString" => Err(Miss::new("builtin Error.prototype.toString not compiled")),
        _ => Ok(Builtin::member("Object.prototype", name).map_or(Value::UNDEFINED, Builtin::value)),
    }
}

/// A property of an error class's prototype itself (`Error.prototype.name`).
pub fn prototype_property(class: Builtin, name: &str) -> Result<Value, Miss> {
    let Some((constructor, _, class_name)) = class_of_prototype(class) else {
        return Err(Miss::new("not an error class"));
    };
    match name {
        "constructor" => Ok(constructor.value()),
        "message" | "name" | "stack" | "toString" => Err(Miss::new(format!(
            "{class_name}.prototype.{name} read as a value not compiled"
        ))),
        _ => Ok(Builtin::member("Object.prototype", name).map_or(Value::UNDEFINED, Builtin::value)),
    }
}

/// Whether writing `key` to `object` is refused: an error's `message` and `stack` are not
/// plain properties.
pub fn guard_set(heap: &Heap<'_>, object: Value, key: &str) -> Result<(), Miss> {
    if matches!(key, "message" | "stack") && is_error(heap, object)? {
        return Err(Miss::new(format!("an error's {key} set not compiled")));
    }
    Ok(())
}

/// `value instanceof E` for an error class `E`.
pub fn instance_of(heap: &Heap<'_>, value: Value, constructor: Builtin) -> Result<bool, Miss> {
    let Some((_, wanted, _)) = class_of_constructor(constructor) else {
        return Err(Miss::new("instanceof of a builtin not compiled"));
    };
    if !matches!(value.tag(), TAG_OBJECT | TAG_CLOSURE) {
        return Ok(false);
    }
    match Builtin::from_value(heap.chain_end(value)?) {
        // Every error class's prototype inherits from Error.prototype.
        Some(end) if is_error_prototype(end) => {
            Ok(end == wanted || wanted == Builtin::ErrorPrototype)
        }
        _ => Ok(false),
    }
}

/// `Object.setPrototypeOf(object, proto)`: plain objects and functions, to an object, a
/// function, `null`, or an error class (its constructor or prototype, as `extends Error`
/// links both chains). An object of a builtin class keeps its class (an error may take a
/// subclass's prototype).
fn set_prototype_of(heap: &mut Heap<'_>, object: Value, proto: Value) -> Result<Value, Miss> {
    let refuse = || Miss::new("builtin Object.setPrototypeOf of these values not compiled");
    if !matches!(object.tag(), TAG_OBJECT | TAG_CLOSURE) {
        return Err(refuse());
    }
    let proto_ok = match proto.tag() {
        TAG_OBJECT | TAG_CLOSURE => true,
        TAG_BUILTIN => Builtin::from_value(proto)
            .is_some_and(|b| is_error_prototype(b) || class_of_constructor(b).is_some()),
        _ => proto == Value::NULL,
    };
    if !proto_ok {
        return Err(refuse());
    }
    let new_end = if matches!(proto.tag(), TAG_OBJECT | TAG_CLOSURE) {
        heap.chain_end(proto)?
    } else {
        proto
    };
    if heap.is_host(object)?
        && !(is_error(heap, object)?
            && Builtin::from_value(new_end).is_some_and(is_error_prototype))
    {
        return Err(refuse());
    }
    // A cycle is a TypeError in JavaScript.
    let mut current = proto;
    for _ in 0..10_000 {
        if current == object {
            return Err(Miss::new("TypeError: a cyclic prototype chain"));
        }
        if !matches!(current.tag(), TAG_OBJECT | TAG_CLOSURE) {
            heap.set_proto(object, proto)?;
            return Ok(object);
        }
        current = heap.proto(current)?;
    }
    Err(Miss::new("a prototype chain too long"))
}

/// `Object.getPrototypeOf(object)`, where the arena knows it (`{}`'s `Object.prototype` is
/// implicit in it: a miss).
fn get_prototype_of(heap: &Heap<'_>, object: Value) -> Result<Value, Miss> {
    if matches!(object.tag(), TAG_OBJECT | TAG_CLOSURE) {
        let proto = heap.proto(object)?;
        if proto != Value::NULL && proto != Value(0) {
            return Ok(proto);
        }
    }
    Err(Miss::new(
        "builtin Object.getPrototypeOf of this value not compiled",
    ))
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
    if let Some(made) = construct(&mut guest.heap(), builtin, args) {
        return Some(made);
    }
    Some(match builtin {
        Builtin::ObjectSetPrototypeOf => set_prototype_of(&mut guest.heap(), a0, a1),
        Builtin::ObjectGetPrototypeOf => get_prototype_of(&guest.heap(), a0),
        Builtin::FnCall => call_value(guest, this, a0, args.get(1..).unwrap_or_default()),
        Builtin::FnToString => match Builtin::from_value(this) {
            Some(b) => {
                let short = b.name().rsplit('.').next().unwrap_or_default();
                guest
                    .heap()
                    .str(&format!("function {short}() {{ [native code] }}"))
            }
            None if this.tag() == TAG_CLOSURE => Err(Miss::new(
                "builtin Function.prototype.toString of a compiled function not compiled",
            )),
            None => Err(Miss::new(
                "TypeError: Function.prototype.toString of a value that is not a function",
            )),
        },
        Builtin::RegExpTest => super::regexp::test(&mut guest.heap(), this, a0).map(Value::boolean),
        Builtin::RegExpLiteral => guest
            .heap()
            .host_object(Builtin::RegExpPrototype.value(), a0),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn heap(mem: &mut [u8]) -> Heap<'_> {
        Heap::empty(mem).unwrap()
    }

    #[test]
    fn an_error_holds_its_message_and_class() {
        let mut mem = vec![0u8; 1 << 16];
        let mut h = heap(&mut mem);
        let text = h.str("bad").unwrap();
        let e = construct(&mut h, Builtin::TypeError, &[text])
            .unwrap()
            .unwrap();
        let message = property(&mut h, e, Builtin::TypeErrorPrototype, "message").unwrap();
        assert_eq!(h.rust_string(message).unwrap(), "bad");
        let name = property(&mut h, e, Builtin::TypeErrorPrototype, "name").unwrap();
        assert_eq!(h.rust_string(name).unwrap(), "TypeError");
        assert!(instance_of(&h, e, Builtin::TypeError).unwrap());
        assert!(instance_of(&h, e, Builtin::Error).unwrap());
        assert!(!instance_of(&h, e, Builtin::RangeError).unwrap());
        assert!(!instance_of(&h, Value::number(1.0), Builtin::Error).unwrap());
        assert!(property(&mut h, e, Builtin::TypeErrorPrototype, "stack").is_err());
        assert!(guard_set(&h, e, "message").is_err());
        assert!(guard_set(&h, e, "name").is_ok());
        // Options (a cause) are not modelled.
        assert!(construct(&mut h, Builtin::Error, &[text, text])
            .unwrap()
            .is_err());
        assert!(construct(&mut h, Builtin::Math, &[]).is_none());
    }

    #[test]
    fn prototypes_are_set_only_where_the_arena_models_them() {
        let mut mem = vec![0u8; 1 << 16];
        let mut h = heap(&mut mem);
        let a = h.object(Value::NULL).unwrap();
        let b = h.object(a).unwrap();
        assert!(set_prototype_of(&mut h, a, b).is_err(), "a cycle");
        let sub = h.object(Value::NULL).unwrap();
        set_prototype_of(&mut h, sub, Builtin::ErrorPrototype.value()).unwrap();
        let e = construct(&mut h, Builtin::Error, &[]).unwrap().unwrap();
        // An error takes a subclass's prototype and stays an error.
        set_prototype_of(&mut h, e, sub).unwrap();
        assert!(instance_of(&h, e, Builtin::Error).unwrap());
        assert_eq!(get_prototype_of(&h, e).unwrap(), sub);
        // An error never becomes a plain object, nor a plain object's prototype a Date's.
        assert!(set_prototype_of(&mut h, e, Value::NULL).is_err());
        assert!(set_prototype_of(&mut h, a, Builtin::DatePrototype.value()).is_err());
        assert!(get_prototype_of(&h, a).is_err());
    }
}
