//! The registry in etcd (cluster mode): one key per record under the cluster's prefix,
//! `functions/<name>` (the function as JSON, its reserved concurrency and URL auth type
//! included), `urls/<name>` (its URL config's times and CORS settings) and
//! `sequences/<name>`; a function's shareable test events under `test-events/<name>/<event>`.
//! Every write is one transaction whose comparisons carry the registry's
//! rules across nodes: a name is a function's or a sequence's, never both; an update applies
//! only to the version it was made from. The async queue stays in the node's SQLite database.
//!
//! Transactions are retried after a transport failure. A retry after a lost answer finds its
//! own write in place (the comparison then fails): a record equal to what was written is
//! recognised as that write.
//!
//! The trait's calls block: each runs its request on the runtime with `block_in_place`, which
//! needs tokio's multi-threaded runtime (`kiln up`'s).

use std::future::Future;
use std::sync::{Arc, Mutex};

use etcd_client::{
    Compare, CompareOp, DeleteOptions, KeyValue, Txn, TxnOp, TxnOpResponse, TxnResponse,
};
use tokio::sync::mpsc;

use super::Sequence;
use super::{
    Change, EventQueue, Loaded, Registry, RegistryError, TestEvent, UrlWrite, Version, Written,
};
use crate::cluster::etcd::{Entry, Etcd, WatchCursor, WatchUpdate};
use crate::function::Function;
use crate::sync::LockExt;

/// The kinds of records, by the key segment after the prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Function,
    Url,
    Sequence,
}

impl Kind {
    fn segment(self) -> &'static str {
        match self {
            Kind::Function => "functions",
            Kind::Url => "urls",
            Kind::Sequence => "sequences",
        }
    }

    fn of(segment: &str) -> Option<Self> {
        [Kind::Function, Kind::Url, Kind::Sequence]
            .into_iter()
            .find(|k| k.segment() == segment)
    }
}

pub struct EtcdRegistry {
    etcd: Etcd,
    /// The cluster's prefix and a `/`.
    root: String,
    /// The async queue: a deleted function's events go with it.
    events: Arc<dyn EventQueue>,
    /// The revision [`Registry::load`] read at: where [`Registry::changes`] goes on from.
    loaded_at: Mutex<Option<Version>>,
}

/// Runs an etcd request from a blocking call.
fn block<F: Future>(request: F) -> F::Output {
    tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(request))
}

fn revision_of(response: &TxnResponse) -> Version {
    response.header().map_or(0, |h| h.revision())
}

/// The values the failure branch's gets returned, in order (`None`: no such key).
fn got(response: TxnResponse) -> Vec<Option<KeyValue>> {
    response
        .op_responses()
        .into_iter()
        .filter_map(|r| match r {
            TxnOpResponse::Get(get) => Some(get.kvs().first().cloned()),
            _ => None,
        })
        .collect()
}

fn corrupt(key: &str, e: serde_json::Error) -> RegistryError {
    RegistryError::Corrupt(format!("{key}: {e}"))
}

impl EtcdRegistry {
    /// The registry under `prefix` (`/kiln`), with the cluster's queue of async invocations.
    pub fn new(etcd: Etcd, prefix: &str, events: Arc<dyn EventQueue>) -> Self {
        Self {
            etcd,
            root: format!("{}/", prefix.trim_end_matches('/')),
            events,
            loaded_at: Mutex::new(None),
        }
    }

    fn key(&self, kind: Kind, name: &str) -> String {
        format!("{}{}/{name}", self.root, kind.segment())
    }

    /// Where a function's test events are: the prefix of them all, and one's key.
    fn test_events_prefix(&self, function: &str) -> String {
        format!("{}test-events/{function}/", self.root)
    }

    /// A key's kind and name, if it is a registry record.
    fn parse_key<'k>(&self, key: &'k str) -> Option<(Kind, &'k str)> {
        let (segment, name) = key.strip_prefix(&self.root)?.split_once('/')?;
        Some((Kind::of(segment)?, name)).filter(|(_, name)| !name.is_empty())
    }

    /// The change a key's value (`None`: its deletion) at `version` makes.
    fn decode(
        &self,
        key: &str,
        value: Option<&[u8]>,
        version: Version,
    ) -> Result<Option<Change>, RegistryError> {
        let Some((kind, name)) = self.parse_key(key) else {
            return Ok(None);
        };
        let name = name.to_string();
        Ok(Some(match kind {
            Kind::Function => Change::Function {
                function: value
                    .map(serde_json::from_slice::<Function>)
                    .transpose()
                    .map_err(|e| corrupt(key, e))?
                    .map(Box::new),
                name,
                version,
            },
            Kind::Url => Change::Url {
                settings: value
                    .map(serde_json::from_slice)
                    .transpose()
                    .map_err(|e| corrupt(key, e))?,
                name,
                version,
            },
            Kind::Sequence => Change::Sequence {
                sequence: value
                    .map(serde_json::from_slice::<Sequence>)
                    .transpose()
                    .map_err(|e| corrupt(key, e))?,
                name,
                version,
            },
        }))
    }

    /// Every record listed at `revision`. A record that cannot be read is left out (and
    /// logged): one bad record must not stop a node.
    fn decode_all(&self, entries: &[Entry], revision: Version) -> Loaded {
        let mut loaded = Loaded {
            revision,
            ..Loaded::default()
        };
        for entry in entries {
            match self.decode(&entry.key, Some(&entry.value), entry.mod_revision) {
                Ok(Some(Change::Function {
                    function: Some(f),
                    version,
                    ..
                })) => loaded.functions.push((*f, version)),
                Ok(Some(Change::Url {
                    name,
                    settings: Some(s),
                    version,
                })) => loaded.urls.push((name, s, version)),
                Ok(Some(Change::Sequence {
                    sequence: Some(s),
                    version,
                    ..
                })) => loaded.sequences.push((s, version)),
                Ok(_) => {}
                Err(e) => tracing::error!("{e}"),
            }
        }
        loaded
    }

    /// The change a record read back from a failed transaction makes (`None`: it is gone, as
    /// of the transaction's revision).
    fn current(
        &self,
        kind: Kind,
        name: &str,
        kv: Option<&KeyValue>,
        revision: Version,
    ) -> Result<Change, RegistryError> {
        let key = self.key(kind, name);
        let (value, version) = match kv {
            Some(kv) => (Some(kv.value()), kv.mod_revision()),
            None => (None, revision),
        };
        self.decode(&key, value, version)?
            .ok_or(RegistryError::Corrupt(key))
    }
}

impl Registry for EtcdRegistry {
    fn load(&self) -> Result<Loaded, RegistryError> {
        let (entries, revision) = block(self.etcd.list(&self.root))?;
        *self.loaded_at.locked() = Some(revision);
        Ok(self.decode_all(&entries, revision))
    }

    fn insert(&self, f: &Function) -> Result<Option<Version>, RegistryError> {
        let key = self.key(Kind::Function, &f.name);
        let value = serde_json::to_vec(f).map_err(|e| corrupt(&key, e))?;
        let txn = Txn::new()
            .when([
                Compare::version(key.as_str(), CompareOp::Equal, 0),
                Compare::version(self.key(Kind::Sequence, &f.name), CompareOp::Equal, 0),
            ])
            .and_then([TxnOp::put(key.as_str(), value.clone(), None)])
            .or_else([TxnOp::get(key.as_str(), None)]);
        let response = block(self.etcd.txn("create function", txn))?;
        if response.succeeded() {
            return Ok(Some(revision_of(&response)));
        }
        Ok(got(response)
            .into_iter()
            .flatten()
            .find(|kv| kv.value() == value.as_slice())
            .map(|kv| kv.mod_revision()))
    }

    fn update(
        &self,
        f: &Function,
        url: UrlWrite<'_>,
        base: Version,
    ) -> Result<Written, RegistryError> {
        let key = self.key(Kind::Function, &f.name);
        let url_key = self.key(Kind::Url, &f.name);
        let value = serde_json::to_vec(f).map_err(|e| corrupt(&key, e))?;
        let mut writes = vec![TxnOp::put(key.as_str(), value.clone(), None)];
        match url {
            UrlWrite::Keep => {}
            UrlWrite::Set(Some(settings)) => {
                let settings = serde_json::to_vec(settings).map_err(|e| corrupt(&url_key, e))?;
                writes.push(TxnOp::put(url_key.as_str(), settings, None));
            }
            UrlWrite::Set(None) => writes.push(TxnOp::delete(url_key.as_str(), None)),
        }
        let txn = Txn::new()
            .when([Compare::mod_revision(key.as_str(), CompareOp::Equal, base)])
            .and_then(writes)
            .or_else([
                TxnOp::get(key.as_str(), None),
                TxnOp::get(url_key.as_str(), None),
            ]);
        let response = block(self.etcd.txn("update function", txn))?;
        let revision = revision_of(&response);
        if response.succeeded() {
            return Ok(Written::Done(revision));
        }
        let current = got(response);
        let (function, url) = (
            current.first().cloned().flatten(),
            current.get(1).cloned().flatten(),
        );
        if let Some(kv) = function
            .as_ref()
            .filter(|kv| kv.value() == value.as_slice())
        {
            // This very write, retried after its answer was lost.
            return Ok(Written::Done(kv.mod_revision()));
        }
        if function.is_none() && base == 0 {
            return Ok(Written::Missing);
        }
        Ok(Written::Stale(vec![
            self.current(Kind::Function, &f.name, function.as_ref(), revision)?,
            self.current(Kind::Url, &f.name, url.as_ref(), revision)?,
        ]))
    }

    fn delete(&self, name: &str) -> Result<Option<Version>, RegistryError> {
        let key = self.key(Kind::Function, name);
        let txn = Txn::new()
            .when([Compare::version(key.as_str(), CompareOp::Greater, 0)])
            .and_then([
                TxnOp::delete(key.as_str(), None),
                TxnOp::delete(self.key(Kind::Url, name), None),
                TxnOp::delete(
                    self.test_events_prefix(name),
                    Some(DeleteOptions::new().with_prefix()),
                ),
            ]);
        let response = block(self.etcd.txn("delete function", txn))?;
        self.events.drop_events(name)?;
        Ok(response.succeeded().then(|| revision_of(&response)))
    }

    fn test_events(&self, function: &str) -> Result<Vec<TestEvent>, RegistryError> {
        let (entries, _) = block(self.etcd.list(&self.test_events_prefix(function)))?;
        let mut events = entries
            .iter()
            .map(|e| serde_json::from_slice(&e.value).map_err(|err| corrupt(&e.key, err)))
            .collect::<Result<Vec<TestEvent>, _>>()?;
        events.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(events)
    }

    fn put_test_event(&self, function: &str, event: &TestEvent) -> Result<bool, RegistryError> {
        let key = format!("{}{}", self.test_events_prefix(function), event.name);
        let value = serde_json::to_vec(event).map_err(|e| corrupt(&key, e))?;
        // Only while the function exists: a deletion on another node takes its events along,
        // and a write after it must not leave one behind for a function made later.
        let txn = Txn::new()
            .when([Compare::version(
                self.key(Kind::Function, function),
                CompareOp::Greater,
                0,
            )])
            .and_then([TxnOp::put(key, value, None)]);
        let response = block(self.etcd.txn("put test event", txn))?;
        Ok(response.succeeded())
    }

    fn delete_test_event(&self, function: &str, name: &str) -> Result<bool, RegistryError> {
        let key = format!("{}{name}", self.test_events_prefix(function));
        let txn = Txn::new()
            .when([Compare::version(key.as_str(), CompareOp::Greater, 0)])
            .and_then([TxnOp::delete(key.as_str(), None)]);
        let response = block(self.etcd.txn("delete test event", txn))?;
        Ok(response.succeeded())
    }

    fn put_sequence(&self, sequence: &Sequence) -> Result<Option<Version>, RegistryError> {
        let key = self.key(Kind::Sequence, &sequence.name);
        let value = serde_json::to_vec(sequence).map_err(|e| corrupt(&key, e))?;
        let txn = Txn::new()
            .when([Compare::version(
                self.key(Kind::Function, &sequence.name),
                CompareOp::Equal,
                0,
            )])
            .and_then([TxnOp::put(key, value, None)]);
        let response = block(self.etcd.txn("put sequence", txn))?;
        Ok(response.succeeded().then(|| revision_of(&response)))
    }

    fn delete_sequence(&self, name: &str) -> Result<(Option<Version>, Vec<String>), RegistryError> {
        let key = self.key(Kind::Sequence, name);
        let txn = Txn::new()
            .when([Compare::version(key.as_str(), CompareOp::Greater, 0)])
            .and_then([TxnOp::delete(key.as_str(), None)]);
        let response = block(self.etcd.txn("delete sequence", txn))?;
        let runs = self.events.drop_events(name)?;
        Ok((response.succeeded().then(|| revision_of(&response)), runs))
    }

    fn changes(&self) -> Option<mpsc::UnboundedReceiver<Change>> {
        let mut cursor = WatchCursor::default();
        if let Some(revision) = *self.loaded_at.locked() {
            cursor.listed(revision);
        }
        let mut updates = self.etcd.watch_prefix_from(self.root.clone(), cursor);
        let (changes, receiver) = mpsc::unbounded_channel();
        let this = Self {
            etcd: self.etcd.clone(),
            root: self.root.clone(),
            events: self.events.clone(),
            loaded_at: Mutex::new(None),
        };
        tokio::spawn(async move {
            while let Some(update) = updates.recv().await {
                let change = match update {
                    WatchUpdate::Reset { entries, revision } => {
                        Ok(Some(Change::Reset(this.decode_all(&entries, revision))))
                    }
                    WatchUpdate::Put(entry) => {
                        this.decode(&entry.key, Some(&entry.value), entry.mod_revision)
                    }
                    WatchUpdate::Delete { key, mod_revision } => {
                        this.decode(&key, None, mod_revision)
                    }
                };
                match change {
                    Ok(Some(change)) => {
                        if changes.send(change).is_err() {
                            return;
                        }
                    }
                    Ok(None) => {}
                    Err(e) => tracing::error!("{e}"),
                }
            }
        });
        Some(receiver)
    }
}

#[cfg(test)]
mod tests {
    use super::super::Database;
    use super::*;

    #[tokio::test]
    async fn keys_name_their_kind_and_record() {
        let dir = tempfile::tempdir().unwrap();
        let database = Arc::new(Database::open(&dir.path().join("kiln.db")).unwrap());
        let etcd = Etcd::connect(
            &["http://127.0.0.1:1".into()],
            "/kiln/health",
            &Default::default(),
        )
        .await
        .unwrap();
        let registry = EtcdRegistry::new(etcd, "/kiln/", database);
        assert_eq!(registry.key(Kind::Url, "f"), "/kiln/urls/f");
        assert_eq!(
            registry.parse_key("/kiln/functions/f"),
            Some((Kind::Function, "f"))
        );
        assert_eq!(
            registry.parse_key("/kiln/sequences/s"),
            Some((Kind::Sequence, "s"))
        );
        for other in [
            "/kiln/nodes/n1",
            "/kiln/functions/",
            "/kiln/credentials",
            "/kiln2/functions/f",
        ] {
            assert_eq!(registry.parse_key(other), None, "{other}");
        }
        assert!(registry.decode("/kiln/functions/f", Some(b"{"), 3).is_err());
        assert!(matches!(
            registry.decode("/kiln/urls/f", None, 9).unwrap(),
            Some(Change::Url {
                settings: None,
                version: 9,
                ..
            })
        ));
    }
}
