//! Sequence runs kept for the retry that resumes them: a queued run that stopped past its
//! first stage keeps its intermediate outputs in memory until its retry claims them, or
//! until its time is up and the sweep ends it.

use std::sync::MutexGuard;
use std::time::Instant;

use super::ObjectCache;
use crate::sync::LockExt;

/// A sequence run kept for the retry that resumes it.
pub(super) struct Kept {
    /// When the sweep may end it (None: the retry is running it).
    until: Option<Instant>,
    /// Its intermediate outputs when it stopped (how many, and their bytes): the retry
    /// resumes only if they are all still there.
    objects: (usize, u64),
}

/// Kept runs' intermediate outputs take at most this share of the cache's capacity.
const KEPT_RUNS_SHARE: u64 = 4;

impl ObjectCache {
    /// Sequence run `run` ended: its intermediate outputs are dropped (OFC §6.3).
    pub fn end_run(&self, run: &str) -> usize {
        self.kept_runs().remove(run);
        let dropped = self.entries().end_run(run);
        self.refresh_gauges();
        dropped
    }

    /// Run `run` stopped at a stage that will be retried: its intermediate outputs stay for
    /// the retry until `until` (then the next sweep drops them, and the retry starts over),
    /// if the kept runs' outputs stay within a quarter of the capacity. False: not kept (the
    /// caller ends the run).
    pub fn keep_run(&self, run: &str, until: Instant) -> bool {
        let (objects, capacity) = {
            let entries = self.entries();
            (entries.run_footprint(run), entries.usage().capacity)
        };
        let mut kept = self.kept_runs();
        let others: u64 = kept
            .iter()
            .filter(|(r, _)| r.as_str() != run)
            .map(|(_, k)| k.objects.1)
            .sum();
        if others + objects.1 > capacity / KEPT_RUNS_SHARE {
            kept.remove(run);
            return false;
        }
        kept.insert(
            run.to_string(),
            Kept {
                until: Some(until),
                objects,
            },
        );
        true
    }

    /// Takes run `run` for the retry that resumes it, if everything it kept is still held:
    /// kept (not lost with a restart), not past its time, none of its outputs replaced or
    /// dropped since. While the retry runs, no sweep ends it.
    pub fn claim_run(&self, run: &str) -> bool {
        let objects = self.entries().run_footprint(run);
        let mut kept = self.kept_runs();
        match kept.get_mut(run) {
            Some(k) if k.until.is_some_and(|u| u > Instant::now()) && k.objects == objects => {
                k.until = None;
                true
            }
            _ => false,
        }
    }

    fn kept_runs(&self) -> MutexGuard<'_, std::collections::HashMap<String, Kept>> {
        self.kept_runs.locked()
    }

    /// Ends the runs kept past their time (the sweep's part).
    pub(super) fn end_expired_runs(&self, now: Instant) {
        let mut expired = Vec::new();
        self.kept_runs().retain(|run, kept| {
            let keep = kept.until.is_none_or(|until| until > now);
            if !keep {
                expired.push(run.clone());
            }
            keep
        });
        for run in expired {
            self.entries().end_run(&run);
        }
    }
}
