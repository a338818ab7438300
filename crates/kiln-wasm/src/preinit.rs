//! Pre-initialisation (Wizer): run a module's init function once at deploy time and keep the
//! resulting memory and globals as a new module, so each request's fresh instance starts with
//! the init already done.

use std::time::Duration;

use wasmtime::{Instance, Module, Store};
use wasmtime_wasi::WasiCtxBuilder;
use wasmtime_wizer::{InstanceState, ModuleContext, SnapshotVal, ValType, Wizer};

use crate::invoke::{block_on, HostState, MemoryLimiter};
use crate::Engine;

/// The init exports kiln recognises, in order: Wizer's convention, then kiln's own name.
pub(crate) const INIT_EXPORTS: [&str; 2] = ["wizer.initialize", "kiln_init"];
/// Lambda gives a function's init phase 10 seconds.
const INIT_TIMEOUT: Duration = Duration::from_secs(10);
/// Part of the snapshot's cache key: a new Wizer may snapshot differently.
pub(crate) const WIZER_ID: &str = "wasmtime-wizer-48";

/// Runs `init_func` of `wasm` and returns the snapshot module, or why it could not.
pub(crate) fn snapshot(engine: &Engine, wasm: &[u8], init_func: &str) -> Result<Vec<u8>, String> {
    let mut wizer = Wizer::new();
    wizer.init_func(init_func);
    let (cx, instrumented) = wizer.instrument(wasm).map_err(|e| format!("{e:#}"))?;
    let module = Module::new(&engine.inner.engine, &instrumented)
        .map_err(|e| format!("compiling the instrumented module: {e:#}"))?;
    block_on(run_and_snapshot(engine, &wizer, &cx, &module, init_func))
}

async fn run_and_snapshot(
    engine: &Engine,
    wizer: &Wizer,
    cx: &ModuleContext<'_>,
    module: &Module,
    init_func: &str,
) -> Result<Vec<u8>, String> {
    // The init runs with WASI linked but nothing to reach: no stdin, env, arguments or files,
    // so the snapshot cannot capture anything of the deploying host.
    let state = HostState {
        wasi: WasiCtxBuilder::new().build_p1(),
        limiter: MemoryLimiter::new((engine.config().max_memory_mb as usize) << 20),
        // Init belongs to no request, so to no session.
        session: None,
    };
    let mut store = Store::new(&engine.inner.engine, state);
    store.limiter(|state| &mut state.limiter);
    store.set_epoch_deadline(engine.deadline_ticks(INIT_TIMEOUT));
    store.epoch_deadline_trap();
    let instance = engine
        .inner
        .linker
        .instantiate_async(&mut store, module)
        .await
        .map_err(|e| format!("instantiating for pre-initialisation: {e:#}"))?;
    let init = instance
        .get_typed_func::<(), ()>(&mut store, init_func)
        .map_err(|e| format!("`{init_func}` is not a function of type [] -> []: {e:#}"))?;
    init.call_async(&mut store, ())
        .await
        .map_err(|e| format!("`{init_func}` failed: {e:#}"))?;
    let mut state = Snapshotted {
        store: &mut store,
        instance,
    };
    wizer
        .snapshot(cx, &mut state)
        .await
        .map_err(|e| format!("taking the snapshot: {e:#}"))
}

/// Wizer's view of the initialised instance: the globals and memories it exported while
/// instrumenting the module.
struct Snapshotted<'a> {
    store: &'a mut Store<HostState>,
    instance: Instance,
}

impl InstanceState for Snapshotted<'_> {
    async fn global_get(&mut self, name: &str, _: ValType) -> SnapshotVal {
        let global = self
            .instance
            .get_global(&mut *self.store, name)
            .expect("Wizer's instrumentation exports every global it asks for");
        match global.get(&mut *self.store) {
            wasmtime::Val::I32(x) => SnapshotVal::I32(x),
            wasmtime::Val::I64(x) => SnapshotVal::I64(x),
            wasmtime::Val::F32(x) => SnapshotVal::F32(x),
            wasmtime::Val::F64(x) => SnapshotVal::F64(x),
            wasmtime::Val::V128(x) => SnapshotVal::V128(x.as_u128()),
            // Wizer instruments only numeric globals; reference types are rejected earlier.
            other => unreachable!("Wizer asked for a non-numeric global: {other:?}"),
        }
    }

    async fn memory_contents(&mut self, name: &str, contents: impl FnOnce(&[u8]) + Send) {
        let memory = self
            .instance
            .get_memory(&mut *self.store, name)
            .expect("Wizer's instrumentation exports every memory it asks for");
        contents(memory.data(&*self.store))
    }
}
