//! EventBridge Scheduler's API for schedules that invoke Lambda functions (`schedules/`):
//! CreateSchedule, GetSchedule, UpdateSchedule, DeleteSchedule, ListSchedules, signed as any
//! of kiln's routes (boto3's and the AWS CLI's `scheduler` client, pointed at kiln).

use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::{parse_json, ApiError, SchedulerSigned, SharedState};
use crate::schedules::{ScheduleError, ScheduleInput, Schedules, State as ScheduleState};

impl From<ScheduleError> for ApiError {
    fn from(e: ScheduleError) -> Self {
        let (status, code) = match &e {
            ScheduleError::Validation(_) => (StatusCode::BAD_REQUEST, "ValidationException"),
            ScheduleError::NotFound(_) => (StatusCode::NOT_FOUND, "ResourceNotFoundException"),
            ScheduleError::Conflict(_) => (StatusCode::CONFLICT, "ConflictException"),
            ScheduleError::Storage(_) => {
                (StatusCode::INTERNAL_SERVER_ERROR, "InternalServerException")
            }
        };
        ApiError::new(status, code, e.to_string())
    }
}

fn schedules(state: &SharedState) -> Result<&Schedules, ApiError> {
    state.schedules.as_deref().ok_or_else(|| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "ValidationException",
            "schedules are not available in cluster mode yet: run them on a single kiln",
        )
    })
}

pub async fn create(
    State(state): State<SharedState>,
    Path(name): Path<String>,
    SchedulerSigned(signed): SchedulerSigned,
) -> Result<Response, ApiError> {
    write(&state, &signed, |schedules, input| {
        schedules.create(&name, input)
    })
}

/// UpdateSchedule: every setting replaced, as on AWS.
pub async fn update(
    State(state): State<SharedState>,
    Path(name): Path<String>,
    SchedulerSigned(signed): SchedulerSigned,
) -> Result<Response, ApiError> {
    write(&state, &signed, |schedules, input| {
        schedules.update(&name, input)
    })
}

/// Create and Update: the body read as a schedule, the schedule's ARN answered.
fn write(
    state: &SharedState,
    signed: &super::Signed,
    op: impl FnOnce(&Schedules, ScheduleInput) -> Result<String, ScheduleError>,
) -> Result<Response, ApiError> {
    let input: ScheduleInput = parse_json(&signed.body)?;
    let arn = op(schedules(state)?, input)?;
    Ok(Json(json!({ "ScheduleArn": arn })).into_response())
}

pub async fn get(
    State(state): State<SharedState>,
    Path(name): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    _signed: SchedulerSigned,
) -> Result<Response, ApiError> {
    let group = query.get("groupName").map(String::as_str);
    let schedule = schedules(&state)?.get(&name, group)?;
    Ok(Json(schedule).into_response())
}

pub async fn delete(
    State(state): State<SharedState>,
    Path(name): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    _signed: SchedulerSigned,
) -> Result<Response, ApiError> {
    let group = query.get("groupName").map(String::as_str);
    schedules(&state)?.delete(&name, group)?;
    Ok(Json(json!({})).into_response())
}

pub async fn list(
    State(state): State<SharedState>,
    Query(query): Query<HashMap<String, String>>,
    _signed: SchedulerSigned,
) -> Result<Response, ApiError> {
    let invalid = |m: String| ApiError::new(StatusCode::BAD_REQUEST, "ValidationException", m);
    let limit = match query.get("MaxResults") {
        None => 100,
        Some(n) => match n.parse::<usize>() {
            Ok(n @ 1..=100) => n,
            _ => return Err(invalid(format!("MaxResults {n}: expected 1 to 100"))),
        },
    };
    let state_filter = match query.get("State").map(String::as_str) {
        None => None,
        Some("ENABLED") => Some(ScheduleState::Enabled),
        Some("DISABLED") => Some(ScheduleState::Disabled),
        Some(other) => {
            return Err(invalid(format!(
                "State {other}: expected ENABLED or DISABLED"
            )))
        }
    };
    let group = query
        .get("ScheduleGroup")
        .or_else(|| query.get("GroupName"))
        .map(String::as_str);
    let (page, token) = schedules(&state)?.list(
        query.get("NamePrefix").map(String::as_str),
        state_filter,
        group,
        query.get("NextToken").map(String::as_str),
        limit,
    )?;
    let summaries: Vec<_> = page
        .iter()
        .map(|s| {
            json!({
                "Arn": s.arn, "Name": s.name, "GroupName": s.group_name, "State": s.state,
                "CreationDate": s.creation_date, "LastModificationDate": s.last_modification_date,
                "Target": { "Arn": s.target.arn },
            })
        })
        .collect();
    let mut body = json!({ "Schedules": summaries });
    if let Some(token) = token {
        body["NextToken"] = token.into();
    }
    Ok(Json(body).into_response())
}
