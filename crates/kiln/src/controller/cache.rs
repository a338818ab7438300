//! What the controller needs of the node's object cache, as a trait the controller owns (as the
//! agent meets the store through `SandboxService` and `MemoryLender`): its metrics, the
//! admission decision of each invocation, the time functions spend in object-store calls, the
//! runs that sequences keep for a retry, and what it has yet to write back. The controller's
//! tests put a fake behind it; `ObjectCache` is the real one.

use std::time::Instant;

use crate::objects::cache::{CacheMetrics, IoTimes, ObjectCache, WritebackStatus};

pub trait InvocationCache: Send + Sync + std::fmt::Debug {
    /// Its metrics, exposed with kiln's own.
    fn metrics(&self) -> &CacheMetrics;
    /// The admission the configuration fixes (`Some`), or `None` when each function's
    /// cache-benefit model decides.
    fn configured_admission(&self) -> Option<bool>;
    /// Whether `function`'s objects are admitted, for requests that carry no decision.
    fn set_admission(&self, function: &str, admit: bool);
    /// `function`'s time in object-store calls so far (monotonic).
    fn io_times(&self, function: &str) -> IoTimes;
    /// Keeps a sequence run's intermediates for a retry until `until`; false if they cannot be.
    fn keep_run(&self, run: &str, until: Instant) -> bool;
    /// Takes a kept run for the retry that resumes it; false if any of its objects is gone.
    fn claim_run(&self, run: &str) -> bool;
    /// Ends a run: its intermediates go. Returns how many objects went.
    fn end_run(&self, run: &str) -> usize;
    /// What is still to be written back, and what of it is failing.
    fn writeback_status(&self) -> WritebackStatus;
}

impl InvocationCache for ObjectCache {
    fn metrics(&self) -> &CacheMetrics {
        ObjectCache::metrics(self)
    }

    fn configured_admission(&self) -> Option<bool> {
        ObjectCache::configured_admission(self)
    }

    fn set_admission(&self, function: &str, admit: bool) {
        ObjectCache::set_admission(self, function, admit)
    }

    fn io_times(&self, function: &str) -> IoTimes {
        ObjectCache::io_times(self, function)
    }

    fn keep_run(&self, run: &str, until: Instant) -> bool {
        ObjectCache::keep_run(self, run, until)
    }

    fn claim_run(&self, run: &str) -> bool {
        ObjectCache::claim_run(self, run)
    }

    fn end_run(&self, run: &str) -> usize {
        ObjectCache::end_run(self, run)
    }

    fn writeback_status(&self) -> WritebackStatus {
        ObjectCache::writeback_status(self)
    }
}
