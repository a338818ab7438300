//! How many instances of a function to make ahead of demand, as pure functions.
//!
//! A function's demand is its peak concurrency (its instances of any state at once), held for a
//! window after it was reached and then halved every further window, so that a burst's size is
//! remembered for the next burst and the memory it justifies is returned as the function goes
//! quiet. [`standbys`] turns that prediction into a target for the instances made ahead.

use std::time::{Duration, Instant};

/// One function's recent peak concurrency.
#[derive(Debug, Clone, Copy, Default)]
pub(in crate::agent) struct Demand {
    peak: usize,
    /// When `peak` was last reached.
    at: Option<Instant>,
}

impl Demand {
    /// Records that the function has `concurrency` instances at `now`.
    pub fn observe(&mut self, now: Instant, concurrency: usize, window: Duration) {
        if concurrency >= self.predicted(now, window) {
            self.peak = concurrency;
            self.at = Some(now);
        }
    }

    /// The concurrency the function may reach again: its peak, decayed.
    pub fn predicted(&self, now: Instant, window: Duration) -> usize {
        match self.at {
            Some(at) => decayed(self.peak, now.saturating_duration_since(at), window),
            None => 0,
        }
    }
}

/// `peak` after `since`: whole for one `window`, then halved every further `window` (rounded
/// up, so that a peak of one is remembered until it decays below one half).
pub(in crate::agent) fn decayed(peak: usize, since: Duration, window: Duration) -> usize {
    if window.is_zero() {
        return 0;
    }
    if since <= window {
        return peak;
    }
    let halvings = (since - window).as_secs_f64() / window.as_secs_f64();
    let value = peak as f64 * 0.5f64.powf(halvings);
    if value < 0.5 {
        0
    } else {
        value.ceil() as usize
    }
}

/// How many instances to keep made ahead of demand for a function with `floor` fixed standbys
/// (`KilnPrebake.Standbys`), a `predicted` concurrency and `live` instances (which serve before
/// any standby is taken): the predicted instances it does not have, with a quarter more (a
/// burst's requests that found an instance freed by another did not count in its peak, and the
/// next burst's timing differs), at least the floor and at least one, at most `cap`.
pub(in crate::agent) fn standbys(floor: usize, predicted: usize, live: usize, cap: usize) -> usize {
    let wanted = predicted + predicted / 4;
    floor
        .max(wanted.saturating_sub(live))
        .max(1)
        .min(cap.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MIN: Duration = Duration::from_secs(60);

    #[test]
    fn a_peak_is_held_for_a_window_then_halves() {
        assert_eq!(decayed(16, Duration::ZERO, 10 * MIN), 16);
        assert_eq!(decayed(16, 10 * MIN, 10 * MIN), 16);
        assert_eq!(decayed(16, 20 * MIN, 10 * MIN), 8);
        assert_eq!(decayed(16, 30 * MIN, 10 * MIN), 4);
        assert_eq!(decayed(16, 15 * MIN, 10 * MIN), 12, "rounded up");
        assert_eq!(decayed(1, 19 * MIN, 10 * MIN), 1);
        assert_eq!(decayed(1, 21 * MIN, 10 * MIN), 0);
        assert_eq!(decayed(16, Duration::ZERO, Duration::ZERO), 0);
    }

    #[test]
    fn observing_keeps_the_higher_of_the_new_and_the_decayed_peak() {
        let start = Instant::now();
        let mut demand = Demand::default();
        assert_eq!(demand.predicted(start, 10 * MIN), 0);
        demand.observe(start, 16, 10 * MIN);
        demand.observe(start + MIN, 3, 10 * MIN);
        assert_eq!(demand.predicted(start + 2 * MIN, 10 * MIN), 16);
        assert_eq!(demand.predicted(start + 20 * MIN, 10 * MIN), 8);
        // Once the old peak has decayed below it, a smaller one takes over, held anew.
        demand.observe(start + 30 * MIN, 5, 10 * MIN);
        assert_eq!(demand.predicted(start + 39 * MIN, 10 * MIN), 5);
    }

    #[test]
    fn the_target_is_what_demand_lacks_within_floor_and_cap() {
        assert_eq!(standbys(0, 0, 0, 64), 1, "one, as a cold start needs");
        assert_eq!(standbys(0, 1, 0, 64), 1);
        assert_eq!(standbys(0, 16, 0, 64), 20, "a quarter more");
        assert_eq!(standbys(0, 16, 20, 64), 1, "the instances serve first");
        assert_eq!(standbys(0, 16, 10, 64), 10);
        assert_eq!(standbys(8, 2, 0, 64), 8, "the floor holds");
        assert_eq!(standbys(0, 100, 0, 32), 32, "the cap holds");
        assert_eq!(standbys(0, 100, 0, 0), 1);
    }

    proptest! {
        #[test]
        fn decay_never_grows_and_never_exceeds_the_peak(
            peak in 0usize..1000, a in 0u64..100_000, b in 0u64..100_000, window in 1u64..10_000,
        ) {
            let window = Duration::from_secs(window);
            let (early, late) = (a.min(b), a.max(b));
            let early = decayed(peak, Duration::from_secs(early), window);
            let late = decayed(peak, Duration::from_secs(late), window);
            prop_assert!(late <= early);
            prop_assert!(early <= peak);
        }

        #[test]
        fn the_target_stays_within_its_bounds(
            floor in 0usize..100, predicted in 0usize..1000, live in 0usize..1000, cap in 1usize..100,
        ) {
            let n = standbys(floor, predicted, live, cap);
            prop_assert!(n >= 1 && n <= cap);
            prop_assert!(n >= floor.min(cap));
            prop_assert!(n >= predicted.saturating_sub(live).min(cap));
        }
    }
}
