//! Delivery of asynchronous (Event) invocations from the durable queue.
//!
//! An event stays in the queue (SQLite, or etcd in cluster mode: `registry/events/`) until it
//! succeeded or failed its last attempt, so a crash at any point re-delivers it (at least
//! once, as on Lambda). Function errors are retried twice with a
//! growing delay; throttles are retried without counting an attempt.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::Utc;

use super::registry::{AsyncFailure, PendingEvent, Progress, QueuedEvent, Requeue};
use super::{Controller, ControllerError};
use crate::agent::InvokeRequest;
use crate::function::event_invoke::{Condition, Response, MAX_EVENT_AGE_S};
use crate::function::Function;
use crate::metrics::OutcomeLabels;
use crate::sync::LockExt;

/// Lambda keeps retrying an event it cannot run for lack of concurrency until it is as old as
/// the function allows (six hours by default), backing off exponentially from one second to
/// five minutes.
const MAX_THROTTLE_BACKOFF_S: i64 = 300;

/// The wait after an event's `throttles`-th throttled delivery.
fn throttle_backoff(throttles: u32) -> chrono::TimeDelta {
    chrono::TimeDelta::seconds(1i64 << throttles.min(9))
        .min(chrono::TimeDelta::seconds(MAX_THROTTLE_BACKOFF_S))
}

pub(super) fn start(controller: Arc<Controller>) {
    let weak = Arc::downgrade(&controller);
    drop(controller);
    tokio::spawn(async move {
        // Events being delivered, by id, with their function.
        let in_flight: Arc<Mutex<HashMap<i64, String>>> = Arc::default();
        loop {
            let Some(controller) = weak.upgrade() else {
                return;
            };
            let busy: Vec<(i64, String)> = in_flight
                .locked()
                .iter()
                .map(|(id, function)| (*id, function.clone()))
                .collect();
            let room = controller
                .config
                .async_concurrency
                .saturating_sub(busy.len());
            let due = if room > 0 {
                let registry = &controller.events;
                let cap = |function: &str| controller.async_cap(function);
                tokio::task::block_in_place(|| registry.due_events_capped(room, &busy, &cap))
                    .unwrap_or_default()
            } else {
                Vec::new()
            };
            for event in due {
                in_flight.locked().insert(event.id, event.function.clone());
                let controller = controller.clone();
                let in_flight = in_flight.clone();
                tokio::spawn(async move {
                    deliver(&controller, &event).await;
                    in_flight.locked().remove(&event.id);
                    controller.queue_wakeup.notify_one();
                });
            }
            let wakeup = controller.queue_wakeup.clone();
            drop(controller);
            let _ = tokio::time::timeout(Duration::from_millis(250), wakeup.notified()).await;
        }
    });
}

impl Controller {
    /// How many of a function's events may be delivered at once: more than it can run would
    /// only wait inside the agent, holding delivery slots the other functions need.
    /// A sequence's events, as many as its tightest stage allows.
    fn async_cap(&self, target: &str) -> usize {
        let cap = |function: &str| {
            self.table().get(function).map(|e| {
                e.function
                    .reserved_concurrency
                    .unwrap_or(self.config.node_max_instances)
                    .max(1) as usize
            })
        };
        if let Some(cap) = cap(target) {
            return cap;
        }
        self.sequence(target)
            .and_then(|s| self.stages_of(&s.name, &s.functions).ok())
            .and_then(|stages| stages.iter().filter_map(|f| cap(f)).min())
            .unwrap_or(1)
    }

    /// The queue as kiln shows it: its depth, the oldest queued events and the most recent
    /// failures, at most `limit` of each.
    pub fn async_events(&self, limit: usize) -> Result<AsyncEvents, ControllerError> {
        Ok(AsyncEvents {
            depth: self.events.queue_depth()?,
            pending: self.events.pending_events(limit)?,
            failures: self.events.failures(limit)?,
        })
    }

    /// Queues a failed event again, its attempts reset; false when there is no such failure.
    pub fn retry_async_failure(&self, request_id: &str) -> Result<bool, ControllerError> {
        let requeued = self.events.requeue_failure(request_id)?;
        if requeued {
            self.queue_wakeup.notify_one();
        }
        Ok(requeued)
    }

    /// Forgets a failed event; false when there is no such failure.
    pub fn delete_async_failure(&self, request_id: &str) -> Result<bool, ControllerError> {
        Ok(self.events.delete_failure(request_id)?)
    }
}

/// The async queue's contents (`/kiln/v1/async`).
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct AsyncEvents {
    pub depth: u64,
    pub pending: Vec<PendingEvent>,
    pub failures: Vec<AsyncFailure>,
}

async fn deliver(controller: &Controller, event: &QueuedEvent) {
    let count = |outcome: &str| {
        controller
            .metrics
            .async_events
            .get_or_create(&OutcomeLabels {
                outcome: outcome.into(),
            })
            .inc();
    };
    let registry = &controller.events;
    // The function's retries and age limit (PutFunctionEventInvokeConfig).
    let (max_attempts, max_age) = {
        let entry = controller.entry(unqualified(&event.function)).ok();
        limits(
            entry.as_ref().map(|e| &e.function),
            qualifier(&event.function),
        )
    };
    if Utc::now() - event.enqueued_at > max_age {
        let error = format!(
            "event expired: older than {} seconds",
            max_age.num_seconds()
        );
        tracing::warn!(function = %event.function, request_id = %event.request_id, "{error}");
        if let Some(progress) = &event.resume {
            controller.end_run(&progress.run);
        }
        controller.send_to_destination(event, Condition::EventAgeExceeded, event.attempts, None);
        let _ = tokio::task::block_in_place(|| registry.fail_event(event, &error));
        count("expired");
        return;
    }
    // Where a sequence's run stopped after its first stage, if it did.
    let mut stopped = None;
    // The version that ran, for the record: an alias's event picks one here.
    let mut executed = crate::function::versions::latest();
    let ran = if let Ok((entry, version)) = controller.invocation_target(&event.function) {
        executed = version;
        let request = InvokeRequest {
            request_id: event.request_id.clone(),
            payload: event.payload.clone().into(),
            trace_id: super::trace_id(),
            client_context: None,
            // An async event keeps only its payload: a `json:` session hint still applies; an
            // event whose session id is unusable runs sessionless.
            hints: super::route_hints(&entry.spec, Default::default(), &event.payload)
                .unwrap_or_default(),
            tags: Default::default(),
        };
        controller.run(&entry, request).await
    } else if let Some(sequence) = controller.sequence(&event.function) {
        // At least once, as a function's event: a retry runs again the stage that stopped,
        // or the whole sequence.
        let (ran, at) = controller.deliver_sequence(&sequence, event).await;
        stopped = at;
        ran.map(|ran| ran.outcome)
    } else {
        // The function (or sequence) was deleted; its events go with it.
        if let Some(progress) = &event.resume {
            controller.end_run(&progress.run);
        }
        let _ = tokio::task::block_in_place(|| registry.complete_event(event.id));
        count("dropped");
        return;
    };
    // The event goes back to the queue: a stopped run waits for the retry if it is due soon
    // enough, and resumes there; otherwise the retry starts over.
    let requeue = |retry_at: chrono::DateTime<Utc>, why: Requeue, stopped: Option<&Progress>| {
        let resume = match stopped {
            Some(p) if registry.resumes() => controller.keep_for_retry(p, retry_at),
            Some(p) => {
                controller.end_run(&p.run);
                None
            }
            None => None,
        };
        let _ = tokio::task::block_in_place(|| {
            registry.retry_event(event.id, retry_at, why, resume.as_ref())
        });
    };
    // The event is done with: a stopped run's intermediates go.
    let end = || {
        if let Some(progress) = &stopped {
            controller.end_run(&progress.run);
        }
    };
    let attempt = event.attempts + 1;
    let (error, function_error) = match ran {
        Ok(outcome) if !outcome.function_error => {
            let response = Response {
                body: &outcome.body,
                function_error: false,
                executed_version: &executed,
            };
            // The record first, then the event's completion: at least once, never lost.
            controller.send_to_destination(event, Condition::Success, attempt, Some(response));
            let _ = tokio::task::block_in_place(|| registry.complete_event(event.id));
            count("succeeded");
            return;
        }
        Ok(outcome) => (String::from_utf8_lossy(&outcome.body).into_owned(), true),
        Err(ControllerError::Throttled { .. }) => {
            let now = Utc::now();
            if now - event.enqueued_at > max_age {
                let error = format!(
                    "event expired: throttled for more than {} seconds",
                    max_age.num_seconds()
                );
                tracing::warn!(function = %event.function, request_id = %event.request_id, "{error}");
                end();
                controller.send_to_destination(
                    event,
                    Condition::EventAgeExceeded,
                    event.attempts,
                    None,
                );
                let _ = tokio::task::block_in_place(|| registry.fail_event(event, &error));
                count("expired");
                return;
            }
            requeue(
                now + throttle_backoff(event.throttles),
                Requeue::Throttled,
                stopped.as_ref(),
            );
            count("throttled");
            return;
        }
        Err(ControllerError::ShuttingDown) => {
            // Memory does not outlive kiln: the retry starts over.
            end();
            requeue(
                Utc::now() + chrono::Duration::seconds(1),
                Requeue::Interrupted,
                None,
            );
            return;
        }
        Err(e) => (e.to_string(), false),
    };
    if attempt >= max_attempts {
        tracing::warn!(function = %event.function, request_id = %event.request_id, "async invocation failed {attempt} times: {error}");
        end();
        let response = Response {
            body: error.as_bytes(),
            function_error,
            executed_version: &executed,
        };
        controller.send_to_destination(event, Condition::RetriesExhausted, attempt, Some(response));
        let _ = tokio::task::block_in_place(|| registry.fail_event(event, &error));
        count("failed");
    } else {
        let delay = controller.config.async_retry_delay * attempt;
        requeue(
            Utc::now() + chrono::Duration::from_std(delay).unwrap_or_default(),
            Requeue::Failed,
            stopped.as_ref(),
        );
        count("retried");
    }
}

/// The attempts and age limit of events sent to `function`'s `qualifier` (Lambda's defaults
/// without a configuration).
fn limits(function: Option<&Function>, qualifier: Option<&str>) -> (u32, chrono::TimeDelta) {
    match function.and_then(|f| f.event_invoke(qualifier)) {
        Some(config) => (config.attempts(), config.maximum_event_age()),
        None => (
            super::ASYNC_ATTEMPTS,
            chrono::TimeDelta::seconds(i64::from(MAX_EVENT_AGE_S)),
        ),
    }
}

/// The version or alias an event names, if it names one.
pub(super) fn qualifier(target: &str) -> Option<&str> {
    target.split_once(':').map(|(_, q)| q)
}

/// An event's function without the version or alias it names, if it names one.
pub(super) fn unqualified(target: &str) -> &str {
    target.split_once(':').map_or(target, |(name, _)| name)
}

impl Controller {
    /// The time each schedule last fired for (the schedules' catch-up at the start).
    pub fn schedule_firings(
        &self,
    ) -> Result<std::collections::HashMap<String, chrono::DateTime<chrono::Utc>>, ControllerError>
    {
        let events = &self.events;
        Ok(tokio::task::block_in_place(|| events.schedule_firings())?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttle_backoff_doubles_up_to_five_minutes() {
        let secs: Vec<i64> = (0..12).map(|n| throttle_backoff(n).num_seconds()).collect();
        assert_eq!(secs, vec![1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300]);
        assert_eq!(throttle_backoff(u32::MAX).num_seconds(), 300);
    }
}
