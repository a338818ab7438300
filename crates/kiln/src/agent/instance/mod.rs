//! One instance: a sandboxed runtime process that serves one invocation at a time.
//!
//! This file is the instance every start path makes; `invoke.rs` the invocation loop they
//! share; `launch.rs` is the coldest path (a new sandbox) and the warm path's standbys, `fork.rs` the paths from a
//! snapshot (a zygote's fork through the [`ForkServer`] capability, a standby given the
//! function's code), `transport.rs` the two ways kiln talks to a runtime.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kiln_sandbox::{Cgroup, NetNs};
use tokio::net::unix::pipe;
use tokio::sync::oneshot;

mod fork;
mod invoke;
mod launch;
mod transport;

pub use fork::ForkServer;
use invoke::{error_json, exit_description, invoke_header};
pub(in crate::agent) use launch::limits;
use transport::{Message, Transport};

use super::frame::FrameError;
use super::sessions::log::SessionLog;
use super::{InvokeRequest, StartPath};
use crate::function::SharedSpec;

/// Lambda gives a function's init phase 10 seconds.
const INIT_TIMEOUT: Duration = Duration::from_secs(10);
/// Where the Runtime API listens inside an isolated sandbox.
const RUNTIME_API_ADDR: &str = "127.0.0.1:9001";
/// Lambda's limit on a synchronous response.
pub const MAX_RESPONSE_BYTES: usize = 6 * 1024 * 1024;

/// The session an invocation belongs to: its log, and the limits its writes are held to.
/// At what CPU share an instance is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Priority {
    /// For a request that waits for it: its function's share.
    Request,
    /// Ahead of demand: the lowest share, and SCHED_IDLE where the kernel has `cpu.idle`, so
    /// that making it never slows the requests being served (an idle task is preempted at once
    /// when another wakes; a low share alone still delays a request by a wake-up's latency);
    /// [`Instance::join_requests`] gives it its function's share when one takes it.
    Ahead,
}

pub struct SessionCtx {
    pub log: Arc<SessionLog>,
    pub limits: super::sessions::log::Limits,
    /// A shadow run's (a warm-up replaying a real request, burst offloading's copy of one):
    /// it reads the session as it is, and its writes are acknowledged and dropped.
    pub discard: bool,
}

/// Why an instance could not be started.
#[derive(Debug)]
pub enum StartError {
    /// The function's fault (its init failed); answered as a function error. `path` is the
    /// start path the init ran on.
    Function {
        body: Bytes,
        log: String,
        path: StartPath,
    },
    /// kiln's fault: the sandbox could not be built.
    Platform(PlatformError),
}

impl From<PlatformError> for StartError {
    fn from(e: PlatformError) -> Self {
        StartError::Platform(e)
    }
}

/// kiln's side of a start that failed: what it was doing, and why. Flattened to text only
/// where kiln answers a client or shows a status.
#[derive(Debug, thiserror::Error)]
pub enum PlatformError {
    /// A step of building or entering the sandbox failed in the operating system.
    #[error("{step}: {source}")]
    Os {
        step: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A frame to the runtime could not be sent, or its answer read.
    #[error("{step}: {source}")]
    Frame {
        step: &'static str,
        #[source]
        source: FrameError,
    },
    /// A sandbox service could not attach to the instance.
    #[error("sandbox service: {0}")]
    Service(#[from] crate::agent::ServiceError),
    #[error("runtime {0} is not available")]
    NoRuntime(String),
    /// What was asked of the instance is not something it, or this node, can do.
    #[error("{0}")]
    Unsupported(&'static str),
    /// The runtime, a fork or the zygote went away, or did not answer in time.
    #[error("{0}")]
    Gone(&'static str),
    /// The runtime answered what the protocol does not allow at this point.
    #[error("unexpected answer {0}")]
    Unexpected(String),
    /// The sandbox helper could not set the sandbox up; its own words.
    #[error("{0}")]
    Setup(String),
    /// A fork did not become ready; what it printed.
    #[error("the fork did not become ready: {0}")]
    ForkNotReady(String),
    /// A warm-up invocation (1-based) ended the instance; its answer.
    #[error("warm-up invocation {round} ended the instance: {body}")]
    WarmUp { round: usize, body: String },
    /// The function's init failed while its snapshot was being made; its answer and what it
    /// logged.
    #[error("init failed: {body}")]
    Init { body: String, log: String },
    /// A runtime standby's shim failed to start; its answer and what it logged.
    #[error("{body} {}", log.trim())]
    StandbyInit { body: String, log: String },
    /// The fork (its pid in the zygote's namespace) was not found in the zygote's cgroup.
    #[error("fork {0} not found in the zygote's cgroup")]
    ForkNotFound(i32),
    /// The instance did not become a fork server.
    #[error("the runtime did not become a fork server: {0}")]
    NoForkServer(#[source] Box<PlatformError>),
}

impl PlatformError {
    /// An operating-system step that failed, with its cause.
    pub fn os(
        step: &'static str,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        PlatformError::Os {
            step,
            source: source.into(),
        }
    }
}

/// What one invocation produced.
pub struct Invocation {
    pub body: Bytes,
    pub function_error: bool,
    /// The function's own output during the invocation.
    pub output: String,
    /// False when the instance must be replaced (timeout, crash, out of memory).
    pub healthy: bool,
    /// False when the runtime provably never received the event: it was gone before it took it.
    /// Such an invocation did not run, and can be retried on another instance.
    pub delivered: bool,
    pub max_memory_bytes: u64,
    /// The runtime was killed for memory.
    pub out_of_memory: bool,
    /// The predicted limit the invocation ran at (None: the booked MemorySize), and whether the
    /// monitor raised it back to the booked size meanwhile.
    pub memory_limit_mb: Option<u32>,
    pub limit_raised: bool,
    /// How long writing the invocation's memory limit to the cgroup took, if it changed.
    pub limit_write: Option<Duration>,
}

/// The process an instance runs in.
enum Process {
    /// A sandbox of its own: the child is the sandbox helper.
    Sandbox(tokio::process::Child),
    /// A fork of a zygote, in the zygote's sandbox and its own cgroup. It is not kiln's child:
    /// the zygote reports its exit. The zygote (and so the sandbox) lives as long as its forks.
    Forked {
        _server: Arc<dyn std::any::Any + Send + Sync>,
        exit: Option<oneshot::Receiver<i32>>,
        pid: u32,
    },
}

impl Process {
    /// Waits for the process to exit; its exit code, or 128 + signal. Cancel-safe.
    async fn wait(&mut self) -> i32 {
        match self {
            Process::Sandbox(child) => child
                .wait()
                .await
                .ok()
                .and_then(|s| s.code())
                .unwrap_or(128 + 9),
            Process::Forked { exit, .. } => {
                let Some(receiver) = exit else {
                    return std::future::pending().await;
                };
                // A zygote that is gone took its forks with it.
                let code = receiver.await.unwrap_or(128 + 9);
                *exit = None;
                code
            }
        }
    }

    fn start_kill(&mut self) {
        if let Process::Sandbox(child) = self {
            let _ = child.start_kill();
        }
        // A fork is killed through its cgroup, which holds it and everything it started.
    }
}

/// What happened while waiting on the runtime.
enum Step {
    Message(Message),
    Exited(i32),
    TimedOut,
}

pub struct Instance {
    pub id: u64,
    pub spec: SharedSpec,
    pub start_path: StartPath,
    pub created: Instant,
    pub last_used: Instant,
    pub init_duration: Duration,
    /// Output of the init phase, reported with the first invocation.
    pub init_output: Option<String>,
    pub cgroup: Arc<Cgroup>,
    pub invocations: u64,
    /// The cgroup's OOM-kill count as of the last check (at start and after failures).
    oom_kills_seen: u64,
    /// The predicted memory limit the cgroup has now; None: the booked MemorySize.
    limit_mb: Option<u32>,
    process: Process,
    output: pipe::Receiver,
    /// A second descriptor of the same pipe (and so also non-blocking), read directly: tokio only
    /// reads once its event loop has seen the pipe become readable, which may lag behind an
    /// answer that arrived on another descriptor.
    output_direct: std::fs::File,
    output_open: bool,
    /// The helper's exit code, once the sandbox is known to be gone.
    exit_status: Option<i32>,
    transport: Transport,
    _netns: Option<NetNs>,
    /// Servers of sandbox services (the object store) that live as long as the instance.
    _service_guards: Vec<Box<dyn std::any::Any + Send + Sync>>,
    /// The storage tag of the invocation in flight, for the sandbox services.
    invocation_slot: crate::function::InvocationSlot,
    /// A warm-path instance's code slot: its code is detached when the instance is dropped.
    code_slot: Option<kiln_sandbox::CodeSlot>,
    /// The sessions whose state the runtime holds, with the version of the copy it holds.
    held: std::collections::HashMap<String, (Arc<SessionLog>, u64)>,
}

/// What sets one start path's new instance apart from another's; [`Instance::new`] gives the rest
/// its starting value.
struct Parts {
    id: u64,
    spec: SharedSpec,
    start_path: StartPath,
    cgroup: Arc<Cgroup>,
    process: Process,
    output: pipe::Receiver,
    output_direct: std::fs::File,
    transport: Transport,
    netns: Option<NetNs>,
    service_guards: Vec<Box<dyn std::any::Any + Send + Sync>>,
    invocation_slot: crate::function::InvocationSlot,
    code_slot: Option<kiln_sandbox::CodeSlot>,
}

impl Instance {
    /// A new instance, before its runtime's init: never invoked, at its booked size.
    fn new(parts: Parts) -> Instance {
        let now = Instant::now();
        Instance {
            id: parts.id,
            spec: parts.spec,
            start_path: parts.start_path,
            created: now,
            last_used: now,
            init_duration: Duration::ZERO,
            init_output: None,
            cgroup: parts.cgroup,
            invocations: 0,
            oom_kills_seen: 0,
            limit_mb: None,
            process: parts.process,
            output: parts.output,
            output_direct: parts.output_direct,
            output_open: true,
            exit_status: None,
            transport: parts.transport,
            _netns: parts.netns,
            _service_guards: parts.service_guards,
            invocation_slot: parts.invocation_slot,
            code_slot: parts.code_slot,
            held: Default::default(),
        }
    }
}

impl Instance {
    /// False once the runtime is known to be gone (checked without waiting).
    pub fn alive(&mut self) -> bool {
        if self.exit_status.is_some() {
            return false;
        }
        match &mut self.process {
            Process::Sandbox(child) => matches!(child.try_wait(), Ok(None)),
            // Its zygote reports its exit; a zygote that is gone took its forks with it.
            Process::Forked { exit, .. } => {
                let Some(receiver) = exit else {
                    return false;
                };
                let code = match receiver.try_recv() {
                    Err(oneshot::error::TryRecvError::Empty) => return true,
                    Ok(code) => code,
                    Err(oneshot::error::TryRecvError::Closed) => 128 + 9,
                };
                // The exit is taken: a later `wait` must not poll the spent receiver.
                *exit = None;
                self.exit_status = Some(code);
                false
            }
        }
    }

    /// The host pid of a forked instance's process.
    pub fn pid(&self) -> Option<u32> {
        match &self.process {
            Process::Forked { pid, .. } => Some(*pid),
            Process::Sandbox(_) => None,
        }
    }
}

/// A warm-up invocation of `spec`: its sample event (`{}` by default), run as a shadow so that
/// its writes have no visible effect.
pub fn warmup_request(spec: &SharedSpec) -> InvokeRequest {
    InvokeRequest {
        request_id: crate::function::new_request_id().to_string(),
        payload: Bytes::from(
            spec.prebake
                .warmup_event
                .as_ref()
                .map(|event| event.to_string())
                .unwrap_or_else(|| "{}".to_string()),
        ),
        trace_id: String::new(),
        client_context: None,
        hints: Default::default(),
        tags: crate::function::InvocationTags {
            shadow: crate::function::Shadow::Yes,
            ..Default::default()
        },
    }
}
