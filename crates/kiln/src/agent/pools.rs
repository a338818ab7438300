//! Each function's pool of instances and the node's live instances, and the decisions taken over it as pure functions:
//! [`decide`] what a request gets (an idle instance, its session's primary, a new instance, a
//! place in the queue, or a throttle), and [`fit`] how many idle instances must go for a new
//! one to fit in the node's memory budget. `Inner::acquire` gathers their inputs under the
//! state lock and carries out what they decide.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use kiln_sandbox::Cgroup;
use tokio::sync::oneshot;

use super::instance::Instance;
use super::{AgentError, InstanceState, StartPath, Wake};
use crate::function::SharedSpec;

/// One function's instances on this node.
#[derive(Default)]
pub(super) struct Pool {
    /// Most recently used last.
    pub idle: Vec<Instance>,
    /// Instances of any state, counted against the function's concurrency.
    pub live: usize,
    pub waiters: VecDeque<oneshot::Sender<Wake>>,
    /// Its recent peak of `live`: what its instances made ahead of demand are sized by.
    pub demand: super::demand::Demand,
}

/// One live instance, as the node books it.
pub(super) struct LiveInstance {
    pub function: String,
    pub revision: u64,
    pub state: InstanceState,
    pub start_path: StartPath,
    pub created: Instant,
    pub memory_mb: u32,
    /// The memory limit its cgroup had after its last invocation (below `memory_mb` when the
    /// invocation ran at a prediction): the difference is lent to the object cache.
    pub limit_mb: u32,
    pub cgroup: Option<Arc<Cgroup>>,
    pub pid: Option<u32>,
    /// Sessions whose primary this instance is.
    pub sessions: u32,
    /// Whether it counts in its function's pool (a tracing instance does not).
    pub pooled: bool,
}

impl LiveInstance {
    /// A new instance of `spec`, starting on the coldest path until a faster one adopts it,
    /// booked at `limit_mb`.
    pub fn starting(spec: &SharedSpec, limit_mb: u32, pooled: bool) -> Self {
        Self {
            function: spec.function.clone(),
            revision: spec.revision,
            state: InstanceState::Starting,
            start_path: StartPath::Coldest,
            created: Instant::now(),
            memory_mb: spec.memory_mb,
            limit_mb,
            cgroup: None,
            pid: None,
            sessions: 0,
            pooled,
        }
    }
}

/// What a request arriving at a pool comes with, gathered under the state lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Ask {
    /// The idle instance the routing policy picks (an index into the pool's idle list).
    pub routed: Option<usize>,
    /// `None` for a sessionless request; for a session's, where its primary is: an index into
    /// the idle list (`Idle`), an instance that is busy or starting (`Busy`), or no primary yet.
    pub session: Option<Primary>,
    /// The pool's instances of any state, and the function's limit on them.
    pub live: usize,
    pub max_instances: u32,
    /// The function has reserved concurrency (its throttles are its own, not the node's).
    pub reserved_concurrency: bool,
    /// Requests waiting in the function's queue, and the most it may hold.
    pub waiters: usize,
    pub queue_depth: usize,
}

/// Where a session's primary instance is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Primary {
    Idle(usize),
    Busy(u64),
    None,
}

/// What a request gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Decision {
    /// The idle instance at this index.
    Take(usize),
    /// Wait for the session's primary, which is busy or starting.
    WaitForPrimary(u64),
    /// A new instance, if the node's memory allows (see [`fit`]).
    Start,
    /// A place in the function's queue.
    Queue,
    Throttle(AgentError),
}

/// What a request gets from its pool. A session's request goes to its primary and waits for it
/// if it is busy; a new session starts an instance of its own while the function may have one.
pub(super) fn decide(ask: &Ask) -> Decision {
    let below_limit = ask.live < ask.max_instances as usize;
    let chosen = match ask.session {
        Some(Primary::Idle(index)) => Some(index),
        Some(Primary::Busy(_)) => None,
        // A new session waits for no one: a new instance, when the function may have one.
        Some(Primary::None) if below_limit => None,
        _ => ask.routed,
    };
    if let Some(index) = chosen {
        return Decision::Take(index);
    }
    if let Some(Primary::Busy(id)) = ask.session {
        return Decision::WaitForPrimary(id);
    }
    if ask.max_instances == 0 {
        return Decision::Throttle(AgentError::ThrottledReserved);
    }
    if below_limit {
        return Decision::Start;
    }
    if ask.waiters >= ask.queue_depth {
        return Decision::Throttle(if ask.reserved_concurrency {
            AgentError::ThrottledReserved
        } else {
            AgentError::ThrottledNode
        });
    }
    Decision::Queue
}

/// How many idle instances, taken in eviction order (`evictable` holds their booked memory),
/// must go for `need_mb` more to fit in `budget_mb` beside `reserved_mb`: `Ok(n)`, or
/// `Err(n)` when it cannot fit even with all of them gone (`n` = all).
pub(super) fn fit(
    reserved_mb: u64,
    need_mb: u64,
    budget_mb: u64,
    evictable: impl IntoIterator<Item = u64>,
) -> Result<usize, usize> {
    let mut reserved = reserved_mb;
    let mut evicted = 0;
    let mut evictable = evictable.into_iter();
    while reserved + need_mb > budget_mb {
        let Some(mb) = evictable.next() else {
            return Err(evicted);
        };
        reserved = reserved.saturating_sub(mb);
        evicted += 1;
    }
    Ok(evicted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ask() -> Ask {
        Ask {
            routed: None,
            session: None,
            live: 0,
            max_instances: 4,
            reserved_concurrency: false,
            waiters: 0,
            queue_depth: 2,
        }
    }

    #[test]
    fn an_idle_instance_is_taken_before_anything_starts() {
        let warm = Ask {
            routed: Some(1),
            live: 2,
            ..ask()
        };
        assert_eq!(decide(&warm), Decision::Take(1));
        assert_eq!(decide(&ask()), Decision::Start);
    }

    #[test]
    fn at_its_limit_a_function_queues_then_throttles() {
        let full = Ask { live: 4, ..ask() };
        assert_eq!(decide(&full), Decision::Queue);
        let queue_full = Ask { waiters: 2, ..full };
        assert_eq!(
            decide(&queue_full),
            Decision::Throttle(AgentError::ThrottledNode)
        );
        let reserved = Ask {
            reserved_concurrency: true,
            ..queue_full
        };
        assert_eq!(
            decide(&reserved),
            Decision::Throttle(AgentError::ThrottledReserved)
        );
        let zero = Ask {
            max_instances: 0,
            ..ask()
        };
        assert_eq!(
            decide(&zero),
            Decision::Throttle(AgentError::ThrottledReserved)
        );
    }

    #[test]
    fn a_session_goes_to_its_primary_or_an_instance_of_its_own() {
        let idle_primary = Ask {
            routed: Some(0),
            session: Some(Primary::Idle(2)),
            live: 3,
            ..ask()
        };
        assert_eq!(decide(&idle_primary), Decision::Take(2));
        let busy_primary = Ask {
            session: Some(Primary::Busy(7)),
            ..idle_primary
        };
        assert_eq!(decide(&busy_primary), Decision::WaitForPrimary(7));
        // A new session does not take another session's idle instance while it may start one.
        let new_session = Ask {
            session: Some(Primary::None),
            ..idle_primary
        };
        assert_eq!(decide(&new_session), Decision::Start);
        let at_limit = Ask {
            live: 4,
            ..new_session
        };
        assert_eq!(decide(&at_limit), Decision::Take(0));
    }

    #[test]
    fn room_is_made_least_recently_used_first_and_only_as_needed() {
        assert_eq!(fit(100, 128, 1024, [256, 256]), Ok(0));
        assert_eq!(fit(1000, 128, 1024, [10, 256, 256]), Ok(2));
        assert_eq!(fit(900, 900, 1024, [256, 256]), Err(2));
        assert_eq!(fit(0, 2048, 1024, []), Err(0));
    }

    proptest! {
        #[test]
        fn fit_evicts_the_fewest_that_make_room(
            reserved in 0u64..4096,
            need in 0u64..2048,
            budget in 0u64..4096,
            evictable in proptest::collection::vec(0u64..1024, 0..8),
        ) {
            let freed = |n: usize| evictable[..n].iter().sum::<u64>();
            let fits = |n: usize| reserved.saturating_sub(freed(n)) + need <= budget;
            match fit(reserved, need, budget, evictable.iter().copied()) {
                Ok(n) => {
                    prop_assert!(n <= evictable.len());
                    prop_assert!(fits(n));
                    prop_assert!(n == 0 || !fits(n - 1));
                }
                Err(n) => {
                    prop_assert_eq!(n, evictable.len());
                    prop_assert!((0..=n).all(|k| !fits(k)));
                }
            }
        }

        #[test]
        fn a_decision_never_exceeds_the_functions_limit(
            routed in proptest::option::of(0usize..4),
            live in 0usize..6,
            max_instances in 0u32..5,
            waiters in 0usize..4,
            queue_depth in 0usize..4,
            session in proptest::option::of(prop_oneof![
                (0usize..4).prop_map(Primary::Idle),
                (1u64..9).prop_map(Primary::Busy),
                Just(Primary::None),
            ]),
        ) {
            let ask = Ask { routed, session, live, max_instances, reserved_concurrency: false, waiters, queue_depth };
            match decide(&ask) {
                Decision::Start => prop_assert!(live < max_instances as usize),
                Decision::Queue => prop_assert!(waiters < queue_depth && live >= max_instances as usize),
                Decision::Take(i) => prop_assert!(Some(i) == routed || session == Some(Primary::Idle(i))),
                Decision::WaitForPrimary(id) => prop_assert_eq!(session, Some(Primary::Busy(id))),
                Decision::Throttle(_) => prop_assert!(max_instances == 0 || live >= max_instances as usize),
            }
        }
    }
}
