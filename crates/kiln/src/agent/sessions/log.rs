//! Durable session state: each session's write-ahead log on the data dir (docs/sessions.md).
//!
//! A session's state lives in memory where it is used: inside the primary instance for the
//! Python and Node.js runtimes (their shims hold it), in the agent for wasm. Every invocation's
//! writes travel to the agent as one batch of entries, which the agent appends to the
//! session's log as one checksummed record before the invocation's answer goes out: what a
//! caller has seen acknowledged is in the file, and a `kill -9` of kiln keeps it (the page
//! cache outlives the process). A session whose instance is gone replays its log into the next
//! primary (XFaaS's ColdSession).
//!
//! File: the magic `KILNSES1`, the session id (u16 length, bytes), then records.
//! Record: u32 body length, u32 CRC-32 of the body, the body: entries.
//! Entry: u8 op (1 put, 2 delete), u16 key length, the key (UTF-8); a put then has u8 kind
//! (0 bytes, 1 JSON) and u32 value length and the value. Integers are little-endian.
//! A torn record at the end (kiln killed mid-write) is cut off when the log is opened.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use bytes::Bytes;
use sha2::{Digest, Sha256};

pub use super::entries::{decode, encode_delete, encode_put, Entry, Kind, StateMap};
use crate::sync::LockExt;

const MAGIC: &[u8; 8] = b"KILNSES1";
/// A log is rewritten as one record of its live state once it is this long and twice the
/// size it had after its last rewrite.
const COMPACT_MIN_BYTES: u64 = 1024 * 1024;

/// Every state a session's log reaches gets a number no other state of any session had, so
/// that an instance can tell whether the copy it holds is the latest.
static NEXT_VERSION: AtomicU64 = AtomicU64::new(1);

impl std::fmt::Debug for SessionLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionLog").field("id", &self.id).finish()
    }
}

fn next_version() -> u64 {
    NEXT_VERSION.fetch_add(1, Ordering::Relaxed)
}

/// Why a commit was refused. The invocation that made it fails with this, and the instance's
/// copy of the state is reloaded from the log before the session's next request.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    #[error("the session's writes are malformed: {0}")]
    Malformed(String),
    #[error("a value of {size} bytes for key '{key}' is over the limit of {limit} bytes")]
    ValueTooLarge {
        key: String,
        size: usize,
        limit: u32,
    },
    #[error("the session's state would be {size} bytes, over the limit of {limit} bytes")]
    SessionTooLarge { size: u64, limit: u32 },
    #[error("the session's log could not be written: {0}")]
    Io(#[from] std::io::Error),
    #[error("the session has ended")]
    Ended,
}

impl CommitError {
    /// What an invocation whose session writes were refused answers: the line for its log, and
    /// the error body in Lambda's form. Every runtime answers the same.
    pub fn answer(&self) -> (String, Bytes) {
        let error_type = match self {
            CommitError::ValueTooLarge { .. } | CommitError::SessionTooLarge { .. } => {
                "Session.LimitExceeded"
            }
            CommitError::Ended => "Session.Ended",
            _ => "Session.CommitFailed",
        };
        let message = format!("the invocation's session writes were not kept: {self}");
        let body = serde_json::json!({ "errorType": error_type, "errorMessage": message });
        (message, Bytes::from(body.to_string()))
    }
}

/// The limits a commit is checked against, and how durable it must be.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_value_bytes: u32,
    pub max_session_bytes: u32,
    /// Sync the record to disk before the commit returns (`KilnSessions.Fsync`).
    pub fsync: bool,
}

impl From<&crate::session::SessionConfig> for Limits {
    fn from(config: &crate::session::SessionConfig) -> Self {
        Limits {
            max_value_bytes: config.max_value_bytes,
            max_session_bytes: config.max_session_bytes,
            fsync: config.fsync,
        }
    }
}

/// One session's log, open for appending.
pub struct SessionLog {
    pub id: String,
    path: PathBuf,
    inner: Mutex<LogInner>,
}

struct LogInner {
    /// None once the session has ended (its file is gone).
    file: Option<File>,
    len: u64,
    /// The length right after the last rewrite (or the open).
    base_len: u64,
    version: u64,
    /// The state, replayed: the agent keeps it so that it can check limits, rewrite the log and
    /// hand the state to a new primary without reading the file.
    state: StateMap,
}

/// The file name of a session's log: a hash, as session ids are chosen by callers.
pub fn file_name(session: &str) -> String {
    let digest = Sha256::digest(session.as_bytes());
    format!("{}.log", hex::encode(&digest[..16]))
}

impl SessionLog {
    /// Opens (or creates) the log of `session` in `dir`, replaying it; a torn last record is cut
    /// off, and a file whose magic or id is wrong is an error.
    pub fn open(dir: &Path, session: &str) -> std::io::Result<SessionLog> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(file_name(session));
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(&path)?;
        let mut data = Vec::new();
        file.read_to_end(&mut data)?;
        let mut state = StateMap::default();
        let len = if data.is_empty() {
            let mut header = Vec::with_capacity(10 + session.len());
            header.extend_from_slice(MAGIC);
            header.extend_from_slice(&(session.len() as u16).to_le_bytes());
            header.extend_from_slice(session.as_bytes());
            file.write_all(&header)?;
            header.len() as u64
        } else {
            let (valid, torn) = replay(&data, session, &mut state)?;
            if torn {
                tracing::warn!(
                    session,
                    path = %path.display(),
                    "the session's log ends in a torn record (kiln stopped mid-write); cutting it off at byte {valid}"
                );
                file.set_len(valid as u64)?;
            }
            valid as u64
        };
        Ok(SessionLog {
            id: session.to_string(),
            path,
            inner: Mutex::new(LogInner {
                file: Some(file),
                len,
                base_len: len,
                version: next_version(),
                state,
            }),
        })
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, LogInner> {
        self.inner.locked()
    }

    /// The version of the state the log holds now.
    pub fn version(&self) -> u64 {
        self.inner().version
    }

    pub fn ended(&self) -> bool {
        self.inner().file.is_none()
    }

    /// The state as one record body, with its version (what a new primary loads).
    pub fn snapshot(&self) -> (Bytes, u64) {
        let inner = self.inner();
        (Bytes::from(inner.state.encode()), inner.version)
    }

    /// Keys and bytes of the state, and the length of the log file.
    pub fn sizes(&self) -> (usize, u64, u64) {
        let inner = self.inner();
        (inner.state.len(), inner.state.bytes(), inner.len)
    }

    /// Runs `f` on the state (the agent-held state of a wasm session).
    pub fn with_state<T>(&self, f: impl FnOnce(&StateMap) -> T) -> T {
        f(&self.inner().state)
    }

    /// Appends one invocation's writes (a record body of entries) as one record, once they are
    /// checked against `limits`; returns the new version.
    pub fn commit(&self, body: &Bytes, limits: Limits) -> Result<u64, CommitError> {
        let entries = decode(body).map_err(CommitError::Malformed)?;
        self.commit_entries(body, entries, limits)
    }

    /// [`SessionLog::commit`] for entries already decoded; `body` is their encoding.
    pub fn commit_entries(
        &self,
        body: &[u8],
        entries: Vec<Entry>,
        limits: Limits,
    ) -> Result<u64, CommitError> {
        let mut inner = self.inner();
        if inner.file.is_none() {
            return Err(CommitError::Ended);
        }
        if entries.is_empty() {
            return Ok(inner.version);
        }
        for entry in &entries {
            if let Entry::Put { key, value, .. } = entry {
                if value.len() > limits.max_value_bytes as usize {
                    return Err(CommitError::ValueTooLarge {
                        key: key.clone(),
                        size: value.len(),
                        limit: limits.max_value_bytes,
                    });
                }
            }
        }
        let size = inner.state.bytes_after(&entries);
        if size > u64::from(limits.max_session_bytes) {
            return Err(CommitError::SessionTooLarge {
                size,
                limit: limits.max_session_bytes,
            });
        }
        let mut record = Vec::with_capacity(8 + body.len());
        record.extend_from_slice(&(body.len() as u32).to_le_bytes());
        record.extend_from_slice(&crc32fast::hash(body).to_le_bytes());
        record.extend_from_slice(body);
        let file = inner.file.as_mut().expect("checked above");
        let written = file.write_all(&record).and_then(|()| {
            if limits.fsync {
                file.sync_data()
            } else {
                Ok(())
            }
        });
        if let Err(e) = written {
            // A partial record must not stay in front of the next one.
            let len = inner.len;
            if let Some(file) = &inner.file {
                let _ = file.set_len(len);
            }
            return Err(e.into());
        }
        inner.len += record.len() as u64;
        for entry in entries {
            inner.state.apply(entry);
        }
        inner.version = next_version();
        if inner.len >= COMPACT_MIN_BYTES && inner.len >= 2 * inner.base_len {
            if let Err(e) = self.rewrite(&mut inner, limits.fsync) {
                tracing::warn!(session = %self.id, "the session's log could not be rewritten (it keeps growing): {e}");
            }
        }
        Ok(inner.version)
    }

    /// Rewrites the log as one record of the live state: written to a new file, then renamed
    /// over the old one, so that a crash at any point leaves one complete log.
    fn rewrite(&self, inner: &mut LogInner, fsync: bool) -> std::io::Result<()> {
        let body = inner.state.encode();
        let mut data = Vec::with_capacity(18 + self.id.len() + body.len());
        data.extend_from_slice(MAGIC);
        data.extend_from_slice(&(self.id.len() as u16).to_le_bytes());
        data.extend_from_slice(self.id.as_bytes());
        data.extend_from_slice(&(body.len() as u32).to_le_bytes());
        data.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
        data.extend_from_slice(&body);
        let tmp = self.path.with_extension("log.new");
        let mut file = File::create(&tmp)?;
        file.write_all(&data)?;
        if fsync {
            // The new file's contents, then its name, before the old log is gone.
            file.sync_all()?;
        }
        std::fs::rename(&tmp, &self.path)?;
        if fsync {
            if let Some(dir) = self.path.parent() {
                File::open(dir)?.sync_all()?;
            }
        }
        inner.file = Some(OpenOptions::new().append(true).open(&self.path)?);
        inner.len = data.len() as u64;
        inner.base_len = inner.len;
        Ok(())
    }

    /// Sets the log's modification time: a session in use, though only read, is not expired
    /// by a restarted kiln.
    pub fn touch(&self, when: std::time::SystemTime) {
        if let Some(file) = &self.inner().file {
            let _ = file.set_modified(when);
        }
    }

    /// Ends the session: its log is deleted, and later commits fail.
    pub fn remove(&self) {
        let mut inner = self.inner();
        inner.file = None;
        inner.state = StateMap::default();
        inner.version = next_version();
        if let Err(e) = std::fs::remove_file(&self.path) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(session = %self.id, "the session's log could not be removed: {e}");
            }
        }
    }
}

/// Replays a log's records into `state`: the length of the valid prefix, and whether a torn or
/// corrupt record followed it.
fn replay(data: &[u8], session: &str, state: &mut StateMap) -> std::io::Result<(usize, bool)> {
    let invalid = |why: String| std::io::Error::new(std::io::ErrorKind::InvalidData, why);
    if data.len() < 10 || &data[..8] != MAGIC {
        return Err(invalid("not a kiln session log".into()));
    }
    let id_len = u16::from_le_bytes([data[8], data[9]]) as usize;
    if data.get(10..10 + id_len) != Some(session.as_bytes()) {
        return Err(invalid("the log belongs to another session".into()));
    }
    let mut at = 10 + id_len;
    let data = Bytes::copy_from_slice(data);
    while at < data.len() {
        let Some(head) = data.get(at..at + 8) else {
            return Ok((at, true));
        };
        let len = u32::from_le_bytes(head[..4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(head[4..].try_into().expect("4 bytes"));
        let Some(end) = at.checked_add(8 + len).filter(|end| *end <= data.len()) else {
            return Ok((at, true));
        };
        let body = data.slice(at + 8..end);
        if crc32fast::hash(&body) != crc {
            return Ok((at, true));
        }
        let Ok(entries) = decode(&body) else {
            return Ok((at, true));
        };
        for entry in entries {
            state.apply(entry);
        }
        at = end;
    }
    Ok((at, false))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) const LIMITS: Limits = Limits {
        max_value_bytes: 1024,
        max_session_bytes: 4096,
        fsync: false,
    };

    fn put(key: &str, value: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        encode_put(&mut out, key, Kind::Bytes, value);
        out
    }

    fn value(log: &SessionLog, key: &str) -> Option<Bytes> {
        log.with_state(|s| s.get(key).map(|(_, v)| v.clone()))
    }

    #[test]
    fn writes_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let log = SessionLog::open(dir.path(), "s-1").unwrap();
        let v0 = log.version();
        let v1 = log.commit(&put("a", b"1").into(), LIMITS).unwrap();
        assert!(v1 > v0);
        let mut body = put("b", b"2");
        encode_delete(&mut body, "a");
        encode_put(&mut body, "c", Kind::Json, b"{\"n\":3}");
        log.commit(&body.into(), LIMITS).unwrap();
        drop(log);
        let log = SessionLog::open(dir.path(), "s-1").unwrap();
        assert_eq!(value(&log, "a"), None);
        assert_eq!(value(&log, "b").as_deref(), Some(&b"2"[..]));
        assert_eq!(
            log.with_state(|s| s.get("c").cloned()),
            Some((Kind::Json, Bytes::from_static(b"{\"n\":3}")))
        );
        assert_eq!(log.sizes().1, 2 + 8);
    }

    #[test]
    fn a_torn_record_is_cut_off_and_the_rest_kept() {
        let dir = tempfile::tempdir().unwrap();
        let log = SessionLog::open(dir.path(), "s").unwrap();
        log.commit(&put("a", b"kept").into(), LIMITS).unwrap();
        let (_, _, good_len) = log.sizes();
        log.commit(&put("b", b"torn").into(), LIMITS).unwrap();
        drop(log);
        let path = dir.path().join(file_name("s"));
        let full = std::fs::metadata(&path).unwrap().len();
        OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(full - 3)
            .unwrap();
        let log = SessionLog::open(dir.path(), "s").unwrap();
        assert_eq!(value(&log, "a").as_deref(), Some(&b"kept"[..]));
        assert_eq!(value(&log, "b"), None);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), good_len);
        // The next record follows the cut, and is read back.
        log.commit(&put("c", b"after").into(), LIMITS).unwrap();
        drop(log);
        let log = SessionLog::open(dir.path(), "s").unwrap();
        assert_eq!(value(&log, "c").as_deref(), Some(&b"after"[..]));
    }

    #[test]
    fn a_flipped_bit_fails_the_checksum() {
        let dir = tempfile::tempdir().unwrap();
        let log = SessionLog::open(dir.path(), "s").unwrap();
        log.commit(&put("a", b"one").into(), LIMITS).unwrap();
        log.commit(&put("b", b"two").into(), LIMITS).unwrap();
        drop(log);
        let path = dir.path().join(file_name("s"));
        let mut data = std::fs::read(&path).unwrap();
        let last = data.len() - 1;
        data[last] ^= 1;
        std::fs::write(&path, data).unwrap();
        let log = SessionLog::open(dir.path(), "s").unwrap();
        assert_eq!(value(&log, "a").as_deref(), Some(&b"one"[..]));
        assert_eq!(value(&log, "b"), None);
    }

    #[test]
    fn another_sessions_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        drop(SessionLog::open(dir.path(), "mine").unwrap());
        std::fs::rename(
            dir.path().join(file_name("mine")),
            dir.path().join(file_name("theirs")),
        )
        .unwrap();
        assert!(SessionLog::open(dir.path(), "theirs").is_err());
    }

    #[test]
    fn limits_refuse_the_whole_commit() {
        let dir = tempfile::tempdir().unwrap();
        let log = SessionLog::open(dir.path(), "s").unwrap();
        let big = vec![7u8; 1025];
        assert!(matches!(
            log.commit(&put("k", &big).into(), LIMITS),
            Err(CommitError::ValueTooLarge { .. })
        ));
        let mut body = Vec::new();
        for i in 0..5 {
            encode_put(&mut body, &format!("k{i}"), Kind::Bytes, &[0u8; 1000]);
        }
        assert!(matches!(
            log.commit(&body.into(), LIMITS),
            Err(CommitError::SessionTooLarge { .. })
        ));
        assert_eq!(log.sizes().0, 0);
        // Overwriting a key counts its new size only.
        for _ in 0..10 {
            log.commit(&put("k", &[1u8; 1000]).into(), LIMITS).unwrap();
        }
        assert_eq!(log.sizes().1, 1001);
    }

    #[test]
    fn malformed_bodies_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let log = SessionLog::open(dir.path(), "s").unwrap();
        for body in [
            &b"\x01"[..],
            b"\x09\x01\x00k",
            b"\x01\x00\x00",
            b"\x01\x01\x00k\x05",
        ] {
            assert!(matches!(
                log.commit(&Bytes::copy_from_slice(body), LIMITS),
                Err(CommitError::Malformed(_))
            ));
        }
    }

    #[test]
    fn a_long_log_is_rewritten_to_its_live_state() {
        let dir = tempfile::tempdir().unwrap();
        let log = SessionLog::open(dir.path(), "s").unwrap();
        let limits = Limits {
            max_value_bytes: 64 * 1024,
            max_session_bytes: 1024 * 1024,
            fsync: true,
        };
        for i in 0..100u32 {
            log.commit(&put("counter", &[i as u8; 32 * 1024]).into(), limits)
                .unwrap();
        }
        let (_, _, len) = log.sizes();
        assert!(len < 2 * COMPACT_MIN_BYTES, "{len}");
        drop(log);
        let log = SessionLog::open(dir.path(), "s").unwrap();
        assert_eq!(value(&log, "counter").unwrap()[0], 99);
        assert_eq!(log.sizes().0, 1);
    }

    #[test]
    fn an_ended_session_refuses_commits_and_leaves_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let log = SessionLog::open(dir.path(), "s").unwrap();
        log.commit(&put("a", b"1").into(), LIMITS).unwrap();
        log.remove();
        assert!(log.ended());
        assert!(matches!(
            log.commit(&put("a", b"2").into(), LIMITS),
            Err(CommitError::Ended)
        ));
        assert!(!dir.path().join(file_name("s")).exists());
    }

    proptest::proptest! {
        #[test]
        fn decoding_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256)) {
            let _ = decode(&Bytes::from(bytes));
        }
    }
}
