//! The S3 side of the cache: [`CachedStore`], the `s3s::S3` that answers from memory, writes
//! through the journal, and passes the rest to the backing store once the keys it touches are
//! clean.

use std::sync::Arc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result};

use super::cost::Op;
use super::entries::{Hit, Meta, ObjectKey};
use super::{strip_reserved, ObjectCache, ObjectFeatures, MEDIA_METADATA};
use crate::objects::acl::Anonymous;
use crate::objects::conditions::{not_modified, precondition_failed, ReadConditions, Verdict};
use crate::objects::shared::{
    checksums_from, internal, now_ms, read_output, set_checksums, stored_class, wants_checksums,
};
use crate::objects::spans::{Covered, Read};

mod s3;
mod write;

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
        let kept = self
            .cache
            .entries()
            .end_miss(self.since, fetched, Instant::now());
        if kept {
            self.cache.metrics.admitted.inc();
        }
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
}
