//! A small signed HTTP client for the CLI.

use std::io::Read;

use anyhow::{bail, Context};
use http::{HeaderMap, HeaderValue, Method, Uri};

use super::Connection;
use crate::auth::{sigv4, Credentials, StoredCredentials};

pub struct Client {
    endpoint: String,
    credentials: Credentials,
    region: String,
    agent: ureq::Agent,
}

/// Status, lowercase headers and body of a successful response.
pub type Reply = (u16, Vec<(String, String)>, Vec<u8>);

/// An error response from kiln: Lambda's error type, the HTTP status and the message.
#[derive(Debug, thiserror::Error)]
#[error("{kind} ({status}): {message}")]
pub struct ApiFailure {
    pub kind: String,
    pub status: u16,
    pub message: String,
}

impl ApiFailure {
    fn from_response(status: u16, response: ureq::Response) -> Self {
        let kind = response
            .header("x-amzn-errortype")
            .unwrap_or("Error")
            .to_string();
        let text = response.into_string().unwrap_or_default();
        let message = serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| {
                v["message"]
                    .as_str()
                    .or(v["Message"].as_str())
                    .map(str::to_string)
            })
            .unwrap_or(text);
        Self {
            kind,
            status,
            message,
        }
    }
}

impl Client {
    pub fn connect(connection: &Connection) -> anyhow::Result<Self> {
        let (credentials, region) = match (
            std::env::var("AWS_ACCESS_KEY_ID"),
            std::env::var("AWS_SECRET_ACCESS_KEY"),
        ) {
            (Ok(access_key_id), Ok(secret_access_key)) => (
                Credentials {
                    access_key_id,
                    secret_access_key,
                },
                std::env::var("AWS_REGION").unwrap_or_else(|_| "us-east-1".into()),
            ),
            _ => {
                let stored = StoredCredentials::load(&connection.data_dir).with_context(|| {
                    format!(
                        "no credentials: set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or point --data-dir at the kiln server's data dir (tried {})",
                        StoredCredentials::path(&connection.data_dir).display()
                    )
                })?;
                (stored.credentials(), stored.region)
            }
        };
        Ok(Self {
            endpoint: connection.endpoint.trim_end_matches('/').to_string(),
            credentials,
            region,
            agent: ureq::AgentBuilder::new().build(),
        })
    }

    /// The region requests are signed for.
    pub fn region(&self) -> &str {
        &self.region
    }

    fn request(
        &self,
        method: &str,
        path: &str,
        body: &[u8],
        extra: &[(&str, &str)],
    ) -> anyhow::Result<ureq::Request> {
        self.request_for("lambda", method, path, body, extra)
    }

    /// A request signed for `service` (`lambda` for kiln's own API, `scheduler` for
    /// EventBridge Scheduler's).
    fn request_for(
        &self,
        service: &str,
        method: &str,
        path: &str,
        body: &[u8],
        extra: &[(&str, &str)],
    ) -> anyhow::Result<ureq::Request> {
        let url = format!("{}{path}", self.endpoint);
        let uri: Uri = url.parse().with_context(|| format!("bad URL {url}"))?;
        let method_parsed = Method::from_bytes(method.as_bytes())?;
        let mut headers = HeaderMap::new();
        headers.insert(
            "host",
            HeaderValue::from_str(uri.authority().map(|a| a.as_str()).unwrap_or(""))?,
        );
        headers.insert("content-type", HeaderValue::from_static("application/json"));
        for (k, v) in extra {
            headers.insert(
                http::HeaderName::from_bytes(k.as_bytes())?,
                HeaderValue::from_str(v)?,
            );
        }
        sigv4::sign(
            &method_parsed,
            &uri,
            &mut headers,
            body,
            &self.credentials,
            &self.region,
            service,
            chrono::Utc::now(),
        );
        let mut request = self.agent.request(method, &url);
        for (name, value) in &headers {
            if name != "host" {
                request = request.set(name.as_str(), value.to_str().unwrap_or(""));
            }
        }
        Ok(request)
    }

    /// Sends a signed request; a Lambda error response becomes an error with its message.
    pub fn call(
        &self,
        method: &str,
        path: &str,
        body: &[u8],
        extra: &[(&str, &str)],
    ) -> anyhow::Result<Reply> {
        self.call_for("lambda", method, path, body, extra)
    }

    /// [`Client::call`] signed for another service's API that kiln serves (`scheduler`).
    pub fn call_for(
        &self,
        service: &str,
        method: &str,
        path: &str,
        body: &[u8],
        extra: &[(&str, &str)],
    ) -> anyhow::Result<Reply> {
        let request = self.request_for(service, method, path, body, extra)?;
        match request.send_bytes(body) {
            Ok(response) => {
                let status = response.status();
                let headers = response
                    .headers_names()
                    .into_iter()
                    .filter_map(|n| {
                        response
                            .header(&n)
                            .map(|v| (n.to_ascii_lowercase(), v.to_string()))
                    })
                    .collect();
                let mut out = Vec::new();
                response
                    .into_reader()
                    .take(64 * 1024 * 1024)
                    .read_to_end(&mut out)?;
                Ok((status, headers, out))
            }
            Err(ureq::Error::Status(status, response)) => {
                Err(ApiFailure::from_response(status, response).into())
            }
            Err(e) => bail!("cannot reach kiln at {}: {e}", self.endpoint),
        }
    }

    /// Sends a signed GET and returns the body as a stream.
    pub fn stream(&self, method: &str, path: &str) -> anyhow::Result<Box<dyn Read + Send>> {
        let request = self.request(method, path, b"", &[])?;
        match request.call() {
            Ok(response) => Ok(Box::new(response.into_reader())),
            Err(ureq::Error::Status(status, response)) => {
                Err(ApiFailure::from_response(status, response).into())
            }
            Err(e) => bail!("cannot reach kiln at {}: {e}", self.endpoint),
        }
    }
}

/// Percent-encodes a function name (or marker) for a URL path or query.
pub fn segment(raw: &str) -> String {
    const RESERVED: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'_')
        .remove(b'.')
        .remove(b'~');
    percent_encoding::utf8_percent_encode(raw, RESERVED).to_string()
}
