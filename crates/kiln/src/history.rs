//! The node's recent activity, kept in memory for the console (`/kiln/v1/history`, the
//! functions table, a function's metrics): one sample a second for the last hour (invocations,
//! function errors, throttles, cold starts by path and durations in each second), and each
//! function's last hour a minute at a time (invocations, errors, durations, cold starts by path,
//! the highest Max Memory Used and predicted limit) with the second of its last invocation.
//!
//! A task reads kiln's own counters once a second ([`Counts`] per function: the metrics'
//! counters and duration buckets) and keeps the differences: the invoke path does nothing for
//! it beyond counting in its duration bucket, and no external Prometheus is needed.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;

use crate::metrics::duration::{self, BUCKETS};
use crate::objects::cache::CacheReading;
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
    /// Durations by bucket ([`duration::BOUNDS`]).
    pub durations: duration::Counts,
    /// The highest memory noted since the last reading (not a counter: each reading has its
    /// own).
    pub memory: MemoryPeak,
    /// The function's memory model as it is at the reading, if it has one.
    pub model: Option<ModelReading>,
}

/// A memory model at one reading: whether it sizes the function's instances, and the share of
/// its recent predictions that were exact or over, in thousandths.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ModelReading {
    pub mature: bool,
    pub exact_or_over_permille: Option<u16>,
}

impl ModelReading {
    pub fn new(mature: bool, exact_or_over: Option<f64>) -> Self {
        Self {
            mature,
            exact_or_over_permille: exact_or_over
                .map(|a| (a.clamp(0.0, 1.0) * 1000.0).round() as u16),
        }
    }
}

/// The highest Max Memory Used of a function's invocations in some time, and the highest
/// predicted limit one of them ran at, in MB; 0 for none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryPeak {
    pub used_mb: u64,
    pub limit_mb: u64,
}

impl MemoryPeak {
    pub fn add(&mut self, more: MemoryPeak) {
        self.used_mb = self.used_mb.max(more.used_mb);
        self.limit_mb = self.limit_mb.max(more.limit_mb);
    }
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
            durations: std::array::from_fn(|i| d(before.durations[i], self.durations[i])),
            memory: self.memory,
            model: self.model,
        }
    }
}

/// Percentiles of durations, in milliseconds; `None` without any.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Percentiles {
    #[serde(rename = "Count")]
    pub count: u64,
    #[serde(rename = "P50")]
    pub p50_ms: Option<f64>,
    #[serde(rename = "P99")]
    pub p99_ms: Option<f64>,
}

impl Percentiles {
    pub fn of(counts: &duration::Counts) -> Self {
        let ms = |q| duration::quantile(counts, q).map(|s| s * 1000.0);
        Self {
            count: counts.iter().sum(),
            p50_ms: ms(0.5),
            p99_ms: ms(0.99),
        }
    }
}

fn add_counts(total: &mut duration::Counts, more: &duration::Counts) {
    for (t, m) in total.iter_mut().zip(more) {
        *t += m;
    }
}

/// A minute's durations: its buckets from the first that counted one to the last, so that a
/// minute whose durations are alike keeps a few numbers, not every bucket.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Spread {
    first: usize,
    counts: Box<[u64]>,
}

impl Spread {
    fn add(&mut self, more: &duration::Counts) {
        let mut all = [0; BUCKETS];
        self.add_to(&mut all);
        add_counts(&mut all, more);
        let Some(first) = all.iter().position(|n| *n > 0) else {
            return;
        };
        let last = all.iter().rposition(|n| *n > 0).unwrap_or(first);
        self.first = first;
        self.counts = all[first..=last].into();
    }

    fn add_to(&self, total: &mut duration::Counts) {
        for (i, n) in self.counts.iter().enumerate() {
            total[self.first + i] += n;
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
    /// The second's durations, in milliseconds.
    #[serde(rename = "P50")]
    pub p50_ms: Option<f64>,
    #[serde(rename = "P99")]
    pub p99_ms: Option<f64>,
    /// The object store's requests in the second, those answered with an error, and the
    /// bytes it read and sent.
    pub object_requests: u64,
    pub object_errors: u64,
    pub object_bytes_in: u64,
    pub object_bytes_out: u64,
    #[serde(skip)]
    durations: duration::Counts,
}

/// The object store's counters at one reading ([`crate::objects::Traffic`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TrafficReading {
    pub requests: u64,
    pub errors: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
}

impl TrafficReading {
    pub fn of(traffic: &crate::objects::Traffic) -> Self {
        Self {
            requests: traffic.requests.get(),
            errors: traffic.errors.get(),
            bytes_in: traffic.bytes_in.get(),
            bytes_out: traffic.bytes_out.get(),
        }
    }
}

impl Sample {
    fn add(&mut self, d: &Counts) {
        self.invocations += d.invocations;
        self.errors += d.errors;
        self.throttles += d.throttles;
        self.coldest += d.starts[0];
        self.warm += d.starts[1];
        self.hot += d.starts[2];
        add_counts(&mut self.durations, &d.durations);
    }
}

/// One function's invocations, errors, durations, cold starts and memory in one minute.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Minute {
    /// Unix seconds at its start (a multiple of 60).
    start: i64,
    invocations: u64,
    errors: u64,
    durations: Spread,
    /// Cold starts by path: coldest, warm, hot.
    starts: [u64; 3],
    memory: MemoryPeak,
    /// The memory model at the minute's last reading with invocations.
    model: Option<ModelReading>,
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
                durations: Spread::default(),
                starts: [0; 3],
                memory: MemoryPeak::default(),
                model: None,
            });
        }
        let minute = self.minutes.back_mut().expect("pushed");
        minute.invocations += d.invocations;
        minute.errors += d.errors;
        minute.durations.add(&d.durations);
        for (total, more) in minute.starts.iter_mut().zip(d.starts) {
            *total += more;
        }
        minute.memory.add(d.memory);
        if d.model.is_some() {
            minute.model = d.model;
        }
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
    /// The last hour's durations.
    pub durations: Percentiles,
}

impl Activity {
    /// Function errors per invocation in the last hour; `None` without invocations.
    pub fn error_rate(&self) -> Option<f64> {
        (self.invocations > 0).then(|| self.errors as f64 / self.invocations as f64)
    }
}

/// The object cache in one second: what it did in it and what it held at its end.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct CacheSample {
    /// Unix seconds at the end of the second.
    pub time: i64,
    pub hits: u64,
    pub misses: u64,
    /// Objects taken in: reads' objects kept and writes acknowledged.
    pub admitted: u64,
    pub evictions: u64,
    pub written_back: u64,
    pub capacity_bytes: u64,
    pub used_bytes: u64,
    /// What instances could lend the cache, and the slack kept from it (when it is sized by
    /// lending: `Lent`).
    pub lendable_bytes: u64,
    pub slack_bytes: u64,
    pub lent: bool,
    pub dirty_bytes: u64,
    /// How long the oldest acknowledged write not yet written back had waited, in ms.
    pub lag_ms: u64,
    pub journal_bytes: u64,
}

#[derive(Default)]
struct State {
    readings: u64,
    samples: VecDeque<Sample>,
    cache_last: Option<CacheReading>,
    traffic_last: TrafficReading,
    cache: VecDeque<CacheSample>,
    functions: HashMap<String, Tracked>,
    /// The last counts of functions no reading names any more: the metrics keep a deleted
    /// function's counters, so one made again under its name counts on from them.
    gone: HashMap<String, Counts>,
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

    /// Records a reading of every function's counters taken at `time`. A function seen for
    /// the first time counts from zero (kiln's counters start at zero with kiln, and a new
    /// function's with it), or from where it was when it went.
    pub fn record(&self, time: i64, reading: Vec<(String, Counts)>) {
        let mut state = self.state.locked();
        let State {
            readings,
            samples,
            functions,
            gone,
            ..
        } = &mut *state;
        *readings += 1;
        let generation = *readings;
        let mut sample = Sample {
            time,
            ..Sample::default()
        };
        for (name, counts) in reading {
            let tracked = match functions.get_mut(&name) {
                Some(tracked) => tracked,
                None => {
                    let last = gone.remove(&name).unwrap_or_default();
                    functions.entry(name).or_insert(Tracked {
                        last,
                        ..Tracked::default()
                    })
                }
            };
            let d = counts.since(&tracked.last);
            tracked.last = counts;
            tracked.seen = generation;
            tracked.add(time, &d);
            sample.add(&d);
        }
        functions.retain(|name, t| {
            let kept = t.seen == generation;
            if !kept {
                gone.insert(name.clone(), t.last);
            }
            kept
        });
        let second = Percentiles::of(&sample.durations);
        (sample.p50_ms, sample.p99_ms) = (second.p50_ms, second.p99_ms);
        if samples.len() == self.capacity {
            samples.pop_front();
        }
        samples.push_back(sample);
    }

    /// Adds the object store's traffic since the last reading (from zero at the first: its
    /// counters start with kiln) to the newest sample.
    pub fn record_traffic(&self, reading: TrafficReading) {
        let mut state = self.state.locked();
        let before = std::mem::replace(&mut state.traffic_last, reading);
        let Some(sample) = state.samples.back_mut() else {
            return;
        };
        let d = |b: u64, a: u64| a.saturating_sub(b);
        sample.object_requests = d(before.requests, reading.requests);
        sample.object_errors = d(before.errors, reading.errors);
        sample.object_bytes_in = d(before.bytes_in, reading.bytes_in);
        sample.object_bytes_out = d(before.bytes_out, reading.bytes_out);
    }

    /// Records a reading of the object cache taken at `time`: its counters' differences from
    /// the last reading (from zero at the first: they start with kiln) and its gauges.
    pub fn record_cache(&self, time: i64, reading: CacheReading) {
        let mut state = self.state.locked();
        let before = state.cache_last.replace(reading).unwrap_or_default();
        let d = |b: u64, a: u64| a.saturating_sub(b);
        let memory = reading.memory;
        let sample = CacheSample {
            time,
            hits: d(before.hits, reading.hits),
            misses: d(before.misses, reading.misses),
            admitted: d(before.admitted, reading.admitted),
            evictions: d(before.evictions, reading.evictions),
            written_back: d(before.written_back, reading.written_back),
            capacity_bytes: memory.capacity_bytes,
            used_bytes: memory.used_bytes,
            lendable_bytes: memory.lendable_bytes,
            slack_bytes: memory.slack_bytes,
            lent: memory.lent,
            dirty_bytes: reading.dirty_bytes,
            lag_ms: reading.lag_ms,
            journal_bytes: reading.journal_bytes,
        };
        if state.cache.len() == self.capacity {
            state.cache.pop_front();
        }
        state.cache.push_back(sample);
    }

    /// The object cache's samples of the last `seconds`, oldest first (none without a cache).
    pub fn cache(&self, seconds: usize) -> Vec<CacheSample> {
        newest(&self.state.locked().cache, seconds)
    }

    /// The samples of the last `seconds`, oldest first.
    pub fn last(&self, seconds: usize) -> Vec<Sample> {
        newest(&self.state.locked().samples, seconds)
    }

    /// The durations of the last `seconds` on the node, together.
    pub fn durations(&self, seconds: usize) -> Percentiles {
        let state = self.state.locked();
        let samples = &state.samples;
        let mut total = [0; BUCKETS];
        for sample in samples.iter().skip(samples.len().saturating_sub(seconds)) {
            add_counts(&mut total, &sample.durations);
        }
        Percentiles::of(&total)
    }

    /// Each function's activity in the hour before `now` (Unix seconds).
    pub fn activity(&self, now: i64) -> HashMap<String, Activity> {
        let state = self.state.locked();
        state
            .functions
            .iter()
            .map(|(name, tracked)| (name.clone(), tracked.activity(now).0))
            .collect()
    }

    /// One function's hour before `now`, a minute at a time (oldest first, every minute
    /// there, those it did not run in empty), and its durations by bucket; an empty hour for
    /// a function the history has not seen run.
    pub fn function(&self, name: &str, now: i64) -> FunctionHistory {
        let state = self.state.locked();
        let unseen = Tracked::default();
        let tracked = state.functions.get(name).unwrap_or(&unseen);
        let (activity, buckets) = tracked.activity(now);
        let current = now - now.rem_euclid(60);
        let minutes = (0..FUNCTION_WINDOW_S / 60)
            .rev()
            .map(|ago| {
                let start = current - 60 * ago;
                let minute = tracked.minutes.iter().find(|m| m.start == start);
                let mut durations = [0; BUCKETS];
                if let Some(m) = minute {
                    m.durations.add_to(&mut durations);
                }
                let p = Percentiles::of(&durations);
                let starts = minute.map_or([0; 3], |m| m.starts);
                let memory = minute.map_or(MemoryPeak::default(), |m| m.memory);
                let model = minute.and_then(|m| m.model);
                let mb = |v: u64| (v > 0).then_some(v);
                MinuteSample {
                    time: start,
                    invocations: minute.map_or(0, |m| m.invocations),
                    errors: minute.map_or(0, |m| m.errors),
                    p50_ms: p.p50_ms,
                    p99_ms: p.p99_ms,
                    coldest: starts[0],
                    warm: starts[1],
                    hot: starts[2],
                    max_memory_used_mb: mb(memory.used_mb),
                    predicted_limit_mb: mb(memory.limit_mb),
                    model_accuracy: model
                        .and_then(|m| m.exact_or_over_permille)
                        .map(|p| f64::from(p) / 1000.0),
                    model_sizing: model.map(|m| m.mature),
                }
            })
            .collect();
        FunctionHistory {
            activity,
            minutes,
            buckets,
        }
    }
}

/// The newest `n` of a ring, oldest first.
fn newest<T: Copy>(ring: &VecDeque<T>, n: usize) -> Vec<T> {
    ring.iter()
        .skip(ring.len().saturating_sub(n))
        .copied()
        .collect()
}

impl Tracked {
    /// Its activity in the hour before `now`, and the hour's durations by bucket.
    fn activity(&self, now: i64) -> (Activity, duration::Counts) {
        let mut activity = Activity {
            last_invocation: self.last_invocation,
            ..Activity::default()
        };
        let mut buckets = [0; BUCKETS];
        for minute in self
            .minutes
            .iter()
            .filter(|m| m.start > now - FUNCTION_WINDOW_S)
        {
            activity.invocations += minute.invocations;
            activity.errors += minute.errors;
            minute.durations.add_to(&mut buckets);
        }
        activity.durations = Percentiles::of(&buckets);
        (activity, buckets)
    }
}

/// One minute of a function.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct MinuteSample {
    /// Unix seconds at its start.
    pub time: i64,
    pub invocations: u64,
    pub errors: u64,
    #[serde(rename = "P50")]
    pub p50_ms: Option<f64>,
    #[serde(rename = "P99")]
    pub p99_ms: Option<f64>,
    /// Cold starts by path.
    pub coldest: u64,
    pub warm: u64,
    pub hot: u64,
    /// The highest Max Memory Used of the minute's invocations, in MB.
    #[serde(rename = "MaxMemoryUsed")]
    pub max_memory_used_mb: Option<u64>,
    /// The highest predicted memory limit one of them ran at, in MB (none: they ran at the
    /// function's MemorySize).
    #[serde(rename = "PredictedLimit")]
    pub predicted_limit_mb: Option<u64>,
    /// The share of the memory model's recent predictions that were exact or over (0 to 1),
    /// at the minute's last reading; none without a model or invocations.
    pub model_accuracy: Option<f64>,
    /// Whether the model sized the function's instances then (mature) or was learning.
    pub model_sizing: Option<bool>,
}

/// A function's last hour.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionHistory {
    pub activity: Activity,
    pub minutes: Vec<MinuteSample>,
    /// The hour's durations by bucket ([`duration::BOUNDS`]).
    pub buckets: duration::Counts,
}

/// Reads every function's counters (`read`), and the object cache's (`cache`) when there is
/// one, every [`INTERVAL`] into `history` for as long as `history` is held elsewhere.
pub fn sample(
    history: &Arc<History>,
    read: impl Fn() -> Vec<(String, Counts)> + Send + 'static,
    cache: Option<Arc<crate::objects::cache::ObjectCache>>,
) {
    let weak = Arc::downgrade(history);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(history) = weak.upgrade() else {
                return;
            };
            let now = chrono::Utc::now().timestamp();
            history.record(now, read());
            history.record_traffic(TrafficReading::of(crate::objects::traffic()));
            if let Some(cache) = &cache {
                history.record_cache(now, cache.reading());
            }
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
        assert_eq!(
            history.last(10)[0].invocations,
            10,
            "counters start at zero with kiln"
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
        // `b`'s counter went down (its series was dropped and made again).
        history.record(2, reading(13, 1));
        let samples = history.last(10);
        assert_eq!(
            samples.iter().map(|s| s.invocations).collect::<Vec<_>>(),
            vec![15, 5, 1]
        );
    }

    #[test]
    fn a_function_made_later_counts_what_ran_before_its_first_reading() {
        let history = History::new(10);
        history.record(0, vec![]);
        // Made and invoked within the second before the reading.
        history.record(1, one("new", counts(3, 1, 1)));
        assert_eq!(history.last(10).last().unwrap().invocations, 3);
        let activity = history.activity(1)["new"];
        assert_eq!(
            (
                activity.invocations,
                activity.errors,
                activity.last_invocation
            ),
            (3, 1, Some(1))
        );
        assert_eq!(activity.error_rate(), Some(1.0 / 3.0));
        // Deleted, then made again: kiln's counters for its name went on from where they were.
        history.record(2, vec![]);
        assert!(history.activity(2).is_empty());
        history.record(3, one("new", counts(5, 1, 1)));
        assert_eq!(history.last(1)[0].invocations, 2);
        assert_eq!(history.activity(3)["new"].last_invocation, Some(3));
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

    fn timed(invocations: u64, seconds: &[f64]) -> Counts {
        let mut durations = [0; BUCKETS];
        for s in seconds {
            durations[duration::bucket_of(*s)] += 1;
        }
        Counts {
            invocations,
            durations,
            ..Default::default()
        }
    }

    #[test]
    fn each_second_and_any_window_has_its_percentiles() {
        let history = History::new(10);
        history.record(0, one("f", timed(0, &[])));
        history.record(1, one("f", timed(10, &[0.02; 10])));
        let mut later = vec![0.02; 10];
        later.extend([0.02; 89]);
        later.push(2.0);
        history.record(2, one("f", timed(110, &later)));
        history.record(3, one("f", timed(110, &later)));
        let samples = &history.last(10)[1..];
        let first = samples[0];
        let (lower, upper) = (duration::BOUNDS[6], duration::BOUNDS[7]);
        let median_ms = (lower + upper) / 2.0 * 1000.0;
        assert!((first.p50_ms.unwrap() - median_ms).abs() < 1e-9);
        // The second second: 90 fast ones and one slow one.
        assert!(samples[1].p99_ms.unwrap() > samples[1].p50_ms.unwrap());
        assert_eq!((samples[2].p50_ms, samples[2].p99_ms), (None, None));
        let all = history.durations(10);
        assert_eq!(all.count, 100);
        assert!(all.p50_ms.unwrap() <= upper * 1000.0);
        // The slow one is the 100th of 100: above the p99's rank, not below it.
        assert!(all.p99_ms.unwrap() <= upper * 1000.0);
        assert_eq!(history.durations(1).count, 0);
    }

    #[test]
    fn a_function_has_its_hour_by_the_minute() {
        let history = History::new(10);
        history.record(0, one("f", timed(0, &[])));
        history.record(61, one("f", timed(2, &[0.001, 0.001])));
        history.record(62, one("f", timed(3, &[0.001, 0.001, 1.0])));
        history.record(185, one("f", timed(4, &[0.001, 0.001, 1.0, 0.01])));
        let now = 190;
        let f = history.function("f", now);
        assert_eq!(f.minutes.len(), 60);
        assert_eq!(f.minutes.last().unwrap().time, 180);
        let ran: Vec<_> = f.minutes.iter().filter(|m| m.invocations > 0).collect();
        assert_eq!(
            ran.iter()
                .map(|m| (m.time, m.invocations))
                .collect::<Vec<_>>(),
            vec![(60, 3), (180, 1)]
        );
        assert!(ran[0].p99_ms.unwrap() > 100.0 && ran[0].p50_ms.unwrap() < 2.0);
        assert!(f
            .minutes
            .iter()
            .filter(|m| m.invocations == 0)
            .all(|m| m.p50_ms.is_none()));
        assert_eq!(f.buckets.iter().sum::<u64>(), 4);
        assert_eq!(f.activity.durations.count, 4);
        assert_eq!(f.activity.last_invocation, Some(185));
        let unseen = history.function("g", now);
        assert_eq!(unseen.minutes.len(), 60);
        assert!(unseen.minutes.iter().all(|m| m.invocations == 0));
        assert_eq!(unseen.activity, Activity::default());
    }

    #[test]
    fn a_spread_keeps_the_buckets_between_its_first_and_last() {
        let mut spread = Spread::default();
        let mut counts = [0; BUCKETS];
        counts[5] = 2;
        spread.add(&counts);
        assert_eq!((spread.first, spread.counts.len()), (5, 1));
        counts[5] = 0;
        counts[2] = 1;
        counts[9] = 3;
        spread.add(&counts);
        assert_eq!((spread.first, spread.counts.len()), (2, 8));
        let mut total = [0; BUCKETS];
        spread.add_to(&mut total);
        assert_eq!((total[2], total[5], total[9]), (1, 2, 3));
        assert_eq!(total.iter().sum::<u64>(), 6);
    }

    #[test]
    fn a_minute_keeps_its_cold_starts_by_path_and_the_highest_memory_of_its_seconds() {
        let history = History::new(10);
        let reading = |invocations: u64, starts: [u64; 3], used_mb: u64, limit_mb: u64| {
            one(
                "f",
                Counts {
                    invocations,
                    starts,
                    memory: MemoryPeak { used_mb, limit_mb },
                    ..Default::default()
                },
            )
        };
        // Minute 120: a coldest and a hot start, then a warm one; memory peaks at 70 MB and
        // the predicted limit at 96 MB, in different seconds.
        history.record(121, reading(2, [1, 0, 1], 40, 96));
        history.record(122, reading(5, [1, 1, 1], 70, 64));
        history.record(123, reading(5, [1, 1, 1], 0, 0));
        // Minute 180: one invocation at MemorySize (no predicted limit).
        history.record(181, reading(6, [1, 1, 1], 30, 0));
        let f = history.function("f", 185);
        let minute = |start: i64| *f.minutes.iter().find(|m| m.time == start).expect("kept");
        let first = minute(120);
        assert_eq!((first.coldest, first.warm, first.hot), (1, 1, 1));
        assert_eq!(first.max_memory_used_mb, Some(70));
        assert_eq!(first.predicted_limit_mb, Some(96));
        let second = minute(180);
        assert_eq!((second.coldest, second.warm, second.hot), (0, 0, 0));
        assert_eq!(second.max_memory_used_mb, Some(30));
        assert_eq!(second.predicted_limit_mb, None);
        assert_eq!(
            minute(60).max_memory_used_mb,
            None,
            "a minute without invocations"
        );
    }

    /// A model's accuracy is kept per minute as its last reading with invocations had it; a
    /// minute without invocations, or a function without a model, has none.
    #[test]
    fn each_minute_keeps_the_model_as_its_last_invocations_saw_it() {
        let history = History::new(10);
        let reading = |invocations: u64, model: Option<ModelReading>| {
            one(
                "f",
                Counts {
                    model,
                    ..counts(invocations, 0, 0)
                },
            )
        };
        history.record(60, reading(0, None));
        history.record(61, reading(1, None));
        history.record(121, reading(2, Some(ModelReading::new(false, Some(0.5)))));
        history.record(122, reading(3, Some(ModelReading::new(true, Some(0.9349)))));
        // A reading with no invocations does not change the minute's model.
        history.record(123, reading(3, Some(ModelReading::new(true, Some(0.1)))));
        let f = history.function("f", 125);
        let minute = |start: i64| *f.minutes.iter().find(|m| m.time == start).expect("kept");
        assert_eq!(
            (minute(60).model_accuracy, minute(60).model_sizing),
            (None, None)
        );
        assert_eq!(minute(120).model_accuracy, Some(0.935));
        assert_eq!(minute(120).model_sizing, Some(true));
        assert_eq!(minute(0).model_accuracy, None, "no invocations");
    }

    #[test]
    fn the_cache_samples_are_differences_of_its_counters_beside_its_gauges() {
        let history = History::new(2);
        assert!(history.cache(10).is_empty());
        let reading = |hits: u64, evictions: u64, dirty_bytes: u64, lag_ms: u64| CacheReading {
            hits,
            misses: 1,
            admitted: 1,
            evictions,
            dirty_bytes,
            lag_ms,
            journal_bytes: 4096,
            memory: crate::objects::cache::CacheMemory {
                lent: true,
                capacity_bytes: 100,
                used_bytes: 60,
                lendable_bytes: 120,
                slack_bytes: 20,
            },
            ..CacheReading::default()
        };
        history.record_cache(1, reading(5, 0, 10, 3));
        history.record_cache(2, reading(9, 2, 0, 0));
        // The counters went down: the cache was made again; nothing is counted.
        history.record_cache(3, reading(1, 0, 0, 0));
        let kept = history.cache(10);
        assert_eq!(kept.iter().map(|s| s.time).collect::<Vec<_>>(), vec![2, 3]);
        let (second, third) = (kept[0], kept[1]);
        assert_eq!((second.hits, second.misses, second.evictions), (4, 0, 2));
        assert_eq!((second.dirty_bytes, second.lag_ms), (0, 0));
        assert_eq!(
            (
                second.capacity_bytes,
                second.used_bytes,
                second.lendable_bytes,
                second.slack_bytes
            ),
            (100, 60, 120, 20)
        );
        assert!(second.lent);
        assert_eq!(second.journal_bytes, 4096);
        assert_eq!((third.hits, third.evictions), (0, 0));
        assert_eq!(history.cache(1), vec![third]);
    }

    #[test]
    fn the_object_stores_traffic_goes_into_the_newest_second() {
        let history = History::new(10);
        history.record_traffic(TrafficReading {
            requests: 3,
            ..Default::default()
        });
        assert!(history.last(10).is_empty(), "no second to add it to");
        history.record(1, vec![]);
        history.record_traffic(TrafficReading {
            requests: 5,
            errors: 1,
            bytes_in: 10,
            bytes_out: 20,
        });
        history.record(2, vec![]);
        history.record_traffic(TrafficReading {
            requests: 9,
            errors: 1,
            bytes_in: 10,
            bytes_out: 70,
        });
        let kept = history.last(10);
        let traffic = |s: &Sample| {
            (
                s.object_requests,
                s.object_errors,
                s.object_bytes_in,
                s.object_bytes_out,
            )
        };
        assert_eq!(traffic(&kept[0]), (2, 1, 10, 20));
        assert_eq!(traffic(&kept[1]), (4, 0, 0, 50));
    }
}
