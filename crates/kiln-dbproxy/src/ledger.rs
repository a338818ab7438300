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
    /// COMMITs sent and not yet answered: until they are, the ledger is not clean (a failed
    /// invocation's COMMIT may still be on its way when its caller reads the ledger).
    pub pending: u32,
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

    /// A COMMIT the ledger watches was sent.
    pub fn commit_started(&self) {
        self.with(|l| l.pending += 1);
    }

    /// That COMMIT was answered (its outcome recorded) or its backend lost.
    pub fn commit_settled(&self) {
        self.with(|l| l.pending = l.pending.saturating_sub(1));
    }

    /// No write committed, none possibly committed, and none on its way.
    pub fn is_clean(&self) -> bool {
        self.with(|l| {
            l.committed.is_empty() && l.uncertain == 0 && l.unchecked == 0 && l.pending == 0
        })
    }

    pub fn snapshot(&self) -> LedgerEntries {
        self.with(|l| l.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_commit_on_its_way_is_not_clean_until_settled() {
        let l = Ledger::new();
        assert!(l.is_clean());
        l.commit_started();
        assert!(!l.is_clean(), "the COMMIT may still write");
        l.commit_settled();
        assert!(l.is_clean(), "answered without a write");
        l.commit_started();
        l.committed(7);
        l.commit_settled();
        assert!(!l.is_clean());
        assert_eq!(l.snapshot().committed, vec![7]);
        l.commit_settled();
        assert_eq!(l.snapshot().pending, 0, "never below zero");
    }
}
