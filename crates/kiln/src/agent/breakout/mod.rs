//! BREAKOUT on the node (docs/breakout.md): per function revision with `KilnBreakout` `auto`,
//! the instrumented copy of its code, its one tracing instance, and the mode machine.
//!
//! A revision starts by instrumenting its package off the request path. While it is `tracing`,
//! a request that finds the tracing instance idle runs there (an ordinary Node instance running
//! the instrumented code under `breakout.js`, whose answers are the real ones); any other
//! request takes the ordinary path. After `TraceRequests` traced requests the agent asks the
//! instance for its trace tree, validates it (it comes from inside the sandbox), lets the
//! instance go and compiles the trace off the request path. A revision that cannot take the
//! fast path is `ordinary`, with the reason, and every request takes the ordinary path.
//!
//! This file dispatches a request; `revision.rs` holds a revision's state and counts,
//! `fast.rs` runs a request on the compiled trace, `tracer.rs` the tracing instance and the
//! compiling, `effects.rs` and `store.rs` a fast request's intrinsics, `trace.rs` instrumenting,
//! validating and compiling a trace.

use std::sync::Arc;

mod effects;
mod fast;
mod revision;
mod status;
mod store;
mod trace;
mod tracer;
use fast::Fast;
pub(super) use revision::Breakouts;
pub use status::{BreakoutMode, BreakoutStatus};

use super::instance::SessionCtx;
use super::invoke::SessionTurn;
use super::{AgentError, Inner, InvokeOutcome, InvokeRequest};
use crate::function::{BreakoutConfig, SharedSpec};

/// What the fast path made of a request.
pub(super) enum Served {
    /// Answered here: on the fast path or by the tracing instance.
    Done(Result<InvokeOutcome, AgentError>),
    /// The ordinary path serves it; `miss` is why the fast path let it go, for its REPORT.
    /// A request of a session keeps the session's turn (`turn`) until it is answered there.
    Ordinary {
        miss: Option<String>,
        turn: Option<SessionTurn>,
    },
}

impl Inner {
    /// A request of a function with `KilnBreakout` `auto`: on the fast path when it is
    /// compiled, on the tracing instance when that is idle and the trace is still growing, else
    /// on the ordinary path.
    pub(super) async fn invoke_breakout(
        self: &Arc<Self>,
        spec: &SharedSpec,
        config: &BreakoutConfig,
        request: &InvokeRequest,
    ) -> Served {
        let breakout = self.breakout_of(spec, config);
        // The requests of a session take turns whichever path serves them (the fast path,
        // the tracing instance or the session's primary), so that a read-modify-write of the
        // session is linearizable across the paths as on one primary. The turn is taken
        // before anything else, so a request waiting for it holds nothing.
        let turn = match (&request.hints.session, &spec.sessions) {
            (Some(id), Some(sessions)) => match self.enter_session(spec, id, sessions).await {
                Ok(turn) => Some(turn),
                Err(e) => return Served::Done(Err(e)),
            },
            _ => None,
        };
        let session = turn.as_ref().map(|t| SessionCtx {
            log: t.ctx.log.clone(),
            limits: t.ctx.limits,
            discard: request.is_shadow(),
        });
        let served = |outcome: InvokeOutcome| {
            if let Some(turn) = &turn {
                self.state().sessions.served(&spec.function, &turn.id);
            }
            Served::Done(Ok(outcome))
        };
        let miss = match breakout.mode() {
            BreakoutMode::Tracing => {
                if let Some(outcome) = self
                    .on_tracer(spec, &breakout, request, None, session.as_ref())
                    .await
                {
                    return served(outcome);
                }
                None
            }
            BreakoutMode::Decontainerized => {
                let miss = match self
                    .run_fast(spec, &breakout, request, session.as_ref())
                    .await
                {
                    Fast::Answer(outcome) => return served(outcome),
                    Fast::Skipped => None,
                    Fast::Miss(miss) => Some(miss),
                };
                // A miss goes to the tracing instance when it is idle, so that its path is
                // traced too (retracing).
                if let Some(miss) = &miss {
                    if let Some(outcome) = self
                        .on_tracer(spec, &breakout, request, Some(miss), session.as_ref())
                        .await
                    {
                        return served(outcome);
                    }
                }
                miss
            }
            _ => None,
        };
        breakout.count("ordinary", None);
        Served::Ordinary { miss, turn }
    }
}
