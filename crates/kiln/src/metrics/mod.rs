//! Prometheus metrics, exposed at `/metrics`.

pub mod duration;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::agent::NodeStatus;
use duration::DurationHistogram;

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FunctionLabels {
    pub function: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StartLabels {
    pub function: String,
    pub path: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    pub function: String,
    pub state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabels {
    pub function: String,
    pub decision: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FunctionKindLabels {
    pub function: String,
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FunctionOutcomeLabels {
    pub function: String,
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FunctionReasonLabels {
    pub function: String,
    pub reason: String,
}

pub struct Metrics {
    registry: Registry,
    pub invocations: Family<FunctionLabels, Counter>,
    pub errors: Family<FunctionLabels, Counter>,
    pub throttles: Family<FunctionLabels, Counter>,
    pub cold_starts: Family<StartLabels, Counter>,
    pub duration: Family<FunctionLabels, DurationHistogram>,
    pub async_events: Family<OutcomeLabels, Counter>,
    pub async_queue_depth: Gauge,
    pub sized_invocations: Family<FunctionLabels, Counter>,
    pub prediction_retries: Family<FunctionLabels, Counter>,
    /// Invocations by the object cache's admission decision for their objects.
    pub cache_admissions: Family<DecisionLabels, Counter>,
    /// Writes of an invocation's memory limit to its cgroup, on the request's path.
    pub memory_limit_writes: Histogram,
    /// Cluster mode: packages fetched from the shared store (registered only in cluster mode).
    pub code_fetches: Histogram,
    /// Cluster mode: objects the sweep removed from the shared store, by kind.
    pub gc_removed_objects: Family<KindLabels, Counter>,
    /// Cluster mode: their bytes.
    pub gc_removed_bytes: Family<KindLabels, Counter>,
    instances: Family<StateLabels, Gauge>,
    memory: Family<KindLabels, Gauge>,
    snapshots: Family<KindLabels, Gauge>,
    disk: Family<KindLabels, Gauge>,
    standbys: Family<FunctionKindLabels, Gauge>,
    standby_memory: Family<FunctionLabels, Gauge>,
    standby_refill: Family<FunctionLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    breakout_requests: Family<FunctionOutcomeLabels, Counter>,
    breakout_misses: Family<FunctionReasonLabels, Counter>,
    breakout_compile: Family<FunctionLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("kiln");
        let invocations = Family::<FunctionLabels, Counter>::default();
        let errors = Family::<FunctionLabels, Counter>::default();
        let throttles = Family::<FunctionLabels, Counter>::default();
        let cold_starts = Family::<StartLabels, Counter>::default();
        // 50 µs to ~14 min.
        let duration = Family::<FunctionLabels, DurationHistogram>::default();
        let async_events = Family::<OutcomeLabels, Counter>::default();
        let async_queue_depth = Gauge::default();
        let sized_invocations = Family::<FunctionLabels, Counter>::default();
        let prediction_retries = Family::<FunctionLabels, Counter>::default();
        let cache_admissions = Family::<DecisionLabels, Counter>::default();
        // 1 µs to ~1 s.
        let memory_limit_writes = Histogram::new(exponential_buckets(0.000_001, 2.5, 16));
        let instances = Family::<StateLabels, Gauge>::default();
        let memory = Family::<KindLabels, Gauge>::default();
        let snapshots = Family::<KindLabels, Gauge>::default();
        let disk = Family::<KindLabels, Gauge>::default();
        let standbys = Family::<FunctionKindLabels, Gauge>::default();
        let standby_memory = Family::<FunctionLabels, Gauge>::default();
        let standby_refill =
            Family::<FunctionLabels, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
        let breakout_requests = Family::<FunctionOutcomeLabels, Counter>::default();
        let breakout_misses = Family::<FunctionReasonLabels, Counter>::default();
        let breakout_compile =
            Family::<FunctionLabels, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
        registry.register(
            "breakout_requests",
            "Requests of functions with KilnBreakout, by where they ran: fast (the compiled trace), miss (left it for the sandbox), tracing (the tracing instance), ordinary",
            breakout_requests.clone(),
        );
        registry.register(
            "breakout_misses",
            "Fast-path misses by kind",
            breakout_misses.clone(),
        );
        registry.register(
            "breakout_compile_seconds",
            "How long the function's last trace took to compile and load",
            breakout_compile.clone(),
        );
        registry.register(
            "invocations",
            "Invocations that reached a function",
            invocations.clone(),
        );
        registry.register(
            "errors",
            "Invocations that ended in a function error",
            errors.clone(),
        );
        registry.register(
            "throttles",
            "Invocations refused with 429",
            throttles.clone(),
        );
        registry.register(
            "cold_starts",
            "Invocations that started a new instance, by start path",
            cold_starts.clone(),
        );
        registry.register(
            "invocation_duration_seconds",
            "Function run time per invocation",
            duration.clone(),
        );
        registry.register(
            "async_events",
            "Asynchronous invocations by outcome",
            async_events.clone(),
        );
        registry.register(
            "async_queue_depth",
            "Asynchronous invocations waiting in the queue",
            async_queue_depth.clone(),
        );
        registry.register(
            "sized_invocations",
            "Invocations run at a predicted memory limit below their MemorySize",
            sized_invocations.clone(),
        );
        registry.register(
            "prediction_retries",
            "Invocations killed for memory under a predicted limit and retried at MemorySize",
            prediction_retries.clone(),
        );
        registry.register(
            "object_cache_admissions",
            "Invocations by the object cache's decision for their objects: admit or bypass (the function's benefit model), learning (a young model: admitted), or all or none (fixed by the configuration)",
            cache_admissions.clone(),
        );
        registry.register(
            "memory_limit_write_seconds",
            "Time to write an invocation's memory limit to its cgroup, when it changed",
            memory_limit_writes.clone(),
        );
        registry.register(
            "instances",
            "Instances by function and state",
            instances.clone(),
        );
        registry.register(
            "memory_bytes",
            "Node memory: budget, booked by instances, used by instances, held by snapshots",
            memory.clone(),
        );
        registry.register(
            "snapshots",
            "Function snapshots on the node, by state (building, ready, failed)",
            snapshots.clone(),
        );
        registry.register(
            "disk_bytes",
            "Node disk used by snapshots kept across restarts (compiled and pre-initialised wasm modules)",
            disk.clone(),
        );
        registry.register(
            "standbys",
            "Instances made ahead of demand per function (standbys, spare forks): the target its demand sets, ready, being made",
            standbys.clone(),
        );
        registry.register(
            "standby_memory_bytes",
            "Memory held by a function's ready standbys and spare forks",
            standby_memory.clone(),
        );
        registry.register(
            "standby_refill_seconds",
            "How long the last standby or spare fork of a function took to make",
            standby_refill.clone(),
        );
        Self {
            registry,
            invocations,
            errors,
            throttles,
            cold_starts,
            duration,
            async_events,
            async_queue_depth,
            sized_invocations,
            prediction_retries,
            cache_admissions,
            memory_limit_writes,
            // 1 ms to ~2.5 min.
            code_fetches: Histogram::new(exponential_buckets(0.001, 2.5, 14)),
            gc_removed_objects: Family::default(),
            gc_removed_bytes: Family::default(),
            instances,
            memory,
            snapshots,
            disk,
            standbys,
            standby_memory,
            standby_refill,
            breakout_requests,
            breakout_misses,
            breakout_compile,
        }
    }
}

/// One function's series of the per-invocation metrics, bound on first use and then updated
/// without a label lookup (no allocation, no lock of the family's map). A series appears in
/// the exposition only once it is first used, as with `get_or_create`.
#[derive(Default)]
pub struct FunctionSeries {
    labels: FunctionLabels,
    invocations: OnceLock<Counter>,
    errors: OnceLock<Counter>,
    duration: OnceLock<DurationHistogram>,
    sized: OnceLock<Counter>,
    /// The highest Max Memory Used and predicted limit (MB) since the console's history last
    /// read them ([`Self::take_memory`]); 0 for none.
    max_memory_mb: AtomicU64,
    max_limit_mb: AtomicU64,
}

impl FunctionSeries {
    pub fn new(function: &str) -> Self {
        Self {
            labels: Metrics::function(function),
            ..Self::default()
        }
    }

    pub fn invocations(&self, metrics: &Metrics) -> &Counter {
        self.invocations
            .get_or_init(|| metrics.invocations.get_or_create(&self.labels).clone())
    }

    pub fn errors(&self, metrics: &Metrics) -> &Counter {
        self.errors
            .get_or_init(|| metrics.errors.get_or_create(&self.labels).clone())
    }

    pub fn duration(&self, metrics: &Metrics) -> &DurationHistogram {
        self.duration
            .get_or_init(|| metrics.duration.get_or_create(&self.labels).clone())
    }

    /// Notes an invocation's Max Memory Used and the predicted limit it ran at, if any: two
    /// atomic maxima, read and cleared once a second by the console's history.
    pub fn note_memory(&self, used_mb: u64, limit_mb: Option<u32>) {
        self.max_memory_mb.fetch_max(used_mb, Ordering::Relaxed);
        if let Some(limit) = limit_mb {
            self.max_limit_mb
                .fetch_max(u64::from(limit), Ordering::Relaxed);
        }
    }

    /// The highest Max Memory Used and predicted limit noted since the last call (0: none).
    pub fn take_memory(&self) -> crate::history::MemoryPeak {
        crate::history::MemoryPeak {
            used_mb: self.max_memory_mb.swap(0, Ordering::Relaxed),
            limit_mb: self.max_limit_mb.swap(0, Ordering::Relaxed),
        }
    }

    pub fn sized(&self, metrics: &Metrics) -> &Counter {
        self.sized.get_or_init(|| {
            metrics
                .sized_invocations
                .get_or_create(&self.labels)
                .clone()
        })
    }
}

impl Metrics {
    /// kiln's metrics, with the object cache's when there is one.
    pub fn with_object_cache(cache: Option<&crate::objects::cache::CacheMetrics>) -> Self {
        let mut metrics = Self::default();
        crate::objects::traffic().register(&mut metrics.registry);
        if let Some(cache) = cache {
            cache.register(&mut metrics.registry);
        }
        metrics
    }

    /// A function's counters, for the console's history. Only reads: a function never
    /// invoked gets no series from it.
    pub fn counts(&self, function: &str) -> crate::history::Counts {
        let labels = Self::function(function);
        let count =
            |family: &Family<FunctionLabels, Counter>| family.get(&labels).map_or(0, |c| c.get());
        let mut starts = [0; 3];
        for (slot, path) in ["coldest", "warm", "hot"].into_iter().enumerate() {
            let start = StartLabels {
                function: function.to_string(),
                path: path.into(),
            };
            starts[slot] = self.cold_starts.get(&start).map_or(0, |c| c.get());
        }
        crate::history::Counts {
            invocations: count(&self.invocations),
            errors: count(&self.errors),
            throttles: count(&self.throttles),
            starts,
            durations: self
                .duration
                .get(&labels)
                .map_or([0; duration::BUCKETS], |h| h.counts()),
            memory: crate::history::MemoryPeak::default(),
            model: None,
        }
    }

    /// Adds cluster mode's series.
    pub fn with_cluster(mut self) -> Self {
        self.registry.register(
            "cluster_code_fetch_seconds",
            "Packages fetched from the shared store by digest: download, check and extraction",
            self.code_fetches.clone(),
        );
        self.registry.register(
            "cluster_gc_removed_objects",
            "Objects removed from the shared store by the sweep: package (no function uses it), payload (its Event is gone)",
            self.gc_removed_objects.clone(),
        );
        self.registry.register(
            "cluster_gc_removed_bytes",
            "Bytes of the objects removed from the shared store by the sweep, by kind",
            self.gc_removed_bytes.clone(),
        );
        for kind in ["package", "payload"] {
            let labels = KindLabels { kind: kind.into() };
            let _ = self.gc_removed_objects.get_or_create(&labels);
            let _ = self.gc_removed_bytes.get_or_create(&labels);
        }
        self
    }

    pub fn function(name: &str) -> FunctionLabels {
        FunctionLabels {
            function: name.to_string(),
        }
    }

    /// Renders the text exposition format, refreshing the instance gauges from `status`.
    pub fn render(&self, status: &NodeStatus, queue_depth: u64) -> String {
        // The agent counts; the counters here catch up with it.
        for b in &status.breakout {
            for (outcome, n) in &b.requests {
                let counter = self
                    .breakout_requests
                    .get_or_create(&FunctionOutcomeLabels {
                        function: b.function.clone(),
                        outcome: outcome.clone(),
                    });
                counter.inc_by(n.saturating_sub(counter.get()));
            }
            for (reason, n) in &b.misses {
                let counter = self.breakout_misses.get_or_create(&FunctionReasonLabels {
                    function: b.function.clone(),
                    reason: reason.clone(),
                });
                counter.inc_by(n.saturating_sub(counter.get()));
            }
            if let Some(seconds) = b.compile_seconds {
                self.breakout_compile
                    .get_or_create(&FunctionLabels {
                        function: b.function.clone(),
                    })
                    .set(seconds);
            }
        }
        self.instances.clear();
        for instance in &status.instances {
            self.instances
                .get_or_create(&StateLabels {
                    function: instance.function.clone(),
                    state: instance.state.as_str().into(),
                })
                .inc();
        }
        let used: u64 = status.instances.iter().map(|i| i.memory_used_bytes).sum();
        let mb = |v: u64| (v * 1024 * 1024) as i64;
        self.memory
            .get_or_create(&KindLabels {
                kind: "budget".into(),
            })
            .set(mb(status.memory_budget_mb));
        self.memory
            .get_or_create(&KindLabels {
                kind: "booked".into(),
            })
            .set(mb(status.memory_reserved_mb));
        self.memory
            .get_or_create(&KindLabels {
                kind: "used".into(),
            })
            .set(used as i64);
        self.memory
            .get_or_create(&KindLabels {
                kind: "snapshots".into(),
            })
            .set(
                status
                    .snapshots
                    .iter()
                    .map(|s| s.memory_bytes + s.standbys_memory_bytes)
                    .sum::<u64>() as i64,
            );
        self.disk
            .get_or_create(&KindLabels {
                kind: "snapshots".into(),
            })
            .set(status.snapshot_disk_bytes as i64);
        self.snapshots.clear();
        self.standbys.clear();
        self.standby_memory.clear();
        self.standby_refill.clear();
        for snapshot in &status.snapshots {
            if snapshot.standbys_target > 0 || snapshot.standbys_ready > 0 {
                for (kind, n) in [
                    ("target", snapshot.standbys_target),
                    ("ready", snapshot.standbys_ready),
                    ("making", snapshot.standbys_making),
                ] {
                    self.standbys
                        .get_or_create(&FunctionKindLabels {
                            function: snapshot.function.clone(),
                            kind: kind.into(),
                        })
                        .set(n as i64);
                }
                let function = FunctionLabels {
                    function: snapshot.function.clone(),
                };
                self.standby_memory
                    .get_or_create(&function)
                    .set(snapshot.standbys_memory_bytes as i64);
                if let Some(ms) = snapshot.refill_ms {
                    self.standby_refill
                        .get_or_create(&function)
                        .set(ms / 1000.0);
                }
            }
            self.snapshots
                .get_or_create(&KindLabels {
                    kind: snapshot.state.clone(),
                })
                .inc();
        }
        self.async_queue_depth.set(queue_depth as i64);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }
}
