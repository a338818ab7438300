//! Per-invocation memory sizing (OFC §4): an instance runs each invocation at the limit the
//! controller predicted for it (`InvokeRequest::memory_limit_mb`), or at its booked
//! MemorySize, and a monitor raises the limit back to the booked size when the invocation comes
//! close to it. An invocation killed for memory anyway is retried by the controller at the
//! booked size.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kiln_sandbox::Cgroup;

const MIB: u64 = 1024 * 1024;
/// How often a running invocation's memory is checked against its predicted limit. The first
/// check comes after one period: most invocations are over by then, and pay nothing.
const MONITOR_PERIOD: Duration = Duration::from_millis(50);

/// Sets `cgroup`'s limit for an invocation that asked for `requested` MB (if below `booked`),
/// where `current` is the predicted limit the instance has now (`None`: booked). A limit the
/// kernel refuses (the instance already uses more) leaves the booked size. Returns how long
/// the writes took, if the limit had to change.
pub fn apply(
    cgroup: &Cgroup,
    current: &mut Option<u32>,
    requested: Option<u32>,
    booked: u32,
) -> Option<Duration> {
    let wanted = requested.filter(|&mb| mb < booked);
    if wanted == *current {
        return None;
    }
    let started = std::time::Instant::now();
    let bytes = u64::from(wanted.unwrap_or(booked)) * MIB;
    match cgroup.set_memory_limit(bytes) {
        Ok(()) => *current = wanted,
        Err(e) => {
            tracing::debug!("memory limit of {bytes} bytes not applied: {e}");
            if cgroup.set_memory_limit(u64::from(booked) * MIB).is_ok() {
                *current = None;
            }
        }
    }
    Some(started.elapsed())
}

/// Called before a monitor raises a limit: the node takes the memory back from what it lent
/// (the object cache) first, as OFC's scale-up does.
pub type BeforeRaise = Box<dyn FnOnce() + Send>;

/// Watches one invocation that runs under a predicted limit. It is no task of its own: the
/// invocation's wait for its runtime wakes at [`Monitor::next_check`] and calls
/// [`Monitor::check`], so an invocation over before the first check (most are) costs nothing
/// beyond this struct.
pub struct Monitor {
    cgroup: Arc<Cgroup>,
    limit_bytes: u64,
    booked_mb: u32,
    before_raise: Option<BeforeRaise>,
    next: Instant,
    raised: bool,
}

impl Monitor {
    /// Watches `cgroup`, whose limit is `limit_mb`: at 90% of it, `before_raise` runs and the
    /// limit goes back to `booked_mb`.
    pub fn start(
        cgroup: Arc<Cgroup>,
        limit_mb: u32,
        booked_mb: u32,
        before_raise: BeforeRaise,
    ) -> Monitor {
        Monitor {
            cgroup,
            limit_bytes: u64::from(limit_mb) * MIB,
            booked_mb,
            before_raise: Some(before_raise),
            next: Instant::now() + MONITOR_PERIOD,
            raised: false,
        }
    }

    /// When the next check is due; `None` once the limit is raised (nothing left to watch).
    pub fn next_check(&self) -> Option<Instant> {
        (!self.raised).then_some(self.next)
    }

    /// Checks the invocation's memory if a check is due: at 90% of the predicted limit, the
    /// limit goes back to the booked size.
    pub fn check(&mut self, now: Instant) {
        if self.raised || now < self.next {
            return;
        }
        // Checks missed while the thread was busy are skipped, not caught up.
        self.next = now + MONITOR_PERIOD;
        if self.cgroup.memory_current() * 10 < self.limit_bytes * 9 {
            return;
        }
        if let Some(before_raise) = self.before_raise.take() {
            before_raise();
        }
        self.raised = self
            .cgroup
            .set_memory_limit(u64::from(self.booked_mb) * MIB)
            .is_ok();
    }

    /// Whether the limit was raised during the invocation.
    pub fn raised(&self) -> bool {
        self.raised
    }
}
