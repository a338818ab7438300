//! The object store through kiln's own API (`/kiln/v1/buckets/…`): buckets, a page of keys
//! under a prefix, an object's details, its body, uploads (whole, or in parts for large
//! files), deletion and presigned links. The console's object browser uses these; so can any
//! client that signs its requests. [`ObjectBrowser`] makes the calls on the store in-process.
//!
//! Keys travel in the `key` query parameter rather than the path, so that any key S3 allows
//! (`a//b`, `../x`, one ending in `/`) reaches the store as it was written.

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde::Deserialize;

use super::{parse_json, ApiError, SharedState, Signed};
use crate::objects::browse::{ListRequest, ObjectBrowser, UploadedPart, MAX_LINK_SECONDS};

/// Keys a listing page holds unless `limit` says otherwise, and at most.
const DEFAULT_PAGE: i32 = 100;
const MAX_PAGE: i32 = 1000;
/// A presigned link's lifetime unless `expires` says otherwise.
const DEFAULT_LINK_SECONDS: u64 = 3600;
/// The header that carries an upload's SHA-256 (base64), as S3's does.
const SHA256_HEADER: &str = "x-amz-checksum-sha256";

fn browser(state: &SharedState) -> &ObjectBrowser {
    &state.objects
}

fn invalid(message: String) -> ApiError {
    ApiError::new(
        StatusCode::BAD_REQUEST,
        "InvalidParameterValueException",
        message,
    )
}

#[derive(Deserialize)]
pub struct KeyQuery {
    key: String,
}

#[derive(Deserialize)]
pub struct ListQuery {
    #[serde(default)]
    prefix: String,
    delimiter: Option<String>,
    token: Option<String>,
    limit: Option<String>,
}

#[derive(Deserialize)]
pub struct LinkQuery {
    key: String,
    expires: Option<String>,
}

/// `{"Buckets": [{"Name", "CreationDate"}]}`, by name.
pub async fn buckets(State(state): State<SharedState>, _: Signed) -> Result<Response, ApiError> {
    let buckets = browser(&state).buckets().await?;
    Ok(Json(serde_json::json!({ "Buckets": buckets })).into_response())
}

pub async fn create_bucket(
    State(state): State<SharedState>,
    Path(bucket): Path<String>,
    _: Signed,
) -> Result<Response, ApiError> {
    browser(&state).create_bucket(&bucket).await?;
    Ok((
        StatusCode::CREATED,
        Json(serde_json::json!({ "Bucket": bucket })),
    )
        .into_response())
}

/// Deletes an empty bucket: 204, or 409 while it holds objects.
pub async fn delete_bucket(
    State(state): State<SharedState>,
    Path(bucket): Path<String>,
    _: Signed,
) -> Result<Response, ApiError> {
    browser(&state).delete_bucket(&bucket).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// A page of keys: `{"Bucket", "Prefix", "Delimiter", "Objects": [{"Key", "Size",
/// "LastModified", "ETag", "StorageClass"}], "Prefixes": [...], "NextToken"}`. The delimiter is
/// `/` unless given (empty: every key under the prefix).
pub async fn list(
    State(state): State<SharedState>,
    Path(bucket): Path<String>,
    Query(query): Query<ListQuery>,
    _: Signed,
) -> Result<Response, ApiError> {
    let limit = match query.limit.as_deref() {
        None => DEFAULT_PAGE,
        Some(raw) => match raw.parse::<i32>() {
            Ok(n) if (1..=MAX_PAGE).contains(&n) => n,
            _ => {
                return Err(invalid(format!(
                    "limit must be a number from 1 to {MAX_PAGE}, not '{raw}'"
                )))
            }
        },
    };
    let request = ListRequest {
        prefix: query.prefix,
        delimiter: query.delimiter.unwrap_or_else(|| "/".into()),
        token: query.token,
        limit,
    };
    let listing = browser(&state).list(&bucket, request).await?;
    Ok(Json(listing).into_response())
}

/// The object's metadata and checksums.
pub async fn details(
    State(state): State<SharedState>,
    Path(bucket): Path<String>,
    Query(query): Query<KeyQuery>,
    _: Signed,
) -> Result<Response, ApiError> {
    let details = browser(&state).details(&bucket, &query.key).await?;
    Ok(Json(details).into_response())
}

/// What a download may be called: the key's last segment, as given (`filename*`) and with
/// anything but letters, digits, `.`, `-` and `_` replaced (`filename`, for old clients).
fn attachment(key: &str) -> String {
    /// RFC 8187's `attr-char`s stay; everything else is percent-encoded.
    const ATTR: &AsciiSet = &NON_ALPHANUMERIC
        .remove(b'!')
        .remove(b'#')
        .remove(b'$')
        .remove(b'&')
        .remove(b'+')
        .remove(b'-')
        .remove(b'.')
        .remove(b'^')
        .remove(b'_')
        .remove(b'`')
        .remove(b'|')
        .remove(b'~');
    let name = key.rsplit('/').find(|s| !s.is_empty()).unwrap_or("object");
    let plain: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!(
        "attachment; filename=\"{plain}\"; filename*=UTF-8''{}",
        utf8_percent_encode(name, ATTR)
    )
}

/// The object's bytes, streamed, as a download. Whatever the object says it is, it is sent as
/// `application/octet-stream` in a sandbox: an HTML object opened from the console's origin
/// must not run there.
pub async fn download(
    State(state): State<SharedState>,
    Path(bucket): Path<String>,
    Query(query): Query<KeyQuery>,
    _: Signed,
) -> Result<Response, ApiError> {
    let download = browser(&state).download(&bucket, &query.key).await?;
    let mut response = match download.body {
        Some(body) => Body::from_stream(body).into_response(),
        None => Body::empty().into_response(),
    };
    let headers = response.headers_mut();
    let disposition = attachment(&query.key);
    for (name, value) in [
        (header::CONTENT_TYPE, "application/octet-stream"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (
            header::CONTENT_SECURITY_POLICY,
            "sandbox; default-src 'none'",
        ),
        (header::CACHE_CONTROL, "no-store"),
        (header::CONTENT_DISPOSITION, disposition.as_str()),
    ] {
        if let Ok(value) = HeaderValue::from_str(value) {
            headers.insert(name, value);
        }
    }
    if let Some(size) = download.size {
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(size));
    }
    if let Some(etag) = download.etag.and_then(|e| HeaderValue::from_str(&e).ok()) {
        headers.insert(header::ETAG, etag);
    }
    Ok(response)
}

fn content_type(headers: &HeaderMap) -> Option<String> {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty())
        .map(str::to_string)
}

fn sha256(headers: &HeaderMap) -> Option<String> {
    headers
        .get(SHA256_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// Writes the object from the request's body (its `Content-Type` kept, its SHA-256 in
/// `x-amz-checksum-sha256` checked when given): `{"ETag", "ChecksumSHA256"}`.
pub async fn upload(
    State(state): State<SharedState>,
    Path(bucket): Path<String>,
    Query(query): Query<KeyQuery>,
    Signed { headers, body, .. }: Signed,
) -> Result<Response, ApiError> {
    let written = browser(&state)
        .put(
            &bucket,
            &query.key,
            body,
            content_type(&headers),
            sha256(&headers),
        )
        .await?;
    Ok(Json(written).into_response())
}

pub async fn delete(
    State(state): State<SharedState>,
    Path(bucket): Path<String>,
    Query(query): Query<KeyQuery>,
    _: Signed,
) -> Result<Response, ApiError> {
    browser(&state).delete(&bucket, &query.key).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// A presigned GET on the object store's listener: `{"Url", "Expires"}`, valid for `expires`
/// seconds (an hour unless given; at most a week).
pub async fn link(
    State(state): State<SharedState>,
    Path(bucket): Path<String>,
    Query(query): Query<LinkQuery>,
    Signed { headers, .. }: Signed,
) -> Result<Response, ApiError> {
    let seconds = match query.expires.as_deref() {
        None => DEFAULT_LINK_SECONDS,
        Some(raw) => raw.parse::<u64>().map_err(|_| {
            invalid(format!(
                "expires must be seconds from 1 to {MAX_LINK_SECONDS}, not '{raw}'"
            ))
        })?,
    };
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    let endpoint = super::reached_at(browser(&state).listener(), host);
    let link = browser(&state)
        .link(
            &bucket,
            &query.key,
            std::time::Duration::from_secs(seconds),
            &endpoint,
        )
        .await?;
    Ok(Json(link).into_response())
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
struct StartUpload {
    content_type: Option<String>,
}

/// Starts a multipart upload (JSON body `{"ContentType"}`, optional): `{"UploadId"}`.
pub async fn start_upload(
    State(state): State<SharedState>,
    Path(bucket): Path<String>,
    Query(query): Query<KeyQuery>,
    Signed { body, .. }: Signed,
) -> Result<Response, ApiError> {
    let start: StartUpload = if body.is_empty() {
        StartUpload::default()
    } else {
        parse_json(&body)?
    };
    let upload_id = browser(&state)
        .start_upload(&bucket, &query.key, start.content_type)
        .await?;
    Ok(Json(serde_json::json!({ "UploadId": upload_id })).into_response())
}

/// Writes one part from the body (its SHA-256 checked when given):
/// `{"PartNumber", "ETag", "ChecksumSHA256"}`, what completing the upload names it by.
pub async fn upload_part(
    State(state): State<SharedState>,
    Path((bucket, upload_id, part)): Path<(String, String, String)>,
    Query(query): Query<KeyQuery>,
    Signed { headers, body, .. }: Signed,
) -> Result<Response, ApiError> {
    let part_number = match part.parse::<i32>() {
        Ok(n) if (1..=10_000).contains(&n) => n,
        _ => {
            return Err(invalid(format!(
                "a part number is from 1 to 10000, not '{part}'"
            )))
        }
    };
    let part = browser(&state)
        .upload_part(
            &bucket,
            &query.key,
            &upload_id,
            part_number,
            body,
            sha256(&headers),
        )
        .await?;
    Ok(Json(part).into_response())
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
struct CompleteUpload {
    parts: Vec<UploadedPart>,
}

/// Completes an upload from `{"Parts": [{"PartNumber", "ETag", "ChecksumSHA256"}]}`:
/// `{"ETag", "ChecksumSHA256"}` of the object.
pub async fn complete_upload(
    State(state): State<SharedState>,
    Path((bucket, upload_id)): Path<(String, String)>,
    Query(query): Query<KeyQuery>,
    Signed { body, .. }: Signed,
) -> Result<Response, ApiError> {
    let complete: CompleteUpload = parse_json(&body)?;
    let written = browser(&state)
        .complete_upload(&bucket, &query.key, &upload_id, complete.parts)
        .await?;
    Ok(Json(written).into_response())
}

/// Abandons an upload and what its parts hold: 204.
pub async fn abort_upload(
    State(state): State<SharedState>,
    Path((bucket, upload_id)): Path<(String, String)>,
    Query(query): Query<KeyQuery>,
    _: Signed,
) -> Result<Response, ApiError> {
    browser(&state)
        .abort_upload(&bucket, &query.key, &upload_id)
        .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn downloads_are_named_after_the_keys_last_segment() {
        assert_eq!(
            attachment("photos/2024/cat.jpg"),
            "attachment; filename=\"cat.jpg\"; filename*=UTF-8''cat.jpg"
        );
        assert_eq!(
            attachment("dir/"),
            "attachment; filename=\"dir\"; filename*=UTF-8''dir"
        );
        assert_eq!(
            attachment("/"),
            "attachment; filename=\"object\"; filename*=UTF-8''object"
        );
        // Quotes, line breaks and markup cannot leave the header's value.
        let hostile = attachment("x/\"a\r\nb<img src=x>\u{e9}.txt");
        assert!(HeaderValue::from_str(&hostile).is_ok());
        assert_eq!(
            hostile,
            "attachment; filename=\"_a__b_img_src_x__.txt\"; filename*=UTF-8''%22a%0D%0Ab%3Cimg%20src%3Dx%3E%C3%A9.txt"
        );
    }
}
