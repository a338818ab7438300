//! Remote mode: kiln fronts another S3-compatible store (OFC's "remote storage").
//!
//! Requests are authenticated against kiln's keys, then re-issued to the remote store with the
//! backend's credentials by `s3s-aws`'s proxy (aws-sdk-s3 underneath). kiln itself enforces the
//! size limit and every digest an upload declares (see [`VerifiedBody`]): a checksum sent in
//! an aws-chunked trailer never reaches the remote, and some remotes check none. The client's
//! `x-amz-sdk-checksum-algorithm` is forwarded, so the SDK adds the same algorithm for the remote.
//! An unsigned request (marked [`Anonymous`]) is re-issued unsigned: the remote's own ACLs decide
//! what it may read or write, and kiln adds no access of its own.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use aws_sdk_s3::config::{
    BehaviorVersion, Credentials as AwsCredentials, Region, RequestChecksumCalculation,
    ResponseChecksumValidation,
};
use bytes::Bytes;
use futures_util::Stream;
use s3s::dto::*;
use s3s::stream::{ByteStream, RemainingLength};
use s3s::{S3Error, S3Request, S3Response, S3Result, StdError, TrailingHeaders, S3};

use super::checksum::{verify_content_md5, BodyHasher, Declared};
use super::sdk_keys::{to_sdk, KeyLabels};
use super::{Limits, ObjectStoreError, RemoteConfig};
use crate::objects::acl::Anonymous;
use crate::objects::shared::{
    check_length, checksums_from, content_length, object_attribute_names,
};
use crate::sync::LockExt;

/// S3's limit on one part.
const MAX_PART_BYTES: u64 = 5 * 1024 * 1024 * 1024;

pub struct RemoteStore {
    proxy: s3s_aws::Proxy,
    /// The proxy's client, for a clone of the store.
    client: aws_sdk_s3::Client,
    /// The proxy of unsigned requests, and its client (no credentials).
    unsigned: s3s_aws::Proxy,
    unsigned_client: aws_sdk_s3::Client,
    limits: Limits,
}

impl Clone for RemoteStore {
    fn clone(&self) -> Self {
        Self {
            proxy: s3s_aws::Proxy::from(self.client.clone()),
            client: self.client.clone(),
            unsigned: s3s_aws::Proxy::from(self.unsigned_client.clone()),
            unsigned_client: self.unsigned_client.clone(),
            limits: self.limits,
        }
    }
}

/// Whether a request came unsigned.
fn is_unsigned<T>(req: &S3Request<T>) -> bool {
    req.extensions.get::<Anonymous>().is_some()
}

impl RemoteStore {
    pub fn new(config: &RemoteConfig, limits: Limits) -> Result<Self, ObjectStoreError> {
        let url: http::Uri = config
            .endpoint
            .parse()
            .map_err(|e| ObjectStoreError::BadBackend(config.endpoint.clone(), format!("{e}")))?;
        if !matches!(url.scheme_str(), Some("http" | "https")) || url.host().is_none() {
            return Err(ObjectStoreError::BadBackend(
                config.endpoint.clone(),
                "expected http://HOST[:PORT] or https://HOST[:PORT]".into(),
            ));
        }
        let credentials = AwsCredentials::new(
            config.credentials.access_key_id.clone(),
            config.credentials.secret_access_key.clone(),
            None,
            None,
            "kiln --s3-backend",
        );
        let sdk = aws_sdk_s3::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new(config.region.clone()))
            .endpoint_url(config.endpoint.trim_end_matches('/'))
            // Bucket names as paths: the remote may be an IP address with no wildcard DNS.
            .force_path_style(true)
            // Checksums travel end to end: kiln adds none of its own.
            .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
            .response_checksum_validation(ResponseChecksumValidation::WhenRequired)
            // Keys the SDK would refuse (blank ones) go through with their real names.
            .interceptor(KeyLabels);
        let unsigned_client = aws_sdk_s3::Client::from_conf(sdk.clone().allow_no_auth().build());
        let client = aws_sdk_s3::Client::from_conf(sdk.credentials_provider(credentials).build());
        Ok(Self {
            proxy: s3s_aws::Proxy::from(client.clone()),
            client,
            unsigned: s3s_aws::Proxy::from(unsigned_client.clone()),
            unsigned_client,
            limits,
        })
    }
}

/// Verifies an upload's declared digests (flexible checksums in headers or in an aws-chunked
/// trailer, and Content-MD5) while its body streams through to the remote, so integrity does
/// not depend on what the remote checks (moto, for one, checks none of them). The trailer
/// follows the last data chunk and the remote stops reading at Content-Length, so the last bytes
/// are held back until the client's stream has ended and every digest holds: on a mismatch the
/// remote never receives the whole body and discards the upload.
struct VerifiedBody {
    inner: StreamingBlob,
    hasher: Option<BodyHasher>,
    declared: Declared,
    content_md5: Option<String>,
    trailers: Option<TrailingHeaders>,
    failure: Arc<Mutex<Option<S3Error>>>,
    expected: u64,
    seen: u64,
    held: Option<Bytes>,
    ended: bool,
}

impl VerifiedBody {
    /// Called once the client's stream has ended.
    fn verify(&mut self) -> S3Result<()> {
        let Some(hasher) = self.hasher.take() else {
            return Ok(());
        };
        let (md5, computed) = hasher.finish();
        verify_content_md5(self.content_md5.as_deref(), &md5)?;
        let trailers = self.trailers.as_ref().and_then(|t| t.take());
        self.declared.add_trailer(trailers.as_ref())?;
        self.declared.verify(&computed)
    }
}

impl Stream for VerifiedBody {
    type Item = Result<Bytes, StdError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if this.ended {
            return Poll::Ready(this.held.take().map(Ok));
        }
        loop {
            match Pin::new(&mut this.inner).poll_next(cx) {
                Poll::Ready(Some(Ok(chunk))) => {
                    if let Some(h) = &mut this.hasher {
                        h.update(&chunk);
                    }
                    this.seen += chunk.len() as u64;
                    if this.seen < this.expected {
                        return Poll::Ready(Some(Ok(chunk)));
                    }
                    // The last bytes: keep them until the digests have been checked.
                    this.held = Some(match this.held.take() {
                        Some(held) => [held, chunk].concat().into(),
                        None => chunk,
                    });
                }
                Poll::Ready(None) => {
                    this.ended = true;
                    match this.verify() {
                        Ok(()) => return Poll::Ready(this.held.take().map(Ok)),
                        Err(e) => {
                            this.held = None;
                            let message = e.to_string();
                            *this.failure.locked() = Some(e);
                            return Poll::Ready(Some(Err(message.into())));
                        }
                    }
                }
                other => return other,
            }
        }
    }
}

impl ByteStream for VerifiedBody {
    fn remaining_length(&self) -> RemainingLength {
        self.inner.remaining_length()
    }
}

type Failure = Arc<Mutex<Option<S3Error>>>;

/// Wraps an upload's body in a [`VerifiedBody`] if it declares any digest.
fn verified(
    body: Option<StreamingBlob>,
    length: Option<i64>,
    declared: Declared,
    content_md5: Option<String>,
    trailers: Option<TrailingHeaders>,
) -> (Option<StreamingBlob>, Option<Failure>) {
    let Some(body) = body else {
        return (None, None);
    };
    if declared.algorithms.is_empty() && content_md5.is_none() {
        return (Some(body), None);
    }
    let failure = Failure::default();
    let hasher = if content_md5.is_some() {
        BodyHasher::new(&declared.algorithms)
    } else {
        BodyHasher::without_md5(&declared.algorithms)
    };
    let checked = VerifiedBody {
        inner: body,
        hasher: Some(hasher),
        declared,
        content_md5,
        trailers,
        failure: failure.clone(),
        expected: length.unwrap_or_default().max(0) as u64,
        seen: 0,
        held: None,
        ended: false,
    };
    (Some(StreamingBlob::new(checked)), Some(failure))
}

/// The remote's answer, unless the body failed our own check first.
fn after_upload<T>(result: S3Result<T>, failure: Option<Failure>) -> S3Result<T> {
    let ours = failure.and_then(|f| f.locked().take());
    match (result, ours) {
        (Err(_), Some(e)) => Err(e),
        (result, _) => result,
    }
}

impl RemoteStore {
    /// A read's 404 for a key whose newest version is a delete marker, with the
    /// `x-amz-delete-marker` and `x-amz-version-id` the remote answered it with (aws-sdk-s3
    /// keeps none of an error's headers, so the marker is looked up: one listing, on 404s only).
    /// The proxy that re-issues `req`: unsigned for an unsigned request.
    fn proxy_for<T>(&self, req: &S3Request<T>) -> &s3s_aws::Proxy {
        if is_unsigned(req) {
            &self.unsigned
        } else {
            &self.proxy
        }
    }

    async fn marked_if_deleted(&self, bucket: String, key: String, e: S3Error) -> S3Error {
        if e.status_code() != Some(http::StatusCode::NOT_FOUND)
            && !matches!(e.code().as_str(), "NoSuchKey" | "NotFound")
        {
            return e;
        }
        let listing = ListObjectVersionsInput {
            bucket,
            prefix: Some(key.clone()),
            max_keys: Some(1),
            ..Default::default()
        };
        let Ok(listed) = self
            .proxy
            .list_object_versions(super::cache::internal_request(listing))
            .await
        else {
            return e;
        };
        let marker = listed
            .output
            .delete_markers
            .into_iter()
            .flatten()
            .find(|m| m.key.as_deref() == Some(key.as_str()) && m.is_latest == Some(true));
        let Some(version_id) = marker.and_then(|m| m.version_id) else {
            return e;
        };
        let mut headers = http::HeaderMap::new();
        headers.insert(
            "x-amz-delete-marker",
            http::HeaderValue::from_static("true"),
        );
        if let Ok(id) = http::HeaderValue::from_str(&version_id) {
            headers.insert("x-amz-version-id", id);
        }
        let mut marked = e;
        marked.set_headers(headers);
        marked
    }
}

impl RemoteStore {
    /// A read's 304 with the object's `ETag` and `Last-Modified`, as S3 answers it (aws-sdk-s3
    /// keeps none of an error's headers, so they are read with a HEAD: one request, on 304s
    /// only).
    async fn validated_if_not_modified(&self, bucket: String, key: String, e: S3Error) -> S3Error {
        if e.status_code() != Some(http::StatusCode::NOT_MODIFIED) {
            return e;
        }
        let head = HeadObjectInput {
            bucket,
            key,
            ..Default::default()
        };
        let Ok(head) = self
            .proxy
            .head_object(super::cache::internal_request(head))
            .await
        else {
            return e;
        };
        let mut validators = http::HeaderMap::new();
        if let Some(etag) = head.output.e_tag.and_then(|t| t.to_http_header().ok()) {
            validators.insert(http::header::ETAG, etag);
        }
        let mut date = Vec::new();
        if let Some(modified) = head.output.last_modified {
            if modified
                .format(TimestampFormat::HttpDate, &mut date)
                .is_ok()
            {
                if let Ok(v) = http::HeaderValue::from_bytes(&date) {
                    validators.insert(http::header::LAST_MODIFIED, v);
                }
            }
        }
        let mut answered = e;
        answered.set_headers(validators);
        answered
    }
}

/// The `S3` implementation: the methods written out, then the operations the proxy carries as
/// they are, and those whose object key goes to the SDK in a form it accepts (see
/// [`sdk_keys`](super::sdk_keys)). The attribute goes on the expanded impl, where
/// `async_trait` sees every method.
macro_rules! remote_s3 {
    (
        { $($written:tt)* }
        plain { $($op:ident($input:ty) -> $output:ty;)* }
        keyed { $($kop:ident($kinput:ty) -> $koutput:ty;)* }
    ) => {
        #[async_trait::async_trait]
        impl S3 for RemoteStore {
            $($written)*
            $(
                async fn $op(&self, req: S3Request<$input>) -> S3Result<S3Response<$output>> {
                    self.proxy_for(&req).$op(req).await
                }
            )*
            $(
                async fn $kop(&self, mut req: S3Request<$kinput>) -> S3Result<S3Response<$koutput>> {
                    to_sdk(&mut req.input.key);
                    self.proxy_for(&req).$kop(req).await
                }
            )*
        }
    };
}

remote_s3! {
{
    async fn put_object(
        &self,
        mut req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        let input = &mut req.input;
        input.content_length = content_length(input.content_length, &req.headers);
        check_length(input.content_length, self.limits.max_object_bytes)?;
        let declared = Declared::new(
            checksums_from(
                input.checksum_crc32.clone(),
                input.checksum_crc32c.clone(),
                input.checksum_crc64nvme.clone(),
                input.checksum_sha1.clone(),
                input.checksum_sha256.clone(),
            ),
            input.checksum_algorithm.as_ref().map(|a| a.as_str()),
            &req.headers,
        )?;
        let (body, failure) = verified(
            input.body.take(),
            input.content_length,
            declared,
            input.content_md5.clone(),
            req.trailing_headers.clone(),
        );
        input.body = body;
        to_sdk(&mut req.input.key);
        after_upload(self.proxy_for(&req).put_object(req).await, failure)
    }

    async fn upload_part(
        &self,
        mut req: S3Request<UploadPartInput>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        let input = &mut req.input;
        input.content_length = content_length(input.content_length, &req.headers);
        check_length(
            input.content_length,
            MAX_PART_BYTES.min(self.limits.max_object_bytes),
        )?;
        let declared = Declared::new(
            checksums_from(
                input.checksum_crc32.clone(),
                input.checksum_crc32c.clone(),
                input.checksum_crc64nvme.clone(),
                input.checksum_sha1.clone(),
                input.checksum_sha256.clone(),
            ),
            input.checksum_algorithm.as_ref().map(|a| a.as_str()),
            &req.headers,
        )?;
        let (body, failure) = verified(
            input.body.take(),
            input.content_length,
            declared,
            input.content_md5.clone(),
            req.trailing_headers.clone(),
        );
        input.body = body;
        to_sdk(&mut req.input.key);
        after_upload(self.proxy_for(&req).upload_part(req).await, failure)
    }

    async fn get_object(
        &self,
        mut req: S3Request<GetObjectInput>,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        let (bucket, key) = (req.input.bucket.clone(), req.input.key.clone());
        // An unsigned read is not told of delete markers by kiln's own calls with the remote's
        // key (a 304 proves it may read the object, so its validators are added).
        let plain = req.input.version_id.is_none() && !is_unsigned(&req);
        to_sdk(&mut req.input.key);
        let sdk_key = req.input.key.clone();
        match self.proxy_for(&req).get_object(req).await {
            Err(e) if e.status_code() == Some(http::StatusCode::NOT_MODIFIED) => {
                Err(self.validated_if_not_modified(bucket, sdk_key, e).await)
            }
            Err(e) if plain => Err(self.marked_if_deleted(bucket, key, e).await),
            answer => answer,
        }
    }

    async fn head_object(
        &self,
        mut req: S3Request<HeadObjectInput>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        let (bucket, key) = (req.input.bucket.clone(), req.input.key.clone());
        let plain = req.input.version_id.is_none() && !is_unsigned(&req);
        to_sdk(&mut req.input.key);
        let sdk_key = req.input.key.clone();
        match self.proxy_for(&req).head_object(req).await {
            Err(e) if e.status_code() == Some(http::StatusCode::NOT_MODIFIED) => {
                Err(self.validated_if_not_modified(bucket, sdk_key, e).await)
            }
            Err(e) if plain => Err(self.marked_if_deleted(bucket, key, e).await),
            answer => answer,
        }
    }

    async fn get_object_attributes(
        &self,
        mut req: S3Request<GetObjectAttributesInput>,
    ) -> S3Result<S3Response<GetObjectAttributesOutput>> {
        req.input.object_attributes = object_attribute_names(&req.input.object_attributes);
        to_sdk(&mut req.input.key);
        self.proxy_for(&req).get_object_attributes(req).await
    }
}
    plain {
        create_bucket(CreateBucketInput) -> CreateBucketOutput;
        head_bucket(HeadBucketInput) -> HeadBucketOutput;
        get_bucket_location(GetBucketLocationInput) -> GetBucketLocationOutput;
        delete_bucket(DeleteBucketInput) -> DeleteBucketOutput;
        list_buckets(ListBucketsInput) -> ListBucketsOutput;
        list_objects_v2(ListObjectsV2Input) -> ListObjectsV2Output;
        list_objects(ListObjectsInput) -> ListObjectsOutput;
        list_object_versions(ListObjectVersionsInput) -> ListObjectVersionsOutput;
        list_multipart_uploads(ListMultipartUploadsInput) -> ListMultipartUploadsOutput;
        get_bucket_acl(GetBucketAclInput) -> GetBucketAclOutput;
        get_bucket_versioning(GetBucketVersioningInput) -> GetBucketVersioningOutput;
        put_bucket_versioning(PutBucketVersioningInput) -> PutBucketVersioningOutput;
        put_bucket_acl(PutBucketAclInput) -> PutBucketAclOutput;
        put_bucket_cors(PutBucketCorsInput) -> PutBucketCorsOutput;
        get_bucket_cors(GetBucketCorsInput) -> GetBucketCorsOutput;
        delete_bucket_cors(DeleteBucketCorsInput) -> DeleteBucketCorsOutput;
        delete_objects(DeleteObjectsInput) -> DeleteObjectsOutput;
    }
    keyed {
        get_object_acl(GetObjectAclInput) -> GetObjectAclOutput;
        put_object_acl(PutObjectAclInput) -> PutObjectAclOutput;
        delete_object(DeleteObjectInput) -> DeleteObjectOutput;
        copy_object(CopyObjectInput) -> CopyObjectOutput;
        create_multipart_upload(CreateMultipartUploadInput) -> CreateMultipartUploadOutput;
        upload_part_copy(UploadPartCopyInput) -> UploadPartCopyOutput;
        list_parts(ListPartsInput) -> ListPartsOutput;
        complete_multipart_upload(CompleteMultipartUploadInput) -> CompleteMultipartUploadOutput;
        abort_multipart_upload(AbortMultipartUploadInput) -> AbortMultipartUploadOutput;
    }
}
