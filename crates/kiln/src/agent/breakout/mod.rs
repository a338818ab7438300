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

use super::{AgentError, Inner, InvokeOutcome, InvokeRequest};
use crate::function::{BreakoutConfig, SharedSpec};

/// What the fast path made of a request.
pub(super) enum Served {
    /// Answered here: on the fast path or by the tracing instance.
    Done(Result<InvokeOutcome, AgentError>),
    /// The ordinary path serves it; `miss` is why the fast path let it go, for its REPORT.
    Ordinary { miss: Option<String> },
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
        // Requests of a session hold its turn on its primary; neither path here is that.
        if request.hints.session.is_some() {
            breakout.count("ordinary", None);
            return Served::Ordinary { miss: None };
        }
        match breakout.mode() {
            BreakoutMode::Tracing => match self.on_tracer(spec, &breakout, request, None).await {
                Some(outcome) => Served::Done(Ok(outcome)),
                None => {
                    breakout.count("ordinary", None);
                    Served::Ordinary { miss: None }
                }
            },
            BreakoutMode::Decontainerized => {
                let miss = match self.run_fast(spec, &breakout, request).await {
                    Fast::Answer(outcome) => return Served::Done(Ok(outcome)),
                    Fast::Skipped => None,
                    Fast::Miss(miss) => Some(miss),
                };
                // A miss goes to the tracing instance when it is idle, so that its path is
                // traced too (retracing).
                if let Some(miss) = &miss {
                    if let Some(outcome) =
                        self.on_tracer(spec, &breakout, request, Some(miss)).await
                    {
                        return Served::Done(Ok(outcome));
                    }
                }
                breakout.count("ordinary", None);
                Served::Ordinary { miss }
            }
            _ => {
                breakout.count("ordinary", None);
                Served::Ordinary { miss: None }
            }
        }
    }
}
