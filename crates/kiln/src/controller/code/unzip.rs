//! A deployment package's zip: checked the way Lambda checks it (its size, its entries, each
//! entry's path) and extracted into a tree that sandboxes can read.

use std::fs;
use std::io::{self, Read, Write};
use std::path::{Component, Path, PathBuf};

use super::{CodeError, MAX_ENTRIES, MAX_UNZIPPED_BYTES, MAX_ZIP_BYTES};

/// Opens a package's archive, refusing one that is not a zip, is empty, or has too many
/// entries.
fn open_archive(zip: &[u8]) -> Result<zip::ZipArchive<io::Cursor<&[u8]>>, CodeError> {
    let archive = zip::ZipArchive::new(io::Cursor::new(zip))
        .map_err(|e| CodeError::NotAZip(e.to_string()))?;
    if archive.is_empty() {
        return Err(CodeError::Empty);
    }
    if archive.len() > MAX_ENTRIES {
        return Err(CodeError::TooManyEntries);
    }
    Ok(archive)
}

/// Checks a package the way storing it would, without storing or inflating it (for DryRun).
pub fn check_zip(zip: &[u8]) -> Result<(), CodeError> {
    if zip.len() > MAX_ZIP_BYTES {
        return Err(CodeError::ZipTooLarge);
    }
    let mut archive = open_archive(zip)?;
    let mut declared: u64 = 0;
    for index in 0..archive.len() {
        let entry = archive
            .by_index_raw(index)
            .map_err(|e| CodeError::NotAZip(e.to_string()))?;
        safe_entry_path(entry.name())?;
        if entry.is_symlink() {
            return Err(CodeError::UnsafePath(format!(
                "{} (symbolic links are not allowed)",
                entry.name()
            )));
        }
        declared = declared.saturating_add(entry.size());
    }
    // "Smaller than": a package of exactly the limit is refused, as on Lambda.
    if declared >= MAX_UNZIPPED_BYTES {
        return Err(CodeError::TooLarge);
    }
    Ok(())
}

/// The unzipped size a zip's central directory declares (read from `reader` without
/// inflating anything).
pub(super) fn declared_size<R: io::Read + io::Seek>(reader: R) -> Result<u64, CodeError> {
    let mut archive =
        zip::ZipArchive::new(reader).map_err(|e| CodeError::NotAZip(e.to_string()))?;
    let mut total: u64 = 0;
    for index in 0..archive.len() {
        let entry = archive
            .by_index_raw(index)
            .map_err(|e| CodeError::NotAZip(e.to_string()))?;
        total = total.saturating_add(entry.size());
    }
    Ok(total)
}

/// Checks that a zip entry name stays inside the package root and returns its relative path.
pub fn safe_entry_path(name: &str) -> Result<PathBuf, CodeError> {
    let path = Path::new(name);
    let mut clean = PathBuf::new();
    for component in path.components() {
        match component {
            Component::Normal(part) => clean.push(part),
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => {
                return Err(CodeError::UnsafePath(name.to_string()))
            }
        }
    }
    if name.contains('\0') || name.contains('\\') {
        return Err(CodeError::UnsafePath(name.to_string()));
    }
    Ok(clean)
}

/// Extracts into `dest`, refusing traversal, links and zip bombs. Permissions keep only the
/// owner-executable bit of each entry: sandboxes read the tree as another user.
pub(super) fn extract(zip: &[u8], dest: &Path) -> Result<(), CodeError> {
    let mut archive = open_archive(zip)?;
    fs::create_dir_all(dest)?;
    set_mode(dest, 0o755)?;
    let mut total: u64 = 0;
    for index in 0..archive.len() {
        let mut entry = archive
            .by_index(index)
            .map_err(|e| CodeError::NotAZip(e.to_string()))?;
        let relative = safe_entry_path(entry.name())?;
        if relative.as_os_str().is_empty() {
            continue;
        }
        let target = dest.join(&relative);
        if entry.is_dir() {
            fs::create_dir_all(&target)?;
            set_mode(&target, 0o755)?;
            continue;
        }
        if entry.is_symlink() {
            return Err(CodeError::UnsafePath(format!(
                "{} (symbolic links are not allowed)",
                entry.name()
            )));
        }
        if let Some(parent) = target.parent() {
            create_dirs(dest, parent)?;
        }
        let executable = entry.unix_mode().map(|m| m & 0o100 != 0).unwrap_or(false);
        let mut out = fs::File::create(&target)?;
        // The declared size can lie; count what is actually inflated.
        let mut buf = [0u8; 64 * 1024];
        loop {
            let n = entry
                .read(&mut buf)
                .map_err(|e| CodeError::NotAZip(e.to_string()))?;
            if n == 0 {
                break;
            }
            total += n as u64;
            if total >= MAX_UNZIPPED_BYTES {
                return Err(CodeError::TooLarge);
            }
            out.write_all(&buf[..n])?;
        }
        set_mode(&target, if executable { 0o755 } else { 0o644 })?;
    }
    Ok(())
}

fn create_dirs(root: &Path, dir: &Path) -> io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    fs::create_dir_all(dir)?;
    let mut current = dir;
    while current != root {
        set_mode(current, 0o755)?;
        match current.parent() {
            Some(parent) => current = parent,
            None => break,
        }
    }
    Ok(())
}

fn set_mode(path: &Path, mode: u32) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
}

#[cfg(test)]
mod tests {
    use super::super::tests::zip_of;
    use super::super::CodeStore;
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn refuses_path_traversal() {
        let dir = tempfile::tempdir().unwrap();
        let store = CodeStore::open(dir.path()).unwrap();
        for name in ["../evil", "/etc/passwd", "a/../../b"] {
            let err = store.put_zip(&zip_of(&[(name, b"x")])).unwrap_err();
            assert!(matches!(err, CodeError::UnsafePath(_)), "{name}: {err}");
            let err = check_zip(&zip_of(&[(name, b"x")])).unwrap_err();
            assert!(matches!(err, CodeError::UnsafePath(_)), "{name}: {err}");
        }
        check_zip(&zip_of(&[("a/b.py", b"x")])).unwrap();
        assert!(matches!(check_zip(&zip_of(&[])), Err(CodeError::Empty)));
        assert!(matches!(check_zip(b"junk"), Err(CodeError::NotAZip(_))));
        assert_eq!(fs::read_dir(dir.path().join("code")).unwrap().count(), 0);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn entry_paths_never_escape(name in "[a-z./\\\\]{0,30}") {
            if let Ok(path) = safe_entry_path(&name) {
                prop_assert!(path.components().all(|c| matches!(c, Component::Normal(_))));
            }
        }
    }
}
