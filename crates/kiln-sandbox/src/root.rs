//! Assembles the sandbox's root filesystem inside its private mount namespace.
//!
//! The root is a small tmpfs holding mount points: read-only bind mounts of what the runtime
//! needs, the function's code, a fresh /proc of the sandbox's PID namespace, a minimal /dev and a
//! size-limited writable /tmp: a disk of its own (`tmpdisk.rs`), or a tmpfs where there is none. After `pivot_root` the host's tree is detached and the root itself
//! is made read-only.

use std::fs;
use std::io;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::{sys, Mount, SandboxError, SandboxSpec};

const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];

fn at(root: &Path, target: &Path) -> PathBuf {
    root.join(target.strip_prefix("/").unwrap_or(target))
}

fn step<T>(what: impl Fn() -> String, result: io::Result<T>) -> Result<T, SandboxError> {
    result.map_err(|e| SandboxError::Root(format!("{}: {e}", what())))
}

/// Binds `source` on `target`. The bind is private (it receives nothing from the host) unless it
/// is a code slot, which keeps receiving the host's mounts on it (see `slot.rs`).
fn bind(
    source: &Path,
    target: &Path,
    writable: bool,
    nodev: bool,
    slot: bool,
) -> Result<(), SandboxError> {
    let what = || format!("bind {} on {}", source.display(), target.display());
    step(
        what,
        sys::mount(Some(source), target, None, libc::MS_BIND, None),
    )?;
    if !slot {
        step(
            || format!("make {} private", target.display()),
            sys::mount(None, target, None, libc::MS_PRIVATE, None),
        )?;
    }
    let mut flags = libc::MS_BIND | libc::MS_REMOUNT | libc::MS_NOSUID;
    if !writable {
        flags |= libc::MS_RDONLY;
    }
    if nodev {
        flags |= libc::MS_NODEV;
    }
    step(
        || format!("remount {}", target.display()),
        sys::mount(None, target, None, flags, None),
    )
}

fn tmpfs(target: &Path, options: &str, extra: libc::c_ulong) -> Result<(), SandboxError> {
    step(
        || format!("tmpfs on {}", target.display()),
        sys::mount(
            Some(Path::new("tmpfs")),
            target,
            Some("tmpfs"),
            libc::MS_NOSUID | extra,
            Some(options),
        ),
    )
}

fn mount_point(target: &Path, is_dir: bool) -> Result<(), SandboxError> {
    let what = || format!("create mount point {}", target.display());
    if is_dir {
        step(what, fs::create_dir_all(target))
    } else {
        if let Some(parent) = target.parent() {
            step(what, fs::create_dir_all(parent))?;
        }
        step(what, fs::write(target, b""))
    }
}

/// Builds the root and pivots into it. Runs as root in the sandbox's fresh mount namespace.
pub(crate) fn assemble(spec: &SandboxSpec) -> Result<(), SandboxError> {
    let root = spec.root.as_path();
    // Nothing mounted from here on may propagate back to the host. Slave rather than private so
    // that a code slot's bind can keep receiving the host's mount of the function's code; every
    // other bind is made private as it is made, and the host's tree is detached after the pivot.
    step(
        || "make mounts slaves".into(),
        sys::mount(
            None,
            Path::new("/"),
            None,
            libc::MS_REC | libc::MS_SLAVE,
            None,
        ),
    )?;
    tmpfs(root, "size=1m,mode=755", libc::MS_NODEV)?;

    for mount in &spec.mounts {
        match mount {
            Mount::Bind {
                source,
                target,
                writable,
                optional,
            } => {
                let Ok(meta) = fs::metadata(source) else {
                    if *optional {
                        continue;
                    }
                    return Err(SandboxError::Root(format!(
                        "{} does not exist",
                        source.display()
                    )));
                };
                let target = at(root, target);
                mount_point(&target, meta.is_dir())?;
                bind(source, &target, *writable, true, false)?;
            }
            Mount::Slot { source, target } => {
                let target = at(root, target);
                mount_point(&target, true)?;
                bind(source, &target, false, true, true)?;
            }
            Mount::Symlink { target, points_to } => {
                let target = at(root, target);
                if let Some(parent) = target.parent() {
                    step(
                        || format!("create {}", parent.display()),
                        fs::create_dir_all(parent),
                    )?;
                }
                step(
                    || format!("symlink {}", target.display()),
                    symlink(points_to, &target),
                )?;
            }
        }
    }

    let proc_dir = at(root, Path::new("/proc"));
    mount_point(&proc_dir, true)?;
    step(
        || "mount /proc".into(),
        sys::mount(
            Some(Path::new("proc")),
            &proc_dir,
            Some("proc"),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            None,
        ),
    )?;

    let dev = at(root, Path::new("/dev"));
    mount_point(&dev, true)?;
    tmpfs(&dev, "size=64k,mode=755", 0)?;
    for name in DEVICES {
        let host = Path::new("/dev").join(name);
        if host.exists() {
            let target = dev.join(name);
            mount_point(&target, false)?;
            bind(&host, &target, true, false, false)?;
        }
    }
    for (name, to) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        step(
            || format!("symlink /dev/{name}"),
            symlink(to, dev.join(name)),
        )?;
    }
    let shm = dev.join("shm");
    mount_point(&shm, true)?;
    tmpfs(&shm, "size=64m,mode=1777", libc::MS_NODEV)?;

    let tmp = at(root, Path::new("/tmp"));
    mount_point(&tmp, true)?;
    if spec.tmp_disk {
        step(
            || "move the /tmp disk into place".into(),
            sys::move_mount_fd(crate::TMP_FD, &tmp),
        )?;
        sys::close(crate::TMP_FD);
    } else {
        tmpfs(
            &tmp,
            &format!("size={}m,mode=1777", spec.tmp_size_mb),
            libc::MS_NODEV,
        )?;
    }

    for file in &spec.files {
        let target = at(root, &file.path);
        mount_point(&target, false)?;
        step(
            || format!("write {}", target.display()),
            fs::write(&target, &file.contents),
        )?;
        step(
            || format!("chmod {}", target.display()),
            fs::set_permissions(&target, fs::Permissions::from_mode(file.mode)),
        )?;
    }

    pivot(root)?;
    // The root tmpfs holds only mount points and small files; nothing may change it.
    step(
        || "remount / read-only".into(),
        sys::mount(
            None,
            Path::new("/"),
            None,
            libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV,
            None,
        ),
    )
}

fn pivot(root: &Path) -> Result<(), SandboxError> {
    let old = root.join(".old-root");
    step(|| "create .old-root".into(), fs::create_dir(&old))?;
    step(|| "pivot_root".into(), sys::pivot_root(root, &old))?;
    step(|| "chdir /".into(), std::env::set_current_dir("/"))?;
    step(
        || "detach the host root".into(),
        sys::umount_detach(Path::new("/.old-root")),
    )?;
    step(|| "remove .old-root".into(), fs::remove_dir("/.old-root"))
}
