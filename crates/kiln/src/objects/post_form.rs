//! A browser upload's form, read ahead of s3s (only the fields ahead of the file part, which
//! S3 requires to be the last field; never the file's bytes). s3s parses the form and checks
//! the policy itself; kiln first makes two of S3's answers s3s does not: `${filename}` in the
//! key is replaced by the name of the uploaded file before the policy's conditions are
//! checked, and the form's policy is refused as S3 refuses it when its expiration is not ISO
//! 8601, when it comes without a signature, or when it names another bucket than the one
//! posted to.

use std::pin::Pin;
use std::task::{Context, Poll};

use http_body_util::BodyExt;
use hyper::body::{Frame, SizeHint};

/// Whether a request's `Content-Type` is a form, and its boundary.
pub fn boundary(content_type: &str) -> Option<&str> {
    let mut params = content_type.split(';');
    let kind = params.next()?.trim();
    if !kind.eq_ignore_ascii_case("multipart/form-data") {
        return None;
    }
    params.find_map(|p| {
        let (name, value) = p.split_once('=')?;
        name.trim()
            .eq_ignore_ascii_case("boundary")
            .then(|| value.trim().trim_matches('"'))
            .filter(|b| !b.is_empty())
    })
}

/// One part of a form's head: its field name, its file name, and where its value lies.
struct Part<'a> {
    name: &'a [u8],
    filename: Option<&'a [u8]>,
    /// The value's bytes in the head (for the file part: from the end of its headers).
    value: std::ops::Range<usize>,
}

fn find(haystack: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    haystack
        .get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|at| at + from)
}

/// A `Content-Disposition` parameter's quoted value (`name="…"`).
fn parameter<'a>(disposition: &'a [u8], wanted: &[u8]) -> Option<&'a [u8]> {
    disposition.split(|&b| b == b';').find_map(|param| {
        let param = param.trim_ascii();
        let eq = param.iter().position(|&b| b == b'=')?;
        let (name, value) = (param[..eq].trim_ascii(), param[eq + 1..].trim_ascii());
        (name.eq_ignore_ascii_case(wanted)).then_some(())?;
        value.strip_prefix(b"\"")?.strip_suffix(b"\"")
    })
}

/// The parts of a form up to and including the file part's headers, if `head` reaches them.
fn parts<'a>(head: &'a [u8], boundary: &[u8]) -> Option<Vec<Part<'a>>> {
    let delimiter = [b"--".as_slice(), boundary].concat();
    let mut at = find(head, &delimiter, 0)?;
    let mut found = Vec::new();
    loop {
        let start = at + delimiter.len();
        let headers_end = find(head, b"\r\n\r\n", start)?;
        let headers = &head[start..headers_end];
        let disposition = headers.split(|&b| b == b'\n').find_map(|line| {
            let line = line.trim_ascii();
            let colon = line.iter().position(|&b| b == b':')?;
            line[..colon]
                .eq_ignore_ascii_case(b"content-disposition")
                .then(|| &line[colon + 1..])
        })?;
        let name = parameter(disposition, b"name")?;
        let filename = parameter(disposition, b"filename");
        let value_start = headers_end + 4;
        if name.eq_ignore_ascii_case(b"file") {
            found.push(Part {
                name,
                filename,
                value: value_start..value_start,
            });
            return Some(found);
        }
        let end_delimiter = [b"\r\n".as_slice(), &delimiter].concat();
        let value_end = find(head, &end_delimiter, value_start)?;
        found.push(Part {
            name,
            filename,
            value: value_start..value_end,
        });
        at = value_end + 2;
    }
}

/// Where the file's bytes begin, once `head` holds every field and the file part's headers.
pub fn fields_end(head: &[u8], boundary: &str) -> Option<usize> {
    parts(head, boundary.as_bytes())?
        .last()
        .map(|file| file.value.start)
}

/// The form's head with `${filename}` in its `key` field replaced by the file part's name;
/// None when there is nothing to replace (no such variable, or no file name).
pub fn substitute_filename_in(head: &[u8], boundary: &str) -> Option<Vec<u8>> {
    let parts = parts(head, boundary.as_bytes())?;
    let filename = parts.last()?.filename?;
    let key = parts.iter().find(|p| p.name.eq_ignore_ascii_case(b"key"))?;
    let value = &head[key.value.clone()];
    const VARIABLE: &[u8] = b"${filename}";
    find(value, VARIABLE, 0)?;
    let mut replaced = Vec::with_capacity(head.len() + filename.len());
    let mut rest = value;
    while let Some(at) = find(rest, VARIABLE, 0) {
        replaced.extend_from_slice(&rest[..at]);
        replaced.extend_from_slice(filename);
        rest = &rest[at + VARIABLE.len()..];
    }
    replaced.extend_from_slice(rest);
    Some(
        [
            &head[..key.value.start],
            replaced.as_slice(),
            &head[key.value.end..],
        ]
        .concat(),
    )
}

/// What S3 refuses of a form before it looks at its signature or conditions: an `expiration`
/// not in ISO 8601 (400 `InvalidPolicyDocument`), a policy sent without a signature (400
/// `InvalidArgument`), a policy whose `bucket` condition names another bucket than the one the
/// form was posted to (403 `AccessDenied`). A form without a policy is an unsigned upload, and
/// a policy kiln cannot read is left for s3s to refuse.
pub fn check_form(head: &[u8], boundary: &str, bucket: Option<&str>) -> Result<(), s3s::S3Error> {
    let Some(parts) = parts(head, boundary.as_bytes()) else {
        return Ok(());
    };
    let field = |wanted: &str| {
        parts
            .iter()
            .find(|p| p.name.eq_ignore_ascii_case(wanted.as_bytes()))
            .map(|p| &head[p.value.clone()])
    };
    let Some(policy) = field("policy") else {
        return Ok(());
    };
    if field("signature").is_none() && field("x-amz-signature").is_none() {
        return Err(s3s::s3_error!(
            InvalidArgument,
            "Bucket POST must contain a field named 'Signature'. If it is specified, please check the order of the fields."
        ));
    }
    use base64::Engine as _;
    let Some(policy) = base64::engine::general_purpose::STANDARD
        .decode(policy.trim_ascii())
        .ok()
        .and_then(|json| serde_json::from_slice::<serde_json::Value>(&json).ok())
    else {
        return Ok(());
    };
    if let Some(expiration) = policy.get("expiration") {
        let readable = expiration.as_str().is_some_and(|e| {
            chrono::NaiveDateTime::parse_from_str(e, "%Y-%m-%dT%H:%M:%S%.fZ").is_ok()
        });
        if !readable {
            return Err(s3s::s3_error!(
                InvalidPolicyDocument,
                "Invalid Policy: Invalid 'expiration' value: '{}'",
                expiration
                    .as_str()
                    .map_or_else(|| expiration.to_string(), str::to_string)
            ));
        }
    }
    let named = policy
        .get("conditions")
        .and_then(|c| c.as_array())
        .into_iter()
        .flatten()
        .filter_map(|c| match c {
            serde_json::Value::Object(o) => o.get("bucket").and_then(|b| b.as_str()),
            serde_json::Value::Array(a) if a.len() == 3 => {
                let eq = a[0].as_str() == Some("eq") && a[1].as_str() == Some("$bucket");
                eq.then(|| a[2].as_str()).flatten()
            }
            _ => None,
        });
    for named in named {
        if bucket.is_some_and(|b| b != named) {
            return Err(s3s::s3_error!(
                AccessDenied,
                "Invalid according to Policy: Policy Condition failed: [\"eq\", \"$bucket\", \"{named}\"]"
            ));
        }
    }
    Ok(())
}

/// How much of a browser upload's form is read ahead of its file, at most, looking for the
/// file part (s3s allows 20 MiB of fields).
const FORM_FIELDS_BYTES: usize = 21 * 1024 * 1024;

/// A body whose first bytes were read already: `head`, then the rest of `rest`.
struct Prefixed {
    head: Option<bytes::Bytes>,
    rest: s3s::Body,
}

impl hyper::body::Body for Prefixed {
    type Data = bytes::Bytes;
    type Error = s3s::StdError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        if let Some(head) = self.head.take() {
            return Poll::Ready(Some(Ok(Frame::data(head))));
        }
        Pin::new(&mut self.rest).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.head.is_none() && self.rest.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let head = self.head.as_ref().map_or(0, |h| h.len() as u64);
        let rest = self.rest.size_hint();
        let mut hint = SizeHint::new();
        hint.set_lower(rest.lower() + head);
        if let Some(upper) = rest.upper() {
            hint.set_upper(upper + head);
        }
        hint
    }
}

/// A browser upload (`POST` of a form) posted to `bucket`: its fields are read ahead of the
/// file and checked ([`check_form`]), and a key that holds `${filename}` gets the uploaded
/// file's name there, as on S3, before s3s checks the policy against the key; the fields are
/// put back in front of the rest of the body.
pub(super) async fn prepare(
    req: hyper::Request<s3s::Body>,
    bucket: Option<&str>,
) -> Result<hyper::Request<s3s::Body>, s3s::S3Error> {
    let boundary = req
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(boundary)
        .map(str::to_string);
    let Some(boundary) = boundary.filter(|_| req.method() == http::Method::POST) else {
        return Ok(req);
    };
    let (mut parts, mut body) = req.into_parts();
    let mut head = Vec::new();
    let mut failed = None;
    while fields_end(&head, &boundary).is_none() && head.len() < FORM_FIELDS_BYTES {
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    head.extend_from_slice(data);
                }
            }
            Some(Err(e)) => {
                failed = Some(e);
                break;
            }
            None => break,
        }
    }
    if let Some(e) = failed {
        // The client's body broke off: s3s meets the same error reading what follows.
        tracing::debug!("object store: a form's body failed: {e}");
    }
    check_form(&head, &boundary, bucket)?;
    if let Some(replaced) = substitute_filename_in(&head, &boundary) {
        let grown = replaced.len() as i64 - head.len() as i64;
        head = replaced;
        let length = parts
            .headers
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<i64>().ok());
        if let Some(length) = length {
            parts
                .headers
                .insert(http::header::CONTENT_LENGTH, (length + grown).into());
        }
    }
    let body = s3s::Body::http_body_unsync(Prefixed {
        head: Some(bytes::Bytes::from(head)),
        rest: body,
    });
    Ok(hyper::Request::from_parts(parts, body))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn form(boundary: &str, fields: &[(&str, &str)], filename: Option<&str>) -> Vec<u8> {
        let mut out = String::new();
        for (name, value) in fields {
            out += &format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n"
            );
        }
        out += &format!("--{boundary}\r\nContent-Disposition: form-data; name=\"file\"");
        if let Some(f) = filename {
            out += &format!("; filename=\"{f}\"");
        }
        out += "\r\nContent-Type: text/plain\r\n\r\n";
        out.into_bytes()
    }

    #[test]
    fn the_boundary_comes_from_a_form_content_type_only() {
        assert_eq!(boundary("multipart/form-data; boundary=abc"), Some("abc"));
        assert_eq!(
            boundary("Multipart/Form-Data;boundary=\"a b\""),
            Some("a b")
        );
        assert_eq!(boundary("application/xml; boundary=abc"), None);
        assert_eq!(boundary("multipart/form-data"), None);
    }

    #[test]
    fn the_key_takes_the_file_name() {
        let head = form(
            "XyZ",
            &[("key", "uploads/${filename}"), ("policy", "p")],
            Some("photo.jpg"),
        );
        let replaced = substitute_filename_in(&head, "XyZ").unwrap();
        assert_eq!(
            replaced,
            form(
                "XyZ",
                &[("key", "uploads/photo.jpg"), ("policy", "p")],
                Some("photo.jpg")
            )
        );
        assert_eq!(fields_end(&replaced, "XyZ"), Some(replaced.len()));
    }

    #[test]
    fn nothing_is_replaced_without_the_variable_a_file_name_or_the_file_part() {
        let plain = form("b", &[("key", "k")], Some("f.txt"));
        assert_eq!(substitute_filename_in(&plain, "b"), None);
        let nameless = form("b", &[("key", "${filename}")], None);
        assert_eq!(substitute_filename_in(&nameless, "b"), None);
        // The file part's headers have not arrived yet.
        let cut = form("b", &[("key", "${filename}")], Some("f"));
        assert_eq!(substitute_filename_in(&cut[..cut.len() - 3], "b"), None);
        assert_eq!(fields_end(&cut[..cut.len() - 3], "b"), None);
    }

    fn policy(json: &str) -> String {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(json)
    }

    #[test]
    fn a_form_is_refused_as_s3_refuses_its_policy() {
        let code = |fields: &[(&str, &str)]| {
            let head = form("b", fields, Some("f.txt"));
            check_form(&head, "b", Some("photos"))
                .err()
                .map(|e| e.code().as_str().to_string())
        };
        let good = policy(
            r#"{"expiration": "2030-01-01T00:00:00Z", "conditions": [{"bucket": "photos"}]}"#,
        );
        let fractional = policy(
            r#"{"expiration": "2030-01-01T00:00:00.123Z", "conditions": [["eq", "$bucket", "photos"]]}"#,
        );
        let spaced = policy(r#"{"expiration": "2030-01-01 00:00:00+00:00", "conditions": []}"#);
        let other = policy(
            r#"{"expiration": "2030-01-01T00:00:00Z", "conditions": [{"bucket": "other"}]}"#,
        );
        let other_eq = policy(
            r#"{"expiration": "2030-01-01T00:00:00Z", "conditions": [["eq", "$bucket", "other"]]}"#,
        );
        assert_eq!(code(&[("policy", &good), ("signature", "s")]), None);
        assert_eq!(
            code(&[("policy", &fractional), ("x-amz-signature", "s")]),
            None
        );
        assert_eq!(code(&[("key", "k")]), None, "an unsigned form");
        assert_eq!(
            code(&[("policy", "not base64!"), ("signature", "s")]),
            None,
            "left for s3s"
        );
        assert_eq!(
            code(&[("policy", &spaced), ("signature", "s")]).as_deref(),
            Some("InvalidPolicyDocument")
        );
        assert_eq!(
            code(&[("AWSAccessKeyId", "a"), ("policy", &good)]).as_deref(),
            Some("InvalidArgument")
        );
        for wrong in [&other, &other_eq] {
            let refused = code(&[("policy", wrong), ("signature", "s")]);
            assert_eq!(refused.as_deref(), Some("AccessDenied"));
        }
    }

    proptest! {
        #[test]
        fn any_key_and_file_name_round_trip(
            before in "[a-zA-Z0-9/ ._-]{0,20}",
            after in "[a-zA-Z0-9/ ._-]{0,20}",
            filename in "[a-zA-Z0-9 ._()-]{1,30}",
        ) {
            let key = format!("{before}${{filename}}{after}");
            let head = form("----b0und", &[("acl", "private"), ("key", &key)], Some(&filename));
            let replaced = substitute_filename_in(&head, "----b0und").unwrap();
            let expected = format!("{before}{filename}{after}");
            prop_assert_eq!(
                replaced,
                form("----b0und", &[("acl", "private"), ("key", &expected)], Some(&filename))
            );
        }

        #[test]
        fn arbitrary_bytes_never_panic(head in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = substitute_filename_in(&head, "b");
            let _ = fields_end(&head, "b");
        }
    }
}
