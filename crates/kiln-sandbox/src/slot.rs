//! Code slots: a directory of a running sandbox whose contents the host fills in later.
//!
//! The warm start path boots a runtime in a sandbox before it knows which function it will run.
//! Its `/var/task` is a bind of an empty host directory (a [`CodeSlot`]) under a shared mount
//! (the [`SlotDir`]), and the sandbox keeps that one bind as a *slave* of the host's mount (see
//! `root.rs`). When a function is assigned, the host attaches a read-only copy of the function's
//! code on the slot; mount propagation makes it appear at `/var/task` inside the sandbox, and
//! nowhere else: the sandbox itself can neither mount nor propagate anything back.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::sys;

/// The host directory that holds every code slot: a mount of its own with shared propagation.
pub struct SlotDir {
    dir: PathBuf,
}

impl SlotDir {
    /// Prepares `dir`: detaches whatever an earlier run left mounted there, then makes it a
    /// shared mount in a peer group of its own.
    pub fn open(dir: &Path) -> io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        // What a killed kiln left: the slots' code mounts and the directory's own mount(s).
        Self::detach_all(dir);
        sys::mount(Some(dir), dir, None, libc::MS_BIND, None)?;
        // Private first: a bind of a directory under a shared mount (a systemd host's `/`) would
        // otherwise join that mount's peer group, and slots would propagate into the host's tree.
        sys::mount(None, dir, None, libc::MS_PRIVATE, None)?;
        sys::mount(None, dir, None, libc::MS_SHARED, None)?;
        Ok(Self {
            dir: dir.to_path_buf(),
        })
    }

    /// Detaches the directory's mount (at shutdown, once every sandbox is gone), so that no
    /// mount of kiln outlives it.
    pub fn close(&self) {
        Self::detach_all(&self.dir);
    }

    fn detach_all(dir: &Path) {
        if let Ok(entries) = std::fs::read_dir(dir) {
            for entry in entries.flatten() {
                let path = entry.path();
                while sys::umount_detach(&path).is_ok() {}
                // Only empty directories go: a slot still showing code must never be deleted.
                let _ = std::fs::remove_dir(&path);
            }
        }
        while sys::umount_detach(dir).is_ok() {}
    }

    /// A new, empty slot named `name`.
    pub fn slot(&self, name: &str) -> io::Result<CodeSlot> {
        let path = self.dir.join(name);
        while sys::umount_detach(&path).is_ok() {}
        match std::fs::create_dir(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        Ok(CodeSlot {
            path,
            filled: AtomicBool::new(false),
        })
    }
}

/// One slot: an empty directory until [`CodeSlot::fill`]. Dropping it detaches the code and
/// removes the directory.
pub struct CodeSlot {
    path: PathBuf,
    filled: AtomicBool,
}

impl CodeSlot {
    /// The host directory to bind into a sandbox (see [`crate::Mount::Slot`]).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Shows a read-only copy of the directory `code` in the slot, and so in the sandbox that
    /// binds it. A slot is filled once.
    pub fn fill(&self, code: &Path) -> io::Result<()> {
        if self.filled.swap(true, Ordering::SeqCst) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "the code slot is already filled",
            ));
        }
        sys::attach_read_only(code, &self.path).inspect_err(|_| {
            self.filled.store(false, Ordering::SeqCst);
        })
    }
}

impl Drop for CodeSlot {
    fn drop(&mut self) {
        if self.filled.load(Ordering::SeqCst) {
            let _ = sys::umount_detach(&self.path);
        }
        // remove_dir, never remove_dir_all: if the detach failed, the code stays untouched.
        let _ = std::fs::remove_dir(&self.path);
    }
}
