//! Alias resources: CreateAlias, GetAlias, UpdateAlias, DeleteAlias, ListAliases.

use std::collections::BTreeMap;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::pages::{max_items, page, start_after_name};
use super::{parse_json, parse_json_or_default, ApiError, SharedState, Signed};
use crate::controller::{AliasInput, Controller};
use crate::function::versions::Alias;
use crate::function::Function;

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
struct RoutingInput {
    additional_version_weights: Option<BTreeMap<String, f64>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct CreateInput {
    name: String,
    function_version: Option<String>,
    description: Option<String>,
    routing_config: Option<RoutingInput>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
struct UpdateInput {
    function_version: Option<String>,
    description: Option<String>,
    routing_config: Option<RoutingInput>,
    revision_id: Option<String>,
}

#[derive(Deserialize)]
pub struct ListQuery {
    #[serde(rename = "FunctionVersion")]
    function_version: Option<String>,
    #[serde(rename = "Marker")]
    marker: Option<String>,
    #[serde(rename = "MaxItems")]
    max_items: Option<String>,
}

/// Lambda's AliasConfiguration shape.
fn alias_configuration(controller: &Controller, f: &Function, alias: &Alias) -> Value {
    let mut out = json!({
        "AliasArn": controller.alias_arn(&f.name, &alias.name),
        "Name": alias.name,
        "FunctionVersion": alias.function_version,
        "Description": alias.description,
        "RevisionId": alias.revision_id,
    });
    if !alias.weights.is_empty() {
        out["RoutingConfig"] = json!({ "AdditionalVersionWeights": alias.weights });
    }
    out
}

fn weights(routing: Option<RoutingInput>) -> Option<BTreeMap<String, f64>> {
    routing.map(|r| r.additional_version_weights.unwrap_or_default())
}

pub async fn create(
    State(state): State<SharedState>,
    Path(name): Path<String>,
    Signed { body, .. }: Signed,
) -> Result<Response, ApiError> {
    let input: CreateInput = parse_json(&body)?;
    let (function, alias) = state.controller.create_alias(
        &name,
        &input.name,
        AliasInput {
            function_version: input.function_version,
            description: input.description,
            weights: weights(input.routing_config),
            revision_id: None,
        },
    )?;
    Ok((
        StatusCode::CREATED,
        Json(alias_configuration(&state.controller, &function, &alias)),
    )
        .into_response())
}

pub async fn get(
    State(state): State<SharedState>,
    Path((name, alias)): Path<(String, String)>,
    _: Signed,
) -> Result<Response, ApiError> {
    let (function, alias) = state.controller.get_alias(&name, &alias)?;
    Ok(Json(alias_configuration(&state.controller, &function, &alias)).into_response())
}

pub async fn update(
    State(state): State<SharedState>,
    Path((name, alias)): Path<(String, String)>,
    Signed { body, .. }: Signed,
) -> Result<Response, ApiError> {
    let input: UpdateInput = parse_json_or_default(&body)?;
    let (function, alias) = state.controller.update_alias(
        &name,
        &alias,
        AliasInput {
            function_version: input.function_version,
            description: input.description,
            weights: weights(input.routing_config),
            revision_id: input.revision_id,
        },
    )?;
    Ok(Json(alias_configuration(&state.controller, &function, &alias)).into_response())
}

pub async fn delete(
    State(state): State<SharedState>,
    Path((name, alias)): Path<(String, String)>,
    _: Signed,
) -> Result<Response, ApiError> {
    state.controller.delete_alias(&name, &alias)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// ListAliases, by name, paged by the last name of the previous page.
pub async fn list(
    State(state): State<SharedState>,
    Path(name): Path<String>,
    Query(query): Query<ListQuery>,
    _: Signed,
) -> Result<Response, ApiError> {
    let max_items = max_items(query.max_items.as_deref())?;
    let (function, all) = state
        .controller
        .list_aliases(&name, query.function_version.as_deref())?;
    let start = start_after_name(&all, query.marker.as_deref(), |a| &a.name);
    let out = page(
        &all,
        start,
        max_items,
        "Aliases",
        |a| alias_configuration(&state.controller, &function, a),
        |a| a.name.clone(),
    );
    Ok(Json(out).into_response())
}
