//! The write-back journal: an acknowledged write is durable here before the backing store has
//! it.
//!
//! A sequence of segment files (`DATA_DIR/cache/journal/NNNNNNNNNNNNNNNN.log`) of framed
//! records: `put` (an object version: key, attributes, bytes) and `done` (a version reached
//! the backing store, which settles it and every older version of the key). One thread owns
//! the files and commits in groups: it writes every record that arrived while the previous
//! `fdatasync` ran, syncs once if the group holds a put or a sync request (or its oldest
//! unsynced record is due, below), and answers them all. Segments are deleted oldest first, once
//! every record in them is settled, so a `done` never outlives the `put` it settles. On start,
//! the latest unsettled version of each key is read back and written back again.
//!
//! A `put` is answered once synced. A `done` is answered once written: a lost one only makes
//! a restart write its version back again, which the write-back's version check skips (the
//! backing store already holds that version). That holds until something else changes the key
//! in the backing store, so whatever passes through to it first calls [`Journal::sync`]. Dones
//! ride on the next put's sync, or are synced at most [`FLUSH_AFTER`] after the first of them
//! was written; a write-back thus costs the disk no sync of its own.
//!
//! A failed write or sync is final: the kernel may have dropped the pages it could not write
//! and report the next sync as a success, so the journal answers every later request with an
//! error (cached writes are refused, operations that need a sync fail) until kiln restarts
//! and replays what reached the disk.
//!
//! Frame: `u32 length · u32 crc32 · payload`, little-endian; payload: `u8 kind · u64 version ·
//! u32 header length · header (JSON: bucket, key, attributes) · bytes`. A torn or corrupt frame
//! ends its segment's replay.

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use super::entries::{Meta, ObjectKey};

/// A segment is closed and a new one started past this size.
const SEGMENT_BYTES: u64 = 64 * 1024 * 1024;
/// Records committed by one sync, at most.
const GROUP: usize = 512;
/// Dones written and not yet synced are synced at most this long after the first of them: the
/// window in which a crash makes a restart write those versions back again (and skip them).
pub const FLUSH_AFTER: Duration = Duration::from_millis(100);

const PUT: u8 = 1;
const DONE: u8 = 2;

#[derive(Serialize, Deserialize)]
struct Header {
    #[serde(flatten)]
    key: ObjectKey,
    #[serde(skip_serializing_if = "Option::is_none")]
    meta: Option<Meta>,
}

/// A version that was acknowledged but had not reached the backing store.
#[derive(Debug)]
pub struct PendingWrite {
    pub key: ObjectKey,
    pub version: u64,
    pub meta: Meta,
    pub body: Bytes,
}

/// What the journal held when it was opened.
#[derive(Debug, Default)]
pub struct Recovered {
    pub pending: Vec<PendingWrite>,
    /// The highest version in the journal.
    pub last_version: u64,
    /// Frames that could not be read (a torn tail, or corruption).
    pub bad_frames: usize,
}

enum Command {
    Put {
        key: ObjectKey,
        version: u64,
        frame: Vec<u8>,
        reply: oneshot::Sender<io::Result<()>>,
    },
    Done {
        key: ObjectKey,
        version: u64,
        reply: oneshot::Sender<io::Result<()>>,
    },
    /// Syncs what was written and not yet synced.
    Sync {
        reply: oneshot::Sender<io::Result<()>>,
    },
}

/// The handle; the journal's thread ends when the last handle is dropped.
pub struct Journal {
    tx: mpsc::Sender<Command>,
    /// Records written and not yet synced (see `Writer::unsynced`).
    unsynced: Arc<AtomicBool>,
}

fn encode(kind: u8, version: u64, header: &Header, body: &[u8]) -> Vec<u8> {
    let header = serde_json::to_vec(header).expect("a journal header serialises");
    let len = 1 + 8 + 4 + header.len() + body.len();
    let mut payload = Vec::with_capacity(8 + len);
    payload.extend_from_slice(&(len as u32).to_le_bytes());
    payload.extend_from_slice(&[0; 4]);
    payload.push(kind);
    payload.extend_from_slice(&version.to_le_bytes());
    payload.extend_from_slice(&(header.len() as u32).to_le_bytes());
    payload.extend_from_slice(&header);
    payload.extend_from_slice(body);
    let crc = crc32fast::hash(&payload[8..]);
    payload[4..8].copy_from_slice(&crc.to_le_bytes());
    payload
}

struct Decoded {
    kind: u8,
    version: u64,
    header: Header,
    body: Bytes,
}

/// The frames of one segment, up to the first that does not hold.
fn decode_all(data: &Bytes) -> (Vec<Decoded>, bool) {
    let mut out = Vec::new();
    let mut at = 0usize;
    while at < data.len() {
        let Some(frame) = decode_one(data, at) else {
            return (out, true);
        };
        at = frame.0;
        out.push(frame.1);
    }
    (out, false)
}

fn decode_one(data: &Bytes, at: usize) -> Option<(usize, Decoded)> {
    let word = |i: usize| -> Option<u32> {
        Some(u32::from_le_bytes(data.get(i..i + 4)?.try_into().ok()?))
    };
    let len = word(at)? as usize;
    let crc = word(at + 4)?;
    let start = at + 8;
    let payload = data.get(start..start.checked_add(len)?)?;
    if crc32fast::hash(payload) != crc || len < 13 {
        return None;
    }
    let kind = payload[0];
    let version = u64::from_le_bytes(payload[1..9].try_into().ok()?);
    let header_len = u32::from_le_bytes(payload[9..13].try_into().ok()?) as usize;
    let header: Header =
        serde_json::from_slice(payload.get(13..13usize.checked_add(header_len)?)?).ok()?;
    let body = data.slice(start + 13 + header_len..start + len);
    Some((
        start + len,
        Decoded {
            kind,
            version,
            header,
            body,
        },
    ))
}

fn segment_path(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("{n:016}.log"))
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// The thread's state: which segments still hold unsettled records.
struct Writer {
    dir: PathBuf,
    active: File,
    active_no: u64,
    active_bytes: u64,
    /// The active segment's size at which a new one is started: [`SEGMENT_BYTES`], or
    /// further on after a failed attempt (the segment grows meanwhile; nothing is at risk).
    rotate_at: u64,
    /// Unsettled records per segment.
    segments: BTreeMap<u64, usize>,
    /// Unsettled records per key: (version, segment).
    unsettled: HashMap<ObjectKey, Vec<(u64, u64)>>,
    /// When the oldest record written to the active segment since its last sync was written.
    unsynced_since: Option<Instant>,
    /// Shared with the handles: set before a written record is answered, cleared by a sync, so
    /// that [`Journal::sync`] skips the thread when there is nothing to sync.
    unsynced: Arc<AtomicBool>,
    flush_after: Duration,
    /// The first write or sync that failed: every later request fails with it.
    failed: Option<String>,
    syncs: Counter,
}

impl Writer {
    fn record_put(&mut self, key: ObjectKey, version: u64, segment: u64) {
        self.unsettled
            .entry(key)
            .or_default()
            .push((version, segment));
        *self.segments.entry(segment).or_default() += 1;
    }

    fn record_done(&mut self, key: &ObjectKey, version: u64) {
        let Some(records) = self.unsettled.get_mut(key) else {
            return;
        };
        records.retain(|(v, segment)| {
            if *v <= version {
                if let Some(n) = self.segments.get_mut(segment) {
                    *n -= 1;
                }
                false
            } else {
                true
            }
        });
        if records.is_empty() {
            self.unsettled.remove(key);
        }
    }

    /// Deletes the oldest segments while every record in them is settled.
    fn delete_settled(&mut self) {
        while let Some((&n, &count)) = self.segments.iter().next() {
            if count > 0 || n == self.active_no {
                break;
            }
            self.segments.remove(&n);
            if let Err(e) = fs::remove_file(segment_path(&self.dir, n)) {
                tracing::warn!("object cache: removing journal segment {n}: {e}");
            }
        }
    }

    fn sync(&mut self) -> io::Result<()> {
        if let Err(e) = self.active.sync_data() {
            return Err(self.fail(e));
        }
        self.syncs.inc();
        self.unsynced_since = None;
        self.unsynced.store(false, Ordering::Release);
        Ok(())
    }

    /// Records the journal's first failure; from now on every request fails.
    fn fail(&mut self, e: io::Error) -> io::Error {
        if self.failed.is_none() {
            tracing::error!(
                "object cache: the journal failed, and refuses writes until kiln restarts: {e}"
            );
            self.failed = Some(e.to_string());
            // Every later `Journal::sync` goes to the thread, which answers with the failure.
            self.unsynced.store(true, Ordering::Release);
        }
        self.broken().unwrap_or(e)
    }

    fn broken(&self) -> Option<io::Error> {
        self.failed.as_ref().map(|e| {
            io::Error::other(format!(
                "the object cache's journal failed earlier ({e}); restart kiln"
            ))
        })
    }

    fn rotate(&mut self) -> io::Result<()> {
        // The closed segment's dones are synced before it stops being the active one.
        if self.unsynced_since.is_some() {
            self.sync()?;
        }
        let next = self.active_no + 1;
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(segment_path(&self.dir, next))?;
        sync_dir(&self.dir)?;
        self.active = file;
        self.active_no = next;
        self.active_bytes = 0;
        self.rotate_at = SEGMENT_BYTES;
        self.segments.entry(next).or_default();
        Ok(())
    }

    /// Syncs what was written if it has waited long enough; else how much longer it may wait
    /// (`None`: nothing waits).
    fn flush_due(&mut self) -> Option<Duration> {
        let since = self.unsynced_since.filter(|_| self.failed.is_none())?;
        let waited = since.elapsed();
        if waited < self.flush_after {
            return Some(self.flush_after - waited);
        }
        // A failure is recorded by `sync` and answered to every later request.
        let _ = self.sync();
        None
    }

    fn run(mut self, rx: mpsc::Receiver<Command>) {
        loop {
            let first = if let Some(wait) = self.flush_due() {
                match rx.recv_timeout(wait) {
                    Ok(command) => command,
                    Err(mpsc::RecvTimeoutError::Timeout) => continue,
                    Err(mpsc::RecvTimeoutError::Disconnected) => break,
                }
            } else {
                match rx.recv() {
                    Ok(command) => command,
                    Err(_) => break,
                }
            };
            let mut batch = vec![first];
            while batch.len() < GROUP {
                match rx.try_recv() {
                    Ok(c) => batch.push(c),
                    Err(_) => break,
                }
            }
            let result = self.commit(&batch);
            for command in batch {
                let (reply, outcome) = match command {
                    Command::Put {
                        key,
                        version,
                        reply,
                        ..
                    } => {
                        if result.is_ok() {
                            let segment = self.active_no;
                            self.record_put(key, version, segment);
                        }
                        (reply, clone_result(&result))
                    }
                    Command::Done {
                        key,
                        version,
                        reply,
                    } => {
                        if result.is_ok() {
                            self.record_done(&key, version);
                        }
                        (reply, clone_result(&result))
                    }
                    Command::Sync { reply } => (reply, clone_result(&result)),
                };
                let _ = reply.send(outcome);
            }
            self.delete_settled();
            if self.active_bytes >= self.rotate_at && self.failed.is_none() {
                let failing = self.rotate_at > SEGMENT_BYTES;
                match self.rotate() {
                    Ok(()) if failing => {
                        tracing::info!("object cache: journal segments rotate again")
                    }
                    Ok(()) => {}
                    Err(e) => {
                        // Tried again once another sixteenth of a segment is written, not at
                        // every batch (each attempt syncs what waits), and logged once.
                        if !failing && self.failed.is_none() {
                            tracing::error!("object cache: starting a journal segment: {e}; the current one grows (its space is not freed) until one can be started");
                        }
                        self.rotate_at = self.active_bytes + SEGMENT_BYTES / 16;
                    }
                }
            }
        }
        // The last handle is gone: what was written is synced before the thread ends.
        if self.unsynced_since.is_some() && self.failed.is_none() {
            let _ = self.sync();
        }
    }

    /// Writes the batch's records; syncs if it holds a put or a sync (dones alone wait, at most
    /// [`FLUSH_AFTER`]).
    fn commit(&mut self, batch: &[Command]) -> io::Result<()> {
        if let Some(e) = self.broken() {
            return Err(e);
        }
        let mut buf = Vec::new();
        let mut must_sync = false;
        for command in batch {
            match command {
                Command::Put { frame, .. } => {
                    buf.extend_from_slice(frame);
                    must_sync = true;
                }
                Command::Sync { .. } => must_sync = true,
                Command::Done { key, version, .. } => buf.extend_from_slice(&encode(
                    DONE,
                    *version,
                    &Header {
                        key: key.clone(),
                        meta: None,
                    },
                    &[],
                )),
            }
        }
        if !buf.is_empty() {
            if let Err(e) = self.active.write_all(&buf) {
                return Err(self.fail(e));
            }
            self.active_bytes += buf.len() as u64;
            self.unsynced_since.get_or_insert_with(Instant::now);
            self.unsynced.store(true, Ordering::Release);
        }
        if must_sync && self.unsynced_since.is_some() {
            self.sync()?;
        } else if self
            .unsynced_since
            .is_some_and(|since| since.elapsed() >= self.flush_after)
        {
            // Dones that keep coming do not keep the first of them waiting.
            self.sync()?;
        }
        Ok(())
    }
}

fn clone_result(r: &io::Result<()>) -> io::Result<()> {
    match r {
        Ok(()) => Ok(()),
        Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
    }
}

/// What the segments in `dir` hold, read without changing anything.
struct Replay {
    /// The segments' numbers, oldest first.
    numbers: Vec<u64>,
    recovered: Recovered,
    /// Unsettled records per segment.
    segments: BTreeMap<u64, usize>,
    unsettled: HashMap<ObjectKey, Vec<(u64, u64)>>,
}

fn replay(dir: &Path) -> io::Result<Replay> {
    let mut numbers: Vec<u64> = fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            name.strip_suffix(".log")?.parse().ok()
        })
        .collect();
    numbers.sort_unstable();
    let mut recovered = Recovered::default();
    let mut writer_segments = BTreeMap::new();
    let mut unsettled: HashMap<ObjectKey, Vec<(u64, u64)>> = HashMap::new();
    // The latest unsettled version's contents per key.
    let mut latest: HashMap<ObjectKey, (u64, Meta, Bytes)> = HashMap::new();
    for &n in &numbers {
        let mut data = Vec::new();
        File::open(segment_path(dir, n))?.read_to_end(&mut data)?;
        let (frames, torn) = decode_all(&Bytes::from(data));
        if torn {
            recovered.bad_frames += 1;
            tracing::warn!("object cache: journal segment {n} ends in a torn or corrupt record");
        }
        writer_segments.insert(n, 0usize);
        for frame in frames {
            recovered.last_version = recovered.last_version.max(frame.version);
            let key = frame.header.key;
            match (frame.kind, frame.header.meta) {
                (PUT, Some(meta)) => {
                    unsettled
                        .entry(key.clone())
                        .or_default()
                        .push((frame.version, n));
                    *writer_segments.entry(n).or_default() += 1;
                    if latest.get(&key).is_none_or(|(v, ..)| *v < frame.version) {
                        latest.insert(key, (frame.version, meta, frame.body));
                    }
                }
                (DONE, _) => {
                    if let Some(records) = unsettled.get_mut(&key) {
                        records.retain(|(v, segment)| {
                            let settled = *v <= frame.version;
                            if settled {
                                *writer_segments.get_mut(segment).expect("segment counted") -= 1;
                            }
                            !settled
                        });
                    }
                    if latest.get(&key).is_some_and(|(v, ..)| *v <= frame.version) {
                        latest.remove(&key);
                    }
                }
                _ => recovered.bad_frames += 1,
            }
        }
    }
    unsettled.retain(|_, records| !records.is_empty());
    let mut pending: Vec<PendingWrite> = latest
        .into_iter()
        .map(|(key, (version, meta, body))| PendingWrite {
            key,
            version,
            meta,
            body,
        })
        .collect();
    pending.sort_by_key(|p| p.version);
    recovered.pending = pending;
    Ok(Replay {
        numbers,
        recovered,
        segments: writer_segments,
        unsettled,
    })
}

/// How many acknowledged writes the journal in `dir` holds that are not known to be in the
/// backing store (0 when there is no journal).
pub fn pending_writes(dir: &Path) -> usize {
    replay(dir).map_or(0, |r| r.recovered.pending.len())
}

impl Journal {
    /// Opens (creating) the journal in `dir`, replaying what it holds.
    pub fn open(dir: &Path, syncs: Counter) -> io::Result<(Journal, Recovered)> {
        Self::open_flushing(dir, syncs, FLUSH_AFTER)
    }

    /// [`Journal::open`], syncing lone dones `flush_after` after the first of them.
    fn open_flushing(
        dir: &Path,
        syncs: Counter,
        flush_after: Duration,
    ) -> io::Result<(Journal, Recovered)> {
        fs::create_dir_all(dir)?;
        let Replay {
            numbers,
            recovered,
            segments: mut writer_segments,
            unsettled,
        } = replay(dir)?;
        let active_no = numbers.last().map_or(1, |n| n + 1);
        let active = OpenOptions::new()
            .create(true)
            .append(true)
            .open(segment_path(dir, active_no))?;
        sync_dir(dir)?;
        writer_segments.insert(active_no, 0);
        let unsynced = Arc::new(AtomicBool::new(false));
        let mut writer = Writer {
            dir: dir.to_path_buf(),
            active,
            active_no,
            active_bytes: 0,
            rotate_at: SEGMENT_BYTES,
            segments: writer_segments,
            unsettled,
            unsynced_since: None,
            unsynced: unsynced.clone(),
            flush_after,
            failed: None,
            syncs,
        };
        writer.delete_settled();
        let (tx, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("kiln-cache-journal".into())
            .spawn(move || writer.run(rx))?;
        Ok((Journal { tx, unsynced }, recovered))
    }

    async fn ask(&self, command: Command, rx: oneshot::Receiver<io::Result<()>>) -> io::Result<()> {
        self.tx
            .send(command)
            .map_err(|_| io::Error::other("the journal's thread has stopped"))?;
        rx.await
            .map_err(|_| io::Error::other("the journal's thread has stopped"))?
    }

    /// Makes version `version` of `key` durable.
    pub async fn put(
        &self,
        key: &ObjectKey,
        version: u64,
        meta: &Meta,
        body: &[u8],
    ) -> io::Result<()> {
        let frame = encode(
            PUT,
            version,
            &Header {
                key: key.clone(),
                meta: Some(meta.clone()),
            },
            body,
        );
        let (reply, rx) = oneshot::channel();
        self.ask(
            Command::Put {
                key: key.clone(),
                version,
                frame,
                reply,
            },
            rx,
        )
        .await
    }

    /// Records that `version` of `key` is in the backing store. Answered once written; synced
    /// with the next put or [`Journal::sync`], or after [`FLUSH_AFTER`].
    pub async fn done(&self, key: &ObjectKey, version: u64) -> io::Result<()> {
        let (reply, rx) = oneshot::channel();
        self.ask(
            Command::Done {
                key: key.clone(),
                version,
                reply,
            },
            rx,
        )
        .await
    }

    /// Makes every record written so far durable: dones included, so that a restart does not
    /// write their versions back over what changes the backing store next.
    pub async fn sync(&self) -> io::Result<()> {
        // The flag is set before a written record is answered: a done this caller waited for
        // is seen here.
        if !self.unsynced.load(Ordering::Acquire) {
            return Ok(());
        }
        let (reply, rx) = oneshot::channel();
        self.ask(Command::Sync { reply }, rx).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::checksum::Checksums;
    use crate::objects::shared::ObjectAttrs;

    fn meta(etag: &str) -> Meta {
        Meta {
            etag: etag.into(),
            modified_ms: 1,
            size: 3,
            attrs: ObjectAttrs::default(),
            checksums: Checksums::default(),
        }
    }

    fn segments(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    #[tokio::test]
    async fn unsettled_versions_come_back_latest_only() {
        let dir = tempfile::tempdir().unwrap();
        let a = ObjectKey::new("b", "a");
        let c = ObjectKey::new("b", "c");
        {
            let (j, recovered) = Journal::open(dir.path(), Counter::default()).unwrap();
            assert!(recovered.pending.is_empty());
            j.put(&a, 1, &meta("a1"), b"one").await.unwrap();
            j.put(&a, 2, &meta("a2"), b"two").await.unwrap();
            j.put(&c, 3, &meta("c3"), b"three").await.unwrap();
            j.done(&c, 3).await.unwrap();
        }
        let (_j, recovered) = Journal::open(dir.path(), Counter::default()).unwrap();
        assert_eq!(recovered.last_version, 3);
        assert_eq!(recovered.pending.len(), 1);
        let p = &recovered.pending[0];
        assert_eq!((&p.key, p.version, &p.body[..]), (&a, 2, &b"two"[..]));
        assert_eq!(p.meta, meta("a2"));
    }

    #[tokio::test]
    async fn pending_writes_are_counted_without_opening() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(pending_writes(&dir.path().join("absent")), 0);
        let a = ObjectKey::new("b", "a");
        let (j, _) = Journal::open(dir.path(), Counter::default()).unwrap();
        j.put(&a, 1, &meta("a1"), b"one").await.unwrap();
        assert_eq!(pending_writes(dir.path()), 1);
        j.done(&a, 1).await.unwrap();
        assert_eq!(pending_writes(dir.path()), 0);
    }

    #[tokio::test]
    async fn settled_segments_are_deleted_oldest_first() {
        let dir = tempfile::tempdir().unwrap();
        let a = ObjectKey::new("b", "a");
        {
            let (j, _) = Journal::open(dir.path(), Counter::default()).unwrap();
            j.put(&a, 1, &meta("a1"), b"one").await.unwrap();
        }
        {
            // Segment 1 holds an unsettled put, so it stays; segment 2 is the new active one.
            let (j, recovered) = Journal::open(dir.path(), Counter::default()).unwrap();
            assert_eq!(recovered.pending.len(), 1);
            assert_eq!(segments(dir.path()).len(), 2);
            j.done(&a, 1).await.unwrap();
        }
        // Reopened: segment 1 is settled and deleted; segment 2 (with the done) too, being
        // older than the new active segment 3.
        let (_j, recovered) = Journal::open(dir.path(), Counter::default()).unwrap();
        assert!(recovered.pending.is_empty());
        assert_eq!(segments(dir.path()), vec!["0000000000000003.log"]);
    }

    #[tokio::test]
    async fn a_torn_tail_loses_only_the_unacknowledged_record() {
        let dir = tempfile::tempdir().unwrap();
        let a = ObjectKey::new("b", "a");
        {
            let (j, _) = Journal::open(dir.path(), Counter::default()).unwrap();
            j.put(&a, 1, &meta("a1"), b"one").await.unwrap();
        }
        // A crash in the middle of the next write: half a frame at the end.
        let path = dir.path().join("0000000000000001.log");
        let frame = encode(
            PUT,
            2,
            &Header {
                key: a.clone(),
                meta: Some(meta("a2")),
            },
            b"two",
        );
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&frame[..frame.len() / 2]).unwrap();
        let (_j, recovered) = Journal::open(dir.path(), Counter::default()).unwrap();
        assert_eq!(recovered.bad_frames, 1);
        assert_eq!(recovered.pending.len(), 1);
        assert_eq!(recovered.pending[0].version, 1);
    }

    #[tokio::test]
    async fn many_writers_share_syncs() {
        let dir = tempfile::tempdir().unwrap();
        let (j, _) = Journal::open(dir.path(), Counter::default()).unwrap();
        let j = std::sync::Arc::new(j);
        let mut tasks = Vec::new();
        for i in 0..200u64 {
            let j = j.clone();
            tasks.push(tokio::spawn(async move {
                let key = ObjectKey::new("b", format!("k{i}"));
                j.put(&key, i + 1, &meta("x"), b"abc").await
            }));
        }
        for t in tasks {
            t.await.unwrap().unwrap();
        }
        drop(j);
        let (_j, recovered) = Journal::open(dir.path(), Counter::default()).unwrap();
        assert_eq!(recovered.pending.len(), 200);
        assert_eq!(recovered.last_version, 200);
    }

    /// Long enough that no lone done is synced by the timer during a test.
    const NEVER: Duration = Duration::from_secs(3600);

    #[tokio::test]
    async fn dones_ride_on_the_next_sync() {
        let dir = tempfile::tempdir().unwrap();
        let syncs = Counter::default();
        let (j, _) = Journal::open_flushing(dir.path(), syncs.clone(), NEVER).unwrap();
        let (a, b) = (ObjectKey::new("b", "a"), ObjectKey::new("b", "b"));
        j.put(&a, 1, &meta("a1"), b"one").await.unwrap();
        assert_eq!(syncs.get(), 1, "a put is answered once synced");
        j.done(&a, 1).await.unwrap();
        assert_eq!(syncs.get(), 1, "a done is answered once written");
        // Settled (in the journal's file) though not synced yet.
        assert_eq!(pending_writes(dir.path()), 0);
        // The next put's sync covers the done.
        j.put(&b, 2, &meta("b2"), b"two").await.unwrap();
        assert_eq!(syncs.get(), 2);
        // An explicit sync with nothing unsynced costs nothing; with a done, one sync.
        j.sync().await.unwrap();
        assert_eq!(syncs.get(), 2);
        j.done(&b, 2).await.unwrap();
        j.sync().await.unwrap();
        assert_eq!(syncs.get(), 3);
    }

    async fn wait_for(syncs: &Counter, n: u64) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while syncs.get() < n && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    async fn a_lone_done_is_synced_soon_after() {
        let dir = tempfile::tempdir().unwrap();
        let syncs = Counter::default();
        let flush = Duration::from_millis(30);
        let (j, _) = Journal::open_flushing(dir.path(), syncs.clone(), flush).unwrap();
        let a = ObjectKey::new("b", "a");
        j.put(&a, 1, &meta("a1"), b"one").await.unwrap();
        j.done(&a, 1).await.unwrap();
        wait_for(&syncs, 2).await;
        assert_eq!(syncs.get(), 2, "the done was synced once nothing else came");
    }

    #[tokio::test]
    async fn dones_that_keep_coming_are_synced_all_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let syncs = Counter::default();
        let flush = Duration::from_millis(40);
        let (j, _) = Journal::open_flushing(dir.path(), syncs.clone(), flush).unwrap();
        let a = ObjectKey::new("b", "a");
        j.put(&a, 1, &meta("a1"), b"one").await.unwrap();
        assert_eq!(syncs.get(), 1);
        // A done every 5 ms, never a pause as long as the flush delay: they are synced all the
        // same (a delay that started again at each record would never come).
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while syncs.get() == 1 && std::time::Instant::now() < deadline {
            j.done(&a, 1).await.unwrap();
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(
            syncs.get() >= 2,
            "the dones were synced while more kept coming"
        );
    }

    #[tokio::test]
    async fn the_last_handle_going_syncs_what_was_written() {
        let dir = tempfile::tempdir().unwrap();
        let syncs = Counter::default();
        let (j, _) = Journal::open_flushing(dir.path(), syncs.clone(), NEVER).unwrap();
        let a = ObjectKey::new("b", "a");
        j.put(&a, 1, &meta("a1"), b"one").await.unwrap();
        j.done(&a, 1).await.unwrap();
        assert_eq!(syncs.get(), 1);
        drop(j);
        wait_for(&syncs, 2).await;
        assert_eq!(syncs.get(), 2);
    }
}
