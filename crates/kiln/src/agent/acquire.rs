//! A request's way to an instance: [`pools::decide`] picks what it gets under the state lock
//! (an idle instance, its session's primary, a new instance, a place in the queue, or a
//! throttle), and `acquire` carries it out; `release` gives an instance back after its
//! invocation, to a waiting request or to its pool.

use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::memory::{make_room, reserve};
use super::sessions::Target;
use super::state::State;
use super::{pools, AgentError, Inner, Instance, InstanceState, Placement, RouteHints, Wake};
use crate::function::SharedSpec;

pub(super) enum Acquired {
    Warm(Box<Instance>),
    /// A slot was reserved for a new instance with this id.
    Cold(u64),
}

impl Inner {
    pub(super) async fn acquire(
        &self,
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
        loop {
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
            let Some(waiter) = waiter else {
                return Err(AgentError::ThrottledNode);
            };
            let mut waiter = waiter;
            let woken = tokio::select! {
                woken = &mut waiter => woken,
                _ = tokio::time::sleep(queue_timeout) => {
                    // An instance sent just as we gave up must not be lost with the channel.
                    waiter.close();
                    if let Ok(Wake::Instance(instance)) = waiter.try_recv() {
                        if let Some(back) = self.release(*instance, true) {
                            self.destroy_later(back);
                        }
                    }
                    return Err(AgentError::ThrottledReserved);
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
