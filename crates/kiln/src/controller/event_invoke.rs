//! Put/Get/Update/Delete/ListFunctionEventInvokeConfigs, and the records the queue sends to an
//! event's destination. The configuration is part of the function's stored configuration, so
//! it lives wherever the function does; changing it is not a new revision (nothing to rebuild).

use chrono::Utc;

use super::{Controller, ControllerError};
use crate::function::event_invoke::{self, Condition, EventInvokeConfig, Response};
use crate::function::versions::{self, LATEST};
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
    /// GetFunctionEventInvokeConfig: the config of the function's `$LATEST`, or of the
    /// version or alias the qualifier names, with the qualifier; 404 for one without.
    pub fn event_invoke_config(
        &self,
        name: &str,
        qualifier: Option<&str>,
    ) -> Result<(Function, String, EventInvokeConfig), ControllerError> {
        let (function, qualifier) = self.event_invoke_target(name, qualifier)?;
        match function.event_invoke(Some(&qualifier)).cloned() {
            Some(config) => Ok((function, qualifier, config)),
            None => Err(ControllerError::NotFound(format!(
                "The function {}:{qualifier} doesn't have an EventInvokeConfig",
                self.arn(&function.name)
            ))),
        }
    }

    /// ListFunctionEventInvokeConfigs: `$LATEST`'s config, if it has one, and those of the
    /// function's versions and aliases.
    pub fn event_invoke_configs(
        &self,
        name: &str,
    ) -> Result<(Function, Vec<(String, EventInvokeConfig)>), ControllerError> {
        let function = self.get(name)?;
        let latest = function
            .config
            .event_invoke
            .clone()
            .map(|c| (LATEST.to_string(), c));
        let qualified = function
            .published
            .event_invoke
            .iter()
            .map(|(q, c)| (q.clone(), c.clone()));
        let configs = latest.into_iter().chain(qualified).collect();
        Ok((function, configs))
    }

    /// PutFunctionEventInvokeConfig (`replace`) or UpdateFunctionEventInvokeConfig.
    pub fn set_event_invoke_config(
        &self,
        name: &str,
        qualifier: Option<&str>,
        patch: EventInvokePatch,
        replace: bool,
    ) -> Result<(Function, String, EventInvokeConfig), ControllerError> {
        let (target, qualifier) = self.event_invoke_target(name, qualifier)?;
        for destination in [&patch.on_success, &patch.on_failure].into_iter().flatten() {
            self.check_destination(destination)?;
        }
        let now = Utc::now();
        let function = self.modify(&target.name, |f| {
            let old = if replace {
                None
            } else {
                f.event_invoke(Some(&qualifier)).cloned()
            };
            let config = patched(&patch, old, now);
            if let Some((value, field, constraint)) = config.violation() {
                return Err(ControllerError::Validation(format!(
                    "1 validation error detected: Value '{value}' at '{field}' failed to satisfy constraint: {constraint}"
                )));
            }
            f.set_event_invoke(Some(&qualifier), Some(config));
            Ok(())
        })?;
        let config = function
            .event_invoke(Some(&qualifier))
            .cloned()
            .ok_or_else(|| self.qualifier_gone(&function.name, &qualifier))?;
        Ok((function, qualifier, config))
    }

    /// DeleteFunctionEventInvokeConfig.
    pub fn delete_event_invoke_config(
        &self,
        name: &str,
        qualifier: Option<&str>,
    ) -> Result<(), ControllerError> {
        let (function, qualifier, _) = self.event_invoke_config(name, qualifier)?;
        self.modify(&function.name, |f| {
            f.set_event_invoke(Some(&qualifier), None);
            Ok(())
        })?;
        Ok(())
    }

    /// The function an event invoke config call names, and the qualifier whose config it
    /// is: `$LATEST` for the unqualified function, else a version or alias it has.
    fn event_invoke_target(
        &self,
        name: &str,
        qualifier: Option<&str>,
    ) -> Result<(Function, String), ControllerError> {
        let r = self.function_ref(name)?;
        super::urls::check_same_qualifier(r.qualifier.as_deref(), qualifier)?;
        let function = self.entry(&r.name)?.function.clone();
        let qualifier = match r.qualifier.as_deref().or(qualifier) {
            None | Some(LATEST) => return Ok((function, LATEST.to_string())),
            Some(q) => q.to_string(),
        };
        let exists = match versions::version_number(&qualifier) {
            Some(n) => function.published.version(n).is_some(),
            None => function.published.aliases.contains_key(&qualifier),
        };
        if !exists {
            return Err(self.qualifier_gone(&function.name, &qualifier));
        }
        Ok((function, qualifier))
    }

    pub(super) fn qualifier_gone(&self, name: &str, qualifier: &str) -> ControllerError {
        ControllerError::NotFound(format!(
            "Function not found: {}:{qualifier}",
            self.arn(name)
        ))
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
        let qualifier = super::queue::qualifier(&event.function);
        let Some(config) = entry.function.event_invoke(qualifier) else {
            return;
        };
        let destination = match condition {
            Condition::Success => &config.on_success,
            _ => &config.on_failure,
        };
        let Some(destination) = destination else {
            return;
        };
        let arn = format!(
            "{}:{}",
            self.arn(&entry.function.name),
            qualifier.unwrap_or(LATEST)
        );
        let record = event_invoke::record(
            &arn,
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

/// `old` with what `patch` sets.
fn patched(
    patch: &EventInvokePatch,
    old: Option<EventInvokeConfig>,
    now: chrono::DateTime<Utc>,
) -> EventInvokeConfig {
    let old = old.unwrap_or(EventInvokeConfig {
        maximum_retry_attempts: None,
        maximum_event_age_s: None,
        on_success: None,
        on_failure: None,
        last_modified: now,
    });
    EventInvokeConfig {
        maximum_retry_attempts: patch.maximum_retry_attempts.or(old.maximum_retry_attempts),
        maximum_event_age_s: patch.maximum_event_age_s.or(old.maximum_event_age_s),
        on_success: patch.on_success.clone().or(old.on_success),
        on_failure: patch.on_failure.clone().or(old.on_failure),
        last_modified: now,
    }
}
