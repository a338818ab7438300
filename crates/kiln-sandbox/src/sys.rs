//! Thin, checked wrappers around the raw system calls the sandbox needs.
//!
//! Every `unsafe` block in kiln lives in this crate; each wrapper turns a C return code into an
//! `io::Result` so the callers stay safe code.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

pub(crate) fn cstring(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))
}

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

pub(crate) fn mount(
    source: Option<&Path>,
    target: &Path,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> io::Result<()> {
    let source = source.map(cstring).transpose()?;
    let target = cstring(target)?;
    let fstype = fstype.map(|s| CString::new(s).expect("static fs type"));
    let data = data
        .map(CString::new)
        .transpose()
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "mount data has a NUL byte"))?;
    // SAFETY: every pointer is either null or points to a NUL-terminated string that outlives the
    // call; mount(2) does not retain them.
    check(unsafe {
        libc::mount(
            source.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
            target.as_ptr(),
            fstype.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
            flags,
            data.as_ref()
                .map_or(std::ptr::null(), |s| s.as_ptr().cast::<libc::c_void>()),
        )
    })
    .map(drop)
}

pub(crate) fn umount_detach(target: &Path) -> io::Result<()> {
    let target = cstring(target)?;
    // SAFETY: `target` is a valid NUL-terminated string for the duration of the call.
    check(unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) }).map(drop)
}

pub(crate) fn pivot_root(new_root: &Path, put_old: &Path) -> io::Result<()> {
    let new_root = cstring(new_root)?;
    let put_old = cstring(put_old)?;
    // SAFETY: both arguments are valid NUL-terminated strings; glibc has no wrapper, so the raw
    // syscall is the documented interface.
    check(
        unsafe { libc::syscall(libc::SYS_pivot_root, new_root.as_ptr(), put_old.as_ptr()) } as i32,
    )
    .map(drop)
}

pub(crate) fn unshare(flags: libc::c_int) -> io::Result<()> {
    // SAFETY: unshare(2) takes plain flags and touches no memory of ours.
    check(unsafe { libc::unshare(flags) }).map(drop)
}

pub(crate) fn setns(fd: libc::c_int, nstype: libc::c_int) -> io::Result<()> {
    // SAFETY: setns(2) takes a descriptor and flags; an invalid descriptor yields EBADF.
    check(unsafe { libc::setns(fd, nstype) }).map(drop)
}

/// The result of `fork`, as seen by the process that continues.
pub(crate) enum Fork {
    Parent(libc::pid_t),
    Child,
}

/// Forks the calling process.
///
/// Only called from the sandbox helper, which is a freshly executed, single-threaded process, so
/// the child may allocate and use the standard library freely.
pub(crate) fn fork() -> io::Result<Fork> {
    // SAFETY: the caller is single-threaded (see above), so no lock can be held by another thread
    // at the moment of the fork.
    let pid = check(unsafe { libc::fork() })?;
    Ok(if pid == 0 {
        Fork::Child
    } else {
        Fork::Parent(pid)
    })
}

/// Waits for a child (or any child with `pid == -1`) and returns its pid and raw status.
pub(crate) fn waitpid(pid: libc::pid_t) -> io::Result<(libc::pid_t, libc::c_int)> {
    let mut status = 0;
    loop {
        // SAFETY: `status` is a valid, writable c_int for the duration of the call.
        let ret = unsafe { libc::waitpid(pid, &mut status, 0) };
        if ret == -1 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        return Ok((ret, status));
    }
}

/// Turns a wait status into a shell-style exit code: the code itself, or 128 + the signal.
pub(crate) fn exit_code(status: libc::c_int) -> i32 {
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else {
        1
    }
}

pub(crate) fn set_parent_death_signal(signal: libc::c_int) -> io::Result<()> {
    // SAFETY: PR_SET_PDEATHSIG takes an integer signal number and no pointers.
    check(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, signal as libc::c_ulong, 0, 0, 0) })
        .map(drop)
}

pub(crate) fn set_no_new_privs() -> io::Result<()> {
    // SAFETY: PR_SET_NO_NEW_PRIVS takes integer arguments only.
    check(unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) }).map(drop)
}

/// Drops every capability from the bounding set, so that nothing executed later can regain one.
pub(crate) fn drop_bounding_set() -> io::Result<()> {
    for cap in 0..=63 {
        // SAFETY: PR_CAPBSET_DROP takes an integer capability number.
        let ret = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) };
        if ret == -1 {
            let err = io::Error::last_os_error();
            // EINVAL marks the end of the capabilities this kernel knows.
            if err.raw_os_error() == Some(libc::EINVAL) {
                break;
            }
            return Err(err);
        }
    }
    Ok(())
}

pub(crate) fn clear_ambient_caps() -> io::Result<()> {
    // SAFETY: integer-only prctl.
    let ret = unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        )
    };
    // Kernels without ambient capabilities answer EINVAL; there is nothing to clear then.
    if ret == -1 && io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL) {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

pub(crate) fn drop_to_user(uid: u32, gid: u32) -> io::Result<()> {
    // SAFETY: setgroups with a zero length never reads the (null) list pointer.
    check(unsafe { libc::setgroups(0, std::ptr::null()) })?;
    // SAFETY: integer-only system calls.
    check(unsafe { libc::setresgid(gid, gid, gid) })?;
    // SAFETY: integer-only system call. Without PR_SET_KEEPCAPS, moving every uid away from 0
    // clears the permitted and effective capability sets.
    check(unsafe { libc::setresuid(uid, uid, uid) })?;
    Ok(())
}

pub(crate) fn set_rlimit(resource: libc::__rlimit_resource_t, value: u64) -> io::Result<()> {
    let limit = libc::rlimit {
        rlim_cur: value,
        rlim_max: value,
    };
    // SAFETY: `limit` is a valid rlimit that lives across the call.
    check(unsafe { libc::setrlimit(resource, &limit) }).map(drop)
}

pub(crate) fn sethostname(name: &str) -> io::Result<()> {
    // SAFETY: the pointer and length describe `name`'s bytes, which outlive the call.
    check(unsafe { libc::sethostname(name.as_ptr().cast(), name.len()) }).map(drop)
}

pub(crate) fn dup2(from: libc::c_int, to: libc::c_int) -> io::Result<()> {
    // SAFETY: dup2 only manipulates the descriptor table.
    check(unsafe { libc::dup2(from, to) }).map(drop)
}

pub(crate) fn dup_above(fd: libc::c_int, min: libc::c_int) -> io::Result<libc::c_int> {
    // SAFETY: F_DUPFD_CLOEXEC only manipulates the descriptor table.
    check(unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, min) })
}

pub(crate) fn close(fd: libc::c_int) {
    // SAFETY: closing a descriptor we own; errors are irrelevant at this point.
    unsafe { libc::close(fd) };
}

pub(crate) fn getpid() -> libc::pid_t {
    // SAFETY: getpid cannot fail.
    unsafe { libc::getpid() }
}

pub(crate) fn kill(pid: libc::pid_t, signal: libc::c_int) -> io::Result<()> {
    // SAFETY: kill(2) takes integers only.
    check(unsafe { libc::kill(pid, signal) }).map(drop)
}

pub(crate) fn exit_now(code: i32) -> ! {
    // SAFETY: _exit ends the process without running atexit handlers or destructors, which is
    // what a forked helper wants.
    unsafe { libc::_exit(code) }
}

/// Brings the loopback interface of the calling thread's network namespace up.
pub(crate) fn loopback_up() -> io::Result<()> {
    // SAFETY: socket(2) with constant arguments.
    let sock =
        check(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: ifreq is plain old data; all-zeroes is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    // SAFETY: `req` is a valid ifreq that the kernel reads and writes within its size.
    let result = check(unsafe { libc::ioctl(sock, libc::SIOCGIFFLAGS, &mut req) }).and_then(|_| {
        // SAFETY: SIOCGIFFLAGS filled the flags member of the union.
        unsafe { req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short };
        // SAFETY: as above.
        check(unsafe { libc::ioctl(sock, libc::SIOCSIFFLAGS, &req) })
    });
    close(sock);
    result.map(drop)
}

/// Attaches a copy of the directory tree at `source` on `target`, read-only, nosuid and nodev
/// from the moment it appears. Built with the mount API (`open_tree`, `mount_setattr`,
/// `move_mount`) rather than a bind mount and a remount, so that the copies propagated to other
/// mount namespaces are read-only too: a remount would change only the first copy.
pub(crate) fn attach_read_only(source: &Path, target: &Path) -> io::Result<()> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let source = cstring(source)?;
    let target = cstring(target)?;
    let empty = c"";
    // SAFETY: open_tree(2) reads the NUL-terminated path and returns a new descriptor (or -1);
    // it retains no pointer.
    let fd = check(unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            source.as_ptr(),
            libc::OPEN_TREE_CLONE | libc::OPEN_TREE_CLOEXEC,
        )
    } as libc::c_int)?;
    // SAFETY: `fd` was just returned by open_tree and is owned by nobody else.
    let tree = unsafe { OwnedFd::from_raw_fd(fd) };
    let attr = libc::mount_attr {
        attr_set: libc::MOUNT_ATTR_RDONLY | libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NODEV,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: the empty path with AT_EMPTY_PATH names the detached tree behind `tree`; `attr` is
    // a valid mount_attr and its exact size is passed; the kernel only reads it.
    check(unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_EMPTY_PATH as libc::c_uint,
            &attr as *const libc::mount_attr,
            std::mem::size_of::<libc::mount_attr>(),
        )
    } as libc::c_int)?;
    // SAFETY: both paths are NUL-terminated and outlive the call; MOVE_MOUNT_F_EMPTY_PATH makes
    // the empty source path name the tree behind `tree`.
    check(unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_FDCWD,
            target.as_ptr(),
            libc::MOVE_MOUNT_F_EMPTY_PATH,
        )
    } as libc::c_int)
    .map(drop)
}

/// Runs the calling process at SCHED_IDLE: only on CPU time nothing else wants.
pub(crate) fn set_idle_priority() -> io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a valid sched_param that outlives the call; pid 0 is the caller.
    check(unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) }).map(drop)
}

// Loop devices (linux/loop.h; the libc crate does not carry them).
const LOOP_CTL_GET_FREE: libc::c_ulong = 0x4C82;
const LOOP_CONFIGURE: libc::c_ulong = 0x4C0A;
const LOOP_CLR_FD: libc::c_ulong = 0x4C01;
pub(crate) const LO_FLAGS_AUTOCLEAR: u32 = 4;
pub(crate) const LO_FLAGS_DIRECT_IO: u32 = 16;

/// `struct loop_info64`.
#[repr(C)]
struct LoopInfo64 {
    lo_device: u64,
    lo_inode: u64,
    lo_rdevice: u64,
    lo_offset: u64,
    lo_sizelimit: u64,
    lo_number: u32,
    lo_encrypt_type: u32,
    lo_encrypt_key_size: u32,
    lo_flags: u32,
    lo_file_name: [u8; 64],
    lo_crypt_name: [u8; 64],
    lo_encrypt_key: [u8; 32],
    lo_init: [u64; 2],
}

/// `struct loop_config`.
#[repr(C)]
struct LoopConfig {
    fd: u32,
    block_size: u32,
    info: LoopInfo64,
    reserved: [u64; 8],
}

/// The number of a free loop device (allocating one if none is free).
pub(crate) fn loop_get_free(control: &std::fs::File) -> io::Result<u32> {
    use std::os::fd::AsRawFd;
    // SAFETY: LOOP_CTL_GET_FREE takes no argument and returns a device number or -1.
    check(unsafe { libc::ioctl(control.as_raw_fd(), LOOP_CTL_GET_FREE) }).map(|n| n as u32)
}

/// Attaches `backing` to the loop device open as `device`, with `flags` (`LO_FLAGS_*`).
pub(crate) fn loop_configure(
    device: &std::fs::File,
    backing: &std::fs::File,
    flags: u32,
) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let config = LoopConfig {
        fd: backing.as_raw_fd() as u32,
        block_size: 0,
        info: LoopInfo64 {
            lo_device: 0,
            lo_inode: 0,
            lo_rdevice: 0,
            lo_offset: 0,
            lo_sizelimit: 0,
            lo_number: 0,
            lo_encrypt_type: 0,
            lo_encrypt_key_size: 0,
            lo_flags: flags,
            lo_file_name: [0; 64],
            lo_crypt_name: [0; 64],
            lo_encrypt_key: [0; 32],
            lo_init: [0; 2],
        },
        reserved: [0; 8],
    };
    // SAFETY: `config` is a fully initialised `struct loop_config` that outlives the call; the
    // kernel only reads it. Both descriptors are open for the duration of the call.
    check(unsafe {
        libc::ioctl(
            device.as_raw_fd(),
            LOOP_CONFIGURE,
            &config as *const LoopConfig,
        )
    })
    .map(drop)
}

/// Detaches the loop device open as `device` (at its last close, if it is still in use).
pub(crate) fn loop_clear(device: &std::fs::File) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: LOOP_CLR_FD takes no argument.
    check(unsafe { libc::ioctl(device.as_raw_fd(), LOOP_CLR_FD, 0) }).map(drop)
}

// The new mount API's constants (linux/mount.h).
const FSCONFIG_SET_FLAG: libc::c_uint = 0;
const FSCONFIG_SET_STRING: libc::c_uint = 1;
const FSCONFIG_CMD_CREATE: libc::c_uint = 6;

/// Mounts the `fstype` file system on block device `source` as a detached mount (attached
/// nowhere; it goes away when the last descriptor of it is closed, unless it was moved into a
/// tree first), with the file system's boolean options `flags` and the `MOUNT_ATTR_*` flags
/// `attrs`.
pub(crate) fn mount_detached(
    fstype: &str,
    source: &Path,
    flags: &[&std::ffi::CStr],
    attrs: u64,
) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let fstype = CString::new(fstype).expect("static fs type");
    let source = cstring(source)?;
    let key = c"source";
    // SAFETY: fsopen(2) reads the NUL-terminated name and returns a new descriptor or -1.
    let fd = check(unsafe {
        libc::syscall(
            libc::SYS_fsopen,
            fstype.as_ptr(),
            libc::FSOPEN_CLOEXEC as libc::c_uint,
        )
    } as libc::c_int)?;
    // SAFETY: `fd` was just returned by fsopen and is owned by nobody else.
    let context = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: key and value are NUL-terminated strings that outlive the call.
    check(unsafe {
        libc::syscall(
            libc::SYS_fsconfig,
            context.as_raw_fd(),
            FSCONFIG_SET_STRING,
            key.as_ptr(),
            source.as_ptr(),
            0,
        )
    } as libc::c_int)?;
    for flag in flags {
        // SAFETY: the key is a NUL-terminated string that outlives the call; a flag has no
        // value (a null pointer, as documented).
        check(unsafe {
            libc::syscall(
                libc::SYS_fsconfig,
                context.as_raw_fd(),
                FSCONFIG_SET_FLAG,
                flag.as_ptr(),
                std::ptr::null::<libc::c_void>(),
                0,
            )
        } as libc::c_int)?;
    }
    // SAFETY: FSCONFIG_CMD_CREATE takes no key or value (null pointers, as documented).
    check(unsafe {
        libc::syscall(
            libc::SYS_fsconfig,
            context.as_raw_fd(),
            FSCONFIG_CMD_CREATE,
            std::ptr::null::<libc::c_char>(),
            std::ptr::null::<libc::c_void>(),
            0,
        )
    } as libc::c_int)?;
    // SAFETY: fsmount(2) takes the context descriptor and plain flags; it returns a new
    // descriptor of the mount or -1.
    let fd = check(unsafe {
        libc::syscall(
            libc::SYS_fsmount,
            context.as_raw_fd(),
            libc::FSMOUNT_CLOEXEC as libc::c_uint,
            attrs as libc::c_uint,
        )
    } as libc::c_int)?;
    // SAFETY: `fd` was just returned by fsmount and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Moves the detached mount behind descriptor `mount` onto `target` in the calling process's
/// mount namespace.
pub(crate) fn move_mount_fd(mount: libc::c_int, target: &Path) -> io::Result<()> {
    let target = cstring(target)?;
    let empty = c"";
    // SAFETY: both paths are NUL-terminated and outlive the call; MOVE_MOUNT_F_EMPTY_PATH makes
    // the empty source path name the mount behind `mount`.
    check(unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            mount,
            empty.as_ptr(),
            libc::AT_FDCWD,
            target.as_ptr(),
            libc::MOVE_MOUNT_F_EMPTY_PATH,
        )
    } as libc::c_int)
    .map(drop)
}
