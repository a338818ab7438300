//! Routing policies: which idle instance serves a request.
//!
//! Warm-first today. Session affinity (sticky routing by session hint) and data locality
//! (prefer the instance whose memory is closest to a prediction, or that holds cached input)
//! implement the same trait.

use super::{Instance, RouteHints};

pub trait RoutingPolicy: Send + Sync {
    /// Picks an idle instance by index (`idle` is ordered least to most recently used), or
    /// `None` to start a new one.
    fn choose(&self, idle: &[Instance], hints: &RouteHints) -> Option<usize>;
}

/// The most recently used idle instance: it is the most likely to be hot in the CPU caches,
/// and it lets the least recently used ones age out and be reaped.
pub struct WarmFirst;

impl RoutingPolicy for WarmFirst {
    fn choose(&self, idle: &[Instance], _hints: &RouteHints) -> Option<usize> {
        idle.len().checked_sub(1)
    }
}
