//! The HTTP layer: the AWS Lambda REST API, function URLs, and kiln's own endpoints.
//!
//! Handlers parse and authenticate; the [`Controller`] decides. [`ApiError`] maps every
//! controller error to Lambda's status code and error body in one place.

mod apps;
mod cluster;
mod event_invoke;
mod functions;
mod invoke;
mod kiln;
mod tags;
mod urls;

use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post, put};
use axum::Router;
use bytes::Bytes;

use crate::auth::{AuthError, Credentials, Verifier};
use crate::controller::{Controller, ControllerError};

/// Shared state of all handlers.
pub struct AppState {
    pub controller: Arc<Controller>,
    /// Burst offloading's apps, each with its gateway.
    pub apps: Arc<crate::burst::Apps>,
    pub verifier: Verifier,
    pub credentials: Credentials,
    /// This node's membership, in cluster mode.
    pub cluster: Option<Arc<crate::cluster::Membership>>,
}

pub type SharedState = Arc<AppState>;

/// Deployment packages arrive base64-encoded inside JSON: 50 MB of zip is ~67 MB of body.
const MAX_BODY_BYTES: usize = 70 * 1024 * 1024;

pub fn router(state: SharedState) -> Router {
    Router::new()
        .route(
            "/2015-03-31/functions",
            get(functions::list).post(functions::create),
        )
        .route(
            "/2015-03-31/functions/",
            get(functions::list).post(functions::create),
        )
        .route(
            "/2015-03-31/functions/{name}",
            get(functions::get).delete(functions::delete),
        )
        .route(
            "/2015-03-31/functions/{name}/configuration",
            get(functions::get_configuration).put(functions::update_configuration),
        )
        .route(
            "/2015-03-31/functions/{name}/code",
            put(functions::update_code),
        )
        .route(
            "/2015-03-31/functions/{name}/invocations",
            post(invoke::invoke),
        )
        .route(
            "/2015-03-31/functions/{name}/versions",
            get(functions::list_versions),
        )
        .route(
            "/2020-06-30/functions/{name}/code-signing-config",
            get(functions::get_code_signing_config),
        )
        .route(
            "/2017-10-31/functions/{name}/concurrency",
            put(functions::put_concurrency).delete(functions::delete_concurrency),
        )
        .route(
            "/2019-09-30/functions/{name}/concurrency",
            get(functions::get_concurrency),
        )
        .route(
            "/2021-10-31/functions/{name}/url",
            get(urls::get_config)
                .post(urls::create_config)
                .put(urls::update_config)
                .delete(urls::delete_config),
        )
        .route(
            "/2019-09-25/functions/{name}/event-invoke-config",
            get(event_invoke::get)
                .put(event_invoke::put)
                .post(event_invoke::update)
                .delete(event_invoke::delete),
        )
        .route(
            "/2019-09-25/functions/{name}/event-invoke-config/list",
            get(event_invoke::list),
        )
        .route(
            "/2017-03-31/tags/{resource}",
            get(tags::list).post(tags::tag).delete(tags::untag),
        )
        .route("/fn/{name}", any(urls::call))
        .route("/fn/{name}/", any(urls::call))
        .route("/fn/{name}/{*path}", any(urls::call))
        .route("/kiln/v1/status", get(kiln::status))
        .route("/kiln/v1/functions/{name}/logs", get(kiln::logs))
        .route("/kiln/v1/functions/{name}/sessions", get(kiln::sessions))
        .route(
            "/kiln/v1/functions/{name}/sessions/{session}",
            axum::routing::delete(kiln::end_session),
        )
        .route("/kiln/v1/code/{file}", get(kiln::code))
        .route("/kiln/v1/sequences", get(kiln::list_sequences))
        .route(
            "/kiln/v1/sequences/{name}",
            get(kiln::get_sequence)
                .put(kiln::put_sequence)
                .delete(kiln::delete_sequence),
        )
        .route("/kiln/v1/apps", get(apps::list))
        .route(
            "/kiln/v1/apps/{name}",
            get(apps::get).put(apps::put).delete(apps::delete),
        )
        .route("/kiln/v1/apps/{name}/routes", get(apps::routes))
        .route("/kiln/v1/apps/{name}/status", get(apps::status))
        .route("/kiln/v1/cluster", get(cluster::status))
        .route("/kiln/v1/cluster/nodes/{node}/drain", post(cluster::drain))
        .route(
            "/kiln/v1/cluster/nodes/{node}/undrain",
            post(cluster::undrain),
        )
        .route("/metrics", get(kiln::metrics))
        .route("/health", get(kiln::health))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::map_response(lambda_response))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}

async fn not_found(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "UnknownOperationException",
        format!("kiln does not implement {method} {}", uri.path()),
    )
}

async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "UnknownOperationException",
        format!("kiln does not implement {method} {}", uri.path()),
    )
}

/// Gives every API response Lambda's envelope: an `x-amzn-RequestId`, and for errors that
/// did not come from [`ApiError`] (axum's own rejections: undecodable paths or queries, bodies
/// over the limit) a JSON body with `x-amzn-ErrorType`. Function URL responses belong to the
/// function and are left alone.
async fn lambda_response(uri: Uri, mut response: Response) -> Response {
    if uri.path().starts_with("/fn/") {
        return response;
    }
    if !response.headers().contains_key("x-amzn-requestid") {
        if let Ok(value) = HeaderValue::from_str(&crate::function::new_request_id().to_string()) {
            response.headers_mut().insert("x-amzn-requestid", value);
        }
    }
    let status = response.status();
    if status.as_u16() < 400 || response.headers().contains_key("x-amzn-errortype") {
        return response;
    }
    let request_id = response.headers().get("x-amzn-requestid").cloned();
    let body = axum::body::to_bytes(std::mem::take(response.body_mut()), 64 * 1024)
        .await
        .unwrap_or_default();
    let text = String::from_utf8_lossy(&body).trim().to_string();
    let (code, message) = match status {
        StatusCode::PAYLOAD_TOO_LARGE => (
            "RequestTooLargeException",
            format!("Request must be smaller than {MAX_BODY_BYTES} bytes"),
        ),
        StatusCode::NOT_FOUND => ("ResourceNotFoundException", text),
        s if s.is_client_error() => ("InvalidParameterValueException", text),
        _ => ("ServiceException", text),
    };
    let message = if message.is_empty() {
        status.canonical_reason().unwrap_or("error").to_string()
    } else {
        message
    };
    let mut fixed = ApiError::new(status, code, message).into_response();
    if let Some(id) = request_id {
        fixed.headers_mut().insert("x-amzn-requestid", id);
    }
    fixed
}

/// A Lambda error response: status, `x-amzn-ErrorType` and a JSON body.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
    reason: Option<&'static str>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            reason: None,
        }
    }
}

impl From<ControllerError> for ApiError {
    fn from(e: ControllerError) -> Self {
        let message = e.to_string();
        let (status, code, reason) = match e {
            ControllerError::NotFound(_) => {
                (StatusCode::NOT_FOUND, "ResourceNotFoundException", None)
            }
            ControllerError::Conflict(_) => {
                (StatusCode::CONFLICT, "ResourceConflictException", None)
            }
            ControllerError::InvalidParameter(_) => (
                StatusCode::BAD_REQUEST,
                "InvalidParameterValueException",
                None,
            ),
            ControllerError::Validation(_) => {
                (StatusCode::BAD_REQUEST, "ValidationException", None)
            }
            ControllerError::InvalidRequestContent(_) => (
                StatusCode::BAD_REQUEST,
                "InvalidRequestContentException",
                None,
            ),
            ControllerError::PreconditionFailed(_) => (
                StatusCode::PRECONDITION_FAILED,
                "PreconditionFailedException",
                None,
            ),
            ControllerError::TooLarge(_) => (
                StatusCode::PAYLOAD_TOO_LARGE,
                "RequestTooLargeException",
                None,
            ),
            ControllerError::Throttled { reserved: true } => (
                StatusCode::TOO_MANY_REQUESTS,
                "TooManyRequestsException",
                Some("ReservedFunctionConcurrentInvocationLimitExceeded"),
            ),
            ControllerError::Throttled { reserved: false } => (
                StatusCode::TOO_MANY_REQUESTS,
                "TooManyRequestsException",
                Some("ConcurrentInvocationLimitExceeded"),
            ),
            ControllerError::Internal(_) => {
                (StatusCode::INTERNAL_SERVER_ERROR, "ServiceException", None)
            }
            ControllerError::ShuttingDown | ControllerError::Unavailable(_) => {
                (StatusCode::SERVICE_UNAVAILABLE, "ServiceException", None)
            }
        };
        Self {
            status,
            code,
            message,
            reason,
        }
    }
}

impl From<AuthError> for ApiError {
    fn from(e: AuthError) -> Self {
        Self::new(StatusCode::FORBIDDEN, e.aws_code(), e.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body =
            serde_json::json!({ "Type": "User", "message": self.message, "__type": self.code });
        if let Some(reason) = self.reason {
            body["Reason"] = reason.into();
        }
        if self.status.is_server_error() {
            body["Type"] = "Service".into();
        }
        let mut response = (self.status, axum::Json(body)).into_response();
        response
            .headers_mut()
            .insert("x-amzn-errortype", HeaderValue::from_static(self.code));
        if self.status == StatusCode::TOO_MANY_REQUESTS {
            response
                .headers_mut()
                .insert("retry-after", HeaderValue::from_static("1"));
        }
        response
    }
}

/// A Lambda API request whose SigV4 signature verified, taken apart for its handler: the
/// extractor every signed route ends with (it reads the body, so it comes last).
pub struct Signed {
    pub uri: Uri,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl axum::extract::FromRequest<SharedState> for Signed {
    type Rejection = ApiError;

    async fn from_request(
        request: axum::extract::Request,
        state: &SharedState,
    ) -> Result<Self, ApiError> {
        let (parts, body) = request.into_parts();
        let body = axum::body::to_bytes(body, MAX_BODY_BYTES)
            .await
            .map_err(|_| too_large())?;
        authenticate(state, &parts.method, &parts.uri, &parts.headers, &body)?;
        Ok(Signed {
            uri: parts.uri,
            headers: parts.headers,
            body,
        })
    }
}

/// Lambda's answer to a body over [`MAX_BODY_BYTES`].
pub fn too_large() -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "RequestTooLargeException",
        format!("Request must be smaller than {MAX_BODY_BYTES} bytes"),
    )
}

/// Checks a request's SigV4 signature against kiln's credentials.
pub fn authenticate(
    state: &AppState,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<(), ApiError> {
    let identity = state
        .verifier
        .verify(method, uri, headers, body, chrono::Utc::now())?;
    // A signature made for another service must not open this one (as on AWS).
    if identity.service != "lambda" {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "InvalidSignatureException",
            format!(
                "Credential should be scoped to correct service: 'lambda', not '{}'.",
                identity.service
            ),
        ));
    }
    Ok(())
}

/// Parses a JSON request body into `T`, answering Lambda's error for anything else.
pub fn parse_json<T: serde::de::DeserializeOwned>(body: &Bytes) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "InvalidRequestContentException",
            format!("Could not parse request body: {e}"),
        )
    })
}

/// The session hint reads headers through this, so nothing below the API sees an HTTP type.
impl crate::session::Headers for HeaderMap {
    fn first(&self, name: &str) -> Option<&[u8]> {
        self.get(name).map(|v| v.as_bytes())
    }

    fn all(&self, name: &str) -> Vec<&[u8]> {
        self.get_all(name).iter().map(|v| v.as_bytes()).collect()
    }
}

/// The `Qualifier` query parameter.
pub fn qualifier(uri: &Uri) -> Option<String> {
    uri.query().and_then(|q| {
        q.split('&')
            .find_map(|pair| pair.strip_prefix("Qualifier="))
            .map(|v| {
                percent_encoding::percent_decode_str(v)
                    .decode_utf8_lossy()
                    .into_owned()
            })
    })
}

/// Folds the `Qualifier` query parameter into the function reference.
pub fn qualified(name: &str, uri: &Uri) -> String {
    match qualifier(uri) {
        Some(q) if !q.is_empty() => format!("{name}:{q}"),
        _ => name.to_string(),
    }
}

/// The base URL clients used to reach kiln, for URLs kiln hands out.
pub fn base_url(headers: &HeaderMap) -> String {
    let host = headers
        .get("host")
        .and_then(|h| h.to_str().ok())
        .unwrap_or("127.0.0.1:9000");
    format!("http://{host}")
}
