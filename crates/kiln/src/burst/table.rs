//! An app's route table: the routes in matching order (pins, the routes named by `--offload`,
//! the framework's declared ones), each with its profile at the monolith and its shadow runs,
//! and whether it may be offloaded now.

use std::collections::HashMap;

use serde::Serialize;

use super::profile::{eligibility, Eligibility, RouteFacts, RouteStats};
use super::routes::Pattern;
use super::shadow;
use super::AppSpec;

/// Where a route in the table comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RouteSource {
    /// `Pin`: kept on the monolith.
    Pin,
    /// `Offload`: named by the operator.
    Offload,
    /// Declared by the app's framework (the web adapter's route table).
    Declared,
}

pub(super) struct RouteEntry {
    pub(super) pattern: Pattern,
    pub(super) source: RouteSource,
    pub(super) stats: RouteStats,
    /// What the profile says (the paper's heuristics), before shadow runs.
    pub(super) profiled: Eligibility,
    /// Both: the profile and the shadow runs.
    pub(super) eligible: Eligibility,
    pub(super) shadow: shadow::Record,
    pub(super) offloaded: u64,
    /// A recent request of the route the monolith answered well, as the function's event, and
    /// when it came: what warm-ups replay (memory only, never on disk or in a log).
    pub(super) recent: Option<(std::time::Instant, bytes::Bytes)>,
}

/// The profile of every route, in matching order, and of requests no route matches.
#[derive(Default)]
pub(super) struct Profile {
    pub(super) routes: Vec<RouteEntry>,
    pub(super) other: RouteStats,
    /// The routes the function's framework declares, as last read.
    pub(super) declared: Vec<String>,
}

impl Profile {
    /// The table for `spec`: pins first (they win), then the routes to offload, then those the
    /// framework declares, in its order. A route that stays keeps its profile.
    pub(super) fn rebuild(&mut self, spec: &AppSpec) {
        self.rebuild_with(spec, &self.declared.clone());
    }

    pub(super) fn rebuild_with(&mut self, spec: &AppSpec, declared: &[String]) {
        self.declared = declared.to_vec();
        let mut old: HashMap<String, RouteEntry> = self
            .routes
            .drain(..)
            .map(|r| (r.pattern.to_string(), r))
            .collect();
        let wanted = spec
            .pin
            .iter()
            .map(|p| (p, RouteSource::Pin))
            .chain(spec.offload.iter().map(|p| (p, RouteSource::Offload)))
            .chain(declared.iter().map(|p| (p, RouteSource::Declared)));
        let mut seen = std::collections::HashSet::new();
        for (text, source) in wanted {
            // Validated when the spec was made; a declared one kiln cannot read stays out.
            let Ok(pattern) = Pattern::parse(text) else {
                continue;
            };
            if !seen.insert(pattern.to_string()) {
                continue; // pinned or named already
            }
            let entry = match old.remove(pattern.as_str()) {
                Some(mut e) => {
                    e.source = source;
                    e
                }
                None => RouteEntry {
                    pattern,
                    source,
                    stats: RouteStats::default(),
                    profiled: Eligibility::No("no requests profiled yet".into()),
                    eligible: Eligibility::No("no requests profiled yet".into()),
                    shadow: shadow::Record::default(),
                    offloaded: 0,
                    recent: None,
                },
            };
            self.routes.push(entry);
        }
    }

    pub(super) fn find(&self, method: &str, path: &str) -> Option<usize> {
        self.routes
            .iter()
            .position(|r| r.pattern.matches(method, path))
    }

    pub(super) fn stats(&mut self, route: Option<usize>) -> &mut RouteStats {
        match route {
            Some(i) => &mut self.routes[i].stats,
            None => &mut self.other,
        }
    }

    pub(super) fn reassess(&mut self, cover: f64) {
        let facts: Vec<RouteFacts> = self
            .routes
            .iter()
            .map(|r| RouteFacts {
                pinned: r.source == RouteSource::Pin,
                candidate: r.source != RouteSource::Pin,
                count: r.stats.count,
                total: r.stats.total,
                streams: r.stats.streams,
            })
            .chain(std::iter::once(RouteFacts {
                pinned: true,
                candidate: false,
                count: self.other.count,
                total: self.other.total,
                streams: self.other.streams,
            }))
            .collect();
        for (route, e) in self.routes.iter_mut().zip(eligibility(&facts, cover)) {
            route.eligible = match (&e, route.shadow.reason()) {
                (Eligibility::Eligible, Some(why)) => Eligibility::No(why),
                _ => e.clone(),
            };
            route.profiled = e;
        }
    }

    /// A new revision of the function: every route's shadow runs start again.
    pub(super) fn reset_shadows(&mut self) {
        for route in &mut self.routes {
            route.shadow.reset();
            if route.eligible == Eligibility::Eligible {
                route.eligible = Eligibility::No(route.shadow.reason().unwrap_or_default());
            }
        }
    }
}
