//! Put/Get/Delete/ListProvisionedConcurrencyConfigs.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::pages::{max_items, page, start_after_name};
use super::{parse_json, qualifier, ApiError, SharedState, Signed};
use crate::controller::ProvisionedStatus;

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Input {
    provisioned_concurrent_executions: Option<i64>,
}

#[derive(Deserialize)]
pub struct GetQuery {
    #[serde(rename = "List")]
    list: Option<String>,
    #[serde(rename = "Marker")]
    marker: Option<String>,
    #[serde(rename = "MaxItems")]
    max_items: Option<String>,
}

/// Lambda's provisioned concurrency config shape (a list item adds `FunctionArn`).
fn shape(status: &ProvisionedStatus) -> Value {
    let mut out = json!({
        "RequestedProvisionedConcurrentExecutions": status.requested,
        "AllocatedProvisionedConcurrentExecutions": status.allocated,
        "AvailableProvisionedConcurrentExecutions": status.available,
        "Status": status.status,
        "LastModified": status.last_modified.format("%Y-%m-%dT%H:%M:%S%.3f%z").to_string(),
    });
    if let Some(reason) = &status.reason {
        out["StatusReason"] = reason.as_str().into();
    }
    out
}

/// PutProvisionedConcurrencyConfig: 202, the config as it stands (`IN_PROGRESS` until the
/// instances are initialised).
pub async fn put(
    State(state): State<SharedState>,
    Path(name): Path<String>,
    Signed { body, uri, .. }: Signed,
) -> Result<Response, ApiError> {
    let input: Input = parse_json(&body)?;
    let Some(requested) = input.provisioned_concurrent_executions else {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "ValidationException",
            "1 validation error detected: Value null at 'provisionedConcurrentExecutions' failed to satisfy constraint: Member must not be null",
        ));
    };
    let (_, _, status) =
        state
            .controller
            .put_provisioned(&name, qualifier(&uri).as_deref(), requested)?;
    Ok((StatusCode::ACCEPTED, Json(shape(&status))).into_response())
}

/// GetProvisionedConcurrencyConfig, or ListProvisionedConcurrencyConfigs (`?List=ALL`).
pub async fn get(
    State(state): State<SharedState>,
    Path(name): Path<String>,
    Query(query): Query<GetQuery>,
    Signed { uri, .. }: Signed,
) -> Result<Response, ApiError> {
    if query.list.is_some() {
        let max_items = max_items(query.max_items.as_deref())?;
        let (function, all) = state.controller.provisioned_configs(&name)?;
        let arn = state.controller.arn(&function.name);
        let start = start_after_name(&all, query.marker.as_deref(), |(q, _)| q);
        let out = page(
            &all,
            start,
            max_items,
            "ProvisionedConcurrencyConfigs",
            |(qualifier, status)| {
                let mut item = shape(status);
                item["FunctionArn"] = format!("{arn}:{qualifier}").into();
                item
            },
            |(qualifier, _)| qualifier.clone(),
        );
        return Ok(Json(out).into_response());
    }
    match state
        .controller
        .provisioned(&name, qualifier(&uri).as_deref())?
    {
        Some(status) => Ok(Json(shape(&status)).into_response()),
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "ProvisionedConcurrencyConfigNotFoundException",
            "No Provisioned Concurrency Config found for this function",
        )),
    }
}

/// DeleteProvisionedConcurrencyConfig: 204, also when there was none.
pub async fn delete(
    State(state): State<SharedState>,
    Path(name): Path<String>,
    Signed { uri, .. }: Signed,
) -> Result<Response, ApiError> {
    state
        .controller
        .delete_provisioned(&name, qualifier(&uri).as_deref())?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
