//! The durable queue of asynchronous invocations in a node's database: what is accepted,
//! which events are due (each function's oldest first, within its concurrency), and what a
//! delivery that did not complete puts back.

use chrono::{DateTime, Utc};
use rusqlite::{params, OptionalExtension, Transaction};

use super::super::RegistryError;
use super::Database;

/// One queued asynchronous invocation.
#[derive(Debug, Clone, PartialEq)]
pub struct QueuedEvent {
    pub id: i64,
    pub request_id: String,
    pub function: String,
    pub payload: Vec<u8>,
    pub attempts: u32,
    pub not_before: DateTime<Utc>,
    /// Deliveries refused for lack of concurrency so far (they do not use up attempts).
    pub throttles: u32,
    /// When the event was accepted (events of databases from before this was kept: when
    /// kiln started).
    pub enqueued_at: DateTime<Utc>,
    /// A sequence's event: where its last delivery stopped, to resume there.
    pub resume: Option<Progress>,
}

/// Where a delivery of a sequence's event stopped: the stage that failed or was throttled,
/// the input it had, and the run whose intermediate outputs the stages before it wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    pub run: String,
    /// Its index among the sequence's functions (nested sequences expanded).
    pub stage: u32,
    /// The functions up to and including that stage then: a sequence changed since runs
    /// from the start.
    pub path: Vec<String>,
    pub payload: Vec<u8>,
    /// A retry after this runs from the start (what the earlier stages wrote may be gone).
    pub until: DateTime<Utc>,
}

/// A stored stage path: function names, one per line.
fn path_of(text: String) -> Vec<String> {
    text.split('\n').map(str::to_string).collect()
}

/// Why an event goes back to the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requeue {
    /// The function failed: one attempt used.
    Failed,
    /// No concurrency was available: counted separately, for the backoff.
    Throttled,
    /// kiln is shutting down: nothing counted.
    Interrupted,
}

impl Database {
    /// Deletes the queued events of `function` (a function or a sequence); returns the runs
    /// they would have resumed. Cluster mode's registry, whose records are elsewhere, calls it
    /// when one goes.
    pub fn drop_events(&self, function: &str) -> Result<Vec<String>, RegistryError> {
        let mut db = self.db();
        let tx = db.transaction()?;
        let runs = take_queued(&tx, function)?;
        tx.commit()?;
        Ok(runs)
    }

    /// Durably queues an Event invocation.
    pub fn enqueue(
        &self,
        request_id: &str,
        function: &str,
        payload: &[u8],
    ) -> Result<i64, RegistryError> {
        let db = self.db();
        db.execute(
            "INSERT INTO async_queue (request_id, function, payload, attempts, not_before, enqueued_at)
             VALUES (?1, ?2, ?3, 0, ?4, ?4)",
            params![request_id, function, payload, Utc::now().to_rfc3339()],
        )?;
        Ok(db.last_insert_rowid())
    }

    /// Queues a schedule's firing and records it, in one transaction: after a crash either
    /// both happened or neither, so the firing is neither lost nor queued twice.
    pub fn enqueue_firing(
        &self,
        request_id: &str,
        function: &str,
        payload: &[u8],
        schedule: &str,
        at: &chrono::DateTime<Utc>,
    ) -> Result<i64, RegistryError> {
        let mut db = self.db();
        let tx = db.transaction()?;
        tx.execute(
            "INSERT INTO async_queue (request_id, function, payload, attempts, not_before, enqueued_at)
             VALUES (?1, ?2, ?3, 0, ?4, ?4)",
            params![request_id, function, payload, Utc::now().to_rfc3339()],
        )?;
        let id = tx.last_insert_rowid();
        tx.execute(
            "INSERT INTO schedule_firings (name, fired_at) VALUES (?1, ?2)
             ON CONFLICT (name) DO UPDATE SET fired_at = excluded.fired_at",
            params![schedule, at.to_rfc3339()],
        )?;
        tx.commit()?;
        Ok(id)
    }

    /// The time each schedule last fired for, as [`Database::enqueue_firing`] recorded it.
    pub fn schedule_firings(
        &self,
    ) -> Result<std::collections::HashMap<String, chrono::DateTime<Utc>>, RegistryError> {
        let db = self.db();
        let mut stmt = db.prepare("SELECT name, fired_at FROM schedule_firings")?;
        let rows = stmt.query_map([], |row| {
            Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?))
        })?;
        let mut firings = std::collections::HashMap::new();
        for row in rows {
            let (name, at) = row?;
            let at = chrono::DateTime::parse_from_rfc3339(&at)
                .map_err(|e| RegistryError::Corrupt(format!("schedule {name}'s firing: {e}")))?;
            firings.insert(name, at.with_timezone(&Utc));
        }
        Ok(firings)
    }

    /// Events due now, oldest first, skipping those in `exclude` (already being delivered).
    pub fn due_events(
        &self,
        limit: usize,
        exclude: &[i64],
    ) -> Result<Vec<QueuedEvent>, RegistryError> {
        let busy: Vec<(i64, String)> = exclude.iter().map(|id| (*id, String::new())).collect();
        self.due_events_capped(limit, &busy, &|_| usize::MAX)
    }

    /// Events due now, oldest first, skipping `busy` ones (being delivered: id and function)
    /// and never taking more of one function than `cap(function)` minus its busy ones. Each
    /// function's oldest events are considered, so a function with a deep backlog it cannot
    /// run yet does not hide the events of the others.
    pub fn due_events_capped(
        &self,
        limit: usize,
        busy: &[(i64, String)],
        cap: &dyn Fn(&str) -> usize,
    ) -> Result<Vec<QueuedEvent>, RegistryError> {
        use std::collections::HashMap;
        if limit == 0 {
            return Ok(Vec::new());
        }
        let db = self.db();
        let now = Utc::now().to_rfc3339();
        let per_function = (limit + busy.len()) as i64;
        let heads: Vec<(i64, String)> = {
            let mut stmt = db.prepare_cached(
                "SELECT id, function FROM (
                     SELECT id, function,
                            ROW_NUMBER() OVER (PARTITION BY function ORDER BY id) AS n
                     FROM async_queue WHERE not_before <= ?1
                 ) WHERE n <= ?2 ORDER BY id",
            )?;
            let rows = stmt.query_map(params![now, per_function], |row| {
                Ok((row.get(0)?, row.get(1)?))
            })?;
            rows.collect::<Result<_, _>>()?
        };
        let mut running: HashMap<&str, usize> = HashMap::new();
        for (_, function) in busy {
            *running.entry(function.as_str()).or_default() += 1;
        }
        let mut picked = Vec::new();
        for (id, function) in &heads {
            if busy.iter().any(|(b, _)| b == id) {
                continue;
            }
            let n = running.entry(function.as_str()).or_default();
            if *n >= cap(function) {
                continue;
            }
            *n += 1;
            picked.push(*id);
            if picked.len() == limit {
                break;
            }
        }
        let mut stmt = db.prepare_cached(
            "SELECT id, request_id, function, payload, attempts, not_before, throttles, enqueued_at,
                    resume_run, resume_stage, resume_path, resume_payload, resume_until
             FROM async_queue WHERE id = ?1",
        )?;
        let time = |text: Option<String>| {
            text.and_then(|t| DateTime::parse_from_rfc3339(&t).ok())
                .map(|t| t.with_timezone(&Utc))
                .unwrap_or_else(Utc::now)
        };
        let mut out = Vec::with_capacity(picked.len());
        for id in picked {
            let event = stmt
                .query_row([id], |row| {
                    Ok(QueuedEvent {
                        id: row.get(0)?,
                        request_id: row.get(1)?,
                        function: row.get(2)?,
                        payload: row.get(3)?,
                        attempts: row.get(4)?,
                        not_before: time(row.get(5)?),
                        throttles: row.get(6)?,
                        enqueued_at: time(row.get(7)?),
                        resume: match (row.get(8)?, row.get(9)?, row.get(10)?, row.get(11)?) {
                            (Some(run), Some(stage), Some(path), Some(payload)) => Some(Progress {
                                run,
                                stage,
                                path: path_of(path),
                                payload,
                                until: time(row.get(12)?),
                            }),
                            _ => None,
                        },
                    })
                })
                .optional()?;
            out.extend(event);
        }
        Ok(out)
    }

    pub fn queue_depth(&self) -> Result<u64, RegistryError> {
        Ok(self
            .db()
            .query_row("SELECT COUNT(*) FROM async_queue", [], |r| r.get(0))?)
    }

    /// Removes a delivered event.
    pub fn complete_event(&self, id: i64) -> Result<(), RegistryError> {
        self.db()
            .execute("DELETE FROM async_queue WHERE id = ?1", [id])?;
        Ok(())
    }

    /// Puts an event back, due at `not_before`, counting what `why` says; a sequence's
    /// resumes at `resume` (None: from the start).
    pub fn retry_event(
        &self,
        id: i64,
        not_before: DateTime<Utc>,
        why: Requeue,
        resume: Option<&Progress>,
    ) -> Result<(), RegistryError> {
        let (attempts, throttles) = match why {
            Requeue::Failed => (1, 0),
            Requeue::Throttled => (0, 1),
            Requeue::Interrupted => (0, 0),
        };
        self.db().execute(
            "UPDATE async_queue SET attempts = attempts + ?2, throttles = throttles + ?3,
             not_before = ?4, resume_run = ?5, resume_stage = ?6, resume_path = ?7,
             resume_payload = ?8, resume_until = ?9 WHERE id = ?1",
            params![
                id,
                attempts,
                throttles,
                not_before.to_rfc3339(),
                resume.map(|p| &p.run),
                resume.map(|p| p.stage),
                resume.map(|p| p.path.join("\n")),
                resume.map(|p| &p.payload),
                resume.map(|p| p.until.to_rfc3339()),
            ],
        )?;
        Ok(())
    }

    /// Queued events, oldest first: what waits to be delivered, and how often it was tried.
    pub fn pending_events(&self, limit: usize) -> Result<Vec<PendingEvent>, RegistryError> {
        let db = self.db();
        let mut statement = db.prepare(
            "SELECT request_id, function, attempts, not_before FROM async_queue ORDER BY id LIMIT ?1",
        )?;
        let rows = statement.query_map([limit as i64], |r| {
            Ok(PendingEvent {
                request_id: r.get(0)?,
                function: r.get(1)?,
                attempts: r.get(2)?,
                not_before: r.get(3)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

/// Deletes the queued events of `function` in the caller's transaction; returns the runs they
/// would have resumed.
pub(super) fn take_queued(
    tx: &Transaction<'_>,
    function: &str,
) -> Result<Vec<String>, RegistryError> {
    let runs = {
        let mut stmt = tx.prepare(
            "SELECT resume_run FROM async_queue WHERE function = ?1 AND resume_run IS NOT NULL",
        )?;
        let runs = stmt.query_map([function], |row| row.get(0))?;
        runs.collect::<Result<Vec<String>, _>>()?
    };
    tx.execute("DELETE FROM async_queue WHERE function = ?1", [function])?;
    Ok(runs)
}

/// A queued event as the async page lists it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct PendingEvent {
    pub request_id: String,
    pub function: String,
    pub attempts: u32,
    /// RFC 3339: when the next attempt may start.
    pub not_before: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_firing_is_queued_with_its_record_or_not_at_all() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kiln.db");
        let reg = Database::open(&path).unwrap();
        let at = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        reg.enqueue_firing("r1", "f", b"{}", "nightly", &at)
            .unwrap();
        let later = at + chrono::TimeDelta::days(1);
        reg.enqueue_firing("r2", "f", b"{}", "nightly", &later)
            .unwrap();
        drop(reg);
        let reg = Database::open(&path).unwrap();
        assert_eq!(reg.schedule_firings().unwrap()["nightly"], later);
        assert_eq!(reg.due_events(10, &[]).unwrap().len(), 2);
        // A firing whose event cannot be written records nothing, and one whose record cannot
        // be written queues nothing.
        reg.db()
            .execute_batch("CREATE TRIGGER refuse BEFORE INSERT ON async_queue BEGIN SELECT RAISE(ABORT, 'full'); END;")
            .unwrap();
        let after = later + chrono::TimeDelta::days(1);
        assert!(reg
            .enqueue_firing("r3", "f", b"{}", "nightly", &after)
            .is_err());
        assert_eq!(reg.schedule_firings().unwrap()["nightly"], later);
        reg.db()
            .execute_batch(
                "DROP TRIGGER refuse;
                 CREATE TRIGGER refuse BEFORE UPDATE ON schedule_firings
                 BEGIN SELECT RAISE(ABORT, 'full'); END;",
            )
            .unwrap();
        assert!(reg
            .enqueue_firing("r3", "f", b"{}", "nightly", &after)
            .is_err());
        assert_eq!(reg.due_events(10, &[]).unwrap().len(), 2);
        assert_eq!(reg.schedule_firings().unwrap()["nightly"], later);
    }

    #[test]
    fn a_backlog_does_not_hide_other_functions() {
        let dir = tempfile::tempdir().unwrap();
        let reg = Database::open(&dir.path().join("kiln.db")).unwrap();
        let slow: Vec<i64> = (0..50)
            .map(|i| reg.enqueue(&format!("s{i}"), "slow", b"{}").unwrap())
            .collect();
        let fast = reg.enqueue("f", "fast", b"{}").unwrap();
        let cap = |f: &str| if f == "slow" { 1 } else { 10 };
        // Nothing busy: the oldest slow one and the fast one.
        let due = reg.due_events_capped(16, &[], &cap).unwrap();
        assert_eq!(
            due.iter().map(|e| e.id).collect::<Vec<_>>(),
            vec![slow[0], fast]
        );
        // The slow function is at its cap: only the fast one.
        let busy = vec![(slow[0], "slow".to_string())];
        let due = reg.due_events_capped(16, &busy, &cap).unwrap();
        assert_eq!(due.iter().map(|e| e.id).collect::<Vec<_>>(), vec![fast]);
        assert_eq!(due[0].request_id, "f");
        // The limit holds across functions, oldest first.
        let due = reg.due_events_capped(1, &[], &|_| 100).unwrap();
        assert_eq!(due.iter().map(|e| e.id).collect::<Vec<_>>(), vec![slow[0]]);
    }

    #[test]
    fn a_sequence_event_keeps_where_it_stopped_until_it_is_retried_without() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kiln.db");
        let reg = Database::open(&path).unwrap();
        let id = reg.enqueue("r1", "pipe", b"{}").unwrap();
        assert_eq!(reg.due_events(10, &[]).unwrap()[0].resume, None);
        let progress = Progress {
            run: "run-1".into(),
            stage: 2,
            path: vec!["a".into(), "b".into(), "c".into()],
            payload: b"{\"n\": 1}".to_vec(),
            // Whole seconds: what RFC 3339 with the default precision keeps exactly.
            until: DateTime::from_timestamp(Utc::now().timestamp() + 60, 0).unwrap(),
        };
        let past = Utc::now() - chrono::TimeDelta::seconds(1);
        reg.retry_event(id, past, Requeue::Failed, Some(&progress))
            .unwrap();
        drop(reg);
        // Durable, like the event.
        let reg = Database::open(&path).unwrap();
        let due = reg.due_events(10, &[]).unwrap();
        assert_eq!(
            (due[0].attempts, due[0].resume.as_ref()),
            (1, Some(&progress))
        );
        reg.retry_event(id, past, Requeue::Throttled, None).unwrap();
        let due = reg.due_events(10, &[]).unwrap();
        assert_eq!((due[0].throttles, due[0].resume.as_ref()), (1, None));
    }
}
