//! The S3 client of `@aws-sdk/client-s3` as intrinsics: `require` of the package gives its
//! namespace (a builtin), `new S3Client(config)` and `new GetObjectCommand(input)` (Head, Put,
//! Delete, ListObjectsV2) host objects, and `client.send(command)` one host call,
//! `Intrinsics::call("s3.GetObject", [input])`, whose JSON answer becomes the command's
//! output: a `Body` with `transformToString()`, `LastModified` as a `Date`. The platform
//! stages writes and answers reads from what is staged (kiln's `agent/breakout/effects.rs`).
//! What the fast path does not model misses: a client configured with its own endpoint or
//! credentials, a command input with fields other than those listed, a body other than a
//! string, any error the store answers (Node reruns the request and gets the real one).

use super::builtin::Builtin;
use super::heap::Heap;
use super::value::Value;
use super::{from_json, to_json, Guest, Miss};

/// The commands the fast path sends, and the input fields each may carry.
const COMMANDS: &[(Builtin, &str, &[&str])] = &[
    (Builtin::S3GetObjectCommand, "GetObject", &["Bucket", "Key"]),
    (
        Builtin::S3HeadObjectCommand,
        "HeadObject",
        &["Bucket", "Key"],
    ),
    (
        Builtin::S3PutObjectCommand,
        "PutObject",
        &["Bucket", "Key", "Body", "ContentType", "Metadata"],
    ),
    (
        Builtin::S3DeleteObjectCommand,
        "DeleteObject",
        &["Bucket", "Key"],
    ),
    (
        Builtin::S3ListObjectsV2Command,
        "ListObjectsV2",
        &[
            "Bucket",
            "Prefix",
            "Delimiter",
            "MaxKeys",
            "StartAfter",
            "ContinuationToken",
        ],
    ),
];

/// The intrinsic a call of `send` with a command of `kind` is.
pub fn intrinsic_name(kind: &str) -> String {
    format!("s3.{kind}")
}

/// `require(specifier)`: only the S3 client's package is an intrinsic.
pub fn require(heap: &mut Heap<'_>, specifier: Value) -> Result<Value, Miss> {
    let name = if specifier.is_string() {
        heap.rust_string(specifier)?
    } else {
        String::new()
    };
    if name == "@aws-sdk/client-s3" {
        return Ok(Builtin::S3Module.value());
    }
    Err(Miss::new(format!(
        "builtin require of {name:?} not compiled"
    )))
}

/// `new S3Client(config)` and `new XCommand(input)`; `None` for other builtins.
pub fn construct(
    guest: &mut dyn Guest,
    builtin: Builtin,
    args: &[Value],
) -> Option<Result<Value, Miss>> {
    let arg = args.first().copied().unwrap_or(Value::UNDEFINED);
    if builtin == Builtin::S3Client {
        return Some(client(&mut guest.heap(), arg));
    }
    let (_, kind, _) = COMMANDS.iter().find(|(b, _, _)| *b == builtin)?;
    Some(command(&mut guest.heap(), kind, arg))
}

fn client(heap: &mut Heap<'_>, config: Value) -> Result<Value, Miss> {
    if config.tag() == super::value::TAG_OBJECT {
        for (key, _) in heap.entries(config)? {
            let key = heap.rust_string(key)?;
            if matches!(key.as_str(), "endpoint" | "credentials" | "customUserAgent") {
                return Err(Miss::new(format!(
                    "an S3Client with its own {key}: only kiln's store is an intrinsic"
                )));
            }
        }
    }
    heap.host_object(Builtin::S3ClientPrototype.value(), Value::UNDEFINED)
}

/// A command: its slot is `[kind, input]`.
fn command(heap: &mut Heap<'_>, kind: &str, input: Value) -> Result<Value, Miss> {
    let kind = heap.str(kind)?;
    let slot = heap.array_from(&[kind, input])?;
    heap.host_object(Builtin::S3CommandPrototype.value(), slot)
}

/// `client.send(command)`.
pub fn send(guest: &mut dyn Guest, this: Value, command: Value) -> Result<Value, Miss> {
    let (kind, input) = {
        let heap = guest.heap();
        if !heap.is_host(this)? || heap.proto(this)? != Builtin::S3ClientPrototype.value() {
            return Err(Miss::new("send called on something other than an S3Client"));
        }
        if !heap.is_host(command)? || heap.proto(command)? != Builtin::S3CommandPrototype.value() {
            return Err(Miss::new("S3Client.send of something other than a command"));
        }
        let slot = heap.host_slot(command)?;
        let kind = heap.element(slot, 0)?;
        let kind = heap.rust_string(kind)?;
        let input = heap.element(slot, 1)?;
        (kind, input)
    };
    let input = checked_input(&mut guest.heap(), &kind, input)?;
    let answer = guest.intrinsics().call(&intrinsic_name(&kind), &[input])?;
    output(&mut guest.heap(), &answer)
}

/// The input as JSON, with only the fields the command may carry, each of its type.
fn checked_input(heap: &mut Heap<'_>, kind: &str, input: Value) -> Result<serde_json::Value, Miss> {
    let (_, _, fields) = COMMANDS
        .iter()
        .find(|(_, k, _)| *k == kind)
        .ok_or_else(|| Miss::new(format!("S3 command {kind} not compiled")))?;
    if !input.is_object() || input.tag() != super::value::TAG_OBJECT || heap.is_host(input)? {
        return Err(Miss::new(format!(
            "{kind} with an input that is not a plain object"
        )));
    }
    for (key, value) in heap.entries(input)? {
        let key = heap.rust_string(key)?;
        if !fields.contains(&key.as_str()) {
            return Err(Miss::new(format!("{kind} with {key} not compiled")));
        }
        let ok = match key.as_str() {
            "Metadata" => value.tag() == super::value::TAG_OBJECT && !heap.is_host(value)?,
            "MaxKeys" => value.is_number(),
            _ => value.is_string(),
        };
        if !ok && value != Value::UNDEFINED {
            return Err(Miss::new(format!(
                "{kind} with a {key} of a type not compiled (a Body must be a string)"
            )));
        }
        // The SDK logs a warning for an empty body (it cannot tell its length): Node's to print.
        if key == "Body" && value.is_string() && heap.string_len(value)? == 0 {
            return Err(Miss::new(format!("{kind} with an empty Body not compiled")));
        }
    }
    to_json(heap, input)
}

/// The command's output from the platform's answer: `Body` (text) becomes a body with
/// `transformToString()`, each `LastModified` (milliseconds) a `Date`. The output, each
/// listed object and a `Metadata` of more than one name are records: their fields read as
/// the SDK's do, but enumerating them misses (the SDK's objects have more fields, such as
/// `$metadata`, in an order of their own).
fn output(heap: &mut Heap<'_>, answer: &serde_json::Value) -> Result<Value, Miss> {
    let out = from_json(heap, answer)?;
    if out.tag() != super::value::TAG_OBJECT {
        return Err(Miss::new("an S3 answer that is not an object"));
    }
    let body_key = heap.str("Body")?;
    if let Some(text) = heap.get_own(out, body_key)? {
        let body = heap.host_object(Builtin::S3BodyPrototype.value(), text)?;
        heap.set_own(out, body_key, body)?;
    }
    let metadata_key = heap.str("Metadata")?;
    if let Some(metadata) = heap.get_own(out, metadata_key)? {
        if metadata.tag() == super::value::TAG_OBJECT && heap.entries(metadata)?.len() > 1 {
            let record = heap.host_object(Builtin::S3OutputPrototype.value(), metadata)?;
            heap.set_own(out, metadata_key, record)?;
        }
    }
    dates(heap, out)?;
    let contents_key = heap.str("Contents")?;
    if let Some(contents) = heap.get_own(out, contents_key)? {
        if contents.tag() == super::value::TAG_ARRAY {
            for (i, item) in heap.elements(contents)?.into_iter().enumerate() {
                dates(heap, item)?;
                let record = heap.host_object(Builtin::S3OutputPrototype.value(), item)?;
                heap.set_element(contents, i as u32, record)?;
            }
        }
    }
    heap.host_object(Builtin::S3OutputPrototype.value(), out)
}

fn dates(heap: &mut Heap<'_>, object: Value) -> Result<(), Miss> {
    if object.tag() != super::value::TAG_OBJECT {
        return Ok(());
    }
    let key = heap.str("LastModified")?;
    if let Some(ms) = heap.get_own(object, key)? {
        if ms.is_number() {
            let date = heap.host_object(Builtin::DatePrototype.value(), ms)?;
            heap.set_own(object, key, date)?;
        }
    }
    Ok(())
}

/// `body.transformToString()` (UTF-8, the default; another encoding misses).
pub fn transform_to_string(heap: &Heap<'_>, this: Value, encoding: Value) -> Result<Value, Miss> {
    if !heap.is_host(this)? || heap.proto(this)? != Builtin::S3BodyPrototype.value() {
        return Err(Miss::new(
            "transformToString called on something other than a body",
        ));
    }
    if encoding != Value::UNDEFINED {
        return Err(Miss::new("transformToString with an encoding not compiled"));
    }
    heap.host_slot(this)
}
