//! A request on the compiled trace: run in a blocking thread with its arena booked, its
//! staged writes committed and its log lines written with the answer, or a miss counted.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::effects::{self, ContextFields, FastEffects};
use super::revision::Breakout;
use super::store::FastStore;
use super::trace::is_throw;
use crate::agent::instance::SessionCtx;
use crate::agent::sessions::txn::Txn;
use crate::agent::{Inner, InvokeOutcome, InvokeRequest};
use crate::function::SharedSpec;
use crate::sync::LockExt;

/// How a fast request ended.
pub(super) enum Fast {
    Answer(InvokeOutcome),
    Miss(String),
    /// Not tried: no room in the node's memory or the function's concurrency.
    Skipped,
}

/// Fast runs executing at once on the node: one a CPU. A run is CPU-bound and its deadline is
/// wall time, so more threads than CPUs only share them: under a load past what the CPUs can
/// answer, every run would slow down together until runs met their deadline, missed and ran
/// again in instances, which the CPUs could serve still less. A run beyond the slots waits for
/// one, its wait neither in its deadline nor in its Duration.
fn fast_slots() -> &'static tokio::sync::Semaphore {
    static SLOTS: std::sync::OnceLock<tokio::sync::Semaphore> = std::sync::OnceLock::new();
    SLOTS.get_or_init(|| {
        tokio::sync::Semaphore::new(std::thread::available_parallelism().map_or(1, |n| n.get()))
    })
}

impl Inner {
    /// Runs a request on the compiled trace, in a blocking thread, its arena booked in the
    /// node's memory and its run counted against the function's concurrency.
    pub(super) async fn run_fast(
        self: &Arc<Self>,
        spec: &SharedSpec,
        breakout: &Arc<Breakout>,
        request: &InvokeRequest,
        session: Option<&SessionCtx>,
    ) -> Fast {
        let Some(loaded) = breakout.progress.locked().fast.clone() else {
            return Fast::Skipped;
        };
        let arena_mb = u64::from(breakout.config.fast_path_memory_mb);
        {
            let mut state = self.state();
            let live = state
                .instances
                .pools
                .get(&spec.function)
                .map_or(0, |p| p.live);
            let running = breakout.running.load(Ordering::SeqCst);
            if live + running >= spec.max_instances as usize
                || state.instances.reserved_mb + arena_mb > self.config.memory_budget_mb
            {
                return Fast::Skipped;
            }
            state.instances.reserved_mb += arena_mb;
            breakout.running.fetch_add(1, Ordering::SeqCst);
        }
        let payload = request.payload.clone();
        let deadline = Duration::from_millis(u64::from(breakout.config.fast_path_timeout_ms));
        let store = self.ctx.objects.as_ref().and_then(|objects| {
            let direct = objects.direct()?;
            let credentials = objects.function_credentials(spec.name());
            let store = FastStore::new(
                direct,
                objects.atomic(),
                spec.name(),
                credentials,
                request.tags.clone(),
            );
            Some((store, tokio::runtime::Handle::current()))
        });
        let committer = store.as_ref().map(|(store, _)| store.clone());
        let context = ContextFields {
            request_id: &request.request_id,
            function: spec.name(),
            version: &spec.version,
            arn: &spec.arn,
            memory_mb: spec.memory_mb,
            client_context: request.client_context.as_deref(),
        };
        // The function's timeout, as its handler sees it in Node (`getRemainingTimeInMillis`).
        let function_deadline = Instant::now() + Duration::from_secs(u64::from(spec.timeout_s));
        // The session's writes go to a transaction of its own, committed with the answer.
        let session = request
            .hints
            .session
            .clone()
            .zip(session.map(|s| Txn::new(s.log.clone(), s.limits).discarding(s.discard)));
        let (effects, held) =
            FastEffects::new(&context, &spec.env, store, function_deadline, session);
        let slot = fast_slots().acquire().await;
        let begin = Instant::now();
        let outcome =
            tokio::task::spawn_blocking(move || loaded.run(&payload, Box::new(effects), deadline))
                .await;
        let duration = begin.elapsed();
        drop(slot);
        {
            let mut state = self.state();
            state.instances.reserved_mb = state.instances.reserved_mb.saturating_sub(arena_mb);
            breakout.running.fetch_sub(1, Ordering::SeqCst);
        }
        let mut outcome = match outcome {
            Ok(outcome) => outcome,
            Err(e) => kiln_breakout::exec::Outcome::Miss {
                reason: format!("the fast path failed: {e}"),
                at: None,
            },
        };
        // The run answered: its staged writes are committed now, all or none (none: Node runs
        // the request, as after any miss).
        let staged = std::mem::take(&mut held.locked().staged);
        // A handler that threw after its writes made them, as in Node: they are committed too.
        let answered = matches!(
            outcome,
            kiln_breakout::exec::Outcome::Answer(_) | kiln_breakout::exec::Outcome::Error(_)
        );
        if answered && !staged.is_empty() {
            let committed = match &committer {
                Some(store) => effects::commit(staged, store)
                    .await
                    .map_err(|e| e.to_string()),
                None => Err("the store is not reachable".to_string()),
            };
            if let Err(reason) = committed {
                outcome = kiln_breakout::exec::Outcome::Miss {
                    reason: format!("the commit failed: {reason}"),
                    at: None,
                };
            }
        }
        // Then the session's, all or none: after the objects', before the answer. A
        // handler that threw keeps its session writes too, as the Node shim commits them.
        let txn = held.locked().session.take();
        if let (Some(txn), true) = (txn, answered) {
            if let Err(e) = txn.commit() {
                outcome = kiln_breakout::exec::Outcome::Miss {
                    reason: format!("the session commit failed: {e}"),
                    at: None,
                };
            }
        }
        let (body, function_error) = match outcome {
            kiln_breakout::exec::Outcome::Answer(body) => (body, false),
            kiln_breakout::exec::Outcome::Error(error) => {
                // The runtime's `Invoke Error` line, after the function's own (never filtered
                // by the log level: the shim writes it directly).
                held.locked()
                    .output
                    .push_str(&effects::invoke_error_line(&request.request_id, &error.log));
                (error.body.into_bytes(), true)
            }
            kiln_breakout::exec::Outcome::Miss { reason, at } => {
                return self.fast_missed(breakout, reason, at).await;
            }
        };
        breakout.count("fast", None);
        breakout.observe(false);
        // The log lines it held are written now, with the answer.
        let output = std::mem::take(&mut held.locked().output);
        let mut log =
            crate::agent::report(spec, &request.request_id, &output, duration, None, None, 0);
        crate::agent::report_field(&mut log, "Mode", "decontainerized");
        if request.is_shadow() {
            crate::agent::report_field(&mut log, "Shadow", "true");
        }
        Fast::Answer(InvokeOutcome {
            body: body.into(),
            function_error,
            log,
            cold_start: None,
            init_duration: None,
            duration,
            max_memory_mb: 0,
            out_of_memory: false,
            memory_limit_mb: None,
            limit_write: None,
        })
    }

    /// A fast run that missed: counted, and the bounce limit checked.
    async fn fast_missed(
        self: &Arc<Self>,
        breakout: &Arc<Breakout>,
        reason: String,
        at: Option<String>,
    ) -> Fast {
        let text = match at {
            Some(at) => format!("{reason} at {at}"),
            None => reason.clone(),
        };
        breakout.count("miss", Some(&reason));
        // The function's own errors are not the fast path bouncing.
        if !is_throw(&reason) {
            breakout.observe(true);
        }
        if let Some(reason) = breakout.bounced() {
            breakout.set_ordinary(reason);
            let (function, revision) = breakout.function_revision();
            self.runs_ordinary(&function, revision);
            self.end_tracing(breakout).await;
        }
        Fast::Miss(text)
    }
}
