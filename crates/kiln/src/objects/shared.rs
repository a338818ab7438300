//! S3's vocabulary, shared by every backend (the local store, remote mode and the cache):
//! errors with S3's codes and messages, timestamps, upload lengths, the stored object
//! attributes and the macros that copy them and checksums between inputs and outputs, and the
//! pieces of a listing.

use std::collections::BTreeMap;
use std::fmt::Display;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use s3s::dto::*;
use s3s::{s3_error, S3Error, S3ErrorCode, S3Result, StdError};
use serde::{Deserialize, Serialize};

use super::checksum::Checksums;

/// The HTTP attributes and user metadata stored with an object.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ObjectAttrs {
    pub content_type: Option<String>,
    pub content_encoding: Option<String>,
    pub content_disposition: Option<String>,
    pub content_language: Option<String>,
    pub cache_control: Option<String>,
    /// The `Expires` header, in ms since the epoch.
    pub expires_ms: Option<i64>,
    pub website_redirect_location: Option<String>,
    pub metadata: BTreeMap<String, String>,
    /// The storage class, when not STANDARD.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub storage_class: Option<String>,
    /// The canned ACL, when it opens reads to more than the owner (see `acl.rs`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acl: Option<String>,
}

/// The storage classes S3 accepts on uploads and copies. kiln stores every one alike.
const STORAGE_CLASSES: [&str; 10] = [
    StorageClass::STANDARD,
    StorageClass::REDUCED_REDUNDANCY,
    StorageClass::STANDARD_IA,
    StorageClass::ONEZONE_IA,
    StorageClass::INTELLIGENT_TIERING,
    StorageClass::GLACIER,
    StorageClass::DEEP_ARCHIVE,
    StorageClass::GLACIER_IR,
    StorageClass::OUTPOSTS,
    StorageClass::EXPRESS_ONEZONE,
];

/// Refuses a storage class S3 does not have.
pub(crate) fn check_storage_class(class: Option<&StorageClass>) -> S3Result<()> {
    match class {
        Some(c) if !STORAGE_CLASSES.contains(&c.as_str()) => Err(s3_error!(
            InvalidStorageClass,
            "The storage class you specified is not valid"
        )),
        _ => Ok(()),
    }
}

/// The storage class to store: None for STANDARD, which S3 leaves out of HEAD and GET.
pub(crate) fn stored_class(class: Option<&str>) -> Option<String> {
    class
        .filter(|c| *c != StorageClass::STANDARD)
        .map(str::to_string)
}

/// An object's storage class as listings and GetObjectAttributes name it.
pub(crate) fn class_name(attrs: &ObjectAttrs) -> &str {
    attrs
        .storage_class
        .as_deref()
        .unwrap_or(StorageClass::STANDARD)
}

/// The most keys one listing page holds.
pub(crate) const MAX_KEYS: i32 = 1000;

pub(crate) fn owner() -> Owner {
    Owner {
        display_name: Some("kiln".into()),
        id: Some("kiln".into()),
    }
}

pub(crate) fn max_keys(requested: Option<i32>) -> S3Result<i32> {
    match requested {
        Some(n) if n < 0 => Err(s3_error!(
            InvalidArgument,
            "max-keys must be a non-negative integer"
        )),
        Some(n) => Ok(n.min(MAX_KEYS)),
        None => Ok(MAX_KEYS),
    }
}

pub(crate) fn encodes_url(encoding: Option<&EncodingType>) -> S3Result<bool> {
    match encoding.map(EncodingType::as_str) {
        None => Ok(false),
        Some(EncodingType::URL) => Ok(true),
        Some(_) => Err(s3_error!(
            InvalidArgument,
            "Invalid Encoding Method specified in Request"
        )),
    }
}

/// An object's entry in a listing, under `key` (encoded as the listing asks).
pub(crate) fn listed_object(key: String, object: &StoredObject<'_>) -> Object {
    let algorithms: Vec<ChecksumAlgorithm> = object
        .checksums
        .algorithms()
        .map(|a| ChecksumAlgorithm::from(a.name().to_string()))
        .collect();
    Object {
        key: Some(key),
        size: Some(object.size as i64),
        e_tag: Some(ETag::Strong(object.etag.to_string())),
        last_modified: Some(timestamp(object.modified_ms)),
        storage_class: Some(ObjectStorageClass::from(
            class_name(object.attrs).to_string(),
        )),
        checksum_algorithm: (!algorithms.is_empty()).then_some(algorithms),
        owner: Some(owner()),
        ..Default::default()
    }
}

/// An object's entry in ListObjectVersions as its one version, `null`, the latest (the caller
/// sets its id and whether it is the latest when it keeps versions).
pub(crate) fn listed_version(object: Object) -> ObjectVersion {
    ObjectVersion {
        checksum_algorithm: object.checksum_algorithm,
        checksum_type: object.checksum_type,
        e_tag: object.e_tag,
        is_latest: Some(true),
        key: object.key,
        last_modified: object.last_modified,
        owner: object.owner,
        size: object.size,
        storage_class: object
            .storage_class
            .map(|c| ObjectVersionStorageClass::from(c.as_str().to_string())),
        version_id: Some("null".into()),
        ..Default::default()
    }
}

/// A ListObjectVersions request as S3 reads it: an empty delimiter is absent.
pub(crate) fn read_list_versions(input: &mut ListObjectVersionsInput) {
    if input.delimiter.as_deref() == Some("") {
        input.delimiter = None;
    }
}

/// The attribute names of GetObjectAttributes's `x-amz-object-attributes`, one each: s3s hands
/// a comma-separated header over as one name, and aws-sdk-s3 quotes a name it forwards when
/// that has a comma in it.
pub(crate) fn object_attribute_names(names: &[ObjectAttributes]) -> Vec<ObjectAttributes> {
    names
        .iter()
        .flat_map(|n| n.as_str().split(','))
        .map(|n| n.trim().trim_matches('"').trim())
        .filter(|n| !n.is_empty())
        .map(|n| ObjectAttributes::from(n.to_string()))
        .collect()
}

/// The markers of a ListObjectVersions request: a version marker only with a key marker.
pub(crate) fn check_version_marker(input: &ListObjectVersionsInput) -> S3Result<()> {
    let marker = input.version_id_marker.as_deref().filter(|m| !m.is_empty());
    if marker.is_some() && input.key_marker.as_deref().is_none_or(str::is_empty) {
        return Err(s3_error!(
            InvalidArgument,
            "A version-id marker cannot be specified without a key marker."
        ));
    }
    Ok(())
}

/// A ListMultipartUploads request as S3 reads it: an empty delimiter is absent.
pub(crate) fn read_list_uploads(input: &mut ListMultipartUploadsInput) {
    if input.delimiter.as_deref() == Some("") {
        input.delimiter = None;
    }
}

pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}

/// Whether a CopyObject replaces the source's metadata (else it copies it).
pub(crate) fn replaces_metadata(directive: Option<&MetadataDirective>) -> bool {
    directive.is_some_and(|d| d.as_str() == MetadataDirective::REPLACE)
}

/// Refuses a CopyObject onto its own source (`to_itself`) that changes nothing, as S3 does: it
/// must replace the metadata, or set a storage class, a website redirect or encryption.
pub(crate) fn check_self_copy(input: &CopyObjectInput, to_itself: bool) -> S3Result<()> {
    let changes = replaces_metadata(input.metadata_directive.as_ref())
        || input.storage_class.is_some()
        || input.website_redirect_location.is_some()
        || input.server_side_encryption.is_some()
        || input.sse_customer_algorithm.is_some();
    if to_itself && !changes {
        return Err(s3_error!(
            InvalidRequest,
            "This copy request is illegal because it is trying to copy an object to itself without \
             changing the object's metadata, storage class, website redirect location or encryption \
             attributes."
        ));
    }
    Ok(())
}

pub(crate) fn timestamp(ms: i64) -> Timestamp {
    Timestamp::from(UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64))
}

pub(crate) fn ms_of(ts: &Timestamp) -> i64 {
    (time::OffsetDateTime::from(ts.clone()).unix_timestamp_nanos() / 1_000_000) as i64
}

/// An unexpected failure: logged in full, reported as S3's InternalError.
pub(crate) fn internal(what: &str, e: impl Display) -> S3Error {
    tracing::error!("object store: {what}: {e}");
    S3Error::with_message(
        S3ErrorCode::InternalError,
        "We encountered an internal error. Please try again.",
    )
}

/// Maps a failed request body to S3's code. s3s's stream errors are private types, so their
/// messages are what tells them apart.
pub(crate) fn body_error(e: &StdError) -> S3Error {
    let text = e.to_string();
    if text.contains("Sha256Mismatch") {
        // Not in s3s's list of codes; S3 answers it with 400.
        let mut e = S3Error::with_message(
            S3ErrorCode::Custom("XAmzContentSHA256Mismatch".into()),
            "The provided 'x-amz-content-sha256' header does not match what was computed.",
        );
        e.set_status_code(http::StatusCode::BAD_REQUEST);
        e
    } else if text.contains("SignatureMismatch") {
        s3_error!(
            SignatureDoesNotMatch,
            "The chunk signature we calculated does not match the signature you provided."
        )
    } else {
        tracing::debug!("request body failed: {text}");
        incomplete_body()
    }
}

pub(crate) fn incomplete_body() -> S3Error {
    s3_error!(
        IncompleteBody,
        "You did not provide the number of bytes specified by the Content-Length HTTP header."
    )
}

pub(crate) fn entity_too_large(limit: u64) -> S3Error {
    s3_error!(
        EntityTooLarge,
        "Your proposed upload exceeds the maximum allowed size of {limit} bytes"
    )
}

/// The length of an upload's content: Content-Length, or for aws-chunked bodies sent with
/// `Transfer-Encoding: chunked` (as the JS SDK streams them), x-amz-decoded-content-length.
pub(crate) fn content_length(length: Option<i64>, headers: &http::HeaderMap) -> Option<i64> {
    length.or_else(|| {
        headers
            .get("x-amz-decoded-content-length")?
            .to_str()
            .ok()?
            .parse()
            .ok()
    })
}

/// An upload's length, if it has one within `limit`.
pub(crate) fn check_length(length: Option<i64>, limit: u64) -> S3Result<u64> {
    match length {
        None => Err(s3_error!(MissingContentLength)),
        Some(n) if n < 0 => Err(s3_error!(
            InvalidArgument,
            "Content-Length must not be negative"
        )),
        Some(n) if n as u64 > limit => Err(entity_too_large(limit)),
        Some(n) => Ok(n as u64),
    }
}

/// The stored attributes from an input with S3's object attribute fields (PutObject,
/// CreateMultipartUpload, CopyObject with `REPLACE`).
macro_rules! object_attrs {
    ($input:expr) => {
        $crate::objects::shared::ObjectAttrs {
            // S3's default for objects stored without a type.
            content_type: Some(
                $input
                    .content_type
                    .unwrap_or_else(|| "binary/octet-stream".into()),
            ),
            content_encoding: $crate::objects::shared::stored_encoding($input.content_encoding),
            content_disposition: $input.content_disposition,
            content_language: $input.content_language,
            cache_control: $input.cache_control,
            expires_ms: $input.expires.as_ref().map($crate::objects::shared::ms_of),
            website_redirect_location: $input.website_redirect_location,
            metadata: $input.metadata.unwrap_or_default().into_iter().collect(),
            storage_class: $crate::objects::shared::stored_class(
                $input.storage_class.as_ref().map(|c| c.as_str()),
            ),
            // Set by the store from `x-amz-acl`, which it checks (`acl::requested_acl`).
            acl: None,
        }
    };
}
pub(crate) use object_attrs;

pub(crate) fn checksums_from(
    crc32: Option<String>,
    crc32c: Option<String>,
    crc64nvme: Option<String>,
    sha1: Option<String>,
    sha256: Option<String>,
) -> Checksums {
    Checksums {
        crc32,
        crc32c,
        crc64nvme,
        sha1,
        sha256,
        kind: None,
    }
}

/// The digests an upload input (PutObject, UploadPart) declares, in its fields, its
/// `x-amz-sdk-checksum-algorithm` and the trailer it announces in `$headers`.
macro_rules! declared {
    ($input:expr, $headers:expr) => {
        $crate::objects::checksum::Declared::new(
            $crate::objects::shared::checksums_from(
                $input.checksum_crc32,
                $input.checksum_crc32c,
                $input.checksum_crc64nvme,
                $input.checksum_sha1,
                $input.checksum_sha256,
            ),
            $input.checksum_algorithm.as_ref().map(|a| a.as_str()),
            $headers,
        )
    };
}
pub(crate) use declared;

/// Copies stored HTTP attributes (`ObjectAttrs`) into an output's or input's fields of the same
/// names (GetObject, HeadObject, and a write-back's PutObject).
macro_rules! set_attrs {
    ($out:expr, $attrs:expr) => {{
        let attrs: &$crate::objects::shared::ObjectAttrs = $attrs;
        $out.content_type = attrs.content_type.clone();
        $out.content_encoding = attrs.content_encoding.clone();
        $out.content_disposition = attrs.content_disposition.clone();
        $out.content_language = attrs.content_language.clone();
        $out.cache_control = attrs.cache_control.clone();
        $out.expires = attrs.expires_ms.map($crate::objects::shared::timestamp);
        $out.website_redirect_location = attrs.website_redirect_location.clone();
        $out.storage_class = attrs
            .storage_class
            .clone()
            .map(s3s::dto::StorageClass::from);
    }};
}
pub(crate) use set_attrs;

/// What GetObject and HeadObject answer of a stored object, whichever store holds it.
pub(crate) struct StoredObject<'a> {
    /// Unquoted.
    pub etag: &'a str,
    pub modified_ms: i64,
    pub size: u64,
    pub attrs: &'a ObjectAttrs,
    pub checksums: &'a Checksums,
}

/// Whether a read asked for checksums (`x-amz-checksum-mode: ENABLED`).
pub(crate) fn wants_checksums(mode: Option<&ChecksumMode>) -> bool {
    mode.is_some_and(|m| m.as_str().eq_ignore_ascii_case(ChecksumMode::ENABLED))
}

/// The fields GetObject and HeadObject (`$output`) share, from a [`StoredObject`] and the
/// bytes the read covers (a [`Covered`](super::spans::Covered)).
macro_rules! read_output {
    ($output:ident, $object:expr, $covered:expr, $wants_checksums:expr) => {{
        let object: &$crate::objects::shared::StoredObject<'_> = $object;
        let covered: &$crate::objects::spans::Covered = $covered;
        let attrs = object.attrs;
        let mut output = $output {
            content_length: Some((covered.span.end - covered.span.start) as i64),
            content_range: $crate::objects::spans::content_range(covered, object.size),
            accept_ranges: Some("bytes".into()),
            e_tag: Some(ETag::Strong(object.etag.to_string())),
            last_modified: Some($crate::objects::shared::timestamp(object.modified_ms)),
            metadata: (!attrs.metadata.is_empty())
                .then(|| attrs.metadata.clone().into_iter().collect()),
            ..Default::default()
        };
        $crate::objects::shared::set_attrs!(output, attrs);
        // Like S3: checksums only when asked for, and only for the whole object.
        if $wants_checksums && !covered.partial {
            $crate::objects::shared::set_checksums!(output, object.checksums);
            output.checksum_type = $crate::objects::shared::checksum_type(object.checksums);
        }
        output
    }};
}
pub(crate) use read_output;

/// Copies stored checksums into an output's `checksum_*` fields.
macro_rules! set_checksums {
    ($out:expr, $sums:expr) => {{
        let sums: &$crate::objects::checksum::Checksums = $sums;
        $out.checksum_crc32 = sums.crc32.clone();
        $out.checksum_crc32c = sums.crc32c.clone();
        $out.checksum_crc64nvme = sums.crc64nvme.clone();
        $out.checksum_sha1 = sums.sha1.clone();
        $out.checksum_sha256 = sums.sha256.clone();
    }};
}
pub(crate) use set_checksums;

pub(crate) fn checksum_type(sums: &Checksums) -> Option<ChecksumType> {
    let kind = sums
        .kind
        .unwrap_or(super::checksum::ChecksumKind::FullObject);
    sums.algorithms()
        .next()
        .map(|_| ChecksumType::from(kind.name().to_string()))
}

/// The bytes an UploadPartCopy takes from a source of `size` bytes: all of it, or
/// `x-amz-copy-source-range: bytes=first-last`, which S3 requires to lie within the source (unlike
/// a GET's range, it is not clamped, and a suffix range is not one).
pub(crate) fn copy_source_span(range: Option<&str>, size: u64) -> S3Result<std::ops::Range<u64>> {
    let Some(text) = range else {
        return Ok(0..size);
    };
    let malformed = || {
        s3_error!(
            InvalidArgument,
            "The x-amz-copy-source-range value must be of the form bytes=first-last where first and last are the zero-based offsets of the first and last bytes to copy"
        )
    };
    match Range::parse(text).map_err(|_| malformed())? {
        Range::Int {
            first,
            last: Some(last),
        } if first <= last => {
            if last >= size {
                return Err(s3_error!(
                    InvalidRange,
                    "The specified copy source range bytes={first}-{last} is not satisfiable for an object of {size} bytes"
                ));
            }
            Ok(first..last + 1)
        }
        _ => Err(malformed()),
    }
}

/// A ListObjectsV2 request as S3 reads it: an empty continuation token or delimiter is absent
/// (SDKs send both empty). An empty delimiter is not echoed back, an empty token is: true if
/// the request had one.
pub(crate) fn read_list_v2(input: &mut ListObjectsV2Input) -> bool {
    let empty_token = input.continuation_token.as_deref() == Some("");
    if empty_token {
        input.continuation_token = None;
    }
    if input.delimiter.as_deref() == Some("") {
        input.delimiter = None;
    }
    empty_token
}

/// A ListObjects (v1) request as S3 reads it: an empty delimiter is absent.
pub(crate) fn read_list_v1(input: &mut ListObjectsInput) {
    if input.delimiter.as_deref() == Some("") {
        input.delimiter = None;
    }
}

/// ListObjectsV2 names each object's owner only when asked (`fetch-owner=true`).
pub(crate) fn owners_if_fetched(contents: &mut Option<Vec<Object>>, fetch_owner: Option<bool>) {
    if fetch_owner != Some(true) {
        for object in contents.iter_mut().flatten() {
            object.owner = None;
        }
    }
}

/// S3's message for an error code, where kiln answers the code without one of its own: clients
/// show the message (`kiln s3`, the AWS CLI), and S3 always sends one.
pub(crate) fn default_message(code: &str) -> Option<&'static str> {
    Some(match code {
        "AccessDenied" => "Access Denied",
        "BucketAlreadyExists" => "The requested bucket name is not available. The bucket namespace is shared by all users of the system. Please select a different name and try again.",
        "BucketAlreadyOwnedByYou" => "Your previous request to create the named bucket succeeded and you already own it.",
        "BucketNotEmpty" => "The bucket you tried to delete is not empty",
        "EntityTooLarge" => "Your proposed upload exceeds the maximum allowed size",
        "EntityTooSmall" => "Your proposed upload is smaller than the minimum allowed object size.",
        "IncompleteBody" => "You did not provide the number of bytes specified by the Content-Length HTTP header.",
        "InternalError" => "We encountered an internal error. Please try again.",
        "InvalidArgument" => "Invalid Argument",
        "InvalidBucketName" => "The specified bucket is not valid.",
        "InvalidDigest" => "The Content-MD5 you specified is not valid.",
        "InvalidPart" => "One or more of the specified parts could not be found. The part may not have been uploaded, or the specified entity tag may not match the part's entity tag.",
        "InvalidPartOrder" => "The list of parts was not in ascending order. The parts list must be specified in order by part number.",
        "InvalidRange" => "The requested range is not satisfiable",
        "InvalidRequest" => "Invalid Request",
        "KeyTooLongError" => "Your key is too long",
        "MalformedXML" => "The XML you provided was not well-formed or did not validate against our published schema",
        "MethodNotAllowed" => "The specified method is not allowed against this resource.",
        "MissingContentLength" => "You must provide the Content-Length HTTP header.",
        "NoSuchBucket" => "The specified bucket does not exist",
        "NoSuchKey" => "The specified key does not exist.",
        "NoSuchUpload" => "The specified upload does not exist. The upload ID may be invalid, or the upload may have been aborted or completed.",
        "NotImplemented" => "A header you provided implies functionality that is not implemented",
        "PreconditionFailed" => "At least one of the pre-conditions you specified did not hold",
        "ServiceUnavailable" => "Please reduce your request rate.",
        "SignatureDoesNotMatch" => "The request signature we calculated does not match the signature you provided. Check your key and signing method.",
        "SlowDown" => "Please reduce your request rate.",
        _ => return None,
    })
}

/// A document's first `<ETag>"…"</ETag>` without its quotes (None if it has none quoted).
pub(crate) fn bare_etag(xml: &[u8]) -> Option<Vec<u8>> {
    const OPEN: &[u8] = b"<ETag>&quot;";
    const OPEN_RAW: &[u8] = b"<ETag>\"";
    let find = |needle: &[u8]| xml.windows(needle.len()).position(|w| w == needle);
    let (start, open) = match (find(OPEN_RAW), find(OPEN)) {
        (Some(at), _) => (at, OPEN_RAW),
        (None, Some(at)) => (at, OPEN),
        (None, None) => return None,
    };
    let close: &[u8] = if open == OPEN {
        b"&quot;</ETag>"
    } else {
        b"\"</ETag>"
    };
    let value_start = start + open.len();
    let length = xml[value_start..]
        .windows(close.len())
        .position(|w| w == close)?;
    let mut bare = Vec::with_capacity(xml.len());
    bare.extend_from_slice(&xml[..start]);
    bare.extend_from_slice(b"<ETag>");
    bare.extend_from_slice(&xml[value_start..value_start + length]);
    bare.extend_from_slice(b"</ETag>");
    bare.extend_from_slice(&xml[value_start + length + close.len()..]);
    Some(bare)
}

/// An error document (`<Error><Code>…</Code>…</Error>`) completed as S3 sends them: S3's
/// message for its code when it has none, and this request's `RequestId` and `HostId` (the
/// values of `x-amz-request-id` and `x-amz-id-2`), in place of any it had (a backing store's,
/// passed through remote mode). `None` when the body is not an error document.
pub(crate) fn completed_error(xml: &[u8], request_id: &str, host_id: &str) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(xml).ok()?;
    let start = text.find("<Error><Code>")? + "<Error><Code>".len();
    let end = start + text[start..].find("</Code>")?;
    let close = text.rfind("</Error>")?;
    let message = (!text.contains("<Message>"))
        .then(|| default_message(&text[start..end]))
        .flatten();
    let at = end + "</Code>".len();
    let mut out = String::with_capacity(text.len() + 200);
    out.push_str(&text[..at]);
    if let Some(message) = message {
        out.push_str("<Message>");
        out.push_str(message);
        out.push_str("</Message>");
    }
    out.push_str(&without_element(
        &without_element(&text[at..close], "RequestId"),
        "HostId",
    ));
    out.push_str("<RequestId>");
    out.push_str(request_id);
    out.push_str("</RequestId><HostId>");
    out.push_str(host_id);
    out.push_str("</HostId>");
    out.push_str(&text[close..]);
    Some(out.into_bytes())
}

/// `xml` without its first `<name>…</name>` element.
fn without_element(xml: &str, name: &str) -> String {
    let (open, close) = (format!("<{name}>"), format!("</{name}>"));
    match xml.find(&open).and_then(|at| {
        let end = at + xml[at..].find(&close)? + close.len();
        Some((at, end))
    }) {
        Some((at, end)) => format!("{}{}", &xml[..at], &xml[end..]),
        None => xml.to_string(),
    }
}

/// A browser upload refused for a policy condition it does not meet, as S3 answers it (403
/// `AccessDenied`, "Invalid according to Policy: …") rather than as s3s does (400
/// `InvalidPolicyDocument`, which S3 keeps for a policy it cannot read). `None` for any other
/// answer.
pub(crate) fn policy_condition_refusal(xml: &[u8]) -> Option<Vec<u8>> {
    const FAILED: &str = "<Code>InvalidPolicyDocument</Code><Message>Policy condition";
    let text = std::str::from_utf8(xml).ok()?;
    let at = text.find(FAILED)?;
    let message = at + "<Code>InvalidPolicyDocument</Code><Message>".len();
    Some(
        format!(
            "{}<Code>AccessDenied</Code><Message>Invalid according to Policy: {}",
            &text[..at],
            &text[message..]
        )
        .into_bytes(),
    )
}

/// A redirect URL whose `etag` query parameter lacks the ETag's quotes, with them (`%22`);
/// `None` if it has them or has no such parameter.
pub(crate) fn with_quoted_etag(url: &str) -> Option<String> {
    let query_at = url.find('?')? + 1;
    let mut at = query_at;
    for pair in url[query_at..].split('&') {
        if let Some(value) = pair.strip_prefix("etag=") {
            if value.starts_with("%22") {
                return None;
            }
            let start = at + "etag=".len();
            let end = start + value.len();
            return Some(format!("{}%22{value}%22{}", &url[..start], &url[end..]));
        }
        at += pair.len() + 1;
    }
    None
}

/// The `Content-Encoding` to store: the client's, without `aws-chunked`, which only describes
/// how the body was sent (S3 drops it too); none if nothing else is left.
pub(crate) fn stored_encoding(encoding: Option<String>) -> Option<String> {
    let encoding = encoding?;
    if !encoding
        .split(',')
        .any(|e| e.trim().eq_ignore_ascii_case("aws-chunked"))
    {
        return Some(encoding);
    }
    let kept: Vec<&str> = encoding
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty() && !e.eq_ignore_ascii_case("aws-chunked"))
        .collect();
    (!kept.is_empty()).then(|| kept.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_redirect_names_the_etag_with_its_quotes() {
        assert_eq!(
            with_quoted_etag("http://a/b?x=1&bucket=b&key=k&etag=abc").as_deref(),
            Some("http://a/b?x=1&bucket=b&key=k&etag=%22abc%22")
        );
        assert_eq!(
            with_quoted_etag("http://a/?etag=abc&z=2").as_deref(),
            Some("http://a/?etag=%22abc%22&z=2")
        );
        assert_eq!(with_quoted_etag("http://a/?etag=%22abc%22"), None);
        assert_eq!(with_quoted_etag("http://a/?netag=abc"), None);
        assert_eq!(with_quoted_etag("http://a/etag=abc"), None);
    }

    #[test]
    fn a_copy_source_range_lies_within_the_source() {
        assert_eq!(copy_source_span(None, 10).unwrap(), 0..10);
        assert_eq!(copy_source_span(Some("bytes=2-5"), 10).unwrap(), 2..6);
        assert_eq!(copy_source_span(Some("bytes=0-9"), 10).unwrap(), 0..10);
        let past = copy_source_span(Some("bytes=5-10"), 10).unwrap_err();
        assert_eq!(past.code(), &S3ErrorCode::InvalidRange);
        for malformed in ["bytes=-3", "bytes=4-", "bytes=5-2", "4-5"] {
            let e = copy_source_span(Some(malformed), 10).unwrap_err();
            assert_eq!(e.code(), &S3ErrorCode::InvalidArgument, "{malformed}");
        }
    }

    #[test]
    fn an_attributes_etag_loses_its_quotes() {
        let quoted = br#"<R><ETag>"abc-2"</ETag><ObjectSize>3</ObjectSize></R>"#;
        assert_eq!(
            bare_etag(quoted).unwrap(),
            br#"<R><ETag>abc-2</ETag><ObjectSize>3</ObjectSize></R>"#.to_vec()
        );
        let escaped = b"<R><ETag>&quot;abc&quot;</ETag></R>";
        assert_eq!(
            bare_etag(escaped).unwrap(),
            b"<R><ETag>abc</ETag></R>".to_vec()
        );
        assert_eq!(bare_etag(b"<R><ObjectSize>3</ObjectSize></R>"), None);
        assert_eq!(bare_etag(br#"<R><ETag>"open</R>"#), None);
    }

    #[test]
    fn an_error_gets_s3s_message_and_the_requests_ids() {
        let complete = |xml: &[u8]| {
            completed_error(xml, "4442587FB7D0A2F9", "aG9zdA==")
                .map(|v| String::from_utf8(v).unwrap())
        };
        let bare =
            br#"<?xml version="1.0" encoding="UTF-8"?><Error><Code>NoSuchKey</Code></Error>"#;
        assert_eq!(
            complete(bare).unwrap(),
            r#"<?xml version="1.0" encoding="UTF-8"?><Error><Code>NoSuchKey</Code><Message>The specified key does not exist.</Message><RequestId>4442587FB7D0A2F9</RequestId><HostId>aG9zdA==</HostId></Error>"#
        );
        // A message of kiln's own is kept; the ids come after the error's other fields.
        let own = br#"<Error><Code>NoSuchKey</Code><Message>mine</Message><Key>k</Key></Error>"#;
        assert_eq!(
            complete(own).unwrap(),
            "<Error><Code>NoSuchKey</Code><Message>mine</Message><Key>k</Key><RequestId>4442587FB7D0A2F9</RequestId><HostId>aG9zdA==</HostId></Error>"
        );
        // An unknown code gets no message, but its ids.
        assert_eq!(
            complete(b"<Error><Code>Unheard</Code></Error>").unwrap(),
            "<Error><Code>Unheard</Code><RequestId>4442587FB7D0A2F9</RequestId><HostId>aG9zdA==</HostId></Error>"
        );
        // A backing store's ids (remote mode) give way to this request's.
        let passed = br#"<Error><Code>NoSuchKey</Code><Message>m</Message><RequestId>1</RequestId><HostId>h</HostId><Key>k</Key></Error>"#;
        assert_eq!(
            complete(passed).unwrap(),
            "<Error><Code>NoSuchKey</Code><Message>m</Message><Key>k</Key><RequestId>4442587FB7D0A2F9</RequestId><HostId>aG9zdA==</HostId></Error>"
        );
        assert_eq!(complete(b"not xml \xff"), None);
        assert_eq!(complete(b"<ListBucketResult></ListBucketResult>"), None);
    }

    #[test]
    fn a_failed_policy_condition_is_access_denied() {
        let failed = b"<Error><Code>InvalidPolicyDocument</Code><Message>Policy condition 'eq' for field 'key' failed</Message></Error>";
        assert_eq!(
            String::from_utf8(policy_condition_refusal(failed).unwrap()).unwrap(),
            "<Error><Code>AccessDenied</Code><Message>Invalid according to Policy: Policy condition 'eq' for field 'key' failed</Message></Error>"
        );
        let unreadable = b"<Error><Code>InvalidPolicyDocument</Code><Message>failed to parse POST policy</Message></Error>";
        assert_eq!(policy_condition_refusal(unreadable), None);
        assert_eq!(
            policy_condition_refusal(b"<Error><Code>EntityTooLarge</Code></Error>"),
            None
        );
    }

    #[test]
    fn aws_chunked_is_not_stored_as_a_content_encoding() {
        let stored = |e: &str| stored_encoding(Some(e.to_string()));
        assert_eq!(stored("aws-chunked"), None);
        assert_eq!(stored("aws-chunked,gzip").as_deref(), Some("gzip"));
        assert_eq!(stored("gzip, AWS-Chunked").as_deref(), Some("gzip"));
        assert_eq!(stored("gzip").as_deref(), Some("gzip"));
        assert_eq!(stored("br, gzip").as_deref(), Some("br, gzip"));
        assert_eq!(stored_encoding(None), None);
    }
}
