//! [`NotifyingStore`]: the `s3s::S3` in front of the store the listeners serve (the object
//! cache, or the backend, local or remote). It answers Put/GetBucketNotificationConfiguration
//! itself, and once a write has been acknowledged by the store behind it, queues the event of
//! each matching configuration before the write's answer leaves. Every write of every backend
//! passes here, so none is missed.

use std::sync::Arc;

use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result, S3};

use super::config::{self, EventKind};
use super::event::{Change, Origin};
use super::Notifier;
use crate::objects::cache::internal_request;
use crate::objects::shared::internal;

/// The store behind, with notifications.
#[derive(Clone)]
pub struct NotifyingStore {
    inner: Arc<dyn S3>,
    notifier: Arc<Notifier>,
}

impl NotifyingStore {
    pub fn new(inner: Arc<dyn S3>, notifier: Arc<Notifier>) -> Self {
        Self { inner, notifier }
    }

    /// An object's size and ETag, for the record of a write whose answer does not tell them.
    async fn size_and_etag(
        &self,
        bucket: &str,
        key: &str,
        version_id: Option<&str>,
    ) -> (Option<u64>, Option<String>) {
        let input = HeadObjectInput {
            bucket: bucket.to_string(),
            key: key.to_string(),
            version_id: version_id.filter(|v| *v != "null").map(str::to_string),
            ..Default::default()
        };
        match self.inner.head_object(internal_request(input)).await {
            Ok(found) => (
                found.output.content_length.map(|n| n.max(0) as u64),
                found.output.e_tag.map(|e| e.value().to_string()),
            ),
            Err(e) => {
                tracing::warn!(%bucket, %key, "the event of a write has no size: {e}");
                (None, None)
            }
        }
    }

    /// Queues the events `rules` send for an object creation, its size and ETag asked of the
    /// store when the write's answer did not tell them.
    async fn created(
        &self,
        rules: &[config::FunctionRule],
        bucket: &str,
        mut change: Change,
        who: (String, Origin),
    ) {
        if change.size.is_none() || change.etag.is_none() {
            let (size, etag) = self
                .size_and_etag(bucket, &change.key, change.version_id.as_deref())
                .await;
            change.size = change.size.or(size);
            change.etag = change.etag.or(etag);
        }
        self.notifier.send(bucket, rules, &change, &who.0, who.1);
    }
}

/// Who signed a request (their access key) and where it came from.
fn who<T>(req: &S3Request<T>) -> (String, Origin) {
    let principal = req
        .credentials
        .as_ref()
        .map_or_else(|| "Anonymous".to_string(), |c| c.access_key.clone());
    let origin = req
        .extensions
        .get::<Origin>()
        .copied()
        .unwrap_or_else(Origin::internal);
    (principal, origin)
}

/// The event kind of a deletion: a delete marker created (a versioned bucket, no version named)
/// or a deletion.
fn removal(marker: Option<bool>, version_named: bool) -> EventKind {
    if marker == Some(true) && !version_named {
        EventKind::DeleteMarkerCreated
    } else {
        EventKind::Delete
    }
}

/// The `S3` impl: the operations written out, and those that write nothing passed through to
/// the store behind (`async_trait` must see every method, so the macro writes the whole impl).
macro_rules! notifying_s3 {
    (
        { $($written:tt)* }
        pass { $($op:ident($input:ty) -> $output:ty;)* }
    ) => {
        #[async_trait::async_trait]
        impl S3 for NotifyingStore {
            $($written)*
            $(
                async fn $op(&self, req: S3Request<$input>) -> S3Result<S3Response<$output>> {
                    self.inner.$op(req).await
                }
            )*
        }
    };
}

notifying_s3! {
{
    async fn create_bucket(
        &self,
        req: S3Request<CreateBucketInput>,
    ) -> S3Result<S3Response<CreateBucketOutput>> {
        let bucket = req.input.bucket.clone();
        let created = self.inner.create_bucket(req).await?;
        // A new bucket starts without rules, whatever an earlier one of its name had.
        self.notifier.forget(&bucket).await?;
        Ok(created)
    }

    async fn delete_bucket(
        &self,
        req: S3Request<DeleteBucketInput>,
    ) -> S3Result<S3Response<DeleteBucketOutput>> {
        let bucket = req.input.bucket.clone();
        let deleted = self.inner.delete_bucket(req).await?;
        self.notifier.forget(&bucket).await?;
        Ok(deleted)
    }

    async fn put_bucket_notification_configuration(
        &self,
        req: S3Request<PutBucketNotificationConfigurationInput>,
    ) -> S3Result<S3Response<PutBucketNotificationConfigurationOutput>> {
        let input = req.input;
        let rules = config::rules_of(input.notification_configuration)?;
        let exists = HeadBucketInput {
            bucket: input.bucket.clone(),
            ..Default::default()
        };
        self.inner.head_bucket(internal_request(exists)).await?;
        if input.skip_destination_validation != Some(true) {
            let unknown: Vec<&str> = rules
                .iter()
                .filter(|r| self.notifier.target(&r.function_arn).is_none())
                .map(|r| r.function_arn.as_str())
                .collect();
            if !unknown.is_empty() {
                return Err(s3_error!(
                    InvalidArgument,
                    "Unable to validate the following destination configurations: {} (no such function)",
                    unknown.join(", ")
                ));
            }
        }
        self.notifier.set(&input.bucket, rules).await?;
        Ok(S3Response::new(PutBucketNotificationConfigurationOutput {}))
    }

    async fn get_bucket_notification_configuration(
        &self,
        req: S3Request<GetBucketNotificationConfigurationInput>,
    ) -> S3Result<S3Response<GetBucketNotificationConfigurationOutput>> {
        let exists = HeadBucketInput {
            bucket: req.input.bucket.clone(),
            ..Default::default()
        };
        self.inner.head_bucket(internal_request(exists)).await?;
        let rules = self.notifier.rules(&req.input.bucket);
        let functions = rules.as_deref().map(config::to_dto).unwrap_or_default();
        Ok(S3Response::new(GetBucketNotificationConfigurationOutput {
            lambda_function_configurations: (!functions.is_empty()).then_some(functions),
            ..Default::default()
        }))
    }

    async fn put_object(
        &self,
        req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        // A browser's form upload arrives here too (s3s's PostObject calls PutObject).
        let kind = if req.method == http::Method::POST {
            EventKind::Post
        } else {
            EventKind::Put
        };
        let Some(rules) = self.notifier.sending(&req.input.bucket, &req.input.key, &[kind]) else {
            return self.inner.put_object(req).await;
        };
        let (bucket, key, length) = (
            req.input.bucket.clone(),
            req.input.key.clone(),
            req.input.content_length,
        );
        let who = who(&req);
        let answer = self.inner.put_object(req).await?;
        let out = &answer.output;
        let change = Change {
            kind,
            key,
            size: out.size.or(length).map(|n| n.max(0) as u64),
            etag: out.e_tag.as_ref().map(|e| e.value().to_string()),
            version_id: out.version_id.clone(),
        };
        self.created(&rules, &bucket, change, who).await;
        Ok(answer)
    }

    async fn copy_object(
        &self,
        req: S3Request<CopyObjectInput>,
    ) -> S3Result<S3Response<CopyObjectOutput>> {
        let Some(rules) = self.notifier.sending(&req.input.bucket, &req.input.key, &[EventKind::Copy])
        else {
            return self.inner.copy_object(req).await;
        };
        let (bucket, key) = (req.input.bucket.clone(), req.input.key.clone());
        let who = who(&req);
        let answer = self.inner.copy_object(req).await?;
        let out = &answer.output;
        let change = Change {
            kind: EventKind::Copy,
            key,
            size: None,
            etag: out
                .copy_object_result
                .as_ref()
                .and_then(|r| r.e_tag.as_ref())
                .map(|e| e.value().to_string()),
            version_id: out.version_id.clone(),
        };
        self.created(&rules, &bucket, change, who).await;
        Ok(answer)
    }

    async fn complete_multipart_upload(
        &self,
        req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        let kind = EventKind::CompleteMultipartUpload;
        let Some(rules) = self.notifier.sending(&req.input.bucket, &req.input.key, &[kind]) else {
            return self.inner.complete_multipart_upload(req).await;
        };
        let (bucket, key) = (req.input.bucket.clone(), req.input.key.clone());
        let who = who(&req);
        let answer = self.inner.complete_multipart_upload(req).await?;
        let out = &answer.output;
        let change = Change {
            kind,
            key,
            size: None,
            etag: out.e_tag.as_ref().map(|e| e.value().to_string()),
            version_id: out.version_id.clone(),
        };
        self.created(&rules, &bucket, change, who).await;
        Ok(answer)
    }

    async fn delete_object(
        &self,
        req: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        let kinds = [EventKind::Delete, EventKind::DeleteMarkerCreated];
        let Some(rules) = self.notifier.sending(&req.input.bucket, &req.input.key, &kinds) else {
            return self.inner.delete_object(req).await;
        };
        let (bucket, key) = (req.input.bucket.clone(), req.input.key.clone());
        let version_named = req.input.version_id.is_some();
        let who = who(&req);
        let answer = self.inner.delete_object(req).await?;
        let change = Change {
            kind: removal(answer.output.delete_marker, version_named),
            key,
            size: None,
            etag: None,
            version_id: answer.output.version_id.clone(),
        };
        self.notifier.send(&bucket, &rules, &change, &who.0, who.1);
        Ok(answer)
    }

    async fn delete_objects(
        &self,
        req: S3Request<DeleteObjectsInput>,
    ) -> S3Result<S3Response<DeleteObjectsOutput>> {
        let Some(rules) = self.notifier.rules(&req.input.bucket) else {
            return self.inner.delete_objects(req).await;
        };
        let bucket = req.input.bucket.clone();
        // Which keys named a version: their deletion is never a new delete marker.
        let versioned: std::collections::HashSet<String> = req
            .input
            .delete
            .objects
            .iter()
            .filter(|o| o.version_id.is_some())
            .map(|o| o.key.clone())
            .collect();
        let who = who(&req);
        let answer = self.inner.delete_objects(req).await?;
        for deleted in answer.output.deleted.iter().flatten() {
            let Some(key) = deleted.key.clone() else {
                continue;
            };
            let kind = removal(deleted.delete_marker, versioned.contains(&key));
            let version_id = match kind {
                EventKind::DeleteMarkerCreated => deleted.delete_marker_version_id.clone(),
                _ => deleted.version_id.clone(),
            };
            let change = Change {
                kind,
                key,
                size: None,
                etag: None,
                version_id,
            };
            self.notifier.send(&bucket, &rules, &change, &who.0, who.1);
        }
        Ok(answer)
    }
}
pass {
        abort_multipart_upload(AbortMultipartUploadInput) -> AbortMultipartUploadOutput;
        create_multipart_upload(CreateMultipartUploadInput) -> CreateMultipartUploadOutput;
        delete_bucket_cors(DeleteBucketCorsInput) -> DeleteBucketCorsOutput;
        get_bucket_acl(GetBucketAclInput) -> GetBucketAclOutput;
        get_bucket_cors(GetBucketCorsInput) -> GetBucketCorsOutput;
        get_bucket_location(GetBucketLocationInput) -> GetBucketLocationOutput;
        get_bucket_versioning(GetBucketVersioningInput) -> GetBucketVersioningOutput;
        get_object(GetObjectInput) -> GetObjectOutput;
        get_object_acl(GetObjectAclInput) -> GetObjectAclOutput;
        get_object_attributes(GetObjectAttributesInput) -> GetObjectAttributesOutput;
        head_bucket(HeadBucketInput) -> HeadBucketOutput;
        head_object(HeadObjectInput) -> HeadObjectOutput;
        list_buckets(ListBucketsInput) -> ListBucketsOutput;
        list_multipart_uploads(ListMultipartUploadsInput) -> ListMultipartUploadsOutput;
        list_object_versions(ListObjectVersionsInput) -> ListObjectVersionsOutput;
        list_objects(ListObjectsInput) -> ListObjectsOutput;
        list_objects_v2(ListObjectsV2Input) -> ListObjectsV2Output;
        list_parts(ListPartsInput) -> ListPartsOutput;
        put_bucket_acl(PutBucketAclInput) -> PutBucketAclOutput;
        put_bucket_cors(PutBucketCorsInput) -> PutBucketCorsOutput;
        put_bucket_versioning(PutBucketVersioningInput) -> PutBucketVersioningOutput;
        put_object_acl(PutObjectAclInput) -> PutObjectAclOutput;
        upload_part(UploadPartInput) -> UploadPartOutput;
        upload_part_copy(UploadPartCopyInput) -> UploadPartCopyOutput;
}
}

/// Several writes committed together by the local store, with their events once committed.
pub struct NotifyingWrites {
    pub inner: Arc<dyn crate::objects::AtomicWrites>,
    pub store: NotifyingStore,
}

#[async_trait::async_trait]
impl crate::objects::AtomicWrites for NotifyingWrites {
    async fn commit_writes(&self, writes: Vec<crate::objects::ObjectWrite>) -> S3Result<()> {
        use crate::objects::ObjectWrite;
        let notifier = &self.store.notifier;
        // What each write will tell, taken before the writes are handed over.
        let mut changes = Vec::new();
        for write in &writes {
            let (bucket, key, kind, principal) = match write {
                ObjectWrite::Put(req) => (
                    &req.input.bucket,
                    &req.input.key,
                    EventKind::Put,
                    Some(who(req).0),
                ),
                ObjectWrite::Delete { bucket, key } => (bucket, key, EventKind::Delete, None),
            };
            if let Some(rules) = notifier.sending(bucket, key, &[kind]) {
                changes.push((rules, kind, bucket.clone(), key.clone(), principal));
            }
        }
        self.inner.commit_writes(writes).await?;
        for (rules, kind, bucket, key, principal) in changes {
            let principal = principal.unwrap_or_else(|| "kiln".to_string());
            let who = (principal, Origin::internal());
            let change = Change {
                kind,
                key,
                size: None,
                etag: None,
                version_id: None,
            };
            if kind.creates() {
                self.store.created(&rules, &bucket, change, who).await;
            } else {
                notifier.send(&bucket, &rules, &change, &who.0, who.1);
            }
        }
        Ok(())
    }
}

/// The error a configuration change that could not be kept answers.
pub(super) fn not_kept(e: impl std::error::Error + Send + Sync + 'static) -> s3s::S3Error {
    internal("bucket notification configuration", e)
}
