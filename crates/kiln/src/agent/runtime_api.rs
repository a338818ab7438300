//! The AWS Lambda Runtime API (2018-06-01), served to one `provided` instance.
//!
//! Each instance gets its own server on a listener inside the instance's network namespace, so
//! a function can only ever reach its own invocations. The instance's invoker hands events in
//! through a channel and gets the runtime's answers back through another.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use tokio::sync::{mpsc, Mutex};

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
    pub fn serve(listener: std::net::TcpListener) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let (events_tx, events_rx) = mpsc::channel(1);
        let (messages_tx, messages_rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            events: Mutex::new(events_rx),
            messages: messages_tx,
            ready_sent: false.into(),
        });
        let server = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            while let Ok((stream, _)) = listener.accept().await {
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
            // Streaming runtimes report a failure mid-response in trailers.
            let trailer_type = collected
                .trailers()
                .and_then(|t| t.get("lambda-runtime-function-error-type"))
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            let body = collected.to_bytes();
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

#[cfg(test)]
mod tests {
    use super::*;

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
