//! The embedded store: contents as files under the data dir, metadata in SQLite.
//!
//! [`LocalStore`] implements s3s's [`S3`] trait for the operations kiln serves; s3s has already
//! parsed, authenticated and validated the request, so each operation here is a typed command.
//! Every blocking step (file I/O, SQLite with its fsyncs) runs on tokio's blocking pool.

mod acls;
mod attributes;
mod batch;
mod buckets;
mod completion;
mod cors;
mod files;
pub(crate) mod meta;
mod multipart;
mod objects;
mod versions;

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::StreamExt;
use s3s::dto::*;
use s3s::{s3_error, S3Error, S3Request, S3Response, S3Result, S3};

use self::files::{DataFiles, Writer, Written};
use self::meta::{Lookup, Meta, MetaError, ObjectRow, WriteError};
use super::checksum::{verify_content_md5, Declared};
use super::shared::{body_error, check_length, incomplete_body, internal};
use super::{Limits, ObjectStoreError};

/// Cheap to clone: the handles are shared.
#[derive(Clone)]
pub struct LocalStore {
    meta: Arc<Meta>,
    files: Arc<DataFiles>,
    limits: Limits,
    /// The region the store answers for: in us-east-1, creating a bucket one owns again
    /// succeeds (S3's legacy behaviour) where elsewhere it is BucketAlreadyOwnedByYou.
    region: Arc<str>,
}

impl LocalStore {
    /// Opens (or creates) the store in `data_dir` and deletes what a crash left half-written.
    pub fn open(data_dir: &Path, limits: Limits, region: &str) -> Result<Self, ObjectStoreError> {
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
            region: Arc::from(region),
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

/// Runs blocking work (files, SQLite) off the async workers.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> S3Result<T> + Send + 'static,
) -> S3Result<T> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| internal("blocking task", e))?
}

/// The object a lookup found, or S3's error for what it did not. A delete marker is 404
/// NoSuchKey when it is the key's newest version, 405 MethodNotAllowed when it was asked for
/// by id; both say so in `x-amz-delete-marker` and name it in `x-amz-version-id`.
fn found(lookup: Result<Lookup, MetaError>) -> S3Result<ObjectRow> {
    match lookup {
        Ok(Lookup::Found(row)) => Ok(*row),
        Ok(Lookup::NoSuchKey) => Err(s3_error!(NoSuchKey)),
        Ok(Lookup::NoSuchBucket) => Err(s3_error!(NoSuchBucket)),
        Ok(Lookup::NoSuchVersion) => Err(s3_error!(
            NoSuchVersion,
            "The specified version does not exist."
        )),
        Ok(Lookup::DeleteMarker { version_id, .. }) => Err(delete_marker_error(&version_id)),
        Err(e) => Err(internal("metadata", e)),
    }
}

/// S3's answer to a read that found a delete marker.
fn delete_marker_error(version_id: &str) -> S3Error {
    let mut headers = http::HeaderMap::new();
    headers.insert(
        "x-amz-delete-marker",
        http::HeaderValue::from_static("true"),
    );
    if let Ok(id) = http::HeaderValue::from_str(version_id) {
        headers.insert("x-amz-version-id", id);
    }
    let mut error = s3_error!(NoSuchKey);
    error.set_headers(headers);
    error
}

/// An object or one version of it: the current object unless `version` names one.
fn lookup(meta: &Meta, bucket: &str, key: &str, version: Option<&str>) -> S3Result<ObjectRow> {
    match version {
        None => found(meta.object(bucket, key)),
        Some(id) => {
            check_version_id(Some(id))?;
            found(meta.object_version(bucket, key, id)).map_err(|mut e| {
                if e.headers()
                    .is_some_and(|h| h.contains_key("x-amz-delete-marker"))
                {
                    e.set_code(s3s::S3ErrorCode::MethodNotAllowed);
                    e.set_message("The specified method is not allowed against this resource.");
                    e.set_status_code(http::StatusCode::METHOD_NOT_ALLOWED);
                }
                e
            })
        }
    }
}

/// Refuses what cannot be a version id, as S3 does.
fn check_version_id(id: Option<&str>) -> S3Result<()> {
    match id {
        Some(id) if !meta::versions::is_version_id(id) => {
            Err(s3_error!(InvalidArgument, "Invalid version id specified"))
        }
        _ => Ok(()),
    }
}

/// The version id a write answers: its own, but none for a `null` version (as S3 answers a
/// write to a bucket without versioning).
fn written_version(id: &str) -> Option<String> {
    (id != meta::versions::NULL_VERSION).then(|| id.to_string())
}

/// The version id a read answers: the object's, and `null` only in a bucket whose versioning
/// was ever set.
fn read_version(meta: &Meta, bucket: &str, row: &ObjectRow) -> S3Result<Option<String>> {
    if row.version_id != meta::versions::NULL_VERSION {
        return Ok(Some(row.version_id.clone()));
    }
    let status = meta
        .versioning(bucket)
        .map_err(|e| internal("metadata", e))?;
    Ok(status
        .filter(|s| *s != meta::versions::Versioning::Unversioned)
        .map(|_| row.version_id.clone()))
}

fn write_error(e: WriteError) -> S3Error {
    match e {
        WriteError::NoSuchBucket => s3_error!(NoSuchBucket),
        WriteError::NoSuchKey => s3_error!(NoSuchKey),
        WriteError::NoSuchUpload => s3_error!(NoSuchUpload),
        WriteError::NoSuchVersion => {
            s3_error!(NoSuchVersion, "The specified version does not exist.")
        }
        WriteError::PreconditionFailed => s3_error!(
            PreconditionFailed,
            "At least one of the pre-conditions you specified did not hold"
        ),
        WriteError::Meta(e) => internal("metadata", e),
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

    async fn list_object_versions(
        &self,
        req: S3Request<ListObjectVersionsInput>,
    ) -> S3Result<S3Response<ListObjectVersionsOutput>> {
        self.list_object_versions_op(req).await
    }

    async fn put_object(
        &self,
        req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        self.check_anonymous_write(&req, &req.input.bucket).await?;
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

    async fn get_bucket_versioning(
        &self,
        req: S3Request<GetBucketVersioningInput>,
    ) -> S3Result<S3Response<GetBucketVersioningOutput>> {
        self.get_bucket_versioning_op(req).await
    }

    async fn put_bucket_versioning(
        &self,
        req: S3Request<PutBucketVersioningInput>,
    ) -> S3Result<S3Response<PutBucketVersioningOutput>> {
        self.put_bucket_versioning_op(req).await
    }

    async fn put_bucket_cors(
        &self,
        req: S3Request<PutBucketCorsInput>,
    ) -> S3Result<S3Response<PutBucketCorsOutput>> {
        self.put_bucket_cors_op(req).await
    }

    async fn get_bucket_cors(
        &self,
        req: S3Request<GetBucketCorsInput>,
    ) -> S3Result<S3Response<GetBucketCorsOutput>> {
        self.get_bucket_cors_op(req).await
    }

    async fn delete_bucket_cors(
        &self,
        req: S3Request<DeleteBucketCorsInput>,
    ) -> S3Result<S3Response<DeleteBucketCorsOutput>> {
        self.delete_bucket_cors_op(req).await
    }

    async fn get_bucket_acl(
        &self,
        req: S3Request<GetBucketAclInput>,
    ) -> S3Result<S3Response<GetBucketAclOutput>> {
        self.get_bucket_acl_op(req).await
    }

    async fn put_bucket_acl(
        &self,
        req: S3Request<PutBucketAclInput>,
    ) -> S3Result<S3Response<PutBucketAclOutput>> {
        self.put_bucket_acl_op(req).await
    }

    async fn get_object_acl(
        &self,
        req: S3Request<GetObjectAclInput>,
    ) -> S3Result<S3Response<GetObjectAclOutput>> {
        self.get_object_acl_op(req).await
    }

    async fn put_object_acl(
        &self,
        req: S3Request<PutObjectAclInput>,
    ) -> S3Result<S3Response<PutObjectAclOutput>> {
        self.put_object_acl_op(req).await
    }

    async fn get_object_attributes(
        &self,
        req: S3Request<GetObjectAttributesInput>,
    ) -> S3Result<S3Response<GetObjectAttributesOutput>> {
        self.get_object_attributes_op(req).await
    }

    async fn delete_object(
        &self,
        req: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        self.check_anonymous_write(&req, &req.input.bucket).await?;
        self.delete_object_op(req).await
    }

    async fn delete_objects(
        &self,
        req: S3Request<DeleteObjectsInput>,
    ) -> S3Result<S3Response<DeleteObjectsOutput>> {
        self.check_anonymous_write(&req, &req.input.bucket).await?;
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
        self.check_anonymous_write(&req, &req.input.bucket).await?;
        self.create_multipart_upload_op(req).await
    }

    async fn upload_part(
        &self,
        req: S3Request<UploadPartInput>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        self.check_anonymous_write(&req, &req.input.bucket).await?;
        self.upload_part_op(req).await
    }

    async fn upload_part_copy(
        &self,
        req: S3Request<UploadPartCopyInput>,
    ) -> S3Result<S3Response<UploadPartCopyOutput>> {
        self.upload_part_copy_op(req).await
    }

    async fn list_multipart_uploads(
        &self,
        req: S3Request<ListMultipartUploadsInput>,
    ) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
        self.list_multipart_uploads_op(req).await
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
        self.check_anonymous_write(&req, &req.input.bucket).await?;
        self.complete_multipart_upload_op(req).await
    }

    async fn abort_multipart_upload(
        &self,
        req: S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        self.check_anonymous_write(&req, &req.input.bucket).await?;
        self.abort_multipart_upload_op(req).await
    }
}
