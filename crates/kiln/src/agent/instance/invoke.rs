//! One invocation on an instance: its frame sent, the runtime's messages read until its
//! answer (or its end: a timeout, a crash, memory), its session's writes committed before the
//! answer, and the instance's end.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::super::frame::{FrameError, Header, ShimConn};
use super::super::resize;
use super::super::runtime_api::Event;
use super::super::sessions::log::{CommitError, SessionLog};
use super::super::InvokeRequest;
use super::transport::{Message, Transport};
use super::{Instance, Invocation, SessionCtx, Step};
use crate::function::SharedSpec;

/// Brings the sessions a runtime holds up to date before an invocation: the copies of ended
/// sessions, and of sessions changed elsewhere since, are dropped; the invocation's own
/// session is loaded unless the runtime holds its latest state.
async fn sync_sessions(
    conn: &mut ShimConn,
    held: &mut std::collections::HashMap<String, (Arc<SessionLog>, u64)>,
    session: Option<&SessionCtx>,
) -> Result<(), FrameError> {
    let current = session.map(|s| s.log.id.as_str());
    let stale: Vec<String> = held
        .iter()
        .filter(|(id, (log, version))| {
            log.ended() || (Some(id.as_str()) != current && log.version() != *version)
        })
        .map(|(id, _)| id.clone())
        .collect();
    for id in stale {
        held.remove(&id);
        conn.send(&Header::SessionDrop { session_id: id }, b"")
            .await?;
    }
    if let Some(session) = session {
        let id = &session.log.id;
        if held.get(id).map(|(_, v)| *v) != Some(session.log.version()) {
            let (body, version) = session.log.snapshot();
            let header = Header::SessionLoad {
                session_id: id.clone(),
                max_value_bytes: session.limits.max_value_bytes,
                max_session_bytes: session.limits.max_session_bytes,
            };
            conn.send(&header, &body).await?;
            held.insert(id.clone(), (session.log.clone(), version));
        }
    }
    Ok(())
}

/// Why a tracing instance gave no trace (BREAKOUT).
#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    #[error("the instance does not speak kiln's shim protocol")]
    NotShim,
    #[error("asking for the trace failed: {0}")]
    Ask(#[source] FrameError),
    #[error("the instance holds no tracing runtime")]
    NoTracer,
    #[error("the instance answered the trace request with another frame")]
    OtherFrame,
    #[error("no trace within {0:?}")]
    TimedOut(Duration),
    /// How it ended (an exit status or a signal).
    #[error("the instance exited ({0})")]
    Exited(String),
}

pub(super) fn error_json(error_type: &str, message: &str) -> Bytes {
    Bytes::from(serde_json::json!({ "errorType": error_type, "errorMessage": message }).to_string())
}

pub(super) fn exit_description(code: i32) -> String {
    match code {
        c if c > 128 => match c - 128 {
            9 => "signal: killed".to_string(),
            6 => "signal: aborted".to_string(),
            11 => "signal: segmentation fault".to_string(),
            15 => "signal: terminated".to_string(),
            s => format!("signal: {s}"),
        },
        c => format!("exit status {c}"),
    }
}

/// The frame of one invocation of `spec`.
pub(super) fn invoke_header(
    spec: &SharedSpec,
    request: &InvokeRequest,
    deadline_ms: u64,
    session_id: Option<String>,
) -> Header {
    Header::Invoke {
        request_id: request.request_id.clone(),
        deadline_ms,
        function_arn: spec.arn.clone(),
        trace_id: request.trace_id.clone(),
        client_context: request.client_context.clone(),
        cognito_identity: None,
        session_id,
    }
}

impl Instance {
    /// What its sandbox services know of the invocations in flight.
    pub fn invocation_slot(&self) -> crate::function::InvocationSlot {
        self.invocation_slot.clone()
    }

    /// The memory limit the instance's cgroup has now, in MB: a prediction, or MemorySize.
    pub fn memory_limit_mb(&self) -> u32 {
        self.limit_mb.unwrap_or(self.spec.memory_mb)
    }

    /// Waits for the runtime's next message, collecting its output meanwhile; checks the
    /// invocation's memory when `monitor`'s next check is due.
    pub(super) async fn step(
        &mut self,
        deadline: Instant,
        output: &mut Vec<u8>,
        mut monitor: Option<&mut resize::Monitor>,
    ) -> Step {
        loop {
            let check = monitor.as_ref().and_then(|m| m.next_check());
            let wake = tokio::time::Instant::from_std(check.map_or(deadline, |c| c.min(deadline)));
            // Biased: an answer that is already there wins over the exit that may follow it, and
            // the deadline is checked before output, so that a function printing without pause
            // still times out.
            tokio::select! {
                biased;
                message = self.transport.recv() => {
                    return match message {
                        Some(message) => {
                            self.drain_output(output);
                            Step::Message(message)
                        }
                        None => Step::Exited(self.exit_code(output).await),
                    };
                }
                _ = tokio::time::sleep_until(wake) => {
                    let now = Instant::now();
                    if now < deadline {
                        if let Some(monitor) = monitor.as_deref_mut() {
                            monitor.check(now);
                        }
                        continue;
                    }
                    self.drain_output(output);
                    return Step::TimedOut;
                }
                code = self.process.wait() => {
                    self.drain_output(output);
                    self.exit_status = Some(code);
                    // The whole sandbox is gone, so whatever the runtime sent before it exited is
                    // complete now: an answer still counts.
                    if let Some(message) = self.transport.recv_after_exit().await {
                        return Step::Message(message);
                    }
                    return Step::Exited(code);
                }
                ready = self.output.readable(), if self.output_open => {
                    if ready.is_err() {
                        self.output_open = false;
                    }
                    self.drain_output(output);
                }
            }
        }
    }

    /// Reads whatever output is in the pipe now, without waiting.
    fn drain_output(&mut self, output: &mut Vec<u8>) {
        use std::io::Read;
        let mut buf = [0u8; 4096];
        // Through tokio first, so that its readiness is cleared once the pipe is empty...
        while self.output_open {
            match self.output.try_read(&mut buf) {
                Ok(0) => self.output_open = false,
                Ok(n) => output.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(_) => self.output_open = false,
            }
        }
        // ...then directly, for what is in the pipe although tokio has not been told yet.
        while self.output_open {
            match self.output_direct.read(&mut buf) {
                Ok(0) => self.output_open = false,
                Ok(n) => output.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(_) => self.output_open = false,
            }
        }
    }

    async fn exit_code(&mut self, output: &mut Vec<u8>) -> i32 {
        let status = tokio::time::timeout(Duration::from_secs(2), self.process.wait()).await;
        self.drain_output(output);
        let code = status.unwrap_or(128 + 9);
        self.exit_status = Some(code);
        code
    }

    /// Runs one invocation to completion, timeout or crash. An invocation of a session first
    /// brings the runtime's copy of the session's state up to date, and its writes are in the
    /// session's log before its answer is returned.
    pub async fn invoke(
        &mut self,
        request: &InvokeRequest,
        session: Option<&SessionCtx>,
        before_raise: resize::BeforeRaise,
    ) -> Invocation {
        let timeout = Duration::from_secs(u64::from(self.spec.timeout_s));
        let deadline = Instant::now() + timeout;
        let deadline_ms = (chrono::Utc::now() + timeout).timestamp_millis() as u64;
        // The OOM counter is read only when something went wrong: a successful invocation pays
        // for no more than the peak-memory reset and read.
        let oom_before = self.oom_kills_seen;
        let booked = self.spec.memory_mb;
        let limit_write = resize::apply(
            &self.cgroup,
            &mut self.limit_mb,
            request.hints.memory_mb,
            booked,
        );
        let memory_limit_mb = self.limit_mb;
        let tags = request.tags.clone();
        self.invocation_slot.enter(tags.clone(), self.pid());
        let mut monitor = memory_limit_mb
            .map(|limit| resize::Monitor::start(self.cgroup.clone(), limit, booked, before_raise));
        self.cgroup.reset_peak();
        let mut output = Vec::new();
        let sent = match &mut self.transport {
            Transport::Shim(conn) => {
                let header = invoke_header(
                    &self.spec,
                    request,
                    deadline_ms,
                    session.map(|s| s.log.id.clone()),
                );
                sync_sessions(conn, &mut self.held, session).await.is_ok()
                    && conn.send(&header, &request.payload).await.is_ok()
            }
            Transport::Api(api) => api
                .events
                .send(Event {
                    request_id: request.request_id.clone(),
                    deadline_ms,
                    function_arn: self.spec.arn.clone(),
                    trace_id: request.trace_id.clone(),
                    client_context: request.client_context.clone(),
                    payload: request.payload.clone(),
                    session: session.map(|s| (s.log.clone(), s.limits)),
                    shadow: session.is_some_and(|s| s.discard),
                })
                .await
                .is_ok(),
            Transport::Detached => false,
        };
        let mut commit_error = None;
        let step = if sent {
            loop {
                match self.step(deadline, &mut output, monitor.as_mut()).await {
                    Step::Message(Message::SessionCommit(body)) => {
                        if let Err(e) = self.commit(session, &body) {
                            commit_error = Some(e);
                        }
                    }
                    step => break step,
                }
            }
        } else {
            Step::Exited(self.exit_code(&mut output).await)
        };
        let delivered = sent
            && match (&step, &self.transport) {
                // The event waits in the channel until the runtime asks for it with GET /next; a
                // runtime that exited after its last answer (Lambda's Node client does after an
                // uncaught exception) never took it.
                (Step::Exited(_), Transport::Api(api)) => {
                    api.events.capacity() == api.events.max_capacity()
                }
                _ => true,
            };
        self.invocations += 1;
        let limit_raised = monitor.is_some_and(|m| m.raised());
        if limit_raised {
            self.limit_mb = None;
        }
        let max_memory_bytes = self.cgroup.memory_peak();
        let mut out_of_memory = false;
        let (body, function_error, healthy) = match step {
            Step::Message(Message::Response(body)) => (body, false, true),
            Step::Message(Message::Error { body, fatal }) => {
                // A child process of the function may have been OOM-killed; count it now so a
                // later exit is not blamed on it.
                self.oom_kills_seen = self.cgroup.oom_kills();
                (body, true, !fatal)
            }
            Step::Message(Message::TooLarge) => (
                error_json(
                    "Function.ResponseSizeTooLarge",
                    "Response payload size exceeded maximum allowed payload size (6291556 bytes).",
                ),
                true,
                true,
            ),
            Step::Message(
                Message::Ready
                | Message::InitError(_)
                | Message::SessionCommit(_)
                | Message::Trace(_),
            ) => (
                error_json(
                    "Runtime.InvalidResponse",
                    "the runtime sent an unexpected message",
                ),
                true,
                false,
            ),
            Step::Exited(code) => {
                let oom = self.cgroup.oom_kills() > oom_before;
                out_of_memory = oom;
                let error_type = if oom {
                    "Runtime.OutOfMemory"
                } else {
                    "Runtime.ExitError"
                };
                let message = format!(
                    "RequestId: {} Error: Runtime exited with error: {}",
                    request.request_id,
                    exit_description(code)
                );
                output.extend_from_slice(message.as_bytes());
                output.push(b'\n');
                (error_json(error_type, &message), true, false)
            }
            Step::TimedOut => {
                self.kill();
                let message = format!(
                    "{} {} Task timed out after {:.2} seconds",
                    chrono::Utc::now().format("%Y-%m-%dT%H:%M:%S%.3fZ"),
                    request.request_id,
                    timeout.as_secs_f64()
                );
                output.extend_from_slice(message.as_bytes());
                output.push(b'\n');
                (error_json("Sandbox.Timedout", &message), true, false)
            }
        };
        // An answer whose session writes were refused is not given out: the caller learns that
        // they were not kept.
        let (body, function_error) = match commit_error {
            Some(error) => {
                let (message, body) = error.answer();
                output.extend_from_slice(message.as_bytes());
                output.push(b'\n');
                (body, true)
            }
            None => (body, function_error),
        };
        self.invocation_slot.leave(&tags, self.pid());
        Invocation {
            body,
            function_error,
            // An answer sent just before the runtime exited still counts, but the instance is gone.
            healthy: healthy && self.exit_status.is_none(),
            output: String::from_utf8_lossy(&output).into_owned(),
            delivered,
            max_memory_bytes,
            out_of_memory,
            memory_limit_mb,
            limit_raised,
            limit_write,
        }
    }

    /// The trace tree a tracing instance built so far (BREAKOUT), asked for between
    /// invocations. What it sends is untrusted: the caller validates it. The instance stays
    /// usable unless this fails.
    pub async fn dump_trace(&mut self, timeout: Duration) -> Result<Bytes, DumpError> {
        let Transport::Shim(conn) = &mut self.transport else {
            return Err(DumpError::NotShim);
        };
        conn.send(&Header::TraceDump, &[])
            .await
            .map_err(DumpError::Ask)?;
        let deadline = Instant::now() + timeout;
        let mut output = Vec::new();
        let step = self.step(deadline, &mut output, None).await;
        // What the runtime printed meanwhile belongs to no invocation; it goes to kiln's log.
        if !output.is_empty() {
            tracing::debug!(
                function = %self.spec.function,
                "tracing instance output: {}",
                String::from_utf8_lossy(&output)
            );
        }
        match step {
            Step::Message(Message::Trace(body)) if body.is_empty() => Err(DumpError::NoTracer),
            Step::Message(Message::Trace(body)) => Ok(body),
            Step::Message(_) => {
                self.kill();
                Err(DumpError::OtherFrame)
            }
            Step::TimedOut => {
                self.kill();
                Err(DumpError::TimedOut(timeout))
            }
            Step::Exited(code) => Err(DumpError::Exited(exit_description(code))),
        }
    }

    /// Appends an invocation's writes to its session's log. A refused commit leaves the
    /// runtime's copy ahead of the log: it is reloaded before the session's next request here,
    /// as after a shadow run's, whose writes are dropped.
    fn commit(&mut self, session: Option<&SessionCtx>, body: &Bytes) -> Result<(), CommitError> {
        let Some(session) = session else {
            return Err(CommitError::Malformed(
                "the invocation belongs to no session".into(),
            ));
        };
        if session.discard {
            self.held.remove(&session.log.id);
            return Ok(());
        }
        match session.log.commit(body, session.limits) {
            Ok(version) => {
                if let Some(held) = self.held.get_mut(&session.log.id) {
                    held.1 = version;
                }
                Ok(())
            }
            Err(e) => {
                self.held.remove(&session.log.id);
                Err(e)
            }
        }
    }

    fn kill(&mut self) {
        self.process.start_kill();
        self.cgroup.kill_all();
    }

    /// Stops the instance and removes its cgroup. Nothing of it is left afterwards.
    pub async fn destroy(mut self) {
        self.kill();
        if self.exit_status.is_none() {
            let _ = tokio::time::timeout(Duration::from_secs(5), self.process.wait()).await;
        }
        let cgroup = self.cgroup.clone();
        if let Ok(Err(e)) = tokio::task::spawn_blocking(move || cgroup.remove()).await {
            tracing::warn!(
                instance = self.id,
                "could not remove the instance's cgroup: {e}"
            );
        }
    }
}
