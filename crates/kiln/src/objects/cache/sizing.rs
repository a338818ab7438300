//! The cache's capacity (OFC §4, §6.4): the memory that live instances booked and that their
//! predicted limits leave unused, minus a slack pool for the churn of instances coming, going
//! and growing.
//!
//! The slack starts at a configured size (OFC: 100 MB). The lendable memory is sampled every
//! tick; its churn in a window (OFC: 60 s) is the most it fell within the window from its
//! highest sample since the previous window began (memory instances took back: growing, or new
//! instances taking budget; a fall across a window's start counts whole, and may count in two
//! windows, which keeps its slack up to 240 s rather than 120 s), and every two windows (OFC:
//! 120 s) the slack becomes the larger churn of the last two. A rise needs no slack:
//! instances sized below their bookings lend more, and nothing must be taken back for that.
//! A sudden drop in lendable memory shrinks the cache at once (the node's give-back) or at the
//! next tick, whatever the slack.

use std::collections::VecDeque;
use std::time::Duration;

/// Sizing settings.
#[derive(Debug, Clone, Copy)]
pub struct SizingConfig {
    /// The cache never grows past this.
    pub max_bytes: u64,
    pub initial_slack_bytes: u64,
    /// How often the lendable memory is sampled and the capacity set.
    pub tick: Duration,
    /// Churn is measured over windows of this many ticks; 0: the slack stays as configured.
    pub window_ticks: usize,
}

impl SizingConfig {
    pub fn new(max_bytes: u64, initial_slack_bytes: u64) -> Self {
        Self {
            max_bytes,
            initial_slack_bytes,
            tick: Duration::from_secs(1),
            window_ticks: 60,
        }
    }
}

/// The slack estimator and the capacity rule.
pub struct Sizing {
    config: SizingConfig,
    slack: u64,
    /// The largest fall of the lendable memory per finished window, newest last.
    windows: VecDeque<u64>,
    /// The highest sample since the previous window began: a fall that starts in one window
    /// and goes on in the next counts whole in the next. The largest fall from it so far in
    /// the current window, and the current window's own highest sample (carried into the next).
    high: Option<u64>,
    fall: u64,
    own_high: u64,
    ticks_in_window: usize,
}

impl Sizing {
    pub fn new(config: SizingConfig) -> Self {
        Self {
            slack: config.initial_slack_bytes,
            config,
            windows: VecDeque::new(),
            high: None,
            fall: 0,
            own_high: 0,
            ticks_in_window: 0,
        }
    }

    pub fn slack(&self) -> u64 {
        self.slack
    }

    /// One sample of the lendable memory; returns the capacity the cache should have.
    pub fn tick(&mut self, lendable: u64) -> u64 {
        if self.config.window_ticks == 0 {
            return self.bound(lendable);
        }
        let high = self.high.map_or(lendable, |h| h.max(lendable));
        self.high = Some(high);
        self.fall = self.fall.max(high - lendable);
        self.own_high = self.own_high.max(lendable);
        self.ticks_in_window += 1;
        if self.ticks_in_window >= self.config.window_ticks {
            self.windows.push_back(std::mem::take(&mut self.fall));
            // The next window's falls count from this one's high (a fall across the boundary
            // counts whole; the slack takes the larger of two windows, so twice is harmless).
            self.high = Some(std::mem::take(&mut self.own_high));
            self.ticks_in_window = 0;
            if self.windows.len() >= 2 {
                // Every second window: the slack is the larger churn of the last two.
                self.slack = self.windows.drain(..).max().unwrap_or(self.slack);
            }
        }
        self.bound(lendable)
    }

    /// The capacity `lendable` bytes allow now, without taking a sample.
    pub fn bound(&self, lendable: u64) -> u64 {
        lendable
            .saturating_sub(self.slack)
            .min(self.config.max_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: u64 = 1024 * 1024;

    fn sizing() -> Sizing {
        Sizing::new(SizingConfig {
            max_bytes: 1000 * MB,
            initial_slack_bytes: 100 * MB,
            tick: Duration::from_secs(1),
            window_ticks: 3,
        })
    }

    #[test]
    fn capacity_is_lendable_memory_minus_slack_within_the_maximum() {
        let mut s = sizing();
        assert_eq!(s.tick(0), 0);
        assert_eq!(s.tick(50 * MB), 0, "less than the slack lends nothing");
        assert_eq!(s.tick(400 * MB), 300 * MB);
        let mut big = sizing();
        assert_eq!(big.tick(5000 * MB), 1000 * MB);
    }

    #[test]
    fn a_window_of_zero_keeps_the_configured_slack() {
        let mut s = Sizing::new(SizingConfig {
            window_ticks: 0,
            ..sizing().config
        });
        for lendable in [400, 0, 400, 0, 400, 0, 400] {
            s.tick(lendable * MB);
        }
        assert_eq!(s.slack(), 100 * MB);
        assert_eq!(s.tick(400 * MB), 300 * MB);
    }

    #[test]
    fn the_slack_follows_the_falls_of_the_last_two_windows() {
        let mut s = sizing();
        // Two windows of steady memory: the second falls 10 MB from the first's high.
        for lendable in [400, 405, 410, 400, 420, 430] {
            s.tick(lendable * MB);
        }
        assert_eq!(s.slack(), 10 * MB);
        assert_eq!(s.tick(430 * MB), 420 * MB);
        // A burst: instances take their memory back, the cache shrinks at once.
        assert_eq!(s.tick(100 * MB), 90 * MB);
        s.tick(100 * MB);
        for _ in 0..3 {
            s.tick(100 * MB);
        }
        assert_eq!(s.slack(), 330 * MB, "the burst's fall becomes the slack");
        // Two quiet windows: the slack follows them down.
        for _ in 0..6 {
            s.tick(100 * MB);
        }
        assert_eq!(s.slack(), 0);
    }

    #[test]
    fn a_fall_across_windows_counts_whole() {
        let mut s = sizing();
        // 900 → 300 in steps, from the end of one window into the next.
        for lendable in [900, 900, 700, 500, 300, 300] {
            s.tick(lendable * MB);
        }
        assert_eq!(s.slack(), 600 * MB);
    }

    #[test]
    fn rising_lendable_memory_needs_no_slack() {
        let mut s = sizing();
        // Instances sized below their bookings, one after another: the cache may have it all.
        for lendable in [0, 2000, 4000, 4000, 6000, 8000] {
            s.tick(lendable * MB);
        }
        assert_eq!(s.slack(), 0);
        // A fall shrinks the cache at once; the slack learns it when the window ends.
        assert_eq!(s.tick(800 * MB), 800 * MB);
    }
}
