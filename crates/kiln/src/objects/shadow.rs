//! Shadow runs' writes: acknowledged and dropped.
//!
//! A shadow run (burst offloading runs a copy of a real request for its answer only; warm-up
//! invocations are shadows too) must leave no trace in the store. Its object writes are
//! answered as S3 answers them and never reach a backend: PutObject, CopyObject, DeleteObject
//! and DeleteObjects. Any other write (multipart uploads, bucket changes, tagging, ACLs, form
//! uploads) is refused with `AccessDenied` naming the reason, which fails the shadow run. Its
//! reads see the store as it is, without its own writes.

use bytes::Bytes;
use http::{HeaderValue, Method, Response, StatusCode};
use http_body_util::BodyExt;
use sha2::{Digest, Sha256};

use crate::function::Shadow;

/// What a request of a shadow run gets instead of reaching the store, if anything: `None` for
/// a read, which is served as usual.
pub(super) enum Contained {
    /// Answer with this once the request's body has been read.
    Answer(Kind),
    /// Answer at once.
    Refuse(Response<Bytes>),
}

pub(super) enum Kind {
    Put,
    Copy,
    Delete,
    DeleteMany,
}

/// The query keys a plain object operation may carry (SDKs add `x-id`).
fn plain_query(query: Option<&str>) -> bool {
    query.is_none_or(|q| {
        q.split('&')
            .filter(|p| !p.is_empty())
            .all(|p| p.split('=').next() == Some("x-id"))
    })
}

/// How the store treats a request of an invocation tagged `shadow`.
pub(super) fn contain<B>(shadow: Shadow, req: &http::Request<B>) -> Option<Contained> {
    let method = req.method();
    if shadow == Shadow::No || *method == Method::GET || *method == Method::HEAD {
        return None;
    }
    if shadow == Shadow::Unknown {
        return Some(Contained::Refuse(error(
            StatusCode::SERVICE_UNAVAILABLE,
            "SlowDown",
            "a shadow run and a real invocation share this connection's sandbox; retry",
        )));
    }
    let path = req.uri().path().trim_start_matches('/');
    let has_key = path.split_once('/').is_some_and(|(_, key)| !key.is_empty());
    let query = req.uri().query();
    let kind = match *method {
        Method::PUT if has_key && plain_query(query) => {
            if req.headers().contains_key("x-amz-copy-source") {
                Kind::Copy
            } else {
                Kind::Put
            }
        }
        Method::DELETE if has_key && plain_query(query) => Kind::Delete,
        Method::POST
            if !has_key
                && query.is_some_and(|q| q.split('&').any(|p| p == "delete" || p == "delete=")) =>
        {
            Kind::DeleteMany
        }
        _ => {
            return Some(Contained::Refuse(error(
                StatusCode::FORBIDDEN,
                "AccessDenied",
                "a shadow run's writes have no effect, and this one cannot be acknowledged \
                 without it (only PutObject, CopyObject, DeleteObject and DeleteObjects can)",
            )))
        }
    };
    Some(Contained::Answer(kind))
}

/// The answer to a contained write whose body (read whole, then dropped) was `body`.
pub(super) fn answer(kind: Kind, body: &[u8]) -> Response<Bytes> {
    let digest = Sha256::digest(body);
    let etag = format!("\"{}\"", hex::encode(&digest[..16]));
    let mut response = match kind {
        Kind::Put => Response::new(Bytes::new()),
        Kind::Copy => xml(format!(
            "<CopyObjectResult><LastModified>{}</LastModified><ETag>{}</ETag></CopyObjectResult>",
            chrono::Utc::now().format("%Y-%m-%dT%H:%M:%S%.3fZ"),
            etag.replace('"', "&quot;")
        )),
        Kind::Delete => {
            let mut r = Response::new(Bytes::new());
            *r.status_mut() = StatusCode::NO_CONTENT;
            r
        }
        Kind::DeleteMany => {
            let text = String::from_utf8_lossy(body);
            let mut out = String::from("<DeleteResult>");
            let mut rest = text.as_ref();
            while let Some(start) = rest.find("<Key>") {
                let after = &rest[start + 5..];
                let Some(end) = after.find("</Key>") else {
                    break;
                };
                // The key as the request escaped it.
                out.push_str("<Deleted><Key>");
                out.push_str(&after[..end]);
                out.push_str("</Key></Deleted>");
                rest = &after[end + 6..];
            }
            out.push_str("</DeleteResult>");
            xml(out)
        }
    };
    if let Ok(v) = HeaderValue::from_str(&etag) {
        response.headers_mut().insert("etag", v);
    }
    response
}

/// Reads a body to its end (so a client is not cut off mid-upload), keeping at most `keep`
/// bytes of it.
pub(super) async fn read_body<B>(body: B, keep: usize) -> Vec<u8>
where
    B: hyper::body::Body + Unpin,
{
    let mut body = body;
    let mut kept = Vec::new();
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else { break };
        if let Ok(data) = frame.into_data() {
            let room = keep.saturating_sub(kept.len());
            kept.extend_from_slice(
                &bytes::Buf::chunk(&data)[..room.min(bytes::Buf::remaining(&data))],
            );
        }
    }
    kept
}

fn xml(body: String) -> Response<Bytes> {
    let mut r = Response::new(Bytes::from(format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n{body}"
    )));
    r.headers_mut()
        .insert("content-type", HeaderValue::from_static("application/xml"));
    r
}

fn error(status: StatusCode, code: &str, message: &str) -> Response<Bytes> {
    let mut r = xml(format!(
        "<Error><Code>{code}</Code><Message>{message}</Message></Error>"
    ));
    *r.status_mut() = status;
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(method: &str, uri: &str) -> http::Request<()> {
        http::Request::builder()
            .method(method)
            .uri(uri)
            .body(())
            .unwrap()
    }

    #[test]
    fn a_shadows_plain_writes_are_answered_and_the_rest_refused() {
        let yes = Shadow::Yes;
        assert!(contain(Shadow::No, &req("PUT", "/b/k")).is_none());
        assert!(contain(yes, &req("GET", "/b/k")).is_none());
        assert!(matches!(
            contain(yes, &req("PUT", "/b/k")),
            Some(Contained::Answer(Kind::Put))
        ));
        assert!(matches!(
            contain(yes, &req("PUT", "/b/k?x-id=PutObject")),
            Some(Contained::Answer(Kind::Put))
        ));
        assert!(matches!(
            contain(yes, &req("DELETE", "/b/a/b")),
            Some(Contained::Answer(Kind::Delete))
        ));
        assert!(matches!(
            contain(yes, &req("POST", "/b?delete")),
            Some(Contained::Answer(Kind::DeleteMany))
        ));
        for (m, u) in [
            ("PUT", "/b"),
            ("PUT", "/b/k?partNumber=1&uploadId=x"),
            ("POST", "/b/k?uploads"),
            ("PUT", "/b/k?tagging"),
            ("POST", "/b"),
            ("DELETE", "/b"),
        ] {
            assert!(
                matches!(contain(yes, &req(m, u)), Some(Contained::Refuse(r)) if r.status() == 403),
                "{m} {u}"
            );
        }
        assert!(matches!(
            contain(Shadow::Unknown, &req("PUT", "/b/k")),
            Some(Contained::Refuse(r)) if r.status() == 503
        ));
    }

    #[test]
    fn delete_many_lists_every_key_as_deleted() {
        let r = answer(
            Kind::DeleteMany,
            b"<Delete><Object><Key>a&amp;b</Key></Object><Object><Key>c</Key></Object></Delete>",
        );
        let body = r.into_body();
        let text = String::from_utf8(body.to_vec()).unwrap();
        assert!(
            text.contains("<Deleted><Key>a&amp;b</Key></Deleted><Deleted><Key>c</Key></Deleted>")
        );
    }
}
