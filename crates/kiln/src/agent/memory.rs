//! The node's memory budget (`--memory-budget-mb`) and what instances lend out of it (OFC §4).
//!
//! A live instance reserves the limit its cgroup runs under: its booked MemorySize, or the
//! limit predicted for its invocation. What its booking leaves unused is lent to a
//! [`MemoryLender`] (the object cache), up to the budget the reservations leave free. When an
//! instance takes memory back (a warm instance given a request predicted higher, a new
//! instance, or the monitor raising a limit mid-invocation), the lender gives it back first.

use super::pools::fit;
use super::pools::LiveInstance;
use super::state::{Instances, State};
use super::{Inner, Instance};

/// Memory lent out of instances' bookings. The node asks for it back whenever instances
/// reserve more.
pub trait MemoryLender: Send + Sync {
    /// What the node can lend fell to `lendable_mb`: give back what is held above it.
    fn reclaim(&self, lendable_mb: u64);
}

/// Sets what a live instance holds of the node's memory budget (`reserved_mb`, the sum) to
/// `limit_mb`: the limit it runs (or last ran) under.
pub(super) fn reserve(reserved_mb: &mut u64, live: &mut LiveInstance, limit_mb: u32) {
    *reserved_mb = (*reserved_mb + u64::from(limit_mb)).saturating_sub(u64::from(live.limit_mb));
    live.limit_mb = limit_mb;
}

/// Idle instances in eviction order, least recently used first across all functions: each
/// function's idle list is oldest first, so the next victim is the oldest of their heads.
/// Yields each one's function, id and booked memory (what evicting it frees).
pub(super) fn eviction_order(instances: &Instances) -> impl Iterator<Item = (&str, u64, u32)> + '_ {
    let mut heads: Vec<(&str, &[Instance])> = instances
        .pools
        .iter()
        .map(|(name, pool)| (name.as_str(), pool.idle.as_slice()))
        .collect();
    std::iter::from_fn(move || {
        let (at, _) = heads
            .iter()
            .enumerate()
            .filter_map(|(at, (_, idle))| idle.first().map(|i| (at, i.last_used)))
            .min_by_key(|(_, used)| *used)?;
        let (name, idle) = &mut heads[at];
        let victim = &idle[0];
        *idle = &idle[1..];
        let booked = instances.live.get(&victim.id).map_or(0, |l| l.limit_mb);
        Some((*name, victim.id, booked))
    })
}

/// Evicts idle instances, least recently used first across all functions, until `needed_mb`
/// fits in the budget or nothing idle is left; returns them, and whether it fits now.
pub(super) fn make_room(
    state: &mut State,
    needed_mb: u64,
    budget_mb: u64,
) -> (Vec<Instance>, bool) {
    if state.instances.reserved_mb + needed_mb <= budget_mb {
        return (Vec::new(), true);
    }
    let booked = eviction_order(&state.instances).map(|(_, _, mb)| u64::from(mb));
    let (count, fits) = match fit(state.instances.reserved_mb, needed_mb, budget_mb, booked) {
        Ok(count) => (count, true),
        Err(count) => (count, false),
    };
    let chosen: Vec<(String, u64)> = eviction_order(&state.instances)
        .take(count)
        .map(|(name, id, _)| (name.to_string(), id))
        .collect();
    let mut victims = Vec::with_capacity(chosen.len());
    for (name, id) in chosen {
        let Some(pool) = state.instances.pools.get_mut(&name) else {
            continue;
        };
        if let Some(at) = pool.idle.iter().position(|i| i.id == id) {
            victims.push(pool.idle.remove(at));
            state.forget(id);
        }
    }
    (victims, fits)
}

/// Memory booked by live instances that their limits leave unused, at most the budget their
/// limits leave free (new instances may take that).
pub(super) fn lendable_mb(instances: &Instances, budget_mb: u64) -> u64 {
    let unused: u64 = instances
        .live
        .values()
        .map(|live| u64::from(live.memory_mb.saturating_sub(live.limit_mb)))
        .sum();
    unused.min(budget_mb.saturating_sub(instances.reserved_mb))
}

impl Inner {
    /// The monitor is about to raise instance `id`'s limit to its booking: the instance
    /// reserves it now, idle instances make room in the budget if it is over, and the lender
    /// gives back what it holds beyond what is left to lend, before the limit rises.
    pub(super) fn take_back(&self, id: u64) {
        let (victims, lendable) = {
            let mut guard = self.state();
            let state = &mut *guard;
            let Some(live) = state.instances.live.get_mut(&id) else {
                return;
            };
            let booked = live.memory_mb;
            reserve(&mut state.instances.reserved_mb, live, booked);
            let (victims, _) = make_room(state, 0, self.config.memory_budget_mb);
            (
                victims,
                lendable_mb(&state.instances, self.config.memory_budget_mb),
            )
        };
        for victim in victims {
            self.destroy_later(victim);
        }
        if let Some(lender) = self.lender.get() {
            lender.reclaim(lendable);
        }
    }

    /// After an acquisition reserved its instance's limit, before the limit is written: the
    /// lender gives back what it holds beyond what is left to lend. With nothing to give back
    /// that is a comparison; evicting costs what it evicts (bench/results/ofc-scaling.md).
    pub(super) fn reclaim_lent(&self) {
        let Some(lender) = self.lender.get() else {
            return;
        };
        let lendable = lendable_mb(&self.state().instances, self.config.memory_budget_mb);
        lender.reclaim(lendable);
    }
}
