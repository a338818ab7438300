//! Apps (burst offloading): `/kiln/v1/apps`, `/kiln/v1/apps/NAME`, its `/routes` and `/status`.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::{parse_json, ApiError, SharedState, Signed};
use crate::burst::{AppError, AppInput};

impl From<AppError> for ApiError {
    fn from(e: AppError) -> Self {
        match e {
            AppError::Invalid { .. } => ApiError::new(
                StatusCode::BAD_REQUEST,
                "ValidationException",
                e.to_string(),
            ),
            AppError::NotFound(_) => ApiError::new(
                StatusCode::NOT_FOUND,
                "ResourceNotFoundException",
                e.to_string(),
            ),
            AppError::Store(_) => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "ServiceException",
                e.to_string(),
            ),
        }
    }
}

pub async fn list(State(state): State<SharedState>, _: Signed) -> Result<Response, ApiError> {
    Ok(Json(json!({ "Apps": state.apps.list() })).into_response())
}

/// Creates an app or changes the fields the body names.
pub async fn put(
    State(state): State<SharedState>,
    Path(name): Path<String>,
    Signed { body, .. }: Signed,
) -> Result<Response, ApiError> {
    let input: AppInput = parse_json(&body)?;
    let spec = state.apps.put(&name, input).await?;
    Ok(Json(spec).into_response())
}

pub async fn get(
    State(state): State<SharedState>,
    Path(name): Path<String>,
    _: Signed,
) -> Result<Response, ApiError> {
    Ok(Json(state.apps.get(&name)?).into_response())
}

pub async fn delete(
    State(state): State<SharedState>,
    Path(name): Path<String>,
    _: Signed,
) -> Result<Response, ApiError> {
    state.apps.delete(&name)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

pub async fn routes(
    State(state): State<SharedState>,
    Path(name): Path<String>,
    _: Signed,
) -> Result<Response, ApiError> {
    Ok(Json(json!({ "Routes": state.apps.routes(&name)? })).into_response())
}

pub async fn status(
    State(state): State<SharedState>,
    Path(name): Path<String>,
    _: Signed,
) -> Result<Response, ApiError> {
    Ok(Json(state.apps.status(&name)?).into_response())
}
