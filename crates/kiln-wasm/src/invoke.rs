//! One invocation: a fresh instance from the pool, the event on stdin, the answer on stdout.

use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use wasmtime::{ResourceLimiter, Store, Trap};
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::p2::pipe::MemoryInputPipe;
use wasmtime_wasi::{FsPerms, I32Exit, WasiCtxBuilder};

use crate::output::BoundedOutput;
use crate::session::SharedSessionState;
use crate::{Engine, FunctionModule, WasmError};

/// Lambda's limit on a synchronous response: 6 MB.
pub const MAX_RESPONSE_BYTES: usize = 6 * 1024 * 1024;
/// Logs kept per invocation; the rest is dropped and `Response::logs_truncated` is set.
const MAX_LOG_BYTES: usize = 4 * 1024 * 1024;
const MIB: usize = 1 << 20;

/// One invocation of a function.
#[derive(Debug, Clone)]
pub struct Request {
    /// The event (JSON), given to the function on stdin.
    pub payload: Vec<u8>,
    /// The function's environment, plus whatever the agent adds per invocation.
    pub env: Vec<(String, String)>,
    /// The function's MemorySize: the bound on its linear memory.
    pub memory_mb: u32,
    /// The function's timeout, wall-clock, from the start of instantiation.
    pub timeout: Duration,
    /// The function's extracted code, preopened read-only at `/var/task` when given.
    pub code_dir: Option<PathBuf>,
    /// The request's session: what the `kiln` session imports reach (crate::session).
    pub session: Option<SharedSessionState>,
}

/// The outcome of one invocation that kiln could run: a success, or the function's error.
#[derive(Debug, Clone)]
pub struct Response {
    /// The function's stdout on success; the Lambda error JSON when `error` is set.
    pub body: Vec<u8>,
    /// Set when the function failed (Lambda's `X-Amz-Function-Error: Unhandled`).
    pub error: Option<FunctionError>,
    /// The function's stderr, then kiln's own lines about a failure (a trap's backtrace).
    pub logs: Vec<u8>,
    /// More than 4 MiB of logs were written; the rest was dropped.
    pub logs_truncated: bool,
    /// Instantiation plus execution.
    pub duration: Duration,
    /// Instantiation alone (taking a pool slot, mapping the memory image, linking WASI).
    pub instantiation: Duration,
    /// The linear memory's peak size, in bytes (Lambda's Max Memory Used).
    pub max_memory_bytes: u64,
    /// The guest ran to its end: `_start` returned or exited with 0, or exited with 1 after
    /// reporting its own error. False when it trapped, timed out or could not start, which is
    /// when an embedder should drop what the request did (its session writes).
    pub completed: bool,
}

/// A function error, in Lambda's terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionError {
    /// `Sandbox.Timedout`, `Runtime.OutOfMemory`, `Runtime.ExitError`, … or the function's own.
    pub error_type: String,
    pub message: String,
}

impl FunctionError {
    fn new(error_type: &str, message: impl Into<String>) -> Self {
        FunctionError {
            error_type: error_type.to_string(),
            message: message.into(),
        }
    }

    /// The JSON body Lambda answers with: `{"errorType": …, "errorMessage": …}`.
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({
            "errorType": self.error_type,
            "errorMessage": self.message,
        }))
        .unwrap_or_default()
    }
}

/// What a store carries: WASI's state, the memory bound and the request's session.
pub(crate) struct HostState {
    pub(crate) wasi: WasiP1Ctx,
    pub(crate) limiter: MemoryLimiter,
    pub(crate) session: Option<SharedSessionState>,
}

/// StoreLimits' memory bound, plus what kiln reports: the peak, and whether the bound refused a
/// growth (which turns the function's later failure into `Runtime.OutOfMemory`).
pub(crate) struct MemoryLimiter {
    limit: usize,
    peak: usize,
    refused: bool,
}

impl MemoryLimiter {
    pub(crate) fn new(limit: usize) -> Self {
        MemoryLimiter {
            limit,
            peak: 0,
            refused: false,
        }
    }
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        _: usize,
        desired: usize,
        _: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.limit {
            // Refused, not trapped: the guest sees memory.grow fail, as a native program sees
            // malloc fail, and may recover; if it fails instead, the refusal explains why.
            self.refused = true;
            return Ok(false);
        }
        self.peak = self.peak.max(desired);
        Ok(true)
    }

    fn table_growing(&mut self, _: usize, _: usize, _: Option<usize>) -> wasmtime::Result<bool> {
        // The pool's table slots bound tables.
        Ok(true)
    }
}

thread_local! {
    /// wasmtime's async API needs an executor for the WASI host calls and the timeout; one
    /// single-threaded runtime per calling thread, created on first use.
    static RUNTIME: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a current-thread tokio runtime with a timer");
}

pub(crate) fn block_on<F: Future>(future: F) -> F::Output {
    RUNTIME.with(|runtime| runtime.block_on(future))
}

impl Engine {
    /// Runs one request in a fresh instance of `module`. Blocking: guest code runs on the
    /// calling thread, up to `request.timeout`; call it from `spawn_blocking` in async code.
    ///
    /// `Err` is kiln's failure (the pool is full, the code directory is missing); everything
    /// the function does wrong is an `Ok(Response)` whose `error` is set.
    pub fn invoke(&self, module: &FunctionModule, request: Request) -> Result<Response, WasmError> {
        block_on(self.invoke_async(module, request))
    }

    async fn invoke_async(
        &self,
        module: &FunctionModule,
        request: Request,
    ) -> Result<Response, WasmError> {
        let started = Instant::now();
        let max_mb = self.inner.config.max_memory_mb;
        if request.memory_mb > max_mb {
            return Err(WasmError::MemoryTooLarge {
                requested: request.memory_mb,
                max: max_mb,
            });
        }
        let stdout = BoundedOutput::new(MAX_RESPONSE_BYTES);
        let stderr = BoundedOutput::new(MAX_LOG_BYTES);
        let mut wasi = WasiCtxBuilder::new();
        wasi.stdin(MemoryInputPipe::new(request.payload))
            .stdout(stdout.clone())
            .stderr(stderr.clone())
            .envs(&request.env)
            .arg("function");
        // Not `allow_blocking_current_thread`: with it, wasmtime-wasi sleeps in poll_oneoff
        // with `std::thread::sleep`, which no timeout can interrupt (a regression test covers
        // this). File reads pay a hop to the blocking pool instead.
        if let Some(dir) = &request.code_dir {
            wasi.preopened_dir(dir, "/var/task", FsPerms::ReadOnly)
                .map_err(|e| WasmError::CodeDir {
                    path: dir.clone(),
                    message: format!("{e:#}"),
                })?;
        }
        let state = HostState {
            wasi: wasi.build_p1(),
            limiter: MemoryLimiter::new(request.memory_mb as usize * MIB),
            session: request.session,
        };
        let mut store = Store::new(&self.inner.engine, state);
        store.limiter(|state| &mut state.limiter);
        store.set_epoch_deadline(self.deadline_ticks(request.timeout));
        store.epoch_deadline_trap();

        let mut extra_logs = String::new();
        let outcome = match module.pre.instantiate_async(&mut store).await {
            Err(e) if e.is::<wasmtime::PoolConcurrencyLimitError>() => {
                return Err(WasmError::PoolExhausted(self.inner.config.max_instances));
            }
            Err(e) => Outcome::Failed(e),
            Ok(instance) => {
                let instantiation = started.elapsed();
                match instance.get_typed_func::<(), ()>(&mut store, "_start") {
                    Err(_) => Outcome::NoEntrypoint(instantiation),
                    Ok(start) => {
                        let remaining = request.timeout.saturating_sub(instantiation);
                        match tokio::time::timeout(remaining, start.call_async(&mut store, ()))
                            .await
                        {
                            Err(_elapsed) => Outcome::TimedOut(instantiation),
                            Ok(Ok(())) => Outcome::Exited(0, instantiation),
                            Ok(Err(e)) => match e.downcast_ref::<I32Exit>() {
                                Some(exit) => Outcome::Exited(exit.0, instantiation),
                                None => Outcome::Trapped(e, instantiation),
                            },
                        }
                    }
                }
            }
        };
        let duration = started.elapsed();
        let limiter = &store.data().limiter;
        let (oom, peak) = (limiter.refused, limiter.peak as u64);
        drop(store);

        let (out, out_overflowed) = stdout.take();
        let (mut logs, logs_truncated) = stderr.take();
        let completed = match &outcome {
            Outcome::Exited(0, _) => true,
            Outcome::Exited(1, _) => reported_error(&out).is_some(),
            _ => false,
        };
        let (instantiation, error) = match outcome {
            Outcome::Exited(0, inst) if out_overflowed => (inst, Some(too_large())),
            Outcome::Exited(0, inst) => (inst, None),
            Outcome::Exited(code, inst) if oom => (
                inst,
                Some(out_of_memory(
                    request.memory_mb,
                    &format!("exit status {code}"),
                )),
            ),
            Outcome::Exited(code, inst) => (inst, Some(exit_error(code, &out))),
            Outcome::TimedOut(inst) => (inst, Some(timed_out(request.timeout))),
            Outcome::Trapped(e, inst) => {
                extra_logs = format!("{e:?}");
                (
                    inst,
                    Some(classify_trap(
                        &e,
                        oom,
                        out_overflowed,
                        request.memory_mb,
                        request.timeout,
                    )),
                )
            }
            Outcome::NoEntrypoint(inst) => (
                inst,
                Some(FunctionError::new(
                    "Runtime.InvalidEntrypoint",
                    "the module exports no `_start` function: build it as a WASI command",
                )),
            ),
            Outcome::Failed(e) => {
                extra_logs = format!("{e:?}");
                let error = if oom {
                    out_of_memory(request.memory_mb, "its initial memory does not fit")
                } else {
                    FunctionError::new("Runtime.Unknown", format!("instantiation failed: {e}"))
                };
                (duration, Some(error))
            }
        };
        if !extra_logs.is_empty() {
            logs.extend_from_slice(format!("[kiln] {extra_logs}\n").as_bytes());
        }
        let body = match &error {
            None => out,
            Some(error) => error.to_json(),
        };
        Ok(Response {
            body,
            error,
            logs,
            logs_truncated,
            duration,
            instantiation,
            max_memory_bytes: peak,
            completed,
        })
    }
}

enum Outcome {
    Exited(i32, Duration),
    TimedOut(Duration),
    Trapped(wasmtime::Error, Duration),
    NoEntrypoint(Duration),
    Failed(wasmtime::Error),
}

fn timed_out(timeout: Duration) -> FunctionError {
    FunctionError::new(
        "Sandbox.Timedout",
        format!("Task timed out after {:.2} seconds", timeout.as_secs_f64()),
    )
}

fn out_of_memory(memory_mb: u32, detail: &str) -> FunctionError {
    FunctionError::new(
        "Runtime.OutOfMemory",
        format!(
            "Runtime exited with error: the memory limit of {memory_mb} MB was reached ({detail})"
        ),
    )
}

fn too_large() -> FunctionError {
    FunctionError::new(
        "Function.ResponseSizeTooLarge",
        format!("Response payload size exceeded maximum allowed payload size ({MAX_RESPONSE_BYTES} bytes)."),
    )
}

fn classify_trap(
    error: &wasmtime::Error,
    oom: bool,
    out_overflowed: bool,
    memory_mb: u32,
    timeout: Duration,
) -> FunctionError {
    let trap = error.downcast_ref::<Trap>();
    if trap == Some(&Trap::Interrupt) {
        return timed_out(timeout);
    }
    if oom {
        return out_of_memory(memory_mb, &error.to_string());
    }
    if out_overflowed {
        return too_large();
    }
    if let Some(bad) = error.downcast_ref::<crate::session::BadSessionCall>() {
        return FunctionError::new(
            "Runtime.ExitError",
            format!("Runtime exited with error: {bad}"),
        );
    }
    match trap {
        Some(trap) => FunctionError::new(
            "Runtime.ExitError",
            format!("Runtime exited with error: wasm trap: {trap}"),
        ),
        None => FunctionError::new("Runtime.Unknown", format!("Runtime failed: {error}")),
    }
}

/// A non-zero exit. Exit code 1 with an error JSON object as the last line of stdout is the
/// function reporting its own error (see the README's ABI); anything else is a crash.
fn exit_error(code: i32, stdout: &[u8]) -> FunctionError {
    if code == 1 {
        if let Some(error) = reported_error(stdout) {
            return error;
        }
    }
    FunctionError::new(
        "Runtime.ExitError",
        format!("Runtime exited with error: exit status {code}"),
    )
}

fn reported_error(stdout: &[u8]) -> Option<FunctionError> {
    let text = std::str::from_utf8(stdout).ok()?;
    let last = text.lines().rev().find(|line| !line.trim().is_empty())?;
    let value: serde_json::Value = serde_json::from_str(last).ok()?;
    let message = value.get("errorMessage")?.as_str()?;
    let error_type = value
        .get("errorType")
        .and_then(|t| t.as_str())
        .unwrap_or("Function.Error");
    Some(FunctionError::new(error_type, message))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_stdout_line_can_carry_the_functions_error() {
        let error =
            reported_error(b"some output\n{\"errorType\": \"E\", \"errorMessage\": \"m\"}\n\n")
                .unwrap();
        assert_eq!(error, FunctionError::new("E", "m"));
        assert_eq!(
            reported_error(b"{\"errorMessage\": \"m\"}")
                .unwrap()
                .error_type,
            "Function.Error"
        );
        assert!(reported_error(b"{\"errorType\": \"E\"}").is_none());
        assert!(reported_error(b"not json").is_none());
        assert_eq!(
            exit_error(2, b"{\"errorMessage\": \"m\"}").error_type,
            "Runtime.ExitError"
        );
    }

    #[test]
    fn error_bodies_are_lambdas_json() {
        let body = timed_out(Duration::from_secs(3)).to_json();
        let value: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(value["errorType"], "Sandbox.Timedout");
        assert_eq!(value["errorMessage"], "Task timed out after 3.00 seconds");
    }
}
