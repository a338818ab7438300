//! A bounded in-memory sink for a guest's stdout or stderr.
//!
//! wasmtime-wasi's `MemoryOutputPipe` traps the guest when it is full. kiln wants the guest to
//! finish instead and to decide afterwards: a response over 6 MB is the function's error
//! (`Function.ResponseSizeTooLarge`, as on Lambda), and logs past their bound are truncated.
//! So this sink accepts every write, keeps the first `limit` bytes and remembers that it
//! overflowed.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

/// Largest write the guest is offered at once (the WASI `check-write` permit).
const WRITE_PERMIT: usize = 1 << 20;

#[derive(Clone)]
pub(crate) struct BoundedOutput {
    inner: Arc<Mutex<Buffer>>,
}

struct Buffer {
    data: Vec<u8>,
    limit: usize,
    overflowed: bool,
}

impl BoundedOutput {
    pub(crate) fn new(limit: usize) -> Self {
        BoundedOutput {
            inner: Arc::new(Mutex::new(Buffer {
                data: Vec::new(),
                limit,
                overflowed: false,
            })),
        }
    }

    fn append(&self, bytes: &[u8]) {
        let mut buf = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let room = buf.limit - buf.data.len();
        if bytes.len() > room {
            buf.overflowed = true;
        }
        let keep = bytes.len().min(room);
        buf.data.extend_from_slice(&bytes[..keep]);
    }

    /// The bytes kept, and whether more were written than kept.
    pub(crate) fn take(&self) -> (Vec<u8>, bool) {
        let mut buf = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        (std::mem::take(&mut buf.data), buf.overflowed)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for BoundedOutput {
    async fn ready(&mut self) {}
}

impl OutputStream for BoundedOutput {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.append(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(WRITE_PERMIT)
    }
}

impl AsyncWrite for BoundedOutput {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.append(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl IsTerminal for BoundedOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for BoundedOutput {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_first_bytes_and_remembers_the_overflow() {
        let out = BoundedOutput::new(5);
        out.append(b"abc");
        assert_eq!(out.take(), (b"abc".to_vec(), false));
        out.append(b"defghij");
        let (data, overflowed) = out.take();
        assert_eq!(data, b"defgh");
        assert!(overflowed);
    }
}
