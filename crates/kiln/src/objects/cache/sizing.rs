//! The cache's capacity (OFC §4, §6.4): the memory that live instances booked and that their
//! predicted limits leave unused, minus a slack pool for the churn of instances coming, going
//! and growing.
//!
//! The slack starts at a configured size (OFC: 100 MB). The lendable memory is sampled every
//! tick; its churn in a window (OFC: 60 s) is how far it moved (max − min); every two windows
//! (OFC: 120 s) the slack becomes the largest churn of the last two windows. A sudden drop in
//! lendable memory shrinks the cache at the next tick, whatever the slack.

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
    /// (min, max) of the lendable memory per finished window, newest last.
    windows: VecDeque<(u64, u64)>,
    current: Option<(u64, u64)>,
    ticks_in_window: usize,
}

impl Sizing {
    pub fn new(config: SizingConfig) -> Self {
        Self {
            slack: config.initial_slack_bytes,
            config,
            windows: VecDeque::new(),
            current: None,
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
        let (lo, hi) = self.current.unwrap_or((lendable, lendable));
        self.current = Some((lo.min(lendable), hi.max(lendable)));
        self.ticks_in_window += 1;
        if self.ticks_in_window >= self.config.window_ticks {
            if let Some(window) = self.current.take() {
                self.windows.push_back(window);
            }
            self.ticks_in_window = 0;
            if self.windows.len() >= 2 {
                // Every second window: the slack is the larger churn of the last two.
                self.slack = self
                    .windows
                    .iter()
                    .map(|(lo, hi)| hi - lo)
                    .max()
                    .unwrap_or(self.slack);
                self.windows.clear();
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
    fn the_slack_follows_the_churn_of_the_last_two_windows() {
        let mut s = sizing();
        // Two windows of steady memory, moving by 10 MB and 30 MB.
        for lendable in [400, 405, 410, 400, 420, 430] {
            s.tick(lendable * MB);
        }
        assert_eq!(s.slack(), 30 * MB);
        assert_eq!(s.tick(430 * MB), 400 * MB);
        // A burst: instances take their memory back, the cache shrinks at once.
        assert_eq!(s.tick(100 * MB), 70 * MB);
        s.tick(100 * MB);
        for _ in 0..3 {
            s.tick(100 * MB);
        }
        assert_eq!(s.slack(), 330 * MB, "the burst's churn becomes the slack");
    }
}
