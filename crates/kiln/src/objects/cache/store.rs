//! The S3 side of the cache: [`CachedStore`], the `s3s::S3` that answers from memory, writes
//! through the journal, and passes the rest to the backing store once the keys it touches are
//! clean.

use std::sync::Arc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result, S3};

use super::cost::Op;
use super::entries::{self, Hit, Meta, ObjectKey};
use super::{
    function_of, internal_request, invocation_admits, strip_reserved, ObjectCache, ObjectFeatures,
    MEDIA_METADATA,
};
use crate::function::{InvocationTags, StorageTag};
use crate::objects::acl::Anonymous;
use crate::objects::checksum::{hex, verify_content_md5, BodyHasher};
use crate::objects::conditions::{not_modified, precondition_failed, ReadConditions, Verdict};
use crate::objects::shared::{
    body_error, check_length, check_self_copy, checksum_type, checksums_from, content_length,
    copy_source_span, declared, incomplete_body, internal, now_ms, object_attrs, read_list_v1,
    read_list_v2, read_list_versions, read_output, replaces_metadata, set_checksums, stored_class,
    timestamp, wants_checksums, ObjectAttrs,
};
use crate::objects::spans::{Covered, Read};

/// A read the cache can answer: no version, part, or customer key.
fn plain_read(
    version_id: &Option<String>,
    part_number: &Option<i32>,
    sse_customer_algorithm: &Option<String>,
) -> bool {
    version_id.is_none() && part_number.is_none() && sse_customer_algorithm.is_none()
}

/// Whether a request came unsigned: the backing store decides what it may read (`public-read`),
/// so the cache answers it from nothing it holds.
fn unsigned<T>(req: &S3Request<T>) -> bool {
    req.extensions.get::<Anonymous>().is_some()
}

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

/// The cached form of what the backing store answered to a GET.
fn meta_of(output: &GetObjectOutput, size: u64) -> Meta {
    let mut metadata = output.metadata.clone();
    strip_reserved(&mut metadata);
    let mut checksums = checksums_from(
        output.checksum_crc32.clone(),
        output.checksum_crc32c.clone(),
        output.checksum_crc64nvme.clone(),
        output.checksum_sha1.clone(),
        output.checksum_sha256.clone(),
    );
    checksums.kind = output
        .checksum_type
        .as_ref()
        .and_then(|t| crate::objects::checksum::ChecksumKind::parse(t.as_str()));
    Meta {
        etag: output
            .e_tag
            .as_ref()
            .map(|e| e.value().to_string())
            .unwrap_or_default(),
        modified_ms: output
            .last_modified
            .as_ref()
            .map_or_else(now_ms, crate::objects::shared::ms_of),
        size,
        attrs: crate::objects::shared::ObjectAttrs {
            content_type: output.content_type.clone(),
            content_encoding: output.content_encoding.clone(),
            content_disposition: output.content_disposition.clone(),
            content_language: output.content_language.clone(),
            cache_control: output.cache_control.clone(),
            expires_ms: output.expires.as_ref().map(crate::objects::shared::ms_of),
            website_redirect_location: output.website_redirect_location.clone(),
            metadata: metadata.unwrap_or_default().into_iter().collect(),
            storage_class: stored_class(output.storage_class.as_ref().map(|c| c.as_str())),
            // A GET does not tell: the cache answers no ACL, nor an unsigned request.
            acl: None,
        },
        checksums,
    }
}

/// Applies a read's preconditions and range to cached metadata.
fn check_read(
    meta: &Meta,
    conditions: &ReadConditions,
    range: Option<&Range>,
) -> S3Result<Covered> {
    match conditions.evaluate(&meta.etag, meta.modified_ms) {
        Verdict::Proceed => {}
        Verdict::NotModified => return Err(not_modified(&meta.etag, meta.modified_ms)),
        Verdict::PreconditionFailed => return Err(precondition_failed()),
    }
    let read = range.map_or(Read::Whole, |r| Read::Range(*r));
    read.cover(meta.size, None)
}

fn answer_get(
    hit: Hit,
    conditions: &ReadConditions,
    range: Option<&Range>,
    wants: bool,
) -> S3Result<S3Response<GetObjectOutput>> {
    let covered = check_read(&hit.meta, conditions, range)?;
    let span = &covered.span;
    let body = hit.body.slice(span.start as usize..span.end as usize);
    let mut output = read_output!(GetObjectOutput, &hit.meta.stored(), &covered, wants);
    output.body = Some(StreamingBlob::from(s3s::Body::from(body)));
    Ok(S3Response::new(output))
}

/// Reads a response body of `size` bytes into memory.
async fn collect(body: Option<StreamingBlob>, size: u64) -> S3Result<Bytes> {
    let mut buf = BytesMut::with_capacity(size as usize);
    if let Some(mut body) = body {
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| internal("reading from the backing store", e))?;
            if (buf.len() + chunk.len()) as u64 > size {
                return Err(internal(
                    "reading from the backing store",
                    "the object is longer than its Content-Length",
                ));
            }
            buf.extend_from_slice(&chunk);
        }
    }
    if buf.len() as u64 != size {
        return Err(internal(
            "reading from the backing store",
            "the object is shorter than its Content-Length",
        ));
    }
    Ok(buf.freeze())
}

/// Ends a miss when dropped, so that a cancelled request does not leave it open.
struct Miss<'a> {
    cache: &'a ObjectCache,
    since: u64,
    open: bool,
}

impl<'a> Miss<'a> {
    fn begin(cache: &'a ObjectCache) -> Self {
        let since = cache.entries().begin_miss();
        Self {
            cache,
            since,
            open: true,
        }
    }

    fn end(mut self, fetched: Option<(ObjectKey, Bytes, Meta)>) {
        self.open = false;
        self.cache
            .entries()
            .end_miss(self.since, fetched, Instant::now());
        self.cache.refresh_gauges();
    }
}

impl Drop for Miss<'_> {
    fn drop(&mut self) {
        if self.open {
            self.cache
                .entries()
                .end_miss(self.since, None, Instant::now());
        }
    }
}

/// `s3s::S3` over a backend, with the cache in between.
#[derive(Clone)]
pub struct CachedStore {
    cache: Arc<ObjectCache>,
}

impl CachedStore {
    pub fn new(cache: Arc<ObjectCache>) -> Self {
        Self { cache }
    }
}

impl CachedStore {
    /// Learns what a whole object streamed through tells of it: its size and `kiln-media` from
    /// the headers, and when those say nothing of media, the image header in its first bytes as
    /// they pass. Before the reserved metadata is stripped.
    fn learn_passing(&self, key: &ObjectKey, output: &mut GetObjectOutput) {
        let cache = &self.cache;
        cache.learn_from_headers(key, output.content_length, output.metadata.as_ref());
        let Some(size) = output.content_length.and_then(|s| u64::try_from(s).ok()) else {
            return;
        };
        if !cache.wants_media(key) {
            return;
        }
        if let Some(body) = output.body.take() {
            let (cache, key) = (cache.clone(), key.clone());
            output.body = Some(StreamingBlob::new(super::peek::Peeked::new(
                body,
                size,
                move |media| cache.learn_media(&key, size, media),
            )));
        }
    }

    /// GetObject; sets `backend` to what the read would have cost at the backing store when
    /// it did not go there (a hit).
    async fn get(
        &self,
        mut req: S3Request<GetObjectInput>,
        admit: bool,
        backend: &mut Option<u64>,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        let cache = &self.cache;
        let input = &req.input;
        let key = ObjectKey::new(&input.bucket, &input.key);
        if !plain_read(
            &input.version_id,
            &input.part_number,
            &input.sse_customer_algorithm,
        ) || unsigned(&req)
            || cache.versioned(&input.bucket).await
        {
            cache.metrics.bypassed.inc();
            cache.until_clean(&key).await?;
            let mut out = cache.backend.get_object(req).await?;
            strip_reserved(&mut out.output.metadata);
            return Ok(out);
        }
        let conditions = ReadConditions {
            if_match: input.if_match.clone(),
            if_none_match: input.if_none_match.clone(),
            if_modified_since: input.if_modified_since.clone(),
            if_unmodified_since: input.if_unmodified_since.clone(),
        };
        let wants = wants_checksums(input.checksum_mode.as_ref());
        let range = input.range;
        let hit = cache.entries().get(&key, Instant::now());
        if let Some(hit) = hit {
            cache.metrics.hits.inc();
            *backend = cache.costs().estimate(Op::Get, hit.meta.size);
            return answer_get(hit, &conditions, range.as_ref(), wants);
        }
        // Not in memory, so not dirty: the backing store has the latest version.
        if range.is_some() || !admit {
            cache.metrics.bypassed.inc();
            let mut out = cache.backend.get_object(req).await?;
            if range.is_none() {
                self.learn_passing(&key, &mut out.output);
            }
            strip_reserved(&mut out.output.metadata);
            return Ok(out);
        }
        cache.metrics.misses.inc();
        let miss = Miss::begin(cache);
        // The whole object, unconditionally, with its checksums: the cache answers for it.
        let input = &mut req.input;
        input.if_match = None;
        input.if_none_match = None;
        input.if_modified_since = None;
        input.if_unmodified_since = None;
        input.checksum_mode = Some(ChecksumMode::from_static(ChecksumMode::ENABLED));
        let fetching = Instant::now();
        let mut out = cache.backend.get_object(req).await?;
        let size = out.output.content_length.unwrap_or(-1);
        let capacity = cache.usage().capacity;
        if size >= 0 && (size as u64) <= cache.config.max_object_bytes.min(capacity) {
            let size = size as u64;
            let media = out
                .output
                .metadata
                .as_ref()
                .and_then(|m| m.get(MEDIA_METADATA))
                .and_then(|v| crate::objects::media::Media::decode(v));
            let meta = meta_of(&out.output, size);
            let body = collect(out.output.body.take(), size).await?;
            cache
                .costs()
                .sample(Op::Get, size, fetching.elapsed().as_nanos() as u64);
            cache.learn_object(
                key.clone(),
                ObjectFeatures {
                    size,
                    media: media.or_else(|| crate::objects::media::Media::of(&body)),
                },
            );
            miss.end(Some((key, body.clone(), meta.clone())));
            return answer_get(
                Hit {
                    body,
                    meta: Arc::new(meta),
                },
                &conditions,
                None,
                wants,
            );
        }
        miss.end(None);
        // Too large to cache: streamed through, preconditions applied here.
        self.learn_passing(&key, &mut out.output);
        let meta = meta_of(&out.output, size.max(0) as u64);
        check_read(&meta, &conditions, None)?;
        strip_reserved(&mut out.output.metadata);
        if !wants {
            set_checksums!(out.output, &crate::objects::checksum::Checksums::default());
            out.output.checksum_type = None;
        }
        Ok(out)
    }

    /// PutObject; sets `backend` to what the write would have cost at the backing store when
    /// it did not go there (acknowledged by the cache).
    async fn put(
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
    async fn commit(
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
    async fn copy_intermediate(
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
    async fn part_from_intermediate(
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
fn intermediate_source(
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

#[async_trait::async_trait]
impl S3 for CachedStore {
    async fn head_bucket(
        &self,
        req: S3Request<HeadBucketInput>,
    ) -> S3Result<S3Response<HeadBucketOutput>> {
        self.cache.backend.head_bucket(req).await
    }

    async fn get_bucket_location(
        &self,
        req: S3Request<GetBucketLocationInput>,
    ) -> S3Result<S3Response<GetBucketLocationOutput>> {
        self.cache.backend.get_bucket_location(req).await
    }

    async fn list_buckets(
        &self,
        req: S3Request<ListBucketsInput>,
    ) -> S3Result<S3Response<ListBucketsOutput>> {
        self.cache.backend.list_buckets(req).await
    }

    async fn create_multipart_upload(
        &self,
        req: S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        self.cache.backend.create_multipart_upload(req).await
    }

    async fn upload_part(
        &self,
        req: S3Request<UploadPartInput>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        self.cache.backend.upload_part(req).await
    }

    async fn list_multipart_uploads(
        &self,
        req: S3Request<ListMultipartUploadsInput>,
    ) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
        self.cache.backend.list_multipart_uploads(req).await
    }

    async fn list_parts(
        &self,
        req: S3Request<ListPartsInput>,
    ) -> S3Result<S3Response<ListPartsOutput>> {
        self.cache.backend.list_parts(req).await
    }

    async fn abort_multipart_upload(
        &self,
        req: S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        self.cache.backend.abort_multipart_upload(req).await
    }

    async fn create_bucket(
        &self,
        req: S3Request<CreateBucketInput>,
    ) -> S3Result<S3Response<CreateBucketOutput>> {
        let bucket = req.input.bucket.clone();
        let out = self.cache.backend.create_bucket(req).await?;
        self.cache.remember_bucket(&bucket, true);
        Ok(out)
    }

    async fn delete_bucket(
        &self,
        req: S3Request<DeleteBucketInput>,
    ) -> S3Result<S3Response<DeleteBucketOutput>> {
        let bucket = req.input.bucket.clone();
        self.cache.until_bucket_settled(&bucket).await?;
        self.cache.sync_journal().await?;
        let out = self.cache.backend.delete_bucket(req).await?;
        self.cache.remember_bucket(&bucket, false);
        self.cache.remember_versioned(&bucket, None);
        self.cache.entries().invalidate_bucket(&bucket);
        self.cache.refresh_gauges();
        Ok(out)
    }

    async fn list_objects_v2(
        &self,
        mut req: S3Request<ListObjectsV2Input>,
    ) -> S3Result<S3Response<ListObjectsV2Output>> {
        let empty_token = read_list_v2(&mut req.input);
        self.cache.until_bucket_settled(&req.input.bucket).await?;
        let mut listed = if unsigned(&req) {
            self.cache.backend.list_objects_v2(req).await?
        } else {
            self.cache.list_objects_v2(req).await?
        };
        if empty_token && listed.output.continuation_token.is_none() {
            listed.output.continuation_token = Some(String::new());
        }
        Ok(listed)
    }

    async fn list_objects(
        &self,
        mut req: S3Request<ListObjectsInput>,
    ) -> S3Result<S3Response<ListObjectsOutput>> {
        read_list_v1(&mut req.input);
        self.cache.until_bucket_settled(&req.input.bucket).await?;
        if unsigned(&req) {
            return self.cache.backend.list_objects(req).await;
        }
        self.cache.list_objects(req).await
    }

    /// The backing store's listing, once the bucket's writes are there (a sequence's
    /// intermediates, held in memory only, are not versions of anything stored).
    async fn list_object_versions(
        &self,
        mut req: S3Request<ListObjectVersionsInput>,
    ) -> S3Result<S3Response<ListObjectVersionsOutput>> {
        read_list_versions(&mut req.input);
        self.cache.until_bucket_settled(&req.input.bucket).await?;
        self.cache.backend.list_object_versions(req).await
    }

    async fn get_object(
        &self,
        req: S3Request<GetObjectInput>,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        let function = function_of(&req);
        let admit = self
            .cache
            .admits(function.as_deref(), invocation_admits(&req));
        let started = Instant::now();
        let mut backend = None;
        let result = self.get(req, admit, &mut backend).await;
        if let Some(function) = function {
            let served = started.elapsed().as_nanos() as u64;
            self.cache
                .costs()
                .account(&function, served, backend.unwrap_or(served));
        }
        result
    }

    async fn head_object(
        &self,
        req: S3Request<HeadObjectInput>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        let cache = &self.cache;
        let input = &req.input;
        let key = ObjectKey::new(&input.bucket, &input.key);
        let plain = plain_read(
            &input.version_id,
            &input.part_number,
            &input.sse_customer_algorithm,
        ) && !unsigned(&req)
            && !cache.versioned(&input.bucket).await;
        let hit = if plain {
            cache.entries().get(&key, Instant::now())
        } else {
            cache.until_clean(&key).await?;
            None
        };
        if let Some(hit) = hit {
            cache.metrics.hits.inc();
            let conditions = ReadConditions {
                if_match: input.if_match.clone(),
                if_none_match: input.if_none_match.clone(),
                if_modified_since: input.if_modified_since.clone(),
                if_unmodified_since: input.if_unmodified_since.clone(),
            };
            let covered = check_read(&hit.meta, &conditions, input.range.as_ref())?;
            let wants = wants_checksums(input.checksum_mode.as_ref());
            let output = read_output!(HeadObjectOutput, &hit.meta.stored(), &covered, wants);
            return Ok(S3Response::new(output));
        }
        cache.metrics.bypassed.inc();
        let whole = plain && req.input.range.is_none();
        let mut out = cache.backend.head_object(req).await?;
        if whole {
            cache.learn_from_headers(
                &key,
                out.output.content_length,
                out.output.metadata.as_ref(),
            );
        }
        strip_reserved(&mut out.output.metadata);
        Ok(out)
    }

    /// The backing store's answer, once the key's writes are there: it alone knows an
    /// object's parts.
    async fn get_object_attributes(
        &self,
        req: S3Request<GetObjectAttributesInput>,
    ) -> S3Result<S3Response<GetObjectAttributesOutput>> {
        let key = ObjectKey::new(&req.input.bucket, &req.input.key);
        self.cache.metrics.bypassed.inc();
        self.cache.until_clean(&key).await?;
        self.cache.backend.get_object_attributes(req).await
    }

    async fn get_bucket_versioning(
        &self,
        req: S3Request<GetBucketVersioningInput>,
    ) -> S3Result<S3Response<GetBucketVersioningOutput>> {
        self.cache.backend.get_bucket_versioning(req).await
    }

    /// Once a bucket is versioned the cache holds none of its objects: its writes are settled
    /// first, what is held of it is dropped, and every later request on it goes to the store.
    async fn put_bucket_versioning(
        &self,
        req: S3Request<PutBucketVersioningInput>,
    ) -> S3Result<S3Response<PutBucketVersioningOutput>> {
        let bucket = req.input.bucket.clone();
        // From here on its writes go to the store, then what the cache acknowledged before
        // is written back.
        self.cache.remember_versioned(&bucket, Some(true));
        self.cache.until_bucket_settled(&bucket).await?;
        self.cache.sync_journal().await?;
        let answer = self.cache.backend.put_bucket_versioning(req).await;
        if answer.is_err() {
            self.cache.remember_versioned(&bucket, None);
        }
        self.cache.entries().invalidate_bucket(&bucket);
        self.cache.refresh_gauges();
        answer
    }

    async fn put_bucket_cors(
        &self,
        req: S3Request<PutBucketCorsInput>,
    ) -> S3Result<S3Response<PutBucketCorsOutput>> {
        self.cache.backend.put_bucket_cors(req).await
    }

    async fn get_bucket_cors(
        &self,
        req: S3Request<GetBucketCorsInput>,
    ) -> S3Result<S3Response<GetBucketCorsOutput>> {
        self.cache.backend.get_bucket_cors(req).await
    }

    async fn delete_bucket_cors(
        &self,
        req: S3Request<DeleteBucketCorsInput>,
    ) -> S3Result<S3Response<DeleteBucketCorsOutput>> {
        self.cache.backend.delete_bucket_cors(req).await
    }

    async fn get_bucket_acl(
        &self,
        req: S3Request<GetBucketAclInput>,
    ) -> S3Result<S3Response<GetBucketAclOutput>> {
        self.cache.backend.get_bucket_acl(req).await
    }

    async fn put_bucket_acl(
        &self,
        req: S3Request<PutBucketAclInput>,
    ) -> S3Result<S3Response<PutBucketAclOutput>> {
        self.cache.backend.put_bucket_acl(req).await
    }

    /// An object's ACL is the backing store's (the cache answers no ACL of its own).
    async fn get_object_acl(
        &self,
        req: S3Request<GetObjectAclInput>,
    ) -> S3Result<S3Response<GetObjectAclOutput>> {
        let key = ObjectKey::new(&req.input.bucket, &req.input.key);
        self.cache.until_clean(&key).await?;
        self.cache.backend.get_object_acl(req).await
    }

    async fn put_object_acl(
        &self,
        req: S3Request<PutObjectAclInput>,
    ) -> S3Result<S3Response<PutObjectAclOutput>> {
        let key = ObjectKey::new(&req.input.bucket, &req.input.key);
        let backend = &self.cache.backend;
        self.cache
            .write_through(vec![key], backend.put_object_acl(req))
            .await
    }

    async fn put_object(
        &self,
        req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        let function = function_of(&req);
        let started = Instant::now();
        let mut backend = None;
        let result = self.put(req, function.as_deref(), &mut backend).await;
        if let Some(function) = function {
            let served = started.elapsed().as_nanos() as u64;
            self.cache
                .costs()
                .account(&function, served, backend.unwrap_or(served));
        }
        result
    }

    async fn delete_object(
        &self,
        req: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        let key = ObjectKey::new(&req.input.bucket, &req.input.key);
        let backend = &self.cache.backend;
        self.cache
            .write_through(vec![key], backend.delete_object(req))
            .await
    }

    async fn delete_objects(
        &self,
        req: S3Request<DeleteObjectsInput>,
    ) -> S3Result<S3Response<DeleteObjectsOutput>> {
        let keys = req
            .input
            .delete
            .objects
            .iter()
            .map(|o| ObjectKey::new(&req.input.bucket, &o.key))
            .collect();
        let backend = &self.cache.backend;
        self.cache
            .write_through(keys, backend.delete_objects(req))
            .await
    }

    async fn copy_object(
        &self,
        req: S3Request<CopyObjectInput>,
    ) -> S3Result<S3Response<CopyObjectOutput>> {
        if let Some((source, held)) = intermediate_source(&self.cache, &req.input.copy_source) {
            return self.copy_intermediate(req, source, held).await;
        }
        if let CopySource::Bucket { bucket, key, .. } = &req.input.copy_source {
            self.cache
                .until_clean(&ObjectKey::new(bucket.as_ref(), key.as_ref()))
                .await?;
        }
        let key = ObjectKey::new(&req.input.bucket, &req.input.key);
        let backend = &self.cache.backend;
        self.cache
            .write_through(vec![key], backend.copy_object(req))
            .await
    }

    async fn upload_part_copy(
        &self,
        req: S3Request<UploadPartCopyInput>,
    ) -> S3Result<S3Response<UploadPartCopyOutput>> {
        if let Some((_, held)) = intermediate_source(&self.cache, &req.input.copy_source) {
            return self.part_from_intermediate(req.input, held).await;
        }
        if let CopySource::Bucket { bucket, key, .. } = &req.input.copy_source {
            self.cache
                .until_clean(&ObjectKey::new(bucket.as_ref(), key.as_ref()))
                .await?;
        }
        self.cache.backend.upload_part_copy(req).await
    }

    async fn complete_multipart_upload(
        &self,
        req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        let key = ObjectKey::new(&req.input.bucket, &req.input.key);
        let backend = &self.cache.backend;
        self.cache
            .write_through(vec![key], backend.complete_multipart_upload(req))
            .await
    }
}
