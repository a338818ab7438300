//! A stored package read back for display: its files, and one file's text (the console's code
//! view).

use std::fs;
use std::io::Read;

use super::{CodeError, CodeStore};

/// A file of a stored package, as the console's code view lists it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct PackageFile {
    pub path: String,
    pub size: u64,
}

/// One file of a package read for display.
#[derive(Debug, PartialEq, Eq)]
pub enum FileText {
    Text(String),
    /// Not UTF-8, or with NUL bytes.
    Binary,
    /// Larger than asked for.
    TooLarge(u64),
    Missing,
}

impl CodeStore {
    fn archive(&self, sha256_hex: &str) -> Result<zip::ZipArchive<fs::File>, CodeError> {
        let file = fs::File::open(self.zip_path(sha256_hex))?;
        zip::ZipArchive::new(file).map_err(|e| CodeError::NotAZip(e.to_string()))
    }

    /// The files of a stored package (directories left out), in the zip's order.
    pub fn files(&self, sha256_hex: &str) -> Result<Vec<PackageFile>, CodeError> {
        let mut archive = self.archive(sha256_hex)?;
        let mut files = Vec::with_capacity(archive.len());
        for i in 0..archive.len() {
            let entry = archive
                .by_index(i)
                .map_err(|e| CodeError::NotAZip(e.to_string()))?;
            if !entry.is_dir() {
                files.push(PackageFile {
                    path: entry.name().to_string(),
                    size: entry.size(),
                });
            }
        }
        Ok(files)
    }

    /// The file named `path` in a stored package (the zip's own name for it: nothing is looked
    /// up on disk), as text if it is text of at most `max` bytes.
    pub fn file_text(&self, sha256_hex: &str, path: &str, max: u64) -> Result<FileText, CodeError> {
        let mut archive = self.archive(sha256_hex)?;
        let entry = match archive.by_name(path) {
            Ok(entry) if !entry.is_dir() => entry,
            Ok(_) | Err(zip::result::ZipError::FileNotFound) => return Ok(FileText::Missing),
            Err(e) => return Err(CodeError::NotAZip(e.to_string())),
        };
        if entry.size() > max {
            return Ok(FileText::TooLarge(entry.size()));
        }
        // The size in the directory is the zip's word; the read is bounded either way.
        let mut bytes = Vec::with_capacity(entry.size() as usize);
        entry.take(max + 1).read_to_end(&mut bytes)?;
        if bytes.len() as u64 > max {
            return Ok(FileText::TooLarge(bytes.len() as u64));
        }
        match String::from_utf8(bytes) {
            Ok(text) if !text.contains('\0') => Ok(FileText::Text(text)),
            _ => Ok(FileText::Binary),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn package_files_are_listed_and_read_as_text_only() {
        let dir = tempfile::tempdir().unwrap();
        let store = CodeStore::open(dir.path()).unwrap();
        let zip = crate::zip_util::zip_files(&[
            ("app.py", b"print('hi')\n", false),
            ("lib/data.bin", &[0, 1, 2, 255], false),
            ("big.txt", &[b'a'; 100], false),
        ])
        .unwrap();
        let stored = store.put_zip(&zip).unwrap();
        let sha = &stored.sha256_hex;
        let files = store.files(sha).unwrap();
        assert_eq!(
            files.iter().map(|f| f.path.as_str()).collect::<Vec<_>>(),
            ["app.py", "lib/data.bin", "big.txt"]
        );
        assert_eq!(
            store.file_text(sha, "app.py", 64).unwrap(),
            FileText::Text("print('hi')\n".into())
        );
        assert_eq!(
            store.file_text(sha, "lib/data.bin", 64).unwrap(),
            FileText::Binary
        );
        assert_eq!(
            store.file_text(sha, "big.txt", 64).unwrap(),
            FileText::TooLarge(100)
        );
        for missing in ["nope", "../app.py", "/app.py", "lib", ""] {
            assert_eq!(
                store.file_text(sha, missing, 64).unwrap(),
                FileText::Missing,
                "{missing}"
            );
        }
        assert!(store.files(&"0".repeat(64)).is_err());
    }
}
