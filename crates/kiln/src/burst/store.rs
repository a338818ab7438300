//! Apps in the metadata database (`kiln.db`), so they are back after a restart.
//!
//! A table of its own beside the controller's, on its own connection: an app names a function
//! but the controller never reads apps. The database password is a column of its own and is
//! never part of what the API answers.

use std::path::Path;
use std::sync::Mutex;

use rusqlite::{params, Connection};

use super::AppSpec;
use crate::sync::LockExt;

pub struct AppStore {
    db: Mutex<Connection>,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("metadata database: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("metadata database holds an unreadable app {0}: {1}")]
    Corrupt(String, serde_json::Error),
}

impl AppStore {
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let mut db = Connection::open(path)?;
        db.busy_timeout(std::time::Duration::from_secs(5))?;
        // kiln.db's registry writes too: transactions take the write lock when they begin.
        db.set_transaction_behavior(rusqlite::TransactionBehavior::Immediate);
        db.pragma_update(None, "journal_mode", "WAL")?;
        db.pragma_update(None, "synchronous", "FULL")?;
        db.execute_batch(
            "CREATE TABLE IF NOT EXISTS apps (
                 name TEXT PRIMARY KEY,
                 spec TEXT NOT NULL,
                 database_password TEXT
             );",
        )?;
        Ok(Self { db: Mutex::new(db) })
    }

    /// Creates or replaces an app. A `None` password keeps the stored one.
    pub fn put(&self, spec: &AppSpec, password: Option<&str>) -> Result<(), StoreError> {
        let text = serde_json::to_string(spec).expect("an app spec serialises");
        let db = self.db.locked();
        db.execute(
            "INSERT INTO apps (name, spec, database_password) VALUES (?1, ?2, ?3)
             ON CONFLICT(name) DO UPDATE SET spec = ?2,
                 database_password = COALESCE(?3, database_password)",
            params![spec.name, text, password],
        )?;
        Ok(())
    }

    pub fn delete(&self, name: &str) -> Result<bool, StoreError> {
        let db = self.db.locked();
        Ok(db.execute("DELETE FROM apps WHERE name = ?1", params![name])? > 0)
    }

    /// Every app with its database password.
    pub fn all(&self) -> Result<Vec<(AppSpec, Option<String>)>, StoreError> {
        let db = self.db.locked();
        let mut stmt =
            db.prepare("SELECT name, spec, database_password FROM apps ORDER BY name")?;
        let rows = stmt.query_map([], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, Option<String>>(2)?,
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (name, spec, password) = row?;
            let spec: AppSpec =
                serde_json::from_str(&spec).map_err(|e| StoreError::Corrupt(name, e))?;
            out.push((spec, password));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apps_and_their_passwords_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kiln.db");
        let mut spec = AppSpec::example();
        {
            let store = AppStore::open(&path).unwrap();
            store.put(&spec, Some("s3cret")).unwrap();
            spec.upstreams.push("http://127.0.0.1:8001".into());
            store.put(&spec, None).unwrap();
        }
        let store = AppStore::open(&path).unwrap();
        let all = store.all().unwrap();
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].0, spec);
        assert_eq!(all[0].1.as_deref(), Some("s3cret"));
        assert!(store.delete(&spec.name).unwrap());
        assert!(!store.delete(&spec.name).unwrap());
        assert!(store.all().unwrap().is_empty());
    }
}
