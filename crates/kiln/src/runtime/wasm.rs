//! `wasm`: WASI preview 1 command modules from any language (Go `GOOS=wasip1`, Rust, C with
//! wasi-libc, WAT), run by wasmtime inside kiln's node agent, one fresh instance per request.
//!
//! There is no sandbox process: the wasm instance is the sandbox (linear memory bounds, no
//! imports but WASI preview 1, no sockets, the package read-only at `/var/task`). The handler
//! names the module's file in the package, e.g. `function.wasm`. The function ABI (the event on
//! stdin, the response on stdout) is in the README, "WebAssembly functions".

use kiln_sandbox::Mount;

use super::{Protocol, Runtime};
use crate::function::InstanceSpec;

pub const NAME: &str = "wasm";

pub struct Wasm;

impl Runtime for Wasm {
    fn name(&self) -> &str {
        NAME
    }

    fn protocol(&self) -> Protocol {
        Protocol::Wasm
    }

    fn mounts(&self) -> Vec<Mount> {
        Vec::new()
    }

    fn argv(&self, _spec: &InstanceSpec) -> Vec<String> {
        Vec::new()
    }

    fn env(&self, _spec: &InstanceSpec) -> Vec<(String, String)> {
        Vec::new()
    }
}
