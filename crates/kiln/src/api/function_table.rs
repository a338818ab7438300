//! `GET /kiln/v1/functions`: the functions table, searched, sorted and paged by kiln
//! ([`function_page`] decides), so that the console's table stays fast with thousands of
//! functions and the CLI can ask for the same pages.

use std::collections::HashMap;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{ApiError, SharedState, Signed};
use crate::controller::function_page::{self, Cursor, PageError, SortKey};

#[derive(Deserialize)]
pub struct TableQuery {
    search: Option<String>,
    sort: Option<String>,
    order: Option<String>,
    limit: Option<String>,
    token: Option<String>,
}

fn invalid(message: String) -> ApiError {
    ApiError::new(
        StatusCode::BAD_REQUEST,
        "InvalidParameterValueException",
        message,
    )
}

impl From<PageError> for ApiError {
    fn from(e: PageError) -> Self {
        invalid(e.to_string())
    }
}

fn parse(raw: TableQuery) -> Result<function_page::Query, ApiError> {
    let sort = match raw.sort.as_deref() {
        None | Some("") => SortKey::Name,
        Some(text) => SortKey::parse(text).ok_or_else(|| {
            let keys: Vec<_> = SortKey::ALL.iter().map(|k| k.name()).collect();
            invalid(format!(
                "sort must be one of {}, not '{text}'",
                keys.join(", ")
            ))
        })?,
    };
    let descending = match raw.order.as_deref() {
        None | Some("") | Some("asc") => false,
        Some("desc") => true,
        Some(other) => return Err(invalid(format!("order must be asc or desc, not '{other}'"))),
    };
    let limit = match raw.limit.as_deref() {
        None => function_page::DEFAULT_LIMIT,
        Some(text) => match text.parse::<usize>() {
            Ok(n) if (1..=function_page::MAX_LIMIT).contains(&n) => n,
            _ => {
                return Err(invalid(format!(
                    "limit must be a number from 1 to {}, not '{text}'",
                    function_page::MAX_LIMIT
                )))
            }
        },
    };
    let after = match raw.token.as_deref() {
        None | Some("") => None,
        Some(token) => Some(Cursor::parse(token)?),
    };
    Ok(function_page::Query {
        search: raw.search.unwrap_or_default(),
        sort,
        descending,
        limit,
        after,
    })
}

fn rfc3339(unix: i64) -> Option<String> {
    chrono::DateTime::from_timestamp(unix, 0)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
}

/// A page of functions: `{"Functions": [{"Configuration": Lambda's FunctionConfiguration,
/// "LastInvocation", "Invocations", "Errors", "ErrorRate", "Duration": {"Count", "P50",
/// "P99"}, "Instances", "Sessions",
/// "PredictedMemory", "Snapshot", "MemoryModel"}], "Total", "NextToken", "HistoryKept"}`.
/// The last hour's numbers come from the console's history, kept while the console is on
/// (`HistoryKept`); without it they are null and sort last.
pub async fn list(
    State(state): State<SharedState>,
    Query(raw): Query<TableQuery>,
    _: Signed,
) -> Result<Response, ApiError> {
    let query = parse(raw)?;
    let now = chrono::Utc::now().timestamp();
    let activity = state
        .history
        .as_ref()
        .map(|h| h.activity(now))
        .unwrap_or_default();
    let rows = state.controller.function_rows(&activity);
    let page = function_page::page(&rows, &query)?;
    let node = state.controller.node_status();
    let mut instances: HashMap<&str, Vec<&crate::agent::InstanceStatus>> = HashMap::new();
    for instance in &node.instances {
        instances
            .entry(instance.function.as_str())
            .or_default()
            .push(instance);
    }
    let functions: Vec<Value> = page
        .rows
        .iter()
        // One deleted since the rows were read is left out.
        .filter_map(|row| state.controller.get(&row.name).ok())
        .map(|f| {
            let seen = activity.get(&f.name).copied().unwrap_or_default();
            let live = instances.get(f.name.as_str()).map_or(&[][..], Vec::as_slice);
            let snapshot = node.snapshots.iter().find(|s| s.function == f.name);
            let model = state.controller.model(&f.name);
            json!({
                "Configuration": super::functions::configuration(&state.controller, &f),
                "LastInvocation": seen.last_invocation.and_then(rfc3339),
                "Invocations": state.history.as_ref().map(|_| seen.invocations),
                "Errors": state.history.as_ref().map(|_| seen.errors),
                "ErrorRate": seen.error_rate(),
                "Duration": state.history.as_ref().map(|_| seen.durations),
                "Instances": live.len(),
                "Sessions": live.iter().map(|i| i.sessions).sum::<u32>(),
                // The limit its instances run at now: the model's prediction once it sizes.
                "PredictedMemory": live.iter().map(|i| i.memory_limit_mb).max(),
                "Snapshot": snapshot.map(|s| json!({ "Kind": s.kind, "State": s.state })),
                "MemoryModel": model.map(|m| json!({ "Invocations": m.invocations, "Mature": m.mature })),
            })
        })
        .collect();
    Ok(Json(json!({
        "Functions": functions,
        "Total": page.total,
        "NextToken": page.next.map(|c| c.token()),
        "HistoryKept": state.history.is_some(),
    }))
    .into_response())
}
