//! The offload controller: for each offloadable request, the monolith or a function.
//!
//! Pure over its inputs (the clock is passed in), so its rules are unit- and property-tested.
//! The gateway calls [`Control::decide`] per request, [`Control::observe`] per answer from the
//! monolith, and [`Control::tick`] every [`TICK`].
//!
//! - `spill` (default): a limit L of requests in flight per upstream. A request that would pass
//!   it goes to a function, decided per request. L is set (`--max-inflight`) or learned: the
//!   monolith's knee. Each answer's slowdown (server time over its route's low-load baseline)
//!   is kept by the number of requests that were in flight with it; L is the highest level whose
//!   median slowdown is within [`TARGET_SLOWDOWN`] of one request alone's. It starts at one; a
//!   limit that requests pass is probed one level up (an eighth past 16), from
//!   [`PROBE_BACKOFF`] after it was first passed; a probe that fails is not tried again for
//!   [`PROBE_BACKOFF`], doubling.
//! - `ratio`: during a burst, exactly that share of offloadable requests goes to functions.
//! - `slo`: the share follows a PI controller on the monolith's p99 against a target.
//!
//! A burst begins when L is reached, or the slowdown (or, for `slo`, the p99) trips for one
//! tick; it ends `cooldown` after the last of these. A failing upstream spills everything
//! offloadable in every mode.

use std::time::{Duration, Instant};

use super::profile::Histogram;

/// How often the controller learns.
pub const TICK: Duration = Duration::from_millis(100);
/// The slowdown the learned limit aims at.
pub const TARGET_SLOWDOWN: f64 = 1.25;
/// A window whose median slowdown is over this starts a burst: the monolith at half its speed
/// (a p90 trips on a host with a CPU quota, where one request in ten at twice the quietest
/// second's median is ordinary).
pub const TRIP_SLOWDOWN: f64 = 2.0;
/// The learned limit before anything is learned: one request, until levels above it are
/// measured within target (the profiling before a route is eligible measures the monolith's
/// usual load) or probed.
pub const INITIAL_LIMIT: f64 = 1.0;
/// Levels of requests in flight learned one by one; a learned limit stays at or under this
/// (a higher one is set with `--max-inflight`).
const LEVELS: usize = 128;
/// The slowdowns kept per level: a level is judged on its latest ones.
const RING: usize = 32;
/// How long a level found over target is not probed again; doubles on each failure there.
pub const PROBE_BACKOFF: Duration = Duration::from_secs(5);
const MAX_PROBE_BACKOFF: Duration = Duration::from_secs(60);
/// Slowdowns are judged over at least this many requests (a level's, or a window's unless it
/// has lasted a second): one slow request is not a trend.
const MIN_SAMPLES: usize = 8;
const MAX_WINDOW_TICKS: u32 = 10;
/// The share of the limit in flight at which instances are made ready ahead of the burst.
pub const PREWARM_AT: f64 = 0.7;
/// The most instances a pre-warm asks for (the node's cap on instances made ahead).
const MAX_PREWARM: u32 = 64;

/// How an app chooses between the monolith and its function.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Policy {
    Spill { max_inflight: Option<u32> },
    Ratio { ratio: f64 },
    Slo { p99_ms: f64 },
}

/// Where one request goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Monolith,
    Function,
}

/// What the controller shows in `kiln app status`.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct ControlStatus {
    pub in_burst: bool,
    pub limit: f64,
    pub share: f64,
    pub offloadable_in_burst: u64,
    pub offloaded: u64,
    /// The share of offloadable requests actually served by functions during bursts.
    pub offload_ratio: f64,
    pub bursts: u64,
    /// The instances last asked for ahead of a burst (pre-warm).
    pub prewarmed: u32,
}

/// The latest slowdowns of requests answered at one level of requests in flight.
#[derive(Clone, Default)]
struct Level {
    ring: Vec<f32>,
    next: usize,
}

impl Level {
    fn push(&mut self, slowdown: f64) {
        if self.ring.len() < RING {
            self.ring.push(slowdown as f32);
        } else {
            self.ring[self.next] = slowdown as f32;
        }
        self.next = (self.next + 1) % RING;
    }

    /// The median once the level holds enough samples to judge.
    fn median(&self) -> Option<f64> {
        if self.ring.len() < MIN_SAMPLES {
            return None;
        }
        let mut sorted = self.ring.clone();
        sorted.sort_unstable_by(f32::total_cmp);
        Some(f64::from(sorted[sorted.len() / 2]))
    }

    fn clear(&mut self) {
        self.ring.clear();
        self.next = 0;
    }
}

/// A level found over target, and until when it is not probed again.
#[derive(Clone, Copy)]
struct Ceiling {
    level: usize,
    until: Instant,
    backoff: Duration,
}

pub struct Control {
    policy: Policy,
    cooldown: Duration,
    limit: f64,
    /// The `slo` policy's share, and its integral term.
    share: f64,
    integral: f64,
    /// Deficit-based rounding of the share: exactly `share` of the requests over time.
    credit: f64,
    burst: bool,
    last_trigger: Option<Instant>,
    bursts: u64,
    /// Slowdowns by requests in flight (index 0: one request alone).
    levels: Vec<Level>,
    ceiling: Option<Ceiling>,
    /// When a learned limit was first passed: probes start [`PROBE_BACKOFF`] after it.
    first_passed: Option<Instant>,
    // This tick's observations.
    slowdowns: Vec<f64>,
    /// Ticks the slowdowns were gathered over, and the peak in flight meanwhile.
    window_ticks: u32,
    window_peak: u32,
    latencies: Histogram,
    peak_inflight: u32,
    arrivals: u32,
    baseline_sum: Duration,
    baselines: u32,
    prewarmed: u32,
    // Totals.
    offloadable_in_burst: u64,
    offloaded: u64,
}

impl Control {
    pub fn new(policy: Policy, cooldown: Duration) -> Self {
        let limit = match policy {
            Policy::Spill {
                max_inflight: Some(l),
            } => l as f64,
            _ => INITIAL_LIMIT,
        };
        Self {
            policy,
            cooldown,
            limit,
            share: 0.0,
            integral: 0.0,
            credit: 0.0,
            burst: false,
            last_trigger: None,
            bursts: 0,
            levels: vec![Level::default(); LEVELS],
            ceiling: None,
            first_passed: None,
            slowdowns: Vec::new(),
            window_ticks: 0,
            window_peak: 0,
            latencies: Histogram::default(),
            peak_inflight: 0,
            arrivals: 0,
            baseline_sum: Duration::ZERO,
            baselines: 0,
            prewarmed: 0,
            offloadable_in_burst: 0,
            offloaded: 0,
        }
    }

    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// Changes the policy; what was learned of the limit is kept unless it is now set.
    pub fn set_policy(&mut self, policy: Policy) {
        if let Policy::Spill {
            max_inflight: Some(l),
        } = policy
        {
            self.limit = l as f64;
        }
        self.policy = policy;
        self.credit = 0.0;
    }

    /// The limit of requests in flight per upstream.
    pub fn limit(&self) -> u32 {
        self.limit.round().max(1.0) as u32
    }

    fn trigger(&mut self, now: Instant) {
        if !self.burst {
            self.burst = true;
            self.bursts += 1;
            self.credit = 0.0;
        }
        self.last_trigger = Some(now);
    }

    /// Where an offloadable request goes. `inflight` is what its upstream (the least loaded)
    /// has in flight before it; `failing`, that every upstream is failing.
    pub fn decide(&mut self, now: Instant, inflight: u32, failing: bool) -> Target {
        self.peak_inflight = self.peak_inflight.max(inflight + 1);
        self.arrivals = self.arrivals.saturating_add(1);
        let at_limit = inflight >= self.limit();
        if at_limit || failing {
            self.trigger(now);
        }
        if self.burst {
            self.offloadable_in_burst += 1;
        }
        let target = if failing {
            Target::Function
        } else {
            match self.policy {
                Policy::Spill { .. } if at_limit => Target::Function,
                Policy::Spill { .. } => Target::Monolith,
                Policy::Ratio { ratio } if self.burst => self.share_out(ratio),
                Policy::Slo { .. } if self.burst => self.share_out(self.share),
                Policy::Ratio { .. } | Policy::Slo { .. } => Target::Monolith,
            }
        };
        if target == Target::Function {
            self.offloaded += 1;
        }
        target
    }

    fn share_out(&mut self, share: f64) -> Target {
        self.credit += share.clamp(0.0, 1.0);
        if self.credit >= 1.0 - 1e-9 {
            self.credit -= 1.0;
            Target::Function
        } else {
            Target::Monolith
        }
    }

    /// A request the monolith answered: its server time, its route's low-load baseline, and the
    /// most requests in flight at its upstream with it (itself counted).
    pub fn observe(&mut self, server_time: Duration, baseline: Option<Duration>, level: u32) {
        self.latencies.record(server_time);
        if let Some(b) = baseline.filter(|b| !b.is_zero()) {
            self.baseline_sum += b;
            self.baselines += 1;
            let slowdown = server_time.as_secs_f64() / b.as_secs_f64();
            if self.slowdowns.len() < 65_536 {
                self.slowdowns.push(slowdown);
            }
            let i = (level.max(1) as usize).min(LEVELS) - 1;
            self.levels[i].push(slowdown);
        }
    }

    /// Moves a learned limit to the monolith's knee: down to below the first level under it
    /// whose median slowdown is over target against one request alone's, or, when requests
    /// passed it and every level under it is within target, one probe up.
    fn learn(&mut self, now: Instant) {
        let limit = (self.limit.round() as usize).clamp(1, LEVELS);
        // One request alone is the reference; without it, the route's baseline.
        let alone = self.levels[0]
            .median()
            .unwrap_or(1.0)
            .max(f64::MIN_POSITIVE);
        let over = (2..=limit).find(|&k| {
            self.levels[k - 1]
                .median()
                .is_some_and(|m| m / alone > TARGET_SLOWDOWN)
        });
        if let Some(k) = over {
            self.limit = (k - 1) as f64;
            let backoff = match self.ceiling {
                Some(c) if c.level == k => (c.backoff * 2).min(MAX_PROBE_BACKOFF),
                _ => PROBE_BACKOFF,
            };
            self.ceiling = Some(Ceiling {
                level: k,
                until: now + backoff,
                backoff,
            });
            return;
        }
        // Levels measured within target from one request up (during profiling, say): no
        // probe needed to reach them.
        let measured = (1..=LEVELS)
            .take_while(|&k| {
                self.levels[k - 1]
                    .median()
                    .is_some_and(|m| m / alone <= TARGET_SLOWDOWN)
            })
            .last()
            .unwrap_or(1);
        let ceiling = self
            .ceiling
            .filter(|c| now < c.until)
            .map_or(LEVELS, |c| c.level - 1);
        if measured.min(ceiling) > limit {
            self.limit = measured.min(ceiling) as f64;
            return;
        }
        if self.window_peak as usize <= limit
            || limit >= LEVELS
            || self.levels[limit - 1].median().is_none()
        {
            return; // not passed, or not measured at the limit: nothing to learn from
        }
        // A first burst is offloaded past the levels known, not spent measuring new ones.
        let first = *self.first_passed.get_or_insert(now);
        if now.duration_since(first) < PROBE_BACKOFF {
            return;
        }
        let step = if limit < 16 { 1 } else { limit / 8 };
        let next = (limit + step).min(LEVELS).min(ceiling);
        if next > limit {
            // Judged on what the probe itself finds.
            for level in &mut self.levels[limit..next] {
                level.clear();
            }
            self.limit = next as f64;
        }
    }

    /// Learns from this tick's observations; ends a burst after its cooldown. When requests in
    /// flight reached [`PREWARM_AT`] of the limit, the instances to make ready: by Little's
    /// law, this tick's rate of offloadable requests times their server time at low load.
    pub fn tick(&mut self, now: Instant) -> Option<u32> {
        let prewarm = (self.peak_inflight as f64 >= PREWARM_AT * self.limit && self.baselines > 0)
            .then(|| {
                let rate = f64::from(self.arrivals) / TICK.as_secs_f64();
                let service = self.baseline_sum.as_secs_f64() / f64::from(self.baselines);
                ((rate * service).ceil() as u32).clamp(1, MAX_PREWARM)
            });
        if let Some(k) = prewarm {
            self.prewarmed = k;
        }
        self.window_ticks += 1;
        self.window_peak = self.window_peak.max(self.peak_inflight);
        let judged = self.slowdowns.len() >= MIN_SAMPLES
            || (self.window_ticks >= MAX_WINDOW_TICKS && !self.slowdowns.is_empty());
        let slowdown = if judged {
            median(&mut self.slowdowns)
        } else {
            None
        };
        if let Some(s) = slowdown {
            if s > TRIP_SLOWDOWN {
                self.trigger(now);
            }
        }
        // Each level has its own count of answers to be judged on.
        let learned = !matches!(
            self.policy,
            Policy::Spill {
                max_inflight: Some(_)
            }
        );
        if learned {
            self.learn(now);
        }
        if let Policy::Slo { p99_ms } = self.policy {
            let dt = TICK.as_secs_f64();
            if self.latencies.count() > 0 {
                let p99 = self.latencies.quantile(0.99).as_secs_f64() * 1e3;
                let error = p99 / p99_ms - 1.0;
                if error > 0.0 {
                    self.trigger(now);
                }
                self.integral = (self.integral + error * dt).clamp(0.0, 2.0);
                self.share = (0.5 * error + 2.0 * self.integral).clamp(0.0, 1.0);
            } else if !self.burst {
                self.integral = 0.0;
                self.share = 0.0;
            }
        }
        if self.burst
            && self
                .last_trigger
                .is_some_and(|t| now.duration_since(t) >= self.cooldown)
        {
            self.burst = false;
            self.share = 0.0;
            self.integral = 0.0;
        }
        if judged || self.window_ticks >= MAX_WINDOW_TICKS {
            self.slowdowns.clear();
            self.window_ticks = 0;
            self.window_peak = 0;
        }
        self.latencies = Histogram::default();
        self.peak_inflight = 0;
        self.arrivals = 0;
        self.baseline_sum = Duration::ZERO;
        self.baselines = 0;
        prewarm
    }

    pub fn status(&self) -> ControlStatus {
        ControlStatus {
            in_burst: self.burst,
            limit: (self.limit * 10.0).round() / 10.0,
            share: match self.policy {
                Policy::Ratio { ratio } => ratio,
                Policy::Slo { .. } => self.share,
                Policy::Spill { .. } => 0.0,
            },
            offloadable_in_burst: self.offloadable_in_burst,
            offloaded: self.offloaded,
            offload_ratio: if self.offloadable_in_burst == 0 {
                0.0
            } else {
                self.offloaded as f64 / self.offloadable_in_burst as f64
            },
            bursts: self.bursts,
            prewarmed: self.prewarmed,
        }
    }
}

fn median(samples: &mut [f64]) -> Option<f64> {
    if samples.is_empty() {
        return None;
    }
    let k = samples.len() / 2;
    let (_, v, _) = samples.select_nth_unstable_by(k, f64::total_cmp);
    Some(*v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn spill_sends_what_would_pass_the_limit_to_a_function() {
        let t0 = Instant::now();
        let mut c = Control::new(
            Policy::Spill {
                max_inflight: Some(4),
            },
            Duration::from_secs(30),
        );
        assert_eq!(c.decide(t0, 3, false), Target::Monolith);
        assert!(!c.status().in_burst);
        assert_eq!(c.decide(t0, 4, false), Target::Function);
        assert!(c.status().in_burst);
        // Decided per request: under the limit again, the monolith.
        assert_eq!(c.decide(t0, 2, false), Target::Monolith);
        // A failing upstream spills everything offloadable.
        assert_eq!(c.decide(t0, 0, true), Target::Function);
        // The burst ends a cooldown after its last trigger.
        c.tick(t0 + Duration::from_secs(29));
        assert!(c.status().in_burst);
        c.tick(t0 + Duration::from_secs(30));
        assert!(!c.status().in_burst);
        assert_eq!(c.status().bursts, 1);
    }

    #[test]
    fn ratio_offloads_an_exact_share_during_a_burst_only() {
        let t0 = Instant::now();
        let mut c = Control::new(Policy::Ratio { ratio: 0.5 }, Duration::from_secs(30));
        for _ in 0..10 {
            assert_eq!(c.decide(t0, 0, false), Target::Monolith);
        }
        // The limit (one request before anything is learned) starts the burst.
        c.decide(t0, 1, false);
        let offloaded = (0..100)
            .filter(|_| c.decide(t0, 0, false) == Target::Function)
            .count();
        assert_eq!(offloaded, 50);
    }

    /// A `spill` controller whose limit is learned.
    fn learned() -> Control {
        Control::new(
            Policy::Spill { max_inflight: None },
            Duration::from_secs(30),
        )
    }

    /// Judges `n` answers of `ms` each (baseline 10 ms) at `level` in flight.
    fn answers(c: &mut Control, level: u32, ms: u64, n: usize) {
        for _ in 0..n {
            c.observe(MS * ms as u32, Some(10 * MS), level);
        }
    }

    #[test]
    fn the_learned_limit_finds_the_level_where_the_monolith_slows() {
        let t0 = Instant::now();
        let mut c = learned();
        assert_eq!(c.limit(), INITIAL_LIMIT as u32);
        // Half a core: one request alone takes 12 ms (noisier than the baseline's quietest
        // second), two share it and take twice as long. The knee is one request.
        answers(&mut c, 1, 12, 10);
        answers(&mut c, 2, 24, 10);
        c.tick(t0);
        assert_eq!(c.limit(), 1);
        // Passed: a first burst is offloaded past it, not spent probing, for a while ...
        for i in 1..10 {
            c.decide(t0 + i * TICK, 1, false);
            answers(&mut c, 1, 12, MIN_SAMPLES);
            c.tick(t0 + i * TICK);
            assert_eq!(c.limit(), 1);
        }
        // ... then it is probed one level up, judged on fresh samples, and the probe fails.
        let t1 = t0 + TICK + PROBE_BACKOFF;
        c.decide(t1, 1, false);
        answers(&mut c, 1, 12, MIN_SAMPLES);
        c.tick(t1);
        assert_eq!(c.limit(), 2);
        answers(&mut c, 2, 25, MIN_SAMPLES);
        c.tick(t1 + TICK);
        assert_eq!(c.limit(), 1);
        // The next probe waits the back-off; after a second failure, twice as long.
        let t2 = t1 + TICK + PROBE_BACKOFF;
        c.decide(t2 - TICK, 1, false);
        c.tick(t2 - TICK);
        assert_eq!(c.limit(), 1);
        c.decide(t2, 1, false);
        c.tick(t2);
        assert_eq!(c.limit(), 2);
        answers(&mut c, 2, 25, MIN_SAMPLES);
        c.tick(t2 + TICK);
        assert_eq!(c.limit(), 1);
        for (after, limit) in [(PROBE_BACKOFF, 1), (2 * PROBE_BACKOFF, 2)] {
            let t = t2 + TICK + after;
            c.decide(t, 1, false);
            c.tick(t);
            assert_eq!(c.limit(), limit);
        }
    }

    #[test]
    fn levels_measured_within_target_raise_the_limit_without_a_probe() {
        let t0 = Instant::now();
        let mut c = Control::new(Policy::Ratio { ratio: 0.5 }, Duration::from_secs(30));
        // What profiling saw: up to three requests at once cost nothing, a fourth does.
        for level in 1..=3 {
            answers(&mut c, level, 10, MIN_SAMPLES);
        }
        answers(&mut c, 4, 20, MIN_SAMPLES);
        c.tick(t0);
        assert_eq!(c.limit(), 3);
        assert_eq!(c.decide(t0, 2, false), Target::Monolith);
        assert!(!c.status().in_burst);
        c.decide(t0, 3, false);
        assert!(c.status().in_burst);
    }

    #[test]
    fn the_learned_limit_grows_to_the_workers_that_serve_in_parallel_and_no_further() {
        let t0 = Instant::now();
        let mut c = learned();
        // Four workers on four cores: up to four in flight cost nothing, a fifth waits.
        let server_ms = |level: u32| 10 * u64::from(level.div_ceil(4));
        let mut t = t0;
        for _ in 0..200 {
            let limit = c.limit();
            c.decide(t, limit, false); // demand past the limit
            for level in 1..=limit {
                answers(&mut c, level, server_ms(level), 3);
            }
            c.tick(t);
            t += TICK;
        }
        assert_eq!(c.limit(), 4);
        // Unused, a fast monolith does not grow the limit.
        for _ in 0..50 {
            answers(&mut c, 1, 10, MIN_SAMPLES);
            c.tick(t);
            t += TICK;
        }
        assert_eq!(c.limit(), 4);
    }

    #[test]
    fn a_slowdown_over_the_trip_starts_a_burst_and_a_few_slow_answers_are_not_judged() {
        let t0 = Instant::now();
        let mut c = learned();
        answers(&mut c, 1, 100, MIN_SAMPLES - 1);
        c.tick(t0);
        assert!(!c.status().in_burst);
        answers(&mut c, 1, 100, 1);
        c.tick(t0 + TICK);
        assert!(
            c.status().in_burst,
            "a slowdown over {TRIP_SLOWDOWN} trips a burst"
        );
    }

    #[test]
    fn slo_offloads_more_while_the_p99_is_over_its_target() {
        let t0 = Instant::now();
        let mut c = Control::new(Policy::Slo { p99_ms: 10.0 }, Duration::from_secs(1));
        let mut shares = Vec::new();
        for i in 0..5 {
            c.observe(40 * MS, None, 1);
            c.tick(t0 + TICK * i);
            shares.push(c.status().share);
        }
        assert!(c.status().in_burst);
        assert!(shares.windows(2).all(|w| w[1] >= w[0]), "{shares:?}");
        assert!(shares[4] > 0.0);
        // Back under target and past the cooldown: the burst ends and nothing is offloaded.
        c.observe(MS, None, 1);
        c.tick(t0 + Duration::from_secs(10));
        assert!(!c.status().in_burst);
        assert_eq!(
            c.decide(t0 + Duration::from_secs(10), 0, false),
            Target::Monolith
        );
    }

    #[test]
    fn nearing_the_limit_asks_for_instances_by_littles_law() {
        let t0 = Instant::now();
        let mut c = Control::new(
            Policy::Spill {
                max_inflight: Some(10),
            },
            Duration::from_secs(30),
        );
        // 6 of 10 in flight: not yet.
        for _ in 0..20 {
            c.decide(t0, 5, false);
            c.observe(20 * MS, Some(20 * MS), 6);
        }
        assert_eq!(c.tick(t0), None);
        // 7 of 10: 40 requests in 100 ms (400/s) of 20 ms each need 8 instances.
        for _ in 0..40 {
            c.decide(t0, 6, false);
            c.observe(30 * MS, Some(20 * MS), 7);
        }
        assert_eq!(c.tick(t0 + TICK), Some(8));
        assert_eq!(c.status().prewarmed, 8);
    }

    proptest! {
        #[test]
        fn a_ratio_is_served_exactly(ratio in 0.0f64..=1.0, n in 1usize..2000) {
            let t0 = Instant::now();
            let mut c = Control::new(Policy::Ratio { ratio }, Duration::from_secs(30));
            c.decide(t0, 100, false);
            let before = c.status().offloaded;
            let got = (0..n).filter(|_| c.decide(t0, 0, false) == Target::Function).count() as f64;
            prop_assert!((got - ratio * n as f64).abs() <= 1.0 + 1e-6, "{} of {}", got, n);
            prop_assert!(c.status().offloaded >= before);
        }

        #[test]
        fn the_learned_limit_stays_in_bounds(obs in proptest::collection::vec((1u64..100_000, 1u64..100_000, 0u32..200), 1..200)) {
            let t0 = Instant::now();
            let mut c = Control::new(Policy::Spill { max_inflight: None }, Duration::from_secs(1));
            for (i, (t, b, inflight)) in obs.into_iter().enumerate() {
                c.decide(t0, inflight, false);
                c.observe(Duration::from_micros(t), Some(Duration::from_micros(b)), inflight + 1);
                c.tick(t0 + TICK * i as u32);
                prop_assert!(c.limit() >= 1 && c.limit() as usize <= LEVELS);
            }
        }
    }
}
