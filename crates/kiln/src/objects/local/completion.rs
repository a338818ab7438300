//! CompleteMultipartUpload on the embedded store: the parts the request names are checked,
//! concatenated into the object's file and swapped for the upload in one transaction, which
//! also remembers the completion, so that a repeated request (a client whose first answer was
//! lost) gets the same answer.

use std::collections::HashMap;

use s3s::dto::*;
use s3s::{s3_error, S3ErrorCode, S3Request, S3Response, S3Result};

use super::files::Written;
use super::meta::versions::NULL_VERSION;
use super::meta::{CompletedUpload, ObjectRow, PartRow, StoredPart, UploadRow};
use super::multipart::{invalid_part, no_such_upload, output_type, MAX_PART_NUMBER};
use super::{blocking, write_error, written_version, LocalStore};
use crate::objects::checksum::{
    bad_digest, composite, multipart_etag, BodyHasher, ChecksumKind, Checksums,
};
use crate::objects::conditions::WriteCondition;
use crate::objects::shared::{checksums_from, entity_too_large, internal, now_ms, set_checksums};

/// S3's smallest part but the last.
const MIN_PART_BYTES: u64 = 5 * 1024 * 1024;

/// The stored parts a CompleteMultipartUpload names, in its order, if each exists with the
/// ETag and checksums it names.
fn choose_parts<'a>(
    requested: &[CompletedPart],
    stored: &'a HashMap<u32, PartRow>,
) -> S3Result<Vec<&'a PartRow>> {
    let mut chosen: Vec<&PartRow> = Vec::with_capacity(requested.len());
    for requested_part in requested {
        let number = requested_part.part_number.ok_or_else(invalid_part)?;
        if chosen.last().is_some_and(|p| p.number as i32 >= number) {
            return Err(s3_error!(
                InvalidPartOrder,
                "The list of parts was not in ascending order. Parts must be ordered by part number."
            ));
        }
        let part = stored
            .get(&(number.max(0) as u32))
            .ok_or_else(invalid_part)?;
        if requested_part
            .e_tag
            .as_ref()
            .is_some_and(|e| e.value() != part.etag)
        {
            return Err(invalid_part());
        }
        let sent = checksums_from(
            requested_part.checksum_crc32.clone(),
            requested_part.checksum_crc32c.clone(),
            requested_part.checksum_crc64nvme.clone(),
            requested_part.checksum_sha1.clone(),
            requested_part.checksum_sha256.clone(),
        );
        if sent
            .algorithms()
            .any(|a| sent.get(a) != part.checksums.get(a))
        {
            return Err(invalid_part());
        }
        chosen.push(part);
    }
    Ok(chosen)
}

/// Whether a repeated CompleteMultipartUpload names the parts the upload was completed with.
fn names_the_same_parts(requested: &[CompletedPart], completed: &CompletedUpload) -> bool {
    requested.len() == completed.parts.len()
        && requested
            .iter()
            .zip(&completed.parts)
            .all(|(asked, (number, etag))| {
                asked.part_number == Some(*number as i32)
                    && asked.e_tag.as_ref().is_none_or(|e| e.value() == etag)
            })
}

/// CompleteMultipartUpload's answer for an object.
fn completed_output(
    bucket: String,
    key: String,
    etag: &str,
    checksums: &Checksums,
) -> S3Response<CompleteMultipartUploadOutput> {
    let mut output = CompleteMultipartUploadOutput {
        location: Some(format!("/{bucket}/{key}")),
        bucket: Some(bucket),
        key: Some(key),
        e_tag: Some(ETag::Strong(etag.to_string())),
        checksum_type: output_type(checksums.kind),
        ..Default::default()
    };
    set_checksums!(output, checksums);
    S3Response::new(output)
}

/// S3's limits on a completed upload: every part but the last at least 5 MiB, the whole
/// within the store's limit and, if the client sent one, `x-amz-mp-object-size`.
fn check_sizes(chosen: &[&PartRow], limit: u64, declared: Option<i64>) -> S3Result<()> {
    let (last, rest) = chosen.split_last().expect("at least one part");
    if rest.iter().any(|p| p.size < MIN_PART_BYTES) {
        return Err(s3_error!(
            EntityTooSmall,
            "Your proposed upload is smaller than the minimum allowed size"
        ));
    }
    let total: u64 = rest.iter().map(|p| p.size).sum::<u64>() + last.size;
    if total > limit {
        return Err(entity_too_large(limit));
    }
    if declared.is_some_and(|s| s != total as i64) {
        return Err(s3_error!(
            InvalidRequest,
            "The provided x-amz-mp-object-size header does not match the size of the object"
        ));
    }
    Ok(())
}

/// The object's checksum: the full-object one computed while assembling, or the composite of
/// its parts'; checked against the one the client `sent`, if any.
fn object_checksums(
    upload: &UploadRow,
    chosen: &[&PartRow],
    written: &Written,
    sent: &Checksums,
) -> S3Result<Checksums> {
    let mut checksums = Checksums::default();
    let Some(algorithm) = upload.algorithm else {
        return Ok(checksums);
    };
    match upload.kind {
        Some(ChecksumKind::FullObject) => {
            checksums = written.checksums.only(algorithm);
            checksums.kind = Some(ChecksumKind::FullObject);
        }
        _ => {
            let values: Option<Vec<String>> = chosen
                .iter()
                .map(|p| p.checksums.get(algorithm).map(str::to_string))
                .collect();
            checksums.set(algorithm, values.and_then(|v| composite(algorithm, &v)));
            checksums.kind = Some(ChecksumKind::Composite);
        }
    }
    match sent.get(algorithm) {
        Some(expected) if Some(expected) != checksums.get(algorithm) => Err(bad_digest(algorithm)),
        _ => Ok(checksums),
    }
}

/// The object a completed upload becomes, and what is remembered of the completion.
fn completed_row(
    upload: &UploadRow,
    chosen: &[&PartRow],
    written: Written,
    checksums: Checksums,
) -> (ObjectRow, CompletedUpload) {
    let part_etags: Vec<String> = chosen.iter().map(|p| p.etag.clone()).collect();
    let row = ObjectRow {
        key: upload.key.clone(),
        file_id: written.id,
        size: written.size,
        etag: multipart_etag(&part_etags),
        modified_ms: now_ms(),
        attrs: upload.attrs.clone(),
        checksums,
        parts: Some(chosen.len() as u32),
        part_list: Some(
            chosen
                .iter()
                .map(|p| StoredPart {
                    number: p.number,
                    size: p.size,
                    checksums: p.checksums.clone(),
                })
                .collect(),
        ),
        version_id: NULL_VERSION.into(),
    };
    let completed = CompletedUpload {
        parts: chosen.iter().map(|p| (p.number, p.etag.clone())).collect(),
        etag: row.etag.clone(),
        checksums: row.checksums.clone(),
    };
    (row, completed)
}

impl LocalStore {
    pub(super) async fn complete_multipart_upload_op(
        &self,
        req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        let input = req.input;
        let condition =
            WriteCondition::from_headers(input.if_match.as_ref(), input.if_none_match.as_ref())
                .map_err(|m| s3_error!(InvalidRequest, "{m}"))?;
        let requested = input
            .multipart_upload
            .as_ref()
            .and_then(|m| m.parts.clone())
            .unwrap_or_default();
        if requested.is_empty() {
            return Err(s3_error!(
                MalformedXML,
                "You must specify at least one part"
            ));
        }
        let upload = match self
            .upload_row(&input.upload_id, &input.bucket, &input.key)
            .await
        {
            Ok(upload) => upload,
            Err(e) if *e.code() == S3ErrorCode::NoSuchUpload => {
                return self
                    .complete_again(input.upload_id, input.bucket, input.key, &requested)
                    .await;
            }
            Err(e) => return Err(e),
        };
        let stored = self.stored_parts(&upload.upload_id).await?;
        let chosen = choose_parts(&requested, &stored)?;
        check_sizes(&chosen, self.limits.max_object_bytes, input.mpu_object_size)?;
        let written = self.assemble(&upload, &chosen).await?;
        let sent = checksums_from(
            input.checksum_crc32,
            input.checksum_crc32c,
            input.checksum_crc64nvme,
            input.checksum_sha1,
            input.checksum_sha256,
        );
        let checksums = match object_checksums(&upload, &chosen, &written, &sent) {
            Ok(checksums) => checksums,
            Err(e) => {
                self.files.remove_tmp(&written.id);
                return Err(e);
            }
        };
        let (row, completed) = completed_row(&upload, &chosen, written, checksums);
        let row = self
            .commit_completed(&upload, row, completed, condition)
            .await?;
        self.learn_media(upload.bucket.clone(), &row);
        let mut output = completed_output(upload.bucket, upload.key, &row.etag, &row.checksums);
        output.output.version_id = written_version(&row.version_id);
        Ok(output)
    }

    /// An upload's parts, by number.
    async fn stored_parts(&self, upload_id: &str) -> S3Result<HashMap<u32, PartRow>> {
        let meta = self.meta.clone();
        let upload_id = upload_id.to_string();
        let parts = blocking(move || {
            meta.parts(&upload_id, 0, MAX_PART_NUMBER as usize)
                .map_err(|e| internal("metadata", e))
        })
        .await?;
        Ok(parts.into_iter().map(|p| (p.number, p)).collect())
    }

    /// Concatenates the chosen parts into a new file, computing the upload's full-object
    /// checksum on the way if it has one.
    async fn assemble(&self, upload: &UploadRow, chosen: &[&PartRow]) -> S3Result<Written> {
        let full_object = match (upload.algorithm, upload.kind) {
            (Some(a), Some(ChecksumKind::FullObject)) => vec![a],
            _ => Vec::new(),
        };
        let sources: Vec<(String, u64, u64)> = chosen
            .iter()
            .map(|p| (p.file_id.clone(), 0, p.size))
            .collect();
        let files = self.files.clone();
        blocking(move || {
            files
                .concat(&sources, BodyHasher::without_md5(&full_object))
                .map_err(|e| internal("assembling a multipart object", e))
        })
        .await
    }

    /// Publishes the assembled file and swaps the upload for the object in one transaction.
    async fn commit_completed(
        &self,
        upload: &UploadRow,
        row: ObjectRow,
        completed: CompletedUpload,
        condition: WriteCondition,
    ) -> S3Result<ObjectRow> {
        let (meta, files) = (self.meta.clone(), self.files.clone());
        let (bucket, upload_id) = (upload.bucket.clone(), upload.upload_id.clone());
        blocking(move || {
            if let Err(e) = files.publish(&row.file_id) {
                files.remove_tmp(&row.file_id);
                return Err(internal("publishing a multipart object", e));
            }
            match meta.complete_upload(&upload_id, &bucket, &row, &completed, &condition) {
                Ok((committed, parts)) => {
                    files.remove(&committed.freed.into_iter().chain(parts).collect::<Vec<_>>());
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

    /// A CompleteMultipartUpload of an upload that is no longer open: S3's answer again if it
    /// was completed with the same parts (a client whose first answer was lost retries).
    async fn complete_again(
        &self,
        upload_id: String,
        bucket: String,
        key: String,
        requested: &[CompletedPart],
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        let meta = self.meta.clone();
        let (b, k) = (bucket.clone(), key.clone());
        let completed = blocking(move || {
            meta.completed_upload(&upload_id, &b, &k)
                .map_err(|e| internal("metadata", e))
        })
        .await?
        .ok_or_else(no_such_upload)?;
        if !names_the_same_parts(requested, &completed) {
            return Err(invalid_part());
        }
        Ok(completed_output(
            bucket,
            key,
            &completed.etag,
            &completed.checksums,
        ))
    }
}
