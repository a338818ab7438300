//! The `kiln` imports a guest's store links: each host call of the session ABI
//! ([`crate::session`]) checked against the guest's memory and handed to the request's
//! [`SessionState`](crate::session::SessionState).

use bytes::Bytes;
use wasmtime::{Caller, Linker, Memory};

use crate::invoke::HostState;
use crate::session::{BadSessionCall, StateError, ValueKind, INVALID, NOT_FOUND, NO_SESSION};

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
