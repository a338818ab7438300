//! Invocations of WAT fixtures: the ABI, per-request isolation, limits and error types.

mod common;

use std::time::{Duration, Instant};

use common::{error_type, invoke, load_wat, request, shared};
use kiln_wasm::{PreInit, WasmError};

#[test]
fn echo_round_trip() {
    let module = load_wat("echo");
    assert_eq!(module.preinit(), &PreInit::NotRequested);
    let response = invoke(&module, request(br#"{"hello": "kiln"}"#));
    assert_eq!(response.error, None);
    assert_eq!(response.body, br#"{"hello": "kiln"}"#);
    assert_eq!(String::from_utf8_lossy(&response.logs), "echo: answered\n");
    assert_eq!(response.max_memory_bytes, 2 * 65536);
}

#[test]
fn each_request_gets_a_fresh_instance() {
    let module = load_wat("counter");
    for _ in 0..3 {
        let response = invoke(&module, request(b"{}"));
        assert_eq!(
            response.body, b"count=1",
            "a global leaked from an earlier request"
        );
    }
}

#[test]
fn the_functions_own_error_is_the_last_line_of_stdout_with_exit_code_1() {
    let response = invoke(&load_wat("error"), request(b"{}"));
    let error = response.error.clone().expect("a function error");
    assert_eq!(error.error_type, "InvalidOrder");
    assert_eq!(error.message, "order 7 has no items");
    let body: serde_json::Value = serde_json::from_slice(&response.body).unwrap();
    assert_eq!(body["errorType"], "InvalidOrder");
}

#[test]
fn another_exit_code_is_an_exit_error() {
    let response = invoke(&load_wat("exit"), request(b"{}"));
    assert_eq!(error_type(&response), "Runtime.ExitError");
    assert_eq!(
        response.error.unwrap().message,
        "Runtime exited with error: exit status 3"
    );
}

#[test]
fn a_trap_is_an_exit_error_with_the_trap_and_its_backtrace_in_the_logs() {
    let response = invoke(&load_wat("trap"), request(b"{}"));
    assert_eq!(error_type(&response), "Runtime.ExitError");
    let message = response.error.unwrap().message;
    assert!(message.contains("integer divide by zero"), "{message}");
    let logs = String::from_utf8_lossy(&response.logs);
    assert!(logs.contains("[kiln]") && logs.contains("divide"), "{logs}");
}

#[test]
fn a_cpu_loop_is_ended_at_the_timeout() {
    let module = load_wat("loop");
    let mut req = request(b"{}");
    req.timeout = Duration::from_millis(300);
    let started = Instant::now();
    let response = invoke(&module, req);
    assert_eq!(error_type(&response), "Sandbox.Timedout");
    assert_eq!(
        response.error.unwrap().message,
        "Task timed out after 0.30 seconds"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the loop was not interrupted"
    );
}

#[test]
fn test_regression_a_sleep_in_the_host_is_ended_at_the_timeout() {
    let module = load_wat("sleep");
    let mut req = request(b"{}");
    req.timeout = Duration::from_millis(300);
    let started = Instant::now();
    let response = invoke(&module, req);
    assert_eq!(error_type(&response), "Sandbox.Timedout");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the sleep was not interrupted"
    );
}

#[test]
fn growing_past_memory_size_is_out_of_memory() {
    let module = load_wat("oom");
    let mut req = request(b"{}");
    req.memory_mb = 32;
    let response = invoke(&module, req);
    assert_eq!(error_type(&response), "Runtime.OutOfMemory");
    assert!(response.max_memory_bytes <= 32 << 20);
    assert!(response.max_memory_bytes > 16 << 20);
}

#[test]
fn a_module_whose_initial_memory_exceeds_memory_size_is_out_of_memory() {
    let module = shared()
        .cache
        .load(br#"(module (memory 1000) (func (export "_start")))"#)
        .unwrap();
    let mut req = request(b"{}");
    req.memory_mb = 32;
    assert_eq!(error_type(&invoke(&module, req)), "Runtime.OutOfMemory");
}

#[test]
fn a_response_over_6_mb_is_too_large() {
    let response = invoke(&load_wat("big_output"), request(b"{}"));
    assert_eq!(error_type(&response), "Function.ResponseSizeTooLarge");
    assert!(response.body.len() < 1024, "the error body, not the output");
}

#[test]
fn a_module_without_start_is_an_invalid_entrypoint() {
    let module = shared()
        .cache
        .load(br#"(module (func (export "main")))"#)
        .unwrap();
    assert_eq!(
        error_type(&invoke(&module, request(b"{}"))),
        "Runtime.InvalidEntrypoint"
    );
}

#[test]
fn a_module_importing_more_than_wasi_does_not_load() {
    let error = shared()
        .cache
        .load(br#"(module (import "env" "open_socket" (func)) (func (export "_start")))"#)
        .unwrap_err();
    assert!(matches!(error, WasmError::Link(_)), "{error}");
}

#[test]
fn a_memory_size_above_the_engines_maximum_is_refused() {
    let mut req = request(b"{}");
    req.memory_mb = 100_000;
    let error = shared().engine.invoke(&load_wat("echo"), req).unwrap_err();
    assert!(matches!(error, WasmError::MemoryTooLarge { .. }), "{error}");
}

#[test]
fn invoke_works_from_tokios_blocking_pool() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let module = load_wat("echo");
    let engine = shared().engine.clone();
    let response = runtime
        .block_on(async move {
            tokio::task::spawn_blocking(move || engine.invoke(&module, request(b"from tokio")))
                .await
                .unwrap()
        })
        .unwrap();
    assert_eq!(response.body, b"from tokio");
}

#[test]
fn requests_beyond_the_pools_slots_are_refused_not_queued() {
    let engine = kiln_wasm::Engine::new(kiln_wasm::EngineConfig {
        max_instances: 2,
        max_memory_mb: 128,
        ..Default::default()
    })
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cache = kiln_wasm::ModuleCache::open(&engine, dir.path()).unwrap();
    let sleeper = cache.load(&common::wat("sleep")).unwrap();
    let busy: Vec<_> = (0..2)
        .map(|_| {
            let (engine, sleeper) = (engine.clone(), sleeper.clone());
            std::thread::spawn(move || {
                let mut req = request(b"{}");
                req.timeout = Duration::from_secs(2);
                engine.invoke(&sleeper, req).unwrap()
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let error = engine.invoke(&sleeper, request(b"{}")).unwrap_err();
    assert!(matches!(error, WasmError::PoolExhausted(2)), "{error}");
    for thread in busy {
        assert_eq!(error_type(&thread.join().unwrap()), "Sandbox.Timedout");
    }
    // The slots are free again.
    let mut req = request(b"{}");
    req.timeout = Duration::from_millis(100);
    assert_eq!(
        error_type(&engine.invoke(&sleeper, req).unwrap()),
        "Sandbox.Timedout"
    );
}
