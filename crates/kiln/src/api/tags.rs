//! Tags: TagResource, UntagResource and ListTags, by function ARN.

use std::collections::BTreeMap;

use axum::extract::{Path, State};
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::json;

use super::{parse_json, ApiError, SharedState, Signed};

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct TagInput {
    tags: BTreeMap<String, String>,
}

pub async fn list(
    State(state): State<SharedState>,
    Path(resource): Path<String>,
    _: Signed,
) -> Result<Response, ApiError> {
    let tags = state.controller.tags(&resource)?;
    Ok(Json(json!({ "Tags": tags })).into_response())
}

pub async fn tag(
    State(state): State<SharedState>,
    Path(resource): Path<String>,
    Signed { body, .. }: Signed,
) -> Result<Response, ApiError> {
    let input: TagInput = parse_json(&body)?;
    state.controller.tag(&resource, input.tags)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

pub async fn untag(
    State(state): State<SharedState>,
    Path(resource): Path<String>,
    Signed { uri, .. }: Signed,
) -> Result<Response, ApiError> {
    state.controller.untag(&resource, &tag_keys(&uri))?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// The repeated `tagKeys` query parameter.
fn tag_keys(uri: &Uri) -> Vec<String> {
    uri.query()
        .unwrap_or_default()
        .split('&')
        .filter_map(|pair| pair.strip_prefix("tagKeys="))
        .map(|v| {
            percent_encoding::percent_decode_str(&v.replace('+', " "))
                .decode_utf8_lossy()
                .into_owned()
        })
        .collect()
}
