//! kiln's credentials and request authentication.
//!
//! `kiln up` creates one access key on first start, stores it in the data dir (mode 0600),
//! prints it once and writes it as the `kiln` profile where the AWS CLI and boto3 look for
//! profiles. Every control-API request must carry a valid SigV4 signature made with it.

pub mod sigv4;

use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use rand::Rng;
use serde::{Deserialize, Serialize};

pub use sigv4::{AuthError, Credentials, Identity, Verifier};

/// The stored form of kiln's credentials.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StoredCredentials {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub region: String,
}

impl StoredCredentials {
    pub fn credentials(&self) -> Credentials {
        Credentials {
            access_key_id: self.access_key_id.clone(),
            secret_access_key: self.secret_access_key.clone(),
        }
    }

    pub fn path(data_dir: &Path) -> PathBuf {
        data_dir.join("credentials.json")
    }

    pub fn load(data_dir: &Path) -> std::io::Result<Self> {
        Self::load_from(&Self::path(data_dir))
    }

    /// Loads the credentials, or creates them; the flag tells whether they are new.
    pub fn load_or_create(data_dir: &Path, region: &str) -> std::io::Result<(Self, bool)> {
        if let Ok(existing) = Self::load(data_dir) {
            return Ok((existing, false));
        }
        let creds = Self::generate(region);
        creds.save(data_dir)?;
        Ok((creds, true))
    }

    /// New random credentials: an `AKIA…` access key id and a 40-character secret.
    pub fn generate(region: &str) -> Self {
        let mut rng = rand::thread_rng();
        const UPPER: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
        const SECRET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let key: String = (0..16)
            .map(|_| UPPER[rng.gen_range(0..UPPER.len())] as char)
            .collect();
        let secret: String = (0..40)
            .map(|_| SECRET[rng.gen_range(0..SECRET.len())] as char)
            .collect();
        Self {
            access_key_id: format!("AKIA{key}"),
            secret_access_key: secret,
            region: region.to_string(),
        }
    }

    /// Writes them as `credentials.json` in `data_dir` (mode 0600, synced, renamed into place).
    pub fn save(&self, data_dir: &Path) -> std::io::Result<()> {
        self.save_to(&Self::path(data_dir))
    }

    /// Writes them to `path` (mode 0600, synced, renamed into place).
    pub fn save_to(&self, path: &Path) -> std::io::Result<()> {
        let json = serde_json::to_string_pretty(self).expect("credentials serialize");
        write_private_file(path, &json)
    }

    /// Reads credentials written by [`Self::save_to`] (or a data dir's `credentials.json`).
    pub fn load_from(path: &Path) -> std::io::Result<Self> {
        let text = fs::read_to_string(path)?;
        serde_json::from_str(&text)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
    }

    /// Writes (or replaces) the `[kiln]` profile in the AWS shared credentials and config files.
    pub fn write_aws_profile(&self, endpoint: &str) -> std::io::Result<(PathBuf, PathBuf)> {
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/root"));
        let credentials_file = std::env::var_os("AWS_SHARED_CREDENTIALS_FILE")
            .map(PathBuf::from)
            .unwrap_or_else(|| home.join(".aws/credentials"));
        let config_file = std::env::var_os("AWS_CONFIG_FILE")
            .map(PathBuf::from)
            .unwrap_or_else(|| home.join(".aws/config"));
        let credentials = format!(
            "aws_access_key_id = {}\naws_secret_access_key = {}\n",
            self.access_key_id, self.secret_access_key
        );
        upsert_section(&credentials_file, "[kiln]", &credentials)?;
        let config = format!("region = {}\nendpoint_url = {endpoint}\n", self.region);
        upsert_section(&config_file, "[profile kiln]", &config)?;
        Ok((credentials_file, config_file))
    }
}

/// Compares two secrets in time that depends on their lengths only, not on where they differ.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Replaces one `[section]` of an INI file, keeping every other section as it was.
fn upsert_section(path: &Path, header: &str, body: &str) -> std::io::Result<()> {
    // A symlinked file (dotfile managers do that) is updated where it points, not replaced.
    let resolved = fs::canonicalize(path);
    let path = resolved.as_deref().unwrap_or(path);
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent)?;
    }
    let existing = fs::read_to_string(path).unwrap_or_default();
    let mut out = String::new();
    let mut skipping = false;
    for line in existing.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('[') {
            skipping = trimmed == header;
        }
        if !skipping {
            out.push_str(line);
            out.push('\n');
        }
    }
    if !out.is_empty() && !out.ends_with("\n\n") {
        out.push('\n');
    }
    out.push_str(header);
    out.push('\n');
    out.push_str(body);
    write_private_file(path, &out)
}

/// Replaces a file readable by its owner only (credentials, AWS profiles) atomically: a
/// temporary file, synced, renamed over it.
pub(crate) fn write_private_file(path: &Path, text: &str) -> std::io::Result<()> {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent)?;
    }
    let tmp = path.with_extension("kiln-tmp");
    let mut file = fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    file.write_all(text.as_bytes())?;
    file.sync_all()?;
    fs::rename(tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_created_once() {
        let dir = tempfile::tempdir().unwrap();
        let (first, created) = StoredCredentials::load_or_create(dir.path(), "us-east-1").unwrap();
        assert!(created);
        assert!(first.access_key_id.starts_with("AKIA") && first.access_key_id.len() == 20);
        assert_eq!(first.secret_access_key.len(), 40);
        let (again, created) = StoredCredentials::load_or_create(dir.path(), "us-east-1").unwrap();
        assert!(!created);
        assert_eq!(first, again);
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(StoredCredentials::path(dir.path()))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn profile_sections_are_replaced_not_duplicated() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("credentials");
        fs::write(
            &file,
            "[default]\naws_access_key_id = X\n\n[kiln]\naws_access_key_id = OLD\n",
        )
        .unwrap();
        upsert_section(&file, "[kiln]", "aws_access_key_id = NEW\n").unwrap();
        upsert_section(&file, "[kiln]", "aws_access_key_id = NEWER\n").unwrap();
        let text = fs::read_to_string(&file).unwrap();
        assert!(text.contains("[default]\naws_access_key_id = X"));
        assert_eq!(text.matches("[kiln]").count(), 1);
        assert!(text.contains("NEWER") && !text.contains("OLD"));
    }

    #[test]
    fn symlinked_files_stay_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("dotfiles-credentials");
        fs::write(&target, "[default]\naws_access_key_id = X\n").unwrap();
        let link = dir.path().join("credentials");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        upsert_section(&link, "[kiln]", "aws_access_key_id = K\n").unwrap();
        assert!(fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        let text = fs::read_to_string(&target).unwrap();
        assert!(text.contains("[default]") && text.contains("[kiln]"));
    }
}
