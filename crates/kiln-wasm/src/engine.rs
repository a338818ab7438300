//! The process-wide wasmtime engine: configuration, the instance pool and the epoch ticker.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use wasmtime::{InstanceAllocationStrategy, Linker, PoolingAllocationConfig};

use crate::invoke::HostState;
use crate::WasmError;

const MIB: u64 = 1 << 20;
/// Address space reserved per linear memory: all of wasm32's 4 GiB, so that the compiled code
/// needs no bounds checks (the guard region catches any out-of-bounds access).
const MEMORY_RESERVATION: u64 = 4 << 30;
const MEMORY_GUARD: u64 = 32 * MIB;

/// How the engine is sized. The defaults suit one node of kiln.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Instances that may exist at once: the pool's slots (each a linear memory, a table and
    /// an async stack). Requests beyond it fail with [`WasmError::PoolExhausted`].
    pub max_instances: u32,
    /// The largest memory a function may be given (its MemorySize), in MB.
    pub max_memory_mb: u32,
    /// Granularity of timeouts: the epoch ticker's period.
    pub epoch_tick: Duration,
    /// Elements per table slot in the pool. Go's binaries have tables of ~10k functions.
    pub max_table_elements: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            max_instances: 128,
            max_memory_mb: 4096,
            epoch_tick: Duration::from_millis(10),
            max_table_elements: 100_000,
        }
    }
}

/// kiln's wasm engine. Cheap to clone (an `Arc`), shared by every thread that invokes.
#[derive(Clone)]
pub struct Engine {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) engine: wasmtime::Engine,
    pub(crate) linker: Linker<HostState>,
    pub(crate) config: EngineConfig,
    /// Held for its `Drop`, which stops the thread.
    _ticker: Ticker,
}

impl Engine {
    /// Creates the engine and starts its epoch ticker thread.
    pub fn new(config: EngineConfig) -> Result<Engine, WasmError> {
        if u64::from(config.max_memory_mb) * MIB > MEMORY_RESERVATION {
            return Err(WasmError::EngineConfig(format!(
                "max_memory_mb {} is above wasm32's 4096 MB",
                config.max_memory_mb
            )));
        }
        if config.epoch_tick.is_zero() || config.max_instances == 0 {
            return Err(WasmError::EngineConfig(
                "epoch_tick and max_instances must be positive".into(),
            ));
        }
        let mut pool = PoolingAllocationConfig::new();
        // Pre-initialisation at load time takes a slot too, for the length of the init.
        let slots = config.max_instances;
        pool.total_core_instances(slots)
            .total_memories(slots)
            .total_tables(slots)
            .total_stacks(slots)
            .total_component_instances(0)
            .max_memories_per_module(1)
            .max_tables_per_module(1)
            .table_elements(config.max_table_elements)
            .max_memory_size((u64::from(config.max_memory_mb) * MIB) as usize)
            // A freed slot's memory is returned to the kernel (madvise), so idle slots cost
            // address space but no resident memory; the next instance of the same module reuses
            // the slot's copy-on-write mapping of the module's image.
            .linear_memory_keep_resident(0);

        let mut wasm = wasmtime::Config::new();
        wasm.allocation_strategy(InstanceAllocationStrategy::Pooling(pool))
            .memory_init_cow(true)
            .memory_reservation(MEMORY_RESERVATION)
            .memory_guard_size(MEMORY_GUARD)
            // Epochs, not fuel: a deadline check is one load and compare at loop headers and
            // function entries, where fuel counts every basic block (wasmtime documents fuel as
            // noticeably slower). Lambda's timeout is wall-clock time anyway, which is what an
            // epoch deadline measures.
            .epoch_interruption(true)
            .wasm_component_model(false);
        let engine =
            wasmtime::Engine::new(&wasm).map_err(|e| WasmError::EngineConfig(format!("{e:#}")))?;

        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p1::add_to_linker_async(&mut linker, |state: &mut HostState| {
            &mut state.wasi
        })
        .map_err(|e| WasmError::EngineConfig(format!("{e:#}")))?;
        crate::session_calls::add_to_linker(&mut linker)
            .map_err(|e| WasmError::EngineConfig(format!("{e:#}")))?;

        let ticker = Ticker::start(engine.clone(), config.epoch_tick)?;
        Ok(Engine {
            inner: Arc::new(Inner {
                engine,
                linker,
                config,
                _ticker: ticker,
            }),
        })
    }

    /// The engine's configuration.
    pub fn config(&self) -> &EngineConfig {
        &self.inner.config
    }

    /// Address space the instance pool reserves for linear memories, in bytes: virtual, not
    /// resident (each slot is 4 GiB + guard so that compiled code needs no bounds checks).
    pub fn pool_address_space_bytes(&self) -> u64 {
        u64::from(self.inner.config.max_instances) * (MEMORY_RESERVATION + MEMORY_GUARD)
    }

    /// The most resident memory the pool's linear memories can use at once, in bytes: every
    /// slot at `max_memory_mb`. What an invocation can use is its own `memory_mb`, which is
    /// what the agent should count against its memory budget per running invocation.
    pub fn pool_max_resident_bytes(&self) -> u64 {
        u64::from(self.inner.config.max_instances)
            * u64::from(self.inner.config.max_memory_mb)
            * MIB
    }

    /// Epoch ticks for a deadline `timeout` from now: rounded up, plus one because the current
    /// tick may be about to end.
    pub(crate) fn deadline_ticks(&self, timeout: Duration) -> u64 {
        let tick = self.inner.config.epoch_tick.as_nanos();
        (timeout.as_nanos().div_ceil(tick) as u64).saturating_add(1)
    }
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("config", &self.inner.config)
            .finish()
    }
}

/// The thread that advances the engine's epoch every tick; stopped when the engine is dropped.
struct Ticker {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Ticker {
    fn start(engine: wasmtime::Engine, tick: Duration) -> Result<Ticker, WasmError> {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::Builder::new()
            .name("kiln-wasm-epoch".into())
            .spawn(move || {
                while !stopped.load(Ordering::Relaxed) {
                    std::thread::sleep(tick);
                    engine.increment_epoch();
                }
            })
            .map_err(|e| WasmError::EngineConfig(format!("cannot start the epoch ticker: {e}")))?;
        Ok(Ticker {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
