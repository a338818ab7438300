//! The cache's write path: PutObject taken into memory and the journal, and copies from a
//! sequence's intermediate outputs, which never reach the backing store.

use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result};

use super::CachedStore;
use crate::function::{InvocationTags, StorageTag};
use crate::objects::cache::cost::Op;
use crate::objects::cache::entries::{self, Meta, ObjectKey};
use crate::objects::cache::{
    function_of, internal_request, invocation_admits, strip_reserved, ObjectCache,
};
use crate::objects::checksum::{hex, verify_content_md5, BodyHasher};
use crate::objects::conditions::{precondition_failed, ReadConditions, Verdict};
use crate::objects::shared::{
    body_error, check_length, check_self_copy, checksum_type, content_length, copy_source_span,
    declared, incomplete_body, internal, now_ms, object_attrs, replaces_metadata, set_checksums,
    stored_class, timestamp, ObjectAttrs,
};

/// A write the cache can take: none of encryption, locks, tags, ACLs, storage classes,
/// preconditions or appends (those go to the backing store, which implements or refuses them).
fn plain_write(input: &PutObjectInput) -> bool {
    input.if_match.is_none()
        && input.if_none_match.is_none()
        && input.write_offset_bytes.is_none()
        && input.sse_customer_algorithm.is_none()
        && input.server_side_encryption.is_none()
        && input.ssekms_key_id.is_none()
        && input.object_lock_mode.is_none()
        && input.object_lock_legal_hold_status.is_none()
        && input.object_lock_retain_until_date.is_none()
        && input.tagging.is_none()
        && input.acl.is_none()
        && input.grant_full_control.is_none()
        && input.grant_read.is_none()
        && input.grant_read_acp.is_none()
        && input.grant_write_acp.is_none()
        && input
            .storage_class
            .as_ref()
            .is_none_or(|c| c.as_str() == StorageClass::STANDARD)
}

impl CachedStore {
    /// PutObject; sets `backend` to what the write would have cost at the backing store when
    /// it did not go there (acknowledged by the cache).
    pub(super) async fn put(
        &self,
        mut req: S3Request<PutObjectInput>,
        function: Option<&str>,
        backend: &mut Option<u64>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        let cache = &self.cache;
        strip_reserved(&mut req.input.metadata);
        let key = ObjectKey::new(&req.input.bucket, &req.input.key);
        let length = content_length(req.input.content_length, &req.headers);
        let small = length.is_some_and(|n| n >= 0 && n as u64 <= cache.config.max_object_bytes);
        if !cache.admits(function, invocation_admits(&req))
            || !plain_write(&req.input)
            || cache.versioned(&key.bucket).await
            || !small
            || !cache.entries().could_hold(&key, length.unwrap_or(0) as u64)
        {
            let backend = &cache.backend;
            return cache
                .write_through(vec![key], backend.put_object(req))
                .await;
        }
        cache.require_bucket(&key.bucket).await?;
        let tag = storage_tag(&req);
        let S3Request {
            input,
            headers,
            trailing_headers,
            ..
        } = req;
        let length = check_length(length, cache.config.max_object_bytes)?;
        let mut declared = declared!(input, &headers)?;
        let mut hasher = BodyHasher::new(&declared.algorithms);
        let mut buf = BytesMut::with_capacity(length as usize);
        if let Some(mut body) = input.body {
            while let Some(chunk) = body.next().await {
                let chunk = chunk.map_err(|e| body_error(&e))?;
                if (buf.len() + chunk.len()) as u64 > length {
                    return Err(incomplete_body());
                }
                hasher.update(&chunk);
                buf.extend_from_slice(&chunk);
            }
        }
        if buf.len() as u64 != length {
            return Err(incomplete_body());
        }
        let (md5, computed) = hasher.finish();
        verify_content_md5(input.content_md5.as_deref(), &md5)?;
        let trailers = trailing_headers.as_ref().and_then(|t| t.take());
        declared.add_trailer(trailers.as_ref())?;
        declared.verify(&computed)?;
        let attrs = object_attrs!(input);
        let meta = Meta {
            etag: hex(&md5),
            modified_ms: now_ms(),
            size: length,
            attrs,
            checksums: computed,
        };
        let mut output = PutObjectOutput {
            e_tag: Some(ETag::Strong(meta.etag.clone())),
            size: Some(length as i64),
            checksum_type: checksum_type(&meta.checksums),
            ..Default::default()
        };
        set_checksums!(output, &meta.checksums);

        self.commit(key, buf.freeze(), meta, tag).await?;
        *backend = cache.costs().estimate(Op::Put, length);
        Ok(S3Response::new(output))
    }

    /// Makes a write visible, on a task of its own: once the journal has the version, the
    /// entry must follow, even if the client goes away meanwhile.
    pub(super) async fn commit(
        &self,
        key: ObjectKey,
        body: Bytes,
        meta: Meta,
        tag: Option<StorageTag>,
    ) -> S3Result<()> {
        let cache = &self.cache;
        let committing = cache.clone();
        let length = meta.size;
        let ephemeral =
            tokio::spawn(
                async move { committing.commit_write(key, body, meta, tag, length).await },
            )
            .await
            .map_err(|e| internal("the object cache", e))??;
        if ephemeral {
            cache.metrics.ephemeral_writes.inc();
        } else {
            cache.metrics.cached_writes.inc();
        }
        cache.refresh_gauges();
        Ok(())
    }

    /// CopyObject from a sequence's intermediate output, which only the cache holds: the copy
    /// is a PUT of its bytes, as the invocation behind the request would send it (another
    /// intermediate in an intermediate stage, a final output in the last; through to the
    /// backing store when the cache would not take such a PUT).
    pub(super) async fn copy_intermediate(
        &self,
        req: S3Request<CopyObjectInput>,
        source: ObjectKey,
        held: entries::Hit,
    ) -> S3Result<S3Response<CopyObjectOutput>> {
        let S3Request {
            input,
            uri,
            extensions,
            credentials,
            region,
            service,
            ..
        } = req;
        check_self_copy(&input, ObjectKey::new(&input.bucket, &input.key) == source)?;
        let replace = replaces_metadata(input.metadata_directive.as_ref());
        let conditions = ReadConditions {
            if_match: input.copy_source_if_match.clone(),
            if_none_match: input.copy_source_if_none_match.clone(),
            if_modified_since: input.copy_source_if_modified_since.clone(),
            if_unmodified_since: input.copy_source_if_unmodified_since.clone(),
        };
        if conditions.evaluate(&held.meta.etag, held.meta.modified_ms) != Verdict::Proceed {
            return Err(precondition_failed());
        }
        // The copy's storage class is the request's, whatever the source's.
        let class = stored_class(input.storage_class.as_ref().map(|c| c.as_str()));
        let attrs = ObjectAttrs {
            storage_class: class,
            ..if replace {
                object_attrs!(input)
            } else {
                held.meta.attrs.clone()
            }
        };
        let replace_tags = input
            .tagging_directive
            .as_ref()
            .is_some_and(|d| d.as_str() == TaggingDirective::REPLACE);
        let mut put = PutObjectInput {
            bucket: input.bucket,
            key: input.key,
            content_length: Some(held.body.len() as i64),
            body: Some(StreamingBlob::from(s3s::Body::from(held.body))),
            metadata: Some(attrs.metadata.clone().into_iter().collect()),
            // An intermediate has no tags of its own to copy.
            tagging: input.tagging.filter(|_| replace_tags),
            acl: input.acl,
            grant_full_control: input.grant_full_control,
            grant_read: input.grant_read,
            grant_read_acp: input.grant_read_acp,
            grant_write_acp: input.grant_write_acp,
            server_side_encryption: input.server_side_encryption,
            ssekms_key_id: input.ssekms_key_id,
            sse_customer_algorithm: input.sse_customer_algorithm,
            sse_customer_key: input.sse_customer_key,
            sse_customer_key_md5: input.sse_customer_key_md5,
            storage_class: input.storage_class,
            object_lock_mode: input.object_lock_mode,
            object_lock_legal_hold_status: input.object_lock_legal_hold_status,
            object_lock_retain_until_date: input.object_lock_retain_until_date,
            ..Default::default()
        };
        crate::objects::shared::set_attrs!(put, &attrs);
        set_checksums!(put, &held.meta.checksums);
        let put = S3Request {
            input: put,
            method: http::Method::PUT,
            uri,
            headers: http::HeaderMap::new(),
            extensions,
            credentials,
            region,
            service,
            trailing_headers: None,
        };
        let function = function_of(&put);
        let out = self.put(put, function.as_deref(), &mut None).await?.output;
        let mut result = CopyObjectResult {
            e_tag: out.e_tag,
            last_modified: Some(timestamp(now_ms())),
            checksum_type: out.checksum_type,
            ..Default::default()
        };
        set_checksums!(result, &held.meta.checksums);
        Ok(S3Response::new(CopyObjectOutput {
            copy_object_result: Some(result),
            server_side_encryption: out.server_side_encryption,
            ..Default::default()
        }))
    }
}

impl CachedStore {
    /// UploadPartCopy from a sequence's intermediate output: the part is uploaded with its
    /// bytes (a multipart upload is the backing store's; SDKs copy large objects this way).
    pub(super) async fn part_from_intermediate(
        &self,
        input: UploadPartCopyInput,
        held: entries::Hit,
    ) -> S3Result<S3Response<UploadPartCopyOutput>> {
        let conditions = ReadConditions {
            if_match: input.copy_source_if_match,
            if_none_match: input.copy_source_if_none_match,
            if_modified_since: input.copy_source_if_modified_since,
            if_unmodified_since: input.copy_source_if_unmodified_since,
        };
        if conditions.evaluate(&held.meta.etag, held.meta.modified_ms) != Verdict::Proceed {
            return Err(precondition_failed());
        }
        let span = copy_source_span(input.copy_source_range.as_deref(), held.body.len() as u64)?;
        let body = held.body.slice(span.start as usize..span.end as usize);
        let part = UploadPartInput {
            bucket: input.bucket,
            key: input.key,
            upload_id: input.upload_id,
            part_number: input.part_number,
            content_length: Some(body.len() as i64),
            body: Some(StreamingBlob::from(s3s::Body::from(body))),
            sse_customer_algorithm: input.sse_customer_algorithm,
            sse_customer_key: input.sse_customer_key,
            sse_customer_key_md5: input.sse_customer_key_md5,
            ..Default::default()
        };
        let mut request = internal_request(part);
        request.method = http::Method::PUT;
        let out = self.cache.backend.upload_part(request).await?.output;
        let mut result = CopyPartResult {
            e_tag: out.e_tag,
            last_modified: Some(timestamp(now_ms())),
            ..Default::default()
        };
        result.checksum_crc32 = out.checksum_crc32;
        result.checksum_crc32c = out.checksum_crc32c;
        result.checksum_crc64nvme = out.checksum_crc64nvme;
        result.checksum_sha1 = out.checksum_sha1;
        result.checksum_sha256 = out.checksum_sha256;
        Ok(S3Response::new(UploadPartCopyOutput {
            copy_part_result: Some(result),
            server_side_encryption: out.server_side_encryption,
            ..Default::default()
        }))
    }
}

/// The sequence stage of the invocation behind a request, if any.
fn storage_tag<T>(req: &S3Request<T>) -> Option<StorageTag> {
    req.extensions
        .get::<InvocationTags>()
        .and_then(|t| t.storage.clone())
}

/// The intermediate output a copy reads from, if that is what its source is.
pub(super) fn intermediate_source(
    cache: &ObjectCache,
    source: &CopySource,
) -> Option<(ObjectKey, entries::Hit)> {
    let CopySource::Bucket {
        bucket,
        key,
        version_id: None,
    } = source
    else {
        return None;
    };
    let key = ObjectKey::new(bucket.as_ref(), key.as_ref());
    let held = cache.entries().intermediate(&key)?;
    Some((key, held))
}
