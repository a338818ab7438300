//! `/kiln/v1/async`: the async queue's queued events and the failures it keeps, retried or
//! deleted one by one.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;

use super::{ApiError, SharedState, Signed};

/// Listed of each kind unless `limit` says otherwise, and the most it may say.
const DEFAULT_LIMIT: usize = 100;
const MAX_LIMIT: usize = 1000;

#[derive(Deserialize)]
pub struct ListQuery {
    limit: Option<String>,
}

/// `{"Depth", "Pending": [{"RequestId", "Function", "Attempts", "NotBefore"}], "Failures":
/// [{"RequestId", "Function", "Payload", "Error", "FailedAt"}]}`.
pub async fn list(
    State(state): State<SharedState>,
    Query(query): Query<ListQuery>,
    _: Signed,
) -> Result<Response, ApiError> {
    let limit = match query.limit.as_deref() {
        None => DEFAULT_LIMIT,
        Some(raw) => match raw.parse::<usize>() {
            Ok(n) if (1..=MAX_LIMIT).contains(&n) => n,
            _ => {
                return Err(ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "InvalidParameterValueException",
                    format!("limit must be a number from 1 to {MAX_LIMIT}, not '{raw}'"),
                ))
            }
        },
    };
    Ok(Json(state.controller.async_events(limit)?).into_response())
}

/// Queues a failed event again (its attempts reset): 202, or 404.
pub async fn retry(
    State(state): State<SharedState>,
    Path(request_id): Path<String>,
    _: Signed,
) -> Result<Response, ApiError> {
    if state.controller.retry_async_failure(&request_id)? {
        Ok(StatusCode::ACCEPTED.into_response())
    } else {
        Err(no_failure(&request_id))
    }
}

/// Forgets a failed event: 204, or 404.
pub async fn delete(
    State(state): State<SharedState>,
    Path(request_id): Path<String>,
    _: Signed,
) -> Result<Response, ApiError> {
    if state.controller.delete_async_failure(&request_id)? {
        Ok(StatusCode::NO_CONTENT.into_response())
    } else {
        Err(no_failure(&request_id))
    }
}

fn no_failure(request_id: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "ResourceNotFoundException",
        format!("No failed async event has the request id {request_id}"),
    )
}
