//! The cluster's objects in the shared store (`--s3-backend`), bucket [`SYSTEM_BUCKET`]: code by
//! digest, and the payloads of queued Events too large for etcd (`events/<id>`).
//!
//! Every deployment package goes there under `sha256/<hex>.zip` before the registry refers to
//! it. A node
//! that is to run a function whose package it does not have fetches it from there and checks
//! its SHA-256 before it stores it: the key is the digest, so a package is never replaced,
//! and one that does not match its name is refused. [`super::gc`] removes those no function
//! uses any more, and the payloads of Events that are gone.

use std::time::Duration;

use aws_sdk_s3::config::{
    BehaviorVersion, Credentials as AwsCredentials, Region, RequestChecksumCalculation,
    ResponseChecksumValidation,
};
use aws_sdk_s3::error::{DisplayErrorContext, ProvideErrorMetadata};
use aws_sdk_s3::primitives::ByteStream;
use sha2::{Digest, Sha256};

use crate::objects::RemoteConfig;

/// The shared store's bucket of the cluster's own objects.
pub const SYSTEM_BUCKET: &str = "kiln-system";

/// Tries of a package's upload or download.
const TRIES: u32 = 4;
const RETRY_DELAY: Duration = Duration::from_millis(200);

/// Why a package could not be shared or fetched.
#[derive(Debug, thiserror::Error)]
pub enum SharedCodeError {
    /// The shared store refused or did not answer.
    #[error("the shared store ({endpoint}) failed to {op} {digest}: {message}")]
    Store {
        endpoint: String,
        op: &'static str,
        digest: String,
        message: String,
    },
    /// The shared store has no such package.
    #[error("the shared store ({endpoint}) has no package {digest}")]
    Missing { endpoint: String, digest: String },
    /// What the store returned is not the package it was asked for.
    #[error("the package fetched as {digest} from the shared store has SHA-256 {actual}")]
    Digest { digest: String, actual: String },
}

/// The shared store's package bucket.
#[derive(Clone)]
pub struct SharedCode {
    client: aws_sdk_s3::Client,
    endpoint: String,
}

impl std::fmt::Debug for SharedCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedCode")
            .field("endpoint", &self.endpoint)
            .finish()
    }
}

/// An object of the shared store's bucket, as listed.
#[derive(Debug, Clone)]
pub struct SharedObject {
    pub key: String,
    pub size: u64,
    pub last_modified: chrono::DateTime<chrono::Utc>,
}

/// The prefix of the packages' keys.
pub const PACKAGES: &str = "sha256/";

/// The prefix of queued Events' payloads.
pub const PAYLOADS: &str = "events/";

/// The digest of package object `key`, if it is one.
pub fn package_digest(key: &str) -> Option<&str> {
    key.strip_prefix(PACKAGES)?.strip_suffix(".zip")
}

fn object_key(digest: &str) -> String {
    format!("sha256/{digest}.zip")
}

impl SharedCode {
    /// A client of the store `remote` (the node's `--s3-backend`).
    pub fn new(remote: &RemoteConfig) -> Self {
        let credentials = AwsCredentials::new(
            remote.credentials.access_key_id.clone(),
            remote.credentials.secret_access_key.clone(),
            None,
            None,
            "kiln --s3-backend",
        );
        let config = aws_sdk_s3::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new(remote.region.clone()))
            .endpoint_url(remote.endpoint.trim_end_matches('/'))
            .credentials_provider(credentials)
            .force_path_style(true)
            // The digest in the key is checked on every download.
            .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
            .response_checksum_validation(ResponseChecksumValidation::WhenRequired)
            .build();
        Self {
            client: aws_sdk_s3::Client::from_conf(config),
            endpoint: remote.endpoint.clone(),
        }
    }

    fn failed(&self, op: &'static str, digest: &str, message: String) -> SharedCodeError {
        SharedCodeError::Store {
            endpoint: self.endpoint.clone(),
            op,
            digest: digest.to_string(),
            message,
        }
    }

    /// Creates the bucket if the store does not have it.
    pub async fn ensure_bucket(&self) -> Result<(), SharedCodeError> {
        if self
            .client
            .head_bucket()
            .bucket(SYSTEM_BUCKET)
            .send()
            .await
            .is_ok()
        {
            return Ok(());
        }
        match self
            .client
            .create_bucket()
            .bucket(SYSTEM_BUCKET)
            .send()
            .await
        {
            Ok(_) => Ok(()),
            // Another node made it meanwhile.
            Err(e)
                if matches!(
                    e.code(),
                    Some("BucketAlreadyOwnedByYou" | "BucketAlreadyExists")
                ) =>
            {
                Ok(())
            }
            Err(e) => Err(self.failed(
                "create the bucket for",
                "packages",
                DisplayErrorContext(&e).to_string(),
            )),
        }
    }

    /// Uploads the package `zip` whose SHA-256 is `digest` (hex).
    pub async fn put(&self, digest: &str, zip: bytes::Bytes) -> Result<(), SharedCodeError> {
        self.put_object(&object_key(digest), zip).await
    }

    /// Uploads an object of the cluster's own (retried).
    pub async fn put_object(&self, key: &str, body: bytes::Bytes) -> Result<(), SharedCodeError> {
        let mut last = String::new();
        for attempt in 0..TRIES {
            if attempt > 0 {
                tokio::time::sleep(RETRY_DELAY).await;
            }
            let sent = self
                .client
                .put_object()
                .bucket(SYSTEM_BUCKET)
                .key(key)
                .body(ByteStream::from(body.clone()))
                .send()
                .await;
            match sent {
                Ok(_) => return Ok(()),
                Err(e) => last = DisplayErrorContext(&e).to_string(),
            }
        }
        Err(self.failed("store", key, last))
    }

    /// Downloads an object of the cluster's own (retried; not checked).
    pub async fn get_object(&self, key: &str) -> Result<Vec<u8>, SharedCodeError> {
        let mut last = String::new();
        for attempt in 0..TRIES {
            if attempt > 0 {
                tokio::time::sleep(RETRY_DELAY).await;
            }
            match self
                .client
                .get_object()
                .bucket(SYSTEM_BUCKET)
                .key(key)
                .send()
                .await
            {
                Ok(response) => match response.body.collect().await {
                    Ok(bytes) => return Ok(bytes.into_bytes().to_vec()),
                    Err(e) => last = e.to_string(),
                },
                Err(e) => last = DisplayErrorContext(&e).to_string(),
            }
        }
        Err(self.failed("fetch", key, last))
    }

    /// Deletes an object of the cluster's own (once: what is left is only garbage).
    pub async fn delete_object(&self, key: &str) -> Result<(), SharedCodeError> {
        self.client
            .delete_object()
            .bucket(SYSTEM_BUCKET)
            .key(key)
            .send()
            .await
            .map(|_| ())
            .map_err(|e| self.failed("delete", key, DisplayErrorContext(&e).to_string()))
    }

    /// Every object of the cluster's own under `prefix`: its key, size and when it was last
    /// written (by the store's clock).
    pub async fn list(&self, prefix: &str) -> Result<Vec<SharedObject>, SharedCodeError> {
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let page = self
                .client
                .list_objects_v2()
                .bucket(SYSTEM_BUCKET)
                .prefix(prefix)
                .set_continuation_token(token.take())
                .send()
                .await
                .map_err(|e| self.failed("list", prefix, DisplayErrorContext(&e).to_string()))?;
            for object in page.contents() {
                let (Some(key), Some(modified)) = (object.key(), object.last_modified()) else {
                    continue;
                };
                let Some(last_modified) =
                    chrono::DateTime::from_timestamp(modified.secs(), modified.subsec_nanos())
                else {
                    continue;
                };
                out.push(SharedObject {
                    key: key.to_string(),
                    size: object.size().unwrap_or(0).max(0) as u64,
                    last_modified,
                });
            }
            match page.next_continuation_token() {
                Some(next) if page.is_truncated() == Some(true) => token = Some(next.to_string()),
                _ => return Ok(out),
            }
        }
    }

    /// Downloads package `digest` (hex) and checks its SHA-256.
    pub async fn get(&self, digest: &str) -> Result<Vec<u8>, SharedCodeError> {
        let mut last = String::new();
        for attempt in 0..TRIES {
            if attempt > 0 {
                tokio::time::sleep(RETRY_DELAY).await;
            }
            let response = self
                .client
                .get_object()
                .bucket(SYSTEM_BUCKET)
                .key(object_key(digest))
                .send()
                .await;
            let body = match response {
                Ok(response) => response.body.collect().await,
                Err(e) if e.code() == Some("NoSuchKey") => {
                    return Err(SharedCodeError::Missing {
                        endpoint: self.endpoint.clone(),
                        digest: digest.to_string(),
                    })
                }
                Err(e) => {
                    last = DisplayErrorContext(&e).to_string();
                    continue;
                }
            };
            match body {
                Ok(bytes) => {
                    let zip = bytes.into_bytes().to_vec();
                    let actual = hex::encode(Sha256::digest(&zip));
                    if actual != digest {
                        return Err(SharedCodeError::Digest {
                            digest: digest.to_string(),
                            actual,
                        });
                    }
                    return Ok(zip);
                }
                Err(e) => last = e.to_string(),
            }
        }
        Err(self.failed("fetch", digest, last))
    }
}
