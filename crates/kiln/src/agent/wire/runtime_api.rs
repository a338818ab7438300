//! The AWS Lambda Runtime API (2018-06-01), served to one `provided` instance.
//!
//! Each instance gets its own server on a listener inside the instance's network namespace, so
//! a function can only ever reach its own invocations. The instance's invoker hands events in
//! through a channel and gets the runtime's answers back through another.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use tokio::sync::{mpsc, Mutex};

use crate::agent::sessions::log::{CommitError, Entry, Kind, Limits, SessionLog};
use crate::agent::sessions::txn::Txn;
use crate::sync::LockExt;

/// The largest response a function may return synchronously (Lambda's 6 MB).
pub const MAX_RESPONSE_BYTES: usize = 6 * 1024 * 1024;

/// An invocation handed to the runtime by `GET /next`.
#[derive(Debug, Clone)]
pub struct Event {
    pub request_id: String,
    pub deadline_ms: u64,
    pub function_arn: String,
    pub trace_id: String,
    pub client_context: Option<String>,
    pub payload: Bytes,
    /// The session the invocation belongs to: its state is served under
    /// `/invocation/{id}/session/` (docs/sessions.md).
    pub session: Option<(Arc<SessionLog>, Limits)>,
    /// A shadow run: its session writes are dropped at its end.
    pub shadow: bool,
}

/// What the runtime told the agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuntimeMessage {
    /// The first `GET /next`: initialization is over.
    Ready,
    InitError(Bytes),
    Response {
        request_id: String,
        body: Bytes,
    },
    Error {
        request_id: String,
        body: Bytes,
    },
    /// A response above [`MAX_RESPONSE_BYTES`].
    TooLarge {
        request_id: String,
    },
}

struct Shared {
    events: Mutex<mpsc::Receiver<Event>>,
    messages: mpsc::UnboundedSender<RuntimeMessage>,
    ready_sent: std::sync::atomic::AtomicBool,
    /// The request id handed out by the last `GET /next` and not answered yet. Only it may be
    /// answered, once: a second or made-up answer would otherwise be taken for the next
    /// invocation's.
    awaiting: std::sync::Mutex<Option<String>>,
    /// The session of the invocation in flight, with its writes so far.
    session: std::sync::Mutex<Option<(String, Txn)>>,
}

impl Shared {
    /// Claims the right to answer `request_id`; true once per delivered event.
    fn claim(&self, request_id: &str) -> bool {
        let mut awaiting = self.awaiting.locked();
        if awaiting.as_deref() == Some(request_id) {
            *awaiting = None;
            true
        } else {
            false
        }
    }
}

/// The agent's end of one instance's Runtime API.
pub struct RuntimeApi {
    pub events: mpsc::Sender<Event>,
    pub messages: mpsc::UnboundedReceiver<RuntimeMessage>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for RuntimeApi {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl RuntimeApi {
    /// Serves the Runtime API on `listener` until dropped.
    ///
    /// A listener inside the instance's own network namespace is reachable by that instance only. A
    /// listener in the host's namespace (network mode `host`) is reachable by every local process, so
    /// `only_uid` names the one uid whose connections are served: the sandbox's. Anyone else (another
    /// function, a host user) could otherwise take the instance's invocations and answer them.
    pub fn serve(listener: std::net::TcpListener, only_uid: Option<u32>) -> std::io::Result<Self> {
        let local = listener.local_addr()?;
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let (events_tx, events_rx) = mpsc::channel(1);
        let (messages_tx, messages_rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            events: Mutex::new(events_rx),
            messages: messages_tx,
            ready_sent: false.into(),
            awaiting: std::sync::Mutex::new(None),
            session: std::sync::Mutex::new(None),
        });
        let server = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            while let Ok((stream, peer)) = listener.accept().await {
                if let Some(uid) = only_uid {
                    let owner = tokio::task::spawn_blocking(move || tcp_owner(peer, local))
                        .await
                        .ok()
                        .flatten();
                    if owner != Some(uid) {
                        tracing::warn!(%peer, ?owner, "Runtime API: refused a connection from another user");
                        continue;
                    }
                }
                let _ = stream.set_nodelay(true);
                let shared = shared.clone();
                connections.spawn(async move {
                    let service =
                        hyper::service::service_fn(move |req| handle(shared.clone(), req));
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, service)
                        .await;
                });
            }
        });
        Ok(Self {
            events: events_tx,
            messages: messages_rx,
            server,
        })
    }
}

/// The uid that owns the local TCP socket `peer` connected to `local`, from the kernel's socket table.
fn tcp_owner(peer: SocketAddr, local: SocketAddr) -> Option<u32> {
    let table = match peer {
        SocketAddr::V4(_) => "/proc/net/tcp",
        SocketAddr::V6(_) => "/proc/net/tcp6",
    };
    let text = std::fs::read_to_string(table).ok()?;
    find_owner(&text, peer, local)
}

/// Finds the socket `peer -> local` in a /proc/net/tcp{,6} table and returns its uid.
fn find_owner(table: &str, peer: SocketAddr, local: SocketAddr) -> Option<u32> {
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (from, to, uid) = (fields.get(1)?, fields.get(2)?, fields.get(7)?);
        (parse_proc_addr(from)? == peer && parse_proc_addr(to)? == local)
            .then(|| uid.parse().ok())
            .flatten()
    })
}

/// Parses `0100007F:1F91` (IPv4) or the 32-hex-digit IPv6 form. The kernel prints the address as
/// 32-bit words in host byte order and the port as a plain number.
fn parse_proc_addr(text: &str) -> Option<SocketAddr> {
    let (addr, port) = text.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let words = (0..addr.len() / 8)
        .map(|i| u32::from_str_radix(addr.get(i * 8..i * 8 + 8)?, 16).ok())
        .collect::<Option<Vec<u32>>>()?;
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
    match bytes.len() {
        4 => Some(SocketAddr::from((<[u8; 4]>::try_from(bytes).ok()?, port))),
        16 => Some(SocketAddr::from((<[u8; 16]>::try_from(bytes).ok()?, port))),
        _ => None,
    }
}

fn reply(status: StatusCode, body: &str) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::copy_from_slice(body.as_bytes())))
        .expect("static response parts are valid")
}

fn error_reply(status: StatusCode, error_type: &str, message: &str) -> Response<Full<Bytes>> {
    let body = serde_json::json!({ "errorType": error_type, "errorMessage": message });
    reply(status, &body.to_string())
}

async fn handle(
    shared: Arc<Shared>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = req.uri().path().to_string();
    let Some(rest) = path.strip_prefix("/2018-06-01/runtime/") else {
        return Ok(error_reply(
            StatusCode::NOT_FOUND,
            "InvalidRequest",
            "unknown Runtime API path",
        ));
    };
    let parts: Vec<&str> = rest.split('/').collect();
    Ok(match (req.method(), parts.as_slice()) {
        (&Method::GET, ["invocation", "next"]) => next(&shared).await,
        (&Method::POST, ["invocation", id, kind @ ("response" | "error")]) => {
            let request_id = id.to_string();
            if !shared.claim(&request_id) {
                return Ok(error_reply(
                    StatusCode::BAD_REQUEST,
                    "InvalidRequestID",
                    "no invocation with this request id is waiting for an answer",
                ));
            }
            let is_error = *kind == "error";
            let header_type = header(&req, "lambda-runtime-function-error-type");
            let collected = match Limited::new(req.into_body(), MAX_RESPONSE_BYTES)
                .collect()
                .await
            {
                Ok(collected) => collected,
                Err(_) => {
                    let _ = shared
                        .messages
                        .send(RuntimeMessage::TooLarge { request_id });
                    return Ok(error_reply(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        "RequestEntityTooLarge",
                        "response exceeds the 6291556 byte limit",
                    ));
                }
            };
            // Streaming runtimes report a failure mid-response in trailers: its type, and the
            // error's JSON in base64 (aws-lambda-go), which replaces the partial response.
            let trailer = |name: &str| {
                collected
                    .trailers()
                    .and_then(|t| t.get(name))
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string)
            };
            let trailer_type = trailer("lambda-runtime-function-error-type");
            let trailer_body = trailer("lambda-runtime-function-error-body").and_then(|b64| {
                base64::engine::general_purpose::STANDARD
                    .decode(b64.trim())
                    .ok()
            });
            let body = match trailer_body {
                Some(error) if trailer_type.is_some() => Bytes::from(error),
                _ => collected.to_bytes(),
            };
            // The invocation's session writes are in the log before its answer is passed on.
            let txn = shared.session.locked().take();
            if let Some((_, txn)) = txn {
                if let Err(error) = txn.commit() {
                    let _ = shared.messages.send(RuntimeMessage::Error {
                        request_id,
                        body: error.answer().1,
                    });
                    return Ok(reply(StatusCode::ACCEPTED, r#"{"status":"OK"}"#));
                }
            }
            let message = if is_error || trailer_type.is_some() {
                let error_type = trailer_type.or(header_type);
                RuntimeMessage::Error {
                    request_id,
                    body: error_body(body, error_type),
                }
            } else {
                RuntimeMessage::Response { request_id, body }
            };
            let _ = shared.messages.send(message);
            reply(StatusCode::ACCEPTED, r#"{"status":"OK"}"#)
        }
        (method, ["invocation", id, "session", rest @ ..]) => {
            let method = method.clone();
            let (id, rest) = (id.to_string(), rest.join("/"));
            session_call(&shared, &id, method, &rest, req).await
        }
        (&Method::POST, ["init", "error"]) => {
            let error_type = header(&req, "lambda-runtime-function-error-type");
            let body = req
                .into_body()
                .collect()
                .await
                .map(|c| c.to_bytes())
                .unwrap_or_default();
            let _ = shared
                .messages
                .send(RuntimeMessage::InitError(error_body(body, error_type)));
            reply(StatusCode::ACCEPTED, r#"{"status":"OK"}"#)
        }
        _ => error_reply(
            StatusCode::NOT_FOUND,
            "InvalidRequest",
            "unknown Runtime API call",
        ),
    })
}

fn header(req: &Request<Incoming>, name: &str) -> Option<String> {
    req.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// Runtimes may post any body as an error; kiln always answers callers with Lambda's shape.
fn error_body(body: Bytes, error_type: Option<String>) -> Bytes {
    if let Ok(serde_json::Value::Object(mut map)) =
        serde_json::from_slice::<serde_json::Value>(&body)
    {
        if !map.contains_key("errorType") {
            map.insert(
                "errorType".into(),
                error_type.unwrap_or_else(|| "Unhandled".into()).into(),
            );
        }
        return Bytes::from(serde_json::Value::Object(map).to_string());
    }
    let json = serde_json::json!({
        "errorType": error_type.unwrap_or_else(|| "Unhandled".into()),
        "errorMessage": String::from_utf8_lossy(&body),
    });
    Bytes::from(json.to_string())
}

async fn next(shared: &Shared) -> Response<Full<Bytes>> {
    if !shared
        .ready_sent
        .swap(true, std::sync::atomic::Ordering::SeqCst)
    {
        let _ = shared.messages.send(RuntimeMessage::Ready);
    }
    // One runtime process polls at a time; a second concurrent poller simply waits its turn.
    let event = shared.events.lock().await.recv().await;
    let Some(event) = event else {
        return error_reply(
            StatusCode::GONE,
            "Shutdown",
            "the instance is shutting down",
        );
    };
    *shared.awaiting.locked() = Some(event.request_id.clone());
    *shared.session.locked() = event.session.map(|(log, limits)| {
        let txn = Txn::new(log, limits).discarding(event.shadow);
        (event.request_id.clone(), txn)
    });
    let mut builder = Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/json")
        .header("lambda-runtime-aws-request-id", &event.request_id)
        .header("lambda-runtime-deadline-ms", event.deadline_ms.to_string())
        .header("lambda-runtime-invoked-function-arn", &event.function_arn)
        .header("lambda-runtime-trace-id", &event.trace_id);
    if let Some(context) = &event.client_context {
        builder = builder.header("lambda-runtime-client-context", context);
    }
    builder.body(Full::new(event.payload)).unwrap_or_else(|_| {
        error_reply(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InvalidEvent",
            "event headers are not valid HTTP",
        )
    })
}

/// The session state of the invocation in flight (docs/sessions.md, "Runtime API"):
/// `GET keys`, `GET|PUT|DELETE keys/KEY` and `POST batch`.
async fn session_call(
    shared: &Shared,
    id: &str,
    method: Method,
    path: &str,
    req: Request<Incoming>,
) -> Response<Full<Bytes>> {
    let max = shared
        .session
        .locked()
        .as_ref()
        .filter(|(current, _)| current == id)
        .map(|(_, txn)| txn.max_request_bytes());
    let Some(max) = max else {
        return error_reply(
            StatusCode::BAD_REQUEST,
            "InvalidRequestID",
            "no invocation with this request id is in flight with a session",
        );
    };
    let content_type = header(&req, "content-type").unwrap_or_default();
    let body = match Limited::new(req.into_body(), max).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => {
            return error_reply(
                StatusCode::PAYLOAD_TOO_LARGE,
                "SessionLimitExceeded",
                "the request is larger than the session's limits allow",
            )
        }
    };
    let mut guard = shared.session.locked();
    let Some((_, txn)) = guard.as_mut().filter(|(current, _)| current == id) else {
        return error_reply(
            StatusCode::BAD_REQUEST,
            "InvalidRequestID",
            "the invocation has been answered",
        );
    };
    let key = path.strip_prefix("keys/").map(|k| {
        percent_encoding::percent_decode_str(k)
            .decode_utf8_lossy()
            .into_owned()
    });
    let applied = match (&method, path, key) {
        (&Method::GET, "keys", _) => {
            return reply(
                StatusCode::OK,
                &serde_json::to_string(&txn.keys()).expect("strings serialize"),
            )
        }
        (&Method::GET, _, Some(key)) => {
            return match txn.get(&key) {
                Some((kind, value)) => Response::builder()
                    .status(StatusCode::OK)
                    .header(
                        "content-type",
                        match kind {
                            Kind::Json => "application/json",
                            Kind::Bytes => "application/octet-stream",
                        },
                    )
                    .body(Full::new(value))
                    .expect("static response parts are valid"),
                None => error_reply(
                    StatusCode::NOT_FOUND,
                    "KeyNotFound",
                    "the session has no such key",
                ),
            };
        }
        (&Method::PUT, _, Some(key)) => {
            let kind = if content_type.starts_with("application/json") {
                if serde_json::from_slice::<serde_json::Value>(&body).is_err() {
                    return error_reply(
                        StatusCode::BAD_REQUEST,
                        "InvalidJson",
                        "a value sent as application/json must be JSON",
                    );
                }
                Kind::Json
            } else {
                Kind::Bytes
            };
            txn.apply(vec![Entry::Put {
                key,
                kind,
                value: body,
            }])
        }
        (&Method::DELETE, _, Some(key)) => txn.apply(vec![Entry::Delete { key }]),
        (&Method::POST, "batch", None) => match batch_entries(&body) {
            Ok(entries) => txn.apply(entries),
            Err(message) => {
                return error_reply(StatusCode::BAD_REQUEST, "InvalidBatch", &message);
            }
        },
        _ => {
            return error_reply(
                StatusCode::NOT_FOUND,
                "InvalidRequest",
                "unknown session call",
            )
        }
    };
    match applied {
        Ok(()) => Response::builder()
            .status(StatusCode::NO_CONTENT)
            .body(Full::new(Bytes::new()))
            .expect("static response parts are valid"),
        Err(error @ (CommitError::ValueTooLarge { .. } | CommitError::SessionTooLarge { .. })) => {
            error_reply(
                StatusCode::PAYLOAD_TOO_LARGE,
                "SessionLimitExceeded",
                &error.to_string(),
            )
        }
        Err(error) => error_reply(StatusCode::BAD_REQUEST, "InvalidKey", &error.to_string()),
    }
}

/// A batch: `[{"op":"put","key":K,"value":JSON}, {"op":"put","key":K,"bytes":BASE64},
/// {"op":"delete","key":K}]`.
fn batch_entries(body: &[u8]) -> Result<Vec<Entry>, String> {
    use base64::Engine;
    let ops: Vec<serde_json::Value> =
        serde_json::from_slice(body).map_err(|e| format!("a batch is a JSON array of ops: {e}"))?;
    ops.into_iter()
        .map(|op| {
            let key = op["key"]
                .as_str()
                .ok_or("every op needs a string `key`")?
                .to_string();
            match (op["op"].as_str(), op.get("value"), op["bytes"].as_str()) {
                (Some("put"), Some(value), None) => Ok(Entry::Put {
                    key,
                    kind: Kind::Json,
                    value: Bytes::from(value.to_string()),
                }),
                (Some("put"), None, Some(bytes)) => Ok(Entry::Put {
                    key,
                    kind: Kind::Bytes,
                    value: base64::engine::general_purpose::STANDARD
                        .decode(bytes)
                        .map_err(|e| format!("`bytes` of '{}' is not base64: {e}", op["key"]))?
                        .into(),
                }),
                (Some("delete"), None, None) => Ok(Entry::Delete { key }),
                _ => Err(format!(
                    "an op is put with `value` or `bytes`, or delete: {op}"
                )),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_owners_are_found_in_the_kernel_table() {
        // Two sides of one loopback connection, as /proc/net/tcp lists them (little-endian host).
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:A1B2 0100007F:1F91 01 00000000:00000000 00:00000000 00000000 100007        0 1 1 0000000000000000 20 4 30 10 -1
   1: 0100007F:1F91 0100007F:A1B2 01 00000000:00000000 00:00000000 00000000     0        0 2 1 0000000000000000 20 4 30 10 -1
";
        if cfg!(target_endian = "little") {
            let client: SocketAddr = "127.0.0.1:41394".parse().unwrap();
            let server: SocketAddr = "127.0.0.1:8081".parse().unwrap();
            assert_eq!(find_owner(table, client, server), Some(100_007));
            assert_eq!(find_owner(table, server, client), Some(0));
            assert_eq!(
                find_owner(table, client, "127.0.0.1:1".parse().unwrap()),
                None
            );
        }
    }

    #[test]
    fn a_real_connection_is_owned_by_this_process() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (_server, peer) = listener.accept().unwrap();
        assert_eq!(peer, client.local_addr().unwrap());
        // The test process's own real uid, read back from /proc.
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let uid: u32 = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap();
        assert_eq!(tcp_owner(peer, listener.local_addr().unwrap()), Some(uid));
    }

    #[test]
    fn error_bodies_always_have_lambda_shape() {
        let body = error_body(Bytes::from_static(b"plain text"), Some("Custom".into()));
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["errorType"], "Custom");
        assert_eq!(v["errorMessage"], "plain text");
        let body = error_body(Bytes::from_static(br#"{"errorMessage":"x"}"#), None);
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["errorType"], "Unhandled");
    }
}
