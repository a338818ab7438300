//! [`CachedStore`] as the store's `s3s::S3`: each operation answered from the cache, taken
//! into it, or passed to the backing store once the keys it touches are clean.

use std::time::Instant;

use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result, S3};

use super::write::intermediate_source;
use super::{check_read, plain_read, unsigned, CachedStore};
use crate::objects::cache::entries::ObjectKey;
use crate::objects::cache::{function_of, invocation_admits, strip_reserved};
use crate::objects::conditions::ReadConditions;
use crate::objects::shared::{
    read_list_v1, read_list_v2, read_list_versions, read_output, wants_checksums,
};

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
        if unsigned(&req) {
            // The backing store's ACLs decide whether an unsigned write may be made: it goes
            // there, as the deletes and multipart uploads do.
            let key = ObjectKey::new(&req.input.bucket, &req.input.key);
            let backend = &self.cache.backend;
            return self
                .cache
                .write_through(vec![key], backend.put_object(req))
                .await;
        }
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
