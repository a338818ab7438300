//! Resource limits through cgroups, v1 (one hierarchy per controller) and v2 (unified).
//!
//! kiln creates one cgroup per instance under a `kiln` parent. The memory limit can be changed
//! at any time, which is the seam for per-invocation resizing.

use std::fs;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::CgroupError;

/// The limits of one instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub memory_bytes: u64,
    pub pids_max: u64,
    /// Relative CPU share, on cgroup v1's `cpu.shares` scale (2..=262144, 1024 = default).
    pub cpu_shares: u64,
    /// The cgroup runs as SCHED_IDLE (`cpu.idle`, Linux ≥ 5.15): only on CPU time no one else
    /// wants, and preempted at once when another task wakes.
    pub cpu_idle: bool,
}

#[derive(Debug, Clone)]
enum Layout {
    V1 {
        memory: PathBuf,
        pids: PathBuf,
        cpu: PathBuf,
    },
    V2 {
        root: PathBuf,
    },
}

/// Creates and finds the cgroups of kiln's instances.
/// Whether a cgroup hierarchy is mounted with `favordynmods` (which sets it kernel-wide).
fn favordynmods_mounted() -> bool {
    let Ok(mounts) = fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    mounts.lines().any(|line| {
        // `... - FSTYPE SOURCE SUPER_OPTIONS`
        let mut after = line.split(" - ").nth(1).unwrap_or("").split_whitespace();
        let fstype = after.next().unwrap_or("");
        let options = after.nth(1).unwrap_or("");
        fstype.starts_with("cgroup") && options.split(',').any(|o| o == "favordynmods")
    })
}

#[derive(Debug, Clone)]
pub struct CgroupManager {
    layout: Layout,
}

impl CgroupManager {
    /// Detects the cgroup layout of this host and creates kiln's parent cgroups (named `parent`).
    pub fn detect(parent: &str) -> Result<Self, CgroupError> {
        Self::detect_at(Path::new("/sys/fs/cgroup"), parent)
    }

    fn detect_at(base: &Path, parent: &str) -> Result<Self, CgroupError> {
        let unified = base.join("cgroup.controllers");
        if let Ok(controllers) = fs::read_to_string(&unified) {
            let has = |c: &str| controllers.split_whitespace().any(|x| x == c);
            if has("memory") && has("pids") {
                // Children can only use the controllers their parent delegates to them: every
                // level from the mount down to kiln's parent delegates them.
                let delegate = |dir: &Path| -> Result<(), CgroupError> {
                    let control = dir.join("cgroup.subtree_control");
                    for controller in ["+memory", "+pids", "+cpu"] {
                        // cpu may be missing on some hosts; memory and pids are required.
                        let result = fs::write(&control, controller);
                        if controller != "+cpu" {
                            result.map_err(|e| CgroupError::Io(control.clone(), e))?;
                        }
                    }
                    Ok(())
                };
                let root = make_levels(base, parent, delegate)?;
                delegate(&root)?;
                return Ok(Self {
                    layout: Layout::V2 { root },
                });
            }
        }
        let v1 = |controller: &str| -> Result<PathBuf, CgroupError> {
            let hierarchy = base.join(controller);
            if !hierarchy.join("cgroup.procs").exists() {
                return Err(CgroupError::Unsupported(format!(
                    "no cgroup v1 `{controller}` hierarchy at {} and no cgroup v2 memory controller",
                    hierarchy.display()
                )));
            }
            make_levels(&hierarchy, parent, |dir| {
                // Without hierarchical accounting a parent limit would not cover its children.
                if controller == "memory" {
                    let _ = fs::write(dir.join("memory.use_hierarchy"), "1");
                }
                Ok(())
            })
        };
        let memory = v1("memory")?;
        // Without hierarchical accounting a parent limit would not cover its children.
        let _ = fs::write(memory.join("memory.use_hierarchy"), "1");
        Ok(Self {
            layout: Layout::V1 {
                memory,
                pids: v1("pids")?,
                cpu: v1("cpu")?,
            },
        })
    }

    /// Makes moving a process into a cgroup cheap on the whole host, and says whether it is.
    ///
    /// Every move takes the kernel's `cgroup_threadgroup_rwsem` for writing, which waits for an
    /// RCU grace period (6–11 ms measured on cgroup v1 here: the cost of a fork's move into its
    /// own cgroup, and of every sandbox's) unless the kernel favours dynamic modifications
    /// (`favordynmods`, Linux ≥ 6.0), at the price of a few atomic operations more on each fork
    /// and exit. The setting is the kernel's, not a hierarchy's: any hierarchy mounted with it
    /// turns it on. Unless one already is, kiln mounts an empty, named cgroup v1 hierarchy with it
    /// at `dir` (on v1 and v2 hosts alike, so the host's own mounts are never changed) and leaves
    /// it mounted for the next kiln.
    pub fn favor_dynamic_moves(dir: &Path) -> Result<(), CgroupError> {
        if favordynmods_mounted() {
            return Ok(());
        }
        mkdir(dir)?;
        let c = |s: &str| std::ffi::CString::new(s).expect("no NUL");
        let (source, target) = (c("cgroup"), c(&dir.to_string_lossy()));
        let (fstype, options) = (c("cgroup"), c("none,name=kiln-dynmods,favordynmods"));
        // SAFETY: every pointer is a NUL-terminated string that outlives the call; mount(2)
        // only reads them.
        let rc = unsafe {
            libc::mount(
                source.as_ptr(),
                target.as_ptr(),
                fstype.as_ptr(),
                0,
                options.as_ptr().cast(),
            )
        };
        if rc != 0 {
            let error = io::Error::last_os_error();
            // Another kiln mounted it meanwhile.
            if favordynmods_mounted() {
                return Ok(());
            }
            return Err(CgroupError::Unsupported(format!(
                "mounting a cgroup hierarchy with favordynmods at {}: {error}",
                dir.display()
            )));
        }
        Ok(())
    }

    /// Moves this process (every thread) into the cgroup `name` beside kiln's parent cgroup,
    /// creating it: with `--cgroup-parent`, kiln itself and its instances are then under one
    /// parent, whose limits an operator sets (v2 allows no process in a cgroup that delegates
    /// controllers, hence a sibling rather than the parent itself).
    pub fn enter_sibling(&self, name: &str) -> Result<(), CgroupError> {
        let parents: Vec<&PathBuf> = match &self.layout {
            Layout::V1 { memory, pids, cpu } => vec![memory, pids, cpu],
            Layout::V2 { root } => vec![root],
        };
        for parent in parents {
            let dir = parent.with_file_name(name);
            mkdir(&dir)?;
            let procs = dir.join("cgroup.procs");
            fs::write(&procs, std::process::id().to_string())
                .map_err(|e| CgroupError::Io(procs, e))?;
        }
        Ok(())
    }

    /// "v1" or "v2", for status output.
    pub fn version(&self) -> &'static str {
        match self.layout {
            Layout::V1 { .. } => "v1",
            Layout::V2 { .. } => "v2",
        }
    }

    /// Creates the cgroup `name` with `limits`. A stale cgroup of the same name is removed first.
    pub fn create(&self, name: &str, limits: Limits) -> Result<Cgroup, CgroupError> {
        let dirs = match &self.layout {
            Layout::V1 { memory, pids, cpu } => {
                vec![memory.join(name), pids.join(name), cpu.join(name)]
            }
            Layout::V2 { root } => vec![root.join(name)],
        };
        let cgroup = Cgroup {
            v2: matches!(self.layout, Layout::V2 { .. }),
            dirs,
            peak: std::sync::OnceLock::new(),
        };
        for dir in &cgroup.dirs {
            // The parent may have been removed behind kiln's back (an operator cleaning up
            // empty cgroups); recreate it rather than fail every cold start.
            if let Some(parent) = dir.parent().filter(|p| !p.exists()) {
                mkdir(parent)?;
                if cgroup.v2 {
                    for controller in ["+memory", "+pids", "+cpu"] {
                        let _ = fs::write(parent.join("cgroup.subtree_control"), controller);
                    }
                }
            }
            if dir.exists() {
                cgroup.kill_all();
                remove_dir_until(dir, Instant::now() + REMOVE_DEADLINE, || cgroup.kill_all())?;
            }
            mkdir(dir)?;
        }
        cgroup.apply(limits)?;
        Ok(cgroup)
    }

    /// Removes kiln's parent cgroups, once every instance cgroup under them is gone (on
    /// shutdown). A parent that still has children is left alone.
    pub fn remove_parents(&self) {
        let parents: Vec<&PathBuf> = match &self.layout {
            Layout::V1 { memory, pids, cpu } => vec![memory, pids, cpu],
            Layout::V2 { root } => vec![root],
        };
        for parent in parents {
            let _ = fs::remove_dir(parent);
        }
    }

    /// Removes cgroups left behind by a previous run that was killed (their processes are gone).
    pub fn remove_stale(&self) {
        let parents: Vec<&PathBuf> = match &self.layout {
            Layout::V1 { memory, pids, cpu } => vec![memory, pids, cpu],
            Layout::V2 { root } => vec![root],
        };
        for parent in parents {
            let Ok(entries) = fs::read_dir(parent) else {
                continue;
            };
            for entry in entries.flatten() {
                if entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                    let stale = Cgroup {
                        peak: std::sync::OnceLock::new(),
                        v2: matches!(self.layout, Layout::V2 { .. }),
                        dirs: vec![entry.path()],
                    };
                    stale.kill_all();
                    let deadline = Instant::now() + REMOVE_DEADLINE;
                    let _ = remove_dir_until(&entry.path(), deadline, || stale.kill_all());
                }
            }
        }
    }
}

/// One instance's cgroup (one directory per controller on v1).
#[derive(Debug)]
pub struct Cgroup {
    v2: bool,
    dirs: Vec<PathBuf>,
    /// The peak-memory file, kept open: it is reset and read on every invocation, and a
    /// positioned read or write is one system call where a path lookup would be three.
    peak: std::sync::OnceLock<Option<fs::File>>,
}

impl Cgroup {
    fn memory_dir(&self) -> &Path {
        &self.dirs[0]
    }

    /// The `cgroup.procs` files a process writes its pid to in order to join.
    pub fn procs_files(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|d| d.join("cgroup.procs")).collect()
    }

    fn write(&self, dir: &Path, file: &str, value: &str) -> Result<(), CgroupError> {
        let path = dir.join(file);
        fs::write(&path, value).map_err(|e| CgroupError::Io(path, e))
    }

    /// Sets every limit. Safe on a running instance: a warm standby takes its function's size so.
    pub fn apply(&self, limits: Limits) -> Result<(), CgroupError> {
        self.set_memory_limit(limits.memory_bytes)?;
        if self.v2 {
            let dir = &self.dirs[0];
            self.write(dir, "pids.max", &limits.pids_max.to_string())?;
            // Swap would let an instance exceed its memory size silently.
            let _ = self.write(dir, "memory.swap.max", "0");
            // cpu may be missing on some hosts.
            let _ = self.set_cpu(limits.cpu_shares, limits.cpu_idle);
        } else {
            self.write(&self.dirs[1], "pids.max", &limits.pids_max.to_string())?;
            let _ = self.write(self.memory_dir(), "memory.swappiness", "0");
            self.set_cpu(limits.cpu_shares, limits.cpu_idle)?;
        }
        Ok(())
    }

    /// Sets the CPU share and idleness alone (v1 `cpu.shares`; v2 `cpu.weight`, converted; both
    /// `cpu.idle`, where the kernel has it): how an instance made ahead of demand at the lowest
    /// priority joins the requests' when it is taken.
    pub fn set_cpu(&self, shares: u64, idle: bool) -> Result<(), CgroupError> {
        let shares = shares.clamp(2, 262_144);
        let dir = if self.v2 {
            &self.dirs[0]
        } else {
            &self.dirs[2]
        };
        // Not idle first: a weight written while idle is ignored by some kernels until then.
        if !idle && dir.join("cpu.idle").exists() {
            self.write(dir, "cpu.idle", "0")?;
        }
        if self.v2 {
            // systemd's conversion from v1 shares to v2 weights.
            let weight = 1 + (shares - 2) * 9999 / 262_142;
            self.write(dir, "cpu.weight", &weight.to_string())?;
        } else {
            self.write(dir, "cpu.shares", &shares.to_string())?;
        }
        if idle && dir.join("cpu.idle").exists() {
            self.write(dir, "cpu.idle", "1")?;
        }
        Ok(())
    }

    /// Sets the memory limit. Safe to call while the instance runs: this is how an instance is resized.
    pub fn set_memory_limit(&self, bytes: u64) -> Result<(), CgroupError> {
        let dir = self.memory_dir();
        if self.v2 {
            return self.write(dir, "memory.max", &bytes.to_string());
        }
        // v1 requires memory.limit <= memsw.limit at every step, so the order depends on direction.
        let memsw = dir.join("memory.memsw.limit_in_bytes");
        let current = read_u64(&dir.join("memory.limit_in_bytes")).unwrap_or(u64::MAX);
        if memsw.exists() && bytes > current {
            self.write(dir, "memory.memsw.limit_in_bytes", &bytes.to_string())?;
            self.write(dir, "memory.limit_in_bytes", &bytes.to_string())
        } else {
            self.write(dir, "memory.limit_in_bytes", &bytes.to_string())?;
            if memsw.exists() {
                self.write(dir, "memory.memsw.limit_in_bytes", &bytes.to_string())?;
            }
            Ok(())
        }
    }

    /// Memory in use now, in bytes.
    pub fn memory_current(&self) -> u64 {
        let file = if self.v2 {
            "memory.current"
        } else {
            "memory.usage_in_bytes"
        };
        read_u64(&self.memory_dir().join(file)).unwrap_or(0)
    }

    /// The highest memory use since the last [`Cgroup::reset_peak`], in bytes.
    pub fn memory_peak(&self) -> u64 {
        let mut buf = [0u8; 32];
        match self.peak_file().map(|f| f.read_at(&mut buf, 0)) {
            Some(Ok(n)) => std::str::from_utf8(&buf[..n])
                .ok()
                .and_then(|t| t.trim().parse().ok())
                .unwrap_or_else(|| self.memory_current()),
            _ => self.memory_current(),
        }
    }

    fn peak_file(&self) -> Option<&fs::File> {
        self.peak
            .get_or_init(|| {
                let name = if self.v2 {
                    "memory.peak"
                } else {
                    "memory.max_usage_in_bytes"
                };
                fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(self.memory_dir().join(name))
                    .ok()
            })
            .as_ref()
    }

    /// Starts a new peak measurement window (one per invocation).
    pub fn reset_peak(&self) {
        // Kernels before 6.12 cannot reset memory.peak on v2; the peak then covers the instance's life.
        if let Some(file) = self.peak_file() {
            let _ = file.write_at(b"0", 0);
        }
    }

    /// How many processes of this cgroup the kernel's OOM killer has killed.
    pub fn oom_kills(&self) -> u64 {
        let file = if self.v2 {
            "memory.events"
        } else {
            "memory.oom_control"
        };
        let text = fs::read_to_string(self.memory_dir().join(file)).unwrap_or_default();
        text.lines()
            .find_map(|l| l.strip_prefix("oom_kill "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    }

    /// The processes in the cgroup (host pids).
    pub fn pids(&self) -> Vec<u32> {
        fs::read_to_string(self.dirs[0].join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }

    /// Moves a process (and its threads) into this cgroup. Memory it already uses stays charged
    /// where it was.
    pub fn adopt(&self, pid: u32) -> Result<(), CgroupError> {
        for dir in &self.dirs {
            self.write(dir, "cgroup.procs", &pid.to_string())?;
        }
        Ok(())
    }

    /// Sends SIGKILL to every process in the cgroup.
    pub fn kill_all(&self) {
        if self.v2 && fs::write(self.dirs[0].join("cgroup.kill"), "1").is_ok() {
            return;
        }
        for dir in &self.dirs {
            let procs = fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
            for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                let _ = crate::sys::kill(pid, libc::SIGKILL);
            }
        }
    }

    /// Kills what is left and removes the cgroup directories. Blocks until the kernel has let the
    /// last process go (or [`REMOVE_DEADLINE`] passes); call it off the async runtime.
    pub fn remove(&self) -> Result<(), CgroupError> {
        self.kill_all();
        let deadline = Instant::now() + REMOVE_DEADLINE;
        // Every directory is tried even if one fails, so that as little as possible is left.
        let mut result = Ok(());
        for dir in &self.dirs {
            if let Err(e) = remove_dir_until(dir, deadline, || self.kill_all()) {
                result = Err(e);
            }
        }
        result
    }
}

/// Creates `relative` (one or more `/`-separated levels) under `base`, calling `each` on every
/// directory before the level below it is created (`base` itself first); the last level.
fn make_levels(
    base: &Path,
    relative: &str,
    mut each: impl FnMut(&Path) -> Result<(), CgroupError>,
) -> Result<PathBuf, CgroupError> {
    let mut dir = base.to_path_buf();
    for level in relative.split('/').filter(|l| !l.is_empty()) {
        each(&dir)?;
        dir.push(level);
        mkdir(&dir)?;
    }
    Ok(dir)
}

fn mkdir(dir: &Path) -> Result<(), CgroupError> {
    match fs::create_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(CgroupError::Io(dir.to_path_buf(), e)),
    }
}

/// How long removing a cgroup may take: the kernel tears a killed process down asynchronously, and
/// a thousand of them (a fork bomb hitting `pids.max`) take a while on a busy host.
const REMOVE_DEADLINE: Duration = Duration::from_secs(15);

/// Removes `dir`. A cgroup can only be removed once the kernel has finished tearing down its last
/// process, shortly after the SIGKILL; `kill` runs between attempts, since a process may have
/// forked after the last kill.
fn remove_dir_until(dir: &Path, deadline: Instant, kill: impl Fn()) -> Result<(), CgroupError> {
    let mut delay = Duration::from_millis(1);
    loop {
        match fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) if Instant::now() >= deadline => {
                return Err(CgroupError::Io(dir.to_path_buf(), e))
            }
            Err(_) => {
                kill();
                std::thread::sleep(delay);
                delay = (delay * 2).min(Duration::from_millis(100));
            }
        }
    }
}

fn read_u64(path: &Path) -> Option<u64> {
    fs::read_to_string(path).ok()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v2_layout_is_preferred_when_it_has_memory() {
        let base = std::env::temp_dir().join(format!("kiln-cg-{}", std::process::id()));
        fs::create_dir_all(&base).unwrap();
        fs::write(base.join("cgroup.controllers"), "cpu io memory pids").unwrap();
        let manager = CgroupManager::detect_at(&base, "kiln").unwrap();
        assert_eq!(manager.version(), "v2");
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn a_nested_parent_delegates_the_controllers_at_every_level() {
        let base = std::env::temp_dir().join(format!("kiln-cg-nest-{}", std::process::id()));
        fs::create_dir_all(&base).unwrap();
        fs::write(base.join("cgroup.controllers"), "cpu io memory pids").unwrap();
        let manager = CgroupManager::detect_at(&base, "ops/node-1/kiln").unwrap();
        let Layout::V2 { root } = &manager.layout else {
            panic!("v2 expected")
        };
        assert_eq!(root, &base.join("ops/node-1/kiln"));
        // A plain directory keeps only the last write: each level was told to delegate, the
        // cpu controller last.
        for level in ["", "ops", "ops/node-1", "ops/node-1/kiln"] {
            let control = fs::read_to_string(base.join(level).join("cgroup.subtree_control"));
            assert_eq!(control.unwrap(), "+cpu", "level {level:?}");
        }
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn a_nested_v1_parent_is_made_in_every_hierarchy() {
        let base = std::env::temp_dir().join(format!("kiln-cg-nest1-{}", std::process::id()));
        for controller in ["memory", "pids", "cpu"] {
            fs::create_dir_all(base.join(controller)).unwrap();
            fs::write(base.join(controller).join("cgroup.procs"), "").unwrap();
        }
        let manager = CgroupManager::detect_at(&base, "ops/node-1/kiln").unwrap();
        assert_eq!(manager.version(), "v1");
        for controller in ["memory", "pids", "cpu"] {
            assert!(
                base.join(controller).join("ops/node-1/kiln").is_dir(),
                "{controller}"
            );
        }
        assert_eq!(
            fs::read_to_string(base.join("memory/ops/node-1/memory.use_hierarchy")).unwrap(),
            "1"
        );
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn removal_retries_and_kills_until_its_deadline() {
        let base = std::env::temp_dir().join(format!("kiln-cg-rm-{}", std::process::id()));
        fs::create_dir_all(base.join("busy")).unwrap();
        fs::write(base.join("busy/task"), "").unwrap();
        let kills = std::cell::Cell::new(0);
        let deadline = Instant::now() + Duration::from_millis(50);
        let err = remove_dir_until(&base.join("busy"), deadline, || kills.set(kills.get() + 1));
        assert!(err.is_err());
        assert!(kills.get() >= 2, "kill runs between attempts");
        // A directory that becomes removable during the retries is removed; a missing one is fine.
        let later = Instant::now() + REMOVE_DEADLINE;
        let emptied = || {
            let _ = fs::remove_file(base.join("busy/task"));
        };
        remove_dir_until(&base.join("busy"), later, emptied).unwrap();
        remove_dir_until(&base.join("busy"), later, || {}).unwrap();
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn missing_hierarchies_are_a_clear_error() {
        let base = std::env::temp_dir().join(format!("kiln-cg-none-{}", std::process::id()));
        fs::create_dir_all(&base).unwrap();
        let err = CgroupManager::detect_at(&base, "kiln").unwrap_err();
        assert!(err.to_string().contains("memory"), "{err}");
        fs::remove_dir_all(&base).unwrap();
    }
}
