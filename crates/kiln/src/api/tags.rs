//! Tags: TagResource, UntagResource and ListTags, by function ARN.

use std::collections::BTreeMap;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use serde::Deserialize;
use serde_json::json;

use super::{authenticate, parse_json, ApiError, SharedState};

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct TagInput {
    tags: BTreeMap<String, String>,
}

pub async fn list(
    State(state): State<SharedState>,
    Path(resource): Path<String>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    authenticate(&state, &method, &uri, &headers, &body)?;
    let tags = state.controller.tags(&resource)?;
    Ok(Json(json!({ "Tags": tags })).into_response())
}

pub async fn tag(
    State(state): State<SharedState>,
    Path(resource): Path<String>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    authenticate(&state, &method, &uri, &headers, &body)?;
    let input: TagInput = parse_json(&body)?;
    state.controller.tag(&resource, input.tags)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

pub async fn untag(
    State(state): State<SharedState>,
    Path(resource): Path<String>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    authenticate(&state, &method, &uri, &headers, &body)?;
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
