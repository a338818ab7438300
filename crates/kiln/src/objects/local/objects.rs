//! PutObject, GetObject, HeadObject, DeleteObject(s) and CopyObject on the embedded store.

use std::io;

use bytes::Bytes;
use s3s::dto::*;
use s3s::{s3_error, S3ErrorCode, S3Request, S3Response, S3Result};

use super::acls::{bucket_is_public, check_anonymous, hide_from_anonymous, is_anonymous};
use super::files::{read_all, stream_file};
use super::meta::versions::NULL_VERSION;
use super::meta::{ObjectAttrs, ObjectRow};
use super::{
    blocking, check_version_id, lookup, read_version, write_error, written_version, LocalStore,
    UploadBody,
};
use crate::objects::acl::requested_acl;
use crate::objects::checksum::{hex, ChecksumKind};
use crate::objects::conditions::{
    not_modified, precondition_failed, ReadConditions, Verdict, WriteCondition,
};
use crate::objects::shared::{
    check_length, check_self_copy, check_storage_class, checksum_type, content_length, declared,
    internal, now_ms, object_attrs, read_output, replaces_metadata, set_checksums, stored_class,
    timestamp, wants_checksums,
};
use crate::objects::spans::{Covered, Read};

/// Bodies up to this size are read in the same blocking step as the lookup.
const SMALL_OBJECT: u64 = 256 * 1024;
/// S3's limit on a single PUT.
const MAX_PUT_BYTES: u64 = 5 * 1024 * 1024 * 1024;
/// S3's limit on a CopyObject source.
const MAX_COPY_BYTES: u64 = 5 * 1024 * 1024 * 1024;
/// S3's limit on keys per DeleteObjects request.
const MAX_DELETE_KEYS: usize = 1000;
/// Times a read retries when the object was replaced between its lookup and opening its file.
const READ_ATTEMPTS: usize = 5;

enum Content {
    Bytes(Bytes),
    File(std::fs::File),
}

struct Fetched {
    row: ObjectRow,
    /// The version id the answer names.
    version: Option<String>,
    covered: Covered,
    content: Option<Content>,
}

fn etag(value: &str) -> ETag {
    ETag::Strong(value.to_string())
}

/// The sizes of a multipart object's parts, for a read by part number.
fn part_sizes(row: &ObjectRow, read: &Read) -> S3Result<Option<Vec<u64>>> {
    if !read.is_part() {
        return Ok(None);
    }
    match (&row.part_list, row.parts) {
        (Some(parts), _) => Ok(Some(parts.iter().map(|p| p.size).collect())),
        (None, Some(_)) => Err(s3_error!(
            NotImplemented,
            "This object was completed before kiln recorded its parts' sizes: read it by range"
        )),
        (None, None) => Ok(None),
    }
}

/// `x-amz-mp-parts-count`: a multipart object's number of parts, on reads by part number.
fn parts_count(row: &ObjectRow, read: &Read) -> Option<i32> {
    read.is_part()
        .then_some(row.parts)
        .flatten()
        .map(|n| n as i32)
}

/// A read of one part of a multipart object, with checksums asked for: that part's checksums
/// and the object's checksum type, as S3 answers them (a whole read has the object's own).
macro_rules! part_checksums {
    ($output:expr, $row:expr, $read:expr, $wants:expr) => {{
        let row: &ObjectRow = $row;
        if let (true, Read::Part(n)) = ($wants, $read) {
            let place = usize::try_from(*n).ok().and_then(|n| n.checked_sub(1));
            if let Some(part) = place.and_then(|i| row.part_list.as_ref()?.get(i)) {
                set_checksums!($output, &part.checksums);
                $output.checksum_type = checksum_type(&row.checksums);
            }
        }
    }};
}

impl LocalStore {
    pub(super) async fn put_object_op(
        &self,
        req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        let (bucket, row, condition) = self.receive_put(req).await?;
        let row = self.commit(bucket.clone(), row, condition).await?;
        self.learn_media(bucket, &row);
        let mut output = PutObjectOutput {
            e_tag: Some(etag(&row.etag)),
            version_id: written_version(&row.version_id),
            size: Some(row.size as i64),
            checksum_type: checksum_type(&row.checksums),
            ..Default::default()
        };
        set_checksums!(output, &row.checksums);
        Ok(S3Response::new(output))
    }

    /// A PutObject's checks and body, received into a file not yet published: its bucket,
    /// the row that commits it, and its precondition.
    pub(super) async fn receive_put(
        &self,
        req: S3Request<PutObjectInput>,
    ) -> S3Result<(String, ObjectRow, WriteCondition)> {
        let S3Request {
            input,
            headers,
            trailing_headers,
            ..
        } = req;
        if input.write_offset_bytes.is_some() {
            return Err(s3_error!(
                NotImplemented,
                "Appending to objects is not supported"
            ));
        }
        let condition =
            WriteCondition::from_headers(input.if_match.as_ref(), input.if_none_match.as_ref())
                .map_err(|m| s3_error!(InvalidRequest, "{m}"))?;
        check_storage_class(input.storage_class.as_ref())?;
        let acl = requested_acl!(input)?;
        let length = content_length(input.content_length, &headers);
        // Before anything that waits: a client holding its body for `100 Continue` gets the
        // refusal at once.
        check_length(length, MAX_PUT_BYTES.min(self.limits.max_object_bytes))?;
        let bucket = input.bucket;
        self.require_bucket(&bucket).await?;
        let declared = declared!(input, &headers)?;
        let attrs = ObjectAttrs {
            acl,
            ..object_attrs!(input)
        };
        let written = self
            .receive(
                UploadBody {
                    body: input.body,
                    content_length: length,
                    content_md5: input.content_md5,
                    declared,
                    trailers: trailing_headers,
                },
                MAX_PUT_BYTES.min(self.limits.max_object_bytes),
            )
            .await?;
        let mut checksums = written.checksums;
        if checksums.algorithms().next().is_some() {
            checksums.kind = Some(ChecksumKind::FullObject);
        }
        let row = ObjectRow {
            key: input.key,
            file_id: written.id,
            size: written.size,
            etag: hex(&written.md5),
            modified_ms: now_ms(),
            attrs,
            checksums,
            parts: None,
            part_list: None,
            version_id: NULL_VERSION.into(),
        };
        Ok((bucket, row, condition))
    }

    pub(super) async fn require_bucket(&self, bucket: &str) -> S3Result<()> {
        let meta = self.meta.clone();
        let name = bucket.to_string();
        let exists = blocking(move || {
            meta.bucket_exists(&name)
                .map_err(|e| internal("metadata", e))
        })
        .await?;
        if exists {
            Ok(())
        } else {
            Err(s3_error!(NoSuchBucket))
        }
    }

    /// Publishes a received file and commits its row; the row is the moment it becomes visible.
    pub(super) async fn commit(
        &self,
        bucket: String,
        row: ObjectRow,
        condition: WriteCondition,
    ) -> S3Result<ObjectRow> {
        let (meta, files) = (self.meta.clone(), self.files.clone());
        blocking(move || {
            if let Err(e) = files.publish(&row.file_id) {
                files.remove_tmp(&row.file_id);
                return Err(internal("publishing an object file", e));
            }
            match meta.put_object(&bucket, &row, &condition) {
                Ok(committed) => {
                    files.remove(&committed.freed);
                    Ok(ObjectRow {
                        version_id: committed.version_id,
                        ..row
                    })
                }
                Err(e) => {
                    files.remove(std::slice::from_ref(&row.file_id));
                    Err(write_error(e))
                }
            }
        })
        .await
    }

    /// Looks an object up, applies its preconditions, finds the bytes the read covers, and
    /// opens its contents; for an unsigned request (`anonymous`), only a `public-read` object.
    #[allow(clippy::too_many_arguments)]
    async fn fetch(
        &self,
        bucket: String,
        key: String,
        version: Option<String>,
        conditions: ReadConditions,
        read: Read,
        with_body: bool,
        anonymous: bool,
    ) -> S3Result<Fetched> {
        let (meta, files) = (self.meta.clone(), self.files.clone());
        blocking(move || {
            for _ in 0..READ_ATTEMPTS {
                let row = match lookup(&meta, &bucket, &key, version.as_deref()) {
                    Ok(row) => row,
                    // A bucket anyone may list tells anyone what is not in it (404).
                    Err(e)
                        if anonymous
                            && *e.code() == S3ErrorCode::NoSuchKey
                            && bucket_is_public(&meta, &bucket) =>
                    {
                        return Err(e)
                    }
                    Err(e) => return Err(hide_from_anonymous(anonymous, e)),
                };
                check_anonymous(anonymous, row.attrs.acl.as_deref())?;
                let shown = read_version(&meta, &bucket, &row)?;
                match conditions.evaluate(&row.etag, row.modified_ms) {
                    Verdict::Proceed => {}
                    Verdict::NotModified => return Err(not_modified(&row.etag, row.modified_ms)),
                    Verdict::PreconditionFailed => return Err(precondition_failed()),
                }
                let covered = read.cover(row.size, part_sizes(&row, &read)?.as_deref())?;
                if !with_body {
                    return Ok(Fetched {
                        row,
                        version: shown,
                        covered,
                        content: None,
                    });
                }
                let file = match files.open_file(&row.file_id) {
                    Ok(file) => file,
                    // Replaced (and unlinked) since the lookup: look again.
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(internal("opening an object file", e)),
                };
                let span = &covered.span;
                let len = span.end - span.start;
                let content = if len <= SMALL_OBJECT {
                    Content::Bytes(
                        read_all(file, span.start, len)
                            .map_err(|e| internal("reading an object file", e))?,
                    )
                } else {
                    Content::File(file)
                };
                return Ok(Fetched {
                    row,
                    version: shown,
                    covered,
                    content: Some(content),
                });
            }
            Err(internal(
                "reading an object",
                "it kept changing under the read",
            ))
        })
        .await
    }

    pub(super) async fn get_object_op(
        &self,
        req: S3Request<GetObjectInput>,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        let anonymous = is_anonymous(&req);
        let input = req.input;
        check_version_id(input.version_id.as_deref())?;
        let read = Read::of(input.range, input.part_number)?;
        let conditions = ReadConditions {
            if_match: input.if_match,
            if_none_match: input.if_none_match,
            if_modified_since: input.if_modified_since,
            if_unmodified_since: input.if_unmodified_since,
        };
        let Fetched {
            row,
            version,
            covered,
            content,
        } = self
            .fetch(
                input.bucket,
                input.key,
                input.version_id,
                conditions,
                read.clone(),
                true,
                anonymous,
            )
            .await?;
        let span = &covered.span;
        let len = span.end - span.start;
        let body = match content {
            Some(Content::Bytes(bytes)) => StreamingBlob::from(s3s::Body::from(bytes)),
            Some(Content::File(file)) => StreamingBlob::new(stream_file(file, span.start, len)),
            None => StreamingBlob::from(s3s::Body::from(Bytes::new())),
        };
        let wants = wants_checksums(input.checksum_mode.as_ref());
        let mut output = read_output!(GetObjectOutput, &row.stored(), &covered, wants);
        output.body = Some(body);
        output.version_id = version;
        output.parts_count = parts_count(&row, &read);
        part_checksums!(output, &row, &read, wants);
        Ok(S3Response::new(output))
    }

    pub(super) async fn head_object_op(
        &self,
        req: S3Request<HeadObjectInput>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        let anonymous = is_anonymous(&req);
        let input = req.input;
        check_version_id(input.version_id.as_deref())?;
        let read = Read::of(input.range, input.part_number)?;
        let conditions = ReadConditions {
            if_match: input.if_match,
            if_none_match: input.if_none_match,
            if_modified_since: input.if_modified_since,
            if_unmodified_since: input.if_unmodified_since,
        };
        let Fetched {
            row,
            version,
            covered,
            ..
        } = self
            .fetch(
                input.bucket,
                input.key,
                input.version_id,
                conditions,
                read.clone(),
                false,
                anonymous,
            )
            .await?;
        let wants = wants_checksums(input.checksum_mode.as_ref());
        let mut output = read_output!(HeadObjectOutput, &row.stored(), &covered, wants);
        output.version_id = version;
        output.parts_count = parts_count(&row, &read);
        part_checksums!(output, &row, &read, wants);
        Ok(S3Response::new(output))
    }

    pub(super) async fn delete_object_op(
        &self,
        req: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        let input = req.input;
        check_version_id(input.version_id.as_deref())?;
        let condition = WriteCondition::from_headers(input.if_match.as_ref(), None)
            .map_err(|m| s3_error!(InvalidRequest, "{m}"))?;
        let (meta, files) = (self.meta.clone(), self.files.clone());
        let deleted = blocking(move || {
            let deleted = meta
                .delete_object(
                    &input.bucket,
                    &input.key,
                    input.version_id.as_deref(),
                    &condition,
                )
                .map_err(write_error)?;
            files.remove(&deleted.freed);
            Ok(deleted)
        })
        .await?;
        Ok(S3Response::new(DeleteObjectOutput {
            delete_marker: deleted.marker.then_some(true),
            version_id: deleted.version_id,
            ..Default::default()
        }))
    }

    pub(super) async fn delete_objects_op(
        &self,
        req: S3Request<DeleteObjectsInput>,
    ) -> S3Result<S3Response<DeleteObjectsOutput>> {
        let input = req.input;
        let quiet = input.delete.quiet.unwrap_or(false);
        let objects: Vec<(String, Option<String>)> = input
            .delete
            .objects
            .into_iter()
            .map(|o| (o.key, o.version_id))
            .collect();
        if objects.len() > MAX_DELETE_KEYS {
            return Err(s3_error!(
                MalformedXML,
                "A DeleteObjects request may name at most {MAX_DELETE_KEYS} keys"
            ));
        }
        self.require_bucket(&input.bucket).await?;
        let (meta, files) = (self.meta.clone(), self.files.clone());
        let bucket = input.bucket;
        let (deleted, errors) = blocking(move || {
            let mut deleted = Vec::new();
            let mut errors = Vec::new();
            for (key, version) in objects {
                let result = check_version_id(version.as_deref()).and_then(|()| {
                    meta.delete_object(&bucket, &key, version.as_deref(), &WriteCondition::Always)
                        .map_err(write_error)
                });
                match result {
                    Ok(done) => {
                        files.remove(&done.freed);
                        let marker_id = done.marker.then(|| done.version_id.clone()).flatten();
                        deleted.push(DeletedObject {
                            key: Some(key),
                            version_id: version,
                            delete_marker: done.marker.then_some(true),
                            delete_marker_version_id: marker_id,
                        });
                    }
                    Err(e) => {
                        errors.push(Error {
                            code: Some(e.code().as_str().to_string()),
                            message: e.message().map(str::to_string),
                            key: Some(key),
                            version_id: version,
                        });
                    }
                }
            }
            Ok((deleted, errors))
        })
        .await?;
        Ok(S3Response::new(DeleteObjectsOutput {
            deleted: (!quiet).then_some(deleted),
            errors: (!errors.is_empty()).then_some(errors),
            ..Default::default()
        }))
    }

    pub(super) async fn copy_object_op(
        &self,
        req: S3Request<CopyObjectInput>,
    ) -> S3Result<S3Response<CopyObjectOutput>> {
        let input = req.input;
        let (source_bucket, source_key, source_version) = match &input.copy_source {
            CopySource::Bucket {
                bucket,
                key,
                version_id,
            } => (
                bucket.to_string(),
                key.to_string(),
                version_id.as_deref().map(str::to_string),
            ),
            _ => {
                return Err(s3_error!(
                    NotImplemented,
                    "Only bucket copy sources are supported"
                ))
            }
        };
        check_storage_class(input.storage_class.as_ref())?;
        // Neither the class nor the ACL is copied: the copy has the request's.
        let acl = requested_acl!(input)?;
        check_version_id(source_version.as_deref())?;
        check_self_copy(
            &input,
            source_bucket == input.bucket && source_key == input.key && source_version.is_none(),
        )?;
        let replace = replaces_metadata(input.metadata_directive.as_ref());
        let class = stored_class(input.storage_class.as_ref().map(|c| c.as_str()));
        let conditions = ReadConditions {
            if_match: input.copy_source_if_match,
            if_none_match: input.copy_source_if_none_match,
            if_modified_since: input.copy_source_if_modified_since,
            if_unmodified_since: input.copy_source_if_unmodified_since,
        };
        let new_attrs = replace.then(|| object_attrs!(input));
        let (meta, files) = (self.meta.clone(), self.files.clone());
        let (bucket, key) = (input.bucket, input.key);
        let destination = bucket.clone();
        let (row, source_version) = blocking(move || {
            for _ in 0..READ_ATTEMPTS {
                let source = copy_source(&meta, &source_bucket, &source_key, source_version.as_deref())?;
                let source_version = read_version(&meta, &source_bucket, &source)?;
                if conditions.evaluate(&source.etag, source.modified_ms) != Verdict::Proceed {
                    return Err(precondition_failed());
                }
                if source.size > MAX_COPY_BYTES {
                    return Err(s3_error!(
                        InvalidRequest,
                        "The specified copy source is larger than the maximum allowable size for a copy source: {MAX_COPY_BYTES}"
                    ));
                }
                let file_id = match files.link(&source.file_id) {
                    Ok(id) => id,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(internal("copying an object file", e)),
                };
                let row = ObjectRow {
                    key: key.clone(),
                    file_id,
                    modified_ms: now_ms(),
                    attrs: ObjectAttrs {
                        storage_class: class.clone(),
                        acl: acl.clone(),
                        ..new_attrs.clone().unwrap_or(source.attrs)
                    },
                    ..source
                };
                return match meta.put_object(&bucket, &row, &WriteCondition::Always) {
                    Ok(committed) => {
                        files.remove(&committed.freed);
                        let row = ObjectRow {
                            version_id: committed.version_id,
                            ..row
                        };
                        Ok((row, source_version))
                    }
                    Err(e) => {
                        files.remove(std::slice::from_ref(&row.file_id));
                        Err(write_error(e))
                    }
                };
            }
            Err(internal("copying an object", "the source kept changing"))
        })
        .await?;
        self.learn_media(destination, &row);
        let mut result = CopyObjectResult {
            e_tag: Some(etag(&row.etag)),
            last_modified: Some(timestamp(row.modified_ms)),
            checksum_type: checksum_type(&row.checksums),
            ..Default::default()
        };
        set_checksums!(result, &row.checksums);
        Ok(S3Response::new(CopyObjectOutput {
            copy_object_result: Some(result),
            version_id: written_version(&row.version_id),
            copy_source_version_id: source_version,
            ..Default::default()
        }))
    }
}

/// A copy's source: its current object or the version named; a delete marker named by its id
/// cannot be copied (S3's InvalidRequest).
fn copy_source(
    meta: &super::meta::Meta,
    bucket: &str,
    key: &str,
    version: Option<&str>,
) -> S3Result<ObjectRow> {
    lookup(meta, bucket, key, version).map_err(|e| {
        if *e.code() == s3s::S3ErrorCode::MethodNotAllowed {
            s3_error!(
                InvalidRequest,
                "The source of a copy request may not specifically refer to a delete marker by version id."
            )
        } else {
            e
        }
    })
}
