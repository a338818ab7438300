//! Per-invocation memory sizing (OFC §4): an instance runs each invocation at the limit the
//! controller predicted for it (`InvokeRequest::memory_limit_mb`), or at its booked
//! MemorySize, and a monitor raises the limit back to the booked size when the invocation comes
//! close to it. An invocation killed for memory anyway is retried by the controller at the
//! booked size.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

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

/// Watches one invocation that runs under a predicted limit.
pub struct Monitor {
    raised: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Monitor {
    /// Starts watching `cgroup`, whose limit is `limit_mb`: at 90% of it, `before_raise` runs
    /// and the limit goes back to `booked_mb`.
    pub fn start(
        cgroup: Arc<Cgroup>,
        limit_mb: u32,
        booked_mb: u32,
        before_raise: BeforeRaise,
    ) -> Monitor {
        let raised = Arc::new(AtomicBool::new(false));
        let flag = raised.clone();
        let task = tokio::spawn(async move {
            let limit = u64::from(limit_mb) * MIB;
            let start = tokio::time::Instant::now() + MONITOR_PERIOD;
            let mut tick = tokio::time::interval_at(start, MONITOR_PERIOD);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                tick.tick().await;
                if cgroup.memory_current() * 10 >= limit * 9 {
                    before_raise();
                    if cgroup.set_memory_limit(u64::from(booked_mb) * MIB).is_ok() {
                        flag.store(true, Ordering::Relaxed);
                    }
                    return;
                }
            }
        });
        Monitor { raised, task }
    }

    /// Stops watching; true if the limit was raised meanwhile. A raise under way (it has no
    /// await point) completes before this returns, so nothing is raised or reserved after it.
    pub async fn finish(self) -> bool {
        self.task.abort();
        let _ = self.task.await;
        self.raised.load(Ordering::Relaxed)
    }
}
