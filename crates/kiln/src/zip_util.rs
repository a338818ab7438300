//! Building deployment packages (the CLI's `--code DIR`, the demo function).

use std::io::{Cursor, Write};
use std::path::Path;

/// Zips `(name, contents, executable)` entries in memory.
pub fn zip_files(files: &[(&str, &[u8], bool)]) -> std::io::Result<Vec<u8>> {
    let mut out = Cursor::new(Vec::new());
    let mut writer = zip::ZipWriter::new(&mut out);
    for (name, contents, executable) in files {
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated)
            .unix_permissions(if *executable { 0o755 } else { 0o644 });
        writer
            .start_file(*name, options)
            .map_err(std::io::Error::other)?;
        writer.write_all(contents)?;
    }
    writer.finish().map_err(std::io::Error::other)?;
    Ok(out.into_inner())
}

/// Zips a directory tree, keeping each file's executable bit.
pub fn zip_dir(dir: &Path) -> std::io::Result<Vec<u8>> {
    use std::os::unix::fs::PermissionsExt;
    let mut entries = Vec::new();
    collect(dir, &mut entries)?;
    entries.sort();
    let mut files = Vec::with_capacity(entries.len());
    for path in &entries {
        let name = path
            .strip_prefix(dir)
            .expect("inside dir")
            .to_string_lossy()
            .into_owned();
        let contents = std::fs::read(path)?;
        let executable = std::fs::metadata(path)?.permissions().mode() & 0o100 != 0;
        files.push((name, contents, executable));
    }
    let borrowed: Vec<(&str, &[u8], bool)> = files
        .iter()
        .map(|(n, c, x)| (n.as_str(), c.as_slice(), *x))
        .collect();
    zip_files(&borrowed)
}

fn collect(dir: &Path, out: &mut Vec<std::path::PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        if kind.is_dir() {
            collect(&entry.path(), out)?;
        } else if kind.is_file() {
            out.push(entry.path());
        }
    }
    Ok(())
}
