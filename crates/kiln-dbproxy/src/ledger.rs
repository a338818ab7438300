//! The per-invocation ledger of writes: what kiln needs to decide whether a failed invocation
//! may be served again by the monolith (never if it may have written).

use std::sync::Mutex;

/// Writes seen by the proxy on behalf of one invocation.
#[derive(Debug, Default)]
pub struct Ledger {
    inner: Mutex<LedgerEntries>,
}

/// A snapshot of a ledger.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct LedgerEntries {
    /// Transaction ids that committed with an id assigned (they wrote).
    pub committed: Vec<u64>,
    /// COMMITs whose backend was lost before the answer: they may have written.
    pub uncertain: u32,
    /// Transactions the proxy could not check (transaction control mixed with other
    /// statements in one query, statements that cannot run in a transaction block): counted
    /// as writes.
    pub unchecked: u32,
}

impl Ledger {
    pub fn new() -> Ledger {
        Ledger::default()
    }

    fn with<T>(&self, f: impl FnOnce(&mut LedgerEntries) -> T) -> T {
        f(&mut self.inner.lock().unwrap_or_else(|e| e.into_inner()))
    }

    pub fn committed(&self, xid: u64) {
        self.with(|l| l.committed.push(xid));
    }

    pub fn uncertain(&self) {
        self.with(|l| l.uncertain += 1);
    }

    pub fn unchecked(&self) {
        self.with(|l| l.unchecked += 1);
    }

    /// No write committed, and none possibly committed.
    pub fn is_clean(&self) -> bool {
        self.with(|l| l.committed.is_empty() && l.uncertain == 0 && l.unchecked == 0)
    }

    pub fn snapshot(&self) -> LedgerEntries {
        self.with(|l| l.clone())
    }
}
