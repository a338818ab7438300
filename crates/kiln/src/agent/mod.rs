//! The node agent: sandboxes and instances on one host.
//!
//! The controller talks to the agent only through [`NodeAgent`], with resolved specs and plain
//! data in both directions, so that a later multi-node mode can put the agent on another host
//! behind the same trait. [`LocalAgent`] is the in-process implementation.

mod breakout;
mod demand;
mod frame;
mod instance;
mod local;
mod memory;
mod node;
mod pools;
mod preparations;
mod report;
mod resize;
mod routing;
mod runtime_api;
mod session_log;
mod session_txn;
mod sessions;
mod snapshots;
mod spare;
mod spawner;
mod status;
mod warm;
mod wasm;
mod zygote;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kiln_sandbox::Cgroup;
use tokio::sync::oneshot;

pub use breakout::{BreakoutMode, BreakoutStatus};
pub use frame::MAX_FRAME_BYTES;
use instance::SessionCtx;
pub use instance::{Instance, Priority, StartError, MAX_RESPONSE_BYTES};
pub use memory::MemoryLender;
use memory::{make_room, reserve};
pub use node::{
    AgentConfig, AgentContext, AgentError, Attachment, InstanceState, InvokeOutcome, InvokeRequest,
    NodeAgent, Placement, RouteHints, SandboxService, StartPath,
};
use pools::Pool;
pub use preparations::{Prepared, Preparing};
use report::{report, report_field};
pub use routing::{ClosestMemory, RoutingPolicy, WarmFirst};
pub use sessions::SessionStatus;
use snapshots::SnapshotSlot;
pub use status::{InstanceStatus, MemorySharing, NodeStatus, SnapshotStatus};
pub use wasm::{cache_dir as wasm_cache_dir, WasmHost};

use crate::function::SharedSpec;
use crate::sync::LockExt;

/// How often the logs of sessions in use are marked used (their modification time), which is
/// what a restarted kiln expires sessions by.
const SESSION_TOUCH_INTERVAL: Duration = Duration::from_secs(30);

/// How many instances one invocation may try when the ones it finds turn out to be gone.
const MAX_ATTEMPTS: u32 = 3;

/// How a waiting request is woken.
enum Wake {
    Instance(Box<Instance>),
    /// Capacity was freed; try again.
    Retry,
}

struct LiveInstance {
    function: String,
    revision: u64,
    state: InstanceState,
    start_path: StartPath,
    created: Instant,
    memory_mb: u32,
    /// The memory limit its cgroup had after its last invocation (below `memory_mb` when the
    /// invocation ran at a prediction): the difference is lent to the object cache.
    limit_mb: u32,
    cgroup: Option<Arc<Cgroup>>,
    pid: Option<u32>,
    /// Sessions whose primary this instance is.
    sessions: u32,
    /// Whether it counts in its function's pool (a tracing instance does not).
    pooled: bool,
}

#[derive(Default)]
struct State {
    pools: HashMap<String, Pool>,
    live: HashMap<u64, LiveInstance>,
    zygotes: HashMap<String, SnapshotSlot>,
    /// Runtime-generic standbys, per runtime (the warm path).
    warm: HashMap<String, warm::WarmPool>,
    /// Instances made ahead of demand per function (the hot path): spare forks of runtimes
    /// that fork, standbys beside the snapshot of those that cannot.
    spares: HashMap<String, spare::Spares>,
    /// The newest revision of each function the node was told of (by `prepare` or `retire`):
    /// nothing is built ahead of demand for an older one.
    newest: HashMap<String, u64>,
    sessions: HashMap<sessions::SessionKey, sessions::Session>,
    /// Requests of a session waiting for its primary, per instance id.
    bound_waiters: HashMap<u64, VecDeque<oneshot::Sender<Wake>>>,
    memory_reserved_mb: u64,
    next_id: u64,
    shutting_down: bool,
}

enum Acquired {
    Warm(Box<Instance>),
    /// A slot was reserved for a new instance with this id.
    Cold(u64),
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
            }),
        };
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
                if now.duration_since(touched) >= SESSION_TOUCH_INTERVAL {
                    sessions::touch_used(&inner.state(), touched);
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
        for pool in state.pools.values_mut() {
            let (keep, expired): (Vec<_>, Vec<_>) = pool
                .idle
                .drain(..)
                .partition(|i| now.duration_since(i.last_used) < ttl);
            pool.idle = keep;
            victims.extend(expired);
        }
        for victim in &victims {
            forget(&mut state, victim.id);
        }
        sessions::expire(&mut state, now);
        victims
    }

    async fn acquire(
        &self,
        spec: &SharedSpec,
        hints: &RouteHints,
        placement: Placement,
    ) -> Result<Acquired, AgentError> {
        let queue_timeout = Duration::from_secs(u64::from(spec.timeout_s));
        let session = match (&hints.session, &spec.sessions) {
            (Some(id), Some(config)) => Some((id.as_str(), config)),
            _ => None,
        };
        // The node's budget counts what an instance may use now: the limit predicted for its
        // invocation, else its MemorySize (OFC: the rest is lent to the object cache).
        let need = hints
            .memory_mb
            .filter(|&mb| mb < spec.memory_mb)
            .unwrap_or(spec.memory_mb);
        loop {
            let (waiter, victims) = 'decide: {
                let mut guard = self.state();
                let state = &mut *guard;
                if state.shutting_down {
                    return Err(AgentError::ShuttingDown);
                }
                let pool = state.pools.entry(spec.function.clone()).or_default();
                // An instance of an older revision must never serve a newer spec. (Checked
                // first: the split allocates, and there is rarely anything to split.)
                let stale = if pool.idle.iter().any(|i| i.spec.revision != spec.revision) {
                    let (current, stale): (Vec<_>, Vec<_>) = pool
                        .idle
                        .drain(..)
                        .partition(|i| i.spec.revision == spec.revision);
                    pool.idle = current;
                    stale
                } else {
                    Vec::new()
                };
                // Retired for good: their bookkeeping, booked memory and cgroups go with them.
                for old in stale {
                    forget(state, old.id);
                    self.destroy_later(old);
                }
                // A session's request goes to its primary, or where placement puts the session.
                let target = session.and_then(|(session, config)| {
                    match sessions::target(state, spec, session, config) {
                        sessions::Target::Instance(id) => Some(id),
                        sessions::Target::New => None,
                    }
                });
                let pool = state.pools.get_mut(&spec.function).expect("pool exists");
                let ask = pools::Ask {
                    routed: self.routing.choose(&pool.idle, hints),
                    session: session.map(|_| match target {
                        Some(id) => match pool.idle.iter().position(|i| i.id == id) {
                            Some(index) => pools::Primary::Idle(index),
                            None => pools::Primary::Busy(id),
                        },
                        None => pools::Primary::None,
                    }),
                    live: pool.live,
                    max_instances: spec.max_instances,
                    reserved_concurrency: spec.reserved_concurrency.is_some(),
                    waiters: {
                        // Requests that gave up waiting (queue timeout, caller gone) hold no place.
                        pool.waiters.retain(|w| !w.is_closed());
                        pool.waiters.len()
                    },
                    queue_depth: self.config.queue_depth,
                };
                let decision = match (placement, pools::decide(&ask)) {
                    (_, take @ pools::Decision::Take(_)) | (Placement::Any, take) => take,
                    (Placement::NoQueue, start @ pools::Decision::Start) => start,
                    // Placed here by another node: it tries elsewhere rather than wait here.
                    _ => return Err(AgentError::Busy),
                };
                match decision {
                    pools::Decision::Take(index) => {
                        let instance = pool.idle.remove(index);
                        if let Some(live) = state.live.get_mut(&instance.id) {
                            live.state = InstanceState::Busy;
                            reserve(&mut state.memory_reserved_mb, live, need);
                        }
                        if let Some((session, _)) = session {
                            sessions::bind(state, spec, session, instance.id);
                        }
                        return Ok(Acquired::Warm(Box::new(instance)));
                    }
                    pools::Decision::WaitForPrimary(id) => {
                        // The primary is busy (or starting): the request queues on it.
                        if let Some((session, _)) = session {
                            sessions::bind(state, spec, session, id);
                        }
                        let (tx, rx) = oneshot::channel();
                        state.bound_waiters.entry(id).or_default().push_back(tx);
                        break 'decide (Some(rx), Vec::new());
                    }
                    pools::Decision::Throttle(e) => return Err(e),
                    pools::Decision::Queue => {
                        let (tx, rx) = oneshot::channel();
                        pool.waiters.push_back(tx);
                        (Some(rx), Vec::new())
                    }
                    pools::Decision::Start => {
                        let (victims, fits) =
                            make_room(state, u64::from(need), self.config.memory_budget_mb);
                        if !fits && placement != Placement::Any {
                            return Err(AgentError::Busy);
                        } else if !fits {
                            // Not even with every idle instance gone: the node is full.
                            (None, victims)
                        } else {
                            let id = self.reserve_new(state, spec, need);
                            let pool = state.pools.get_mut(&spec.function).expect("pool exists");
                            pool.demand.observe(
                                Instant::now(),
                                pool.live,
                                self.config.standby_window,
                            );
                            if let Some((session, _)) = session {
                                sessions::bind(state, spec, session, id);
                            }
                            drop(guard);
                            for victim in victims {
                                self.destroy_later(victim);
                            }
                            return Ok(Acquired::Cold(id));
                        }
                    }
                }
            };
            for victim in victims {
                self.destroy_later(victim);
            }
            let Some(waiter) = waiter else {
                return Err(AgentError::ThrottledNode);
            };
            let mut waiter = waiter;
            let woken = tokio::select! {
                woken = &mut waiter => woken,
                _ = tokio::time::sleep(queue_timeout) => {
                    // An instance sent just as we gave up must not be lost with the channel.
                    waiter.close();
                    if let Ok(Wake::Instance(instance)) = waiter.try_recv() {
                        if let Some(back) = self.release(*instance, true) {
                            self.destroy_later(back);
                        }
                    }
                    return Err(AgentError::ThrottledReserved);
                }
            };
            match woken {
                Ok(Wake::Instance(instance)) if instance.spec.revision == spec.revision => {
                    if let Some((session, _)) = session {
                        sessions::bind(&mut self.state(), spec, session, instance.id);
                    }
                    return Ok(Acquired::Warm(instance));
                }
                Ok(Wake::Instance(old)) => {
                    // Queued before a redeploy: an instance of another revision may not serve it.
                    forget(&mut self.state(), old.id);
                    self.destroy_later(*old);
                    continue;
                }
                Ok(Wake::Retry) => continue,
                Err(_) => return Err(AgentError::ShuttingDown),
            }
        }
    }

    /// Books a new instance of `spec` (its id, its memory, its place in the pool's count),
    /// starting on the coldest path until a faster one adopts it.
    fn reserve_new(&self, state: &mut State, spec: &SharedSpec, need: u32) -> u64 {
        state.next_id += 1;
        let id = state.next_id;
        state.memory_reserved_mb += u64::from(need);
        state
            .pools
            .get_mut(&spec.function)
            .expect("pool exists")
            .live += 1;
        state.live.insert(
            id,
            LiveInstance {
                function: spec.function.clone(),
                revision: spec.revision,
                state: InstanceState::Starting,
                start_path: StartPath::Coldest,
                created: Instant::now(),
                memory_mb: spec.memory_mb,
                limit_mb: need,
                cgroup: None,
                pid: None,
                sessions: 0,
                pooled: true,
            },
        );
        id
    }

    /// Returns an instance after an invocation: to a waiting request, to the idle pool, or to
    /// its end when it is unhealthy or outdated.
    fn release(&self, mut instance: Instance, healthy: bool) -> Option<Instance> {
        let mut guard = self.state();
        let state = &mut *guard;
        let shutting_down = state.shutting_down;
        let Some(pool) = state.pools.get_mut(&instance.spec.function) else {
            return Some(instance);
        };
        if healthy && !shutting_down {
            instance.last_used = Instant::now();
            // Requests of this instance's sessions first: they can go nowhere else.
            if let Some(bound) = state.bound_waiters.get_mut(&instance.id) {
                while let Some(waiter) = bound.pop_front() {
                    match waiter.send(Wake::Instance(Box::new(instance))) {
                        Ok(()) => return None,
                        Err(Wake::Instance(back)) => instance = *back,
                        Err(Wake::Retry) => unreachable!("we sent an instance"),
                    }
                }
                state.bound_waiters.remove(&instance.id);
            }
            while let Some(waiter) = pool.waiters.pop_front() {
                match waiter.send(Wake::Instance(Box::new(instance))) {
                    Ok(()) => return None,
                    Err(Wake::Instance(back)) => instance = *back,
                    Err(Wake::Retry) => unreachable!("we sent an instance"),
                }
            }
            if let Some(live) = state.live.get_mut(&instance.id) {
                live.state = InstanceState::Idle;
                reserve(
                    &mut state.memory_reserved_mb,
                    live,
                    instance.memory_limit_mb(),
                );
            }
            pool.idle.push(instance);
            return None;
        }
        if let Some(waiter) = pool.waiters.pop_front() {
            let _ = waiter.send(Wake::Retry);
        }
        forget(state, instance.id);
        Some(instance)
    }

    /// Gives back a reservation whose instance failed to start (or, for wasm, has finished).
    fn abandon(&self, function: &str, id: u64) {
        let mut state = self.state();
        forget(&mut state, id);
        if let Some(pool) = state.pools.get_mut(function) {
            if let Some(waiter) = pool.waiters.pop_front() {
                let _ = waiter.send(Wake::Retry);
            }
        }
    }

    /// Starts a new instance by the most advanced path that exists for `spec`: its standby or a
    /// fork of its zygote (hot), else a runtime-generic standby (warm), else the coldest path.
    /// The caller calls [`Inner::after_cold_start`] once the first invocation is answered.
    /// A broken snapshot falls back to the next path, with the reason logged.
    async fn start(self: &Arc<Self>, spec: &SharedSpec, id: u64) -> Result<Instance, StartError> {
        let begin = Instant::now();
        let made = |instance: Option<Box<Instance>>, what| {
            instance.and_then(|i| self.adopt_made_ahead(i, what, id, begin))
        };
        if let Some(instance) = made(self.take_standby(spec), "standby instance") {
            return Ok(instance);
        }
        if let Some(instance) = made(self.take_spare(spec), "spare fork") {
            return Ok(instance);
        }
        if let Some(zygote) = self.ready_zygote(spec) {
            match Instance::fork(&self.ctx, &zygote, spec, id, false, Priority::Request).await {
                Ok(instance) => return Ok(instance),
                Err(reason) => {
                    tracing::warn!(
                        function = %spec.function,
                        "hot start failed, falling back to the coldest path: {reason}"
                    );
                    self.drop_zygote(&spec.function, &zygote);
                }
            }
        }
        match self.start_warm(spec).await {
            Some(Ok(instance)) => {
                self.move_reservation(id, instance.id);
                return Ok(instance);
            }
            // The function's own init failed: running it again on another path would repeat
            // its side effects, and fail the same way.
            Some(Err(e @ StartError::Function { .. })) => return Err(e),
            Some(Err(StartError::Platform(reason))) => tracing::warn!(
                function = %spec.function,
                "warm start failed, falling back to the coldest path: {reason}"
            ),
            None => {}
        }
        Instance::start_cold(&self.ctx, spec, id).await
    }

    /// What a cold start used up is rebuilt once its first invocation is answered, not while
    /// it runs: the function's snapshot (unless prebaking is off) and the runtime standbys.
    /// Both boot a runtime, which on a small node would take CPU from that first invocation.
    fn after_cold_start(self: &Arc<Self>, spec: &SharedSpec) {
        self.build_zygote(spec);
        self.refill_spare(spec);
        self.refill_standbys();
    }

    /// Hands a hot instance made ahead of demand (a function's standby or spare fork) to the
    /// cold start that reserved `id`, if it is still alive; else lets it go.
    fn adopt_made_ahead(
        &self,
        mut instance: Box<Instance>,
        what: &str,
        id: u64,
        begin: Instant,
    ) -> Option<Instance> {
        if !instance.alive() {
            tracing::warn!(function = %instance.spec.function, "the {what} was gone; falling back");
            self.destroy_later(*instance);
            return None;
        }
        instance.join_requests();
        instance.start_path = StartPath::Hot;
        instance.init_duration = begin.elapsed();
        instance.last_used = Instant::now();
        self.move_reservation(id, instance.id);
        Some(*instance)
    }

    /// An instance that keeps an id of its own (a standby) takes over the reservation made for
    /// the new instance `reserved`.
    fn move_reservation(&self, reserved: u64, id: u64) {
        let mut state = self.state();
        if let Some(entry) = state.live.remove(&reserved) {
            state.live.insert(id, entry);
        }
        sessions::rebind(&mut state, reserved, id);
    }

    fn take_standby(&self, spec: &SharedSpec) -> Option<Box<Instance>> {
        let mut state = self.state();
        match state.zygotes.get(&spec.function) {
            Some(SnapshotSlot::Standby(i, _)) if i.spec.revision == spec.revision => {
                match state.zygotes.remove(&spec.function) {
                    Some(SnapshotSlot::Standby(instance, _)) => Some(instance),
                    _ => None,
                }
            }
            _ => None,
        }
    }

    /// The session `id` of `spec`'s function, its log opened and replayed if it was not open.
    async fn open_session(
        &self,
        spec: &SharedSpec,
        id: &str,
        config: &crate::session::SessionConfig,
    ) -> Result<SessionCtx, AgentError> {
        let key = (spec.function.clone(), id.to_string());
        let limits = session_log::Limits::from(config);
        if let Some(log) = sessions::log(&self.state(), &key) {
            return Ok(SessionCtx { log, limits });
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
        let log = sessions::insert(&mut self.state(), key, log, config);
        Ok(SessionCtx { log, limits })
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
        self.state()
            .pools
            .get(function)
            .is_some_and(|pool| pool.idle.iter().any(|i| i.spec.revision == revision))
    }

    async fn invoke(
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
        if let Some(config) = &spec.breakout {
            match self.invoke_breakout(&spec, config, &request).await {
                breakout::Served::Done(served) => return served,
                breakout::Served::Ordinary { miss } => fast_miss = miss,
            }
        }
        let session = match (&request.hints.session, &spec.sessions) {
            (Some(id), Some(config)) => Some(self.open_session(&spec, id, config).await?),
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
                        if let Some(live) = self.state().live.get_mut(&instance.id) {
                            live.state = InstanceState::Busy;
                            live.cgroup = Some(instance.cgroup.clone());
                            live.start_path = instance.start_path;
                            live.pid = instance.pid();
                        }
                        (instance, true)
                    }
                    Err(StartError::Platform(message)) => {
                        self.abandon(&spec.function, id);
                        self.refill_standbys();
                        tracing::error!(function = %spec.function, "sandbox: {message}");
                        return Err(AgentError::Sandbox(message));
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
            sessions::served(&mut self.state(), &spec.function, session);
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
fn outcome(
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
    if request.shadow {
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

/// Whether the node knows of a newer revision of `spec`'s function (a request of the old one
/// may still be finishing; nothing should be built for it).
fn outdated(state: &State, spec: &SharedSpec) -> bool {
    state
        .newest
        .get(&spec.function)
        .is_some_and(|newest| spec.revision < *newest)
}

/// Drops the bookkeeping of an instance that is gone or going. Requests queued on it for their
/// session try again: their session is placed anew.
fn forget(state: &mut State, id: u64) {
    for waiter in state.bound_waiters.remove(&id).unwrap_or_default() {
        let _ = waiter.send(Wake::Retry);
    }
    if let Some(live) = state.live.remove(&id) {
        state.memory_reserved_mb = state
            .memory_reserved_mb
            .saturating_sub(u64::from(live.limit_mb));
        if let Some(pool) = state.pools.get_mut(&live.function).filter(|_| live.pooled) {
            pool.live = pool.live.saturating_sub(1);
        }
    }
}
