//! The HTTP layer: the AWS Lambda REST API, function URLs, and kiln's own endpoints.
//!
//! Handlers parse and authenticate; the [`Controller`] decides. [`ApiError`] maps every
//! controller error to Lambda's status code and error body in one place.

mod aliases;
mod apps;
mod buckets;
mod cluster;
pub mod console;
mod event_invoke;
mod events;
mod function_table;
mod functions;
mod invoke;
mod kiln;
mod layers;
mod pages;
mod provisioned;
mod schedules;
mod serve;
mod tags;
mod test_events;
mod urls;

use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post, put};
use axum::Router;
use bytes::Bytes;

use crate::auth::{AuthError, Credentials, Verifier};
use crate::console::{Console, ConsoleError};
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
    /// The console's sessions; `None` with `--ui off`.
    pub console: Option<Arc<Console>>,
    /// The last hour of activity, for the console's charts; `None` with `--ui off`.
    pub history: Option<Arc<crate::history::History>>,
    /// EventBridge Scheduler's schedules; `None` in cluster mode (not there yet).
    pub schedules: Option<Arc<crate::schedules::Schedules>>,
    /// The object store, called in-process for `/kiln/v1/buckets/…`.
    pub objects: crate::objects::browse::ObjectBrowser,
    /// Where the API's listener is bound (function URLs are served there only).
    pub api_address: std::net::SocketAddr,
}

pub use serve::MakeApi;

pub type SharedState = Arc<AppState>;

/// Deployment packages arrive base64-encoded inside JSON: 50 MB of zip is ~67 MB of body.
const MAX_BODY_BYTES: usize = 70 * 1024 * 1024;

/// The API listener: Lambda's API, kiln's own, and function URLs. Signed requests only: a
/// function URL's page is served here, so this origin must not honour the console's cookie.
pub fn router(state: SharedState) -> Router {
    api_routes()
        .route("/fn/{name}", any(urls::call))
        .route("/fn/{name}/", any(urls::call))
        .route("/fn/{name}/{*path}", any(urls::call))
        .route("/ui", any(console_elsewhere))
        .route("/ui/{*rest}", any(console_elsewhere))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::map_response(lambda_response))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}

/// The console's listener, an origin of its own: the console's pages and the same API, which
/// takes the console's session cookie there. Nothing a function controls is served on it (no
/// function URLs), so no function's script runs with a signed-in console's cookie.
pub fn console_router(state: SharedState) -> Router {
    console::routes()
        .merge(api_routes())
        .route(
            "/",
            get(|| async { axum::response::Redirect::temporary("/ui/") }),
        )
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::map_response(lambda_response))
        .layer(axum::Extension(ConsoleOrigin))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}

/// Marks a request that came to the console's listener (where the session cookie counts).
#[derive(Debug, Clone, Copy)]
pub struct ConsoleOrigin;

/// The console is on its own listener (`kiln up` prints where).
async fn console_elsewhere() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "ResourceNotFoundException",
        "the console is served on its own listener (--ui-listen; kiln up prints its URL), not on the API's",
    )
}

/// The routes both listeners serve.
fn api_routes() -> Router<SharedState> {
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
            get(functions::list_versions).post(functions::publish_version),
        )
        .route(
            "/2015-03-31/functions/{name}/aliases",
            get(aliases::list).post(aliases::create),
        )
        .route(
            "/2015-03-31/functions/{name}/aliases/{alias}",
            get(aliases::get)
                .put(aliases::update)
                .delete(aliases::delete),
        )
        .route(
            "/2016-08-19/account-settings",
            get(functions::account_settings),
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
            "/2019-09-30/functions/{name}/provisioned-concurrency",
            get(provisioned::get)
                .put(provisioned::put)
                .delete(provisioned::delete),
        )
        .route(
            "/2021-10-31/functions/{name}/url",
            get(urls::get_config)
                .post(urls::create_config)
                .put(urls::update_config)
                .delete(urls::delete_config),
        )
        .route("/2021-10-31/functions/{name}/urls", get(urls::list_configs))
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
        .route("/2018-10-31/layers", get(layers::list))
        .route(
            "/2018-10-31/layers/{name}/versions",
            get(layers::list_versions).post(layers::publish),
        )
        .route(
            "/2018-10-31/layers/{name}/versions/{version}",
            get(layers::get).delete(layers::delete),
        )
        .route("/schedules", get(schedules::list))
        .route(
            "/schedules/{name}",
            get(schedules::get)
                .post(schedules::create)
                .put(schedules::update)
                .delete(schedules::delete),
        )
        .route(
            "/2017-03-31/tags/{resource}",
            get(tags::list).post(tags::tag).delete(tags::untag),
        )
        .route("/kiln/v1/status", get(kiln::status))
        .route("/kiln/v1/functions", get(function_table::list))
        .route("/kiln/v1/functions/{name}/logs", get(kiln::logs))
        .route(
            "/kiln/v1/functions/{name}/history",
            get(kiln::function_history),
        )
        .route(
            "/kiln/v1/functions/{name}/test-events",
            get(test_events::list),
        )
        .route(
            "/kiln/v1/functions/{name}/test-events/{event}",
            axum::routing::put(test_events::put).delete(test_events::delete),
        )
        .route("/kiln/v1/functions/{name}/sessions", get(kiln::sessions))
        .route(
            "/kiln/v1/functions/{name}/sessions/{session}",
            axum::routing::delete(kiln::end_session),
        )
        .route("/kiln/v1/code/{file}", get(kiln::code))
        .route("/kiln/v1/layers/code/{file}", get(kiln::layer_code))
        .route("/kiln/v1/functions/{name}/key", post(kiln::function_key))
        .route("/kiln/v1/functions/{name}/files", get(kiln::code_files))
        .route(
            "/kiln/v1/functions/{name}/files/{*path}",
            get(kiln::code_file),
        )
        .route("/kiln/v1/history", get(kiln::history))
        .route("/kiln/v1/buckets", get(buckets::buckets))
        .route(
            "/kiln/v1/buckets/{bucket}",
            put(buckets::create_bucket).delete(buckets::delete_bucket),
        )
        .route("/kiln/v1/buckets/{bucket}/objects", get(buckets::list))
        .route(
            "/kiln/v1/buckets/{bucket}/object",
            get(buckets::download)
                .put(buckets::upload)
                .delete(buckets::delete),
        )
        .route(
            "/kiln/v1/buckets/{bucket}/object/details",
            get(buckets::details),
        )
        .route("/kiln/v1/buckets/{bucket}/object/link", post(buckets::link))
        .route(
            "/kiln/v1/buckets/{bucket}/uploads",
            post(buckets::start_upload),
        )
        .route(
            "/kiln/v1/buckets/{bucket}/uploads/{upload}",
            post(buckets::complete_upload).delete(buckets::abort_upload),
        )
        .route(
            "/kiln/v1/buckets/{bucket}/uploads/{upload}/{part}",
            put(buckets::upload_part),
        )
        .route("/kiln/v1/async", get(events::list))
        .route(
            "/kiln/v1/async/failures/{request_id}",
            axum::routing::delete(events::delete),
        )
        .route(
            "/kiln/v1/async/failures/{request_id}/retry",
            post(events::retry),
        )
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
async fn lambda_response(uri: Uri, response: Response) -> Response {
    if uri.path().starts_with("/fn/") {
        return response;
    }
    lambda_answer(response).await
}

/// A Lambda answer's request id, and an error's body as Lambda words it.
async fn lambda_answer(mut response: Response) -> Response {
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
    /// Seconds for `Retry-After` on a 429 (one unless set).
    retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            reason: None,
            retry_after: None,
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
            retry_after: None,
        }
    }
}

impl From<crate::objects::browse::BrowseError> for ApiError {
    fn from(e: crate::objects::browse::BrowseError) -> Self {
        /// S3's names kept as the error's type; the rest are Lambda's generic ones.
        const NAMED: &[&str] = &[
            "AccessDenied",
            "BadDigest",
            "BucketAlreadyExists",
            "BucketAlreadyOwnedByYou",
            "BucketNotEmpty",
            "EntityTooLarge",
            "EntityTooSmall",
            "InvalidArgument",
            "InvalidBucketName",
            "InvalidDigest",
            "InvalidPart",
            "InvalidPartOrder",
            "InvalidRequest",
            "KeyTooLongError",
            "NoSuchBucket",
            "NoSuchKey",
            "NoSuchUpload",
            "PreconditionFailed",
        ];
        let status = e.status();
        let code = e
            .s3_code()
            .and_then(|code| NAMED.iter().find(|n| **n == code.as_str()).copied())
            .unwrap_or(if status.is_server_error() {
                "ServiceException"
            } else {
                "InvalidParameterValueException"
            });
        Self::new(status, code, e.to_string())
    }
}

impl From<AuthError> for ApiError {
    fn from(e: AuthError) -> Self {
        Self::new(StatusCode::FORBIDDEN, e.aws_code(), e.to_string())
    }
}

impl From<ConsoleError> for ApiError {
    fn from(e: ConsoleError) -> Self {
        let message = e.to_string();
        let (status, code) = match e {
            ConsoleError::WrongCredentials | ConsoleError::SignedOut => {
                (StatusCode::UNAUTHORIZED, "AccessDeniedException")
            }
            ConsoleError::FunctionKey | ConsoleError::Csrf => {
                (StatusCode::FORBIDDEN, "AccessDeniedException")
            }
            ConsoleError::TooManyAttempts { retry_after } => {
                let mut error = Self::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    "TooManyRequestsException",
                    message,
                );
                error.retry_after = Some(retry_after.as_secs().max(1));
                return error;
            }
        };
        Self::new(status, code, message)
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
            let seconds = HeaderValue::from(self.retry_after.unwrap_or(1));
            response.headers_mut().insert("retry-after", seconds);
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
        Signed::for_service(request, state, "lambda").await
    }
}

impl Signed {
    /// Reads the request and checks it was signed for `service` (or, on the console's
    /// listener, that it carries the console's session).
    async fn for_service(
        request: axum::extract::Request,
        state: &SharedState,
        service: &str,
    ) -> Result<Self, ApiError> {
        let (parts, body) = request.into_parts();
        let body = axum::body::to_bytes(body, MAX_BODY_BYTES)
            .await
            .map_err(|_| too_large())?;
        let console_origin = parts.extensions.get::<ConsoleOrigin>().is_some();
        authenticate(
            state,
            &parts.method,
            &parts.uri,
            &parts.headers,
            &body,
            console_origin,
            service,
        )?;
        Ok(Signed {
            uri: parts.uri,
            headers: parts.headers,
            body,
        })
    }
}

/// A request signed for EventBridge Scheduler (`scheduler`), as its clients sign.
pub struct SchedulerSigned(pub Signed);

impl axum::extract::FromRequest<SharedState> for SchedulerSigned {
    type Rejection = ApiError;

    async fn from_request(
        request: axum::extract::Request,
        state: &SharedState,
    ) -> Result<Self, ApiError> {
        Signed::for_service(request, state, "scheduler")
            .await
            .map(SchedulerSigned)
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

/// Lets a request through on its SigV4 signature or, on the console's listener
/// (`console_origin`), on its session cookie (with the session's CSRF token when it changes
/// something).
pub fn authenticate(
    state: &AppState,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &Bytes,
    console_origin: bool,
    service: &str,
) -> Result<(), ApiError> {
    if let Some((console, token)) = console_session(state, uri, headers).filter(|_| console_origin)
    {
        let csrf = headers
            .get(crate::console::CSRF_HEADER)
            .and_then(|v| v.to_str().ok());
        console.authorize(token, csrf, console::is_safe(method), &state.credentials)?;
        return Ok(());
    }
    authenticate_signature(state, method, uri, headers, body, service)
}

/// The console and the session cookie's token, for a request with a cookie and no signature.
fn console_session<'a>(
    state: &'a AppState,
    uri: &Uri,
    headers: &'a HeaderMap,
) -> Option<(&'a Console, &'a str)> {
    let console = state.console.as_deref()?;
    if headers.contains_key(axum::http::header::AUTHORIZATION)
        || uri.query().is_some_and(|q| q.contains("X-Amz-Signature="))
    {
        return None;
    }
    Some((console, console::session_cookie(headers)?))
}

/// Checks a request's SigV4 signature against kiln's credentials.
pub fn authenticate_signature(
    state: &AppState,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &Bytes,
    service: &str,
) -> Result<(), ApiError> {
    let identity = state
        .verifier
        .verify(method, uri, headers, body, chrono::Utc::now())?;
    // A signature made for another service must not open this one (as on AWS).
    if identity.service != service {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "InvalidSignatureException",
            format!(
                "Credential should be scoped to correct service: '{service}', not '{}'.",
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

/// A JSON body whose every field is optional: an empty (or blank) body is the default.
pub fn parse_json_or_default<T: serde::de::DeserializeOwned + Default>(
    body: &Bytes,
) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        Ok(T::default())
    } else {
        parse_json(body)
    }
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

/// `http://HOST:PORT` of one of kiln's listeners as a caller who reached kiln by `host` (a
/// `Host` header) can reach it: the listener's own address, unless it listens on every
/// address; then the host name the caller used, with the listener's port.
pub fn reached_at(listener: std::net::SocketAddr, host: Option<&str>) -> String {
    if !listener.ip().is_unspecified() {
        return format!("http://{listener}");
    }
    let name = host
        .and_then(|h| h.parse::<http::uri::Authority>().ok())
        .map(|a| a.host().to_string())
        .unwrap_or_else(|| "127.0.0.1".into());
    format!("http://{name}:{}", listener.port())
}

/// The base URL clients used to reach kiln, for URLs kiln hands out.
pub fn base_url(headers: &HeaderMap) -> String {
    let host = headers
        .get("host")
        .and_then(|h| h.to_str().ok())
        .unwrap_or("127.0.0.1:9000");
    format!("http://{host}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn other_listeners_are_reached_where_the_caller_can() {
        let bound: std::net::SocketAddr = "127.0.0.1:9001".parse().unwrap();
        assert_eq!(
            reached_at(bound, Some("example.test:9002")),
            "http://127.0.0.1:9001"
        );
        let every: std::net::SocketAddr = "0.0.0.0:9001".parse().unwrap();
        assert_eq!(
            reached_at(every, Some("kiln.example.test:9002")),
            "http://kiln.example.test:9001"
        );
        assert_eq!(reached_at(every, Some("[::1]:9002")), "http://[::1]:9001");
        assert_eq!(reached_at(every, None), "http://127.0.0.1:9001");
        assert_eq!(
            reached_at(every, Some("not a host")),
            "http://127.0.0.1:9001"
        );
    }
}
