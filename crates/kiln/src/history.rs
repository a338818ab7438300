//! The node's recent activity, kept in memory for the console (`/kiln/v1/history`, the
//! functions table): one sample a second for the last hour (invocations, function errors,
//! throttles and cold starts by path in each second), and each function's last hour a minute
//! at a time (invocations and errors) with the second of its last invocation.
//!
//! A task reads kiln's own counters once a second ([`Counts`] per function) and keeps the
//! differences: nothing is added to the invoke path, and no external Prometheus is needed.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;

use crate::sync::LockExt;

/// An hour at one sample a second.
pub const SAMPLES: usize = 3600;
pub const INTERVAL: Duration = Duration::from_secs(1);
/// How far back a function's activity goes, in seconds.
pub const FUNCTION_WINDOW_S: i64 = 3600;

/// One function's counters at one moment (kiln's metrics, which only go up while it exists).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub invocations: u64,
    pub errors: u64,
    pub throttles: u64,
    /// Cold starts by path: coldest, warm, hot.
    pub starts: [u64; 3],
}

impl Counts {
    /// What happened between two readings. A counter that went down (the function was
    /// deleted and made again) counts nothing rather than wrapping.
    fn since(&self, before: &Counts) -> Counts {
        let d = |b: u64, a: u64| a.saturating_sub(b);
        Counts {
            invocations: d(before.invocations, self.invocations),
            errors: d(before.errors, self.errors),
            throttles: d(before.throttles, self.throttles),
            starts: [0, 1, 2].map(|i| d(before.starts[i], self.starts[i])),
        }
    }
}

/// What happened on the node in one second.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
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
    fn add(&mut self, d: &Counts) {
        self.invocations += d.invocations;
        self.errors += d.errors;
        self.throttles += d.throttles;
        self.coldest += d.starts[0];
        self.warm += d.starts[1];
        self.hot += d.starts[2];
    }
}

/// One function's invocations and errors in one minute.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Minute {
    /// Unix seconds at its start (a multiple of 60).
    start: i64,
    invocations: u64,
    errors: u64,
}

/// What the history holds of one function.
#[derive(Debug, Default)]
struct Tracked {
    last: Counts,
    /// The reading that last saw it (functions no reading names any more are dropped).
    seen: u64,
    last_invocation: Option<i64>,
    /// Minutes with invocations, oldest first, none older than [`FUNCTION_WINDOW_S`].
    minutes: VecDeque<Minute>,
}

impl Tracked {
    fn add(&mut self, time: i64, d: &Counts) {
        if d.invocations == 0 && d.errors == 0 {
            return;
        }
        self.last_invocation = Some(time);
        let start = time - time.rem_euclid(60);
        if self.minutes.back().is_none_or(|m| m.start != start) {
            self.minutes.push_back(Minute {
                start,
                invocations: 0,
                errors: 0,
            });
        }
        let minute = self.minutes.back_mut().expect("pushed");
        minute.invocations += d.invocations;
        minute.errors += d.errors;
        while self
            .minutes
            .front()
            .is_some_and(|m| m.start <= time - FUNCTION_WINDOW_S)
        {
            self.minutes.pop_front();
        }
    }
}

/// A function's last hour: what the functions table shows and sorts by.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Activity {
    /// Unix seconds of the second its last invocation ended in, if it had one since kiln
    /// started.
    pub last_invocation: Option<i64>,
    /// In the last hour.
    pub invocations: u64,
    pub errors: u64,
}

impl Activity {
    /// Function errors per invocation in the last hour; `None` without invocations.
    pub fn error_rate(&self) -> Option<f64> {
        (self.invocations > 0).then(|| self.errors as f64 / self.invocations as f64)
    }
}

#[derive(Default)]
struct State {
    readings: u64,
    samples: VecDeque<Sample>,
    functions: HashMap<String, Tracked>,
}

/// The ring of samples, the newest last, and each function's last hour.
pub struct History {
    capacity: usize,
    state: Mutex<State>,
}

impl History {
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            state: Mutex::new(State {
                samples: VecDeque::with_capacity(capacity.max(1)),
                ..State::default()
            }),
        }
    }

    /// Records a reading of every function's counters taken at `time`. The first reading of
    /// a function only sets its baseline; the node's first reading makes no sample.
    pub fn record(&self, time: i64, reading: Vec<(String, Counts)>) {
        let mut state = self.state.locked();
        state.readings += 1;
        let generation = state.readings;
        let mut sample = Sample {
            time,
            ..Sample::default()
        };
        for (name, counts) in reading {
            let tracked = state.functions.entry(name).or_insert_with(|| Tracked {
                last: counts,
                ..Tracked::default()
            });
            let d = counts.since(&tracked.last);
            tracked.last = counts;
            tracked.seen = generation;
            tracked.add(time, &d);
            sample.add(&d);
        }
        state.functions.retain(|_, t| t.seen == generation);
        if generation > 1 {
            if state.samples.len() == self.capacity {
                state.samples.pop_front();
            }
            state.samples.push_back(sample);
        }
    }

    /// The samples of the last `seconds`, oldest first.
    pub fn last(&self, seconds: usize) -> Vec<Sample> {
        let state = self.state.locked();
        let samples = &state.samples;
        samples
            .iter()
            .skip(samples.len().saturating_sub(seconds))
            .copied()
            .collect()
    }

    /// Each function's activity in the hour before `now` (Unix seconds).
    pub fn activity(&self, now: i64) -> HashMap<String, Activity> {
        let state = self.state.locked();
        state
            .functions
            .iter()
            .map(|(name, tracked)| (name.clone(), tracked.activity(now)))
            .collect()
    }
}

impl Tracked {
    /// Its activity in the hour before `now`.
    fn activity(&self, now: i64) -> Activity {
        let mut activity = Activity {
            last_invocation: self.last_invocation,
            ..Activity::default()
        };
        for minute in self
            .minutes
            .iter()
            .filter(|m| m.start > now - FUNCTION_WINDOW_S)
        {
            activity.invocations += minute.invocations;
            activity.errors += minute.errors;
        }
        activity
    }
}

/// Reads every function's counters (`read`) every [`INTERVAL`] into `history` for as long as
/// `history` is held elsewhere.
pub fn sample(history: &Arc<History>, read: impl Fn() -> Vec<(String, Counts)> + Send + 'static) {
    let weak = Arc::downgrade(history);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(history) = weak.upgrade() else {
                return;
            };
            history.record(chrono::Utc::now().timestamp(), read());
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(invocations: u64, errors: u64, hot: u64) -> Counts {
        Counts {
            invocations,
            errors,
            starts: [0, 0, hot],
            ..Default::default()
        }
    }

    fn one(name: &str, c: Counts) -> Vec<(String, Counts)> {
        vec![(name.to_string(), c)]
    }

    #[test]
    fn samples_are_differences_and_the_ring_keeps_the_newest() {
        let history = History::new(3);
        history.record(0, one("f", counts(10, 0, 1)));
        assert!(
            history.last(10).is_empty(),
            "the first reading is a baseline"
        );
        for t in 1..=5 {
            history.record(t, one("f", counts(10 + 2 * t as u64, 0, 1 + t as u64)));
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
    fn the_node_sums_its_functions_and_a_counter_that_went_down_counts_nothing() {
        let history = History::new(10);
        let reading = |a: u64, b: u64| {
            vec![
                ("a".to_string(), counts(a, 0, 0)),
                ("b".to_string(), counts(b, 0, 0)),
            ]
        };
        history.record(0, reading(10, 5));
        history.record(1, reading(12, 8));
        // `b` was deleted and made again: its counter restarted.
        history.record(2, reading(13, 1));
        let samples = history.last(10);
        assert_eq!(
            samples.iter().map(|s| s.invocations).collect::<Vec<_>>(),
            vec![5, 1]
        );
    }

    #[test]
    fn a_function_made_later_counts_from_its_first_reading() {
        let history = History::new(10);
        history.record(0, vec![]);
        history.record(1, one("new", counts(0, 0, 0)));
        history.record(2, one("new", counts(3, 1, 1)));
        assert_eq!(history.last(10).last().unwrap().invocations, 3);
        let activity = history.activity(2)["new"];
        assert_eq!(
            (
                activity.invocations,
                activity.errors,
                activity.last_invocation
            ),
            (3, 1, Some(2))
        );
        assert_eq!(activity.error_rate(), Some(1.0 / 3.0));
    }

    #[test]
    fn activity_covers_the_last_hour_and_deleted_functions_are_forgotten() {
        let history = History::new(10);
        let mut total = 0;
        history.record(0, one("f", counts(0, 0, 0)));
        // One invocation at the start of each of 90 minutes; an error every tenth minute.
        for minute in 0..90 {
            total += 1;
            let errors = minute / 10 + 1;
            history.record(minute * 60 + 1, one("f", counts(total, errors as u64, 0)));
        }
        let now = 89 * 60 + 1;
        let activity = history.activity(now)["f"];
        assert_eq!(activity.invocations, 60);
        assert_eq!(activity.last_invocation, Some(now));
        // Errors in minutes 30 to 89: one each time the count stepped (30, 40, …, 80).
        assert_eq!(activity.errors, 6);
        // An hour later, nothing is left of it but when it last ran.
        let later = history.activity(now + 3600)["f"];
        assert_eq!((later.invocations, later.last_invocation), (0, Some(now)));
        assert_eq!(later.error_rate(), None);
        history.record(now + 1, vec![]);
        assert!(history.activity(now + 1).is_empty());
    }
}
