//! The `wasm` runtime in the node agent: one wasmtime engine for the node, one module per
//! function revision, and one fresh instance per request (XFaaS's per-request isolation).
//!
//! A module is compiled once and kept on disk in `kiln-wasm`'s content-addressed cache, so that
//! a restarted kiln maps it instead of compiling it again. If the module exports an init
//! function (`wizer.initialize` or `kiln_init`), the cache also keeps its pre-initialised
//! snapshot: that is the wasm hot path, taken at deploy time (`KilnPrebake` mode `deploy`) or
//! by the first request (`lazy`); mode `off` runs the plain module, the coldest path.
//!
//! Every request is a cold start in Lambda's sense (it finds no idle instance, by design);
//! its REPORT says how long the instantiation took and which path it came from.

mod invoke;

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kiln_wasm::{Engine, EngineConfig, FunctionModule, ModuleCache, PreInit, WasmError};
use tokio::sync::OnceCell;

use super::SnapshotStatus;
use crate::function::{PrebakeMode, SharedSpec};
use crate::sync::LockExt;

/// The most memory a wasm32 instance can address.
const WASM32_MAX_MB: u32 = 4096;

/// The node's wasm engine and the modules of its functions.
pub struct WasmHost {
    engine: Engine,
    cache: Arc<ModuleCache>,
    /// The most the module cache may take on disk; beyond it the least recently used files of
    /// modules that are not loaded are evicted.
    disk_limit_bytes: u64,
    modules: Mutex<Modules>,
}

#[derive(Default)]
struct Modules {
    by_function: HashMap<String, Arc<ModuleSlot>>,
    /// The oldest revision of each function that may still get a slot: a request or a
    /// preparation of an older revision, still in flight when it was retired, gets a slot of
    /// its own that is not kept.
    floor: HashMap<String, u64>,
}

/// The module of one function revision: loaded once, by the first of `prepare` or a request.
struct ModuleSlot {
    revision: u64,
    /// Prebaking is off: run the module as deployed, without its pre-initialised snapshot.
    plain: bool,
    cell: OnceCell<Result<Loaded, LoadError>>,
    requests: AtomicU64,
    /// Milliseconds since `created` of the last request (an `Instant` that fits an atomic).
    last_used_ms: AtomicU64,
    created: Instant,
}

#[derive(Clone)]
struct Loaded {
    module: FunctionModule,
    build_time: Duration,
}

/// Why a function's module cannot run.
#[derive(Debug, Clone)]
enum LoadError {
    /// The package's fault: answered as a function error (`errorType`, `errorMessage`).
    Function(&'static str, String),
    /// kiln's fault (the cache directory): the request fails, and the next one tries again.
    /// (Shared: every request waiting on the load gets it.)
    Platform(Arc<PlatformLoadError>),
}

/// kiln's side of a module that could not be loaded.
#[derive(Debug, thiserror::Error)]
enum PlatformLoadError {
    #[error("module loading failed: {0}")]
    Task(#[source] tokio::task::JoinError),
    #[error(transparent)]
    Engine(#[from] WasmError),
}

impl WasmHost {
    /// Creates the engine, sized for `max_instances` concurrent requests, and opens the module
    /// cache in `cache_dir`, which may take `disk_limit_mb` on disk.
    pub fn open(
        cache_dir: &Path,
        max_instances: u32,
        disk_limit_mb: u64,
    ) -> Result<Self, WasmError> {
        let engine = Engine::new(EngineConfig {
            // Pre-initialisations take a slot for their length too.
            max_instances: max_instances.saturating_add(4),
            max_memory_mb: WASM32_MAX_MB,
            ..EngineConfig::default()
        })?;
        let cache = ModuleCache::open(&engine, cache_dir)?;
        Ok(Self {
            engine,
            cache: Arc::new(cache),
            disk_limit_bytes: disk_limit_mb.saturating_mul(1024 * 1024),
            modules: Mutex::new(Modules::default()),
        })
    }

    /// Evicts the least recently used cache files beyond the disk limit, in the background,
    /// sparing the files of every module still loaded.
    fn evict_later(&self) {
        let keep: std::collections::HashSet<PathBuf> = self
            .modules()
            .by_function
            .values()
            .filter_map(|slot| match slot.cell.get() {
                Some(Ok(loaded)) => Some(loaded.module.files().to_vec()),
                _ => None,
            })
            .flatten()
            .collect();
        let cache = self.cache.clone();
        let limit = self.disk_limit_bytes;
        tokio::task::spawn_blocking(move || match cache.evict(limit, &keep) {
            Ok(done) if done.files > 0 => tracing::info!(
                files = done.files,
                bytes = done.bytes,
                remaining = done.remaining_bytes,
                "evicted least recently used wasm modules from the disk cache"
            ),
            Ok(_) => {}
            Err(e) => tracing::warn!("wasm disk cache eviction: {e}"),
        });
    }

    fn modules(&self) -> std::sync::MutexGuard<'_, Modules> {
        self.modules.locked()
    }

    /// The slot of `spec`'s revision, replacing one of another revision.
    fn slot(&self, spec: &SharedSpec) -> Arc<ModuleSlot> {
        let plain = spec.prebake.mode == PrebakeMode::Off;
        let mut modules = self.modules();
        if let Some(slot) = modules.by_function.get(&spec.function) {
            if slot.revision == spec.revision && slot.plain == plain {
                return slot.clone();
            }
        }
        let slot = Arc::new(ModuleSlot {
            revision: spec.revision,
            plain,
            cell: OnceCell::new(),
            requests: AtomicU64::new(0),
            last_used_ms: AtomicU64::new(0),
            created: Instant::now(),
        });
        let outdated = modules
            .floor
            .get(&spec.function)
            .is_some_and(|f| spec.revision < *f)
            || modules
                .by_function
                .get(&spec.function)
                .is_some_and(|s| s.revision > spec.revision);
        if !outdated {
            modules
                .by_function
                .insert(spec.function.clone(), slot.clone());
        }
        slot
    }

    /// The module of `spec`, loading it if no one has; `true` if this call had to wait for it.
    async fn module(
        &self,
        spec: &SharedSpec,
    ) -> (Result<Loaded, LoadError>, bool, Arc<ModuleSlot>) {
        let slot = self.slot(spec);
        if let Some(done) = slot.cell.get() {
            return (done.clone(), false, slot);
        }
        let cache = self.cache.clone();
        let path = spec.code_dir.join(&spec.handler);
        let handler = spec.handler.clone();
        let plain = slot.plain;
        let loaded = slot
            .cell
            .get_or_init(|| async move {
                let begin = Instant::now();
                let result =
                    tokio::task::spawn_blocking(move || load(&cache, &path, &handler, plain))
                        .await
                        .unwrap_or_else(|e| {
                            Err(LoadError::Platform(Arc::new(PlatformLoadError::Task(e))))
                        });
                result.map(|module| Loaded {
                    module,
                    build_time: begin.elapsed(),
                })
            })
            .await
            .clone();
        if loaded.is_ok() {
            self.evict_later();
        }
        if let Err(LoadError::Platform(reason)) = &loaded {
            tracing::warn!(function = %spec.function, "wasm module: {reason}");
            // Not the function's fault: the next request tries again.
            let mut modules = self.modules();
            if matches!(modules.by_function.get(&spec.function), Some(s) if Arc::ptr_eq(s, &slot)) {
                modules.by_function.remove(&spec.function);
            }
        }
        (loaded, true, slot)
    }

    /// Compiles (or maps from the cache) and pre-initialises `spec`'s module in the background,
    /// holding `preparing` until it is done.
    pub fn prepare(self: &Arc<Self>, spec: SharedSpec, preparing: Option<super::Preparing>) {
        let host = self.clone();
        tokio::spawn(async move {
            let _preparing = preparing;
            let (loaded, _, _) = host.module(&spec).await;
            match loaded {
                Ok(loaded) => tracing::info!(
                    function = %spec.function,
                    revision = spec.revision,
                    "wasm module ready ({}, in {:.1} ms)",
                    describe(loaded.module.preinit()),
                    loaded.build_time.as_secs_f64() * 1000.0
                ),
                Err(LoadError::Function(_, message)) => {
                    tracing::warn!(function = %spec.function, "wasm module: {message}")
                }
                Err(LoadError::Platform(_)) => {}
            }
        });
    }

    /// Drops the module of `function` unless it is of `keep_revision`.
    pub fn retire(&self, function: &str, keep_revision: Option<u64>) {
        let mut modules = self.modules();
        match keep_revision {
            Some(revision) => {
                modules.floor.insert(function.to_string(), revision);
            }
            None => {
                modules.floor.remove(function);
            }
        }
        if matches!(modules.by_function.get(function), Some(slot) if Some(slot.revision) != keep_revision)
        {
            modules.by_function.remove(function);
            drop(modules);
            self.evict_later();
        }
    }

    /// The node's wasm modules, as snapshots: `kind` is `wasm-snapshot` for a pre-initialised
    /// module (the hot path) and `wasm-module` for a plain one.
    pub fn status(&self) -> Vec<SnapshotStatus> {
        let modules = self.modules();
        modules
            .by_function
            .iter()
            .map(|(function, slot)| {
                let mut status = SnapshotStatus {
                    forks: slot.requests.load(Ordering::Relaxed),
                    idle_s: slot
                        .created
                        .elapsed()
                        .saturating_sub(Duration::from_millis(
                            slot.last_used_ms.load(Ordering::Relaxed),
                        ))
                        .as_secs_f64(),
                    ..SnapshotStatus::new(function, "wasm-module", "building", slot.revision)
                };
                match slot.cell.get() {
                    None => {}
                    Some(Ok(loaded)) => {
                        status.state = "ready".into();
                        status.build_ms = loaded.build_time.as_secs_f64() * 1000.0;
                        match loaded.module.preinit() {
                            PreInit::Snapshot { .. } => status.kind = "wasm-snapshot".into(),
                            PreInit::NotRequested => {}
                            PreInit::Failed { reason, .. } => {
                                status.error = Some(format!("pre-initialisation failed: {reason}"))
                            }
                        }
                    }
                    Some(Err(LoadError::Function(_, message))) => {
                        status.state = "failed".into();
                        status.error = Some(message.clone());
                    }
                    Some(Err(LoadError::Platform(e))) => {
                        status.state = "failed".into();
                        status.error = Some(e.to_string());
                    }
                }
                status
            })
            .collect()
    }

    /// Bytes the module cache (compiled code and pre-initialised snapshots) takes on disk.
    pub fn disk_usage_bytes(&self) -> u64 {
        self.cache.disk_usage_bytes().unwrap_or(0)
    }
}

/// Reads, compiles and (unless `plain`) pre-initialises the module at `path`. Blocking.
fn load(
    cache: &ModuleCache,
    path: &Path,
    handler: &str,
    plain: bool,
) -> Result<FunctionModule, LoadError> {
    let relative = Path::new(handler);
    if handler.is_empty()
        || !relative
            .components()
            .all(|c| matches!(c, Component::Normal(_)))
    {
        return Err(LoadError::Function(
            "Runtime.HandlerNotFound",
            format!("the handler `{handler}` must be the path of the module in the package, e.g. function.wasm"),
        ));
    }
    let wasm = std::fs::read(path).map_err(|e| {
        LoadError::Function(
            "Runtime.HandlerNotFound",
            format!(
                "the package has no module `{handler}` (the handler names the .wasm file): {e}"
            ),
        )
    })?;
    let loaded = if plain {
        cache.load_plain(&wasm)
    } else {
        cache.load(&wasm)
    };
    loaded.map_err(|e| match e {
        WasmError::InvalidModule(_) | WasmError::Compile(_) | WasmError::Link(_) => {
            LoadError::Function("Runtime.InvalidEntrypoint", format!("{handler}: {e}"))
        }
        other => LoadError::Platform(Arc::new(other.into())),
    })
}

fn describe(preinit: &PreInit) -> String {
    match preinit {
        PreInit::NotRequested => "no init export".into(),
        PreInit::Snapshot { init_export } => format!("pre-initialised by {init_export}"),
        PreInit::Failed {
            init_export,
            reason,
        } => format!("{init_export} failed, running the plain module: {reason}"),
    }
}

fn error_body(error_type: &str, message: &str) -> Bytes {
    Bytes::from(serde_json::json!({"errorType": error_type, "errorMessage": message}).to_string())
}

/// The cache directory of a node's wasm modules.
pub fn cache_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("wasm-cache")
}
