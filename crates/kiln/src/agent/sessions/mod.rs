//! Session affinity (XFaaS): every request of a session goes to the session's primary instance.
//!
//! A session is bound to one instance, its primary, from its first request on. While the
//! primary lives, the session's requests go to it: at once when it is idle, else they queue on
//! it (not on the function), in arrival order, and the primary takes them one at a time as it
//! finishes each invocation. Requests of one session therefore never run concurrently, which
//! makes a read-modify-write inside one request linearizable. A new session, or one whose
//! primary is gone (reaped, crashed, retired by an update), is placed by the function's
//! placement: bin-packing onto the instance that already holds the most sessions below the
//! per-instance bound, or spreading onto a new instance while the function may have more.
//! A session ends after its idle TTL or when the API ends it; its state (its log) goes with it.
//!
//! Each session's state is kept durable by its log (`log.rs`): the entry of a session
//! holds its log open, so a new primary is loaded from memory. After a restart of kiln a
//! session's entry (and log) is opened again by its next request.

mod entries;
pub(super) mod log;
pub(super) mod txn;

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};

use tokio::sync::oneshot;

use self::log::SessionLog;
use super::pools::LiveInstance;
use super::{InstanceState, Wake};
use crate::function::InstanceSpec;
use crate::session::{Placement, SessionConfig};

/// One session of one function.
pub(super) struct Session {
    /// The instance that holds the session (its id; maybe still a reservation); none before
    /// the session's first request is placed.
    pub primary: Option<u64>,
    pub log: Arc<SessionLog>,
    pub last_used: Instant,
    pub created: Instant,
    pub requests: u64,
    ttl: Duration,
    /// Held by the wasm request of the session that runs: wasm requests have no primary
    /// instance to queue on, so they take turns here instead.
    turn: Arc<tokio::sync::Mutex<()>>,
}

/// Sessions are keyed by function and id: two functions' sessions never meet.
pub(super) type SessionKey = (String, String);

/// Where a session's request goes.
pub(super) enum Target {
    /// To this instance (idle, busy or starting).
    Instance(u64),
    /// To a new instance.
    New,
}

/// A session, as `kiln status` and the sessions API show it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SessionStatus {
    pub session: String,
    /// The primary instance, if it still lives.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<u64>,
    pub requests: u64,
    /// The keys of the session's state, and their bytes with their values'.
    #[serde(default)]
    pub keys: usize,
    #[serde(default)]
    pub bytes: u64,
    /// The length of the session's log on disk.
    #[serde(default)]
    pub log_bytes: u64,
    pub age_s: f64,
    pub idle_s: f64,
}

/// The node's open sessions, and the requests waiting for their primaries.
#[derive(Default)]
pub(super) struct Sessions {
    open: HashMap<SessionKey, Session>,
    /// Requests of a session waiting for its primary, per instance id.
    bound: HashMap<u64, VecDeque<oneshot::Sender<Wake>>>,
}

impl Sessions {
    /// Where a request of `session` goes: its live primary, else where placement puts it.
    pub fn target(
        &self,
        live: &HashMap<u64, LiveInstance>,
        pool_live: usize,
        spec: &InstanceSpec,
        session: &str,
        config: &SessionConfig,
    ) -> Target {
        let key = (spec.function.clone(), session.to_string());
        if let Some(primary) = self.open.get(&key).and_then(|s| s.primary) {
            if live
                .get(&primary)
                .is_some_and(|l| l.revision == spec.revision)
            {
                return Target::Instance(primary);
            }
        }
        let candidates = live.iter().filter(|(_, l)| {
            l.function == spec.function
                && l.revision == spec.revision
                && l.sessions < config.max_sessions_per_instance
        });
        // Ties go to an idle instance, then to the oldest.
        let key =
            |id: &u64, state: InstanceState| (state == InstanceState::Idle, std::cmp::Reverse(*id));
        let chosen = match config.placement {
            Placement::Binpack => candidates
                .max_by_key(|(id, l)| (l.sessions, key(id, l.state)))
                .map(|(id, _)| *id),
            Placement::Spread => {
                if pool_live < spec.max_instances as usize {
                    None
                } else {
                    candidates
                        .max_by_key(|(id, l)| (std::cmp::Reverse(l.sessions), key(id, l.state)))
                        .map(|(id, _)| *id)
                }
            }
        };
        chosen.map_or(Target::New, Target::Instance)
    }

    /// The session's entry, with its log: opened (and replayed) by [`open`] when there is none.
    pub fn log(&self, key: &SessionKey) -> Option<Arc<SessionLog>> {
        self.open.get(key).map(|s| s.log.clone())
    }

    /// The turn that the session's wasm requests take one at a time.
    pub fn turn(&self, key: &SessionKey) -> Option<Arc<tokio::sync::Mutex<()>>> {
        self.open.get(key).map(|s| s.turn.clone())
    }

    /// Adds the entry of a session whose log was just opened, unless a concurrent request of
    /// the same session added one first; returns the entry's log either way.
    pub fn insert(
        &mut self,
        key: SessionKey,
        log: Arc<SessionLog>,
        config: &SessionConfig,
    ) -> Arc<SessionLog> {
        let now = Instant::now();
        self.open
            .entry(key)
            .or_insert_with(|| Session {
                primary: None,
                log,
                last_used: now,
                created: now,
                requests: 0,
                ttl: Duration::from_secs(u64::from(config.idle_ttl_seconds)),
                turn: Arc::default(),
            })
            .log
            .clone()
    }

    /// Makes instance `id` the primary of `session` (a no-op when it already is), and marks
    /// the session used now. A session that ended meanwhile stays ended.
    pub fn bind(
        &mut self,
        live: &mut HashMap<u64, LiveInstance>,
        spec: &InstanceSpec,
        session: &str,
        id: u64,
    ) {
        if spec.sessions.is_none() {
            return;
        }
        let key = (spec.function.clone(), session.to_string());
        let Some(entry) = self.open.get_mut(&key) else {
            return;
        };
        entry.last_used = Instant::now();
        if entry.primary == Some(id) {
            return;
        }
        let previous = entry.primary.replace(id);
        if let Some(live) = previous.and_then(|old| live.get_mut(&old)) {
            live.sessions = live.sessions.saturating_sub(1);
        }
        if let Some(live) = live.get_mut(&id) {
            live.sessions += 1;
        }
    }

    /// Queues a request of a session on its primary `id`, which is busy or starting.
    pub fn wait_for(&mut self, id: u64, waiter: oneshot::Sender<Wake>) {
        self.bound.entry(id).or_default().push_back(waiter);
    }

    /// The requests queued on instance `id` for their sessions, oldest first.
    pub fn bound_to(&mut self, id: u64) -> Option<&mut VecDeque<oneshot::Sender<Wake>>> {
        self.bound.get_mut(&id)
    }

    /// Tells the requests queued on instance `id` (which is gone or going) to try again: their
    /// sessions are placed anew.
    pub fn wake_bound(&mut self, id: u64) {
        for waiter in self.bound.remove(&id).unwrap_or_default() {
            let _ = waiter.send(Wake::Retry);
        }
    }

    /// Forgets the (now empty) queue of requests bound to instance `id`.
    pub fn unbind_waiters(&mut self, id: u64) {
        self.bound.remove(&id);
    }

    /// Counts a request the session's primary answered.
    pub fn served(&mut self, function: &str, session: &str) {
        if let Some(entry) = self
            .open
            .get_mut(&(function.to_string(), session.to_string()))
        {
            entry.requests += 1;
            entry.last_used = Instant::now();
        }
    }

    /// Moves the sessions of a reservation to the instance that took it over (a standby keeps
    /// its own id).
    pub fn rebind(&mut self, reserved: u64, id: u64) {
        for session in self.open.values_mut() {
            if session.primary == Some(reserved) {
                session.primary = Some(id);
            }
        }
        if let Some(waiters) = self.bound.remove(&reserved) {
            self.bound.entry(id).or_default().extend(waiters);
        }
    }

    /// Ends `key`'s session, deleting its state; true if it existed.
    pub fn end(&mut self, live: &mut HashMap<u64, LiveInstance>, key: &SessionKey) -> bool {
        let Some(session) = self.open.remove(key) else {
            return false;
        };
        session.log.remove();
        if let Some(live) = session.primary.and_then(|p| live.get_mut(&p)) {
            live.sessions = live.sessions.saturating_sub(1);
        }
        true
    }

    /// Marks the logs of sessions used since `since` as used now (their file's modification
    /// time), so that the logs of live sessions are not taken for expired ones after a
    /// restart.
    pub fn touch_used(&self, since: Instant) {
        let now = SystemTime::now();
        for session in self.open.values() {
            if session.last_used >= since {
                session.log.touch(now);
            }
        }
    }

    /// Ends the sessions idle beyond their TTL.
    pub fn expire(&mut self, live: &mut HashMap<u64, LiveInstance>, now: Instant) {
        let expired: Vec<SessionKey> = self
            .open
            .iter()
            .filter(|(_, s)| now.duration_since(s.last_used) >= s.ttl)
            .map(|(k, _)| k.clone())
            .collect();
        for key in expired {
            self.end(live, &key);
        }
    }

    /// Ends every session of `function` (it was deleted).
    pub fn end_all(&mut self, live: &mut HashMap<u64, LiveInstance>, function: &str) {
        let keys: Vec<SessionKey> = self
            .open
            .keys()
            .filter(|(f, _)| f == function)
            .cloned()
            .collect();
        for key in keys {
            self.end(live, &key);
        }
    }

    /// The ids of `function`'s open sessions.
    pub fn ids(&self, function: &str) -> Vec<String> {
        self.open
            .keys()
            .filter(|(f, _)| f == function)
            .map(|(_, id)| id.clone())
            .collect()
    }

    /// The sessions of `function`, most recently used first.
    pub fn list(
        &self,
        live: &HashMap<u64, LiveInstance>,
        function: &str,
        now: Instant,
    ) -> Vec<SessionStatus> {
        let mut sessions: Vec<(Instant, SessionStatus)> = self
            .open
            .iter()
            .filter(|((f, _), _)| f == function)
            .map(|((_, id), s)| {
                let (keys, bytes, log_bytes) = s.log.sizes();
                (
                    s.last_used,
                    SessionStatus {
                        session: id.clone(),
                        instance: s.primary.filter(|p| live.contains_key(p)),
                        requests: s.requests,
                        keys,
                        bytes,
                        log_bytes,
                        age_s: now.duration_since(s.created).as_secs_f64(),
                        idle_s: now.duration_since(s.last_used).as_secs_f64(),
                    },
                )
            })
            .collect();
        sessions.sort_by_key(|s| std::cmp::Reverse(s.0));
        sessions.into_iter().map(|(_, s)| s).collect()
    }
}

/// Opens the log of a session in `dir` (the function's session directory): blocking I/O.
pub(super) fn open(dir: &Path, session: &str) -> std::io::Result<Arc<SessionLog>> {
    SessionLog::open(dir, session).map(Arc::new)
}

/// Deletes the logs in a function's session directory that no session holds open and that
/// nobody wrote or used for `ttl` (sessions that expired while kiln was down): blocking I/O.
pub(super) fn sweep(dir: &Path, open: &[String], ttl: Duration) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let now = SystemTime::now();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if open.contains(&name) {
            continue;
        }
        let idle = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|modified| now.duration_since(modified).ok());
        if idle.is_some_and(|idle| idle >= ttl) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}
