//! A request's way to an instance: [`pools::decide`] picks what it gets under the state lock
//! (an idle instance, its session's primary, a new instance, a place in the queue, or a
//! throttle), and `acquire` carries it out; `release` gives an instance back after its
//! invocation, to a waiting request or to its pool.
//!
//! A request that would start an instance on a slower path than the hot one, of a function
//! whose standbys are made in the background (runtimes that cannot fork), waits instead for the
//! first of an instance of its revision freed and a standby made for it, for at most
//! [`START_PATIENCE`]: a burst onto a function with one standby is served by that one and the
//! standbys made meanwhile, not by a coldest start per request (docs/start-paths.md).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::memory::{make_room, reserve};
use super::sessions::Target;
use super::state::State;
use super::{pools, AgentError, Inner, Instance, InstanceState, Placement, RouteHints, Wake};
use crate::function::SharedSpec;

/// How long a request waits for an instance freed or a standby made for it before it starts
/// one on a slower path itself: about what a coldest start of Node takes on a busy node, so
/// that a request that waited in vain takes at most twice what it took before.
const START_PATIENCE: Duration = Duration::from_secs(1);

pub(super) enum Acquired {
    Warm(Box<Instance>),
    /// A slot was reserved for a new instance with this id.
    Cold(u64),
}

impl Inner {
    pub(super) async fn acquire(
        self: &Arc<Self>,
        spec: &SharedSpec,
        hints: &RouteHints,
        placement: Placement,
    ) -> Result<Acquired, AgentError> {
        let queue_timeout = Duration::from_secs(u64::from(spec.timeout_s));
        let session = match (&hints.session, &spec.sessions) {
            (Some(id), Some(config)) => Some((id.as_str(), config)),
            _ => None,
        };
        // The node's budget counts what an instance may use now: the limit predicted for its
        // invocation, else its MemorySize (OFC: the rest is lent to the object cache).
        let need = hints
            .memory_mb
            .filter(|&mb| mb < spec.memory_mb)
            .unwrap_or(spec.memory_mb);
        // Whether it may still wait for a start made for it, and until when.
        let mut patient = true;
        let mut patient_until = None;
        loop {
            // Set when it waits for a start made for it: how many wait so (it included).
            let mut waiting_for_start = None;
            let (waiter, victims) = 'decide: {
                let mut guard = self.state();
                let state = &mut *guard;
                if state.shutting_down {
                    return Err(AgentError::ShuttingDown);
                }
                let pool = state
                    .instances
                    .pools
                    .entry(spec.function.clone())
                    .or_default();
                // An instance of an older revision must never serve a newer spec. (Checked
                // first: the split allocates, and there is rarely anything to split.)
                let stale = if pool.idle.iter().any(|i| i.spec.revision != spec.revision) {
                    let (current, stale): (Vec<_>, Vec<_>) = pool
                        .idle
                        .drain(..)
                        .partition(|i| i.spec.revision == spec.revision);
                    pool.idle = current;
                    stale
                } else {
                    Vec::new()
                };
                // Retired for good: their bookkeeping, booked memory and cgroups go with them.
                for old in stale {
                    state.forget(old.id);
                    self.destroy_later(old);
                }
                let pool_live = state
                    .instances
                    .pools
                    .get(&spec.function)
                    .map_or(0, |p| p.live);
                // A session's request goes to its primary, or where placement puts the session.
                let target = session.and_then(|(session, config)| {
                    let live = &state.instances.live;
                    match state
                        .sessions
                        .target(live, pool_live, spec, session, config)
                    {
                        Target::Instance(id) => Some(id),
                        Target::New => None,
                    }
                });
                let pool = state
                    .instances
                    .pools
                    .get_mut(&spec.function)
                    .expect("pool exists");
                let ask = pools::Ask {
                    routed: self.routing.choose(&pool.idle, hints),
                    session: session.map(|_| match target {
                        Some(id) => match pool.idle.iter().position(|i| i.id == id) {
                            Some(index) => pools::Primary::Idle(index),
                            None => pools::Primary::Busy(id),
                        },
                        None => pools::Primary::None,
                    }),
                    live: pool.live,
                    max_instances: spec.max_instances,
                    reserved_concurrency: spec.reserved_concurrency.is_some(),
                    waiters: {
                        // Requests that gave up waiting (queue timeout, caller gone) hold no place.
                        pool.waiters.retain(|w| !w.is_closed());
                        pool.waiters.len()
                    },
                    queue_depth: self.config.queue_depth,
                };
                let decision = match (placement, pools::decide(&ask)) {
                    (_, take @ pools::Decision::Take(_)) | (Placement::Any, take) => take,
                    (Placement::NoQueue, start @ pools::Decision::Start) => start,
                    // Placed here by another node: it tries elsewhere rather than wait here.
                    _ => return Err(AgentError::Busy),
                };
                match decision {
                    pools::Decision::Take(index) => {
                        let instance = pool.idle.remove(index);
                        if let Some(live) = state.instances.live.get_mut(&instance.id) {
                            live.state = InstanceState::Busy;
                            reserve(&mut state.instances.reserved_mb, live, need);
                        }
                        if let Some((session, _)) = session {
                            let live = &mut state.instances.live;
                            state.sessions.bind(live, spec, session, instance.id);
                        }
                        return Ok(Acquired::Warm(Box::new(instance)));
                    }
                    pools::Decision::WaitForPrimary(id) => {
                        // The primary is busy (or starting): the request queues on it.
                        if let Some((session, _)) = session {
                            let live = &mut state.instances.live;
                            state.sessions.bind(live, spec, session, id);
                        }
                        let (tx, rx) = oneshot::channel();
                        state.sessions.wait_for(id, tx);
                        break 'decide (Some(rx), Vec::new());
                    }
                    pools::Decision::Throttle(e) => return Err(e),
                    pools::Decision::Queue => {
                        let (tx, rx) = oneshot::channel();
                        pool.waiters.push_back(tx);
                        (Some(rx), Vec::new())
                    }
                    pools::Decision::Start
                        if patient
                            && placement == Placement::Any
                            && session.is_none()
                            && self.waits_for_made_ahead(state, spec, Instant::now()) =>
                    {
                        let pool = state
                            .instances
                            .pools
                            .get_mut(&spec.function)
                            .expect("pool exists");
                        let (tx, rx) = oneshot::channel();
                        pool.waiters.push_back(tx);
                        // The burst's size, for the standbys made for it and the next one.
                        let wanted =
                            (pool.live + pool.waiters.len()).min(spec.max_instances as usize);
                        let window = self.config.standby_window;
                        pool.demand.observe(Instant::now(), wanted, window);
                        waiting_for_start = Some(pool.waiters.len());
                        (Some(rx), Vec::new())
                    }
                    pools::Decision::Start => {
                        let (victims, fits) =
                            make_room(state, u64::from(need), self.config.memory_budget_mb);
                        if !fits && placement != Placement::Any {
                            return Err(AgentError::Busy);
                        } else if !fits {
                            // Not even with every idle instance gone: the node is full.
                            (None, victims)
                        } else {
                            let id = self.reserve_new(state, spec, need);
                            let pool = state
                                .instances
                                .pools
                                .get_mut(&spec.function)
                                .expect("pool exists");
                            pool.demand.observe(
                                Instant::now(),
                                pool.live,
                                self.config.standby_window,
                            );
                            if let Some((session, _)) = session {
                                let live = &mut state.instances.live;
                                state.sessions.bind(live, spec, session, id);
                            }
                            drop(guard);
                            for victim in victims {
                                self.destroy_later(victim);
                            }
                            return Ok(Acquired::Cold(id));
                        }
                    }
                }
            };
            for victim in victims {
                self.destroy_later(victim);
            }
            let Some(mut waiter) = waiter else {
                return Err(AgentError::ThrottledNode);
            };
            let mut patience = queue_timeout;
            if let Some(waiting) = waiting_for_start {
                self.refill_spare(spec);
                let until = *patient_until.get_or_insert_with(|| Instant::now() + START_PATIENCE);
                patience = patience.min(until.saturating_duration_since(Instant::now()));
                // Standbys that cannot be made for it (the snapshot memory is full) leave it
                // to start its own.
                if !self.made_ahead_cover(spec, waiting) {
                    patience = Duration::ZERO;
                }
            }
            let woken = tokio::select! {
                biased;
                woken = &mut waiter => woken,
                _ = tokio::time::sleep(patience) => {
                    waiter.close();
                    match waiter.try_recv() {
                        // Sent just as it gave up: it must not be lost with the channel.
                        Ok(wake) if waiting_for_start.is_some() => Ok(wake),
                        Ok(Wake::Instance(instance)) => {
                            if let Some(back) = self.release(*instance, true) {
                                self.destroy_later(back);
                            }
                            return Err(AgentError::ThrottledReserved);
                        }
                        _ if waiting_for_start.is_none() => {
                            return Err(AgentError::ThrottledReserved)
                        }
                        // It starts one itself now.
                        _ => {
                            patient = false;
                            Ok(Wake::Retry)
                        }
                    }
                }
            };
            match woken {
                Ok(Wake::Instance(instance)) if instance.spec.revision == spec.revision => {
                    if let Some((session, _)) = session {
                        let mut guard = self.state();
                        let state = &mut *guard;
                        let live = &mut state.instances.live;
                        state.sessions.bind(live, spec, session, instance.id);
                    }
                    return Ok(Acquired::Warm(instance));
                }
                Ok(Wake::Instance(old)) => {
                    // Queued before a redeploy: an instance of another revision may not serve it.
                    self.state().forget(old.id);
                    self.destroy_later(*old);
                    continue;
                }
                Ok(Wake::Retry) => continue,
                Err(_) => return Err(AgentError::ShuttingDown),
            }
        }
    }

    /// Wakes a request of `spec`'s function that waits while the function may start an
    /// instance (one waiting for a start made for it): a standby was made; or, when one failed
    /// to be made (`all`), every such request, each to start its own.
    pub(super) fn offer_start(&self, spec: &SharedSpec, all: bool) {
        let mut state = self.state();
        let Some(pool) = state.instances.pools.get_mut(&spec.function) else {
            return;
        };
        if pool.live >= spec.max_instances as usize {
            return;
        }
        while let Some(waiter) = pool.waiters.pop_front() {
            if waiter.send(Wake::Retry).is_ok() && !all {
                return;
            }
        }
    }

    /// Books a new instance of `spec` (its id, its memory, its place in the pool's count),
    /// starting on the coldest path until a faster one adopts it.
    pub(super) fn reserve_new(&self, state: &mut State, spec: &SharedSpec, need: u32) -> u64 {
        let id = state.new_id();
        state.instances.book(id, spec, need, true);
        id
    }

    /// Returns an instance after an invocation: to a waiting request, to the idle pool, or to
    /// its end when it is unhealthy or outdated.
    pub(super) fn release(&self, mut instance: Instance, healthy: bool) -> Option<Instance> {
        let mut guard = self.state();
        let state = &mut *guard;
        let shutting_down = state.shutting_down;
        let Some(pool) = state.instances.pools.get_mut(&instance.spec.function) else {
            return Some(instance);
        };
        if healthy && !shutting_down {
            instance.last_used = Instant::now();
            // Requests of this instance's sessions first: they can go nowhere else.
            if let Some(bound) = state.sessions.bound_to(instance.id) {
                while let Some(waiter) = bound.pop_front() {
                    match waiter.send(Wake::Instance(Box::new(instance))) {
                        Ok(()) => return None,
                        Err(Wake::Instance(back)) => instance = *back,
                        Err(Wake::Retry) => unreachable!("we sent an instance"),
                    }
                }
                state.sessions.unbind_waiters(instance.id);
            }
            while let Some(waiter) = pool.waiters.pop_front() {
                match waiter.send(Wake::Instance(Box::new(instance))) {
                    Ok(()) => return None,
                    Err(Wake::Instance(back)) => instance = *back,
                    Err(Wake::Retry) => unreachable!("we sent an instance"),
                }
            }
            if let Some(live) = state.instances.live.get_mut(&instance.id) {
                live.state = InstanceState::Idle;
                reserve(
                    &mut state.instances.reserved_mb,
                    live,
                    instance.memory_limit_mb(),
                );
            }
            pool.idle.push(instance);
            return None;
        }
        if let Some(waiter) = pool.waiters.pop_front() {
            let _ = waiter.send(Wake::Retry);
        }
        state.forget(instance.id);
        Some(instance)
    }

    /// Gives back a reservation whose instance failed to start (or, for wasm, has finished).
    pub(super) fn abandon(&self, function: &str, id: u64) {
        let mut state = self.state();
        state.forget(id);
        if let Some(pool) = state.instances.pools.get_mut(function) {
            if let Some(waiter) = pool.waiters.pop_front() {
                let _ = waiter.send(Wake::Retry);
            }
        }
    }
}
