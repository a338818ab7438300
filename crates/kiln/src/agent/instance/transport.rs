//! How kiln talks to an instance's runtime: kiln's shim protocol or the Lambda Runtime API, and
//! what either says, as one [`Message`] type.

use std::time::Duration;

use bytes::Bytes;

use super::MAX_RESPONSE_BYTES;
use crate::agent::frame::{Frame, Header, ShimConn};
use crate::agent::runtime_api::{RuntimeApi, RuntimeMessage};

pub(super) enum Transport {
    Shim(ShimConn),
    Api(RuntimeApi),
    /// Taken over by a zygote.
    Detached,
}

/// What the runtime said, whatever the transport.
pub(super) enum Message {
    Ready,
    InitError(Bytes),
    Response(Bytes),
    /// An error answer; `fatal` when the runtime exits right after it.
    Error {
        body: Bytes,
        fatal: bool,
    },
    TooLarge,
    /// An invocation's writes to its session's state; its answer follows.
    SessionCommit(Bytes),
    /// A tracing instance's trace tree, asked for between invocations.
    Trace(Bytes),
}

impl Transport {
    /// The next message, or `None` once the runtime is gone. Cancel-safe.
    pub(super) async fn recv(&mut self) -> Option<Message> {
        match self {
            Transport::Shim(conn) => match conn.next().await {
                Ok(Some(Frame { header, body })) => Some(match header {
                    Header::Ready => Message::Ready,
                    Header::InitError => Message::InitError(body),
                    Header::Response if body.len() > MAX_RESPONSE_BYTES => Message::TooLarge,
                    Header::Response => Message::Response(body),
                    Header::Error { fatal } => Message::Error { body, fatal },
                    Header::SessionCommit => Message::SessionCommit(body),
                    Header::Trace => Message::Trace(body),
                    _ => Message::Error {
                        body: Bytes::from_static(
                            br#"{"errorType":"Runtime.InvalidResponse","errorMessage":"the runtime sent an unexpected frame"}"#,
                        ),
                        fatal: true,
                    },
                }),
                Ok(None) | Err(_) => None,
            },
            Transport::Api(api) => match api.messages.recv().await? {
                RuntimeMessage::Ready => Some(Message::Ready),
                RuntimeMessage::InitError(body) => Some(Message::InitError(body)),
                RuntimeMessage::Response { body, .. } => Some(Message::Response(body)),
                RuntimeMessage::Error { body, .. } => Some(Message::Error { body, fatal: false }),
                RuntimeMessage::TooLarge { .. } => Some(Message::TooLarge),
            },
            Transport::Detached => None,
        }
    }

    /// A message the runtime sent before its sandbox went away, if any. Only call it once the
    /// sandbox is gone: the shim socket then reaches end of file at once.
    pub(super) async fn recv_after_exit(&mut self) -> Option<Message> {
        match self {
            Transport::Shim(_) => tokio::time::timeout(Duration::from_secs(1), self.recv())
                .await
                .ok()
                .flatten(),
            Transport::Api(api) => match api.messages.try_recv().ok()? {
                RuntimeMessage::Ready => None,
                RuntimeMessage::InitError(body) => Some(Message::InitError(body)),
                RuntimeMessage::Response { body, .. } => Some(Message::Response(body)),
                RuntimeMessage::Error { body, .. } => Some(Message::Error { body, fatal: true }),
                RuntimeMessage::TooLarge { .. } => Some(Message::TooLarge),
            },
            Transport::Detached => None,
        }
    }
}
