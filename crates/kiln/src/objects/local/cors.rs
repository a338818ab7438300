//! PutBucketCors, GetBucketCors and DeleteBucketCors on the embedded store: a bucket's rules,
//! kept as JSON with its row.

use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result};

use super::{blocking, LocalStore};
use crate::objects::cors::{rules_of, to_dto, CorsRule};
use crate::objects::shared::internal;

impl LocalStore {
    pub(super) async fn put_bucket_cors_op(
        &self,
        req: S3Request<PutBucketCorsInput>,
    ) -> S3Result<S3Response<PutBucketCorsOutput>> {
        let input = req.input;
        let rules = rules_of(input.cors_configuration)?;
        let json = serde_json::to_string(&rules).map_err(|e| internal("CORS rules", e))?;
        let meta = self.meta.clone();
        let bucket = input.bucket;
        let exists = blocking(move || {
            meta.set_bucket_cors(&bucket, Some(&json))
                .map_err(|e| internal("metadata", e))
        })
        .await?;
        if !exists {
            return Err(s3_error!(NoSuchBucket));
        }
        Ok(S3Response::new(PutBucketCorsOutput::default()))
    }

    pub(super) async fn get_bucket_cors_op(
        &self,
        req: S3Request<GetBucketCorsInput>,
    ) -> S3Result<S3Response<GetBucketCorsOutput>> {
        let rules = self.cors_rules(req.input.bucket).await?;
        Ok(S3Response::new(GetBucketCorsOutput {
            cors_rules: Some(to_dto(&rules)),
        }))
    }

    pub(super) async fn delete_bucket_cors_op(
        &self,
        req: S3Request<DeleteBucketCorsInput>,
    ) -> S3Result<S3Response<DeleteBucketCorsOutput>> {
        let meta = self.meta.clone();
        let bucket = req.input.bucket;
        let exists = blocking(move || {
            meta.set_bucket_cors(&bucket, None)
                .map_err(|e| internal("metadata", e))
        })
        .await?;
        if !exists {
            return Err(s3_error!(NoSuchBucket));
        }
        Ok(S3Response::new(DeleteBucketCorsOutput::default()))
    }

    /// A bucket's rules; NoSuchCORSConfiguration when it has none.
    async fn cors_rules(&self, bucket: String) -> S3Result<Vec<CorsRule>> {
        let meta = self.meta.clone();
        let stored = blocking(move || {
            meta.bucket_cors(&bucket)
                .map_err(|e| internal("metadata", e))
        })
        .await?
        .ok_or_else(|| s3_error!(NoSuchBucket))?
        .ok_or_else(|| {
            s3_error!(
                NoSuchCORSConfiguration,
                "The CORS configuration does not exist"
            )
        })?;
        serde_json::from_str(&stored).map_err(|e| internal("stored CORS rules", e))
    }
}
