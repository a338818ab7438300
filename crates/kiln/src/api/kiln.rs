//! kiln's own endpoints: status, logs, code download, sequences, metrics and health.

use std::convert::Infallible;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use hmac::{Hmac, Mac};
use serde::Deserialize;
use sha2::Sha256;

use super::{ApiError, SharedState, Signed};
use crate::auth::{constant_time_eq, Credentials};

pub async fn status(State(state): State<SharedState>, _: Signed) -> Result<Response, ApiError> {
    let status = state.controller.node_status();
    let functions: Vec<String> = state
        .controller
        .list()
        .into_iter()
        .map(|f| f.name)
        .collect();
    Ok(Json(serde_json::json!({
        "functions": functions,
        "node": status,
        "asyncQueueDepth": state.controller.queue_depth(),
        "memoryModels": state.controller.models(),
        "objectCache": state.controller.object_cache_status(),
        "objectCacheMemory": state.controller.object_cache_memory(),
    }))
    .into_response())
}

#[derive(Deserialize)]
pub struct HistoryQuery {
    seconds: Option<String>,
}

/// The node's activity a second at a time, oldest first: `{"IntervalSeconds": 1, "Samples":
/// [{"Time", "Invocations", "Errors", "Throttles", "Coldest", "Warm", "Hot", "P50", "P99"}],
/// "Duration": {"Count", "P50", "P99"}, "Cache": [{"Time", "Hits", "Misses", "Admitted",
/// "Evictions", "WrittenBack", "CapacityBytes", "UsedBytes", "LendableBytes", "SlackBytes",
/// "Lent", "DirtyBytes", "LagMs", "JournalBytes"}]}` for the last `seconds` (300 by default,
/// up to an hour); durations in milliseconds, each second's and the whole window's; `Cache`
/// null without an object cache. Kept while the console is on.
pub async fn history(
    State(state): State<SharedState>,
    Query(query): Query<HistoryQuery>,
    _: Signed,
) -> Result<Response, ApiError> {
    let history = kept(&state)?;
    let max = crate::history::SAMPLES;
    let seconds = match query.seconds.as_deref() {
        None => 300,
        Some(raw) => match raw.parse::<usize>() {
            Ok(n) if (1..=max).contains(&n) => n,
            _ => {
                return Err(ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "InvalidParameterValueException",
                    format!("seconds must be a number from 1 to {max}, not '{raw}'"),
                ))
            }
        },
    };
    Ok(Json(serde_json::json!({
        "IntervalSeconds": crate::history::INTERVAL.as_secs(),
        "Samples": history.last(seconds),
        "Duration": history.durations(seconds),
        "Cache": state
            .controller
            .object_cache_memory()
            .map(|_| history.cache(seconds)),
    }))
    .into_response())
}

/// A function's last hour a minute at a time, oldest first: `{"IntervalSeconds": 60,
/// "Samples": [{"Time", "Invocations", "Errors", "P50", "P99", "Coldest", "Warm", "Hot",
/// "MaxMemoryUsed", "PredictedLimit"}], "LastInvocation",
/// "Invocations", "Errors", "ErrorRate", "Duration": {"Count", "P50", "P99"}, "Buckets":
/// [{"Le", "Count"}]}` (durations in milliseconds; the last bucket's `Le` is null: past the
/// last bound; memory in MB, null in a minute without invocations or, for the limit, when
/// they ran at MemorySize).
pub async fn function_history(
    State(state): State<SharedState>,
    Path(name): Path<String>,
    _: Signed,
) -> Result<Response, ApiError> {
    let history = kept(&state)?;
    let function = state.controller.get(&name)?;
    let now = chrono::Utc::now().timestamp();
    let hour = history.function(&function.name, now);
    let bounds = &*crate::metrics::duration::BOUNDS;
    let buckets: Vec<serde_json::Value> = hour
        .buckets
        .iter()
        .enumerate()
        .map(|(i, count)| serde_json::json!({ "Le": bounds.get(i).map(|b| b * 1000.0), "Count": count }))
        .collect();
    let activity = hour.activity;
    Ok(Json(serde_json::json!({
        "IntervalSeconds": 60,
        "Samples": hour.minutes,
        "LastInvocation": activity.last_invocation.and_then(|t| chrono::DateTime::from_timestamp(t, 0)),
        "Invocations": activity.invocations,
        "Errors": activity.errors,
        "ErrorRate": activity.error_rate(),
        "Duration": activity.durations,
        "Buckets": buckets,
    }))
    .into_response())
}

fn kept(state: &SharedState) -> Result<&crate::history::History, ApiError> {
    state.history.as_deref().ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "ResourceNotFoundException",
            "kiln keeps its history for the console, which is off (kiln up --ui off)",
        )
    })
}

/// The sessions of a function: `{"Sessions": [{"session", "instance", "requests", "age_s",
/// "idle_s"}]}`, most recently used first.
pub async fn sessions(
    State(state): State<SharedState>,
    Path(name): Path<String>,
    _: Signed,
) -> Result<Response, ApiError> {
    let sessions = state.controller.sessions(&name)?;
    Ok(Json(serde_json::json!({ "Sessions": sessions })).into_response())
}

/// Ends a session: 204, or 404 when the function has no such session.
pub async fn end_session(
    State(state): State<SharedState>,
    Path((name, session)): Path<(String, String)>,
    _: Signed,
) -> Result<Response, ApiError> {
    let function = state.controller.get(&name)?;
    if state.controller.end_session(&function.name, &session)? {
        Ok(StatusCode::NO_CONTENT.into_response())
    } else {
        Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "ResourceNotFoundException",
            format!("Function {} has no session {session}", function.name),
        ))
    }
}

/// How long a followed log gathers what is written before sending it on, and the most one
/// chunk gathers.
const FOLLOW_BATCH: std::time::Duration = std::time::Duration::from_millis(100);
const FOLLOW_CHUNK_BYTES: usize = 64 * 1024;

#[derive(Deserialize)]
pub struct LogsQuery {
    #[serde(default)]
    follow: bool,
    bytes: Option<u64>,
}

pub async fn logs(
    State(state): State<SharedState>,
    Path(name): Path<String>,
    Query(query): Query<LogsQuery>,
    _: Signed,
) -> Result<Response, ApiError> {
    let function = state.controller.get(&name)?;
    // Subscribe before reading the tail so nothing written in between is missed.
    let follower = query
        .follow
        .then(|| state.controller.logs.follow(&function.name));
    let tail = state
        .controller
        .logs
        .tail(&function.name, query.bytes.unwrap_or(64 * 1024))
        .await;
    let Some(follower) = follower else {
        return Ok(([("content-type", "text/plain; charset=utf-8")], tail).into_response());
    };
    let first =
        futures_util::stream::once(async move { Ok::<Bytes, Infallible>(Bytes::from(tail)) });
    let rest = futures_util::stream::unfold(follower, |mut rx| async move {
        use tokio::sync::broadcast::error::{RecvError, TryRecvError};
        let skipped = |n| format!("[kiln: {n} log entries skipped]\n");
        let mut chunk = match rx.recv().await {
            Ok(text) => text.to_string(),
            Err(RecvError::Lagged(n)) => skipped(n),
            Err(RecvError::Closed) => return None,
        };
        // What the function logs in the next moment goes out with it: a busy function's log
        // then costs a wake-up and a write per FOLLOW_BATCH, not per invocation.
        tokio::time::sleep(FOLLOW_BATCH).await;
        while chunk.len() < FOLLOW_CHUNK_BYTES {
            match rx.try_recv() {
                Ok(text) => chunk.push_str(&text),
                Err(TryRecvError::Lagged(n)) => chunk.push_str(&skipped(n)),
                Err(TryRecvError::Empty | TryRecvError::Closed) => break,
            }
        }
        Some((Ok::<Bytes, Infallible>(Bytes::from(chunk)), rx))
    });
    use futures_util::StreamExt;
    Ok((
        [("content-type", "text/plain; charset=utf-8")],
        Body::from_stream(first.chain(rest)),
    )
        .into_response())
}

/// The most of one file the code view shows.
const MAX_VIEWED_FILE_BYTES: u64 = 1024 * 1024;

/// A function's key for the object store (the key its sandbox is given), asked for on purpose:
/// `POST`, so that the console sends its CSRF token, and never cached. `{"FunctionName",
/// "AccessKeyId", "SecretAccessKey"}`, what `kiln s3 credentials NAME` derives locally.
pub async fn function_key(
    State(state): State<SharedState>,
    Path(name): Path<String>,
    _: Signed,
) -> Result<Response, ApiError> {
    let function = state.controller.get(&name)?;
    let key = crate::objects::function_credentials(&state.credentials, &function.name);
    tracing::info!(function = %function.name, "a function key was shown");
    let mut response = Json(serde_json::json!({
        "FunctionName": function.name,
        "AccessKeyId": key.access_key_id,
        "SecretAccessKey": key.secret_access_key,
    }))
    .into_response();
    response.headers_mut().insert(
        axum::http::header::CACHE_CONTROL,
        axum::http::HeaderValue::from_static("no-store"),
    );
    Ok(response)
}

/// The files of a function's package: `{"Files": [{"Path", "Size"}]}`.
pub async fn code_files(
    State(state): State<SharedState>,
    Path(name): Path<String>,
    _: Signed,
) -> Result<Response, ApiError> {
    let function = state.controller.get(&name)?;
    let controller = state.controller.clone();
    let files =
        tokio::task::spawn_blocking(move || controller.code_store().files(&function.code_sha256))
            .await
            .map_err(|e| code_unreadable(&e.to_string()))?
            .map_err(|e| code_unreadable(&e.to_string()))?;
    Ok(Json(serde_json::json!({ "Files": files })).into_response())
}

/// One file of a function's package as text (UTF-8, at most 1 MiB); binary files and larger
/// ones are refused with what they are.
pub async fn code_file(
    State(state): State<SharedState>,
    Path((name, path)): Path<(String, String)>,
    _: Signed,
) -> Result<Response, ApiError> {
    use crate::controller::code::FileText;
    let function = state.controller.get(&name)?;
    let controller = state.controller.clone();
    let wanted = path.clone();
    let text = tokio::task::spawn_blocking(move || {
        controller
            .code_store()
            .file_text(&function.code_sha256, &wanted, MAX_VIEWED_FILE_BYTES)
    })
    .await
    .map_err(|e| code_unreadable(&e.to_string()))?
    .map_err(|e| code_unreadable(&e.to_string()))?;
    let refuse = |status, message: String| {
        Err(ApiError::new(
            status,
            "InvalidRequestContentException",
            message,
        ))
    };
    match text {
        FileText::Text(text) => {
            Ok(([("content-type", "text/plain; charset=utf-8")], text).into_response())
        }
        FileText::Binary => refuse(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("{path} is not a text file: download the code to see it"),
        ),
        FileText::TooLarge(size) => refuse(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("{path} has {size} bytes, more than the {MAX_VIEWED_FILE_BYTES} shown: download the code to see it"),
        ),
        FileText::Missing => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "ResourceNotFoundException",
            format!("The code of {name} has no file {path}"),
        )),
    }
}

fn code_unreadable(message: &str) -> ApiError {
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "ServiceException",
        format!("the function's stored code could not be read: {message}"),
    )
}

/// How long GetFunction's `Code.Location` stays valid (Lambda's presigned URLs: 10 minutes).
pub const CODE_URL_TTL_SECS: i64 = 600;

/// The token that lets GetFunction's `Code.Location` be fetched without signing until
/// `expires` (Unix seconds), like a presigned URL.
pub fn code_token(credentials: &Credentials, sha256_hex: &str, expires: i64) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(credentials.secret_access_key.as_bytes())
        .expect("any key length");
    mac.update(b"kiln-code:");
    mac.update(sha256_hex.as_bytes());
    mac.update(format!(":{expires}").as_bytes());
    hex::encode(mac.finalize().into_bytes())
}

/// The query string of a `Code.Location` URL, valid for [`CODE_URL_TTL_SECS`].
pub fn code_query(credentials: &Credentials, sha256_hex: &str) -> String {
    let expires = chrono::Utc::now().timestamp() + CODE_URL_TTL_SECS;
    let token = code_token(credentials, sha256_hex, expires);
    format!("expires={expires}&token={token}")
}

#[derive(Deserialize)]
pub struct CodeQuery {
    token: Option<String>,
    expires: Option<i64>,
}

/// A function's `Code.Location`.
pub async fn code(
    State(state): State<SharedState>,
    Path(file): Path<String>,
    Query(query): Query<CodeQuery>,
) -> Result<Response, ApiError> {
    serve_zip(&state, state.controller.code_store(), &file, query).await
}

/// A layer version's `Content.Location`.
pub async fn layer_code(
    State(state): State<SharedState>,
    Path(file): Path<String>,
    Query(query): Query<CodeQuery>,
) -> Result<Response, ApiError> {
    serve_zip(&state, state.controller.layers().store(), &file, query).await
}

/// A stored zip, to the holder of a download URL's unexpired token.
async fn serve_zip(
    state: &SharedState,
    store: &crate::controller::code::CodeStore,
    file: &str,
    query: CodeQuery,
) -> Result<Response, ApiError> {
    let denied = |message: &str| {
        ApiError::new(
            StatusCode::FORBIDDEN,
            "AccessDeniedException",
            message.to_string(),
        )
    };
    let sha = file.strip_suffix(".zip").unwrap_or(file);
    let valid = sha.len() == 64 && sha.bytes().all(|b| b.is_ascii_hexdigit());
    let (Some(token), Some(expires)) = (query.token, query.expires) else {
        return Err(denied(
            "code download needs the token and expiry of its URL",
        ));
    };
    let expected = code_token(&state.credentials, sha, expires);
    if !valid || !constant_time_eq(expected.as_bytes(), token.as_bytes()) {
        return Err(denied("invalid code download token"));
    }
    if chrono::Utc::now().timestamp() > expires {
        return Err(denied(
            "the code download URL has expired: call GetFunction again",
        ));
    }
    let path = store.zip_path(sha);
    match tokio::fs::read(path).await {
        Ok(bytes) => Ok(([("content-type", "application/zip")], bytes).into_response()),
        Err(_) => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "ResourceNotFoundException",
            "code not found",
        )),
    }
}

pub async fn metrics(State(state): State<SharedState>) -> Response {
    (
        [(
            "content-type",
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        {
            let mut text = state.controller.render_metrics();
            crate::burst::render_metrics(
                &state.apps.statuses(),
                &state.apps.database_metrics(),
                &mut text,
            );
            if let Some(cluster) = &state.cluster {
                cluster.render_metrics(&mut text);
            }
            text
        },
    )
        .into_response()
}

pub async fn health() -> &'static str {
    "ok\n"
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct SequenceBody {
    functions: Vec<String>,
}

/// Creates or replaces a sequence: `{"Functions": ["a", "b"]}`.
pub async fn put_sequence(
    State(state): State<SharedState>,
    Path(name): Path<String>,
    Signed { body, .. }: Signed,
) -> Result<Response, ApiError> {
    let parsed: SequenceBody = serde_json::from_slice(&body).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "InvalidRequestContentException",
            format!("Expected {{\"Functions\": [NAME, ...]}}: {e}"),
        )
    })?;
    let sequence = state.controller.put_sequence(&name, parsed.functions)?;
    Ok(Json(sequence).into_response())
}

pub async fn get_sequence(
    State(state): State<SharedState>,
    Path(name): Path<String>,
    _: Signed,
) -> Result<Response, ApiError> {
    match state.controller.sequence(&name) {
        Some(sequence) => Ok(Json(&*sequence).into_response()),
        None => Err(no_sequence(&name)),
    }
}

pub async fn list_sequences(
    State(state): State<SharedState>,
    _: Signed,
) -> Result<Response, ApiError> {
    Ok(Json(serde_json::json!({ "Sequences": state.controller.list_sequences() })).into_response())
}

pub async fn delete_sequence(
    State(state): State<SharedState>,
    Path(name): Path<String>,
    _: Signed,
) -> Result<Response, ApiError> {
    if state.controller.delete_sequence(&name)? {
        Ok(StatusCode::NO_CONTENT.into_response())
    } else {
        Err(no_sequence(&name))
    }
}

fn no_sequence(name: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "ResourceNotFoundException",
        format!("Sequence not found: {name}"),
    )
}
