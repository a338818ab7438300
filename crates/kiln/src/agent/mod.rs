//! The node agent: sandboxes and instances on one host.
//!
//! The controller talks to the agent only through [`NodeAgent`], with resolved specs and plain
//! data in both directions, so that a later multi-node mode can put the agent on another host
//! behind the same trait. [`LocalAgent`] is the in-process implementation.

mod acquire;
mod breakout;
mod instance;
mod invoke;
mod local;
mod memory;
mod node;
mod pools;
mod report;
mod resize;
mod routing;
mod sessions;
mod spawner;
mod start;
mod state;
mod status;
mod tmp_disks;
mod wasm;
mod wire;

use start::{demand, preparations, snapshots, spare, warm, zygote};
use wire::{frame, runtime_api};

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use breakout::{BreakoutMode, BreakoutStatus};
pub use frame::MAX_FRAME_BYTES;
pub use instance::{Instance, PlatformError, Priority, StartError, MAX_RESPONSE_BYTES};
pub use memory::MemoryLender;
pub use node::{
    AgentConfig, AgentContext, AgentError, Attachment, Initialised, InstanceState, InvokeOutcome,
    InvokeRequest, NodeAgent, Placement, Replays, RouteHints, SandboxService, ServiceError,
    StartPath,
};
pub use preparations::{Prepared, Preparing};
pub use routing::{ClosestMemory, RoutingPolicy, WarmFirst};
pub use sessions::SessionStatus;
pub use status::{InstanceStatus, MemorySharing, NodeStatus, SnapshotStatus, TmpDiskCount};
pub use tmp_disks::TmpDiskPool;
pub use wasm::{cache_dir as wasm_cache_dir, WasmHost};

use invoke::outcome;
use report::{report, report_field};
use state::State;

use crate::function::SharedSpec;
use crate::sync::LockExt;

/// How often the logs of sessions in use are marked used (their modification time), which is
/// what a restarted kiln expires sessions by.
const SESSION_TOUCH_INTERVAL: Duration = Duration::from_secs(30);

/// How a waiting request is woken.
enum Wake {
    Instance(Box<Instance>),
    /// Capacity was freed; try again.
    Retry,
}

/// The in-process node agent.
#[derive(Clone)]
pub struct LocalAgent {
    inner: Arc<Inner>,
}

struct Inner {
    ctx: AgentContext,
    config: AgentConfig,
    routing: Box<dyn RoutingPolicy>,
    state: Mutex<State>,
    /// Instances being destroyed in the background; shutdown waits for them, so that no
    /// sandbox or cgroup outlives kiln.
    destroying: Arc<AtomicUsize>,
    /// Who borrows the memory instances' limits leave unused (the object cache).
    lender: std::sync::OnceLock<Arc<dyn MemoryLender>>,
    /// Instances made ahead of demand are made a few at a time node-wide (one per CPU).
    makers: tokio::sync::Semaphore,
    /// BREAKOUT's fast paths, per function.
    breakouts: breakout::Breakouts,
    /// Which function revisions still have their start paths being built.
    preparations: preparations::Preparations,
    /// Functions whose snapshot is being built again with new warm-up replays (the old one
    /// serves meanwhile).
    rebuilding: Mutex<std::collections::HashSet<String>>,
}

impl LocalAgent {
    pub fn new(ctx: AgentContext, config: AgentConfig) -> Self {
        ctx.cgroups.remove_stale();
        let agent = Self {
            inner: Arc::new(Inner {
                ctx,
                config,
                routing: Box::new(ClosestMemory),
                state: Mutex::new(State::default()),
                destroying: Arc::new(AtomicUsize::new(0)),
                lender: std::sync::OnceLock::new(),
                makers: tokio::sync::Semaphore::new(
                    std::thread::available_parallelism().map_or(1, |n| n.get()),
                ),
                breakouts: breakout::Breakouts::default(),
                preparations: preparations::Preparations::default(),
                rebuilding: Mutex::default(),
            }),
        };
        agent.inner.ctx.tmp_disks.refill();
        agent.inner.refill_standbys();
        let reaper = Arc::downgrade(&agent.inner);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(500));
            let mut touched = Instant::now();
            loop {
                tick.tick().await;
                let Some(inner) = reaper.upgrade() else {
                    return;
                };
                let now = Instant::now();
                for victim in inner.reap_idle(now) {
                    inner.destroy_later(victim);
                }
                inner.reap_idle_tracers(now);
                inner.rebalance_spares();
                inner.ctx.tmp_disks.refill();
                if now.duration_since(touched) >= SESSION_TOUCH_INTERVAL {
                    inner.state().sessions.touch_used(touched);
                    touched = now;
                }
            }
        });
        agent
    }
}

impl Inner {
    /// Destroys an instance in the background (its bookkeeping must already be gone).
    fn destroy_later(&self, instance: Instance) {
        let destroying = self.destroying.clone();
        destroying.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(async move {
            instance.destroy().await;
            destroying.fetch_sub(1, Ordering::SeqCst);
        });
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.locked()
    }

    fn reap_idle(&self, now: Instant) -> Vec<Instance> {
        let ttl = self.config.idle_ttl;
        let mut state = self.state();
        let mut victims = Vec::new();
        for pool in state.instances.pools.values_mut() {
            let (keep, expired): (Vec<_>, Vec<_>) = pool
                .idle
                .drain(..)
                .partition(|i| now.duration_since(i.last_used) < ttl);
            pool.idle = keep;
            victims.extend(expired);
        }
        for victim in &victims {
            state.forget(victim.id);
        }
        let state = &mut *state;
        state.sessions.expire(&mut state.instances.live, now);
        victims
    }

    /// The wasm engine, if `spec` is a wasm function.
    fn wasm_host(&self, spec: &SharedSpec) -> Option<Result<Arc<WasmHost>, AgentError>> {
        let runtime = self.ctx.runtimes.get(&spec.runtime)?;
        (runtime.protocol() == crate::runtime::Protocol::Wasm).then(|| {
            self.ctx.wasm.clone().ok_or_else(|| {
                AgentError::Sandbox("the wasm engine could not be created on this node".into())
            })
        })
    }

    /// Whether an instance of `revision` of `function` is idle.
    fn has_idle(&self, function: &str, revision: u64) -> bool {
        self.state().instances.has_idle(function, revision)
    }
}
