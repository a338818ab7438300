//! Counters of the proxy, read as a plain snapshot (kiln exports them as `kiln_dbproxy_*`).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::classify::Refusal;

#[derive(Debug, Default)]
pub(crate) struct Metrics {
    pub clients: AtomicU64,
    pub clients_total: AtomicU64,
    pub auth_failures: AtomicU64,
    pub checkouts: AtomicU64,
    pub queue_timeouts: AtomicU64,
    pub pool_wait_micros_sum: AtomicU64,
    pub pool_wait_count: AtomicU64,
    pub backends_lost: AtomicU64,
    pub connect_failures: AtomicU64,
    pub reparses: AtomicU64,
    pub shadow_rollbacks: AtomicU64,
    pub pinned: AtomicU64,
    pub refusals: [AtomicU64; Refusal::ALL.len()],
}

impl Metrics {
    pub fn refused(&self, r: Refusal) {
        let ix = Refusal::ALL.iter().position(|x| *x == r).unwrap_or(0);
        self.refusals[ix].fetch_add(1, Relaxed);
    }

    pub fn inc(c: &AtomicU64) {
        c.fetch_add(1, Relaxed);
    }
}

/// The proxy's counters at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetricsSnapshot {
    pub backends_open: u64,
    pub backends_idle: u64,
    pub waiters: u64,
    pub clients: u64,
    pub clients_total: u64,
    pub auth_failures: u64,
    pub checkouts: u64,
    pub queue_timeouts: u64,
    /// Sum and count of the waits for a backend, in microseconds.
    pub pool_wait_micros_sum: u64,
    pub pool_wait_count: u64,
    pub backends_lost: u64,
    pub connect_failures: u64,
    /// Prepared statements parsed again on a backend that lacked them.
    pub reparses: u64,
    pub shadow_rollbacks: u64,
    /// Clients holding a pinned backend now.
    pub pinned: u64,
    /// Refusals by kind, labelled as in `Refusal::label`.
    pub refusals: Vec<(&'static str, u64)>,
}

impl Metrics {
    pub fn snapshot(
        &self,
        backends_open: u64,
        backends_idle: u64,
        waiters: u64,
    ) -> MetricsSnapshot {
        MetricsSnapshot {
            backends_open,
            backends_idle,
            waiters,
            clients: self.clients.load(Relaxed),
            clients_total: self.clients_total.load(Relaxed),
            auth_failures: self.auth_failures.load(Relaxed),
            checkouts: self.checkouts.load(Relaxed),
            queue_timeouts: self.queue_timeouts.load(Relaxed),
            pool_wait_micros_sum: self.pool_wait_micros_sum.load(Relaxed),
            pool_wait_count: self.pool_wait_count.load(Relaxed),
            backends_lost: self.backends_lost.load(Relaxed),
            connect_failures: self.connect_failures.load(Relaxed),
            reparses: self.reparses.load(Relaxed),
            shadow_rollbacks: self.shadow_rollbacks.load(Relaxed),
            pinned: self.pinned.load(Relaxed),
            refusals: Refusal::ALL
                .iter()
                .zip(&self.refusals)
                .map(|(r, c)| (r.label(), c.load(Relaxed)))
                .collect(),
        }
    }
}
