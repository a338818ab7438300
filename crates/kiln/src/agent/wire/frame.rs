//! The framed protocol between the agent and kiln's own runtime shims (docs/shim-protocol.md).

use bytes::{Buf, Bytes, BytesMut};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

/// Larger frames are a protocol violation: Lambda's response limit is 6 MB.
pub const MAX_FRAME_BYTES: usize = 16 * 1024 * 1024;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Header {
    Ready,
    InitError,
    Invoke {
        #[serde(rename = "requestId")]
        request_id: String,
        #[serde(rename = "deadlineMs")]
        deadline_ms: u64,
        #[serde(rename = "functionArn")]
        function_arn: String,
        #[serde(rename = "traceId")]
        trace_id: String,
        #[serde(rename = "clientContext")]
        client_context: Option<String>,
        #[serde(rename = "cognitoIdentity")]
        cognito_identity: Option<String>,
        /// The session the invocation belongs to; its state was loaded before (docs/sessions.md).
        #[serde(rename = "sessionId", default, skip_serializing_if = "Option::is_none")]
        session_id: Option<String>,
    },
    Response,
    Error {
        /// The shim exits right after this answer (an uncaught exception): the instance must not
        /// be given another invocation.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        fatal: bool,
    },
    /// Agent to a runtime-generic standby shim (the warm path): the function's code is now at
    /// the task root; take this environment, load the handler and answer `ready` or
    /// `init_error` as at a normal start.
    Load {
        env: std::collections::BTreeMap<String, String>,
    },
    /// Agent to shim: hold this session's state (the body, a record of puts), replacing any
    /// copy held before; its writes are bound by these limits.
    SessionLoad {
        #[serde(rename = "sessionId")]
        session_id: String,
        #[serde(rename = "maxValueBytes")]
        max_value_bytes: u32,
        #[serde(rename = "maxSessionBytes")]
        max_session_bytes: u32,
    },
    /// Agent to shim: forget this session's state (it ended, or moved to another instance).
    SessionDrop {
        #[serde(rename = "sessionId")]
        session_id: String,
    },
    /// Shim to agent, before its answer: the invocation's writes to its session's state (the
    /// body, entries of the session log's format).
    SessionCommit,
    /// Agent to a tracing instance's shim, between invocations: send the trace tree built so
    /// far (BREAKOUT).
    TraceDump,
    /// Shim to agent: the trace tree, its JSON as the body (docs/breakout.md), or an empty body
    /// when the instance holds no tracing runtime.
    Trace,
    /// Agent to shim: stop serving invocations and become a fork server.
    Zygote,
    /// Shim to agent: the fork server is listening; its pid in the sandbox's PID namespace.
    ZygoteReady {
        #[serde(default)]
        pid: i32,
    },
    /// Agent to fork server: fork a new instance. The frame carries two descriptors (the new
    /// instance's agent socket, the write end of its output pipe) and environment overrides.
    Fork {
        env: std::collections::BTreeMap<String, String>,
        /// The fork waits for one `invoke` frame (the agent sends it once the fork is in its own
        /// cgroup), runs it as a warm-up with its answer and output dropped, and only then runs
        /// its after-restore hooks and answers `ready`.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        warmup: bool,
    },
    /// Fork server to agent: the fork's pid, in the sandbox's PID namespace.
    Forked {
        pid: i32,
    },
    /// Fork server to agent: a fork ended, with its exit code (128 + signal when killed).
    Exited {
        pid: i32,
        status: i32,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub header: Header,
    pub body: Bytes,
}

/// Why a frame could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// the socket failed
    #[error("shim socket: {0}")]
    Io(#[from] std::io::Error),
    /// the peer sent something that is not a frame
    #[error("shim protocol violation: {0}")]
    Protocol(String),
}

/// Appends one encoded frame to `out`.
pub fn encode(header: &Header, body: &[u8], out: &mut Vec<u8>) {
    // The header is written in place and its length filled in after: no copy of it.
    let at = out.len();
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    serde_json::to_writer(&mut *out, header).expect("headers always serialize");
    let header_len = (out.len() - at - 8) as u32;
    out[at..at + 4].copy_from_slice(&header_len.to_be_bytes());
    out.extend_from_slice(body);
}

/// Takes one complete frame off the front of `buf`, if there is one.
pub fn decode(buf: &mut BytesMut) -> Result<Option<Frame>, FrameError> {
    if buf.len() < 8 {
        return Ok(None);
    }
    let header_len = u32::from_be_bytes(buf[0..4].try_into().expect("4 bytes")) as usize;
    let body_len = u32::from_be_bytes(buf[4..8].try_into().expect("4 bytes")) as usize;
    if header_len > 64 * 1024 || body_len > MAX_FRAME_BYTES {
        return Err(FrameError::Protocol(format!(
            "frame too large ({header_len} + {body_len} bytes)"
        )));
    }
    if buf.len() < 8 + header_len + body_len {
        buf.reserve(8 + header_len + body_len - buf.len());
        return Ok(None);
    }
    buf.advance(8);
    let header_bytes = buf.split_to(header_len);
    let body = buf.split_to(body_len).freeze();
    let header = serde_json::from_slice(&header_bytes)
        .map_err(|e| FrameError::Protocol(format!("bad frame header: {e}")))?;
    Ok(Some(Frame { header, body }))
}

/// A shim connection. Reading is cancel-safe: a partially received frame stays buffered.
pub struct ShimConn {
    stream: UnixStream,
    buf: BytesMut,
    out: Vec<u8>,
}

impl ShimConn {
    pub fn new(stream: UnixStream) -> Self {
        Self {
            stream,
            buf: BytesMut::with_capacity(8 * 1024),
            out: Vec::with_capacity(8 * 1024),
        }
    }

    /// The next frame, or `None` at end of file (the runtime is gone).
    pub async fn next(&mut self) -> Result<Option<Frame>, FrameError> {
        loop {
            if let Some(frame) = decode(&mut self.buf)? {
                return Ok(Some(frame));
            }
            if self.stream.read_buf(&mut self.buf).await? == 0 {
                return Ok(None);
            }
        }
    }

    /// The socket, and whatever was received after the last frame taken.
    pub fn into_parts(self) -> (UnixStream, BytesMut) {
        (self.stream, self.buf)
    }

    pub async fn send(&mut self, header: &Header, body: &[u8]) -> Result<(), FrameError> {
        self.out.clear();
        encode(header, body, &mut self.out);
        self.stream.write_all(&self.out).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn round_trip_in_pieces() {
        let mut out = Vec::new();
        encode(&Header::Response, b"{\"ok\":1}", &mut out);
        encode(&Header::Ready, b"", &mut out);
        let mut buf = BytesMut::new();
        let mut frames = Vec::new();
        for byte in out {
            buf.extend_from_slice(&[byte]);
            while let Some(frame) = decode(&mut buf).unwrap() {
                frames.push(frame);
            }
        }
        assert_eq!(frames.len(), 2);
        assert_eq!(frames[0].header, Header::Response);
        assert_eq!(&frames[0].body[..], b"{\"ok\":1}");
        assert_eq!(frames[1].header, Header::Ready);
    }

    #[test]
    fn invoke_header_uses_the_documented_names() {
        let header = Header::Invoke {
            request_id: "r".into(),
            deadline_ms: 5,
            function_arn: "a".into(),
            trace_id: "t".into(),
            client_context: None,
            cognito_identity: None,
            session_id: None,
        };
        let json = serde_json::to_value(&header).unwrap();
        assert_eq!(json["type"], "invoke");
        assert_eq!(json["requestId"], "r");
        assert_eq!(json["deadlineMs"], 5);
        assert!(json.get("sessionId").is_none());
        let load = Header::SessionLoad {
            session_id: "s".into(),
            max_value_bytes: 1,
            max_session_bytes: 2,
        };
        assert_eq!(
            serde_json::to_string(&load).unwrap(),
            r#"{"type":"session_load","sessionId":"s","maxValueBytes":1,"maxSessionBytes":2}"#
        );
    }

    #[test]
    fn error_frames_may_be_marked_fatal() {
        let plain: Header = serde_json::from_str(r#"{"type":"error"}"#).unwrap();
        assert_eq!(plain, Header::Error { fatal: false });
        let fatal: Header = serde_json::from_str(r#"{"type":"error","fatal":true}"#).unwrap();
        assert_eq!(fatal, Header::Error { fatal: true });
        let json = serde_json::to_string(&Header::Error { fatal: false }).unwrap();
        assert_eq!(json, r#"{"type":"error"}"#);
    }

    #[test]
    fn oversized_frames_are_refused() {
        let mut buf = BytesMut::from(&[0, 0, 0, 2, 0xff, 0xff, 0xff, 0xff][..]);
        assert!(decode(&mut buf).is_err());
    }

    proptest! {
        #[test]
        fn decoding_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let mut buf = BytesMut::from(&bytes[..]);
            while let Ok(Some(_)) = decode(&mut buf) {}
        }
    }
}
