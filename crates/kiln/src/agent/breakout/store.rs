//! The object store as a fast request reaches it: straight through the store's `s3s::S3`
//! implementation (the object cache when there is one, else the local store), with the
//! function's credentials and the request's tags in each request, as the function's sandbox
//! listener would hand them on. No HTTP and no signing: kiln calls its own store.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::StreamExt;
use s3s::dto::{
    DeleteObjectInput, GetObjectInput, HeadObjectInput, ListObjectsV2Input, PutObjectInput,
    StreamingBlob, Timestamp,
};
use s3s::{S3Request, S3};

use crate::function::InvocationTags;
use crate::objects::{AtomicWrites, ObjectWrite, Scope};

/// The largest object a fast request reads: its text must fit the arena.
pub(super) const MAX_READ_BYTES: u64 = 8 << 20;

/// Why the store did not answer as the fast path needs: the request runs in Node, which
/// meets the same answer and reports it as the SDK does.
#[derive(Debug, thiserror::Error)]
pub(super) enum StoreError {
    /// the store answered with an error
    #[error("the store answered {0}")]
    S3(#[source] s3s::S3Error),
    /// an object larger than the fast path reads
    #[error("an object of {0} bytes, more than the fast path reads")]
    TooLarge(u64),
    /// the body could not be read
    #[error("reading an object's body: {0}")]
    Body(String),
    /// several writes, and a store that cannot commit them together
    #[error("{0} writes, and the store commits only one at a time")]
    NotTogether(usize),
}

/// A write to commit.
#[derive(Debug, Clone)]
pub(super) enum Write {
    Put {
        bucket: String,
        key: String,
        body: Bytes,
        content_type: Option<String>,
        metadata: BTreeMap<String, String>,
    },
    Delete {
        bucket: String,
        key: String,
    },
}

/// An object as a fast request sees it.
#[derive(Debug, Clone)]
pub(super) struct Object {
    pub body: Bytes,
    pub content_type: Option<String>,
    pub metadata: BTreeMap<String, String>,
    /// Quoted, as S3 gives it.
    pub etag: String,
    pub last_modified_ms: f64,
}

/// One entry of a listing.
#[derive(Debug, Clone)]
pub(super) struct Listed {
    pub key: String,
    pub size: i64,
    pub etag: Option<String>,
    pub last_modified_ms: Option<f64>,
}

/// A page of a listing.
#[derive(Debug, Clone, Default)]
pub(super) struct Listing {
    pub contents: Vec<Listed>,
    pub common_prefixes: Vec<String>,
    pub is_truncated: bool,
    pub key_count: i32,
    pub max_keys: Option<i32>,
    pub next_continuation_token: Option<String>,
}

/// What a listing asks for.
#[derive(Debug, Clone, Default)]
pub(super) struct ListQuery {
    pub prefix: Option<String>,
    pub delimiter: Option<String>,
    pub max_keys: Option<i32>,
    pub start_after: Option<String>,
    pub continuation_token: Option<String>,
}

/// The store, for one fast request of one function.
#[derive(Clone)]
pub(super) struct FastStore {
    direct: Arc<dyn S3>,
    atomic: Option<Arc<dyn AtomicWrites>>,
    function: String,
    credentials: s3s::auth::Credentials,
    tags: InvocationTags,
}

fn ms(t: Timestamp) -> f64 {
    let t: time::OffsetDateTime = t.into();
    (t.unix_timestamp_nanos() / 1_000_000) as f64
}

impl FastStore {
    pub(super) fn new(
        direct: Arc<dyn S3>,
        atomic: Option<Arc<dyn AtomicWrites>>,
        function: &str,
        credentials: crate::auth::Credentials,
        tags: InvocationTags,
    ) -> Self {
        Self {
            direct,
            atomic,
            function: function.to_string(),
            credentials: s3s::auth::Credentials {
                access_key: credentials.access_key_id,
                secret_key: credentials.secret_access_key.into(),
            },
            tags,
        }
    }

    /// A request as the function's listener would pass it on: its key, its scope, its tags.
    fn request<T>(&self, input: T, method: http::Method) -> S3Request<T> {
        let mut extensions = http::Extensions::new();
        extensions.insert(Scope::Function(self.function.clone()));
        extensions.insert(self.tags.clone());
        S3Request {
            input,
            method,
            uri: http::Uri::from_static("/"),
            headers: http::HeaderMap::new(),
            extensions,
            credentials: Some(self.credentials.clone()),
            region: None,
            service: Some("s3".into()),
            trailing_headers: None,
        }
    }

    /// Whether several writes can be committed together.
    pub(super) fn commits_together(&self) -> bool {
        self.atomic.is_some()
    }

    /// Commits `writes`: all of them, or none.
    pub(super) async fn commit(&self, writes: Vec<Write>) -> Result<(), StoreError> {
        match writes.len() {
            0 => Ok(()),
            1 => match writes.into_iter().next().expect("one") {
                Write::Put {
                    bucket,
                    key,
                    body,
                    content_type,
                    metadata,
                } => self
                    .put(&bucket, &key, body, content_type, metadata)
                    .await
                    .map(drop),
                Write::Delete { bucket, key } => self.delete(&bucket, &key).await,
            },
            n => {
                let atomic = self.atomic.as_ref().ok_or(StoreError::NotTogether(n))?;
                let writes = writes
                    .into_iter()
                    .map(|write| match write {
                        Write::Put {
                            bucket,
                            key,
                            body,
                            content_type,
                            metadata,
                        } => ObjectWrite::Put(Box::new(self.request(
                            put_input(bucket, key, body, content_type, metadata),
                            http::Method::PUT,
                        ))),
                        Write::Delete { bucket, key } => ObjectWrite::Delete { bucket, key },
                    })
                    .collect();
                atomic.commit_writes(writes).await.map_err(StoreError::S3)
            }
        }
    }

    /// The object, or `None` when there is no such key.
    pub(super) async fn get(&self, bucket: &str, key: &str) -> Result<Option<Object>, StoreError> {
        let input = GetObjectInput {
            bucket: bucket.to_string(),
            key: key.to_string(),
            ..Default::default()
        };
        let output = match self
            .direct
            .get_object(self.request(input, http::Method::GET))
            .await
        {
            Ok(response) => response.output,
            Err(e) if *e.code() == s3s::S3ErrorCode::NoSuchKey => return Ok(None),
            Err(e) => return Err(StoreError::S3(e)),
        };
        let size = output.content_length.unwrap_or(0).max(0) as u64;
        if size > MAX_READ_BYTES {
            return Err(StoreError::TooLarge(size));
        }
        let body = collect(output.body).await?;
        Ok(Some(Object {
            body,
            content_type: output.content_type,
            metadata: output.metadata.unwrap_or_default().into_iter().collect(),
            etag: output
                .e_tag
                .map(|e| e.value().to_string())
                .map(quoted)
                .unwrap_or_default(),
            last_modified_ms: output.last_modified.map(ms).unwrap_or(0.0),
        }))
    }

    /// The object's attributes (its body empty), or `None`.
    pub(super) async fn head(
        &self,
        bucket: &str,
        key: &str,
    ) -> Result<Option<(Object, u64)>, StoreError> {
        let input = HeadObjectInput {
            bucket: bucket.to_string(),
            key: key.to_string(),
            ..Default::default()
        };
        let output = match self
            .direct
            .head_object(self.request(input, http::Method::HEAD))
            .await
        {
            Ok(response) => response.output,
            Err(e)
                if *e.code() == s3s::S3ErrorCode::NoSuchKey
                    || (e.status_code() == Some(http::StatusCode::NOT_FOUND)
                        && *e.code() != s3s::S3ErrorCode::NoSuchBucket) =>
            {
                return Ok(None)
            }
            Err(e) => return Err(StoreError::S3(e)),
        };
        let size = output.content_length.unwrap_or(0).max(0) as u64;
        Ok(Some((
            Object {
                body: Bytes::new(),
                content_type: output.content_type,
                metadata: output.metadata.unwrap_or_default().into_iter().collect(),
                etag: output
                    .e_tag
                    .map(|e| e.value().to_string())
                    .map(quoted)
                    .unwrap_or_default(),
                last_modified_ms: output.last_modified.map(ms).unwrap_or(0.0),
            },
            size,
        )))
    }

    pub(super) async fn list(
        &self,
        bucket: &str,
        query: &ListQuery,
    ) -> Result<Listing, StoreError> {
        let input = ListObjectsV2Input {
            bucket: bucket.to_string(),
            prefix: query.prefix.clone(),
            delimiter: query.delimiter.clone(),
            max_keys: query.max_keys,
            start_after: query.start_after.clone(),
            continuation_token: query.continuation_token.clone(),
            ..Default::default()
        };
        let output = self
            .direct
            .list_objects_v2(self.request(input, http::Method::GET))
            .await
            .map_err(StoreError::S3)?
            .output;
        Ok(Listing {
            contents: output
                .contents
                .unwrap_or_default()
                .into_iter()
                .map(|o| Listed {
                    key: o.key.unwrap_or_default(),
                    size: o.size.unwrap_or(0),
                    etag: o.e_tag.map(|e| quoted(e.value().to_string())),
                    last_modified_ms: o.last_modified.map(ms),
                })
                .collect(),
            common_prefixes: output
                .common_prefixes
                .unwrap_or_default()
                .into_iter()
                .filter_map(|p| p.prefix)
                .collect(),
            is_truncated: output.is_truncated.unwrap_or(false),
            key_count: output.key_count.unwrap_or(0),
            max_keys: output.max_keys,
            next_continuation_token: output.next_continuation_token,
        })
    }

    /// Writes an object; its ETag.
    pub(super) async fn put(
        &self,
        bucket: &str,
        key: &str,
        body: Bytes,
        content_type: Option<String>,
        metadata: BTreeMap<String, String>,
    ) -> Result<String, StoreError> {
        let input = put_input(
            bucket.to_string(),
            key.to_string(),
            body,
            content_type,
            metadata,
        );
        let output = self
            .direct
            .put_object(self.request(input, http::Method::PUT))
            .await
            .map_err(StoreError::S3)?
            .output;
        Ok(output
            .e_tag
            .map(|e| quoted(e.value().to_string()))
            .unwrap_or_default())
    }

    pub(super) async fn delete(&self, bucket: &str, key: &str) -> Result<(), StoreError> {
        let input = DeleteObjectInput {
            bucket: bucket.to_string(),
            key: key.to_string(),
            ..Default::default()
        };
        self.direct
            .delete_object(self.request(input, http::Method::DELETE))
            .await
            .map_err(StoreError::S3)?;
        Ok(())
    }
}

fn put_input(
    bucket: String,
    key: String,
    body: Bytes,
    content_type: Option<String>,
    metadata: BTreeMap<String, String>,
) -> PutObjectInput {
    PutObjectInput {
        bucket,
        key,
        content_length: Some(body.len() as i64),
        body: Some(StreamingBlob::from(s3s::Body::from(body))),
        content_type,
        metadata: (!metadata.is_empty()).then(|| metadata.into_iter().collect()),
        ..Default::default()
    }
}

/// An ETag as S3 writes it, in quotes.
fn quoted(etag: String) -> String {
    if etag.starts_with('"') {
        etag
    } else {
        format!("\"{etag}\"")
    }
}

async fn collect(body: Option<StreamingBlob>) -> Result<Bytes, StoreError> {
    let mut out = Vec::new();
    if let Some(mut body) = body {
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| StoreError::Body(e.to_string()))?;
            if (out.len() + chunk.len()) as u64 > MAX_READ_BYTES {
                return Err(StoreError::TooLarge((out.len() + chunk.len()) as u64));
            }
            out.extend_from_slice(&chunk);
        }
    }
    Ok(out.into())
}
