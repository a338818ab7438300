//! What the gateway does on its own: the controller's tick (pre-warming, and noticing new
//! code), the hot routes' recent requests handed to the function's warm-ups, and the routes
//! the function's framework declares.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::status::DeclaredStatus;
use super::Gateway;
use crate::burst::profile::Eligibility;
use crate::burst::routes::Pattern;
use crate::burst::table::{RouteEntry, RouteSource};
use crate::controller::{InvocationType, InvokeOptions, Invoked};
use crate::http_event::event;
use crate::session::HintSource;
use crate::sync::{LockExt, RwLockExt};

impl Gateway {
    pub(super) fn tick(self: &Arc<Self>) {
        let now = Instant::now();
        let prewarm = self.control.locked().tick(now);
        let (cover, function, min_warm) = {
            let spec = self.spec.read_locked();
            (spec.cover, spec.function.clone(), spec.min_warm)
        };
        // Pre-warm ahead of a burst, and keep --min-warm instances ready; the agent holds a
        // demand for its standby window, so once a second is enough.
        let want = prewarm.unwrap_or(0).max(min_warm);
        if want > 0 {
            let mut last = self.last_expect.locked();
            if last.is_none_or(|(t, k)| now.duration_since(t) >= Duration::from_secs(1) || want > k)
            {
                *last = Some((now, want));
                let _ = self.controller.expect_demand(&function, want);
            }
        }
        // Its code and configuration, not its revision: reserved concurrency changes that.
        let revision = self.controller.get(&function).ok().map(|f| {
            format!(
                "{} {}",
                f.code_sha256,
                serde_json::to_string(&f.config).unwrap_or_default()
            )
        });
        let changed = {
            let mut known = self.revision.locked();
            let changed = known.is_some() && *known != revision;
            *known = revision;
            changed
        };
        // New code may declare other routes; a table that could not be read (the function
        // still Pending while its snapshot is built, an instance that failed to start) is read
        // again, with a backoff.
        if changed || self.route_reads.locked().retry_due(now) {
            self.read_routes_in_background();
        }
        let mut profile = self.profile.locked();
        if changed {
            profile.reset_shadows();
        }
        profile.reassess(cover);
        let replays = replay_set(&profile.routes);
        drop(profile);
        self.hand_replays(&function, replays, now);
    }

    /// Hands the function the hot routes' recent requests for its warm-ups when the set of
    /// routes changed, at most every [`REPLAY_EVERY`]: its snapshot is then built again.
    fn hand_replays(&self, function: &str, replays: Vec<(String, Bytes)>, now: Instant) {
        if replays.is_empty() {
            return;
        }
        let routes: Vec<String> = replays.iter().map(|(route, _)| route.clone()).collect();
        {
            let mut last = self.replayed.locked();
            if let Some((at, handed)) = &*last {
                if *handed == routes || now.duration_since(*at) < REPLAY_EVERY {
                    return;
                }
            }
            *last = Some((now, routes));
        }
        let events = replays.into_iter().map(|(_, event)| event).collect();
        if let Err(e) = self.controller.warm_with(function, events) {
            tracing::debug!(function, "warm-up replays not handed over: {e}");
        }
    }

    /// Keeps a request of `route` the monolith answered well as the route's recent request
    /// (one every [`SAMPLE_EVERY`] at most: building the event is the cost).
    pub(super) fn maybe_sample(
        &self,
        route: usize,
        head: &http::request::Parts,
        body: &Bytes,
        peer: SocketAddr,
        status: u16,
    ) {
        if status >= 400 {
            return;
        }
        let now = Instant::now();
        {
            let profile = self.profile.locked();
            let Some(entry) = profile.routes.get(route) else {
                return;
            };
            if entry.source == RouteSource::Pin
                || entry
                    .recent
                    .as_ref()
                    .is_some_and(|(at, _)| now.duration_since(*at) < SAMPLE_EVERY)
            {
                return;
            }
        }
        let function = self.spec.read_locked().function.clone();
        let payload = event(
            &function,
            &head.method,
            head.uri.path(),
            head.uri.query().unwrap_or(""),
            &head.headers,
            body,
            peer,
        );
        if let Some(entry) = self.profile.locked().routes.get_mut(route) {
            entry.recent = Some((now, Bytes::from(payload.to_string())));
        }
    }

    /// Reads the function's route table in a task of its own ([`Gateway::read_routes`]).
    pub(super) fn read_routes_in_background(self: &Arc<Self>) {
        self.route_reads.locked().begin();
        tokio::spawn(self.clone().read_routes());
    }

    /// Asks the function's web adapter for the routes its framework declares (a shadow
    /// invocation: it runs no route), and makes them candidates.
    async fn read_routes(self: Arc<Self>) {
        let function = self.spec.read_locked().function.clone();
        let invoked = self
            .controller
            .invoke_with(
                &function,
                Bytes::from_static(br#"{"kiln":"web-routes"}"#),
                InvocationType::RequestResponse,
                None,
                HintSource {
                    headers: None,
                    query: None,
                    json: None,
                },
                InvokeOptions {
                    shadow: true,
                    ledger: None,
                },
            )
            .await;
        let mut status = DeclaredStatus::default();
        let routes: Vec<String> = match invoked {
            Ok(Invoked::Done { outcome, .. }) if !outcome.function_error => {
                match serde_json::from_slice::<serde_json::Value>(&outcome.body) {
                    Ok(v) => {
                        let strings = |key: &str| -> Vec<String> {
                            v[key]
                                .as_array()
                                .map(|a| {
                                    a.iter()
                                        .filter_map(|s| s.as_str().map(str::to_string))
                                        .collect()
                                })
                                .unwrap_or_default()
                        };
                        status.framework = v["framework"].as_str().map(str::to_string);
                        status.skipped = strings("skipped");
                        let (ok, bad): (Vec<String>, Vec<String>) = strings("routes")
                            .into_iter()
                            .partition(|r| Pattern::parse(r).is_ok());
                        status.skipped.extend(bad);
                        ok
                    }
                    Err(e) => {
                        status.error = Some(format!("the route table is not JSON: {e}"));
                        Vec::new()
                    }
                }
            }
            Ok(_) => {
                status.error = Some("the function failed to give its route table".into());
                Vec::new()
            }
            Err(e) => {
                status.error = Some(format!("the route table could not be read: {e}"));
                Vec::new()
            }
        };
        status.routes = routes.len();
        let spec = self.spec();
        self.profile.locked().rebuild_with(&spec, &routes);
        self.route_reads
            .locked()
            .end(status.error.is_none(), Instant::now());
        *self.declared.locked() = status;
    }
}

/// When the gateway reads the function's route table again after a read that failed: once
/// none is in flight, [`RETRY_FIRST`] after the failure, doubling with each failure in a row
/// up to [`RETRY_MAX`]. A function is Pending until its snapshot is built (tens of seconds for
/// a large Django app), and an app created meanwhile would otherwise never know its routes.
#[derive(Debug, Default)]
pub(super) struct RouteTableReads {
    in_flight: u32,
    /// When the last read ended, if it failed, and how many failed in a row.
    failed: Option<(Instant, u32)>,
}

impl RouteTableReads {
    pub(super) fn begin(&mut self) {
        self.in_flight += 1;
    }

    pub(super) fn end(&mut self, ok: bool, now: Instant) {
        self.in_flight = self.in_flight.saturating_sub(1);
        self.failed = if ok {
            None
        } else {
            let failures = self.failed.map_or(0, |(_, n)| n);
            Some((now, failures.saturating_add(1)))
        };
    }

    pub(super) fn retry_due(&self, now: Instant) -> bool {
        match self.failed {
            Some((at, failures)) if self.in_flight == 0 => {
                now.duration_since(at) >= retry_delay(failures)
            }
            _ => false,
        }
    }
}

fn retry_delay(failures: u32) -> Duration {
    let doubled = RETRY_FIRST.saturating_mul(1 << failures.saturating_sub(1).min(16));
    doubled.min(RETRY_MAX)
}

/// The first read again of a route table that could not be read.
const RETRY_FIRST: Duration = Duration::from_secs(1);
/// The longest wait between reads of a route table that cannot be read.
const RETRY_MAX: Duration = Duration::from_secs(30);

/// The most routes whose recent requests a warm-up replays.
const MAX_REPLAYS: usize = 8;
/// A route's recent request is replaced at most this often.
const SAMPLE_EVERY: Duration = Duration::from_secs(2);
/// The function's warm-up replays change at most this often (each change builds its snapshot
/// again).
const REPLAY_EVERY: Duration = Duration::from_secs(30);

/// The hot routes' recent requests: routes the profile finds worth offloading that have one,
/// most requested first, at most [`MAX_REPLAYS`].
fn replay_set(routes: &[RouteEntry]) -> Vec<(String, Bytes)> {
    let mut hot: Vec<&RouteEntry> = routes
        .iter()
        .filter(|r| r.profiled == Eligibility::Eligible && r.recent.is_some())
        .collect();
    hot.sort_by_key(|r| std::cmp::Reverse(r.stats.count));
    hot.into_iter()
        .take(MAX_REPLAYS)
        .filter_map(|r| Some((r.pattern.to_string(), r.recent.as_ref()?.1.clone())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_route_table_that_could_not_be_read_is_read_again_with_a_backoff() {
        let t0 = Instant::now();
        let mut reads = RouteTableReads::default();
        assert!(!reads.retry_due(t0), "nothing failed yet");
        reads.begin();
        reads.end(false, t0); // the function was Pending
        assert!(!reads.retry_due(t0 + Duration::from_millis(900)));
        assert!(reads.retry_due(t0 + RETRY_FIRST));
        // One read at a time: not while another is in flight.
        reads.begin();
        assert!(!reads.retry_due(t0 + Duration::from_secs(60)));
        let t1 = t0 + RETRY_FIRST;
        reads.end(false, t1);
        assert!(!reads.retry_due(t1 + RETRY_FIRST));
        assert!(reads.retry_due(t1 + 2 * RETRY_FIRST));
        // The wait doubles up to its bound.
        for _ in 0..40 {
            reads.begin();
            reads.end(false, t1);
        }
        assert!(!reads.retry_due(t1 + RETRY_MAX - Duration::from_millis(1)));
        assert!(reads.retry_due(t1 + RETRY_MAX));
        // Read: never again until new code (the tick's own trigger).
        reads.begin();
        reads.end(true, t1);
        assert!(!reads.retry_due(t1 + Duration::from_secs(3600)));
    }

    #[test]
    fn retry_delays_double_and_stay_bounded() {
        let delays: Vec<u64> = (1..=8).map(|n| retry_delay(n).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 30, 30, 30]);
        assert_eq!(retry_delay(u32::MAX), RETRY_MAX);
    }
}
