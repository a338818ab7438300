//! The gateway's side towards the monolith: its upstreams with their load and health, and the
//! request sent to one (hop-by-hop headers dropped, `Host` kept, `X-Forwarded-*` added).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode, Uri};
use axum::response::Response;

use crate::http_event::plain;
use crate::sync::LockExt;

/// How long an upstream counts as failing after a connection error, reset, timeout or 502–504.
const FAILING_FOR: Duration = Duration::from_secs(2);

pub(super) struct Upstream {
    pub(super) url: String,
    pub(super) authority: String,
    pub(super) inflight: AtomicU32,
    pub(super) failing_until: Mutex<Option<Instant>>,
    pub(super) served: AtomicU64,
    pub(super) errors: AtomicU64,
}

impl Upstream {
    pub(super) fn failing(&self, now: Instant) -> bool {
        self.failing_until.locked().is_some_and(|t| now < t)
    }

    pub(super) fn failed(&self) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        *self.failing_until.locked() = Some(Instant::now() + FAILING_FOR);
    }
}

/// Counts a request in flight at an upstream until dropped.
pub(super) struct InFlight {
    upstream: Arc<Upstream>,
    /// What the upstream had in flight before this request: counted and read in one step,
    /// so that requests arriving together cannot all pass a limit meant for one.
    pub(super) before: u32,
}

impl InFlight {
    pub(super) fn new(upstream: Arc<Upstream>) -> Self {
        let before = upstream.inflight.fetch_add(1, Ordering::Relaxed);
        Self { upstream, before }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.upstream.inflight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The monolith could not be reached: the request was not sent, so it may go elsewhere.
pub(super) struct Unreached(pub(super) String);

const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
];

/// Drops hop-by-hop headers (RFC 9110 §7.6.1): the fixed ones and those `Connection` names;
/// `Upgrade` too unless the connection is being upgraded.
pub(super) fn strip_hop_by_hop(headers: &mut HeaderMap, upgrading: bool) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|t| HeaderName::try_from(t.trim()).ok())
        .filter(|n| !(upgrading && n == header::UPGRADE))
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in HOP_BY_HOP {
        if !(upgrading && name == "connection") {
            headers.remove(name);
        }
    }
    if !upgrading {
        headers.remove(header::UPGRADE);
    }
}

pub(super) fn is_upgrade(headers: &HeaderMap) -> bool {
    headers.contains_key(header::UPGRADE)
        && headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|v| {
                v.split(',')
                    .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
            })
}

/// The request to send to `upstream`: its own target, hop-by-hop headers dropped, Host kept,
/// `X-Forwarded-For` and `X-Forwarded-Proto` added.
pub(super) fn upstream_request(
    head: &http::request::Parts,
    upstream: &Upstream,
    peer: SocketAddr,
    body: Body,
    upgrading: bool,
) -> Result<http::Request<Body>, BadTarget> {
    let target = head.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    let uri: Uri = format!("http://{}{target}", upstream.authority)
        .parse()
        .map_err(|_| BadTarget)?;
    let mut headers = head.headers.clone();
    strip_hop_by_hop(&mut headers, upgrading);
    let forwarded_for = match headers.get("x-forwarded-for").and_then(|v| v.to_str().ok()) {
        Some(before) => format!("{before}, {}", peer.ip()),
        None => peer.ip().to_string(),
    };
    if let Ok(v) = HeaderValue::from_str(&forwarded_for) {
        headers.insert("x-forwarded-for", v);
    }
    if !headers.contains_key("x-forwarded-proto") {
        headers.insert("x-forwarded-proto", HeaderValue::from_static("http"));
    }
    if !headers.contains_key(header::HOST) {
        if let Some(host) = head.uri.authority() {
            if let Ok(v) = HeaderValue::from_str(host.as_str()) {
                headers.insert(header::HOST, v);
            }
        }
    }
    let mut request = http::Request::new(body);
    *request.method_mut() = head.method.clone();
    *request.uri_mut() = uri;
    *request.headers_mut() = headers;
    Ok(request)
}

/// A request target that makes no upstream URL.
pub(super) struct BadTarget;

impl BadTarget {
    pub(super) fn response() -> Response {
        plain(StatusCode::BAD_REQUEST, "the request target is invalid")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_are_dropped() {
        let mut h = HeaderMap::new();
        h.insert(
            "connection",
            HeaderValue::from_static("keep-alive, x-private"),
        );
        h.insert("x-private", HeaderValue::from_static("1"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert("transfer-encoding", HeaderValue::from_static("chunked"));
        h.insert("upgrade", HeaderValue::from_static("websocket"));
        h.insert("x-kept", HeaderValue::from_static("1"));
        let mut stripped = h.clone();
        strip_hop_by_hop(&mut stripped, false);
        assert_eq!(stripped.len(), 1);
        assert!(stripped.contains_key("x-kept"));
        h.insert("connection", HeaderValue::from_static("Upgrade"));
        assert!(is_upgrade(&h));
        strip_hop_by_hop(&mut h, true);
        assert!(h.contains_key("upgrade") && h.contains_key("connection"));
    }
}
