//! The start paths from a snapshot: a fork of the function's zygote (the hot path), a standby
//! given the function's code (the warm path), and an instance turned into a zygote.

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use futures_util::future::BoxFuture;
use kiln_sandbox::Cgroup;
use tokio::sync::oneshot;

use super::launch::{attach_services, limits, limits_at, output_pipe, socket_pair};
use super::transport::{Message, Transport};
use super::{
    invoke_header, warmup_request, Instance, Parts, PlatformError, Priority, Process, StartError,
    Step, INIT_TIMEOUT,
};
use crate::agent::frame::{Frame, Header, ShimConn};
use crate::agent::{AgentContext, StartPath};
use crate::function::{InvocationSlot, SharedSpec};
use crate::runtime;

/// What a fork of a function snapshot needs from the fork server that holds it (the zygote,
/// which implements it): the instance module depends on this capability, not on the zygote.
pub trait ForkServer: Send + Sync + 'static {
    /// Forks a process that takes `control` and `output` as its socket and output, with `env`
    /// added; moves it into `cgroup`; returns its host pid and a receiver of its exit code.
    fn fork<'a>(
        &'a self,
        control: OwnedFd,
        output: OwnedFd,
        env: BTreeMap<String, String>,
        warmup: bool,
        cgroup: &'a Cgroup,
    ) -> BoxFuture<'a, Result<(u32, oneshot::Receiver<i32>), PlatformError>>;
    /// The invocation slot the fork server's sandbox services read.
    fn invocation_slot(&self) -> InvocationSlot;
}

impl Instance {
    /// The hot start path: a fork of the function's zygote, moved into a cgroup of its own.
    /// With `warm_up`, the fork runs one warm-up invocation, in its own cgroup, before its
    /// after-restore hooks and its `ready` (Init Duration includes it).
    pub async fn fork<Z: ForkServer>(
        ctx: &AgentContext,
        zygote: &Arc<Z>,
        spec: &SharedSpec,
        id: u64,
        warm_up: bool,
        priority: Priority,
    ) -> Result<Instance, PlatformError> {
        let begin = Instant::now();
        let cgroup = Arc::new(
            ctx.cgroups
                .create(&format!("i{id}"), limits_at(spec, priority))
                .map_err(|e| PlatformError::os("cgroup", e))?,
        );
        let (out_rx, output_direct, out_fd) =
            output_pipe().map_err(|e| PlatformError::os("output pipe", e))?;
        let (ours, theirs) = socket_pair().map_err(|e| PlatformError::os("control socket", e))?;
        let env = [
            (
                "AWS_LAMBDA_LOG_STREAM_NAME",
                runtime::log_stream_name(&spec.version, id),
            ),
            // What Lambda tells functions restored from a snapshot.
            ("AWS_LAMBDA_INITIALIZATION_TYPE", "snap-start".to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let forked = zygote.fork(theirs, out_fd, env, warm_up, &cgroup).await;
        let (pid, exit) = match forked {
            Ok(forked) => forked,
            Err(e) => {
                let _ = tokio::task::spawn_blocking(move || cgroup.remove()).await;
                return Err(e);
            }
        };
        let mut instance = Instance::new(Parts {
            id,
            spec: spec.clone(),
            start_path: StartPath::Hot,
            cgroup,
            process: Process::Forked {
                _server: zygote.clone(),
                exit: Some(exit),
                pid,
            },
            output: out_rx,
            output_direct,
            transport: Transport::Shim(ShimConn::new(ours)),
            netns: None,
            service_guards: Vec::new(),
            invocation_slot: zygote.invocation_slot(),
            code_slot: None,
        });
        let mut deadline = Instant::now() + INIT_TIMEOUT;
        // The warm-up runs as a shadow: its requests to kiln's services (the object store,
        // sessions) find its tags in the invocation slot, as an invocation's do, and its
        // writes are acknowledged and dropped.
        let mut warming = None;
        if warm_up {
            let timeout = Duration::from_secs(u64::from(spec.timeout_s));
            let deadline_ms = (chrono::Utc::now() + timeout).timestamp_millis() as u64;
            let request = warmup_request(spec);
            let header = invoke_header(spec, &request, deadline_ms, None);
            instance
                .invocation_slot
                .enter(request.tags.clone(), instance.pid());
            warming = Some(request.tags);
            let sent = match &mut instance.transport {
                Transport::Shim(conn) => conn.send(&header, &request.payload).await.is_ok(),
                _ => false,
            };
            if !sent {
                if let Some(tags) = &warming {
                    instance.invocation_slot.leave(tags, instance.pid());
                }
                instance.destroy().await;
                return Err(PlatformError::Gone(
                    "the fork did not take its warm-up invocation",
                ));
            }
            deadline += timeout;
        }
        let mut output = Vec::new();
        let stepped = instance.step(deadline, &mut output, None).await;
        if let Some(tags) = &warming {
            instance.invocation_slot.leave(tags, instance.pid());
        }
        match stepped {
            Step::Message(Message::Ready) if instance.exit_status.is_none() => {
                instance.init_duration = begin.elapsed();
                instance.init_output = Some(String::from_utf8_lossy(&output).into_owned());
                Ok(instance)
            }
            _ => {
                instance.destroy().await;
                Err(PlatformError::ForkNotReady(
                    String::from_utf8_lossy(&output).trim().to_string(),
                ))
            }
        }
    }

    /// The warm start path: gives this runtime-generic standby (see [`Instance::start_standby`])
    /// the function `spec`. Its cgroup takes the function's limits, the function's code appears
    /// at `/var/task` through the code slot, and a `load` frame hands the shim the function's
    /// environment; the shim then loads the handler and runs its init code as at any start.
    pub async fn assign(
        mut self,
        ctx: &AgentContext,
        spec: &SharedSpec,
    ) -> Result<Instance, StartError> {
        let begin = Instant::now();
        let prepared = (|| {
            let runtime = ctx
                .runtimes
                .get(&spec.runtime)
                .ok_or_else(|| PlatformError::NoRuntime(spec.runtime.clone()))?;
            let slot = self
                .code_slot
                .as_ref()
                .ok_or(PlatformError::Unsupported("the instance has no code slot"))?;
            self.cgroup
                .apply(limits(spec))
                .map_err(|e| PlatformError::os("cgroup", e))?;
            slot.fill(&spec.code_dir)
                .map_err(|e| PlatformError::os("code slot", e))?;
            Ok::<_, PlatformError>(runtime)
        })();
        let runtime = match prepared {
            Ok(runtime) => runtime,
            Err(e) => {
                self.destroy().await;
                return Err(StartError::Platform(e));
            }
        };
        let mut env = runtime::lambda_env(spec, self.id, runtime.as_ref());
        let mut guards = Vec::new();
        if let Err(e) = attach_services(
            ctx,
            spec,
            self._netns.as_ref(),
            &self.invocation_slot,
            &mut env,
            &mut guards,
        ) {
            self.destroy().await;
            return Err(e);
        }
        self._service_guards.extend(guards);
        // The shim already holds its socket; the variable is none of the function's business.
        env.retain(|(k, _)| k != "KILN_SHIM_FD");
        let sent = match &mut self.transport {
            Transport::Shim(conn) => conn
                .send(
                    &Header::Load {
                        env: env.into_iter().collect(),
                    },
                    b"",
                )
                .await
                .map_err(|source| PlatformError::Frame {
                    step: "load frame",
                    source,
                }),
            _ => Err(PlatformError::Unsupported(
                "only shim runtimes have standbys",
            )),
        };
        if let Err(e) = sent {
            self.destroy().await;
            return Err(StartError::Platform(e));
        }
        self.spec = spec.clone();
        self.start_path = StartPath::Warm;
        self.last_used = Instant::now();
        self.finish_init(begin).await
    }

    /// Turns this instance (initialised, maybe warmed up, idle) into a fork server. Returns its
    /// socket, whatever it sent after the acknowledgement, and its pid in the sandbox; the
    /// instance keeps the sandbox.
    pub(in crate::agent) async fn become_zygote(
        &mut self,
    ) -> Result<(tokio::net::UnixStream, BytesMut, i32), PlatformError> {
        let Transport::Shim(conn) = std::mem::replace(&mut self.transport, Transport::Detached)
        else {
            return Err(PlatformError::Unsupported("only shim runtimes can fork"));
        };
        let mut conn = conn;
        conn.send(&Header::Zygote, b"")
            .await
            .map_err(|source| PlatformError::Frame {
                step: "zygote frame",
                source,
            })?;
        match tokio::time::timeout(INIT_TIMEOUT, conn.next()).await {
            Ok(Ok(Some(Frame {
                header: Header::ZygoteReady { pid },
                ..
            }))) => {
                let (stream, leftover) = conn.into_parts();
                Ok((stream, leftover, pid))
            }
            Ok(Ok(Some(frame))) => Err(PlatformError::Unexpected(format!("{:?}", frame.header))),
            Ok(Ok(None)) => Err(PlatformError::Gone("the runtime exited")),
            Ok(Err(source)) => Err(PlatformError::Frame {
                step: "zygote answer",
                source,
            }),
            Err(_) => Err(PlatformError::Gone("no answer from the runtime")),
        }
    }
}
