//! Files written so that a crash never leaves one half-written under its final name: to a
//! temporary name, synced (or, for what can be fetched again, not), then renamed.

use std::fs;
use std::io::{self, Write};
use std::path::Path;

pub(super) fn sync_tree(dir: &Path) -> io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            sync_tree(&entry.path())?;
        } else {
            fs::File::open(entry.path())?.sync_all()?;
        }
    }
    fsync_dir(dir)
}

pub fn fsync_dir(dir: &Path) -> io::Result<()> {
    fs::File::open(dir)?.sync_all()
}

/// Writes a file under a temporary name and renames it, without syncing either.
pub(super) fn write_unsynced(path: &Path, contents: &[u8], tmp_dir: &Path) -> io::Result<()> {
    let tmp = tmp_dir.join(format!(".{}.tmp", uuid::Uuid::new_v4()));
    fs::write(&tmp, contents)?;
    fs::rename(&tmp, path)
}

/// Writes a file so that it either exists complete under its name or not at all.
pub fn write_atomically(path: &Path, contents: &[u8], tmp_dir: &Path) -> io::Result<()> {
    let tmp = tmp_dir.join(format!(".{}.tmp", uuid::Uuid::new_v4()));
    let mut file = fs::File::create(&tmp)?;
    file.write_all(contents)?;
    file.sync_all()?;
    fs::rename(&tmp, path)?;
    if let Some(parent) = path.parent() {
        fsync_dir(parent)?;
    }
    Ok(())
}
