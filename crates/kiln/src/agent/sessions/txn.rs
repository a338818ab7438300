//! One invocation's writes to a session whose state the agent holds: the `provided` runtimes
//! (over the Runtime API, `runtime_api.rs`) and wasm (host calls, `kiln_wasm::session`). The
//! Python and Node.js shims keep their own overlay in the instance and send the agent only the
//! result.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use super::log::{encode_delete, encode_put, CommitError, Entry, Kind, Limits, SessionLog};
use crate::session::MAX_KEY_BYTES;
use crate::sync::LockExt;

/// One invocation's view of a session whose state the agent holds (runtimes that reach it
/// through the agent: `provided` over the Runtime API, wasm through host calls): reads see the
/// invocation's own writes, which reach the log together when the invocation answers
/// ([`Txn::commit`]).
pub struct Txn {
    log: Arc<SessionLog>,
    limits: Limits,
    /// The last write of each key: a value, or None for a delete.
    writes: Writes,
    /// The writes as they were when a transaction began ([`Txn::begin`]).
    savepoint: Option<Writes>,
    /// A shadow run's (a warm-up, burst offloading's copy of a request): its writes are read
    /// back within the invocation, and dropped at its commit.
    discard: bool,
}

type Writes = HashMap<String, Option<(Kind, Bytes)>>;

impl Txn {
    pub fn new(log: Arc<SessionLog>, limits: Limits) -> Self {
        Txn {
            log,
            limits,
            writes: HashMap::new(),
            savepoint: None,
            discard: false,
        }
    }

    /// This invocation's writes are dropped at its commit when `discard` (a shadow run's).
    pub fn discarding(mut self, discard: bool) -> Self {
        self.discard = discard;
        self
    }

    /// Starts a transaction: the writes from here to [`Txn::end`] stand or fall together.
    /// Transactions do not nest.
    pub fn begin(&mut self) -> Result<(), CommitError> {
        if self.savepoint.is_some() {
            return Err(CommitError::Malformed(
                "a transaction is already open: transactions do not nest".into(),
            ));
        }
        self.savepoint = Some(self.writes.clone());
        Ok(())
    }

    /// Ends the transaction: keeps its writes if `commit`, else undoes them.
    pub fn end(&mut self, commit: bool) -> Result<(), CommitError> {
        let saved = self
            .savepoint
            .take()
            .ok_or_else(|| CommitError::Malformed("no transaction is open".into()))?;
        if !commit {
            self.writes = saved;
        }
        Ok(())
    }

    /// The largest request body a session call may carry: a batch of a whole session's state,
    /// base64-encoded.
    pub fn max_request_bytes(&self) -> usize {
        self.limits.max_session_bytes as usize * 2 + 64 * 1024
    }

    pub fn get(&self, key: &str) -> Option<(Kind, Bytes)> {
        match self.writes.get(key) {
            Some(write) => write.clone(),
            None => self.log.with_state(|s| s.get(key).cloned()),
        }
    }

    /// The keys, sorted.
    pub fn keys(&self) -> Vec<String> {
        let mut keys: BTreeSet<String> = self.log.with_state(|s| s.keys().cloned().collect());
        for (key, write) in &self.writes {
            if write.is_some() {
                keys.insert(key.clone());
            } else {
                keys.remove(key);
            }
        }
        keys.into_iter().collect()
    }

    /// Applies `entries` all together, or none of them when one breaks a limit.
    pub fn apply(&mut self, entries: Vec<Entry>) -> Result<(), CommitError> {
        for entry in &entries {
            let key = entry.key();
            if key.is_empty() || key.len() > MAX_KEY_BYTES {
                return Err(CommitError::Malformed(format!(
                    "a key must be 1 to {MAX_KEY_BYTES} bytes, not {}",
                    key.len()
                )));
            }
            if let Entry::Put { key, value, .. } = entry {
                if value.len() > self.limits.max_value_bytes as usize {
                    return Err(CommitError::ValueTooLarge {
                        key: key.clone(),
                        size: value.len(),
                        limit: self.limits.max_value_bytes,
                    });
                }
            }
        }
        let mut all = self.entries();
        all.extend(entries.iter().cloned());
        let size = self.log.with_state(|s| s.bytes_after(&all));
        if size > u64::from(self.limits.max_session_bytes) {
            return Err(CommitError::SessionTooLarge {
                size,
                limit: self.limits.max_session_bytes,
            });
        }
        for entry in entries {
            match entry {
                Entry::Put { key, kind, value } => self.writes.insert(key, Some((kind, value))),
                Entry::Delete { key } => self.writes.insert(key, None),
            };
        }
        Ok(())
    }

    fn entries(&self) -> Vec<Entry> {
        self.writes
            .iter()
            .map(|(key, write)| match write {
                Some((kind, value)) => Entry::Put {
                    key: key.clone(),
                    kind: *kind,
                    value: value.clone(),
                },
                None => Entry::Delete { key: key.clone() },
            })
            .collect()
    }

    /// Appends the invocation's writes to the session's log as one record. The writes of a
    /// transaction still open are dropped, as if it had failed.
    pub fn commit(mut self) -> Result<(), CommitError> {
        if let Some(saved) = self.savepoint.take() {
            self.writes = saved;
        }
        if self.writes.is_empty() || self.discard {
            return Ok(());
        }
        let entries = self.entries();
        let mut body = Vec::new();
        for entry in &entries {
            match entry {
                Entry::Put { key, kind, value } => encode_put(&mut body, key, *kind, value),
                Entry::Delete { key } => encode_delete(&mut body, key),
            }
        }
        self.log
            .commit_entries(&body, entries, self.limits)
            .map(|_| ())
    }
}

/// A wasm request's session: the engine's host calls reach the invocation's [`Txn`].
pub struct WasmSession {
    id: String,
    txn: Mutex<Option<Txn>>,
}

impl WasmSession {
    pub fn new(id: &str, txn: Txn) -> Self {
        WasmSession {
            id: id.to_string(),
            txn: Mutex::new(Some(txn)),
        }
    }

    /// The invocation's writes, once the guest is done.
    pub fn take(&self) -> Option<Txn> {
        self.lock().take()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Txn>> {
        self.txn.locked()
    }

    fn with<T>(
        &self,
        f: impl FnOnce(&mut Txn) -> Result<T, CommitError>,
    ) -> Result<T, kiln_wasm::StateError> {
        match self.lock().as_mut() {
            Some(txn) => f(txn).map_err(state_error),
            None => Err(kiln_wasm::StateError::Ended),
        }
    }
}

fn state_error(error: CommitError) -> kiln_wasm::StateError {
    match error {
        CommitError::ValueTooLarge { .. } | CommitError::SessionTooLarge { .. } => {
            kiln_wasm::StateError::LimitExceeded(error.to_string())
        }
        CommitError::Ended => kiln_wasm::StateError::Ended,
        other => kiln_wasm::StateError::Invalid(other.to_string()),
    }
}

impl kiln_wasm::SessionState for WasmSession {
    fn id(&self) -> &str {
        &self.id
    }

    fn get(&self, key: &str) -> Option<Bytes> {
        self.lock()
            .as_ref()
            .and_then(|txn| txn.get(key))
            .map(|(_, value)| value)
    }

    fn put(
        &self,
        key: &str,
        kind: kiln_wasm::ValueKind,
        value: Bytes,
    ) -> Result<(), kiln_wasm::StateError> {
        let kind = match kind {
            kiln_wasm::ValueKind::Bytes => Kind::Bytes,
            kiln_wasm::ValueKind::Json => Kind::Json,
        };
        self.with(|txn| {
            txn.apply(vec![Entry::Put {
                key: key.to_string(),
                kind,
                value,
            }])
        })
    }

    fn delete(&self, key: &str) -> Result<(), kiln_wasm::StateError> {
        self.with(|txn| {
            txn.apply(vec![Entry::Delete {
                key: key.to_string(),
            }])
        })
    }

    fn keys(&self) -> Vec<String> {
        self.lock().as_ref().map(Txn::keys).unwrap_or_default()
    }

    fn begin(&self) -> Result<(), kiln_wasm::StateError> {
        self.with(Txn::begin)
    }

    fn end(&self, commit: bool) -> Result<(), kiln_wasm::StateError> {
        self.with(|txn| txn.end(commit))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::agent::sessions::log::tests::LIMITS;

    fn value(log: &SessionLog, key: &str) -> Option<Bytes> {
        log.with_state(|s| s.get(key).map(|(_, v)| v.clone()))
    }

    fn put_entry(key: &str, value: &'static [u8]) -> Entry {
        Entry::Put {
            key: key.into(),
            kind: Kind::Bytes,
            value: Bytes::from_static(value),
        }
    }

    #[test]
    fn a_shadow_runs_txn_reads_its_writes_and_drops_them() {
        let dir = tempfile::tempdir().unwrap();
        let log = std::sync::Arc::new(SessionLog::open(dir.path(), "s").unwrap());
        let mut seed = Txn::new(log.clone(), LIMITS);
        seed.apply(vec![put_entry("kept", b"1")]).unwrap();
        seed.commit().unwrap();
        let version = log.version();
        let mut shadow = Txn::new(log.clone(), LIMITS).discarding(true);
        assert_eq!(shadow.get("kept").unwrap().1, Bytes::from_static(b"1"));
        shadow
            .apply(vec![
                put_entry("new", b"2"),
                Entry::Delete { key: "kept".into() },
            ])
            .unwrap();
        assert_eq!(shadow.get("new").unwrap().1, Bytes::from_static(b"2"));
        shadow.commit().unwrap();
        assert_eq!(log.version(), version);
        assert_eq!(value(&log, "kept").as_deref(), Some(&b"1"[..]));
        assert!(value(&log, "new").is_none());
    }

    #[test]
    fn a_txn_reads_its_own_writes_and_commits_them_together() {
        let dir = tempfile::tempdir().unwrap();
        let log = std::sync::Arc::new(SessionLog::open(dir.path(), "s").unwrap());
        let mut seed = Txn::new(log.clone(), LIMITS);
        seed.apply(vec![put_entry("old", b"1")]).unwrap();
        seed.commit().unwrap();
        let mut txn = Txn::new(log.clone(), LIMITS);
        txn.apply(vec![
            put_entry("new", b"2"),
            Entry::Delete { key: "old".into() },
        ])
        .unwrap();
        assert_eq!(txn.get("new").unwrap().1, Bytes::from_static(b"2"));
        assert_eq!(txn.get("old"), None);
        assert_eq!(txn.keys(), vec!["new".to_string()]);
        // Not in the log until committed.
        assert!(value(&log, "old").is_some() && value(&log, "new").is_none());
        // A batch over a limit changes nothing.
        let big = Entry::Put {
            key: "big".into(),
            kind: Kind::Bytes,
            value: Bytes::from(vec![0u8; 1000]),
        };
        let batch = vec![put_entry("x", b"3"), big.clone(), big.clone()];
        assert!(txn.apply(batch).is_ok());
        let too_much: Vec<Entry> = (0..5)
            .map(|i| Entry::Put {
                key: format!("k{i}"),
                kind: Kind::Bytes,
                value: Bytes::from(vec![0u8; 1000]),
            })
            .collect();
        assert!(matches!(
            txn.apply(too_much),
            Err(CommitError::SessionTooLarge { .. })
        ));
        assert_eq!(txn.get("k0"), None);
        txn.commit().unwrap();
        drop(log);
        let log = SessionLog::open(dir.path(), "s").unwrap();
        assert_eq!(value(&log, "new").as_deref(), Some(&b"2"[..]));
        assert_eq!(value(&log, "old"), None);
        assert_eq!(value(&log, "x").as_deref(), Some(&b"3"[..]));
    }

    #[test]
    fn a_transaction_that_is_undone_or_left_open_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let log = Arc::new(SessionLog::open(dir.path(), "s").unwrap());
        let mut txn = Txn::new(log.clone(), LIMITS);
        txn.apply(vec![put_entry("a", b"1")]).unwrap();
        txn.begin().unwrap();
        assert!(txn.begin().is_err(), "transactions do not nest");
        txn.apply(vec![put_entry("a", b"2"), put_entry("b", b"2")])
            .unwrap();
        assert_eq!(txn.get("a").unwrap().1, Bytes::from_static(b"2"));
        txn.end(false).unwrap();
        assert_eq!(txn.get("a").unwrap().1, Bytes::from_static(b"1"));
        assert_eq!(txn.get("b"), None);
        assert!(txn.end(true).is_err(), "no transaction is open");
        txn.begin().unwrap();
        txn.apply(vec![put_entry("c", b"3")]).unwrap();
        txn.end(true).unwrap();
        txn.begin().unwrap();
        txn.apply(vec![put_entry("d", b"4")]).unwrap();
        // Still open when the invocation ends: dropped.
        txn.commit().unwrap();
        assert_eq!(value(&log, "a").as_deref(), Some(&b"1"[..]));
        assert_eq!(value(&log, "c").as_deref(), Some(&b"3"[..]));
        assert_eq!(value(&log, "b"), None);
        assert_eq!(value(&log, "d"), None);
    }
}
