//! The route profiler (BeeHive §4.3): what each route costs at the monolith, and which routes
//! are worth offloading.
//!
//! Per route: requests, accumulated and mean server time, p99, and a low-load baseline (the
//! lowest per-second median of the last minute) that the controller divides by to get a
//! request's slowdown. [`eligibility`] applies the paper's two heuristics: a mean of at least
//! 1 ms, and being among the routes that make up `cover` of the accumulated time.

use std::time::Duration;

/// Latency buckets: 4 per doubling from 16 µs to ~70 s; p99 within ~19%.
const BUCKETS: usize = 4 * 22;
const FIRST_BUCKET_NS: f64 = 16_000.0;

fn bucket(ns: u64) -> usize {
    let ratio = (ns as f64 / FIRST_BUCKET_NS).max(1.0);
    ((ratio.log2() * 4.0) as usize).min(BUCKETS - 1)
}

fn bucket_upper_ns(i: usize) -> u64 {
    (FIRST_BUCKET_NS * 2f64.powf((i + 1) as f64 / 4.0)) as u64
}

/// A log-bucketed latency histogram.
#[derive(Debug, Clone)]
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self {
            counts: vec![0; BUCKETS],
            total: 0,
        }
    }
}

impl Histogram {
    pub fn record(&mut self, d: Duration) {
        self.counts[bucket(d.as_nanos() as u64)] += 1;
        self.total += 1;
    }

    pub fn count(&self) -> u64 {
        self.total
    }

    /// The upper bound of the bucket holding quantile `q` (0 when empty).
    pub fn quantile(&self, q: f64) -> Duration {
        if self.total == 0 {
            return Duration::ZERO;
        }
        let rank = ((self.total as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Duration::from_nanos(bucket_upper_ns(i));
            }
        }
        Duration::from_nanos(bucket_upper_ns(BUCKETS - 1))
    }
}

/// Seconds of history the baseline looks back over.
const BASELINE_SECONDS: usize = 60;

/// One route's profile at the monolith.
#[derive(Debug, Clone, Default)]
pub struct RouteStats {
    pub count: u64,
    pub total: Duration,
    pub histogram: Histogram,
    /// Answers that were event streams: such a route is never offloaded.
    pub streams: u64,
    /// This second's latencies, for the baseline.
    second: Vec<u64>,
    second_started: Option<u64>,
    /// Per-second medians of the last minute (oldest first).
    medians: std::collections::VecDeque<u64>,
}

impl RouteStats {
    /// A request served by the monolith in `d`; `now_s` is a monotonic second count.
    pub fn record(&mut self, d: Duration, now_s: u64) {
        self.count += 1;
        self.total += d;
        self.histogram.record(d);
        if self.second_started != Some(now_s) {
            self.close_second();
            self.second_started = Some(now_s);
        }
        if self.second.len() < 4096 {
            self.second.push(d.as_nanos() as u64);
        }
    }

    fn close_second(&mut self) {
        if self.second.is_empty() {
            return;
        }
        self.second.sort_unstable();
        let median = self.second[self.second.len() / 2];
        self.second.clear();
        self.medians.push_back(median);
        while self.medians.len() > BASELINE_SECONDS {
            self.medians.pop_front();
        }
    }

    pub fn mean(&self) -> Duration {
        if self.count == 0 {
            return Duration::ZERO;
        }
        self.total / self.count as u32
    }

    /// The server time of this route at low load: the lowest per-second median of the last
    /// minute (this second's median until a second has closed).
    pub fn baseline(&self) -> Option<Duration> {
        let closed = self.medians.iter().copied().min();
        let open = (!self.second.is_empty()).then(|| {
            let mut s = self.second.clone();
            s.sort_unstable();
            s[s.len() / 2]
        });
        match (closed, open) {
            (Some(c), Some(o)) => Some(c.min(o)),
            (c, o) => c.or(o),
        }
        .map(Duration::from_nanos)
    }
}

/// What the profile says of one route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Eligibility {
    Eligible,
    /// Kept on the monolith, with the reason shown by `kiln app routes`.
    No(String),
}

/// The profiler's inputs for one route.
#[derive(Debug, Clone)]
pub struct RouteFacts {
    pub pinned: bool,
    /// Declared by the framework or named by `--offload`.
    pub candidate: bool,
    pub count: u64,
    pub total: Duration,
    pub streams: u64,
}

/// The minimum mean server time of an offloaded route (BeeHive §4.3: "not under ~1 ms").
pub const MIN_MEAN: Duration = Duration::from_millis(1);

/// Which routes may be offloaded: candidates, not pinned, never answered with an event
/// stream, with a mean of at least [`MIN_MEAN`], and among the routes that, taken by
/// accumulated time from the largest, make up `cover` of all routes' accumulated time.
pub fn eligibility(routes: &[RouteFacts], cover: f64) -> Vec<Eligibility> {
    let grand: f64 = routes.iter().map(|r| r.total.as_secs_f64()).sum();
    let mut order: Vec<usize> = (0..routes.len()).collect();
    order.sort_by(|&a, &b| routes[b].total.cmp(&routes[a].total).then(a.cmp(&b)));
    // A route is in the cover if the routes before it in this order have not reached it yet.
    let mut in_cover = vec![false; routes.len()];
    let mut before = 0.0;
    for &i in &order {
        in_cover[i] = grand > 0.0 && before < cover * grand;
        before += routes[i].total.as_secs_f64();
    }
    routes
        .iter()
        .zip(in_cover)
        .map(|(r, covered)| {
            let mean = if r.count == 0 {
                Duration::ZERO
            } else {
                r.total / r.count as u32
            };
            if r.pinned {
                Eligibility::No("pinned to the monolith".into())
            } else if !r.candidate {
                Eligibility::No("not a declared route (name it with --offload)".into())
            } else if r.streams > 0 {
                Eligibility::No("answers with an event stream".into())
            } else if r.count == 0 {
                Eligibility::No("no requests profiled yet".into())
            } else if mean < MIN_MEAN {
                Eligibility::No(format!(
                    "mean server time {:.2} ms is under 1 ms",
                    mean.as_secs_f64() * 1e3
                ))
            } else if !covered {
                Eligibility::No(format!(
                    "outside the routes making up {:.0}% of server time",
                    cover * 100.0
                ))
            } else {
                Eligibility::Eligible
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn facts(ms: u64, count: u64) -> RouteFacts {
        RouteFacts {
            pinned: false,
            candidate: true,
            count,
            total: Duration::from_millis(ms * count),
            streams: 0,
        }
    }

    #[test]
    fn the_heavy_routes_that_make_up_the_cover_are_eligible() {
        // 1000 ms, 600 ms, 300 ms, 100 ms of 2000: the first two make 80%.
        let routes = [facts(10, 100), facts(6, 100), facts(3, 100), facts(1, 100)];
        let e = eligibility(&routes, 0.8);
        assert_eq!(e[0], Eligibility::Eligible);
        assert_eq!(e[1], Eligibility::Eligible);
        assert!(matches!(&e[2], Eligibility::No(r) if r.contains("80%")));
        assert!(matches!(&e[3], Eligibility::No(_)));
    }

    #[test]
    fn short_pinned_streaming_and_undeclared_routes_stay() {
        let mut pinned = facts(10, 10);
        pinned.pinned = true;
        let mut undeclared = facts(10, 10);
        undeclared.candidate = false;
        let mut stream = facts(10, 10);
        stream.streams = 1;
        let short = RouteFacts {
            total: Duration::from_micros(500 * 1000),
            count: 1000,
            ..facts(0, 0)
        };
        let e = eligibility(&[pinned, undeclared, stream, short, facts(0, 0)], 1.0);
        for (i, word) in ["pinned", "--offload", "event stream", "under 1 ms", "yet"]
            .iter()
            .enumerate()
        {
            assert!(
                matches!(&e[i], Eligibility::No(r) if r.contains(word)),
                "{i}: {e:?}"
            );
        }
    }

    #[test]
    fn the_histogram_bounds_its_quantiles() {
        let mut h = Histogram::default();
        for ms in 1..=100 {
            h.record(Duration::from_millis(ms));
        }
        let p99 = h.quantile(0.99).as_secs_f64() * 1e3;
        assert!((99.0..=120.0).contains(&p99), "{p99}");
        let p50 = h.quantile(0.5).as_secs_f64() * 1e3;
        assert!((50.0..=60.0).contains(&p50), "{p50}");
    }

    #[test]
    fn the_baseline_is_the_quietest_second() {
        let mut r = RouteStats::default();
        for s in 0..5 {
            for _ in 0..10 {
                r.record(Duration::from_millis(if s == 2 { 4 } else { 20 }), s);
            }
        }
        assert_eq!(r.baseline(), Some(Duration::from_millis(4)));
        assert_eq!(r.mean(), Duration::from_micros(16_800));
    }

    proptest! {
        #[test]
        fn the_cover_holds_at_least_its_share(ms in proptest::collection::vec(1u64..1000, 1..20), cover in 0.05f64..1.0) {
            let routes: Vec<_> = ms.iter().map(|&m| facts(m, 10)).collect();
            let e = eligibility(&routes, cover);
            let grand: f64 = routes.iter().map(|r| r.total.as_secs_f64()).sum();
            let eligible: f64 = routes.iter().zip(&e)
                .filter(|(_, e)| **e == Eligibility::Eligible)
                .map(|(r, _)| r.total.as_secs_f64()).sum();
            prop_assert!(eligible + 1e-9 >= cover * grand);
            // And no eligible route is lighter than one left outside.
            let lightest_in = routes.iter().zip(&e).filter(|(_, e)| **e == Eligibility::Eligible).map(|(r, _)| r.total).min();
            let heaviest_out = routes.iter().zip(&e).filter(|(_, e)| **e != Eligibility::Eligible).map(|(r, _)| r.total).max();
            if let (Some(i), Some(o)) = (lightest_in, heaviest_out) {
                prop_assert!(i >= o);
            }
        }
    }
}
