//! Shared helpers of kiln-wasm's tests: fixtures, a shared engine and cache, requests.

#![allow(dead_code, reason = "each test binary uses a different part")]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use kiln_wasm::{Engine, EngineConfig, FunctionModule, ModuleCache, Request};

pub fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// A WAT fixture's text.
pub fn wat(name: &str) -> Vec<u8> {
    std::fs::read(fixtures_dir().join(format!("{name}.wat"))).expect("fixture exists")
}

/// A compiled guest fixture (`go-echo`, `c-echo`), built once per test run by
/// tests/fixtures/build.sh; `None` (with a message) when its toolchain is missing.
pub fn compiled_fixture(name: &str) -> Option<Vec<u8>> {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    let out = BUILT.get_or_init(|| {
        let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("kiln-wasm-fixtures");
        let status = Command::new("bash")
            .arg(fixtures_dir().join("build.sh"))
            .arg(&out)
            .status()
            .expect("running tests/fixtures/build.sh");
        assert!(status.success(), "tests/fixtures/build.sh failed");
        out
    });
    match std::fs::read(out.join(format!("{name}.wasm"))) {
        Ok(bytes) => Some(bytes),
        Err(_) => {
            eprintln!("SKIPPED: {name}.wasm was not built (its toolchain is missing; see tests/fixtures/build.sh)");
            None
        }
    }
}

pub fn small_engine() -> Engine {
    Engine::new(EngineConfig {
        max_instances: 8,
        max_memory_mb: 512,
        ..EngineConfig::default()
    })
    .expect("engine")
}

pub struct Shared {
    pub engine: Engine,
    pub cache: ModuleCache,
    _dir: tempfile::TempDir,
}

/// One engine and cache for the tests that need nothing special, so each module compiles once.
pub fn shared() -> &'static Shared {
    static SHARED: OnceLock<Shared> = OnceLock::new();
    SHARED.get_or_init(|| {
        let dir = tempfile::tempdir().expect("tempdir");
        let engine = small_engine();
        let cache = ModuleCache::open(&engine, dir.path()).expect("cache");
        Shared {
            engine,
            cache,
            _dir: dir,
        }
    })
}

pub fn load_wat(name: &str) -> FunctionModule {
    shared().cache.load(&wat(name)).expect("load")
}

pub fn request(payload: &[u8]) -> Request {
    Request {
        payload: payload.to_vec(),
        env: Vec::new(),
        memory_mb: 128,
        timeout: Duration::from_secs(10),
        code_dir: None,
        session: None,
    }
}

pub fn invoke(module: &FunctionModule, request: Request) -> kiln_wasm::Response {
    shared().engine.invoke(module, request).expect("invoke")
}

pub fn error_type(response: &kiln_wasm::Response) -> &str {
    response
        .error
        .as_ref()
        .map(|e| e.error_type.as_str())
        .unwrap_or("")
}
