//! Delivery of asynchronous (Event) invocations from the durable queue.
//!
//! An event stays in SQLite until it succeeded or failed its last attempt, so a crash at any
//! point re-delivers it (at least once, as on Lambda). Function errors are retried twice with a
//! growing delay; throttles are retried without counting an attempt.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::Utc;

use super::registry::QueuedEvent;
use super::{Controller, ControllerError, ASYNC_ATTEMPTS};
use crate::agent::{InvokeRequest, RouteHints};
use crate::metrics::OutcomeLabels;

pub(super) fn start(controller: Arc<Controller>) {
    let weak = Arc::downgrade(&controller);
    drop(controller);
    tokio::spawn(async move {
        let in_flight: Arc<Mutex<HashSet<i64>>> = Arc::default();
        loop {
            let Some(controller) = weak.upgrade() else {
                return;
            };
            let busy: Vec<i64> = in_flight
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .copied()
                .collect();
            let room = controller
                .config
                .async_concurrency
                .saturating_sub(busy.len());
            let due = if room > 0 {
                let registry = &controller.registry;
                tokio::task::block_in_place(|| registry.due_events(room, &busy)).unwrap_or_default()
            } else {
                Vec::new()
            };
            for event in due {
                in_flight
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(event.id);
                let controller = controller.clone();
                let in_flight = in_flight.clone();
                tokio::spawn(async move {
                    deliver(&controller, &event).await;
                    in_flight
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .remove(&event.id);
                    controller.queue_wakeup.notify_one();
                });
            }
            let wakeup = controller.queue_wakeup.clone();
            drop(controller);
            let _ = tokio::time::timeout(Duration::from_millis(250), wakeup.notified()).await;
        }
    });
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
    let registry = &controller.registry;
    let entry = match controller.entry(&event.function) {
        Ok(entry) => entry,
        Err(_) => {
            // The function was deleted; its events go with it.
            let _ = tokio::task::block_in_place(|| registry.complete_event(event.id));
            count("dropped");
            return;
        }
    };
    let request = InvokeRequest {
        request_id: event.request_id.clone(),
        payload: event.payload.clone().into(),
        trace_id: super::trace_id(),
        client_context: None,
        hints: RouteHints::default(),
    };
    let error = match controller.run(&entry.spec, request).await {
        Ok(outcome) if !outcome.function_error => {
            let _ = tokio::task::block_in_place(|| registry.complete_event(event.id));
            count("succeeded");
            return;
        }
        Ok(outcome) => String::from_utf8_lossy(&outcome.body).into_owned(),
        Err(ControllerError::Throttled { .. }) | Err(ControllerError::ShuttingDown) => {
            let retry_at = Utc::now() + chrono::Duration::seconds(1);
            let _ = tokio::task::block_in_place(|| registry.retry_event(event.id, retry_at, false));
            count("throttled");
            return;
        }
        Err(e) => e.to_string(),
    };
    let attempt = event.attempts + 1;
    if attempt >= ASYNC_ATTEMPTS {
        tracing::warn!(function = %event.function, request_id = %event.request_id, "async invocation failed {attempt} times: {error}");
        let _ = tokio::task::block_in_place(|| registry.fail_event(event, &error));
        count("failed");
    } else {
        let delay = controller.config.async_retry_delay * attempt;
        let retry_at = Utc::now() + chrono::Duration::from_std(delay).unwrap_or_default();
        let _ = tokio::task::block_in_place(|| registry.retry_event(event.id, retry_at, true));
        count("retried");
    }
}
