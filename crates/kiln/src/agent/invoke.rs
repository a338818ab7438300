//! One invocation on this node, from its request to its outcome: a wasm request, BREAKOUT's
//! fast path, or an instance (its session opened, an instance acquired or started, the event
//! run, the instance released), and the REPORT line its log ends with.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::acquire::Acquired;
use super::instance::{self, SessionCtx};
use super::report::{report, report_field};
use super::{
    breakout, sessions, AgentError, Inner, Instance, InvokeOutcome, InvokeRequest, Placement,
    SharedSpec, StartError, StartPath,
};

/// How many instances one invocation may try when the ones it finds turn out to be gone.
const MAX_ATTEMPTS: u32 = 3;

impl Inner {
    /// The session `id` of `spec`'s function, its log opened and replayed if it was not open.
    pub(super) async fn open_session(
        &self,
        spec: &SharedSpec,
        id: &str,
        config: &crate::session::SessionConfig,
    ) -> Result<SessionCtx, AgentError> {
        let key = (spec.function.clone(), id.to_string());
        let limits = sessions::log::Limits::from(config);
        if let Some(log) = self.state().sessions.log(&key) {
            return Ok(SessionCtx {
                log,
                limits,
                discard: false,
            });
        }
        let dir = self.config.session_dir.join(&spec.function);
        let session = id.to_string();
        let log = tokio::task::spawn_blocking(move || sessions::open(&dir, &session))
            .await
            .map_err(|e| AgentError::Session(format!("opening the session failed: {e}")))?
            .map_err(|e| {
                tracing::error!(function = %spec.function, session = id, "session log: {e}");
                AgentError::Session(format!(
                    "the state of session '{id}' could not be read from its log: {e}"
                ))
            })?;
        let log = self.state().sessions.insert(key, log, config);
        Ok(SessionCtx {
            log,
            limits,
            discard: false,
        })
    }

    /// Opens the session `id` and waits for its turn, up to the function's timeout.
    pub(super) async fn enter_session(
        &self,
        spec: &SharedSpec,
        id: &str,
        config: &crate::session::SessionConfig,
    ) -> Result<SessionTurn, AgentError> {
        let key = (spec.function.clone(), id.to_string());
        let was_open = self.state().sessions.log(&key).is_some();
        let begin = Instant::now();
        let ctx = self.open_session(spec, id, config).await?;
        let open_time = begin.elapsed();
        let turn = self.state().sessions.turn(&key).unwrap_or_default();
        let timeout = Duration::from_secs(u64::from(spec.timeout_s));
        let guard = tokio::time::timeout(timeout, turn.lock_owned())
            .await
            .map_err(|_| AgentError::ThrottledNode)?;
        Ok(SessionTurn {
            id: id.to_string(),
            ctx,
            was_open,
            open_time,
            _guard: guard,
        })
    }

    pub(super) async fn invoke(
        self: Arc<Self>,
        spec: SharedSpec,
        request: InvokeRequest,
        placement: Placement,
        accepted: Option<oneshot::Sender<()>>,
    ) -> Result<InvokeOutcome, AgentError> {
        let mut accepted = accepted;
        if let Some(host) = self.wasm_host(&spec) {
            let host = host?;
            // A wasm request takes a pooled instance of its own: it never waits for one.
            if let Some(accepted) = accepted.take() {
                let _ = accepted.send(());
            }
            return self.invoke_wasm(&host, spec, request).await;
        }
        let mut fast_miss = None;
        // A session's turn, held until this request is answered (BREAKOUT's paths take turns).
        let mut _turn = None;
        if let Some(config) = &spec.breakout {
            match self.invoke_breakout(&spec, config, &request).await {
                breakout::Served::Done(served) => return served,
                breakout::Served::Ordinary { miss, turn } => {
                    fast_miss = miss;
                    _turn = turn;
                }
            }
        }
        let session = match (&request.hints.session, &spec.sessions) {
            (Some(id), Some(config)) => Some(SessionCtx {
                discard: request.is_shadow(),
                ..self.open_session(&spec, id, config).await?
            }),
            _ => None,
        };
        // An idle instance whose runtime exited after its last answer never takes the event; the
        // invocation did not run then, and goes to another instance (as on Lambda, where such a
        // sandbox is re-initialised before the event is delivered).
        let mut attempts = 0;
        let (mut instance, cold, invocation, duration) = loop {
            attempts += 1;
            let acquired = self.acquire(&spec, &request.hints, placement).await?;
            if let Some(accepted) = accepted.take() {
                let _ = accepted.send(());
            }
            self.reclaim_lent();
            let begin = Instant::now();
            let (mut instance, cold) = match acquired {
                Acquired::Warm(instance) => (*instance, false),
                Acquired::Cold(id) => match self.start(&spec, id).await {
                    Ok(instance) => {
                        self.state().instances.started(&instance);
                        (instance, true)
                    }
                    Err(StartError::Platform(message)) => {
                        self.abandon(&spec.function, id);
                        self.refill_standbys();
                        tracing::error!(function = %spec.function, "sandbox: {message}");
                        return Err(AgentError::Sandbox(message.to_string()));
                    }
                    Err(StartError::Function { body, log, path }) => {
                        self.abandon(&spec.function, id);
                        self.after_cold_start(&spec);
                        let duration = begin.elapsed();
                        let log = report(
                            &spec,
                            &request.request_id,
                            &log,
                            duration,
                            Some(path),
                            Some(duration),
                            0,
                        );
                        return Ok(InvokeOutcome {
                            body,
                            function_error: true,
                            log,
                            cold_start: Some(path),
                            init_duration: Some(duration),
                            duration,
                            max_memory_mb: 0,
                            out_of_memory: false,
                            memory_limit_mb: None,
                            limit_write: None,
                        });
                    }
                },
            };
            let invoke_begin = Instant::now();
            let inner = Arc::downgrade(&self);
            let id = instance.id;
            let before_raise = Box::new(move || {
                if let Some(inner) = inner.upgrade() {
                    inner.take_back(id);
                }
            });
            let invocation = instance
                .invoke(&request, session.as_ref(), before_raise)
                .await;
            let duration = invoke_begin.elapsed();
            // An instance that never took the event may be replaced: a warm one that died while
            // idle, or one made ahead of demand (a spare fork, a standby) that died unseen, e.g.
            // with its zygote. A new sandbox that dies at once is the function's to answer for.
            let retriable = !cold || instance.start_path == StartPath::Hot;
            if !invocation.delivered && retriable && attempts < MAX_ATTEMPTS {
                tracing::debug!(instance = instance.id, "the runtime was gone; retrying");
                if let Some(dead) = self.release(instance, false) {
                    self.destroy_later(dead);
                }
                continue;
            }
            break (instance, cold, invocation, duration);
        };
        if let (Some(session), Some(_)) = (&request.hints.session, &spec.sessions) {
            self.state().sessions.served(&spec.function, session);
        }
        let healthy = invocation.healthy;
        let mode = spec
            .breakout
            .as_ref()
            .map(|_| ("ordinary", fast_miss.as_deref()));
        let outcome = outcome(
            &spec,
            &request,
            &mut instance,
            invocation,
            cold,
            duration,
            mode,
        );
        if let Some(dead) = self.release(instance, healthy) {
            self.destroy_later(dead);
        }
        if cold {
            self.after_cold_start(&spec);
        }
        Ok(outcome)
    }
}

/// What an instance's invocation gives its caller: the answer, and the log with its REPORT.
/// `mode` is BREAKOUT's, for a function that asked for it: where the request ran and why the
/// fast path let it go.
pub(super) fn outcome(
    spec: &SharedSpec,
    request: &InvokeRequest,
    instance: &mut Instance,
    invocation: instance::Invocation,
    cold: bool,
    duration: Duration,
    mode: Option<(&str, Option<&str>)>,
) -> InvokeOutcome {
    let max_memory_mb = invocation.max_memory_bytes.div_ceil(1024 * 1024);
    let init_duration = cold.then_some(instance.init_duration);
    let mut output = instance.init_output.take().unwrap_or_default();
    output.push_str(&invocation.output);
    let mut log = report(
        spec,
        &request.request_id,
        &output,
        duration,
        cold.then_some(instance.start_path),
        init_duration,
        max_memory_mb,
    );
    if let Some(limit) = invocation.memory_limit_mb {
        let raised = if invocation.limit_raised {
            " (raised)"
        } else {
            ""
        };
        report_field(&mut log, "Memory Limit", &format!("{limit} MB{raised}"));
    }
    if let Some((mode, miss)) = mode {
        report_field(&mut log, "Mode", mode);
        if let Some(miss) = miss {
            report_field(&mut log, "Fast Path", &format!("miss ({miss})"));
        }
    }
    if request.is_shadow() {
        report_field(&mut log, "Shadow", "true");
    }
    InvokeOutcome {
        body: invocation.body,
        function_error: invocation.function_error,
        log,
        cold_start: cold.then_some(instance.start_path),
        init_duration,
        duration,
        max_memory_mb,
        out_of_memory: invocation.out_of_memory,
        memory_limit_mb: invocation
            .memory_limit_mb
            .filter(|_| !invocation.limit_raised),
        limit_write: invocation.limit_write,
    }
}

/// A request of a session that holds the session's turn while it runs: a wasm request, or
/// any request of a Node function with BREAKOUT (the fast path and Node take turns).
pub(super) struct SessionTurn {
    pub id: String,
    pub ctx: SessionCtx,
    /// The session's state was open in the agent's memory before this request (else it was
    /// opened from its log on disk, or created).
    pub was_open: bool,
    /// Opening the session (replaying its log): part of the request's Init Duration.
    pub open_time: Duration,
    _guard: tokio::sync::OwnedMutexGuard<()>,
}
