//! What the node reports of itself (`kiln status`, `/kiln/v1/status`): its instances with their
//! memory, its snapshots (fork servers, standbys, wasm modules) and its memory budget.

use std::collections::BTreeMap;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::snapshots::SnapshotSlot;
use super::{Inner, InstanceState, StartPath};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InstanceStatus {
    pub id: u64,
    pub function: String,
    pub revision: u64,
    pub state: InstanceState,
    pub start_path: StartPath,
    pub age_s: f64,
    pub memory_limit_mb: u32,
    pub memory_used_bytes: u64,
    /// The host pid of the instance's runtime process, where kiln knows it (forks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// Memory the process shares with its zygote and what is its own, from `smaps_rollup`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sharing: Option<MemorySharing>,
    /// Sessions whose primary this instance is.
    #[serde(default)]
    pub sessions: u32,
}

/// How much of a process's memory is shared: RSS counts shared pages in full, PSS divides them
/// among the processes that map them, and USS counts only the process's private pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemorySharing {
    pub rss_bytes: u64,
    pub pss_bytes: u64,
    pub uss_bytes: u64,
}

impl MemorySharing {
    /// Reads `/proc/PID/smaps_rollup`.
    pub fn of(pid: u32) -> Option<Self> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
        let field = |name: &str| -> u64 {
            text.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
                .unwrap_or(0)
                * 1024
        };
        Some(Self {
            rss_bytes: field("Rss:"),
            pss_bytes: field("Pss:"),
            uss_bytes: field("Private_Clean:") + field("Private_Dirty:"),
        })
    }
}

/// A function-specific snapshot kept by the node (today: a Python fork server).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SnapshotStatus {
    pub function: String,
    /// The id of the zygote's instance (its cgroup is `i<id>`), once there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<u64>,
    pub revision: u64,
    pub kind: String,
    /// `building`, `ready` or `failed`.
    pub state: String,
    pub memory_bytes: u64,
    pub forks: u64,
    pub build_ms: f64,
    pub idle_s: f64,
    /// The fork server's host pid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// Real requests (an app's recent ones) the fork server replayed in its warm-up.
    #[serde(default)]
    pub replayed: usize,
    /// A fork server's spare fork (made ahead of demand): its instance id, and whether it is
    /// ready or still being forked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spare: Option<u64>,
    #[serde(default)]
    pub spare_ready: bool,
    /// Instances made ahead of demand for the function (spare forks; standbys, the standby
    /// snapshot included): how many its demand asks for, how many are ready and being made,
    /// the memory the ready ones hold beside `memory_bytes`, and how long the last one took
    /// to make.
    #[serde(default)]
    pub standbys_target: usize,
    #[serde(default)]
    pub standbys_ready: usize,
    #[serde(default)]
    pub standbys_making: usize,
    #[serde(default)]
    pub standbys_memory_bytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refill_ms: Option<f64>,
    /// The instance ids of the spares and standbys beside the snapshot, ready and being made.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub standby_ids: Vec<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl SnapshotStatus {
    /// A snapshot of `function` with nothing measured yet.
    pub fn new(function: &str, kind: &str, state: &str, revision: u64) -> Self {
        Self {
            function: function.to_string(),
            id: None,
            revision,
            kind: kind.into(),
            state: state.into(),
            memory_bytes: 0,
            forks: 0,
            build_ms: 0.0,
            idle_s: 0.0,
            pid: None,
            replayed: 0,
            spare: None,
            spare_ready: false,
            standbys_target: 0,
            standbys_ready: 0,
            standbys_making: 0,
            standbys_memory_bytes: 0,
            refill_ms: None,
            standby_ids: Vec::new(),
            error: None,
        }
    }
}

/// One size of `/tmp` disks in the pool.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TmpDiskCount {
    pub ready: usize,
    pub wanted: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeStatus {
    pub instances: Vec<InstanceStatus>,
    #[serde(default)]
    pub snapshots: Vec<SnapshotStatus>,
    pub memory_budget_mb: u64,
    pub memory_reserved_mb: u64,
    /// Disk used by snapshots kept across restarts (compiled and pre-initialised wasm modules).
    #[serde(default)]
    pub snapshot_disk_bytes: u64,
    pub cgroup_version: String,
    pub runtimes: Vec<String>,
    /// What sandboxes' `/tmp` is: `disk`, or `tmpfs (…why)` where disks cannot be made.
    #[serde(default)]
    pub tmp: String,
    /// The `/tmp` disks ready per size (MB), and how many of each the pool keeps now.
    #[serde(default)]
    pub tmp_disks: BTreeMap<u32, TmpDiskCount>,
    /// BREAKOUT's fast paths of the node's functions.
    #[serde(default)]
    pub breakout: Vec<super::BreakoutStatus>,
}

impl Inner {
    /// What the node runs and keeps: instances, snapshots, memory.
    pub(super) fn status(&self) -> NodeStatus {
        // Outside the state lock: this reads the cache directory.
        let (wasm_snapshots, snapshot_disk_bytes) = match &self.ctx.wasm {
            Some(host) => (host.status(), host.disk_usage_bytes()),
            None => (Vec::new(), 0),
        };
        let breakout = self.breakouts.status();
        let state = self.state();
        let now = Instant::now();
        let mut instances: Vec<InstanceStatus> = state
            .instances
            .live
            .iter()
            .map(|(id, live)| InstanceStatus {
                id: *id,
                function: live.function.clone(),
                revision: live.revision,
                state: live.state,
                start_path: live.start_path,
                age_s: now.duration_since(live.created).as_secs_f64(),
                memory_limit_mb: live.memory_mb,
                memory_used_bytes: live
                    .cgroup
                    .as_ref()
                    .map(|c| c.memory_current())
                    .unwrap_or(0),
                pid: live.pid,
                sharing: live.pid.and_then(MemorySharing::of),
                sessions: live.sessions,
            })
            .collect();
        let mut snapshots: Vec<SnapshotStatus> = state
            .ahead
            .zygotes
            .iter()
            .map(|(function, slot)| {
                let mut status =
                    SnapshotStatus::new(function, "fork-server", "building", slot.revision());
                match slot {
                    SnapshotSlot::Building { id, .. } => status.id = Some(*id),
                    SnapshotSlot::Ready(z) => {
                        status.state = "ready".into();
                        status.memory_bytes = z.memory_bytes();
                        status.forks = z.forks();
                        status.build_ms = z.build_time.as_secs_f64() * 1000.0;
                        status.idle_s = now.duration_since(z.last_used()).as_secs_f64();
                        status.pid = z.pid;
                        status.id = Some(z.id);
                        status.replayed = z.replayed;
                    }
                    SnapshotSlot::Standby(i, build_time) => {
                        status.kind = "standby".into();
                        status.state = "ready".into();
                        status.memory_bytes = i.cgroup.memory_current();
                        status.build_ms = build_time.as_secs_f64() * 1000.0;
                        status.idle_s = now.duration_since(i.last_used).as_secs_f64();
                        status.id = Some(i.id);
                        status.standbys_ready = 1;
                    }
                    SnapshotSlot::Failed { error, .. } => {
                        status.state = "failed".into();
                        status.error = Some(error.clone());
                    }
                }
                let spec = match slot {
                    SnapshotSlot::Ready(z) => Some(&z.spec),
                    SnapshotSlot::Standby(i, _) => Some(&i.spec),
                    _ => None,
                };
                self.report_made_ahead(&state, function, spec, &mut status);
                status
            })
            .collect();
        // Spares of a function whose standby snapshot was taken (and is not being rebuilt).
        for (function, spares) in &state.ahead.spares {
            if state.ahead.zygotes.contains_key(function) {
                continue;
            }
            let ready = if spares.ready.is_empty() {
                "building"
            } else {
                "ready"
            };
            let mut status = SnapshotStatus::new(function, "standby", ready, spares.spec.revision);
            self.report_made_ahead(&state, function, Some(&spares.spec), &mut status);
            snapshots.push(status);
        }
        for (runtime, pool) in &state.ahead.warm {
            let standby = |state: &str| SnapshotStatus {
                forks: pool.taken,
                ..SnapshotStatus::new(runtime, "runtime-standby", state, 0)
            };
            for id in &pool.starting {
                snapshots.push(SnapshotStatus {
                    id: Some(*id),
                    ..standby("building")
                });
            }
            for instance in &pool.ready {
                snapshots.push(SnapshotStatus {
                    id: Some(instance.id),
                    memory_bytes: instance.cgroup.memory_current(),
                    build_ms: instance.init_duration.as_secs_f64() * 1000.0,
                    idle_s: now.duration_since(instance.created).as_secs_f64(),
                    ..standby("ready")
                });
            }
            if let (true, Some(error)) = (pool.ready.is_empty(), &pool.last_error) {
                snapshots.push(SnapshotStatus {
                    error: Some(error.clone()),
                    ..standby("failed")
                });
            }
        }
        snapshots.extend(wasm_snapshots);
        snapshots.sort_by(|a, b| a.function.cmp(&b.function));
        instances.sort_by(|a, b| a.function.cmp(&b.function).then(a.id.cmp(&b.id)));
        NodeStatus {
            instances,
            snapshots,
            memory_budget_mb: self.config.memory_budget_mb,
            memory_reserved_mb: state.instances.reserved_mb,
            snapshot_disk_bytes,
            cgroup_version: self.ctx.cgroups.version().to_string(),
            runtimes: self.ctx.runtimes.names(),
            tmp: self.ctx.tmp_disks.describe(),
            tmp_disks: self.ctx.tmp_disks.counts(),
            breakout,
        }
    }
}
