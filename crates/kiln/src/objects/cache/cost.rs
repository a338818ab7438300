//! What an access would have cost at the backing store, and what each function spent on the
//! object store: the Extract and Load times of OFC's cache-benefit model (§5.2).
//!
//! A hit costs the function microseconds, but the benefit model must know what the same access
//! costs without the cache. Every access that does reach the backing store (a miss, a
//! write-back, anything passed through) is a sample of `latency = a + b · bytes` per operation;
//! a least-squares fit over the last samples prices the accesses that did not.

use std::collections::{HashMap, VecDeque};

/// Samples each fit looks at.
const SAMPLES: usize = 256;

/// Reads and writes, priced apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    Get,
    Put,
}

/// One operation's latency model.
#[derive(Debug, Default)]
pub struct Fit {
    samples: VecDeque<(f64, f64)>,
}

impl Fit {
    pub fn add(&mut self, bytes: u64, nanos: u64) {
        if self.samples.len() == SAMPLES {
            self.samples.pop_front();
        }
        self.samples.push_back((bytes as f64, nanos as f64));
    }

    /// The expected latency of `bytes`, in ns, once there are samples: a least-squares line
    /// (its intercept and slope kept non-negative), or the mean when all samples have one size.
    pub fn estimate(&self, bytes: u64) -> Option<u64> {
        let n = self.samples.len() as f64;
        if n == 0.0 {
            return None;
        }
        let (sx, sy) = self
            .samples
            .iter()
            .fold((0.0, 0.0), |(sx, sy), (x, y)| (sx + x, sy + y));
        let (mx, my) = (sx / n, sy / n);
        let (sxx, sxy) = self.samples.iter().fold((0.0, 0.0), |(sxx, sxy), (x, y)| {
            (sxx + (x - mx) * (x - mx), sxy + (x - mx) * (y - my))
        });
        let slope = if sxx > 0.0 { (sxy / sxx).max(0.0) } else { 0.0 };
        let intercept = (my - slope * mx).max(0.0);
        Some((intercept + slope * bytes as f64) as u64)
    }
}

/// Time one function's object-store calls took, and what they would have taken at the backing
/// store (monotonic counters, in ns; the controller takes differences around an invocation).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IoTimes {
    pub served_ns: u64,
    pub backend_ns: u64,
}

/// The cost models and the per-function counters.
#[derive(Default)]
pub struct Costs {
    fits: HashMap<Op, Fit>,
    functions: HashMap<String, IoTimes>,
}

impl Costs {
    pub fn sample(&mut self, op: Op, bytes: u64, nanos: u64) {
        self.fits.entry(op).or_default().add(bytes, nanos);
    }

    /// The expected latency of `op` on `bytes` at the backing store; with no sample of `op`
    /// yet, the other operation's (the same store, the same link).
    pub fn estimate(&self, op: Op, bytes: u64) -> Option<u64> {
        let other = match op {
            Op::Get => Op::Put,
            Op::Put => Op::Get,
        };
        self.fits
            .get(&op)
            .and_then(|f| f.estimate(bytes))
            .or_else(|| self.fits.get(&other)?.estimate(bytes))
    }

    /// Counts an access of `function`'s: `served` is what it took, `backend` what it took or
    /// would have taken at the backing store.
    pub fn account(&mut self, function: &str, served: u64, backend: u64) {
        let times = self.functions.entry(function.to_string()).or_default();
        times.served_ns = times.served_ns.saturating_add(served);
        times.backend_ns = times.backend_ns.saturating_add(backend);
    }

    pub fn times(&self, function: &str) -> IoTimes {
        self.functions.get(function).copied().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_through_the_samples_prices_other_sizes() {
        let mut fit = Fit::default();
        assert_eq!(fit.estimate(10), None);
        // 10 ms plus 1 ms per MB.
        for mb in [0u64, 1, 2, 4, 8] {
            fit.add(mb << 20, 10_000_000 + mb * 1_000_000);
        }
        let at = |mb: u64| fit.estimate(mb << 20).unwrap() as f64 / 1e6;
        assert!((at(3) - 13.0).abs() < 0.01, "{}", at(3));
        assert!((at(0) - 10.0).abs() < 0.01);
    }

    #[test]
    fn one_size_gives_its_mean_and_slopes_stay_non_negative() {
        let mut fit = Fit::default();
        fit.add(100, 4_000);
        fit.add(100, 6_000);
        assert_eq!(fit.estimate(1_000_000), Some(5_000));
        let mut falling = Fit::default();
        falling.add(0, 9_000);
        falling.add(1_000, 1_000);
        assert!(falling.estimate(10_000).unwrap() >= 1_000);
    }

    #[test]
    fn functions_are_counted_apart() {
        let mut costs = Costs::default();
        costs.account("a", 10, 100);
        costs.account("a", 5, 50);
        costs.account("b", 1, 1);
        assert_eq!(
            costs.times("a"),
            IoTimes {
                served_ns: 15,
                backend_ns: 150
            }
        );
        assert_eq!(costs.times("c"), IoTimes::default());
    }
}
