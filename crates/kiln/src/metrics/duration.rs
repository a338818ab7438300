//! Invocation durations as a histogram of atomic buckets. Recording one adds to a bucket and
//! to the sum, each an atomic increment (prometheus-client's histogram takes a lock for it,
//! and its buckets cannot be read back); the console's history reads the buckets for
//! percentiles, and `/metrics` exports them as `kiln_invocation_duration_seconds`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::{MetricType, TypedMetric};

/// Buckets of a histogram: one per bound, and one past the last.
pub const BUCKETS: usize = 19;

/// The buckets' upper bounds in seconds: 50 µs × 2.5ⁱ, up to ~14 min.
pub static BOUNDS: LazyLock<[f64; BUCKETS - 1]> =
    LazyLock::new(|| std::array::from_fn(|i| 0.000_05 * 2.5f64.powf(i as f64)));

/// Counts by bucket, the first for durations up to `BOUNDS[0]`.
pub type Counts = [u64; BUCKETS];

/// The bucket a duration falls in.
pub fn bucket_of(seconds: f64) -> usize {
    BOUNDS
        .iter()
        .position(|bound| seconds <= *bound)
        .unwrap_or(BUCKETS - 1)
}

/// The `q` quantile (0 to 1) of what `counts` counted, in seconds, as Prometheus's
/// `histogram_quantile` estimates it: linear within the bucket that holds it, and the last
/// bound for what lies past it. `None` when nothing was counted.
pub fn quantile(counts: &Counts, q: f64) -> Option<f64> {
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = q.clamp(0.0, 1.0) * total as f64;
    let mut below = 0u64;
    for (i, &count) in counts.iter().enumerate() {
        if count > 0 && (below + count) as f64 >= rank {
            let Some(&upper) = BOUNDS.get(i) else {
                return Some(BOUNDS[BUCKETS - 2]);
            };
            let lower = if i == 0 { 0.0 } else { BOUNDS[i - 1] };
            let within = (rank - below as f64) / count as f64;
            return Some(lower + (upper - lower) * within.clamp(0.0, 1.0));
        }
        below += count;
    }
    Some(BOUNDS[BUCKETS - 2])
}

#[derive(Debug, Default)]
struct Inner {
    buckets: [AtomicU64; BUCKETS],
    sum_ns: AtomicU64,
}

/// One function's durations (a clone shares them).
#[derive(Debug, Clone, Default)]
pub struct DurationHistogram {
    inner: Arc<Inner>,
}

impl DurationHistogram {
    pub fn observe(&self, seconds: f64) {
        self.inner.buckets[bucket_of(seconds)].fetch_add(1, Ordering::Relaxed);
        self.inner
            .sum_ns
            .fetch_add((seconds.max(0.0) * 1e9) as u64, Ordering::Relaxed);
    }

    /// The sum of what was observed, in seconds.
    pub fn sum_seconds(&self) -> f64 {
        self.inner.sum_ns.load(Ordering::Relaxed) as f64 / 1e9
    }

    /// What each bucket counted so far.
    pub fn counts(&self) -> Counts {
        std::array::from_fn(|i| self.inner.buckets[i].load(Ordering::Relaxed))
    }
}

impl TypedMetric for DurationHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for DurationHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let counts = self.counts();
        let buckets: Vec<(f64, u64)> = counts
            .iter()
            .enumerate()
            // prometheus-client writes `+Inf` for f64::MAX.
            .map(|(i, &n)| (BOUNDS.get(i).copied().unwrap_or(f64::MAX), n))
            .collect();
        let sum = self.sum_seconds();
        encoder.encode_histogram::<NoLabelSet>(sum, counts.iter().sum(), &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_the_exported_ones() {
        let theirs: Vec<f64> =
            prometheus_client::metrics::histogram::exponential_buckets(0.000_05, 2.5, 18).collect();
        assert_eq!(BOUNDS.to_vec(), theirs);
        assert_eq!(bucket_of(0.0), 0);
        assert_eq!(bucket_of(0.000_05), 0);
        assert_eq!(bucket_of(0.000_051), 1);
        assert_eq!(bucket_of(10_000.0), BUCKETS - 1);
    }

    #[test]
    fn quantiles_interpolate_within_a_bucket() {
        let mut counts = [0; BUCKETS];
        assert_eq!(quantile(&counts, 0.5), None);
        // Ten durations in the bucket (12.2 ms, 30.5 ms]: the median halfway through it.
        counts[bucket_of(0.02)] = 10;
        let (lower, upper) = (BOUNDS[6], BOUNDS[7]);
        let median = quantile(&counts, 0.5).unwrap();
        assert!((median - (lower + upper) / 2.0).abs() < 1e-12);
        assert_eq!(quantile(&counts, 1.0), Some(upper));
        // One slow one among a hundred: the p99 stays in the fast bucket, the max does not.
        counts[bucket_of(0.02)] = 99;
        counts[bucket_of(2.0)] = 1;
        assert!(quantile(&counts, 0.99).unwrap() <= upper);
        assert!(quantile(&counts, 1.0).unwrap() > 1.0);
        // Past the last bound: the last bound.
        let mut slow = [0; BUCKETS];
        slow[BUCKETS - 1] = 3;
        assert_eq!(quantile(&slow, 0.5), Some(BOUNDS[BUCKETS - 2]));
    }

    #[test]
    fn the_exposition_is_cumulative_with_sum_and_count() {
        let mut registry = prometheus_client::registry::Registry::default();
        let histogram = DurationHistogram::default();
        registry.register("d", "durations", histogram.clone());
        histogram.observe(0.001);
        histogram.observe(0.002);
        histogram.observe(20_000.0);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(text.contains("d_count 3\n"), "{text}");
        assert!(text.contains("d_sum 20000.003\n"), "{text}");
        assert!(text.contains("d_bucket{le=\"0.00078125\"} 0\n"), "{text}");
        assert!(text.contains("d_bucket{le=\"0.001953125\"} 1\n"), "{text}");
        assert!(text.contains("d_bucket{le=\"0.0048828125\"} 2\n"), "{text}");
        assert!(text.contains("d_bucket{le=\"+Inf\"} 3\n"), "{text}");
    }
}
