//! The responses a backend owes a session, in order, and where each goes: to the client, or
//! dropped because the proxy sent the request itself.

use std::collections::VecDeque;

use bytes::BytesMut;

use crate::wire::Message;

/// Where a response goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    Client,
    Swallow,
    /// Applying the client's tracked parameters: reports update the client's view too.
    ApplyParams,
    CaptureXid,
    LedgerCommit,
}

/// A response the backend owes, in order.
#[derive(Debug)]
pub(crate) enum Expect {
    /// A simple Query or FunctionCall: everything up to ReadyForQuery.
    Query(Origin),
    /// A Parse; the server-side name it prepares, if named.
    Parse(Origin, Option<String>),
    Bind,
    Describe,
    Execute,
    Close,
    Sync,
    /// An answer the proxy gives itself once everything before it is answered.
    Synthetic(Message),
}

impl Expect {
    pub fn origin(&self) -> Origin {
        match self {
            Expect::Query(o) | Expect::Parse(o, _) => *o,
            _ => Origin::Client,
        }
    }
}

/// The queue of expected responses.
#[derive(Debug, Default)]
pub(crate) struct Responses {
    queue: VecDeque<Expect>,
    /// The backend ignores messages until Sync after an error, and none is queued yet.
    skipping: bool,
}

impl Responses {
    /// Queues what a forwarded message will be answered with, unless the backend is
    /// skipping to Sync after an error (it will not answer).
    pub fn expect(&mut self, e: Expect) {
        if self.skipping && !matches!(e, Expect::Sync) {
            return;
        }
        if matches!(e, Expect::Sync) {
            self.skipping = false;
        }
        self.queue.push_back(e);
    }

    /// Queues an answer of the proxy's own, which no error can skip.
    pub fn push(&mut self, e: Expect) {
        self.queue.push_back(e);
    }

    pub fn front(&self) -> Option<&Expect> {
        self.queue.front()
    }

    /// Where the answer now arriving goes.
    pub fn origin(&self) -> Origin {
        self.queue.front().map_or(Origin::Client, Expect::origin)
    }

    pub fn pop(&mut self) -> Option<Expect> {
        self.queue.pop_front()
    }

    /// Pops the head if it is what `is` matches.
    pub fn pop_if(&mut self, is: impl Fn(&Expect) -> bool) {
        if self.queue.front().is_some_and(is) {
            self.queue.pop_front();
        }
    }

    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    pub fn clear(&mut self) {
        self.queue.clear();
        self.skipping = false;
    }

    /// Writes the proxy's own answers that have reached the head.
    pub fn drain_synthetic(&mut self, out: &mut BytesMut) {
        while let Some(Expect::Synthetic(_)) = self.queue.front() {
            if let Some(Expect::Synthetic(m)) = self.queue.pop_front() {
                m.encode(out);
            }
        }
    }

    /// After an error in the extended protocol PostgreSQL skips everything up to Sync: drops
    /// those expectations and returns the statements their Parses would have prepared, and
    /// whether the client sent each Parse (or the proxy, to prepare it again).
    pub fn skip_to_sync(&mut self) -> Vec<(Origin, String)> {
        let mut unprepared = Vec::new();
        while let Some(e) = self.queue.front() {
            if matches!(e, Expect::Sync) {
                break;
            }
            if let Some(Expect::Parse(origin, Some(server))) = self.queue.pop_front() {
                unprepared.push((origin, server));
            }
        }
        if self.queue.is_empty() {
            self.skipping = true;
        }
        unprepared
    }

    /// PostgreSQL ignores a Sync that arrives in copy mode; the client sends another after
    /// CopyDone.
    pub fn forget_sync_sent_before_copy(&mut self) {
        if let Some(ix) = self.queue.iter().position(|e| matches!(e, Expect::Sync)) {
            self.queue.remove(ix);
        }
    }
}
