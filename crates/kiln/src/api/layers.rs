//! Layers: PublishLayerVersion, GetLayerVersion, GetLayerVersionByArn, ListLayers,
//! ListLayerVersions and DeleteLayerVersion, in Lambda's shapes.

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine;
use serde::Deserialize;
use serde_json::{json, Value};

use super::functions::invalid;
use super::pages::{max_items, page, start_after_key, start_after_name};
use super::{base_url, parse_json, ApiError, SharedState, Signed};
use crate::controller::code::StoredCode;
use crate::controller::layers::LayerInput;
use crate::controller::Controller;
use crate::function::layers::LayerVersion;

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
struct ContentInput {
    zip_file: Option<String>,
    s3_bucket: Option<String>,
    s3_key: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct PublishInput {
    content: Option<ContentInput>,
    description: Option<String>,
    license_info: Option<String>,
    #[serde(default)]
    compatible_runtimes: Vec<String>,
    #[serde(default)]
    compatible_architectures: Vec<String>,
}

/// The query of ListLayers (and of GetLayerVersionByArn, which shares its path).
#[derive(Deserialize)]
pub struct ListQuery {
    #[serde(rename = "CompatibleRuntime")]
    compatible_runtime: Option<String>,
    #[serde(rename = "CompatibleArchitecture")]
    compatible_architecture: Option<String>,
    #[serde(rename = "Marker")]
    marker: Option<String>,
    #[serde(rename = "MaxItems")]
    max_items: Option<String>,
    find: Option<String>,
    #[serde(rename = "Arn")]
    arn: Option<String>,
}

impl ListQuery {
    /// Whether `v` is compatible with the runtime and architecture asked for.
    fn matches(&self, v: &LayerVersion) -> bool {
        self.compatible_runtime
            .as_ref()
            .is_none_or(|r| v.compatible_runtimes.contains(r))
            && self
                .compatible_architecture
                .as_ref()
                .is_none_or(|a| v.compatible_architectures.contains(a))
    }
}

fn created(v: &LayerVersion) -> String {
    v.created.format("%Y-%m-%dT%H:%M:%S%.3f%z").to_string()
}

/// Lambda's LayerVersionsListItem.
fn list_item(controller: &Controller, v: &LayerVersion) -> Value {
    let mut out = json!({
        "LayerVersionArn": controller.layer_version_arn(&v.name, v.version),
        "Version": v.version,
        "Description": v.description,
        "CreatedDate": created(v),
        "CompatibleRuntimes": v.compatible_runtimes,
        "CompatibleArchitectures": v.compatible_architectures,
    });
    if let Some(license) = &v.license_info {
        out["LicenseInfo"] = license.as_str().into();
    }
    out
}

/// Lambda's answer to PublishLayerVersion and GetLayerVersion, with a download URL.
fn layer_version(state: &SharedState, headers: &HeaderMap, v: &LayerVersion) -> Value {
    let query = super::kiln::code_query(&state.credentials, &v.code_sha256);
    let mut out = list_item(&state.controller, v);
    out["LayerArn"] = state.controller.layer_arn(&v.name).into();
    out["Content"] = json!({
        "Location": format!("{}/kiln/v1/layers/code/{}.zip?{query}", base_url(headers), v.code_sha256),
        "CodeSha256": StoredCode::sha256_base64(&v.code_sha256),
        "CodeSize": v.code_size,
    });
    out
}

/// A VersionNumber path parameter.
fn version_number(raw: &str) -> Result<u64, ApiError> {
    raw.parse::<u64>()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| invalid(format!("Invalid layer version number: {raw}")))
}

/// PublishLayerVersion.
pub async fn publish(
    State(state): State<SharedState>,
    Path(name): Path<String>,
    Signed { headers, body, .. }: Signed,
) -> Result<Response, ApiError> {
    let input: PublishInput = parse_json(&body)?;
    let content = input.content.unwrap_or_default();
    if content.s3_bucket.is_some() || content.s3_key.is_some() {
        return Err(invalid(
            "kiln accepts layer contents as Content.ZipFile only",
        ));
    }
    let zip = content.zip_file.ok_or_else(|| {
        invalid("Please provide a source for the layer's content: Content.ZipFile.")
    })?;
    let zip = base64::engine::general_purpose::STANDARD
        .decode(zip.as_bytes())
        .map_err(|_| {
            invalid(
                "Could not unzip uploaded file. Please check your file, then try to upload again.",
            )
        })?;
    let layer = state
        .controller
        .publish_layer_version(
            &name,
            LayerInput {
                description: input.description,
                license_info: input.license_info,
                compatible_runtimes: input.compatible_runtimes,
                compatible_architectures: input.compatible_architectures,
            },
            zip,
        )
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(layer_version(&state, &headers, &layer)),
    )
        .into_response())
}

/// GetLayerVersion.
pub async fn get(
    State(state): State<SharedState>,
    Path((name, version)): Path<(String, String)>,
    Signed { headers, .. }: Signed,
) -> Result<Response, ApiError> {
    let layer = state
        .controller
        .layer_version(&name, version_number(&version)?)?;
    Ok(Json(layer_version(&state, &headers, &layer)).into_response())
}

/// DeleteLayerVersion.
pub async fn delete(
    State(state): State<SharedState>,
    Path((name, version)): Path<(String, String)>,
    _: Signed,
) -> Result<Response, ApiError> {
    state
        .controller
        .delete_layer_version(&name, version_number(&version)?)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// ListLayerVersions: newest first, as Lambda lists them.
pub async fn list_versions(
    State(state): State<SharedState>,
    Path(name): Path<String>,
    Query(query): Query<ListQuery>,
    _: Signed,
) -> Result<Response, ApiError> {
    let max_items = max_items(query.max_items.as_deref())?;
    let mut all: Vec<LayerVersion> = state
        .controller
        .layer_versions(&name)?
        .into_iter()
        .filter(|v| query.matches(v))
        .collect();
    all.reverse();
    // The marker is the version number of the last item of the previous page.
    let start = start_after_key(&all, query.marker.as_deref(), |v| v.version.to_string());
    let out = page(
        &all,
        start,
        max_items,
        "LayerVersions",
        |v| list_item(&state.controller, v),
        |v| v.version.to_string(),
    );
    Ok(Json(out).into_response())
}

/// ListLayers, each layer with its newest version that matches; or GetLayerVersionByArn
/// (`?find=LayerVersion&Arn=…`), which shares the path.
pub async fn list(
    State(state): State<SharedState>,
    Query(query): Query<ListQuery>,
    Signed { headers, .. }: Signed,
) -> Result<Response, ApiError> {
    if query.find.is_some() || query.arn.is_some() {
        return get_by_arn(&state, &headers, &query);
    }
    let max_items = max_items(query.max_items.as_deref())?;
    let mut latest: Vec<LayerVersion> = Vec::new();
    for v in state.controller.all_layer_versions()? {
        if !query.matches(&v) {
            continue;
        }
        match latest.last_mut() {
            // Versions come by name, then version: the last of a name is its newest.
            Some(last) if last.name == v.name => *last = v,
            _ => latest.push(v),
        }
    }
    let start = start_after_name(&latest, query.marker.as_deref(), |v| &v.name);
    let out = page(
        &latest,
        start,
        max_items,
        "Layers",
        |v| {
            json!({
                "LayerName": v.name,
                "LayerArn": state.controller.layer_arn(&v.name),
                "LatestMatchingVersion": list_item(&state.controller, v),
            })
        },
        |v| v.name.clone(),
    );
    Ok(Json(out).into_response())
}

fn get_by_arn(
    state: &SharedState,
    headers: &HeaderMap,
    query: &ListQuery,
) -> Result<Response, ApiError> {
    if query.find.as_deref() != Some("LayerVersion") {
        return Err(invalid("GetLayerVersionByArn takes find=LayerVersion"));
    }
    let arn = query
        .arn
        .as_deref()
        .ok_or_else(|| invalid("GetLayerVersionByArn takes the layer version's Arn"))?;
    let layer = state.controller.layer_version_by_arn(arn)?;
    Ok(Json(layer_version(state, headers, &layer)).into_response())
}
