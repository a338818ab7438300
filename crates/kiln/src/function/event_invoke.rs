//! A function's asynchronous invocation configuration (PutFunctionEventInvokeConfig): how
//! often a failed event is retried, how old an event may grow before it is dropped, and the
//! functions that receive a record of each event's outcome.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Lambda's bounds and defaults: two retries, six hours.
pub const MAX_RETRY_ATTEMPTS: u32 = 2;
pub const MIN_EVENT_AGE_S: u32 = 60;
pub const MAX_EVENT_AGE_S: u32 = 21_600;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventInvokeConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maximum_retry_attempts: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maximum_event_age_s: Option<u32>,
    /// The ARN of the function that gets the record of each event that succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_success: Option<String>,
    /// The ARN of the function that gets the record of each event dropped (retries exhausted,
    /// or too old).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_failure: Option<String>,
    pub last_modified: DateTime<Utc>,
}

impl EventInvokeConfig {
    /// Deliveries of one event at most: the first and its retries.
    pub fn attempts(&self) -> u32 {
        self.maximum_retry_attempts.unwrap_or(MAX_RETRY_ATTEMPTS) + 1
    }

    /// How old an event may grow before it is dropped.
    pub fn maximum_event_age(&self) -> chrono::TimeDelta {
        chrono::TimeDelta::seconds(i64::from(
            self.maximum_event_age_s.unwrap_or(MAX_EVENT_AGE_S),
        ))
    }

    /// Lambda's model's bounds: the ValidationException's field and constraint of the first
    /// value outside them.
    pub fn violation(&self) -> Option<(String, &'static str, &'static str)> {
        if let Some(n) = self
            .maximum_retry_attempts
            .filter(|n| *n > MAX_RETRY_ATTEMPTS)
        {
            return Some((
                n.to_string(),
                "maximumRetryAttempts",
                "Member must have value less than or equal to 2",
            ));
        }
        match self.maximum_event_age_s {
            Some(s) if s < MIN_EVENT_AGE_S => Some((
                s.to_string(),
                "maximumEventAgeInSeconds",
                "Member must have value greater than or equal to 60",
            )),
            Some(s) if s > MAX_EVENT_AGE_S => Some((
                s.to_string(),
                "maximumEventAgeInSeconds",
                "Member must have value less than or equal to 21600",
            )),
            _ => None,
        }
    }
}

/// Why an event's record goes to a destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Condition {
    Success,
    RetriesExhausted,
    EventAgeExceeded,
}

impl Condition {
    pub fn name(self) -> &'static str {
        match self {
            Condition::Success => "Success",
            Condition::RetriesExhausted => "RetriesExhausted",
            Condition::EventAgeExceeded => "EventAgeExceeded",
        }
    }
}

/// What became of the event's last delivery, for its record.
pub struct Response<'a> {
    pub body: &'a [u8],
    pub function_error: bool,
    /// The version that ran: `$LATEST`, a version's number, or the one an alias picked.
    pub executed_version: &'a str,
}

/// Lambda's invocation record, the event a destination function gets. `function_arn` is
/// qualified by what the event was sent to (`$LATEST`, a version or an alias).
pub fn record(
    function_arn: &str,
    request_id: &str,
    condition: Condition,
    invoke_count: u32,
    request: &[u8],
    response: Option<Response<'_>>,
) -> serde_json::Value {
    let json_or_text = |bytes: &[u8]| {
        serde_json::from_slice::<serde_json::Value>(bytes)
            .unwrap_or_else(|_| serde_json::Value::String(String::from_utf8_lossy(bytes).into()))
    };
    let mut record = serde_json::json!({
        "version": "1.0",
        "timestamp": Utc::now().format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
        "requestContext": {
            "requestId": request_id,
            "functionArn": function_arn,
            "condition": condition.name(),
            "approximateInvokeCount": invoke_count,
        },
        "requestPayload": json_or_text(request),
    });
    if let Some(response) = response {
        let mut context = serde_json::json!({
            "statusCode": 200,
            "executedVersion": response.executed_version,
        });
        if response.function_error {
            context["functionError"] = "Unhandled".into();
        }
        record["responseContext"] = context;
        record["responsePayload"] = json_or_text(response.body);
    }
    record
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> EventInvokeConfig {
        EventInvokeConfig {
            maximum_retry_attempts: None,
            maximum_event_age_s: None,
            on_success: None,
            on_failure: None,
            last_modified: Utc::now(),
        }
    }

    #[test]
    fn defaults_and_bounds_are_lambdas() {
        let c = config();
        assert_eq!(c.attempts(), 3);
        assert_eq!(c.maximum_event_age(), chrono::TimeDelta::hours(6));
        assert!(c.violation().is_none());
        let none = EventInvokeConfig {
            maximum_retry_attempts: Some(0),
            maximum_event_age_s: Some(60),
            ..config()
        };
        assert_eq!(none.attempts(), 1);
        assert!(none.violation().is_none());
        for (retries, age, field) in [
            (Some(3), None, "maximumRetryAttempts"),
            (None, Some(59), "maximumEventAgeInSeconds"),
            (None, Some(21_601), "maximumEventAgeInSeconds"),
        ] {
            let bad = EventInvokeConfig {
                maximum_retry_attempts: retries,
                maximum_event_age_s: age,
                ..config()
            };
            assert_eq!(bad.violation().unwrap().1, field);
        }
    }

    #[test]
    fn a_record_carries_the_request_and_the_response() {
        let arn = "arn:aws:lambda:us-east-1:000000000000:function:f:live";
        let failed = record(
            arn,
            "r1",
            Condition::RetriesExhausted,
            3,
            br#"{"n":1}"#,
            Some(Response {
                body: br#"{"errorMessage":"boom"}"#,
                function_error: true,
                executed_version: "3",
            }),
        );
        assert_eq!(failed["requestContext"]["condition"], "RetriesExhausted");
        assert_eq!(failed["requestContext"]["approximateInvokeCount"], 3);
        assert_eq!(failed["requestContext"]["functionArn"], arn);
        assert_eq!(failed["responseContext"]["executedVersion"], "3");
        assert_eq!(failed["requestPayload"]["n"], 1);
        assert_eq!(failed["responseContext"]["functionError"], "Unhandled");
        assert_eq!(failed["responsePayload"]["errorMessage"], "boom");
        let expired = record(arn, "r2", Condition::EventAgeExceeded, 0, b"not json", None);
        assert_eq!(expired["requestPayload"], "not json");
        assert!(expired.get("responseContext").is_none());
    }
}
