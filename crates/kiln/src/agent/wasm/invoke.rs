//! A wasm function's invocation on the node: a pooled instance of its module per request, a
//! session's turn and transaction, the answer and its REPORT.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kiln_wasm::{PreInit, WasmError};

use super::{error_body, LoadError, WasmHost, WASM32_MAX_MB};
use crate::agent::acquire::Acquired;
use crate::agent::invoke::SessionTurn;
use crate::agent::report::{report, report_field};
use crate::agent::sessions::txn::{Txn, WasmSession};
use crate::agent::{
    AgentError, Inner, InstanceState, InvokeOutcome, InvokeRequest, RouteHints, StartPath,
};
use crate::function::SharedSpec;
use crate::runtime;

impl Inner {
    /// Runs one request of a wasm function in a fresh instance. The request holds a
    /// reservation (the function's concurrency and its memory in the node's budget) while it
    /// runs, as a process instance does, and gives it back at the end.
    pub(in crate::agent) async fn invoke_wasm(
        self: &Arc<Self>,
        host: &WasmHost,
        spec: SharedSpec,
        request: InvokeRequest,
    ) -> Result<InvokeOutcome, AgentError> {
        // A session's requests take turns before they take a reservation, so that one waiting
        // for its session holds none of the function's concurrency.
        let session = match (&request.hints.session, &spec.sessions) {
            (Some(id), Some(config)) => Some(self.enter_session(&spec, id, config).await?),
            _ => None,
        };
        // Every wasm request is a fresh instance: there is no instance for a session to stick to.
        // It holds its predicted memory bound of the node's budget.
        let hints = RouteHints {
            memory_mb: request.hints.memory_mb,
            ..RouteHints::default()
        };
        let id = match self
            .acquire(&spec, &hints, crate::agent::Placement::Any)
            .await?
        {
            Acquired::Cold(id) => id,
            Acquired::Warm(instance) => {
                // Never happens: a wasm request leaves no idle instance behind.
                let id = instance.id;
                self.destroy_later(*instance);
                self.abandon(&spec.function, id);
                return Err(AgentError::Sandbox(
                    "a wasm function had an idle process instance".into(),
                ));
            }
        };
        let result = self
            .run_wasm(host, &spec, &request, id, session.as_ref())
            .await;
        self.abandon(&spec.function, id);
        if let (Ok(_), Some(session)) = (&result, &session) {
            self.state().sessions.served(&spec.function, &session.id);
        }
        result
    }

    async fn run_wasm(
        &self,
        host: &WasmHost,
        spec: &SharedSpec,
        request: &InvokeRequest,
        id: u64,
        session: Option<&SessionTurn>,
    ) -> Result<InvokeOutcome, AgentError> {
        let begin = Instant::now();
        let (loaded, waited, slot) = host.module(spec).await;
        let loaded = match loaded {
            Ok(loaded) => loaded,
            Err(LoadError::Platform(e)) => return Err(AgentError::Sandbox(e.to_string())),
            Err(LoadError::Function(error_type, message)) => {
                let init = begin.elapsed();
                let log = report(
                    spec,
                    &request.request_id,
                    &format!("[kiln] {message}\n"),
                    init,
                    Some(StartPath::Coldest),
                    Some(init),
                    0,
                );
                return Ok(InvokeOutcome {
                    body: error_body(error_type, &message),
                    function_error: true,
                    log,
                    cold_start: Some(StartPath::Coldest),
                    init_duration: Some(init),
                    duration: init,
                    max_memory_mb: 0,
                    out_of_memory: false,
                    memory_limit_mb: None,
                    limit_write: None,
                });
            }
        };
        let slot_waited = begin.elapsed();
        let start_path = match loaded.module.preinit() {
            PreInit::Snapshot { .. } if !waited => StartPath::Hot,
            _ => StartPath::Coldest,
        };
        if let Some(live) = self.state().instances.live.get_mut(&id) {
            live.state = InstanceState::Busy;
            live.start_path = start_path;
        }
        let mut env = match self.ctx.runtimes.get(&spec.runtime) {
            Some(runtime) => runtime::lambda_env(spec, id, runtime.as_ref()),
            None => Vec::new(),
        };
        env.push(("KILN_REQUEST_ID".into(), request.request_id.clone()));
        env.push(("_X_AMZN_TRACE_ID".into(), request.trace_id.clone()));
        let timeout = Duration::from_secs(u64::from(spec.timeout_s));
        let deadline_ms = (chrono::Utc::now() + timeout).timestamp_millis();
        env.push(("KILN_DEADLINE_MS".into(), deadline_ms.to_string()));
        let state = session.map(|s| {
            Arc::new(WasmSession::new(
                &s.id,
                Txn::new(s.ctx.log.clone(), s.ctx.limits).discarding(request.is_shadow()),
            ))
        });
        // A wasm instance is sized per request anyway: a predicted limit is its memory bound.
        let memory_limit_mb = request
            .hints
            .memory_mb
            .filter(|&mb| mb < spec.memory_mb.min(WASM32_MAX_MB));
        let wasm_request = kiln_wasm::Request {
            payload: request.payload.to_vec(),
            env,
            memory_mb: memory_limit_mb.unwrap_or(spec.memory_mb.min(WASM32_MAX_MB)),
            timeout,
            code_dir: Some(spec.code_dir.clone()),
            session: state.clone().map(|s| s as Arc<dyn kiln_wasm::SessionState>),
        };
        let engine = host.engine.clone();
        let module = loaded.module.clone();
        let response =
            tokio::task::spawn_blocking(move || engine.invoke(&module, wasm_request)).await;
        let response = match response {
            Ok(Ok(response)) => response,
            Ok(Err(WasmError::PoolExhausted(_))) => return Err(AgentError::ThrottledNode),
            Ok(Err(e)) => return Err(AgentError::Sandbox(e.to_string())),
            Err(e) => return Err(AgentError::Sandbox(format!("wasm invocation failed: {e}"))),
        };
        slot.requests.fetch_add(1, Ordering::Relaxed);
        slot.last_used_ms
            .store(slot.created.elapsed().as_millis() as u64, Ordering::Relaxed);
        let init_duration =
            session.map_or(Duration::ZERO, |s| s.open_time) + slot_waited + response.instantiation;
        let duration = response.duration.saturating_sub(response.instantiation);
        let mut output = String::from_utf8_lossy(&response.logs).into_owned();
        if response.logs_truncated {
            output.push_str("\n[kiln] the rest of this request's log was dropped (4 MiB limit)\n");
        }
        // The guest's writes are in the session's log before its answer goes anywhere; a guest
        // that trapped or timed out answered nothing, and its writes go with its instance.
        let mut body = Bytes::from(response.body);
        let mut function_error = response.error.is_some();
        let txn = state.and_then(|s| s.take());
        if let (Some(txn), true) = (txn, response.completed) {
            if let Err(error) = txn.commit() {
                let (message, error_body) = error.answer();
                output.push_str(&message);
                output.push('\n');
                body = error_body;
                function_error = true;
            }
        }
        let max_memory_mb = response.max_memory_bytes.div_ceil(1024 * 1024);
        let mut log = report(
            spec,
            &request.request_id,
            &output,
            duration,
            Some(start_path),
            Some(init_duration),
            max_memory_mb,
        );
        if let Some(limit) = memory_limit_mb {
            report_field(&mut log, "Memory Limit", &format!("{limit} MB"));
        }
        if let Some(session) = session {
            let session_start = match (session.was_open, waited) {
                (false, _) => "ColdSession",
                (true, true) => "CopySession",
                (true, false) => "Fork",
            };
            report_field(&mut log, "Session Start", session_start);
        }
        Ok(InvokeOutcome {
            body,
            function_error,
            log,
            cold_start: Some(start_path),
            init_duration: Some(init_duration),
            duration,
            max_memory_mb,
            out_of_memory: response
                .error
                .as_ref()
                .is_some_and(|e| e.error_type == "Runtime.OutOfMemory"),
            memory_limit_mb,
            limit_write: None,
        })
    }
}
