//! Function logs: one append-only file per function with size-based rotation, plus live
//! followers for `kiln logs -f`.
//!
//! Invocations add their log to an in-memory batch, which a writer thread flushes to disk a few
//! times a second, so an invocation costs neither a write system call nor a thread wake-up.
//! Readers flush the batch first, so they see every log handed in before them.

use std::collections::HashMap;
use std::fs::{self, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use tokio::sync::broadcast;

use crate::sync::LockExt;

const ROTATE_BYTES: u64 = 8 * 1024 * 1024;
const KEEP_ROTATED: usize = 3;
/// How long a log may wait in memory before it is written.
const FLUSH_INTERVAL: Duration = Duration::from_millis(200);
/// A batch this large is written at once.
const FLUSH_BYTES: usize = 1024 * 1024;

#[derive(Default)]
struct Batch {
    entries: Vec<(String, String)>,
    bytes: usize,
}

struct Shared {
    dir: PathBuf,
    batch: Mutex<Batch>,
    wake: Condvar,
    /// Held while a batch is written, so two flushes never interleave or reorder.
    writing: Mutex<()>,
    followers: Mutex<HashMap<String, broadcast::Sender<Arc<str>>>>,
    has_followers: AtomicBool,
}

impl Shared {
    fn lock_batch(&self) -> std::sync::MutexGuard<'_, Batch> {
        self.batch.locked()
    }

    fn flush(&self) {
        let _writing = self.writing.locked();
        let entries = std::mem::take(&mut *self.lock_batch()).entries;
        // Consecutive logs of one function become one write.
        let mut merged: Vec<(String, String)> = Vec::new();
        for (function, text) in entries {
            match merged.last_mut() {
                Some((last, buffered)) if *last == function => buffered.push_str(&text),
                _ => merged.push((function, text)),
            }
        }
        for (function, text) in merged {
            if let Err(e) = append(&self.dir, &function, &text) {
                tracing::warn!(%function, "cannot write log: {e}");
            }
        }
    }
}

#[derive(Clone)]
pub struct LogStore {
    shared: Arc<Shared>,
}

impl LogStore {
    pub fn open(dir: &Path) -> std::io::Result<Self> {
        fs::create_dir_all(dir)?;
        let shared = Arc::new(Shared {
            dir: dir.to_path_buf(),
            batch: Mutex::default(),
            wake: Condvar::new(),
            writing: Mutex::new(()),
            followers: Mutex::default(),
            has_followers: AtomicBool::new(false),
        });
        let weak = Arc::downgrade(&shared);
        std::thread::Builder::new()
            .name("kiln-logs".into())
            .spawn(move || loop {
                let Some(shared) = weak.upgrade() else { return };
                {
                    let batch = shared.lock_batch();
                    if batch.bytes < FLUSH_BYTES {
                        let _ = shared.wake.wait_timeout(batch, FLUSH_INTERVAL);
                    }
                }
                shared.flush();
            })?;
        Ok(Self { shared })
    }

    pub fn append(&self, function: &str, text: String) {
        if self.shared.has_followers.load(Ordering::Relaxed) {
            let followers = self.shared.followers.locked();
            if let Some(tx) = followers.get(function) {
                let _ = tx.send(Arc::from(text.as_str()));
            }
        }
        let mut batch = self.shared.lock_batch();
        batch.bytes += text.len();
        let full = batch.bytes >= FLUSH_BYTES;
        batch.entries.push((function.to_string(), text));
        drop(batch);
        if full {
            self.shared.wake.notify_one();
        }
    }

    /// Deletes a function's logs. Synchronous, so a function created again under the same
    /// name right after starts with an empty log.
    pub fn remove(&self, function: &str) {
        self.shared.flush();
        let _writing = self.shared.writing.locked();
        let _ = fs::remove_dir_all(self.shared.dir.join(function));
    }

    async fn barrier(&self) {
        let shared = self.shared.clone();
        let _ = tokio::task::spawn_blocking(move || shared.flush()).await;
    }

    /// The last `max_bytes` of a function's log (across a rotation boundary if needed).
    pub async fn tail(&self, function: &str, max_bytes: u64) -> String {
        self.barrier().await;
        let dir = self.shared.dir.join(function);
        tokio::task::spawn_blocking(move || {
            let mut out = Vec::new();
            let mut remaining = max_bytes;
            for path in std::iter::once(dir.join("current.log"))
                .chain((1..=KEEP_ROTATED).map(|n| dir.join(format!("{n}.log"))))
            {
                if remaining == 0 {
                    break;
                }
                let Ok(mut file) = fs::File::open(&path) else {
                    continue;
                };
                let len = file.metadata().map(|m| m.len()).unwrap_or(0);
                let take = len.min(remaining);
                let _ = file.seek(SeekFrom::Start(len - take));
                let mut chunk = Vec::with_capacity(take as usize);
                let _ = file.take(take).read_to_end(&mut chunk);
                chunk.extend_from_slice(&out);
                out = chunk;
                remaining -= take;
            }
            String::from_utf8_lossy(&out).into_owned()
        })
        .await
        .unwrap_or_default()
    }

    /// New log text of a function as it is written.
    pub fn follow(&self, function: &str) -> broadcast::Receiver<Arc<str>> {
        let mut followers = self.shared.followers.locked();
        self.shared.has_followers.store(true, Ordering::Relaxed);
        followers
            .entry(function.to_string())
            .or_insert_with(|| broadcast::channel(1024).0)
            .subscribe()
    }
}

fn append(dir: &Path, function: &str, text: &str) -> std::io::Result<()> {
    let dir = dir.join(function);
    fs::create_dir_all(&dir)?;
    let current = dir.join("current.log");
    if fs::metadata(&current).map(|m| m.len()).unwrap_or(0) + text.len() as u64 > ROTATE_BYTES {
        for n in (1..KEEP_ROTATED).rev() {
            let _ = fs::rename(
                dir.join(format!("{n}.log")),
                dir.join(format!("{}.log", n + 1)),
            );
        }
        let _ = fs::rename(&current, dir.join("1.log"));
    }
    let mut file = OpenOptions::new().create(true).append(true).open(current)?;
    file.write_all(text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn appends_rotates_and_tails() {
        let dir = tempfile::tempdir().unwrap();
        let logs = LogStore::open(dir.path()).unwrap();
        let mut follow = logs.follow("f");
        logs.append("f", "one\n".into());
        logs.append("f", "two\n".into());
        assert_eq!(logs.tail("f", 1024).await, "one\ntwo\n");
        assert_eq!(logs.tail("f", 4).await, "two\n");
        assert_eq!(&*follow.recv().await.unwrap(), "one\n");
        let big = "x".repeat(ROTATE_BYTES as usize - 2);
        logs.append("f", big);
        logs.append("f", "last\n".into());
        assert!(logs.tail("f", 10).await.ends_with("last\n"));
        assert!(dir.path().join("f/1.log").exists());
        assert_eq!(logs.tail("missing", 10).await, "");
    }
}
