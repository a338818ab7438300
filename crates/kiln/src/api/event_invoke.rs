//! Put/Get/Update/Delete/ListFunctionEventInvokeConfigs: asynchronous invocations' retries,
//! age limit and destinations.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{parse_json, qualifier, ApiError, SharedState, Signed};
use crate::controller::EventInvokePatch;
use crate::function::event_invoke::EventInvokeConfig;

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
struct Input {
    maximum_retry_attempts: Option<u32>,
    maximum_event_age_in_seconds: Option<u32>,
    destination_config: Option<Destinations>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
struct Destinations {
    on_success: Option<Destination>,
    on_failure: Option<Destination>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Destination {
    destination: Option<String>,
}

impl Input {
    fn patch(self) -> EventInvokePatch {
        let destinations = self.destination_config.unwrap_or_default();
        EventInvokePatch {
            maximum_retry_attempts: self.maximum_retry_attempts,
            maximum_event_age_s: self.maximum_event_age_in_seconds,
            on_success: destinations.on_success.and_then(|d| d.destination),
            on_failure: destinations.on_failure.and_then(|d| d.destination),
        }
    }
}

/// Lambda's FunctionEventInvokeConfig shape.
fn shape(function_arn: &str, qualifier: &str, config: &EventInvokeConfig) -> Value {
    let destination = |arn: &Option<String>| match arn {
        Some(arn) => json!({ "Destination": arn }),
        None => json!({}),
    };
    let mut body = json!({
        "FunctionArn": format!("{function_arn}:{qualifier}"),
        "LastModified": config.last_modified.timestamp_millis() as f64 / 1000.0,
        "DestinationConfig": {
            "OnSuccess": destination(&config.on_success),
            "OnFailure": destination(&config.on_failure),
        },
    });
    if let Some(n) = config.maximum_retry_attempts {
        body["MaximumRetryAttempts"] = json!(n);
    }
    if let Some(s) = config.maximum_event_age_s {
        body["MaximumEventAgeInSeconds"] = json!(s);
    }
    body
}

async fn set(
    state: SharedState,
    name: String,
    signed: Signed,
    replace: bool,
) -> Result<Response, ApiError> {
    let input: Input = parse_json(&signed.body)?;
    let (function, qualifier, config) = state.controller.set_event_invoke_config(
        &name,
        qualifier(&signed.uri).as_deref(),
        input.patch(),
        replace,
    )?;
    let arn = state.controller.arn(&function.name);
    Ok(Json(shape(&arn, &qualifier, &config)).into_response())
}

/// PutFunctionEventInvokeConfig: replaces the configuration.
pub async fn put(
    State(state): State<SharedState>,
    Path(name): Path<String>,
    signed: Signed,
) -> Result<Response, ApiError> {
    set(state, name, signed, true).await
}

/// UpdateFunctionEventInvokeConfig: changes the fields given.
pub async fn update(
    State(state): State<SharedState>,
    Path(name): Path<String>,
    signed: Signed,
) -> Result<Response, ApiError> {
    set(state, name, signed, false).await
}

pub async fn get(
    State(state): State<SharedState>,
    Path(name): Path<String>,
    Signed { uri, .. }: Signed,
) -> Result<Response, ApiError> {
    let (function, qualifier, config) = state
        .controller
        .event_invoke_config(&name, qualifier(&uri).as_deref())?;
    let arn = state.controller.arn(&function.name);
    Ok(Json(shape(&arn, &qualifier, &config)).into_response())
}

pub async fn delete(
    State(state): State<SharedState>,
    Path(name): Path<String>,
    Signed { uri, .. }: Signed,
) -> Result<Response, ApiError> {
    state
        .controller
        .delete_event_invoke_config(&name, qualifier(&uri).as_deref())?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// ListFunctionEventInvokeConfigs: those of `$LATEST` and of the function's versions and
/// aliases.
pub async fn list(
    State(state): State<SharedState>,
    Path(name): Path<String>,
    Signed { .. }: Signed,
) -> Result<Response, ApiError> {
    let (function, configs) = state.controller.event_invoke_configs(&name)?;
    let arn = state.controller.arn(&function.name);
    let configs: Vec<Value> = configs
        .iter()
        .map(|(qualifier, config)| shape(&arn, qualifier, config))
        .collect();
    Ok(Json(json!({ "FunctionEventInvokeConfigs": configs })).into_response())
}
