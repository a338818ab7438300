//! What an app's gateway shows of itself: its routes (`kiln app routes`) and its status
//! (`kiln app status`), as plain data.

use std::net::SocketAddr;
use std::time::Duration;

use serde::Serialize;

use crate::burst::control::ControlStatus;
use crate::burst::profile::RouteStats;
use crate::metrics::duration::{self, Counts};

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
    /// The gateway's latency by who served the request.
    pub latency: Vec<LatencyStatus>,
    pub declared: DeclaredStatus,
}

/// The gateway's latency to the answers one kind of server gave (`served_by`), from the
/// request's arrival to the answer's head, as percentiles of its histogram.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct LatencyStatus {
    pub served_by: &'static str,
    pub count: u64,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    /// The histogram itself, for `/metrics`.
    #[serde(skip)]
    pub counts: Counts,
    #[serde(skip)]
    pub sum_seconds: f64,
}

impl LatencyStatus {
    pub(super) fn of(served_by: &'static str, counts: Counts, sum_seconds: f64) -> Self {
        let ms = |q| duration::quantile(&counts, q).map(|s| (s * 1e5).round() / 100.0);
        Self {
            served_by,
            count: counts.iter().sum(),
            p50_ms: ms(0.5),
            p99_ms: ms(0.99),
            counts,
            sum_seconds,
        }
    }
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
    pub(super) fn of(route: String, source: &str, s: &RouteStats) -> Self {
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
