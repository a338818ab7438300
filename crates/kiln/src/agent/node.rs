//! The agent's boundary: what the controller hands it ([`InvokeRequest`] with [`RouteHints`],
//! against a resolved spec), what it answers ([`InvokeOutcome`], [`AgentError`]), the
//! [`NodeAgent`] trait itself, the node's settings, and the services kiln offers inside
//! sandboxes ([`SandboxService`]).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use kiln_sandbox::CgroupManager;
use serde::{Deserialize, Serialize};

use super::{MemoryLender, NodeStatus, SessionStatus, WasmHost};
use crate::function::SharedSpec;
use crate::runtime::Runtimes;

/// Hints the controller extracts from a request for routing (session affinity and data
/// locality build on this).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteHints {
    pub session: Option<String>,
    /// The memory limit predicted for the request, in MB: an idle instance whose current limit
    /// is closest to it is preferred (OFC §6.5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<u32>,
}

/// One invocation, as the agent receives it, its fields grouped by who reads them.
#[derive(Debug, Clone)]
pub struct InvokeRequest {
    /// The runtime's: the event and Lambda's context of the invocation.
    pub request_id: String,
    pub payload: Bytes,
    pub trace_id: String,
    pub client_context: Option<String>,
    /// The node's: where it runs (a session's primary, the instance whose limit is closest)
    /// and at what memory limit (`memory_mb`: the prediction below MemorySize, written to the
    /// instance's cgroup; None runs it at MemorySize).
    pub hints: RouteHints,
    /// The object store's: the sequence stage it runs as, the cache's admission, whether it is
    /// a shadow run (its answer compared and dropped, its writes without visible effect) and
    /// where its writes are recorded.
    pub tags: crate::function::InvocationTags,
}

impl InvokeRequest {
    /// A shadow run (burst offloading's copy of a request, or a warm-up).
    pub fn is_shadow(&self) -> bool {
        self.tags.shadow == crate::function::Shadow::Yes
    }
}

/// How an instance came to exist. kiln takes the most advanced path that exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StartPath {
    /// A new sandbox, the runtime started from scratch, the function loaded and initialised.
    Coldest,
    /// A runtime-generic standby (booted, pre-warmed) that the function's code was loaded into.
    Warm,
    /// From a function-specific snapshot taken after init and warm-up (a fork of a zygote).
    Hot,
}

impl StartPath {
    pub fn as_str(self) -> &'static str {
        match self {
            StartPath::Coldest => "coldest",
            StartPath::Warm => "warm",
            StartPath::Hot => "hot",
        }
    }
}

/// The result of an invocation that reached the function (successfully or not).
#[derive(Debug, Clone)]
pub struct InvokeOutcome {
    pub body: Bytes,
    /// The function failed: Lambda's `X-Amz-Function-Error: Unhandled`.
    pub function_error: bool,
    /// The invocation's log, from `START` to `REPORT`.
    pub log: String,
    /// The start path, when this invocation found no idle instance.
    pub cold_start: Option<StartPath>,
    pub init_duration: Option<Duration>,
    pub duration: Duration,
    pub max_memory_mb: u64,
    /// The runtime was killed for memory (`Runtime.OutOfMemory`).
    pub out_of_memory: bool,
    /// The predicted limit the invocation ran at to its end (None: MemorySize, also when the
    /// monitor raised it on the way).
    pub memory_limit_mb: Option<u32>,
    /// How long writing the invocation's memory limit to its cgroup took, when it changed
    /// (per-invocation sizing on the request's path).
    pub limit_write: Option<Duration>,
}

/// Why the agent did not run an invocation. (Serialized: it crosses the peer port.)
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "message", rename_all = "camelCase")]
pub enum AgentError {
    /// the function's reserved concurrency is exhausted
    #[error("Rate Exceeded.")]
    ThrottledReserved,
    /// the node has no memory or instance capacity left
    #[error("Rate Exceeded.")]
    ThrottledNode,
    /// a sandbox could not be created
    #[error("kiln could not create a sandbox: {0}")]
    Sandbox(String),
    /// a session's state could not be read from its log
    #[error("{0}")]
    Session(String),
    /// the node is shutting down
    #[error("kiln is shutting down")]
    ShuttingDown,
    /// an invocation placed here by another node ([`Placement::Idle`] or
    /// [`Placement::NoQueue`]) would have had to wait: its sender tries elsewhere
    #[error("Rate Exceeded.")]
    Busy,
    /// an invocation forwarded to another node was accepted there and then lost (the node
    /// died or the connection broke): it may have run, so it is not retried
    #[error("the node running the invocation was lost: {0}")]
    PeerLost(String),
}

/// How far an invocation may go to find an instance on this node. Another node's router
/// forwards with `Idle` or `NoQueue`, and tries elsewhere on [`AgentError::Busy`]: a forwarded
/// request never queues behind a node's pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Placement {
    /// An idle instance, a new one, or a place in the queue: what a request entering here gets.
    Any,
    /// An idle instance of the revision only.
    Idle,
    /// An idle instance or a new one, never the queue.
    NoQueue,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InstanceState {
    Starting,
    Idle,
    Busy,
}

impl InstanceState {
    pub fn as_str(self) -> &'static str {
        match self {
            InstanceState::Starting => "starting",
            InstanceState::Idle => "idle",
            InstanceState::Busy => "busy",
        }
    }
}

/// The controller's view of a node.
pub trait NodeAgent: Send + Sync + 'static {
    /// Runs an invocation on an idle instance of `spec`, or a new one.
    fn invoke(
        &self,
        spec: SharedSpec,
        request: InvokeRequest,
    ) -> BoxFuture<'static, Result<InvokeOutcome, AgentError>>;
    /// [`Self::invoke`] within `placement`; `accepted` fires once an instance is taken or a new
    /// one booked, before it runs. An agent that cannot place answers [`AgentError::Busy`] for
    /// anything but [`Placement::Any`].
    fn invoke_placed(
        &self,
        spec: SharedSpec,
        request: InvokeRequest,
        placement: Placement,
        accepted: tokio::sync::oneshot::Sender<()>,
    ) -> BoxFuture<'static, Result<InvokeOutcome, AgentError>> {
        if placement != Placement::Any {
            return Box::pin(async { Err(AgentError::Busy) });
        }
        let _ = accepted.send(());
        self.invoke(spec, request)
    }
    /// Whether an instance of `revision` of `function` is idle here now.
    fn has_idle(&self, _function: &str, _revision: u64) -> bool {
        false
    }
    /// Drops the idle instances of `function` (all of them, or those older than `revision`),
    /// and its snapshots of other revisions.
    fn retire(&self, function: &str, keep_revision: Option<u64>);
    /// Called when a function version is deployed (and for every function when kiln starts):
    /// builds what its start paths need ahead of the first invocation.
    fn prepare(&self, spec: SharedSpec);
    /// Whether what `prepare` builds for `revision` of `function` is built (done when nothing
    /// was to be built, or the build ended, ready or failed).
    fn prepared(&self, _function: &str, _revision: u64) -> super::Prepared {
        super::Prepared::Done
    }
    /// From now on, warm-ups of `spec`'s function replay `events` (each a shadow run) before
    /// its sample event, and its snapshot is built again with them.
    fn warm_with(&self, _spec: SharedSpec, _events: Vec<Bytes>) {}
    /// Demand for `concurrency` instances of `spec` is expected (a burst coming): the function's
    /// instances made ahead of demand are sized as if it had been seen now.
    fn expect(&self, _spec: SharedSpec, _concurrency: u32) {}
    /// Provisioned concurrency: keeps at least `instances` of `spec`'s function made ahead of
    /// demand, beside its `KilnPrebake.Standbys`, until told otherwise (0: by demand alone) or
    /// the function is retired.
    fn provision(&self, _spec: SharedSpec, _instances: u32) {}
    /// How many instances of `spec`'s revision are initialised here (live ones, and those made
    /// ahead of demand and ready), and how many of them are free to take a request. `None`
    /// where each request gets an initialised instance at once (a compiled wasm module's
    /// pooled instances).
    fn initialised(&self, _spec: &SharedSpec) -> Option<Initialised> {
        Some(Initialised::default())
    }
    fn status(&self) -> NodeStatus;
    /// Memory booked by live instances that their current limits leave unused (Σ MemorySize −
    /// limit, in MB), at most the node's budget that the limits leave free: what per-invocation
    /// sizing lends to the object cache.
    fn lendable_memory_mb(&self) -> u64 {
        0
    }
    /// Gives `lender` the memory that instances' limits leave unused of their bookings, and
    /// asks it back whenever they reserve more.
    fn lend_to(&self, _lender: Arc<dyn MemoryLender>) {}
    /// The sessions of `function`, most recently used first.
    /// Where a function's fast path (`KilnBreakout`) is, if it has one on this node.
    fn breakout_status(&self, _function: &str) -> Option<super::BreakoutStatus> {
        None
    }
    fn sessions(&self, function: &str) -> Vec<SessionStatus>;
    /// Ends a session; false if there was none.
    fn end_session(&self, function: &str, session: &str) -> bool;
    /// Lets busy instances finish within `grace`, then removes every instance.
    fn shutdown(&self, grace: Duration) -> BoxFuture<'static, ()>;
}

/// A revision's initialised instances on a node ([`NodeAgent::initialised`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Initialised {
    pub all: usize,
    pub idle: usize,
}

/// Node-level limits.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// The memory all instances together may book.
    pub memory_budget_mb: u64,
    /// Idle instances older than this are reaped.
    pub idle_ttl: Duration,
    /// Requests that may wait per function when all its instances are busy.
    pub queue_depth: usize,
    /// Where sandboxes mount their root (an empty directory).
    pub sandbox_root: PathBuf,
    /// Memory the node's snapshots (zygotes) may hold together; the least recently used ones
    /// are evicted beyond it.
    pub snapshot_memory_mb: u64,
    /// Runtime-generic standby instances kept ready per runtime (the warm path); 0 turns the
    /// warm path off.
    pub warm_standbys: usize,
    /// The most instances made ahead of demand per function (standbys, spare forks).
    pub max_standbys: usize,
    /// How long a function's peak concurrency is remembered whole before it decays (halved
    /// every further window): what sizes its standbys.
    pub standby_window: Duration,
    /// Where sessions' logs are kept, a directory per function.
    pub session_dir: PathBuf,
}

/// What instances need from the agent to start.
pub struct AgentContext {
    pub cgroups: CgroupManager,
    pub runtimes: Runtimes,
    pub sandbox_root: PathBuf,
    /// What kiln serves to functions inside their sandboxes (the object store).
    pub services: Vec<Arc<dyn SandboxService>>,
    /// The engine of the `wasm` runtime, if it could be created.
    pub wasm: Option<Arc<WasmHost>>,
    /// The object store, for the fast path's intrinsics (BREAKOUT), when kiln serves one.
    pub objects: Option<crate::objects::ObjectStore>,
    /// Where warm standbys get their code (None: mounts could not be prepared, no warm path).
    pub code_slots: Option<kiln_sandbox::SlotDir>,
    /// Sandboxes' `/tmp` disks, made ahead.
    pub tmp_disks: Arc<super::TmpDiskPool>,
    /// Real requests that warm-ups replay, per function (see [`NodeAgent::warm_with`]).
    pub replays: Replays,
}

/// Recent real requests per function that its snapshots' and standbys' warm-ups replay before
/// the configured sample event: burst offloading's hot routes, so that every fork starts warm
/// for the requests it will get. Kept in memory only.
#[derive(Default)]
pub struct Replays(std::sync::Mutex<std::collections::HashMap<String, Arc<[Bytes]>>>);

impl Replays {
    pub fn get(&self, function: &str) -> Arc<[Bytes]> {
        use crate::sync::LockExt;
        self.0
            .locked()
            .get(function)
            .cloned()
            .unwrap_or_else(|| Arc::from(Vec::new()))
    }

    /// Replaces `function`'s replays; an empty list forgets them.
    pub fn set(&self, function: &str, events: Vec<Bytes>) {
        use crate::sync::LockExt;
        let mut replays = self.0.locked();
        if events.is_empty() {
            replays.remove(function);
        } else {
            replays.insert(function.to_string(), Arc::from(events));
        }
    }
}

/// A service kiln offers to every instance: environment variables for its SDKs and, in an
/// isolated sandbox, a server on a listener inside the sandbox's network namespace.
pub trait SandboxService: Send + Sync {
    /// `slot` holds the storage tag of the invocation the instance is serving.
    fn attach(
        &self,
        spec: &crate::function::InstanceSpec,
        netns: Option<&kiln_sandbox::NetNs>,
        slot: &crate::function::InvocationSlot,
    ) -> Result<Attachment, ServiceError>;
}

/// Why a [`SandboxService`] could not attach to an instance: the step, and its cause.
#[derive(Debug, thiserror::Error)]
#[error("{step}: {source}")]
pub struct ServiceError {
    pub step: &'static str,
    #[source]
    pub source: std::io::Error,
}

impl ServiceError {
    pub fn new(step: &'static str, source: std::io::Error) -> Self {
        Self { step, source }
    }
}

/// What a [`SandboxService`] gives one instance. The guard keeps its server alive; it is
/// dropped with the instance.
pub struct Attachment {
    pub env: Vec<(String, String)>,
    pub guard: Option<Box<dyn std::any::Any + Send + Sync>>,
}
