//! The metadata database of a single node: functions, URLs, sequences, layers and the durable
//! queue of asynchronous invocations (in cluster mode, the queue only).
//!
//! SQLite in WAL mode with `synchronous=FULL`: a statement that returned has reached the disk,
//! which is what lets kiln acknowledge a deployment or an Event invocation and survive `kill -9`.
//!
//! One file a table: [`functions`] (with their URL settings), [`sequences`], the async
//! [`queue`] and its [`failures`], [`layers`] and the functions' shareable [`test_events`].

mod failures;
mod functions;
mod layers;
mod queue;
mod sequences;
mod test_events;

use std::path::Path;
use std::sync::Mutex;

use rusqlite::Connection;

pub use failures::AsyncFailure;
pub use queue::{PendingEvent, Progress, QueuedEvent, Requeue};

use super::RegistryError;
use crate::sync::LockExt;

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
CREATE TABLE IF NOT EXISTS schedule_firings (
    name TEXT PRIMARY KEY,
    fired_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS test_events (
    function TEXT NOT NULL,
    name TEXT NOT NULL,
    event TEXT NOT NULL,
    last_modified TEXT NOT NULL,
    PRIMARY KEY (function, name)
);
CREATE TABLE IF NOT EXISTS layer_names (
    name TEXT PRIMARY KEY,
    last_version INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS layer_versions (
    name TEXT NOT NULL,
    version INTEGER NOT NULL,
    record TEXT NOT NULL,
    PRIMARY KEY (name, version)
);
";

impl Database {
    pub fn open(path: &Path) -> Result<Self, RegistryError> {
        let mut db = Connection::open(path)?;
        db.pragma_update(None, "journal_mode", "WAL")?;
        db.pragma_update(None, "synchronous", "FULL")?;
        db.busy_timeout(std::time::Duration::from_secs(5))?;
        // kiln.db has other writers (the apps' store): take the write lock when a transaction
        // begins, so a concurrent commit makes it wait rather than fail with SQLITE_BUSY.
        db.set_transaction_behavior(rusqlite::TransactionBehavior::Immediate);
        db.execute_batch(SCHEMA)?;
        // Columns added after the first release; older databases get them here.
        for (table, column, kind) in [
            ("functions", "url_created", "TEXT"),
            ("functions", "url_modified", "TEXT"),
            ("functions", "url_cors", "TEXT"),
            ("functions", "tags", "TEXT"),
            ("functions", "published", "TEXT"),
            ("functions", "previous_code", "TEXT"),
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

    fn db(&self) -> std::sync::MutexGuard<'_, Connection> {
        // A panic while holding the lock cannot leave SQLite inconsistent: every change is a
        // transaction.
        self.db.locked()
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::function::{Function, FunctionConfig, UrlAuth};
    use chrono::Utc;
    use std::collections::BTreeMap;

    pub(super) fn sample(name: &str) -> Function {
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
                layers: Vec::new(),
            },
            code_sha256: "ab".into(),
            code_size: 10,
            revision: 1,
            last_modified: Utc::now(),
            reserved_concurrency: Some(2),
            url_auth: Some(UrlAuth::None),
            tags: BTreeMap::from([("team".into(), "a".into())]),
            published: Default::default(),
            previous_code: None,
        }
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
        assert!(
            old.previous_code.is_none(),
            "nor code from before an update"
        );
        assert!(reg.insert(&sample("a")).unwrap());
        assert!(reg.url_settings().unwrap().is_empty());
    }
}
