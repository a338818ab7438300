//! The embedded store: contents as files under the data dir, metadata in SQLite.
//!
//! [`LocalStore`] implements s3s's [`S3`] trait for the operations kiln serves; s3s has already
//! parsed, authenticated and validated the request, so each operation here is a typed command.
//! Every blocking step (file I/O, SQLite with its fsyncs) runs on tokio's blocking pool.

mod buckets;
pub(crate) use buckets::{encodes_url, listed_object, max_keys};
mod files;
pub(crate) mod meta;
mod multipart;
mod objects;

use std::fmt::Display;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures_util::StreamExt;
use s3s::dto::*;
use s3s::{s3_error, S3Error, S3ErrorCode, S3Request, S3Response, S3Result, StdError, S3};

use self::files::{DataFiles, Writer, Written};
use self::meta::{Meta, WriteError};
use super::checksum::{verify_content_md5, Checksums, Declared};
use super::{Limits, ObjectStoreError};

pub struct LocalStore {
    meta: Arc<Meta>,
    files: Arc<DataFiles>,
    limits: Limits,
}

impl LocalStore {
    /// Opens (or creates) the store in `data_dir` and deletes what a crash left half-written.
    pub fn open(data_dir: &Path, limits: Limits) -> Result<Self, ObjectStoreError> {
        let root = data_dir.join("objects");
        let files = DataFiles::open(&root).map_err(|e| ObjectStoreError::Io(root.clone(), e))?;
        let db_path = data_dir.join("objects.db");
        let meta = Meta::open(&db_path)
            .map_err(|e| ObjectStoreError::Database(db_path.clone(), e.to_string()))?;
        let removed = files
            .collect_garbage(|id| meta.file_is_referenced(id).map_err(std::io::Error::other))
            .map_err(|e| ObjectStoreError::Io(root, e))?;
        if removed > 0 {
            tracing::info!(
                files = removed,
                "removed files of uploads that never completed"
            );
        }
        Ok(Self {
            meta: Arc::new(meta),
            files: Arc::new(files),
            limits,
        })
    }
}

impl LocalStore {
    /// The metadata database, for lookups of objects' features.
    pub fn meta(&self) -> Arc<Meta> {
        self.meta.clone()
    }

    /// Extracts an image's format and size from an object just committed, in the background,
    /// and stores them with it (OFC §5.1's media features). Reads 64 bytes of anything that is
    /// not an image.
    fn learn_media(&self, bucket: String, row: &meta::ObjectRow) {
        use std::io::Read;
        let (meta, files) = (self.meta.clone(), self.files.clone());
        let (key, file_id) = (row.key.clone(), row.file_id.clone());
        tokio::task::spawn_blocking(move || {
            let Ok(file) = files.open_file(&file_id) else {
                return; // replaced and removed already
            };
            let mut head = Vec::new();
            let mut reader = file.take(super::media::HEADER_BYTES as u64);
            if (&mut reader).take(64).read_to_end(&mut head).is_err()
                || imagesize::image_type(&head).is_err()
            {
                return;
            }
            if reader.read_to_end(&mut head).is_err() {
                return;
            }
            if let Some(media) = super::media::Media::of(&head) {
                if let Err(e) = meta.set_media(&bucket, &key, &file_id, &media.encode()) {
                    tracing::warn!(%bucket, %key, "media metadata not stored: {e}");
                }
            }
        });
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

/// S3's answer to a CopyObject onto its own source that changes nothing.
pub(crate) fn copy_to_itself() -> S3Error {
    s3_error!(
        InvalidRequest,
        "This copy request is illegal because it is trying to copy an object to itself without \
         changing the object's metadata, storage class, website redirect location or encryption \
         attributes."
    )
}

pub(crate) fn timestamp(ms: i64) -> Timestamp {
    Timestamp::from(UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64))
}

pub(crate) fn ms_of(ts: &Timestamp) -> i64 {
    (time::OffsetDateTime::from(ts.clone()).unix_timestamp_nanos() / 1_000_000) as i64
}

/// Runs blocking work (files, SQLite) off the async workers.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> S3Result<T> + Send + 'static,
) -> S3Result<T> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| internal("blocking task", e))?
}

/// An unexpected failure: logged in full, reported as S3's InternalError.
pub(crate) fn internal(what: &str, e: impl Display) -> S3Error {
    tracing::error!("object store: {what}: {e}");
    S3Error::with_message(
        S3ErrorCode::InternalError,
        "We encountered an internal error. Please try again.",
    )
}

fn write_error(e: WriteError) -> S3Error {
    match e {
        WriteError::NoSuchBucket => s3_error!(NoSuchBucket),
        WriteError::NoSuchKey => s3_error!(NoSuchKey),
        WriteError::NoSuchUpload => s3_error!(NoSuchUpload),
        WriteError::PreconditionFailed => s3_error!(
            PreconditionFailed,
            "At least one of the pre-conditions you specified did not hold"
        ),
        WriteError::Meta(e) => internal("metadata", e),
    }
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

/// What an upload request carries besides its body.
struct UploadBody {
    body: Option<StreamingBlob>,
    content_length: Option<i64>,
    content_md5: Option<String>,
    declared: Declared,
    trailers: Option<s3s::TrailingHeaders>,
}

impl LocalStore {
    /// Streams a request body into a temporary file and checks its length, Content-MD5 and
    /// checksums; nothing is published unless all of them hold.
    async fn receive(&self, mut upload: UploadBody, limit: u64) -> S3Result<Written> {
        let length = check_length(upload.content_length, limit)?;
        let mut writer: Writer = self.files.writer(&upload.declared.algorithms);
        let mut received = 0u64;
        if let Some(mut body) = upload.body.take() {
            while let Some(chunk) = body.next().await {
                let chunk: Bytes = chunk.map_err(|e| body_error(&e))?;
                received += chunk.len() as u64;
                if received > length {
                    return Err(incomplete_body());
                }
                writer
                    .write(chunk)
                    .await
                    .map_err(|e| internal("writing an upload", e))?;
            }
        }
        if received != length {
            return Err(incomplete_body());
        }
        let written = writer
            .finish()
            .await
            .map_err(|e| internal("finishing an upload", e))?;
        let checked = verify_content_md5(upload.content_md5.as_deref(), &written.md5)
            .and_then(|()| {
                let trailers = upload.trailers.as_ref().and_then(|t| t.take());
                upload.declared.add_trailer(trailers.as_ref())
            })
            .and_then(|()| upload.declared.verify(&written.checksums));
        if let Err(e) = checked {
            self.files.remove_tmp(&written.id);
            return Err(e);
        }
        Ok(written)
    }
}

/// The stored attributes from an input with S3's object attribute fields (PutObject,
/// CreateMultipartUpload, CopyObject with `REPLACE`).
macro_rules! object_attrs {
    ($input:expr) => {
        $crate::objects::local::meta::ObjectAttrs {
            // S3's default for objects stored without a type.
            content_type: Some(
                $input
                    .content_type
                    .unwrap_or_else(|| "binary/octet-stream".into()),
            ),
            content_encoding: $input.content_encoding,
            content_disposition: $input.content_disposition,
            content_language: $input.content_language,
            cache_control: $input.cache_control,
            expires_ms: $input.expires.as_ref().map($crate::objects::local::ms_of),
            website_redirect_location: $input.website_redirect_location,
            metadata: $input.metadata.unwrap_or_default().into_iter().collect(),
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
            $crate::objects::local::checksums_from(
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
        let attrs: &$crate::objects::local::meta::ObjectAttrs = $attrs;
        $out.content_type = attrs.content_type.clone();
        $out.content_encoding = attrs.content_encoding.clone();
        $out.content_disposition = attrs.content_disposition.clone();
        $out.content_language = attrs.content_language.clone();
        $out.cache_control = attrs.cache_control.clone();
        $out.expires = attrs.expires_ms.map($crate::objects::local::timestamp);
        $out.website_redirect_location = attrs.website_redirect_location.clone();
    }};
}
pub(crate) use set_attrs;

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

#[async_trait::async_trait]
impl S3 for LocalStore {
    async fn create_bucket(
        &self,
        req: S3Request<CreateBucketInput>,
    ) -> S3Result<S3Response<CreateBucketOutput>> {
        self.create_bucket_op(req).await
    }

    async fn head_bucket(
        &self,
        req: S3Request<HeadBucketInput>,
    ) -> S3Result<S3Response<HeadBucketOutput>> {
        self.head_bucket_op(req).await
    }

    async fn get_bucket_location(
        &self,
        req: S3Request<GetBucketLocationInput>,
    ) -> S3Result<S3Response<GetBucketLocationOutput>> {
        self.get_bucket_location_op(req).await
    }

    async fn delete_bucket(
        &self,
        req: S3Request<DeleteBucketInput>,
    ) -> S3Result<S3Response<DeleteBucketOutput>> {
        self.delete_bucket_op(req).await
    }

    async fn list_buckets(
        &self,
        req: S3Request<ListBucketsInput>,
    ) -> S3Result<S3Response<ListBucketsOutput>> {
        self.list_buckets_op(req).await
    }

    async fn list_objects_v2(
        &self,
        req: S3Request<ListObjectsV2Input>,
    ) -> S3Result<S3Response<ListObjectsV2Output>> {
        self.list_objects_v2_op(req).await
    }

    async fn list_objects(
        &self,
        req: S3Request<ListObjectsInput>,
    ) -> S3Result<S3Response<ListObjectsOutput>> {
        self.list_objects_v1_op(req).await
    }

    async fn put_object(
        &self,
        req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        self.put_object_op(req).await
    }

    async fn get_object(
        &self,
        req: S3Request<GetObjectInput>,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        self.get_object_op(req).await
    }

    async fn head_object(
        &self,
        req: S3Request<HeadObjectInput>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        self.head_object_op(req).await
    }

    async fn delete_object(
        &self,
        req: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        self.delete_object_op(req).await
    }

    async fn delete_objects(
        &self,
        req: S3Request<DeleteObjectsInput>,
    ) -> S3Result<S3Response<DeleteObjectsOutput>> {
        self.delete_objects_op(req).await
    }

    async fn copy_object(
        &self,
        req: S3Request<CopyObjectInput>,
    ) -> S3Result<S3Response<CopyObjectOutput>> {
        self.copy_object_op(req).await
    }

    async fn create_multipart_upload(
        &self,
        req: S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        self.create_multipart_upload_op(req).await
    }

    async fn upload_part(
        &self,
        req: S3Request<UploadPartInput>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        self.upload_part_op(req).await
    }

    async fn upload_part_copy(
        &self,
        req: S3Request<UploadPartCopyInput>,
    ) -> S3Result<S3Response<UploadPartCopyOutput>> {
        self.upload_part_copy_op(req).await
    }

    async fn list_parts(
        &self,
        req: S3Request<ListPartsInput>,
    ) -> S3Result<S3Response<ListPartsOutput>> {
        self.list_parts_op(req).await
    }

    async fn complete_multipart_upload(
        &self,
        req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        self.complete_multipart_upload_op(req).await
    }

    async fn abort_multipart_upload(
        &self,
        req: S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        self.abort_multipart_upload_op(req).await
    }
}
