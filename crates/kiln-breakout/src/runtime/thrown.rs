//! A value thrown out of the function's handler, answered as the Node runtime answers it: the
//! error's body (`errorType`, `errorMessage`, `trace`) and the `Invoke Error` log line the shim
//! writes (the error as JSON: `errorType`, `errorMessage`, `code`, its own enumerable fields,
//! `stack`). The fast path has no V8 stack: its `trace` and `stack` are one line,
//! `errorType: errorMessage`, where Node's list the frames. A thrown value this does not
//! model (an object that is not an error, an error whose name is not a string, a field of an
//! error that has no JSON here, `undefined` or `null`) is a miss, and Node answers.

use super::builtin::Builtin;
use super::heap::{Heap, HOST_SLOT};
use super::value::{Value, TAG_OBJECT};
use super::{get, json, ops, Miss};

/// What the handler's throw is answered with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionError {
    /// The error's body: `{"errorType", "errorMessage", "trace"}`.
    pub body: String,
    /// The message of the `ERROR` line the runtime writes: `Invoke Error \t{…}`.
    pub log: String,
}

fn refuse(what: &str) -> Miss {
    Miss::new(format!("a thrown {what} not compiled"))
}

/// Whether `v` is an error an `Error` constructor made (V8's "native error").
fn is_native_error(heap: &Heap<'_>, v: Value) -> Result<bool, Miss> {
    if v.tag() != TAG_OBJECT {
        return Ok(false);
    }
    let class = Builtin::from_value(heap.chain_end(v)?);
    if !class.is_some_and(super::errors::is_error_prototype) {
        return Ok(false);
    }
    let slot = heap.value(v.address() + HOST_SLOT)?;
    Ok(slot.is_string() || slot == Value::UNDEFINED)
}

fn text(heap: &mut Heap<'_>, s: &str) -> Result<Value, Miss> {
    heap.str(s)
}

fn set(heap: &mut Heap<'_>, object: Value, key: &str, value: Value) -> Result<(), Miss> {
    let key = heap.str(key)?;
    heap.set_own(object, key, value)
}

fn stringify(heap: &mut Heap<'_>, v: Value) -> Result<String, Miss> {
    let units = json::stringify(heap, v)?.ok_or_else(|| refuse("value with no JSON form"))?;
    String::from_utf16(&units).map_err(|_| refuse("error that is not Unicode"))
}

/// The answer to `value` thrown out of the handler.
pub fn function_error(heap: &mut Heap<'_>, value: Value) -> Result<FunctionError, Miss> {
    let (error_type, message, native) = if is_native_error(heap, value)? {
        let key = heap.str("name")?;
        let name = get(heap, value, key)?;
        let key = heap.str("message")?;
        let message = get(heap, value, key)?;
        if !name.is_string() || heap.string_len(name)? == 0 || !message.is_string() {
            return Err(refuse("error whose name or message is not text"));
        }
        (name, message, true)
    } else if value.is_object() {
        return Err(refuse("object that is not an error"));
    } else if value.is_nullish() {
        // The shim answers a synchronous handler's `undefined` thrown with `null` (its callback
        // called with no error), an async handler's with "handled": the fast path does not
        // tell them apart.
        return Err(refuse("undefined or null"));
    } else {
        let kind = match value {
            Value::TRUE | Value::FALSE => "boolean",
            v if v.is_string() => "string",
            _ => "number",
        };
        let message = ops::to_string(heap, value)?;
        (text(heap, kind)?, message, false)
    };
    // The fast path's stack: the first line of V8's.
    let first = {
        let mut units = heap.units(error_type)?;
        units.extend(": ".encode_utf16());
        units.extend(heap.units(message)?);
        heap.string(&units)?
    };
    let lines = heap.array_from(&[first])?;
    let body = heap.object(Value::NULL)?;
    set(heap, body, "errorType", error_type)?;
    set(heap, body, "errorMessage", message)?;
    let trace = if native { lines } else { heap.array(0)? };
    set(heap, body, "trace", trace)?;
    let body = stringify(heap, body)?;

    // The runtime logs an Error: a thrown value that is not one as `new Error(String(value))`.
    let logged = heap.object(Value::NULL)?;
    let (log_type, log_message) = if native {
        (error_type, message)
    } else {
        let error = text(heap, "Error")?;
        (error, message)
    };
    set(heap, logged, "errorType", log_type)?;
    set(heap, logged, "errorMessage", log_message)?;
    if native {
        let key = heap.str("code")?;
        let code = get(heap, value, key)?;
        set(heap, logged, "code", code)?;
        for (key, field) in heap.entries(value)? {
            heap.set_own(logged, key, field)?;
        }
    } else {
        set(heap, logged, "code", Value::UNDEFINED)?;
    }
    let stack = {
        let mut units = heap.units(log_type)?;
        units.extend(": ".encode_utf16());
        units.extend(heap.units(log_message)?);
        let line = heap.string(&units)?;
        heap.array_from(&[line])?
    };
    set(heap, logged, "stack", stack)?;
    let log = format!("Invoke Error \t{}", stringify(heap, logged)?);
    Ok(FunctionError { body, log })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_and_other_values_are_answered_as_the_runtime_answers_them() {
        let mut mem = vec![0u8; 1 << 16];
        let mut heap = Heap::empty(&mut mem).unwrap();
        let message = heap.str("bad \"x\"").unwrap();
        let error = super::super::errors::construct(&mut heap, Builtin::TypeError, &[message])
            .unwrap()
            .unwrap();
        let field = heap.str("field").unwrap();
        let sha = heap.str("sha").unwrap();
        heap.set_own(error, field, sha).unwrap();
        let answer = function_error(&mut heap, error).unwrap();
        assert_eq!(
            answer.body,
            r#"{"errorType":"TypeError","errorMessage":"bad \"x\"","trace":["TypeError: bad \"x\""]}"#
        );
        assert_eq!(
            answer.log,
            r#"Invoke Error 	{"errorType":"TypeError","errorMessage":"bad \"x\"","field":"sha","stack":["TypeError: bad \"x\""]}"#
        );
        let thrown = heap.str("plain").unwrap();
        let answer = function_error(&mut heap, thrown).unwrap();
        assert_eq!(
            answer.body,
            r#"{"errorType":"string","errorMessage":"plain","trace":[]}"#
        );
        assert_eq!(
            answer.log,
            r#"Invoke Error 	{"errorType":"Error","errorMessage":"plain","stack":["Error: plain"]}"#
        );
        // The shim's answer to these depends on whether the handler is async.
        assert!(function_error(&mut heap, Value::NULL).is_err());
        assert!(function_error(&mut heap, Value::UNDEFINED).is_err());
        let object = heap.object(Value::NULL).unwrap();
        assert!(function_error(&mut heap, object).is_err());
    }
}
