//! The functions' shareable test events: `(function, name)` to the event's JSON text.

use chrono::{DateTime, Utc};
use rusqlite::params;

use super::super::{RegistryError, TestEvent};
use super::Database;

impl Database {
    /// A function's test events, by name.
    pub fn test_events(&self, function: &str) -> Result<Vec<TestEvent>, RegistryError> {
        let db = self.db();
        let mut stmt = db.prepare(
            "SELECT name, event, last_modified FROM test_events WHERE function = ?1 ORDER BY name",
        )?;
        let rows = stmt.query_map([function], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, String>(2)?,
            ))
        })?;
        let mut events = Vec::new();
        for row in rows {
            let (name, event, modified) = row?;
            let last_modified = DateTime::parse_from_rfc3339(&modified)
                .map_err(|e| RegistryError::Corrupt(format!("test event {function}/{name}: {e}")))?
                .with_timezone(&Utc);
            events.push(TestEvent {
                name,
                event,
                last_modified,
            });
        }
        Ok(events)
    }

    /// Saves a test event, replacing one of the same name.
    pub fn put_test_event(&self, function: &str, event: &TestEvent) -> Result<(), RegistryError> {
        self.db().execute(
            "INSERT OR REPLACE INTO test_events (function, name, event, last_modified)
             VALUES (?1, ?2, ?3, ?4)",
            params![
                function,
                event.name,
                event.event,
                event.last_modified.to_rfc3339()
            ],
        )?;
        Ok(())
    }

    /// Deletes a test event; whether there was one.
    pub fn delete_test_event(&self, function: &str, name: &str) -> Result<bool, RegistryError> {
        let changed = self.db().execute(
            "DELETE FROM test_events WHERE function = ?1 AND name = ?2",
            [function, name],
        )?;
        Ok(changed == 1)
    }
}
