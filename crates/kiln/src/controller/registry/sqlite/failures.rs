//! Events that failed every attempt, kept in a node's database with their payload and last
//! error until they are queued again or forgotten.

use chrono::Utc;
use rusqlite::{params, OptionalExtension};

use super::super::RegistryError;
use super::queue::QueuedEvent;
use super::Database;

impl Database {
    /// Moves an event that failed every attempt to the failure table, in one transaction.
    pub fn fail_event(&self, event: &QueuedEvent, error: &str) -> Result<(), RegistryError> {
        let mut db = self.db();
        let tx = db.transaction()?;
        tx.execute(
            "INSERT OR REPLACE INTO async_failures (request_id, function, payload, error, failed_at)
             VALUES (?1, ?2, ?3, ?4, ?5)",
            params![event.request_id, event.function, event.payload, error, Utc::now().to_rfc3339()],
        )?;
        tx.execute("DELETE FROM async_queue WHERE id = ?1", [event.id])?;
        tx.commit()?;
        Ok(())
    }

    /// The error recorded for an event that exhausted its retries.
    pub fn failure(&self, request_id: &str) -> Result<Option<String>, RegistryError> {
        Ok(self
            .db()
            .query_row(
                "SELECT error FROM async_failures WHERE request_id = ?1",
                [request_id],
                |r| r.get(0),
            )
            .optional()?)
    }

    /// Events that failed every attempt, most recent first.
    pub fn failures(&self, limit: usize) -> Result<Vec<AsyncFailure>, RegistryError> {
        let db = self.db();
        let mut statement = db.prepare(
            "SELECT request_id, function, payload, error, failed_at FROM async_failures
             ORDER BY failed_at DESC, request_id LIMIT ?1",
        )?;
        let rows = statement.query_map([limit as i64], |r| {
            Ok(AsyncFailure {
                request_id: r.get(0)?,
                function: r.get(1)?,
                payload: String::from_utf8_lossy(&r.get::<_, Vec<u8>>(2)?).into_owned(),
                error: r.get(3)?,
                failed_at: r.get(4)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Forgets a failed event; whether there was one.
    pub fn delete_failure(&self, request_id: &str) -> Result<bool, RegistryError> {
        let deleted = self.db().execute(
            "DELETE FROM async_failures WHERE request_id = ?1",
            [request_id],
        )?;
        Ok(deleted > 0)
    }

    /// Queues a failed event again with its attempts reset, under its request id, in one
    /// transaction; whether there was one.
    pub fn requeue_failure(&self, request_id: &str) -> Result<bool, RegistryError> {
        let mut db = self.db();
        let tx = db.transaction()?;
        let now = Utc::now().to_rfc3339();
        let queued = tx.execute(
            "INSERT INTO async_queue (request_id, function, payload, attempts, not_before, enqueued_at)
             SELECT request_id, function, payload, 0, ?2, ?2 FROM async_failures WHERE request_id = ?1",
            params![request_id, now],
        )?;
        tx.execute(
            "DELETE FROM async_failures WHERE request_id = ?1",
            [request_id],
        )?;
        tx.commit()?;
        Ok(queued > 0)
    }
}

/// An event that failed every attempt, kept with its payload and last error.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct AsyncFailure {
    pub request_id: String,
    pub function: String,
    /// The event (JSON, so text; bytes that are not UTF-8 are replaced).
    pub payload: String,
    pub error: String,
    /// RFC 3339.
    pub failed_at: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_events_are_listed_requeued_and_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let reg = Database::open(&dir.path().join("kiln.db")).unwrap();
        for id in ["a", "b"] {
            reg.enqueue(id, "f", br#"{"n": 1}"#).unwrap();
        }
        let pending = reg.pending_events(10).unwrap();
        assert_eq!(
            pending
                .iter()
                .map(|e| e.request_id.as_str())
                .collect::<Vec<_>>(),
            ["a", "b"]
        );
        for event in reg.due_events(10, &[]).unwrap() {
            reg.fail_event(&event, "boom").unwrap();
        }
        assert!(reg.pending_events(10).unwrap().is_empty());
        let failures = reg.failures(10).unwrap();
        assert_eq!(failures.len(), 2);
        assert_eq!(failures[0].payload, r#"{"n": 1}"#);
        assert_eq!(failures[0].error, "boom");

        assert!(reg.requeue_failure("a").unwrap());
        assert!(!reg.requeue_failure("a").unwrap());
        let due = reg.due_events(10, &[]).unwrap();
        assert_eq!(due.len(), 1);
        assert_eq!((due[0].request_id.as_str(), due[0].attempts), ("a", 0));
        assert_eq!(due[0].payload, br#"{"n": 1}"#);

        assert!(reg.delete_failure("b").unwrap());
        assert!(!reg.delete_failure("b").unwrap());
        assert!(reg.failures(10).unwrap().is_empty());
    }
}
