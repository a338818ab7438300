//! Measures what a request costs: instantiation from the pool plus running `_start`, for the
//! echo WAT module, the Go echo module, and the init fixture plain against pre-initialised.
//!
//!     cargo run --release -p kiln-wasm --example instantiate [-- ITERATIONS]
//!
//! The Go module is built by tests/fixtures/build.sh (Go must be installed).

use std::path::Path;
use std::time::{Duration, Instant};

use kiln_wasm::{Engine, EngineConfig, FunctionModule, ModuleCache, Request};

fn main() {
    let iterations: usize = std::env::args()
        .nth(1)
        .map_or(2000, |n| n.parse().expect("ITERATIONS"));
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let out = std::env::temp_dir().join("kiln-wasm-bench-fixtures");
    let built = std::process::Command::new("bash")
        .arg(fixtures.join("build.sh"))
        .arg(&out)
        .status()
        .is_ok_and(|s| s.success());

    let engine = Engine::new(EngineConfig::default()).expect("engine");
    let cache_dir = tempfile::tempdir().expect("tempdir");
    let cache = ModuleCache::open(&engine, cache_dir.path()).expect("cache");
    let read = |name: &str| std::fs::read(fixtures.join(name)).expect("fixture");

    println!("{iterations} requests each, one at a time, after 50 warm-up requests");
    println!("| module | instantiate p50 | p99 | instantiate + run p50 | p99 |");
    println!("|---|---|---|---|---|");
    let echo = cache.load(&read("echo.wat")).expect("echo");
    measure(&engine, "echo.wat", &echo, iterations);
    let init = read("init.wat");
    measure(
        &engine,
        "init.wat, plain (init runs per request)",
        &cache.load_plain(&init).expect("plain"),
        iterations,
    );
    measure(
        &engine,
        "init.wat, pre-initialised",
        &cache.load(&init).expect("snapshot"),
        iterations,
    );
    match std::fs::read(out.join("go-echo.wasm")) {
        Ok(go) if built => {
            let go = cache.load(&go).expect("go");
            measure(&engine, "go-echo (Go 1.x, wasip1)", &go, iterations / 4);
        }
        _ => println!("(go-echo.wasm not built: is Go installed?)"),
    }
}

fn measure(engine: &Engine, name: &str, module: &FunctionModule, iterations: usize) {
    let request = Request {
        payload: br#"{"hello": "kiln"}"#.to_vec(),
        env: Vec::new(),
        memory_mb: 128,
        timeout: Duration::from_secs(10),
        code_dir: None,
        session: None,
    };
    let mut instantiate = Vec::with_capacity(iterations);
    let mut total = Vec::with_capacity(iterations);
    for i in 0..iterations + 50 {
        let started = Instant::now();
        let response = engine.invoke(module, request.clone()).expect("invoke");
        let elapsed = started.elapsed();
        assert!(response.error.is_none(), "{name}: {:?}", response.error);
        if i >= 50 {
            instantiate.push(response.instantiation);
            total.push(elapsed);
        }
    }
    println!(
        "| {name} | {} | {} | {} | {} |",
        show(percentile(&mut instantiate, 0.50)),
        show(percentile(&mut instantiate, 0.99)),
        show(percentile(&mut total, 0.50)),
        show(percentile(&mut total, 0.99)),
    );
}

fn percentile(samples: &mut [Duration], q: f64) -> Duration {
    samples.sort();
    samples[((samples.len() - 1) as f64 * q).round() as usize]
}

fn show(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}
