//! The registry: where functions, their URL configs (and with them reserved concurrency) and
//! sequences are committed before a change is acknowledged.
//!
//! Two backends behind [`Registry`]: a single node's SQLite database ([`Database`], which also
//! keeps the async queue) and, in cluster mode, etcd ([`EtcdRegistry`]). The controller mirrors
//! what is committed in its in-memory tables, which is all the invoke path reads; with etcd,
//! what other nodes commit reaches those tables through [`Registry::changes`].
//!
//! Every record carries a [`Version`]: etcd's `mod_revision` of its key (0 in SQLite, where the
//! controller's mutation lock orders every change). An update names the version it was made
//! from, and etcd applies it only if the record is still at that version: a change made on
//! another node in between is reported [`Written::Stale`] with the record as it now is, and
//! the controller makes its change again from there (and a RevisionId given with the change
//! no longer matches).

mod etcd;
mod events;
mod sqlite;

use chrono::{DateTime, Utc};

pub use etcd::EtcdRegistry;
pub use events::{EtcdEvents, EventQueue, INLINE_PAYLOAD};
pub use sqlite::{AsyncFailure, Database, PendingEvent, Progress, QueuedEvent, Requeue};

use crate::cluster::etcd::EtcdError;
use crate::function::Function;

/// A sequence: functions run one after another, each stage's answer the next one's event.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Sequence {
    pub name: String,
    pub functions: Vec<String>,
    pub last_modified: DateTime<Utc>,
}

/// Why the registry failed.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// the metadata database failed
    #[error("metadata database: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// a stored row could not be decoded
    #[error("metadata database holds an unreadable row: {0}")]
    Corrupt(String),
    /// etcd failed or could not be reached
    #[error("the cluster's registry: {0}")]
    Etcd(#[from] EtcdError),
    /// the cluster's shared store failed or could not be reached
    #[error("{0}")]
    SharedStore(#[from] crate::cluster::code::SharedCodeError),
    /// what this backend does not offer yet
    #[error("{0}")]
    Unsupported(&'static str),
}

/// A record's version: etcd's `mod_revision` of its key; 0 in SQLite.
pub type Version = i64;

/// A function URL's CORS settings, as Create/UpdateFunctionUrlConfig take them.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Cors {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_credentials: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_headers: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_methods: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_origins: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expose_headers: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_age: Option<u32>,
}

/// What a function URL config holds besides its auth type (which lives with the function):
/// when it was created and last changed (Lambda reports both) and its CORS settings.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UrlSettings {
    pub created: DateTime<Utc>,
    pub modified: DateTime<Utc>,
    pub cors: Option<Cors>,
}

/// Everything the registry holds, with each record's version.
#[derive(Debug, Clone, Default)]
pub struct Loaded {
    pub functions: Vec<(Function, Version)>,
    pub urls: Vec<(String, UrlSettings, Version)>,
    pub sequences: Vec<(Sequence, Version)>,
    /// The version it was read at: anything missing from it was deleted by then.
    pub revision: Version,
}

/// What happens to a function's URL settings when the function is updated.
#[derive(Debug, Clone, Copy)]
pub enum UrlWrite<'a> {
    Keep,
    /// `None` removes them.
    Set(Option<&'a UrlSettings>),
}

/// The outcome of an update.
#[derive(Debug)]
pub enum Written {
    Done(Version),
    /// The function does not exist.
    Missing,
    /// The function changed (or went) since the version the update was made from: how its
    /// records are now.
    Stale(Vec<Change>),
}

/// A record as it now is (`None`: deleted), from another node or from a stale update.
#[derive(Debug, Clone)]
pub enum Change {
    Function {
        name: String,
        version: Version,
        function: Option<Box<Function>>,
    },
    Url {
        name: String,
        version: Version,
        settings: Option<UrlSettings>,
    },
    Sequence {
        name: String,
        version: Version,
        sequence: Option<Sequence>,
    },
    /// Everything, again (after the change history the watch needed was compacted away).
    Reset(Loaded),
}

/// A function's shareable test event, as the console saves it: every viewer of the function
/// sees it (a viewer's private events stay in their browser).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct TestEvent {
    pub name: String,
    /// The event, as JSON text.
    pub event: String,
    pub last_modified: DateTime<Utc>,
}

/// The registry's backends. Calls block (SQLite's fsync, etcd's round trip): the controller
/// makes them under its mutation lock, which orders a node's changes.
pub trait Registry: Send + Sync {
    /// Everything, for the start.
    fn load(&self) -> Result<Loaded, RegistryError>;

    /// Creates a function; `None` if the name is taken (by a function or a sequence).
    fn insert(&self, f: &Function) -> Result<Option<Version>, RegistryError>;

    /// Replaces a function made from version `base` of it.
    fn update(
        &self,
        f: &Function,
        url: UrlWrite<'_>,
        base: Version,
    ) -> Result<Written, RegistryError>;

    /// Deletes a function, its URL config, its test events and its queued events; `None` if it
    /// did not exist.
    fn delete(&self, name: &str) -> Result<Option<Version>, RegistryError>;

    /// A function's shareable test events, by name.
    fn test_events(&self, function: &str) -> Result<Vec<TestEvent>, RegistryError>;

    /// Saves a test event of `function`, replacing one of the same name; false if the
    /// function is gone (deleted on another node meanwhile).
    fn put_test_event(&self, function: &str, event: &TestEvent) -> Result<bool, RegistryError>;

    /// Deletes a test event; whether there was one.
    fn delete_test_event(&self, function: &str, name: &str) -> Result<bool, RegistryError>;

    /// Creates or replaces a sequence; `None` if a function has its name.
    fn put_sequence(&self, sequence: &Sequence) -> Result<Option<Version>, RegistryError>;

    /// Deletes a sequence and its queued events: the version of the deletion (`None` if there
    /// was no such sequence), and the runs those events would have resumed.
    fn delete_sequence(&self, name: &str) -> Result<(Option<Version>, Vec<String>), RegistryError>;

    /// What other nodes commit, from the version [`Registry::load`] read on; `None` for a
    /// backend no one else writes. Called once.
    fn changes(&self) -> Option<tokio::sync::mpsc::UnboundedReceiver<Change>> {
        None
    }
}

impl Registry for Database {
    fn load(&self) -> Result<Loaded, RegistryError> {
        Ok(Loaded {
            functions: self.all()?.into_iter().map(|f| (f, 0)).collect(),
            urls: self
                .url_settings()?
                .into_iter()
                .map(|(name, settings)| (name, settings, 0))
                .collect(),
            sequences: self.sequences()?.into_iter().map(|s| (s, 0)).collect(),
            revision: 0,
        })
    }

    fn insert(&self, f: &Function) -> Result<Option<Version>, RegistryError> {
        Ok(Database::insert(self, f)?.then_some(0))
    }

    fn update(
        &self,
        f: &Function,
        url: UrlWrite<'_>,
        _base: Version,
    ) -> Result<Written, RegistryError> {
        let found = match url {
            UrlWrite::Keep => Database::update(self, f)?,
            UrlWrite::Set(settings) => self.update_url(f, settings)?,
        };
        Ok(if found {
            Written::Done(0)
        } else {
            Written::Missing
        })
    }

    fn delete(&self, name: &str) -> Result<Option<Version>, RegistryError> {
        Ok(Database::delete(self, name)?.then_some(0))
    }

    fn test_events(&self, function: &str) -> Result<Vec<TestEvent>, RegistryError> {
        Database::test_events(self, function)
    }

    fn put_test_event(&self, function: &str, event: &TestEvent) -> Result<bool, RegistryError> {
        // The controller checked under its mutation lock that the function exists.
        Database::put_test_event(self, function, event)?;
        Ok(true)
    }

    fn delete_test_event(&self, function: &str, name: &str) -> Result<bool, RegistryError> {
        Database::delete_test_event(self, function, name)
    }

    fn put_sequence(&self, sequence: &Sequence) -> Result<Option<Version>, RegistryError> {
        Database::put_sequence(
            self,
            &sequence.name,
            &sequence.functions,
            &sequence.last_modified,
        )?;
        Ok(Some(0))
    }

    fn delete_sequence(&self, name: &str) -> Result<(Option<Version>, Vec<String>), RegistryError> {
        let (existed, runs) = Database::delete_sequence(self, name)?;
        Ok((existed.then_some(0), runs))
    }
}
