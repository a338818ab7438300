//! One logged-in client: its units of work go to a backend from the pool, and the backend's
//! answers come back through the queue of expected responses, which drops the answers to
//! what the proxy added itself.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use crate::backend::{self, Backend};
use crate::classify::{Kind, Refusal};
use crate::config::SessionStatePolicy;
use crate::forward::Forwarder;
use crate::metrics::Metrics;
use crate::plan::{self, Injected, Plan, ShadowTimeouts};
use crate::pool::PoolError;
use crate::prepared::Statements;
use crate::responses::{Expect, Origin, Responses};
use crate::startup::{error_chain, ClientStart};
use crate::wire::{self, Message, MessageReader, Severity, WireError};
use crate::{CancelTarget, ClientContext, ContextSource, Inner, ServeError};

/// Units buffered beyond this many bytes are sent before their Sync.
const MAX_PENDING_BYTES: usize = 1 << 20;

struct Session<'a, S> {
    inner: &'a Inner,
    /// The context of the current transaction, from `source` at its start.
    ctx: ClientContext,
    source: ContextSource,
    client: MessageReader<S>,
    out: BytesMut,
    backend: Option<Backend>,
    queue: Responses,
    /// Extended-protocol messages were sent without their Sync yet.
    in_batch: bool,
    /// The proxy refused part of a batch and drops the client's messages until Sync.
    discard_until_sync: bool,
    copy_in: bool,
    pinned: bool,
    pending: Vec<Message>,
    pending_bytes: usize,
    params: BTreeMap<&'static str, String>,
    statements: Statements,
    portals: HashMap<String, Kind>,
    plan: Plan,
    captured_xid: Option<Option<u64>>,
    commit_in_flight: bool,
    /// The current batch has its plan; it parsed the unnamed statement.
    batch_planned: bool,
    batch_unnamed_parse: bool,
    /// The plan's closing queries wait for the client's ReadyForQuery (a COPY FROM).
    post_deferred: bool,
    post_due: bool,
    /// The client's ReadyForQuery, held until the plan's closing queries are answered.
    held_rfq: Option<u8>,
    cancel_target: CancelTarget,
    pid: u32,
}

pub(crate) async fn run<S>(
    inner: &Inner,
    start: ClientStart<S>,
    source: ContextSource,
) -> Result<(), ServeError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let mut conn = start.conn;
    conn.set_max(wire::MAX_MESSAGE_LEN);
    Metrics::inc(&inner.metrics.clients_total);
    inner.metrics.clients.fetch_add(1, Ordering::Relaxed);
    let mut s = Session {
        inner,
        ctx: source(),
        source,
        client: conn,
        out: BytesMut::new(),
        backend: None,
        queue: Responses::default(),
        in_batch: false,
        discard_until_sync: false,
        copy_in: false,
        pinned: false,
        pending: Vec::new(),
        pending_bytes: 0,
        params: start.params,
        statements: Statements::default(),
        portals: HashMap::new(),
        plan: Plan::default(),
        captured_xid: None,
        commit_in_flight: false,
        batch_planned: false,
        batch_unnamed_parse: false,
        post_deferred: false,
        post_due: false,
        held_rfq: None,
        cancel_target: start.cancel_target,
        pid: start.pid,
    };
    let result = s.serve().await;
    s.finish().await;
    inner.metrics.clients.fetch_sub(1, Ordering::Relaxed);
    inner
        .cancels
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&s.pid);
    match result {
        Ok(()) | Err(ServeError::Client(WireError::Eof)) => Ok(()),
        Err(e) => Err(e),
    }
}

enum Event {
    Client(Result<Message, WireError>),
    Backend(Result<Message, WireError>),
}

/// How the serving loop ends.
enum Step {
    Continue,
    Done,
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send> Session<'_, S> {
    async fn serve(&mut self) -> Result<(), ServeError> {
        loop {
            let read_client = self.queue.is_empty() || self.in_batch || self.copy_in;
            let client = &mut self.client;
            let event = match self.backend.as_mut() {
                Some(b) => {
                    tokio::select! {
                        m = client.next(), if read_client => Event::Client(m),
                        m = b.conn.next() => Event::Backend(m),
                    }
                }
                None => Event::Client(client.next().await),
            };
            let step = match event {
                Event::Client(m) => self.on_client(m).await?,
                Event::Backend(m) => self.on_backend(m).await?,
            };
            if let Step::Done = step {
                return Ok(());
            }
        }
    }

    async fn flush_client(&mut self) -> Result<(), ServeError> {
        if !self.out.is_empty() {
            self.client
                .get_mut()
                .write_all(&self.out)
                .await
                .map_err(WireError::Io)?;
            self.out.clear();
        }
        Ok(())
    }

    /// Sends an error to the client and ends the session.
    async fn fatal(&mut self, code: &str, message: &str) -> Result<Step, ServeError> {
        wire::error_response(Severity::Fatal, code, message).encode(&mut self.out);
        self.flush_client().await?;
        Ok(Step::Done)
    }

    async fn on_client(&mut self, m: Result<Message, WireError>) -> Result<Step, ServeError> {
        let m = match m {
            Ok(m) => m,
            Err(WireError::Protocol(msg)) => return self.fatal("08P01", &msg).await,
            Err(e) => return Err(e.into()),
        };
        match m.tag {
            b'X' => return Ok(Step::Done),
            b'd' | b'c' | b'f' => {
                // COPY data goes straight through; outside COPY PostgreSQL ignores it.
                if self.copy_in {
                    if m.tag != b'd' {
                        self.copy_in = false;
                        // A COPY run by Execute answers only after the client's next Sync
                        // (PostgreSQL ignored the one sent before the data).
                        if matches!(self.queue.front(), Some(Expect::Execute)) {
                            self.in_batch = true;
                        }
                    }
                    if let Some(b) = self.backend.as_mut() {
                        let mut buf = BytesMut::new();
                        m.encode(&mut buf);
                        if let Err(e) = b.write(&buf).await {
                            return self.backend_lost(e).await;
                        }
                    }
                }
                return Ok(Step::Continue);
            }
            b'Q' | b'P' | b'B' | b'D' | b'E' | b'C' | b'S' | b'H' | b'F' => {}
            other => {
                let msg = format!(
                    "unexpected message type '{}' from the client",
                    other as char
                );
                return self.fatal("08P01", &msg).await;
            }
        }
        if self.discard_until_sync {
            if m.tag != b'S' {
                return Ok(Step::Continue);
            }
            self.discard_until_sync = false;
        }
        let ends_unit = matches!(m.tag, b'Q' | b'S' | b'H' | b'F');
        self.pending_bytes += m.body.len();
        self.pending.push(m);
        if ends_unit || self.pending_bytes > MAX_PENDING_BYTES {
            self.pending_bytes = 0;
            let unit = std::mem::take(&mut self.pending);
            return self.dispatch(unit).await;
        }
        Ok(Step::Continue)
    }

    async fn dispatch(&mut self, unit: Vec<Message>) -> Result<Step, ServeError> {
        let (parsed, executed) = match crate::unit::kinds(&unit, &self.statements, &self.portals) {
            Ok(k) => k,
            Err(e) => return self.fatal("08P01", &e.to_string()).await,
        };
        let has_sync = unit.iter().any(|m| matches!(m.tag, b'Q' | b'S' | b'F'));
        if self.backend.is_none() && !self.in_batch {
            // Between transactions: the connection may now serve another invocation.
            self.ctx = (self.source)();
            if self.ctx.unattributed {
                return self
                    .fatal(
                        "08006",
                        "kiln cannot tell which invocation this transaction belongs to; reconnect",
                    )
                    .await;
            }
        }
        if let Some(r) = plan::refusal(self.ctx.shadow, &parsed) {
            if !self.try_pin(r) {
                return self.refuse(r, has_sync).await;
            }
        }
        if parsed == [Kind::Deallocate] && unit.len() == 1 && unit[0].tag == b'Q' {
            let sql = wire::take_cstr(&mut &unit[0].body[..])?;
            if let Some(tag) = self.statements.deallocate(&sql) {
                let status = self.backend.as_ref().map_or(b'I', |b| b.status);
                return self
                    .answer_locally(vec![
                        wire::command_complete(tag),
                        wire::ready_for_query(status),
                    ])
                    .await;
            }
        }
        if self.backend.is_none() {
            if let Some(answers) = crate::unit::answer_without_backend(&unit, &mut self.statements)
            {
                for a in answers {
                    a.encode(&mut self.out);
                }
                self.flush_client().await?;
                return Ok(Step::Continue);
            }
            if let Err(e) = self.checkout().await {
                return self.unavailable(e, has_sync).await;
            }
        }
        let Some(status) = self.backend.as_ref().map(|b| b.status) else {
            return Ok(Step::Continue);
        };
        let mut out = BytesMut::new();
        let copy_from = crate::unit::has_copy_from(&unit);
        let starting = !self.in_batch;
        if starting {
            self.batch_planned = false;
            self.batch_unnamed_parse = false;
        }
        // A batch is planned at its first part that runs something: asyncpg prepares with
        // Parse, Describe and Flush, then binds and executes in the same batch.
        if !self.batch_planned && (starting || !executed.is_empty()) {
            let timeouts = ShadowTimeouts {
                lock_ms: self.inner.cfg.shadow_lock_timeout.as_millis(),
                statement_ms: self.inner.cfg.shadow_statement_timeout.as_millis(),
            };
            let mut plan = plan::plan(self.ctx.shadow, status, &executed, timeouts);
            if !starting && self.batch_unnamed_parse && !plan.pre.is_empty() {
                // A query in the middle of the batch would drop the unnamed statement.
                if self.ctx.shadow {
                    return self.refuse(Refusal::ShadowUncontained, has_sync).await;
                }
                plan = Plan {
                    unchecked: true,
                    ..Plan::default()
                };
            }
            self.plan = plan;
            self.batch_planned = !executed.is_empty();
            self.captured_xid = None;
            if self.plan.unchecked {
                self.ctx.ledger.unchecked();
            }
            if self.plan.shadow_rollback {
                Metrics::inc(&self.inner.metrics.shadow_rollbacks);
            }
            if self.plan.ledger_commit {
                self.commit_in_flight(true);
            }
            for inj in self.plan.pre.clone() {
                self.inject(&inj, &mut out);
            }
        }
        let mut failed = None;
        if let Some(b) = self.backend.as_mut() {
            let mut forwarder = Forwarder {
                shadow: self.ctx.shadow,
                statements: &mut self.statements,
                portals: &mut self.portals,
                prepared: &mut b.prepared,
                responses: &mut self.queue,
                reparses: &self.inner.metrics.reparses,
                in_batch: &mut self.in_batch,
                unnamed_parse: &mut self.batch_unnamed_parse,
            };
            for m in unit {
                if let Err(e) = forwarder.forward(m, &mut out) {
                    failed = Some(e);
                    break;
                }
            }
        }
        if let Some(e) = failed {
            return self.fatal("08P01", &e.to_string()).await;
        }
        if !self.in_batch {
            // A query after COPY FROM STDIN would break the copy: it waits for the answer.
            if copy_from {
                self.post_deferred = true;
            } else {
                for inj in std::mem::take(&mut self.plan.post) {
                    self.inject(&inj, &mut out);
                }
            }
        }
        if let Some(b) = self.backend.as_mut() {
            if let Err(e) = b.write(&out).await {
                return self.backend_lost(e).await;
            }
        }
        self.drain_synthetic();
        self.flush_client().await?;
        Ok(Step::Continue)
    }

    async fn answer_locally(&mut self, answers: Vec<Message>) -> Result<Step, ServeError> {
        for a in answers {
            self.queue.push(Expect::Synthetic(a));
        }
        self.drain_synthetic();
        self.flush_client().await?;
        Ok(Step::Continue)
    }

    /// With policy `pin`, keeps the backend for this client instead of refusing.
    fn try_pin(&mut self, r: Refusal) -> bool {
        if self.inner.cfg.session_state != SessionStatePolicy::Pin
            || self.ctx.shadow
            || r == Refusal::ShadowUncontained
        {
            return false;
        }
        if self.pinned {
            return true;
        }
        let m = &self.inner.metrics.pinned;
        let now = m.fetch_add(1, Ordering::Relaxed);
        if now as usize >= self.inner.cfg.max_pinned {
            m.fetch_sub(1, Ordering::Relaxed);
            return false;
        }
        self.pinned = true;
        true
    }

    async fn refuse(&mut self, r: Refusal, has_sync: bool) -> Result<Step, ServeError> {
        self.inner.metrics.refused(r);
        let mut message = r.message().to_owned();
        if self.inner.cfg.session_state == SessionStatePolicy::Pin
            && r != Refusal::ShadowUncontained
        {
            message.push_str(&format!(
                " (the limit of {} clients pinned to a backend is reached)",
                self.inner.cfg.max_pinned
            ));
        }
        let err = wire::error_response(Severity::Error, "0A000", &message);
        self.error_and_sync(err, has_sync).await
    }

    /// Answers a unit with an error in place of running it: the error, then ReadyForQuery
    /// (from the backend if a batch is open there).
    async fn error_and_sync(&mut self, err: Message, has_sync: bool) -> Result<Step, ServeError> {
        self.queue.push(Expect::Synthetic(err));
        if !has_sync {
            self.discard_until_sync = true;
        } else if self.in_batch && self.backend.is_some() {
            self.in_batch = false;
            self.queue.push(Expect::Sync);
            let mut buf = BytesMut::new();
            Message::new(b'S', Vec::new()).encode(&mut buf);
            if let Some(b) = self.backend.as_mut() {
                if let Err(e) = b.write(&buf).await {
                    return self.backend_lost(e).await;
                }
            }
        } else {
            let status = self.backend.as_ref().map_or(b'I', |b| b.status);
            self.queue
                .push(Expect::Synthetic(wire::ready_for_query(status)));
        }
        self.drain_synthetic();
        self.flush_client().await?;
        Ok(Step::Continue)
    }

    /// No backend could be had: the unit fails, the client stays connected.
    async fn unavailable(&mut self, e: PoolError, has_sync: bool) -> Result<Step, ServeError> {
        let code = match e {
            PoolError::Timeout { .. } => "53300",
            PoolError::Connect(_) => "08006",
        };
        let err = wire::error_response(Severity::Error, code, &error_chain(&e));
        self.error_and_sync(err, has_sync).await
    }

    async fn checkout(&mut self) -> Result<(), PoolError> {
        let mut b = self.inner.pool.acquire().await?;
        *self.cancel_target.lock().unwrap_or_else(|e| e.into_inner()) = Some((b.pid, b.secret));
        let diffs: Vec<String> = self
            .params
            .iter()
            .filter(|(k, v)| b.params.get(*k) != Some(*v))
            .map(|(k, v)| format!("set_config('{}', '{}', false)", k, v.replace('\'', "''")))
            .collect();
        if !diffs.is_empty() {
            let mut buf = BytesMut::new();
            wire::query(&format!("SELECT {}", diffs.join(", "))).encode(&mut buf);
            if b.write(&buf).await.is_err() {
                self.inner.pool.discard(b);
                return Err(PoolError::Connect(crate::BackendError::Wire(
                    WireError::Eof,
                )));
            }
            self.queue.push(Expect::Query(Origin::ApplyParams));
        }
        self.backend = Some(b);
        Ok(())
    }

    /// A COMMIT the ledger watches is on its way (or no longer): the ledger is not clean
    /// meanwhile.
    fn commit_in_flight(&mut self, on: bool) {
        if on != self.commit_in_flight {
            if on {
                self.ctx.ledger.commit_started();
            } else {
                self.ctx.ledger.commit_settled();
            }
        }
        self.commit_in_flight = on;
    }

    fn inject(&mut self, inj: &Injected, out: &mut BytesMut) {
        let (sql, origin) = match inj {
            Injected::Swallow(sql) => (sql.as_str(), Origin::Swallow),
            Injected::CaptureXid => (plan::CAPTURE_XID_SQL, Origin::CaptureXid),
            Injected::LedgerCommit => {
                self.commit_in_flight(true);
                ("COMMIT", Origin::LedgerCommit)
            }
        };
        wire::query(sql).encode(out);
        // Ignored, and so not answered, if the backend is skipping to Sync after an error.
        self.queue.expect(Expect::Query(origin));
    }

    /// Emits the proxy's own answers that have reached the head of the queue.
    fn drain_synthetic(&mut self) {
        self.queue.drain_synthetic(&mut self.out);
    }

    async fn on_backend(&mut self, m: Result<Message, WireError>) -> Result<Step, ServeError> {
        let m = match m {
            Ok(m) => m,
            Err(e) => return self.backend_lost(e).await,
        };
        self.relay(m);
        if std::mem::take(&mut self.post_due) {
            let mut out = BytesMut::new();
            for inj in std::mem::take(&mut self.plan.post) {
                self.inject(&inj, &mut out);
            }
            if let Some(b) = self.backend.as_mut() {
                if let Err(e) = b.write(&out).await {
                    return self.backend_lost(e).await;
                }
            }
        }
        if self.queue.is_empty() {
            if let Some(status) = self.held_rfq.take() {
                wire::ready_for_query(status).encode(&mut self.out);
            }
        }
        self.drain_synthetic();
        self.maybe_release();
        // Answers are written together while more of them are buffered; a released backend
        // may still hold a message (a FATAL at shutdown) that is not this client's.
        let more = self.backend.as_ref().is_some_and(|b| b.conn.has_buffered());
        if !more {
            self.flush_client().await?;
        }
        Ok(Step::Continue)
    }

    /// Handles one backend message against the head of the queue.
    fn relay(&mut self, m: Message) {
        let origin = self.queue.origin();
        let to_client = origin == Origin::Client;
        let Some(b) = self.backend.as_mut() else {
            return;
        };
        match m.tag {
            b'S' => {
                if let Ok((name, value)) = backend::parameter(&m) {
                    b.note_param(&name, &value);
                    if let Some(p) = crate::classify::tracked_param(&name) {
                        if matches!(origin, Origin::Client | Origin::ApplyParams) {
                            self.params.insert(p, value);
                        }
                    }
                }
                if to_client {
                    m.encode(&mut self.out);
                }
            }
            b'E' => self.on_error(m, origin),
            b'Z' => {
                let status = m.body.first().copied().unwrap_or(b'I');
                b.status = status;
                self.queue.pop();
                self.copy_in = false;
                if matches!(origin, Origin::Client | Origin::LedgerCommit) {
                    self.commit_in_flight(false);
                }
                if to_client && self.post_deferred {
                    self.post_deferred = false;
                    self.post_due = true;
                }
                if to_client {
                    match self.plan.rfq_override {
                        // A wrapped transaction: the client hears ReadyForQuery once the
                        // proxy's COMMIT or ROLLBACK is answered (a failed COMMIT is its error).
                        Some(shown) => self.held_rfq = Some(shown),
                        None => wire::ready_for_query(status).encode(&mut self.out),
                    }
                }
            }
            b'1' | b'2' | b'3' => {
                self.queue.pop();
                if to_client {
                    m.encode(&mut self.out);
                }
            }
            b'T' | b'n' => {
                self.queue.pop_if(|e| matches!(e, Expect::Describe));
                if to_client {
                    m.encode(&mut self.out);
                }
            }
            b'D' if origin == Origin::CaptureXid => {
                self.captured_xid = Some(wire::first_column_u64(&m.body))
            }
            b'C' => {
                let mut cur = &m.body[..];
                let tag = wire::take_cstr(&mut cur).unwrap_or_default();
                self.queue.pop_if(|e| matches!(e, Expect::Execute));
                let commits = (origin == Origin::Client && self.plan.ledger_commit)
                    || origin == Origin::LedgerCommit;
                if commits && tag == "COMMIT" {
                    if let Some(Some(xid)) = self.captured_xid.take() {
                        self.ctx.ledger.committed(xid);
                    }
                }
                if to_client {
                    if self.plan.commit_as_rollback && tag == "ROLLBACK" {
                        wire::command_complete("COMMIT").encode(&mut self.out);
                    } else {
                        m.encode(&mut self.out);
                    }
                }
            }
            b'I' | b's' => {
                self.queue.pop_if(|e| matches!(e, Expect::Execute));
                if to_client {
                    m.encode(&mut self.out);
                }
            }
            b'G' => {
                self.copy_in = true;
                // PostgreSQL ignores a Sync that arrives in copy mode; the client sends
                // another after CopyDone.
                if matches!(self.queue.front(), Some(Expect::Execute)) {
                    self.queue.forget_sync_sent_before_copy();
                }
                m.encode(&mut self.out);
            }
            b'A' => m.encode(&mut self.out),
            _ => {
                if to_client {
                    m.encode(&mut self.out);
                }
            }
        }
    }

    fn on_error(&mut self, m: Message, origin: Origin) {
        let extended = matches!(
            self.queue.front(),
            Some(
                Expect::Parse(..)
                    | Expect::Bind
                    | Expect::Describe
                    | Expect::Execute
                    | Expect::Close
            )
        );
        match origin {
            Origin::Client => m.encode(&mut self.out),
            Origin::CaptureXid => self.captured_xid = Some(None),
            // The wrapped implicit transaction did not commit (a deferred constraint, a
            // serialization failure): PostgreSQL would have told the client.
            Origin::LedgerCommit => m.encode(&mut self.out),
            // A statement re-parsed for the client failed: the client must hear of it.
            Origin::Swallow if extended => m.encode(&mut self.out),
            _ => {}
        }
        if !extended {
            return;
        }
        for (origin, server) in self.queue.skip_to_sync() {
            if let Some(b) = self.backend.as_mut() {
                b.prepared.remove(&server);
            }
            // A client's Parse that failed or was skipped defined nothing.
            if origin == Origin::Client {
                self.statements.forget_server_name(&server);
            }
        }
    }

    /// Returns the backend once the transaction is over and nothing is in flight.
    fn maybe_release(&mut self) {
        let idle = self.backend.as_ref().is_some_and(|b| b.status == b'I');
        if idle && self.queue.is_empty() && !self.in_batch && !self.copy_in && !self.pinned {
            if let Some(b) = self.backend.take() {
                *self.cancel_target.lock().unwrap_or_else(|e| e.into_inner()) = None;
                self.portals.clear();
                self.inner.pool.release(b);
            }
        }
    }

    /// The backend failed mid-transaction: its work is lost (or, for a COMMIT, uncertain).
    async fn backend_lost(&mut self, e: WireError) -> Result<Step, ServeError> {
        Metrics::inc(&self.inner.metrics.backends_lost);
        if self.commit_in_flight && self.captured_xid != Some(None) {
            self.ctx.ledger.uncertain();
        }
        self.commit_in_flight(false);
        if let Some(b) = self.backend.take() {
            self.inner.pool.discard(b);
        }
        *self.cancel_target.lock().unwrap_or_else(|e| e.into_inner()) = None;
        self.queue.clear();
        self.held_rfq = None;
        let msg = format!(
            "kiln's database proxy lost its connection to PostgreSQL during this transaction ({}); the transaction did not complete (a COMMIT in flight may have): reconnect and retry",
            error_chain(&e)
        );
        self.fatal("08006", &msg).await
    }

    /// The client left: an idle backend goes back, one mid-transaction is rolled back first
    /// or closed.
    async fn finish(&mut self) {
        if self.pinned {
            self.inner.metrics.pinned.fetch_sub(1, Ordering::Relaxed);
        }
        let Some(mut b) = self.backend.take() else {
            return;
        };
        *self.cancel_target.lock().unwrap_or_else(|e| e.into_inner()) = None;
        let clean = self.queue.is_empty() && !self.in_batch && !self.copy_in && !self.pinned;
        if clean && b.status == b'I' {
            return self.inner.pool.release(b);
        }
        if clean && rollback(&mut b).await {
            return self.inner.pool.release(b);
        }
        self.inner.pool.discard(b);
    }
}

/// Rolls back an idle-in-transaction backend; false if that did not leave it idle.
async fn rollback(b: &mut Backend) -> bool {
    let mut buf = BytesMut::new();
    wire::query("ROLLBACK").encode(&mut buf);
    let work = async {
        b.write(&buf).await?;
        loop {
            let m = b.conn.next().await?;
            if m.tag == b'Z' {
                b.status = m.body.first().copied().unwrap_or(0);
                return Ok::<bool, WireError>(b.status == b'I');
            }
        }
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(5), work).await,
        Ok(Ok(true))
    )
}
