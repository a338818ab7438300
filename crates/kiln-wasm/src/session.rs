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
pub struct BadSessionCall(pub(crate) String);

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
    /// The code a host call answers the guest with.
    pub(crate) fn code(&self) -> i64 {
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

/// What [`crate::Request::session`] holds.
pub type SharedSessionState = Arc<dyn SessionState>;
