//! Content-addressed storage of deployment packages.
//!
//! A package is kept twice under its SHA-256: the zip as uploaded (`blobs/<hex>.zip`, which
//! GetFunction serves back) and its extracted tree (`code/<hex>/`, which sandboxes mount
//! read-only). Both are written to a temporary name, synced and renamed, so a crash never leaves
//! a half-written package under a final name.
//!
//! A package fetched from a cluster's shared store ([`CodeStore::put_fetched`]) can be fetched
//! again, so it is not synced: it is recorded first, durably, under `unsynced/<boot id>/`, and
//! a start after a reboot (when unsynced writes may have been lost) removes what that list
//! names. A start without a reboot keeps it: the page cache held every write.
//!
//! A package deployed by CreateFunction or UpdateFunctionCode on a single node is stored in two
//! steps: its zip, checked from its central directory and synced, before the call answers
//! ([`CodeStore::put_package`]); its tree after, in the background ([`CodeStore::extract_stored`]).
//! A restart finds what it had not extracted yet by the zip without a tree.
//!
//! The store itself is here; [`unzip`] checks and extracts a package, [`disk`] writes files so
//! that a crash leaves none half-written, [`listing`] reads a stored package's files back.

mod disk;
mod listing;
mod unzip;

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

pub use disk::{fsync_dir, write_atomically};
use disk::{sync_tree, write_unsynced};
pub use listing::{FileText, PackageFile};
pub use unzip::{check_zip, safe_entry_path};
use unzip::{declared_size, extract};

/// Lambda's limit on a zip uploaded directly.
pub const MAX_ZIP_BYTES: usize = 50 * 1024 * 1024;
/// Lambda's limit on the unzipped size of a function.
pub const MAX_UNZIPPED_BYTES: u64 = 250 * 1024 * 1024;
const MAX_ENTRIES: usize = 20_000;

/// Why a deployment package was refused.
#[derive(Debug, thiserror::Error)]
pub enum CodeError {
    /// the package is not a readable zip archive
    #[error(
        "Could not unzip uploaded file. Please check your file, then try to upload again. ({0})"
    )]
    NotAZip(String),
    /// the package is a zip archive without entries
    #[error("Uploaded file must be a non-empty zip")]
    Empty,
    /// the package is larger than allowed
    #[error("Unzipped size must be smaller than {MAX_UNZIPPED_BYTES} bytes")]
    TooLarge,
    /// the zipped package is larger than allowed
    #[error("Zipped file size must be smaller than {MAX_ZIP_BYTES} bytes")]
    ZipTooLarge,
    /// an entry would be written outside the package root
    #[error("Could not unzip uploaded file: entry `{0}` escapes the package root")]
    UnsafePath(String),
    /// the package has too many entries
    #[error("Could not unzip uploaded file: more than {MAX_ENTRIES} entries")]
    TooManyEntries,
    /// the code store could not be written
    #[error("code store: {0}")]
    Io(#[from] io::Error),
}

impl CodeError {
    /// The `StateReasonCode` (or `LastUpdateStatusReasonCode`) of a function whose package
    /// failed this way after CreateFunction (or UpdateFunctionCode) had answered.
    pub fn reason_code(&self) -> &'static str {
        match self {
            CodeError::Io(_) => "InternalError",
            _ => "InvalidZipFileException",
        }
    }
}

/// Identifies a stored package.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredCode {
    pub sha256_hex: String,
    pub size: u64,
}

impl StoredCode {
    /// `CodeSha256` as Lambda reports it: base64 of the digest.
    pub fn sha256_base64(hex_digest: &str) -> String {
        use base64::Engine;
        let bytes = hex::decode(hex_digest).unwrap_or_default();
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }
}

#[derive(Debug, Clone)]
pub struct CodeStore {
    root: PathBuf,
    /// The kernel's boot id, if it has one: where unsynced packages are listed.
    boot: Option<String>,
}

/// The current boot's id (changes with every reboot).
fn boot_id() -> Option<String> {
    let id = fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let id = id.trim();
    (!id.is_empty() && id.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-'))
        .then(|| id.to_string())
}

impl CodeStore {
    pub fn open(root: &Path) -> io::Result<Self> {
        fs::create_dir_all(root.join("blobs"))?;
        fs::create_dir_all(root.join("code"))?;
        fs::create_dir_all(root.join("tmp"))?;
        // Leftovers of an interrupted write are never referenced.
        for entry in fs::read_dir(root.join("tmp"))?.flatten() {
            let _ = fs::remove_dir_all(entry.path()).or_else(|_| fs::remove_file(entry.path()));
        }
        let store = Self {
            root: root.to_path_buf(),
            boot: boot_id(),
        };
        store.drop_unsynced_of_earlier_boots()?;
        Ok(store)
    }

    /// Removes the packages fetched without a sync before the last reboot: the writes may be
    /// lost or torn. (The cluster fetches them again.)
    fn drop_unsynced_of_earlier_boots(&self) -> io::Result<()> {
        let Ok(boots) = fs::read_dir(self.root.join("unsynced")) else {
            return Ok(());
        };
        for boot in boots.flatten() {
            if Some(boot.file_name().to_string_lossy().as_ref()) == self.boot.as_deref() {
                continue;
            }
            for listed in fs::read_dir(boot.path())?.flatten() {
                let digest = listed.file_name().to_string_lossy().into_owned();
                if digest.len() == 64 && digest.bytes().all(|b| b.is_ascii_hexdigit()) {
                    let _ = fs::remove_file(self.zip_path(&digest));
                    let _ = fs::remove_dir_all(self.code_dir(&digest));
                }
            }
            fs::remove_dir_all(boot.path())?;
        }
        Ok(())
    }

    /// The extracted tree of a stored package.
    pub fn code_dir(&self, sha256_hex: &str) -> PathBuf {
        self.root.join("code").join(sha256_hex)
    }

    pub fn zip_path(&self, sha256_hex: &str) -> PathBuf {
        self.root.join("blobs").join(format!("{sha256_hex}.zip"))
    }

    /// Validates, stores and extracts a zip. Storing the same bytes twice is free.
    pub fn put_zip(&self, zip: &[u8]) -> Result<StoredCode, CodeError> {
        self.store(zip, true)
    }

    /// Checks a zip as Lambda does before it answers (its size, its central directory: its
    /// entries' paths and their unzipped size) and stores it, synced, without extracting it:
    /// [`Self::extract_stored`] does that later. Storing the same bytes twice is free.
    pub fn put_package(&self, zip: &[u8]) -> Result<StoredCode, CodeError> {
        check_zip(zip)?;
        let stored = StoredCode {
            sha256_hex: hex::encode(Sha256::digest(zip)),
            size: zip.len() as u64,
        };
        let path = self.zip_path(&stored.sha256_hex);
        if !path.is_file() {
            write_atomically(&path, zip, &self.root.join("tmp"))?;
        }
        Ok(stored)
    }

    /// Extracts a package stored by [`Self::put_package`] into its tree, synced (nothing to do
    /// if it has one). An entry that does not inflate, or a disk that fails, is an error, and
    /// no tree is left.
    pub fn extract_stored(&self, sha256_hex: &str) -> Result<(), CodeError> {
        if self.is_extracted(sha256_hex) {
            return Ok(());
        }
        let zip = fs::read(self.zip_path(sha256_hex))?;
        self.extract_into_place(&zip, sha256_hex, true)
    }

    /// Whether a package's tree is in place.
    pub fn is_extracted(&self, sha256_hex: &str) -> bool {
        self.code_dir(sha256_hex).is_dir()
    }

    /// Whether a package's zip is stored (its tree may not be extracted yet).
    pub fn has_zip(&self, sha256_hex: &str) -> bool {
        self.zip_path(sha256_hex).is_file()
    }

    /// A stored package's unzipped size, as its central directory declares it.
    pub fn unzipped_size(&self, sha256_hex: &str) -> Result<u64, CodeError> {
        declared_size(fs::File::open(self.zip_path(sha256_hex))?)
    }

    /// [`Self::put_zip`] for a package that can be fetched again: recorded as unsynced (one
    /// sync) rather than synced (one per file and directory). Without a boot id, synced.
    pub fn put_fetched(&self, zip: &[u8]) -> Result<StoredCode, CodeError> {
        let Some(boot) = &self.boot else {
            return self.put_zip(zip);
        };
        let digest = hex::encode(Sha256::digest(zip));
        if self.contains(&digest) {
            return Ok(StoredCode {
                sha256_hex: digest,
                size: zip.len() as u64,
            });
        }
        let list = self.root.join("unsynced").join(boot);
        if !list.is_dir() {
            fs::create_dir_all(&list)?;
            fsync_dir(&self.root.join("unsynced"))?;
            fsync_dir(&self.root)?;
        }
        fs::File::create(list.join(&digest))?;
        fsync_dir(&list)?;
        self.store(zip, false)
    }

    fn store(&self, zip: &[u8], sync: bool) -> Result<StoredCode, CodeError> {
        if zip.len() > MAX_ZIP_BYTES {
            return Err(CodeError::ZipTooLarge);
        }
        let hex_digest = hex::encode(Sha256::digest(zip));
        let stored = StoredCode {
            sha256_hex: hex_digest.clone(),
            size: zip.len() as u64,
        };
        if self.contains(&hex_digest) {
            return Ok(stored);
        }
        self.extract_into_place(zip, &hex_digest, sync)
            .map(|()| stored)
    }

    /// Extracts `zip` to a staging tree, writes the zip beside it unless it is stored already,
    /// and renames the tree into place; synced (each file, then each rename) if `sync`.
    fn extract_into_place(
        &self,
        zip: &[u8],
        hex_digest: &str,
        sync: bool,
    ) -> Result<(), CodeError> {
        let final_dir = self.code_dir(hex_digest);
        let staging = self
            .root
            .join("tmp")
            .join(format!("{hex_digest}.{}", uuid::Uuid::new_v4()));
        let result = extract(zip, &staging).and_then(|()| {
            let zip_path = self.zip_path(hex_digest);
            if sync {
                sync_tree(&staging)?;
                if !zip_path.is_file() {
                    write_atomically(&zip_path, zip, &self.root.join("tmp"))?;
                }
            } else {
                write_unsynced(&zip_path, zip, &self.root.join("tmp"))?;
            }
            match fs::rename(&staging, &final_dir) {
                Ok(()) => Ok::<(), CodeError>(()),
                // Another upload of the same bytes won the race; its tree is identical.
                Err(_) if final_dir.is_dir() => Ok(()),
                Err(e) => Err(e.into()),
            }?;
            if sync {
                fsync_dir(&self.root.join("code"))?;
            }
            Ok(())
        });
        if staging.exists() {
            let _ = fs::remove_dir_all(&staging);
        }
        result
    }

    /// Whether a package is stored complete (its zip and its extracted tree).
    pub fn contains(&self, sha256_hex: &str) -> bool {
        self.code_dir(sha256_hex).is_dir() && self.zip_path(sha256_hex).is_file()
    }

    /// Takes a package out of the store at once (two renames/unlinks); returns where its tree
    /// went, for the caller to delete at leisure. `None` if it was not stored.
    pub fn unlink(&self, sha256_hex: &str) -> Option<PathBuf> {
        let _ = fs::remove_file(self.zip_path(sha256_hex));
        let doomed = self
            .root
            .join("tmp")
            .join(format!("{sha256_hex}.{}.deleted", uuid::Uuid::new_v4()));
        fs::rename(self.code_dir(sha256_hex), &doomed).ok()?;
        Some(doomed)
    }

    /// Removes packages no function refers to any more.
    pub fn collect_garbage(&self, live: &[String]) {
        let Ok(entries) = fs::read_dir(self.root.join("code")) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !live.contains(&name) {
                let _ = fs::remove_dir_all(entry.path());
                let _ = fs::remove_file(self.zip_path(&name));
            }
        }
        // Zips stored but never extracted (a function deleted, or a create that failed to
        // commit, before its package was).
        if let Ok(blobs) = fs::read_dir(self.root.join("blobs")) {
            for blob in blobs.flatten() {
                let name = blob.file_name().to_string_lossy().into_owned();
                if let Some(digest) = name.strip_suffix(".zip") {
                    if !live.iter().any(|l| l == digest) {
                        let _ = fs::remove_file(blob.path());
                    }
                }
            }
        }
        // The instrumented copies (and kept traces) of packages no function refers to.
        let Ok(entries) = fs::read_dir(self.root.join("breakout")) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let digest = name.split('.').next().unwrap_or_default();
            if !live.iter().any(|l| l == digest) {
                let _ = fs::remove_dir_all(entry.path()).or_else(|_| fs::remove_file(entry.path()));
            }
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::io::Write;

    pub(super) fn zip_of(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let mut out = io::Cursor::new(Vec::new());
        let mut writer = zip::ZipWriter::new(&mut out);
        for (name, data) in entries {
            let options = zip::write::SimpleFileOptions::default().unix_permissions(0o755);
            writer.start_file(*name, options).unwrap();
            writer.write_all(data).unwrap();
        }
        writer.finish().unwrap();
        out.into_inner()
    }

    #[test]
    fn fetched_packages_outlive_a_restart_but_not_a_reboot() {
        let dir = tempfile::tempdir().unwrap();
        let store = CodeStore::open(dir.path()).unwrap();
        assert!(store.boot.is_some(), "Linux has a boot id");
        let zip = zip_of(&[("app.py", b"def handler(e, c): return 1")]);
        let fetched = store.put_fetched(&zip).unwrap();
        assert_eq!(fetched.sha256_hex, hex::encode(Sha256::digest(&zip)));
        assert!(store.contains(&fetched.sha256_hex));
        // The same boot: the page cache kept every write.
        let store = CodeStore::open(dir.path()).unwrap();
        assert!(store.contains(&fetched.sha256_hex));
        // A package listed under another boot may be torn: it goes, the others stay.
        let synced = store.put_zip(&zip_of(&[("a.py", b"x")])).unwrap();
        let other_boot = dir
            .path()
            .join("unsynced/00000000-0000-0000-0000-000000000000");
        fs::create_dir_all(&other_boot).unwrap();
        fs::rename(
            dir.path()
                .join("unsynced")
                .join(store.boot.as_ref().unwrap())
                .join(&fetched.sha256_hex),
            other_boot.join(&fetched.sha256_hex),
        )
        .unwrap();
        let store = CodeStore::open(dir.path()).unwrap();
        assert!(!store.contains(&fetched.sha256_hex));
        assert!(!store.zip_path(&fetched.sha256_hex).exists());
        assert!(store.contains(&synced.sha256_hex));
        assert!(!other_boot.exists());
    }

    #[test]
    fn stores_and_extracts_content_addressed() {
        let dir = tempfile::tempdir().unwrap();
        let store = CodeStore::open(dir.path()).unwrap();
        let zip = zip_of(&[("index.js", b"exports.handler = 1"), ("lib/a.py", b"x")]);
        let code = store.put_zip(&zip).unwrap();
        assert_eq!(code.sha256_hex, hex::encode(Sha256::digest(&zip)));
        let tree = store.code_dir(&code.sha256_hex);
        assert_eq!(
            fs::read(tree.join("index.js")).unwrap(),
            b"exports.handler = 1"
        );
        assert!(tree.join("lib/a.py").is_file());
        assert_eq!(store.put_zip(&zip).unwrap(), code);
        assert!(store.contains(&code.sha256_hex));
        let doomed = store.unlink(&code.sha256_hex).unwrap();
        assert!(!store.contains(&code.sha256_hex));
        assert!(doomed.join("index.js").is_file());
        assert!(store.unlink(&code.sha256_hex).is_none());
        // Stored again after an unlink, it is complete again.
        assert_eq!(store.put_zip(&zip).unwrap(), code);
        assert!(store.contains(&code.sha256_hex));
    }

    #[test]
    fn a_package_is_stored_first_and_extracted_after() {
        let dir = tempfile::tempdir().unwrap();
        let store = CodeStore::open(dir.path()).unwrap();
        let zip = zip_of(&[
            ("app.py", b"def handler(e, c): return 1"),
            ("lib/a.py", b"xy"),
        ]);
        let code = store.put_package(&zip).unwrap();
        assert!(store.has_zip(&code.sha256_hex));
        assert!(!store.is_extracted(&code.sha256_hex));
        assert_eq!(store.unzipped_size(&code.sha256_hex).unwrap(), 29);
        store.extract_stored(&code.sha256_hex).unwrap();
        assert!(store.contains(&code.sha256_hex));
        assert_eq!(
            fs::read(store.code_dir(&code.sha256_hex).join("lib/a.py")).unwrap(),
            b"xy"
        );
        // What the central directory shows is refused before anything is stored.
        assert!(matches!(
            store.put_package(&zip_of(&[("../up", b"x")])),
            Err(CodeError::UnsafePath(_))
        ));
        assert_eq!(fs::read_dir(dir.path().join("blobs")).unwrap().count(), 1);
        // A zip stored but never extracted, that no function uses, is collected.
        let orphan = store.put_package(&zip_of(&[("b.py", b"b")])).unwrap();
        store.collect_garbage(std::slice::from_ref(&code.sha256_hex));
        assert!(!store.has_zip(&orphan.sha256_hex));
        assert!(store.contains(&code.sha256_hex));
    }

    #[test]
    fn an_entry_that_does_not_inflate_leaves_no_tree() {
        let dir = tempfile::tempdir().unwrap();
        let store = CodeStore::open(dir.path()).unwrap();
        let data = [b"kiln-entry-".as_slice(), &[7u8; 64]].concat();
        let mut out = io::Cursor::new(Vec::new());
        let mut writer = zip::ZipWriter::new(&mut out);
        let stored = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Stored);
        writer.start_file("data.bin", stored).unwrap();
        writer.write_all(&data).unwrap();
        writer.finish().unwrap();
        let mut zip = out.into_inner();
        // The central directory still reads; the entry's bytes no longer match its CRC.
        let at = zip.windows(data.len()).position(|w| w == data).unwrap();
        zip[at + 3] ^= 0xff;
        let code = store.put_package(&zip).unwrap();
        let err = store.extract_stored(&code.sha256_hex).unwrap_err();
        assert_eq!(err.reason_code(), "InvalidZipFileException", "{err}");
        assert!(!store.is_extracted(&code.sha256_hex));
        assert_eq!(fs::read_dir(dir.path().join("tmp")).unwrap().count(), 0);
    }

    #[test]
    fn refuses_garbage() {
        let dir = tempfile::tempdir().unwrap();
        let store = CodeStore::open(dir.path()).unwrap();
        assert!(matches!(
            store.put_zip(b"not a zip").unwrap_err(),
            CodeError::NotAZip(_)
        ));
        assert!(matches!(
            store.put_zip(b"").unwrap_err(),
            CodeError::NotAZip(_)
        ));
        assert!(matches!(
            store.put_zip(&zip_of(&[])).unwrap_err(),
            CodeError::Empty
        ));
    }

    #[test]
    fn refuses_zip_bombs() {
        let dir = tempfile::tempdir().unwrap();
        let store = CodeStore::open(dir.path()).unwrap();
        let mut out = io::Cursor::new(Vec::new());
        let mut writer = zip::ZipWriter::new(&mut out);
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated)
            .large_file(true);
        writer.start_file("zeros", options).unwrap();
        let chunk = vec![0u8; 1024 * 1024];
        for _ in 0..(MAX_UNZIPPED_BYTES / chunk.len() as u64 + 1) {
            writer.write_all(&chunk).unwrap();
        }
        writer.finish().unwrap();
        let zip = out.into_inner();
        assert!(zip.len() < MAX_ZIP_BYTES);
        assert!(matches!(
            store.put_zip(&zip).unwrap_err(),
            CodeError::TooLarge
        ));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
            let dir = tempfile::tempdir().unwrap();
            let store = CodeStore::open(dir.path()).unwrap();
            let _ = store.put_zip(&bytes);
        }
    }
}
