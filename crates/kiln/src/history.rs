//! The node's recent activity, one sample a second for the last hour, kept in memory for the
//! console's charts (`/kiln/v1/history`): invocations, function errors, throttles and cold
//! starts by path in each second.
//!
//! A task reads kiln's own counters once a second ([`Totals`], summed over the functions) and
//! keeps the differences: nothing is added to the invoke path, and no external Prometheus is
//! needed.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;

use crate::sync::LockExt;

/// An hour at one sample a second.
pub const SAMPLES: usize = 3600;
pub const INTERVAL: Duration = Duration::from_secs(1);

/// kiln's counters at one moment, summed over the node's functions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    pub invocations: u64,
    pub errors: u64,
    pub throttles: u64,
    /// Cold starts by path: coldest, warm, hot.
    pub starts: [u64; 3],
}

/// What happened in one second.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Sample {
    /// Unix seconds at the end of the second.
    pub time: i64,
    pub invocations: u64,
    pub errors: u64,
    pub throttles: u64,
    pub coldest: u64,
    pub warm: u64,
    pub hot: u64,
}

impl Sample {
    /// The activity between two readings. A counter that went down (its function was deleted)
    /// counts nothing rather than wrapping.
    pub fn between(time: i64, before: &Totals, after: &Totals) -> Self {
        let d = |a: u64, b: u64| b.saturating_sub(a);
        Self {
            time,
            invocations: d(before.invocations, after.invocations),
            errors: d(before.errors, after.errors),
            throttles: d(before.throttles, after.throttles),
            coldest: d(before.starts[0], after.starts[0]),
            warm: d(before.starts[1], after.starts[1]),
            hot: d(before.starts[2], after.starts[2]),
        }
    }
}

/// The ring of samples, the newest last.
pub struct History {
    capacity: usize,
    state: Mutex<(Option<Totals>, VecDeque<Sample>)>,
}

impl History {
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            state: Mutex::new((None, VecDeque::with_capacity(capacity.max(1)))),
        }
    }

    /// Records a reading taken at `time`; the first one only sets the baseline.
    pub fn record(&self, time: i64, totals: Totals) {
        let mut state = self.state.locked();
        let (last, samples) = &mut *state;
        if let Some(before) = last.replace(totals) {
            if samples.len() == self.capacity {
                samples.pop_front();
            }
            samples.push_back(Sample::between(time, &before, &totals));
        }
    }

    /// The samples of the last `seconds`, oldest first.
    pub fn last(&self, seconds: usize) -> Vec<Sample> {
        let state = self.state.locked();
        let samples = &state.1;
        samples
            .iter()
            .skip(samples.len().saturating_sub(seconds))
            .copied()
            .collect()
    }
}

/// Reads `totals` every [`INTERVAL`] into `history` for as long as `history` is held elsewhere.
pub fn sample(history: &Arc<History>, totals: impl Fn() -> Totals + Send + 'static) {
    let weak = Arc::downgrade(history);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(history) = weak.upgrade() else {
                return;
            };
            history.record(chrono::Utc::now().timestamp(), totals());
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn totals(invocations: u64, hot: u64) -> Totals {
        Totals {
            invocations,
            starts: [0, 0, hot],
            ..Default::default()
        }
    }

    #[test]
    fn samples_are_differences_and_the_ring_keeps_the_newest() {
        let history = History::new(3);
        history.record(0, totals(10, 1));
        assert!(
            history.last(10).is_empty(),
            "the first reading is a baseline"
        );
        for t in 1..=5 {
            history.record(t, totals(10 + 2 * t as u64, 1 + t as u64));
        }
        let kept = history.last(10);
        assert_eq!(
            kept.iter().map(|s| s.time).collect::<Vec<_>>(),
            vec![3, 4, 5]
        );
        assert!(kept.iter().all(|s| s.invocations == 2 && s.hot == 1));
        assert_eq!(history.last(1)[0].time, 5);
        assert!(history.last(0).is_empty());
    }

    #[test]
    fn a_counter_that_went_down_counts_nothing() {
        let sample = Sample::between(1, &totals(10, 5), &totals(4, 7));
        assert_eq!((sample.invocations, sample.hot), (0, 2));
    }
}
