//! Cluster mode: `/kiln/v1/cluster` (status) and `/kiln/v1/cluster/nodes/NODE/drain|undrain`.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::{ApiError, SharedState, Signed};
use crate::cluster::{ClusterError, Membership};
use crate::error_chain;

impl From<ClusterError> for ApiError {
    fn from(e: ClusterError) -> Self {
        let (status, code) = match e {
            ClusterError::UnknownNode(_) => (StatusCode::NOT_FOUND, "ResourceNotFoundException"),
            ClusterError::Etcd(_) => (StatusCode::SERVICE_UNAVAILABLE, "ServiceException"),
            _ => (StatusCode::INTERNAL_SERVER_ERROR, "ServiceException"),
        };
        ApiError::new(status, code, error_chain(&e))
    }
}

fn membership(state: &SharedState) -> Result<&Membership, ApiError> {
    state.cluster.as_deref().ok_or_else(|| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "ValidationException",
            "this kiln is not in cluster mode (start it with `kiln up --cluster …`)",
        )
    })
}

pub async fn status(State(state): State<SharedState>, _: Signed) -> Result<Response, ApiError> {
    Ok(Json(membership(&state)?.status()).into_response())
}

pub async fn drain(
    State(state): State<SharedState>,
    Path(node): Path<String>,
    _: Signed,
) -> Result<Response, ApiError> {
    membership(&state)?.set_drain(&node, true).await?;
    Ok(Json(json!({ "node": node, "draining": true })).into_response())
}

pub async fn undrain(
    State(state): State<SharedState>,
    Path(node): Path<String>,
    _: Signed,
) -> Result<Response, ApiError> {
    membership(&state)?.set_drain(&node, false).await?;
    Ok(Json(json!({ "node": node, "draining": false })).into_response())
}
