//! Sandboxes' `/tmp`: a disk of the function's `EphemeralStorage` size each (kiln-sandbox's
//! `tmpdisk.rs`), taken from a pool made ahead of need so that a start pays no `mkfs`.
//!
//! The pool keeps disks of Lambda's default size (512 MB) always, and one of every other size a
//! function asked for within the last [`REMEMBER`]; of each, as many as the largest burst of
//! recent takes drew before the pool caught up (decayed as a function's peak concurrency is,
//! `start/demand.rs`), up to [`READY_MAX`]. A start takes one and wakes the pool's own thread,
//! which tops it up one disk at a time; a start that finds none makes its own (an `mkfs`,
//! about 50 ms). A disk is never handed out twice: each is formatted fresh, and goes
//! with its sandbox. Where disks cannot be made (no loop devices, as in many containers) `/tmp`
//! is a tmpfs counted against the instance's memory, as before, with a warning at start and in
//! `kiln status`.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kiln_sandbox::{TmpDisk, TmpDisks};

use super::start::demand::Demand;
use crate::sync::LockExt;

/// Lambda's default `EphemeralStorage`, and so the size most starts ask for.
const DEFAULT_MB: u32 = 512;
/// Disks of the default size kept ready: a burst's coldest starts, zygotes and standbys take
/// them; each is a sparse image of a few hundred KB and a loop device.
const READY_DEFAULT: usize = 4;
/// How long a size another function asked for keeps one disk ready.
const REMEMBER: Duration = Duration::from_secs(600);
/// The most disks of one size kept ready, however large a burst was.
const READY_MAX: usize = 32;
/// How long a burst's size is held before it decays (as a function's peak concurrency).
const BURST_WINDOW: Duration = Duration::from_secs(600);

/// What the pool knows of one size.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Counts {
    ready: usize,
    making: usize,
    /// How long ago a start last asked for this size.
    since_asked: Option<Duration>,
    /// How many a recent burst drew before the pool caught up, decayed.
    burst: usize,
}

/// What the pool should do for one size: make `make` more disks, or let `surplus` ready ones go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Make(usize),
    Drop(usize),
}

/// How many disks of a size to keep ready: the default size's floor, or one of another size
/// while it is asked for, and as many as a recent burst drew, up to [`READY_MAX`].
fn wanted(size_mb: u32, c: &Counts) -> usize {
    let floor = if size_mb == DEFAULT_MB {
        READY_DEFAULT
    } else if c.since_asked.is_some_and(|d| d < REMEMBER) {
        1
    } else {
        return 0;
    };
    c.burst.clamp(floor, READY_MAX.max(floor))
}

/// The pool's decision for every size it knows: pure, over its counts.
fn plan(counts: &BTreeMap<u32, Counts>) -> BTreeMap<u32, Step> {
    let sizes = counts.keys().copied().chain(std::iter::once(DEFAULT_MB));
    let mut steps = BTreeMap::new();
    for size in sizes {
        let c = counts.get(&size).copied().unwrap_or_default();
        let want = wanted(size, &c);
        if c.ready + c.making < want {
            steps.insert(size, Step::Make(want - c.ready - c.making));
        } else if c.ready > want {
            steps.insert(size, Step::Drop(c.ready - want));
        }
    }
    steps
}

#[derive(Default)]
struct PoolState {
    ready: HashMap<u32, Vec<TmpDisk>>,
    making: HashMap<u32, usize>,
    asked: HashMap<u32, Instant>,
    /// Per size, the disks taken since the pool last had all it wanted, and the peak of that.
    drawn: HashMap<u32, usize>,
    bursts: HashMap<u32, Demand>,
    /// A background task is topping the pool up.
    refilling: bool,
}

impl PoolState {
    fn counts(&self, now: Instant) -> BTreeMap<u32, Counts> {
        let sizes = self
            .ready
            .keys()
            .chain(self.making.keys())
            .chain(self.asked.keys());
        sizes
            .map(|size| {
                let counts = Counts {
                    ready: self.ready.get(size).map_or(0, Vec::len),
                    making: self.making.get(size).copied().unwrap_or(0),
                    since_asked: self.asked.get(size).map(|t| now.duration_since(*t)),
                    burst: self
                        .bursts
                        .get(size)
                        .map_or(0, |b| b.predicted(now, BURST_WINDOW)),
                };
                (*size, counts)
            })
            .collect()
    }
}

/// The node's disks for `/tmp`.
pub struct TmpDiskPool {
    maker: Option<Arc<TmpDisks>>,
    /// Why sandboxes get a tmpfs instead, when they do.
    fallback: Mutex<Option<String>>,
    state: Mutex<PoolState>,
    warned: AtomicBool,
    /// Wakes the thread that makes disks (a pending wake-up is enough: it refills until done).
    wake: Mutex<Option<std::sync::mpsc::SyncSender<()>>>,
}

impl TmpDiskPool {
    /// A pool of disks made by `maker`; without one (`Err`: why not), every `/tmp` is a tmpfs.
    pub fn new(maker: Result<TmpDisks, std::io::Error>) -> Arc<Self> {
        let (maker, fallback) = match maker {
            Ok(maker) => (Some(Arc::new(maker)), None),
            Err(e) => (None, Some(e.to_string())),
        };
        let pool = Arc::new(Self {
            maker,
            fallback: Mutex::new(fallback),
            state: Mutex::default(),
            warned: AtomicBool::new(false),
            wake: Mutex::new(None),
        });
        if let Some(maker) = pool.maker.clone() {
            // A thread of its own, so that a start only sends it a wake-up; it holds the pool
            // weakly and ends with it.
            let (wake, woken) = std::sync::mpsc::sync_channel::<()>(1);
            *pool.wake.locked() = Some(wake);
            let weak = Arc::downgrade(&pool);
            let spawned = std::thread::Builder::new()
                .name("kiln-tmp-disks".into())
                .spawn(move || {
                    if let Err(e) = kiln_sandbox::run_this_thread_idle() {
                        tracing::debug!("the /tmp disks' thread keeps its priority: {e}");
                    }
                    while woken.recv().is_ok() {
                        let Some(pool) = weak.upgrade() else { return };
                        pool.refill_loop(&maker);
                    }
                });
            if let Err(e) = spawned {
                tracing::warn!("no thread to make /tmp disks ahead: {e}");
            }
        }
        pool
    }

    /// What `/tmp` is on this node, for `kiln status`: `disk`, or `tmpfs` and why.
    pub fn describe(&self) -> String {
        match &*self.fallback.locked() {
            None => "disk".into(),
            Some(why) => format!("tmpfs (counted against memory: {why})"),
        }
    }

    /// A fresh disk of at least `size_mb` for a new sandbox, or None: `/tmp` is a tmpfs. One
    /// made on the spot is made as SCHED_IDLE when `idle` (for an instance made ahead of demand,
    /// so that making it never takes a CPU from a request).
    pub async fn take(&self, size_mb: u32, idle: bool) -> Option<TmpDisk> {
        let maker = self.maker.clone()?;
        let ready = {
            let mut state = self.state.locked();
            let now = Instant::now();
            state.asked.insert(size_mb, now);
            let drawn = state.drawn.entry(size_mb).or_default();
            *drawn += 1;
            let drawn = *drawn;
            let burst = state.bursts.entry(size_mb).or_default();
            burst.observe(now, drawn, BURST_WINDOW);
            state.ready.get_mut(&size_mb).and_then(Vec::pop)
        };
        self.refill();
        if ready.is_some() {
            return ready;
        }
        let made = if idle {
            // On a thread of its own at SCHED_IDLE: the image, its loop device and its mount too.
            let (tx, rx) = tokio::sync::oneshot::channel();
            let spawned = std::thread::Builder::new()
                .name("kiln-tmp-disk".into())
                .spawn(move || {
                    let _ = kiln_sandbox::run_this_thread_idle();
                    let _ = tx.send(maker.make(size_mb, true));
                });
            match spawned {
                Ok(_) => rx.await.map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            }
        } else {
            tokio::task::spawn_blocking(move || maker.make(size_mb, false))
                .await
                .map_err(|e| e.to_string())
        };
        match made {
            Ok(Ok(disk)) => Some(disk),
            Ok(Err(e)) => {
                self.fall_back(&e.to_string());
                None
            }
            Err(e) => {
                self.fall_back(&e);
                None
            }
        }
    }

    fn fall_back(&self, why: &str) {
        if !self.warned.swap(true, Ordering::SeqCst) {
            tracing::warn!("a sandbox's /tmp is a tmpfs counted against its memory: {why}");
        }
        *self.fallback.locked() = Some(why.to_string());
    }

    /// The disks ready per size and how many of each the pool keeps now (`kiln status`).
    pub fn counts(&self) -> BTreeMap<u32, super::status::TmpDiskCount> {
        let counts = self.state.locked().counts(Instant::now());
        let sizes = counts.keys().copied().chain(std::iter::once(DEFAULT_MB));
        sizes
            .map(|size| {
                let c = counts.get(&size).copied().unwrap_or_default();
                let count = super::status::TmpDiskCount {
                    ready: c.ready,
                    wanted: wanted(size, &c),
                };
                (size, count)
            })
            .filter(|(_, c)| c.ready + c.wanted > 0)
            .collect()
    }

    /// Tops the pool up in the background and lets surplus disks go.
    pub fn refill(&self) {
        if self.maker.is_none() {
            return;
        }
        let (surplus, start) = {
            let mut state = self.state.locked();
            let now = Instant::now();
            state
                .asked
                .retain(|_, at| now.duration_since(*at) < REMEMBER);
            let steps = plan(&state.counts(now));
            // A size the pool has all it wants of starts counting a new burst.
            state
                .drawn
                .retain(|size, _| matches!(steps.get(size), Some(Step::Make(_))));
            let mut surplus = Vec::new();
            for (size, step) in &steps {
                if let (Step::Drop(n), Some(ready)) = (*step, state.ready.get_mut(size)) {
                    let n = n.min(ready.len());
                    surplus.extend(ready.drain(..n));
                }
            }
            state.ready.retain(|_, disks| !disks.is_empty());
            let start = !state.refilling && steps.values().any(|s| matches!(s, Step::Make(_)));
            state.refilling |= start;
            (surplus, start)
        };
        // Unmounted outside the lock.
        drop(surplus);
        if start {
            if let Some(wake) = &*self.wake.locked() {
                let _ = wake.try_send(());
            }
        }
    }

    /// Makes disks one at a time until the pool has what it wants.
    fn refill_loop(&self, maker: &TmpDisks) {
        loop {
            let size = {
                let mut state = self.state.locked();
                let next = plan(&state.counts(Instant::now()))
                    .into_iter()
                    .find_map(|(size, step)| matches!(step, Step::Make(_)).then_some(size));
                match next {
                    Some(size) => {
                        *state.making.entry(size).or_default() += 1;
                        size
                    }
                    None => {
                        state.refilling = false;
                        state.drawn.clear();
                        return;
                    }
                }
            };
            let made = maker.make(size, true);
            let mut state = self.state.locked();
            if let Some(n) = state.making.get_mut(&size) {
                *n -= 1;
            }
            state.making.retain(|_, n| *n > 0);
            match made {
                Ok(disk) => {
                    state.ready.entry(size).or_default().push(disk);
                    // A failure that has passed (the data disk was full) no longer shows.
                    *self.fallback.locked() = None;
                }
                Err(e) => {
                    state.refilling = false;
                    drop(state);
                    self.fall_back(&e.to_string());
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(entries: &[(u32, usize, usize, Option<u64>)]) -> BTreeMap<u32, Counts> {
        entries
            .iter()
            .map(|&(size, ready, making, since)| {
                let since_asked = since.map(Duration::from_secs);
                (
                    size,
                    Counts {
                        ready,
                        making,
                        since_asked,
                        burst: 0,
                    },
                )
            })
            .collect()
    }

    #[test]
    fn an_empty_pool_makes_the_default_size() {
        let steps = plan(&BTreeMap::new());
        assert_eq!(
            steps,
            BTreeMap::from([(DEFAULT_MB, Step::Make(READY_DEFAULT))])
        );
    }

    #[test]
    fn disks_being_made_count_as_ready() {
        let steps = plan(&counts(&[(DEFAULT_MB, 1, 2, None)]));
        assert_eq!(steps[&DEFAULT_MB], Step::Make(READY_DEFAULT - 3));
        assert!(plan(&counts(&[(DEFAULT_MB, 2, 2, Some(1))])).is_empty());
    }

    #[test]
    fn another_size_keeps_one_while_it_is_asked_for() {
        let steps = plan(&counts(&[
            (DEFAULT_MB, READY_DEFAULT, 0, None),
            (2048, 0, 0, Some(5)),
        ]));
        assert_eq!(steps, BTreeMap::from([(2048, Step::Make(1))]));
        let fresh = plan(&counts(&[
            (DEFAULT_MB, READY_DEFAULT, 0, None),
            (2048, 1, 0, Some(5)),
        ]));
        assert!(fresh.is_empty());
        // Not asked for within REMEMBER (or forgotten): its disk goes.
        let old = REMEMBER.as_secs() + 1;
        let steps = plan(&counts(&[
            (DEFAULT_MB, READY_DEFAULT, 0, None),
            (2048, 1, 0, Some(old)),
        ]));
        assert_eq!(steps, BTreeMap::from([(2048, Step::Drop(1))]));
        let steps = plan(&counts(&[
            (DEFAULT_MB, READY_DEFAULT, 0, None),
            (4096, 1, 0, None),
        ]));
        assert_eq!(steps, BTreeMap::from([(4096, Step::Drop(1))]));
    }

    #[test]
    fn a_burst_keeps_as_many_ready_as_it_drew_up_to_the_cap() {
        let burst = |size, ready, since_asked, burst| {
            let c = Counts {
                ready,
                making: 0,
                since_asked,
                burst,
            };
            plan(&BTreeMap::from([(size, c)])).get(&size).copied()
        };
        assert_eq!(burst(DEFAULT_MB, 4, None, 12), Some(Step::Make(8)));
        assert_eq!(burst(DEFAULT_MB, 4, None, 2), None, "never below the floor");
        assert_eq!(
            burst(DEFAULT_MB, 0, None, 1000),
            Some(Step::Make(READY_MAX))
        );
        assert_eq!(
            burst(DEFAULT_MB, 12, None, 6),
            Some(Step::Drop(6)),
            "as it decays"
        );
        let asked = Some(Duration::from_secs(5));
        assert_eq!(burst(2048, 0, asked, 3), Some(Step::Make(3)));
        // A size no longer asked for keeps none, whatever its last burst.
        let old = Some(REMEMBER + Duration::from_secs(1));
        assert_eq!(burst(2048, 2, old, 3), Some(Step::Drop(2)));
    }

    #[test]
    fn the_default_size_never_shrinks_below_its_floor() {
        let steps = plan(&counts(&[(DEFAULT_MB, READY_DEFAULT + 2, 0, None)]));
        assert_eq!(steps, BTreeMap::from([(DEFAULT_MB, Step::Drop(2))]));
    }
}
