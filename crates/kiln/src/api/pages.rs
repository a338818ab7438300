//! Lambda's paged lists (ListFunctions, ListVersionsByFunction, ListAliases): the `MaxItems`
//! parameter, where a page starts after a `Marker`, and the page with its `NextMarker`.

use axum::http::StatusCode;
use serde_json::{json, Value};

use super::ApiError;

/// A `MaxItems` parameter: 1 to 10000, at most 50 used.
pub(super) fn max_items(raw: Option<&str>) -> Result<usize, ApiError> {
    match raw {
        None => Ok(50),
        Some(raw) => match raw.parse::<usize>() {
            Ok(n) if (1..=10_000).contains(&n) => Ok(n.min(50)),
            _ => Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "InvalidParameterValueException",
                format!("Value '{raw}' at 'maxItems' failed to satisfy constraint: Member must have value between 1 and 10000"),
            )),
        },
    }
}

/// Where a page of `all` (sorted by name) starts when the marker is the name of the last item
/// of the previous page.
pub(super) fn start_after_name<T>(
    all: &[T],
    marker: Option<&str>,
    name: impl Fn(&T) -> &str,
) -> usize {
    match marker {
        Some(marker) => all.partition_point(|item| name(item) <= marker),
        None => 0,
    }
}

/// Where a page of `all` (in any order) starts when the marker is the `key` of the last item of
/// the previous page; past the end when no item has it.
pub(super) fn start_after_key<T>(
    all: &[T],
    marker: Option<&str>,
    key: impl Fn(&T) -> String,
) -> usize {
    match marker {
        Some(marker) => all
            .iter()
            .position(|item| key(item) == marker)
            .map_or(all.len(), |i| i + 1),
        None => 0,
    }
}

/// `{ "<list>": [up to max_items from start], "NextMarker": … }`, the marker (the last item's
/// `marker`) present when more follow.
pub(super) fn page<T>(
    all: &[T],
    start: usize,
    max_items: usize,
    list: &str,
    render: impl FnMut(&T) -> Value,
    marker: impl Fn(&T) -> String,
) -> Value {
    let page: Vec<Value> = all[start..].iter().take(max_items).map(render).collect();
    let mut out = json!({ list: page });
    if start + max_items < all.len() {
        out["NextMarker"] = marker(&all[start + max_items - 1]).into();
    }
    out
}
