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

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use crate::metrics::duration::DurationHistogram;

use axum::body::Body;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use super::control::Control;
use super::profile::Eligibility;
use super::table::{Profile, RouteSource};
use super::upstream::Upstream;
use super::{upstream_authority, AppError, AppSpec};
use crate::controller::Controller;
use crate::sync::{LockExt, RwLockExt};

mod serve;
mod status;
mod warmup;

pub use status::{
    AppStatus, DeclaredStatus, LatencyStatus, RouteView, ServedStatus, UpstreamStatus,
};

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
    /// The gateway's latency to each answer's head, by who served it (in [`SERVED_BY_KINDS`]'
    /// order): a streamed body's own time is the client's.
    latency: [DurationHistogram; 4],
}

/// Who may serve a request, as `X-Kiln-Served-By` and the series' `served_by` say it.
pub const SERVED_BY_KINDS: [&str; 4] = ["monolith", "function", "fallback", "gateway"];

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
    /// The reads of the function's route table: in flight, and the failures to read it again.
    route_reads: Mutex<warmup::RouteTableReads>,
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
            route_reads: Mutex::new(warmup::RouteTableReads::default()),
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

    pub fn stop(&self) {
        let _ = self.stop.send(true);
        self.listening.store(false, Ordering::Relaxed);
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
            latency: SERVED_BY_KINDS
                .iter()
                .zip(&self.served.latency)
                .map(|(by, h)| LatencyStatus::of(by, h.counts(), h.sum_seconds()))
                .collect(),
        }
    }
}
