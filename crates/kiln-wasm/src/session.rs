//! Session state for wasm guests (XFaaS's `Read_state` / `Write_state`): host calls in the
//! import module `kiln`, over whatever store of state the embedder hands a request.
//!
//! The engine knows nothing of logs or limits: a request carries an
//! `Arc<dyn SessionState>` (the agent's view of one invocation of one session), and each host
//! call is one method call on it, with the guest's memory checked on the way in and out. A
//! request without a session, and pre-initialisation, get [`NO_SESSION`] from every call.
//!
//! The ABI (all integers i32 unless said; pointers and lengths address the guest's memory):
//!
//! | import | returns |
//! |---|---|
//! | `session_id(buf, cap) -> i64` | the id's length (copied when it fits `cap`) |
//! | `session_get(key, key_len, buf, cap) -> i64` | the value's length (copied when it fits), or [`NOT_FOUND`] |
//! | `session_put(key, key_len, value, value_len, kind)` | 0; `kind` 0 stores bytes, 1 JSON (checked) |
//! | `session_delete(key, key_len)` | 0 |
//! | `session_keys(buf, cap) -> i64` | the bytes of the keys, each followed by a NUL (copied when it fits) |
//! | `session_begin()` | 0: the writes from here on are one transaction |
//! | `session_end(commit)` | 0: keeps (`commit` ≠ 0) or drops the transaction's writes |
//!
//! Negative results are the error codes below. A pointer outside the guest's memory is a trap.

use std::sync::Arc;

use bytes::Bytes;
use wasmtime::{Caller, Linker, Memory};

use crate::invoke::HostState;

/// The key has no value.
pub const NOT_FOUND: i64 = -1;
/// The request has no session (the function has sessions off, or the request had no id).
pub const NO_SESSION: i64 = -2;
/// The key or value is invalid: an empty, too long or non-UTF-8 key, a JSON value that is not
/// JSON, an unknown kind, or `session_end` without `session_begin`.
pub const INVALID: i64 = -3;
/// The write would pass a limit (the value's size, or the session's); nothing changed.
pub const LIMIT_EXCEEDED: i64 = -4;
/// The session ended (by its TTL or the API) while the request ran.
pub const ENDED: i64 = -5;

/// A session call the guest made wrongly (a pointer outside its memory, no exported memory):
/// it ends the request as a trap does.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BadSessionCall(String);

/// Why a write was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateError {
    /// The key or the value is malformed.
    Invalid(String),
    /// A limit was reached; nothing changed.
    LimitExceeded(String),
    /// The session is gone.
    Ended,
}

impl StateError {
    fn code(&self) -> i64 {
        match self {
            StateError::Invalid(_) => INVALID,
            StateError::LimitExceeded(_) => LIMIT_EXCEEDED,
            StateError::Ended => ENDED,
        }
    }
}

/// How a value was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueKind {
    Bytes,
    Json,
}

/// One invocation's view of its session's state. Reads see the invocation's own writes; when
/// they become durable is the embedder's business (the agent commits them with the answer).
/// Calls come from the thread running the guest, one at a time.
pub trait SessionState: Send + Sync {
    fn id(&self) -> &str;
    fn get(&self, key: &str) -> Option<Bytes>;
    fn put(&self, key: &str, kind: ValueKind, value: Bytes) -> Result<(), StateError>;
    fn delete(&self, key: &str) -> Result<(), StateError>;
    /// The keys, sorted.
    fn keys(&self) -> Vec<String>;
    /// Starts a transaction: the writes until [`SessionState::end`] stand or fall together.
    fn begin(&self) -> Result<(), StateError>;
    /// Ends the transaction, keeping its writes if `commit`, else undoing them.
    fn end(&self, commit: bool) -> Result<(), StateError>;
}

impl std::fmt::Debug for dyn SessionState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionState")
            .field("id", &self.id())
            .finish()
    }
}

/// Adds the `kiln` imports to `linker`.
pub(crate) fn add_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    linker.func_wrap(
        "kiln",
        "session_id",
        |mut caller: Caller<'_, HostState>, buf: u32, cap: u32| -> wasmtime::Result<i64> {
            let Some(session) = caller.data().session.clone() else {
                return Ok(NO_SESSION);
            };
            copy_out(&mut caller, session.id().as_bytes(), buf, cap)
        },
    )?;
    linker.func_wrap(
        "kiln",
        "session_get",
        |mut caller: Caller<'_, HostState>,
         key: u32,
         key_len: u32,
         buf: u32,
         cap: u32|
         -> wasmtime::Result<i64> {
            let Some(session) = caller.data().session.clone() else {
                return Ok(NO_SESSION);
            };
            let key = match read_key(&mut caller, key, key_len)? {
                Ok(key) => key,
                Err(code) => return Ok(code),
            };
            match session.get(&key) {
                Some(value) => copy_out(&mut caller, &value, buf, cap),
                None => Ok(NOT_FOUND),
            }
        },
    )?;
    linker.func_wrap(
        "kiln",
        "session_put",
        |mut caller: Caller<'_, HostState>,
         key: u32,
         key_len: u32,
         value: u32,
         value_len: u32,
         kind: u32|
         -> wasmtime::Result<i32> {
            let Some(session) = caller.data().session.clone() else {
                return Ok(NO_SESSION as i32);
            };
            let key = match read_key(&mut caller, key, key_len)? {
                Ok(key) => key,
                Err(code) => return Ok(code as i32),
            };
            let kind = match kind {
                0 => ValueKind::Bytes,
                1 => ValueKind::Json,
                _ => return Ok(INVALID as i32),
            };
            let (memory, range) = guest_range(&mut caller, value, value_len)?;
            let value = Bytes::copy_from_slice(&memory.data(&caller)[range]);
            if kind == ValueKind::Json
                && serde_json::from_slice::<serde_json::Value>(&value).is_err()
            {
                return Ok(INVALID as i32);
            }
            Ok(status(session.put(&key, kind, value)))
        },
    )?;
    linker.func_wrap(
        "kiln",
        "session_delete",
        |mut caller: Caller<'_, HostState>, key: u32, key_len: u32| -> wasmtime::Result<i32> {
            let Some(session) = caller.data().session.clone() else {
                return Ok(NO_SESSION as i32);
            };
            let key = match read_key(&mut caller, key, key_len)? {
                Ok(key) => key,
                Err(code) => return Ok(code as i32),
            };
            Ok(status(session.delete(&key)))
        },
    )?;
    linker.func_wrap(
        "kiln",
        "session_keys",
        |mut caller: Caller<'_, HostState>, buf: u32, cap: u32| -> wasmtime::Result<i64> {
            let Some(session) = caller.data().session.clone() else {
                return Ok(NO_SESSION);
            };
            let mut out = Vec::new();
            for key in session.keys() {
                out.extend_from_slice(key.as_bytes());
                out.push(0);
            }
            copy_out(&mut caller, &out, buf, cap)
        },
    )?;
    linker.func_wrap(
        "kiln",
        "session_begin",
        |caller: Caller<'_, HostState>| -> i32 {
            match &caller.data().session {
                Some(session) => status(session.begin()),
                None => NO_SESSION as i32,
            }
        },
    )?;
    linker.func_wrap(
        "kiln",
        "session_end",
        |caller: Caller<'_, HostState>, commit: u32| -> i32 {
            match &caller.data().session {
                Some(session) => status(session.end(commit != 0)),
                None => NO_SESSION as i32,
            }
        },
    )?;
    Ok(())
}

fn status(result: Result<(), StateError>) -> i32 {
    match result {
        Ok(()) => 0,
        Err(error) => error.code() as i32,
    }
}

/// The guest's exported memory and the range `[ptr, ptr + len)` in it; a trap if it has no
/// memory or the range is outside it (the guest passed a bad pointer).
fn guest_range(
    caller: &mut Caller<'_, HostState>,
    ptr: u32,
    len: u32,
) -> wasmtime::Result<(Memory, std::ops::Range<usize>)> {
    let memory = caller
        .get_export("memory")
        .and_then(|export| export.into_memory())
        .ok_or_else(|| {
            wasmtime::Error::new(BadSessionCall(
                "kiln session calls need an exported `memory`".into(),
            ))
        })?;
    let (start, end) = (ptr as usize, ptr as usize + len as usize);
    if end > memory.data_size(&*caller) {
        return Err(wasmtime::Error::new(BadSessionCall(format!(
            "a kiln session call passed memory [{start}, {end}) outside the guest's memory"
        ))));
    }
    Ok((memory, start..end))
}

/// The key at `[ptr, ptr + len)`: `Ok(Err(INVALID))` when it is not UTF-8 or empty.
fn read_key(
    caller: &mut Caller<'_, HostState>,
    ptr: u32,
    len: u32,
) -> wasmtime::Result<Result<String, i64>> {
    let (memory, range) = guest_range(caller, ptr, len)?;
    if range.is_empty() {
        return Ok(Err(INVALID));
    }
    Ok(std::str::from_utf8(&memory.data(&*caller)[range])
        .map(str::to_string)
        .map_err(|_| INVALID))
}

/// Copies `bytes` to `[buf, buf + cap)` if they fit, and returns their length either way, so
/// that a guest whose buffer was too small can call again with a larger one.
fn copy_out(
    caller: &mut Caller<'_, HostState>,
    bytes: &[u8],
    buf: u32,
    cap: u32,
) -> wasmtime::Result<i64> {
    if bytes.len() <= cap as usize {
        let (memory, range) = guest_range(caller, buf, bytes.len() as u32)?;
        memory.data_mut(&mut *caller)[range].copy_from_slice(bytes);
    }
    Ok(bytes.len() as i64)
}

/// What [`crate::Request::session`] holds.
pub type SharedSessionState = Arc<dyn SessionState>;
