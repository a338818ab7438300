//! The metadata database of a single node: functions, URLs, sequences and the durable queue
//! of asynchronous invocations (in cluster mode, the queue only).
//!
//! SQLite in WAL mode with `synchronous=FULL`: a statement that returned has reached the disk,
//! which is what lets kiln acknowledge a deployment or an Event invocation and survive `kill -9`.

use std::path::Path;
use std::sync::Mutex;

use chrono::{DateTime, Utc};
use rusqlite::{params, Connection, OptionalExtension};

use super::{RegistryError, UrlSettings};
use crate::function::{Function, FunctionConfig, UrlAuth};
use crate::sync::LockExt;

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

pub struct Database {
    db: Mutex<Connection>,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS functions (
    name TEXT PRIMARY KEY,
    config TEXT NOT NULL,
    code_sha256 TEXT NOT NULL,
    code_size INTEGER NOT NULL,
    revision INTEGER NOT NULL,
    last_modified TEXT NOT NULL,
    reserved_concurrency INTEGER,
    url_auth TEXT
);
CREATE TABLE IF NOT EXISTS async_queue (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    request_id TEXT NOT NULL,
    function TEXT NOT NULL,
    payload BLOB NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    not_before TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS async_queue_by_function ON async_queue (function, id);
CREATE TABLE IF NOT EXISTS sequences (
    name TEXT PRIMARY KEY,
    functions TEXT NOT NULL,
    last_modified TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS async_failures (
    request_id TEXT PRIMARY KEY,
    function TEXT NOT NULL,
    payload BLOB NOT NULL,
    error TEXT NOT NULL,
    failed_at TEXT NOT NULL
);
";

impl Database {
    pub fn open(path: &Path) -> Result<Self, RegistryError> {
        let db = Connection::open(path)?;
        db.pragma_update(None, "journal_mode", "WAL")?;
        db.pragma_update(None, "synchronous", "FULL")?;
        db.busy_timeout(std::time::Duration::from_secs(5))?;
        db.execute_batch(SCHEMA)?;
        // Columns added after the first release; older databases get them here.
        for (table, column, kind) in [
            ("functions", "url_created", "TEXT"),
            ("functions", "url_modified", "TEXT"),
            ("functions", "url_cors", "TEXT"),
            ("functions", "tags", "TEXT"),
            ("functions", "published", "TEXT"),
            ("async_queue", "throttles", "INTEGER NOT NULL DEFAULT 0"),
            ("async_queue", "enqueued_at", "TEXT"),
            ("async_queue", "resume_run", "TEXT"),
            ("async_queue", "resume_stage", "INTEGER"),
            ("async_queue", "resume_path", "TEXT"),
            ("async_queue", "resume_payload", "BLOB"),
            ("async_queue", "resume_until", "TEXT"),
        ] {
            let present: bool = db
                .prepare(&format!(
                    "SELECT 1 FROM pragma_table_info('{table}') WHERE name = ?1"
                ))?
                .exists([column])?;
            if !present {
                db.execute_batch(&format!("ALTER TABLE {table} ADD COLUMN {column} {kind}"))?;
            }
        }
        Ok(Self { db: Mutex::new(db) })
    }

    /// Replaces a function's row together with its URL settings (`None` clears them), in one
    /// statement; false if the function does not exist.
    pub fn update_url(
        &self,
        f: &Function,
        settings: Option<&UrlSettings>,
    ) -> Result<bool, RegistryError> {
        let config =
            serde_json::to_string(&f.config).map_err(|e| RegistryError::Corrupt(e.to_string()))?;
        let cors = match settings.and_then(|s| s.cors.as_ref()) {
            Some(cors) => Some(
                serde_json::to_string(cors).map_err(|e| RegistryError::Corrupt(e.to_string()))?,
            ),
            None => None,
        };
        let changed = self.db().execute(
            "UPDATE functions SET config = ?2, code_sha256 = ?3, code_size = ?4, revision = ?5,
             last_modified = ?6, reserved_concurrency = ?7, url_auth = ?8, url_created = ?9,
             url_modified = ?10, url_cors = ?11, tags = ?12, published = ?13 WHERE name = ?1",
            params![
                f.name,
                config,
                f.code_sha256,
                f.code_size,
                f.revision,
                f.last_modified.to_rfc3339(),
                f.reserved_concurrency,
                url_auth_text(f.url_auth),
                settings.map(|s| s.created.to_rfc3339()),
                settings.map(|s| s.modified.to_rfc3339()),
                cors,
                tags_text(f)?,
                published_text(f)?,
            ],
        )?;
        Ok(changed == 1)
    }

    /// The URL settings of every function that has them.
    pub fn url_settings(&self) -> Result<Vec<(String, UrlSettings)>, RegistryError> {
        let db = self.db();
        let mut stmt = db.prepare(
            "SELECT name, url_created, url_modified, url_cors FROM functions
             WHERE url_created IS NOT NULL AND url_modified IS NOT NULL",
        )?;
        let rows = stmt.query_map([], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, String>(2)?,
                row.get::<_, Option<String>>(3)?,
            ))
        })?;
        let parse = |name: &str, text: &str| {
            DateTime::parse_from_rfc3339(text)
                .map(|t| t.with_timezone(&Utc))
                .map_err(|e| RegistryError::Corrupt(format!("{name}: {e}")))
        };
        let mut out = Vec::new();
        for row in rows {
            let (name, created, modified, cors) = row?;
            let cors = match cors {
                Some(text) => Some(
                    serde_json::from_str(&text)
                        .map_err(|e| RegistryError::Corrupt(format!("{name}: {e}")))?,
                ),
                None => None,
            };
            let settings = UrlSettings {
                created: parse(&name, &created)?,
                modified: parse(&name, &modified)?,
                cors,
            };
            out.push((name, settings));
        }
        Ok(out)
    }

    fn db(&self) -> std::sync::MutexGuard<'_, Connection> {
        // A panic while holding the lock cannot leave SQLite inconsistent: every change is a
        // transaction.
        self.db.locked()
    }

    /// Inserts a new function; false if the name is taken.
    pub fn insert(&self, f: &Function) -> Result<bool, RegistryError> {
        let config =
            serde_json::to_string(&f.config).map_err(|e| RegistryError::Corrupt(e.to_string()))?;
        let changed = self.db().execute(
            "INSERT OR IGNORE INTO functions
             (name, config, code_sha256, code_size, revision, last_modified, reserved_concurrency, url_auth, tags,
              published)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            params![
                f.name,
                config,
                f.code_sha256,
                f.code_size,
                f.revision,
                f.last_modified.to_rfc3339(),
                f.reserved_concurrency,
                url_auth_text(f.url_auth),
                tags_text(f)?,
                published_text(f)?,
            ],
        )?;
        Ok(changed == 1)
    }

    /// Replaces a function's row; false if it does not exist.
    pub fn update(&self, f: &Function) -> Result<bool, RegistryError> {
        let config =
            serde_json::to_string(&f.config).map_err(|e| RegistryError::Corrupt(e.to_string()))?;
        let changed = self.db().execute(
            "UPDATE functions SET config = ?2, code_sha256 = ?3, code_size = ?4, revision = ?5,
             last_modified = ?6, reserved_concurrency = ?7, url_auth = ?8, tags = ?9, published = ?10
             WHERE name = ?1",
            params![
                f.name,
                config,
                f.code_sha256,
                f.code_size,
                f.revision,
                f.last_modified.to_rfc3339(),
                f.reserved_concurrency,
                url_auth_text(f.url_auth),
                tags_text(f)?,
                published_text(f)?,
            ],
        )?;
        Ok(changed == 1)
    }

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
    /// must not run them).
    /// Deletes a sequence and its queued events; returns whether it existed, and the runs
    /// those events would have resumed (their intermediates can go).
    pub fn delete_sequence(&self, name: &str) -> Result<(bool, Vec<String>), RegistryError> {
        let mut db = self.db();
        let tx = db.transaction()?;
        let deleted = tx.execute("DELETE FROM sequences WHERE name = ?1", [name])? == 1;
        let runs = {
            let mut stmt = tx.prepare(
                "SELECT resume_run FROM async_queue WHERE function = ?1 AND resume_run IS NOT NULL",
            )?;
            let runs = stmt.query_map([name], |row| row.get(0))?;
            runs.collect::<Result<Vec<String>, _>>()?
        };
        tx.execute("DELETE FROM async_queue WHERE function = ?1", [name])?;
        tx.commit()?;
        Ok((deleted, runs))
    }

    /// Deletes the queued events of `function` (a function or a sequence); returns the runs
    /// they would have resumed. Cluster mode's registry, whose records are elsewhere, calls it
    /// when one goes.
    pub fn drop_events(&self, function: &str) -> Result<Vec<String>, RegistryError> {
        let mut db = self.db();
        let tx = db.transaction()?;
        let runs = {
            let mut stmt = tx.prepare(
                "SELECT resume_run FROM async_queue WHERE function = ?1 AND resume_run IS NOT NULL",
            )?;
            let runs = stmt.query_map([function], |row| row.get(0))?;
            runs.collect::<Result<Vec<String>, _>>()?
        };
        tx.execute("DELETE FROM async_queue WHERE function = ?1", [function])?;
        tx.commit()?;
        Ok(runs)
    }

    pub fn sequences(&self) -> Result<Vec<crate::controller::sequences::Sequence>, RegistryError> {
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
            out.push(crate::controller::sequences::Sequence {
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

    pub fn delete(&self, name: &str) -> Result<bool, RegistryError> {
        let mut db = self.db();
        let tx = db.transaction()?;
        let changed = tx.execute("DELETE FROM functions WHERE name = ?1", [name])?;
        tx.execute("DELETE FROM async_queue WHERE function = ?1", [name])?;
        tx.commit()?;
        Ok(changed == 1)
    }

    pub fn all(&self) -> Result<Vec<Function>, RegistryError> {
        let db = self.db();
        let mut stmt = db.prepare(
            "SELECT name, config, code_sha256, code_size, revision, last_modified, reserved_concurrency, url_auth,
                    tags, published
             FROM functions ORDER BY name",
        )?;
        let rows = stmt.query_map([], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, String>(2)?,
                row.get::<_, u64>(3)?,
                row.get::<_, u64>(4)?,
                row.get::<_, String>(5)?,
                row.get::<_, Option<u32>>(6)?,
                row.get::<_, Option<String>>(7)?,
                row.get::<_, Option<String>>(8)?,
                row.get::<_, Option<String>>(9)?,
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (
                name,
                config,
                code_sha256,
                code_size,
                revision,
                modified,
                reserved,
                url,
                tags,
                published,
            ) = row?;
            // Rows from before versions were kept have none.
            let published = match published {
                Some(text) => serde_json::from_str(&text)
                    .map_err(|e| RegistryError::Corrupt(format!("{name}: {e}")))?,
                None => Default::default(),
            };
            // Rows from before tags were kept have none.
            let tags = match tags {
                Some(text) => serde_json::from_str(&text)
                    .map_err(|e| RegistryError::Corrupt(format!("{name}: {e}")))?,
                None => Default::default(),
            };
            let config: FunctionConfig = serde_json::from_str(&config)
                .map_err(|e| RegistryError::Corrupt(format!("{name}: {e}")))?;
            let last_modified = DateTime::parse_from_rfc3339(&modified)
                .map_err(|e| RegistryError::Corrupt(format!("{name}: {e}")))?
                .with_timezone(&Utc);
            let url_auth = match url.as_deref() {
                Some("NONE") => Some(UrlAuth::None),
                Some("AWS_IAM") => Some(UrlAuth::AwsIam),
                _ => None,
            };
            out.push(Function {
                name,
                config,
                code_sha256,
                code_size,
                revision,
                last_modified,
                reserved_concurrency: reserved,
                url_auth,
                tags,
                published,
            });
        }
        Ok(out)
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

fn tags_text(f: &Function) -> Result<String, RegistryError> {
    serde_json::to_string(&f.tags).map_err(|e| RegistryError::Corrupt(e.to_string()))
}

/// A function's versions and aliases as JSON; `NULL` for a function that has published none.
fn published_text(f: &Function) -> Result<Option<String>, RegistryError> {
    if f.published.is_empty() {
        return Ok(None);
    }
    serde_json::to_string(&f.published)
        .map(Some)
        .map_err(|e| RegistryError::Corrupt(e.to_string()))
}

fn url_auth_text(auth: Option<UrlAuth>) -> Option<&'static str> {
    auth.map(|a| match a {
        UrlAuth::None => "NONE",
        UrlAuth::AwsIam => "AWS_IAM",
    })
}

#[cfg(test)]
mod tests {
    use super::super::Cors;
    use super::*;
    use std::collections::BTreeMap;

    fn sample(name: &str) -> Function {
        Function {
            name: name.into(),
            config: FunctionConfig {
                runtime: "python3.11".into(),
                handler: "app.handler".into(),
                memory_mb: 128,
                timeout_s: 3,
                env: BTreeMap::from([("K".into(), "V".into())]),
                description: String::new(),
                network: Default::default(),
                ephemeral_storage_mb: 512,
                role: "r".into(),
                prebake: Default::default(),
                memory_sizing: Default::default(),
                web: None,
                breakout: None,
                sessions: None,
                settings: Default::default(),
                event_invoke: None,
            },
            code_sha256: "ab".into(),
            code_size: 10,
            revision: 1,
            last_modified: Utc::now(),
            reserved_concurrency: Some(2),
            url_auth: Some(UrlAuth::None),
            tags: BTreeMap::from([("team".into(), "a".into())]),
            published: Default::default(),
        }
    }

    #[test]
    fn versions_and_aliases_round_trip_with_their_function() {
        use crate::function::versions::{Alias, Version};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kiln.db");
        let mut f = sample("v");
        {
            let reg = Database::open(&path).unwrap();
            assert!(reg.insert(&f).unwrap());
            f.published.last = 2;
            f.published.versions.push(Version {
                number: 2,
                config: f.config.clone(),
                description: Some("two".into()),
                code_sha256: "cd".into(),
                code_size: 3,
                last_modified: Utc::now(),
                revision: 4,
                revision_id: "r".into(),
            });
            f.published.aliases.insert(
                "live".into(),
                Alias {
                    name: "live".into(),
                    function_version: "2".into(),
                    description: "d".into(),
                    weights: BTreeMap::from([("1".into(), 0.5)]),
                    revision_id: "a".into(),
                },
            );
            assert!(reg.update(&f).unwrap());
        }
        let reg = Database::open(&path).unwrap();
        assert_eq!(reg.all().unwrap()[0].published, f.published);
        // A URL change keeps them; a function without any stores none.
        assert!(reg.update_url(&f, None).unwrap());
        assert_eq!(reg.all().unwrap()[0].published, f.published);
        f.published = Default::default();
        assert!(reg.update(&f).unwrap());
        assert!(reg.all().unwrap()[0].published.is_empty());
    }

    #[test]
    fn functions_round_trip_and_survive_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kiln.db");
        {
            let reg = Database::open(&path).unwrap();
            assert!(reg.insert(&sample("a")).unwrap());
            assert!(!reg.insert(&sample("a")).unwrap());
            let mut b = sample("b");
            assert!(!reg.update(&b).unwrap());
            assert!(reg.insert(&b).unwrap());
            b.revision = 2;
            assert!(reg.update(&b).unwrap());
        }
        let reg = Database::open(&path).unwrap();
        let all = reg.all().unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(all[1].revision, 2);
        assert_eq!(all[0].config, sample("a").config);
        assert_eq!(all[0].tags, sample("a").tags);
        assert!(reg.delete("a").unwrap());
        assert!(!reg.delete("a").unwrap());
    }

    #[test]
    fn url_settings_round_trip_and_go_with_the_function() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kiln.db");
        let settings = UrlSettings {
            created: DateTime::parse_from_rfc3339("2024-01-02T03:04:05.678Z")
                .unwrap()
                .with_timezone(&Utc),
            modified: Utc::now(),
            cors: Some(Cors {
                allow_origins: Some(vec!["https://example.com".into()]),
                max_age: Some(60),
                ..Cors::default()
            }),
        };
        {
            let reg = Database::open(&path).unwrap();
            assert!(reg.insert(&sample("a")).unwrap());
            assert!(!reg.update_url(&sample("b"), Some(&settings)).unwrap());
            assert!(reg.update_url(&sample("a"), Some(&settings)).unwrap());
            // A plain update keeps the settings.
            assert!(reg.update(&sample("a")).unwrap());
        }
        let reg = Database::open(&path).unwrap();
        assert_eq!(
            reg.url_settings().unwrap(),
            vec![("a".to_string(), settings.clone())]
        );
        assert!(reg.update_url(&sample("a"), None).unwrap());
        assert!(reg.url_settings().unwrap().is_empty());
        assert!(reg.update_url(&sample("a"), Some(&settings)).unwrap());
        assert!(reg.delete("a").unwrap());
        assert!(reg.insert(&sample("a")).unwrap());
        assert!(reg.url_settings().unwrap().is_empty());
    }

    #[test]
    fn databases_of_the_first_schema_are_upgraded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kiln.db");
        {
            let db = Connection::open(&path).unwrap();
            db.execute_batch(
                "CREATE TABLE functions (name TEXT PRIMARY KEY, config TEXT NOT NULL,
                     code_sha256 TEXT NOT NULL, code_size INTEGER NOT NULL,
                     revision INTEGER NOT NULL, last_modified TEXT NOT NULL,
                     reserved_concurrency INTEGER, url_auth TEXT);
                 CREATE TABLE async_queue (id INTEGER PRIMARY KEY AUTOINCREMENT,
                     request_id TEXT NOT NULL, function TEXT NOT NULL, payload BLOB NOT NULL,
                     attempts INTEGER NOT NULL DEFAULT 0, not_before TEXT NOT NULL);
                 INSERT INTO async_queue (request_id, function, payload, attempts, not_before)
                     VALUES ('old', 'f', X'7B7D', 1, '2020-01-01T00:00:00+00:00');
                 INSERT INTO functions (name, config, code_sha256, code_size, revision, last_modified)
                     VALUES ('old', '{\"runtime\":\"python3.11\",\"handler\":\"app.handler\",\"memory_mb\":128,\"timeout_s\":3}',
                             'ab', 1, 1, '2020-01-01T00:00:00+00:00');",
            )
            .unwrap();
        }
        let reg = Database::open(&path).unwrap();
        // Opening twice must not try to add the columns again.
        drop(reg);
        let reg = Database::open(&path).unwrap();
        let due = reg.due_events(10, &[]).unwrap();
        assert_eq!(due.len(), 1);
        assert_eq!((due[0].attempts, due[0].throttles), (1, 0));
        assert_eq!(due[0].payload, b"{}");
        // A function stored before tags and Lambda's settings were kept has none of either.
        let old = &reg.all().unwrap()[0];
        assert!(old.tags.is_empty() && old.config.settings.is_empty());
        assert!(old.published.is_empty(), "nor versions");
        assert!(reg.insert(&sample("a")).unwrap());
        assert!(reg.url_settings().unwrap().is_empty());
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
