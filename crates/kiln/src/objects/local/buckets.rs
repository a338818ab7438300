//! Buckets and listings on the embedded store.

use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result};

use super::acls::{check_anonymous, hide_from_anonymous, is_anonymous};
use super::meta::{BucketDeletion, ObjectRow, UploadRow};
use super::{blocking, LocalStore};
use crate::objects::acl::requested_acl;
use crate::objects::listing::{self, successor, url_encode, Cursor, ListRequest, Page};
use crate::objects::shared::{
    class_name, encodes_url, internal, listed_object, max_keys, now_ms, owner, owners_if_fetched,
    read_list_uploads, read_list_v1, read_list_v2, timestamp,
};
use crate::objects::upload_list::{list_uploads, UploadsRequest};

impl LocalStore {
    pub(super) async fn create_bucket_op(
        &self,
        req: S3Request<CreateBucketInput>,
    ) -> S3Result<S3Response<CreateBucketOutput>> {
        let acl = requested_acl!(req.input, grant_write)?;
        let bucket = req.input.bucket;
        let meta = self.meta.clone();
        let name = bucket.clone();
        // S3's legacy behaviour in us-east-1: creating a bucket one owns again answers 200 and
        // resets its ACL to the one asked for (private when none is).
        let recreate = &*self.region == "us-east-1";
        let created = blocking(move || {
            let created = meta
                .create_bucket(&name, now_ms(), acl.as_deref())
                .map_err(|e| internal("metadata", e))?;
            if !created && recreate {
                meta.set_bucket_acl(&name, acl.as_deref())
                    .map_err(|e| internal("metadata", e))?;
                return Ok(true);
            }
            Ok(created)
        })
        .await?;
        if !created {
            return Err(s3_error!(
                BucketAlreadyOwnedByYou,
                "Your previous request to create the named bucket succeeded and you already own it."
            ));
        }
        Ok(S3Response::new(CreateBucketOutput {
            location: Some(format!("/{bucket}")),
        }))
    }

    /// GetBucketVersioning: no status for a bucket never versioned, else the last one set.
    pub(super) async fn get_bucket_versioning_op(
        &self,
        req: S3Request<GetBucketVersioningInput>,
    ) -> S3Result<S3Response<GetBucketVersioningOutput>> {
        let meta = self.meta.clone();
        let bucket = req.input.bucket;
        let status = blocking(move || {
            meta.bucket_versioning(&bucket)
                .map_err(|e| internal("metadata", e))
        })
        .await?
        .ok_or_else(|| s3_error!(NoSuchBucket))?;
        Ok(S3Response::new(GetBucketVersioningOutput {
            status: status.map(BucketVersioningStatus::from),
            mfa_delete: None,
        }))
    }

    /// PutBucketVersioning: `Enabled` or `Suspended` (a bucket once versioned is never
    /// unversioned again, as on S3); MFA delete is refused.
    pub(super) async fn put_bucket_versioning_op(
        &self,
        req: S3Request<PutBucketVersioningInput>,
    ) -> S3Result<S3Response<PutBucketVersioningOutput>> {
        let input = req.input;
        let config = input.versioning_configuration;
        if input.mfa.is_some()
            || config
                .mfa_delete
                .as_ref()
                .is_some_and(|m| m.as_str() == MFADelete::ENABLED)
        {
            return Err(s3_error!(
                NotImplemented,
                "kiln has no MFA devices, so it has no MFA delete"
            ));
        }
        let status = match config.status.as_ref().map(|s| s.as_str()) {
            Some(s @ (BucketVersioningStatus::SUSPENDED | BucketVersioningStatus::ENABLED)) => {
                s.to_string()
            }
            _ => {
                return Err(s3_error!(
                    MalformedXML,
                    "The versioning status must be Enabled or Suspended"
                ))
            }
        };
        let meta = self.meta.clone();
        let bucket = input.bucket;
        let exists = blocking(move || {
            meta.set_bucket_versioning(&bucket, &status)
                .map_err(|e| internal("metadata", e))
        })
        .await?;
        if !exists {
            return Err(s3_error!(NoSuchBucket));
        }
        Ok(S3Response::new(PutBucketVersioningOutput::default()))
    }

    pub(super) async fn head_bucket_op(
        &self,
        req: S3Request<HeadBucketInput>,
    ) -> S3Result<S3Response<HeadBucketOutput>> {
        self.require_bucket(&req.input.bucket).await?;
        Ok(S3Response::new(HeadBucketOutput::default()))
    }

    pub(super) async fn get_bucket_location_op(
        &self,
        req: S3Request<GetBucketLocationInput>,
    ) -> S3Result<S3Response<GetBucketLocationOutput>> {
        self.require_bucket(&req.input.bucket).await?;
        // us-east-1, which S3 reports as an empty constraint.
        Ok(S3Response::new(GetBucketLocationOutput::default()))
    }

    pub(super) async fn delete_bucket_op(
        &self,
        req: S3Request<DeleteBucketInput>,
    ) -> S3Result<S3Response<DeleteBucketOutput>> {
        let (meta, files) = (self.meta.clone(), self.files.clone());
        let bucket = req.input.bucket;
        blocking(move || match meta.delete_bucket(&bucket) {
            Ok(BucketDeletion::Deleted { files: parts }) => {
                files.remove(&parts);
                Ok(())
            }
            Ok(BucketDeletion::NoSuchBucket) => Err(s3_error!(NoSuchBucket)),
            Ok(BucketDeletion::NotEmpty) => Err(s3_error!(
                BucketNotEmpty,
                "The bucket you tried to delete is not empty"
            )),
            Err(e) => Err(internal("metadata", e)),
        })
        .await?;
        Ok(S3Response::new(DeleteBucketOutput::default()))
    }

    /// ListBuckets, in name order: with `prefix`, only names that start with it; with
    /// `max-buckets` (1 to 10,000), a page, and a continuation token (the page's last name)
    /// while more follow.
    pub(super) async fn list_buckets_op(
        &self,
        req: S3Request<ListBucketsInput>,
    ) -> S3Result<S3Response<ListBucketsOutput>> {
        let input = req.input;
        if input
            .max_buckets
            .is_some_and(|n| !(1..=10_000).contains(&n))
        {
            return Err(s3_error!(
                InvalidArgument,
                "max-buckets must be between 1 and 10000"
            ));
        }
        let meta = self.meta.clone();
        let buckets = blocking(move || meta.buckets().map_err(|e| internal("metadata", e))).await?;
        let prefix = input.prefix.filter(|p| !p.is_empty());
        let after = input.continuation_token.filter(|t| !t.is_empty());
        let mut matching = buckets.into_iter().filter(|(name, _)| {
            prefix.as_deref().is_none_or(|p| name.starts_with(p))
                && after.as_deref().is_none_or(|a| name.as_str() > a)
        });
        let limit = input.max_buckets.map_or(usize::MAX, |n| n as usize);
        let page: Vec<Bucket> = matching
            .by_ref()
            .take(limit)
            .map(|(name, created)| Bucket {
                name: Some(name),
                creation_date: Some(timestamp(created)),
                bucket_region: None,
            })
            .collect();
        let more = matching.next().is_some();
        let continuation_token = more
            .then(|| page.last().and_then(|b| b.name.clone()))
            .flatten();
        Ok(S3Response::new(ListBucketsOutput {
            buckets: Some(page),
            owner: Some(owner()),
            continuation_token,
            prefix,
        }))
    }

    /// One page of a bucket's listing; an unsigned request (`anonymous`) only of a
    /// `public-read` bucket.
    async fn list_page(
        &self,
        bucket: String,
        request: ListRequest,
        anonymous: bool,
    ) -> S3Result<Page<ObjectRow>> {
        let meta = self.meta.clone();
        blocking(move || {
            let acl = meta
                .bucket_acl(&bucket)
                .map_err(|e| internal("metadata", e))?;
            let Some(acl) = acl else {
                return Err(hide_from_anonymous(anonymous, s3_error!(NoSuchBucket)));
            };
            check_anonymous(anonymous, acl.as_deref())?;
            listing::list(
                &request,
                |cursor, below, limit| meta.list_objects(&bucket, cursor, below, limit),
                |row| row.key.as_str(),
            )
            .map_err(|e| internal("metadata", e))
        })
        .await
    }

    pub(super) async fn list_objects_v2_op(
        &self,
        req: S3Request<ListObjectsV2Input>,
    ) -> S3Result<S3Response<ListObjectsV2Output>> {
        let anonymous = is_anonymous(&req);
        let mut input = req.input;
        let empty_token = read_list_v2(&mut input);
        let prefix = input.prefix.clone().unwrap_or_default();
        let start = match &input.continuation_token {
            Some(token) => Cursor::from_token(token).ok_or_else(|| {
                s3_error!(
                    InvalidArgument,
                    "The continuation token provided is incorrect"
                )
            })?,
            None => Cursor::start(&prefix, input.start_after.as_deref()),
        };
        let max_keys = max_keys(input.max_keys)?;
        let url = encodes_url(input.encoding_type.as_ref())?;
        let page = self
            .list_page(
                input.bucket.clone(),
                ListRequest {
                    prefix,
                    delimiter: input.delimiter.clone(),
                    start,
                    max_keys: max_keys as usize,
                },
                anonymous,
            )
            .await?;
        let encode = |s: String| if url { url_encode(&s) } else { s };
        let key_count = (page.objects.len() + page.common_prefixes.len()) as i32;
        let mut contents = Some(
            page.objects
                .into_iter()
                .map(|row| object_entry(row, encode))
                .collect(),
        );
        owners_if_fetched(&mut contents, input.fetch_owner);
        Ok(S3Response::new(ListObjectsV2Output {
            name: Some(input.bucket),
            prefix: input.prefix.map(encode),
            delimiter: input.delimiter.map(encode),
            start_after: input.start_after.map(encode),
            continuation_token: input
                .continuation_token
                .or_else(|| empty_token.then(String::new)),
            max_keys: Some(max_keys),
            key_count: Some(key_count),
            is_truncated: Some(page.next.is_some()),
            next_continuation_token: page.next.as_ref().map(Cursor::token),
            encoding_type: input.encoding_type,
            contents,
            common_prefixes: Some(common_prefix_list(page.common_prefixes, encode)),
            ..Default::default()
        }))
    }

    pub(super) async fn list_multipart_uploads_op(
        &self,
        req: S3Request<ListMultipartUploadsInput>,
    ) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
        let mut input = req.input;
        read_list_uploads(&mut input);
        let url = encodes_url(input.encoding_type.as_ref())?;
        let max_uploads = max_keys(input.max_uploads)?;
        let request = UploadsRequest {
            prefix: input.prefix.clone().unwrap_or_default(),
            delimiter: input.delimiter.clone(),
            key_marker: input.key_marker.clone(),
            upload_id_marker: input.upload_id_marker.clone(),
            max_uploads: max_uploads as usize,
        };
        self.require_bucket(&input.bucket).await?;
        let meta = self.meta.clone();
        let bucket = input.bucket.clone();
        let page = blocking(move || {
            let from = request.key_marker.as_deref().unwrap_or_default();
            let from = from.max(request.prefix.as_str());
            let below = successor(&request.prefix);
            let uploads = meta
                .uploads(&bucket, from, below.as_deref())
                .map_err(|e| internal("metadata", e))?;
            Ok(list_uploads(
                &request,
                uploads,
                |u| u.key.as_str(),
                |u| u.upload_id.as_str(),
            ))
        })
        .await?;
        let encode = |s: String| if url { url_encode(&s) } else { s };
        let (next_key, next_upload) = match page.last.filter(|_| page.truncated) {
            Some((key, upload)) => (Some(encode(key)), upload),
            None => (None, None),
        };
        Ok(S3Response::new(ListMultipartUploadsOutput {
            bucket: Some(input.bucket),
            prefix: input.prefix.map(encode),
            delimiter: input.delimiter.map(encode),
            key_marker: Some(input.key_marker.map(encode).unwrap_or_default()),
            upload_id_marker: Some(input.upload_id_marker.unwrap_or_default()),
            next_key_marker: next_key,
            next_upload_id_marker: next_upload,
            max_uploads: Some(max_uploads),
            is_truncated: Some(page.truncated),
            encoding_type: input.encoding_type,
            uploads: Some(
                page.uploads
                    .into_iter()
                    .map(|row| upload_entry(row, encode))
                    .collect(),
            ),
            common_prefixes: Some(common_prefix_list(page.common_prefixes, encode)),
            ..Default::default()
        }))
    }

    pub(super) async fn list_objects_v1_op(
        &self,
        req: S3Request<ListObjectsInput>,
    ) -> S3Result<S3Response<ListObjectsOutput>> {
        let anonymous = is_anonymous(&req);
        let mut input = req.input;
        read_list_v1(&mut input);
        let prefix = input.prefix.clone().unwrap_or_default();
        let max_keys = max_keys(input.max_keys)?;
        let url = encodes_url(input.encoding_type.as_ref())?;
        let page = self
            .list_page(
                input.bucket.clone(),
                ListRequest {
                    start: Cursor::start(&prefix, input.marker.as_deref()),
                    prefix,
                    delimiter: input.delimiter.clone(),
                    max_keys: max_keys as usize,
                },
                anonymous,
            )
            .await?;
        let encode = |s: String| if url { url_encode(&s) } else { s };
        let truncated = page.next.is_some();
        // S3 only returns NextMarker with a delimiter; without one, clients use the last key.
        let next_marker = (truncated && input.delimiter.is_some())
            .then_some(page.last)
            .flatten()
            .map(encode);
        Ok(S3Response::new(ListObjectsOutput {
            name: Some(input.bucket),
            // S3 leaves v1's own Prefix as sent, encoding type or not (SDKs decode it in v2 only).
            prefix: input.prefix,
            delimiter: input.delimiter.map(encode),
            marker: Some(input.marker.map(encode).unwrap_or_default()),
            next_marker,
            max_keys: Some(max_keys),
            is_truncated: Some(truncated),
            encoding_type: input.encoding_type,
            contents: Some(
                page.objects
                    .into_iter()
                    .map(|row| object_entry(row, encode))
                    .collect(),
            ),
            common_prefixes: Some(common_prefix_list(page.common_prefixes, encode)),
            ..Default::default()
        }))
    }
}

fn upload_entry(row: UploadRow, encode: impl Fn(String) -> String) -> MultipartUpload {
    let owner = owner();
    MultipartUpload {
        key: Some(encode(row.key)),
        upload_id: Some(row.upload_id),
        initiated: Some(timestamp(row.created_ms)),
        initiator: Some(Initiator {
            display_name: owner.display_name.clone(),
            id: owner.id.clone(),
        }),
        owner: Some(owner),
        storage_class: Some(StorageClass::from(class_name(&row.attrs).to_string())),
        checksum_algorithm: row
            .algorithm
            .map(|a| ChecksumAlgorithm::from(a.name().to_string())),
        checksum_type: row.kind.map(|k| ChecksumType::from(k.name().to_string())),
    }
}

pub(super) fn common_prefix_list(
    prefixes: Vec<String>,
    encode: impl Fn(String) -> String,
) -> CommonPrefixList {
    prefixes
        .into_iter()
        .map(|p| CommonPrefix {
            prefix: Some(encode(p)),
        })
        .collect()
}

pub(super) fn object_entry(row: ObjectRow, encode: impl Fn(String) -> String) -> Object {
    listed_object(encode(row.key.clone()), &row.stored())
}
