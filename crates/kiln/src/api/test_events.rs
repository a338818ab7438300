//! A function's shareable test events (`/kiln/v1/functions/NAME/test-events`): the console's
//! test tab saves them for every viewer of the function.
//!
//! - `GET …/test-events`: `{"TestEvents": [{"Name", "Event", "LastModified"}]}`, by name;
//!   `Event` is the saved JSON text;
//! - `PUT …/test-events/EVENT`: the body is the event (a JSON document, up to 256 KiB); the
//!   answer is the saved record;
//! - `DELETE …/test-events/EVENT`: 204, or 404 without one of that name.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::{ApiError, SharedState, Signed};

pub async fn list(
    State(state): State<SharedState>,
    Path(name): Path<String>,
    _: Signed,
) -> Result<Response, ApiError> {
    let events = state.controller.test_events(&name)?;
    Ok(Json(serde_json::json!({ "TestEvents": events })).into_response())
}

pub async fn put(
    State(state): State<SharedState>,
    Path((name, event)): Path<(String, String)>,
    Signed { body, .. }: Signed,
) -> Result<Response, ApiError> {
    let saved = state.controller.put_test_event(&name, &event, &body)?;
    Ok(Json(saved).into_response())
}

pub async fn delete(
    State(state): State<SharedState>,
    Path((name, event)): Path<(String, String)>,
    _: Signed,
) -> Result<Response, ApiError> {
    state.controller.delete_test_event(&name, &event)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
