//! Disk-backed `/tmp`: an ext4 file system in a sparse image file on kiln's data disk, attached to
//! a loop device, so that a sandbox's `/tmp` is storage of its own size (Lambda's
//! `EphemeralStorage`) rather than memory.
//!
//! A [`TmpDisk`] is made ahead of need ([`TmpDisks::make`]): the image is created sparse and
//! formatted (`mkfs.ext4`), attached to a free loop device with `LO_FLAGS_AUTOCLEAR` (and direct
//! I/O, so that the image's pages are not cached a second time below the file system's) and
//! unlinked at once, then the file system is mounted *detached* (`fsopen`/`fsmount`): it is
//! attached nowhere, and the sandbox moves it onto its `/tmp` (`root.rs`). Everything hangs on
//! descriptors, so nothing outlives its last user, even when kiln is killed: closing the mount's
//! last descriptor (or the end of the sandbox's mount namespace) unmounts it, the loop device
//! then detaches itself, and the unlinked image's blocks are freed. [`TmpDisks::open`] still
//! clears what an earlier run may have left in its directory (an image whose formatting was cut
//! short, a loop device still attached to a file there).

use std::fs;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::sys;

const MIB: u64 = 1024 * 1024;
/// Where `mkfs.ext4` is looked for first: kiln's own `PATH` may lack the sbin directories.
const MKFS: &[&str] = &["/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4", "mkfs.ext4"];

/// The size of the image for a `/tmp` of `size_mb`: ext4's own metadata (inode tables at one
/// inode per 16 KiB, bitmaps, group descriptors) takes about 10 MB plus 1.8 % of the image, and
/// the function is owed its whole size, as on Lambda.
pub(crate) fn image_mb(size_mb: u32) -> u64 {
    u64::from(size_mb) + 16 + u64::from(size_mb) / 32
}

/// Whether a loop device whose `backing_file` (as `/sys/block/loopN/loop/backing_file` shows it,
/// possibly ending in ` (deleted)`) is an image under `dir`.
pub(crate) fn backed_by_image_in(backing_file: &str, dir: &Path) -> bool {
    let file = backing_file.trim_end_matches('\n');
    let file = file.strip_suffix(" (deleted)").unwrap_or(file);
    let file = Path::new(file);
    file.parent() == Some(dir) && file.extension().is_some_and(|e| e == "img")
}

/// Makes [`TmpDisk`]s in one directory of kiln's data disk.
pub struct TmpDisks {
    dir: PathBuf,
    mkfs: PathBuf,
    next: AtomicU64,
}

/// A formatted, empty file system, mounted nowhere yet: moved onto a sandbox's `/tmp` through
/// [`crate::SpawnFds::tmp`]. Dropped unused, it is unmounted, its loop device detached and its
/// image freed.
#[derive(Debug)]
pub struct TmpDisk {
    mount: OwnedFd,
    size_mb: u32,
}

impl TmpDisk {
    /// The size asked for, in MiB.
    pub fn size_mb(&self) -> u32 {
        self.size_mb
    }

    pub(crate) fn raw_fd(&self) -> i32 {
        self.mount.as_raw_fd()
    }
}

impl TmpDisks {
    /// Prepares `dir` (clearing what an earlier run left there) and checks that this host can
    /// make disks: loop devices, `mkfs.ext4` and ext4 mounts, by making one.
    pub fn open(dir: &Path) -> io::Result<Self> {
        fs::create_dir_all(dir)?;
        let dir = fs::canonicalize(dir)?;
        clear_leftovers(&dir);
        let mkfs = MKFS
            .iter()
            .map(PathBuf::from)
            .find(|p| p.is_absolute() && p.exists())
            .unwrap_or_else(|| PathBuf::from(MKFS[MKFS.len() - 1]));
        fs::File::open("/dev/loop-control")?;
        let disks = Self {
            dir,
            mkfs,
            next: AtomicU64::new(0),
        };
        disks.make(1, false)?;
        Ok(disks)
    }

    /// Makes a disk whose file system holds at least `size_mb` MiB. Blocks for the `mkfs`
    /// (about 50 ms for 512 MB, 90 ms for 10 GB). `ahead`: made ahead of need, so `mkfs` runs
    /// as SCHED_IDLE and never takes a CPU from a request.
    pub fn make(&self, size_mb: u32, ahead: bool) -> io::Result<TmpDisk> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let image = self.dir.join(format!("{}-{n}.img", std::process::id()));
        let file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&image)?;
        // The image is reached through its descriptor from here on, so nothing is left behind
        // when kiln stops while `mkfs` runs or fails halfway.
        fs::remove_file(&image)?;
        self.make_on(file, size_mb, ahead)
    }

    fn make_on(&self, file: fs::File, size_mb: u32, ahead: bool) -> io::Result<TmpDisk> {
        file.set_len(image_mb(size_mb) * MIB)?;
        // `mkfs` does not inherit the descriptor (it is close-on-exec): it opens the image
        // through kiln's own.
        let image = format!("/proc/{}/fd/{}", std::process::id(), file.as_raw_fd());
        // No journal (a crash loses /tmp anyway), no reserved blocks (the function's to use), one
        // inode per 64 KiB, and nothing for online growth: less metadata to write and to mount.
        let mut mkfs = Command::new(&self.mkfs);
        // One inode per 16 KiB (mkfs's default): a 512 MB `/tmp` holds 34,000 files, enough to
        // unpack a package's tree into.
        mkfs.args(["-q", "-F", "-m", "0", "-i", "16384"])
            .args(["-O", "^has_journal,^resize_inode"])
            .arg(&image);
        if ahead {
            use std::os::unix::process::CommandExt;
            // SAFETY: the closure runs between fork and exec and makes one async-signal-safe
            // system call (sched_setscheduler) on the child itself.
            unsafe {
                mkfs.pre_exec(sys::set_idle_priority);
            }
        }
        let out = mkfs.output()?;
        if !out.status.success() {
            return Err(io::Error::other(format!(
                "{} failed: {}",
                self.mkfs.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        let device = attach(&file)?;
        // No cache flushes: nothing on the disk needs to survive a crash, and each flush would
        // become an fsync of the image on the host's file system (the loop driver's).
        let mount = sys::mount_detached(
            "ext4",
            &device.path,
            &[c"nobarrier"],
            libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NODEV,
        )?;
        // The device now stays attached while the file system is mounted, and detaches itself
        // (autoclear) when it is not.
        drop(device);
        let root = PathBuf::from(format!("/proc/self/fd/{}", mount.as_raw_fd()));
        fs::set_permissions(&root, fs::Permissions::from_mode(0o1777))?;
        // Lambda's /tmp is empty.
        fs::remove_dir(root.join("lost+found"))?;
        Ok(TmpDisk { mount, size_mb })
    }
}

struct Attached {
    path: PathBuf,
    _device: fs::File,
}

/// Attaches `file` to a free loop device, with direct I/O where the host's file system allows it.
fn attach(file: &fs::File) -> io::Result<Attached> {
    let control = fs::File::open("/dev/loop-control")?;
    let mut last = None;
    // Another process may take the free device between the two calls: try the next one.
    for _ in 0..16 {
        let n = sys::loop_get_free(&control)?;
        let path = PathBuf::from(format!("/dev/loop{n}"));
        let device = fs::OpenOptions::new().read(true).write(true).open(&path)?;
        let flags = sys::LO_FLAGS_AUTOCLEAR;
        let configured = sys::loop_configure(&device, file, flags | sys::LO_FLAGS_DIRECT_IO)
            .or_else(|e| match e.raw_os_error() {
                Some(libc::EINVAL) => sys::loop_configure(&device, file, flags),
                _ => Err(e),
            });
        match configured {
            Ok(()) => {
                return Ok(Attached {
                    path,
                    _device: device,
                })
            }
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("no free loop device")))
}

/// Detaches the loop devices attached to images in `dir` and removes the images: what a killed
/// kiln may have left.
fn clear_leftovers(dir: &Path) {
    if let Ok(devices) = fs::read_dir("/sys/block") {
        for device in devices.flatten() {
            let name = device.file_name();
            let Some(name) = name.to_str().filter(|n| n.starts_with("loop")) else {
                continue;
            };
            let Ok(backing) = fs::read_to_string(device.path().join("loop/backing_file")) else {
                continue;
            };
            if backed_by_image_in(&backing, dir) {
                if let Ok(device) = fs::File::open(Path::new("/dev").join(name)) {
                    // A device still mounted somewhere detaches at its last close.
                    let _ = sys::loop_clear(&device);
                }
            }
        }
    }
    if let Ok(entries) = fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.path().extension().is_some_and(|e| e == "img") {
                let _ = fs::remove_file(entry.path());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_holds_its_size_and_ext4s_metadata() {
        assert_eq!(image_mb(512), 544);
        assert_eq!(image_mb(10_240), 10_576);
        // ext4's metadata with the options above: about 10 MB, 0.6 % of the image, and 256
        // bytes of inode table per 16 KiB (1.6 %).
        for size in [512u32, 1024, 4096, 10_240] {
            let overhead = 10.0 + 0.022 * image_mb(size) as f64;
            assert!(
                image_mb(size) as f64 - overhead >= f64::from(size),
                "{size}"
            );
        }
    }

    #[test]
    fn leftovers_are_the_images_of_the_directory_only() {
        let dir = Path::new("/var/lib/kiln/run/tmp");
        assert!(backed_by_image_in("/var/lib/kiln/run/tmp/12-3.img\n", dir));
        assert!(backed_by_image_in(
            "/var/lib/kiln/run/tmp/12-3.img (deleted)\n",
            dir
        ));
        assert!(!backed_by_image_in("/var/lib/kiln/run/tmp2/12-3.img", dir));
        assert!(!backed_by_image_in("/var/lib/kiln/run/tmp/sub/1.img", dir));
        assert!(!backed_by_image_in("/var/lib/kiln/run/tmp/other.iso", dir));
        assert!(!backed_by_image_in("/home/me/disk.img (deleted)", dir));
        assert!(!backed_by_image_in("", dir));
    }
}
