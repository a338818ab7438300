//! Function logs: one append-only file per function with size-based rotation, plus live
//! followers for `kiln logs -f`.
//!
//! Invocations hand their log to a writer task, so the invoke path never waits on the disk;
//! readers first pass a barrier through the same channel, so they see every log handed in
//! before them.

use std::collections::HashMap;
use std::fs::{self, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tokio::sync::{broadcast, mpsc, oneshot};

const ROTATE_BYTES: u64 = 8 * 1024 * 1024;
const KEEP_ROTATED: usize = 3;

enum Command {
    Append(String, String),
    Barrier(oneshot::Sender<()>),
    Remove(String),
}

#[derive(Clone)]
pub struct LogStore {
    dir: PathBuf,
    tx: mpsc::UnboundedSender<Command>,
    followers: Arc<Mutex<HashMap<String, broadcast::Sender<Arc<str>>>>>,
}

impl LogStore {
    pub fn open(dir: &Path) -> std::io::Result<Self> {
        fs::create_dir_all(dir)?;
        let (tx, mut rx) = mpsc::unbounded_channel::<Command>();
        let writer_dir = dir.to_path_buf();
        let followers: Arc<Mutex<HashMap<String, broadcast::Sender<Arc<str>>>>> = Arc::default();
        let writer_followers = followers.clone();
        std::thread::Builder::new()
            .name("kiln-logs".into())
            .spawn(move || {
                // Batching: one wake-up of this thread serves every log handed in meanwhile, so
                // under load the cost per invocation is a channel send, not a write system call.
                while let Some(first) = rx.blocking_recv() {
                    let mut batch = vec![first];
                    while let Ok(more) = rx.try_recv() {
                        batch.push(more);
                    }
                    let mut pending: Vec<(String, String)> = Vec::new();
                    for command in batch {
                        match command {
                            Command::Append(function, text) => {
                                let followers =
                                    writer_followers.lock().unwrap_or_else(|p| p.into_inner());
                                if let Some(tx) = followers.get(&function) {
                                    let _ = tx.send(Arc::from(text.as_str()));
                                }
                                drop(followers);
                                match pending.iter_mut().find(|(f, _)| *f == function) {
                                    Some((_, buffered)) => buffered.push_str(&text),
                                    None => pending.push((function, text)),
                                }
                            }
                            Command::Barrier(done) => {
                                flush(&writer_dir, &mut pending);
                                let _ = done.send(());
                            }
                            Command::Remove(function) => {
                                flush(&writer_dir, &mut pending);
                                let _ = fs::remove_dir_all(writer_dir.join(&function));
                            }
                        }
                    }
                    flush(&writer_dir, &mut pending);
                }
            })?;
        Ok(Self {
            dir: dir.to_path_buf(),
            tx,
            followers,
        })
    }

    pub fn append(&self, function: &str, text: String) {
        let _ = self.tx.send(Command::Append(function.to_string(), text));
    }

    pub fn remove(&self, function: &str) {
        let _ = self.tx.send(Command::Remove(function.to_string()));
    }

    async fn barrier(&self) {
        let (done, wait) = oneshot::channel();
        if self.tx.send(Command::Barrier(done)).is_ok() {
            let _ = wait.await;
        }
    }

    /// The last `max_bytes` of a function's log (across a rotation boundary if needed).
    pub async fn tail(&self, function: &str, max_bytes: u64) -> String {
        self.barrier().await;
        let dir = self.dir.join(function);
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
        let mut followers = self.followers.lock().unwrap_or_else(|p| p.into_inner());
        followers
            .entry(function.to_string())
            .or_insert_with(|| broadcast::channel(1024).0)
            .subscribe()
    }
}

fn flush(dir: &Path, pending: &mut Vec<(String, String)>) {
    for (function, text) in pending.drain(..) {
        if let Err(e) = append(dir, &function, &text) {
            tracing::warn!(%function, "cannot write log: {e}");
        }
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
