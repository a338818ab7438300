//! Put/Get/Update/Delete/ListFunctionEventInvokeConfigs, and the records the queue sends to an
//! event's destination. The configuration is part of the function's stored configuration, so
//! it lives wherever the function does; changing it is not a new revision (nothing to rebuild).

use chrono::Utc;

use super::{Controller, ControllerError};
use crate::function::event_invoke::{self, Condition, EventInvokeConfig, Response};
use crate::function::Function;

/// What PutFunctionEventInvokeConfig or UpdateFunctionEventInvokeConfig sets: `None` leaves a
/// field as it is (an update) or unset (a put).
#[derive(Debug, Default, Clone)]
pub struct EventInvokePatch {
    pub maximum_retry_attempts: Option<u32>,
    pub maximum_event_age_s: Option<u32>,
    pub on_success: Option<String>,
    pub on_failure: Option<String>,
}

impl Controller {
    /// GetFunctionEventInvokeConfig: 404 for a function without one.
    pub fn event_invoke_config(
        &self,
        name: &str,
        qualifier: Option<&str>,
    ) -> Result<(Function, EventInvokeConfig), ControllerError> {
        let function = self.event_invoke_target(name, qualifier)?;
        match function.config.event_invoke.clone() {
            Some(config) => Ok((function, config)),
            None => Err(ControllerError::NotFound(format!(
                "The function {} doesn't have an EventInvokeConfig",
                self.arn(&function.name)
            ))),
        }
    }

    /// PutFunctionEventInvokeConfig (`replace`) or UpdateFunctionEventInvokeConfig.
    pub fn set_event_invoke_config(
        &self,
        name: &str,
        qualifier: Option<&str>,
        patch: EventInvokePatch,
        replace: bool,
    ) -> Result<(Function, EventInvokeConfig), ControllerError> {
        let target = self.event_invoke_target(name, qualifier)?;
        for destination in [&patch.on_success, &patch.on_failure].into_iter().flatten() {
            self.check_destination(destination)?;
        }
        let function = self.modify(&target.name, |f| {
            let old = if replace {
                None
            } else {
                f.config.event_invoke.clone()
            };
            let config = EventInvokeConfig {
                maximum_retry_attempts: patch
                    .maximum_retry_attempts
                    .or(old.as_ref().and_then(|o| o.maximum_retry_attempts)),
                maximum_event_age_s: patch
                    .maximum_event_age_s
                    .or(old.as_ref().and_then(|o| o.maximum_event_age_s)),
                on_success: patch
                    .on_success
                    .clone()
                    .or(old.as_ref().and_then(|o| o.on_success.clone())),
                on_failure: patch
                    .on_failure
                    .clone()
                    .or(old.as_ref().and_then(|o| o.on_failure.clone())),
                last_modified: Utc::now(),
            };
            if let Some((value, field, constraint)) = config.violation() {
                return Err(ControllerError::Validation(format!(
                    "1 validation error detected: Value '{value}' at '{field}' failed to satisfy constraint: {constraint}"
                )));
            }
            f.config.event_invoke = Some(config);
            Ok(())
        })?;
        let config = function.config.event_invoke.clone().expect("just set");
        Ok((function, config))
    }

    /// DeleteFunctionEventInvokeConfig.
    pub fn delete_event_invoke_config(
        &self,
        name: &str,
        qualifier: Option<&str>,
    ) -> Result<(), ControllerError> {
        let (function, _) = self.event_invoke_config(name, qualifier)?;
        self.modify(&function.name, |f| {
            f.config.event_invoke = None;
            Ok(())
        })?;
        Ok(())
    }

    /// The function an event invoke config call names: kiln has `$LATEST` only.
    fn event_invoke_target(
        &self,
        name: &str,
        qualifier: Option<&str>,
    ) -> Result<Function, ControllerError> {
        let r = self.function_ref(name)?;
        let function = self.entry(&r.name)?.function.clone();
        match r.qualifier.as_deref().or(qualifier) {
            None | Some("$LATEST") => Ok(function),
            Some(other) => Err(ControllerError::NotFound(format!(
                "Function not found: {}:{other}",
                self.arn(&function.name)
            ))),
        }
    }

    /// A destination is a function of this region and account (kiln has no queues, topics or
    /// buses to send records to).
    fn check_destination(&self, arn: &str) -> Result<(), ControllerError> {
        let is_function = arn.starts_with("arn:") && arn.split(':').nth(2) == Some("lambda");
        if !is_function {
            return Err(ControllerError::InvalidParameter(format!(
                "The destination ARN {arn} is not a Lambda function's: kiln sends invocation records to functions only"
            )));
        }
        let r = self.function_ref(arn)?;
        if r.qualifier.as_deref().is_some_and(|q| q != "$LATEST") {
            return Err(ControllerError::InvalidParameter(format!(
                "The destination ARN {arn} names a version or alias: kiln has $LATEST only"
            )));
        }
        Ok(())
    }

    /// Sends the record of an event that ended (`condition`) to its function's destination
    /// for that outcome, if it has one, as an Event invocation of the destination. At least
    /// once: the caller completes the event after this.
    pub(super) fn send_to_destination(
        &self,
        event: &super::registry::QueuedEvent,
        condition: Condition,
        attempts: u32,
        response: Option<Response<'_>>,
    ) {
        let Ok(entry) = self.entry(super::queue::unqualified(&event.function)) else {
            return;
        };
        let Some(config) = &entry.function.config.event_invoke else {
            return;
        };
        let destination = match condition {
            Condition::Success => &config.on_success,
            _ => &config.on_failure,
        };
        let Some(destination) = destination else {
            return;
        };
        let record = event_invoke::record(
            &self.arn(&event.function),
            &event.request_id,
            condition,
            attempts,
            &event.payload,
            response,
        );
        let target = self
            .function_ref(destination)
            .map(|r| r.name)
            .unwrap_or_default();
        let payload = serde_json::to_vec(&record).unwrap_or_default();
        if let Err(e) = self.enqueue_event(&target, &payload) {
            tracing::warn!(function = %event.function, destination = %destination, "the invocation record was not sent: {e}");
        }
    }
}
