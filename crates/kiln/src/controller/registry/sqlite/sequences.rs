//! The sequences table of a node's database: each sequence's functions, in order.

use chrono::{DateTime, Utc};
use rusqlite::params;

use super::super::RegistryError;
use super::queue::take_queued;
use super::Database;

impl Database {
    /// Creates or replaces a sequence.
    pub fn put_sequence(
        &self,
        name: &str,
        functions: &[String],
        modified: &DateTime<Utc>,
    ) -> Result<(), RegistryError> {
        let functions =
            serde_json::to_string(functions).map_err(|e| RegistryError::Corrupt(e.to_string()))?;
        self.db().execute(
            "INSERT OR REPLACE INTO sequences (name, functions, last_modified) VALUES (?1, ?2, ?3)",
            params![name, functions, modified.to_rfc3339()],
        )?;
        Ok(())
    }

    /// Deletes a sequence and its queued events (a function of the same name created later
    /// must not run them); returns whether it existed, and the runs those events would have
    /// resumed (their intermediates can go).
    pub fn delete_sequence(&self, name: &str) -> Result<(bool, Vec<String>), RegistryError> {
        let mut db = self.db();
        let tx = db.transaction()?;
        let deleted = tx.execute("DELETE FROM sequences WHERE name = ?1", [name])? == 1;
        let runs = take_queued(&tx, name)?;
        tx.commit()?;
        Ok((deleted, runs))
    }

    pub fn sequences(&self) -> Result<Vec<crate::controller::registry::Sequence>, RegistryError> {
        let db = self.db();
        let mut stmt =
            db.prepare("SELECT name, functions, last_modified FROM sequences ORDER BY name")?;
        let rows = stmt.query_map([], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, String>(2)?,
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (name, functions, modified) = row?;
            out.push(crate::controller::registry::Sequence {
                functions: serde_json::from_str(&functions)
                    .map_err(|e| RegistryError::Corrupt(format!("sequence {name}: {e}")))?,
                last_modified: DateTime::parse_from_rfc3339(&modified)
                    .map_err(|e| RegistryError::Corrupt(format!("sequence {name}: {e}")))?
                    .with_timezone(&Utc),
                name,
            });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Progress, Requeue};
    use super::*;

    #[test]
    fn a_deleted_sequence_takes_its_queued_events_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let reg = Database::open(&dir.path().join("kiln.db")).unwrap();
        reg.put_sequence("pipe", &["a".into(), "b".into()], &Utc::now())
            .unwrap();
        reg.enqueue("r1", "pipe", b"{}").unwrap();
        reg.enqueue("r2", "other", b"{}").unwrap();
        assert_eq!(reg.queue_depth().unwrap(), 2);
        let past = Utc::now() - chrono::TimeDelta::seconds(1);
        let progress = Progress {
            run: "run-1".into(),
            stage: 1,
            path: vec!["a".into(), "b".into()],
            payload: b"{}".to_vec(),
            until: Utc::now(),
        };
        let id = reg.due_events(10, &[]).unwrap()[0].id;
        reg.retry_event(id, past, Requeue::Failed, Some(&progress))
            .unwrap();
        assert_eq!(
            reg.delete_sequence("pipe").unwrap(),
            (true, vec!["run-1".to_string()]),
            "the run its event would have resumed can go"
        );
        assert_eq!(
            reg.queue_depth().unwrap(),
            1,
            "the other function's event stays"
        );
        assert!(reg.sequences().unwrap().is_empty());
        assert_eq!(reg.delete_sequence("pipe").unwrap(), (false, vec![]));
    }
}
