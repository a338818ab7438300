//! ACLs on the embedded store: the canned ACL of buckets (a column of `buckets`) and objects
//! (kept with their attributes), Get/PutBucketAcl and Get/PutObjectAcl, the reads that
//! `public-read` opens to unsigned requests and the writes `public-read-write` opens.

use s3s::dto::*;
use s3s::{s3_error, S3Error, S3ErrorCode, S3Request, S3Response, S3Result};

use super::{blocking, check_version_id, lookup, write_error, LocalStore};
use crate::objects::acl::{self, from_policy, Anonymous};
use crate::objects::shared::{internal, owner};

/// Whether a request came without credentials (let through to read what is public).
pub(super) fn is_anonymous<T>(req: &S3Request<T>) -> bool {
    req.extensions.get::<Anonymous>().is_some()
}

/// S3's answer to an unsigned request for what is not public (whether or not it exists).
pub(super) fn access_denied() -> S3Error {
    s3_error!(AccessDenied, "Access Denied")
}

/// The ACL a PutBucketAcl or PutObjectAcl sets: its `x-amz-acl`, or its body's grants.
macro_rules! acl_to_set {
    ($input:expr) => {{
        let input = &$input;
        let named = acl::requested_acl!(input, grant_write)?;
        match (&input.acl, &input.access_control_policy) {
            (Some(_), Some(_)) => Err(s3_error!(
                InvalidRequest,
                "Specify either an ACL header (x-amz-acl) or an AccessControlPolicy, not both"
            )),
            (Some(_), None) => Ok(named),
            (None, Some(policy)) => from_policy(policy),
            (None, None) => Err(s3_error!(
                InvalidRequest,
                "Specify an ACL: x-amz-acl or an AccessControlPolicy"
            )),
        }
    }};
}

impl LocalStore {
    pub(super) async fn get_bucket_acl_op(
        &self,
        req: S3Request<GetBucketAclInput>,
    ) -> S3Result<S3Response<GetBucketAclOutput>> {
        let meta = self.meta.clone();
        let bucket = req.input.bucket;
        let stored = blocking(move || {
            meta.bucket_acl(&bucket)
                .map_err(|e| internal("metadata", e))
        })
        .await?
        .ok_or_else(|| s3_error!(NoSuchBucket))?;
        Ok(S3Response::new(GetBucketAclOutput {
            grants: Some(acl::grants(stored.as_deref())),
            owner: Some(owner()),
        }))
    }

    pub(super) async fn put_bucket_acl_op(
        &self,
        req: S3Request<PutBucketAclInput>,
    ) -> S3Result<S3Response<PutBucketAclOutput>> {
        let input = req.input;
        let acl = acl_to_set!(input)?;
        let meta = self.meta.clone();
        let bucket = input.bucket;
        let exists = blocking(move || {
            meta.set_bucket_acl(&bucket, acl.as_deref())
                .map_err(|e| internal("metadata", e))
        })
        .await?;
        if !exists {
            return Err(s3_error!(NoSuchBucket));
        }
        Ok(S3Response::new(PutBucketAclOutput::default()))
    }

    pub(super) async fn get_object_acl_op(
        &self,
        req: S3Request<GetObjectAclInput>,
    ) -> S3Result<S3Response<GetObjectAclOutput>> {
        let input = req.input;
        let meta = self.meta.clone();
        let (bucket, key, version) = (input.bucket, input.key, input.version_id);
        let row = blocking(move || lookup(&meta, &bucket, &key, version.as_deref())).await?;
        Ok(S3Response::new(GetObjectAclOutput {
            grants: Some(acl::grants(row.attrs.acl.as_deref())),
            owner: Some(owner()),
            ..Default::default()
        }))
    }

    pub(super) async fn put_object_acl_op(
        &self,
        req: S3Request<PutObjectAclInput>,
    ) -> S3Result<S3Response<PutObjectAclOutput>> {
        let input = req.input;
        check_version_id(input.version_id.as_deref())?;
        let acl = acl_to_set!(input)?;
        let meta = self.meta.clone();
        let (bucket, key, version) = (input.bucket, input.key, input.version_id);
        blocking(move || {
            meta.set_object_acl(&bucket, &key, version.as_deref(), acl.as_deref())
                .map_err(write_error)
        })
        .await?;
        Ok(S3Response::new(PutObjectAclOutput::default()))
    }
}

impl LocalStore {
    /// An unsigned write (let through by the store's access check) is refused unless its
    /// bucket is `public-read-write`; a bucket that does not exist is one anyone is told of.
    pub(super) async fn check_anonymous_write<T>(
        &self,
        req: &S3Request<T>,
        bucket: &str,
    ) -> S3Result<()> {
        if !is_anonymous(req) {
            return Ok(());
        }
        let meta = self.meta.clone();
        let bucket = bucket.to_string();
        let acl = blocking(move || {
            meta.bucket_acl(&bucket)
                .map_err(|e| internal("metadata", e))
        })
        .await?
        .ok_or_else(|| s3_error!(NoSuchBucket))?;
        if acl::public_write(acl.as_deref()) {
            Ok(())
        } else {
            Err(access_denied())
        }
    }
}

/// Whether an unsigned request may list a bucket whose stored ACL is `acl`.
pub(super) fn check_anonymous(anonymous: bool, acl: Option<&str>) -> S3Result<()> {
    if anonymous && !acl::public_read(acl) {
        return Err(access_denied());
    }
    Ok(())
}

/// Whether `bucket` exists and its ACL lets anyone list it (`public-read`).
pub(super) fn bucket_is_public(meta: &super::Meta, bucket: &str) -> bool {
    matches!(meta.bucket_acl(bucket), Ok(Some(acl)) if acl::public_read(acl.as_deref()))
}

/// An unsigned read's answer for a lookup that failed: S3 does not tell it what a bucket holds,
/// but does tell anyone that a bucket does not exist.
pub(super) fn hide_from_anonymous(anonymous: bool, e: S3Error) -> S3Error {
    if anonymous && *e.code() != S3ErrorCode::NoSuchBucket {
        access_denied()
    } else {
        e
    }
}
