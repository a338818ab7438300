//! Shadow runs (BeeHive §3.4): a copy of a real request of a route, run in the function while
//! the monolith serves the original, compared and dropped. A route may be offloaded once
//! [`MATCHES_NEEDED`] shadow runs in a row answered like the monolith (the same status class),
//! and loses that after [`FAILURES_TO_LOSE`] that did not. A new function revision starts
//! again. Their writes have no visible effect: the run is tagged `shadow`, and kiln's services
//! drop what it writes (`objects/shadow.rs`).

/// Shadow runs in a row that must match before a route is offloaded.
pub const MATCHES_NEEDED: u32 = 3;
/// Mismatches, since the last match, that take the route back.
pub const FAILURES_TO_LOSE: u32 = 3;
/// Once a route passed, one in this many of its requests served by the monolith is still
/// shadowed, so that a regression is found.
pub const RECHECK_EVERY: u64 = 100;

/// How one shadow run went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Matched,
    /// It answered differently, or failed; why.
    Differed(String),
    /// It did not run (throttled, no capacity): it says nothing of the route.
    NotRun,
}

/// The shadow runs of one route.
#[derive(Debug, Clone, Default)]
pub struct Record {
    pub matched: u32,
    pub failures: u32,
    pub runs: u64,
    pub passed: bool,
    pub in_flight: bool,
    pub last_failure: Option<String>,
    /// Requests the monolith served since the route passed.
    since_pass: u64,
}

impl Record {
    /// Whether a request of this route the monolith serves now should be shadowed.
    pub fn wants_run(&mut self) -> bool {
        if self.in_flight {
            return false;
        }
        if !self.passed {
            return true;
        }
        self.since_pass += 1;
        self.since_pass.is_multiple_of(RECHECK_EVERY)
    }

    pub fn begin(&mut self) {
        self.in_flight = true;
    }

    pub fn end(&mut self, outcome: Outcome) {
        self.in_flight = false;
        match outcome {
            Outcome::NotRun => {}
            Outcome::Matched => {
                self.runs += 1;
                self.matched += 1;
                self.failures = 0;
                if self.matched >= MATCHES_NEEDED {
                    self.passed = true;
                }
            }
            Outcome::Differed(why) => {
                self.runs += 1;
                self.matched = 0;
                self.failures += 1;
                self.last_failure = Some(why);
                if self.failures >= FAILURES_TO_LOSE {
                    self.passed = false;
                    self.since_pass = 0;
                }
            }
        }
    }

    /// A new revision of the function: everything is proven again.
    pub fn reset(&mut self) {
        let in_flight = self.in_flight;
        *self = Record::default();
        self.in_flight = in_flight;
    }

    /// Why the route may not be offloaded yet, if it may not.
    pub fn reason(&self) -> Option<String> {
        if self.passed {
            return None;
        }
        Some(match &self.last_failure {
            Some(why) if self.failures > 0 => format!(
                "shadow runs: {} of the last differed from the monolith ({why})",
                self.failures
            ),
            _ => format!(
                "shadow runs: {} of {MATCHES_NEEDED} matched the monolith",
                self.matched
            ),
        })
    }
}

/// A shadow run's answer against the monolith's: the same status class is a match.
pub fn compare(monolith: u16, function: Result<u16, String>) -> Outcome {
    match function {
        Err(why) => Outcome::Differed(why),
        Ok(status) if status / 100 == monolith / 100 => Outcome::Matched,
        Ok(status) => Outcome::Differed(format!(
            "the function answered {status}, the monolith {monolith}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_matches_in_a_row_pass_and_three_failures_take_it_back() {
        let mut r = Record::default();
        for outcome in [
            Outcome::Matched,
            Outcome::Matched,
            Outcome::Differed("x".into()),
        ] {
            assert!(r.wants_run());
            r.begin();
            assert!(!r.wants_run(), "one at a time");
            r.end(outcome);
        }
        assert!(!r.passed);
        assert!(r.reason().unwrap().contains("differed"));
        for _ in 0..3 {
            r.begin();
            r.end(Outcome::Matched);
        }
        assert!(r.passed && r.reason().is_none());
        // Passed: only one request in RECHECK_EVERY is shadowed.
        let checks = (0..RECHECK_EVERY * 3).filter(|_| r.wants_run()).count();
        assert_eq!(checks, 3);
        for _ in 0..FAILURES_TO_LOSE {
            r.end(Outcome::Differed("500".into()));
        }
        assert!(!r.passed);
        r.end(Outcome::NotRun);
        assert_eq!(r.runs, 9);
        r.reset();
        assert_eq!(
            r.reason().unwrap(),
            "shadow runs: 0 of 3 matched the monolith"
        );
    }

    #[test]
    fn the_status_class_decides() {
        assert_eq!(compare(200, Ok(201)), Outcome::Matched);
        assert_eq!(compare(302, Ok(302)), Outcome::Matched);
        assert!(matches!(compare(200, Ok(500)), Outcome::Differed(_)));
        assert!(matches!(
            compare(200, Err("crash".into())),
            Outcome::Differed(_)
        ));
    }
}
