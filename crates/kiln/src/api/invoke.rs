//! Invoke: RequestResponse, Event and DryRun, with `LogType=Tail`.

use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine;

use super::{qualified, ApiError, SharedState, Signed};
use crate::agent::InvokeOutcome;
use crate::controller::{InvocationType, Invoked};
use crate::session::HintSource;

/// `X-Amz-Log-Result` carries the last 4 KB of the invocation's log.
const TAIL_BYTES: usize = 4096;

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

pub async fn invoke(
    State(state): State<SharedState>,
    Path(name): Path<String>,
    signed: Signed,
) -> Result<Response, ApiError> {
    invoke_signed(&state, &name, signed).await
}

/// An Invoke the API listener's service took before its router (`serve.rs`): the same
/// answer, middleware included, as the route above gives.
pub async fn answer(state: SharedState, name: String, request: Request) -> Response {
    let response = match Signed::for_service(request, &state, "lambda").await {
        Ok(signed) => invoke_signed(&state, &name, signed).await.into_response(),
        Err(e) => e.into_response(),
    };
    super::lambda_answer(response).await
}

async fn invoke_signed(
    state: &SharedState,
    name: &str,
    Signed { uri, headers, body }: Signed,
) -> Result<Response, ApiError> {
    let (uri, headers) = (&uri, &headers);
    let kind = match header(headers, "x-amz-invocation-type") {
        None | Some("RequestResponse") => InvocationType::RequestResponse,
        Some("Event") => InvocationType::Event,
        Some("DryRun") => InvocationType::DryRun,
        Some(other) => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "InvalidParameterValueException",
                format!("Value '{other}' at 'invocationType' failed to satisfy constraint: Member must satisfy enum value set: [Event, RequestResponse, DryRun]"),
            ))
        }
    };
    let tail = match header(headers, "x-amz-log-type") {
        None | Some("None") => false,
        Some("Tail") => true,
        Some(other) => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "InvalidParameterValueException",
                format!("Value '{other}' at 'logType' failed to satisfy constraint: Member must satisfy enum value set: [None, Tail]"),
            ))
        }
    };
    let client_context = header(headers, "x-amz-client-context").map(|encoded| {
        base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok())
            .unwrap_or_default()
    });
    let name = qualified(name, uri);
    match state
        .controller
        .invoke(
            &name,
            body,
            kind,
            client_context,
            HintSource {
                headers: Some(headers),
                query: uri.query(),
                json: None,
            },
        )
        .await?
    {
        Invoked::DryRun => Ok(StatusCode::NO_CONTENT.into_response()),
        Invoked::Queued { request_id } => {
            let mut response = StatusCode::ACCEPTED.into_response();
            if let Ok(value) = HeaderValue::from_str(&request_id) {
                response.headers_mut().insert("x-amzn-requestid", value);
            }
            Ok(response)
        }
        Invoked::Done {
            outcome,
            request_id,
            version,
        } => Ok(respond(outcome, &request_id, &version, tail)),
    }
}

fn respond(outcome: InvokeOutcome, request_id: &str, version: &str, tail: bool) -> Response {
    let mut response = (StatusCode::OK, outcome.body).into_response();
    let headers = response.headers_mut();
    if let Ok(value) = HeaderValue::from_str(request_id) {
        headers.insert("x-amzn-requestid", value);
    }
    headers.insert("content-type", HeaderValue::from_static("application/json"));
    if let Ok(value) = HeaderValue::from_str(version) {
        headers.insert("x-amz-executed-version", value);
    }
    if outcome.function_error {
        headers.insert(
            "x-amz-function-error",
            HeaderValue::from_static("Unhandled"),
        );
    }
    if tail {
        let log = outcome.log.as_bytes();
        let mut start = log.len().saturating_sub(TAIL_BYTES);
        // Never start in the middle of a UTF-8 sequence.
        while start < log.len() && (log[start] & 0xC0) == 0x80 {
            start += 1;
        }
        let encoded = base64::engine::general_purpose::STANDARD.encode(&log[start..]);
        if let Ok(value) = HeaderValue::from_str(&encoded) {
            headers.insert("x-amz-log-result", value);
        }
    }
    response
}
