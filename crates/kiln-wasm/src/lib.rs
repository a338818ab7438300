//! kiln's WebAssembly execution engine: the core of the `wasm` runtime.
//!
//! - [`Engine`]: one wasmtime engine per process, with the pooling instance allocator,
//!   copy-on-write memory images and epoch interruption driven by a ticker thread.
//! - [`ModuleCache`]: precompiled artifacts on disk, content-addressed, loaded by mmap; it also
//!   pre-initialises modules that export an init function (Wizer) and caches the snapshot.
//! - [`Engine::invoke`]: one fresh instance per request, WASI preview 1 `_start` commands, the
//!   event on stdin and the response on stdout (the ABI is in this crate's README).
//!
//! Everything here is blocking: the agent calls it from `tokio::task::spawn_blocking` (or its
//! own threads), never from its event loop, since guest code runs on the calling thread.

mod cache;
mod engine;
mod error;
mod invoke;
mod output;
mod preinit;
pub mod session;
mod session_calls;

pub use cache::{Eviction, FunctionModule, ModuleCache, PreInit};
pub use engine::{Engine, EngineConfig};
pub use error::WasmError;
pub use invoke::{FunctionError, Request, Response, MAX_RESPONSE_BYTES};
pub use session::{SessionState, StateError, ValueKind};
