//! The coldest start path, and the runtime-generic standby of the warm path: a new sandbox (its
//! cgroup, network namespace, sandbox services, output pipe and transport), then the runtime's
//! init phase until it is ready.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kiln_sandbox::{File, Limits, NetNs, SandboxSpec};
use tokio::net::unix::pipe;

use super::transport::{Message, Transport};
use super::{
    error_json, exit_description, Instance, Parts, PlatformError, Priority, Process, StartError,
    Step, INIT_TIMEOUT, RUNTIME_API_ADDR,
};
use crate::agent::frame::ShimConn;
use crate::agent::runtime_api::RuntimeApi;
use crate::agent::{AgentContext, StartPath};
use crate::function::{NetworkMode, SharedSpec};
use crate::runtime::{self, Protocol};

impl Instance {
    /// The coldest start path: a new sandbox and a runtime started from scratch.
    pub async fn start_cold(
        ctx: &AgentContext,
        spec: &SharedSpec,
        id: u64,
    ) -> Result<Instance, StartError> {
        Self::launch(ctx, spec, id, None, Priority::Request).await
    }

    /// The coldest path, ahead of demand (a standby of a runtime that cannot fork): made at
    /// the lowest CPU priority.
    pub async fn start_ahead(
        ctx: &AgentContext,
        spec: &SharedSpec,
        id: u64,
    ) -> Result<Instance, StartError> {
        Self::launch(ctx, spec, id, None, Priority::Ahead).await
    }

    /// Gives an instance made ahead of demand its function's CPU share, as a request takes it.
    pub fn join_requests(&self) {
        if let Err(e) = self.cgroup.set_cpu(limits(&self.spec).cpu_shares, false) {
            tracing::warn!(instance = self.id, "its CPU share stays low: {e}");
        }
    }

    /// A runtime-generic standby for the warm path: a sandbox whose runtime has booted and waits,
    /// with an empty `/var/task` that [`Instance::assign`] fills. `spec` is the runtime's generic
    /// spec (see `warm.rs`), not a function's.
    pub async fn start_standby(
        ctx: &AgentContext,
        spec: &SharedSpec,
        id: u64,
        slot: kiln_sandbox::CodeSlot,
    ) -> Result<Instance, StartError> {
        Self::launch(ctx, spec, id, Some(slot), Priority::Request).await
    }

    pub(super) async fn launch(
        ctx: &AgentContext,
        spec: &SharedSpec,
        id: u64,
        slot: Option<kiln_sandbox::CodeSlot>,
        priority: Priority,
    ) -> Result<Instance, StartError> {
        let begin = Instant::now();
        let runtime = ctx
            .runtimes
            .get(&spec.runtime)
            .ok_or_else(|| PlatformError::NoRuntime(spec.runtime.clone()))?;
        if runtime.protocol() == Protocol::Wasm {
            return Err(PlatformError::Unsupported(
                "a wasm function runs in the agent's engine, not in a sandbox process",
            )
            .into());
        }
        // From the pool made ahead; a new disk (an mkfs) only when the pool has none of the size,
        // made at the lowest CPU priority for an instance made ahead of demand.
        let tmp = ctx
            .tmp_disks
            .take(spec.tmp_mb, priority == Priority::Ahead)
            .await;
        let cgroup = Arc::new(
            ctx.cgroups
                .create(&format!("i{id}"), limits_at(spec, priority))
                .map_err(|e| PlatformError::os("cgroup", e))?,
        );
        let netns = match spec.network {
            NetworkMode::Isolated => {
                Some(NetNs::new().map_err(|e| PlatformError::os("network namespace", e))?)
            }
            NetworkMode::Host => None,
        };
        let (out_rx, output_direct, out_fd) =
            output_pipe().map_err(|e| PlatformError::os("output pipe", e))?;
        let mut env = runtime::lambda_env(spec, id, runtime.as_ref());
        let mut service_guards = Vec::new();
        let invocation_slot = crate::function::InvocationSlot::default();
        if slot.is_none() {
            attach_services(
                ctx,
                spec,
                netns.as_ref(),
                &invocation_slot,
                &mut env,
                &mut service_guards,
            )?;
        } else {
            // Tells the shim to boot, pre-warm and wait for a `load` frame.
            env.push(("KILN_STANDBY".into(), "1".into()));
        }
        // Unique among live instances: no sandbox can signal or trace another's processes.
        let uid = 100_000 + (id % 60_000) as u32;
        let (transport, control) = match runtime.protocol() {
            Protocol::Shim => {
                let (ours, theirs) =
                    socket_pair().map_err(|e| PlatformError::os("control socket", e))?;
                (Transport::Shim(ShimConn::new(ours)), Some(theirs))
            }
            Protocol::RuntimeApi => {
                let listener = match &netns {
                    Some(ns) => ns.listen_tcp(RUNTIME_API_ADDR.parse().expect("valid address")),
                    None => std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| {
                        l.set_nonblocking(true)?;
                        Ok(l)
                    }),
                }
                .map_err(|e| PlatformError::os("Runtime API listener", e))?;
                let addr = listener
                    .local_addr()
                    .map_err(|e| PlatformError::os("Runtime API listener", e))?;
                env.push(("AWS_LAMBDA_RUNTIME_API".into(), addr.to_string()));
                // In the host's network namespace every local process can connect; only the
                // sandbox's own uid is served there.
                let only_uid = netns.is_none().then_some(uid);
                let api = RuntimeApi::serve(listener, only_uid)
                    .map_err(|e| PlatformError::os("Runtime API", e))?;
                (Transport::Api(api), None)
            }
            Protocol::Wasm => unreachable!("refused above"),
        };
        let sandbox = SandboxSpec {
            root: ctx.sandbox_root.clone(),
            mounts: ctx.runtimes.mounts(
                runtime.as_ref(),
                match &slot {
                    Some(slot) => runtime::Code::Slot(slot.path()),
                    None => runtime::Code::Dir(&spec.code_dir),
                },
                spec.opt_dir.as_deref(),
            ),
            files: vec![
                File {
                    path: PathBuf::from("/etc/passwd"),
                    contents: format!("root:x:0:0:root:/root:/usr/sbin/nologin\nsbx_user1051:x:{uid}:{uid}::/tmp:/usr/sbin/nologin\n"),
                    mode: 0o644,
                },
                File {
                    path: PathBuf::from("/etc/group"),
                    contents: format!("root:x:0:\nsbx_user1051:x:{uid}:\n"),
                    mode: 0o644,
                },
                File { path: PathBuf::from("/etc/hostname"), contents: "sandbox\n".into(), mode: 0o644 },
            ],
            tmp_size_mb: u64::from(spec.tmp_mb),
            tmp_disk: tmp.is_some(),
            hostname: "sandbox".into(),
            uid,
            gid: uid,
            argv: runtime.argv(spec),
            env,
            cwd: PathBuf::from(runtime::TASK_ROOT),
            cgroup_procs: cgroup.procs_files(),
            nofile: 1024,
            seccomp: true,
        };
        let (process, netns) =
            crate::agent::spawner::spawn(sandbox, out_fd, control, netns, tmp).await;
        let process = process.map_err(|e| {
            let _ = cgroup.remove();
            PlatformError::os("sandbox", e)
        })?;
        let process = Process::Sandbox(process);
        let instance = Instance::new(Parts {
            id,
            spec: spec.clone(),
            start_path: StartPath::Coldest,
            cgroup,
            process,
            output: out_rx,
            output_direct,
            transport,
            netns,
            service_guards,
            invocation_slot,
            code_slot: slot,
        });
        instance.finish_init(begin).await
    }

    /// Waits for the runtime to finish its init phase: the instance, or why it failed (the
    /// instance is then destroyed).
    pub(super) async fn finish_init(self, begin: Instant) -> Result<Instance, StartError> {
        let mut instance = self;
        let spec = instance.spec.clone();
        let init_timeout = INIT_TIMEOUT.max(Duration::from_secs(u64::from(spec.timeout_s)));
        let mut output = Vec::new();
        let mut step = instance
            .step(Instant::now() + init_timeout, &mut output, None)
            .await;
        if let (Step::Message(Message::Ready), Some(code)) = (&step, instance.exit_status) {
            step = Step::Exited(code); // ready, and gone before anyone could use it
        }
        let log = String::from_utf8_lossy(&output).into_owned();
        let failure = match step {
            Step::Message(Message::Ready) => {
                instance.init_duration = begin.elapsed();
                instance.init_output = Some(log);
                return Ok(instance);
            }
            Step::Message(Message::InitError(body)) => body,
            Step::Message(_) => error_json(
                "Runtime.InvalidResponse",
                "the runtime answered before it was ready",
            ),
            Step::Exited(kiln_sandbox::SETUP_FAILED) if log.contains("cannot execute") => {
                error_json(
                    "Runtime.InvalidEntrypoint",
                    &format!(
                        "RequestId: - Error: {}",
                        log.lines().last().unwrap_or("cannot execute the runtime")
                    ),
                )
            }
            Step::Exited(kiln_sandbox::SETUP_FAILED) => {
                instance.destroy().await;
                return Err(PlatformError::Setup(log.trim().to_string()).into());
            }
            Step::Exited(code) => error_json(
                // Killed by the kernel for going over its memory size while initialising.
                if instance.cgroup.oom_kills() > 0 {
                    "Runtime.OutOfMemory"
                } else {
                    "Runtime.ExitError"
                },
                &format!(
                    "RequestId: - Error: Runtime exited with error: {}",
                    exit_description(code)
                ),
            ),
            Step::TimedOut => error_json(
                "Sandbox.Timedout",
                &format!(
                    "Init phase timed out after {:.2} seconds",
                    init_timeout.as_secs_f64()
                ),
            ),
        };
        let path = instance.start_path;
        instance.destroy().await;
        Err(StartError::Function {
            body: failure,
            log,
            path,
        })
    }
}

/// Attaches the sandbox services (the object store) of `spec` to an instance: their environment
/// goes into `env`, their servers into `guards`.
pub(super) fn attach_services(
    ctx: &AgentContext,
    spec: &SharedSpec,
    netns: Option<&NetNs>,
    slot: &crate::function::InvocationSlot,
    env: &mut Vec<(String, String)>,
    guards: &mut Vec<Box<dyn std::any::Any + Send + Sync>>,
) -> Result<(), StartError> {
    for service in &ctx.services {
        let attachment = service
            .attach(spec, netns, slot)
            .map_err(PlatformError::from)?;
        for (key, value) in attachment.env {
            env.retain(|(k, _)| *k != key);
            env.push((key, value));
        }
        guards.extend(attachment.guard);
    }
    Ok(())
}

/// The cgroup limits of one instance of `spec`.
pub(in crate::agent) fn limits(spec: &SharedSpec) -> Limits {
    Limits {
        memory_bytes: u64::from(spec.memory_mb) * 1024 * 1024,
        pids_max: 1024,
        // Lambda gives one vCPU at 1769 MB and scales CPU with memory.
        cpu_shares: (u64::from(spec.memory_mb) * 1024 / 1769).max(2),
        cpu_idle: false,
    }
}

/// The cgroup limits of an instance of `spec` made at `priority`.
pub(in crate::agent) fn limits_at(spec: &SharedSpec, priority: Priority) -> Limits {
    match priority {
        Priority::Request => limits(spec),
        Priority::Ahead => Limits {
            cpu_shares: 2,
            cpu_idle: true,
            ..limits(spec)
        },
    }
}

/// An instance's output pipe: the reader, a second descriptor of it for direct reads, and the
/// (blocking) write end to hand to the runtime.
pub(super) fn output_pipe() -> std::io::Result<(pipe::Receiver, std::fs::File, std::os::fd::OwnedFd)>
{
    use std::os::fd::AsFd;
    let (tx, rx) = pipe::pipe()?;
    let direct = rx.as_fd().try_clone_to_owned().map(std::fs::File::from)?;
    Ok((rx, direct, tx.into_blocking_fd()?))
}

pub(super) fn socket_pair() -> std::io::Result<(tokio::net::UnixStream, std::os::fd::OwnedFd)> {
    let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
    ours.set_nonblocking(true)?;
    Ok((tokio::net::UnixStream::from_std(ours)?, theirs.into()))
}
