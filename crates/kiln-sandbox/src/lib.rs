//! Linux sandboxes for kiln's function instances.
//!
//! A sandbox is started in two steps so that the multi-threaded agent never forks itself:
//! [`spawn`] executes `/proc/self/exe` with the hidden argument [`HELPER_ARG`]; that fresh,
//! single-threaded helper ([`helper_main`]) joins the instance's cgroups and network namespace,
//! unshares mount, PID, IPC and UTS namespaces and forks the sandbox's PID 1. PID 1 assembles the
//! root filesystem, forks the runtime process, which drops to an unprivileged uid with no
//! capabilities, `no_new_privs` and a seccomp filter, and then reaps zombies until the runtime
//! exits. Killing the helper kills PID 1 (parent-death signal), and with it the whole PID
//! namespace; the helper itself dies with the agent.
//!
//! This is the crate of kiln's sandbox system calls, and so of its `unsafe`: the calls are in
//! `sys`, plus the `pre_exec` hook of [`spawn`] here (kiln-wasm has one more block, for
//! wasmtime); each block says why it is sound, which clippy checks.

pub mod cgroup;
pub mod netns;
mod root;
pub mod seccomp;
mod slot;
mod sys;
mod tmpdisk;

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::process::Stdio;

use serde::{Deserialize, Serialize};

pub use cgroup::{Cgroup, CgroupManager, Limits};
pub use netns::NetNs;
pub use slot::{CodeSlot, SlotDir};
pub use tmpdisk::{TmpDisk, TmpDisks};

/// Runs the calling thread at SCHED_IDLE from now on: only on CPU time nothing else wants, so
/// that work made ahead of need (a `/tmp` disk's image, loop device and mount) never takes a CPU
/// from a request.
pub fn run_this_thread_idle() -> std::io::Result<()> {
    sys::set_idle_priority()
}

/// The argument that makes the kiln binary act as the sandbox helper.
pub const HELPER_ARG: &str = "__sandbox";
const SPEC_ENV: &str = "KILN_SANDBOX_SPEC";
/// The descriptor number of the control socket inside the sandbox.
pub const CONTROL_FD: i32 = 3;
const NETNS_FD: i32 = 4;
/// The descriptor of the detached mount that becomes `/tmp` (a [`TmpDisk`]), until it is moved.
pub(crate) const TMP_FD: i32 = 5;
/// Exit code of the helper when the sandbox could not be set up.
pub const SETUP_FAILED: i32 = 125;

/// Why a sandbox could not be created.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// the sandbox root could not be assembled
    #[error("sandbox root: {0}")]
    Root(String),
    /// the seccomp filter could not be built or installed
    #[error("seccomp: {0}")]
    Seccomp(String),
    /// a namespace, privilege or process operation failed
    #[error("{0}: {1}")]
    Os(&'static str, std::io::Error),
    /// the helper received an unreadable spec
    #[error("invalid sandbox spec: {0}")]
    Spec(String),
}

/// Why a cgroup operation failed.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// cgroups are not usable on this host
    #[error("cgroups unavailable: {0}")]
    Unsupported(String),
    /// a cgroup file could not be written or read
    #[error("cgroup {0}: {1}")]
    Io(PathBuf, std::io::Error),
}

/// Something to place in the sandbox's root.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub enum Mount {
    /// A bind mount of a host file or directory, read-only unless `writable`.
    Bind {
        source: PathBuf,
        target: PathBuf,
        writable: bool,
        optional: bool,
    },
    /// A read-only bind of a [`CodeSlot`]'s directory: empty at first, it shows what the host
    /// attaches to the slot later ([`CodeSlot::fill`]).
    Slot { source: PathBuf, target: PathBuf },
    /// A symbolic link, e.g. `/bin -> usr/bin` on merged-/usr hosts.
    Symlink { target: PathBuf, points_to: PathBuf },
}

/// A small file written into the root, e.g. `/etc/passwd`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct File {
    pub path: PathBuf,
    pub contents: String,
    pub mode: u32,
}

/// Everything the helper needs to build one sandbox and start its runtime process.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SandboxSpec {
    /// An empty host directory used as the mount point of the new root. All sandboxes can share
    /// one: each mounts over it in its own mount namespace.
    pub root: PathBuf,
    pub mounts: Vec<Mount>,
    pub files: Vec<File>,
    /// The size of a tmpfs `/tmp`; unused when `tmp_disk` is set.
    pub tmp_size_mb: u64,
    /// `/tmp` is the [`TmpDisk`] passed in [`SpawnFds::tmp`], not a tmpfs.
    #[serde(default)]
    pub tmp_disk: bool,
    pub hostname: String,
    pub uid: u32,
    pub gid: u32,
    /// The runtime command; `argv[0]` is an absolute path inside the sandbox.
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: PathBuf,
    /// `cgroup.procs` files the helper joins before anything else.
    pub cgroup_procs: Vec<PathBuf>,
    /// Open files limit of the runtime process.
    pub nofile: u64,
    pub seccomp: bool,
}

/// Descriptors handed to the sandbox.
pub struct SpawnFds<'a> {
    /// Receives the runtime's stdout and stderr (the write end of a pipe).
    pub output: OwnedFd,
    /// Becomes descriptor [`CONTROL_FD`] of the runtime.
    pub control: Option<OwnedFd>,
    /// The network namespace to join; `None` keeps the host's network.
    pub netns: Option<&'a NetNs>,
    /// The file system to move onto `/tmp` (with [`SandboxSpec::tmp_disk`]).
    pub tmp: Option<&'a TmpDisk>,
}

/// Starts a sandbox. The returned child is the helper: it exits with the runtime's exit code (or
/// 128 + signal), or [`SETUP_FAILED`] after writing the reason to the output pipe.
pub fn spawn(spec: &SandboxSpec, fds: SpawnFds<'_>) -> Result<tokio::process::Child, SandboxError> {
    let json = serde_json::to_string(spec).map_err(|e| SandboxError::Spec(e.to_string()))?;
    let stderr = fds
        .output
        .try_clone()
        .map_err(|e| SandboxError::Os("dup output", e))?;
    let control = fds.control.as_ref().map(|fd| fd.as_raw_fd());
    let netns = fds.netns.map(|ns| ns.as_fd_raw());
    let tmp = fds.tmp.map(TmpDisk::raw_fd);
    let mut command = tokio::process::Command::new("/proc/self/exe");
    command
        .arg(HELPER_ARG)
        .env_clear()
        .env(SPEC_ENV, json)
        .stdin(Stdio::null())
        .stdout(Stdio::from(fds.output))
        .stderr(Stdio::from(stderr))
        .kill_on_drop(true);
    // SAFETY: the closure runs between fork and exec and only makes async-signal-safe system
    // calls (fcntl, dup2, prctl) on descriptors that stay open in the parent until `spawn` returns.
    unsafe {
        command.pre_exec(move || {
            // Move the descriptors out of the way first: one of them may already sit on 3, 4 or 5.
            let control = control.map(|fd| sys::dup_above(fd, 10)).transpose()?;
            let netns = netns.map(|fd| sys::dup_above(fd, 10)).transpose()?;
            let tmp = tmp.map(|fd| sys::dup_above(fd, 10)).transpose()?;
            if let Some(fd) = control {
                sys::dup2(fd, CONTROL_FD)?;
            }
            if let Some(fd) = netns {
                sys::dup2(fd, NETNS_FD)?;
            }
            if let Some(fd) = tmp {
                sys::dup2(fd, TMP_FD)?;
            }
            // The helper (and through it the sandbox) must not outlive the agent.
            sys::set_parent_death_signal(libc::SIGKILL)
        });
    }
    let child = command
        .spawn()
        .map_err(|e| SandboxError::Os("spawn the sandbox helper", e))?;
    drop(fds.control);
    Ok(child)
}

impl NetNs {
    fn as_fd_raw(&self) -> i32 {
        use std::os::fd::AsFd;
        self.as_fd().as_raw_fd()
    }
}

/// The entry point of the helper process. Call it first thing in `main` when the first argument
/// is [`HELPER_ARG`], before any thread is started.
pub fn helper_main() -> ! {
    let code = match helper() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("kiln-sandbox: {e}");
            SETUP_FAILED
        }
    };
    sys::exit_now(code)
}

fn helper() -> Result<i32, SandboxError> {
    let json = std::env::var(SPEC_ENV).map_err(|e| SandboxError::Spec(e.to_string()))?;
    let spec: SandboxSpec =
        serde_json::from_str(&json).map_err(|e| SandboxError::Spec(e.to_string()))?;
    let pid = sys::getpid().to_string();
    for procs in &spec.cgroup_procs {
        std::fs::write(procs, &pid).map_err(|e| SandboxError::Os("join cgroup", e))?;
    }
    if std::fs::metadata(format!("/proc/self/fd/{NETNS_FD}")).is_ok() {
        sys::setns(NETNS_FD, libc::CLONE_NEWNET)
            .map_err(|e| SandboxError::Os("join network namespace", e))?;
        sys::close(NETNS_FD);
    }
    // Built before the fork so that a broken filter is reported as a setup failure.
    let filters = if spec.seccomp {
        seccomp::build()?
    } else {
        Vec::new()
    };
    sys::unshare(libc::CLONE_NEWNS | libc::CLONE_NEWPID | libc::CLONE_NEWIPC | libc::CLONE_NEWUTS)
        .map_err(|e| SandboxError::Os("unshare namespaces", e))?;
    match sys::fork().map_err(|e| SandboxError::Os("fork the sandbox init", e))? {
        sys::Fork::Child => init(&spec, &filters),
        sys::Fork::Parent(pid) => {
            // Only the sandbox may hold the control socket, so that its end of file means the
            // runtime is gone; /tmp is the sandbox's too.
            sys::close(CONTROL_FD);
            if spec.tmp_disk {
                sys::close(TMP_FD);
            }
            let (_, status) =
                sys::waitpid(pid).map_err(|e| SandboxError::Os("wait for the sandbox", e))?;
            Ok(sys::exit_code(status))
        }
    }
}

/// PID 1 of the sandbox.
fn init(spec: &SandboxSpec, filters: &[seccompiler::BpfProgram]) -> ! {
    let runtime = (|| -> Result<libc::pid_t, SandboxError> {
        sys::set_parent_death_signal(libc::SIGKILL)
            .map_err(|e| SandboxError::Os("parent death signal", e))?;
        root::assemble(spec)?;
        sys::sethostname(&spec.hostname).map_err(|e| SandboxError::Os("sethostname", e))?;
        match sys::fork().map_err(|e| SandboxError::Os("fork the runtime", e))? {
            sys::Fork::Child => exec_runtime(spec, filters),
            sys::Fork::Parent(pid) => Ok(pid),
        }
    })();
    let runtime = match runtime {
        Ok(pid) => pid,
        Err(e) => {
            eprintln!("kiln-sandbox: {e}");
            sys::exit_now(SETUP_FAILED)
        }
    };
    sys::close(CONTROL_FD);
    // PID 1 inherits every orphan of the sandbox; reaping them keeps the PID table clean. When
    // the runtime exits, PID 1 exits too, and the kernel kills whatever is left in the namespace.
    loop {
        match sys::waitpid(-1) {
            Ok((pid, status)) if pid == runtime => sys::exit_now(sys::exit_code(status)),
            Ok(_) => continue,
            Err(_) => sys::exit_now(1),
        }
    }
}

fn exec_runtime(spec: &SandboxSpec, filters: &[seccompiler::BpfProgram]) -> ! {
    use std::os::unix::process::CommandExt;
    let result = (|| -> Result<std::io::Error, SandboxError> {
        let os = |what| move |e| SandboxError::Os(what, e);
        sys::set_rlimit(libc::RLIMIT_NOFILE, spec.nofile).map_err(os("limit open files"))?;
        sys::set_rlimit(libc::RLIMIT_CORE, 0).map_err(os("disable core dumps"))?;
        sys::drop_bounding_set().map_err(os("drop the capability bounding set"))?;
        sys::clear_ambient_caps().map_err(os("clear ambient capabilities"))?;
        sys::drop_to_user(spec.uid, spec.gid).map_err(os("drop to the sandbox user"))?;
        sys::set_no_new_privs().map_err(os("set no_new_privs"))?;
        seccomp::install(filters)?;
        let (program, args) = spec
            .argv
            .split_first()
            .ok_or_else(|| SandboxError::Spec("empty argv".into()))?;
        Ok(std::process::Command::new(program)
            .args(args)
            .env_clear()
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&spec.cwd)
            .exec())
    })();
    match result {
        Ok(exec_error) => eprintln!(
            "kiln-sandbox: cannot execute {}: {exec_error}",
            spec.argv[0]
        ),
        Err(e) => eprintln!("kiln-sandbox: {e}"),
    }
    sys::exit_now(SETUP_FAILED)
}
