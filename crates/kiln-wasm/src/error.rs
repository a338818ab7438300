//! Errors of the engine itself. A function's own failures (traps, timeouts, running out of
//! memory, a non-zero exit) are not errors here: they are [`crate::FunctionError`]s inside a
//! successful [`crate::Response`], as Lambda answers them.

use std::path::PathBuf;

/// What went wrong in kiln's wasm engine (not in the function).
#[derive(Debug, thiserror::Error)]
pub enum WasmError {
    /// The engine could not be created with this configuration
    #[error("cannot create the wasm engine: {0}")]
    EngineConfig(String),
    /// The module is not valid WebAssembly (binary or text) or uses features kiln does not enable
    #[error("the module is not valid WebAssembly: {0}")]
    InvalidModule(String),
    /// The module cannot be compiled for this engine
    #[error("cannot compile the module: {0}")]
    Compile(String),
    /// The module's imports cannot be satisfied (kiln provides WASI preview 1 and its `kiln` session calls)
    #[error("cannot link the module (kiln provides only WASI preview 1 and the `kiln` session imports): {0}")]
    Link(String),
    /// The module cache directory cannot be used
    #[error("module cache {path}: {source}")]
    CacheIo {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// All instance slots of the pool are in use: retry later or raise `max_instances`
    #[error("all {0} wasm instance slots are busy")]
    PoolExhausted(u32),
    /// The function's code directory cannot be opened for `/var/task`
    #[error("cannot open the code directory {path} for /var/task: {message}")]
    CodeDir { path: PathBuf, message: String },
    /// The requested memory size is above the engine's per-instance maximum
    #[error("memory size {requested} MB is above the engine's maximum of {max} MB")]
    MemoryTooLarge { requested: u32, max: u32 },
}
