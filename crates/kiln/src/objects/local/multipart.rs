//! Multipart uploads on the embedded store. Parts are stored like objects (one immutable file
//! each, a row in `parts`) until CompleteMultipartUpload concatenates them into the object's
//! file and swaps the rows in one transaction (`completion.rs`), or AbortMultipartUpload drops
//! them.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use s3s::dto::*;
use s3s::{s3_error, S3Error, S3Request, S3Response, S3Result};

use super::meta::{PartRow, UploadRow};
use super::{blocking, check_version_id, lookup, write_error, LocalStore, UploadBody};
use crate::objects::acl::requested_acl;
use crate::objects::checksum::{hex, Algorithm, BodyHasher, ChecksumKind};
use crate::objects::conditions::{ReadConditions, Verdict};
use crate::objects::shared::ObjectAttrs;
use crate::objects::shared::{
    check_length, check_storage_class, content_length, copy_source_span, declared, internal,
    now_ms, object_attrs, set_checksums, timestamp,
};

/// A new upload id: the time it began (ns, hex, rising within this process) and 96 random
/// bits. Ids sort in the order their uploads began, which is S3's order for a key's uploads in
/// ListMultipartUploads, and `upload-id-marker` compares ids.
fn new_upload_id() -> String {
    static LAST: AtomicU64 = AtomicU64::new(0);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let previous = LAST
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |last| {
            Some(now.max(last + 1))
        })
        .unwrap_or_default();
    let began = now.max(previous + 1);
    let random = uuid::Uuid::new_v4().simple().to_string();
    format!("{began:016x}{}", &random[..24])
}

/// S3's limits on parts.
pub(super) const MAX_PART_NUMBER: i32 = 10_000;
const MAX_PART_BYTES: u64 = 5 * 1024 * 1024 * 1024;
const MAX_PARTS_LISTED: i32 = 1000;

pub(super) fn no_such_upload() -> S3Error {
    s3_error!(
        NoSuchUpload,
        "The specified upload does not exist. The upload ID may be invalid, or the upload may have been aborted or completed."
    )
}

pub(super) fn invalid_part() -> S3Error {
    s3_error!(
        InvalidPart,
        "One or more of the specified parts could not be found. The part may not have been uploaded, or the specified entity tag may not have matched the part's entity tag."
    )
}

fn check_part_number(n: i32) -> S3Result<u32> {
    if (1..=MAX_PART_NUMBER).contains(&n) {
        Ok(n as u32)
    } else {
        Err(s3_error!(
            InvalidArgument,
            "Part number must be an integer between 1 and 10000, inclusive"
        ))
    }
}

pub(super) fn output_type(kind: Option<ChecksumKind>) -> Option<ChecksumType> {
    kind.map(|k| ChecksumType::from(k.name().to_string()))
}

impl LocalStore {
    pub(super) async fn upload_row(
        &self,
        upload_id: &str,
        bucket: &str,
        key: &str,
    ) -> S3Result<UploadRow> {
        let meta = self.meta.clone();
        let (id, b, k) = (upload_id.to_string(), bucket.to_string(), key.to_string());
        blocking(move || {
            meta.upload(&id, &b, &k)
                .map_err(|e| internal("metadata", e))
        })
        .await?
        .ok_or_else(no_such_upload)
    }

    pub(super) async fn create_multipart_upload_op(
        &self,
        req: S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        let input = req.input;
        check_storage_class(input.storage_class.as_ref())?;
        let acl = requested_acl!(input)?;
        let algorithm = match &input.checksum_algorithm {
            Some(a) => Some(Algorithm::parse(a.as_str()).ok_or_else(|| {
                s3_error!(
                    InvalidRequest,
                    "Checksum algorithm {} is not supported",
                    a.as_str()
                )
            })?),
            None => None,
        };
        let kind = match (algorithm, input.checksum_type.as_ref().map(|t| t.as_str())) {
            (None, None) => None,
            (None, Some(_)) => {
                return Err(s3_error!(
                    InvalidRequest,
                    "The x-amz-checksum-type header can only be used with the x-amz-checksum-algorithm header."
                ))
            }
            (Some(a), None) => Some(if a == Algorithm::Crc64Nvme {
                ChecksumKind::FullObject
            } else {
                ChecksumKind::Composite
            }),
            (Some(a), Some(t)) => {
                let kind = ChecksumKind::parse(t).ok_or_else(|| {
                    s3_error!(InvalidRequest, "Checksum type {t} is not supported")
                })?;
                let supported = match kind {
                    ChecksumKind::FullObject => a.supports_full_object(),
                    ChecksumKind::Composite => a != Algorithm::Crc64Nvme,
                };
                if !supported {
                    return Err(s3_error!(
                        InvalidRequest,
                        "The {} checksum type cannot be used with the {} algorithm.",
                        kind.name(),
                        a.name()
                    ));
                }
                Some(kind)
            }
        };
        let upload = UploadRow {
            upload_id: new_upload_id(),
            bucket: input.bucket,
            key: input.key,
            created_ms: now_ms(),
            attrs: ObjectAttrs {
                acl,
                ..object_attrs!(input)
            },
            algorithm,
            kind,
        };
        let meta = self.meta.clone();
        let stored = upload.clone();
        blocking(move || meta.create_upload(&stored).map_err(write_error)).await?;
        Ok(S3Response::new(CreateMultipartUploadOutput {
            bucket: Some(upload.bucket),
            key: Some(upload.key),
            upload_id: Some(upload.upload_id),
            checksum_algorithm: algorithm.map(|a| ChecksumAlgorithm::from(a.name().to_string())),
            checksum_type: output_type(kind),
            ..Default::default()
        }))
    }

    /// Publishes a part's file and records it, replacing an earlier upload of the same number.
    async fn commit_part(&self, upload_id: String, part: PartRow) -> S3Result<PartRow> {
        let (meta, files) = (self.meta.clone(), self.files.clone());
        blocking(move || {
            if let Err(e) = files.publish(&part.file_id) {
                files.remove_tmp(&part.file_id);
                return Err(internal("publishing a part file", e));
            }
            match meta.put_part(&upload_id, &part) {
                Ok(replaced) => {
                    files.remove(&replaced.into_iter().collect::<Vec<_>>());
                    Ok(part)
                }
                Err(e) => {
                    files.remove(std::slice::from_ref(&part.file_id));
                    Err(write_error(e))
                }
            }
        })
        .await
    }

    pub(super) async fn upload_part_op(
        &self,
        req: S3Request<UploadPartInput>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        let S3Request {
            input,
            headers,
            trailing_headers,
            ..
        } = req;
        let number = check_part_number(input.part_number)?;
        let length = content_length(input.content_length, &headers);
        let limit = MAX_PART_BYTES.min(self.limits.max_object_bytes);
        check_length(length, limit)?;
        let upload = self
            .upload_row(&input.upload_id, &input.bucket, &input.key)
            .await?;
        let mut declared = declared!(input, &headers)?;
        // The upload's algorithm is needed for the composite checksum even if the client
        // did not send it with this part.
        if let Some(a) = upload.algorithm {
            if !declared.algorithms.contains(&a) {
                declared.algorithms.push(a);
            }
        }
        let written = self
            .receive(
                UploadBody {
                    body: input.body,
                    content_length: length,
                    content_md5: input.content_md5,
                    declared,
                    trailers: trailing_headers,
                },
                limit,
            )
            .await?;
        let part = PartRow {
            number,
            file_id: written.id,
            size: written.size,
            etag: hex(&written.md5),
            modified_ms: now_ms(),
            checksums: written.checksums,
        };
        let part = self.commit_part(upload.upload_id, part).await?;
        let mut output = UploadPartOutput {
            e_tag: Some(ETag::Strong(part.etag.clone())),
            ..Default::default()
        };
        set_checksums!(output, &part.checksums);
        Ok(S3Response::new(output))
    }

    pub(super) async fn upload_part_copy_op(
        &self,
        req: S3Request<UploadPartCopyInput>,
    ) -> S3Result<S3Response<UploadPartCopyOutput>> {
        let input = req.input;
        let number = check_part_number(input.part_number)?;
        let upload = self
            .upload_row(&input.upload_id, &input.bucket, &input.key)
            .await?;
        let (source_bucket, source_key, source_version) = match input.copy_source {
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
        let conditions = ReadConditions {
            if_match: input.copy_source_if_match,
            if_none_match: input.copy_source_if_none_match,
            if_modified_since: input.copy_source_if_modified_since,
            if_unmodified_since: input.copy_source_if_unmodified_since,
        };
        check_version_id(source_version.as_deref())?;
        let range = input.copy_source_range.clone();
        let algorithms: Vec<Algorithm> = upload.algorithm.into_iter().collect();
        let (meta, files) = (self.meta.clone(), self.files.clone());
        let written = blocking(move || {
            for _ in 0..5 {
                let source = lookup(
                    &meta,
                    &source_bucket,
                    &source_key,
                    source_version.as_deref(),
                )?;
                if conditions.evaluate(&source.etag, source.modified_ms) != Verdict::Proceed {
                    return Err(s3_error!(PreconditionFailed));
                }
                let span = copy_source_span(range.as_deref(), source.size)?;
                if span.end - span.start > MAX_PART_BYTES {
                    return Err(s3_error!(InvalidArgument, "A part may be at most 5 GiB"));
                }
                let part = [(source.file_id, span.start, span.end - span.start)];
                match files.concat(&part, BodyHasher::new(&algorithms)) {
                    Ok(written) => return Ok(written),
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(internal("copying a part", e)),
                }
            }
            Err(internal("copying a part", "the source kept changing"))
        })
        .await?;
        let part = PartRow {
            number,
            file_id: written.id,
            size: written.size,
            etag: hex(&written.md5),
            modified_ms: now_ms(),
            checksums: written.checksums,
        };
        let part = self.commit_part(upload.upload_id, part).await?;
        let mut result = CopyPartResult {
            e_tag: Some(ETag::Strong(part.etag.clone())),
            last_modified: Some(timestamp(part.modified_ms)),
            ..Default::default()
        };
        set_checksums!(result, &part.checksums);
        Ok(S3Response::new(UploadPartCopyOutput {
            copy_part_result: Some(result),
            ..Default::default()
        }))
    }

    pub(super) async fn list_parts_op(
        &self,
        req: S3Request<ListPartsInput>,
    ) -> S3Result<S3Response<ListPartsOutput>> {
        let input = req.input;
        let upload = self
            .upload_row(&input.upload_id, &input.bucket, &input.key)
            .await?;
        let max_parts = input
            .max_parts
            .unwrap_or(MAX_PARTS_LISTED)
            .clamp(0, MAX_PARTS_LISTED);
        let after = input.part_number_marker.unwrap_or(0).max(0) as u32;
        let meta = self.meta.clone();
        let upload_id = upload.upload_id.clone();
        let mut parts = blocking(move || {
            meta.parts(&upload_id, after, max_parts as usize + 1)
                .map_err(|e| internal("metadata", e))
        })
        .await?;
        let truncated = parts.len() > max_parts as usize;
        parts.truncate(max_parts as usize);
        let next = parts.last().map(|p| p.number as i32);
        Ok(S3Response::new(ListPartsOutput {
            bucket: Some(upload.bucket),
            key: Some(upload.key),
            upload_id: Some(upload.upload_id),
            max_parts: Some(max_parts),
            part_number_marker: input.part_number_marker,
            next_part_number_marker: if truncated { next } else { None },
            is_truncated: Some(truncated),
            checksum_algorithm: upload
                .algorithm
                .map(|a| ChecksumAlgorithm::from(a.name().to_string())),
            checksum_type: output_type(upload.kind),
            parts: Some(
                parts
                    .into_iter()
                    .map(|p| {
                        let mut part = Part {
                            part_number: Some(p.number as i32),
                            e_tag: Some(ETag::Strong(p.etag)),
                            size: Some(p.size as i64),
                            last_modified: Some(timestamp(p.modified_ms)),
                            ..Default::default()
                        };
                        set_checksums!(part, &p.checksums);
                        part
                    })
                    .collect(),
            ),
            ..Default::default()
        }))
    }

    pub(super) async fn abort_multipart_upload_op(
        &self,
        req: S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        let input = req.input;
        let upload = self
            .upload_row(&input.upload_id, &input.bucket, &input.key)
            .await?;
        let (meta, files) = (self.meta.clone(), self.files.clone());
        blocking(move || match meta.abort_upload(&upload.upload_id) {
            Ok(Some(parts)) => {
                files.remove(&parts);
                Ok(())
            }
            Ok(None) => Err(no_such_upload()),
            Err(e) => Err(internal("metadata", e)),
        })
        .await?;
        Ok(S3Response::new(AbortMultipartUploadOutput::default()))
    }
}
