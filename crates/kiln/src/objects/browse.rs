//! The object store as kiln's own JSON API reaches it (`/kiln/v1/buckets/…`: the console's
//! object browser, and any client that signs its requests): each call goes straight into the
//! store's `s3s::S3` implementation, the same code the S3 listener runs once it has parsed and
//! authenticated a request, as kiln's admin. No HTTP, no signing, no second model of objects.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use s3s::dto::*;
use s3s::{S3Error, S3ErrorCode, S3Request, S3Response, S3Result, S3};
use serde::Serialize;

use super::keys::Scope;
use crate::auth::Credentials;

/// S3's longest key, in bytes.
const MAX_KEY_BYTES: usize = 1024;
/// A presigned link lives at most a week, as on S3.
pub const MAX_LINK_SECONDS: u64 = 7 * 24 * 3600;

/// Why a call on the store failed.
#[derive(Debug, thiserror::Error)]
pub enum BrowseError {
    /// the store refused or failed the call
    #[error("{}", store_message(.0))]
    Store(#[source] S3Error),
    /// a bucket name S3 does not allow
    #[error("`{0}` is not a bucket name: 3 to 63 lowercase letters, digits, dots and hyphens, starting and ending with a letter or digit")]
    BucketName(String),
    /// a key S3 does not allow
    #[error("an object key is 1 to 1024 bytes of UTF-8")]
    Key,
    /// a presigned link's lifetime out of range
    #[error("a link lives from 1 second to 7 days ({MAX_LINK_SECONDS} s), not {0} s")]
    LinkLifetime(u64),
    /// the SDK could not sign the link
    #[error("the link could not be signed: {0}")]
    Presign(String),
}

impl BrowseError {
    /// S3's name for what failed (`NoSuchKey`, `BucketNotEmpty`, …), for the store's refusals.
    pub fn s3_code(&self) -> Option<&S3ErrorCode> {
        match self {
            Self::Store(e) => Some(e.code()),
            _ => None,
        }
    }

    /// The HTTP status S3 answers the error with; 400 for what kiln refuses before the store.
    pub fn status(&self) -> http::StatusCode {
        match self {
            Self::Store(e) => e
                .status_code()
                .unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR),
            Self::Presign(_) => http::StatusCode::INTERNAL_SERVER_ERROR,
            _ => http::StatusCode::BAD_REQUEST,
        }
    }
}

fn store_message(e: &S3Error) -> String {
    match (e.code(), e.message()) {
        (_, Some(message)) if !message.is_empty() => message.to_string(),
        (S3ErrorCode::NoSuchBucket, _) => "The bucket does not exist.".into(),
        (S3ErrorCode::NoSuchKey, _) => "The bucket has no object with this key.".into(),
        (S3ErrorCode::NoSuchUpload, _) => {
            "The upload does not exist: it was completed or aborted.".into()
        }
        (S3ErrorCode::BucketNotEmpty, _) => {
            "The bucket is not empty: delete its objects first.".into()
        }
        (code, _) => format!("the object store answered {}", code.as_str()),
    }
}

/// A bucket, as ListBuckets gives it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct BucketEntry {
    pub name: String,
    pub creation_date: Option<String>,
}

/// One object of a listing.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct ObjectEntry {
    pub key: String,
    pub size: i64,
    pub last_modified: Option<String>,
    #[serde(rename = "ETag")]
    pub etag: Option<String>,
    pub storage_class: Option<String>,
}

/// What a listing asks for.
#[derive(Debug, Default, Clone)]
pub struct ListRequest {
    pub prefix: String,
    /// `/` groups keys into prefixes; empty lists every key under the prefix.
    pub delimiter: String,
    /// Where the previous page ended.
    pub token: Option<String>,
    pub limit: i32,
}

/// One page of keys under a prefix: objects, and the prefixes one level further down.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Listing {
    pub bucket: String,
    pub prefix: String,
    pub delimiter: String,
    pub objects: Vec<ObjectEntry>,
    pub prefixes: Vec<String>,
    /// Present when there is more: pass it back as `token`.
    pub next_token: Option<String>,
}

/// An object's metadata and checksums (HeadObject with checksums asked for).
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct ObjectDetails {
    pub bucket: String,
    pub key: String,
    pub size: i64,
    pub content_type: Option<String>,
    #[serde(rename = "ETag")]
    pub etag: Option<String>,
    pub last_modified: Option<String>,
    pub storage_class: Option<String>,
    /// `x-amz-meta-*`, without the prefix.
    pub metadata: BTreeMap<String, String>,
    /// By algorithm (`CRC32`, `SHA256`, …), base64 as S3 gives them; a multipart object's
    /// composite checksum ends in `-PARTS`.
    pub checksums: BTreeMap<&'static str, String>,
    /// `FULL_OBJECT` or `COMPOSITE`, when there are checksums.
    pub checksum_type: Option<String>,
    pub parts_count: Option<i32>,
    pub cache_control: Option<String>,
    pub content_encoding: Option<String>,
    pub content_disposition: Option<String>,
    pub content_language: Option<String>,
}

/// What a write answered.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Written {
    #[serde(rename = "ETag")]
    pub etag: Option<String>,
    #[serde(rename = "ChecksumSHA256")]
    pub checksum_sha256: Option<String>,
}

/// A part of a multipart upload, as the upload's completion names it.
#[derive(Debug, Clone, serde::Deserialize, Serialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct UploadedPart {
    pub part_number: i32,
    #[serde(rename = "ETag")]
    pub etag: String,
    #[serde(rename = "ChecksumSHA256", default)]
    pub checksum_sha256: Option<String>,
}

/// A link that reads an object without signing until it expires.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Link {
    pub url: String,
    /// RFC 3339.
    pub expires: String,
}

/// An object's body, as it streams from the store.
pub struct Download {
    pub size: Option<i64>,
    pub etag: Option<String>,
    pub body: Option<StreamingBlob>,
}

/// kiln's admin calls on its own store.
#[derive(Clone)]
pub struct ObjectBrowser {
    s3: Arc<dyn S3>,
    admin: Credentials,
    region: String,
    /// Where the store's listener is bound, for presigned links.
    listener: SocketAddr,
}

fn text_time(t: Timestamp) -> String {
    let t: time::OffsetDateTime = t.into();
    let nanos = t.unix_timestamp_nanos();
    chrono::DateTime::from_timestamp(
        (nanos.div_euclid(1_000_000_000)) as i64,
        nanos.rem_euclid(1_000_000_000) as u32,
    )
    .unwrap_or_default()
    .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn etag_text(etag: ETag) -> String {
    format!("\"{}\"", etag.value())
}

fn check_bucket(bucket: &str) -> Result<(), BrowseError> {
    if s3s::path::check_bucket_name(bucket) {
        Ok(())
    } else {
        Err(BrowseError::BucketName(bucket.to_string()))
    }
}

fn check_key(key: &str) -> Result<(), BrowseError> {
    if key.is_empty() || key.len() > MAX_KEY_BYTES {
        Err(BrowseError::Key)
    } else {
        Ok(())
    }
}

impl ObjectBrowser {
    /// Calls on `s3` (the store's [`super::ObjectStore::operations`]) as `admin`; presigned
    /// links point at the store's `listener`.
    pub fn new(s3: Arc<dyn S3>, admin: Credentials, region: &str, listener: SocketAddr) -> Self {
        Self {
            s3,
            admin,
            region: region.to_string(),
            listener,
        }
    }

    /// A request as the store's listener hands it on after authenticating kiln's admin key.
    fn request<T>(&self, input: T, method: http::Method) -> S3Request<T> {
        let mut extensions = http::Extensions::new();
        extensions.insert(Scope::All);
        S3Request {
            input,
            method,
            uri: http::Uri::from_static("/"),
            headers: http::HeaderMap::new(),
            extensions,
            credentials: Some(s3s::auth::Credentials {
                access_key: self.admin.access_key_id.clone(),
                secret_key: self.admin.secret_access_key.clone().into(),
            }),
            region: None,
            service: Some("s3".into()),
            trailing_headers: None,
        }
    }

    /// Calls `op` on the store with `input` as kiln's admin; the store's answer, or its
    /// refusal as [`BrowseError::Store`].
    async fn call<'a, I, O, F>(
        &'a self,
        input: I,
        method: http::Method,
        op: impl FnOnce(&'a dyn S3, S3Request<I>) -> F,
    ) -> Result<O, BrowseError>
    where
        F: Future<Output = S3Result<S3Response<O>>> + 'a,
    {
        let answer = op(&*self.s3, self.request(input, method))
            .await
            .map_err(BrowseError::Store)?;
        Ok(answer.output)
    }

    pub async fn buckets(&self) -> Result<Vec<BucketEntry>, BrowseError> {
        let output = self
            .call(ListBucketsInput::default(), http::Method::GET, |s3, r| {
                s3.list_buckets(r)
            })
            .await?;
        Ok(output
            .buckets
            .unwrap_or_default()
            .into_iter()
            .filter_map(|b| {
                Some(BucketEntry {
                    name: b.name?,
                    creation_date: b.creation_date.map(text_time),
                })
            })
            .collect())
    }

    pub async fn create_bucket(&self, bucket: &str) -> Result<(), BrowseError> {
        check_bucket(bucket)?;
        // Asked first: S3's CreateBucket answers 200 for one's own bucket in us-east-1 and
        // resets its ACL, where kiln's API says the bucket is there (409) and changes nothing.
        let head = HeadBucketInput {
            bucket: bucket.to_string(),
            ..Default::default()
        };
        if self
            .call(head, http::Method::HEAD, |s3, r| s3.head_bucket(r))
            .await
            .is_ok()
        {
            return Err(BrowseError::Store(s3s::s3_error!(
                BucketAlreadyOwnedByYou,
                "Your previous request to create the named bucket succeeded and you already own it."
            )));
        }
        let input = CreateBucketInput {
            bucket: bucket.to_string(),
            ..Default::default()
        };
        self.call(input, http::Method::PUT, |s3, r| s3.create_bucket(r))
            .await?;
        Ok(())
    }

    /// Deletes an empty bucket.
    pub async fn delete_bucket(&self, bucket: &str) -> Result<(), BrowseError> {
        check_bucket(bucket)?;
        let input = DeleteBucketInput {
            bucket: bucket.to_string(),
            ..Default::default()
        };
        self.call(input, http::Method::DELETE, |s3, r| s3.delete_bucket(r))
            .await?;
        Ok(())
    }

    /// A page of a bucket's keys (ListObjectsV2).
    pub async fn list(&self, bucket: &str, request: ListRequest) -> Result<Listing, BrowseError> {
        check_bucket(bucket)?;
        let input = ListObjectsV2Input {
            bucket: bucket.to_string(),
            prefix: Some(request.prefix.clone()).filter(|p| !p.is_empty()),
            delimiter: Some(request.delimiter.clone()).filter(|d| !d.is_empty()),
            continuation_token: request.token.clone().filter(|t| !t.is_empty()),
            max_keys: Some(request.limit),
            ..Default::default()
        };
        let output = self
            .call(input, http::Method::GET, |s3, r| s3.list_objects_v2(r))
            .await?;
        Ok(Listing {
            bucket: bucket.to_string(),
            prefix: request.prefix,
            delimiter: request.delimiter,
            objects: output
                .contents
                .unwrap_or_default()
                .into_iter()
                .map(|o| ObjectEntry {
                    key: o.key.unwrap_or_default(),
                    size: o.size.unwrap_or(0),
                    last_modified: o.last_modified.map(text_time),
                    etag: o.e_tag.map(etag_text),
                    storage_class: o.storage_class.map(|c| c.as_str().to_string()),
                })
                .collect(),
            prefixes: output
                .common_prefixes
                .unwrap_or_default()
                .into_iter()
                .filter_map(|p| p.prefix)
                .collect(),
            next_token: output
                .next_continuation_token
                .filter(|_| output.is_truncated == Some(true)),
        })
    }

    /// The object's metadata and checksums.
    pub async fn details(&self, bucket: &str, key: &str) -> Result<ObjectDetails, BrowseError> {
        check_bucket(bucket)?;
        check_key(key)?;
        let input = HeadObjectInput {
            bucket: bucket.to_string(),
            key: key.to_string(),
            checksum_mode: Some(ChecksumMode::from_static(ChecksumMode::ENABLED)),
            ..Default::default()
        };
        let output = self
            .call(input, http::Method::HEAD, |s3, r| s3.head_object(r))
            .await?;
        let checksums = [
            ("CRC32", output.checksum_crc32),
            ("CRC32C", output.checksum_crc32c),
            ("CRC64NVME", output.checksum_crc64nvme),
            ("SHA1", output.checksum_sha1),
            ("SHA256", output.checksum_sha256),
        ];
        Ok(ObjectDetails {
            bucket: bucket.to_string(),
            key: key.to_string(),
            size: output.content_length.unwrap_or(0),
            content_type: output.content_type,
            etag: output.e_tag.map(etag_text),
            last_modified: output.last_modified.map(text_time),
            storage_class: output.storage_class.map(|c| c.as_str().to_string()),
            metadata: output.metadata.unwrap_or_default().into_iter().collect(),
            checksums: checksums
                .into_iter()
                .filter_map(|(name, value)| Some((name, value?)))
                .collect(),
            checksum_type: output.checksum_type.map(|t| t.as_str().to_string()),
            parts_count: output.parts_count,
            cache_control: output.cache_control,
            content_encoding: output.content_encoding,
            content_disposition: output.content_disposition,
            content_language: output.content_language,
        })
    }

    /// The object's body, streamed from the store.
    pub async fn download(&self, bucket: &str, key: &str) -> Result<Download, BrowseError> {
        check_bucket(bucket)?;
        check_key(key)?;
        let input = GetObjectInput {
            bucket: bucket.to_string(),
            key: key.to_string(),
            ..Default::default()
        };
        let output = self
            .call(input, http::Method::GET, |s3, r| s3.get_object(r))
            .await?;
        Ok(Download {
            size: output.content_length,
            etag: output.e_tag.map(etag_text),
            body: output.body,
        })
    }

    /// Writes an object from one body. `sha256` (base64), when the client gives it, is checked
    /// by the store against what arrived; the store keeps a SHA-256 either way.
    pub async fn put(
        &self,
        bucket: &str,
        key: &str,
        body: Bytes,
        content_type: Option<String>,
        sha256: Option<String>,
    ) -> Result<Written, BrowseError> {
        check_bucket(bucket)?;
        check_key(key)?;
        let input = PutObjectInput {
            bucket: bucket.to_string(),
            key: key.to_string(),
            content_length: Some(body.len() as i64),
            body: Some(StreamingBlob::from(s3s::Body::from(body))),
            content_type,
            checksum_algorithm: Some(ChecksumAlgorithm::from_static(ChecksumAlgorithm::SHA256)),
            checksum_sha256: sha256,
            ..Default::default()
        };
        let output = self
            .call(input, http::Method::PUT, |s3, r| s3.put_object(r))
            .await?;
        Ok(Written {
            etag: output.e_tag.map(etag_text),
            checksum_sha256: output.checksum_sha256,
        })
    }

    pub async fn delete(&self, bucket: &str, key: &str) -> Result<(), BrowseError> {
        check_bucket(bucket)?;
        check_key(key)?;
        let input = DeleteObjectInput {
            bucket: bucket.to_string(),
            key: key.to_string(),
            ..Default::default()
        };
        self.call(input, http::Method::DELETE, |s3, r| s3.delete_object(r))
            .await?;
        Ok(())
    }

    /// Starts a multipart upload whose parts carry SHA-256 checksums; its upload id.
    pub async fn start_upload(
        &self,
        bucket: &str,
        key: &str,
        content_type: Option<String>,
    ) -> Result<String, BrowseError> {
        check_bucket(bucket)?;
        check_key(key)?;
        let input = CreateMultipartUploadInput {
            bucket: bucket.to_string(),
            key: key.to_string(),
            content_type,
            checksum_algorithm: Some(ChecksumAlgorithm::from_static(ChecksumAlgorithm::SHA256)),
            ..Default::default()
        };
        let output = self
            .call(input, http::Method::POST, |s3, r| {
                s3.create_multipart_upload(r)
            })
            .await?;
        output.upload_id.ok_or_else(|| {
            BrowseError::Store(s3s::s3_error!(InternalError, "the store gave no upload id"))
        })
    }

    /// Writes part `part_number` (1 to 10,000) of an upload.
    pub async fn upload_part(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        part_number: i32,
        body: Bytes,
        sha256: Option<String>,
    ) -> Result<UploadedPart, BrowseError> {
        check_bucket(bucket)?;
        check_key(key)?;
        let input = UploadPartInput {
            bucket: bucket.to_string(),
            key: key.to_string(),
            upload_id: upload_id.to_string(),
            part_number,
            content_length: Some(body.len() as i64),
            body: Some(StreamingBlob::from(s3s::Body::from(body))),
            checksum_algorithm: Some(ChecksumAlgorithm::from_static(ChecksumAlgorithm::SHA256)),
            checksum_sha256: sha256,
            ..Default::default()
        };
        let output = self
            .call(input, http::Method::PUT, |s3, r| s3.upload_part(r))
            .await?;
        Ok(UploadedPart {
            part_number,
            etag: output.e_tag.map(etag_text).unwrap_or_default(),
            checksum_sha256: output.checksum_sha256,
        })
    }

    /// Completes an upload from its parts, in order.
    pub async fn complete_upload(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        parts: Vec<UploadedPart>,
    ) -> Result<Written, BrowseError> {
        check_bucket(bucket)?;
        check_key(key)?;
        let parts = parts
            .into_iter()
            .map(|p| CompletedPart {
                part_number: Some(p.part_number),
                e_tag: ETag::parse_http_header(p.etag.as_bytes()).ok(),
                checksum_sha256: p.checksum_sha256,
                ..Default::default()
            })
            .collect();
        let input = CompleteMultipartUploadInput {
            bucket: bucket.to_string(),
            key: key.to_string(),
            upload_id: upload_id.to_string(),
            multipart_upload: Some(CompletedMultipartUpload { parts: Some(parts) }),
            ..Default::default()
        };
        let output = self
            .call(input, http::Method::POST, |s3, r| {
                s3.complete_multipart_upload(r)
            })
            .await?;
        Ok(Written {
            etag: output.e_tag.map(etag_text),
            checksum_sha256: output.checksum_sha256,
        })
    }

    pub async fn abort_upload(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
    ) -> Result<(), BrowseError> {
        check_bucket(bucket)?;
        check_key(key)?;
        let input = AbortMultipartUploadInput {
            bucket: bucket.to_string(),
            key: key.to_string(),
            upload_id: upload_id.to_string(),
            ..Default::default()
        };
        self.call(input, http::Method::DELETE, |s3, r| {
            s3.abort_multipart_upload(r)
        })
        .await?;
        Ok(())
    }

    /// Where the store's listener is bound.
    pub fn listener(&self) -> SocketAddr {
        self.listener
    }

    /// A presigned GET of the object at `endpoint` (`http://HOST:PORT` of the store's
    /// listener, as the caller can reach it), valid for `lifetime`.
    pub async fn link(
        &self,
        bucket: &str,
        key: &str,
        lifetime: Duration,
        endpoint: &str,
    ) -> Result<Link, BrowseError> {
        check_bucket(bucket)?;
        check_key(key)?;
        let seconds = lifetime.as_secs();
        if !(1..=MAX_LINK_SECONDS).contains(&seconds) {
            return Err(BrowseError::LinkLifetime(seconds));
        }
        let client = super::sdk_keys::client(endpoint, &self.admin, &self.region);
        let presigning = aws_sdk_s3::presigning::PresigningConfig::expires_in(lifetime)
            .map_err(|e| BrowseError::Presign(e.to_string()))?;
        let request = client
            .get_object()
            .bucket(bucket)
            .key(super::sdk_keys::sdk_key(key))
            .presigned(presigning)
            .await
            .map_err(|e| {
                BrowseError::Presign(aws_sdk_s3::error::DisplayErrorContext(&e).to_string())
            })?;
        let expires = chrono::Utc::now() + chrono::Duration::seconds(seconds as i64);
        Ok(Link {
            url: request.uri().to_string(),
            expires: expires.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_keys_are_checked_before_the_store() {
        assert!(check_bucket("photos-2024").is_ok());
        for bad in ["", "ab", "Photos", "../x", "a_b", &"a".repeat(64)] {
            assert!(
                matches!(check_bucket(bad), Err(BrowseError::BucketName(_))),
                "{bad}"
            );
        }
        assert!(check_key("a").is_ok() && check_key(&"k".repeat(1024)).is_ok());
        assert!(check_key("").is_err() && check_key(&"k".repeat(1025)).is_err());
        // A key is data: anything else S3 takes is the store's to judge.
        assert!(check_key("../../etc/passwd").is_ok() && check_key("<img src=x>").is_ok());
    }
}
