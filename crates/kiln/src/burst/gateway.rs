//! One app's gateway: its listener, the pass-through to the monolith, and the offload of
//! eligible requests to the app's function.
//!
//! A request goes to the monolith unless it is *offloadable* (an eligible route, a body of at
//! most [`MAX_OFFLOAD_BODY`] with a known length, not an upgrade) and [`Control`] sends it to
//! the function. Pass-through requests and answers stream; offloadable ones are buffered, so
//! that either side can serve them. Every answer says who served it in `X-Kiln-Served-By`:
//! `monolith`, `function`, or `fallback` (the monolith, after the function could not).
//!
//! Fallback without the database proxy's ledger (not wired in yet): a request the function
//! never ran (throttled, no capacity, too large an event) goes to the monolith; one it ran and
//! failed goes to the monolith again only if its method is safe (GET, HEAD, OPTIONS), and is
//! otherwise answered 502 with the request id: it may have written, and is never run twice.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde::Serialize;

use super::control::{Control, ControlStatus, Target, TICK};
use super::profile::{Eligibility, RouteStats};
use super::routes::Pattern;
use super::shadow;
use super::table::{Profile, RouteEntry, RouteSource};
use super::upstream::{
    error_chain, is_upgrade, strip_hop_by_hop, upstream_request, BadTarget, InFlight, Unreached,
    Upstream,
};
use super::{upstream_authority, AppError, AppSpec};
use crate::controller::{Controller, ControllerError, InvocationType, InvokeOptions, Invoked};
use crate::function::LedgerRef;
use crate::http_event::{event, map_response, plain};
use crate::session::HintSource;
use crate::sync::{LockExt, RwLockExt};

/// The largest request body an offloaded request may have (a function URL's limit).
pub const MAX_OFFLOAD_BODY: u64 = 6 * 1024 * 1024;
/// The longest request target the gateway accepts.
pub const MAX_URI: usize = 8 * 1024;

const SERVED_BY: &str = "x-kiln-served-by";
/// Why a request the function could not serve went back to the monolith.
const FALLBACK_REASON: &str = "x-kiln-fallback-reason";

#[derive(Default)]
struct Served {
    monolith: AtomicU64,
    function: AtomicU64,
    fallback: AtomicU64,
    /// Answered by the gateway itself: an upstream unreachable, a request refused.
    gateway: AtomicU64,
}

pub struct Gateway {
    controller: Arc<Controller>,
    spec: RwLock<AppSpec>,
    upstreams: RwLock<Vec<Arc<Upstream>>>,
    profile: Mutex<Profile>,
    control: Mutex<Control>,
    served: Served,
    client: Client<HttpConnector, Body>,
    listening: AtomicBool,
    error: Mutex<Option<String>>,
    stop: tokio::sync::watch::Sender<bool>,
    /// The function's code and configuration the shadow runs were made against.
    revision: Mutex<Option<String>>,
    /// When instances were last asked for, and how many.
    last_expect: Mutex<Option<(Instant, u32)>>,
    /// The routes whose recent requests the function's warm-ups replay, and when they were
    /// last handed to it.
    replayed: Mutex<Option<(Instant, Vec<String>)>>,
    declared: Mutex<DeclaredStatus>,
}

/// A route as `kiln app routes` shows it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct RouteView {
    pub route: String,
    pub source: String,
    pub requests: u64,
    pub mean_ms: f64,
    pub total_ms: f64,
    pub p99_ms: f64,
    pub baseline_ms: Option<f64>,
    pub eligible: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub offloaded: u64,
    pub shadow_runs: u64,
    pub shadow_matched: u32,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct UpstreamStatus {
    pub url: String,
    pub in_flight: u32,
    pub failing: bool,
    pub served: u64,
    pub errors: u64,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct ServedStatus {
    pub monolith: u64,
    pub function: u64,
    pub fallback: u64,
    pub gateway: u64,
}

/// An app as `kiln app status` shows it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct AppStatus {
    pub name: String,
    pub listen: SocketAddr,
    pub listening: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub function: String,
    pub policy: String,
    pub control: ControlStatus,
    pub upstreams: Vec<UpstreamStatus>,
    pub served: ServedStatus,
    pub declared: DeclaredStatus,
}

/// What the function's framework declares, as last read (the candidates besides `--offload`).
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct DeclaredStatus {
    pub framework: Option<String>,
    pub routes: usize,
    /// Routes the framework declares that kiln's patterns cannot say.
    pub skipped: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl RouteView {
    fn of(route: String, source: &str, s: &RouteStats) -> Self {
        RouteView {
            route,
            source: source.to_string(),
            requests: s.count,
            mean_ms: ms(s.mean()),
            total_ms: ms(s.total),
            p99_ms: ms(s.histogram.quantile(0.99)),
            baseline_ms: s.baseline().map(ms),
            eligible: false,
            reason: None,
            offloaded: 0,
            shadow_runs: 0,
            shadow_matched: 0,
        }
    }
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

impl Gateway {
    pub fn new(spec: AppSpec, controller: Arc<Controller>) -> Result<Arc<Self>, AppError> {
        let policy = spec.policy()?;
        let mut profile = Profile::default();
        profile.rebuild(&spec);
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(Duration::from_secs(5)));
        let client = Client::builder(TokioExecutor::new()).build(connector);
        let gateway = Arc::new(Self {
            controller,
            upstreams: RwLock::new(Vec::new()),
            profile: Mutex::new(profile),
            control: Mutex::new(Control::new(policy, spec.cooldown())),
            served: Served::default(),
            client,
            listening: AtomicBool::new(false),
            error: Mutex::new(None),
            stop: tokio::sync::watch::channel(false).0,
            revision: Mutex::new(None),
            last_expect: Mutex::new(None),
            replayed: Mutex::new(None),
            declared: Mutex::new(DeclaredStatus::default()),
            spec: RwLock::new(spec.clone()),
        });
        gateway.set_upstreams(&spec.upstreams)?;
        Ok(gateway)
    }

    pub fn spec(&self) -> AppSpec {
        self.spec.read_locked().clone()
    }

    pub fn is_listening(&self) -> bool {
        self.listening.load(Ordering::Relaxed)
    }

    pub fn set_error(&self, error: String) {
        *self.error.locked() = Some(error);
    }

    fn set_upstreams(&self, urls: &[String]) -> Result<(), AppError> {
        let mut upstreams = self.upstreams.write_locked();
        let mut next = Vec::with_capacity(urls.len());
        for url in urls {
            let kept = upstreams.iter().find(|u| &u.url == url).cloned();
            next.push(match kept {
                Some(u) => u,
                None => Arc::new(Upstream {
                    url: url.clone(),
                    authority: upstream_authority(url)?,
                    inflight: AtomicU32::new(0),
                    failing_until: Mutex::new(None),
                    served: AtomicU64::new(0),
                    errors: AtomicU64::new(0),
                }),
            });
        }
        *upstreams = next;
        Ok(())
    }

    /// Applies a changed spec with the same listener, keeping what was learned.
    pub fn update(&self, spec: AppSpec) -> Result<(), AppError> {
        let policy = spec.policy()?;
        self.set_upstreams(&spec.upstreams)?;
        self.profile.locked().rebuild(&spec);
        self.control.locked().set_policy(policy);
        *self.spec.write_locked() = spec;
        Ok(())
    }

    /// Serves `listener` until [`Gateway::stop`], and runs the controller's tick.
    pub fn serve(self: &Arc<Self>, listener: tokio::net::TcpListener) {
        self.listening.store(true, Ordering::Relaxed);
        *self.error.locked() = None;
        let app = axum::Router::new()
            .fallback(handle)
            .with_state(self.clone())
            .into_make_service_with_connect_info::<SocketAddr>();
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let mut stop = self.stop.subscribe();
        let gateway = Arc::downgrade(self);
        tokio::spawn(async move {
            let served = axum::serve(listener, app).with_graceful_shutdown(async move {
                let _ = stop.wait_for(|s| *s).await;
            });
            if let Err(e) = served.await {
                if let Some(g) = gateway.upgrade() {
                    g.set_error(format!("the listener failed: {e}"));
                }
            }
            if let Some(g) = gateway.upgrade() {
                g.listening.store(false, Ordering::Relaxed);
            }
        });
        tokio::spawn(self.clone().read_routes());
        let weak = Arc::downgrade(self);
        let mut stop = self.stop.subscribe();
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(TICK);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = ticks.tick() => {}
                    _ = stop.wait_for(|s| *s) => return,
                }
                let Some(g) = weak.upgrade() else { return };
                g.tick();
            }
        });
    }

    pub fn stop(&self) {
        let _ = self.stop.send(true);
        self.listening.store(false, Ordering::Relaxed);
    }

    fn tick(self: &Arc<Self>) {
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
        let mut profile = self.profile.locked();
        if changed {
            profile.reset_shadows();
            // New code may declare other routes.
            tokio::spawn(self.clone().read_routes());
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
    fn maybe_sample(
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
        *self.declared.locked() = status;
    }

    pub fn routes(&self) -> Vec<RouteView> {
        let profile = self.profile.locked();
        let mut out: Vec<RouteView> = profile
            .routes
            .iter()
            .map(|r| {
                let source = match r.source {
                    RouteSource::Pin => "pin",
                    RouteSource::Offload => "offload",
                    RouteSource::Declared => "declared",
                };
                let mut view = RouteView::of(r.pattern.to_string(), source, &r.stats);
                view.eligible = r.eligible == Eligibility::Eligible;
                view.reason = match &r.eligible {
                    Eligibility::No(why) => Some(why.clone()),
                    Eligibility::Eligible => None,
                };
                view.offloaded = r.offloaded;
                view.shadow_runs = r.shadow.runs;
                view.shadow_matched = r.shadow.matched;
                view
            })
            .collect();
        let mut other = RouteView::of("(other)".into(), "none", &profile.other);
        other.reason = Some("matches no route".into());
        out.push(other);
        out
    }

    pub fn status(&self) -> AppStatus {
        let spec = self.spec();
        let now = Instant::now();
        AppStatus {
            name: spec.name.clone(),
            listen: spec.listen,
            listening: self.is_listening(),
            error: self.error.locked().clone(),
            function: spec.function.clone(),
            policy: spec.policy.clone(),
            control: self.control.locked().status(),
            upstreams: self
                .upstreams
                .read_locked()
                .iter()
                .map(|u| UpstreamStatus {
                    url: u.url.clone(),
                    in_flight: u.inflight.load(Ordering::Relaxed),
                    failing: u.failing(now),
                    served: u.served.load(Ordering::Relaxed),
                    errors: u.errors.load(Ordering::Relaxed),
                })
                .collect(),
            declared: self.declared.locked().clone(),
            served: ServedStatus {
                monolith: self.served.monolith.load(Ordering::Relaxed),
                function: self.served.function.load(Ordering::Relaxed),
                fallback: self.served.fallback.load(Ordering::Relaxed),
                gateway: self.served.gateway.load(Ordering::Relaxed),
            },
        }
    }

    /// The least loaded upstream that is not failing, or the least loaded of all and `true`
    /// when every one is failing.
    fn pick(&self, now: Instant) -> (Arc<Upstream>, bool) {
        let upstreams = self.upstreams.read_locked();
        let healthy = upstreams
            .iter()
            .filter(|u| !u.failing(now))
            .min_by_key(|u| u.inflight.load(Ordering::Relaxed));
        match healthy {
            Some(u) => (u.clone(), false),
            None => (
                upstreams
                    .iter()
                    .min_by_key(|u| u.inflight.load(Ordering::Relaxed))
                    .expect("an app has at least one upstream")
                    .clone(),
                true,
            ),
        }
    }

    fn answer(&self, mut response: Response, by: &'static str) -> Response {
        let counter = match by {
            "monolith" => &self.served.monolith,
            "function" => &self.served.function,
            "fallback" => &self.served.fallback,
            _ => &self.served.gateway,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        response
            .headers_mut()
            .insert(SERVED_BY, HeaderValue::from_static(by));
        response
    }

    /// Sends a request to the monolith and records what it cost.
    async fn forward(
        &self,
        upstream: Arc<Upstream>,
        request: http::Request<Body>,
        route: Option<usize>,
        inflight: InFlight,
    ) -> Result<Response, Unreached> {
        let timeout = self.spec.read_locked().upstream_timeout();
        let started = Instant::now();
        let sent = tokio::time::timeout(timeout, self.client.request(request)).await;
        let elapsed = started.elapsed();
        drop(inflight);
        let response = match sent {
            Err(_) => {
                upstream.failed();
                return Ok(plain(
                    StatusCode::GATEWAY_TIMEOUT,
                    &format!(
                        "the app's server {} did not answer within {:.0} s",
                        upstream.url,
                        timeout.as_secs_f64()
                    ),
                ));
            }
            Ok(Err(e)) if e.is_connect() => {
                upstream.failed();
                return Err(Unreached(format!("{}: {e}", upstream.url)));
            }
            Ok(Err(e)) => {
                upstream.failed();
                return Ok(plain(
                    StatusCode::BAD_GATEWAY,
                    &format!(
                        "the app's server {} failed: {}",
                        upstream.url,
                        error_chain(&e)
                    ),
                ));
            }
            Ok(Ok(r)) => r,
        };
        if matches!(response.status().as_u16(), 502..=504) {
            upstream.failed();
        } else {
            *upstream.failing_until.locked() = None;
        }
        upstream.served.fetch_add(1, Ordering::Relaxed);
        let streams = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| t.starts_with("text/event-stream"));
        let baseline = {
            let mut profile = self.profile.locked();
            let stats = profile.stats(route);
            stats.record(elapsed, monotonic_second());
            if streams {
                stats.streams += 1;
            }
            stats.baseline()
        };
        self.control.locked().observe(elapsed, baseline);
        let (mut parts, body) = response.into_parts();
        strip_hop_by_hop(&mut parts.headers, false);
        Ok(Response::from_parts(parts, Body::new(body)))
    }

    /// Runs an offloadable request in the function.
    async fn offload(
        &self,
        head: &http::request::Parts,
        body: &Bytes,
        peer: SocketAddr,
        shadow: bool,
        ledger: Option<&LedgerRef>,
    ) -> Ran {
        let function = self.spec.read_locked().function.clone();
        let raw_path = head.uri.path();
        let query = head.uri.query();
        let payload = event(
            &function,
            &head.method,
            raw_path,
            query.unwrap_or(""),
            &head.headers,
            body,
            peer,
        );
        let source = HintSource {
            headers: Some(&head.headers),
            query,
            json: Some(body),
        };
        let invoked = self
            .controller
            .invoke_with(
                &function,
                Bytes::from(payload.to_string()),
                InvocationType::RequestResponse,
                None,
                source,
                InvokeOptions {
                    shadow,
                    ledger: ledger.cloned(),
                },
            )
            .await;
        match invoked {
            Ok(Invoked::Done {
                outcome,
                request_id,
                ..
            }) if !outcome.function_error => {
                let mut response = map_response(&outcome.body);
                if let Ok(id) = HeaderValue::from_str(&request_id) {
                    response.headers_mut().insert("x-amzn-requestid", id);
                }
                Ran::Answered(response)
            }
            Ok(Invoked::Done { request_id, .. }) => Ran::Failed(request_id),
            Ok(_) => Ran::Failed(String::new()),
            Err(
                e @ (ControllerError::Throttled { .. }
                | ControllerError::TooLarge(_)
                | ControllerError::NotFound(_)
                | ControllerError::ShuttingDown),
            ) => Ran::Never(e.to_string()),
            Err(e) => Ran::Failed(format!("({e})")),
        }
    }
}

impl Gateway {
    /// Runs a copy of a request the monolith answered with `status` in the function, as a
    /// shadow, if its route wants one now; the outcome goes to the route's record.
    fn maybe_shadow(
        self: &Arc<Self>,
        route: usize,
        head: http::request::Parts,
        body: Bytes,
        peer: SocketAddr,
        status: u16,
    ) {
        if matches!(status, 502..=504) {
            return; // the monolith failed: nothing to compare with
        }
        let pattern = {
            let mut profile = self.profile.locked();
            let Some(entry) = profile.routes.get_mut(route) else {
                return;
            };
            if entry.source == RouteSource::Pin || !entry.shadow.wants_run() {
                return;
            }
            entry.shadow.begin();
            entry.pattern.to_string()
        };
        let gateway = self.clone();
        tokio::spawn(async move {
            let outcome = match gateway.offload(&head, &body, peer, true, None).await {
                Ran::Answered(response) => shadow::compare(status, Ok(response.status().as_u16())),
                Ran::Failed(id) => shadow::compare(
                    status,
                    Err(format!("the function failed (request id {id})")),
                ),
                Ran::Never(_) => shadow::Outcome::NotRun,
            };
            let mut profile = gateway.profile.locked();
            if let Some(entry) = profile
                .routes
                .iter_mut()
                .find(|r| r.pattern.as_str() == pattern)
            {
                entry.shadow.end(outcome);
            }
        });
    }
}

/// What became of a request sent to the function.
enum Ran {
    Answered(Response),
    /// The function never ran it.
    Never(String),
    /// It ran and failed; the request id, if any.
    Failed(String),
}

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

fn monotonic_second() -> u64 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_secs()
}

async fn handle(
    State(gateway): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    request: Request,
) -> Response {
    if request
        .uri()
        .path_and_query()
        .map_or(0, |p| p.as_str().len())
        > MAX_URI
    {
        return gateway.answer(
            plain(
                StatusCode::URI_TOO_LONG,
                &format!("the request target is longer than {MAX_URI} bytes"),
            ),
            "gateway",
        );
    }
    let (mut head, body) = request.into_parts();
    let path = percent_encoding::percent_decode_str(head.uri.path())
        .decode_utf8_lossy()
        .into_owned();
    // Eligible: may be offloaded. Profiled: may be shadowed (its profile says it is worth
    // offloading; shadow runs decide the rest).
    let (route, eligible, profiled) = {
        let profile = gateway.profile.locked();
        let route = profile.find(head.method.as_str(), &path);
        let entry = route.map(|i| &profile.routes[i]);
        (
            route,
            entry.is_some_and(|r| r.eligible == Eligibility::Eligible),
            entry.is_some_and(|r| r.profiled == Eligibility::Eligible),
        )
    };
    let upgrading = is_upgrade(&head.headers);
    let length = head
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let chunked = head.headers.contains_key(header::TRANSFER_ENCODING);
    let bounded = match (length, chunked) {
        (Some(n), _) => n <= MAX_OFFLOAD_BODY,
        (None, false) => true,
        (None, true) => false,
    };
    let now = Instant::now();
    if !profiled || upgrading || !bounded {
        let (upstream, _) = gateway.pick(now);
        if upgrading {
            return pass_upgrade(gateway, head, peer, upstream, route).await;
        }
        let request = match upstream_request(&head, &upstream, peer, Body::new(body), false) {
            Ok(r) => r,
            Err(BadTarget) => return gateway.answer(BadTarget::response(), "gateway"),
        };
        let held = InFlight::new(upstream.clone());
        return match gateway.forward(upstream, request, route, held).await {
            Ok(response) => gateway.answer(response, "monolith"),
            Err(Unreached(why)) => gateway.answer(
                plain(
                    StatusCode::BAD_GATEWAY,
                    &format!("the app's server is unreachable: {why}"),
                ),
                "gateway",
            ),
        };
    }
    // Offloadable: buffered, so that either side can serve it.
    let body = match http_body_util::Limited::new(body, MAX_OFFLOAD_BODY as usize)
        .collect()
        .await
    {
        Ok(collected) => collected.to_bytes(),
        Err(e) => {
            return gateway.answer(
                plain(
                    StatusCode::BAD_REQUEST,
                    &format!("the request body could not be read: {e}"),
                ),
                "gateway",
            )
        }
    };
    head.headers.remove(header::EXPECT);
    let (upstream, failing) = gateway.pick(now);
    // Counted at the upstream as it is decided on.
    let held = InFlight::new(upstream.clone());
    let target = if eligible {
        gateway.control.locked().decide(now, held.before, failing)
    } else {
        Target::Monolith
    };
    if target == Target::Monolith {
        let request =
            match upstream_request(&head, &upstream, peer, Body::from(body.clone()), false) {
                Ok(r) => r,
                Err(BadTarget) => return gateway.answer(BadTarget::response(), "gateway"),
            };
        match gateway.forward(upstream, request, route, held).await {
            Ok(response) => {
                if let Some(i) = route {
                    let status = response.status().as_u16();
                    gateway.maybe_sample(i, &head, &body, peer, status);
                    gateway.maybe_shadow(i, head, body, peer, status);
                }
                return gateway.answer(response, "monolith");
            }
            // Unreached, the request was never sent: the function may serve it, if it may
            // serve the route at all.
            Err(Unreached(why)) if !eligible => {
                return gateway.answer(
                    plain(
                        StatusCode::BAD_GATEWAY,
                        &format!("the app's server is unreachable: {why}"),
                    ),
                    "gateway",
                )
            }
            Err(Unreached(_)) => {}
        }
    } else {
        drop(held); // the function serves it: not the upstream's
    }
    if let Some(i) = route {
        if let Some(r) = gateway.profile.locked().routes.get_mut(i) {
            r.offloaded += 1;
        }
    }
    // Its writes (database commits, object writes) are recorded, so that a failure that wrote
    // nothing can go back to the monolith.
    let ledger = LedgerRef(Arc::new(kiln_dbproxy::Ledger::new()));
    let ran = gateway
        .offload(&head, &body, peer, false, Some(&ledger))
        .await;
    match ran {
        Ran::Answered(response) => gateway.answer(response, "function"),
        Ran::Failed(request_id) if !ledger.0.is_clean() => {
            let mut response = plain(
                StatusCode::BAD_GATEWAY,
                &format!(
                    "the function failed on this request after it started; it may have \
                     written, so it is not run again (request id {request_id})"
                ),
            );
            if let Ok(id) = HeaderValue::from_str(&request_id) {
                response.headers_mut().insert("x-amzn-requestid", id);
            }
            gateway.answer(response, "gateway")
        }
        ran @ (Ran::Failed(_) | Ran::Never(_)) => {
            let why = match ran {
                Ran::Never(why) => format!("the function did not run it: {why}"),
                Ran::Failed(id) => format!("the function failed (request id {id})"),
                Ran::Answered(_) => unreachable!("matched above"),
            };
            let (upstream, _) = gateway.pick(Instant::now());
            let request = match upstream_request(&head, &upstream, peer, Body::from(body), false) {
                Ok(r) => r,
                Err(BadTarget) => return gateway.answer(BadTarget::response(), "gateway"),
            };
            let held = InFlight::new(upstream.clone());
            match gateway.forward(upstream, request, route, held).await {
                Ok(mut response) => {
                    if let Ok(v) = HeaderValue::from_str(&why) {
                        response.headers_mut().insert(FALLBACK_REASON, v);
                    }
                    gateway.answer(response, "fallback")
                }
                Err(Unreached(unreached)) => gateway.answer(
                    plain(
                        StatusCode::BAD_GATEWAY,
                        &format!(
                            "neither the function nor the app's server could serve this request: {why}; {unreached}"
                        ),
                    ),
                    "gateway",
                ),
            }
        }
    }
}

/// An upgrade (WebSocket) goes to the monolith and, once both sides agree, the two
/// connections are joined.
async fn pass_upgrade(
    gateway: Arc<Gateway>,
    mut head: http::request::Parts,
    peer: SocketAddr,
    upstream: Arc<Upstream>,
    route: Option<usize>,
) -> Response {
    let client_side = head.extensions.remove::<hyper::upgrade::OnUpgrade>();
    let request = match upstream_request(&head, &upstream, peer, Body::empty(), true) {
        Ok(r) => r,
        Err(BadTarget) => return gateway.answer(BadTarget::response(), "gateway"),
    };
    let timeout = gateway.spec.read_locked().upstream_timeout();
    let started = Instant::now();
    let sent = tokio::time::timeout(timeout, gateway.client.request(request)).await;
    let mut response = match sent {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            upstream.failed();
            return gateway.answer(
                plain(
                    StatusCode::BAD_GATEWAY,
                    &format!("the app's server failed: {}", error_chain(&e)),
                ),
                "gateway",
            );
        }
        Err(_) => {
            upstream.failed();
            return gateway.answer(
                plain(
                    StatusCode::GATEWAY_TIMEOUT,
                    "the app's server did not answer",
                ),
                "gateway",
            );
        }
    };
    gateway
        .profile
        .locked()
        .stats(route)
        .record(started.elapsed(), monotonic_second());
    if response.status() == StatusCode::SWITCHING_PROTOCOLS {
        let server_side = hyper::upgrade::on(&mut response);
        if let Some(client_side) = client_side {
            tokio::spawn(async move {
                if let (Ok(client), Ok(server)) = (client_side.await, server_side.await) {
                    let mut client = TokioIo::new(client);
                    let mut server = TokioIo::new(server);
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                }
            });
        }
    }
    let (mut parts, body) = response.into_parts();
    let upgrading = parts.status == StatusCode::SWITCHING_PROTOCOLS;
    strip_hop_by_hop(&mut parts.headers, upgrading);
    gateway.answer(Response::from_parts(parts, Body::new(body)), "monolith")
}
