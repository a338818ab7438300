//! Object contents as files under `DATA_DIR/objects/`.
//!
//! An upload streams into `tmp/<id>` on a blocking thread, which hashes as it writes and
//! fsyncs at the end; publishing renames it to `data/<id[..2]>/<id>` and fsyncs that directory.
//! Files are never modified after that: a new version of an object is a new file, and a copy
//! is a hard link. On start, everything in `tmp/` and every file in `data/` that no metadata
//! row names (a crash between rename and commit, or between commit and unlink) is deleted.

use std::fs::{self, File};
use std::io::{self, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use futures_util::Stream;
use s3s::stream::{ByteStream, RemainingLength};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::objects::checksum::{Algorithm, BodyHasher, Checksums};

/// Chunks read per step when streaming a file out.
const READ_CHUNK: usize = 256 * 1024;

pub struct DataFiles {
    tmp: PathBuf,
    data: PathBuf,
}

/// What a finished upload wrote.
#[derive(Debug)]
pub struct Written {
    pub id: String,
    pub size: u64,
    pub md5: [u8; 16],
    pub checksums: Checksums,
}

fn sync_dir(path: &Path) -> io::Result<()> {
    File::open(path)?.sync_all()
}

impl DataFiles {
    pub fn open(root: &Path) -> io::Result<Self> {
        let files = Self {
            tmp: root.join("tmp"),
            data: root.join("data"),
        };
        fs::create_dir_all(&files.tmp)?;
        for shard in 0..=255u8 {
            fs::create_dir_all(files.data.join(format!("{shard:02x}")))?;
        }
        sync_dir(root)?;
        Ok(files)
    }

    pub fn new_id() -> String {
        uuid::Uuid::new_v4().simple().to_string()
    }

    fn tmp_path(&self, id: &str) -> PathBuf {
        self.tmp.join(id)
    }

    fn data_dir(&self, id: &str) -> PathBuf {
        self.data.join(id.get(..2).unwrap_or("00"))
    }

    pub fn data_path(&self, id: &str) -> PathBuf {
        self.data_dir(id).join(id)
    }

    /// Moves a finished upload to its final name, durably.
    pub fn publish(&self, id: &str) -> io::Result<()> {
        fs::rename(self.tmp_path(id), self.data_path(id))?;
        sync_dir(&self.data_dir(id))
    }

    /// A new file with the same contents, for CopyObject: files are immutable, so a hard link is
    /// a copy.
    pub fn link(&self, source: &str) -> io::Result<String> {
        let id = Self::new_id();
        fs::hard_link(self.data_path(source), self.data_path(&id))?;
        sync_dir(&self.data_dir(&id))?;
        Ok(id)
    }

    /// Deletes files whose rows are gone; a failure only leaves garbage for the next start.
    pub fn remove(&self, ids: &[String]) {
        for id in ids {
            match fs::remove_file(self.data_path(id)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => tracing::warn!(file = %id, "cannot delete object file: {e}"),
            }
        }
    }

    pub fn remove_tmp(&self, id: &str) {
        let _ = fs::remove_file(self.tmp_path(id));
    }

    pub fn open_file(&self, id: &str) -> io::Result<File> {
        File::open(self.data_path(id))
    }

    /// Deletes unfinished uploads and files no row refers to. Runs before serving.
    pub fn collect_garbage(
        &self,
        is_referenced: impl Fn(&str) -> io::Result<bool>,
    ) -> io::Result<usize> {
        let mut removed = 0;
        for entry in fs::read_dir(&self.tmp)? {
            fs::remove_file(entry?.path())?;
            removed += 1;
        }
        for shard in fs::read_dir(&self.data)? {
            let shard = shard?;
            if !shard.file_type()?.is_dir() {
                continue;
            }
            for entry in fs::read_dir(shard.path())? {
                let entry = entry?;
                let name = entry.file_name();
                let referenced = match name.to_str() {
                    Some(id) => is_referenced(id)?,
                    None => false,
                };
                if !referenced {
                    fs::remove_file(entry.path())?;
                    removed += 1;
                }
            }
        }
        Ok(removed)
    }

    /// Starts streaming a new file into `tmp/`, hashing MD5 and `algorithms` on the way.
    pub fn writer(self: &Arc<Self>, algorithms: &[Algorithm]) -> Writer {
        let (tx, mut rx) = mpsc::channel::<Message>(8);
        let id = Self::new_id();
        let path = self.tmp_path(&id);
        let mut hasher = BodyHasher::new(algorithms);
        let files = self.clone();
        let task_id = id.clone();
        let task = tokio::task::spawn_blocking(move || {
            let result = (|| {
                let mut out = BufWriter::with_capacity(256 * 1024, File::create(&path)?);
                let mut size = 0u64;
                loop {
                    match rx.blocking_recv() {
                        Some(Message::Data(chunk)) => {
                            hasher.update(&chunk);
                            out.write_all(&chunk)?;
                            size += chunk.len() as u64;
                        }
                        Some(Message::End) => break,
                        None => {
                            return Err(io::Error::new(
                                io::ErrorKind::Interrupted,
                                "upload abandoned",
                            ))
                        }
                    }
                }
                let file = out.into_inner().map_err(|e| e.into_error())?;
                file.sync_all()?;
                let (md5, checksums) = hasher.finish();
                Ok(Written {
                    id: task_id.clone(),
                    size,
                    md5,
                    checksums,
                })
            })();
            if result.is_err() {
                files.remove_tmp(&task_id);
            }
            result
        });
        Writer {
            tx,
            task: Some(task),
        }
    }
}

impl DataFiles {
    /// Writes `len` bytes from `start` of each source file, in order, into a new file in `tmp/`.
    pub fn concat(
        &self,
        sources: &[(String, u64, u64)],
        mut hasher: BodyHasher,
    ) -> io::Result<Written> {
        let id = Self::new_id();
        let path = self.tmp_path(&id);
        let result = (|| {
            let mut out = File::create(&path)?;
            let mut buf = vec![0u8; 1024 * 1024];
            let mut size = 0u64;
            for (source, start, len) in sources {
                let mut file = self.open_file(source)?;
                file.seek(SeekFrom::Start(*start))?;
                let mut remaining = *len;
                while remaining > 0 {
                    let want = remaining.min(buf.len() as u64) as usize;
                    file.read_exact(&mut buf[..want])?;
                    hasher.update(&buf[..want]);
                    out.write_all(&buf[..want])?;
                    remaining -= want as u64;
                    size += want as u64;
                }
            }
            out.sync_all()?;
            let (md5, checksums) = hasher.finish();
            Ok(Written {
                id: id.clone(),
                size,
                md5,
                checksums,
            })
        })();
        if result.is_err() {
            self.remove_tmp(&id);
        }
        result
    }
}

enum Message {
    Data(Bytes),
    End,
}

/// An upload in progress. Dropping it without `finish` deletes the partial file.
pub struct Writer {
    tx: mpsc::Sender<Message>,
    task: Option<JoinHandle<io::Result<Written>>>,
}

impl Writer {
    pub async fn write(&mut self, chunk: Bytes) -> io::Result<()> {
        if self.tx.send(Message::Data(chunk)).await.is_ok() {
            return Ok(());
        }
        // The writer thread stopped: its result says why.
        match self.task.take() {
            Some(task) => match task.await {
                Ok(Err(e)) => Err(e),
                Ok(Ok(_)) | Err(_) => Err(io::Error::other("object writer stopped")),
            },
            None => Err(io::Error::other("object writer stopped")),
        }
    }

    /// Ends the upload: the file is fsynced in `tmp/`, not yet published.
    pub async fn finish(mut self) -> io::Result<Written> {
        let task = self
            .task
            .take()
            .ok_or_else(|| io::Error::other("object writer stopped"))?;
        let _ = self.tx.send(Message::End).await;
        drop(self);
        task.await.map_err(io::Error::other)?
    }
}

/// Reads a whole small file.
pub fn read_all(mut file: File, start: u64, len: u64) -> io::Result<Bytes> {
    file.seek(SeekFrom::Start(start))?;
    let mut buf = BytesMut::zeroed(len as usize);
    file.read_exact(&mut buf)?;
    Ok(buf.freeze())
}

/// Streams `len` bytes of a file from `start`, read ahead on a blocking thread.
pub fn stream_file(mut file: File, start: u64, len: u64) -> FileStream {
    let (tx, rx) = mpsc::channel(4);
    tokio::task::spawn_blocking(move || {
        if let Err(e) = file.seek(SeekFrom::Start(start)) {
            let _ = tx.blocking_send(Err(e));
            return;
        }
        let mut remaining = len;
        while remaining > 0 {
            let want = remaining.min(READ_CHUNK as u64) as usize;
            let mut buf = BytesMut::zeroed(want);
            let result = file.read_exact(&mut buf).map(|()| buf.freeze());
            let failed = result.is_err();
            if tx.blocking_send(result).is_err() || failed {
                // The client went away, or the read failed and the stream reports it.
                return;
            }
            remaining -= want as u64;
        }
    });
    FileStream { rx, remaining: len }
}

pub struct FileStream {
    rx: mpsc::Receiver<io::Result<Bytes>>,
    remaining: u64,
}

impl Stream for FileStream {
    type Item = Result<Bytes, s3s::StdError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let polled = self.rx.poll_recv(cx);
        if let Poll::Ready(Some(Ok(chunk))) = &polled {
            self.remaining = self.remaining.saturating_sub(chunk.len() as u64);
        }
        polled.map(|item| item.map(|r| r.map_err(Into::into)))
    }
}

impl ByteStream for FileStream {
    fn remaining_length(&self) -> RemainingLength {
        RemainingLength::new_exact(self.remaining as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::StreamExt;

    #[tokio::test]
    async fn uploads_publish_and_garbage_is_collected() {
        let dir = tempfile::tempdir().unwrap();
        let files = Arc::new(DataFiles::open(dir.path()).unwrap());

        let mut w = files.writer(&[Algorithm::Crc32]);
        w.write(Bytes::from_static(b"hello ")).await.unwrap();
        w.write(Bytes::from_static(b"world")).await.unwrap();
        let written = w.finish().await.unwrap();
        assert_eq!(written.size, 11);
        assert_eq!(written.checksums.crc32.as_deref(), Some("DUoRhQ=="));
        files.publish(&written.id).unwrap();

        // An abandoned upload leaves nothing behind.
        let mut abandoned = files.writer(&[]);
        abandoned
            .write(Bytes::from_static(b"partial"))
            .await
            .unwrap();
        let tmp_is_empty = || std::fs::read_dir(&files.tmp).unwrap().next().is_none();
        // The writer's blocking task creates its file when it gets to run; on a loaded machine
        // that may be after the drop, so wait for the file to exist first.
        for _ in 0..1000 {
            if !tmp_is_empty() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert!(!tmp_is_empty(), "the upload's file was never created");
        drop(abandoned);
        for _ in 0..1000 {
            if tmp_is_empty() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert!(tmp_is_empty());

        let copy = files.link(&written.id).unwrap();
        let mut stream = stream_file(files.open_file(&copy).unwrap(), 6, 5);
        assert_eq!(stream.remaining_length().exact(), Some(5));
        let mut got = Vec::new();
        while let Some(chunk) = stream.next().await {
            got.extend_from_slice(&chunk.unwrap());
        }
        assert_eq!(got, b"world");
        assert_eq!(
            &read_all(files.open_file(&written.id).unwrap(), 0, 5).unwrap()[..],
            b"hello"
        );

        // A crash left a file in tmp/ and an unreferenced one in data/.
        std::fs::write(files.tmp_path("torn"), b"x").unwrap();
        let keep = written.id.clone();
        let removed = files.collect_garbage(|id| Ok(id == keep)).unwrap();
        assert_eq!(removed, 2, "the torn upload and the unreferenced copy");
        assert!(files.data_path(&written.id).exists());
        assert!(!files.data_path(&copy).exists());
    }
}
