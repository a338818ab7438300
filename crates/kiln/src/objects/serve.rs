//! Serving the store over HTTP on any listener: kiln's own (`--s3-listen`) and, for the sandbox
//! side, a listener bound inside a function's network namespace.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http_body_util::BodyExt;
use hyper::body::{Body as _, Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::keys::Scope;
use super::ObjectStore;
use crate::sync::LockExt;

/// A client that sends no complete request head in this long is disconnected.
const HEADER_TIMEOUT: Duration = Duration::from_secs(30);
/// How much of a refused request's body is read and discarded, and for how long, so that its
/// error response reaches the client (see [`DrainOnDrop`]).
const DRAIN_BYTES: u64 = 64 * 1024 * 1024;
const DRAIN_TIME: Duration = Duration::from_secs(30);

/// A request body that is read to its end in the background if the handler drops it unread, as
/// it does when it refuses a request early (EntityTooLarge, NoSuchBucket, …). Closing a socket
/// with unread data makes the kernel answer with RST, which can destroy the error response before
/// the client has read it. Not when the client waits for `100 Continue` and none was sent (it
/// will not send the body), nor for bodies too large to drain: then the connection must close,
/// and `abandoned` tells the server to say so in the response (`Connection: close`), or the
/// client would send its next request on a connection that is going away.
struct DrainOnDrop {
    inner: Option<Incoming>,
    received: u64,
    expects_continue: bool,
    polled: bool,
    abandoned: Arc<AtomicBool>,
}

impl hyper::body::Body for DrainOnDrop {
    type Data = bytes::Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        self.polled = true;
        let Some(inner) = self.inner.as_mut() else {
            return Poll::Ready(None);
        };
        let polled = Pin::new(inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled {
            let len = frame.data_ref().map_or(0, |d| d.len() as u64);
            self.received += len;
            traffic().bytes_in.inc_by(len);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(|b| b.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), |b| b.size_hint())
    }
}

impl Drop for DrainOnDrop {
    fn drop(&mut self) {
        let Some(mut body) = self.inner.take() else {
            return;
        };
        if body.is_end_stream() {
            return;
        }
        let too_large = body.size_hint().lower() > DRAIN_BYTES.saturating_sub(self.received);
        let runtime = tokio::runtime::Handle::try_current();
        if (self.expects_continue && !self.polled) || too_large || runtime.is_err() {
            self.abandoned.store(true, Ordering::SeqCst);
            return;
        }
        let Ok(runtime) = runtime else {
            return;
        };
        let mut budget = DRAIN_BYTES.saturating_sub(self.received);
        runtime.spawn(async move {
            let drain = async {
                while let Some(Ok(frame)) = body.frame().await {
                    let len = frame.data_ref().map_or(0, |d| d.len() as u64);
                    if len > budget {
                        break;
                    }
                    budget -= len;
                }
            };
            let _ = tokio::time::timeout(DRAIN_TIME, drain).await;
        });
    }
}

/// Completes an error response as S3 sends them: S3's message for its code when kiln answered
/// the code alone (clients print it), and the request's ids.
fn complete_error(response: &mut http::Response<s3s::Body>, request_id: &str) {
    let Some(xml) = response.body().bytes() else {
        return;
    };
    if let Some(filled) = super::shared::completed_error(&xml, request_id, host_id()) {
        replace_body(response, filled);
    }
}

/// A browser upload's redirect (`success_action_redirect`) names the ETag as S3 names it, with
/// its quotes (s3s leaves them out).
fn quote_redirect_etag(response: &mut http::Response<s3s::Body>) {
    let location = response
        .headers()
        .get(http::header::LOCATION)
        .and_then(|v| v.to_str().ok());
    if let Some(quoted) = location.and_then(super::shared::with_quoted_etag) {
        if let Ok(value) = http::HeaderValue::from_str(&quoted) {
            response.headers_mut().insert(http::header::LOCATION, value);
        }
    }
}

/// A browser upload that fails its policy's conditions is refused as S3 refuses it (403).
fn refuse_as_policy_failure(response: &mut http::Response<s3s::Body>) {
    let Some(xml) = response.body().bytes() else {
        return;
    };
    if let Some(refusal) = super::shared::policy_condition_refusal(&xml) {
        replace_body(response, refusal);
        *response.status_mut() = http::StatusCode::FORBIDDEN;
    }
}

/// A request's number, whose 16 upper-case hex digits are its id as S3's look: unique within
/// this process, and not guessable across processes.
/// The object store's traffic in this process, on every listener (the node's and the
/// sandboxes'): `kiln_object_store_*` in `/metrics`, and the console's overview.
#[derive(Debug, Clone, Default)]
pub struct Traffic {
    pub requests: prometheus_client::metrics::counter::Counter,
    /// Requests answered with a status of 400 or more.
    pub errors: prometheus_client::metrics::counter::Counter,
    /// Request bodies' bytes, as read.
    pub bytes_in: prometheus_client::metrics::counter::Counter,
    /// Answers' bytes, as their `Content-Length` says.
    pub bytes_out: prometheus_client::metrics::counter::Counter,
}

impl Traffic {
    pub fn register(&self, registry: &mut prometheus_client::registry::Registry) {
        let counters = [
            ("object_store_requests", "Requests the object store answered (every listener: the node's and the sandboxes')", &self.requests),
            ("object_store_errors", "Object store requests answered with a status of 400 or more", &self.errors),
            ("object_store_received_bytes", "Request bodies' bytes the object store read", &self.bytes_in),
            ("object_store_sent_bytes", "Bytes of the object store's answers, as their Content-Length says", &self.bytes_out),
        ];
        for (name, help, counter) in counters {
            registry.register(name, help, counter.clone());
        }
    }
}

/// Counts an answer's bytes, and whether it is an error, in the process's [`Traffic`].
fn count_answer<B>(response: &http::Response<B>) {
    let traffic = traffic();
    if response.status().as_u16() >= 400 {
        traffic.errors.inc();
    }
    let length = response
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(length) = length {
        traffic.bytes_out.inc_by(length);
    }
}

/// The process's [`Traffic`].
pub fn traffic() -> &'static Traffic {
    static TRAFFIC: std::sync::OnceLock<Traffic> = std::sync::OnceLock::new();
    TRAFFIC.get_or_init(Traffic::default)
}

fn request_number() -> u64 {
    static NEXT: std::sync::OnceLock<std::sync::atomic::AtomicU64> = std::sync::OnceLock::new();
    let next = NEXT.get_or_init(|| std::sync::atomic::AtomicU64::new(rand::random::<u64>() >> 1));
    next.fetch_add(1, Ordering::Relaxed)
}

/// `x-amz-id-2`, S3's extended request id: which server answered. One per process.
pub(crate) fn host_id() -> &'static str {
    static HOST_ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HOST_ID.get_or_init(|| {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(rand::random::<[u8; 24]>())
    })
}

/// Every response carries its request's ids, as S3's do (SDKs log them; error XML repeats them).
fn add_request_ids(response: &mut http::Response<s3s::Body>, request_id: &str) {
    let headers = response.headers_mut();
    if let Ok(value) = http::HeaderValue::from_str(request_id) {
        headers.insert("x-amz-request-id", value);
    }
    if let Ok(value) = http::HeaderValue::from_str(host_id()) {
        headers.insert("x-amz-id-2", value);
    }
}

/// Whether a request is GetObjectAttributes (`GET /bucket/key?attributes`).
fn asks_attributes<B>(req: &hyper::Request<B>) -> bool {
    req.method() == http::Method::GET
        && req.uri().query().is_some_and(|q| {
            q.split('&')
                .any(|p| p == "attributes" || p.starts_with("attributes="))
        })
}

/// Replaces a response's whole body with `bytes`.
fn replace_body(response: &mut http::Response<s3s::Body>, bytes: Vec<u8>) {
    if response
        .headers()
        .contains_key(http::header::CONTENT_LENGTH)
    {
        response
            .headers_mut()
            .insert(http::header::CONTENT_LENGTH, bytes.len().into());
    }
    *response.body_mut() = s3s::Body::from(bytes::Bytes::from(bytes));
}

/// GetObjectAttributes' ETag without the quotes s3s puts around every ETag in XML, as S3
/// answers it.
fn unquote_attributes_etag(response: &mut http::Response<s3s::Body>) {
    let Some(xml) = response.body().bytes() else {
        return;
    };
    if let Some(bare) = super::shared::bare_etag(&xml) {
        replace_body(response, bare);
    }
}

/// What a request asks of a bucket's CORS rules: its origin, the method a preflight asks for
/// (`Access-Control-Request-Method`), the headers it asks for, and the bucket.
struct CorsAsk {
    origin: Option<String>,
    method: String,
    asked_method: Option<String>,
    headers: Vec<String>,
    bucket: Option<String>,
}

impl CorsAsk {
    fn of<B>(req: &hyper::Request<B>, lookup: &super::CorsLookup) -> Self {
        let header = |name: &str| {
            req.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        Self {
            origin: header("origin"),
            method: req.method().as_str().to_string(),
            asked_method: header("access-control-request-method"),
            headers: super::cors::requested_headers(
                header("access-control-request-headers").as_deref(),
            ),
            bucket: lookup.bucket_of(req),
        }
    }
}

/// An S3 error answered by kiln itself, serialized by s3s (the caller adds the request's ids).
fn error_response(
    status: http::StatusCode,
    code: &str,
    message: &str,
) -> http::Response<s3s::Body> {
    let mut error = s3s::S3Error::with_message(
        s3s::S3ErrorCode::from_bytes(code.as_bytes()).unwrap_or(s3s::S3ErrorCode::InternalError),
        message.to_string(),
    );
    error.set_status_code(status);
    error.to_http_response().unwrap_or_else(|_| {
        let mut response = http::Response::new(s3s::Body::empty());
        *response.status_mut() = status;
        response
    })
}

fn add_headers(response: &mut http::Response<s3s::Body>, headers: Vec<(&'static str, String)>) {
    for (name, value) in headers {
        if let Ok(value) = http::HeaderValue::from_str(&value) {
            response.headers_mut().insert(name, value);
        }
    }
}

/// A preflight (`OPTIONS`), answered from the bucket's rules as S3 answers it: 200 with the
/// `Access-Control-*` headers of the first rule that allows the origin, method and headers,
/// 403 when none does (or the bucket has no rules), 400 without an origin or a method.
async fn preflight(ask: &CorsAsk, lookup: &super::CorsLookup) -> http::Response<s3s::Body> {
    let bad = |message| error_response(http::StatusCode::BAD_REQUEST, "BadRequest", message);
    let Some(origin) = ask.origin.as_deref() else {
        return bad("Insufficient information. Origin request header needed.");
    };
    let Some(method) = ask.asked_method.as_deref() else {
        return bad("Invalid Access-Control-Request-Method: null");
    };
    let Some(bucket) = ask.bucket.as_deref() else {
        return bad("A preflight request names a bucket.");
    };
    let rules = match lookup.rules(bucket).await {
        Ok(rules) => rules,
        Err(e) => {
            let status = e.status_code().unwrap_or_else(|| {
                if *e.code() == s3s::S3ErrorCode::NoSuchBucket {
                    http::StatusCode::NOT_FOUND
                } else {
                    http::StatusCode::INTERNAL_SERVER_ERROR
                }
            });
            return error_response(status, e.code().as_str(), e.message().unwrap_or_default());
        }
    };
    let asked = super::cors::Asked {
        origin,
        method,
        headers: &ask.headers,
    };
    match super::cors::find(&rules, &asked) {
        Some(rule) => {
            let mut response = http::Response::new(s3s::Body::empty());
            add_headers(
                &mut response,
                super::cors::response_headers(rule, &asked, true),
            );
            response
        }
        None => error_response(
            http::StatusCode::FORBIDDEN,
            "AccessForbidden",
            "CORSResponse: This CORS request is not allowed. This is usually because the evalution of Origin, request method / Access-Control-Request-Method or Access-Control-Request-Headers are not whitelisted by the resource's CORS spec.",
        ),
    }
}

/// The `Access-Control-*` headers on an actual request from an origin a rule allows (for
/// that rule's method), its errors included, as S3 adds them.
async fn add_cors_headers(
    response: &mut http::Response<s3s::Body>,
    ask: &CorsAsk,
    lookup: &super::CorsLookup,
) {
    let (Some(origin), Some(bucket)) = (ask.origin.as_deref(), ask.bucket.as_deref()) else {
        return;
    };
    let Ok(rules) = lookup.rules(bucket).await else {
        return;
    };
    let asked = super::cors::Asked {
        origin,
        method: ask.asked_method.as_deref().unwrap_or(&ask.method),
        headers: &[],
    };
    if let Some(rule) = super::cors::find(&rules, &asked) {
        add_headers(response, super::cors::response_headers(rule, &asked, false));
    }
}

/// A running S3 endpoint. Dropping it stops accepting connections; requests in flight finish.
pub struct ServeHandle {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
    local_addr: SocketAddr,
}

impl ServeHandle {
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops accepting and gives requests in flight up to `grace` to finish.
    pub async fn shutdown(mut self, grace: Duration) {
        let _ = self.stop.send(true);
        if tokio::time::timeout(grace, &mut self.task).await.is_err() {
            self.task.abort();
        }
    }
}

impl Drop for ServeHandle {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

/// Serves `store` on an already-bound listener, accepting the keys `scope` allows. Must be
/// called from within a tokio runtime.
pub fn serve_on(
    listener: std::net::TcpListener,
    store: &ObjectStore,
    scope: Scope,
) -> std::io::Result<ServeHandle> {
    serve_tagged(listener, store, scope, None)
}

/// [`serve_on`] for one sandbox: its requests carry the tags of the invocation in flight that
/// sent them (from `slot`: its sequence stage, its admission) in their extensions, where the
/// object cache finds them.
pub(crate) fn serve_tagged(
    listener: std::net::TcpListener,
    store: &ObjectStore,
    scope: Scope,
    slot: Option<crate::function::InvocationSlot>,
) -> std::io::Result<ServeHandle> {
    listener.set_nonblocking(true)?;
    let local_addr = listener.local_addr()?;
    let listener = tokio::net::TcpListener::from_std(listener)?;
    let service = store.service().clone();
    let cors = store.cors();
    let (stop, mut stopped) = watch::channel(false);
    let task = tokio::spawn(async move {
        let graceful = GracefulShutdown::new();
        loop {
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                _ = stopped.changed() => break,
            };
            let (tcp, peer) = match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors, most likely: back off instead of spinning.
                    tracing::warn!("object store: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = tcp.set_nodelay(true);
            let service = service.clone();
            let cors = cors.clone();
            let scope = scope.clone();
            let slot = slot.clone();
            // The process that holds the connection's other end, once known.
            let owner = Arc::new(std::sync::Mutex::new(None::<u32>));
            let handler = service_fn(move |mut req: hyper::Request<Incoming>| {
                traffic().requests.inc();
                req.extensions_mut().insert(scope.clone());
                let request_number = request_number();
                // The ids a write's event notification repeats (reads need none).
                if !matches!(*req.method(), http::Method::GET | http::Method::HEAD) {
                    req.extensions_mut().insert(super::notify::Origin {
                        request_id: request_number,
                        source_ip: peer.ip(),
                    });
                }
                let mut contained = None;
                let mut ledger = None;
                if let Some(slot) = &slot {
                    let tags = slot.tags_for(|pids| {
                        let mut known = owner.locked();
                        if known.is_none() {
                            *known = super::peer::owner(peer, local_addr, pids);
                        }
                        *known
                    });
                    contained = super::shadow::contain(tags.shadow, &req);
                    ledger = tags.ledger.clone();
                    req.extensions_mut().insert(tags);
                }
                if let Some(contained) = contained {
                    return futures_util::future::Either::Left(async move {
                        let answer = match contained {
                            super::shadow::Contained::Refuse(r) => r,
                            super::shadow::Contained::Answer(kind) => {
                                let body = super::shadow::read_body(req.into_body(), 1 << 20).await;
                                super::shadow::answer(kind, &body)
                            }
                        };
                        Ok::<_, s3s::HttpError>(answer.map(s3s::Body::from))
                    });
                }
                let service = service.clone();
                let cors = cors.clone();
                let cors_ask = (req.headers().contains_key(http::header::ORIGIN)
                    || req.method() == http::Method::OPTIONS)
                    .then(|| CorsAsk::of(&req, &cors));
                let expects_continue = req
                    .headers()
                    .get(http::header::EXPECT)
                    .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
                let attributes = asks_attributes(&req);
                let writes = !matches!(*req.method(), http::Method::GET | http::Method::HEAD);
                let posts = req.method() == http::Method::POST;
                let abandoned = Arc::new(AtomicBool::new(false));
                let req = req.map(|body| {
                    s3s::Body::http_body_unsync(DrainOnDrop {
                        inner: Some(body),
                        received: 0,
                        expects_continue,
                        polled: false,
                        abandoned: abandoned.clone(),
                    })
                });
                futures_util::future::Either::Right(async move {
                    let request_id = format!("{request_number:016X}");
                    if req.method() == http::Method::OPTIONS {
                        let ask = cors_ask.unwrap_or_else(|| CorsAsk::of(&req, &cors));
                        let mut response = preflight(&ask, &cors).await;
                        add_request_ids(&mut response, &request_id);
                        if response.status().as_u16() >= 400 {
                            complete_error(&mut response, &request_id);
                        }
                        count_answer(&response);
                        return Ok::<_, s3s::HttpError>(response);
                    }
                    let req = if posts {
                        let bucket = cors.bucket_of(&req);
                        match super::post_form::prepare(req, bucket.as_deref()).await {
                            Ok(req) => req,
                            Err(e) => {
                                let mut response = e.to_http_response().unwrap_or_else(|_| {
                                    error_response(
                                        http::StatusCode::BAD_REQUEST,
                                        "InvalidRequest",
                                        "The form could not be read",
                                    )
                                });
                                add_request_ids(&mut response, &request_id);
                                complete_error(&mut response, &request_id);
                                count_answer(&response);
                                return Ok(response);
                            }
                        }
                    } else {
                        req
                    };
                    let mut response = service.call(req).await?;
                    // An acknowledged write is in its invocation's ledger (burst offloading's
                    // fallback serves a failed request again only if it wrote nothing).
                    if let Some(ledger) = ledger.filter(|_| writes) {
                        if response.status().as_u16() < 300 {
                            ledger.0.unchecked();
                        }
                    }
                    add_request_ids(&mut response, &request_id);
                    if posts && response.status() == http::StatusCode::BAD_REQUEST {
                        refuse_as_policy_failure(&mut response);
                    }
                    if posts && response.status() == http::StatusCode::SEE_OTHER {
                        quote_redirect_etag(&mut response);
                    }
                    if response.status().as_u16() >= 400 {
                        complete_error(&mut response, &request_id);
                    } else if attributes {
                        unquote_attributes_etag(&mut response);
                    }
                    if let Some(ask) = &cors_ask {
                        add_cors_headers(&mut response, ask, &cors).await;
                    }
                    if abandoned.load(Ordering::SeqCst) {
                        response.headers_mut().insert(
                            http::header::CONNECTION,
                            http::HeaderValue::from_static("close"),
                        );
                    }
                    count_answer(&response);
                    Ok::<_, s3s::HttpError>(response)
                })
            });
            let connection = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(tcp), handler);
            let connection = graceful.watch(connection);
            tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::debug!("object store connection: {e}");
                }
            });
        }
        drop(listener);
        graceful.shutdown().await;
    });
    Ok(ServeHandle {
        stop,
        task,
        local_addr,
    })
}
