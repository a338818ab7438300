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

use std::fs::{self, OpenOptions};
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;

use tokio::sync::oneshot;

use super::entries::{Meta, ObjectKey};

mod frame;
mod replay;
mod writer;

use frame::{encode, segment_path, Header, PUT};
pub use replay::Recovered;
use replay::{replay, Replay};
use writer::{sync_dir, Command, Writer, SEGMENT_BYTES};

/// Dones written and not yet synced are synced at most this long after the first of them: the
/// window in which a crash makes a restart write those versions back again (and skip them).
pub const FLUSH_AFTER: Duration = Duration::from_millis(100);

/// The handle; the journal's thread ends when the last handle is dropped.
pub struct Journal {
    tx: mpsc::Sender<Command>,
    /// Records written and not yet synced (see `Writer::unsynced`).
    unsynced: Arc<AtomicBool>,
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
    use std::io::Write;

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
