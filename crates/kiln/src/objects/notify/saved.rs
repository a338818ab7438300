//! Where buckets' notification configurations are kept: with the bucket's row in the local
//! store's database (as its CORS rules are, so the row's deletion takes them along), or, for a
//! remote store (which cannot invoke kiln's functions), in a file of kiln's data dir.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use crate::objects::local::meta::{Meta, MetaError};
use crate::sync::LockExt;

/// Why a configuration could not be read or kept.
#[derive(Debug, thiserror::Error)]
pub enum SaveError {
    /// the object metadata database failed
    #[error("bucket notification configurations: {0}")]
    Database(#[from] MetaError),
    /// the configurations' file could not be read or written
    #[error("bucket notification configurations in {0}: {1}")]
    File(PathBuf, #[source] std::io::Error),
    /// the configurations' file is not what kiln writes
    #[error("bucket notification configurations in {0} are unreadable: {1}")]
    Corrupt(PathBuf, #[source] serde_json::Error),
}

/// Durable storage of each bucket's configuration (JSON).
pub trait SavedConfigs: Send + Sync {
    /// Every bucket's configuration, at start-up.
    fn load(&self) -> Result<Vec<(String, String)>, SaveError>;
    /// Keeps (or, with None, forgets) a bucket's configuration before it is answered.
    fn save(&self, bucket: &str, config: Option<&str>) -> Result<(), SaveError>;
}

/// The local store's database.
pub struct InDatabase(pub Arc<Meta>);

impl SavedConfigs for InDatabase {
    fn load(&self) -> Result<Vec<(String, String)>, SaveError> {
        Ok(self.0.bucket_notifications()?)
    }

    fn save(&self, bucket: &str, config: Option<&str>) -> Result<(), SaveError> {
        // A bucket deleted meanwhile has no row to keep it: nothing to forget either.
        self.0.set_bucket_notifications(bucket, config)?;
        Ok(())
    }
}

/// One JSON file (bucket → configuration), replaced whole and synced on each change.
pub struct InFile {
    path: PathBuf,
    /// Serializes the read-modify-write of the file.
    lock: Mutex<()>,
}

impl InFile {
    pub fn new(path: PathBuf) -> Self {
        Self {
            path,
            lock: Mutex::new(()),
        }
    }

    fn read(&self) -> Result<BTreeMap<String, String>, SaveError> {
        match std::fs::read(&self.path) {
            Ok(bytes) => {
                serde_json::from_slice(&bytes).map_err(|e| SaveError::Corrupt(self.path.clone(), e))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
            Err(e) => Err(SaveError::File(self.path.clone(), e)),
        }
    }

    /// Writes a temporary file, syncs it and renames it over the old one: a crash leaves one or
    /// the other.
    fn write(&self, all: &BTreeMap<String, String>) -> Result<(), SaveError> {
        let fail = |e| SaveError::File(self.path.clone(), e);
        let temporary = self.path.with_extension("json.tmp");
        let bytes = serde_json::to_vec(all).map_err(|e| fail(std::io::Error::other(e)))?;
        let mut file = std::fs::File::create(&temporary).map_err(fail)?;
        file.write_all(&bytes).map_err(fail)?;
        file.sync_all().map_err(fail)?;
        std::fs::rename(&temporary, &self.path).map_err(fail)?;
        if let Some(dir) = self.path.parent() {
            std::fs::File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(fail)?;
        }
        Ok(())
    }
}

impl SavedConfigs for InFile {
    fn load(&self) -> Result<Vec<(String, String)>, SaveError> {
        let _held = self.lock.locked();
        Ok(self.read()?.into_iter().collect())
    }

    fn save(&self, bucket: &str, config: Option<&str>) -> Result<(), SaveError> {
        let _held = self.lock.locked();
        let mut all = self.read()?;
        let changed = match config {
            Some(config) => {
                all.insert(bucket.to_string(), config.to_string())
                    .as_deref()
                    != Some(config)
            }
            None => all.remove(bucket).is_some(),
        };
        if changed {
            self.write(&all)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_keeps_what_was_saved_and_forgets_what_was_removed() {
        let dir = tempfile::tempdir().unwrap();
        let saved = InFile::new(dir.path().join("notifications.json"));
        assert!(saved.load().unwrap().is_empty());
        saved.save("a", Some("[1]")).unwrap();
        saved.save("b", Some("[2]")).unwrap();
        saved.save("a", None).unwrap();
        let reopened = InFile::new(dir.path().join("notifications.json"));
        assert_eq!(
            reopened.load().unwrap(),
            vec![("b".to_string(), "[2]".to_string())]
        );
    }
}
