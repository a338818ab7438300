//! Fork servers: the hot start path of runtimes that can fork (Python).
//!
//! A zygote is an instance of one function version that ran its init code and the configured
//! warm-up invocations and was then told to stop serving and fork on demand (docs/shim-protocol.md,
//! "Fork server"). Each fork is a new instance: it shares the zygote's sandbox (namespaces, root,
//! uid) and its memory copy-on-write, but lives in a cgroup of its own with the function's limits,
//! and talks to the agent over a socket of its own. The zygote's sandbox lives as long as the
//! zygote or any of its forks.

use std::collections::{BTreeMap, HashMap};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use futures_util::future::BoxFuture;
use kiln_sandbox::Cgroup;
use tokio::io::Interest;
use tokio::net::UnixStream;
use tokio::sync::oneshot;

use crate::agent::frame::{self, Header};
use crate::agent::instance::{
    warmup_request, ForkServer, Instance, PlatformError, Priority, StartError,
};
use crate::agent::AgentContext;
use crate::function::SharedSpec;
use crate::sync::LockExt;

/// How long the zygote may take to answer a fork request.
const FORK_TIMEOUT: Duration = Duration::from_secs(5);

/// A fork's pid in the sandbox, and the receiver of its exit code.
type ForkReply = (i32, oneshot::Receiver<i32>);

/// The agent's side of the conversation with one zygote, shared with the task that reads it.
#[derive(Default)]
struct Channel {
    /// Where the answer to the fork request in flight goes.
    reply: Mutex<Option<oneshot::Sender<ForkReply>>>,
    exits: Mutex<HashMap<i32, oneshot::Sender<i32>>>,
    alive: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.locked()
}

pub struct Zygote {
    pub spec: SharedSpec,
    /// The id of the instance that became the zygote (its cgroup is `i<id>`).
    pub id: u64,
    /// The fork server's host pid.
    pub pid: Option<u32>,
    /// Real requests replayed in its warm-up (an app's recent requests, as shadow runs).
    pub replayed: usize,
    /// The zygote's own instance, which owns the sandbox.
    sandbox: Mutex<Option<Instance>>,
    cgroup: Arc<Cgroup>,
    stream: Arc<UnixStream>,
    channel: Arc<Channel>,
    /// Forks are requested one at a time: answers carry no request id.
    fork_lock: tokio::sync::Mutex<()>,
    /// Init plus warm-up time.
    pub build_time: Duration,
    /// The sandbox's services' view of the invocations in flight: every fork's.
    pub invocation_slot: crate::function::InvocationSlot,
    last_used: Mutex<Instant>,
    forks: AtomicU64,
    /// The agent's count of sandboxes being torn down, which shutdown waits for.
    destroying: Arc<AtomicUsize>,
}

/// What one fork may leave charged to its fork server's cgroup (see
/// [`Zygote::allow_fork_charges`]): 1.3 MB measured, with room.
const FORK_CHARGE_BYTES: u64 = 2 * 1024 * 1024;

/// Starts an instance of `spec` the coldest way and warms it up: with the recent requests
/// `ctx.replays` holds for the function (an app's hot routes, each a shadow run), then the
/// configured sample event for the rest of its warm-up rounds. What a snapshot is taken of
/// (Prebaking), or a standby made ahead of demand. Output of init and warm-up is dropped.
/// Answers the instance and how many real requests it replayed.
pub async fn warmed_up(
    ctx: &AgentContext,
    spec: &SharedSpec,
    id: u64,
    priority: Priority,
) -> Result<(Instance, usize), PlatformError> {
    let started = match priority {
        Priority::Request => Instance::start_cold(ctx, spec, id).await,
        Priority::Ahead => Instance::start_ahead(ctx, spec, id).await,
    };
    let mut instance = started.map_err(|e| match e {
        StartError::Function { body, log, .. } => PlatformError::Init {
            body: String::from_utf8_lossy(&body).into_owned(),
            log,
        },
        StartError::Platform(e) => e,
    })?;
    instance.init_output = None;
    let replays = ctx.replays.get(&spec.function);
    let rounds = spec.prebake.warmups(spec.network);
    if let Err(error) = warm_up(&mut instance, spec, rounds, &replays).await {
        instance.destroy().await;
        return Err(error);
    }
    Ok((instance, replays.len()))
}

/// Runs each of `replays` once on `instance`, then `spec`'s sample event until `rounds`
/// invocations ran in all, dropping their answers (all shadow runs: their writes have no
/// visible effect). A replay the function fails is no error; an invocation that ends the
/// instance is, and the caller destroys it.
pub async fn warm_up(
    instance: &mut Instance,
    spec: &SharedSpec,
    rounds: u32,
    replays: &[Bytes],
) -> Result<(), PlatformError> {
    let samples = (rounds as usize).saturating_sub(replays.len());
    let sample = warmup_request(spec);
    let payloads = replays
        .iter()
        .cloned()
        .chain(std::iter::repeat_n(sample.payload.clone(), samples));
    for (round, payload) in payloads.enumerate() {
        let mut request = warmup_request(spec);
        request.payload = payload;
        let invocation = instance.invoke(&request, None, Box::new(|| {})).await;
        if !invocation.healthy {
            return Err(PlatformError::WarmUp {
                round: round + 1,
                body: String::from_utf8_lossy(&invocation.body).into_owned(),
            });
        }
    }
    Ok(())
}

impl Zygote {
    /// Warms an instance of `spec` up and turns it into a fork server.
    pub async fn build(
        ctx: &AgentContext,
        spec: &SharedSpec,
        id: u64,
        destroying: Arc<AtomicUsize>,
    ) -> Result<Arc<Zygote>, PlatformError> {
        let begin = Instant::now();
        // At its function's share: its forks run in it until each is moved to its own cgroup.
        let (mut instance, replayed) = warmed_up(ctx, spec, id, Priority::Request).await?;
        let (stream, leftover, ns_pid) = match instance.become_zygote().await {
            Ok(parts) => parts,
            Err(e) => {
                instance.destroy().await;
                return Err(PlatformError::NoForkServer(Box::new(e)));
            }
        };
        let stream = Arc::new(stream);
        let channel = Arc::new(Channel {
            alive: AtomicBool::new(true),
            ..Channel::default()
        });
        tokio::spawn(read_loop(stream.clone(), leftover, channel.clone()));
        let now = Instant::now();
        Ok(Arc::new(Zygote {
            spec: spec.clone(),
            id,
            pid: host_pid(&instance.cgroup, ns_pid),
            replayed,
            cgroup: instance.cgroup.clone(),
            invocation_slot: instance.invocation_slot(),
            sandbox: Mutex::new(Some(instance)),
            stream,
            channel,
            fork_lock: tokio::sync::Mutex::new(()),
            build_time: begin.elapsed(),
            last_used: Mutex::new(now),
            forks: AtomicU64::new(0),
            destroying,
        }))
    }

    /// False once the fork server is gone (crashed, killed); it then forks nothing more.
    pub fn alive(&self) -> bool {
        self.channel.alive.load(Ordering::SeqCst)
    }

    /// Memory the zygote itself holds (what its forks share), in bytes.
    pub fn memory_bytes(&self) -> u64 {
        self.cgroup.memory_current()
    }

    /// Raises the fork server's memory limit to hold what `forks` forks leave charged to it.
    ///
    /// A fork writes pages (reference counts, the shim's set-up) before it is moved to its own
    /// cgroup; their copies stay charged to the fork server's cgroup until they are freed (the
    /// kernel no longer moves charges with a task: `memory.move_charge_at_immigrate` is ignored
    /// on 6.x, and v2 never did). About 1.3 MB per fork for a Python NoOp here: 40 forks filled
    /// half of a 128 MB function's limit, and some 90 would have the fork server killed for
    /// memory. No function code runs in the fork server any more, so the raised limit is room
    /// for those charges only.
    pub fn allow_fork_charges(&self, forks: u64) {
        let bytes =
            crate::agent::instance::limits(&self.spec).memory_bytes + forks * FORK_CHARGE_BYTES;
        if let Err(e) = self.cgroup.set_memory_limit(bytes) {
            tracing::warn!(function = %self.spec.function, "fork server's memory limit: {e}");
        }
    }

    pub fn forks(&self) -> u64 {
        self.forks.load(Ordering::Relaxed)
    }

    pub fn last_used(&self) -> Instant {
        *lock(&self.last_used)
    }

    /// Forks a new instance that takes over `control` (its agent socket) and `output` (its
    /// stdout and stderr), applies `env`, and is moved into `cgroup` (with `warmup`, it then
    /// waits for a warm-up invocation on `control` before its hooks run). Returns the fork's host pid
    /// and the receiver of its exit code.
    pub async fn fork(
        &self,
        control: OwnedFd,
        output: OwnedFd,
        env: BTreeMap<String, String>,
        warmup: bool,
        cgroup: &Cgroup,
    ) -> Result<(u32, oneshot::Receiver<i32>), PlatformError> {
        let _one_at_a_time = self.fork_lock.lock().await;
        if !self.alive() {
            return Err(PlatformError::Gone("the zygote is gone"));
        }
        let (tx, rx) = oneshot::channel();
        *lock(&self.channel.reply) = Some(tx);
        let mut frame = Vec::with_capacity(256);
        frame::encode(&Header::Fork { env, warmup }, b"", &mut frame);
        send_with_fds(&self.stream, &frame, [control.as_fd(), output.as_fd()])
            .await
            .map_err(|e| PlatformError::os("fork request", e))?;
        // The fork has its own copies now; ours must go so that its end of file is its exit.
        drop((control, output));
        let (ns_pid, exit) = match tokio::time::timeout(FORK_TIMEOUT, rx).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => return Err(PlatformError::Gone("the zygote exited")),
            Err(_) => return Err(PlatformError::Gone("the zygote did not answer")),
        };
        let pid = host_pid(&self.cgroup, ns_pid).ok_or(PlatformError::ForkNotFound(ns_pid))?;
        // Before the first invocation reaches it: from here on, what it allocates is its own.
        cgroup
            .adopt(pid)
            .map_err(|e| PlatformError::os("moving the fork into its cgroup", e))?;
        *lock(&self.last_used) = Instant::now();
        self.forks.fetch_add(1, Ordering::Relaxed);
        Ok((pid, exit))
    }
}

impl ForkServer for Zygote {
    fn fork<'a>(
        &'a self,
        control: OwnedFd,
        output: OwnedFd,
        env: BTreeMap<String, String>,
        warmup: bool,
        cgroup: &'a Cgroup,
    ) -> BoxFuture<'a, Result<(u32, oneshot::Receiver<i32>), PlatformError>> {
        Box::pin(Zygote::fork(self, control, output, env, warmup, cgroup))
    }

    fn invocation_slot(&self) -> crate::function::InvocationSlot {
        self.invocation_slot.clone()
    }
}

impl Drop for Zygote {
    fn drop(&mut self) {
        let Some(instance) = lock(&self.sandbox).take() else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                let destroying = self.destroying.clone();
                destroying.fetch_add(1, Ordering::SeqCst);
                runtime.spawn(async move {
                    instance.destroy().await;
                    destroying.fetch_sub(1, Ordering::SeqCst);
                });
            }
            // Dropping the instance kills the sandbox helper, and with it the sandbox; the cgroup
            // is removed as stale at the next start.
            Err(_) => drop(instance),
        }
    }
}

/// Reads the zygote's answers and exit reports until it is gone.
async fn read_loop(stream: Arc<UnixStream>, mut buf: BytesMut, channel: Arc<Channel>) {
    'read: loop {
        loop {
            match frame::decode(&mut buf) {
                Ok(Some(frame)) => match frame.header {
                    Header::Forked { pid } => {
                        let (tx, rx) = oneshot::channel();
                        lock(&channel.exits).insert(pid, tx);
                        if let Some(reply) = lock(&channel.reply).take() {
                            let _ = reply.send((pid, rx));
                        }
                    }
                    Header::Exited { pid, status } => {
                        if let Some(tx) = lock(&channel.exits).remove(&pid) {
                            let _ = tx.send(status);
                        }
                    }
                    other => tracing::warn!("unexpected frame from a zygote: {other:?}"),
                },
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!("zygote: {e}");
                    break 'read;
                }
            }
        }
        if stream.readable().await.is_err() {
            break;
        }
        buf.reserve(4096);
        match stream.try_read_buf(&mut buf) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => break,
        }
    }
    channel.alive.store(false, Ordering::SeqCst);
    // Dropping the senders tells every fork's waiter that its process is gone with the zygote.
    lock(&channel.exits).clear();
    lock(&channel.reply).take();
}

/// Sends `bytes` with `fds` attached (SCM_RIGHTS).
async fn send_with_fds(
    stream: &UnixStream,
    bytes: &[u8],
    fds: [std::os::fd::BorrowedFd<'_>; 2],
) -> std::io::Result<()> {
    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    loop {
        stream.writable().await?;
        let sent = stream.try_io(Interest::WRITABLE, || {
            let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
            let mut ancillary = SendAncillaryBuffer::new(&mut space);
            ancillary.push(SendAncillaryMessage::ScmRights(&fds));
            rustix::net::sendmsg(
                stream,
                &[std::io::IoSlice::new(bytes)],
                &mut ancillary,
                SendFlags::NOSIGNAL,
            )
            .map_err(std::io::Error::from)
        });
        match sent {
            Ok(n) if n == bytes.len() => return Ok(()),
            Ok(n) => {
                return Err(std::io::Error::other(format!(
                    "short write ({n} of {} bytes)",
                    bytes.len()
                )))
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
}

/// The host pid of the process in `cgroup` whose pid in its own (innermost) namespace is `ns_pid`.
fn host_pid(cgroup: &Cgroup, ns_pid: i32) -> Option<u32> {
    let wanted = ns_pid.to_string();
    cgroup.pids().into_iter().find(|pid| {
        let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
            return false;
        };
        status
            .lines()
            .find_map(|l| l.strip_prefix("NSpid:"))
            .map(|ids| {
                let ids: Vec<&str> = ids.split_whitespace().collect();
                ids.len() > 1 && ids.last() == Some(&wanted.as_str())
            })
            .unwrap_or(false)
    })
}
