//! Routing policies: which idle instance serves a request.
//!
//! [`ClosestMemory`] (OFC §6.5) is the node's policy: among idle instances, the one whose
//! memory limit is closest to the request's predicted limit (the least resizing), then the most
//! recently used; without a prediction it is [`WarmFirst`]. Session affinity (sticky routing by
//! session hint) comes before the policy. The node-level priorities of OFC (free memory, then
//! the locality of the cached input) choose among nodes: they belong to the multi-node mode.

use super::{Instance, RouteHints};

/// What a policy needs to know of an idle instance.
pub trait Candidate {
    /// Its cgroup's memory limit now, in MB.
    fn memory_limit_mb(&self) -> u32;
}

impl Candidate for Instance {
    fn memory_limit_mb(&self) -> u32 {
        Instance::memory_limit_mb(self)
    }
}

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

/// OFC's order: the smallest difference between an idle instance's memory limit and the
/// request's predicted limit, then the most recently used.
pub struct ClosestMemory;

impl ClosestMemory {
    fn pick<C: Candidate>(idle: &[C], hints: &RouteHints) -> Option<usize> {
        let Some(wanted) = hints.memory_mb else {
            return idle.len().checked_sub(1);
        };
        // `rev`: among equal differences, `min_by_key` keeps the first, the most recent.
        idle.iter()
            .enumerate()
            .rev()
            .min_by_key(|(_, i)| i.memory_limit_mb().abs_diff(wanted))
            .map(|(index, _)| index)
    }
}

impl RoutingPolicy for ClosestMemory {
    fn choose(&self, idle: &[Instance], hints: &RouteHints) -> Option<usize> {
        Self::pick(idle, hints)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fake(u32);

    impl Candidate for Fake {
        fn memory_limit_mb(&self) -> u32 {
            self.0
        }
    }

    fn hints(memory_mb: Option<u32>) -> RouteHints {
        RouteHints {
            session: None,
            memory_mb,
        }
    }

    #[test]
    fn the_closest_limit_wins_then_the_most_recent() {
        // Least to most recently used.
        let idle = [Fake(512), Fake(64), Fake(128), Fake(64), Fake(512)];
        assert_eq!(ClosestMemory::pick(&idle, &hints(Some(48))), Some(3));
        assert_eq!(ClosestMemory::pick(&idle, &hints(Some(120))), Some(2));
        assert_eq!(ClosestMemory::pick(&idle, &hints(Some(400))), Some(4));
        assert_eq!(ClosestMemory::pick(&idle, &hints(None)), Some(4));
        assert_eq!(ClosestMemory::pick::<Fake>(&[], &hints(Some(1))), None);
    }
}
