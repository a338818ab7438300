//! The journal's thread: it owns the segment files, commits records in groups with one
//! `fdatasync`, rotates segments and deletes the settled ones, and remembers the first failure.

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;
use tokio::sync::oneshot;

use super::super::entries::ObjectKey;
use super::frame::{encode, segment_path, Header, DONE};

/// A segment is closed and a new one started past this size.
pub(super) const SEGMENT_BYTES: u64 = 64 * 1024 * 1024;
/// Records committed by one sync, at most.
const GROUP: usize = 512;

pub(super) enum Command {
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

pub(super) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// The thread's state: which segments still hold unsettled records.
pub(super) struct Writer {
    pub(super) dir: PathBuf,
    pub(super) active: File,
    pub(super) active_no: u64,
    pub(super) active_bytes: u64,
    /// The active segment's size at which a new one is started: [`SEGMENT_BYTES`], or
    /// further on after a failed attempt (the segment grows meanwhile; nothing is at risk).
    pub(super) rotate_at: u64,
    /// Unsettled records per segment.
    pub(super) segments: BTreeMap<u64, usize>,
    /// Unsettled records per key: (version, segment).
    pub(super) unsettled: HashMap<ObjectKey, Vec<(u64, u64)>>,
    /// When the oldest record written to the active segment since its last sync was written.
    pub(super) unsynced_since: Option<Instant>,
    /// Shared with the handles: set before a written record is answered, cleared by a sync, so
    /// that [`Journal::sync`](super::Journal::sync) skips the thread when there is nothing to sync.
    pub(super) unsynced: Arc<AtomicBool>,
    pub(super) flush_after: Duration,
    /// The first write or sync that failed: every later request fails with it.
    pub(super) failed: Option<String>,
    pub(super) syncs: Counter,
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
    pub(super) fn delete_settled(&mut self) {
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

    pub(super) fn run(mut self, rx: mpsc::Receiver<Command>) {
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
    /// [`FLUSH_AFTER`](super::FLUSH_AFTER)).
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
