//! Failed sign-ins per client address: after [`SignInLimits::max_failures`] within a window,
//! the address may not try again (not even with the right secret) until the window ends.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use crate::sync::LockExt;

#[derive(Debug, Clone, Copy)]
pub struct SignInLimits {
    pub max_failures: u32,
    pub window: Duration,
}

impl Default for SignInLimits {
    fn default() -> Self {
        Self {
            max_failures: 5,
            window: Duration::from_secs(15 * 60),
        }
    }
}

/// One address's failures: how many, since when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Failures {
    count: u32,
    since: Instant,
}

impl Failures {
    fn current(self, limits: SignInLimits, now: Instant) -> Option<Self> {
        (now.saturating_duration_since(self.since) < limits.window).then_some(self)
    }
}

/// Addresses are kept while their window lasts; beyond this many, the ended ones are dropped
/// before another is added.
const SWEEP_AT: usize = 4096;

pub struct SignInLimiter {
    limits: SignInLimits,
    failures: std::sync::Mutex<HashMap<IpAddr, Failures>>,
}

impl SignInLimiter {
    pub fn new(limits: SignInLimits) -> Self {
        Self {
            limits,
            failures: Default::default(),
        }
    }

    /// `Err(wait)` when `client` has failed too often and must wait `wait` before trying again.
    pub fn check(&self, client: IpAddr, now: Instant) -> Result<(), Duration> {
        let failures = self.failures.locked();
        match failures
            .get(&client)
            .and_then(|f| f.current(self.limits, now))
        {
            Some(f) if f.count >= self.limits.max_failures => {
                Err(self.limits.window - now.saturating_duration_since(f.since))
            }
            _ => Ok(()),
        }
    }

    /// Counts a failed sign-in; returns the address's failures in its window.
    pub fn failed(&self, client: IpAddr, now: Instant) -> u32 {
        let mut failures = self.failures.locked();
        if failures.len() >= SWEEP_AT {
            let limits = self.limits;
            failures.retain(|_, f| f.current(limits, now).is_some());
        }
        let entry = failures
            .get(&client)
            .and_then(|f| f.current(self.limits, now))
            .unwrap_or(Failures {
                count: 0,
                since: now,
            });
        let next = Failures {
            count: entry.count.saturating_add(1),
            ..entry
        };
        failures.insert(client, next);
        next.count
    }

    /// A successful sign-in forgets the address's failures.
    pub fn succeeded(&self, client: IpAddr) {
        self.failures.locked().remove(&client);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: SignInLimits = SignInLimits {
        max_failures: 3,
        window: Duration::from_secs(60),
    };

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    #[test]
    fn an_address_is_refused_after_its_failures_until_the_window_ends() {
        let limiter = SignInLimiter::new(LIMITS);
        let t0 = Instant::now();
        for n in 1..=3 {
            assert_eq!(limiter.check(ip(1), t0), Ok(()));
            assert_eq!(limiter.failed(ip(1), t0), n);
        }
        let later = t0 + Duration::from_secs(20);
        assert_eq!(limiter.check(ip(1), later), Err(Duration::from_secs(40)));
        // Another address is not affected.
        assert_eq!(limiter.check(ip(2), later), Ok(()));
        assert_eq!(limiter.check(ip(1), t0 + LIMITS.window), Ok(()));
        // A new window starts counting from one.
        assert_eq!(limiter.failed(ip(1), t0 + LIMITS.window), 1);
    }

    #[test]
    fn success_forgets_failures() {
        let limiter = SignInLimiter::new(LIMITS);
        let t0 = Instant::now();
        limiter.failed(ip(1), t0);
        limiter.failed(ip(1), t0);
        limiter.succeeded(ip(1));
        assert_eq!(limiter.failed(ip(1), t0), 1);
        assert_eq!(limiter.check(ip(1), t0), Ok(()));
    }

    #[test]
    fn ended_windows_are_swept_when_many_addresses_failed() {
        let limiter = SignInLimiter::new(LIMITS);
        let t0 = Instant::now();
        for i in 0..SWEEP_AT as u32 {
            limiter.failed(IpAddr::from(i.to_be_bytes()), t0);
        }
        limiter.failed(ip(1), t0 + LIMITS.window);
        assert_eq!(limiter.failures.locked().len(), 1);
    }
}
